//! Attaching a store table to its Paimon table, and dropping it.
//!
//! Invariants it keeps:
//!
//! - **Under the tiering locks.** Attaching and dropping hold the table's
//!   tiering locks (this process's and every process's), so no tiering
//!   round runs beside them; replacing or dropping also holds the trim lock
//!   exclusively, so no write is between checking the incarnation and its put.
//! - **Conditional.** `table.json` is replaced only if it is still the
//!   version read, and a replacement deletes only the incarnation it
//!   replaced ([`Doomed`]): a late put or deletion never takes another
//!   process's table away.
//! - **One Paimon table's.** A store table is replaced only for the Paimon
//!   table of its name and location made again; one of a Paimon table at
//!   another location (another warehouse whose catalog names the same store
//!   directory) is refused, never deleted with its rows.
//! - **Nothing stranded.** Turning the mode on again over rows that tiering
//!   could no longer pass correctly is refused, naming what to do.
//! - The tiering lock and lease files stay when a table's files are deleted.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use paimon::table::Table;

use super::super::error::LocalStoreError;
use super::super::root::Replaced;
use super::super::segment::log_schema;
use super::super::{path, LOCAL};
use super::incarnation::{
    new_incarnation_id, paimon_created_ms, pin, unpin, Incarnation, TableMeta, META_FORMAT,
};
use super::{column_names, missing_columns, TableState};
use crate::error::{Error, Result};
use crate::store::primary_keys;

/// What [`TableState::delete_files`] deletes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Doomed<'a> {
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

/// Whether two spellings of a Paimon table's location name one place: a
/// trailing `/`, a `file:` scheme and `s3a://` for `s3://` aside.
fn same_location(a: &str, b: &str) -> bool {
    fn key(location: &str) -> String {
        let location = location.trim_end_matches('/');
        if let Some(path) = crate::object_storage::local_path(location) {
            return path.display().to_string();
        }
        match location.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("s3a") => format!("s3://{rest}"),
            _ => location.to_string(),
        }
    }
    key(a) == key(b)
}

