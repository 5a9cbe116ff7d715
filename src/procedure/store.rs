//! `lakestream_tier('db.t')`: tiers a lake-stream table's store rows into
//! Paimon now. A table function, so it works in any DataFusion session that
//! has the lake-stream catalogs; `CALL sys.lakestream_tier('db.t')` in
//! `LakeStreamContext` runs the same function.
//!
//! `lakestream_set_aside('db.t', position)`: moves a damaged segment of the
//! store's log aside (its rows are lost), so reads and tiering go on; it
//! answers what the segment held. `CALL sys.lakestream_set_aside(...)` too.
//!
//! The maintenance procedures are in [`super::maintenance`].

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use paimon::catalog::Catalog as _;

use crate::catalog::WhenOff;
use crate::error::Error;
use crate::planner::PlannerState;

/// The name the table function is registered under.
pub(crate) const TIER_FUNCTION: &str = "lakestream_tier";
/// The name of the set-aside function.
pub(crate) const SET_ASIDE_FUNCTION: &str = "lakestream_set_aside";

/// The `lakestream_tier` table function.
#[derive(Debug)]
pub(crate) struct TierFunction {
    state: Arc<PlannerState>,
}

impl TierFunction {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for TierFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{TIER_FUNCTION} takes one argument, the table's name as a string: \
                 {TIER_FUNCTION}('db.t')"
            ))
        };
        let [Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _)] =
            args.exprs()
        else {
            return Err(usage());
        };
        let target = resolve(&self.state, &args, TIER_FUNCTION, name)?;
        Ok(Arc::new(ProcedureTable {
            target,
            run: Run::Tier,
            schema: report_schema(),
        }))
    }
}

/// The `lakestream_set_aside` table function.
#[derive(Debug)]
pub(crate) struct SetAsideFunction {
    state: Arc<PlannerState>,
}

impl SetAsideFunction {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for SetAsideFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{SET_ASIDE_FUNCTION} takes the table's name as a string and the damaged \
                 segment's position as a number: {SET_ASIDE_FUNCTION}('db.t', 5)"
            ))
        };
        let [Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _), Expr::Literal(position, _)] =
            args.exprs()
        else {
            return Err(usage());
        };
        let position = match position {
            ScalarValue::Int64(Some(p)) => u64::try_from(*p).ok(),
            ScalarValue::Int32(Some(p)) => u64::try_from(*p).ok(),
            ScalarValue::UInt64(Some(p)) => Some(*p),
            _ => None,
        }
        .ok_or_else(usage)?;
        let target = resolve(&self.state, &args, SET_ASIDE_FUNCTION, name)?;
        Ok(Arc::new(ProcedureTable {
            target,
            run: Run::SetAside(position),
            schema: Arc::new(Schema::new(vec![Field::new(
                "result",
                DataType::Utf8,
                false,
            )])),
        }))
    }
}

/// The lake-stream table a procedure's name argument names.
pub(super) fn resolve(
    state: &PlannerState,
    args: &TableFunctionArgs,
    function: &str,
    name: &str,
) -> DFResult<Target> {
    let config = args.session().config_options();
    let lookup = |parts: &[String]| -> DFResult<_> {
        let reference = match parts {
            [catalog, schema, table] => {
                TableReference::full(catalog.as_str(), schema.as_str(), table.as_str())
            }
            [schema, table] => TableReference::partial(schema.as_str(), table.as_str()),
            [table] => TableReference::bare(table.as_str()),
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "{function}: '{name}' is not a table name"
                )))
            }
        };
        Ok(state.resolve(&reference, config))
    };
    // The name is parsed as SQL parses names: quoted parts keep their case
    // and dots, unquoted ones are lower-cased.
    let parts = crate::name::parse_table_name(name).map_err(Error::from)?;
    let (catalog, identifier) = lookup(&parts)?.ok_or_else(|| {
        DataFusionError::Plan(format!(
            "{function}: '{name}' is not a table of a lake-stream catalog"
        ))
    })?;
    // SQLContext keeps an unquoted name's case (`CREATE TABLE Ev` makes
    // `Ev`): that spelling is the second choice.
    let kept = crate::name::parse_table_name_keeping_case(name).map_err(Error::from)?;
    let as_written = match lookup(&kept)? {
        Some((other, written)) if kept != parts && Arc::ptr_eq(&other, &catalog) => Some(written),
        _ => None,
    };
    Ok(Target {
        catalog,
        identifier,
        as_written,
    })
}

