//! The backlog: what waits to be tiered, removing what killed writers
//! left, and setting damaged segments aside.
//!
//! [`Waiting`] is read from the store's files, never from this process's
//! memory, so other processes' writes count as soon as they land; the
//! sizes of entries looked into are remembered per incarnation by position
//! and object size. Invariants it keeps:
//!
//! - **Only damage is set aside.** A sound write is never set aside (other
//!   processes may hold and tier it); a damaged one is kept beside the log
//!   and replaced by an empty segment, under the tiering locks.
//! - The leftovers sweep runs under the tiering locks, so no trim or
//!   set-aside changes the log while it reads which writes it names.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use paimon::table::Table;

use super::super::error::LocalStoreError;
use super::super::segment::{self, log_schema, Entry};
use super::super::{leftovers, path, TIERING_LOG};
use super::incarnation::Incarnation;
use super::segments::Info;
use super::{column_names, missing_columns, unique, TableState};
use crate::error::{Error, Result};

impl TableState {
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
    pub(super) async fn entry_bytes(
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
    pub(super) async fn sweep_leftovers(&self, incarnation: &Incarnation) {
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
        let _across_processes = self.root.lock_tiering(&self.dir, &self.name()).await?;
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
                        if matches!(
                            LocalStoreError::of(&e),
                            Some(LocalStoreError::SegmentDamaged { .. })
                        ) {
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
    pub(super) async fn sound_but(&self, table: &Table, columns: &[String]) -> Result<String> {
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

/// What a damaged segment held, from its damage report.
pub(super) fn damage_held(damage: Error) -> Result<String> {
    match LocalStoreError::of(&damage) {
        Some(LocalStoreError::SegmentDamaged { held, .. }) => Ok(held.clone()),
        _ => Err(Error::Internal(
            "set aside: not a damage report".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_due_at_the_target_size_or_the_max_delay() {
        let delay = Duration::from_secs(180);
        let nothing = Waiting::default();
        assert!(!nothing.due(1, delay, i64::MAX));
        let young = Waiting {
            entries: 3,
            bytes: 1000,
            oldest_ms: Some(10_000),
        };
        assert!(!young.due(1001, delay, 10_000 + 179_999));
        assert!(young.due(1000, delay, 10_000));
        assert!(young.due(1001, delay, 10_000 + 180_000));
        // A clock behind the files' times: only the size counts.
        assert!(!young.due(1001, delay, 0));
    }
}
