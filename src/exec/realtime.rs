//! The union read behind `t$rt`: the Paimon snapshot the store has tiered,
//! plus the store's changes after it.
//!
//! Append tables concatenate the two. Primary-key tables merge by key: the
//! store's bounded change log is read once into the set of keys it touches;
//! Paimon rows with such a key are dropped from the Paimon half, and the
//! store's partition gives the merged version of each touched key. Where the
//! newest version wins (`deduplicate`, the default) that is the store's newest
//! version or delete. Other merge settings (see [`crate::merge`]) need the
//! older version too: the store's partition reads Paimon's rows of the touched
//! keys (a second scan, with key filters only) and merges them with the
//! store's versions in Paimon's order, as [`Merger`] does.

use std::collections::{HashMap, HashSet};
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

use crate::exec::merge::{Merger, Outcome, Version};
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
    /// How versions of a key merge (primary-key tables).
    pub(crate) merger: Arc<Merger>,
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

/// A key in the row format of the key columns: looked up without allocating.
type Key = Box<[u8]>;

/// What the bounded store log says about a primary-key table.
struct StoreState {
    /// Every key the log touches: Paimon's rows for them are replaced or deleted.
    keys: HashSet<Key>,
    /// Where the newest version wins: the newest version of each key the log
    /// leaves alive.
    live: Option<RecordBatch>,
    /// Other merge settings: the log's versions of each key it touches.
    versions: Option<LogVersions>,
}

/// The bounded log's versions of the keys it touches, in write order.
struct LogVersions {
    batches: Vec<RecordBatch>,
    /// Keys in the order of their first write, with their versions.
    keys: Vec<(Key, Vec<Version>)>,
}

/// The merged version of each key a streaming read has seen (deleted ones
/// included: a later version merges with them). A one-row batch each.
type MergedKeys = HashMap<Key, (RecordBatch, bool)>;

/// Reads a lake-stream table: Paimon half and store half, merged.
pub(crate) struct RealtimeScanExec {
    paimon: Option<Arc<dyn ExecutionPlan>>,
    /// Paimon's rows for merging with the store's versions (key filters
    /// only); `None` where the newest version wins or there is no snapshot.
    lookup: Option<Arc<dyn ExecutionPlan>>,
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
        lookup: Option<Arc<dyn ExecutionPlan>>,
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
            lookup,
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
    fn store_stream(&self, context: Arc<TaskContext>) -> DFResult<SendableRecordBatchStream> {
        if self.is_primary_key() && !self.layout.merger.newest_wins() {
            return self.merged_store_stream(context);
        }
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

impl RealtimeScanExec {
    /// The store's partition where an older version matters (see
    /// [`crate::merge`]): the merged version of each key the store touched.
    /// In streaming mode, then the merged version of each key as it is
    /// written, merged with what came before it.
    fn merged_store_stream(
        &self,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        let layout = Arc::clone(&self.layout);
        let log = Arc::clone(&self.log);
        let state = Arc::clone(&self.store_state);
        let lookup = self.lookup.clone();
        let follow = self.mode == ScanMode::Streaming;
        let stream = futures::stream::once(async move {
            let store = store_state(&state, &log, &layout).await?;
            let (rows, merged) = merge_bounded(&store, lookup.as_ref(), &context, &layout).await?;
            let head = futures::stream::once(futures::future::ready(Ok(rows)));
            if !follow {
                return Ok::<_, DataFusionError>(head.boxed());
            }
            let tail = follow_merged(log.follow()?, merged, lookup, context, layout);
            Ok(head.chain(tail).boxed())
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.layout.output_schema),
            stream,
        )))
    }
}

