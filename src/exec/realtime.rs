//! The union read behind `t$rt`: the Paimon snapshot the store has tiered,
//! plus the store's changes after it.
//!
//! Append tables concatenate the two. Primary-key tables merge by key: the
//! store's bounded change log is read into the set of keys it touches (and,
//! while they fit the read's memory budget, its batches; a larger log is read
//! a second time instead, see [`StoreState`]);
//! Paimon rows with such a key are dropped from the Paimon half, and the
//! store's partition gives the merged version of each touched key. Where the
//! newest version wins (`deduplicate`, the default) that is the store's newest
//! version or delete. Other merge settings (see [`crate::merge`]) need the
//! older version too: the store's partition reads Paimon's rows of the touched
//! keys (a second scan, with key filters only) and merges them with the
//! store's versions in Paimon's order, as [`Merger`] does.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, filter_record_batch, interleave, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OnceCell;

use crate::error::Error;
use crate::exec::key_map::KeyMap;
use crate::exec::merge::{Merger, Outcome, Version};
use crate::exec::touched::{Candidates, TouchedKeys};
use crate::store::{ChangeBatch, ChangeStream, RowKind, ScanMode, StoreLog};

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

    /// A store's change batch (rows with all of the table's columns) in the
    /// read's column layout and types, with its row kinds.
    fn align_log(&self, change: ChangeBatch) -> DFResult<Aligned> {
        let (rows, kinds) = change.into_parts();
        let columns = self
            .columns
            .iter()
            .map(|&index| {
                let column = rows.columns().get(index).ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "a store's change batch has {} columns, column {index} of the table \
                         was asked for",
                        rows.num_columns()
                    ))
                })?;
                Ok(Arc::clone(column))
            })
            .collect::<DFResult<Vec<ArrayRef>>>()?;
        // `count(*)` reads no columns: the row count must survive without any.
        let rows = crate::batch::cast_to(&self.schema, columns, rows.num_rows())?;
        Ok((rows, kinds))
    }
}

/// A store's change batch in a read's layout: its rows, and one row kind
/// per row (see [`ReadLayout::align_log`]).
type Aligned = (RecordBatch, Vec<RowKind>);

/// A store's change log (what [`StoreLog::read_bounded`] or
/// [`StoreLog::follow`] gave) in the read's layout: the one place where
/// [`ChangeBatch`]es are taken apart, and where the store's errors become
/// DataFusion's, as errors of a running statement.
fn aligned_log(
    log: crate::error::Result<ChangeStream>,
    layout: Arc<ReadLayout>,
) -> DFResult<AlignedLog> {
    let stream = log.map_err(Error::into_run_time)?;
    Ok(stream
        .map(move |change| layout.align_log(change.map_err(Error::into_run_time)?))
        .boxed())
}

/// A change log in a read's layout (see [`aligned_log`]).
type AlignedLog = BoxStream<'static, DFResult<Aligned>>;

/// A key in the row format of the key columns: looked up without allocating.
type Key = Box<[u8]>;

/// How many bytes of the store log's batches a read keeps in memory before
/// it gives them up and reads the log a second time. The default of
/// `lakestream.union_read_memory_budget` (see [`crate::LakeStreamConfig`]).
pub(crate) const DEFAULT_MEMORY_BUDGET: usize = 64 << 20;

/// Rows per batch of the merged rows the store's partition emits.
const OUTPUT_ROWS: usize = 8192;

/// The high bit of a key's tally: its newest version is a delete.
const TALLY_DELETE: u32 = 1 << 31;

/// What the first read of the bounded store log says about a primary-key table.
///
/// A backlog can be far larger than memory, so the first read keeps only
/// the keys the log touches and a tally of their versions; the log's own
/// batches are kept only while they fit the read's memory budget. Past it,
/// the store's partition reads the log a second time ([`StoreHalf::Reread`]).
struct StoreState {
    /// Every key the log touches, numbered in the order of its first write:
    /// Paimon's rows for them are replaced or deleted. Deletes Paimon drops
    /// (`ignore-delete`) neither hide nor replace a row, so they do not count.
    keys: KeyMap,
    /// A cheap first test for Paimon rows whose key is not in `keys`.
    touched: TouchedKeys,
    /// Per key (by its number in `keys`): how many versions the log holds,
    /// with [`TALLY_DELETE`] set when the newest is a delete. Where the newest
    /// version wins, the winner is the key's last version: the second read
    /// finds it by counting the key's versions again, which holds whatever
    /// order a store gives the rows of different keys in.
    tallies: Vec<u32>,
    /// How many rows the log gave, of every kind: the second read must give as many.
    rows: u64,
    half: StoreHalf,
}

