//! The statement filter: the one place where a statement is checked before
//! `SQLContext` sees it. `SQLContext` executes some statements itself (DDL,
//! DELETE, UPDATE, MERGE, TRUNCATE, INSERT OVERWRITE ... PARTITION) and writes
//! Paimon directly; on a lake-stream table those either go to DataFusion's
//! planner, where write routing sends them to the store, or are refused.
//!
//! Reads and plain INSERTs need nothing here beyond the name checks: they are
//! routed during planning (relation planner, write routing).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, visit_relations, AlterTableOperation, DescribeAlias, Expr, FromTable,
    Function, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, ObjectNamePart,
    Reset, ResetStatement, Set, Statement, TableFactor, TableObject, Visit, Visitor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, Whitespace};
use paimon::catalog::Identifier;

use super::history;
use super::parsed::{unquote, Parsed};
use crate::catalog::LakeStreamCatalog;
use crate::classification::{Enforcer, Handling, Kind};
use crate::error::{Error, Result};
use crate::name::{self, RelationName};
use crate::options;
use crate::table::LakeStreamSession;

/// Who plans a statement that passed the filter, and what it is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `SQLContext`, as without this crate, with the statement's text: its
    /// API takes text, which it parses itself.
    SqlContext,
    /// DataFusion's own planner, with the statement as parsed here, so
    /// write routing sees it and nothing parses it again.
    DataFusion,
    /// DataFusion's planner, with the statement's text: DataFusion's own
    /// syntax (`CREATE EXTERNAL TABLE`), which only its parser reads.
    DataFusionText,
    /// DataFusion's planner, with this statement instead (a procedure call
    /// becomes a query of its table function; `DESCRIBE t$rt`, `DESCRIBE t`).
    Rewritten(Box<Statement>),
    /// `SQLContext`, with this text instead of the statement's: a statement
    /// rewritten here that travels in time, which only `SQLContext` runs.
    SqlContextText(String),
}

/// What the filter decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) route: Route,
    /// A Paimon dynamic option the statement sets (`Some`) or resets (`None`),
    /// to mirror once it has run.
    pub(crate) dynamic_option: Option<(String, Option<String>)>,
    /// `RESET ALL`: forget every mirrored option.
    pub(crate) reset_all: bool,
}

impl Checked {
    fn route(route: Route) -> Self {
        Self {
            route,
            dynamic_option: None,
            reset_all: false,
        }
    }
}

/// Checks statements against the lake-stream contract before they run.
pub(crate) struct StatementFilter<'a> {
    pub(crate) session: &'a SessionContext,
    pub(crate) state: &'a Arc<LakeStreamSession>,
}

