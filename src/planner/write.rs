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
//!
//! Inside a write to a lake-stream table, every read of that table (in a
//! subquery, or the `SELECT` of `INSERT INTO t SELECT ... FROM t`) reads its
//! current rows, `t$rt`, as the rows the statement changes are; a
//! time-travelled read keeps its snapshot. Every `t$rt` read inside a write
//! statement is bounded, whatever `lakestream.scan_mode` says.
//!
//! A write to a table that is not lake-stream when planned is checked again
//! when it runs ([`PaimonWriteTable`]).

use std::sync::Arc;

use datafusion::catalog::default_table_source::{provider_as_source, source_as_provider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, TableReference};
use datafusion::datasource::TableProvider;
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::expr::InSubquery;
use datafusion::logical_expr::{
    BinaryExpr, DmlStatement, Expr, ExprSchemable, LogicalPlan, Operator, TableScan, TableSource,
    WriteOp,
};
use datafusion::optimizer::AnalyzerRule;
use paimon_datafusion::PaimonTableProvider;

use crate::error::Error;
use crate::options;
use crate::store::StoreBinding;
use crate::table::{full_name, LakeStreamSession};
use crate::table::{PaimonWriteTable, RealtimeTable, RowChange, StoreWriteTable};

/// Swaps the target of DML on lake-stream tables for [`StoreWriteTable`].
#[derive(Debug)]
pub(crate) struct WriteRouting {
    state: Arc<LakeStreamSession>,
}

impl WriteRouting {
    pub(crate) fn new(state: Arc<LakeStreamSession>) -> Self {
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
        if !table.is_main_branch() {
            return Ok(Transformed::no(dml));
        }
        let resolved = self.state.resolve(&dml.table_name, config);
        if !options::is_enabled(table.schema().options()) {
            // Paimon writes it, unless it turned lake-stream by the time
            // the statement runs.
            let Some((catalog, identifier)) = resolved else {
                return Ok(Transformed::no(dml));
            };
            let target =
                PaimonWriteTable::new(Arc::clone(&provider), table.clone(), catalog, identifier);
            return Ok(Transformed::yes(DmlStatement {
                target: provider_as_source(Arc::new(target)),
                ..dml
            }));
        }
        let binding = match resolved {
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
            return route_change(dml, binding, paimon, change, config).map(Transformed::yes);
        }
        let input = read_own_rows(
            Arc::unwrap_or_clone(Arc::clone(&dml.input)),
            &dml.table_name,
            config,
            || realtime_source(&binding, table),
        )?
        .data;
        let target = StoreWriteTable::new(binding, table.clone(), paimon.schema());
        Ok(Transformed::yes(DmlStatement {
            target: provider_as_source(Arc::new(target)),
            input: Arc::new(input),
            ..dml
        }))
    }
}

/// A bounded `t$rt` read of `table`, for a scan inside a write statement.
fn realtime_source(
    binding: &StoreBinding,
    table: &paimon::table::Table,
) -> DFResult<Arc<dyn TableSource>> {
    let realtime = RealtimeTable::try_new(binding.clone(), table.clone())?.bounded();
    Ok(provider_as_source(Arc::new(realtime)))
}

/// `scan` reading `source` instead.
fn rescan(scan: TableScan, source: Arc<dyn TableSource>) -> DFResult<TableScan> {
    TableScan::try_new(
        scan.table_name,
        source,
        scan.projection,
        scan.filters,
        scan.fetch,
    )
}

/// Every scan of the written table `own` in `plan`, subqueries included,
/// reads `t$rt` (made by `realtime` once, if there is one): the written
/// table reads as its current rows inside its own write. Scans under other
/// names (a time-travelled read, a branch, `t$rt` itself) keep theirs.
fn read_own_rows(
    plan: LogicalPlan,
    own: &TableReference,
    config: &ConfigOptions,
    realtime: impl Fn() -> DFResult<Arc<dyn TableSource>>,
) -> DFResult<Transformed<LogicalPlan>> {
    let own = full_name(own, config);
    let mut source: Option<Arc<dyn TableSource>> = None;
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::TableScan(scan)
            if full_name(&scan.table_name, config) == own
                && source_as_provider(&scan.source)
                    .is_ok_and(|p| p.downcast_ref::<PaimonTableProvider>().is_some()) =>
        {
            let source = match &source {
                Some(source) => Arc::clone(source),
                None => Arc::clone(source.insert(realtime()?)),
            };
            Ok(Transformed::yes(LogicalPlan::TableScan(rescan(
                scan, source,
            )?)))
        }
        other => Ok(Transformed::no(other)),
    })
}