/// The store's half of the read, as far as the first read got.
enum StoreHalf {
    /// The newest version wins and the log fit the budget: the newest live
    /// version of each key.
    Live(Option<RecordBatch>),
    /// Other merge settings, and the log fit the budget: its versions of each key.
    Versions(LogVersions),
    /// The log did not fit the budget: the store's partition reads it again.
    Reread,
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
    /// Bytes of the store log's batches kept in memory; past them the log is
    /// read twice (see [`StoreState`]).
    memory_budget: usize,
    /// `store_log_reads`: how often a primary-key read read the bounded log
    /// (2 where it did not fit the budget), for `EXPLAIN ANALYZE`.
    metrics: ExecutionPlanMetricsSet,
    log_reads: Count,
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
    /// `memory_budget` bounds the bytes of store log batches the read keeps.
    pub(crate) fn new(
        paimon: Option<Arc<dyn ExecutionPlan>>,
        lookup: Option<Arc<dyn ExecutionPlan>>,
        log: Arc<dyn StoreLog>,
        mode: ScanMode,
        layout: ReadLayout,
        target_partitions: usize,
        memory_budget: usize,
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
        let metrics = ExecutionPlanMetricsSet::new();
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
            memory_budget,
            log_reads: MetricBuilder::new(&metrics).global_counter("store_log_reads"),
            metrics,
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
        let budget = self.memory_budget;
        let reads = self.log_reads.clone();
        let stream = futures::stream::once(async move {
            let store = store_state(&state, &log, &layout, budget, &reads).await?;
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
        let bounded: BoxStream<'static, DFResult<RecordBatch>> = if self.is_primary_key() {
            let state = Arc::clone(&self.store_state);
            let layout = Arc::clone(&layout);
            let log = Arc::clone(&log);
            let budget = self.memory_budget;
            let reads = self.log_reads.clone();
            futures::stream::once(async move {
                let store = store_state(&state, &log, &layout, budget, &reads).await?;
                let rows = match &store.half {
                    StoreHalf::Live(Some(live)) => {
                        futures::stream::once(futures::future::ready(layout.project_output(live)))
                            .boxed()
                    }
                    StoreHalf::Live(None) => {
                        let empty = RecordBatch::new_empty(Arc::clone(&layout.output_schema));
                        futures::stream::once(futures::future::ready(Ok(empty))).boxed()
                    }
                    StoreHalf::Versions(_) => {
                        return Err(DataFusionError::Internal(
                            "the store's versions were kept where the newest version wins"
                                .to_string(),
                        ))
                    }
                    StoreHalf::Reread => {
                        reads.add(1);
                        let log = aligned_log(log.read_bounded(), Arc::clone(&layout))?;
                        newest_live_rows(Arc::clone(&store), log, layout)?.boxed()
                    }
                };
                Ok::<_, DataFusionError>(rows)
            })
            .try_flatten()
            .boxed()
        } else {
            let layout = Arc::clone(&layout);
            log_rows(
                aligned_log(log.read_bounded(), Arc::clone(&layout))?,
                layout,
            )
            .boxed()
        };
        let stream = if follow {
            let tail = futures::stream::once(async move {
                let follow = aligned_log(log.follow(), Arc::clone(&layout))?;
                Ok::<_, DataFusionError>(log_rows(follow, layout))
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
        let budget = self.memory_budget;
        let reads = self.log_reads.clone();
        let stream = futures::stream::once(async move {
            let store = store_state(&state, &log, &layout, budget, &reads).await?;
            let (rows, merged) = match &store.half {
                StoreHalf::Reread => {
                    reads.add(1);
                    let lookup = lookup.as_ref();
                    fold_bounded(&store, &log, lookup, &context, &layout, follow, budget).await?
                }
                _ => merge_bounded(&store, lookup.as_ref(), &context, &layout).await?,
            };
            let head = futures::stream::iter(rows.into_iter().map(Ok));
            if !follow {
                return Ok::<_, DataFusionError>(head.boxed());
            }
            let follow = aligned_log(log.follow(), Arc::clone(&layout))?;
            let tail = follow_merged(follow, merged, lookup, context, layout);
            Ok(head.chain(tail).boxed())
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.layout.output_schema),
            stream,
        )))
    }
}

/// Paimon's rows of `keys`, from the lookup scan: the batches that hold them,
/// and for each key found its number in `keys`, batch and row.
async fn paimon_rows(
    lookup: Option<&Arc<dyn ExecutionPlan>>,
    context: &Arc<TaskContext>,
    keys: &KeyMap,
    layout: &ReadLayout,
) -> DFResult<(Vec<RecordBatch>, Vec<(usize, Version)>)> {
    let mut batches = Vec::new();
    let mut rows = Vec::new();
    let Some(plan) = lookup.filter(|_| !keys.is_empty()) else {
        return Ok((batches, rows));
    };
    let converter = key_converter(layout)?;
    for partition in 0..plan.properties().output_partitioning().partition_count() {
        let mut stream = plan.execute(partition, Arc::clone(context))?;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let key_rows = converter.convert_columns(&key_columns(&batch, layout))?;
            let mut wanted: Vec<u32> = Vec::new();
            for i in 0..batch.num_rows() {
                let Some(entry) = keys.get(key_rows.row(i).as_ref()) else {
                    continue;
                };
                let version = Version {
                    batch: batches.len(),
                    row: wanted.len(),
                    delete: false,
                };
                rows.push((entry, version));
                wanted.push(row_index(i)?);
            }
            if wanted.is_empty() {
                continue;
            }
            let indices = UInt32Array::from(wanted);
            batches.push(take_rows(&batch, &indices, layout)?);
        }
    }
    Ok((batches, rows))
}

/// A row number as `take` wants it.
fn row_index(row: usize) -> DFResult<u32> {
    u32::try_from(row)
        .map_err(|_| DataFusionError::Internal(format!("row {row} of a batch is past u32::MAX")))
}

/// Rows `indices` of `batch` (in the read's layout).
fn take_rows(
    batch: &RecordBatch,
    indices: &UInt32Array,
    layout: &ReadLayout,
) -> DFResult<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), indices, None))
        .collect::<Result<Vec<_>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(indices.len()));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(&layout.schema),
        columns,
        &options,
    )?)
}