impl StatementFilter<'_> {
    /// Refuses what the contract rejects, and says who plans the rest.
    pub(crate) async fn check(&self, parsed: &Parsed<'_>) -> Result<Checked> {
        history::check_rewrite(parsed)?;
        history::check_text(parsed)?;
        check_hints(parsed)?;
        if let Some(name) = parsed.create_or_replace_target() {
            self.check_replace(&name).await?;
        }
        // SQLContext refuses external tables (and its parser does not read
        // `STORED AS PAIMON`); DataFusion's planner has the PAIMON table
        // factory: connector mode.
        if parsed.is_create_external() {
            return Ok(Checked::route(Route::DataFusionText));
        }
        // Text this parser cannot read goes to `SQLContext` unchanged: it
        // rewrites some syntax before parsing and reports what it cannot read.
        let Some(statement) = parsed.statement() else {
            return Ok(Checked::route(Route::SqlContext));
        };
        check_relation_names(statement)?;
        let mut checked = self.check_statement(statement, parsed).await?;
        // Only `SQLContext` runs a statement with time-travel clauses: it
        // swaps each for its temporary table, then hands DataFusion's
        // planner (and so write routing) the text.
        if parsed.has_travelled_names() {
            checked.route = match checked.route {
                Route::DataFusion => Route::SqlContext,
                Route::Rewritten(statement) => {
                    Route::SqlContextText(parsed.text_for_sqlcontext(&statement))
                }
                other => other,
            };
        }
        Ok(checked)
    }

    /// Decides by the statement's [`Kind`]: its row of the classification
    /// says whether the filter routes it, refuses it on a lake-stream table,
    /// or leaves it to the layer that enforces its rule.
    async fn check_statement(&self, statement: &Statement, parsed: &Parsed<'_>) -> Result<Checked> {
        refuse_travelled_target(statement, parsed)?;
        let kind = Kind::of(statement);
        let class = kind.class();
        if class.handling == Handling::Refused && class.enforcer == Enforcer::Filter {
            if let Some((operation, identifier)) =
                self.refused_target(kind, statement, parsed).await?
            {
                return Err(Error::WriteNotSupported {
                    operation,
                    table: identifier.full_name(),
                    reason: class.rule.to_string(),
                });
            }
            return Ok(Checked::route(Route::SqlContext));
        }
        match (kind, statement) {
            (
                Kind::Wrapper,
                Statement::Explain {
                    statement: inner, ..
                },
            ) => {
                let checked = Box::pin(self.check_statement(inner, parsed)).await?;
                // `EXPLAIN [ANALYZE] CALL`: the plan of the query the call
                // becomes, which runs the procedure only when executed
                // (`ANALYZE`); `SQLContext` cannot explain a `CALL`.
                match (inner.as_ref(), checked.route) {
                    (Statement::Call(_), Route::Rewritten(query)) => {
                        let mut explain = statement.clone();
                        if let Statement::Explain { statement, .. } = &mut explain {
                            *statement = query;
                        }
                        Ok(Checked::route(Route::Rewritten(Box::new(explain))))
                    }
                    _ => Ok(Checked::route(Route::SqlContext)),
                }
            }
            (Kind::Wrapper, Statement::Prepare { statement, .. }) => {
                Box::pin(self.check_statement(statement, parsed)).await?;
                Ok(Checked::route(Route::SqlContext))
            }
            // `t$rt` has `t`'s columns; DataFusion's DESCRIBE looks names up
            // directly, where `t$rt` is not a table.
            (Kind::Read, outer @ Statement::ExplainTable { table_name, .. }) => Ok(Checked::route(
                match name::parse(&object_part(table_name))? {
                    RelationName::Realtime { table } => {
                        let mut base = table_name.clone();
                        if let Some(last) = base.0.last_mut() {
                            let quote_style = last.as_ident().and_then(|i| i.quote_style);
                            *last = ObjectNamePart::Identifier(Ident {
                                value: table.to_string(),
                                quote_style,
                                span: Span::empty(),
                            });
                        }
                        let mut describe = outer.clone();
                        if let Statement::ExplainTable {
                            table_name,
                            describe_alias,
                            ..
                        } = &mut describe
                        {
                            *table_name = base;
                            // `EXPLAIN t` is DESCRIBE; DataFusion plans the
                            // DESCRIBE spelling only.
                            *describe_alias = DescribeAlias::Describe;
                        }
                        Route::Rewritten(Box::new(describe))
                    }
                    RelationName::Paimon(_) => Route::SqlContext,
                },
            )),
            (_, Statement::Insert(insert)) => {
                if let TableObject::TableName(name) = &insert.table {
                    refuse_realtime_target(name)?;
                    self.check_insert_spelling(name).await?;
                }
                // `SQLContext` hands an INSERT to DataFusion as it is,
                // unless it overwrites partitions or travels in time:
                // DataFusion gets it parsed instead, with the same result.
                let overwrites_partitions =
                    insert.overwrite && insert.partitioned.as_ref().is_some_and(|p| !p.is_empty());
                Ok(Checked::route(
                    if overwrites_partitions || parsed.travels_in_time() {
                        Route::SqlContext
                    } else {
                        Route::DataFusion
                    },
                ))
            }
            (_, Statement::Delete(delete)) => {
                let tables = match &delete.from {
                    FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => {
                        tables
                    }
                };
                let target = tables.first().and_then(|t| table_factor_name(&t.relation));
                let checked = self.route_dml("DELETE", target).await?;
                if checked.route == Route::DataFusion {
                    if let Some(unaliased) = unaliased_delete(statement, target)? {
                        return Ok(Checked::route(Route::Rewritten(Box::new(unaliased))));
                    }
                }
                Ok(checked)
            }
            (_, Statement::Update(update)) => {
                self.route_dml("UPDATE", table_factor_name(&update.table.relation))
                    .await
            }
            (_, Statement::Truncate(truncate)) => {
                for target in &truncate.table_names {
                    let checked = self.route_dml("TRUNCATE", Some(&target.name)).await?;
                    if checked.route == Route::DataFusion {
                        return Ok(checked);
                    }
                }
                self.route_dml("TRUNCATE", None).await
            }
            // Of the tag procedures, `create_tag` is this crate's (see
            // `crate::maintenance::tags`); the others are paimon's.
            (Kind::StoreProcedure | Kind::Maintenance | Kind::Tags, Statement::Call(function)) => {
                let state = self.session.state();
                let defaults = &state.config_options().catalog;
                Ok(Checked::route(
                    match crate::procedure::call_query(function, &defaults.default_schema)? {
                        Some(query) => Route::Rewritten(Box::new(query)),
                        None => Route::SqlContext,
                    },
                ))
            }
            (
                Kind::Session,
                Statement::Set(Set::SingleAssignment {
                    variable, values, ..
                }),
            ) => check_set(
                &variable.to_string(),
                values.first().map(ToString::to_string),
            ),
            (Kind::Session, Statement::Reset(ResetStatement { reset })) => Ok(match reset {
                Reset::ConfigurationParameter(name) => {
                    let key = unquote(&name.to_string());
                    // DataFusion resets its own settings only: a read
                    // setting of ours is set back to its default instead.
                    if let Some(default) = crate::table::config::default_of(&key) {
                        return reset_read_setting(&key, &default);
                    }
                    let paimon_key = options::strip_prefix_ignore_ascii_case(&key, "paimon.");
                    Checked {
                        route: Route::SqlContext,
                        dynamic_option: paimon_key.map(|k| (k.to_string(), None)),
                        reset_all: false,
                    }
                }
                Reset::ALL => Checked {
                    route: Route::SqlContext,
                    dynamic_option: None,
                    reset_all: true,
                },
            }),
            // Reads, what the catalog decorator or the planner checks, and
            // what is allowed.
            _ => Ok(Checked::route(Route::SqlContext)),
        }
    }

    /// For a kind the filter refuses: the operation, and the lake-stream
    /// table the statement would act on, if it acts on one.
    async fn refused_target(
        &self,
        kind: Kind,
        statement: &Statement,
        parsed: &Parsed<'_>,
    ) -> Result<Option<(String, Identifier)>> {
        let (operation, name) = match statement {
            Statement::Insert(insert) => match &insert.table {
                TableObject::TableName(name) => {
                    ("INSERT OVERWRITE ... PARTITION".to_string(), name)
                }
                _ => return Ok(None),
            },
            Statement::Merge(merge) => match table_factor_name(&merge.table) {
                Some(name) => ("MERGE INTO".to_string(), name),
                None => return Ok(None),
            },
            Statement::AlterTable(alter) => {
                let operation = alter
                    .operations
                    .iter()
                    .find(|operation| Kind::of_alter(operation) == kind)
                    .map_or_else(String::new, operation_name);
                (format!("ALTER TABLE ... {operation}"), &alter.name)
            }
            Statement::Call(function) => return self.procedure_target(function).await,
            // Checked before parsing (`check_replace`), with its own error.
            Statement::CreateTable(_) => return Ok(None),
            _ => {
                let operation = statement
                    .to_string()
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let identifier = self.any_lakestream_name(parsed).await?;
                return Ok(identifier.map(|identifier| (operation, identifier)));
            }
        };
        refuse_realtime_target(name)?;
        Ok(self
            .lakestream_target(name)
            .await?
            .map(|identifier| (operation, identifier)))
    }

    /// DELETE, UPDATE and TRUNCATE of a lake-stream table go to DataFusion's
    /// planner, whose write routing sends them to the store (or refuses
    /// them); so do those of tables outside the Paimon catalogs (external
    /// tables), which `SQLContext` does not know.
    ///
    /// DataFusion's planner lower-cases unquoted ASCII letters; `SQLContext`
    /// looks names up as written. A name whose written form is a lake-stream
    /// table that DataFusion's planner would not find is refused: routed to
    /// `SQLContext` it would write Paimon directly.
    async fn route_dml(&self, operation: &str, target: Option<&ObjectName>) -> Result<Checked> {
        let Some(name) = target else {
            return Ok(Checked::route(Route::SqlContext));
        };
        refuse_realtime_target(name)?;
        let targets = self.lakestream_targets(name).await?;
        let route = match targets {
            LakeStreamTargets {
                normalized: Some(_),
                ..
            } => Route::DataFusion,
            LakeStreamTargets {
                normalized: None,
                as_written: Some((catalog, identifier)),
            } => return Err(spelling_refused(operation, name, &catalog, &identifier)),
            LakeStreamTargets { .. } if self.resolve(name, true).is_none() => Route::DataFusion,
            LakeStreamTargets { .. } => Route::SqlContext,
        };
        Ok(Checked::route(route))
    }

    /// An INSERT's target read both ways, as DELETE's and TRUNCATE's are
    /// ([`Self::route_dml`]): where the two readings differ and only the name
    /// as written is a lake-stream table, the write would go to another
    /// table than the one written; refused, naming the spelling to use.
    async fn check_insert_spelling(&self, name: &ObjectName) -> Result<()> {
        let reading = |normalize| {
            self.resolve(name, normalize)
                .map(|(catalog, identifier)| (catalog.name().to_string(), identifier.full_name()))
        };
        if reading(true) == reading(false) {
            return Ok(());
        }
        match self.lakestream_targets(name).await? {
            LakeStreamTargets {
                normalized: None,
                as_written: Some((catalog, identifier)),
            } => Err(spelling_refused("INSERT", name, &catalog, &identifier)),
            _ => Ok(()),
        }
    }

    /// The procedure's name and the lake-stream table its `table => 'db.t'`
    /// argument names, if it names one. Paimon's procedures split that
    /// argument at its dots and take the parts as written; the table is in
    /// the catalog the procedure's name gives, or the current one.
    async fn procedure_target(&self, function: &Function) -> Result<Option<(String, Identifier)>> {
        let parts: Vec<&str> = function
            .name
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.as_str()))
            .collect();
        let (catalog, procedure) = match parts.as_slice() {
            [catalog, _, procedure] => (Some(*catalog), *procedure),
            [_, procedure] | [procedure] => (None, *procedure),
            _ => return Ok(None),
        };
        let Some(table) = named_argument(function, "table") else {
            return Ok(None);
        };
        let state = self.session.state();
        let default_catalog = state.config_options().catalog.default_catalog.clone();
        let catalog = catalog.unwrap_or(&default_catalog);
        let identifier = match table.split('.').collect::<Vec<_>>().as_slice() {
            [database, object] | [_, database, object] => Identifier::new(*database, *object),
            _ => return Ok(None),
        };
        let Some(catalog) = self.state.catalog(catalog) else {
            return Ok(None);
        };
        if catalog.lakestream_table(&identifier).await?.is_some() {
            return Ok(Some((format!("CALL {procedure}"), identifier)));
        }
        Ok(None)
    }

    /// The first lake-stream table that any name in the statement names,
    /// read either way: for statements the classification does not know,
    /// which may name a table anywhere.
    async fn any_lakestream_name(&self, parsed: &Parsed<'_>) -> Result<Option<Identifier>> {
        for name in object_names(parsed.significant()) {
            if let Some(identifier) = self.lakestream_target(&name).await? {
                return Ok(Some(identifier));
            }
        }
        Ok(None)
    }

    /// The lake-stream table `name` names, read either way (see
    /// [`Self::lakestream_targets`]): for statements `SQLContext` executes
    /// itself, refused if either reading is a lake-stream table.
    async fn lakestream_target(&self, name: &ObjectName) -> Result<Option<Identifier>> {
        let targets = self.lakestream_targets(name).await?;
        Ok(targets.as_written.or(targets.normalized).map(|(_, i)| i))
    }

    /// The lake-stream tables `name` names as DataFusion's planner reads it
    /// (unquoted parts lower-cased, ASCII letters only) and as `SQLContext`
    /// reads it (as written), catalog part included.
    async fn lakestream_targets(&self, name: &ObjectName) -> Result<LakeStreamTargets> {
        let mut targets = LakeStreamTargets::default();
        for (normalize, slot) in [
            (true, &mut targets.normalized),
            (false, &mut targets.as_written),
        ] {
            if let Some((catalog, identifier)) = self.resolve(name, normalize) {
                if catalog.lakestream_table(&identifier).await?.is_some() {
                    *slot = Some((catalog.name().to_string(), identifier));
                }
            }
        }
        Ok(targets)
    }

    /// `CREATE OR REPLACE TABLE t` over an existing lake-stream table.
    /// paimon-datafusion ignores `OR REPLACE`, so nothing below this catches it.
    async fn check_replace(&self, name: &ObjectName) -> Result<()> {
        // DDL targets are taken as written, as `SQLContext` takes them.
        let Some((catalog, identifier)) = self.resolve(name, false) else {
            return Ok(());
        };
        if catalog.lakestream_table(&identifier).await?.is_some() {
            return Err(Error::ReplaceLakeStreamTable {
                table: identifier.full_name(),
            });
        }
        Ok(())
    }

    /// Resolves a table name against this context's lake-stream catalogs.
    /// `normalize` lower-cases unquoted parts, as DataFusion's planner does:
    /// ASCII letters only, so `ÉVENTS` is the table `Évents`.
    fn resolve(
        &self,
        name: &ObjectName,
        normalize: bool,
    ) -> Option<(Arc<LakeStreamCatalog>, Identifier)> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|part| match part {
                ObjectNamePart::Identifier(ident) if normalize && ident.quote_style.is_none() => {
                    Some(ident.value.to_ascii_lowercase())
                }
                ObjectNamePart::Identifier(ident) => Some(ident.value.clone()),
                ObjectNamePart::Function(_) => None,
            })
            .collect::<Option<_>>()?;
        let reference = match parts.as_slice() {
            [catalog, schema, table] => datafusion::common::TableReference::full(
                catalog.as_str(),
                schema.as_str(),
                table.as_str(),
            ),
            [schema, table] => {
                datafusion::common::TableReference::partial(schema.as_str(), table.as_str())
            }
            [table] => datafusion::common::TableReference::bare(table.as_str()),
            _ => return None,
        };
        let state = self.session.state();
        self.state.resolve(&reference, state.config_options())
    }
}

