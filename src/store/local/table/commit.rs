//! Writes: group commit of small writes, and the parts writer of writes
//! too big for one segment.
//!
//! [`GroupCommit`] owns the writes waiting in this process and the leader's
//! turn. Invariants it keeps:
//!
//! - **Durable before acknowledged.** A write is answered only after the
//!   segment holding it was created whole (create-if-absent) at a position
//!   no other writer took.
//! - **Never below the tiered position.** A writer numbers its segment from
//!   the tiered position read just before the put, whatever it cached. On
//!   local disk it holds the trim lock shared from that read to the put;
//!   elsewhere a put that took longer than half the log retention looks
//!   again and reports its outcome as unknown if tiering passed it meanwhile.
//! - **One schema per segment.** Writes are grouped only with writes planned
//!   against the same schema.
//! - **Parts are invisible until committed.** A multi-part write's parts lie
//!   outside the log until one entry names them all; one that never commits
//!   leaves only parts no entry names, which [`PartsWriter::abort`] (or the
//!   leftovers sweep) removes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use datafusion::arrow::array::{Int8Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use futures::TryStreamExt;
use object_store::path::Path;
use paimon::table::Table;
use tokio::sync::{oneshot, Notify};

use super::super::error::LocalStoreError;
use super::super::root::PutFailed;
use super::super::segment::{self, Part, PartList};
use super::super::{leftovers, path, LOCAL};
use super::incarnation::Incarnation;
use super::segments::{Held, Info};
use super::{unique, TableState};
use crate::error::{Error, Result};
use crate::failpoint::failpoint;
use crate::object_storage::create::Created;
use crate::store::WriteKind;

/// The writes of this process waiting to be grouped, and the leader's turn.
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Vec<PendingWrite>>,
    /// Held by the leader that writes the waiting writes as one segment.
    writer: tokio::sync::Mutex<()>,
    /// Woken when this process wrote a segment (streaming reads wait on it).
    pub(super) written: Notify,
}

struct PendingWrite {
    /// Writes are grouped only with writes planned against the same schema.
    schema: SchemaRef,
    schema_version: (i64, i64),
    table: Table,
    batches: Vec<RecordBatch>,
    done: oneshot::Sender<Result<()>>,
}

impl TableState {
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
        self.commits
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(PendingWrite {
                schema,
                schema_version: (table.schema().id(), table.schema().time_millis()),
                table: table.clone(),
                batches,
                done,
            });
        let _leader = self.commits.writer.lock().await;
        loop {
            // A leader before us may have written our rows already.
            if let Ok(outcome) = result.try_recv() {
                return outcome;
            }
            let group = {
                let mut queue = self.commits.queue.lock().unwrap_or_else(|e| e.into_inner());
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

    pub(super) async fn write_segment(
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
    pub(super) async fn put_entry(
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
        self.commits.written.notify_waiters();
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

    pub(super) fn unknown(&self, reason: String) -> Error {
        Error::WriteOutcomeUnknown {
            table: self.name(),
            reason,
        }
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
