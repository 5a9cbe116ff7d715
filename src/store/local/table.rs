//! One table in the `local` store: its incarnations, its log of segments,
//! group commit, planning reads, and tiering into Paimon exactly once.
//!
//! Everything a process keeps here is a cache of what is on disk, checked
//! before it decides anything:
//!
//! - **Incarnations.** `table.json` names the store table's incarnation (a
//!   random id made when the table is attached) and the Paimon table's own
//!   (the creation time of its first schema). Segments live under
//!   `i-<incarnation>/`, so a table dropped and created again, by any
//!   process, starts an empty log, and a process whose cache names another
//!   incarnation drops that cache. A store table whose Paimon table was
//!   dropped and created again elsewhere is refused until attached again.
//! - **Positions.** Positions are segment sequence numbers within an
//!   incarnation. A segment is created with create-if-absent and reaches its
//!   name whole. Tiering commits the rows of segments `[P, E)` as one Paimon
//!   snapshot of the incarnation's commit user with commit identifier `E`;
//!   the newest such snapshot says where the store's rows start.
//! - **Never below the tiered position.** A writer numbers its segment from
//!   the tiered position it reads from Paimon just before the put, whatever
//!   it cached. Tiering deletes a segment only `local.log-retention` after it
//!   passed it, so while a write is younger than that, a number below the
//!   tiered position is still taken and the put moves past it. A write that
//!   took longer checks again and reports its outcome as unknown if tiering
//!   passed it meanwhile.
//! - **Damage.** Bytes that do not verify are an error naming the file; reads
//!   and tiering stop there until an operator sets the segment aside.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::arrow::array::{Array, Int8Array, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::TryStreamExt;
use object_store::path::Path;
use paimon::catalog::Identifier;
use paimon::spec::VALUE_KIND_FIELD_NAME;
use paimon::table::Table;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};

use super::root::{Created, PutFailed, Root};
use super::segment::{self, SegmentError};
use super::{failpoint, path, LOCAL};
use crate::error::{Error, Result};
use crate::store::progress::TierProgress;
use crate::store::{
    log_arrow_schema, primary_keys, store_error, RowKind, StoreLog, TierReport, WriteKind,
};

/// The commit user of the snapshots the `local` store's tiering commits; an
/// incarnation's own user is this followed by `-<incarnation>`.
pub const TIER_USER: &str = "lakestream-local-tiering";

/// How often a streaming read looks for segments other processes wrote;
/// writes in this process wake it at once.
const FOLLOW_POLL: Duration = Duration::from_millis(50);

/// The format `table.json` is written in.
const META_FORMAT: u32 = 2;

/// Store-side metadata of a table, written when it is attached.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TableMeta {
    format: u32,
    /// The store table's incarnation; empty for tables of the first format,
    /// whose files lie directly in the table's directory.
    #[serde(default)]
    incarnation: String,
    /// When the Paimon table's first schema was made: which Paimon table of
    /// this name the store table belongs to.
    #[serde(default)]
    paimon_created_ms: Option<i64>,
    /// The Paimon snapshot the table had when the store table was attached.
    base_snapshot: Option<i64>,
    /// Where the Paimon table lives, for people reading the store's files.
    paimon_location: String,
}

/// Written after a tiering commit: a cheap starting point for finding the
/// newest tiering snapshot, the answer if Paimon has expired it, and when
/// each position was passed (for deleting segments after the retention).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct TieredMarker {
    snapshot_id: i64,
    position: u64,
    #[serde(default)]
    history: Vec<Passed>,
}

/// Tiering passed `position` at `at_ms` (milliseconds since the epoch).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Passed {
    position: u64,
    at_ms: i64,
}

/// A decoded segment: its batches as written (the schema of their time).
type Segment = Arc<Vec<RecordBatch>>;

/// What reading a segment's object found.
enum Fetched {
    Segment(Segment),
    /// No object: never written, or trimmed.
    Absent,
}

#[derive(Default)]
struct Segments {
    /// Decoded segments by sequence number, from the last read position on.
    cache: BTreeMap<u64, Segment>,
    /// The next sequence number to look for; `None` until the log was listed.
    next: Option<u64>,
}

/// One incarnation of a store table, as this process knows it.
pub(crate) struct Incarnation {
    id: String,
    /// Where the incarnation's log and marker live.
    dir: Path,
    /// The commit user of its tiering snapshots.
    user: String,
    paimon_created_ms: Option<i64>,
    base_snapshot: Option<i64>,
    segments: tokio::sync::Mutex<Segments>,
    /// Snapshot id -> (committed by this incarnation, commit identifier).
    snapshots: Mutex<HashMap<i64, (bool, i64)>>,
    /// Paimon schemas (id, time) known to belong to the Paimon table of this incarnation.
    verified: Mutex<HashSet<(i64, i64)>>,
}