/// The text of the named argument `name => '...'` of a procedure call.
fn named_argument(function: &Function, name: &str) -> Option<String> {
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    list.args.iter().find_map(|arg| match arg {
        FunctionArg::Named {
            name: arg_name,
            arg: FunctionArgExpr::Expr(expr),
            ..
        } if arg_name.value.eq_ignore_ascii_case(name) => Some(unquote(&expr.to_string())),
        _ => None,
    })
}

/// The name of an `ALTER TABLE` operation, for errors.
fn operation_name(operation: &AlterTableOperation) -> String {
    match operation {
        AlterTableOperation::DropPartitions { .. } => "DROP PARTITION",
        AlterTableOperation::AddPartitions { .. } => "ADD PARTITION",
        AlterTableOperation::RenamePartitions { .. } => "PARTITION ... RENAME TO",
        AlterTableOperation::AttachPartition { .. } => "ATTACH PARTITION",
        AlterTableOperation::DetachPartition { .. } => "DETACH PARTITION",
        AlterTableOperation::FreezePartition { .. } => "FREEZE PARTITION",
        AlterTableOperation::UnfreezePartition { .. } => "UNFREEZE PARTITION",
        other => return other.to_string(),
    }
    .to_string()
}

/// The lake-stream tables a name could name (see
/// [`StatementFilter::lakestream_targets`]).
#[derive(Debug, Default)]
struct LakeStreamTargets {
    /// The catalog's name and the table, as DataFusion's planner reads the name.
    normalized: Option<(String, Identifier)>,
    /// The same, as `SQLContext` reads it.
    as_written: Option<(String, Identifier)>,
}

