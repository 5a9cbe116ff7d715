//! Reads: scanning the log, reading entries and parts, planning a bounded
//! read and following the log.
//!
//! The state read here is the incarnation's segment cache
//! ([`super::segments::Segments`]); this file adds none of its own.
//! Invariants it keeps:
//!
//! - **One look.** [`TableState::scan`] returns an end and row count such
//!   that every entry in between was there when looked at; an entry missing
//!   below the listed end means it was trimmed, and the read is planned again.
//! - **Fixed reads.** A [`LocalLog`] reads the same entries `[from, end)`
//!   every time; a streaming read follows from `end`, and fails (never skips)
//!   when what it needs was trimmed or the table was dropped.
//! - Damaged bytes are an error naming the file, never rows.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use paimon::table::Table;

use super::super::error::LocalStoreError;
use super::super::path;
use super::super::segment::{self, log_schema, Entry, PartList, SegmentError};
use super::incarnation::Incarnation;
use super::segments::{Fetched, Held, Info, Piece};
use super::TableState;
use crate::error::{Error, Result};
use crate::retry::{Retry, Try};
use crate::store::{ChangeBatch, ChangeStream, StoreLog};

/// How often planning a read looks again when a segment after the tiered
/// position it read is gone (trimmed meanwhile): eight tries in all, at
/// once, each reading the tiered position afresh.
const PLAN_AGAIN: Retry = Retry::immediately(8);

/// How often a streaming read looks for segments other processes wrote;
/// writes in this process wake it at once.
const FOLLOW_POLL: Duration = Duration::from_millis(50);

impl TableState {
    /// Lists the log: the number after its last segment.
    pub(super) async fn list(&self, incarnation: &Incarnation) -> Result<u64> {
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
    pub(super) async fn fetch(&self, incarnation: &Incarnation, seq: u64) -> Result<Fetched> {
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

    pub(super) fn damaged(
        &self,
        location: &Path,
        seq: u64,
        error: &SegmentError,
        bytes: &[u8],
    ) -> Error {
        LocalStoreError::SegmentDamaged {
            table: self.name(),
            file: self.file(location),
            position: seq,
            reason: error.to_string(),
            held: match segment::rows_hint(bytes) {
                Some(rows) => format!("it held {rows} rows"),
                None => "its row count cannot be read".to_string(),
            },
        }
        .into()
    }

    /// Brings what this process knows of the log up to date from `from` on
    /// and returns its end and the rows in `[from, end)`, as one look: every
    /// entry there was there when looked at. `Ok(None)`: an entry at or
    /// after `from` is gone (trimmed after the retention); plan again.
    /// `from_tiered`: `from` is the tiered position, and what lies before it
    /// (in Paimon) can leave the cache; a streaming read's own position says
    /// nothing about what other reads of the process still need.
    pub(super) async fn scan(
        &self,
        incarnation: &Incarnation,
        from: u64,
        from_tiered: bool,
    ) -> Result<Option<(u64, u64)>> {
        self.scan_with(incarnation, from, from_tiered, None).await
    }

    /// [`Self::scan`], with the entry at one position already fetched (at
    /// or after the look began: an entry, once there, stays as it is).
    pub(super) async fn scan_with(
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
    pub(super) async fn entry(
        &self,
        incarnation: &Incarnation,
        seq: u64,
    ) -> Result<Option<(Held, Info)>> {
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
    pub(super) async fn read_part(
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
        let damaged = |reason: String| {
            LocalStoreError::SegmentDamaged {
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
            }
            .into()
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
                    return Err(LocalStoreError::StreamBehind {
                        table: self.name(),
                        position: seq,
                    }
                    .into());
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
    pub(super) async fn entry_rows(
        self: &Arc<Self>,
        incarnation: &Arc<Incarnation>,
        seq: u64,
        schema: &SchemaRef,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let Some((held, _)) = self.entry(incarnation, seq).await? else {
            return Err(LocalStoreError::StreamBehind {
                table: self.name(),
                position: seq,
            }
            .into());
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
    pub(super) fn change_batch(&self, batch: &RecordBatch) -> Result<ChangeBatch> {
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
    pub(super) fn entries_rows(
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

    /// Fixes a read: the Paimon snapshot and the store's segments after it,
    /// aligned with the table's current schema.
    pub(crate) async fn plan_read(self: &Arc<Self>, table: &Table) -> Result<LocalLog> {
        // The log's end as this process knows it, looked at beside the
        // metadata: where a read finds nothing new, the one request it makes.
        let known_end = {
            let guess = self.incarnations.guess();
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
        // finds its segments; should one still be gone, the next try sees
        // the snapshot that holds its rows.
        let planned = PLAN_AGAIN
            .run_to_end(|| {
                let (first, fetched) = (tiered.take(), fetched.take());
                let incarnation = &incarnation;
                async move {
                    let (snapshot_id, position) = match first {
                        Some(first) => first,
                        None => self.tiered(incarnation, table).await?,
                    };
                    Ok::<_, Error>(
                        match self.scan_with(incarnation, position, true, fetched).await? {
                            Some((end, rows)) => Try::Done((snapshot_id, position, end, rows)),
                            None => Try::Again(()),
                        },
                    )
                }
            })
            .await?;
        let Ok((snapshot_id, from, end, rows)) = planned else {
            return Err(LocalStoreError::TrimmedUnderRead { table: self.name() }.into());
        };
        Ok(LocalLog {
            state: Arc::clone(self),
            incarnation,
            schema,
            snapshot_id,
            from,
            end,
            rows,
        })
    }

    /// Segments after `from`, waiting for one to be written. Fails when the
    /// log it needs was trimmed, or the table was dropped.
    pub(super) async fn wait_for(&self, incarnation: &Incarnation, from: u64) -> Result<u64> {
        loop {
            let notified = self.commits.written.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let behind: Error = LocalStoreError::StreamBehind {
                table: self.name(),
                position: from,
            }
            .into();
            match self.scan(incarnation, from, false).await? {
                None => return Err(behind),
                Some((end, _)) if end > from => return Ok(end),
                Some(_) => {}
            }
            match self.read_meta().await? {
                Some(meta) if meta.incarnation == incarnation.id => {}
                _ => {
                    return Err(LocalStoreError::DroppedDuringRead { table: self.name() }.into());
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
