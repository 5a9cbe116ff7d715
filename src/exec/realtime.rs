//! The union read behind `t$rt`: the Paimon snapshot the store has tiered,
//! plus the store's changes after it.
//!
//! Append tables concatenate the two. Primary-key tables merge by key: the
//! store's bounded change log is read once into the set of keys it touches and
//! the newest version of each; Paimon rows with such a key are dropped (the
//! store's version or delete wins), and the store's live rows follow.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int8Array, RecordBatch, RecordBatchOptions, UInt32Array,
};
use datafusion::arrow::compute::{cast, concat_batches, filter_record_batch, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OnceCell;

use crate::store::{RowKind, ScanMode, StoreLog, ROW_KIND_COLUMN};

/// How the columns of the read line up.
#[derive(Debug, Clone)]
pub(crate) struct ReadLayout {
    /// Indices into the table's columns that both halves produce, ascending.
    pub(crate) columns: Vec<usize>,
    /// The schema of those columns as the Paimon half produces them.
    pub(crate) schema: SchemaRef,
    /// Positions of the primary-key columns within `columns` (empty: append table).
    pub(crate) keys: Vec<usize>,
    /// Positions within `columns` of the output columns, in output order.
    pub(crate) output: Vec<usize>,
    /// The output schema.
    pub(crate) output_schema: SchemaRef,
}

impl ReadLayout {
    fn project_output(&self, batch: &RecordBatch) -> DFResult<RecordBatch> {
        Ok(batch.project(&self.output)?)
    }

    /// A store log batch (all table columns, then the row kind) in the read's
    /// column layout and types, with its row kinds.
    fn align_log(&self, batch: &RecordBatch) -> DFResult<(RecordBatch, Int8Array)> {
        let kinds_index = batch.num_columns().checked_sub(1).ok_or_else(|| {
            DataFusionError::Internal(format!("a store log batch has no {ROW_KIND_COLUMN} column"))
        })?;
        let kinds = batch
            .column(kinds_index)
            .as_any()
            .downcast_ref::<Int8Array>()
            .cloned()
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "the store log's last column must be {ROW_KIND_COLUMN} (Int8)"
                ))
            })?;
        let columns = self
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|(&index, field)| {
                let column = batch.columns().get(index).ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "a store log batch has {} columns, column {index} was asked for",
                        batch.num_columns()
                    ))
                })?;
                Ok(cast(column, field.data_type())?)
            })
            .collect::<DFResult<Vec<ArrayRef>>>()?;
        // `count(*)` reads no columns: the row count must survive without any.
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let batch = RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)?;
        Ok((batch, kinds))
    }
}

/// What the bounded store log says about a primary-key table.
struct StoreState {
    /// Every key the log touches: Paimon's rows for them are replaced or deleted.
    /// In the row format of the key columns: looked up without allocating.
    keys: HashSet<Box<[u8]>>,
    /// The newest version of each key the log leaves alive.
    live: Option<RecordBatch>,
}

/// Reads a lake-stream table: Paimon half and store half, merged.
pub(crate) struct RealtimeScanExec {
    paimon: Option<Arc<dyn ExecutionPlan>>,
    log: Arc<dyn StoreLog>,
    mode: ScanMode,
    layout: Arc<ReadLayout>,
    store_state: Arc<OnceCell<Arc<StoreState>>>,
    /// Output partitions: the Paimon half's, then the store's, then empty
    /// ones up to the session's target in streaming mode.
    partitions: usize,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for RealtimeScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RealtimeScanExec")
            .field("mode", &self.mode)
            .field("keys", &self.layout.keys)
            .finish_non_exhaustive()
    }
}

impl RealtimeScanExec {
    /// `target_partitions` is the session's: in streaming mode the plan offers
    /// that many partitions, so DataFusion does not put a round-robin
    /// repartition above an unbounded input (which stalls it).
    pub(crate) fn new(
        paimon: Option<Arc<dyn ExecutionPlan>>,
        log: Arc<dyn StoreLog>,
        mode: ScanMode,
        layout: ReadLayout,
        target_partitions: usize,
    ) -> Self {
        let paimon_partitions = paimon.as_ref().map_or(0, |p| {
            p.properties().output_partitioning().partition_count()
        });
        let partitions = match mode {
            ScanMode::Batch => paimon_partitions + 1,
            ScanMode::Streaming => (paimon_partitions + 1).max(target_partitions),
        };
        let boundedness = match mode {
            ScanMode::Batch => Boundedness::Bounded,
            ScanMode::Streaming => Boundedness::Unbounded {
                requires_infinite_memory: false,
            },
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&layout.output_schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            boundedness,
        );
        Self {
            paimon,
            log,
            mode,
            layout: Arc::new(layout),
            store_state: Arc::new(OnceCell::new()),
            partitions,
            properties: Arc::new(properties),
        }
    }