/// A write whose target name, as written, is lake-stream table `identifier`
/// but which DataFusion's planner reads as another table.
fn spelling_refused(
    operation: &str,
    name: &ObjectName,
    catalog: &str,
    identifier: &Identifier,
) -> Error {
    let stored = match name.0.len() {
        3 => name::sql_name(&[catalog, identifier.database(), identifier.object()]),
        _ => name::sql_name(&[identifier.database(), identifier.object()]),
    };
    Error::WriteNotSupported {
        operation: operation.to_string(),
        table: identifier.full_name(),
        reason: format!(
            "the name {name} is read as that table by SQLContext, which would write Paimon \
             directly, but as another table by DataFusion's planner, which lower-cases \
             unquoted names and routes writes to the store. Quote the name as it is stored: \
             {stored}"
        ),
    }
}

/// `SET key = value`: `lakestream.*` and `paimon.lakestream.*` keys would
/// route by session option, which the contract refuses; the read settings
/// of [`LakeStreamConfig`](crate::LakeStreamConfig) pass.
fn check_set(variable: &str, value: Option<String>) -> Result<Checked> {
    let key = unquote(variable);
    if let Some(paimon_key) = options::strip_prefix_ignore_ascii_case(&key, "paimon.") {
        options::reject_session_key(paimon_key, "SET (a Paimon dynamic option)")?;
        return Ok(Checked {
            route: Route::SqlContext,
            dynamic_option: Some((
                paimon_key.to_string(),
                Some(value.map_or_else(String::new, |v| unquote(&v))),
            )),
            reset_all: false,
        });
    }
    if options::is_lakestream_key(&key) && !crate::table::config::is_read_setting(&key) {
        options::reject_session_key(&key, "SET")?;
    }
    Ok(Checked::route(Route::SqlContext))
}

