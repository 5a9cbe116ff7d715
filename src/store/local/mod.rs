//! The embedded `local` store: no server, data on local disk (or any object
//! store), one command to start.
//!
//! - Writes become log segments, one per group commit, each checksummed and
//!   made durable (fsync on local disk) before the INSERT returns. A write
//!   bigger than `local.segment-size` rolls into parts that one log entry
//!   commits as a unit, so a statement of any size is written, read and
//!   tiered in bounded memory.
//! - Reads of `t$rt` take the newest Paimon snapshot and the segments after
//!   the position its newest tiering commit reached.
//! - Tiering commits segments into Paimon exactly once (commit user
//!   [`TIER_USER`], commit identifier = the exclusive end position), then
//!   deletes them. It runs in the background of the process that writes, on
//!   demand (`lakestream_tier`), or as `lakestream-cli tier`; the last two
//!   tier whatever waits. A round that committed then compacts an append
//!   table's small data files and the table's manifests when Paimon's
//!   `compaction.min.file-num` and `manifest.merge-min-count` say so
//!   ([`crate::maintenance`]).
//! - Sized tiering: the background tierer checks each table every
//!   `tier-interval` and starts a round only once the rows Paimon lacks
//!   reach `tier-target-size` (the bytes of their log entries on disk, the
//!   parts of multi-part writes included) or the oldest of them has waited
//!   `tier-max-delay` (its entry's modification time), whichever comes
//!   first. Both are read from the log's listing, never counted in memory:
//!   other processes write the same tables. Each round commits one snapshot
//!   (a manifest and data files), so fewer, bigger rounds keep tables fast.
//! - Each round first removes what writers killed mid-write left (parts of
//!   writes that never committed, temporary files), once a day old
//!   ([`leftovers`]).
//!
//! Catalog options (`local.<key>`): `path` (default `<warehouse>/_lakestream`),
//! `tier-interval` (how often the background tierer checks, default `5s`,
//! `off` to disable background tiering), `tier-target-size` (default
//! `128mb`), `tier-max-delay` (default `3min`), `tier-max-rows` (rows per
//! tiering commit, default 2,000,000), `log-retention` (how long tiered log
//! stays readable, default `10min`) and `segment-size` (the size at which a
//! write rolls into parts, default `32mb`).

mod error;
mod leftovers;
mod lock;
mod options;
mod path;
mod root;
mod segment;
mod table;
mod tiering;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use paimon::catalog::{Catalog, Identifier};
use paimon::table::Table;

pub use options::LocalOptions;
pub use root::{register_object_store, register_object_store_with_lease};
pub use table::TIER_USER;

use self::options::{binding_location, local_options};
use self::root::Root;
use self::table::{with_row_kind, PartsWriter, TableState};
use crate::error::{Error, Result};
use crate::store::{
    primary_keys, LakestreamStore, StoreContext, StoreFactory, StoreRead, StoreWrite, TierReport,
    WriteKind,
};

/// The identifier of the embedded store.
pub const LOCAL: &str = "local";

/// Creates `local` stores.
#[derive(Debug, Default)]
pub struct LocalStoreFactory;

#[async_trait]
impl StoreFactory for LocalStoreFactory {
    fn identifier(&self) -> &str {
        LOCAL
    }

    async fn create(&self, context: StoreContext) -> Result<Arc<dyn LakestreamStore>> {
        let options = local_options(&context)?;
        Ok(Arc::new(LocalStore::open(options, context.catalog)?))
    }

    fn location(&self, context: &StoreContext) -> Result<Option<String>> {
        binding_location(context).map(Some)
    }
}

/// The embedded store.
#[derive(Debug)]
pub struct LocalStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: Arc<Root>,
    options: LocalOptions,
    catalog: Arc<dyn Catalog>,
    /// Tables with a background tierer in this process.
    tiering: Mutex<HashSet<Identifier>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("root", &self.root.url)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl LocalStore {
    /// Opens the store at `options.path` for tables of `catalog`.
    pub fn open(options: LocalOptions, catalog: Arc<dyn Catalog>) -> Result<Self> {
        let root = Root::open(&options.path, &options.s3, options.lease_ttl)?;
        Ok(Self {
            inner: Arc::new(Inner {
                root,
                options,
                catalog,
                tiering: Mutex::new(HashSet::new()),
            }),
        })
    }

    fn begin(&self, table: &Table, kind: WriteKind) -> Result<LocalWrite> {
        if kind == WriteKind::Delete && primary_keys(table).is_empty() {
            return Err(Error::WriteNotSupported {
                operation: "DELETE".to_string(),
                table: table.identifier().full_name(),
                reason: "the table has no primary key".to_string(),
            });
        }
        Ok(LocalWrite {
            store: Arc::clone(&self.inner),
            table: table.clone(),
            kind,
            schema: segment::log_schema(table)?,
            buffered: Vec::new(),
            buffered_bytes: 0,
            parts: None,
            rows: 0,
            failed: false,
        })
    }
}

/// A write to the `local` store. Rows gather in memory up to
/// `local.segment-size`; a write that stays below it is one segment,
/// grouped with other writes of the process. A bigger one rolls into parts
/// as it goes, and its commit puts the one log entry that names them.
struct LocalWrite {
    store: Arc<Inner>,
    table: Table,
    kind: WriteKind,
    /// The log's schema: the table's columns and the row kind.
    schema: SchemaRef,
    buffered: Vec<RecordBatch>,
    buffered_bytes: u64,
    parts: Option<PartsWriter>,
    rows: u64,
    /// A put failed or was cancelled part way: the write cannot commit.
    failed: bool,
}

