//! The statement filter: the one place where statements that `SQLContext`
//! executes itself (DDL, MERGE, UPDATE, ...) are checked before they run.
//!
//! Statements DataFusion plans (SELECT, INSERT) are checked during planning
//! instead; this filter only sees what would otherwise bypass that planning.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{visit_relations, ObjectName, ObjectNamePart, Statement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use paimon::catalog::Identifier;

use crate::catalog::LakeStreamCatalog;
use crate::error::{Error, Result};
use crate::name;

/// Checks statements against the lake-stream contract before `SQLContext` runs them.
pub(crate) struct StatementFilter<'a> {
    pub(crate) session: &'a SessionContext,
    pub(crate) catalogs: &'a HashMap<String, Arc<LakeStreamCatalog>>,
}

impl StatementFilter<'_> {
    /// Returns an error for a statement the contract rejects; `Ok` lets it run.
    pub(crate) async fn check(&self, sql: &str) -> Result<()> {
        if let Some(name) = create_or_replace_target(sql) {
            self.check_replace(&name).await?;
        }
        // Text this parser cannot read goes on unchecked: `SQLContext` rewrites
        // some syntax before parsing, and reports what it cannot read itself.
        if let Ok(statements) = Parser::parse_sql(&GenericDialect {}, sql) {
            for statement in &statements {
                check_relation_names(statement)?;
            }
        }
        Ok(())
    }

    /// `CREATE OR REPLACE TABLE t` over an existing lake-stream table.
    /// paimon-datafusion ignores `OR REPLACE`, so nothing below this catches it.
    async fn check_replace(&self, name: &ObjectName) -> Result<()> {
        let Some((catalog, identifier)) = self.resolve_ddl_name(name) else {
            return Ok(());
        };
        if catalog.lakestream_table(&identifier).await?.is_some() {
            return Err(Error::ReplaceLakeStreamTable {
                table: identifier.full_name(),
            });
        }
        Ok(())
    }

    /// Resolves a table name the way `SQLContext` resolves DDL targets (parts
    /// taken as written), against this context's lake-stream catalogs.
    fn resolve_ddl_name(&self, name: &ObjectName) -> Option<(&Arc<LakeStreamCatalog>, Identifier)> {
        let parts: Vec<&str> = name
            .0
            .iter()
            .map(|part| match part {
                ObjectNamePart::Identifier(ident) => Some(ident.value.as_str()),
                ObjectNamePart::Function(_) => None,
            })
            .collect::<Option<_>>()?;
        let state = self.session.state();
        let defaults = &state.config_options().catalog;
        let (catalog, database, table) = match parts.as_slice() {
            [catalog, database, table] => (*catalog, *database, *table),
            [database, table] => (defaults.default_catalog.as_str(), *database, *table),
            [table] => (
                defaults.default_catalog.as_str(),
                defaults.default_schema.as_str(),
                *table,
            ),
            _ => return None,
        };
        let catalog = self.catalogs.get(catalog)?;
        Some((catalog, Identifier::new(database, table)))
    }
}

/// Refuses the `$rt` names the store cannot serve (`t$rt$rt`,
/// `t$branch_b1$rt`, ...) before DataFusion looks them up, so the user gets
/// the contract's message rather than Paimon's "invalid object name".
fn check_relation_names(statement: &Statement) -> Result<()> {
    let flow = visit_relations(statement, |relation| {
        let object = relation.0.last().and_then(ObjectNamePart::as_ident);
        match object.map(|ident| name::parse(&ident.value)) {
            Some(Err(e)) => ControlFlow::Break(e),
            _ => ControlFlow::Continue(()),
        }
    });
    match flow {
        ControlFlow::Break(e) => Err(e.into()),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The table named by `CREATE OR REPLACE [EXTERNAL] TABLE [IF NOT EXISTS] name ...`.
///
/// Only the statement's head is parsed: the rest may use syntax that
/// `SQLContext` rewrites before parsing (`PARTITIONED BY (a)`).
fn create_or_replace_target(sql: &str) -> Option<ObjectName> {
    let dialect = GenericDialect {};
    let mut parser = Parser::new(&dialect).try_with_sql(sql).ok()?;
    if !parser.parse_keywords(&[Keyword::CREATE, Keyword::OR, Keyword::REPLACE]) {
        return None;
    }
    if parser
        .parse_one_of_keywords(&[Keyword::TEMPORARY, Keyword::TEMP])
        .is_some()
    {
        return None;
    }
    let _ = parser.parse_keyword(Keyword::EXTERNAL);
    if !parser.parse_keyword(Keyword::TABLE) {
        return None;
    }
    let _ = parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    parser.parse_object_name(false).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(sql: &str) -> Option<String> {
        create_or_replace_target(sql).map(|n| n.to_string())
    }

    fn relation_check(sql: &str) -> Result<()> {
        let statements = Parser::parse_sql(&GenericDialect {}, sql).unwrap();
        check_relation_names(&statements[0])
    }

    #[test]
    fn bad_rt_names_are_refused_wherever_they_appear() {
        for sql in [
            "SELECT * FROM t$rt$rt",
            "SELECT * FROM db.t$branch_b1$rt",
            "SELECT * FROM a JOIN \"t$rt$snapshots\" ON true",
            "SELECT * FROM (SELECT * FROM \"$rt\") s",
            "INSERT INTO t$rt$rt SELECT 1",
            "WITH c AS (SELECT * FROM t$snapshots$rt) SELECT * FROM c",
        ] {
            assert!(relation_check(sql).is_err(), "{sql}");
        }
        for sql in [
            "SELECT * FROM t",
            "SELECT * FROM t$rt",
            "SELECT * FROM t$snapshots JOIN t$branch_b1 ON true",
        ] {
            relation_check(sql).unwrap();
        }
    }

    #[test]
    fn finds_the_replace_target() {
        assert_eq!(
            target("CREATE OR REPLACE TABLE t (a INT)").as_deref(),
            Some("t")
        );
        assert_eq!(
            target("create or replace table db.\"T$x\" (a INT) PARTITIONED BY (a)").as_deref(),
            Some("db.\"T$x\"")
        );
        assert_eq!(
            target("  CREATE OR REPLACE TABLE IF NOT EXISTS c.d.t AS SELECT 1").as_deref(),
            Some("c.d.t")
        );
        assert_eq!(target("CREATE TABLE t (a INT)"), None);
        assert_eq!(target("CREATE OR REPLACE VIEW v AS SELECT 1"), None);
        assert_eq!(target("CREATE OR REPLACE TEMPORARY TABLE t (a INT)"), None);
        assert_eq!(target("SELECT 'CREATE OR REPLACE TABLE t'"), None);
        assert_eq!(target("CREATE OR REPLACE TABLE"), None);
        assert_eq!(target("'unterminated"), None);
    }
}
