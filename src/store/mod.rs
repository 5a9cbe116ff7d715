//! The lakestream store abstraction: what a store does for a lake-stream
//! table, how stores are found (a registry of factories keyed by identifier)
//! and how a catalog reaches its store (created on first use, retried after a
//! failure, every call bounded in time).
//!
//! The core names no store type: `local`, `fluss` and test stores all come in
//! through [`StoreRegistry::register`].

mod change;
#[cfg(feature = "fluss")]
pub mod fluss;
mod lazy;
pub mod local;
mod registry;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use paimon::catalog::{Catalog, Identifier};
use paimon::table::Table;

use crate::error::{Error, ErrorKind, Result};

pub use change::{ChangeBatch, ChangeBatchError, ChangeStream, RowKind};
pub(crate) use lazy::split_binding;
pub use lazy::LazyStore;
pub use registry::StoreRegistry;

/// What a write does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Add rows to an append (log) table.
    Append,
    /// Insert or replace rows of a primary-key table by key.
    Upsert,
    /// Remove the keys of the given rows from a primary-key table. Only the
    /// primary-key columns of the rows are meaningful.
    Delete,
}

impl WriteKind {
    /// The row kind the written rows get in the store's change log.
    pub fn row_kind(self) -> RowKind {
        match self {
            WriteKind::Append | WriteKind::Upsert => RowKind::Upsert,
            WriteKind::Delete => RowKind::Delete,
        }
    }
}

/// How a read of `t$rt` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanMode {
    /// Bounded: up to the store position fixed when the query is planned.
    #[default]
    Batch,
    /// Unbounded: the same start, then every later write until cancelled.
    Streaming,
}

/// What a read of `t$rt` covers, fixed when the query is planned.
#[derive(Debug, Clone)]
pub struct StoreRead {
    /// The Paimon snapshot whose rows the read starts from. `None`: the store
    /// holds all of the table's rows.
    pub snapshot_id: Option<i64>,
    /// The store's changes after that snapshot.
    pub log: Arc<dyn StoreLog>,
}

/// The store's change log of a table, after the Paimon snapshot of a
/// [`StoreRead`]: [`ChangeBatch`]es in write order, the table's rows in
/// [`table_arrow_schema`] form, each with what it does ([`RowKind`]): an
/// upsert is a row of an append table, or the newest version of its key in a
/// primary-key table; a delete removes its key (primary-key tables).
pub trait StoreLog: Debug + Send + Sync {
    /// The changes up to the end fixed when the read was planned. May be
    /// called more than once (a large union read reads the log twice); each
    /// call yields the same rows, each key's rows in the same order.
    fn read_bounded(&self) -> Result<ChangeStream>;

    /// Whether [`Self::read_bounded`] is known to hold no changes. A batch
    /// read of such a log is Paimon's read alone, at no extra cost.
    fn bounded_is_empty(&self) -> bool {
        false
    }

    /// The changes after that end, as they are written, until the stream is
    /// dropped. Only asked for in [`ScanMode::Streaming`].
    fn follow(&self) -> Result<ChangeStream>;
}

/// A store: takes the writes of lake-stream tables and serves their newest rows.
#[async_trait]
pub trait LakestreamStore: Debug + Send + Sync {
    /// The identifier the store's factory is registered under.
    fn identifier(&self) -> &str;

    /// Creates or attaches the store-side table for `table` as the mode is
    /// turned on. Idempotent. The table's current Paimon snapshot is where the
    /// store starts: an existing table with data is promoted in place.
    async fn attach_table(&self, table: &Table) -> Result<()>;

    /// Removes the store-side table and its rows. A missing table is not an error.
    async fn drop_table(&self, identifier: &Identifier) -> Result<()>;

    /// `DROP TABLE` of a lake-stream table: drops the catalog's table
    /// (`drop_in_catalog`) and the store-side table, in the order and under
    /// the locks the store needs. The default drops the store's table first.
    async fn drop_with_catalog(
        &self,
        identifier: &Identifier,
        drop_in_catalog: BoxFuture<'_, Result<()>>,
    ) -> Result<()> {
        self.drop_table(identifier).await?;
        drop_in_catalog.await
    }