/// `RESET key` of a read setting, as `SET key = default`.
fn reset_read_setting(key: &str, default: &str) -> Result<Checked> {
    let sql = format!("SET {key} = '{default}'");
    let statement = Parser::parse_sql(&GenericDialect {}, &sql)
        .ok()
        .and_then(|mut statements| statements.pop())
        .ok_or_else(|| Error::Internal(format!("'{sql}' does not parse")))?;
    Ok(Checked::route(Route::Rewritten(Box::new(statement))))
}

/// A statement that writes or changes a table names it without a
/// time-travel clause: `t VERSION AS OF 1` is a snapshot of `t`, read in a
/// query, which nothing writes. (`SQLContext` would run the statement on a
/// temporary table of the snapshot, and the error would name that.)
fn refuse_travelled_target(statement: &Statement, parsed: &Parsed<'_>) -> Result<()> {
    let (operation, targets): (&str, Vec<&ObjectName>) = match statement {
        Statement::Insert(insert) => match &insert.table {
            TableObject::TableName(name) => ("INSERT", vec![name]),
            _ => return Ok(()),
        },
        Statement::Update(update) => (
            "UPDATE",
            table_factor_name(&update.table.relation)
                .into_iter()
                .collect(),
        ),
        Statement::Delete(delete) => {
            let from = match &delete.from {
                FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => tables,
            };
            (
                "DELETE",
                delete
                    .tables
                    .iter()
                    .chain(from.iter().filter_map(|t| table_factor_name(&t.relation)))
                    .collect(),
            )
        }
        Statement::Merge(merge) => (
            "MERGE INTO",
            table_factor_name(&merge.table).into_iter().collect(),
        ),
        Statement::Truncate(truncate) => (
            "TRUNCATE TABLE",
            truncate.table_names.iter().map(|t| &t.name).collect(),
        ),
        Statement::AlterTable(alter) => ("ALTER TABLE", vec![&alter.name]),
        Statement::Drop { names, .. } => ("DROP", names.iter().collect()),
        Statement::CreateTable(create) => ("CREATE TABLE", vec![&create.name]),
        _ => return Ok(()),
    };
    match targets.into_iter().find_map(|name| parsed.travelled(name)) {
        Some(clause) => Err(Error::TimeTravelTarget {
            operation: operation.to_string(),
            name: clause.name.clone(),
            clause: clause.clause.clone(),
        }),
        None => Ok(()),
    }
}

/// Writes name `t`, never `t$rt`: every write statement says so the same way.
fn refuse_realtime_target(name: &ObjectName) -> Result<()> {
    if let RelationName::Realtime { table } = name::parse(&object_part(name))? {
        return Err(Error::RealtimeReadOnly {
            name: name.to_string(),
            table: table.to_string(),
        });
    }
    Ok(())
}

