//! `lakestream_tier('db.t')`: tiers a lake-stream table's store rows into
//! Paimon now. A table function, so it works in any DataFusion session that
//! has the lake-stream catalogs; `CALL sys.lakestream_tier('db.t')` in
//! `LakeStreamContext` runs the same function.
//!
//! `lakestream_set_aside('db.t', position)`: moves a damaged segment of the
//! store's log aside (its rows are lost), so reads and tiering go on; it
//! answers what the segment held. `CALL sys.lakestream_set_aside(...)` too.

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
        let (catalog, identifier) = resolve(&self.state, &args, TIER_FUNCTION, name)?;
        Ok(Arc::new(TierTable {
            catalog,
            identifier,
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
        let (catalog, identifier) = resolve(&self.state, &args, SET_ASIDE_FUNCTION, name)?;
        Ok(Arc::new(SetAsideTable {
            catalog,
            identifier,
            position,
            schema: Arc::new(Schema::new(vec![Field::new(
                "result",
                DataType::Utf8,
                false,
            )])),
        }))
    }
}

/// Setting a segment aside as a table: planning a scan of it does it.
#[derive(Debug)]
struct SetAsideTable {
    catalog: Arc<crate::catalog::LakeStreamCatalog>,
    identifier: paimon::catalog::Identifier,
    position: u64,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for SetAsideTable {
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
        let table = self
            .catalog
            .get_table(&self.identifier)
            .await
            .map_err(Error::from)?;
        let store = self
            .catalog
            .binding()
            .require("setting a segment aside", &self.identifier)?;
        store.get().await?;
        store.check_binding("setting a segment aside of", &table)?;
        let position = self.position;
        let result = store
            .call("set a segment aside", |s| async move {
                s.set_aside(&table, position).await
            })
            .await?;
        one_row(
            &self.schema,
            vec![Arc::new(StringArray::from(vec![result]))],
            projection,
        )
    }
}

/// The lake-stream table a procedure's name argument names.
fn resolve(
    state: &PlannerState,
    args: &TableFunctionArgs,
    function: &str,
    name: &str,
) -> DFResult<(
    Arc<crate::catalog::LakeStreamCatalog>,
    paimon::catalog::Identifier,
)> {
    // The name is parsed as SQL parses names: quoted parts keep their case
    // and dots, unquoted ones are lower-cased.
    let parts = crate::name::parse_table_name(name).map_err(Error::from)?;
    let reference = match parts.as_slice() {
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
    let config = args.session().config_options();
    state.resolve(&reference, config).ok_or_else(|| {
        DataFusionError::Plan(format!(
            "{function}: '{name}' is not a table of a lake-stream catalog"
        ))
    })
}

/// A procedure's answer: one row, as a plan.
fn one_row(
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

/// Tiering as a table: planning a scan of it runs the tiering.
#[derive(Debug)]
struct TierTable {
    catalog: Arc<crate::catalog::LakeStreamCatalog>,
    identifier: paimon::catalog::Identifier,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for TierTable {
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
        let report = self.catalog.tier(&self.identifier, WhenOff::Refuse).await?;
        one_row(
            &self.schema,
            vec![
                Arc::new(StringArray::from(vec![self.identifier.full_name()])),
                Arc::new(UInt64Array::from(vec![report.rows])),
                Arc::new(UInt64Array::from(vec![report.commits])),
                Arc::new(UInt64Array::from(vec![report.position])),
            ],
            projection,
        )
    }
}
