//! One table in the `local` store: its log of segments, group commit,
//! planning reads, and tiering into Paimon exactly once.
//!
//! Positions are segment sequence numbers. A segment is written with
//! create-if-absent, so two writers (tasks or processes) never share a number,
//! and a segment exists whole or not at all. Tiering commits the rows of
//! segments `[P, E)` to Paimon as one snapshot of commit user [`TIER_USER`]
//! with commit identifier `E`; the newest such snapshot says where the store's
//! rows start for a read, so nothing is missing or counted twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::{Array, Int8Array, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use paimon::catalog::Identifier;
use paimon::spec::VALUE_KIND_FIELD_NAME;
use paimon::table::Table;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};

use super::root::Root;
use super::segment::{self, SegmentError};
use super::{failpoint, path, LOCAL};
use crate::error::{Error, Result};
use crate::store::progress::TierProgress;
use crate::store::{
    log_arrow_schema, primary_keys, store_error, RowKind, StoreLog, TierReport, WriteKind,
};

/// The commit user of every snapshot the `local` store's tiering commits.
pub const TIER_USER: &str = "lakestream-local-tiering";

/// How often a streaming read looks for segments other processes wrote;
/// writes in this process wake it at once.
const FOLLOW_POLL: Duration = Duration::from_millis(50);

/// Store-side metadata of a table, written when it is attached.
#[derive(Debug, Serialize, Deserialize)]
struct TableMeta {
    format: u32,
    /// The Paimon snapshot the table had when the mode was turned on.
    base_snapshot: Option<i64>,
    /// Where the Paimon table lives, for people reading the store's files.
    paimon_location: String,
}

/// Written after a tiering commit: a cheap starting point for finding the
/// newest tiering snapshot, and the answer if Paimon has expired it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct TieredMarker {
    snapshot_id: i64,
    position: u64,
}

struct PendingWrite {
    batches: Vec<RecordBatch>,
    done: oneshot::Sender<Result<()>>,
}

/// A decoded segment: its batches as written (the schema of their time).
type Segment = Arc<Vec<RecordBatch>>;

/// What reading a segment's object found.
enum Fetched {
    Segment(Segment),
    /// No object: never written, or trimmed.
    Absent,
    /// A write that stopped part way: no rows, never acknowledged.
    Torn,
}

#[derive(Default)]
struct Segments {
    /// Decoded segments by sequence number, from the last trim on.
    cache: BTreeMap<u64, Segment>,
    /// The next sequence number to look for; `None` until the log was listed.
    next: Option<u64>,
}

/// The process-wide state of one table of one store root.
pub(crate) struct TableState {
    root: Arc<Root>,
    dir: object_store::path::Path,
    identifier: Identifier,
    queue: Mutex<Vec<PendingWrite>>,
    writer: tokio::sync::Mutex<()>,
    segments: tokio::sync::Mutex<Segments>,
    written: Notify,
    tiering: tokio::sync::Mutex<()>,
    /// Snapshot id -> (commit user is ours, commit identifier): snapshots never change.
    snapshots: Mutex<HashMap<i64, (bool, i64)>>,
}

impl std::fmt::Debug for TableState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableState")
            .field("table", &self.identifier)
            .finish_non_exhaustive()
    }
}

impl TableState {
    pub(crate) fn new(root: Arc<Root>, identifier: &Identifier) -> Self {
        Self {
            dir: path::table_dir(&Default::default(), identifier),
            root,
            identifier: identifier.clone(),
            queue: Mutex::new(Vec::new()),
            writer: tokio::sync::Mutex::new(()),
            segments: tokio::sync::Mutex::new(Segments::default()),
            written: Notify::new(),
            tiering: tokio::sync::Mutex::new(()),
            snapshots: Mutex::new(HashMap::new()),
        }
    }

    fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.root.objects
    }

    fn missing(&self) -> Error {
        Error::StoreTableMissing {
            store: LOCAL.to_string(),
            table: self.identifier.full_name(),
        }
    }

    // ----------------------------------------------------------------- tables

    /// Creates the store-side table if it is not there. Idempotent.
    pub(crate) async fn attach(&self, table: &Table) -> Result<()> {
        let base_snapshot = table.snapshot_manager().get_latest_snapshot_id().await?;
        let meta = TableMeta {
            format: 1,
            base_snapshot,
            paimon_location: table.location().to_string(),
        };
        let bytes = serde_json::to_vec_pretty(&meta).map_err(|e| store_error(LOCAL, e))?;
        let location = path::table_meta(&self.dir);
        let put = self
            .objects()
            .put_opts(&location, PutPayload::from(bytes), PutMode::Create.into())
            .await;
        match put {
            Ok(_) => self.root.sync(&location),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(store_error(LOCAL, e)),
        }
    }

    async fn exists(&self) -> Result<bool> {
        match self.objects().head(&path::table_meta(&self.dir)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error(LOCAL, e)),
        }
    }

    /// Deletes every object of the table.
    pub(crate) async fn drop_files(&self) -> Result<()> {
        let _writer = self.writer.lock().await;
        let _tiering = self.tiering.lock().await;
        let paths: Vec<_> = self
            .objects()
            .list(Some(&self.dir))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        // The metadata goes first: a half-dropped table is a missing table.
        let meta = path::table_meta(&self.dir);
        for location in std::iter::once(&meta).chain(paths.iter().filter(|p| **p != meta)) {
            match self.objects().delete(location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error(LOCAL, e)),
            }
        }
        *self.segments.lock().await = Segments::default();
        Ok(())
    }

    // ----------------------------------------------------------------- writes

    /// Appends `batches` (log schema, row kinds set) durably, grouped with
    /// whatever other writes of this process are waiting.
    pub(crate) async fn append(&self, batches: Vec<RecordBatch>) -> Result<()> {
        let (done, mut result) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(PendingWrite { batches, done });
        let _leader = self.writer.lock().await;
        // A leader before us may have written our rows already.
        if let Ok(outcome) = result.try_recv() {
            return outcome;
        }
        let pending = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        let all: Vec<RecordBatch> = pending
            .iter()
            .flat_map(|p| p.batches.iter().cloned())
            .collect();
        let outcome = self.write_segment(all).await;
        for p in pending {
            let copy = match &outcome {
                Ok(()) => Ok(()),
                Err(e) => Err(store_error(LOCAL, e.to_string())),
            };
            // A writer that went away does not need its answer.
            let _ = p.done.send(copy);
        }
        result
            .try_recv()
            .unwrap_or_else(|_| Err(Error::Internal("a group commit lost a write".to_string())))
    }

    async fn write_segment(&self, batches: Vec<RecordBatch>) -> Result<()> {
        if !self.exists().await? {
            return Err(self.missing());
        }
        let schema = match batches.first() {
            Some(batch) => batch.schema(),
            None => return Ok(()),
        };
        let bytes =
            Bytes::from(segment::encode(&schema, &batches).map_err(|e| store_error(LOCAL, e))?);
        let mut segments = self.segments.lock().await;
        let mut seq = match segments.next {
            Some(next) => next,
            None => self.list(&mut segments).await?,
        };
        loop {
            let location = path::segment(&self.dir, seq);
            let put = self
                .objects()
                .put_opts(
                    &location,
                    PutPayload::from(bytes.clone()),
                    PutOptions::from(PutMode::Create),
                )
                .await;
            match put {
                Ok(_) => {
                    failpoint("write-after-put");
                    self.root.sync(&location)?;
                    segments.cache.insert(seq, Arc::new(batches));
                    segments.next = Some(seq + 1);
                    break;
                }
                // Another process took this number: take the next one.
                Err(object_store::Error::AlreadyExists { .. }) => seq += 1,
                Err(e) => return Err(store_error(LOCAL, e)),
            }
        }
        drop(segments);
        self.written.notify_waiters();
        Ok(())
    }

    // ---------------------------------------------------------------- reading

    /// Lists the log once, remembering its segments' numbers; returns the next.
    async fn list(&self, segments: &mut Segments) -> Result<u64> {
        let prefix = self.dir.clone().join("log");
        let seqs: Vec<u64> = self
            .objects()
            .list(Some(&prefix))
            .try_filter_map(|meta| futures::future::ready(Ok(path::segment_seq(&meta.location))))
            .try_collect()
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        // After a tiering trimmed every segment, numbering goes on from
        // where it reached: a segment numbered below the tiered position
        // would never be read, and the next trim would delete it.
        let tiered = self.marker().await?.map_or(0, |m| m.position);
        let next = seqs.iter().max().map_or(0, |max| max + 1).max(tiered);
        segments.next = Some(next);
        Ok(next)
    }

    /// Reads the segment `seq`.
    async fn fetch(&self, seq: u64) -> Result<Fetched> {
        let location = path::segment(&self.dir, seq);
        let bytes = match self.objects().get(&location).await {
            Ok(get) => get.bytes().await.map_err(|e| store_error(LOCAL, e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(Fetched::Absent),
            Err(e) => return Err(store_error(LOCAL, e)),
        };
        match segment::decode(&bytes) {
            Ok(batches) => Ok(Fetched::Segment(Arc::new(batches))),
            Err(SegmentError::Torn(_)) => Ok(Fetched::Torn),
            Err(e) => Err(store_error(
                LOCAL,
                format!(
                    "segment '{location}' of '{}': {e}",
                    self.identifier.full_name()
                ),
            )),
        }
    }

    async fn present(&self, seq: u64) -> Result<bool> {
        match self.objects().head(&path::segment(&self.dir, seq)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_error(LOCAL, e)),
        }
    }

    /// Brings the segment cache up to date and returns the segments from
    /// `from` on. `Ok(None)`: a segment at or after `from` is gone (trimmed by
    /// a tiering that finished meanwhile); plan again.
    ///
    /// A torn segment (a write that stopped part way, never acknowledged)
    /// holds no rows: it is skipped. While it is the last one, reads stop
    /// before it; once a later segment exists, it is passed over.
    async fn segments_from(&self, from: u64) -> Result<Option<Vec<(u64, Segment)>>> {
        let mut segments = self.segments.lock().await;
        if segments.next.is_none() {
            self.list(&mut segments).await?;
        }
        let mut end = from;
        let mut out = Vec::new();
        let mut seq = from;
        loop {
            let listed_end = segments.next.unwrap_or(0);
            let cached = segments.cache.get(&seq).cloned();
            let fetched = match cached {
                Some(segment) => Fetched::Segment(segment),
                None => self.fetch(seq).await?,
            };
            match fetched {
                Fetched::Segment(segment) => {
                    segments.cache.insert(seq, Arc::clone(&segment));
                    out.push((seq, segment));
                    end = seq + 1;
                }
                Fetched::Torn if self.present(seq + 1).await? => {
                    segments.cache.insert(seq, Arc::new(Vec::new()));
                    end = seq + 1;
                }
                Fetched::Torn => break,
                // Past the end: nothing was written there yet.
                Fetched::Absent if seq >= listed_end => break,
                Fetched::Absent => return Ok(None),
            }
            seq += 1;
        }
        segments.next = Some(segments.next.unwrap_or(0).max(end));
        // What lies before `from` is in Paimon.
        segments.cache = segments.cache.split_off(&from);
        Ok(Some(out))
    }

    /// The newest snapshot and the store position its rows reach: the commit
    /// identifier of the newest tiering snapshot at or before it.
    async fn tiered(&self, table: &Table) -> Result<(Option<i64>, u64)> {
        let manager = table.snapshot_manager();

        let latest = manager.get_latest_snapshot_id().await?;

        let Some(latest) = latest else {
            return Ok((None, 0));
        };
        let marker = self.marker().await?;
        let floor = marker.map_or(1, |m| m.snapshot_id.max(1));
        let mut id = latest;
        while id >= floor {
            let cached = self
                .snapshots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .copied();
            let (ours, identifier) = match cached {
                Some(entry) => entry,
                None => match manager.get_snapshot(id).await {
                    Ok(snapshot) => {
                        let entry = (
                            snapshot.commit_user() == TIER_USER,
                            snapshot.commit_identifier(),
                        );
                        self.snapshots
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(id, entry);
                        entry
                    }
                    // Expired: the marker covers what came before.
                    Err(paimon::Error::SnapshotNotExist { .. }) => break,
                    Err(e) => return Err(e.into()),
                },
            };
            if ours {
                let position = u64::try_from(identifier).map_err(|_| {
                    store_error(
                        LOCAL,
                        format!("tiering snapshot {id} has identifier {identifier}"),
                    )
                })?;
                return Ok((Some(latest), position));
            }
            id -= 1;
        }
        Ok((Some(latest), marker.map_or(0, |m| m.position)))
    }

    async fn marker(&self) -> Result<Option<TieredMarker>> {
        match self.objects().get(&path::tiered_marker(&self.dir)).await {
            Ok(get) => {
                let bytes = get.bytes().await.map_err(|e| store_error(LOCAL, e))?;
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| store_error(LOCAL, format!("tiered marker: {e}")))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error(LOCAL, e)),
        }
    }

    /// Fixes a read: the Paimon snapshot and the store's segments after it,
    /// aligned with the table's current schema.
    pub(crate) async fn plan_read(self: &Arc<Self>, table: &Table) -> Result<LocalLog> {
        if !self.exists().await? {
            return Err(self.missing());
        }
        let schema = log_arrow_schema(table)?;
        // A tiering may trim between finding the snapshot and reading the
        // segments after it; then the next attempt sees its snapshot.
        for _ in 0..8 {
            let (snapshot_id, position) = self.tiered(table).await?;
            if let Some(segments) = self.segments_from(position).await? {
                let end = segments.last().map_or(position, |(seq, _)| seq + 1);
                let batches = align_all(&segments, &schema)?;
                return Ok(LocalLog {
                    state: Arc::clone(self),
                    schema,
                    snapshot_id,
                    batches,
                    end,
                });
            }
        }
        Err(store_error(
            LOCAL,
            format!(
                "could not fix a read of '{}': tiering kept trimming under it",
                self.identifier.full_name()
            ),
        ))
    }

    // ---------------------------------------------------------------- tiering

    /// Moves the store's rows into Paimon, `max_rows` rows per commit at most,
    /// until the store holds nothing Paimon lacks (as of the call).
    pub(crate) async fn tier(&self, table: &Table, max_rows: u64) -> Result<TierReport> {
        let _in_process = self.tiering.lock().await;

        let _across_processes = self.root.lock_tiering(&self.dir).await?;

        if !self.exists().await? {
            return Err(self.missing());
        }
        let schema = log_arrow_schema(table)?;
        let mut report = TierReport::default();
        let progress = TierProgress::start(self.identifier.full_name());
        let mut counted = false;
        let mut vanished = 0;
        loop {
            let (snapshot_id, position) = self.tiered(table).await?;
            report.position = position;
            let Some(segments) = self.segments_from(position).await? else {
                // Only a concurrent trim removes segments, and we hold the lock.
                vanished += 1;
                if vanished > 3 {
                    return Err(store_error(
                        LOCAL,
                        format!(
                            "segments of '{}' after position {position} are missing",
                            self.identifier.full_name()
                        ),
                    ));
                }
                continue;
            };
            if !counted {
                counted = true;
                let waiting = segments
                    .iter()
                    .flat_map(|(_, segment)| segment.iter())
                    .map(|b| b.num_rows() as u64)
                    .sum();
                progress.set_total(waiting);
            }
            // Segments are whole units: take them until the batch is big enough.
            let mut chosen = Vec::new();
            let mut rows = 0u64;
            for (seq, segment) in segments {
                if !chosen.is_empty() && rows >= max_rows {
                    break;
                }
                rows += segment.iter().map(|b| b.num_rows() as u64).sum::<u64>();
                chosen.push((seq, segment));
            }
            let Some(end) = chosen.last().map(|(seq, _)| seq + 1) else {
                // Caught up: what Paimon holds can go from the store.
                self.trim(position, snapshot_id).await?;
                return Ok(report);
            };
            let batches = align_all(&chosen, &schema)?;
            self.commit(table, &batches, end).await?;
            report.rows += rows;
            report.commits += 1;
            progress.set_rows(report.rows);
            report.position = end;
            let (snapshot_id, _) = self.tiered(table).await?;
            self.trim(end, snapshot_id).await?;
        }
    }

    /// Writes the rows into Paimon and commits them as identifier `end`,
    /// once: a retry after an uncertain commit is skipped by Paimon.
    async fn commit(&self, table: &Table, batches: &[RecordBatch], end: u64) -> Result<()> {
        failpoint("tier-before-write");
        let builder = table.new_write_builder().with_commit_user(TIER_USER)?;
        let mut write = builder.new_write()?;
        let keyed = !primary_keys(table).is_empty();
        for batch in batches {
            let batch = paimon_batch(batch, keyed)?;
            if batch.num_rows() > 0 {
                write.write_arrow_batch(&batch).await?;
            }
        }
        let messages = write.prepare_commit().await?;
        failpoint("tier-after-write");
        let identifier = i64::try_from(end)
            .map_err(|_| store_error(LOCAL, format!("position {end} overflows a commit id")))?;
        builder
            .new_commit()
            .filter_and_commit_with_identifier(messages, identifier)
            .await?;
        failpoint("tier-after-commit");
        if let Some(snapshot_id) = table.snapshot_manager().get_latest_snapshot_id().await? {
            self.write_marker(TieredMarker {
                snapshot_id,
                position: end,
            })
            .await?;
        }
        failpoint("tier-before-trim");
        Ok(())
    }

    async fn write_marker(&self, marker: TieredMarker) -> Result<()> {
        let bytes = serde_json::to_vec(&marker).map_err(|e| store_error(LOCAL, e))?;
        let location = path::tiered_marker(&self.dir);
        self.objects()
            .put(&location, PutPayload::from(bytes))
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        self.root.sync(&location)
    }

    /// Deletes the segments before `position`: Paimon holds their rows as of
    /// `snapshot_id`. The marker is brought up to `position` first, so no
    /// segment is deleted that the marker does not cover: it is what numbers
    /// the next write once the log is empty.
    async fn trim(&self, position: u64, snapshot_id: Option<i64>) -> Result<()> {
        let covered = self.marker().await?.map_or(0, |m| m.position);
        if covered < position {
            let Some(snapshot_id) = snapshot_id else {
                return Ok(());
            };
            self.write_marker(TieredMarker {
                snapshot_id,
                position,
            })
            .await?;
        }
        let prefix = self.dir.clone().join("log");
        let old: Vec<_> = self
            .objects()
            .list(Some(&prefix))
            .try_filter(|meta| {
                let seq = path::segment_seq(&meta.location);
                futures::future::ready(seq.is_some_and(|s| s < position))
            })
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        for location in old {
            match self.objects().delete(&location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(store_error(LOCAL, e)),
            }
        }
        let mut segments = self.segments.lock().await;
        segments.cache = segments.cache.split_off(&position);
        Ok(())
    }

    /// Rows in the store that Paimon does not hold yet.
    pub(crate) async fn pending_rows(&self, table: &Table) -> Result<u64> {
        let (_, position) = self.tiered(table).await?;
        let segments = self.segments_from(position).await?.unwrap_or_default();
        Ok(segments
            .iter()
            .flat_map(|(_, s)| s.iter())
            .map(|b| b.num_rows() as u64)
            .sum())
    }

    /// Segments after `from`, waiting for one to be written.
    async fn wait_for(&self, from: u64) -> Result<Vec<(u64, Segment)>> {
        loop {
            let notified = self.written.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let segments = self.segments_from(from).await?.unwrap_or_default();
            if !segments.is_empty() {
                return Ok(segments);
            }
            // Writes in this process wake us; other processes' are found by looking again.
            let _ = tokio::time::timeout(FOLLOW_POLL, notified).await;
        }
    }
}

