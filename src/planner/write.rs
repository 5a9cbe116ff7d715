//! Write routing: the analyzer rule that makes the store's write target the
//! target of every DML statement on a lake-stream table.
//!
//! Routing reads the table's stored options only. A write to a lake-stream
//! table that reaches no store is refused, never sent to Paimon.

use std::sync::Arc;

use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::{DmlStatement, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;
use paimon_datafusion::PaimonTableProvider;

use super::PlannerState;
use crate::options;
use crate::store::StoreBinding;
use crate::table::StoreWriteTable;

/// Swaps the target of DML on lake-stream tables for [`StoreWriteTable`].
#[derive(Debug)]
pub(crate) struct WriteRouting {
    state: Arc<PlannerState>,
}

impl WriteRouting {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }

    fn route(
        &self,
        dml: DmlStatement,
        config: &ConfigOptions,
    ) -> DFResult<Transformed<DmlStatement>> {
        let Ok(provider) = source_as_provider(&dml.target) else {
            return Ok(Transformed::no(dml));
        };
        let Some(paimon) = provider.downcast_ref::<PaimonTableProvider>() else {
            return Ok(Transformed::no(dml));
        };
        let table = paimon.table();
        if !options::is_enabled(table.schema().options()) {
            return Ok(Transformed::no(dml));
        }
        let binding = match self.state.resolve(&dml.table_name, config) {
            Some((catalog, _)) => catalog.binding().clone(),
            None => self
                .state
                .external(&dml.table_name, config)
                .map(|external| external.binding)
                .unwrap_or_else(|| {
                    // Reached some other way: it names no store.
                    StoreBinding::new(
                        None,
                        format!("the session's catalog for '{}'", dml.table_name),
                    )
                }),
        };
        let target = StoreWriteTable::new(binding, table.clone(), paimon.schema());
        Ok(Transformed::yes(DmlStatement {
            target: provider_as_source(Arc::new(target)),
            ..dml
        }))
    }
}

impl AnalyzerRule for WriteRouting {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> DFResult<LogicalPlan> {
        plan.transform_down(|node| match node {
            LogicalPlan::Dml(dml) => Ok(self.route(dml, config)?.update_data(LogicalPlan::Dml)),
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakestream_write_routing"
    }
}