/// Every dotted name in `tokens` (`a`, `a.b`, `"A".b.c`), `t$rt` read as
/// `t`; `tokens` without whitespace and comments.
fn object_names<'t>(tokens: impl Iterator<Item = &'t Token>) -> Vec<ObjectName> {
    let mut names = Vec::new();
    let mut current: Vec<Ident> = Vec::new();
    let mut after_period = false;
    let mut finish = |current: &mut Vec<Ident>| {
        if !current.is_empty() {
            names.push(ObjectName::from(std::mem::take(current)));
        }
    };
    for token in tokens {
        match token {
            Token::Word(word) => {
                if !after_period {
                    finish(&mut current);
                }
                let value = match name::parse(&word.value) {
                    Ok(RelationName::Realtime { table }) => table.to_string(),
                    _ => word.value.clone(),
                };
                current.push(Ident {
                    value,
                    quote_style: word.quote_style,
                    span: Span::empty(),
                });
                after_period = false;
            }
            Token::Period if !current.is_empty() => after_period = true,
            _ => {
                finish(&mut current);
                after_period = false;
            }
        }
    }
    finish(&mut current);
    names
}

fn table_factor_name(factor: &TableFactor) -> Option<&ObjectName> {
    match factor {
        TableFactor::Table { name, .. } => Some(name),
        _ => None,
    }
}

/// An identifier as DataFusion's planner reads it: unquoted ones lower-cased.
fn normalized(ident: &Ident) -> String {
    match ident.quote_style {
        None => ident.value.to_ascii_lowercase(),
        Some(_) => ident.value.clone(),
    }
}

/// Finds a table name or alias spelled as `name` inside an expression.
struct NameUse<'a> {
    name: &'a str,
}