fn align_all(segments: &[(u64, Segment)], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    segments
        .iter()
        .flat_map(|(_, s)| s.iter())
        .map(|b| segment::align(b, schema).map_err(|e| store_error(LOCAL, e)))
        .collect()
}

/// A log batch as Paimon's writer takes it: primary-key tables keep the row
/// kind as `_VALUE_KIND`; append tables drop it (their log has only inserts).
fn paimon_batch(batch: &RecordBatch, keyed: bool) -> Result<RecordBatch> {
    let kinds_index = batch.num_columns().saturating_sub(1);
    if keyed {
        let schema = batch.schema();
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        if let Some(last) = fields.last_mut() {
            *last = Field::new(VALUE_KIND_FIELD_NAME, last.data_type().clone(), false);
        }
        return RecordBatch::try_new(Arc::new(Schema::new(fields)), batch.columns().to_vec())
            .map_err(|e| store_error(LOCAL, e));
    }
    let deletes = batch
        .column(kinds_index)
        .as_any()
        .downcast_ref::<Int8Array>()
        .is_some_and(|kinds| kinds.iter().any(|k| k != Some(RowKind::Upsert.as_i8())));
    if deletes {
        return Err(store_error(LOCAL, "an append table's log holds a delete"));
    }
    let columns: Vec<usize> = (0..kinds_index).collect();
    batch.project(&columns).map_err(|e| store_error(LOCAL, e))
}

