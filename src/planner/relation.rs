//! The relation planner that serves `t$rt` from the table's store.
//!
//! Registered after paimon-datafusion's, so it runs first: it sees `t$rt`,
//! its version clause and its `WITH (...)` options before anything can drop them.

use std::sync::Arc;

use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::TableReference;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::builder::LogicalPlanBuilder;
use datafusion::logical_expr::planner::{
    PlannedRelation, RelationPlanner, RelationPlannerContext, RelationPlanning,
};
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, TableFactor};
use paimon::catalog::Catalog;

use super::history;
use crate::error::Error;
use crate::name::{self, RelationName};
use crate::options;
use crate::table::LakeStreamSession;
use crate::table::RealtimeTable;

/// Plans `t$rt` as a read of the table's store.
#[derive(Debug)]
pub(crate) struct RealtimeRelationPlanner {
    state: Arc<LakeStreamSession>,
}

impl RealtimeRelationPlanner {
    pub(crate) fn new(state: Arc<LakeStreamSession>) -> Self {
        Self { state }
    }
}

impl RelationPlanner for RealtimeRelationPlanner {
    fn plan_relation(
        &self,
        relation: TableFactor,
        context: &mut dyn RelationPlannerContext,
    ) -> DFResult<RelationPlanning> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            with_hints,
            version,
            ..
        } = &relation
        else {
            return Ok(RelationPlanning::Original(Box::new(relation)));
        };
        let reference = context.object_name_to_table_reference(name.clone())?;
        check_hint_keys(with_hints)?;
        let table_name = match name::parse(reference.table()).map_err(Error::from)? {
            RelationName::Paimon(_) => return Ok(RelationPlanning::Original(Box::new(relation))),
            RelationName::Realtime { table } => table.to_string(),
        };
        let base = with_table(&reference, &table_name);
        let config = context.context_provider().options();
        let display = reference.to_string();
        let resolved = self.state.resolve(&base, config);
        let external = self.state.external(&base, config);
        if resolved.is_none() && external.is_none() {
            // Not one of our tables: leave the name to whoever owns it.
            return Ok(RelationPlanning::Original(Box::new(relation)));
        }
        history::check_planned(&display, &base.to_string(), version.as_ref(), &self.state)?;
        if !with_hints.is_empty() {
            return Err(Error::RealtimeOptions { name: display }.into());
        }

        let (binding, table) = match (resolved, external) {
            (Some((catalog, identifier)), _) => {
                let lookup = Arc::clone(&catalog);
                let lookup_id = identifier.clone();
                let table =
                    crate::runtime::block_on(async move { lookup.get_table(&lookup_id).await })?;
                let table = match table {
                    Ok(table) => table,
                    Err(paimon::Error::TableNotExist { .. }) => {
                        return Err(Error::RealtimeOfMissingTable {
                            name: display,
                            table: identifier.full_name(),
                        }
                        .into())
                    }
                    Err(e) => return Err(Error::from(e).into()),
                };
                if !options::is_enabled(table.schema().options()) {
                    return Err(Error::NotLakeStream {
                        name: display,
                        table: identifier.full_name(),
                    }
                    .into());
                }
                (catalog.binding().clone(), table)
            }
            (None, Some(external)) => (external.binding, external.table),
            (None, None) => return Ok(RelationPlanning::Original(Box::new(relation))),
        };
        let provider = RealtimeTable::try_new(binding, table)?;
        let plan =
            LogicalPlanBuilder::scan(reference, provider_as_source(Arc::new(provider)), None)?
                .build()?;
        Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
            plan,
            alias.clone(),
        ))))
    }
}

/// The same reference with another table part.
fn with_table(reference: &TableReference, table: &str) -> TableReference {
    match reference {
        TableReference::Bare { .. } => TableReference::bare(table),
        TableReference::Partial { schema, .. } => TableReference::partial(schema.as_ref(), table),
        TableReference::Full {
            catalog, schema, ..
        } => TableReference::full(catalog.as_ref(), schema.as_ref(), table),
    }
}

/// A `WITH ('lakestream.x' = ...)` table option, on any table, tries to route
/// by hint: refused.
fn check_hint_keys(with_hints: &[SqlExpr]) -> Result<(), Error> {
    for hint in with_hints {
        let text = hint.to_string();
        let key = text.split('=').next().unwrap_or_default();
        let key = key.trim().trim_matches(['\'', '"', '`']);
        options::reject_session_key(key, "a WITH (...) table option")?;
    }
    Ok(())
}