    fn paimon_partitions(&self) -> usize {
        self.paimon.as_ref().map_or(0, |p| {
            p.properties().output_partitioning().partition_count()
        })
    }

    fn is_primary_key(&self) -> bool {
        !self.layout.keys.is_empty()
    }

    /// Paimon's rows, minus those whose key the store has touched.
    fn paimon_stream(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let paimon = self
            .paimon
            .as_ref()
            .ok_or_else(|| DataFusionError::Internal("no Paimon half to read".to_string()))?;
        let input = paimon.execute(partition, context)?;
        let layout = Arc::clone(&self.layout);
        if !self.is_primary_key() {
            let stream = input.map(move |batch| layout.project_output(&batch?));
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.layout.output_schema),
                stream,
            )));
        }
        let state = Arc::clone(&self.store_state);
        let log = Arc::clone(&self.log);
        let stream = futures::stream::once(async move {
            let store = store_state(&state, &log, &layout).await?;
            let converter = key_converter(&layout)?;
            let filtered = input.and_then(move |batch| {
                let result = drop_touched_keys(&batch, &store, &converter, &layout)
                    .and_then(|kept| layout.project_output(&kept));
                futures::future::ready(result)
            });
            Ok::<_, DataFusionError>(filtered)
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.layout.output_schema),
            stream,
        )))
    }

    /// The store's rows: for append tables its log; for primary-key tables the
    /// newest live version of each key. In streaming mode, then every later write.
    fn store_stream(&self) -> DFResult<SendableRecordBatchStream> {
        let layout = Arc::clone(&self.layout);
        let log = Arc::clone(&self.log);
        let follow = self.mode == ScanMode::Streaming;
        let bounded: futures::stream::BoxStream<'static, DFResult<RecordBatch>> =
            if self.is_primary_key() {
                let state = Arc::clone(&self.store_state);
                let layout = Arc::clone(&layout);
                let log = Arc::clone(&log);
                futures::stream::once(async move {
                    let store = store_state(&state, &log, &layout).await?;
                    match &store.live {
                        Some(live) => layout.project_output(live),
                        None => Ok(RecordBatch::new_empty(Arc::clone(&layout.output_schema))),
                    }
                })
                .boxed()
            } else {
                let layout = Arc::clone(&layout);
                log_rows(log.read_bounded()?, layout).boxed()
            };
        let stream = if follow {
            let tail = futures::stream::once(async move {
                Ok::<_, DataFusionError>(log_rows(log.follow()?, layout))
            })
            .try_flatten();
            bounded.chain(tail).boxed()
        } else {
            bounded
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.layout.output_schema),
            stream,
        )))
    }
}

/// Upserted rows of a log stream in output layout. Deletes are not rows: a
/// row stream cannot take a row back, so a later delete is not emitted.
fn log_rows(
    stream: SendableRecordBatchStream,
    layout: Arc<ReadLayout>,
) -> impl futures::Stream<Item = DFResult<RecordBatch>> + Send {
    stream.map(move |batch| {
        let (batch, kinds) = layout.align_log(&batch?)?;
        let upserts: BooleanArray = kinds
            .iter()
            .map(|k| Some(k == Some(RowKind::Upsert.as_i8())))
            .collect();
        let kept = filter_record_batch(&batch, &upserts)?;
        layout.project_output(&kept)
    })
}