/// Rows picked from `batches` as (batch, row), in the read's layout.
fn gather(
    batches: &[RecordBatch],
    picks: &[(usize, usize)],
    layout: &ReadLayout,
) -> DFResult<RecordBatch> {
    if picks.is_empty() {
        // `interleave` wants at least one array to take from.
        return Ok(RecordBatch::new_empty(Arc::clone(&layout.schema)));
    }
    let columns = (0..layout.schema.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            Ok(interleave(&arrays, picks)?)
        })
        .collect::<DFResult<Vec<ArrayRef>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(picks.len()));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(&layout.schema),
        columns,
        &options,
    )?)
}

/// Merges `versions` of each key after the older version `older` holds for
/// it (batch, row and whether it is a delete, in `batches`). Gives one merged
/// row per key that has an outcome (in the read's layout), and for each row
/// the key's position in `keys` and whether the merged version is a delete.
fn merge_group(
    layout: &ReadLayout,
    batches: Vec<RecordBatch>,
    keys: &[(Key, Vec<Version>)],
    older: &HashMap<Key, Version>,
) -> DFResult<(RecordBatch, Vec<(usize, bool)>)> {
    let merger = &layout.merger;
    let inputs = merger.inputs(batches)?;
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(keys.len());
    let mut merged_keys = Vec::with_capacity(keys.len());
    let mut all = Vec::new();
    for (i, (key, versions)) in keys.iter().enumerate() {
        all.clear();
        if let Some(version) = older.get(key) {
            all.push(*version);
        }
        all.extend_from_slice(versions);
        if let Some(outcome) = merger.merge(&inputs, &all)? {
            merged_keys.push((i, outcome.delete));
            outcomes.push(outcome);
        }
    }
    let refs: Vec<&Outcome> = outcomes.iter().collect();
    let merged = merger.build(&inputs, &refs)?;
    Ok((merged, merged_keys))
}

/// [`merge_group`], giving the live rows in output layout and the merged
/// version of every key.
fn merge_keys(
    layout: &ReadLayout,
    batches: Vec<RecordBatch>,
    keys: &[(Key, Vec<Version>)],
    older: &HashMap<Key, Version>,
) -> DFResult<(RecordBatch, MergedKeys)> {
    let (merged, merged_keys) = merge_group(layout, batches, keys, older)?;
    let mut state = HashMap::with_capacity(merged_keys.len());
    let live: BooleanArray = merged_keys
        .iter()
        .map(|(_, delete)| Some(!delete))
        .collect();
    for (row, &(i, delete)) in merged_keys.iter().enumerate() {
        state.insert(keys[i].0.clone(), (merged.slice(row, 1), delete));
    }
    let rows = layout.project_output(&filter_record_batch(&merged, &live)?)?;
    Ok((rows, state))
}

/// Paimon's rows as the older versions of the keys of `keys`, their batches
/// placed from `offset` on.
fn older_versions<'a>(
    keys: &'a KeyMap,
    paimon: Vec<(usize, Version)>,
    offset: usize,
) -> impl Iterator<Item = (Key, Version)> + 'a {
    paimon.into_iter().map(move |(entry, version)| {
        let version = Version {
            batch: offset + version.batch,
            ..version
        };
        (keys.key(entry).into(), version)
    })
}

/// The bounded read of a log that fit in memory: the store's versions of
/// each touched key merged after Paimon's row of the key.
async fn merge_bounded(
    store: &StoreState,
    lookup: Option<&Arc<dyn ExecutionPlan>>,
    context: &Arc<TaskContext>,
    layout: &ReadLayout,
) -> DFResult<(Vec<RecordBatch>, MergedKeys)> {
    let StoreHalf::Versions(versions) = &store.half else {
        return Err(DataFusionError::Internal(
            "the store's versions were not kept for the merge".to_string(),
        ));
    };
    let (paimon_batches, paimon) = paimon_rows(lookup, context, &store.keys, layout).await?;
    let mut batches = versions.batches.clone();
    let older = older_versions(&store.keys, paimon, batches.len()).collect();
    batches.extend(paimon_batches);
    let (rows, merged) = merge_keys(layout, batches, &versions.keys, &older)?;
    Ok((vec![rows], merged))
}