impl Visitor for NameUse<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let alias = match factor {
            TableFactor::Table { alias, .. }
            | TableFactor::Derived { alias, .. }
            | TableFactor::TableFunction { alias, .. }
            | TableFactor::UNNEST { alias, .. } => alias.as_ref(),
            _ => None,
        };
        let table = table_factor_name(factor)
            .and_then(|name| name.0.last())
            .and_then(ObjectNamePart::as_ident);
        let uses = alias
            .map(|a| &a.name)
            .into_iter()
            .chain(table)
            .any(|ident| normalized(ident) == self.name);
        if uses {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// `DELETE FROM t AS x WHERE x.k = 1`: DataFusion 54 plans a DELETE without
/// its target's alias, so `x.k` names no column there. The same statement
/// without the alias, every `x.` read as the table's name as written;
/// refused where a subquery names a table or alias `x` too, so that `x.`
/// could mean either. `None` for a DELETE without an alias.
fn unaliased_delete(
    statement: &Statement,
    target: Option<&ObjectName>,
) -> Result<Option<Statement>> {
    let (Statement::Delete(delete), Some(name)) = (statement, target) else {
        return Ok(None);
    };
    let mut delete = delete.clone();
    let tables = match &mut delete.from {
        FromTable::WithFromKeyword(tables) | FromTable::WithoutKeyword(tables) => tables,
    };
    let Some(TableFactor::Table { alias, .. }) = tables.first_mut().map(|t| &mut t.relation) else {
        return Ok(None);
    };
    let Some(table_alias) = alias.take() else {
        return Ok(None);
    };
    let refused = |reason: &str| Error::InvalidStatement {
        statement: format!("DELETE FROM {name} AS {}", table_alias.name),
        reason: reason.to_string(),
    };
    if !table_alias.columns.is_empty() {
        return Err(refused(
            "a DELETE's target takes no column aliases: name the columns as the table does",
        ));
    }
    let alias_name = normalized(&table_alias.name);
    if let Some(selection) = &mut delete.selection {
        let mut uses = NameUse { name: &alias_name };
        if selection.visit(&mut uses).is_break() {
            return Err(refused(
                "a subquery of its WHERE clause names a table or alias of the same name, so \
                 what the alias names is unclear: give the target another alias, or none",
            ));
        }
        let table: Vec<Ident> = name
            .0
            .iter()
            .filter_map(|part| part.as_ident().cloned())
            .collect();
        let _ = visit_expressions_mut(selection, |expr| {
            if let Expr::CompoundIdentifier(parts) = expr {
                if let [qualifier, column] = parts.as_slice() {
                    if normalized(qualifier) == alias_name {
                        let column = column.clone();
                        *expr = Expr::CompoundIdentifier(
                            table.iter().cloned().chain([column]).collect(),
                        );
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
    Ok(Some(Statement::Delete(delete)))
}

/// The object part of a name (its last part), as written.
fn object_part(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(ObjectNamePart::as_ident)
        .map(|ident| ident.value.clone())
        .unwrap_or_default()
}

/// Refuses the `$rt` names the store cannot serve (`t$rt$rt`,
/// `t$branch_b1$rt`, ...) before DataFusion looks them up, so the user gets
/// the contract's message rather than Paimon's "invalid object name".
fn check_relation_names(statement: &Statement) -> Result<()> {
    let flow = visit_relations(statement, |relation| {
        match name::parse(&object_part(relation)) {
            Err(e) => ControlFlow::Break(e),
            Ok(_) => ControlFlow::Continue(()),
        }
    });
    match flow {
        ControlFlow::Break(e) => Err(e.into()),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// Query hints (`/*+ OPTIONS('lakestream.enabled'='true') */`) that name a
/// lake-stream key, checked on the tokens: the parser drops comments.
fn check_hints(parsed: &Parsed<'_>) -> Result<()> {
    for token in parsed.tokens() {
        if let Token::Whitespace(Whitespace::MultiLineComment(text)) = token {
            if text.starts_with('+') && text.to_ascii_lowercase().contains(options::PREFIX) {
                return Err(Error::SessionRouting {
                    key: text.trim_start_matches('+').trim().to_string(),
                    origin: "a query hint".to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::parsed::CreateCatalog;
    use proptest::prelude::*;

    fn create_catalog(sql: &str) -> Result<Option<CreateCatalog>> {
        Parsed::generic(sql).create_catalog()
    }

    fn is_show_catalogs(sql: &str) -> bool {
        Parsed::generic(sql).is_show_catalogs()
    }

    fn is_create_external(sql: &str) -> bool {
        Parsed::generic(sql).is_create_external()
    }

    fn create_or_replace_target(sql: &str) -> Option<ObjectName> {
        Parsed::generic(sql).create_or_replace_target()
    }

    fn check_hints(sql: &str) -> Result<()> {
        super::check_hints(&Parsed::generic(sql))
    }

    /// A filter over a session whose default catalog is a lake-stream
    /// catalog on an empty warehouse in `dir`.
    fn filter_state(dir: &std::path::Path) -> (SessionContext, Arc<LakeStreamSession>) {
        let session = SessionContext::new();
        let default_catalog = session
            .state()
            .config_options()
            .catalog
            .default_catalog
            .clone();
        let options =
            std::collections::HashMap::from([("warehouse".to_string(), dir.display().to_string())]);
        let paimon = futures::executor::block_on(paimon::CatalogFactory::create(
            paimon::Options::from_map(options.clone()),
        ))
        .unwrap();
        let state = Arc::new(LakeStreamSession::default());
        state.add_catalog(Arc::new(LakeStreamCatalog::new(
            &default_catalog,
            paimon,
            options::CatalogStoreOptions::default(),
            Arc::new(crate::store::StoreRegistry::new()),
            options,
        )));
        (session, state)
    }

    #[test]
    fn unquoted_names_lower_case_ascii_only_as_datafusion_does() {
        let dir = tempfile::tempdir().unwrap();
        let (session, state) = filter_state(dir.path());
        let filter = StatementFilter {
            session: &session,
            state: &state,
        };
        let name = |sql: &str| {
            Parser::new(&GenericDialect {})
                .try_with_sql(sql)
                .unwrap()
                .parse_object_name(false)
                .unwrap()
        };
        // DataFusion's planner looks `ÉVENTS` up as `Évents`: the filter must
        // find the same table, or a DELETE would bypass write routing.
        let (_, identifier) = filter.resolve(&name("ÉVENTS"), true).unwrap();
        assert_eq!(identifier.object(), "Évents");
        let (_, identifier) = filter.resolve(&name("DB.\"ÉVENTS\""), true).unwrap();
        assert_eq!(
            (identifier.database(), identifier.object()),
            ("db", "ÉVENTS")
        );
        let (_, identifier) = filter.resolve(&name("İ"), true).unwrap();
        assert_eq!(identifier.object(), "İ");
    }

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
    fn hints_naming_lakestream_keys_are_refused() {
        for sql in [
            "SELECT * FROM t /*+ OPTIONS('lakestream.enabled'='false') */",
            "INSERT /*+ OPTIONS('LakeStream.store'='x') */ INTO t VALUES (1)",
            "SELECT /*+ lakestream.whatever */ 1",
        ] {
            let err = check_hints(sql).unwrap_err().to_string();
            assert!(err.contains("a query hint cannot set"), "{err}");
        }
        check_hints("SELECT * FROM t /*+ OPTIONS('scan.snapshot-id'='1') */").unwrap();
        check_hints("SELECT 1 /* lakestream.enabled, not a hint */").unwrap();
    }

    #[test]
    fn set_routes_nothing() {
        assert!(check_set("'paimon.lakestream.enabled'", Some("'true'".into())).is_err());
        assert!(check_set("lakestream.store", Some("x".into())).is_err());
        assert!(check_set("LAKESTREAM.enabled", Some("x".into())).is_err());
        assert_eq!(
            check_set("lakestream.scan_mode", Some("'streaming'".into()))
                .unwrap()
                .route,
            Route::SqlContext
        );
        assert_eq!(
            check_set("'paimon.scan.snapshot-id'", Some("'3'".into()))
                .unwrap()
                .dynamic_option,
            Some(("scan.snapshot-id".to_string(), Some("3".to_string())))
        );
        assert_eq!(
            check_set("datafusion.execution.batch_size", Some("10".into()))
                .unwrap()
                .dynamic_option,
            None
        );
    }

    #[test]
    fn parses_create_catalog() {
        let parsed = create_catalog(
            "CREATE CATALOG IF NOT EXISTS lake WITH ('warehouse' = '/w', 'lakestream.store' = 'local');",
        )
        .unwrap()
        .unwrap();
        assert_eq!(parsed.name, "lake");
        assert!(parsed.if_not_exists);
        assert_eq!(parsed.options["warehouse"], "/w");
        assert_eq!(parsed.options["lakestream.store"], "local");
        assert_eq!(create_catalog("CREATE TABLE t (a INT)").unwrap(), None);
        let err = create_catalog("CREATE CATALOG lake ('warehouse' = '/w')")
            .unwrap_err()
            .to_string();
        assert!(err.contains("CREATE CATALOG"), "{err}");
        assert!(create_catalog("CREATE CATALOG lake WITH ('a' = 'b') EXTRA").is_err());
        assert!(is_show_catalogs("show catalogs;"));
        assert!(!is_show_catalogs("SHOW TABLES"));
    }

    #[test]
    fn recognises_external_tables() {
        assert!(is_create_external(
            "CREATE EXTERNAL TABLE t STORED AS PAIMON LOCATION 'x'"
        ));
        assert!(is_create_external(
            "create unbounded external table t stored as csv location 'x'"
        ));
        assert!(!is_create_external("CREATE TABLE t (a INT)"));
        assert!(!is_create_external("SELECT 'CREATE EXTERNAL TABLE'"));
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

    /// Text for a statement fragment: keywords, names, quotes, dots, `$`,
    /// comments, whitespace and letters of several scripts.
    fn fragment() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("'".to_string()),
                Just("\"".to_string()),
                Just("`".to_string()),
                Just(".".to_string()),
                Just("$".to_string()),
                Just("$rt".to_string()),
                Just("$RT".to_string()),
                Just(" ".to_string()),
                Just("\n".to_string()),
                Just(";".to_string()),
                Just("=".to_string()),
                Just("/*+".to_string()),
                Just("*/".to_string()),
                Just("--".to_string()),
                Just("paimon.".to_string()),
                Just("lakestream.".to_string()),
                Just(" VERSION AS OF ".to_string()),
                Just("é".to_string()),
                Just("İ".to_string()),
                Just("ẞ".to_string()),
                Just("\u{301}".to_string()),
                "[a-zA-Z0-9_(),]{1,4}",
                "[a-z.]{6,12}",
                "\\PC{1,6}",
            ],
            0..8,
        )
        .prop_map(|parts| parts.concat())
    }

    /// A statement of one of the kinds the filter reads, built around fragments.
    fn statement() -> impl Strategy<Value = String> {
        (0..22usize, fragment(), fragment(), fragment()).prop_map(|(kind, a, b, c)| match kind {
            0 => format!("SET {a} = {b}"),
            1 => format!("SET '{a}' = '{b}'"),
            2 => format!("RESET {a}"),
            3 => format!("SELECT * FROM {a}"),
            4 => format!("SELECT * FROM {a}{b} {c}"),
            5 => format!("SELECT * FROM {a} VERSION AS OF {b}"),
            6 => format!("SELECT * FROM t /*+ OPTIONS('{a}'='{b}') */ {c}"),
            7 => format!("INSERT INTO {a} VALUES ({b})"),
            8 => format!("INSERT OVERWRITE {a} PARTITION ({b}) SELECT {c}"),
            9 => format!("DELETE FROM {a} WHERE {b}"),
            10 => format!("UPDATE {a} SET {b} = {c}"),
            11 => format!("MERGE INTO {a} USING {b} ON {c} WHEN MATCHED THEN DELETE"),
            12 => format!("TRUNCATE TABLE {a}"),
            13 => format!("DESCRIBE {a}"),
            14 => format!("CALL sys.lakestream_tier('{a}')"),
            15 => format!("CALL {a}({b})"),
            16 => format!("CREATE CATALOG {a} WITH ('{b}' = '{c}')"),
            17 => format!("CREATE OR REPLACE TABLE {a} ({b} INT)"),
            18 => format!(
                "CREATE EXTERNAL TABLE {a} STORED AS PAIMON LOCATION '{b}' OPTIONS ('{c}' 'x')"
            ),
            19 => format!("ALTER TABLE {a} SET TBLPROPERTIES ('{b}' = '{c}')"),
            20 => format!("SHOW {a}"),
            _ => format!("{a}{b}{c}"),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The filter and the statement parsers of this module, on any
        /// statement text: errors are fine, panics are not.
        #[test]
        fn the_filter_never_panics(sql in statement()) {
            let dir = tempfile::tempdir().unwrap();
            let (session, state) = filter_state(dir.path());
            let filter = StatementFilter {
                session: &session,
                state: &state,
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _ = runtime.block_on(filter.check(&Parsed::generic(&sql)));
            let _ = create_catalog(&sql);
            let _ = is_show_catalogs(&sql);
            let _ = is_create_external(&sql);
            let _ = create_or_replace_target(&sql);
            let _ = check_hints(&sql);
        }

        #[test]
        fn the_parsers_never_panic_on_any_text(sql in "\\PC{0,60}") {
            let _ = create_catalog(&sql);
            let _ = is_show_catalogs(&sql);
            let _ = is_create_external(&sql);
            let _ = create_or_replace_target(&sql);
            let _ = check_hints(&sql);
            let _ = history::check_text(&Parsed::generic(&sql));
            let _ = history::check_rewrite(&Parsed::generic(&sql));
            let _ = check_set(&sql, Some(sql.clone()));
            if let Ok(statements) = Parser::parse_sql(&GenericDialect {}, &sql) {
                for statement in &statements {
                    let _ = check_relation_names(statement);
                }
            }
        }
    }
}