/// Every `t$rt` read in `plan`, subqueries included, bounded: a write
/// statement reads the rows there are when it runs, and ends.
fn bounded_reads(plan: LogicalPlan) -> DFResult<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(scan) = node else {
            return Ok(Transformed::no(node));
        };
        let bounded = source_as_provider(&scan.source).ok().and_then(|p| {
            p.downcast_ref::<RealtimeTable>()
                .filter(|r| !r.is_bounded())
                .map(RealtimeTable::bounded)
        });
        match bounded {
            Some(bounded) => {
                let source = provider_as_source(Arc::new(bounded));
                Ok(Transformed::yes(LogicalPlan::TableScan(rescan(
                    scan, source,
                )?)))
            }
            None => Ok(Transformed::no(LogicalPlan::TableScan(scan))),
        }
    })
}

/// A DELETE or UPDATE of a lake-stream table as the write of the rows it
/// selects (see the module documentation).
fn route_change(
    dml: DmlStatement,
    binding: StoreBinding,
    paimon: &PaimonTableProvider,
    change: RowChange,
    config: &ConfigOptions,
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
    if let Some(clause) = null_sensitive_in(&dml.input) {
        return Err(Error::WriteNotSupported {
            operation: operation.to_string(),
            table: table.identifier().full_name(),
            reason: format!(
                "its clause '{clause}' compares values that may be NULL where a NULL answer \
                 decides the row (NOT IN, or IN under NOT, =, IS FALSE or in a value), and \
                 DataFusion 54 over Paimon tables answers IN (subquery) without SQL's NULL \
                 rule, so it could select rows SQL does not. Use IN only as a condition of the \
                 WHERE clause (joined by AND or OR), write [NOT] EXISTS (SELECT 1 FROM ... \
                 WHERE ... = ...) instead, or compare columns declared NOT NULL"
            ),
        }
        .into());
    }

    // The statement's own scan of the table reads `t$rt` instead: the rows
    // the statement selects from are the table's current rows. Scans inside
    // subqueries are expressions, not inputs, and keep what they name.
    let realtime = realtime_source(&binding, table)?;
    let mut replaced = 0usize;
    let mut others = Vec::new();
    let input = Arc::unwrap_or_clone(Arc::clone(&dml.input))
        .transform_up(|node| match node {
            LogicalPlan::TableScan(scan) if scan.table_name == dml.table_name => {
                replaced += 1;
                let scan = rescan(scan, Arc::clone(&realtime))?;
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
    // Its subqueries' reads of the table read the same current rows.
    let input = read_own_rows(input, &dml.table_name, config, || Ok(Arc::clone(&realtime)))?.data;
    Ok(DmlStatement::new(
        dml.table_name,
        provider_as_source(Arc::new(target)),
        WriteOp::Insert(InsertOp::Append),
        Arc::new(input),
    ))
}

/// The first `IN (subquery)` in `plan` (subqueries included) whose answer
/// depends on SQL's NULL rule, as SQL text: where `x` or the subquery's
/// column may be NULL, and the `IN` is negated or its value is used other
/// than to drop a row (under NOT, compared, IS FALSE, in a value). Decided
/// on the planned expressions, whatever the spelling.
fn null_sensitive_in(plan: &LogicalPlan) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        let schemas: Vec<DFSchemaRef> = node
            .inputs()
            .iter()
            .map(|i| Arc::clone(i.schema()))
            .collect();
        let mut filtering = Vec::new();
        if let LogicalPlan::Filter(filter) = node {
            only_filtering(&filter.predicate, &mut filtering);
        }
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::InSubquery(in_subquery) = e {
                    let filters = filtering.iter().any(|f| std::ptr::eq(*f, e));
                    if !filters && may_be_null(in_subquery, &schemas) {
                        let not = if in_subquery.negated { "NOT " } else { "" };
                        found = Some(format!("{} {not}IN (<subquery>)", in_subquery.expr));
                        return Ok(TreeNodeRecursion::Stop);
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

/// The `IN (subquery)` expressions of a filter's `predicate` whose value
/// only decides whether a row passes: reached through AND, OR and IS TRUE
/// alone, not negated. There a NULL answer and a false one drop the row alike.
fn only_filtering<'a>(predicate: &'a Expr, out: &mut Vec<&'a Expr>) {
    match predicate {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And | Operator::Or,
            right,
        }) => {
            only_filtering(left, out);
            only_filtering(right, out);
        }
        Expr::IsTrue(inner) => only_filtering(inner, out),
        Expr::InSubquery(in_subquery) if !in_subquery.negated => out.push(predicate),
        _ => {}
    }
}

/// Whether either side of `in_subquery` may be NULL.
fn may_be_null(in_subquery: &InSubquery, schemas: &[DFSchemaRef]) -> bool {
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
    outer || inner
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
            LogicalPlan::Dml(dml) => self.route(dml, config)?.transform_data(|dml| {
                let input = bounded_reads(Arc::unwrap_or_clone(Arc::clone(&dml.input)))?;
                Ok(input.update_data(|input| {
                    LogicalPlan::Dml(DmlStatement {
                        input: Arc::new(input),
                        ..dml
                    })
                }))
            }),
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakestream_write_routing"
    }
}