/// Where a key's merged version so far is: row `row` of batch `batch` of a
/// [`Fold`].
#[derive(Debug, Clone, Copy)]
struct Slot {
    batch: usize,
    row: usize,
    delete: bool,
}

/// Merged rows a second read of the log folds into, by key number: memory
/// for one merged row per key, plus rows superseded since the last
/// compaction (at most twice as many, or the read's memory budget).
struct Fold {
    batches: Vec<RecordBatch>,
    slots: Vec<Option<Slot>>,
    /// Rows in `batches`.
    held: usize,
    /// Bytes of `batches`.
    held_bytes: usize,
    /// Slots that are set.
    live: usize,
    /// Bytes of batches held whatever share of their rows is superseded.
    budget: usize,
}

impl Fold {
    /// A fold of `keys` keys, starting from Paimon's rows (see [`paimon_rows`]).
    fn new(
        keys: usize,
        batches: Vec<RecordBatch>,
        paimon: Vec<(usize, Version)>,
        budget: usize,
    ) -> Self {
        let mut slots = vec![None; keys];
        let live = paimon.len();
        for (entry, version) in paimon {
            slots[entry] = Some(Slot {
                batch: version.batch,
                row: version.row,
                delete: version.delete,
            });
        }
        Self {
            held: batches.iter().map(RecordBatch::num_rows).sum(),
            held_bytes: batches.iter().map(RecordBatch::get_array_memory_size).sum(),
            batches,
            slots,
            live,
            budget,
        }
    }

    /// Adds `batch` of merged rows; row `i` is the version of key `keys[i].0`.
    fn push(&mut self, batch: RecordBatch, keys: impl IntoIterator<Item = (usize, bool)>) {
        let id = self.batches.len();
        self.held += batch.num_rows();
        self.held_bytes = self
            .held_bytes
            .saturating_add(batch.get_array_memory_size());
        self.batches.push(batch);
        for (row, (entry, delete)) in keys.into_iter().enumerate() {
            let slot = &mut self.slots[entry];
            if slot.is_none() {
                self.live += 1;
            }
            *slot = Some(Slot {
                batch: id,
                row,
                delete,
            });
        }
    }

    /// The merged versions of `entries` that have one, as one batch.
    fn pick(&self, entries: &[usize], layout: &ReadLayout) -> DFResult<RecordBatch> {
        let picks: Vec<(usize, usize)> = entries
            .iter()
            .filter_map(|&entry| self.slots[entry].map(|slot| (slot.batch, slot.row)))
            .collect();
        gather(&self.batches, &picks, layout)
    }

    /// Copies the current versions into one batch once superseded rows
    /// outnumber them, so the batches they were in can go.
    fn compact_if_sparse(&mut self, layout: &ReadLayout) -> DFResult<()> {
        if self.held <= 2 * self.live || self.held_bytes <= self.budget {
            return Ok(());
        }
        let entries: Vec<usize> = (0..self.slots.len())
            .filter(|&entry| self.slots[entry].is_some())
            .collect();
        let batch = self.pick(&entries, layout)?;
        for (row, &entry) in entries.iter().enumerate() {
            if let Some(slot) = self.slots[entry].as_mut() {
                *slot = Slot {
                    batch: 0,
                    row,
                    delete: slot.delete,
                };
            }
        }
        self.held = batch.num_rows();
        self.held_bytes = batch.get_array_memory_size();
        self.batches = vec![batch];
        Ok(())
    }
}

