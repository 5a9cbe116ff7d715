//! The segment cache of one incarnation: what this process remembers of
//! the log's entries (their rows, decoded, or a multi-part write's list of
//! parts) and the blocks small entries were coalesced into.
//!
//! [`Segments`] owns its state; its holder ([`super::incarnation::Incarnation`])
//! keeps it behind one async mutex. Invariants it keeps:
//!
//! - **A cache, never the truth.** `info` says what an entry at a position
//!   holds once it was seen whole on disk; an entry not remembered is read
//!   from its file again. Entries never change once written (a set-aside
//!   replaces one, and [`Segments::forget`] drops what was remembered of it).
//! - **Bounded.** The rows held (`cache` and `blocks`) stay within
//!   [`CACHE_BYTES`]; entries beyond it are remembered by their `info` only.
//! - **Blocks cover whole entries.** A block holds the rows of consecutive
//!   entries, each of whose own cache entry it replaces; forgetting an entry
//!   drops the block that holds it.
//! - `next` is the position after the last entry this process saw, or
//!   `None` until the log was listed.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::{Schema, SchemaRef};

use super::super::segment::PartList;

/// How many bytes of decoded rows a table's entry cache (entries and the
/// blocks they were coalesced into) keeps at most, per incarnation. Entries
/// beyond it are read from their files again when they are needed, so a
/// backlog of any size is read and tiered in bounded memory.
pub(super) const CACHE_BYTES: usize = 64 << 20;

/// A block of coalesced entries holds at most this many rows...
pub(super) const BLOCK_ROWS: usize = 8192;
/// ... and this many bytes. Entries or blocks of half that or more are
/// not coalesced further.
pub(super) const BLOCK_BYTES: usize = 8 << 20;

/// A read goes through the log this many pieces (blocks, entries) at a
/// time, under one lock; it coalesces a stretch of more than
/// [`COALESCE_PIECES`] small in-memory pieces into blocks first.
pub(super) const READ_CHUNK: usize = 1024;
pub(super) const COALESCE_PIECES: usize = 32;

/// A log entry as this process holds it.
#[derive(Clone)]
pub(super) enum Held {
    /// A segment's rows, decoded, as written (the schema of their time).
    Rows(Arc<Vec<RecordBatch>>),
    /// A multi-part write's list of parts; the parts are read when needed.
    Parts(Arc<PartList>),
}

impl Held {
    pub(super) fn bytes(&self) -> usize {
        match self {
            Held::Rows(batches) => batches.iter().map(|b| b.get_array_memory_size()).sum(),
            Held::Parts(list) => 64 + list.parts.len() * 16,
        }
    }
}

/// What is remembered of every entry from the read position on, cached or not.
#[derive(Debug, Clone)]
pub(super) struct Info {
    pub(super) rows: u64,
    /// The names of the columns its rows carry (the table's at the time of
    /// the write, then the row kind).
    pub(super) columns: Arc<Vec<String>>,
}

impl Info {
    pub(super) fn of(schema: &Schema, rows: u64) -> Self {
        Self {
            rows,
            columns: Arc::new(schema.fields().iter().map(|f| f.name().clone()).collect()),
        }
    }
}

/// What reading an entry's object found.
pub(super) enum Fetched {
    Entry(Held, Info),
    /// No object: never written, or trimmed.
    Absent,
}

/// The rows of consecutive entries (from its key in [`Segments::blocks`] to
/// `end`), copied into one batch: a read of many small writes yields a few
/// large batches, not one per write. Entries never change once written, so a
/// block is never stale; it goes with its incarnation, once tiering passed
/// its end, or when one of its entries is forgotten.
pub(super) struct Block {
    pub(super) end: u64,
    /// The entries' rows, in the log's schema of their time (one for all).
    pub(super) batch: RecordBatch,
    /// Where each entry's rows start in `batch`, then the row count.
    pub(super) offsets: Vec<usize>,
}

impl Block {
    pub(super) fn bytes(&self) -> usize {
        self.batch.get_array_memory_size()
    }
}

/// A stretch of a read: rows in memory, or an entry read on its own.
pub(super) enum Piece {
    /// Rows in the log's schema of their time.
    Rows(Vec<RecordBatch>),
    /// An entry not in memory, or a multi-part write: read by position.
    Entry(u64),
}

/// One step of a walk through the log (see [`Segments::units`]).
#[derive(Clone, Copy)]
pub(super) enum Unit {
    /// The block starting at this position.
    Block(u64),
    /// A cached entry.
    Cached(u64),
    /// An entry read on its own.
    Other(u64),
}

pub(super) struct Segments {
    /// Entries by position, from the last read position on, as long as
    /// they fit in `budget` (with `blocks`).
    pub(super) cache: BTreeMap<u64, Held>,
    /// Blocks of coalesced entries, by first position; they never overlap,
    /// and an entry in a block is not in `cache`.
    pub(super) blocks: BTreeMap<u64, Block>,
    /// Bytes of `cache` and `blocks`.
    pub(super) cached_bytes: usize,
    pub(super) budget: usize,
    /// What every entry from the last read position on holds.
    pub(super) info: BTreeMap<u64, Info>,
    /// The next sequence number to look for; `None` until the log was listed.
    pub(super) next: Option<u64>,
}

impl Default for Segments {
    fn default() -> Self {
        Self::with_budget(CACHE_BYTES)
    }
}

impl Segments {
    pub(super) fn with_budget(budget: usize) -> Self {
        Self {
            cache: BTreeMap::new(),
            blocks: BTreeMap::new(),
            cached_bytes: 0,
            budget,
            info: BTreeMap::new(),
            next: None,
        }
    }

    pub(super) fn remember(&mut self, seq: u64, held: &Held, info: Info) {
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

    pub(super) fn forget(&mut self, seq: u64) {
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
    pub(super) fn forget_before(&mut self, from: u64) {
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
    pub(super) fn block_at(&self, seq: u64) -> Option<(u64, &Block)> {
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
    pub(super) fn block_rows(&self, seq: u64) -> Option<RecordBatch> {
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
    pub(super) fn coalesce_tail(&mut self, end: u64) {
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
    pub(super) fn units(&self, from: u64, end: u64) -> Vec<Unit> {
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
    pub(super) fn pieces(&mut self, from: u64, end: u64) -> (Vec<Piece>, u64) {
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
    pub(super) fn coalesce(&mut self, units: &[Unit]) -> bool {
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
    pub(super) fn small(&self, unit: Unit) -> Option<(Option<SchemaRef>, usize, usize)> {
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
    pub(super) fn make_block(&mut self, run: &[Unit], schema: Option<&SchemaRef>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::super::super::segment;
    use super::*;
    use datafusion::arrow::array::Int8Array;
    use datafusion::arrow::datatypes::Field;

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
}