impl Incarnation {
    fn new(table_dir: &Path, meta: &TableMeta) -> Self {
        let (dir, user) = if meta.incarnation.is_empty() {
            (table_dir.clone(), TIER_USER.to_string())
        } else {
            (
                table_dir
                    .clone()
                    .join(format!("i-{}", path::encode_segment(&meta.incarnation))),
                format!("{TIER_USER}-{}", meta.incarnation),
            )
        };
        Self {
            id: meta.incarnation.clone(),
            dir,
            user,
            paimon_created_ms: meta.paimon_created_ms,
            base_snapshot: meta.base_snapshot,
            segments: Default::default(),
            snapshots: Default::default(),
            verified: Default::default(),
        }
    }
}

struct PendingWrite {
    /// Writes are grouped only with writes planned against the same schema.
    schema: SchemaRef,
    schema_version: (i64, i64),
    table: Table,
    batches: Vec<RecordBatch>,
    done: oneshot::Sender<Result<()>>,
}

/// The process-wide state of one table of one store root.
pub(crate) struct TableState {
    root: Arc<Root>,
    dir: Path,
    identifier: Identifier,
    queue: Mutex<Vec<PendingWrite>>,
    writer: tokio::sync::Mutex<()>,
    written: Notify,
    tiering: tokio::sync::Mutex<()>,
    current: Mutex<Option<Arc<Incarnation>>>,
}

impl std::fmt::Debug for TableState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableState")
            .field("table", &self.identifier)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A number unique across processes and time: the clock in nanoseconds,
/// the process id and a counter.
fn unique() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = u128::from(COUNTER.fetch_add(1, Ordering::Relaxed));
    (nanos << 48) ^ (u128::from(std::process::id()) << 16) ^ n
}

/// A new incarnation id.
fn new_incarnation_id() -> String {
    format!("{:x}", unique())
}

/// When the Paimon table's first schema file was written: which Paimon table
/// of its name `table` is. (A catalog's own answer, such as a REST server's,
/// need not carry the file's time, so the file is asked.)
async fn paimon_created_ms(table: &Table) -> Result<i64> {
    Ok(fresh_schema(table, 0).await?.time_millis())
}

/// Schema `id` as the table's files have it now, not as any cache does.
async fn fresh_schema(table: &Table, id: i64) -> Result<Arc<paimon::spec::TableSchema>> {
    let manager =
        paimon::table::SchemaManager::new(table.file_io().clone(), table.location().to_string());
    Ok(manager.schema(id).await?)
}

impl TableState {
    pub(crate) fn new(root: Arc<Root>, identifier: &Identifier) -> Self {
        Self {
            dir: path::table_dir(&Default::default(), identifier),
            root,
            identifier: identifier.clone(),
            queue: Mutex::new(Vec::new()),
            writer: tokio::sync::Mutex::new(()),
            written: Notify::new(),
            tiering: tokio::sync::Mutex::new(()),
            current: Mutex::new(None),
        }
    }

    fn name(&self) -> String {
        self.identifier.full_name()
    }

    fn missing(&self) -> Error {
        Error::StoreTableMissing {
            store: LOCAL.to_string(),
            table: self.name(),
        }
    }

    fn file(&self, location: &Path) -> String {
        format!("{}{location}", self.root.url)
    }

    // ----------------------------------------------------------------- tables

    async fn read_meta(&self) -> Result<Option<TableMeta>> {
        self.read_json(&path::table_meta(&self.dir)).await
    }