fn key_converter(layout: &ReadLayout) -> DFResult<RowConverter> {
    let fields = layout
        .keys
        .iter()
        .map(|&k| SortField::new(layout.schema.field(k).data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

fn key_columns(batch: &RecordBatch, layout: &ReadLayout) -> Vec<ArrayRef> {
    layout
        .keys
        .iter()
        .map(|&k| Arc::clone(batch.column(k)))
        .collect()
}

fn drop_touched_keys(
    batch: &RecordBatch,
    store: &StoreState,
    converter: &RowConverter,
    layout: &ReadLayout,
) -> DFResult<RecordBatch> {
    if store.keys.is_empty() || batch.num_rows() == 0 {
        return Ok(batch.clone());
    }
    let rows = converter.convert_columns(&key_columns(batch, layout))?;
    let keep: BooleanArray = (0..rows.num_rows())
        .map(|i| Some(!store.keys.contains(rows.row(i).as_ref())))
        .collect();
    Ok(filter_record_batch(batch, &keep)?)
}

/// Reads the bounded log once per query and folds it by key, newest last.
async fn store_state(
    cell: &OnceCell<Arc<StoreState>>,
    log: &Arc<dyn StoreLog>,
    layout: &ReadLayout,
) -> DFResult<Arc<StoreState>> {
    cell.get_or_try_init(|| async {
        let converter = key_converter(layout)?;
        let mut batches = Vec::new();
        let mut stream = log.read_bounded()?;
        while let Some(batch) = stream.next().await {
            batches.push(layout.align_log(&batch?)?);
        }
        // key -> (batch, row, kind) of its newest change.
        let mut newest: std::collections::HashMap<Box<[u8]>, (usize, usize, bool)> =
            std::collections::HashMap::new();
        for (b, (batch, kinds)) in batches.iter().enumerate() {
            let rows = converter.convert_columns(&key_columns(batch, layout))?;
            for r in 0..batch.num_rows() {
                let kind = RowKind::from_i8(kinds.value(r)).ok_or_else(|| {
                    DataFusionError::Internal(format!("unknown row kind {}", kinds.value(r)))
                })?;
                newest.insert(rows.row(r).as_ref().into(), (b, r, kind == RowKind::Delete));
            }
        }
        let mut alive: Vec<(usize, usize)> = newest
            .values()
            .filter(|(_, _, deleted)| !deleted)
            .map(|(b, r, _)| (*b, *r))
            .collect();
        alive.sort_unstable();
        let mut parts = Vec::new();
        for (b, (batch, _)) in batches.iter().enumerate() {
            let indices: UInt32Array = alive
                .iter()
                .filter(|(ab, _)| *ab == b)
                .map(|(_, r)| u32::try_from(*r).ok())
                .collect();
            if indices.is_empty() {
                continue;
            }
            let columns = batch
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &indices, None))
                .collect::<Result<Vec<_>, _>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(indices.len()));
            parts.push(RecordBatch::try_new_with_options(
                Arc::clone(&layout.schema),
                columns,
                &options,
            )?);
        }
        let live = if parts.is_empty() {
            None
        } else {
            Some(concat_batches(&layout.schema, &parts)?)
        };
        Ok(Arc::new(StoreState {
            keys: newest.into_keys().collect(),
            live,
        }))
    })
    .await
    .cloned()
}

impl DisplayAs for RealtimeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let kind = if self.is_primary_key() {
            "merge by key"
        } else {
            "concatenate"
        };
        let mode = match self.mode {
            ScanMode::Batch => "batch",
            ScanMode::Streaming => "streaming",
        };
        write!(
            f,
            "RealtimeScanExec: {kind}, {mode}, paimon_partitions={}",
            self.paimon_partitions()
        )
    }
}

impl ExecutionPlan for RealtimeScanExec {
    fn name(&self) -> &str {
        "RealtimeScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.paimon.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let paimon = match (children.len(), self.paimon.is_some()) {
            (0, false) => None,
            (1, true) => children.into_iter().next(),
            (n, _) => {
                return Err(DataFusionError::Internal(format!(
                    "RealtimeScanExec got {n} children"
                )))
            }
        };
        Ok(Arc::new(Self::new(
            paimon,
            Arc::clone(&self.log),
            self.mode,
            self.layout.as_ref().clone(),
            self.partitions,
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let paimon_partitions = self.paimon_partitions();
        if partition < paimon_partitions {
            self.paimon_stream(partition, context)
        } else if partition == paimon_partitions {
            self.store_stream()
        } else if partition < self.partitions {
            Ok(Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.layout.output_schema),
                futures::stream::empty(),
            )))
        } else {
            Err(DataFusionError::Internal(format!(
                "RealtimeScanExec has no partition {partition}"
            )))
        }
    }
}