/// The lake-stream table a procedure names: the name as SQL reads it, or,
/// when no table has that name, as it was written.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) catalog: Arc<crate::catalog::LakeStreamCatalog>,
    identifier: paimon::catalog::Identifier,
    as_written: Option<paimon::catalog::Identifier>,
}

impl Target {
    pub(super) async fn identifier(&self) -> paimon::catalog::Identifier {
        if let Some(written) = &self.as_written {
            let missing = matches!(
                self.catalog.get_table(&self.identifier).await,
                Err(paimon::Error::TableNotExist { .. })
            );
            if missing && self.catalog.get_table(written).await.is_ok() {
                return written.clone();
            }
        }
        self.identifier.clone()
    }
}

/// A procedure's answer: one row, as a plan.
pub(super) fn one_row(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    projection: Option<&Vec<usize>>,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    let batch = RecordBatch::try_new(Arc::clone(schema), columns)?;
    Ok(MemorySourceConfig::try_new_exec(
        &[vec![batch]],
        Arc::clone(schema),
        projection.cloned(),
    )?)
}

fn report_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table", DataType::Utf8, false),
        Field::new("rows_tiered", DataType::UInt64, false),
        Field::new("commits", DataType::UInt64, false),
        Field::new("position", DataType::UInt64, false),
    ]))
}

/// What planning a scan of a procedure's table runs.
#[derive(Debug)]
pub(super) enum Run {
    /// `lakestream_tier`.
    Tier,
    /// `lakestream_set_aside` of the segment at this position.
    SetAside(u64),
    /// A maintenance procedure.
    Maintenance(super::maintenance::Job),
}

/// A procedure as a table: planning a scan of it runs the procedure, and
/// the scan answers its one row.
#[derive(Debug)]
pub(super) struct ProcedureTable {
    pub(super) target: Target,
    pub(super) run: Run,
    pub(super) schema: SchemaRef,
}

#[async_trait]
impl TableProvider for ProcedureTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let identifier = self.target.identifier().await;
        let catalog = &self.target.catalog;
        let name: ArrayRef = Arc::new(StringArray::from(vec![identifier.full_name()]));
        let columns: Vec<ArrayRef> = match &self.run {
            Run::Tier => {
                let report = catalog.tier(&identifier, WhenOff::Refuse).await?;
                vec![
                    name,
                    Arc::new(UInt64Array::from(vec![report.rows])),
                    Arc::new(UInt64Array::from(vec![report.commits])),
                    Arc::new(UInt64Array::from(vec![report.position])),
                ]
            }
            Run::SetAside(position) => {
                let table = catalog.get_table(&identifier).await.map_err(Error::from)?;
                let lazy = catalog
                    .binding()
                    .require("setting a segment aside", &identifier)?;
                let store = lazy.get().await?;
                lazy.check_binding("setting a segment aside of", &table)?;
                let result = catalog
                    .bounded_procedure(
                        SET_ASIDE_FUNCTION,
                        &identifier,
                        store.set_aside(&table, *position),
                    )
                    .await?;
                vec![Arc::new(StringArray::from(vec![result]))]
            }
            Run::Maintenance(job) => {
                let job = job.clone();
                let columns = catalog
                    .maintain(job.procedure().name(), &identifier, |table| {
                        Box::pin(job.run(table))
                    })
                    .await?;
                std::iter::once(name).chain(columns).collect()
            }
        };
        one_row(&self.schema, columns, projection)
    }
}