impl TableState {
    /// Creates the store-side table if it is not there, or replaces one that
    /// belongs to an earlier Paimon table of the same name and location (one
    /// of a table elsewhere is refused: [`LocalStoreError::OtherPaimonTable`]).
    /// Idempotent.
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
        let _across_processes = self.root.lock_tiering(&self.dir, &self.name()).await?;
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
            // Another Paimon table of this name, elsewhere: not a table
            // dropped, but one of another warehouse whose catalog names this
            // store directory too. Its rows are not this table's to delete.
            Some(meta)
                if !meta.paimon_location.is_empty()
                    && !same_location(&meta.paimon_location, table.location()) =>
            {
                return Err(LocalStoreError::OtherPaimonTable {
                    table: self.name(),
                    dir: self.file(&self.dir),
                    attached: meta.paimon_location,
                    location: table.location().to_string(),
                }
                .into());
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
        self.incarnations.forget();
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
    pub(super) async fn check_stranded(&self, table: &Table) -> Result<()> {
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
        Err(LocalStoreError::StrandedRows {
            table: self.name(),
            rows,
            since,
            tier_command: format!(
                "lakestream-cli tier --once --table {name} --store {LOCAL}, with this catalog's \
                 --warehouse and --option flags"
            ),
            dir: self.file(&self.dir),
        }
        .into())
    }

    /// Turning the mode on again over writes that hold columns the table
    /// no longer has (dropped or renamed while the mode was off, before
    /// tiering): refused, as tiering could not pass them
    /// ([`LocalStoreError::ColumnsGone`]).
    pub(super) async fn check_columns(&self, table: &Table) -> Result<()> {
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
    pub(super) async fn gone_for_good(&self, table: &Table, missing: &[String]) -> Result<bool> {
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

    pub(super) fn columns_gone(&self, position: u64, missing: &[String]) -> Error {
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
    pub(super) async fn written_elsewhere(
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
        let _across_processes = self.root.lock_tiering(&self.dir, &self.name()).await?;
        // No write is between checking the table and its put.
        let _writes = self.root.lock_trim(&self.dir, false).await?;
        drop_in_catalog.await?;
        self.delete_files(Doomed::All).await?;
        self.incarnations.forget();
        Ok(())
    }

    /// Deletes the table's objects ([`Doomed`]). The tiering lock and lease
    /// stay: they are how processes agree on who tiers, across
    /// incarnations, and the caller holds them while it deletes.
    pub(super) async fn delete_files(&self, doomed: Doomed<'_>) -> Result<()> {
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
}

#[cfg(test)]
mod tests {
    use super::super::super::root::test_roots;
    use super::super::super::root::Root;
    use super::*;
    use std::sync::Arc;

    use crate::object_storage::lease::Lease;
    use object_store::ObjectStoreExt;
    use paimon::catalog::Identifier;
    use std::time::Duration;

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
        let state = TableState::of(&root, &Identifier::new("default", "t"));
        for name in ["table.json", "log/00000000000000000001", "tiered"] {
            root.objects
                .put(
                    &state.dir.clone().join(name),
                    Bytes::from_static(b"x").into(),
                )
                .await
                .expect("put");
        }
        let lease = Lease::acquire(
            Arc::clone(&root),
            path::lease_dir(&state.dir),
            Duration::from_secs(30),
            "the lease",
        )
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

    #[test]
    fn locations_are_compared_by_place() {
        for (a, b) in [
            ("/w/db.db/t", "file:///w/db.db/t/"),
            ("file:/w/db.db/t", "/w/db.db/t"),
            ("s3a://b/w/db.db/t", "s3://b/w/db.db/t"),
        ] {
            assert!(same_location(a, b), "{a} {b}");
        }
        for (a, b) in [
            ("/w/db.db/t", "/v/db.db/t"),
            ("s3://b/w/db.db/t", "s3://c/w/db.db/t"),
            ("s3://b/w/db.db/t", "/b/w/db.db/t"),
        ] {
            assert!(!same_location(a, b), "{a} {b}");
        }
    }

    /// Two Paimon tables of one name, in two warehouses whose catalogs name
    /// one store directory (`local.path`, which a REST catalog needs): the
    /// second one's attach must not take the first one's store table, and
    /// the rows in it that wait to be tiered, for that of a table dropped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_table_of_another_warehouse_does_not_take_a_store_table_away() {
        use datafusion::arrow::array::{Int32Array, RecordBatch};
        use datafusion::arrow::datatypes::Schema;

        use super::super::with_row_kind;
        use crate::schema_stamp::tests::table_in;
        use crate::store::WriteKind;

        let (first_warehouse, second_warehouse, store) = (
            tempfile::tempdir().expect("a warehouse"),
            tempfile::tempdir().expect("another warehouse"),
            tempfile::tempdir().expect("a store directory"),
        );
        let (_first_catalog, identifier, first) = table_in(first_warehouse.path()).await;
        let (_second_catalog, _, second) = loop {
            let made = table_in(second_warehouse.path()).await;
            if made.2.schema().time_millis() != first.schema().time_millis() {
                break made;
            }
            // Made in the same millisecond: made again, later.
            std::fs::remove_dir_all(second_warehouse.path().join("db.db")).expect("drop");
        };
        let root = test_roots::in_dir(store.path());
        let state = TableState::of(&root, &identifier);
        state.attach(&first).await.expect("attach");
        let schema = log_schema(&first).expect("the log schema");
        let rows = RecordBatch::try_new(
            Arc::new(Schema::new(schema.fields()[..1].to_vec())),
            vec![Arc::new(Int32Array::from(vec![1]))],
        )
        .expect("rows");
        let batch = with_row_kind(&rows, WriteKind::Append, &schema).expect("log rows");
        state
            .append(&first, vec![batch], Duration::from_secs(600))
            .await
            .expect("an acknowledged write");

        let attached = state.attach(&second).await;
        let kept = state.pending_rows(&first).await;
        assert!(
            matches!(kept, Ok(1)),
            "the second table's attach: {attached:?}; the first one's rows: {kept:?}"
        );
        let Err(refused) = attached else {
            panic!("the second table's attach took the first one's store table");
        };
        let message = refused.to_string();
        for named in [first.location(), second.location(), "local.path"] {
            assert!(message.contains(named), "{named}: {message}");
        }
    }
}
