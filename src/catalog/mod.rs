//! The one decorator over every `paimon::Catalog` (filesystem, REST, or any
//! other implementation): it holds the catalog's lake-stream options and
//! enforces the table-identity guards, so each guard lives in one place.
//!
//! The methods it does not guard are forwarded to the wrapped catalog
//! ([`crate::object_storage::forward`]), paimon's defaulted ones and
//! `as_any` included: a method left to its default would silently turn off
//! views, tags, partitions or REST procedures of the wrapped catalog.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use paimon::catalog::{Catalog, Database, Identifier, LoadedTable};
use paimon::spec::{CoreOptions, DataField, Schema, SchemaChange, TableSchema, TableType};
use paimon::table::Table;

use crate::error::{Error, Result};
use crate::merge::MergeSpec;
use crate::options::{self, CatalogStoreOptions};
use crate::store::{split_binding, LazyStore, StoreBinding, StoreRegistry, TierReport, Tiering};

mod lifecycle;

pub use lifecycle::WhenOff;

/// A Paimon catalog in lake-stream mode.
pub struct LakeStreamCatalog {
    name: String,
    inner: Arc<dyn Catalog>,
    /// `inner` as `object_storage` guards it, for its checked `ALTER`.
    guarded: crate::object_storage::GuardedCatalog,
    store_options: CatalogStoreOptions,
    store: StoreBinding,
    /// Things a statement did that its caller should hear about.
    notices: std::sync::Mutex<Vec<String>>,
    /// Handles `get_table`/`load_table` reuse once the files confirm them.
    tables: crate::table_cache::TableCache,
    /// Whether the wrapped catalog is a filesystem catalog (its databases
    /// are directories, remembered once seen: see `table_cache`).
    filesystem: bool,
    /// The stores' factories, for what the store a table is bound to can do.
    registry: Arc<StoreRegistry>,
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
        let guarded = crate::object_storage::guard_catalog(inner, &catalog_options);
        let inner = Arc::clone(&guarded.catalog);
        let filesystem = catalog_options
            .get("metastore")
            .is_none_or(|m| m.eq_ignore_ascii_case("filesystem"));
        let store = LazyStore::for_catalog(
            &store_options,
            Arc::clone(&registry),
            catalog_options,
            Arc::clone(&inner),
        );
        Self {
            name: name.to_string(),
            inner,
            guarded,
            store_options,
            store: StoreBinding::new(store, format!("catalog '{name}'")),
            notices: std::sync::Mutex::new(Vec::new()),
            tables: Default::default(),
            filesystem,
            registry,
        }
    }

    /// The columns the store serving `table` keeps after the table's own
    /// (see [`crate::store::Capabilities::hidden_columns`]): those of the
    /// store its binding records, whichever store this catalog names (a
    /// catalog without Fluss must not add a column to a table Fluss
    /// serves), and of this catalog's store when `enabling`. `table`: the
    /// schema of a table whose mode is on.
    fn hidden_columns_of(
        &self,
        table: Option<&TableSchema>,
        enabling: bool,
    ) -> &'static [&'static str] {
        let ours = self.store.capabilities().hidden_columns;
        let recorded = table
            .and_then(|schema| schema.options().get(options::STORE_BINDING))
            .map(|binding| split_binding(binding).0);
        let bound = match recorded {
            Some(identifier) => self
                .registry
                .get(identifier)
                .map(|factory| factory.capabilities().hidden_columns)
                .unwrap_or(ours),
            None => ours,
        };
        if bound.is_empty() && enabling {
            ours
        } else {
            bound
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
    pub(crate) fn binding(&self) -> &StoreBinding {
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

    /// The guards of an `ALTER TABLE` of `changes` on a table whose schema
    /// is `schema` (they decide on the schema alone, so they run again on a
    /// newer one): on a table that is lake-stream before or after the
    /// statement, the column guard; while the mode is on, merge settings
    /// stay ones the union read reproduces, and do not change at all.
    fn check_alter(
        &self,
        identifier: &Identifier,
        schema: &TableSchema,
        changes: &[SchemaChange],
        enabled_after: Option<bool>,
    ) -> Result<()> {
        let lakestream = options::is_enabled(schema.options());
        if enabled_after == Some(true) || lakestream {
            let hidden =
                self.hidden_columns_of(lakestream.then_some(schema), enabled_after == Some(true));
            check_schema_changes(identifier, changes, hidden)?;
        }
        if lakestream {
            if enabled_after.is_none() {
                check_option_changes(identifier, schema, changes, &self.store)?;
            }
            check_merge_option_changes(identifier, schema, changes)?;
        }
        Ok(())
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

impl LakeStreamCatalog {
    /// A lake-stream table without the trailing columns its store's tiering
    /// keeps in Paimon (Fluss's `__bucket`, `__offset`, `__timestamp`), so
    /// `t`, `t$rt` and writes to `t` show the table's own columns only.
    fn hide_store_columns(&self, table: Table) -> paimon::Result<Table> {
        if !options::is_enabled(table.schema().options()) {
            return Ok(table);
        }
        let hidden = self.store.capabilities().hidden_columns;
        let fields = table.schema().fields();
        let kept = crate::store::own_fields(fields, hidden).len();
        if kept == fields.len() {
            return Ok(table);
        }
        let schema =
            crate::schema_stamp::without_trailing_fields(table.schema(), kept).map_err(|e| {
                paimon::Error::DataInvalid {
                    message: format!("cannot copy the schema of '{}'", table.identifier()),
                    source: Some(Box::new(e)),
                }
            })?;
        let branch = table.branch().to_string();
        table.copy_with_resolved_schema(schema, &branch)
    }
}

/// Schema changes a lake-stream table can take: the store keeps rows by
/// column name, so adding a column is safe (old rows read it as null) and
/// dropping, renaming or retyping one is not. Applies to a table that is
/// lake-stream before or after `changes`: setting `lakestream.enabled` in the
/// same statement, to either value, lets no other column change through.
///
/// A store whose tiering keeps columns of its own after the table's
/// (`hidden`: Fluss's `__bucket`, `__offset`, `__timestamp`) fixes the
/// columns when the mode is turned on: a column added to the Paimon table
/// would land after those, where neither the store's table nor its tiering
/// has it, so `ADD COLUMN` is refused too.
fn check_schema_changes(
    identifier: &Identifier,
    changes: &[SchemaChange],
    hidden: &[&str],
) -> Result<()> {
    let mode_change = enabled_after(changes).is_some();
    for change in changes {
        let refused = match change {
            SchemaChange::SetOption { .. }
            | SchemaChange::RemoveOption { .. }
            | SchemaChange::UpdateComment { .. } => continue,
            SchemaChange::AddColumn { field_names, .. } if !hidden.is_empty() => {
                return Err(Error::WriteNotSupported {
                    operation: format!("ALTER TABLE ... ADD COLUMN {}", field_names.join(".")),
                    table: identifier.full_name(),
                    reason: format!(
                        "the store's table and its tiering into Paimon keep the columns the \
                         table had when the mode was turned on, followed by the store's own \
                         ({}); a new column would come after those. Create a table with the \
                         columns wanted and copy the rows into it (INSERT INTO ... SELECT * \
                         FROM {}$rt)",
                        hidden.join(", "),
                        identifier.object()
                    ),
                });
            }
            SchemaChange::AddColumn { .. } => continue,
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
    identifier: &Identifier,
    schema: &TableSchema,
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
    check_merge_settings(
        "change the options of lake-stream table",
        identifier,
        &options_after(schema.options(), changes),
        schema.fields(),
        schema.primary_keys(),
        schema.partition_keys(),
        store,
    )
}

/// Refuses, on a table whose mode is on, any change of an option that fixes
/// merging, sequencing or bucketing (see [`crate::merge::change_refusal`]),
/// naming the first such option of `changes`. Setting an option to the value
/// it has, or removing one that is not set, changes nothing and passes.
fn check_merge_option_changes(
    identifier: &Identifier,
    schema: &TableSchema,
    changes: &[SchemaChange],
) -> Result<()> {
    let before = schema.options();
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
            table: identifier.full_name(),
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
/// [`MergeSpec`]), a layout tiering cannot write as the union read shows it
/// (see [`crate::merge::check_layout`]), and, on a store whose tiering does
/// not write its change log as it is, any setting beyond plain `deduplicate`.
fn check_merge_settings(
    action: &str,
    identifier: &Identifier,
    table_options: &HashMap<String, String>,
    fields: &[DataField],
    primary_keys: &[String],
    partition_keys: &[String],
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
    crate::merge::check_layout(table_options, primary_keys, partition_keys)
        .map_err(|unsupported| refuse(unsupported.option, unsupported.reason))?;
    if store.capabilities().tiers_its_log {
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

/// Whether two schemas of a table are the same file: a schema file is named
/// by its id, and its time tells a table created again under the name.
fn same_schema(a: &TableSchema, b: &TableSchema) -> bool {
    a.id() == b.id() && a.time_millis() == b.time_millis()
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
    partition_keys: &[String],
    store: &StoreBinding,
) -> Result<()> {
    match CoreOptions::new(table_options).table_type()? {
        TableType::Table => check_merge_settings(
            "set 'lakestream.enabled'='true' on",
            identifier,
            table_options,
            fields,
            primary_keys,
            partition_keys,
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

/// Refuses a `CREATE TABLE` of a data table whose every write Paimon's
/// writer would refuse (an append table with a fixed `bucket` and no
/// `bucket-key`, ...), before anything is created: the catalogs create such
/// a table, and it would stay, taking no row, with every later `CREATE`
/// saying that it exists. Paimon's own writer decides, on the table as it
/// would be created (held in memory: making a writer reads and writes no
/// file).
fn check_paimon_writes(identifier: &Identifier, creation: &Schema) -> Result<()> {
    if CoreOptions::new(creation.options()).table_type()? != TableType::Table {
        return Ok(());
    }
    let file_io = paimon::io::FileIOBuilder::new("memory").build()?;
    let table = Table::new(
        file_io,
        identifier.clone(),
        format!("memory:/lakestream-create-check/{}", identifier.full_name()),
        TableSchema::new(0, creation),
        None,
    );
    match table.new_write_builder().new_write() {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::CreateRefused {
            table: identifier.full_name(),
            reason: e.to_string(),
        }),
    }
}

#[async_trait]
impl crate::object_storage::forward::Decorator for LakeStreamCatalog {
    fn wrapped(&self) -> &dyn Catalog {
        self.inner.as_ref()
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

    async fn create_table(
        &self,
        identifier: &Identifier,
        creation: Schema,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        for (key, value) in creation.options() {
            options::check_table_option(&identifier.full_name(), key, value)?;
        }
        check_paimon_writes(identifier, &creation)?;
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
        // The schema the guards check, and the one the changes must be
        // applied to: the wrapped catalog checks again against the schema
        // it is about to extend (another process's ALTER may have come in
        // between), with `schema_check` below.
        let before = match self.inner.get_table(identifier).await {
            Ok(table) => Some(table),
            Err(paimon::Error::TableNotExist { .. }) => None,
            Err(e) => return Err(e),
        };
        let mut checked = before.as_ref().map(|table| table.schema().clone());
        if let Some(schema) = &checked {
            self.check_alter(identifier, schema, &changes, enabled_after)?;
        } else if enabled_after == Some(true) {
            // No table: the wrapped catalog reports it, or ignores it.
            check_schema_changes(identifier, &changes, self.hidden_columns_of(None, true))?;
        }
        let user_changes = changes.clone();
        // Boxed: their futures are big for a caller's stack.
        let disabled = match enabled_after {
            Some(true) => {
                if let Some((binding, attached)) =
                    Box::pin(self.enable(identifier, &changes)).await?
                {
                    changes.push(SchemaChange::SetOption {
                        key: options::STORE_BINDING.to_string(),
                        value: binding,
                    });
                    // The store's attach may have changed the schema (Fluss's
                    // adds its columns); `enable` checked what it left.
                    checked = Some(attached);
                }
                None
            }
            Some(false) => Some(Box::pin(self.disable(identifier)).await?),
            None => None,
        };
        // The guards are pure, so they run again on a newer schema than
        // `checked`; what turning the mode on or off did (attached the
        // store's table, tiered, stopped its tiering) was decided on
        // `checked`, so a newer schema refuses that statement.
        let schema_check = |current: &TableSchema| -> paimon::Result<()> {
            if checked
                .as_ref()
                .is_some_and(|schema| same_schema(schema, current))
            {
                return Ok(());
            }
            // Turning the mode off tiered the table and stopped its
            // store's tiering; that holds over any newer schema of the same
            // lake-stream table bound to the same store (Fluss's own
            // service writes one when its tiering is turned off).
            let still_bound_alike = |old: &TableSchema| {
                options::is_enabled(current.options())
                    && old.options().get(options::STORE_BINDING)
                        == current.options().get(options::STORE_BINDING)
            };
            if enabled_after == Some(false) && checked.as_ref().is_some_and(still_bound_alike) {
                return self
                    .check_alter(identifier, current, &user_changes, enabled_after)
                    .map_err(paimon::Error::from);
            }
            if enabled_after.is_some() {
                return Err(Error::SchemaChangedDuringAlter {
                    table: identifier.full_name(),
                }
                .into());
            }
            self.check_alter(identifier, current, &user_changes, None)
                .map_err(paimon::Error::from)
        };
        #[cfg(any(test, feature = "testing"))]
        crate::failpoint::failpoint_in("alter-before-write", identifier).await;
        let altered = self
            .guarded
            .alter_table_checked(identifier, changes, ignore_if_not_exists, &schema_check)
            .await;
        let Some(disabled) = disabled else {
            return altered;
        };
        if altered.is_ok() {
            Box::pin(self.after_disable(identifier, disabled)).await;
            return altered;
        }
        if let lifecycle::Disabled::TieringStopped(table) = disabled {
            // The mode stays on: the store's service tiers the table again.
            // Best effort; the error is the one to report.
            if let Ok(store) = self.store.require("turning the mode off", identifier) {
                let _ = store
                    .call("attach the table again", |s| async move {
                        s.attach_table(table.as_ref()).await
                    })
                    .await;
            }
        }
        altered
    }

    async fn create_tag(
        &self,
        identifier: &Identifier,
        tag_name: &str,
        snapshot_id: Option<i64>,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        Catalog::create_tag_with_retention(
            self,
            identifier,
            tag_name,
            snapshot_id,
            None,
            ignore_if_exists,
        )
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
        // As `CALL sys.create_tag`: written through the table's file IO and
        // acknowledged only over a snapshot that expiry keeps; a REST
        // catalog's server makes and lists its tags itself.
        let table = self.inner.get_table(identifier).await?;
        match crate::maintenance::tags::create_tag_with_retention(
            &table,
            tag_name,
            snapshot_id,
            time_retained,
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(Error::Paimon(paimon::Error::TagAlreadyExist { .. })) if ignore_if_exists => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

crate::object_storage::forward::impl_catalog!(LakeStreamCatalog);

#[cfg(test)]
mod tests {
    use super::lifecycle::tier_command;
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