/// A fixed read of a table's segments.
#[derive(Debug)]
pub(crate) struct LocalLog {
    state: Arc<TableState>,
    schema: SchemaRef,
    pub(crate) snapshot_id: Option<i64>,
    batches: Vec<RecordBatch>,
    end: u64,
}

impl StoreLog for LocalLog {
    fn bounded_is_empty(&self) -> bool {
        self.batches.iter().all(|b| b.num_rows() == 0)
    }

    fn read_bounded(&self) -> Result<SendableRecordBatchStream> {
        let batches = self.batches.clone();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::iter(batches.into_iter().map(Ok)),
        )))
    }

    fn follow(&self) -> Result<SendableRecordBatchStream> {
        let state = Arc::clone(&self.state);
        let schema = Arc::clone(&self.schema);
        let start = (state, Arc::clone(&schema), self.end);
        let stream = futures::stream::try_unfold(start, |(state, schema, from)| async move {
            let segments = state
                .wait_for(from)
                .await
                .map_err(datafusion::error::DataFusionError::from)?;
            let next = segments.last().map_or(from, |(seq, _)| seq + 1);
            let batches = align_all(&segments, &schema)?;
            Ok::<_, datafusion::error::DataFusionError>(Some((
                futures::stream::iter(batches.into_iter().map(Ok)),
                (state, schema, next),
            )))
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// Adds the row-kind column to rows written as `kind`.
pub(crate) fn with_row_kind(
    batch: &RecordBatch,
    kind: WriteKind,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(Int8Array::from(vec![
        kind.row_kind().as_i8();
        batch.num_rows()
    ])));
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| store_error(LOCAL, e))
}