    /// Runs `work`, a commit to `table`'s Paimon table other than tiering
    /// (maintenance asked for with `CALL`), so that it never races the
    /// store's own tiering commits of the table. The default runs it as it
    /// is: a store whose own service tiers cannot hold that service back.
    async fn with_commit_lock(
        &self,
        table: &Identifier,
        work: BoxFuture<'_, Result<()>>,
    ) -> Result<()> {
        let _ = table;
        work.await
    }

    /// Fixes what a read of `t$rt` covers, batch or streaming alike (a
    /// streaming read goes on with [`StoreLog::follow`]). Errors with
    /// [`Error::StoreTableMissing`] when the store has no table for `table`.
    async fn plan_read(&self, table: &Table) -> Result<StoreRead>;

    /// Writes `batches` (in [`table_arrow_schema`] form) as one unit and
    /// returns the number of rows. Returning means the rows are durable in the
    /// store and visible to the next [`Self::plan_read`].
    async fn write(&self, table: &Table, kind: WriteKind, batches: Vec<RecordBatch>)
        -> Result<u64>;

    /// Starts a write whose rows arrive a batch at a time and become
    /// visible as one unit at [`StoreWrite::commit`], so a statement of any
    /// size is written in bounded memory. `None`: the store takes each write
    /// whole, through [`Self::write`].
    async fn start_write(
        &self,
        table: &Table,
        kind: WriteKind,
    ) -> Result<Option<Box<dyn StoreWrite>>> {
        let _ = (table, kind);
        Ok(None)
    }

    /// Moves the store's rows of `table` into Paimon now. Stores whose own
    /// service tiers ([`Tiering::ByItsService`]) answer
    /// [`Error::TieringElsewhere`], which is the default.
    async fn tier(&self, table: &Table) -> Result<TierReport> {
        let _ = table;
        Err(Error::TieringElsewhere {
            store: self.identifier().to_string(),
        })
    }

    /// Moves the damaged piece of the store's log of `table` at `position`
    /// aside, so reads and tiering go on past it, and says what it held.
    /// Stores without such pieces answer that they have none.
    async fn set_aside(&self, table: &Table, position: u64) -> Result<String> {
        let _ = (table, position);
        Err(Error::InvalidStatement {
            statement: "set aside".to_string(),
            reason: format!(
                "lakestream store '{}' keeps no log segments to set aside",
                self.identifier()
            ),
        })
    }

    /// Turning the mode of `table` off, asked of a store whose own service
    /// tiers ([`Self::tier`] answered [`Error::TieringElsewhere`]). The store
    /// stops that service tiering the table, so nothing it holds lands in
    /// Paimon over rows written there directly once the mode is off; or,
    /// while it holds rows Paimon lacks, refuses with [`Error::UntieredRows`]
    /// and lets the service go on. [`Self::attach_table`] starts the
    /// service's tiering again. The default: there is nothing to stop.
    async fn stop_tiering(&self, table: &Table) -> Result<()> {
        let _ = table;
        Ok(())
    }

    /// How many rows of `table` the store holds that Paimon does not.
    async fn pending_rows(&self, table: &Table) -> Result<u64> {
        let _ = table;
        Err(Error::TieringElsewhere {
            store: self.identifier().to_string(),
        })
    }
}

/// A write in progress (see [`LakestreamStore::start_write`]). Nothing it
/// was given is visible before [`Self::commit`] returns; dropping it, or
/// [`Self::abort`], writes nothing.
#[async_trait]
pub trait StoreWrite: Send {
    /// Adds rows, in [`table_arrow_schema`] form.
    async fn put(&mut self, batch: RecordBatch) -> Result<()>;

    /// Makes every row put visible as one unit and returns how many there
    /// were. Returning means they are durable, as for [`LakestreamStore::write`].
    async fn commit(self: Box<Self>) -> Result<u64>;

    /// Gives the write up, cleaning up what it can.
    async fn abort(self: Box<Self>) {}
}

