//! Proving the tiered position: how far the incarnation's rows reached
//! Paimon, from Paimon's own snapshots.
//!
//! The marker (`tiered.json`, written by tiering) and the proof (written by
//! whoever proves a position) are cheap starting points; the truth is the
//! newest snapshot of the incarnation's commit user, whose commit identifier
//! is the position. Invariants it keeps:
//!
//! - **Never back, never a guess.** The position never goes back; where the
//!   search runs into an expired snapshot and the position cannot be proven,
//!   the answer is [`LocalStoreError::TieredPositionUnknown`].
//! - **Read together, checked together.** The marker, proof and latest
//!   snapshot may be read at once (one round trip on an object store), and
//!   are read again when they do not fit together.
//! - The snapshot-id cache on the incarnation holds only what snapshots,
//!   which never change, said.

use std::sync::Arc;

use bytes::Bytes;
use paimon::table::Table;
use serde::{Deserialize, Serialize};

use super::super::error::LocalStoreError;
use super::super::path;
use super::incarnation::Incarnation;
use super::TableState;
use crate::error::Result;

/// Written after a tiering commit: a cheap starting point for finding the
/// newest tiering snapshot, the answer if Paimon has expired it, and when
/// each position was passed (for deleting segments after the retention).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct TieredMarker {
    pub(super) snapshot_id: i64,
    pub(super) position: u64,
    #[serde(default)]
    pub(super) history: Vec<Passed>,
}

/// Tiering passed `position` at `at_ms` (milliseconds since the epoch).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Passed {
    pub(super) position: u64,
    pub(super) at_ms: i64,
}

impl TableState {
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
    /// and the answer is [`LocalStoreError::TieredPositionUnknown`], never a guess.
    pub(super) async fn tiered(
        &self,
        incarnation: &Incarnation,
        table: &Table,
    ) -> Result<(Option<i64>, u64)> {
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
    pub(super) async fn locked_and_tiered(
        &self,
        table: &Table,
    ) -> Result<(
        Option<crate::object_storage::lock::FileLock>,
        Arc<Incarnation>,
        u64,
    )> {
        let guess = self.incarnations.guess();
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
    pub(super) async fn current_and_tiered(
        &self,
        table: &Table,
    ) -> Result<(Arc<Incarnation>, Option<i64>, u64)> {
        let guess = self.incarnations.guess();
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
    pub(super) async fn tiered_if_guessed(
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
    pub(super) async fn tiered_from(
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
    pub(super) async fn known(&self, incarnation: &Incarnation) -> Result<Option<TieredMarker>> {
        let proof = path::tiered_proof(&incarnation.dir);
        let (marker, proof) = futures::join!(
            self.marker(incarnation),
            self.read_json::<TieredMarker>(&proof)
        );
        Ok(Self::more_known(marker?, proof?))
    }

    /// Of the marker and the proof, the one that covers more snapshots.
    pub(super) fn more_known(
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
    pub(super) async fn expired_below(
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
        Err(LocalStoreError::TieredPositionUnknown {
            table: self.name(),
            snapshot: expired,
            consumer: incarnation.user.clone(),
            position: covered,
            end,
            dir: self.file(&self.dir),
        }
        .into())
    }

    /// Records that the incarnation's tiering snapshots up to `snapshot_id`
    /// reach `position`. Kept apart from the marker, which tiering rewrites
    /// (read, change, write) under its lock: a proof is written by whoever
    /// finds it, and is true whenever it is written, so two writers of it
    /// never make it false, only one of them less recent.
    pub(super) async fn prove(
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

    pub(super) async fn marker(&self, incarnation: &Incarnation) -> Result<Option<TieredMarker>> {
        self.read_json(&path::tiered_marker(&incarnation.dir)).await
    }
}