impl LocalWrite {
    /// Writes what is buffered as the next part.
    async fn roll(&mut self) -> Result<()> {
        let batches = std::mem::take(&mut self.buffered);
        self.buffered_bytes = 0;
        let parts = match &mut self.parts {
            Some(parts) => parts,
            None => {
                let state = TableState::of(&self.store.root, self.table.identifier());
                self.parts
                    .insert(state.start_parts(&self.table, &self.schema).await?)
            }
        };
        parts.put(&batches).await
    }
}

#[async_trait]
impl StoreWrite for LocalWrite {
    async fn put(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.rows += batch.num_rows() as u64;
        let batch = with_row_kind(&batch, self.kind, &self.schema)?;
        self.buffered_bytes += batch.get_array_memory_size() as u64;
        self.buffered.push(batch);
        if self.buffered_bytes >= self.store.options.segment_size {
            // Stays set if the roll fails or is cancelled part way.
            self.failed = true;
            self.roll().await?;
            self.failed = false;
        }
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<u64> {
        if self.failed {
            return Err(Error::WriteNotApplied {
                table: self.table.identifier().full_name(),
                reason: "a part of it could not be written".to_string(),
            });
        }
        if self.rows == 0 {
            return Ok(0);
        }
        let state = TableState::of(&self.store.root, self.table.identifier());
        let retention = self.store.options.log_retention;
        let table = self.table.clone();
        let batches = std::mem::take(&mut self.buffered);
        let parts = self.parts.take();
        // The commit runs in a task of its own: a caller that is cancelled
        // or times out does not stop it part way (see docs/concepts).
        tokio::spawn(async move {
            match parts {
                Some(mut parts) => {
                    if let Err(e) = parts.put(&batches).await {
                        parts.abort().await;
                        return Err(e);
                    }
                    parts.commit(retention).await
                }
                None => state.append(&table, batches, retention).await,
            }
        })
        .await
        .map_err(|e| Error::WriteOutcomeUnknown {
            table: self.table.identifier().full_name(),
            reason: format!("the write task failed: {e}"),
        })??;
        self.store.ensure_tiering(self.table.identifier());
        Ok(self.rows)
    }

    async fn abort(mut self: Box<Self>) {
        if let Some(parts) = self.parts.take() {
            parts.abort().await;
        }
    }
}

impl Drop for LocalWrite {
    /// A write dropped before its commit (a cancelled statement) deletes
    /// the parts it wrote, in the background.
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(parts.abort());
            }
        }
    }
}

/// The `log` target of the background tierer's reports.
pub const TIERING_LOG: &str = "paimon_lakestream::tiering";

#[async_trait]
impl LakestreamStore for LocalStore {
    fn identifier(&self) -> &str {
        LOCAL
    }

    async fn attach_table(&self, table: &Table) -> Result<()> {
        TableState::of(&self.inner.root, table.identifier())
            .attach(table)
            .await
    }

    async fn drop_table(&self, identifier: &Identifier) -> Result<()> {
        self.drop_with_catalog(identifier, Box::pin(async { Ok(()) }))
            .await
    }

    /// Under the table's tiering locks (this process's and, on a local disk,
    /// every process's), as the maintenance after a tiering round runs.
    async fn with_commit_lock(
        &self,
        table: &Identifier,
        work: BoxFuture<'_, Result<()>>,
    ) -> Result<()> {
        TableState::of(&self.inner.root, table)
            .with_tiering_lock(work)
            .await
    }

    /// The Paimon table goes first, under the store's locks: a drop cut
    /// short leaves store files of a dropped table (never served, replaced
    /// when the name is created again), never a table without its store.
    async fn drop_with_catalog(
        &self,
        identifier: &Identifier,
        drop_in_catalog: BoxFuture<'_, Result<()>>,
    ) -> Result<()> {
        TableState::of(&self.inner.root, identifier)
            .drop_with(drop_in_catalog)
            .await
    }

    async fn plan_read(&self, table: &Table) -> Result<StoreRead> {
        let log = TableState::of(&self.inner.root, table.identifier())
            .plan_read(table)
            .await?;
        Ok(StoreRead {
            snapshot_id: log.snapshot_id,
            log: Arc::new(log),
        })
    }

    async fn write(
        &self,
        table: &Table,
        kind: WriteKind,
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        let mut write = self.begin(table, kind)?;
        for batch in batches {
            write.put(batch).await?;
        }
        Box::new(write).commit().await
    }

    async fn start_write(
        &self,
        table: &Table,
        kind: WriteKind,
    ) -> Result<Option<Box<dyn StoreWrite>>> {
        Ok(Some(Box::new(self.begin(table, kind)?)))
    }

    async fn tier(&self, table: &Table) -> Result<TierReport> {
        self.inner.tier(table).await
    }

    /// Rows of `table` in the store that Paimon does not hold yet.
    async fn pending_rows(&self, table: &Table) -> Result<u64> {
        let store = TableState::of(&self.inner.root, table.identifier());
        store.pending_rows(table).await
    }

    /// Moves the damaged segment at `position` of `table` aside, so reads
    /// and tiering go on past it (its rows are lost); says what it held.
    async fn set_aside(&self, table: &Table, position: u64) -> Result<String> {
        let store = TableState::of(&self.inner.root, table.identifier());
        store.set_aside(table, position).await
    }
}