/// Paimon's rows of `keys`, from the lookup scan: the batches that hold them
/// and where each key's row is.
async fn paimon_rows(
    lookup: Option<&Arc<dyn ExecutionPlan>>,
    context: &Arc<TaskContext>,
    keys: &HashSet<Key>,
    layout: &ReadLayout,
) -> DFResult<(Vec<RecordBatch>, HashMap<Key, (usize, usize)>)> {
    let mut batches = Vec::new();
    let mut rows = HashMap::new();
    let Some(plan) = lookup.filter(|_| !keys.is_empty()) else {
        return Ok((batches, rows));
    };
    let converter = key_converter(layout)?;
    for partition in 0..plan.properties().output_partitioning().partition_count() {
        let mut stream = plan.execute(partition, Arc::clone(context))?;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let key_rows = converter.convert_columns(&key_columns(&batch, layout))?;
            let wanted: Vec<u32> = (0..batch.num_rows())
                .filter(|&i| keys.contains(key_rows.row(i).as_ref()))
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let b = batches.len();
            for (j, &i) in wanted.iter().enumerate() {
                rows.insert(key_rows.row(i as usize).as_ref().into(), (b, j));
            }
            let indices = UInt32Array::from(wanted);
            let columns = batch
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &indices, None))
                .collect::<Result<Vec<_>, _>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(indices.len()));
            batches.push(RecordBatch::try_new_with_options(
                Arc::clone(&layout.schema),
                columns,
                &options,
            )?);
        }
    }
    Ok((batches, rows))
}

/// Merges `versions` of each key after the older version `older` holds for
/// it (batch, row and whether it is a delete, in `batches`). Gives the live
/// rows in output layout and the merged version of every key.
fn merge_keys(
    layout: &ReadLayout,
    batches: Vec<RecordBatch>,
    keys: &[(Key, Vec<Version>)],
    older: &HashMap<Key, Version>,
) -> DFResult<(RecordBatch, MergedKeys)> {
    let merger = &layout.merger;
    let inputs = merger.inputs(batches)?;
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(keys.len());
    let mut merged_keys = Vec::with_capacity(keys.len());
    let mut all = Vec::new();
    for (key, versions) in keys {
        all.clear();
        if let Some(version) = older.get(key) {
            all.push(*version);
        }
        all.extend_from_slice(versions);
        if let Some(outcome) = merger.merge(&inputs, &all)? {
            outcomes.push(outcome);
            merged_keys.push(key);
        }
    }
    let refs: Vec<&Outcome> = outcomes.iter().collect();
    let merged = merger.build(&inputs, &refs)?;
    let mut state = HashMap::with_capacity(merged_keys.len());
    let live: BooleanArray = outcomes.iter().map(|o| Some(!o.delete)).collect();
    for (i, (key, outcome)) in merged_keys.into_iter().zip(&outcomes).enumerate() {
        state.insert(key.clone(), (merged.slice(i, 1), outcome.delete));
    }
    let rows = layout.project_output(&filter_record_batch(&merged, &live)?)?;
    Ok((rows, state))
}

/// Paimon's rows as the older versions of their keys, their batches placed
/// from `offset` on.
fn older_versions(
    paimon: HashMap<Key, (usize, usize)>,
    offset: usize,
) -> impl Iterator<Item = (Key, Version)> {
    paimon.into_iter().map(move |(key, (batch, row))| {
        let version = Version {
            batch: offset + batch,
            row,
            delete: false,
        };
        (key, version)
    })
}

/// The bounded read: the store's versions of each touched key merged after
/// Paimon's row of the key.
async fn merge_bounded(
    store: &StoreState,
    lookup: Option<&Arc<dyn ExecutionPlan>>,
    context: &Arc<TaskContext>,
    layout: &ReadLayout,
) -> DFResult<(RecordBatch, MergedKeys)> {
    let versions = store.versions.as_ref().ok_or_else(|| {
        DataFusionError::Internal("the store's versions were not kept for the merge".to_string())
    })?;
    let (paimon_batches, paimon) = paimon_rows(lookup, context, &store.keys, layout).await?;
    let mut batches = versions.batches.clone();
    let older = older_versions(paimon, batches.len()).collect();
    batches.extend(paimon_batches);
    merge_keys(layout, batches, &versions.keys, &older)
}