/// What a tiering run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierReport {
    /// Rows committed to Paimon.
    pub rows: u64,
    /// Paimon snapshots committed.
    pub commits: u64,
    /// The store position tiered up to (exclusive).
    pub position: u64,
}

/// How a lake-stream table reaches its store: through its catalog, or, for an
/// external table opened by path, through the statement's options.
#[derive(Debug, Clone)]
pub struct StoreBinding {
    store: Option<Arc<LazyStore>>,
    scope: String,
}

impl StoreBinding {
    /// A binding to `store` (or to none), described as `scope` in errors
    /// (`catalog 'paimon'`, `the external table`).
    pub fn new(store: Option<Arc<LazyStore>>, scope: String) -> Self {
        Self { store, scope }
    }

    /// What the bound store can do ([`StoreFactory::capabilities`]); the
    /// default when no store is named.
    pub fn capabilities(&self) -> Capabilities {
        self.store
            .as_ref()
            .map(|store| store.capabilities())
            .unwrap_or_default()
    }

    /// The store, or the error a lake-stream `operation` on `table` gets
    /// where no store is named.
    pub fn require(&self, operation: &str, table: &Identifier) -> Result<&Arc<LazyStore>> {
        self.store.as_ref().ok_or_else(|| Error::NoStore {
            operation: operation.to_string(),
            table: table.full_name(),
            scope: self.scope.clone(),
        })
    }
}

/// What a factory gets to create a store.
#[derive(Clone)]
pub struct StoreContext {
    /// The catalog options `<identifier>.<key>`, as `<key>`.
    pub options: BTreeMap<String, String>,
    /// All of the catalog's options (`warehouse`, ...), for defaults.
    pub catalog_options: HashMap<String, String>,
    /// The Paimon catalog the store serves (without the lake-stream decorator).
    pub catalog: Arc<dyn Catalog>,
}

impl Debug for StoreContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Options may hold secrets: list the keys only.
        f.debug_struct("StoreContext")
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Creates stores of one kind.
#[async_trait]
pub trait StoreFactory: Debug + Send + Sync {
    /// The identifier catalogs name in `lakestream.store`.
    fn identifier(&self) -> &str;

    /// Creates (connects) a store. Called on the first use of a catalog's
    /// store, and again on the next use after a failure.
    async fn create(&self, context: StoreContext) -> Result<Arc<dyn LakestreamStore>>;

    /// What the stores it creates can do. Known without creating a store,
    /// so statements are checked against it without contacting one.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Where a store created from `context` keeps its data, as the store
    /// binding of the tables it serves records it (never a secret): the
    /// `local` store's root, Fluss's servers. `None`: the identifier alone
    /// names the store. Known without creating the store.
    fn location(&self, context: &StoreContext) -> Result<Option<String>> {
        let _ = context;
        Ok(None)
    }

    /// Whether `recorded`, a location [`Self::location`] gave, names the
    /// same store as `ours`. The default compares them as text.
    fn same_location(&self, recorded: &str, ours: &str) -> bool {
        recorded == ours
    }
}

/// What a store can do beyond taking writes and serving reads of
/// lake-stream tables, as its factory declares it
/// ([`StoreFactory::capabilities`]). The default is a store like `local`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// It takes [`WriteKind::Delete`] for primary-key tables, so `DELETE`
    /// and `UPDATE` run; without it they are refused before the store is
    /// asked.
    pub deletes: bool,
    /// How the rows it holds reach Paimon.
    pub tiering: Tiering,
    /// Whether its tiering writes its change log into Paimon as it is:
    /// every row, in write order, with its row kind, through Paimon's table
    /// write. Only then does Paimon merge a key's versions the way the union
    /// read does for merge settings other than plain `deduplicate`
    /// (`partial-update`, `aggregation`, `sequence.field`, `ignore-delete`;
    /// see [`crate::catalog`]). A store whose tiering writes something else
    /// (before-images of updates, rows its own key-value store merged) has
    /// `false`, and the mode is turned on only for plain `deduplicate`
    /// tables there.
    pub tiers_its_log: bool,
    /// Columns its tiering keeps at the end of the Paimon tables of
    /// lake-stream tables (Fluss: `__bucket`, `__offset`, `__timestamp`).
    /// Reads of `t` and `t$rt` and writes to `t` do not show them, and a
    /// table's columns are fixed while its mode is on (`ADD COLUMN` would
    /// come after them).
    pub hidden_columns: &'static [&'static str],
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            deletes: true,
            tiering: Tiering::OnDemand,
            tiers_its_log: true,
            hidden_columns: &[],
        }
    }
}

