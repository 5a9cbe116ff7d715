//! `lakestream_tier('db.t')`: tiers a lake-stream table's store rows into
//! Paimon now. A table function, so it works in any DataFusion session that
//! has the lake-stream catalogs; `CALL sys.lakestream_tier('db.t')` in
//! `LakeStreamContext` runs the same function.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::WhenOff;
use crate::error::Error;
use crate::planner::PlannerState;

/// The name the table function is registered under.
pub(crate) const TIER_FUNCTION: &str = "lakestream_tier";

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
        // The name is parsed as SQL parses names: quoted parts keep their
        // case and dots, unquoted ones are lower-cased.
        let parts = crate::name::parse_table_name(name).map_err(Error::from)?;
        let reference = match parts.as_slice() {
            [catalog, schema, table] => {
                TableReference::full(catalog.as_str(), schema.as_str(), table.as_str())
            }
            [schema, table] => TableReference::partial(schema.as_str(), table.as_str()),
            [table] => TableReference::bare(table.as_str()),
            _ => return Err(usage()),
        };
        let config = args.session().config_options();
        let (catalog, identifier) = self.state.resolve(&reference, config).ok_or_else(|| {
            DataFusionError::Plan(format!(
                "{TIER_FUNCTION}: '{name}' is not a table of a lake-stream catalog"
            ))
        })?;
        Ok(Arc::new(TierTable {
            catalog,
            identifier,
            schema: report_schema(),
        }))
    }
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
        let batch = RecordBatch::try_new(
            Arc::clone(&self.schema),
            vec![
                Arc::new(StringArray::from(vec![self.identifier.full_name()])),
                Arc::new(UInt64Array::from(vec![report.rows])),
                Arc::new(UInt64Array::from(vec![report.commits])),
                Arc::new(UInt64Array::from(vec![report.position])),
            ],
        )?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}
