//! Tiering: moving the store's rows into Paimon exactly once, and trimming
//! the segments Paimon holds.
//!
//! Invariants it keeps:
//!
//! - **One tierer.** A round holds the table's tiering locks, this
//!   process's and every process's (a file lock on local disk, a lease on
//!   S3); on S3 its commit is also fenced to the snapshot after the one its
//!   position was read from, so a holder paused past its lease fails rather
//!   than commit twice.
//! - **Exactly once.** The rows of `[P, E)` are committed as one snapshot of
//!   the incarnation's commit user with identifier `E`; a retry after an
//!   uncertain commit is skipped by Paimon.
//! - **Trim late.** A segment is deleted only `local.log-retention` after
//!   tiering passed it (on local disk under the trim lock, held exclusively),
//!   and a multi-part write's parts go before its entry.
//! - Rows of a table dropped meanwhile never reach the next one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::{Array, Int8Array, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use futures::TryStreamExt;
use object_store::path::Path;
use paimon::spec::{CoreOptions, VALUE_KIND_FIELD_NAME};
use paimon::table::Table;

use super::super::error::LocalStoreError;
use super::super::segment::{self, log_schema, Entry};
use super::super::{path, LOCAL};
use super::incarnation::{pin, Incarnation};
use super::tiered::Passed;
use super::{column_names, missing_columns, TableState};
use crate::error::{Error, Result};
use crate::failpoint::failpoint;
use crate::object_storage::S3Options;
use crate::progress::Progress;
use crate::store::{primary_keys, RowKind, TierReport};

impl TableState {
    /// Runs `work` holding the table's tiering locks (this process's and,
    /// on a local disk, every process's): maintenance after a tiering round
    /// runs under them, so no tiering commit of this table races it.
    pub(crate) async fn with_tiering_lock<T>(
        &self,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let _in_process = self.tiering.lock().await;
        let _across_processes = self.root.lock_tiering(&self.dir, &self.name()).await?;
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
        let _across_processes = self.root.lock_tiering(&self.dir, &self.name()).await?;
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

    pub(super) fn missing_after(&self, position: u64) -> Error {
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
    pub(super) async fn tier_chunk(
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
                return Err(LocalStoreError::StoreTableStale {
                    store: LOCAL.to_string(),
                    table: self.name(),
                }
                .into())
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
    pub(super) async fn trim(
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
        let now = crate::clock::now_ms_signed();
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
    pub(super) async fn delete_parts(&self, dir: &Path, location: &Path) -> Result<()> {
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
}

/// A log batch as Paimon's writer takes it: primary-key tables keep the row
/// kind as `_VALUE_KIND`; append tables drop it (their log has only inserts).
pub(super) fn paimon_batch(batch: &RecordBatch, keyed: bool) -> Result<RecordBatch> {
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
