//! Incarnations: which store table `table.json` names now, and whether the
//! Paimon table at hand is the one it was attached to.
//!
//! [`Incarnations`] owns the one cache of it ([`TableState`]'s `incarnations`):
//! the incarnation this process last saw, with its segment cache and what it
//! verified. Invariants it keeps:
//!
//! - **Checked before use.** [`TableState::current`] reads `table.json` each
//!   time; the cached incarnation is reused only when `table.json` still names
//!   it, and any other is dropped with all it remembered. A store table
//!   dropped and created again, by any process, starts an empty log.
//! - **One Paimon table.** An incarnation belongs to the Paimon table whose
//!   first schema has the creation time `table.json` recorded; a `Table` of
//!   another (dropped and created again elsewhere), or a handle loaded before
//!   its table was dropped, is refused ([`LocalStoreError::StoreTableStale`]).
//! - **Pinned.** Each incarnation's commit user is registered as a Paimon
//!   consumer, so that snapshot expiry keeps the snapshots that prove its
//!   tiered position (see [`super::tiered`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path;
use paimon::table::Table;
use serde::{Deserialize, Serialize};

use super::super::error::LocalStoreError;
use super::super::{path, LOCAL};
use super::segments::Segments;
use super::{unique, TableState, TIER_USER};
use crate::error::Result;

/// The format `table.json` is written in.
pub(super) const META_FORMAT: u32 = 2;

/// Store-side metadata of a table, written when it is attached.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TableMeta {
    pub(super) format: u32,
    /// The store table's incarnation; empty for tables of the first format,
    /// whose files lie directly in the table's directory.
    #[serde(default)]
    pub(super) incarnation: String,
    /// When the Paimon table's first schema was made: which Paimon table of
    /// this name the store table belongs to.
    #[serde(default)]
    pub(super) paimon_created_ms: Option<i64>,
    /// The Paimon snapshot the table had when the store table was attached.
    pub(super) base_snapshot: Option<i64>,
    /// Where the Paimon table lives, for people reading the store's files.
    pub(super) paimon_location: String,
}

/// One incarnation of a store table, as this process knows it.
pub(crate) struct Incarnation {
    pub(super) id: String,
    /// Where the incarnation's log and marker live.
    pub(super) dir: Path,
    /// The commit user of its tiering snapshots.
    pub(super) user: String,
    pub(super) paimon_created_ms: Option<i64>,
    pub(super) base_snapshot: Option<i64>,
    pub(super) segments: tokio::sync::Mutex<Segments>,
    /// Snapshot id -> (committed by this incarnation, commit identifier).
    pub(super) snapshots: Mutex<HashMap<i64, (bool, i64)>>,
    /// Paimon schemas known to belong to the Paimon table of this
    /// incarnation, by id but compared whole: a table made again in the
    /// same millisecond has the dropped one's id and time, and a handle on
    /// the dropped one must still be refused ([`crate::schema_stamp`]).
    pub(super) verified: Mutex<HashMap<i64, paimon::spec::TableSchema>>,
    /// Log entry position -> (its object's size, its bytes with the parts
    /// of a multi-part write), for entries [`TableState::waiting`] looked
    /// into; an entry replaced since (set aside) has another size.
    pub(super) entry_bytes: Mutex<BTreeMap<u64, (u64, u64)>>,
}

