//! The one decorator over every `paimon::Catalog` (filesystem, REST, or any
//! other implementation): it holds the catalog's lake-stream options and
//! enforces the table-identity guards, so each guard lives in one place.
//!
//! Every trait method is forwarded, the defaulted ones and `as_any` included:
//! a method left to its default would silently turn off views, tags,
//! partitions or REST procedures of the wrapped catalog.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use paimon::api::{GetTagResponse, PagedList};
use paimon::catalog::{Catalog, Database, Function, Identifier, LoadedTable, View, ViewSchema};
use paimon::spec::{
    CoreOptions, DataField, Partition, PartitionStatistics, Schema, SchemaChange, TableType,
};
use paimon::table::Table;

use crate::error::{Error, Result};
use crate::merge::MergeSpec;
use crate::options::{self, CatalogStoreOptions};
use crate::store::{LazyStore, StoreBinding, StoreRegistry, TierReport};

/// A Paimon catalog in lake-stream mode.
pub struct LakeStreamCatalog {
    name: String,
    inner: Arc<dyn Catalog>,
    store_options: CatalogStoreOptions,
    store: StoreBinding,
    /// Things a statement did that its caller should hear about.
    notices: std::sync::Mutex<Vec<String>>,
    /// Handles `get_table`/`load_table` reuse once the files confirm them.
    tables: crate::table_cache::TableCache,
    /// Whether the wrapped catalog is a filesystem catalog (its databases
    /// are directories, remembered once seen: see `table_cache`).
    filesystem: bool,
}

impl std::fmt::Debug for LakeStreamCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeStreamCatalog")
            .field("name", &self.name)
            .field("store", &self.store_options.store())
            .finish_non_exhaustive()
    }
}

/// How many notices raised outside [`crate::notice::collecting`] a catalog
/// keeps for [`LakeStreamCatalog::take_notices`].
pub const KEPT_NOTICES: usize = 64;

impl LakeStreamCatalog {
    /// Wraps `inner`, registered as `name`, with its lake-stream options. The
    /// store it names is created through `registry` on first use.
    pub fn new(
        name: &str,
        inner: Arc<dyn Catalog>,
        store_options: CatalogStoreOptions,
        registry: Arc<StoreRegistry>,
        catalog_options: HashMap<String, String>,
    ) -> Self {
        // S3 tables commit through conditional writes (object_storage::commit).
        let inner = crate::object_storage::guard_catalog(inner, &catalog_options);
        let filesystem = catalog_options
            .get("metastore")
            .is_none_or(|m| m.eq_ignore_ascii_case("filesystem"));
        let store = LazyStore::for_catalog(
            &store_options,
            registry,
            catalog_options,
            Arc::clone(&inner),
        );
        Self {
            name: name.to_string(),
            inner,
            store_options,
            store: StoreBinding::new(store, format!("catalog '{name}'")),
            notices: std::sync::Mutex::new(Vec::new()),
            tables: Default::default(),
            filesystem,
        }
    }

    /// Takes the notices of catalog operations that ran outside
    /// [`crate::notice::collecting`] (which returns them with the work that
    /// raised them): the newest [`KEPT_NOTICES`] of them.
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.notices.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn notice(&self, text: String) {
        if let Err(text) = crate::notice::raise(text) {
            let mut notices = self.notices.lock().unwrap_or_else(|e| e.into_inner());
            if notices.len() == KEPT_NOTICES {
                notices.remove(0);
            }
            notices.push(text);
        }
    }

    /// The name the catalog is registered under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How this catalog's lake-stream tables reach their store.
    pub fn binding(&self) -> &StoreBinding {
        &self.store
    }

    /// The wrapped catalog.
    pub fn inner(&self) -> &Arc<dyn Catalog> {
        &self.inner
    }

    /// The catalog's lake-stream options.
    pub fn store_options(&self) -> &CatalogStoreOptions {
        &self.store_options
    }