impl Capabilities {
    /// The default capabilities with `deletes` as given.
    pub fn with_deletes(self, deletes: bool) -> Self {
        Self { deletes, ..self }
    }

    /// The capabilities with `tiering` as given.
    pub fn with_tiering(self, tiering: Tiering) -> Self {
        Self { tiering, ..self }
    }

    /// The capabilities with `tiers_its_log` as given.
    pub fn with_tiers_its_log(self, tiers_its_log: bool) -> Self {
        Self {
            tiers_its_log,
            ..self
        }
    }

    /// The capabilities with `hidden_columns` as given.
    pub fn with_hidden_columns(self, hidden_columns: &'static [&'static str]) -> Self {
        Self {
            hidden_columns,
            ..self
        }
    }
}

/// How a store's rows reach Paimon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiering {
    /// The store tiers on its own schedule and when asked:
    /// [`LakestreamStore::tier`] moves its rows now (`CALL
    /// sys.lakestream_tier`), and [`LakestreamStore::pending_rows`] says how
    /// many wait.
    OnDemand,
    /// The store's own service tiers (Fluss): [`LakestreamStore::tier`]
    /// answers [`Error::TieringElsewhere`], and turning the mode off asks
    /// [`LakestreamStore::stop_tiering`] to stop that service.
    ByItsService,
}

/// A registry with the stores this crate ships.
pub fn builtin_registry() -> StoreRegistry {
    let registry = StoreRegistry::new();
    registry.register(Arc::new(local::LocalStoreFactory));
    #[cfg(feature = "fluss")]
    registry.register(Arc::new(fluss::FlussStoreFactory));
    registry
}

/// The Arrow schema a store keeps a table's rows in: Paimon's own mapping of
/// the table's fields (`Utf8`, not the view types DataFusion scans produce).
pub fn table_arrow_schema(table: &Table) -> Result<SchemaRef> {
    let schema = paimon::arrow::build_target_arrow_schema(table.schema().fields())?;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_metadata(HashMap::new()))
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// `fields` without the trailing run of `hidden` columns: a table's own
/// columns, without those a store's tiering keeps after them
/// ([`StoreFactory::hidden_columns`]). The one rule for hiding them.
pub(crate) fn own_fields<'a>(
    fields: &'a [paimon::spec::DataField],
    hidden: &[impl AsRef<str>],
) -> &'a [paimon::spec::DataField] {
    let trailing = fields
        .iter()
        .rev()
        .take_while(|f| hidden.iter().any(|h| h.as_ref() == f.name()))
        .count();
    &fields[..fields.len() - trailing]
}

/// The primary-key columns of a table (empty for append tables).
pub fn primary_keys(table: &Table) -> &[String] {
    table.schema().primary_keys()
}

/// A store error with context, for store implementations: a failure to
/// reach or use the store ([`ErrorKind::Unavailable`]). A store that knows
/// better says what kind of failure it is with [`store_error_of_kind`].
pub fn store_error(
    store: &str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    store_error_of_kind(store, ErrorKind::Unavailable, source)
}

/// A store's own error whose text says all a user needs (the table, what
/// happened, what to do), of `kind`: shown as written, without the
/// "lakestream store '...' failed" of [`store_error_of_kind`], which suits
/// failures whose text is a cause (an object store's, a server's).
pub fn store_error_as_written(
    store: &str,
    kind: ErrorKind,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::Store {
        store: store.to_string(),
        kind,
        source: source.into(),
    }
}