/// A streaming read's tail: each written batch's keys merged after what the
/// read has seen of them (or Paimon's row, for a key first seen now).
fn follow_merged(
    follow: SendableRecordBatchStream,
    merged: MergedKeys,
    lookup: Option<Arc<dyn ExecutionPlan>>,
    context: Arc<TaskContext>,
    layout: Arc<ReadLayout>,
) -> impl futures::Stream<Item = DFResult<RecordBatch>> + Send {
    let start = (follow, merged);
    futures::stream::try_unfold(start, move |(mut follow, mut merged)| {
        let lookup = lookup.clone();
        let context = Arc::clone(&context);
        let layout = Arc::clone(&layout);
        async move {
            let Some(batch) = follow.next().await.transpose()? else {
                return Ok(None);
            };
            let (batch, kinds) = layout.align_log(&batch)?;
            let keys = group_versions(&[(batch.clone(), kinds)], &layout)?;
            let unseen: HashSet<Key> = keys
                .iter()
                .map(|(key, _)| key)
                .filter(|key| !merged.contains_key(*key))
                .cloned()
                .collect();
            let (paimon_batches, paimon) =
                paimon_rows(lookup.as_ref(), &context, &unseen, &layout).await?;
            // Inputs: the written batch, the seen keys' versions, Paimon's rows.
            // A deleted key's version stays: it still orders what follows.
            let mut batches = vec![batch];
            let mut older = HashMap::new();
            for (key, _) in &keys {
                if let Some((row, delete)) = merged.get(key) {
                    let version = Version {
                        batch: batches.len(),
                        row: 0,
                        delete: *delete,
                    };
                    older.insert(key.clone(), version);
                    batches.push(row.clone());
                }
            }
            older.extend(older_versions(paimon, batches.len()));
            batches.extend(paimon_batches);
            let (rows, state) = merge_keys(&layout, batches, &keys, &older)?;
            merged.extend(state);
            Ok(Some((rows, (follow, merged))))
        }
    })
}

/// Groups the versions in `batches` by key, in the order of each key's first
/// write. Ignored deletes are dropped.
fn group_versions(
    batches: &[(RecordBatch, Int8Array)],
    layout: &ReadLayout,
) -> DFResult<Vec<(Key, Vec<Version>)>> {
    let converter = key_converter(layout)?;
    let ignore_deletes = layout.merger.ignores_deletes();
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut keys: Vec<(Key, Vec<Version>)> = Vec::new();
    for (b, (batch, kinds)) in batches.iter().enumerate() {
        let rows = converter.convert_columns(&key_columns(batch, layout))?;
        for r in 0..batch.num_rows() {
            let delete = row_kind(kinds, r)? == RowKind::Delete;
            if delete && ignore_deletes {
                continue;
            }
            let version = Version {
                batch: b,
                row: r,
                delete,
            };
            let key = rows.row(r);
            match index.get(key.as_ref()) {
                Some(&i) => keys[i].1.push(version),
                None => {
                    index.insert(key.as_ref().into(), keys.len());
                    keys.push((key.as_ref().into(), vec![version]));
                }
            }
        }
    }
    Ok(keys)
}

fn row_kind(kinds: &Int8Array, row: usize) -> DFResult<RowKind> {
    RowKind::from_i8(kinds.value(row))
        .ok_or_else(|| DataFusionError::Internal(format!("unknown row kind {}", kinds.value(row))))
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
        if !layout.merger.newest_wins() {
            let keys = group_versions(&batches, layout)?;
            return Ok(Arc::new(StoreState {
                keys: keys.iter().map(|(key, _)| key.clone()).collect(),
                live: None,
                versions: Some(LogVersions {
                    batches: batches.into_iter().map(|(batch, _)| batch).collect(),
                    keys,
                }),
            }));
        }
        // Deletes Paimon drops (`ignore-delete`) neither hide nor replace a row.
        let ignore_deletes = layout.merger.ignores_deletes();
        // key -> (batch, row, kind) of its newest change.
        let mut newest: HashMap<Key, (usize, usize, bool)> = HashMap::new();
        for (b, (batch, kinds)) in batches.iter().enumerate() {
            let rows = converter.convert_columns(&key_columns(batch, layout))?;
            for r in 0..batch.num_rows() {
                let delete = row_kind(kinds, r)? == RowKind::Delete;
                if delete && ignore_deletes {
                    continue;
                }
                newest.insert(rows.row(r).as_ref().into(), (b, r, delete));
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
            versions: None,
        }))
    })
    .await
    .cloned()
}

impl DisplayAs for RealtimeScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let kind = if self.is_primary_key() {
            format!("merge by key ({})", self.layout.merger.describe())
        } else {
            "concatenate".to_string()
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
            self.lookup.clone(),
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
            self.store_stream(context)
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
