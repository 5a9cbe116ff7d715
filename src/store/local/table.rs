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
use datafusion::arrow::array::{Array, Int8Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use paimon::catalog::Identifier;
use paimon::spec::{CoreOptions, VALUE_KIND_FIELD_NAME};
use paimon::table::Table;
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Notify};

use super::error::LocalStoreError;
use super::root::{Created, PutFailed, Replaced, Root};
use super::segment::{self, log_schema, Entry, Part, PartList, SegmentError};
use super::{failpoint, leftovers, path, LOCAL, TIERING_LOG};
use crate::error::{Error, Result};
use crate::object_storage::S3Options;
use crate::progress::Progress;
use crate::store::{
    primary_keys, ChangeBatch, ChangeStream, RowKind, StoreLog, TierReport, WriteKind,
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

/// How many bytes of decoded rows a table's entry cache (entries and the
/// blocks they were coalesced into) keeps at most, per incarnation. Entries
/// beyond it are read from their files again when they are needed, so a
/// backlog of any size is read and tiered in bounded memory.
const CACHE_BYTES: usize = 64 << 20;

/// A block of coalesced entries holds at most this many rows...
const BLOCK_ROWS: usize = 8192;
/// ... and this many bytes. Entries or blocks of half that or more are
/// not coalesced further.
const BLOCK_BYTES: usize = 8 << 20;

/// A read goes through the log this many pieces (blocks, entries) at a
/// time, under one lock; it coalesces a stretch of more than
/// [`COALESCE_PIECES`] small in-memory pieces into blocks first.
const READ_CHUNK: usize = 1024;
const COALESCE_PIECES: usize = 32;

/// A log entry as this process holds it.
#[derive(Clone)]
enum Held {
    /// A segment's rows, decoded, as written (the schema of their time).
    Rows(Arc<Vec<RecordBatch>>),
    /// A multi-part write's list of parts; the parts are read when needed.
    Parts(Arc<PartList>),
}

impl Held {
    fn bytes(&self) -> usize {
        match self {
            Held::Rows(batches) => batches.iter().map(|b| b.get_array_memory_size()).sum(),
            Held::Parts(list) => 64 + list.parts.len() * 16,
        }
    }
}

/// What is remembered of every entry from the read position on, cached or not.
#[derive(Debug, Clone)]
struct Info {
    rows: u64,
    /// The names of the columns its rows carry (the table's at the time of
    /// the write, then the row kind).
    columns: Arc<Vec<String>>,
}

impl Info {
    fn of(schema: &Schema, rows: u64) -> Self {
        Self {
            rows,
            columns: Arc::new(schema.fields().iter().map(|f| f.name().clone()).collect()),
        }
    }
}

/// What reading an entry's object found.
enum Fetched {
    Entry(Held, Info),
    /// No object: never written, or trimmed.
    Absent,
}

/// The rows of consecutive entries (from its key in [`Segments::blocks`] to
/// `end`), copied into one batch: a read of many small writes yields a few
/// large batches, not one per write. Entries never change once written, so a
/// block is never stale; it goes with its incarnation, once tiering passed
/// its end, or when one of its entries is forgotten.
struct Block {
    end: u64,
    /// The entries' rows, in the log's schema of their time (one for all).
    batch: RecordBatch,
    /// Where each entry's rows start in `batch`, then the row count.
    offsets: Vec<usize>,
}

impl Block {
    fn bytes(&self) -> usize {
        self.batch.get_array_memory_size()
    }
}

/// A stretch of a read: rows in memory, or an entry read on its own.
enum Piece {
    /// Rows in the log's schema of their time.
    Rows(Vec<RecordBatch>),
    /// An entry not in memory, or a multi-part write: read by position.
    Entry(u64),
}

/// One step of a walk through the log (see [`Segments::units`]).
#[derive(Clone, Copy)]
enum Unit {
    /// The block starting at this position.
    Block(u64),
    /// A cached entry.
    Cached(u64),
    /// An entry read on its own.
    Other(u64),
}

struct Segments {
    /// Entries by position, from the last read position on, as long as
    /// they fit in `budget` (with `blocks`).
    cache: BTreeMap<u64, Held>,
    /// Blocks of coalesced entries, by first position; they never overlap,
    /// and an entry in a block is not in `cache`.
    blocks: BTreeMap<u64, Block>,
    /// Bytes of `cache` and `blocks`.
    cached_bytes: usize,
    budget: usize,
    /// What every entry from the last read position on holds.
    info: BTreeMap<u64, Info>,
    /// The next sequence number to look for; `None` until the log was listed.
    next: Option<u64>,
}

impl Default for Segments {
    fn default() -> Self {
        Self::with_budget(CACHE_BYTES)
    }
}

impl Segments {
    fn with_budget(budget: usize) -> Self {
        Self {
            cache: BTreeMap::new(),
            blocks: BTreeMap::new(),
            cached_bytes: 0,
            budget,
            info: BTreeMap::new(),
            next: None,
        }
    }

    fn remember(&mut self, seq: u64, held: &Held, info: Info) {
        self.info.insert(seq, info);
        if self.cache.contains_key(&seq) || self.block_at(seq).is_some() {
            return;
        }
        let bytes = held.bytes();
        if self.cached_bytes + bytes <= self.budget {
            self.cached_bytes += bytes;
            self.cache.insert(seq, held.clone());
        }
    }

    fn forget(&mut self, seq: u64) {
        self.info.remove(&seq);
        if let Some(held) = self.cache.remove(&seq) {
            self.cached_bytes = self.cached_bytes.saturating_sub(held.bytes());
        }
        if let Some(start) = self.block_at(seq).map(|(start, _)| start) {
            if let Some(block) = self.blocks.remove(&start) {
                self.cached_bytes = self.cached_bytes.saturating_sub(block.bytes());
            }
        }
    }

    /// What lies before `from` is in Paimon. A block reaching past `from`
    /// stays: reads take only its rows from `from` on.
    fn forget_before(&mut self, from: u64) {
        let kept = self.cache.split_off(&from);
        let dropped: usize = self.cache.values().map(Held::bytes).sum();
        self.cache = kept;
        let passed: Vec<u64> = self
            .blocks
            .range(..from)
            .filter(|(_, block)| block.end <= from)
            .map(|(start, _)| *start)
            .collect();
        let dropped_blocks: usize = passed
            .iter()
            .filter_map(|start| self.blocks.remove(start))
            .map(|block| block.bytes())
            .sum();
        self.cached_bytes = self.cached_bytes.saturating_sub(dropped + dropped_blocks);
        self.info = self.info.split_off(&from);
    }

    /// The block holding the entry `seq`, with its first position.
    fn block_at(&self, seq: u64) -> Option<(u64, &Block)> {
        self.blocks
            .range(..=seq)
            .next_back()
            .filter(|(_, block)| block.end > seq)
            .map(|(start, block)| (*start, block))
    }

    /// The rows of the entry `seq` if a block holds them: a copy, not a
    /// view. A view is sized by the whole block's buffers and keeps the
    /// block alive, so a tiering round summing its entries' sizes would
    /// flush (and write a Paimon file) every few one-row entries.
    fn block_rows(&self, seq: u64) -> Option<RecordBatch> {
        let (start, block) = self.block_at(seq)?;
        let index = usize::try_from(seq - start).ok()?;
        let (lo, hi) = (*block.offsets.get(index)?, *block.offsets.get(index + 1)?);
        let rows = u32::try_from(hi - lo).ok()?;
        let view = block.batch.slice(lo, hi - lo);
        take_record_batch(&view, &UInt32Array::from_iter_values(0..rows)).ok()
    }

    /// Coalesces the pieces in memory that end at `end` once more than
    /// [`COALESCE_PIECES`] of them are small: a process's own writes are
    /// copied into blocks as they arrive, a few dozen rows at a time, so the
    /// first read after a backlog built up does not copy it all at once.
    fn coalesce_tail(&mut self, end: u64) {
        let mut units = Vec::new();
        let mut seq = end;
        while seq > 0 && units.len() <= COALESCE_PIECES + 1 {
            let at = seq - 1;
            let unit = match self.block_at(at) {
                Some((start, _)) => Unit::Block(start),
                None if matches!(self.cache.get(&at), Some(Held::Rows(_))) => Unit::Cached(at),
                None => break,
            };
            if self.small(unit).is_none() {
                break;
            }
            seq = match unit {
                Unit::Block(start) => start,
                Unit::Cached(at) | Unit::Other(at) => at,
            };
            units.push(unit);
        }
        if units.len() > COALESCE_PIECES {
            units.reverse();
            self.coalesce(&units);
        }
    }

    /// The log from `from` on, up to `end` or [`READ_CHUNK`] steps: a block
    /// is one step, an entry another.
    fn units(&self, from: u64, end: u64) -> Vec<Unit> {
        let mut units = Vec::new();
        let mut seq = from;
        while seq < end && units.len() < READ_CHUNK {
            if let Some((start, block)) = self.block_at(seq) {
                units.push(Unit::Block(start));
                seq = block.end;
            } else {
                units.push(match self.cache.get(&seq) {
                    Some(Held::Rows(_)) => Unit::Cached(seq),
                    _ => Unit::Other(seq),
                });
                seq += 1;
            }
        }
        units
    }

    /// The pieces of a read of `[from, end)`, from `from` on, up to
    /// [`READ_CHUNK`] steps, and the position after them. Never anything
    /// outside `[from, end)`: blocks reaching outside it are sliced.
    fn pieces(&mut self, from: u64, end: u64) -> (Vec<Piece>, u64) {
        let mut units = self.units(from, end);
        let small = units
            .iter()
            .filter(|&&unit| self.small(unit).is_some())
            .count();
        if small > COALESCE_PIECES && self.coalesce(&units) {
            units = self.units(from, end);
        }
        let mut pieces = Vec::with_capacity(units.len());
        let mut seq = from;
        for unit in units {
            match unit {
                Unit::Block(start) => {
                    let Some(block) = self.blocks.get(&start) else {
                        continue;
                    };
                    let upto = block.end.min(end);
                    let index = |position: u64| {
                        usize::try_from(position - start)
                            .ok()
                            .and_then(|i| block.offsets.get(i).copied())
                    };
                    if let (Some(lo), Some(hi)) = (index(seq), index(upto)) {
                        if hi > lo {
                            pieces.push(Piece::Rows(vec![block.batch.slice(lo, hi - lo)]));
                        }
                    }
                    seq = upto;
                }
                Unit::Cached(at) => {
                    if let Some(Held::Rows(batches)) = self.cache.get(&at) {
                        pieces.push(Piece::Rows(batches.as_ref().clone()));
                    } else {
                        pieces.push(Piece::Entry(at));
                    }
                    seq = at + 1;
                }
                Unit::Other(at) => {
                    pieces.push(Piece::Entry(at));
                    seq = at + 1;
                }
            }
        }
        (pieces, seq)
    }

    /// Copies runs of small in-memory pieces among `units` into blocks of
    /// up to [`BLOCK_ROWS`] rows, as far as the budget allows. Whether it
    /// made any.
    fn coalesce(&mut self, units: &[Unit]) -> bool {
        let mut made = false;
        let mut run: Vec<Unit> = Vec::new();
        let mut run_schema: Option<SchemaRef> = None;
        let (mut run_rows, mut run_bytes) = (0usize, 0usize);
        for &unit in units.iter().chain(std::iter::once(&Unit::Other(u64::MAX))) {
            let small = self.small(unit);
            let fits = small.as_ref().is_some_and(|(schema, rows, bytes)| {
                let same = match (schema, &run_schema) {
                    (Some(schema), Some(run)) => schema == run,
                    _ => true,
                };
                same && run_rows + rows <= BLOCK_ROWS && run_bytes + bytes <= BLOCK_BYTES
            });
            if !fits {
                if run.len() > 1 {
                    made |= self.make_block(&run, run_schema.as_ref());
                }
                run.clear();
                (run_schema, run_rows, run_bytes) = (None, 0, 0);
            }
            if let Some((schema, rows, bytes)) = small {
                run.push(unit);
                run_schema = run_schema.or(schema);
                run_rows += rows;
                run_bytes += bytes;
            }
        }
        made
    }

    /// The schema (`None`: no rows), rows and bytes of a piece that can be
    /// coalesced: in memory, and under half a block.
    fn small(&self, unit: Unit) -> Option<(Option<SchemaRef>, usize, usize)> {
        let (schema, rows, bytes) = match unit {
            Unit::Block(start) => {
                let block = self.blocks.get(&start)?;
                (
                    Some(block.batch.schema()),
                    block.batch.num_rows(),
                    block.bytes(),
                )
            }
            Unit::Cached(seq) => {
                let Some(Held::Rows(batches)) = self.cache.get(&seq) else {
                    return None;
                };
                let schema = batches.first().map(RecordBatch::schema);
                if batches.iter().any(|b| Some(b.schema()) != schema) {
                    return None;
                }
                (
                    schema,
                    batches.iter().map(RecordBatch::num_rows).sum(),
                    batches.iter().map(RecordBatch::get_array_memory_size).sum(),
                )
            }
            Unit::Other(_) => return None,
        };
        (rows < BLOCK_ROWS / 2 && bytes < BLOCK_BYTES / 2).then_some((schema, rows, bytes))
    }

    /// Replaces the pieces of `run` (consecutive, all small) with one block,
    /// if it fits the budget. Whether it did.
    fn make_block(&mut self, run: &[Unit], schema: Option<&SchemaRef>) -> bool {
        let (Some(first), Some(last), Some(schema)) = (run.first(), run.last(), schema) else {
            return false;
        };
        let start = match *first {
            Unit::Block(start) | Unit::Cached(start) | Unit::Other(start) => start,
        };
        let end = match *last {
            Unit::Block(start) => match self.blocks.get(&start) {
                Some(block) => block.end,
                None => return false,
            },
            Unit::Cached(seq) | Unit::Other(seq) => seq + 1,
        };
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut offsets = Vec::new();
        let mut rows = 0;
        let mut freed = 0;
        for unit in run {
            match *unit {
                Unit::Block(start) => {
                    let Some(block) = self.blocks.get(&start) else {
                        return false;
                    };
                    offsets.extend(
                        block.offsets[..block.offsets.len() - 1]
                            .iter()
                            .map(|o| rows + o),
                    );
                    rows += block.batch.num_rows();
                    freed += block.bytes();
                    batches.push(block.batch.clone());
                }
                Unit::Cached(seq) => {
                    let Some(held @ Held::Rows(entry)) = self.cache.get(&seq) else {
                        return false;
                    };
                    offsets.push(rows);
                    rows += entry.iter().map(RecordBatch::num_rows).sum::<usize>();
                    freed += held.bytes();
                    batches.extend(entry.iter().cloned());
                }
                Unit::Other(_) => return false,
            }
        }
        offsets.push(rows);
        // Coalescing only speeds reads up: rows that do not concatenate stay as they are.
        let Ok(batch) = concat_batches(schema, &batches) else {
            return false;
        };
        let block = Block {
            end,
            batch,
            offsets,
        };
        let bytes = block.bytes();
        if self.cached_bytes.saturating_sub(freed) + bytes > self.budget {
            return false;
        }
        for unit in run {
            match *unit {
                Unit::Block(start) => {
                    self.blocks.remove(&start);
                }
                Unit::Cached(seq) => {
                    self.cache.remove(&seq);
                }
                Unit::Other(_) => {}
            }
        }
        self.cached_bytes = self.cached_bytes.saturating_sub(freed) + bytes;
        self.blocks.insert(start, block);
        true
    }
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
    /// Log entry position -> (its object's size, its bytes with the parts
    /// of a multi-part write), for entries [`TableState::waiting`] looked
    /// into; an entry replaced since (set aside) has another size.
    entry_bytes: Mutex<BTreeMap<u64, (u64, u64)>>,
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
            entry_bytes: Default::default(),
        }
    }
}