    /// A JSON object of the store (`table.json`, `tiered.json`); `None`
    /// when there is none.
    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        location: &Path,
    ) -> Result<Option<T>> {
        let Some(bytes) = self.root.get(location).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            store_error(
                LOCAL,
                format!("'{}' cannot be read: {e}", self.file(location)),
            )
        })
    }

    /// The incarnation `table.json` names now, checked against the Paimon
    /// table: the cache of an incarnation this process knew is reused, any
    /// other is dropped.
    pub(crate) async fn current(&self, table: &Table) -> Result<Arc<Incarnation>> {
        let meta = self.read_meta().await?.ok_or_else(|| self.missing())?;
        let incarnation = {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            match current.as_ref() {
                Some(known) if known.id == meta.incarnation => Arc::clone(known),
                _ => {
                    let fresh = Arc::new(Incarnation::new(&self.dir, &meta));
                    *current = Some(Arc::clone(&fresh));
                    fresh
                }
            }
        };
        self.check_paimon(&incarnation, table).await?;
        Ok(incarnation)
    }

    /// Whether `table` is the Paimon table the incarnation was attached to,
    /// and (for tables whose schema comes from their files) whether the
    /// `Table` itself is not a handle on a table dropped since.
    async fn check_paimon(&self, incarnation: &Incarnation, table: &Table) -> Result<()> {
        let Some(expected) = incarnation.paimon_created_ms else {
            return Ok(());
        };
        let version = (table.schema().id(), table.schema().time_millis());
        let verified = incarnation
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&version);
        if verified {
            return Ok(());
        }
        self.check_handle(table).await?;
        if paimon_created_ms(table).await? != expected {
            return Err(Error::StoreTableStale {
                store: LOCAL.to_string(),
                table: self.name(),
            });
        }
        incarnation
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(version);
        Ok(())
    }

    /// A `Table` loaded before its table was dropped and created again
    /// carries a schema the files no longer have. (A REST catalog's schemas
    /// come from its server, whose times need not be the files'.)
    async fn check_handle(&self, table: &Table) -> Result<()> {
        if table.rest_env().is_some() {
            return Ok(());
        }
        let schema = table.schema();
        let on_disk = fresh_schema(table, schema.id()).await?;
        if on_disk.time_millis() != schema.time_millis() {
            return Err(Error::StoreTableStale {
                store: LOCAL.to_string(),
                table: self.name(),
            });
        }
        Ok(())
    }

    /// Creates the store-side table if it is not there, or replaces one that
    /// belongs to an earlier Paimon table of the same name. Idempotent.
    pub(crate) async fn attach(&self, table: &Table) -> Result<()> {
        let created = paimon_created_ms(table).await?;
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        if let Some(meta) = self.read_meta().await? {
            let same = meta.paimon_created_ms.is_none_or(|known| known == created);
            if same {
                if !crate::options::is_enabled(table.schema().options()) {
                    // Boxed: its futures would make attach's too big for a stack.
                    Box::pin(self.check_stranded(table)).await?;
                }
                return Ok(());
            }
            // The rows of a dropped table never come back.
            let _writes = self.root.lock_trim(&self.dir, false).await?;
            self.delete_files(false).await?;
        }
        let base_snapshot = table.snapshot_manager().get_latest_snapshot_id().await?;
        let meta = TableMeta {
            format: META_FORMAT,
            incarnation: new_incarnation_id(),
            paimon_created_ms: Some(created),
            base_snapshot,
            paimon_location: table.location().to_string(),
        };
        let bytes = serde_json::to_vec_pretty(&meta).map_err(|e| store_error(LOCAL, e))?;
        self.root
            .put_replace(&path::table_meta(&self.dir), Bytes::from(bytes))
            .await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// Turning the mode on again while the store still holds rows from
    /// before it was turned off (tiering could not run then): on a
    /// primary-key table whose Paimon table got new rows from elsewhere
    /// since, tiering them would commit the older values over the newer
    /// ones, so it is refused until the user tiers or discards them. Append
    /// tables are not refused: their rows are added in any order.
    async fn check_stranded(&self, table: &Table) -> Result<()> {
        if primary_keys(table).is_empty() {
            return Ok(());
        }
        let incarnation = self.current(table).await?;
        let (_, position) = self.tiered(&incarnation, table).await?;
        let rows = match self.segments_from(&incarnation, position).await? {
            Some(segments) => rows_of(segments.iter().map(|(_, s)| s)),
            // Trimmed under us: only tiering trims, so they are in Paimon.
            None => 0,
        };
        if rows == 0 {
            return Ok(());
        }
        let Some(since) = self.written_elsewhere(&incarnation, table).await? else {
            return Ok(());
        };
        let name = crate::name::sql_name(&[self.identifier.database(), self.identifier.object()]);
        Err(Error::StrandedRows {
            table: self.name(),
            rows,
            since,
            tier_command: format!(
                "lakestream-cli tier --once --table {name} --store {LOCAL}, with this catalog's \
                 --warehouse and --option flags"
            ),
            dir: self.file(&self.dir),
        })
    }

    /// Whether Paimon got rows from someone other than the incarnation's
    /// tiering since it last tiered: the newest such snapshot, described.
    /// Compactions add no rows and do not count; snapshots expired before
    /// the search found the incarnation's own count as unknown, so as such.
    async fn written_elsewhere(
        &self,
        incarnation: &Incarnation,
        table: &Table,
    ) -> Result<Option<String>> {
        let manager = table.snapshot_manager();
        let Some(latest) = manager.get_latest_snapshot_id().await? else {
            return Ok(None);
        };
        // The marker's snapshot was the newest when tiering last passed:
        // what came before it was there when the rows were tiered.
        let floor = self
            .marker(incarnation)
            .await?
            .map(|m| m.snapshot_id + 1)
            .into_iter()
            .chain(incarnation.base_snapshot.map(|b| b + 1))
            .max()
            .unwrap_or(1)
            .max(1);
        for id in (floor..=latest).rev() {
            match manager.get_snapshot(id).await {
                Ok(snapshot) if snapshot.commit_user() == incarnation.user => return Ok(None),
                Ok(snapshot) if *snapshot.commit_kind() == paimon::spec::CommitKind::COMPACT => {}
                Ok(snapshot) => {
                    return Ok(Some(format!(
                        "Paimon snapshot {id} was committed since by '{}'",
                        snapshot.commit_user()
                    )))
                }
                Err(paimon::Error::SnapshotNotExist { .. }) => {
                    return Ok(Some(format!(
                        "Paimon's snapshots up to {id} expired, so whether rows were written \
                         to it directly since cannot be told"
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// Runs the catalog's drop of the table, then deletes every object of
    /// the store table, holding the locks that keep tiering and writes out.
    pub(crate) async fn drop_with(
        &self,
        drop_in_catalog: futures::future::BoxFuture<'_, Result<()>>,
    ) -> Result<()> {
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        // No write is between checking the table and its put.
        let _writes = self.root.lock_trim(&self.dir, false).await?;
        drop_in_catalog.await?;
        self.delete_files(true).await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// Deletes the table's objects, `table.json` first (a half-deleted table
    /// is a missing table), then the rest. The tiering lock stays: it is how
    /// processes agree on who tiers, across incarnations.
    async fn delete_files(&self, with_meta: bool) -> Result<()> {
        let meta = path::table_meta(&self.dir);
        if with_meta {
            self.root.delete(&meta).await?;
        }
        let paths: Vec<Path> = self
            .root
            .objects
            .list(Some(&self.dir))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        for location in paths {
            let lock = matches!(location.filename(), Some("tier.lock" | "trim.lock"));
            if location != meta && !lock {
                self.root.delete(&location).await?;
            }
        }
        Ok(())
    }

    // ----------------------------------------------------------------- writes

    /// Appends `batches` (log schema, row kinds set) durably, grouped with
    /// whatever other writes of this process are waiting and were planned
    /// against the same schema. Run it in a task of its own: a caller that
    /// goes away must not stop a group part way.
    pub(crate) async fn append(
        &self,
        table: &Table,
        batches: Vec<RecordBatch>,
        retention: Duration,
    ) -> Result<()> {
        let Some(schema) = batches.first().map(|b| b.schema()) else {
            return Ok(());
        };
        let (done, mut result) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(PendingWrite {
                schema,
                schema_version: (table.schema().id(), table.schema().time_millis()),
                table: table.clone(),
                batches,
                done,
            });
        let _leader = self.writer.lock().await;
        loop {
            // A leader before us may have written our rows already.
            if let Ok(outcome) = result.try_recv() {
                return outcome;
            }
            let group = {
                let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                let Some(first) = queue.first() else {
                    break;
                };
                let (schema, version) = (Arc::clone(&first.schema), first.schema_version);
                let (group, rest): (Vec<_>, Vec<_>) = queue
                    .drain(..)
                    .partition(|p| p.schema_version == version && p.schema == schema);
                *queue = rest;
                group
            };
            let Some(table) = group.first().map(|p| p.table.clone()) else {
                break;
            };
            let all: Vec<RecordBatch> = group
                .iter()
                .flat_map(|p| p.batches.iter().cloned())
                .collect();
            let outcome = self.write_segment(&table, all, retention).await;
            for p in group {
                // A writer that went away does not need its answer.
                let _ = p.done.send(match &outcome {
                    Ok(()) => Ok(()),
                    Err(e) => Err(e.share(LOCAL)),
                });
            }
        }
        result
            .try_recv()
            .unwrap_or_else(|_| Err(Error::Internal("a group commit lost a write".to_string())))
    }

    async fn write_segment(
        &self,
        table: &Table,
        batches: Vec<RecordBatch>,
        retention: Duration,
    ) -> Result<()> {
        let Some(schema) = batches.first().map(|b| b.schema()) else {
            return Ok(());
        };
        let bytes = Bytes::from(
            segment::encode(&schema, &batches, unique()).map_err(|e| store_error(LOCAL, e))?,
        );
        let started = Instant::now();
        // From checking the incarnation to the put, no segment is deleted
        // and the table is not dropped: both take this lock exclusively (on
        // local disk; elsewhere the retention and the checks below see to it).
        let trim_lock = self.root.lock_trim(&self.dir, true).await?;
        let incarnation = self.current(table).await?;
        let mut segments = incarnation.segments.lock().await;
        // Never below what tiering passed, whatever this process cached.
        let (_, tiered) = self.tiered(&incarnation, table).await?;
        let cached = match segments.next {
            Some(next) => next,
            None => self.list(&incarnation).await?,
        };
        let mut seq = cached.max(tiered);
        loop {
            let location = path::segment(&incarnation.dir, seq);
            match self.root.put_new(&location, bytes.clone()).await {
                Ok(Created::Yes) => break,
                // Another writer took this number: take the next one.
                Ok(Created::AlreadyExists) => seq += 1,
                Err(PutFailed::NotApplied(e)) => {
                    return Err(Error::WriteNotApplied {
                        table: self.name(),
                        reason: e.to_string(),
                    })
                }
                Err(PutFailed::Unknown(e)) => return Err(self.unknown(e.to_string())),
            }
        }
        failpoint("write-after-put");
        if trim_lock.is_none() {
            // Without the lock, the table may have been dropped (and made
            // again) meanwhile; a streaming read of the dropped table may
            // have shown the rows, so the outcome is unknown.
            match self.read_meta().await {
                Ok(Some(meta)) if meta.incarnation == incarnation.id => {}
                Ok(_) => {
                    return Err(self.unknown(
                        "the table was dropped while the write ran; its rows went with it"
                            .to_string(),
                    ))
                }
                Err(e) => {
                    return Err(self.unknown(format!("checking the table after the write: {e}")))
                }
            }
        }
        drop(trim_lock);
        if self.root.local_dir.is_none() && started.elapsed() >= retention / 2 {
            // Old enough that a segment tiering passed could have been
            // deleted and its number taken by this write: look again.
            let (_, now) = self
                .tiered(&incarnation, table)
                .await
                .map_err(|e| self.unknown(format!("checking the tiered position: {e}")))?;
            if now > seq {
                return Err(self.unknown(format!(
                    "the write took {:?} and tiering passed its position meanwhile",
                    started.elapsed()
                )));
            }
        }
        segments.cache.insert(seq, Arc::new(batches));
        segments.next = Some(seq + 1);
        drop(segments);
        self.written.notify_waiters();
        Ok(())
    }

    fn unknown(&self, reason: String) -> Error {
        Error::WriteOutcomeUnknown {
            table: self.name(),
            reason,
        }
    }

    // ---------------------------------------------------------------- reading

    /// Lists the log: the number after its last segment.
    async fn list(&self, incarnation: &Incarnation) -> Result<u64> {
        let prefix = incarnation.dir.clone().join("log");
        let seqs: Vec<u64> = self
            .root
            .objects
            .list(Some(&prefix))
            .try_filter_map(|meta| futures::future::ready(Ok(path::segment_seq(&meta.location))))
            .try_collect()
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        Ok(seqs.iter().max().map_or(0, |max| max + 1))
    }

    /// Reads the segment `seq`.
    async fn fetch(&self, incarnation: &Incarnation, seq: u64) -> Result<Fetched> {
        let location = path::segment(&incarnation.dir, seq);
        let Some(bytes) = self.root.get(&location).await? else {
            return Ok(Fetched::Absent);
        };
        match segment::decode(&bytes) {
            Ok(batches) => Ok(Fetched::Segment(Arc::new(batches))),
            Err(e) => Err(self.damaged(&location, seq, &e, &bytes)),
        }
    }

    fn damaged(&self, location: &Path, seq: u64, error: &SegmentError, bytes: &[u8]) -> Error {
        Error::SegmentDamaged {
            table: self.name(),
            file: self.file(location),
            position: seq,
            reason: error.to_string(),
            held: match segment::rows_hint(bytes) {
                Some(rows) => format!("it held {rows} rows"),
                None => "its row count cannot be read".to_string(),
            },
        }
    }

    /// Brings the segment cache up to date and returns the segments from
    /// `from` on. `Ok(None)`: a segment at or after `from` is gone (trimmed
    /// after the retention); plan again.
    async fn segments_from(
        &self,
        incarnation: &Incarnation,
        from: u64,
    ) -> Result<Option<Vec<(u64, Segment)>>> {
        let mut segments = incarnation.segments.lock().await;
        if segments.next.is_none() {
            segments.next = Some(self.list(incarnation).await?);
        }
        let mut out = Vec::new();
        let mut seq = from;
        loop {
            let listed_end = segments.next.unwrap_or(0);
            let fetched = match segments.cache.get(&seq).cloned() {
                Some(segment) => Fetched::Segment(segment),
                None => self.fetch(incarnation, seq).await?,
            };
            match fetched {
                Fetched::Segment(segment) => {
                    segments.cache.insert(seq, Arc::clone(&segment));
                    out.push((seq, segment));
                }
                // Past the end: nothing was written there yet.
                Fetched::Absent if seq >= listed_end => break,
                Fetched::Absent => return Ok(None),
            }
            seq += 1;
        }
        segments.next = Some(segments.next.unwrap_or(0).max(seq));
        // What lies before `from` is in Paimon.
        segments.cache = segments.cache.split_off(&from);
        Ok(Some(out))
    }

    /// The newest snapshot and the store position its rows reach: the commit
    /// identifier of the incarnation's newest tiering snapshot.
    ///
    /// The position never goes back. Snapshots are searched from the newest
    /// down to what the marker (or a proof, see [`Self::prove`]) already
    /// covers. Where that search runs into a snapshot another engine expired,
    /// the covered position is the answer only if nothing newer can be
    /// tiering's: the expired snapshot is the one the marker was written at,
    /// or the log holds no segment at or after the covered position (a
    /// tiering commit past it would have needed one, and tiering never
    /// deletes those). Otherwise (a tiering process died between its commit
    /// and its marker, and the commit expired since) the position is unknown
    /// and the answer is [`Error::TieredPositionUnknown`], never a guess.
    async fn tiered(&self, incarnation: &Incarnation, table: &Table) -> Result<(Option<i64>, u64)> {
        let manager = table.snapshot_manager();
        // The marker and proof first: they name a snapshot at or before the
        // latest one read after them.
        let known = self.known(incarnation).await?;
        let Some(latest) = manager.get_latest_snapshot_id().await? else {
            return Ok((None, 0));
        };
        // Snapshots from before the incarnation was attached are not its.
        let floor = known
            .as_ref()
            .map(|m| m.snapshot_id)
            .into_iter()
            .chain(incarnation.base_snapshot.map(|b| b + 1))
            .max()
            .unwrap_or(1)
            .max(1);
        let covered = known.as_ref().map_or(0, |m| m.position);
        let mut id = latest;
        while id >= floor {
            let cached = incarnation
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
                            snapshot.commit_user() == incarnation.user,
                            snapshot.commit_identifier(),
                        );
                        incarnation
                            .snapshots
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(id, entry);
                        entry
                    }
                    Err(paimon::Error::SnapshotNotExist { .. }) => {
                        let position = self
                            .expired_below(incarnation, known.as_ref(), id, latest)
                            .await?;
                        return Ok((Some(latest), position));
                    }
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
        Ok((Some(latest), covered))
    }

    /// The marker or the proof, whichever covers more snapshots. Both say
    /// "the incarnation's tiering snapshots up to `snapshot_id` reach
    /// `position`", so the one with the higher snapshot says more.
    async fn known(&self, incarnation: &Incarnation) -> Result<Option<TieredMarker>> {
        let marker = self.marker(incarnation).await?;
        let proof: Option<TieredMarker> = self
            .read_json(&path::tiered_proof(&incarnation.dir))
            .await?;
        Ok(marker
            .into_iter()
            .chain(proof)
            .max_by_key(|m| m.snapshot_id))
    }

    /// The tiered position when the search down from `latest` found snapshot
    /// `expired` gone before it found a tiering snapshot: what `known` covers,
    /// if that is provably all (see [`Self::tiered`]).
    async fn expired_below(
        &self,
        incarnation: &Incarnation,
        known: Option<&TieredMarker>,
        expired: i64,
        latest: i64,
    ) -> Result<u64> {
        let covered = known.map_or(0, |m| m.position);
        // The marker's own snapshot: everything up to it is covered.
        if known.is_some_and(|m| m.snapshot_id >= expired) {
            return Ok(covered);
        }
        let end = self.list(incarnation).await?;
        if end <= covered {
            // Proven as of `latest`: record it, so a write that lands a
            // segment next does not make the next search ambiguous.
            self.prove(incarnation, latest, covered).await?;
            return Ok(covered);
        }
        Err(Error::TieredPositionUnknown {
            table: self.name(),
            snapshot: expired,
            position: covered,
            end,
            dir: self.file(&self.dir),
        })
    }

    /// Records that the incarnation's tiering snapshots up to `snapshot_id`
    /// reach `position`. Kept apart from the marker, which tiering rewrites
    /// (read, change, write) under its lock: a proof is written by whoever
    /// finds it, and is true whenever it is written, so two writers of it
    /// never make it false, only one of them less recent.
    async fn prove(
        &self,
        incarnation: &Incarnation,
        snapshot_id: i64,
        position: u64,
    ) -> Result<()> {
        let proof = TieredMarker {
            snapshot_id,
            position,
            history: Vec::new(),
        };
        let bytes = serde_json::to_vec(&proof).map_err(|e| store_error(LOCAL, e))?;
        self.root
            .put_replace(&path::tiered_proof(&incarnation.dir), Bytes::from(bytes))
            .await
    }

    async fn marker(&self, incarnation: &Incarnation) -> Result<Option<TieredMarker>> {
        self.read_json(&path::tiered_marker(&incarnation.dir)).await
    }

    /// Fixes a read: the Paimon snapshot and the store's segments after it,
    /// aligned with the table's current schema.
    pub(crate) async fn plan_read(self: &Arc<Self>, table: &Table) -> Result<LocalLog> {
        let incarnation = self.current(table).await?;
        let schema = log_arrow_schema(table)?;
        // A segment is deleted only long after tiering passed it, so a read
        // finds its segments; should one still be gone, the next attempt
        // sees the snapshot that holds its rows.
        for _ in 0..8 {
            let (snapshot_id, position) = self.tiered(&incarnation, table).await?;
            if let Some(segments) = self.segments_from(&incarnation, position).await? {
                let end = segments.last().map_or(position, |(seq, _)| seq + 1);
                let batches = align_all(&segments, &schema)?;
                return Ok(LocalLog {
                    state: Arc::clone(self),
                    incarnation,
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
                self.name()
            ),
        ))
    }

    // ---------------------------------------------------------------- tiering

    /// Moves the store's rows into Paimon, `max_rows` rows per commit at most,
    /// until the store holds nothing Paimon lacks (as of the call).
    pub(crate) async fn tier(
        &self,
        table: &Table,
        max_rows: u64,
        retention: Duration,
    ) -> Result<TierReport> {
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        let incarnation = self.current(table).await?;
        let schema = log_arrow_schema(table)?;
        let mut report = TierReport::default();
        let progress = TierProgress::start(self.name());
        // The run ends where the log ended when it started: a busy writer
        // cannot keep it (and the locks it holds) going for ever.
        let mut run_end: Option<u64> = None;
        let mut vanished = 0;
        loop {
            let (snapshot_id, position) = self.tiered(&incarnation, table).await?;
            report.position = position;
            let Some(segments) = self.segments_from(&incarnation, position).await? else {
                // Only a trim removes segments, and we hold the lock.
                vanished += 1;
                if vanished > 3 {
                    return Err(store_error(
                        LOCAL,
                        format!(
                            "segments of '{}' after position {position} are missing",
                            self.name()
                        ),
                    ));
                }
                continue;
            };
            let stop_at = *run_end.get_or_insert_with(|| {
                progress.set_total(rows_of(segments.iter().map(|(_, s)| s)));
                segments.last().map_or(position, |(seq, _)| seq + 1)
            });
            // Rows written under a newer schema need a newer `Table`: the
            // next run, which loads one, tiers them.
            let columns: HashSet<&str> =
                schema.fields().iter().map(|f| f.name().as_str()).collect();
            let newer = |segment: &Segment| {
                segment.iter().any(|b| {
                    b.schema()
                        .fields()
                        .iter()
                        .any(|f| !columns.contains(f.name().as_str()))
                })
            };
            // Segments are whole units: take them until the batch is big enough.
            let mut chosen = Vec::new();
            let mut rows = 0u64;
            for (seq, segment) in segments {
                if seq >= stop_at || newer(&segment) {
                    break;
                }
                if !chosen.is_empty() && rows >= max_rows {
                    break;
                }
                rows += rows_of(std::iter::once(&segment));
                chosen.push((seq, segment));
            }
            let Some(end) = chosen.last().map(|(seq, _)| seq + 1) else {
                // Caught up: what Paimon holds can go from the store.
                self.trim(&incarnation, position, snapshot_id, retention)
                    .await?;
                return Ok(report);
            };
            let batches = align_all(&chosen, &schema)?;
            self.commit(&incarnation, table, &batches, end).await?;
            report.rows += rows;
            report.commits += 1;
            progress.set_rows(report.rows);
            report.position = end;
            let (snapshot_id, reached) = self.tiered(&incarnation, table).await?;
            if reached != end {
                return Err(store_error(
                    LOCAL,
                    format!(
                        "tiering '{}' committed up to position {end}, but Paimon's newest \
                         tiering snapshot says {reached}",
                        self.name()
                    ),
                ));
            }
            self.trim(&incarnation, end, snapshot_id, retention).await?;
        }
    }

    /// Writes the rows into Paimon and commits them as identifier `end`,
    /// once: a retry after an uncertain commit is skipped by Paimon.
    async fn commit(
        &self,
        incarnation: &Incarnation,
        table: &Table,
        batches: &[RecordBatch],
        end: u64,
    ) -> Result<()> {
        failpoint("tier-before-write");
        let builder = table
            .new_write_builder()
            .with_commit_user(&incarnation.user)?;
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
        // Rows of a table dropped meanwhile never reach the next one.
        self.check_handle(table).await?;
        match self.read_meta().await? {
            Some(meta) if meta.incarnation == incarnation.id => {}
            Some(_) => {
                return Err(Error::StoreTableStale {
                    store: LOCAL.to_string(),
                    table: self.name(),
                })
            }
            None => return Err(self.missing()),
        }
        let identifier = i64::try_from(end)
            .map_err(|_| store_error(LOCAL, format!("position {end} overflows a commit id")))?;
        // An empty commit still records the position: segments set aside
        // (empty) are passed like any other.
        builder
            .new_commit()
            .with_ignore_empty_commit(false)
            .filter_and_commit_with_identifier(messages, identifier)
            .await?;
        failpoint("tier-after-commit");
        Ok(())
    }

    /// Records that Paimon holds the rows before `position` (as of
    /// `snapshot_id`), and deletes the segments that tiering passed at least
    /// `retention` ago.
    async fn trim(
        &self,
        incarnation: &Incarnation,
        position: u64,
        snapshot_id: Option<i64>,
        retention: Duration,
    ) -> Result<()> {
        let mut marker = self.marker(incarnation).await?.unwrap_or_default();
        let mut changed = false;
        let now = now_ms();
        if marker.position < position {
            if let Some(snapshot_id) = snapshot_id {
                marker.snapshot_id = snapshot_id;
                marker.position = position;
                marker.history.push(Passed {
                    position,
                    at_ms: now,
                });
                changed = true;
            }
        }
        failpoint("tier-before-trim");
        let cutoff = now.saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let below = marker
            .history
            .iter()
            .filter(|p| p.at_ms <= cutoff)
            .map(|p| p.position)
            .max();
        if let Some(below) = below {
            let before = marker.history.len();
            marker.history.retain(|p| p.position >= below);
            changed |= marker.history.len() != before;
        }
        if changed {
            let bytes = serde_json::to_vec(&marker).map_err(|e| store_error(LOCAL, e))?;
            self.root
                .put_replace(&path::tiered_marker(&incarnation.dir), Bytes::from(bytes))
                .await?;
        }
        let Some(below) = below else {
            return Ok(());
        };
        let _trim_lock = self.root.lock_trim(&self.dir, false).await?;
        let prefix = incarnation.dir.clone().join("log");
        let old: Vec<_> = self
            .root
            .objects
            .list(Some(&prefix))
            .try_filter(|meta| {
                let seq = path::segment_seq(&meta.location);
                futures::future::ready(seq.is_some_and(|s| s < below))
            })
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| store_error(LOCAL, e))?;
        for location in old {
            self.root.delete(&location).await?;
        }
        Ok(())
    }

    /// Rows in the store that Paimon does not hold yet.
    pub(crate) async fn pending_rows(&self, table: &Table) -> Result<u64> {
        let incarnation = self.current(table).await?;
        let (_, position) = self.tiered(&incarnation, table).await?;
        let segments = self
            .segments_from(&incarnation, position)
            .await?
            .unwrap_or_default();
        Ok(rows_of(segments.iter().map(|(_, s)| s)))
    }

    /// Moves the damaged segment at `position` aside (to `damaged/` beside
    /// the log) and puts an empty segment in its place, so reads and tiering
    /// go on past it. Returns what the segment held, as far as it can tell.
    pub(crate) async fn set_aside(&self, table: &Table, position: u64) -> Result<String> {
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        let incarnation = self.current(table).await?;
        let location = path::segment(&incarnation.dir, position);
        let Some(bytes) = self.root.get(&location).await? else {
            return Err(Error::InvalidStatement {
                statement: "set aside".to_string(),
                reason: format!("'{}' has no segment at position {position}", self.name()),
            });
        };
        let error = match segment::decode(&bytes) {
            Ok(_) => {
                return Err(Error::InvalidStatement {
                    statement: "set aside".to_string(),
                    reason: format!(
                        "the segment at position {position} of '{}' is not damaged; only \
                         damaged segments are set aside",
                        self.name()
                    ),
                })
            }
            Err(e) => e,
        };
        let Error::SegmentDamaged { held, .. } = self.damaged(&location, position, &error, &bytes)
        else {
            return Err(Error::Internal(
                "set aside: not a damage report".to_string(),
            ));
        };
        let aside = incarnation
            .dir
            .clone()
            .join("damaged")
            .join(format!("{position:020}.seg"));
        self.root.put_replace(&aside, bytes).await?;
        let schema = log_arrow_schema(table)?;
        let empty = segment::encode(&schema, &[], unique()).map_err(|e| store_error(LOCAL, e))?;
        self.root.put_replace(&location, Bytes::from(empty)).await?;
        incarnation.segments.lock().await.cache.remove(&position);
        Ok(format!(
            "set aside segment {position} of '{}' ({held}) as '{}'",
            self.name(),
            self.file(&aside)
        ))
    }

    /// Segments after `from`, waiting for one to be written. Fails when the
    /// log it needs was trimmed, or the table was dropped.
    async fn wait_for(&self, incarnation: &Incarnation, from: u64) -> Result<Vec<(u64, Segment)>> {
        loop {
            let notified = self.written.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let behind = Error::StreamBehind {
                table: self.name(),
                position: from,
            };
            match self.segments_from(incarnation, from).await? {
                None => return Err(behind),
                Some(segments) if !segments.is_empty() => return Ok(segments),
                Some(_) => {}
            }
            match self.read_meta().await? {
                Some(meta) if meta.incarnation == incarnation.id => {}
                _ => {
                    return Err(Error::DroppedDuringRead { table: self.name() });
                }
            }
            // Tiering passed `from` and the segment there is gone: trimmed.
            let passed = self
                .marker(incarnation)
                .await?
                .is_some_and(|m| m.position > from);
            if passed && matches!(self.fetch(incarnation, from).await?, Fetched::Absent) {
                return Err(behind);
            }
            // Writes in this process wake us; other processes' are found by looking again.
            let _ = tokio::time::timeout(FOLLOW_POLL, notified).await;
        }
    }
}

fn rows_of<'a>(segments: impl Iterator<Item = &'a Segment>) -> u64 {
    segments
        .flat_map(|s| s.iter())
        .map(|b| b.num_rows() as u64)
        .sum()
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
    incarnation: Arc<Incarnation>,
    schema: SchemaRef,
    pub(crate) snapshot_id: Option<i64>,
    batches: Vec<RecordBatch>,
    end: u64,
}

impl std::fmt::Debug for Incarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incarnation")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
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
        let start = (
            Arc::clone(&self.state),
            Arc::clone(&self.incarnation),
            Arc::clone(&self.schema),
            self.end,
        );
        let stream =
            futures::stream::try_unfold(start, |(state, incarnation, schema, from)| async move {
                let segments = state
                    .wait_for(&incarnation, from)
                    .await
                    .map_err(datafusion::error::DataFusionError::from)?;
                let next = segments.last().map_or(from, |(seq, _)| seq + 1);
                let batches = align_all(&segments, &schema)?;
                Ok::<_, datafusion::error::DataFusionError>(Some((
                    futures::stream::iter(batches.into_iter().map(Ok)),
                    (state, incarnation, schema, next),
                )))
            })
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        )))
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
