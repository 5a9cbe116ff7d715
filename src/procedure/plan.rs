//! A procedure as a table, and its run as a plan. Planning a query of the
//! table (`EXPLAIN` included) runs nothing: the plan's [`ProcedureExec`]
//! runs the procedure when it is executed, once per execution, and answers
//! its one row.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
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
use paimon::catalog::Catalog as _;

use super::maintenance::Job;
use super::store::{SET_ASIDE, TIER};
use super::target::Target;
use crate::catalog::WhenOff;
use crate::error::Error;

/// What a procedure's run does.
#[derive(Debug)]
pub(super) enum Run {
    /// `lakestream_tier`.
    Tier,
    /// `lakestream_set_aside` of the segment at this position.
    SetAside(u64),
    /// A maintenance procedure.
    Maintenance(Job),
}

impl Run {
    /// The procedure's name.
    fn procedure(&self) -> &'static str {
        match self {
            Run::Tier => TIER,
            Run::SetAside(_) => SET_ASIDE,
            Run::Maintenance(job) => job.procedure().name(),
        }
    }
}

/// A procedure called with its arguments, on its table.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) target: Target,
    pub(super) run: Run,
    /// The columns of its one-row answer.
    pub(super) schema: SchemaRef,
}

impl Call {
    /// Runs the procedure, answering its row.
    async fn answer(&self) -> DFResult<RecordBatch> {
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
                    .bounded_procedure(SET_ASIDE, &identifier, store.set_aside(&table, *position))
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
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// A procedure as a table: a scan of it plans a [`ProcedureExec`].
#[derive(Debug)]
pub(super) struct ProcedureTable {
    call: Arc<Call>,
}

impl ProcedureTable {
    pub(super) fn new(target: Target, run: Run, schema: SchemaRef) -> Self {
        Self {
            call: Arc::new(Call {
                target,
                run,
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