    /// Whether the table exists and is a lake-stream table. A missing table is `None`.
    pub async fn lakestream_table(&self, identifier: &Identifier) -> paimon::Result<Option<Table>> {
        match self.inner.get_table(identifier).await {
            Ok(table) if options::is_enabled(table.schema().options()) => Ok(Some(table)),
            Ok(_) | Err(paimon::Error::TableNotExist { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl LakeStreamCatalog {
    /// `CREATE TABLE ... WITH ('lakestream.enabled'='true')`: the Paimon table
    /// is created, then the store-side table; if the store refuses, the Paimon
    /// table is dropped again, so nothing is half-created.
    async fn create_lakestream_table(
        &self,
        identifier: &Identifier,
        creation: Schema,
        ignore_if_exists: bool,
    ) -> Result<()> {
        check_name_can_enable(identifier)?;
        check_type_can_enable(
            identifier,
            creation.options(),
            creation.fields(),
            creation.primary_keys(),
            &self.store,
        )?;
        let store = self
            .store
            .require("'lakestream.enabled'='true'", identifier)?;
        // Created first, so a binding to local disk names the directory as
        // it resolves.
        store.get().await?;
        let binding = store.binding()?;
        if let Some(given) = creation.options().get(options::STORE_BINDING) {
            if !store.is_bound_as(given)? {
                return Err(binding_not_settable());
            }
        }
        let creation = with_option(creation, options::STORE_BINDING, &binding)?;
        match self.inner.get_table(identifier).await {
            // `IF NOT EXISTS` over an existing table changes nothing.
            Ok(_) if ignore_if_exists => return Ok(()),
            Ok(_) => {
                return Err(paimon::Error::TableAlreadyExist {
                    full_name: identifier.full_name(),
                }
                .into())
            }
            Err(paimon::Error::TableNotExist { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.create_fresh(identifier, creation, ignore_if_exists)
            .await?;
        let attached = async {
            let table = self.inner.get_table(identifier).await?;
            store
                .call("attach the table", |s| async move {
                    s.attach_table(&table).await
                })
                .await
        }
        .await;
        if let Err(e) = attached {
            // Best effort: the attach error is the one to report.
            let _ = self.inner.drop_table(identifier, true).await;
            return Err(e);
        }
        Ok(())
    }

    /// Creates the Paimon table with nothing in it. A drop cut short (a
    /// killed process) can leave a dropped table's snapshots where the
    /// filesystem catalog puts the new table: they would bring the dropped
    /// table's rows back, so the leftovers are dropped and the table made
    /// again.
    async fn create_fresh(
        &self,
        identifier: &Identifier,
        creation: Schema,
        ignore_if_exists: bool,
    ) -> Result<()> {
        for _ in 0..2 {
            self.inner
                .create_table(identifier, creation.clone(), ignore_if_exists)
                .await?;
            let table = self.inner.get_table(identifier).await?;
            if table
                .snapshot_manager()
                .get_latest_snapshot_id()
                .await?
                .is_none()
            {
                return Ok(());
            }
            self.inner.drop_table(identifier, true).await?;
        }
        Err(Error::Internal(format!(
            "'{}' was created over snapshots of a dropped table that could not be removed",
            identifier.full_name()
        )))
    }

    /// Turning the mode on for an existing table: the store-side table is
    /// attached first, so a store that refuses leaves the option unset. The
    /// table is checked with the options it has after `changes`. Answers the
    /// store binding to record with the table (`None`: no such table).
    ///
    /// A table whose mode is on stays with the store it is bound to; one
    /// whose mode is off moves to this catalog's store.
    async fn enable(
        &self,
        identifier: &Identifier,
        changes: &[SchemaChange],
    ) -> Result<Option<String>> {
        check_name_can_enable(identifier)?;
        let table = match self.inner.get_table(identifier).await {
            Ok(table) => table,
            // The wrapped catalog reports a missing table its own way.
            Err(paimon::Error::TableNotExist { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let schema = table.schema();
        let options = options_after(schema.options(), changes);
        check_type_can_enable(
            identifier,
            &options,
            schema.fields(),
            schema.primary_keys(),
            &self.store,
        )?;
        check_no_tombstones("set 'lakestream.enabled'='true' on", &table, &options).await?;
        let store = self
            .store
            .require("'lakestream.enabled'='true'", identifier)?;
        store.get().await?;
        if options::is_enabled(schema.options()) {
            store.check_binding("turning the mode on for", &table)?;
        }
        let binding = store.binding()?;
        let moved = match schema.options().get(options::STORE_BINDING) {
            Some(recorded) if !store.is_bound_as(recorded)? => Some(recorded.clone()),
            _ => None,
        };
        store
            .call("attach the table", |s| async move {
                s.attach_table(&table).await
            })
            .await?;
        if let Some(recorded) = moved {
            self.notice(format!(
                "lake-stream mode of '{}' is on, served by store '{binding}' from now on; it \
                 was bound to '{recorded}'. Rows that may still wait there are not served \
                 here",
                identifier.full_name()
            ));
        }
        Ok(Some(binding))
    }
}

/// How a `DROP` removes one table.
enum DropPlan {
    /// Only the catalog's table: the store holds nothing this catalog can
    /// tell of (a plain table, or one whose mode is off and that this
    /// catalog's store never served).
    Catalog,
    /// The catalog's table and the store's side, through this store.
    WithStore(Arc<LazyStore>),
}

impl LakeStreamCatalog {
    /// How `identifier` is dropped, or why it cannot be. A table whose mode
    /// is on is dropped only through the store serving it, with its rows
    /// there: a catalog that names no store, or another store, refuses, so
    /// no drop ever leaves rows a table created later under the name could
    /// show. A table whose mode is off but that records this catalog's
    /// store drops the store's side too (rows left there when the mode was
    /// turned off without tiering).
    async fn drop_plan(&self, identifier: &Identifier, operation: &str) -> Result<DropPlan> {
        let parsed = identifier.parsed_object_name()?;
        if parsed.branch().is_some() || parsed.system_table().is_some() {
            // Never a lake-stream table of its own.
            return Ok(DropPlan::Catalog);
        }
        let table = match self.inner.get_table(identifier).await {
            Ok(table) => table,
            // The wrapped catalog reports a missing table its own way.
            Err(paimon::Error::TableNotExist { .. }) => return Ok(DropPlan::Catalog),
            Err(e) => return Err(e.into()),
        };
        let table_options = table.schema().options();
        let enabled = options::is_enabled(table_options);
        let recorded = table_options.get(options::STORE_BINDING);
        if !enabled && recorded.is_none() {
            return Ok(DropPlan::Catalog);
        }
        let refuse = |reason: String| Error::DropUnreachable {
            operation: operation.to_string(),
            table: identifier.full_name(),
            recorded: match recorded {
                Some(binding) => format!(
                    "store '{binding}' (table option '{}')",
                    options::STORE_BINDING
                ),
                None => {
                    "the store that turned its mode on (no store binding is recorded)".to_string()
                }
            },
            reason,
        };
        let Ok(store) = self.store.require("dropping", identifier) else {
            if !enabled {
                return Ok(DropPlan::Catalog);
            }
            return Err(refuse(format!("catalog '{}' names no store", self.name)));
        };
        let ours = match recorded {
            Some(recorded) => store.is_bound_as(recorded)?,
            None => true,
        };
        match (ours, enabled) {
            (true, _) => Ok(DropPlan::WithStore(Arc::clone(store))),
            (false, false) => Ok(DropPlan::Catalog),
            (false, true) => Err(refuse(format!(
                "this catalog's store is '{}'",
                store.binding()?
            ))),
        }
    }

    /// Drops `identifier` as `plan` says.
    async fn drop_as_planned(
        &self,
        identifier: &Identifier,
        ignore_if_not_exists: bool,
        plan: DropPlan,
    ) -> paimon::Result<()> {
        let DropPlan::WithStore(store) = plan else {
            return self
                .inner
                .drop_table(identifier, ignore_if_not_exists)
                .await;
        };
        // The store's rows go with the table: a table created later under
        // the same name must not find them. The store decides the order.
        let inner = &self.inner;
        store
            .call("drop the table", |s| async move {
                let drop_in_catalog = Box::pin(async move {
                    inner
                        .drop_table(identifier, ignore_if_not_exists)
                        .await
                        .map_err(Error::from)
                });
                s.drop_with_catalog(identifier, drop_in_catalog).await
            })
            .await
            .map_err(paimon::Error::from)
    }

    /// `DROP DATABASE ... CASCADE`: first drops every table of `database`
    /// that has a store side, as `DROP TABLE` does, so the store's rows go
    /// too. Every table is checked before any is dropped: one this catalog
    /// cannot drop with its store's side refuses the whole statement.
    async fn drop_tables_of(&self, database: &str) -> Result<()> {
        let names = match self.inner.list_tables(database).await {
            Ok(names) => names,
            // The wrapped catalog reports a missing database its own way.
            Err(paimon::Error::DatabaseNotExist { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let operation = format!("DROP DATABASE '{database}' CASCADE");
        let mut planned = Vec::new();
        for name in names {
            let identifier = Identifier::new(database, name);
            if let DropPlan::WithStore(store) = self.drop_plan(&identifier, &operation).await? {
                planned.push((identifier, store));
            }
        }
        for (identifier, store) in planned {
            self.drop_as_planned(&identifier, true, DropPlan::WithStore(store))
                .await?;
        }
        Ok(())
    }
}

/// The error for a `lakestream.store-binding` a statement sets.
fn binding_not_settable() -> Error {
    Error::InvalidOption {
        key: options::STORE_BINDING.to_string(),
        reason: "it is recorded when the mode is turned on, naming the store that serves the \
                 table, and cannot be set or removed. To move a table to another store, turn \
                 the mode off and then on through a catalog with that store"
            .to_string(),
    }
}

/// `creation` with the option `key` set to `value`. (`Schema` has no
/// setter; its serialized form does.)
fn with_option(creation: Schema, key: &str, value: &str) -> Result<Schema> {
    let copy_error = |e: serde_json::Error| Error::Internal(format!("cannot copy a schema: {e}"));
    let mut json = serde_json::to_value(&creation).map_err(copy_error)?;
    match json.get_mut("options") {
        Some(serde_json::Value::Object(options)) => {
            options.insert(
                key.to_string(),
                serde_json::Value::String(value.to_string()),
            );
        }
        _ => return Err(Error::Internal("a schema without options".to_string())),
    }
    serde_json::from_value(json).map_err(copy_error)
}

/// What tiering does with a table whose lake-stream mode is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenOff {
    /// Refuse with [`Error::TierNotLakeStream`]: `lakestream_tier` and
    /// `CALL sys.lakestream_tier`, and the service's round over every
    /// lake-stream table.
    Refuse,
    /// Tier what the store still holds for the table: rows acknowledged
    /// before the mode was turned off that the store could not tier then.
    /// For a table the operator names (`lakestream-cli tier --table`). A store
    /// that holds nothing for the table has nothing to tier.
    Tier,
}

impl LakeStreamCatalog {
    /// Tiers the store's rows of `identifier` into Paimon now.
    pub async fn tier(&self, identifier: &Identifier, when_off: WhenOff) -> Result<TierReport> {
        let table = self.get_table(identifier).await?;
        let enabled = options::is_enabled(table.schema().options());
        if !enabled && when_off == WhenOff::Refuse {
            // Tiering rows of a table whose writes now go to Paimon could
            // commit older store rows over newer Paimon ones.
            return Err(Error::TierNotLakeStream {
                table: identifier.full_name(),
            });
        }
        let store = self.store.require("tiering", identifier)?;
        store.get().await?;
        store.check_binding("tiering", &table)?;
        let tiered = store
            .call("tier", |s| async move { s.tier(&table).await })
            .await;
        match tiered {
            Err(Error::StoreTableMissing { .. }) if !enabled => Ok(TierReport::default()),
            other => other,
        }
    }
}

impl LakeStreamCatalog {
    /// Runs maintenance `work` (a compaction, an expiry, an orphan file
    /// removal asked for with `CALL`) on the table at `identifier`. On a
    /// lake-stream table of this catalog's store it runs under the store's
    /// commit lock ([`crate::store::LakestreamStore::with_commit_lock`]), with the table
    /// loaded again once the lock is held, so it never races that store's
    /// tiering commits, nor the maintenance that follows them.
    pub(crate) async fn maintain<T, F>(&self, identifier: &Identifier, work: F) -> Result<T>
    where
        T: Send,
        F: for<'a> FnOnce(&'a Table) -> BoxFuture<'a, Result<T>> + Send,
    {
        let table = self.get_table(identifier).await?;
        let ours = match (
            options::is_enabled(table.schema().options()),
            self.store.require("maintenance", identifier),
        ) {
            (true, Ok(lazy)) => {
                let store = lazy.get().await?;
                // A table another store serves is that store's to lock.
                lazy.check_binding("maintaining", &table)
                    .is_ok()
                    .then_some(store)
            }
            _ => None,
        };
        let Some(store) = ours else {
            return work(&table).await;
        };
        let mut out = None;
        store
            .with_commit_lock(
                identifier,
                Box::pin(async {
                    let table = self.get_table(identifier).await?;
                    out = Some(work(&table).await?);
                    Ok(())
                }),
            )
            .await?;
        out.ok_or_else(|| {
            Error::Internal(format!(
                "lakestream store '{}' ran no maintenance of '{}' under its commit lock",
                store.identifier(),
                identifier.full_name()
            ))
        })
    }

    /// Turning the mode off: the store tiers what Paimon lacks first, where it
    /// can. Off succeeds store or no store: it touches only the catalog;
    /// what could not be tiered is left in the store, and a notice says so,
    /// with how many rows wait (or that the count is unknown, and why) and
    /// the command that tiers them. A store whose own service tiers stops
    /// that service tiering the table, and refuses (the one error) while it
    /// holds rows the service has not tiered yet. Answers the table as it
    /// was when the store stopped its service tiering it, so that the
    /// service can be started again if changing the option fails.
    async fn disable(&self, identifier: &Identifier) -> Result<Option<Table>> {
        let Ok(Some(table)) = self.lakestream_table(identifier).await else {
            return Ok(None);
        };
        let name = identifier.full_name();
        let Ok(store) = self.store.require("turning the mode off", identifier) else {
            // Only a catalog that names a store turns the mode on, so the
            // table was written through one; this catalog cannot ask it.
            self.notice(format!(
                "lake-stream mode of '{name}' is off. Catalog '{}' names no store, so it cannot \
                 tell whether rows of '{name}' may still wait in the store the table used, not \
                 yet tiered into Paimon. Before writing to '{name}' again, tier them through \
                 that store: {}, with this catalog's --warehouse and --option flags (the \
                 embedded store is --store local)",
                self.name,
                tier_command(identifier, None)
            ));
            return Ok(None);
        };
        // A store that cannot be reached is reported as such, below.
        let mismatch = match store.get().await {
            Ok(_) => store.check_binding("tiering", &table).err(),
            Err(_) => None,
        };
        if let Some(e) = mismatch {
            // Its rows are in another store, which this catalog cannot ask.
            self.notice(format!(
                "lake-stream mode of '{name}' is off, but this catalog could not tier first: \
                 {e}. Rows of '{name}' may still wait in the store it is bound to; before \
                 writing to '{name}' again, tier them through that store: {}",
                tier_command(identifier, None)
            ));
            return Ok(None);
        }
        let tiered = store
            .call("tier before turning the mode off", |s| {
                let table = table.clone();
                async move { s.tier(&table).await }
            })
            .await;
        let error = match tiered {
            Ok(_) => return Ok(None),
            Err(Error::TieringElsewhere { store: id }) => {
                let stopped = store
                    .call("stop tiering before turning the mode off", |s| {
                        let table = table.clone();
                        async move { s.stop_tiering(&table).await }
                    })
                    .await;
                let notice = match stopped {
                    Ok(()) => {
                        self.notice(format!(
                            "lake-stream mode of '{name}' is off; store '{id}' held no rows of \
                             '{name}' that Paimon lacks, and its tiering service no longer \
                             tiers the table"
                        ));
                        return Ok(Some(table));
                    }
                    Err(e @ Error::UntieredRows { .. }) => return Err(e),
                    Err(Error::StoreTableMissing { .. }) => format!(
                        "lake-stream mode of '{name}' is off; store '{id}' has no table for \
                         '{name}', so no rows of it wait there"
                    ),
                    Err(e) => not_stopped_notice(&name, &id, &e),
                };
                self.notice(notice);
                return Ok(None);
            }
            Err(e) if store.tiers_by_itself() => {
                // Its tiering service may still tier what it holds.
                self.notice(not_stopped_notice(&name, store.identifier(), &e));
                return Ok(None);
            }
            Err(e) => e,
        };
        let waiting = match store
            .call("count rows waiting", |s| async move {
                s.pending_rows(&table).await
            })
            .await
        {
            Ok(rows) => format!("{rows} rows wait in it, not yet in Paimon"),
            Err(Error::StoreUnavailable { .. } | Error::StoreTimeout { .. }) => {
                "how many rows wait in it is unknown: the store could not be reached to count \
                 them"
                    .to_string()
            }
            Err(e) => format!("how many rows wait in it is unknown: counting them failed ({e})"),
        };
        self.notice(format!(
            "lake-stream mode of '{name}' is off, but store '{}' could not tier first ({error}); \
             {waiting}. Once the store works, and before writing to '{name}' again, tier them: \
             {}, with this catalog's --warehouse and --option flags",
            store.identifier(),
            tier_command(identifier, Some(store.identifier()))
        ));
        Ok(None)
    }
}

/// The notice of turning the mode of `name` off when `store`, whose own
/// service tiers, could not be asked to stop it (`error`).
fn not_stopped_notice(name: &str, store: &str, error: &Error) -> String {
    format!(
        "lake-stream mode of '{name}' is off, but store '{store}' could not be asked whether \
         rows of '{name}' wait in it, nor to stop its tiering service tiering the table \
         ({error}). If rows wait there, that service may still write them into Paimon, over \
         rows written to '{name}' directly. Before writing to '{name}' again, once the store \
         answers, turn the mode on and off again through this catalog: turning it off then \
         waits for them"
    )
}

/// The `lakestream-cli` command that tiers what waits in the store for
/// `identifier` (whose mode is off), as a shell command line. `store`: the
/// store to name, or `None` for a `<store>` placeholder.
fn tier_command(identifier: &Identifier, store: Option<&str>) -> String {
    let table = crate::name::sql_name(&[identifier.database(), identifier.object()]);
    format!(
        "lakestream-cli tier --once --table {} --store {}",
        shell_word(&table),
        // A placeholder stays readable as one: the user replaces it.
        store.map_or_else(|| "<store>".to_string(), shell_word)
    )
}

/// `text` as one word of a POSIX shell command line.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

impl LakeStreamCatalog {
    /// A lake-stream table without the trailing columns its store's tiering
    /// keeps in Paimon (Fluss's `__bucket`, `__offset`, `__timestamp`), so
    /// `t`, `t$rt` and writes to `t` show the table's own columns only.
    fn hide_store_columns(&self, table: Table) -> paimon::Result<Table> {
        if !options::is_enabled(table.schema().options()) {
            return Ok(table);
        }
        let hidden = self.store.hidden_columns();
        let fields = table.schema().fields();
        let kept = crate::store::own_fields(fields, &hidden).len();
        if kept == fields.len() {
            return Ok(table);
        }
        // TableSchema has no constructor that keeps field ids and the highest
        // field id; its serialized form does.
        let copy_error = |e: serde_json::Error| paimon::Error::DataInvalid {
            message: format!("cannot copy the schema of '{}'", table.identifier()),
            source: Some(Box::new(e)),
        };
        let mut schema = serde_json::to_value(table.schema()).map_err(copy_error)?;
        if let Some(serde_json::Value::Array(fields)) = schema.get_mut("fields") {
            fields.truncate(kept);
        }
        let schema = serde_json::from_value(schema).map_err(copy_error)?;
        let branch = table.branch().to_string();
        table.copy_with_resolved_schema(schema, &branch)
    }
}

/// Schema changes a lake-stream table can take: the store keeps rows by
/// column name, so adding a column is safe (old rows read it as null) and
/// dropping, renaming or retyping one is not. Applies to a table that is
/// lake-stream before or after `changes`: setting `lakestream.enabled` in the
/// same statement, to either value, lets no other column change through.
fn check_schema_changes(identifier: &Identifier, changes: &[SchemaChange]) -> Result<()> {
    let mode_change = enabled_after(changes).is_some();
    for change in changes {
        let refused = match change {
            SchemaChange::SetOption { .. }
            | SchemaChange::RemoveOption { .. }
            | SchemaChange::UpdateComment { .. }
            | SchemaChange::AddColumn { .. } => continue,
            SchemaChange::DropColumn { field_names } => {
                format!("DROP COLUMN {}", field_names.join("."))
            }
            SchemaChange::RenameColumn { field_names, .. } => {
                format!("RENAME COLUMN {}", field_names.join("."))
            }
            SchemaChange::UpdateColumnType { field_names, .. } => {
                format!("ALTER COLUMN {} TYPE", field_names.join("."))
            }
            SchemaChange::UpdateColumnNullability { field_names, .. } => {
                format!("ALTER COLUMN {} NULL / NOT NULL", field_names.join("."))
            }
            other => format!("{other:?}"),
        };
        let what_to_do = if mode_change {
            "Set 'lakestream.enabled' in a statement of its own: turn the mode off first \
             (which tiers the store's rows into Paimon), change the columns, then turn it on"
        } else {
            "Turn the mode off first (which tiers the store's rows into Paimon)"
        };
        return Err(Error::WriteNotSupported {
            operation: format!("ALTER TABLE ... {refused}"),
            table: identifier.full_name(),
            reason: format!(
                "the store keeps the table's newest rows by column name and cannot follow \
                 this change; ADD COLUMN works. {what_to_do}"
            ),
        });
    }
    Ok(())
}

/// A lake-stream table's options after `changes`: its merge settings must
/// stay ones the union read reproduces.
fn check_option_changes(
    table: &Table,
    changes: &[SchemaChange],
    store: &StoreBinding,
) -> Result<()> {
    if !changes.iter().any(|change| {
        matches!(
            change,
            SchemaChange::SetOption { .. } | SchemaChange::RemoveOption { .. }
        )
    }) {
        return Ok(());
    }
    let schema = table.schema();
    check_merge_settings(
        "change the options of lake-stream table",
        table.identifier(),
        &options_after(schema.options(), changes),
        schema.fields(),
        schema.primary_keys(),
        store,
    )
}

/// Refuses, on a table whose mode is on, any change of an option that fixes
/// merging, sequencing or bucketing (see [`crate::merge::change_refusal`]),
/// naming the first such option of `changes`. Setting an option to the value
/// it has, or removing one that is not set, changes nothing and passes.
fn check_merge_option_changes(table: &Table, changes: &[SchemaChange]) -> Result<()> {
    let before = table.schema().options();
    let after = options_after(before, changes);
    for change in changes {
        let key = match change {
            SchemaChange::SetOption { key, .. } | SchemaChange::RemoveOption { key } => key,
            _ => continue,
        };
        let Some(reason) = crate::merge::change_refusal(key) else {
            continue;
        };
        if before.get(key) == after.get(key) {
            continue;
        }
        let option = match after.get(key) {
            Some(value) => format!("'{key}'='{value}'"),
            None => format!("'{key}' (removing it)"),
        };
        return Err(Error::OptionChangeRefused {
            table: table.identifier().full_name(),
            option,
            reason: reason.to_string(),
        });
    }
    Ok(())
}

/// With `sequence.field`, a delete that Paimon's data files still hold (no
/// compaction has dropped it) hides every later version of its key with a
/// smaller sequence, and no read of Paimon shows it, so the union read could
/// not merge with it. Refuses such a table while any of its files holds a
/// delete (or does not say how many it holds).
async fn check_no_tombstones(
    action: &str,
    table: &Table,
    options: &HashMap<String, String>,
) -> Result<()> {
    let fields = sequence_fields(options);
    if fields.is_empty() || table.schema().primary_keys().is_empty() {
        return Ok(());
    }
    let plan = table.new_read_builder().new_scan().plan().await?;
    let tombstones = plan
        .splits()
        .iter()
        .flat_map(|split| split.data_files())
        .find(|file| file.delete_row_count != Some(0));
    match tombstones {
        None => Ok(()),
        Some(file) => Err(Error::MergeNotSupported {
            action: action.to_string(),
            table: table.identifier().full_name(),
            option: format!("'sequence.field'='{}'", fields.join(",")),
            reason: format!(
                "the table's data file '{}' holds delete rows ({}) that no compaction has removed; \
                 with a sequence field such a delete hides later rows with a smaller \
                 sequence, and reads of Paimon cannot show it. Compact the table fully \
                 first, or leave 'sequence.field' unset",
                file.file_name,
                file.delete_row_count
                    .map_or("how many is not recorded".to_string(), |n| n.to_string()),
            ),
        }),
    }
}

/// The `sequence.field` columns `options` name.
fn sequence_fields(options: &HashMap<String, String>) -> Vec<&str> {
    options
        .get("sequence.field")
        .map(|value| value.split(',').map(str::trim).collect())
        .unwrap_or_default()
}

/// `options` with the option changes among `changes` applied, in order.
fn options_after(
    options: &HashMap<String, String>,
    changes: &[SchemaChange],
) -> HashMap<String, String> {
    let mut options = options.clone();
    for change in changes {
        match change {
            SchemaChange::SetOption { key, value } => {
                options.insert(key.clone(), value.clone());
            }
            SchemaChange::RemoveOption { key } => {
                options.remove(key);
            }
            _ => {}
        }
    }
    options
}

/// Refuses merge settings the union read does not reproduce (see
/// [`MergeSpec`]), and, on a store whose tiering does not write its change log
/// as it is, any setting beyond plain `deduplicate`.
fn check_merge_settings(
    action: &str,
    identifier: &Identifier,
    table_options: &HashMap<String, String>,
    fields: &[DataField],
    primary_keys: &[String],
    store: &StoreBinding,
) -> Result<()> {
    let refuse = |option: String, reason: String| Error::MergeNotSupported {
        action: action.to_string(),
        table: identifier.full_name(),
        option,
        reason,
    };
    let spec = MergeSpec::of(table_options, fields, primary_keys)
        .map_err(|unsupported| refuse(unsupported.option, unsupported.reason))?;
    if store.tiers_its_log() {
        return Ok(());
    }
    match spec.beyond_plain(table_options) {
        Some(option) => Err(refuse(
            option,
            "this catalog's store tiers with its own service, which does not write the \
             store's rows into Paimon as they were written (it writes the rows its own \
             key-value store merged, with the before-images of updates), so Paimon would not \
             merge them as the union read does; only plain 'deduplicate' tables are \
             supported on it"
                .to_string(),
        )),
        None => Ok(()),
    }
}

/// The value `lakestream.enabled` ends with after `changes`, if they touch it.
fn enabled_after(changes: &[SchemaChange]) -> Option<bool> {
    changes.iter().fold(None, |state, change| match change {
        SchemaChange::SetOption { key, value } if key == options::ENABLED => {
            Some(options::is_enabled_value(value))
        }
        SchemaChange::RemoveOption { key } if key == options::ENABLED => Some(false),
        _ => state,
    })
}

/// Refuses turning the mode on for a name that is a branch or a system table.
fn check_name_can_enable(identifier: &Identifier) -> Result<()> {
    let parsed = identifier.parsed_object_name()?;
    let kind = if parsed.system_table().is_some() {
        "system table"
    } else if parsed.branch().is_some() {
        "branch"
    } else {
        return Ok(());
    };
    Err(Error::CannotEnable {
        table: identifier.full_name(),
        kind,
    })
}

/// Refuses turning the mode on for a table type other than a plain Paimon
/// table, and for a table whose merge settings (merge engine, sequence field,
/// per-field options) the union read does not reproduce: `t$rt` must give the
/// rows Paimon gives once the store's rows are tiered.
fn check_type_can_enable(
    identifier: &Identifier,
    table_options: &HashMap<String, String>,
    fields: &[DataField],
    primary_keys: &[String],
    store: &StoreBinding,
) -> Result<()> {
    match CoreOptions::new(table_options).table_type()? {
        TableType::Table => check_merge_settings(
            "set 'lakestream.enabled'='true' on",
            identifier,
            table_options,
            fields,
            primary_keys,
            store,
        ),
        TableType::FormatTable => Err(Error::CannotEnable {
            table: identifier.full_name(),
            kind: "format table",
        }),
        _ => Err(Error::CannotEnable {
            table: identifier.full_name(),
            kind: "non-data table",
        }),
    }
}

#[async_trait]
impl Catalog for LakeStreamCatalog {
    fn as_any(&self) -> Option<&dyn Any> {
        // Callers reach catalog-specific APIs (REST procedures) through this,
        // as Java does through `rootCatalog`: answer with the wrapped catalog.
        self.inner.as_any()
    }

    async fn list_databases(&self) -> paimon::Result<Vec<String>> {
        self.inner.list_databases().await
    }

    async fn create_database(
        &self,
        name: &str,
        ignore_if_exists: bool,
        properties: HashMap<String, String>,
    ) -> paimon::Result<()> {
        self.inner
            .create_database(name, ignore_if_exists, properties)
            .await
    }

    async fn get_database(&self, name: &str) -> paimon::Result<Database> {
        if !self.filesystem {
            return self.inner.get_database(name).await;
        }
        if let Some(database) = self.tables.database(name) {
            return Ok(database);
        }
        let database = self.inner.get_database(name).await?;
        self.tables.saw_database(&database);
        Ok(database)
    }

    async fn drop_database(
        &self,
        name: &str,
        ignore_if_not_exists: bool,
        cascade: bool,
    ) -> paimon::Result<()> {
        if cascade {
            Box::pin(self.drop_tables_of(name)).await?;
        }
        self.tables.forget_database(name);
        self.inner
            .drop_database(name, ignore_if_not_exists, cascade)
            .await
    }

    async fn get_table(&self, identifier: &Identifier) -> paimon::Result<Table> {
        let table = match self.tables.get(identifier).await {
            Some(table) => table,
            None => {
                let table = self.inner.get_table(identifier).await?;
                self.tables.put(identifier, &table).await;
                table
            }
        };
        self.hide_store_columns(table)
    }

    async fn load_table(&self, identifier: &Identifier) -> paimon::Result<LoadedTable> {
        if let Some(table) = self.tables.get(identifier).await {
            return Ok(LoadedTable::Paimon(Box::new(
                self.hide_store_columns(table)?,
            )));
        }
        match self.inner.load_table(identifier).await? {
            LoadedTable::Paimon(table) => {
                self.tables.put(identifier, &table).await;
                Ok(LoadedTable::Paimon(Box::new(
                    self.hide_store_columns(*table)?,
                )))
            }
            other => Ok(other),
        }
    }

    async fn list_tables(&self, database_name: &str) -> paimon::Result<Vec<String>> {
        self.inner.list_tables(database_name).await
    }

    async fn create_table(
        &self,
        identifier: &Identifier,
        creation: Schema,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        for (key, value) in creation.options() {
            options::check_table_option(&identifier.full_name(), key, value)?;
        }
        if !options::is_enabled(creation.options()) {
            return self
                .inner
                .create_table(identifier, creation, ignore_if_exists)
                .await;
        }
        self.create_lakestream_table(identifier, creation, ignore_if_exists)
            .await
            .map_err(paimon::Error::from)
    }

    async fn drop_table(
        &self,
        identifier: &Identifier,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        let operation = format!("DROP TABLE '{}'", identifier.full_name());
        let plan = self.drop_plan(identifier, &operation).await?;
        self.drop_as_planned(identifier, ignore_if_not_exists, plan)
            .await
    }

    async fn rename_table(
        &self,
        from: &Identifier,
        to: &Identifier,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        if self.lakestream_table(from).await?.is_some() {
            return Err(Error::RenameLakeStreamTable {
                table: from.full_name(),
            }
            .into());
        }
        self.inner
            .rename_table(from, to, ignore_if_not_exists)
            .await
    }

    async fn alter_table(
        &self,
        identifier: &Identifier,
        changes: Vec<SchemaChange>,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        if changes.iter().any(|change| {
            matches!(change,
                SchemaChange::SetOption { key, .. } | SchemaChange::RemoveOption { key }
                    if key == options::STORE_BINDING)
        }) {
            return Err(binding_not_settable().into());
        }
        for change in &changes {
            if let SchemaChange::SetOption { key, value } = change {
                options::check_table_option(&identifier.full_name(), key, value)?;
            }
        }
        let mut changes = changes;
        let enabled_after = enabled_after(&changes);
        // Lake-stream before or after the statement: the column guard applies.
        let lakestream_before = self.lakestream_table(identifier).await?;
        if enabled_after == Some(true) || lakestream_before.is_some() {
            check_schema_changes(identifier, &changes)?;
        }
        // While the mode is on, merge settings stay ones the union read
        // reproduces, and do not change at all.
        if let Some(table) = &lakestream_before {
            if enabled_after.is_none() {
                check_option_changes(table, &changes, &self.store)?;
            }
            check_merge_option_changes(table, &changes)?;
        }
        match enabled_after {
            Some(true) => {
                // Boxed, as below: their futures are big for a caller's stack.
                let binding = Box::pin(self.enable(identifier, &changes)).await?;
                if let Some(binding) = binding {
                    changes.push(SchemaChange::SetOption {
                        key: options::STORE_BINDING.to_string(),
                        value: binding,
                    });
                }
            }
            Some(false) => {
                let stopped = Box::pin(self.disable(identifier)).await?;
                let altered = self
                    .inner
                    .alter_table(identifier, changes, ignore_if_not_exists)
                    .await;
                if let (Err(_), Some(table)) = (&altered, stopped) {
                    // The mode stays on: the store's service tiers the table
                    // again. Best effort; the error is the one to report.
                    if let Ok(store) = self.store.require("turning the mode off", identifier) {
                        let _ = store
                            .call("attach the table again", |s| async move {
                                s.attach_table(&table).await
                            })
                            .await;
                    }
                }
                return altered;
            }
            None => {}
        }
        self.inner
            .alter_table(identifier, changes, ignore_if_not_exists)
            .await
    }

    async fn create_tag(
        &self,
        identifier: &Identifier,
        tag_name: &str,
        snapshot_id: Option<i64>,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        self.inner
            .create_tag(identifier, tag_name, snapshot_id, ignore_if_exists)
            .await
    }

    async fn create_tag_with_retention(
        &self,
        identifier: &Identifier,
        tag_name: &str,
        snapshot_id: Option<i64>,
        time_retained: Option<&str>,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        self.inner
            .create_tag_with_retention(
                identifier,
                tag_name,
                snapshot_id,
                time_retained,
                ignore_if_exists,
            )
            .await
    }

    async fn get_tag(
        &self,
        identifier: &Identifier,
        tag_name: &str,
    ) -> paimon::Result<GetTagResponse> {
        self.inner.get_tag(identifier, tag_name).await
    }

    async fn delete_tag(
        &self,
        identifier: &Identifier,
        tag_name: &str,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        self.inner
            .delete_tag(identifier, tag_name, ignore_if_not_exists)
            .await
    }

    async fn create_view(
        &self,
        identifier: &Identifier,
        schema: ViewSchema,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        self.inner
            .create_view(identifier, schema, ignore_if_exists)
            .await
    }

    async fn drop_view(
        &self,
        identifier: &Identifier,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        self.inner.drop_view(identifier, ignore_if_not_exists).await
    }

    async fn list_views(&self, database_name: &str) -> paimon::Result<Vec<String>> {
        self.inner.list_views(database_name).await
    }

    async fn get_view(&self, identifier: &Identifier) -> paimon::Result<View> {
        self.inner.get_view(identifier).await
    }

    async fn create_function(
        &self,
        function: &Function,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        self.inner.create_function(function, ignore_if_exists).await
    }

    async fn list_functions(&self, database_name: &str) -> paimon::Result<Vec<String>> {
        self.inner.list_functions(database_name).await
    }

    async fn get_function(&self, identifier: &Identifier) -> paimon::Result<Function> {
        self.inner.get_function(identifier).await
    }

    async fn create_partitions(
        &self,
        identifier: &Identifier,
        partition_specs: Vec<HashMap<String, String>>,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        self.inner
            .create_partitions(identifier, partition_specs, ignore_if_exists)
            .await
    }

    async fn create_partitions_with_statistics(
        &self,
        identifier: &Identifier,
        partition_specs: Vec<HashMap<String, String>>,
        ignore_if_exists: bool,
        statistics: Option<Vec<PartitionStatistics>>,
        replace_statistics: bool,
    ) -> paimon::Result<()> {
        self.inner
            .create_partitions_with_statistics(
                identifier,
                partition_specs,
                ignore_if_exists,
                statistics,
                replace_statistics,
            )
            .await
    }

    async fn drop_partitions(
        &self,
        identifier: &Identifier,
        partition_specs: Vec<HashMap<String, String>>,
    ) -> paimon::Result<()> {
        self.inner
            .drop_partitions(identifier, partition_specs)
            .await
    }

    async fn list_partitions_by_names(
        &self,
        identifier: &Identifier,
        partition_specs: Vec<HashMap<String, String>>,
    ) -> paimon::Result<Vec<Partition>> {
        self.inner
            .list_partitions_by_names(identifier, partition_specs)
            .await
    }

    async fn list_partitions(&self, identifier: &Identifier) -> paimon::Result<Vec<Partition>> {
        self.inner.list_partitions(identifier).await
    }

    async fn list_partitions_paged(
        &self,
        identifier: &Identifier,
        max_results: Option<u32>,
        page_token: Option<&str>,
    ) -> paimon::Result<PagedList<Partition>> {
        self.inner
            .list_partitions_paged(identifier, max_results, page_token)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enabled_after_takes_the_last_change() {
        let set = |v: &str| SchemaChange::SetOption {
            key: options::ENABLED.to_string(),
            value: v.to_string(),
        };
        assert_eq!(enabled_after(&[]), None);
        assert_eq!(enabled_after(&[set("TRUE")]), Some(true));
        assert_eq!(enabled_after(&[set("true"), set("no")]), Some(false));
        assert_eq!(
            enabled_after(&[
                set("false"),
                SchemaChange::RemoveOption {
                    key: options::ENABLED.to_string()
                },
                set("True"),
            ]),
            Some(true)
        );
        assert_eq!(
            enabled_after(&[SchemaChange::SetOption {
                key: "other".to_string(),
                value: "true".to_string()
            }]),
            None
        );
    }

    #[test]
    fn tier_commands_quote_names_for_the_shell() {
        assert_eq!(
            tier_command(&Identifier::new("default", "t"), Some("local")),
            "lakestream-cli tier --once --table default.t --store local"
        );
        assert_eq!(
            tier_command(&Identifier::new("default", "My'T"), None),
            "lakestream-cli tier --once --table 'default.\"My'\\''T\"' --store <store>"
        );
    }

    #[test]
    fn branches_and_system_tables_cannot_be_enabled() {
        let e = check_name_can_enable(&Identifier::new("db", "t$branch_b1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("branch 'db.t$branch_b1'"), "{e}");
        let e = check_name_can_enable(&Identifier::new("db", "t$snapshots"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("system table 'db.t$snapshots'"), "{e}");
        check_name_can_enable(&Identifier::new("db", "t")).unwrap();
    }
}