/// The bounded read of a log that did not fit in memory: Paimon's rows of
/// the touched keys, then each batch of a second read of the log merged
/// after what came before it, key by key. Versions merge in the same order
/// as in [`merge_bounded`] (Paimon's row, then the log's in write order), so
/// the result is the same; only the merged version of each key is held.
/// The live rows come out in the order of each key's first write, as there.
async fn fold_bounded(
    store: &StoreState,
    log: &Arc<dyn StoreLog>,
    lookup: Option<&Arc<dyn ExecutionPlan>>,
    context: &Arc<TaskContext>,
    layout: &Arc<ReadLayout>,
    follow: bool,
    budget: usize,
) -> DFResult<(Vec<RecordBatch>, MergedKeys)> {
    let (paimon_batches, paimon) = paimon_rows(lookup, context, &store.keys, layout).await?;
    let mut fold = Fold::new(store.keys.len(), paimon_batches, paimon, budget);
    let mut stream = aligned_log(log.read_bounded(), Arc::clone(layout))?;
    let mut rows: u64 = 0;
    while let Some(change) = stream.next().await {
        let (batch, kinds) = change?;
        rows += batch.num_rows() as u64;
        let keys = group_versions(&[(batch.clone(), kinds)], layout)?;
        let entries = keys
            .iter()
            .map(|(key, _)| store.keys.get(key).ok_or_else(log_changed))
            .collect::<DFResult<Vec<usize>>>()?;
        // Inputs: the log's batch, then the merged versions so far. A
        // deleted key's version stays: it still orders what follows.
        let mut older = HashMap::new();
        let mut picks = Vec::new();
        for ((key, _), &entry) in keys.iter().zip(&entries) {
            if let Some(slot) = fold.slots[entry] {
                let version = Version {
                    batch: 1,
                    row: picks.len(),
                    delete: slot.delete,
                };
                older.insert(key.clone(), version);
                picks.push((slot.batch, slot.row));
            }
        }
        let older_rows = gather(&fold.batches, &picks, layout)?;
        let (merged, outcomes) = merge_group(layout, vec![batch, older_rows], &keys, &older)?;
        fold.push(
            merged,
            outcomes.into_iter().map(|(i, delete)| (entries[i], delete)),
        );
        fold.compact_if_sparse(layout)?;
    }
    if rows != store.rows {
        return Err(log_changed());
    }
    // The live rows, in key order, a batch at a time.
    let live: Vec<usize> = (0..fold.slots.len())
        .filter(|&entry| fold.slots[entry].is_some_and(|slot| !slot.delete))
        .collect();
    let mut out = Vec::with_capacity(live.len().div_ceil(OUTPUT_ROWS));
    for chunk in live.chunks(OUTPUT_ROWS) {
        let batch = fold.pick(chunk, layout)?;
        out.push(layout.project_output(&batch)?);
    }
    let mut merged = HashMap::new();
    if follow {
        for (entry, slot) in fold.slots.iter().enumerate() {
            if let Some(slot) = slot {
                let row = fold.batches[slot.batch].slice(slot.row, 1);
                merged.insert(store.keys.key(entry).into(), (row, slot.delete));
            }
        }
    }
    Ok((out, merged))
}

/// The error of a second read of the store's log that does not give the
/// rows the first gave.
fn log_changed() -> DataFusionError {
    DataFusionError::Execution(
        "the store's log gave different rows when the union read read it a second time; \
         a bounded read must give the same rows each time"
            .to_string(),
    )
}

/// A streaming read's tail: each written batch's keys merged after what the
/// read has seen of them (or Paimon's row, for a key first seen now).
fn follow_merged(
    follow: AlignedLog,
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
            let Some((batch, kinds)) = follow.next().await.transpose()? else {
                return Ok(None);
            };
            let keys = group_versions(&[(batch.clone(), kinds)], &layout)?;
            let mut unseen = KeyMap::new();
            for (key, _) in &keys {
                if !merged.contains_key(key) {
                    unseen.insert(key)?;
                }
            }
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
            older.extend(older_versions(&unseen, paimon, batches.len()));
            batches.extend(paimon_batches);
            let (rows, state) = merge_keys(&layout, batches, &keys, &older)?;
            merged.extend(state);
            Ok(Some((rows, (follow, merged))))
        }
    })
}

