//! The sink that writes a DML statement's rows to the table's store.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::sink::DataSink;
use datafusion::error::Result as DFResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::TryStreamExt;
use paimon::table::Table;

use crate::error::Error;
use crate::store::{table_arrow_schema, LazyStore, WriteKind};

/// Writes all of a statement's rows to the store as one unit. The statement
/// returns once the store has acknowledged them: durable and visible.
#[derive(Debug)]
pub(crate) struct StoreSink {
    store: Arc<LazyStore>,
    table: Table,
    kind: WriteKind,
    /// The schema of the rows arriving (the table provider's).
    schema: SchemaRef,
}

impl StoreSink {
    pub(crate) fn new(
        store: Arc<LazyStore>,
        table: Table,
        kind: WriteKind,
        schema: SchemaRef,
    ) -> Self {
        Self {
            store,
            table,
            kind,
            schema,
        }
    }
}

impl DisplayAs for StoreSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StoreSink: store={}, table={}, kind={:?}",
            self.store.identifier(),
            self.table.identifier().full_name(),
            self.kind
        )
    }
}

#[async_trait]
impl DataSink for StoreSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DFResult<u64> {
        let target = table_arrow_schema(&self.table)?;
        let batches: Vec<RecordBatch> = data
            .and_then(|batch| {
                let converted = batch
                    .columns()
                    .iter()
                    .zip(target.fields())
                    .map(|(column, field)| cast(column, field.data_type()))
                    .collect::<Result<Vec<_>, _>>()
                    .and_then(|columns| RecordBatch::try_new(Arc::clone(&target), columns));
                futures::future::ready(converted.map_err(Into::into))
            })
            .try_collect()
            .await?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows == 0 {
            return Ok(0);
        }
        let table = self.table.clone();
        let kind = self.kind;
        let written = self
            .store
            .call("write rows", |s| async move {
                s.write(&table, kind, batches).await
            })
            .await
            .map_err(|e| match e {
                // A store may still finish a write it did not answer in time.
                Error::StoreTimeout { timeout, .. } => Error::WriteOutcomeUnknown {
                    table: self.table.identifier().full_name(),
                    reason: format!(
                        "it did not finish within {timeout:?}, the bound set by \
                         'lakestream.timeout', and goes on in the background"
                    ),
                },
                other => other,
            })
            .map_err(Error::into_datafusion)?;
        Ok(written)
    }
}