impl Incarnation {
    pub(super) fn new(table_dir: &Path, meta: &TableMeta) -> Self {
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

/// The incarnation this process last saw, with all it remembered of it.
#[derive(Default)]
pub(super) struct Incarnations {
    current: Mutex<Option<Arc<Incarnation>>>,
}

impl Incarnations {
    /// The incarnation `meta` (read from `table.json` just now) names: the
    /// one this process knew, or a new one replacing it (`true`).
    pub(super) fn named(&self, table_dir: &Path, meta: &TableMeta) -> (Arc<Incarnation>, bool) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match current.as_ref() {
            Some(known) if known.id == meta.incarnation => (Arc::clone(known), false),
            _ => {
                let fresh = Arc::new(Incarnation::new(table_dir, meta));
                *current = Some(Arc::clone(&fresh));
                (fresh, true)
            }
        }
    }

    /// The incarnation this process last saw, unchecked: a guess to read
    /// beside `table.json`, used only once `table.json` names it.
    pub(super) fn guess(&self) -> Option<Arc<Incarnation>> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets the incarnation (the table was attached again or dropped).
    pub(super) fn forget(&self) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl std::fmt::Debug for Incarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incarnation")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Where the Paimon consumer `consumer` of `table` lives (Paimon's
/// `ConsumerManager` layout, which Java Paimon's expiry reads too).
pub(super) fn consumer_path(table: &Table, consumer: &str) -> String {
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
pub(super) async fn pin(table: &Table, consumer: &str, next: i64) -> Result<()> {
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
pub(super) async fn unpin(table: &Table, consumer: &str) {
    let _ = table
        .file_io()
        .delete_file(&consumer_path(table, consumer))
        .await;
}

/// A new incarnation id.
pub(super) fn new_incarnation_id() -> String {
    format!("{:x}", unique())
}

/// When the Paimon table's first schema file was written: which Paimon table
/// of its name `table` is. (A catalog's own answer, such as a REST server's,
/// need not carry the file's time, so the file is asked.)
pub(super) async fn paimon_created_ms(table: &Table) -> Result<i64> {
    Ok(fresh_schema(table, 0).await?.time_millis())
}

/// Schema `id` as the table's files have it now, not as any cache does.
pub(super) async fn fresh_schema(table: &Table, id: i64) -> Result<Arc<paimon::spec::TableSchema>> {
    let manager =
        paimon::table::SchemaManager::new(table.file_io().clone(), table.location().to_string());
    Ok(manager.schema(id).await?)
}

impl TableState {
    /// The incarnation `table.json` names now, checked against the Paimon
    /// table: the cache of an incarnation this process knew is reused, any
    /// other is dropped.
    pub(crate) async fn current(&self, table: &Table) -> Result<Arc<Incarnation>> {
        let meta = self.read_meta().await?;
        self.current_from(meta, table).await
    }

    /// [`Self::current`] from `table.json` as read just now.
    pub(super) async fn current_from(
        &self,
        meta: Option<TableMeta>,
        table: &Table,
    ) -> Result<Arc<Incarnation>> {
        let meta = meta.ok_or_else(|| self.missing())?;
        let (incarnation, fresh) = self.incarnations.named(&self.dir, &meta);
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
    pub(super) async fn ensure_pinned(&self, incarnation: &Incarnation, table: &Table) {
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
    pub(super) async fn check_paimon(
        &self,
        incarnation: &Incarnation,
        table: &Table,
    ) -> Result<()> {
        let Some(expected) = incarnation.paimon_created_ms else {
            return Ok(());
        };
        let version = table.schema().id();
        let verified = incarnation
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&version)
            .is_some_and(|schema| schema == table.schema());
        if verified {
            return Ok(());
        }
        self.check_handle(table).await?;
        if paimon_created_ms(table).await? != expected {
            return Err(LocalStoreError::StoreTableStale {
                store: LOCAL.to_string(),
                table: self.name(),
            }
            .into());
        }
        incarnation
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(version, table.schema().clone());
        Ok(())
    }

    /// A `Table` loaded before its table was dropped and created again
    /// carries a schema the files no longer have: the one check of
    /// [`crate::schema_stamp`], which compares the schema whole. (A REST
    /// catalog's schemas come from its server: not checked here.)
    pub(super) async fn check_handle(&self, table: &Table) -> Result<()> {
        if crate::schema_stamp::freshness(table).await? != crate::schema_stamp::Freshness::Replaced
        {
            return Ok(());
        }
        // A schema file gone is a table dropped, and reading it says so as
        // it always has; one holding another schema is a table made again.
        fresh_schema(table, table.schema().id()).await?;
        Err(LocalStoreError::StoreTableStale {
            store: LOCAL.to_string(),
            table: self.name(),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use datafusion::arrow::datatypes::Schema;

    use super::super::super::root::test_roots;
    use super::super::super::segment::log_schema;
    use super::super::with_row_kind;
    use super::*;
    use crate::schema_stamp::tests::table_in;
    use crate::store::WriteKind;

    /// A handle loaded before its table was dropped is refused however the
    /// table made again under its name looks, even once a handle on the new
    /// table was checked: a check remembered for the new table's schema
    /// (its id and time) is not one for the old handle's, which a table made
    /// in the same millisecond shares, and the old handle's rows would land
    /// in the new table's log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_handle_is_refused_after_a_fresh_one_was_checked() {
        let warehouse = tempfile::tempdir().expect("a warehouse");
        let store = tempfile::tempdir().expect("a store directory");
        let (catalog, identifier, old) = table_in(warehouse.path()).await;
        let root = test_roots::in_dir(store.path());
        let state = TableState::of(&root, &identifier);
        state.attach(&old).await.expect("attach");

        // DROP TABLE, then CREATE TABLE of the same name in the same
        // millisecond, with another column: its schema-0 has the dropped
        // table's time.
        state
            .drop_with(Box::pin(async { Ok(()) }))
            .await
            .expect("drop");
        let file = warehouse
            .path()
            .join("db.db")
            .join("t")
            .join("schema")
            .join("schema-0");
        let mut schema: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).expect("schema-0")).expect("json");
        schema["fields"][0]["name"] = serde_json::Value::from("other");
        std::fs::write(&file, serde_json::to_vec(&schema).expect("json")).expect("rewrite");
        let new = catalog.get_table(&identifier).await.expect("the new table");
        assert_eq!(
            (new.schema().id(), new.schema().time_millis()),
            (old.schema().id(), old.schema().time_millis())
        );
        state.attach(&new).await.expect("attach the new table");

        let stale = |what: &str, outcome: Result<()>| {
            assert!(
                outcome.as_ref().is_err_and(|e| e
                    .to_string()
                    .contains("holds the rows of an earlier table named 'db.t'")),
                "{what}: {outcome:?}"
            );
        };
        stale(
            "the old handle, first",
            state.current(&old).await.map(|_| ()),
        );
        state.current(&new).await.expect("the new handle");
        let schema = log_schema(&old).expect("the old log schema");
        let batch = with_row_kind(
            &RecordBatch::try_new(
                Arc::new(Schema::new(schema.fields()[..1].to_vec())),
                vec![Arc::new(Int32Array::from(vec![1]))],
            )
            .expect("rows"),
            WriteKind::Append,
            &schema,
        )
        .expect("log rows");
        stale(
            "a write through the old handle",
            state
                .append(&old, vec![batch], Duration::from_secs(600))
                .await,
        );
        stale(
            "the old handle, after the new one",
            state.current(&old).await.map(|_| ()),
        );
        assert_eq!(
            state.pending_rows(&new).await.expect("pending rows"),
            0,
            "the old handle's row is in the new table's log"
        );
    }
}