/// A store error of `kind`, for store implementations. A store keeps its
/// own error type (the local and Fluss stores have a private enum each) and
/// converts it here, choosing the kind per variant: the kind decides whether
/// the user is told to fix the statement (a DataFusion plan error) or that
/// the store failed.
pub fn store_error_of_kind(
    store: &str,
    kind: ErrorKind,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::StoreFailed {
        store: store.to_string(),
        kind,
        source: source.into(),
    }
}

#[cfg(test)]
mod tests {
    use paimon::spec::{DataField, DataType, IntType};

    use datafusion::error::DataFusionError;

    use super::{own_fields, store_error, store_error_of_kind};
    use crate::error::{surface, Error, ErrorKind};

    fn fields(names: &[&str]) -> Vec<DataField> {
        names
            .iter()
            .enumerate()
            .map(|(id, name)| {
                DataField::new(id as i32, name.to_string(), DataType::Int(IntType::new()))
            })
            .collect()
    }

    fn names(fields: &[DataField]) -> Vec<&str> {
        fields.iter().map(|f| f.name()).collect()
    }

    #[test]
    fn only_the_trailing_run_of_hidden_columns_is_cut() {
        let hidden = ["__bucket", "__offset", "__timestamp"];
        let all = fields(&["a", "b", "__bucket", "__offset", "__timestamp"]);
        assert_eq!(names(own_fields(&all, &hidden)), ["a", "b"]);
        let inner = fields(&["__offset", "a", "__timestamp"]);
        assert_eq!(names(own_fields(&inner, &hidden)), ["__offset", "a"]);
        let none = fields(&["a"]);
        assert_eq!(names(own_fields(&none, &[] as &[&str])), ["a"]);
        assert_eq!(
            names(own_fields(&fields(&["__bucket"]), &hidden)),
            [] as [&str; 0]
        );
    }

    #[test]
    fn a_store_error_crosses_into_datafusion_by_its_kind() {
        for kind in ErrorKind::ALL {
            let error = || store_error_of_kind("third", kind, "what the store said");
            assert_eq!(error().kind(), kind);
            let text = error().to_string();
            assert_eq!(text, "lakestream store 'third' failed: what the store said");
            let planned = DataFusionError::from(error());
            match kind {
                ErrorKind::UserInput | ErrorKind::NotSupported | ErrorKind::Conflict => {
                    assert!(
                        matches!(&planned, DataFusionError::Plan(m) if *m == text),
                        "{kind:?}: {planned:?}"
                    )
                }
                ErrorKind::Internal => assert!(
                    matches!(&planned, DataFusionError::Internal(m) if *m == text),
                    "{kind:?}: {planned:?}"
                ),
                _ => {
                    assert!(
                        matches!(&planned, DataFusionError::External(_)),
                        "{kind:?}: {planned:?}"
                    );
                    assert!(!planned.to_string().contains("during planning"));
                }
            }
            // Whose it is survives the trip (a plan error is text: user
            // input), and surface gives what From gives.
            let back = Error::DataFusion(planned).kind();
            if kind.is_users_to_fix() {
                assert_eq!(back, ErrorKind::UserInput, "{kind:?}");
            } else {
                assert_eq!(back, kind);
            }
            assert_eq!(
                surface(DataFusionError::from(error())).to_string(),
                DataFusionError::from(error()).to_string(),
                "{kind:?}"
            );
            // Raised while a statement runs: never "during planning".
            let running = error().into_run_time();
            assert!(
                !running.to_string().contains("during planning"),
                "{kind:?}: {running}"
            );
            assert!(running.to_string().contains(&text), "{kind:?}: {running}");
        }
        // A store that does not say is unavailable.
        assert_eq!(store_error("third", "down").kind(), ErrorKind::Unavailable);
    }

    #[test]
    fn a_shared_store_error_keeps_its_kind() {
        let damaged = store_error_of_kind("local", ErrorKind::Corrupt, "bad bytes");
        let shared = damaged.share("local");
        assert_eq!(shared.kind(), ErrorKind::Corrupt);
        // The text once, not "failed: lakestream store 'local' failed: ...".
        assert_eq!(shared.to_string(), damaged.to_string());
        assert_eq!(
            shared.to_string(),
            "lakestream store 'local' failed: bad bytes"
        );
    }
}