/// What [`TableState::delete_files`] deletes.
#[derive(Debug, Clone, Copy)]
enum Doomed<'a> {
    /// Every object of the table, `table.json` first (a dropped table).
    All,
    /// The files of the incarnation a replacement took out of
    /// `table.json`, and nothing else: on an object store a deletion can
    /// run late, after another process attached the table again, and
    /// only an incarnation no `table.json` can name again is safe to
    /// delete then. (One left by a replacement cut short stays until the
    /// table is dropped; it is never read.)
    Incarnation(&'a TableMeta),
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

/// Where the Paimon consumer `consumer` of `table` lives (Paimon's
/// `ConsumerManager` layout, which Java Paimon's expiry reads too).
fn consumer_path(table: &Table, consumer: &str) -> String {
    format!(
        "{}/consumer/consumer-{consumer}",
        table.location().trim_end_matches('/')
    )
}

/// Registers the incarnation's position as a Paimon consumer (named after
/// its commit user) that reads `next` next: snapshot expiry, ours and Java
/// Paimon's, keeps `next` and every snapshot after it. The store needs them
/// to prove its tiered position: the search for its newest tiering commit
/// walks down to the marker's snapshot (or the one after the base
/// snapshot), and an expired snapshot in between makes the position
/// unknown. Tiering moves it forward each time it records its marker.
async fn pin(table: &Table, consumer: &str, next: i64) -> Result<()> {
    let path = consumer_path(table, consumer);
    let json = serde_json::json!({ "nextSnapshot": next }).to_string();
    let written = async {
        table
            .file_io()
            .mkdirs(&format!(
                "{}/consumer/",
                table.location().trim_end_matches('/')
            ))
            .await?;
        table
            .file_io()
            .new_output(&path)?
            .write(Bytes::from(json))
            .await
    }
    .await;
    written.map_err(|source| LocalStoreError::Consumer { path, source }.into())
}

/// Removes the consumer of an incarnation that was never used; best effort
/// (one left behind keeps snapshots until deleted by hand).
async fn unpin(table: &Table, consumer: &str) {
    let _ = table
        .file_io()
        .delete_file(&consumer_path(table, consumer))
        .await;
}

pub(crate) fn now_ms() -> i64 {
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
        let bytes = self.root.get(location).await?;
        self.parse_json(location, bytes)
    }

    /// [`Self::read_json`] of `bytes`, read from `location` already.
    fn parse_json<T: serde::de::DeserializeOwned>(
        &self,
        location: &Path,
        bytes: Option<Bytes>,
    ) -> Result<Option<T>> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|source| {
            LocalStoreError::Unreadable {
                file: self.file(location),
                source,
            }
            .into()
        })
    }

    /// The incarnation `table.json` names now, checked against the Paimon
    /// table: the cache of an incarnation this process knew is reused, any
    /// other is dropped.
    pub(crate) async fn current(&self, table: &Table) -> Result<Arc<Incarnation>> {
        let meta = self.read_meta().await?;
        self.current_from(meta, table).await
    }

    /// [`Self::current`] from `table.json` as read just now.
    async fn current_from(
        &self,
        meta: Option<TableMeta>,
        table: &Table,
    ) -> Result<Arc<Incarnation>> {
        let meta = meta.ok_or_else(|| self.missing())?;
        let (incarnation, fresh) = {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            match current.as_ref() {
                Some(known) if known.id == meta.incarnation => (Arc::clone(known), false),
                _ => {
                    let fresh = Arc::new(Incarnation::new(&self.dir, &meta));
                    *current = Some(Arc::clone(&fresh));
                    (fresh, true)
                }
            }
        };
        self.check_paimon(&incarnation, table).await?;
        if fresh {
            self.ensure_pinned(&incarnation, table).await;
        }
        Ok(incarnation)
    }

    /// An incarnation attached by an older version of this crate has no
    /// consumer ([`pin`]) yet: the first time this process opens it, one is
    /// registered from the marker's snapshot (or the base snapshot's
    /// successor). Best effort: a store that cannot write it works as
    /// before, without the pin, and says so on the log.
    async fn ensure_pinned(&self, incarnation: &Incarnation, table: &Table) {
        let path = consumer_path(table, &incarnation.user);
        match table.file_io().exists(&path).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                log::warn!(
                    "lakestream store '{LOCAL}': cannot check Paimon consumer '{path}' of \
                     '{}': {e}",
                    self.name()
                );
                return;
            }
        }
        let next = match self.known(incarnation).await {
            Ok(Some(marker)) => marker.snapshot_id,
            Ok(None) => incarnation.base_snapshot.map_or(1, |b| b + 1),
            Err(e) => {
                log::warn!(
                    "lakestream store '{LOCAL}': cannot register Paimon consumer '{path}' of \
                     '{}' (its tiering marker is unreadable: {e}); snapshot expiry does not \
                     know which snapshots the store needs",
                    self.name()
                );
                return;
            }
        };
        if let Err(e) = pin(table, &incarnation.user, next).await {
            log::warn!(
                "lakestream store '{LOCAL}': {e}; snapshot expiry does not know which snapshots \
                 the store needs"
            );
        }
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
    ///
    /// On an object store the tiering lease can run out while this waits
    /// on the server (a put stalled in retries, a paused process), and
    /// another process attach the table meanwhile. So `table.json` is
    /// replaced only if it is still the version read (a conditional put),
    /// and a replacement deletes only the incarnation it replaced: a late
    /// put fails instead of taking the other process's table away, and a
    /// late deletion finds nothing but files no `table.json` names.
    pub(crate) async fn attach(&self, table: &Table) -> Result<()> {
        // A store that cannot create safely is refused before it holds rows.
        self.root.check_create_if_absent().await?;
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        // Asked only now the locks are held: a table dropped and created
        // again while this waited for them is the one there, and a handle
        // on the dropped one is refused, never taken for the table there.
        self.check_handle(table).await?;
        let created = paimon_created_ms(table).await?;
        let location = path::table_meta(&self.dir);
        let (old, version) = match self.root.get_versioned(&location).await? {
            None => (None, None),
            Some((bytes, version)) => (
                self.parse_json::<TableMeta>(&location, Some(bytes))?,
                Some(version),
            ),
        };
        let (replaced, _writes) = match old {
            None => (None, None),
            Some(meta) if meta.paimon_created_ms.is_none_or(|known| known == created) => {
                if !crate::options::is_enabled(table.schema().options()) {
                    // Boxed: its futures would make attach's too big for a stack.
                    Box::pin(self.check_columns(table)).await?;
                    Box::pin(self.check_stranded(table)).await?;
                }
                return Ok(());
            }
            // The rows of a dropped table never come back. Held until the
            // old files are gone: no write is between checking the
            // incarnation and its put (on local disk; elsewhere a write
            // reads `table.json` again after its put, and the new one is
            // written before anything is deleted), so none lands where the
            // old files were, after they went, with nothing left to read
            // or delete it.
            Some(meta) => (Some(meta), self.root.lock_trim(&self.dir, false).await?),
        };
        let base_snapshot = table.snapshot_manager().get_latest_snapshot_id().await?;
        let meta = TableMeta {
            format: META_FORMAT,
            incarnation: new_incarnation_id(),
            paimon_created_ms: Some(created),
            base_snapshot,
            paimon_location: table.location().to_string(),
        };
        let bytes = serde_json::to_vec_pretty(&meta)
            .map_err(|e| LocalStoreError::encoding("table.json", e))?;
        if version.is_some() {
            self.root.check_conditional_replace().await?;
        }
        // Before `table.json` names the incarnation: from then on its
        // position is proven by the snapshots after the base one, which
        // expiry must keep until tiering records a newer one.
        let fresh = Incarnation::new(&self.dir, &meta);
        pin(table, &fresh.user, base_snapshot.map_or(1, |b| b + 1)).await?;
        let outcome = self
            .root
            .replace_if(&location, Bytes::from(bytes), version)
            .await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if outcome == Replaced::Changed {
            // Another process attached: this incarnation is never used.
            unpin(table, &fresh.user).await;
            // Attached by another process meanwhile: to this Paimon table,
            // the work is done; to another, this process's view is stale.
            return match self.read_meta().await? {
                Some(there) if there.paimon_created_ms == Some(created) => Ok(()),
                _ => Err(LocalStoreError::AttachedMeanwhile { table: self.name() }.into()),
            };
        }
        if let Some(replaced) = replaced {
            // A crash before this leaves the old files unread: never rows.
            self.delete_files(Doomed::Incarnation(&replaced)).await?;
        }
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
        let rows = match self.scan(&incarnation, position, true).await? {
            Some((_, rows)) => rows,
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

    /// Turning the mode on again over writes that hold columns the table
    /// no longer has (dropped or renamed while the mode was off, before
    /// tiering): refused, as tiering could not pass them
    /// ([`LocalStoreError::ColumnsGone`]).
    async fn check_columns(&self, table: &Table) -> Result<()> {
        let incarnation = self.current(table).await?;
        let (_, position) = self.tiered(&incarnation, table).await?;
        let Some((end, _)) = self.scan(&incarnation, position, true).await? else {
            // Trimmed under us: only tiering trims, so they are in Paimon.
            return Ok(());
        };
        let schema = log_schema(table)?;
        let known = column_names(&schema);
        let segments = incarnation.segments.lock().await;
        for (&seq, info) in segments.info.range(position..end) {
            let missing = missing_columns(&known, &info.columns);
            if !missing.is_empty() {
                return Err(self.columns_gone(seq, &missing));
            }
        }
        Ok(())
    }

    /// Whether the table's newest schema lacks one of `missing` too (and the
    /// handle that lacks them is not merely older than the write).
    async fn gone_for_good(&self, table: &Table, missing: &[String]) -> Result<bool> {
        if table.rest_env().is_some() {
            // Handles of REST tables are loaded for each round.
            return Ok(true);
        }
        let manager = paimon::table::SchemaManager::new(
            table.file_io().clone(),
            table.location().to_string(),
        );
        let Some(latest) = manager.latest().await? else {
            return Ok(true);
        };
        Ok(missing
            .iter()
            .any(|c| latest.fields().iter().all(|f| f.name() != c.as_str())))
    }

    fn columns_gone(&self, position: u64, missing: &[String]) -> Error {
        LocalStoreError::ColumnsGone {
            table: self.name(),
            position,
            columns: crate::name::columns_phrase(missing),
        }
        .into()
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
        self.delete_files(Doomed::All).await?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// Deletes the table's objects ([`Doomed`]). The tiering lock and lease
    /// stay: they are how processes agree on who tiers, across
    /// incarnations, and the caller holds them while it deletes.
    async fn delete_files(&self, doomed: Doomed<'_>) -> Result<()> {
        let meta = path::table_meta(&self.dir);
        let listed = match doomed {
            Doomed::All => {
                // A half-deleted table is a missing table.
                self.root.delete(&meta).await?;
                self.dir.clone()
            }
            Doomed::Incarnation(replaced) => Incarnation::new(&self.dir, replaced).dir,
        };
        let paths: Vec<Path> = self
            .root
            .objects
            .list(Some(&listed))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(LocalStoreError::from)?;
        let lease = path::lease_dir(&self.dir);
        // A table of the first format kept its files beside the
        // incarnations that replaced it.
        let first_format = matches!(doomed, Doomed::Incarnation(m) if m.incarnation.is_empty());
        let targets = paths
            .into_iter()
            .filter(|location| {
                let lock = matches!(location.filename(), Some("tier.lock" | "trim.lock"))
                    || location.prefix_matches(&lease);
                let incarnation = first_format
                    && location
                        .prefix_match(&self.dir)
                        .and_then(|mut parts| parts.next())
                        .is_some_and(|first| first.as_ref().starts_with("i-"));
                *location != meta && !lock && !incarnation
            })
            .collect();
        self.root.delete_all(targets).await
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
            segment::encode(&schema, &batches, unique())
                .map_err(|e| LocalStoreError::encoding("a log segment", e))?,
        );
        let info = Info::of(&schema, batches.iter().map(|b| b.num_rows() as u64).sum());
        self.put_entry(
            table,
            None,
            bytes,
            Held::Rows(Arc::new(batches)),
            info,
            retention,
        )
        .await
    }

    /// Puts a log entry at the next free position, never below what tiering
    /// passed. With `expect`, the entry belongs to that incarnation (its
    /// parts were written there) and is not applied to any other.
    async fn put_entry(
        &self,
        table: &Table,
        expect: Option<&Incarnation>,
        bytes: Bytes,
        held: Held,
        info: Info,
        retention: Duration,
    ) -> Result<()> {
        let started = Instant::now();
        // From checking the incarnation to the put, no segment is deleted
        // and the table is not dropped: both take this lock exclusively (on
        // local disk; elsewhere the retention and the checks below see to it).
        // Never below what tiering passed, whatever this process cached
        // (read before this process's other writes are waited for: a put
        // long after it is checked against the retention below).
        let (trim_lock, incarnation, tiered) = self.locked_and_tiered(table).await?;
        if expect.is_some_and(|expected| expected.id != incarnation.id) {
            return Err(Error::WriteNotApplied {
                table: self.name(),
                reason: "the table was dropped and created again while the write ran".to_string(),
            });
        }
        let mut segments = incarnation.segments.lock().await;
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
        segments.remember(seq, &held, info);
        segments.next = Some(seq + 1);
        segments.coalesce_tail(seq + 1);
        drop(segments);
        self.written.notify_waiters();
        Ok(())
    }

    /// Starts a multi-part write of rows with `schema` (the log's).
    pub(crate) async fn start_parts(
        self: &Arc<Self>,
        table: &Table,
        schema: &SchemaRef,
    ) -> Result<PartsWriter> {
        let incarnation = self.current(table).await?;
        let write_id = unique();
        Ok(PartsWriter {
            state: Arc::clone(self),
            table: table.clone(),
            incarnation,
            write_id,
            name: format!("{write_id:032x}"),
            columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
            parts: Vec::new(),
        })
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
            .map_err(LocalStoreError::from)?;
        Ok(seqs.iter().max().map_or(0, |max| max + 1))
    }

    /// Reads the log entry `seq`.
    async fn fetch(&self, incarnation: &Incarnation, seq: u64) -> Result<Fetched> {
        let location = path::segment(&incarnation.dir, seq);
        let Some(bytes) = self.root.get(&location).await? else {
            return Ok(Fetched::Absent);
        };
        match segment::decode_entry(&bytes) {
            Ok(Entry::Rows(batches)) => {
                let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
                let info = match batches.first() {
                    Some(batch) => Info::of(&batch.schema(), rows),
                    None => Info {
                        rows,
                        columns: Default::default(),
                    },
                };
                Ok(Fetched::Entry(Held::Rows(Arc::new(batches)), info))
            }
            Ok(Entry::Parts(list)) => {
                let info = Info {
                    rows: list.rows(),
                    columns: Arc::new(list.columns.clone()),
                };
                Ok(Fetched::Entry(Held::Parts(Arc::new(list)), info))
            }
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

    /// Brings what this process knows of the log up to date from `from` on
    /// and returns its end and the rows in `[from, end)`, as one look: every
    /// entry there was there when looked at. `Ok(None)`: an entry at or
    /// after `from` is gone (trimmed after the retention); plan again.
    /// `from_tiered`: `from` is the tiered position, and what lies before it
    /// (in Paimon) can leave the cache; a streaming read's own position says
    /// nothing about what other reads of the process still need.
    async fn scan(
        &self,
        incarnation: &Incarnation,
        from: u64,
        from_tiered: bool,
    ) -> Result<Option<(u64, u64)>> {
        self.scan_with(incarnation, from, from_tiered, None).await
    }

    /// [`Self::scan`], with the entry at one position already fetched (at
    /// or after the look began: an entry, once there, stays as it is).
    async fn scan_with(
        &self,
        incarnation: &Incarnation,
        from: u64,
        from_tiered: bool,
        mut fetched: Option<(u64, Fetched)>,
    ) -> Result<Option<(u64, u64)>> {
        let mut segments = incarnation.segments.lock().await;
        if segments.next.is_none() {
            segments.next = Some(self.list(incarnation).await?);
        }
        if from_tiered {
            segments.forget_before(from);
        }
        let listed_end = segments.next.unwrap_or(0);
        // The entries known already, in one pass (a backlog of thousands of
        // small writes is walked at every read).
        let (mut seq, mut rows) = (from, 0);
        for (&at, info) in segments.info.range(from..) {
            if at != seq {
                break;
            }
            rows += info.rows;
            seq += 1;
        }
        loop {
            if !segments.info.contains_key(&seq) {
                let entry = match fetched.take() {
                    Some((at, entry)) if at == seq => entry,
                    _ => self.fetch(incarnation, seq).await?,
                };
                match entry {
                    Fetched::Entry(held, info) => segments.remember(seq, &held, info),
                    // Past the end: nothing was written there yet.
                    Fetched::Absent if seq >= listed_end => break,
                    Fetched::Absent => return Ok(None),
                }
            }
            rows += segments.info.get(&seq).map_or(0, |info| info.rows);
            seq += 1;
        }
        segments.next = Some(listed_end.max(seq));
        Ok(Some((seq, rows)))
    }

    /// What the entry `seq` holds: from the cache, or read again.
    async fn entry(&self, incarnation: &Incarnation, seq: u64) -> Result<Option<(Held, Info)>> {
        let mut segments = incarnation.segments.lock().await;
        if let (Some(held), Some(info)) = (segments.cache.get(&seq), segments.info.get(&seq)) {
            return Ok(Some((held.clone(), info.clone())));
        }
        if let (Some(rows), Some(info)) = (segments.block_rows(seq), segments.info.get(&seq)) {
            return Ok(Some((Held::Rows(Arc::new(vec![rows])), info.clone())));
        }
        match self.fetch(incarnation, seq).await? {
            Fetched::Entry(held, info) => {
                if segments.next.is_some_and(|next| seq < next) {
                    segments.remember(seq, &held, info.clone());
                }
                Ok(Some((held, info)))
            }
            Fetched::Absent => Ok(None),
        }
    }

    /// The rows of part `index` of a multi-part write committed at `seq`.
    async fn read_part(
        &self,
        incarnation: &Incarnation,
        list: &PartList,
        seq: u64,
        index: usize,
    ) -> Result<Vec<RecordBatch>> {
        let location = path::part(&incarnation.dir, &list.write_id, index);
        let part = list.parts.get(index).ok_or_else(|| {
            Error::Internal(format!(
                "part {index} of a write of {} parts",
                list.parts.len()
            ))
        })?;
        let damaged = |reason: String| Error::SegmentDamaged {
            table: self.name(),
            file: self.file(&location),
            position: seq,
            reason,
            held: format!(
                "it is part {} of {} of a write of {} rows, and held {} of them",
                index + 1,
                list.parts.len(),
                list.rows(),
                part.rows
            ),
        };
        let checked = match self.root.get(&location).await? {
            Some(bytes) => segment::decode_part(&bytes, part),
            None => {
                // Trimmed under a slow read: tiering passed it long ago.
                let passed = self
                    .marker(incarnation)
                    .await?
                    .is_some_and(|m| m.position > seq);
                if passed {
                    return Err(Error::StreamBehind {
                        table: self.name(),
                        position: seq,
                    });
                }
                Err("the part is missing".to_string())
            }
        };
        match checked {
            Ok(batches) => Ok(batches),
            Err(reason) => {
                // A damaged write may be set aside by another process: its
                // entry is read again next time.
                incarnation.segments.lock().await.forget(seq);
                Err(damaged(reason))
            }
        }
    }

    /// The rows of the entry `seq`, aligned with `schema`, read one part at
    /// a time. An entry that is gone was trimmed under the read.
    async fn entry_rows(
        self: &Arc<Self>,
        incarnation: &Arc<Incarnation>,
        seq: u64,
        schema: &SchemaRef,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let Some((held, _)) = self.entry(incarnation, seq).await? else {
            return Err(Error::StreamBehind {
                table: self.name(),
                position: seq,
            });
        };
        let align = {
            let schema = Arc::clone(schema);
            move |batch: &RecordBatch| {
                segment::align(batch, &schema)
                    .map_err(|source| LocalStoreError::SchemaChanged { source }.into())
            }
        };
        match held {
            Held::Rows(batches) => {
                let aligned: Vec<Result<RecordBatch>> = batches.iter().map(&align).collect();
                Ok(futures::stream::iter(aligned).boxed())
            }
            Held::Parts(list) => {
                let (state, incarnation) = (Arc::clone(self), Arc::clone(incarnation));
                let parts = futures::stream::iter(0..list.parts.len())
                    .then(move |index| {
                        let (state, incarnation, list) = (
                            Arc::clone(&state),
                            Arc::clone(&incarnation),
                            Arc::clone(&list),
                        );
                        let align = align.clone();
                        async move {
                            let batches = state.read_part(&incarnation, &list, seq, index).await?;
                            let aligned: Vec<Result<RecordBatch>> =
                                batches.iter().map(&align).collect();
                            Ok::<_, Error>(futures::stream::iter(aligned))
                        }
                    })
                    .try_flatten();
                Ok(parts.boxed())
            }
        }
    }

    /// A batch of the log (in its schema, see [`segment::log_schema`]) as
    /// the change batch it holds: the table's columns, and the kinds the
    /// row kind column holds.
    fn change_batch(&self, batch: &RecordBatch) -> Result<ChangeBatch> {
        let Some((kinds, columns)) = batch.columns().split_last() else {
            let source = ArrowError::SchemaError(format!(
                "a batch of the log has no {} column",
                segment::ROW_KIND_COLUMN
            ));
            return Err(LocalStoreError::Batch { source }.into());
        };
        let table_columns: Vec<usize> = (0..columns.len()).collect();
        let rows = batch
            .project(&table_columns)
            .map_err(|source| LocalStoreError::Batch { source })?;
        ChangeBatch::from_kind_column(rows, kinds.as_ref()).map_err(|source| {
            LocalStoreError::RowKinds {
                table: self.name(),
                source,
            }
            .into()
        })
    }

    /// The rows of the entries in `[from, end)`, aligned with `schema`: the
    /// blocks and entries in memory as they are (small ones coalesced first,
    /// see [`Segments::pieces`]), the others one entry (one part of a
    /// multi-part write) at a time.
    fn entries_rows(
        self: &Arc<Self>,
        incarnation: &Arc<Incarnation>,
        schema: &SchemaRef,
        from: u64,
        end: u64,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let start = (
            Arc::clone(self),
            Arc::clone(incarnation),
            Arc::clone(schema),
            from,
        );
        futures::stream::try_unfold(start, move |(state, incarnation, schema, seq)| async move {
            if seq >= end {
                return Ok(None);
            }
            let (pieces, next) = incarnation.segments.lock().await.pieces(seq, end);
            let rows = {
                let (state, incarnation, schema) = (
                    Arc::clone(&state),
                    Arc::clone(&incarnation),
                    Arc::clone(&schema),
                );
                futures::stream::iter(pieces)
                    .then(move |piece| {
                        let (state, incarnation, schema) = (
                            Arc::clone(&state),
                            Arc::clone(&incarnation),
                            Arc::clone(&schema),
                        );
                        async move {
                            match piece {
                                Piece::Rows(batches) => {
                                    let aligned: Vec<Result<RecordBatch>> = batches
                                        .iter()
                                        .map(|batch| {
                                            segment::align(batch, &schema).map_err(|source| {
                                                LocalStoreError::SchemaChanged { source }.into()
                                            })
                                        })
                                        .collect();
                                    Ok(futures::stream::iter(aligned).boxed())
                                }
                                Piece::Entry(seq) => {
                                    state.entry_rows(&incarnation, seq, &schema).await
                                }
                            }
                        }
                    })
                    .try_flatten()
            };
            Ok::<_, Error>(Some((rows, (state, incarnation, schema, next))))
        })
        .try_flatten()
        .boxed()
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
        let known = self.known(incarnation).await?;
        let latest = table.snapshot_manager().get_latest_snapshot_id().await?;
        self.tiered_from(incarnation, table, known, latest).await
    }

    /// A write's trim lock (shared; `None` off local disk), then the
    /// incarnation `table.json` names and the tiered position
    /// ([`Self::tiered`]) as of holding it. On local disk, with an
    /// incarnation known, `table.json` and that incarnation's marker and
    /// proof are read in the lock's own trip to the blocking pool, and
    /// Paimon's latest snapshot id beside it: read before the lock, it may
    /// be older than the marker read under it, which [`Self::tiered_from`]
    /// sees and reads again; an older one otherwise only finds less tiered,
    /// never a position a trim passed (trims follow their marker).
    async fn locked_and_tiered(
        &self,
        table: &Table,
    ) -> Result<(Option<std::fs::File>, Arc<Incarnation>, u64)> {
        let guess = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(guess) = guess.filter(|_| self.root.local_dir.is_some()) {
            let meta = path::table_meta(&self.dir);
            let marker = path::tiered_marker(&guess.dir);
            let proof = path::tiered_proof(&guess.dir);
            let paths = vec![meta.clone(), marker.clone(), proof.clone()];
            let manager = table.snapshot_manager();
            let (locked, latest) = futures::join!(
                self.root.lock_trim_reading(&self.dir, paths),
                manager.get_latest_snapshot_id()
            );
            if let Some((lock, read)) = locked? {
                let mut read = read.into_iter();
                let mut next = || read.next().flatten();
                let (meta_bytes, marker_bytes, proof_bytes) = (next(), next(), next());
                let incarnation = self
                    .current_from(self.parse_json(&meta, meta_bytes)?, table)
                    .await?;
                let known = self.parse_json(&marker, marker_bytes).and_then(|marker| {
                    Ok(Self::more_known(
                        marker,
                        self.parse_json(&proof, proof_bytes)?,
                    ))
                });
                let (_, tiered) = self
                    .tiered_if_guessed(&guess, &incarnation, table, known, latest)
                    .await?;
                return Ok((Some(lock), incarnation, tiered));
            }
        }
        let trim_lock = self.root.lock_trim(&self.dir, true).await?;
        let (incarnation, _, tiered) = self.current_and_tiered(table).await?;
        Ok((trim_lock, incarnation, tiered))
    }

    /// The incarnation `table.json` names and the tiered position
    /// ([`Self::tiered`]) at once: on an object store each read is a round
    /// trip, so `table.json`, the marker and proof of the incarnation this
    /// process knew, and the latest snapshot are read together. Should the
    /// incarnation have changed, its marker is read again after.
    async fn current_and_tiered(
        &self,
        table: &Table,
    ) -> Result<(Arc<Incarnation>, Option<i64>, u64)> {
        let guess = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(guess) = guess else {
            let incarnation = self.current(table).await?;
            let (snapshot, position) = self.tiered(&incarnation, table).await?;
            return Ok((incarnation, snapshot, position));
        };
        let manager = table.snapshot_manager();
        let (incarnation, known, latest) = futures::join!(
            self.current(table),
            self.known(&guess),
            manager.get_latest_snapshot_id()
        );
        let incarnation = incarnation?;
        let (snapshot, position) = self
            .tiered_if_guessed(&guess, &incarnation, table, known, latest)
            .await?;
        Ok((incarnation, snapshot, position))
    }

    /// The tiered position from `known` and `latest`, read beside
    /// `table.json` for the incarnation `guess`: when `table.json` named
    /// another, they are of the wrong one and it is read again.
    async fn tiered_if_guessed(
        &self,
        guess: &Arc<Incarnation>,
        incarnation: &Arc<Incarnation>,
        table: &Table,
        known: Result<Option<TieredMarker>>,
        latest: paimon::Result<Option<i64>>,
    ) -> Result<(Option<i64>, u64)> {
        if Arc::ptr_eq(incarnation, guess) {
            self.tiered_from(incarnation, table, known?, latest?).await
        } else {
            self.tiered(incarnation, table).await
        }
    }

    /// [`Self::tiered`] from the marker or proof `known` and the `latest`
    /// snapshot id, read in either order or at once.
    async fn tiered_from(
        &self,
        incarnation: &Incarnation,
        table: &Table,
        known: Option<TieredMarker>,
        latest: Option<i64>,
    ) -> Result<(Option<i64>, u64)> {
        let manager = table.snapshot_manager();
        // The marker and proof must name a snapshot at or before the latest
        // one: one read beside them may be older than what they name (a
        // tiering committed and wrote its marker in between). Read it again.
        let latest = match (&known, latest) {
            (Some(marker), latest) if latest < Some(marker.snapshot_id) => {
                manager.get_latest_snapshot_id().await?
            }
            (_, latest) => latest,
        };
        let Some(latest) = latest else {
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
                let position =
                    u64::try_from(identifier).map_err(|_| LocalStoreError::TieringIdentifier {
                        snapshot: id,
                        identifier,
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
        let proof = path::tiered_proof(&incarnation.dir);
        let (marker, proof) = futures::join!(
            self.marker(incarnation),
            self.read_json::<TieredMarker>(&proof)
        );
        Ok(Self::more_known(marker?, proof?))
    }

    /// Of the marker and the proof, the one that covers more snapshots.
    fn more_known(
        marker: Option<TieredMarker>,
        proof: Option<TieredMarker>,
    ) -> Option<TieredMarker> {
        marker
            .into_iter()
            .chain(proof)
            .max_by_key(|m| m.snapshot_id)
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
            consumer: incarnation.user.clone(),
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
        let bytes = serde_json::to_vec(&proof)
            .map_err(|e| LocalStoreError::encoding("a tiering proof", e))?;
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
        // The log's end as this process knows it, looked at beside the
        // metadata: where a read finds nothing new, the one request it makes.
        let known_end = {
            let guess = self
                .current
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            match guess {
                Some(guess) => {
                    let next = guess.segments.lock().await.next;
                    next.map(|next| (guess, next))
                }
                None => None,
            }
        };
        let probe = async {
            match &known_end {
                Some((guess, next)) => Some((*next, self.fetch(guess, *next).await)),
                None => None,
            }
        };
        let (planned, probe) = futures::join!(self.current_and_tiered(table), probe);
        let (incarnation, snapshot, position) = planned?;
        let mut tiered = Some((snapshot, position));
        let mut fetched = match (probe, &known_end) {
            (Some((next, Ok(entry))), Some((guess, _))) if Arc::ptr_eq(guess, &incarnation) => {
                Some((next, entry))
            }
            _ => None,
        };
        let schema = log_schema(table)?;
        // A segment is deleted only long after tiering passed it, so a read
        // finds its segments; should one still be gone, the next attempt
        // sees the snapshot that holds its rows.
        for _ in 0..8 {
            let (snapshot_id, position) = match tiered.take() {
                Some(first) => first,
                None => self.tiered(&incarnation, table).await?,
            };
            let scanned = self
                .scan_with(&incarnation, position, true, fetched.take())
                .await?;
            if let Some((end, rows)) = scanned {
                return Ok(LocalLog {
                    state: Arc::clone(self),
                    incarnation,
                    schema,
                    snapshot_id,
                    from: position,
                    end,
                    rows,
                });
            }
        }
        Err(LocalStoreError::TrimmedUnderRead { table: self.name() }.into())
    }

    // ---------------------------------------------------------------- tiering

    /// Runs `work` holding the table's tiering locks (this process's and,
    /// on a local disk, every process's): maintenance after a tiering round
    /// runs under them, so no tiering commit of this table races it.
    pub(crate) async fn with_tiering_lock<T>(
        &self,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        work.await
    }

    /// Moves the store's rows into Paimon, `max_rows` rows per commit at most,
    /// until the store holds nothing Paimon lacks (as of the call).
    /// On S3, `s3` (the catalog's options) opens the table for a commit
    /// fenced to the next snapshot.
    pub(crate) async fn tier(
        self: &Arc<Self>,
        table: &Table,
        s3: &S3Options,
        max_rows: u64,
        flush_bytes: u64,
        retention: Duration,
    ) -> Result<TierReport> {
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir).await?;
        let incarnation = self.current(table).await?;
        // What killed writers left, first: a sweep that took what the log
        // still names would fail this round rather than pass unseen.
        self.sweep_leftovers(&incarnation).await;
        let schema = log_schema(table)?;
        let mut report = TierReport::default();
        let progress = Progress::start("tiering", self.name(), "rows");
        // The run ends where the log ended when it started: a busy writer
        // cannot keep it (and the locks it holds) going for ever.
        let mut run_end: Option<u64> = None;
        let mut vanished = 0;
        loop {
            let (snapshot_id, position) = self.tiered(&incarnation, table).await?;
            report.position = position;
            let Some((end, rows)) = self.scan(&incarnation, position, true).await? else {
                // Only a trim removes segments, and we hold the lock.
                vanished += 1;
                if vanished > 3 {
                    return Err(self.missing_after(position));
                }
                continue;
            };
            let stop_at = match run_end {
                Some(stop_at) => stop_at,
                None => {
                    progress.set_total(rows);
                    *run_end.insert(end)
                }
            };
            let chunk = self
                .tier_chunk(
                    &incarnation,
                    table,
                    &schema,
                    (snapshot_id, position, stop_at),
                    (max_rows, flush_bytes),
                    s3,
                )
                .await?;
            let Some((end, rows)) = chunk else {
                // Caught up: what Paimon holds can go from the store.
                self.trim(&incarnation, table, position, snapshot_id, retention)
                    .await?;
                return Ok(report);
            };
            report.rows += rows;
            report.commits += 1;
            progress.set_done(report.rows);
            report.position = end;
            let (snapshot_id, reached) = self.tiered(&incarnation, table).await?;
            if reached != end {
                return Err(LocalStoreError::TieredElsewhere {
                    table: self.name(),
                    end,
                    reached,
                }
                .into());
            }
            self.trim(&incarnation, table, end, snapshot_id, retention)
                .await?;
        }
    }

    fn missing_after(&self, position: u64) -> Error {
        LocalStoreError::SegmentsMissing {
            table: self.name(),
            position,
        }
        .into()
    }

    /// Writes the entries from `position` on into Paimon, streaming them one
    /// part at a time, and commits them as identifier = their end, once (a
    /// retry after an uncertain commit is skipped by Paimon). Entries are
    /// whole units: the chunk ends at `stop_at`, after the entry that reaches
    /// `max_rows`, or before an entry whose rows have columns `table` lacks
    /// (rows written under a newer schema need a newer `Table`: the next run,
    /// which loads one, tiers them). `None`: nothing to tier.
    ///
    /// Paimon's writers buffer rows per bucket until they are prepared; they
    /// are prepared every `flush_bytes` of rows, and all the files they
    /// wrote are committed together, so memory stays bounded however big
    /// one entry is. (Primary-key writers keep their sequence numbers
    /// across prepares, as Java Paimon's do across checkpoints.)
    async fn tier_chunk(
        self: &Arc<Self>,
        incarnation: &Arc<Incarnation>,
        table: &Table,
        schema: &SchemaRef,
        (base, position, stop_at): (Option<i64>, u64, u64),
        (max_rows, flush_bytes): (u64, u64),
        s3: &S3Options,
    ) -> Result<Option<(u64, u64)>> {
        let known = column_names(schema);
        failpoint("tier-before-write");
        let keyed = !primary_keys(table).is_empty();
        // Paimon's writers flush a bucket's rows to a file at this size.
        let writing = table.copy_with_options(HashMap::from([(
            "write.parquet-buffer-size".to_string(),
            flush_bytes.to_string(),
        )]));
        // A primary-key table without fixed buckets keeps one hash index
        // file per bucket, written anew at each prepare: several in one
        // commit would break the bucket for later writes. Its writers are
        // prepared once, bounded by the buffer size above.
        let fixed_buckets = CoreOptions::new(table.schema().options()).bucket() > 0;
        let prepare_midway = !keyed || fixed_buckets;
        let builder = writing
            .new_write_builder()
            .with_commit_user(&incarnation.user)?;
        let mut write = builder.new_write()?;
        let mut seq = position;
        let mut rows = 0u64;
        let mut messages = Vec::new();
        let mut unflushed = 0u64;
        while seq < stop_at && (seq == position || rows < max_rows) {
            let Some((_, info)) = self.entry(incarnation, seq).await? else {
                return Err(self.missing_after(seq));
            };
            let missing = missing_columns(&known, &info.columns);
            if !missing.is_empty() {
                // Written under a newer schema than this handle's: the next
                // round, with a fresh handle, tiers it. Columns the table
                // itself no longer has stop tiering here, loudly: passing
                // the write would commit its rows without their values.
                if seq == position && self.gone_for_good(table, &missing).await? {
                    return Err(self.columns_gone(seq, &missing));
                }
                break;
            }
            let mut batches = self.entry_rows(incarnation, seq, schema).await?;
            while let Some(batch) = batches.try_next().await? {
                let batch = paimon_batch(&batch, keyed)?;
                if batch.num_rows() > 0 {
                    write.write_arrow_batch(&batch).await?;
                    unflushed += batch.get_array_memory_size() as u64;
                }
                if prepare_midway && unflushed >= flush_bytes {
                    messages.extend(write.prepare_commit().await?);
                    unflushed = 0;
                }
            }
            rows += info.rows;
            seq += 1;
        }
        if seq == position {
            return Ok(None);
        }
        messages.extend(write.prepare_commit().await?);
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
        let identifier =
            i64::try_from(seq).map_err(|_| LocalStoreError::PositionOverflow { position: seq })?;
        // On S3 the lease keeps tierers apart only while its holder keeps
        // time (one paused past its expiry still commits), so the commit is
        // fenced: it may create only the snapshot after `base`, the one
        // `position` was read from, so a second tierer (or any commit in
        // between) makes this one fail, never land twice (see
        // object_storage::commit).
        let fenced;
        let builder = if crate::object_storage::is_s3(table.location()) {
            let latest = table.snapshot_manager().get_latest_snapshot_id().await?;
            if latest != base {
                return Err(LocalStoreError::SnapshotLanded {
                    table: self.name(),
                    position,
                    base,
                    latest,
                }
                .into());
            }
            fenced = crate::object_storage::fenced_table(&writing, s3, base.map_or(1, |b| b + 1))?;
            fenced
                .new_write_builder()
                .with_commit_user(&incarnation.user)?
        } else {
            builder
        };
        // An empty commit still records the position: segments set aside
        // (empty) are passed like any other.
        builder
            .new_commit()
            .with_ignore_empty_commit(false)
            .filter_and_commit_with_identifier(messages, identifier)
            .await?;
        failpoint("tier-after-commit");
        Ok(Some((seq, rows)))
    }

    /// Records that Paimon holds the rows before `position` (as of
    /// `snapshot_id`), and deletes the segments that tiering passed at least
    /// `retention` ago.
    async fn trim(
        &self,
        incarnation: &Incarnation,
        table: &Table,
        position: u64,
        snapshot_id: Option<i64>,
        retention: Duration,
    ) -> Result<()> {
        let mut marker = self.marker(incarnation).await?.unwrap_or_default();
        let mut changed = false;
        let mut pinned = None;
        let now = now_ms();
        if marker.position < position {
            if let Some(snapshot_id) = snapshot_id {
                pinned = Some(snapshot_id);
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
            let bytes = serde_json::to_vec(&marker)
                .map_err(|e| LocalStoreError::encoding("a tiering marker", e))?;
            self.root
                .put_replace(&path::tiered_marker(&incarnation.dir), Bytes::from(bytes))
                .await?;
        }
        if let Some(snapshot_id) = pinned {
            // After the marker: the snapshots from the marker's on prove the
            // position (and find a tiering commit whose marker a crash kept
            // from being written); the older ones may expire now.
            pin(table, &incarnation.user, snapshot_id).await?;
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
            .map_err(LocalStoreError::from)?;
        for location in old {
            // A multi-part write's parts go before its entry: an entry left
            // by a trim cut short is found and finished by the next one.
            if let Some(head) = self.root.get_head(&location, 8).await? {
                if segment::is_part_list(&head) {
                    self.delete_parts(&incarnation.dir, &location).await?;
                }
            }
            self.root.delete(&location).await?;
        }
        Ok(())
    }

    /// Deletes the parts the multi-part write's entry at `location` names.
    async fn delete_parts(&self, dir: &Path, location: &Path) -> Result<()> {
        let Some(bytes) = self.root.get(location).await? else {
            return Ok(());
        };
        // A damaged entry below the tiered position was set aside or tiered
        // past; its parts stay for whoever looks into it.
        let Ok(Entry::Parts(list)) = segment::decode_entry(&bytes) else {
            return Ok(());
        };
        for index in 0..list.parts.len() {
            self.root
                .delete(&path::part(dir, &list.write_id, index))
                .await?;
        }
        self.root
            .delete(&path::parts_fate(dir, &list.write_id))
            .await?;
        self.root
            .delete_dir(&path::parts_dir(dir, &list.write_id))
            .await;
        Ok(())
    }

    /// Rows in the store that Paimon does not hold yet.
    pub(crate) async fn pending_rows(&self, table: &Table) -> Result<u64> {
        let incarnation = self.current(table).await?;
        let (_, position) = self.tiered(&incarnation, table).await?;
        Ok(self
            .scan(&incarnation, position, true)
            .await?
            .map_or(0, |(_, rows)| rows))
    }

    /// What waits to be tiered, as the store's files say now: the log
    /// entries at and after the tiered position, their bytes on disk and
    /// when the oldest of them was written, from one listing of the log.
    /// Nothing here is counted in this process's memory, so writes of other
    /// processes count as soon as they land. A multi-part write's entry is
    /// small; the lengths of its parts are in it: each entry's first bytes
    /// are read once to tell, and a part list once (remembered by position
    /// and object size, so neither is read again while it waits).
    pub(crate) async fn waiting(&self, table: &Table) -> Result<Waiting> {
        let incarnation = self.current(table).await?;
        let (_, position) = self.tiered(&incarnation, table).await?;
        let prefix = incarnation.dir.clone().join("log");
        let listed: Vec<(u64, object_store::ObjectMeta)> = self
            .root
            .objects
            .list(Some(&prefix))
            .try_filter_map(|meta| {
                let seq = path::segment_seq(&meta.location).filter(|seq| *seq >= position);
                futures::future::ready(Ok(seq.map(|seq| (seq, meta))))
            })
            .try_collect()
            .await
            .map_err(LocalStoreError::from)?;
        {
            let mut known = incarnation
                .entry_bytes
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *known = known.split_off(&position);
        }
        let mut waiting = Waiting::default();
        for (seq, meta) in listed {
            let bytes = self.entry_bytes(&incarnation, seq, &meta).await?;
            waiting.entries += 1;
            waiting.bytes = waiting.bytes.saturating_add(bytes);
            let written = meta.last_modified.timestamp_millis();
            waiting.oldest_ms = Some(waiting.oldest_ms.map_or(written, |o| o.min(written)));
        }
        Ok(waiting)
    }

    /// The bytes of the log entry `seq` (listed as `meta`) with the parts a
    /// multi-part write's entry names.
    async fn entry_bytes(
        &self,
        incarnation: &Incarnation,
        seq: u64,
        meta: &object_store::ObjectMeta,
    ) -> Result<u64> {
        let known = incarnation
            .entry_bytes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&seq)
            .copied();
        if let Some((size, bytes)) = known {
            if size == meta.size {
                return Ok(bytes);
            }
        }
        let bytes = match self.root.get_head(&meta.location, 8).await? {
            // Trimmed since the listing: tiered already.
            None => return Ok(0),
            Some(head) if segment::is_part_list(&head) => {
                match self.root.get(&meta.location).await? {
                    None => return Ok(0),
                    Some(entry) => match segment::decode_entry(&entry) {
                        Ok(Entry::Parts(list)) => list
                            .parts
                            .iter()
                            .fold(meta.size, |sum, part| sum.saturating_add(part.length)),
                        // Damaged: tiering stops there and says so.
                        _ => meta.size,
                    },
                }
            }
            Some(_) => meta.size,
        };
        incarnation
            .entry_bytes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(seq, (meta.size, bytes));
        Ok(bytes)
    }

    /// Removes what writes that died left in `incarnation` once it is
    /// [`leftovers::ORPHAN_AGE`] old ([`leftovers::sweep`]), and logs what it
    /// removed, or why it could not (the next round tries again). Called
    /// holding the tiering locks, so that no trim or set-aside changes the
    /// log while the sweep reads which writes it names.
    async fn sweep_leftovers(&self, incarnation: &Incarnation) {
        let Some(before) = std::time::SystemTime::now().checked_sub(leftovers::ORPHAN_AGE) else {
            return;
        };
        let swept = leftovers::sweep(&self.root, &self.dir, &incarnation.dir, before).await;
        if let Ok(swept) = &swept {
            if swept.undecoded > 0 {
                log::warn!(
                    target: TIERING_LOG,
                    "{} log entries of the store table of '{}' do not decode: no parts of killed \
                     writers are removed until they are set aside (CALL sys.lakestream_set_aside)",
                    swept.undecoded,
                    self.name()
                );
            }
        }
        match swept {
            Ok(swept) if swept.files > 0 => log::info!(
                target: TIERING_LOG,
                "removed {} files ({} bytes) that killed writers left in the store table of '{}'",
                swept.files,
                swept.bytes,
                self.name()
            ),
            Ok(_) => {}
            Err(e) => log::warn!(
                target: TIERING_LOG,
                "removing what killed writers left in the store table of '{}' failed (the next \
                 round tries again): {e}",
                self.name()
            ),
        }
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
        let not_damaged = |why: String| Error::InvalidStatement {
            statement: "set aside".to_string(),
            reason: format!(
                "the segment at position {position} of '{}' is not damaged{why}; only damaged \
                 segments are set aside",
                self.name()
            ),
        };
        let held = match segment::decode_entry(&bytes) {
            // A sound write is never set aside, even one with columns the
            // table no longer has: processes that read it keep it in
            // memory, and would serve and tier it still.
            Ok(Entry::Rows(batches)) => {
                let columns = batches
                    .first()
                    .map(|b| Info::of(&b.schema(), 0).columns.to_vec())
                    .unwrap_or_default();
                return Err(not_damaged(self.sound_but(table, &columns).await?));
            }
            // A multi-part write is damaged where any of its parts is.
            Ok(Entry::Parts(list)) => {
                let mut found = None;
                for index in 0..list.parts.len() {
                    if let Err(e) = self.read_part(&incarnation, &list, position, index).await {
                        if matches!(e, Error::SegmentDamaged { .. }) {
                            found = Some(e);
                            break;
                        }
                        return Err(e);
                    }
                }
                match found {
                    Some(damage) => damage_held(damage)?,
                    None => return Err(not_damaged(self.sound_but(table, &list.columns).await?)),
                }
            }
            Err(error) => damage_held(self.damaged(&location, position, &error, &bytes))?,
        };
        let schema = log_schema(table)?;
        let aside = incarnation
            .dir
            .clone()
            .join("damaged")
            .join(format!("{position:020}.seg"));
        self.root.put_replace(&aside, bytes).await?;
        let empty = segment::encode(&schema, &[], unique())
            .map_err(|e| LocalStoreError::encoding("a log segment", e))?;
        self.root.put_replace(&location, Bytes::from(empty)).await?;
        incarnation.segments.lock().await.forget(position);
        Ok(format!(
            "set aside segment {position} of '{}' ({held}) as '{}'",
            self.name(),
            self.file(&aside)
        ))
    }

    /// For a refusal to set aside a sound write with `columns`: what to do
    /// instead when the table no longer has some of them, or nothing.
    async fn sound_but(&self, table: &Table, columns: &[String]) -> Result<String> {
        let schema = log_schema(table)?;
        let missing = missing_columns(&column_names(&schema), columns);
        if missing.is_empty() || !self.gone_for_good(table, &missing).await? {
            return Ok(String::new());
        }
        Ok(format!(
            " (it holds {}, which the table no longer has: put it back with ALTER TABLE ... \
             ADD COLUMN (RENAME COLUMN back needs the mode off first) and tier; a sound write \
             is never set aside, as processes that read it keep it)",
            crate::name::columns_phrase(&missing)
        ))
    }

    /// Segments after `from`, waiting for one to be written. Fails when the
    /// log it needs was trimmed, or the table was dropped.
    async fn wait_for(&self, incarnation: &Incarnation, from: u64) -> Result<u64> {
        loop {
            let notified = self.written.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let behind = Error::StreamBehind {
                table: self.name(),
                position: from,
            };
            match self.scan(incarnation, from, false).await? {
                None => return Err(behind),
                Some((end, _)) if end > from => return Ok(end),
                Some(_) => {}
            }
            match self.read_meta().await? {
                Some(meta) if meta.incarnation == incarnation.id => {}
                _ => {
                    return Err(Error::DroppedDuringRead { table: self.name() });
                }
            }
            let tiered = self.marker(incarnation).await?.map_or(0, |m| m.position);
            // What lies below both this read and the tiered position is
            // needed by no read of this process: a process that only follows
            // the log keeps what it remembers of it bounded.
            incarnation
                .segments
                .lock()
                .await
                .forget_before(tiered.min(from));
            // Tiering passed `from` and the segment there is gone: trimmed.
            let passed = tiered > from;
            if passed && matches!(self.fetch(incarnation, from).await?, Fetched::Absent) {
                return Err(behind);
            }
            // Writes in this process wake us; other processes' are found by looking again.
            let _ = tokio::time::timeout(FOLLOW_POLL, notified).await;
        }
    }
}

/// What waits in a table's log to be tiered (see [`TableState::waiting`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// Log entries at and after the tiered position.
    pub(crate) entries: u64,
    /// Their bytes on disk, the parts of multi-part writes included.
    pub(crate) bytes: u64,
    /// When the oldest of them was written (its object's modification
    /// time, milliseconds since the epoch).
    pub(crate) oldest_ms: Option<i64>,
}

impl Waiting {
    /// Whether a round is due: `target_bytes` wait, or the oldest entry has
    /// waited `max_delay` (as of `now_ms`). Nothing waiting: never.
    pub(crate) fn due(&self, target_bytes: u64, max_delay: Duration, now_ms: i64) -> bool {
        let Some(oldest) = self.oldest_ms else {
            return false;
        };
        let delay = i64::try_from(max_delay.as_millis()).unwrap_or(i64::MAX);
        self.bytes >= target_bytes || now_ms.saturating_sub(oldest) >= delay
    }
}

/// The names of the columns of `schema` (the log's), for [`missing_columns`].
fn column_names(schema: &Schema) -> HashSet<&str> {
    schema.fields().iter().map(|f| f.name().as_str()).collect()
}

/// The columns of a log entry (`columns`, as written) that are not `known`.
fn missing_columns(known: &HashSet<&str>, columns: &[String]) -> Vec<String> {
    columns
        .iter()
        .filter(|c| !known.contains(c.as_str()))
        .cloned()
        .collect()
}

/// What a damaged segment held, from its damage report.
fn damage_held(damage: Error) -> Result<String> {
    match damage {
        Error::SegmentDamaged { held, .. } => Ok(held),
        _ => Err(Error::Internal(
            "set aside: not a damage report".to_string(),
        )),
    }
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
            .map_err(|source| LocalStoreError::Batch { source }.into());
    }
    let deletes = batch
        .column(kinds_index)
        .as_any()
        .downcast_ref::<Int8Array>()
        .is_some_and(|kinds| kinds.iter().any(|k| k != Some(RowKind::Upsert.as_i8())));
    if deletes {
        return Err(LocalStoreError::DeleteInAppendLog.into());
    }
    let columns: Vec<usize> = (0..kinds_index).collect();
    batch
        .project(&columns)
        .map_err(|source| LocalStoreError::Batch { source }.into())
}

/// A fixed read of a table's segments.
#[derive(Debug)]
pub(crate) struct LocalLog {
    state: Arc<TableState>,
    incarnation: Arc<Incarnation>,
    schema: SchemaRef,
    pub(crate) snapshot_id: Option<i64>,
    /// The entries `[from, end)` are the read's; they hold `rows` rows.
    from: u64,
    end: u64,
    rows: u64,
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
        self.rows == 0
    }

    /// Reads the entries from their cache or their files, one entry (one
    /// part of a multi-part write) at a time; every call reads the same rows.
    fn read_bounded(&self) -> Result<ChangeStream> {
        let state = Arc::clone(&self.state);
        Ok(self
            .state
            .entries_rows(&self.incarnation, &self.schema, self.from, self.end)
            .map(move |batch| state.change_batch(&batch?))
            .boxed())
    }

    fn follow(&self) -> Result<ChangeStream> {
        let start = (
            Arc::clone(&self.state),
            Arc::clone(&self.incarnation),
            Arc::clone(&self.schema),
            self.end,
        );
        let stream =
            futures::stream::try_unfold(start, |(state, incarnation, schema, from)| async move {
                let next = state.wait_for(&incarnation, from).await?;
                let rows = state.entries_rows(&incarnation, &schema, from, next);
                Ok::<_, Error>(Some((rows, (state, incarnation, schema, next))))
            })
            .try_flatten();
        let state = Arc::clone(&self.state);
        Ok(stream.map(move |batch| state.change_batch(&batch?)).boxed())
    }
}

/// A write too big for one segment: its rows go to part segments outside
/// the log, invisible to reads and tiering, until [`PartsWriter::commit`]
/// puts one log entry that names them all. A write that never commits
/// leaves parts no entry names; [`PartsWriter::abort`] deletes them.
pub(crate) struct PartsWriter {
    state: Arc<TableState>,
    table: Table,
    incarnation: Arc<Incarnation>,
    write_id: u128,
    /// The write id as the parts' directory is named.
    name: String,
    columns: Vec<String>,
    parts: Vec<Part>,
}

impl PartsWriter {
    fn not_applied(&self, reason: String) -> Error {
        Error::WriteNotApplied {
            table: self.state.name(),
            reason,
        }
    }

    /// Writes `batches` (the log's schema, row kinds set) as the next part.
    pub(crate) async fn put(&mut self, batches: &[RecordBatch]) -> Result<()> {
        let Some(schema) = batches.first().map(|b| b.schema()) else {
            return Ok(());
        };
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let bytes = Bytes::from(
            segment::encode(&schema, batches, unique())
                .map_err(|e| LocalStoreError::encoding("a log segment", e))?,
        );
        let length = bytes.len() as u64;
        let location = path::part(&self.incarnation.dir, &self.name, self.parts.len());
        // A part is invisible until the commit: any failure here leaves
        // nothing written, whether or not the part landed.
        match self.state.root.put_new(&location, bytes).await {
            Ok(Created::Yes) => {
                self.parts.push(Part { rows, length });
                failpoint("parts-after-part");
                Ok(())
            }
            Ok(Created::AlreadyExists) => Err(self.not_applied(format!(
                "the part '{}' exists already",
                self.state.file(&location)
            ))),
            Err(PutFailed::NotApplied(e) | PutFailed::Unknown(e)) => {
                Err(self.not_applied(e.to_string()))
            }
        }
    }

    /// Makes every part visible as one unit: one log entry names them.
    /// First it decides the parts' fate ([`leftovers::claim`]) and checks
    /// that every part it wrote is still there: the parts of a writer
    /// paused past the sweep's age (a stopped process, a clock that jumped)
    /// may have been taken for a killed writer's leftovers, and then it
    /// refuses, with nothing of the write acknowledged.
    pub(crate) async fn commit(self, retention: Duration) -> Result<()> {
        failpoint("parts-before-claim");
        let claimed = leftovers::claim(
            &self.state.root,
            &self.incarnation.dir,
            &self.name,
            leftovers::Fate::Commit,
        )
        .await;
        let refused = match claimed {
            Ok(None) => self.missing_parts().await.err(),
            Ok(Some(_)) => Some(self.not_applied(format!(
                "its parts were taken for a killed writer's leftovers (it paused more than {}s \
                 between its parts, or the clock moved); run the statement again",
                leftovers::ORPHAN_AGE.as_secs()
            ))),
            Err(e) => Some(self.not_applied(e.into_error().to_string())),
        };
        if let Some(error) = refused {
            self.abort().await;
            return Err(error);
        }
        failpoint("parts-after-claim");
        let list = PartList {
            write_id: self.name.clone(),
            columns: self.columns.clone(),
            parts: self.parts.clone(),
        };
        let bytes = Bytes::from(
            segment::encode_parts(&list, self.write_id)
                .map_err(|e| LocalStoreError::encoding("a part list", e))?,
        );
        let info = Info {
            rows: list.rows(),
            columns: Arc::new(list.columns.clone()),
        };
        let outcome = self
            .state
            .put_entry(
                &self.table,
                Some(&self.incarnation),
                bytes,
                Held::Parts(Arc::new(list)),
                info,
                retention,
            )
            .await;
        // Every error but an unknown outcome comes before the entry's put.
        if matches!(&outcome, Err(e) if !matches!(e, Error::WriteOutcomeUnknown { .. })) {
            self.abort().await;
        }
        outcome
    }

    /// Checks that every part this write wrote is there, whole: an error
    /// naming the first that is not.
    async fn missing_parts(&self) -> Result<()> {
        let dir = path::parts_dir(&self.incarnation.dir, &self.name);
        let there: HashMap<Path, u64> = self
            .state
            .root
            .objects
            .list(Some(&dir))
            .map_ok(|meta| (meta.location, meta.size))
            .try_collect()
            .await
            .map_err(LocalStoreError::from)?;
        for (index, part) in self.parts.iter().enumerate() {
            let location = path::part(&self.incarnation.dir, &self.name, index);
            if there.get(&location) != Some(&part.length) {
                return Err(self.not_applied(format!(
                    "its part '{}' is gone (taken for a killed writer's leftovers: it paused \
                     more than {}s between its parts, or the clock moved); run the statement \
                     again",
                    self.state.file(&location),
                    leftovers::ORPHAN_AGE.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// Deletes the parts written so far, as far as it can, and their fate
    /// file: they are never read, so a part left behind costs only space.
    /// Only this write commits them, so its fate is its own to remove.
    pub(crate) async fn abort(self) {
        for index in 0..self.parts.len() {
            let location = path::part(&self.incarnation.dir, &self.name, index);
            let _ = self.state.root.delete(&location).await;
        }
        let fate = path::parts_fate(&self.incarnation.dir, &self.name);
        let _ = self.state.root.delete(&fate).await;
        self.state
            .root
            .delete_dir(&path::parts_dir(&self.incarnation.dir, &self.name))
            .await;
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
    RecordBatch::try_new(Arc::clone(schema), columns)
        .map_err(|source| LocalStoreError::Batch { source }.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::local::lease::Lease;
    use object_store::ObjectStoreExt;

    /// A one-row entry whose row is `id`, in the log's schema.
    fn one_row(id: i64) -> Held {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use datafusion::arrow::datatypes::DataType;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
            Field::new(segment::ROW_KIND_COLUMN, DataType::Int8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![id])),
                Arc::new(StringArray::from(vec![format!("row {id}")])),
                Arc::new(Int8Array::from(vec![0])),
            ],
        )
        .expect("batch");
        Held::Rows(Arc::new(vec![batch]))
    }

    fn remember_rows(segments: &mut Segments, positions: std::ops::Range<u64>) {
        for seq in positions {
            let held = one_row(i64::try_from(seq).expect("small"));
            let info = Info {
                rows: 1,
                columns: Default::default(),
            };
            segments.remember(seq, &held, info);
        }
    }

    /// Reads `[from, end)` as `entries_rows` does: the ids of the rows in
    /// memory (`None` for an entry to be read from its file), and how many
    /// pieces the read took.
    fn read(segments: &mut Segments, from: u64, end: u64) -> (Vec<Option<i64>>, usize) {
        use datafusion::arrow::array::Int64Array;
        let (mut ids, mut count, mut seq) = (Vec::new(), 0, from);
        while seq < end {
            let (pieces, next) = segments.pieces(seq, end);
            assert!(next > seq, "a read must move on");
            count += pieces.len();
            for piece in pieces {
                match piece {
                    Piece::Rows(batches) => {
                        for batch in batches {
                            let column = batch.column(0);
                            let column = column.as_any().downcast_ref::<Int64Array>().expect("ids");
                            ids.extend(column.iter());
                        }
                    }
                    Piece::Entry(_) => ids.push(None),
                }
            }
            seq = next;
        }
        (ids, count)
    }

    fn ids(range: std::ops::Range<u64>) -> Vec<Option<i64>> {
        range
            .map(|seq| Some(i64::try_from(seq).expect("small")))
            .collect()
    }

    /// Bytes the cache holds, counted again from what it holds.
    fn held_bytes(segments: &Segments) -> usize {
        segments.cache.values().map(Held::bytes).sum::<usize>()
            + segments.blocks.values().map(Block::bytes).sum::<usize>()
    }

    /// Reads of many one-row entries take a few coalesced pieces, and give
    /// exactly the rows of the range asked for, in order, from any position,
    /// also once tiering passed part of a block.
    #[test]
    fn reads_of_many_small_entries_give_each_row_in_order_in_few_pieces() {
        let mut segments = Segments::default();
        remember_rows(&mut segments, 0..3_000);
        let (rows, _) = read(&mut segments, 0, 3_000);
        assert_eq!(rows, ids(0..3_000));
        let (rows, pieces) = read(&mut segments, 0, 3_000);
        assert_eq!(rows, ids(0..3_000));
        assert!(pieces <= 4, "{pieces} pieces");
        // New entries after the blocks: coalesced once there are enough.
        let mut written = 3_000;
        for end in [3_010, 3_040, 3_100] {
            remember_rows(&mut segments, written..end);
            written = end;
            let (rows, pieces) = read(&mut segments, 0, end);
            assert_eq!(rows, ids(0..end), "up to {end}");
            assert!(pieces <= 2 + COALESCE_PIECES, "{pieces} pieces");
        }
        let (_, pieces) = read(&mut segments, 0, 3_100);
        assert!(pieces <= 2, "{pieces} pieces once coalesced");
        for (from, end) in [
            (0, 1),
            (5, 7),
            (1_500, 2_100),
            (2_999, 3_001),
            (3_099, 3_100),
        ] {
            assert_eq!(
                read(&mut segments, from, end).0,
                ids(from..end),
                "{from}..{end}"
            );
        }
        // Tiering passed position 1,500, inside a block.
        segments.forget_before(1_500);
        assert!(segments.block_at(1_500).is_some());
        assert_eq!(read(&mut segments, 1_500, 3_100).0, ids(1_500..3_100));
        assert_eq!(segments.cached_bytes, held_bytes(&segments));
    }

    /// A process's own writes are coalesced as they arrive: after thousands
    /// of one-row writes, a read finds a few blocks and at most
    /// [`COALESCE_PIECES`] entries, however large the backlog, and gives
    /// every row once, in order.
    #[test]
    fn writes_are_coalesced_as_they_arrive() {
        let mut segments = Segments::default();
        for seq in 0..5_000 {
            remember_rows(&mut segments, seq..seq + 1);
            segments.coalesce_tail(seq + 1);
        }
        let units = segments.units(0, 5_000);
        assert!(
            units.len() <= 3 + COALESCE_PIECES,
            "{} pieces before any read coalesced",
            units.len()
        );
        let (rows, _) = read(&mut segments, 0, 5_000);
        assert_eq!(rows, ids(0..5_000));
        assert_eq!(segments.cached_bytes, held_bytes(&segments));
    }

    /// An entry's rows taken out of a block (as tiering takes them) are a
    /// compact copy: sized by its own rows, not by the whole block, which a
    /// tiering round sums to decide when to flush a Paimon file.
    #[test]
    fn an_entry_out_of_a_block_is_sized_by_its_own_rows() {
        let mut segments = Segments::default();
        remember_rows(&mut segments, 0..3_000);
        read(&mut segments, 0, 3_000);
        let (_, block) = segments.block_at(100).expect("a block");
        let block_size = block.batch.get_array_memory_size();
        let rows = segments.block_rows(100).expect("rows out of the block");
        assert_eq!(rows.num_rows(), 1);
        let entry_size = rows.get_array_memory_size();
        assert!(
            entry_size * 10 < block_size,
            "an entry of {entry_size} bytes out of a block of {block_size}"
        );
    }

    /// A forgotten entry (set aside) takes its block with it: it is read
    /// from its file again, and so are its neighbours, never the old rows.
    #[test]
    fn forgetting_an_entry_drops_its_block() {
        let mut segments = Segments::default();
        remember_rows(&mut segments, 0..100);
        read(&mut segments, 0, 100);
        assert!(segments.block_at(50).is_some());
        segments.forget(50);
        assert!(segments.block_at(50).is_none());
        let (rows, _) = read(&mut segments, 0, 100);
        assert_eq!(rows[50], None);
        assert_eq!(segments.cached_bytes, held_bytes(&segments));
    }

    /// However many entries are written and read, the cache holds at most
    /// its budget, and counts what it holds exactly.
    #[test]
    fn the_entry_cache_stays_within_its_budget() {
        let one = one_row(0).bytes();
        let budget = 60 * one;
        let mut segments = Segments::with_budget(budget);
        let mut end = 0;
        for round in 0..40 {
            remember_rows(&mut segments, end..end + 50);
            end += 50;
            let (rows, _) = read(&mut segments, 0, end);
            assert_eq!(rows.len(), usize::try_from(end).expect("small"));
            for (seq, row) in rows.iter().enumerate() {
                let seq = i64::try_from(seq).expect("small");
                assert!(
                    row.is_none() || *row == Some(seq),
                    "round {round}: row {seq}"
                );
            }
            assert_eq!(
                segments.cached_bytes,
                held_bytes(&segments),
                "round {round}"
            );
            assert!(
                segments.cached_bytes <= budget,
                "round {round}: {} bytes held, budget {budget}",
                segments.cached_bytes
            );
        }
        // The budget was reached: later entries are read from their files.
        assert!(read(&mut segments, 0, end).0.contains(&None));
    }

    /// Dropping or replacing a table's files keeps its tiering lease: the
    /// process deleting holds it, and a lease deleted under it would let a
    /// waiting tierer in while it still works.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deleting_a_tables_files_keeps_its_lease() {
        let root = Root::open(
            "memory://deleting-keeps-lease",
            &Default::default(),
            Duration::from_secs(30),
        )
        .expect("root");
        let state = root.table(&Identifier::new("default", "t"));
        for name in ["table.json", "log/00000000000000000001", "tiered"] {
            root.objects
                .put(
                    &state.dir.clone().join(name),
                    Bytes::from_static(b"x").into(),
                )
                .await
                .expect("put");
        }
        let lease = Lease::acquire(&root, &state.dir, Duration::from_secs(30))
            .await
            .expect("lease");
        state.delete_files(Doomed::All).await.expect("delete");
        let left: Vec<Path> = root
            .objects
            .list(Some(&state.dir))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .expect("list");
        assert_eq!(left.len(), 1, "left: {left:?}");
        assert!(left[0].prefix_matches(&path::lease_dir(&state.dir)));
        drop(lease);
    }
}
