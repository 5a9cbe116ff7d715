//! Write routing: the analyzer rule that makes the store's write target the
//! target of every DML statement on a lake-stream table.
//!
//! Routing reads the table's stored options only. A write to a lake-stream
//! table that reaches no store is refused, never sent to Paimon.
//!
//! DELETE and UPDATE become writes of the rows they select: the statement's
//! input (its scan of the table, its whole `WHERE` clause with any subquery,
//! its `LIMIT`, and for UPDATE the new values) is kept as DataFusion planned
//! it, with the scan of the table replaced by a scan of `t$rt`. Those rows go
//! to the store as deletes or upserts by primary key, so a statement never
//! acts on more rows than its predicate selects.

use std::sync::Arc;

use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{
    DmlStatement, Expr, ExprSchemable, LogicalPlan, TableScan, WriteOp,
};
use datafusion::optimizer::AnalyzerRule;
use paimon_datafusion::PaimonTableProvider;

use super::PlannerState;
use crate::error::Error;
use crate::options;
use crate::store::StoreBinding;
use crate::table::{RealtimeTable, RowChange, StoreWriteTable};

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
        // A branch copies its table's options, `lakestream.enabled` too, but
        // is never itself lake-stream: the store holds the main branch's
        // rows only. Its writes are Paimon's, to the branch.
        if !options::is_enabled(table.schema().options()) || !table.is_main_branch() {
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
        let change = match dml.op {
            WriteOp::Delete => RowChange::Delete,
            WriteOp::Update => RowChange::Update,
            _ => RowChange::Insert,
        };
        if change != RowChange::Insert {
            return route_change(dml, binding, paimon, change).map(Transformed::yes);
        }
        let target = StoreWriteTable::new(binding, table.clone(), paimon.schema());
        Ok(Transformed::yes(DmlStatement {
            target: provider_as_source(Arc::new(target)),
            ..dml
        }))
    }
}

/// A DELETE or UPDATE of a lake-stream table as the write of the rows it
/// selects (see the module documentation).
fn route_change(
    dml: DmlStatement,
    binding: StoreBinding,
    paimon: &PaimonTableProvider,
    change: RowChange,
) -> DFResult<DmlStatement> {
    let table = paimon.table();
    let operation = match change {
        RowChange::Delete => "DELETE",
        _ => "UPDATE",
    };
    let target =
        StoreWriteTable::for_change(binding.clone(), table.clone(), paimon.schema(), change);
    let assigned = match change {
        RowChange::Update => assigned_columns(&dml.input),
        _ => Vec::new(),
    };
    target.check_change(&assigned)?;
    if let Some(clause) = nullable_not_in(&dml.input) {
        return Err(Error::WriteNotSupported {
            operation: operation.to_string(),
            table: table.identifier().full_name(),
            reason: format!(
                "its clause '{clause}' compares values that may be NULL, and DataFusion 54 \
                 over Paimon tables answers NOT IN without SQL's NULL rule, so it could select \
                 rows SQL does not. Write NOT EXISTS (SELECT 1 FROM ... WHERE ... = ...) instead, \
                 or compare columns declared NOT NULL"
            ),
        }
        .into());
    }

    // The statement's own scan of the table reads `t$rt` instead: the rows
    // the statement selects from are the table's current rows. Scans inside
    // subqueries are expressions, not inputs, and keep what they name.
    let realtime = provider_as_source(Arc::new(RealtimeTable::try_new(binding, table.clone())?));
    let mut replaced = 0usize;
    let mut others = Vec::new();
    let input = Arc::unwrap_or_clone(Arc::clone(&dml.input))
        .transform_up(|node| match node {
            LogicalPlan::TableScan(scan) if scan.table_name == dml.table_name => {
                replaced += 1;
                let scan = TableScan::try_new(
                    scan.table_name,
                    Arc::clone(&realtime),
                    scan.projection,
                    scan.filters,
                    scan.fetch,
                )?;
                Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
            }
            LogicalPlan::TableScan(scan) => {
                others.push(scan.table_name.to_string());
                Ok(Transformed::no(LogicalPlan::TableScan(scan)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data;
    // DataFusion 54 plans DELETE and UPDATE over the target alone (no
    // `USING`, no `UPDATE ... FROM`); any other shape is refused rather
    // than applied in part.
    if replaced != 1 || !others.is_empty() {
        let reason = match others.first() {
            Some(other) => format!(
                "its selection joins '{other}', and only a WHERE clause over the table itself \
                 (subqueries included) can be applied. Select the rows with a subquery: \
                 WHERE k IN (SELECT ...)"
            ),
            None => format!(
                "its selection reads the table {replaced} times, and only a WHERE clause over \
                 one scan of the table (subqueries included) can be applied"
            ),
        };
        return Err(Error::WriteNotSupported {
            operation: operation.to_string(),
            table: table.identifier().full_name(),
            reason,
        }
        .into());
    }
    Ok(DmlStatement::new(
        dml.table_name,
        provider_as_source(Arc::new(target)),
        WriteOp::Insert(InsertOp::Append),
        Arc::new(input),
    ))
}

/// The first `x NOT IN (subquery)` in `plan` (subqueries included) where
/// `x` or the subquery's column may be NULL, as SQL text.
fn nullable_not_in(plan: &LogicalPlan) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        let schemas: Vec<_> = node
            .inputs()
            .iter()
            .map(|i| Arc::clone(i.schema()))
            .collect();
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::InSubquery(in_subquery) = e {
                    if in_subquery.negated {
                        let outer = schemas
                            .iter()
                            .find_map(|schema| in_subquery.expr.nullable(schema.as_ref()).ok())
                            .unwrap_or(true);
                        let inner = in_subquery
                            .subquery
                            .subquery
                            .schema()
                            .fields()
                            .iter()
                            .any(|f| f.is_nullable());
                        if outer || inner {
                            found = Some(format!("{} NOT IN (<subquery>)", in_subquery.expr));
                            return Ok(TreeNodeRecursion::Stop);
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(match found {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// The columns an UPDATE sets: DataFusion plans it as a projection of every
/// column under its own name, the unchanged ones as the column itself.
fn assigned_columns(input: &LogicalPlan) -> Vec<String> {
    let mut assigned = Vec::new();
    let _ = input.apply(|node| {
        let LogicalPlan::Projection(projection) = node else {
            return Ok(TreeNodeRecursion::Continue);
        };
        for expr in &projection.expr {
            if let Expr::Alias(alias) = expr {
                let identity =
                    matches!(alias.expr.as_ref(), Expr::Column(c) if c.name == alias.name);
                if !identity {
                    assigned.push(alias.name.clone());
                }
            }
        }
        Ok(TreeNodeRecursion::Stop)
    });
    assigned
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
