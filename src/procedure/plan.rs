//! A procedure as a table, and its run as a plan. Planning a query of the
//! table (`EXPLAIN` included) runs nothing: the plan's [`ProcedureExec`]
//! runs the procedure when it is executed, once per execution, and answers
//! its one row.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use paimon::catalog::Identifier;

use super::target::Target;
use crate::catalog::LakeStreamCatalog;

/// What a procedure's run does, implemented by each procedure
/// ([`super::store`], [`super::maintenance`]): this module runs any of them
/// and names none.
#[async_trait]
pub(super) trait Run: fmt::Debug + Send + Sync {
    /// The procedure's name.
    fn procedure(&self) -> &'static str;

    /// Runs the procedure on `identifier` of `catalog`: the columns of its
    /// one-row answer, `name` (the table's name as a column) first where
    /// the answer has it.
    async fn columns(
        &self,
        catalog: &LakeStreamCatalog,
        identifier: &Identifier,
        name: ArrayRef,
    ) -> DFResult<Vec<ArrayRef>>;
}

/// A procedure called with its arguments, on its table.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) target: Target,
    pub(super) run: Box<dyn Run>,
    /// The columns of its one-row answer.
    pub(super) schema: SchemaRef,
}

impl Call {
    /// Runs the procedure, answering its row.
    async fn answer(&self) -> DFResult<RecordBatch> {
        let identifier = self.target.identifier().await;
        let name: ArrayRef = Arc::new(StringArray::from(vec![identifier.full_name()]));
        let columns = self
            .run
            .columns(&self.target.catalog, &identifier, name)
            .await?;
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// A procedure as a table: a scan of it plans a [`ProcedureExec`].
#[derive(Debug)]
pub(super) struct ProcedureTable {
    call: Arc<Call>,
}

impl ProcedureTable {
    pub(super) fn new(target: Target, run: impl Run + 'static, schema: SchemaRef) -> Self {
        Self {
            call: Arc::new(Call {
                target,
                run: Box::new(run),
                schema,
            }),
        }
    }
}

#[async_trait]
impl TableProvider for ProcedureTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.call.schema)
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
        Ok(Arc::new(ProcedureExec::try_new(
            Arc::clone(&self.call),
            projection.cloned(),
        )?))
    }
}

/// Runs a procedure when executed, and answers its row: one partition, one
/// batch of one row.
#[derive(Debug)]
pub(super) struct ProcedureExec {
    call: Arc<Call>,
    projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl ProcedureExec {
    fn try_new(call: Arc<Call>, projection: Option<Vec<usize>>) -> DFResult<Self> {
        let schema = match &projection {
            Some(projection) => Arc::new(call.schema.project(projection)?),
            None => Arc::clone(&call.schema),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(Self {
            call,
            projection,
            properties,
        })
    }
}

impl DisplayAs for ProcedureExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ProcedureExec: procedure={}, table={}",
            self.call.run.procedure(),
            self.call.target.name()
        )
    }
}

impl ExecutionPlan for ProcedureExec {
    fn name(&self) -> &str {
        "ProcedureExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(format!(
                "ProcedureExec got {} children",
                children.len()
            )))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ProcedureExec has no partition {partition}"
            )));
        }
        let call = Arc::clone(&self.call);
        let projection = self.projection.clone();
        let answer = async move {
            let batch = call.answer().await?;
            match projection {
                Some(projection) => Ok(batch.project(&projection)?),
                None => Ok(batch),
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            futures::stream::once(answer),
        )))
    }
}