/// Groups the versions in `batches` by key, in the order of each key's first
/// write. Ignored deletes are dropped.
fn group_versions(batches: &[Aligned], layout: &ReadLayout) -> DFResult<Vec<(Key, Vec<Version>)>> {
    let converter = key_converter(layout)?;
    let ignore_deletes = layout.merger.ignores_deletes();
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut keys: Vec<(Key, Vec<Version>)> = Vec::new();
    for (b, (batch, kinds)) in batches.iter().enumerate() {
        let rows = converter.convert_columns(&key_columns(batch, layout))?;
        for (r, kind) in kinds.iter().enumerate() {
            let delete = *kind == RowKind::Delete;
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

/// Upserted rows of a change log in output layout. Deletes are not rows: a
/// row stream cannot take a row back, so a later delete is not emitted.
fn log_rows(
    changes: AlignedLog,
    layout: Arc<ReadLayout>,
) -> impl futures::Stream<Item = DFResult<RecordBatch>> + Send {
    changes.map(move |change| {
        let (batch, kinds) = change?;
        if kinds.iter().all(|kind| *kind == RowKind::Upsert) {
            return layout.project_output(&batch);
        }
        let upserts: BooleanArray = kinds
            .iter()
            .map(|kind| Some(*kind == RowKind::Upsert))
            .collect();
        layout.project_output(&filter_record_batch(&batch, &upserts)?)
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

/// `batch` of Paimon's rows without the rows whose key the store's log
/// touches. A batch that loses no row passes as it is, uncopied; only rows
/// the cheap tests of [`TouchedKeys`] cannot clear are converted to the row
/// format and looked up.
fn drop_touched_keys(
    batch: &RecordBatch,
    store: &StoreState,
    converter: &RowConverter,
    layout: &ReadLayout,
) -> DFResult<RecordBatch> {
    if store.keys.is_empty() || batch.num_rows() == 0 {
        return Ok(batch.clone());
    }
    let keys = key_columns(batch, layout);
    let mut keep = vec![true; batch.num_rows()];
    let mut dropped = false;
    match store.touched.candidates(&keys)? {
        Candidates::None => return Ok(batch.clone()),
        Candidates::All => {
            let rows = converter.convert_columns(&keys)?;
            for (i, keep) in keep.iter_mut().enumerate() {
                if store.keys.contains(rows.row(i).as_ref()) {
                    *keep = false;
                    dropped = true;
                }
            }
        }
        Candidates::Rows(candidates) => {
            let indices = UInt32Array::from(candidates);
            let picked = keys
                .iter()
                .map(|column| take(column.as_ref(), &indices, None))
                .collect::<Result<Vec<_>, _>>()?;
            let rows = converter.convert_columns(&picked)?;
            for (i, &row) in indices.values().iter().enumerate() {
                if store.keys.contains(rows.row(i).as_ref()) {
                    if let Some(keep) = keep.get_mut(row as usize) {
                        *keep = false;
                        dropped = true;
                    }
                }
            }
        }
    }
    if !dropped {
        return Ok(batch.clone());
    }
    Ok(filter_record_batch(batch, &BooleanArray::from(keep))?)
}

/// Reads the bounded log once per query: the keys it touches and their
/// tallies, and, while they fit `budget` bytes, its batches (see [`StoreState`]).
async fn store_state(
    cell: &OnceCell<Arc<StoreState>>,
    log: &Arc<dyn StoreLog>,
    layout: &Arc<ReadLayout>,
    budget: usize,
    reads: &Count,
) -> DFResult<Arc<StoreState>> {
    cell.get_or_try_init(|| async {
        let converter = key_converter(layout)?;
        // Deletes Paimon drops (`ignore-delete`) neither hide nor replace a row.
        let ignore_deletes = layout.merger.ignores_deletes();
        let mut keys = KeyMap::new();
        let mut touched = TouchedKeys::new(
            layout
                .keys
                .iter()
                .map(|&k| layout.schema.field(k).data_type().clone())
                .collect(),
        );
        let mut tallies: Vec<u32> = Vec::new();
        let mut rows: u64 = 0;
        let mut kept = Some(Vec::new());
        let mut kept_bytes: usize = 0;
        reads.add(1);
        let mut stream = aligned_log(log.read_bounded(), Arc::clone(layout))?;
        while let Some(change) = stream.next().await {
            let (batch, kinds) = change?;
            let key_cols = key_columns(&batch, layout);
            touched.add(&key_cols, |r| {
                !(ignore_deletes && kinds.get(r) == Some(&RowKind::Delete))
            })?;
            let key_rows = converter.convert_columns(&key_cols)?;
            // Each counted row's key number, for picking the winners of a
            // kept batch without converting and looking its keys up again.
            let mut entries = Vec::with_capacity(if kept.is_some() { kinds.len() } else { 0 });
            for (r, kind) in kinds.iter().enumerate() {
                let delete = *kind == RowKind::Delete;
                if delete && ignore_deletes {
                    continue;
                }
                let (entry, new) = keys.insert(key_rows.row(r).as_ref())?;
                if new {
                    tallies.push(0);
                }
                tallies[entry] = tally(tallies[entry], delete)?;
                if kept.is_some() {
                    entries.push(entry_number(entry)?);
                }
            }
            rows += batch.num_rows() as u64;
            if let Some(batches) = kept.as_mut() {
                kept_bytes = kept_bytes
                    .saturating_add(batch.get_array_memory_size())
                    .saturating_add(kinds.capacity() * size_of::<RowKind>())
                    .saturating_add(entries.capacity() * size_of::<u32>());
                if kept_bytes > budget {
                    // Past the budget: the store's partition reads the log again.
                    kept = None;
                } else {
                    batches.push(Kept {
                        batch,
                        kinds,
                        entries,
                    });
                }
            }
        }
        let mut state = StoreState {
            keys,
            touched,
            tallies,
            rows,
            half: StoreHalf::Reread,
        };
        let Some(batches) = kept else {
            return Ok(Arc::new(state));
        };
        state.half = if layout.merger.newest_wins() {
            let mut winners = Winners::new(state.tallies.len(), layout)?;
            let mut parts = Vec::new();
            for kept in &batches {
                let live = winners.pick(&state, &kept.kinds, &kept.entries)?;
                if live.true_count() > 0 {
                    parts.push(filter_record_batch(&kept.batch, &live)?);
                }
            }
            winners.finish(&state)?;
            StoreHalf::Live(if parts.is_empty() {
                None
            } else {
                Some(concat_batches(&layout.schema, &parts)?)
            })
        } else {
            let batches: Vec<Aligned> = batches
                .into_iter()
                .map(|kept| (kept.batch, kept.kinds))
                .collect();
            let keys = group_versions(&batches, layout)?;
            StoreHalf::Versions(LogVersions {
                batches: batches.into_iter().map(|(batch, _)| batch).collect(),
                keys,
            })
        };
        Ok(Arc::new(state))
    })
    .await
    .cloned()
}

/// A log batch the first read kept (see [`StoreState`]): its rows, their
/// kinds, and the key number (in [`StoreState::keys`]) of each row but the
/// deletes Paimon ignores.
struct Kept {
    batch: RecordBatch,
    kinds: Vec<RowKind>,
    entries: Vec<u32>,
}

/// A key's number in [`StoreState::keys`] as [`Kept::entries`] holds it.
fn entry_number(entry: usize) -> DFResult<u32> {
    u32::try_from(entry)
        .map_err(|_| DataFusionError::Internal(format!("key number {entry} is past u32::MAX")))
}

/// A key's tally after one more version (see [`StoreState::tallies`]).
fn tally(previous: u32, delete: bool) -> DFResult<u32> {
    let count = (previous & !TALLY_DELETE) + 1;
    if count >= TALLY_DELETE {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "a key has more than {} versions in the store's log",
            TALLY_DELETE - 1
        )));
    }
    Ok(if delete { count | TALLY_DELETE } else { count })
}

/// Finds, in a read of the log, the newest version of each key where it is
/// not a delete: a key's last version, by counting the key's versions
/// against its tally. Memory: a counter per key.
struct Winners {
    seen: Vec<u32>,
    rows: u64,
    converter: RowConverter,
    ignore_deletes: bool,
}

impl Winners {
    fn new(keys: usize, layout: &ReadLayout) -> DFResult<Self> {
        Ok(Self {
            seen: vec![0; keys],
            rows: 0,
            converter: key_converter(layout)?,
            ignore_deletes: layout.merger.ignores_deletes(),
        })
    }

    /// Which rows of the next batch of the log are their key's live winner.
    fn filter(
        &mut self,
        state: &StoreState,
        batch: &RecordBatch,
        kinds: &[RowKind],
        layout: &ReadLayout,
    ) -> DFResult<BooleanArray> {
        let key_rows = self
            .converter
            .convert_columns(&key_columns(batch, layout))?;
        let entries = kinds
            .iter()
            .enumerate()
            .filter(|(_, kind)| !(self.ignore_deletes && **kind == RowKind::Delete))
            .map(|(r, _)| {
                let entry = state
                    .keys
                    .get(key_rows.row(r).as_ref())
                    .ok_or_else(log_changed)?;
                entry_number(entry)
            })
            .collect::<DFResult<Vec<u32>>>()?;
        self.pick(state, kinds, &entries)
    }

    /// [`Self::filter`] for a batch whose rows' key numbers are known:
    /// `entries` has one for each row but the deletes Paimon ignores.
    fn pick(
        &mut self,
        state: &StoreState,
        kinds: &[RowKind],
        entries: &[u32],
    ) -> DFResult<BooleanArray> {
        self.rows += kinds.len() as u64;
        let mut entries = entries.iter();
        let mut keep = Vec::with_capacity(kinds.len());
        for kind in kinds {
            let delete = *kind == RowKind::Delete;
            if delete && self.ignore_deletes {
                keep.push(false);
                continue;
            }
            let entry = *entries.next().ok_or_else(log_changed)? as usize;
            let (seen, tally) = match (self.seen.get_mut(entry), state.tallies.get(entry)) {
                (Some(seen), Some(tally)) => (seen, *tally),
                _ => return Err(log_changed()),
            };
            *seen += 1;
            let count = tally & !TALLY_DELETE;
            if *seen > count {
                return Err(log_changed());
            }
            keep.push(*seen == count && tally & TALLY_DELETE == 0);
        }
        if entries.next().is_some() {
            return Err(log_changed());
        }
        Ok(BooleanArray::from(keep))
    }

    /// Checks the read gave every row the first read gave.
    fn finish(&self, state: &StoreState) -> DFResult<()> {
        let complete = self.rows == state.rows
            && self
                .seen
                .iter()
                .zip(&state.tallies)
                .all(|(seen, tally)| *seen == tally & !TALLY_DELETE);
        if complete {
            Ok(())
        } else {
            Err(log_changed())
        }
    }
}

/// The second read of a log too large for memory, where the newest version
/// wins: each batch's rows that are their key's live winner, in log order.
fn newest_live_rows(
    state: Arc<StoreState>,
    log: AlignedLog,
    layout: Arc<ReadLayout>,
) -> DFResult<impl futures::Stream<Item = DFResult<RecordBatch>> + Send> {
    let start = (log, Winners::new(state.tallies.len(), &layout)?);
    Ok(futures::stream::try_unfold(
        start,
        move |(mut log, mut winners)| {
            let state = Arc::clone(&state);
            let layout = Arc::clone(&layout);
            async move {
                // Skips batches without a winner rather than emitting empty ones.
                while let Some(change) = log.next().await {
                    let (batch, kinds) = change?;
                    let live = winners.filter(&state, &batch, &kinds, &layout)?;
                    if live.true_count() > 0 {
                        let rows = layout.project_output(&filter_record_batch(&batch, &live)?)?;
                        return Ok(Some((rows, (log, winners))));
                    }
                }
                winners.finish(&state)?;
                Ok(None)
            }
        },
    ))
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

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
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
            self.memory_budget,
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

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int32Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema};

    use super::*;
    use crate::merge::{Engine, MergeSpec};

    /// A bounded log of fixed batches.
    #[derive(Debug)]
    struct FixedLog(Vec<ChangeBatch>);

    impl StoreLog for FixedLog {
        fn read_bounded(&self) -> crate::error::Result<ChangeStream> {
            let batches: Vec<_> = self.0.iter().cloned().map(Ok).collect();
            Ok(futures::stream::iter(batches).boxed())
        }

        fn follow(&self) -> crate::error::Result<ChangeStream> {
            Ok(futures::stream::empty().boxed())
        }
    }

    fn layout(ignore_delete: bool) -> Arc<ReadLayout> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("n", DataType::Int64, true),
        ]));
        let spec = MergeSpec {
            engine: Engine::Deduplicate,
            sequence_fields: Vec::new(),
            sequence_descending: false,
            ignore_delete,
            aggregates: HashMap::new(),
        };
        Arc::new(ReadLayout {
            columns: vec![0, 1],
            schema: Arc::clone(&schema),
            keys: vec![0],
            output: vec![0, 1],
            output_schema: Arc::clone(&schema),
            merger: Arc::new(Merger::new(&spec, Arc::clone(&schema)).unwrap()),
        })
    }

    fn change(layout: &ReadLayout, rows: &[(i32, i64, RowKind)]) -> ChangeBatch {
        let ids = Int32Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>());
        let ns = Int64Array::from(rows.iter().map(|r| r.1).collect::<Vec<_>>());
        let batch = RecordBatch::try_new(
            Arc::clone(&layout.schema),
            vec![Arc::new(ids), Arc::new(ns)],
        )
        .unwrap();
        ChangeBatch::try_new(batch, rows.iter().map(|r| r.2).collect()).unwrap()
    }

    /// The live rows of the store's half, sorted, with the log kept in
    /// memory (`budget` large) or read a second time (`budget` 0).
    async fn live_rows(layout: &Arc<ReadLayout>, budget: usize) -> Vec<(i32, i64)> {
        use RowKind::{Delete, Upsert};
        let log: Arc<dyn StoreLog> = Arc::new(FixedLog(vec![
            change(layout, &[(1, 1, Upsert), (2, 2, Upsert), (3, 3, Upsert)]),
            change(layout, &[(2, 0, Delete), (1, 10, Upsert), (4, 4, Upsert)]),
            change(layout, &[(4, 0, Delete), (2, 20, Upsert), (5, 0, Delete)]),
            change(layout, &[(3, 0, Delete)]),
        ]));
        let metrics = ExecutionPlanMetricsSet::new();
        let reads = MetricBuilder::new(&metrics).global_counter("reads");
        let cell = OnceCell::new();
        let state = store_state(&cell, &log, layout, budget, &reads)
            .await
            .unwrap();
        let batches: Vec<RecordBatch> = match &state.half {
            StoreHalf::Live(live) => live.iter().cloned().collect(),
            StoreHalf::Reread => {
                let log = aligned_log(log.read_bounded(), Arc::clone(layout)).unwrap();
                newest_live_rows(Arc::clone(&state), log, Arc::clone(layout))
                    .unwrap()
                    .try_collect()
                    .await
                    .unwrap()
            }
            StoreHalf::Versions(_) => panic!("versions kept where the newest version wins"),
        };
        let mut rows: Vec<(i32, i64)> = batches
            .iter()
            .flat_map(|b| {
                let ids = b.column(0).as_primitive::<Int32Type>().clone();
                let ns = b.column(1).as_primitive::<Int64Type>().clone();
                (0..b.num_rows())
                    .map(move |r| (ids.value(r), ns.value(r)))
                    .collect::<Vec<_>>()
            })
            .collect();
        rows.sort_unstable();
        rows
    }

    #[tokio::test]
    async fn kept_and_reread_logs_pick_the_same_winners() {
        let layout = layout(false);
        let expected = vec![(1, 10), (2, 20)];
        assert_eq!(live_rows(&layout, usize::MAX).await, expected);
        assert_eq!(live_rows(&layout, 0).await, expected);
    }

    #[tokio::test]
    async fn ignored_deletes_pick_the_newest_upsert() {
        // Deletes Paimon ignores have no key number: the winners skip them.
        let layout = layout(true);
        let expected = vec![(1, 10), (2, 20), (3, 3), (4, 4)];
        assert_eq!(live_rows(&layout, usize::MAX).await, expected);
        assert_eq!(live_rows(&layout, 0).await, expected);
    }
}
