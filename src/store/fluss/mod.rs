//! The Apache Fluss store (cargo feature `fluss`): a lake-stream table `db.t`
//! is the Fluss table `db.t`, and Fluss's own tiering service writes it into
//! the Paimon table `db.t`.
//!
//! - Attaching creates (or checks) the Fluss table with the Paimon table's
//!   columns, primary key and buckets, gives the Paimon table the shape Fluss
//!   tiers into (its system columns and options, see [`schema`]), and turns
//!   `table.datalake.enabled` on.
//! - Reads follow Fluss's own union read: the readable lake snapshot gives the
//!   Paimon snapshot (or a newer one others committed on top, see [`lake`])
//!   and, per bucket, the log offset tiering has reached (exclusive); the log
//!   is read from there to the latest offset fixed now ([`log`], [`probe`]).
//! - Writes go through fluss-rs and return once Fluss acknowledged them.
//! - Turning the mode off ([`LakestreamStore::stop_tiering`]) first turns
//!   `table.datalake.enabled` off, then counts, per bucket, the log after
//!   the offsets of the newest lake snapshot. Fluss records a lake snapshot
//!   only after Paimon committed it, so nothing counted means every row is
//!   in Paimon, whatever a tiering round running meanwhile does; anything
//!   counted turns tiering back on and refuses, with the count. Rows that
//!   reach the table afterwards (writes planned before) are never tiered
//!   while the mode is off, and turning it on again over them is refused
//!   on a primary-key table once Paimon has rows from elsewhere.
//! - `DROP TABLE` drops the Fluss table first; a drop Fluss did not answer
//!   keeps the Paimon table, and running it again finishes it. A Fluss table
//!   that was written to is attached only to a Paimon table that has Fluss's
//!   system columns (which attaching adds and turning off keeps): one
//!   without them is new, and such a Fluss table is an earlier table's, left
//!   by a drop that did not go through this store.
//! - Errors from servers other than the coordinator are checked with it: a
//!   "no such table" it does not confirm, or any failure while it lists no
//!   tablet server, says so rather than advising to attach the table.
//! - A table's identity is its Fluss table id, which a `DROP`/`CREATE` in any
//!   process changes. Nothing cached serves another id: every write asks
//!   Fluss's coordinator which table (and schema) the path names and replaces
//!   a writer made for another, and a read stays on the id it was planned on.
//!   A write that sent nothing before finding its table re-created is tried
//!   once more; one that had sent rows is not, and its error says what
//!   became of them (gone with the dropped table, or unknown).
//!
//! fluss-rs speaks arrow 59; [`arrow_bridge`] crosses to arrow 58.

mod arrow_bridge;
mod lake;
mod log;
mod options;
mod probe;
mod schema;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use fluss::client::{
    AppendWriter, FlussConnection, FlussTable, Lookuper, UpsertWriter, EARLIEST_OFFSET,
};
use fluss::error::FlussError;
use fluss::metadata::{
    AlterConfig, AlterConfigOpType, AlterTableChanges, RowType, TableDescriptor, TableInfo,
    TablePath,
};
use fluss::row::ColumnarRow;
use fluss::rpc::message::OffsetSpec;
use fluss::ServerType;
use paimon::catalog::{Catalog, Identifier};
use paimon::table::Table;
use tokio::sync::Mutex;

use self::log::{BucketRange, FlussLog};
use self::options::FlussOptions;
use self::schema::{FlussShape, DATALAKE_ENABLED, TIERING_COMMIT_USER};
use super::{
    log_arrow_schema, LakestreamStore, ScanMode, StoreContext, StoreFactory, StoreRead, WriteKind,
};
use crate::error::{Error, Result};

pub use self::schema::SYSTEM_COLUMNS;

/// The store's identifier, as catalogs name it in `lakestream.store`.
pub const IDENTIFIER: &str = "fluss";

/// What went wrong in the Fluss store, beyond reachability.
#[derive(Debug, thiserror::Error)]
pub enum FlussStoreError {
    /// The Paimon table cannot be served by Fluss as it is.
    #[error("table '{table}' cannot be a lake-stream table on Fluss: {reason}")]
    Unsupported {
        /// The table's full name.
        table: String,
        /// Why, and what to change.
        reason: String,
    },
    /// The Fluss table exists but does not match the Paimon table.
    #[error(
        "the Fluss table '{table}' does not match the Paimon table '{table}': {reason}. Drop the \
         Fluss table (it is recreated from the Paimon table), or change the Paimon table to match"
    )]
    Mismatch {
        /// The table's full name (the same on both sides).
        table: String,
        /// The difference.
        reason: String,
    },
    /// The cluster answered with an error.
    #[error("Fluss at '{servers}' could not {operation} '{table}': {source}")]
    Client {
        /// The bootstrap servers.
        servers: String,
        /// What was asked.
        operation: String,
        /// The table's full name.
        table: String,
        /// fluss-rs's error.
        source: Box<fluss::error::Error>,
    },
    /// Fluss tiers into another Paimon catalog than the one this store serves.
    #[error(
        "the Fluss cluster at '{servers}' tiers into the Paimon catalog {fluss}, but this \
         catalog is {ours}: Fluss would write other tables than the ones read here. Start the \
         Fluss servers with datalake.format: paimon and datalake.paimon.* pointing at this \
         catalog (e.g. datalake.paimon.warehouse), or point the catalog at Fluss's warehouse"
    )]
    OtherLake {
        /// The bootstrap servers.
        servers: String,
        /// What the cluster tiers into.
        fluss: String,
        /// What this catalog is.
        ours: String,
    },
    /// A batch could not cross between the arrow versions.
    #[error(transparent)]
    Bridge(#[from] arrow_bridge::BridgeError),
    /// The Fluss table a statement found is gone: another statement or
    /// process dropped it (and perhaps created it again) since.
    #[error(
        "the Fluss table '{table}' was {change} {when}, by another statement or process: \
         {consequence}"
    )]
    Replaced {
        /// The table's full name.
        table: String,
        /// `dropped`, `dropped and created again`, ...
        change: String,
        /// Since when: `after this read was planned`, `while this write ran`.
        when: String,
        /// What that means for the statement, and what to do.
        consequence: String,
    },
    /// The Paimon table was dropped after the statement was planned.
    #[error(
        "table '{table}' was dropped after this statement was planned, by another statement or \
         process, and its Fluss table with it: nothing was {what}"
    )]
    Dropped {
        /// The table's full name.
        table: String,
        /// `read`, `written`.
        what: String,
    },
    /// A Fluss table of the name exists and was written to, but the Paimon
    /// table was never served by it: it is an earlier table's, left by a
    /// drop that did not remove it.
    #[error(
        "the Fluss table '{table}' at '{servers}' holds rows ({records} change-log records) of \
         an earlier table named '{table}', but the Paimon table '{table}' was never served by \
         it: a drop of the earlier table (by another engine, or through a catalog without the \
         Fluss store) left it behind. Its rows must not show in the new table, so it is not \
         attached. Drop the Fluss table (it is created afresh from the Paimon table), then \
         turn the mode on again"
    )]
    Leftover {
        /// The table's full name.
        table: String,
        /// The bootstrap servers.
        servers: String,
        /// How many change-log records its buckets reach.
        records: i64,
    },
    /// The Fluss table holds rows written after its tiering was stopped,
    /// older than rows Paimon got directly since.
    #[error(
        "cannot turn lake-stream mode of '{table}' on: the Fluss table '{table}' holds {records} \
         change-log records that reached it after the mode was turned off and Fluss's tiering \
         of it stopped (writes planned before that), not in Paimon, and {since}. Tiering them \
         now would commit their older values over the newer ones, key by key. To drop them, \
         drop the Fluss table '{table}' in Fluss (turning the mode on creates it afresh from \
         the Paimon table); to keep them (they win over the newer rows of the same keys), set \
         'table.datalake.enabled' = 'true' on the Fluss table and wait until Fluss's tiering \
         service has tiered them. Then turn the mode on again"
    )]
    Stranded {
        /// The table's full name.
        table: String,
        /// How many change-log records wait.
        records: i64,
        /// What Paimon got since.
        since: String,
    },
    /// A write to a table in lake-stream mode whose Fluss table has its
    /// tiering off: its rows would never reach Paimon.
    #[error(
        "cannot write to '{table}': Fluss's tiering of the Fluss table '{table}' is off \
         ('table.datalake.enabled' is not 'true' on it) while the table is in lake-stream \
         mode, so rows written now would never reach Paimon. Another process is turning the \
         mode off right now, or one stopped midway. Nothing was written. Turn the mode on \
         again (ALTER TABLE ... SET TBLPROPERTIES ('lakestream.enabled' = 'true')) to resume \
         tiering, or off to finish turning it off"
    )]
    TieringOff {
        /// The table's full name.
        table: String,
    },
    /// A drop while a replica of the table is on a tablet server that is down.
    #[error(
        "the Fluss table '{table}' has a replica on a tablet server that is down ({why}), and \
         Fluss 0.9.1 cannot start a tablet server again once a table it held was dropped while \
         it was down. The table '{table}' was not dropped: start the tablet servers again, then \
         run DROP TABLE again"
    )]
    ReplicaDown {
        /// The table's full name.
        table: String,
        /// What shows a replica is down.
        why: String,
    },
    /// Fluss answered that it has no such table, but its coordinator has it.
    #[error(
        "the Fluss cluster at '{servers}' could not {operation} '{table}': a server answered \
         that the table does not exist, but Fluss's coordinator has it, so the answer came \
         from servers whose view of the table is out of date (a tablet server down or \
         restarting, or metadata not yet caught up with a table created again). Try again; \
         if it persists, check the cluster's tablet servers"
    )]
    NotSeen {
        /// The table's full name.
        table: String,
        /// The bootstrap servers.
        servers: String,
        /// What was asked.
        operation: String,
    },
    /// A write failed after some of its rows may have reached Fluss.
    #[error(
        "the write to '{table}' failed after its rows were handed to the Fluss cluster at \
         '{servers}', so its outcome is unknown: Fluss may hold none, some or all of them. \
         Check with SELECT * FROM {table}$rt before writing them again. The failure: {cause}"
    )]
    OutcomeUnknown {
        /// The table's full name.
        table: String,
        /// The bootstrap servers.
        servers: String,
        /// What failed.
        cause: String,
    },
}

impl From<FlussStoreError> for Error {
    fn from(error: FlussStoreError) -> Self {
        super::store_error(IDENTIFIER, error)
    }
}

/// Creates [`FlussStore`]s from the catalog's `fluss.<key>` options.
#[derive(Debug, Default)]
pub struct FlussStoreFactory;

#[async_trait]
impl StoreFactory for FlussStoreFactory {
    fn identifier(&self) -> &str {
        IDENTIFIER
    }

    fn hidden_columns(&self) -> &[&str] {
        &SYSTEM_COLUMNS
    }

    /// Fluss's tiering service writes rows its key-value store already
    /// merged, and update before-images, into Paimon: only plain
    /// `deduplicate` tables read the same through `t$rt` and `t`.
    fn tiers_its_log(&self) -> bool {
        false
    }

    /// Fluss's tiering service tiers: there is no on-demand tiering.
    fn tiers_by_itself(&self) -> bool {
        true
    }

    /// The bootstrap servers, sorted: a cluster is named by its servers.
    fn location(&self, context: &StoreContext) -> Result<Option<String>> {
        let servers = context
            .options
            .get("bootstrap.servers")
            .map_or("", String::as_str);
        Ok(Some(server_set(servers).join(",")))
    }

    /// A cluster is reached through any of its servers: two lists of them
    /// name one cluster when they share one.
    fn same_location(&self, recorded: &str, ours: &str) -> bool {
        let recorded = server_set(recorded);
        server_set(ours)
            .iter()
            .any(|server| recorded.contains(server))
    }

    async fn create(&self, context: StoreContext) -> Result<Arc<dyn LakestreamStore>> {
        let options = options::parse(&context.options)?;
        let servers = options.bootstrap().to_string();
        let bound = Duration::from_millis(options.config.connect_timeout_ms)
            .min(options.request_timeout)
            .max(Duration::from_millis(1));
        let connection =
            match tokio::time::timeout(bound, FlussConnection::new(options.config.clone())).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(e)) => {
                    return Err(Error::StoreUnavailable {
                        store: IDENTIFIER.to_string(),
                        reason: format!(
                        "cannot connect to the Fluss cluster at bootstrap servers '{servers}': {}",
                        describe(&e)
                    ),
                    })
                }
                Err(_) => {
                    return Err(Error::StoreUnavailable {
                        store: IDENTIFIER.to_string(),
                        reason: format!(
                            "the Fluss cluster at bootstrap servers '{servers}' did not answer \
                             within {bound:?} (fluss.client.connect-timeout, \
                             fluss.client.request-timeout)"
                        ),
                    })
                }
            };
        Ok(Arc::new(FlussStore {
            options,
            connection: Arc::new(connection),
            catalog: context.catalog,
            lake: LakeCatalog::of_catalog(&context.catalog_options),
            lake_checked: tokio::sync::OnceCell::new(),
            writers: Mutex::new(HashMap::new()),
        }))
    }
}

/// Fluss's admin client, with a coordinator to send to.
///
/// fluss-rs 1.0 sends admin calls to the coordinator named in its cached
/// cluster metadata, and replaces that metadata with any server's answer. A
/// tablet server that has just restarted answers before it has learned the
/// coordinator, and from then on every admin call fails with "Coordinator
/// server not found in cluster metadata": nothing in fluss-rs refreshes the
/// metadata for an admin call. Asking a (randomly chosen) server again
/// restores it.
pub(crate) trait Coordinated {
    async fn admin(&self) -> fluss::error::Result<Arc<fluss::client::FlussAdmin>>;
}

impl Coordinated for FlussConnection {
    async fn admin(&self) -> fluss::error::Result<Arc<fluss::client::FlussAdmin>> {
        let metadata = self.get_metadata();
        for attempt in 0..3 {
            if metadata.get_cluster().get_coordinator_server().is_some() {
                break;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // A failure here shows as the admin call's own error below.
            let _ = metadata
                .update_tables_metadata(
                    &std::collections::HashSet::new(),
                    &std::collections::HashSet::new(),
                    vec![],
                )
                .await;
        }
        self.get_admin()
    }
}

/// Whether Fluss's key-value store holds each row's key, looked up with
/// the writer's lookupers, a share of the rows each.
async fn held_keys(target: &Target, keys: &Keys, batch: &RecordBatch) -> Result<Vec<bool>> {
    let projected = batch
        .project(&keys.columns)
        .map_err(|e| Error::Internal(format!("the primary key of '{}': {e}", target.name)))?;
    let projected = Arc::new(arrow_bridge::to_arrow59(&projected).map_err(FlussStoreError::from)?);
    let rows = projected.num_rows();
    let share = rows.div_ceil(keys.lookupers.len().max(1)).max(1);
    let lookups = keys.lookupers.iter().enumerate().map(|(n, lookuper)| {
        let projected = Arc::clone(&projected);
        async move {
            let range = (n * share).min(rows)..((n + 1) * share).min(rows);
            let mut found = Vec::with_capacity(range.len());
            if range.is_empty() {
                return Ok(found);
            }
            let mut lookuper = lookuper.lock().await;
            let mut row =
                ColumnarRow::new(projected, Arc::clone(&keys.row_type), range.start, None)
                    .map_err(|e| target.fluss_error("look up the keys of", e))?;
            for i in range {
                row.set_row_id(i);
                let result = target
                    .bounded("look up a key of", lookuper.lookup(&row))
                    .await?;
                let holds = result
                    .get_single_row()
                    .map_err(|e| target.fluss_error("look up a key of", e))?
                    .is_some();
                found.push(holds);
            }
            Ok::<_, Error>(found)
        }
    });
    let found = futures::future::try_join_all(lookups).await?;
    Ok(found.into_iter().flatten().collect())
}

/// fluss-rs errors without Rust debug noise where it has a plain message.
fn describe(error: &fluss::error::Error) -> String {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => api_error.message.clone(),
        fluss::error::Error::RpcError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The store: one connection to a Fluss cluster, shared by its tables.
pub struct FlussStore {
    options: FlussOptions,
    connection: Arc<FlussConnection>,
    catalog: Arc<dyn Catalog>,
    /// The Paimon catalog this store serves, to compare with Fluss's.
    lake: LakeCatalog,
    lake_checked: tokio::sync::OnceCell<()>,
    writers: Mutex<HashMap<Identifier, Arc<Writer>>>,
}

/// Where a Paimon catalog keeps its tables: what Fluss's `datalake.paimon.*`
/// server options and this crate's catalog options both describe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LakeCatalog {
    metastore: String,
    warehouse: Option<String>,
    uri: Option<String>,
}

impl LakeCatalog {
    fn of_catalog(options: &HashMap<String, String>) -> Self {
        Self::new(
            options.get("metastore").map(String::as_str),
            options.get("warehouse").map(String::as_str),
            options.get("uri").map(String::as_str),
        )
    }

    fn new(metastore: Option<&str>, warehouse: Option<&str>, uri: Option<&str>) -> Self {
        let metastore = metastore
            .unwrap_or("filesystem")
            .trim()
            .to_ascii_lowercase();
        let warehouse = warehouse.map(|w| {
            if metastore == "filesystem" {
                local_path(w)
            } else {
                w.trim().to_string()
            }
        });
        Self {
            metastore,
            warehouse,
            uri: uri.map(|u| u.trim().trim_end_matches('/').to_string()),
        }
    }

    fn same_as(&self, other: &Self) -> bool {
        self.metastore == other.metastore
            && self.warehouse == other.warehouse
            && (self.metastore == "filesystem" || self.uri == other.uri)
    }
}

impl fmt::Display for LakeCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(metastore '{}'", self.metastore)?;
        if let Some(warehouse) = &self.warehouse {
            write!(f, ", warehouse '{warehouse}'")?;
        }
        if let Some(uri) = &self.uri {
            write!(f, ", uri '{uri}'")?;
        }
        write!(f, ")")
    }
}

/// A filesystem warehouse as a comparable path: no `file:` scheme, no
/// trailing slash, symbolic links resolved where the path exists.
fn local_path(warehouse: &str) -> String {
    let trimmed = warehouse.trim();
    let path = trimmed
        .strip_prefix("file://")
        .or_else(|| trimmed.strip_prefix("file:"))
        .unwrap_or(trimmed);
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_string())
}

impl fmt::Debug for FlussStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlussStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// A table's Fluss side as one read or write sees it.
pub(crate) struct Target {
    pub(crate) path: TablePath,
    /// The Paimon table's full name (the Fluss table has the same).
    pub(crate) name: String,
    pub(crate) servers: String,
    pub(crate) request_timeout: Duration,
    pub(crate) primary_key: bool,
    /// Whether a read was planned on the table: a table missing after that
    /// was dropped since, not never attached.
    pub(crate) planned: bool,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// A fluss-rs error as the crate's: a missing table, an unreachable
    /// cluster (named by its bootstrap servers), or a failure. A table
    /// missing under a planned read was dropped after the planning.
    pub(crate) fn fluss_error(&self, operation: &str, error: fluss::error::Error) -> Error {
        if is_gone(&error) {
            return if self.planned {
                self.replaced(
                    "dropped (and perhaps created again)",
                    AFTER_PLANNING,
                    RUN_THE_READ_AGAIN,
                )
            } else {
                Error::StoreTableMissing {
                    store: IDENTIFIER.to_string(),
                    table: self.name.clone(),
                }
            };
        }
        if error.api_error() == Some(FlussError::NetworkException) {
            return self.unavailable(operation, describe(&error));
        }
        match error {
            fluss::error::Error::RpcError { .. }
            | fluss::error::Error::IoUnexpectedError { .. } => {
                self.unavailable(operation, describe(&error))
            }
            source => FlussStoreError::Client {
                servers: self.servers.clone(),
                operation: operation.to_string(),
                table: self.name.clone(),
                source: Box::new(source),
            }
            .into(),
        }
    }

    /// The error of a statement whose Fluss table was dropped (`change`
    /// says how) `when`.
    pub(crate) fn replaced(&self, change: &str, when: &str, consequence: &str) -> Error {
        FlussStoreError::Replaced {
            table: self.name.clone(),
            change: change.to_string(),
            when: when.to_string(),
            consequence: consequence.to_string(),
        }
        .into()
    }

    pub(crate) fn unavailable(&self, operation: &str, reason: impl fmt::Display) -> Error {
        Error::StoreUnavailable {
            store: IDENTIFIER.to_string(),
            reason: format!(
                "the Fluss cluster at bootstrap servers '{}' could not {operation} '{}': {reason}",
                self.servers, self.name
            ),
        }
    }

    /// The error of a call that got no answer within the request timeout.
    fn no_answer(&self, operation: &str) -> Error {
        self.unavailable(
            operation,
            format!(
                "no answer within {:?} (fluss.client.request-timeout)",
                self.request_timeout
            ),
        )
    }

    /// Runs a fluss-rs call within the request timeout and hands back
    /// Fluss's own answer, for callers that look into its errors.
    pub(crate) async fn answer<T>(
        &self,
        operation: &str,
        call: impl Future<Output = fluss::error::Result<T>>,
    ) -> Result<fluss::error::Result<T>> {
        tokio::time::timeout(self.request_timeout, call)
            .await
            .map_err(|_| self.no_answer(operation))
    }

    /// Runs a fluss-rs call within the request timeout.
    pub(crate) async fn bounded<T>(
        &self,
        operation: &str,
        call: impl Future<Output = fluss::error::Result<T>>,
    ) -> Result<T> {
        self.answer(operation, call)
            .await?
            .map_err(|e| self.fluss_error(operation, e))
    }

    /// Like [`Self::bounded`], for idempotent calls: retried while the cluster
    /// answers that it is not ready yet (a new table's buckets have no
    /// leader for a moment), within the request timeout.
    pub(crate) async fn retrying<T, F, Fut>(&self, operation: &str, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = fluss::error::Result<T>>,
    {
        self.retrying_when(operation, is_transient, call).await
    }

    /// Like [`Self::retrying`], retried while `transient` says so.
    pub(crate) async fn retrying_when<T, F, Fut>(
        &self,
        operation: &str,
        transient: impl Fn(&fluss::error::Error) -> bool,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = fluss::error::Result<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            match tokio::time::timeout_at(deadline, call()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if transient(&e) && tokio::time::Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Ok(Err(e)) => return Err(self.fluss_error(operation, e)),
                Err(_) => return Err(self.no_answer(operation)),
            }
        }
    }

    /// A handle of the Fluss table `table_id`: the one a read was planned on,
    /// or the one Fluss's coordinator named for a write. The handle comes from
    /// the connection's metadata, which a tablet server may answer from a
    /// view older than the coordinator's; an older id or no table is asked of
    /// the coordinator, and tried again while it still names `table_id`. A
    /// table dropped (or dropped and created again) since is an error that
    /// says so, `when` and with what `consequence`.
    pub(crate) async fn table<'c>(
        &self,
        connection: &'c FlussConnection,
        table_id: i64,
        when: &str,
        consequence: &str,
    ) -> Result<FlussTable<'c>> {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            let seen = match tokio::time::timeout_at(deadline, connection.get_table(&self.path))
                .await
                .map_err(|_| self.no_answer("open"))?
            {
                Ok(table) if table.get_table_info().get_table_id() == table_id => return Ok(table),
                Ok(table) => Ok(Some(table.get_table_info().get_table_id())),
                Err(e) if is_gone(&e) => Ok(None),
                // A tablet server reports a table dropped under it in other
                // ways too (an unknown error wrapping Fluss's "does not
                // exist"): the coordinator decides.
                Err(e) => Err(e),
            };
            // Table ids only grow: a newer one means the table was created again.
            if matches!(seen, Ok(Some(id)) if id > table_id) {
                return Err(self.replaced("dropped and created again", when, consequence));
            }
            let admin = connection
                .admin()
                .await
                .map_err(|e| self.fluss_error("reach", e))?;
            let current = match tokio::time::timeout_at(deadline, admin.get_table_info(&self.path))
                .await
                .map_err(|_| self.no_answer("describe"))?
            {
                Ok(info) => Some(info.get_table_id()),
                Err(e) if is_gone(&e) => None,
                Err(e) => return Err(self.fluss_error("describe", e)),
            };
            match current {
                None => return Err(self.replaced("dropped", when, consequence)),
                Some(id) if id != table_id => {
                    return Err(self.replaced("dropped and created again", when, consequence))
                }
                Some(_) => {}
            }
            // The coordinator still names the table: an error was about
            // something else, and an older id or no table is metadata that
            // has not caught up yet.
            let seen = seen.map_err(|e| self.fluss_error("open", e))?;
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(self.unavailable(
                    "open",
                    format!(
                        "Fluss's coordinator names table id {table_id}, but the metadata its \
                         tablet servers give still {} after {:?} (fluss.client.request-timeout)",
                        seen.map_or("has no such table".to_string(), |id| format!(
                            "names table id {id}"
                        )),
                        self.request_timeout
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// A handle of the Fluss table a read was planned on.
    pub(crate) async fn planned<'c>(
        &self,
        connection: &'c FlussConnection,
        table_id: i64,
    ) -> Result<FlussTable<'c>> {
        self.table(connection, table_id, AFTER_PLANNING, RUN_THE_READ_AGAIN)
            .await
    }
}

/// Since when a planned read's table may have changed.
const AFTER_PLANNING: &str = "after this read was planned";
/// What a read whose table changed after planning should do.
const RUN_THE_READ_AGAIN: &str =
    "the rows the read planned went with the dropped table. Run the query again to read the \
     table as it is now";

/// Whether a fluss-rs error says the table (or its database) does not exist.
fn is_gone(error: &fluss::error::Error) -> bool {
    matches!(
        error.api_error(),
        Some(FlussError::TableNotExist | FlussError::DatabaseNotExist)
    )
}

/// Whether a fluss-rs error says "not yet" rather than "no".
fn is_transient(error: &fluss::error::Error) -> bool {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => {
            api_error.is_retriable()
                && FlussError::for_code(api_error.code) != FlussError::NetworkException
        }
        // fluss-rs reports a bucket whose leader is not elected yet this way.
        fluss::error::Error::UnexpectedError { message, .. } => message.contains("No leader"),
        _ => false,
    }
}

/// [`is_transient`], and a connection error the first `limit` times:
/// fluss-rs refreshes metadata from a tablet server it picks at random, one
/// that may have gone down, and leaves that one out of its next pick.
fn or_connection_errors(limit: u32) -> impl Fn(&fluss::error::Error) -> bool {
    let seen = std::sync::atomic::AtomicU32::new(0);
    move |error| match error {
        fluss::error::Error::RpcError { .. } => {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < limit
        }
        other => is_transient(other),
    }
}

/// Whether Fluss's tiering service tiers the Fluss table `info`.
fn tiering_on(info: &TableInfo) -> bool {
    info.get_properties()
        .get(DATALAKE_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// A cached writer of one table, for one incarnation of it.
struct Writer {
    incarnation: Incarnation,
    kind: WriterKind,
    row_type: Arc<RowType>,
    /// The Arrow form fluss-rs takes the rows in.
    arrow_schema: SchemaRef,
}

enum WriterKind {
    Append(AppendWriter),
    Upsert(UpsertWriter, Keys),
}

/// How a DELETE finds out whether Fluss's key-value store holds a key.
struct Keys {
    /// The primary key's columns, by position in the Fluss row.
    columns: Vec<usize>,
    /// The primary key's columns as a row type: what a lookup takes.
    row_type: Arc<RowType>,
    /// Lookups run this many at a time; fluss-rs batches them per server.
    lookupers: Vec<Mutex<Lookuper>>,
}

/// Concurrent key lookups of one DELETE.
const LOOKUPERS: usize = 16;

/// What a cached writer was made for: the Fluss table (its id, which another
/// process's `DROP`/`CREATE` changes, and its schema) and the Paimon schema
/// its rows come in. A writer serves a write only while Fluss and Paimon
/// still have these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Incarnation {
    table_id: i64,
    schema_id: i32,
    paimon_schema_id: i64,
}

impl Incarnation {
    fn of(info: &TableInfo, table: &Table) -> Self {
        Self {
            table_id: info.get_table_id(),
            schema_id: info.get_schema_id(),
            paimon_schema_id: table.schema().id(),
        }
    }
}

/// A write that failed: whether any of its rows may have left this process,
/// and whether Fluss said the table is gone.
struct SendFailure {
    error: Error,
    sent: bool,
    gone: bool,
}

impl SendFailure {
    fn before_sending(error: Error) -> Self {
        Self {
            error,
            sent: false,
            gone: false,
        }
    }
}

/// Since when a write's table may have changed.
const WHILE_WRITING: &str = "while this write ran";
/// What a write whose table changed before it sent anything should do.
const NOTHING_WRITTEN: &str = "nothing was written. Run the statement again";
/// What a write whose table changed after it sent rows should do.
const SENT_TO_DROPPED: &str = "the rows it sent went with the dropped table, and none of them is \
     in the table now. Run the statement again to write them to the table as it is now";

impl FlussStore {
    fn target(&self, table: &Table) -> Result<Target> {
        let identifier = table.identifier();
        Ok(Target {
            path: table_path(identifier)?,
            name: identifier.full_name(),
            servers: self.options.bootstrap().to_string(),
            request_timeout: self.options.request_timeout,
            primary_key: !table.schema().primary_keys().is_empty(),
            planned: false,
        })
    }

    /// Checks, once per store, that the cluster tiers into Paimon and into
    /// this very catalog: otherwise the snapshot ids Fluss reports belong to
    /// other tables. A cluster that does not describe its configuration (no
    /// permission) is taken at its word.
    async fn check_lake(&self, target: &Target) -> Result<()> {
        self.lake_checked
            .get_or_try_init(|| async {
                let admin = self
                    .connection
                    .admin()
                    .await
                    .map_err(|e| target.fluss_error("reach", e))?;
                let configs = match target
                    .answer("describe the cluster for", admin.describe_cluster_configs())
                    .await?
                {
                    Ok(configs) => configs,
                    Err(e) if e.api_error().is_some() => return Ok(()),
                    Err(e) => return Err(target.fluss_error("describe the cluster for", e)),
                };
                let config = |key: &str| {
                    configs
                        .iter()
                        .find(|c| c.config_key == key)
                        .and_then(|c| c.config_value.clone())
                };
                let servers = self.options.bootstrap().to_string();
                match config("datalake.format") {
                    Some(format) if format.eq_ignore_ascii_case("paimon") => {}
                    other => {
                        return Err(FlussStoreError::OtherLake {
                            servers,
                            fluss: format!(
                                "of no Paimon lake (datalake.format is {})",
                                other.map_or("unset".to_string(), |f| format!("'{f}'"))
                            ),
                            ours: self.lake.to_string(),
                        }
                        .into())
                    }
                }
                let fluss = LakeCatalog::new(
                    config("datalake.paimon.metastore").as_deref(),
                    config("datalake.paimon.warehouse").as_deref(),
                    config("datalake.paimon.uri").as_deref(),
                );
                if !fluss.same_as(&self.lake) {
                    return Err(FlussStoreError::OtherLake {
                        servers,
                        fluss: fluss.to_string(),
                        ours: self.lake.to_string(),
                    }
                    .into());
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Refuses to drop a table while one of its replicas is on a tablet
    /// server the coordinator knows to be down: Fluss 0.9.1 cannot start that
    /// server again afterwards (it fails recovering the dropped table's
    /// replica). Seen from here, a replica is down when fewer tablet servers
    /// are up than the table keeps replicas, or when a bucket of an
    /// unpartitioned table has no leader among them. A server killed a moment
    /// ago still counts as up until its coordinator session expires.
    async fn check_replicas_up(
        &self,
        target: &Target,
        admin: &fluss::client::FlussAdmin,
    ) -> Result<()> {
        let info = match self.table_info(target).await {
            Ok(info) => info,
            Err(Error::StoreTableMissing { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let up: std::collections::HashSet<i32> = target
            .bounded("list the servers of", admin.get_server_nodes())
            .await?
            .iter()
            .filter(|node| *node.server_type() == ServerType::TabletServer)
            .map(fluss::ServerNode::id)
            .collect();
        let replicas = match info
            .get_properties()
            .get("table.replication.factor")
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            Some(replicas) => replicas,
            // Not recorded on the table: the cluster's default applies.
            None => target
                .answer("describe the cluster for", admin.describe_cluster_configs())
                .await?
                .ok()
                .and_then(|configs| {
                    configs
                        .into_iter()
                        .find(|c| c.config_key == "default.replication.factor")
                        .and_then(|c| c.config_value)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(1),
        };
        let mut down = None;
        if up.len() < replicas {
            down = Some(format!(
                "it keeps {replicas} replicas of each bucket and only {} tablet server(s) are up",
                up.len()
            ));
        } else if info.get_partition_keys().is_empty() {
            let metadata = self.connection.get_metadata();
            target
                .retrying_when(
                    "find the bucket leaders of",
                    or_connection_errors(2),
                    || metadata.update_table_metadata(&target.path),
                )
                .await?;
            let cluster = metadata.get_cluster();
            let leaderless: Vec<i32> = (0..info.get_num_buckets())
                .filter(|bucket| {
                    let bucket = fluss::metadata::TableBucket::new(info.get_table_id(), *bucket);
                    !cluster
                        .leader_for(&bucket)
                        .is_some_and(|leader| up.contains(&leader.id()))
                })
                .collect();
            if !leaderless.is_empty() {
                down = Some(format!(
                    "buckets {leaderless:?} have no leader on a tablet server that is up"
                ));
            }
        }
        match down {
            None => Ok(()),
            Some(why) => Err(FlussStoreError::ReplicaDown {
                table: target.name.clone(),
                why,
            }
            .into()),
        }
    }

    async fn table_info(&self, target: &Target) -> Result<TableInfo> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        // fluss-rs follows the coordinator's answer with a metadata refresh
        // from a tablet server it picks at random.
        target
            .retrying_when("describe", or_connection_errors(2), || {
                admin.get_table_info(&target.path)
            })
            .await
    }

    /// Creates the Fluss table of `shape`, with tiering off until the Paimon
    /// table has the shape Fluss checks.
    async fn create_fluss_table(&self, target: &Target, shape: &FlussShape) -> Result<()> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        target
            .bounded(
                "create the database of",
                admin.create_database(target.path.database(), None, true),
            )
            .await?;
        let schema = shape
            .fluss_schema()
            .map_err(|e| target.fluss_error("create", e))?;
        let descriptor = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(shape.bucket_count, shape.bucket_keys.clone())
            .properties(
                self.options
                    .table_properties
                    .clone()
                    .into_iter()
                    .collect::<HashMap<_, _>>(),
            )
            .property(DATALAKE_ENABLED, "false")
            .comment(shape.comment.as_str())
            .build()
            .map_err(|e| target.fluss_error("create", e))?;
        target
            .bounded(
                "create",
                admin.create_table(&target.path, &descriptor, false),
            )
            .await
    }

    /// The rest of attaching, once the Fluss table exists: the Paimon
    /// table's shape, then tiering on.
    async fn finish_attach(&self, target: &Target, identifier: &Identifier) -> Result<()> {
        let info = self.table_info(target).await?;
        let enabled = tiering_on(&info);
        let paimon = self.catalog.get_table(identifier).await?;
        let options = schema::expected_paimon_options(&info, enabled);
        let changes = schema::paimon_changes(&paimon, &options)?;
        if !changes.is_empty() {
            self.catalog.alter_table(identifier, changes, false).await?;
        }
        if !enabled {
            self.set_tiering(target, true).await?;
        }
        Ok(())
    }

    /// Turns Fluss's tiering of the table on or off.
    async fn set_tiering(&self, target: &Target, on: bool) -> Result<()> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        let changes = AlterTableChanges {
            config_changes: vec![AlterConfig::new(
                DATALAKE_ENABLED,
                Some(on.to_string()),
                AlterConfigOpType::Set,
            )],
            ..Default::default()
        };
        let operation = if on {
            "turn tiering on for"
        } else {
            "turn tiering off for"
        };
        target
            .bounded(operation, admin.alter_table(&target.path, false, changes))
            .await
    }

    /// The latest offset of every bucket of the table.
    async fn latest_offsets(&self, target: &Target, info: &TableInfo) -> Result<HashMap<i32, i64>> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
        target
            .retrying("find the latest offsets of", || {
                admin.list_offsets(&target.path, &buckets, OffsetSpec::Latest)
            })
            .await
    }

    /// The change-log records of the table that Fluss's tiering has not
    /// committed into Paimon: per bucket, from the offset its newest lake
    /// snapshot reached (the log's start without one) to the latest offset,
    /// as `(bucket, from, to)` with `to` exclusive, buckets with none left out.
    async fn untiered(&self, target: &Target, info: &TableInfo) -> Result<Untiered> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        let latest = self.latest_offsets(target, info).await?;
        let (snapshot_id, tiered): (Option<i64>, HashMap<i32, i64>) = match target
            .answer(
                "find the tiered snapshot of",
                admin.get_lake_snapshot(&target.path, None, None),
            )
            .await?
        {
            Ok(lake) => (
                Some(lake.snapshot_id),
                lake.bucket_snapshots
                    .iter()
                    .filter(|b| b.partition_id.is_none())
                    .filter_map(|b| b.log_offset.map(|o| (b.bucket_id, o)))
                    .collect(),
            ),
            Err(e) if e.api_error() == Some(FlussError::LakeSnapshotNotExist) => {
                (None, HashMap::new())
            }
            Err(e) => return Err(target.fluss_error("find the tiered snapshot of", e)),
        };
        let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
        let earliest = if buckets.iter().all(|b| tiered.contains_key(b)) {
            HashMap::new()
        } else {
            target
                .retrying("find the earliest offsets of", || {
                    admin.list_offsets(&target.path, &buckets, OffsetSpec::Earliest)
                })
                .await?
        };
        let mut waiting = Vec::new();
        for bucket in buckets {
            let to = latest.get(&bucket).copied().unwrap_or(0);
            let from = tiered
                .get(&bucket)
                .or_else(|| earliest.get(&bucket))
                .copied()
                .unwrap_or(0)
                .max(0);
            if to > from {
                waiting.push((bucket, from, to));
            }
        }
        Ok(Untiered {
            snapshot_id,
            waiting,
        })
    }

    /// Refuses turning the mode on again over rows the Fluss table got after
    /// its tiering was stopped (writes planned before the mode was turned
    /// off) when, on a primary-key table, Paimon got rows from elsewhere
    /// since its last tiering: tiering the older rows would commit them
    /// over the newer ones, key by key. Append tables only gain rows.
    async fn check_no_stranded(
        &self,
        table: &Table,
        target: &Target,
        info: &TableInfo,
    ) -> Result<()> {
        if tiering_on(info) || !target.primary_key {
            return Ok(());
        }
        let untiered = self.untiered(target, info).await?;
        if untiered.waiting.is_empty() {
            return Ok(());
        }
        let Some(since) = self.direct_write_since(table, untiered.snapshot_id).await? else {
            return Ok(());
        };
        Err(FlussStoreError::Stranded {
            table: target.name.clone(),
            records: untiered.records(),
            since,
        }
        .into())
    }

    /// What says Paimon got rows other than from Fluss's tiering after
    /// snapshot `tiered` (the newest Fluss tiered; `None`: none): a newer
    /// snapshot another user committed, or snapshots expired so that this
    /// cannot be told. `None`: nothing.
    async fn direct_write_since(
        &self,
        table: &Table,
        tiered: Option<i64>,
    ) -> Result<Option<String>> {
        let snapshots = table.snapshot_manager();
        let Some(latest) = snapshots.get_latest_snapshot().await? else {
            return Ok(None);
        };
        let after = tiered.unwrap_or(0);
        let earliest = snapshots
            .earliest_snapshot_id()
            .await?
            .unwrap_or(latest.id());
        if earliest > after + 1 {
            return Ok(Some(format!(
                "Paimon's snapshots up to {} have expired, so whether Paimon got rows from \
                 elsewhere since cannot be told",
                earliest - 1
            )));
        }
        let mut snapshot = latest;
        while snapshot.id() > after {
            // A compaction rewrites files and changes no row.
            let compaction = matches!(snapshot.commit_kind(), paimon::spec::CommitKind::COMPACT);
            if snapshot.commit_user() != TIERING_COMMIT_USER && !compaction {
                return Ok(Some(format!(
                    "Paimon snapshot {} was committed since by '{}', not by Fluss's tiering",
                    snapshot.id(),
                    snapshot.commit_user()
                )));
            }
            if snapshot.id() - 1 <= after {
                break;
            }
            snapshot = snapshots.get_snapshot(snapshot.id() - 1).await?;
        }
        Ok(None)
    }

    /// Refuses an existing Fluss table that was written to when the Paimon
    /// table was never served by Fluss (it lacks the system columns Fluss's
    /// tiering adds, which stay once added): the Fluss table belongs to an
    /// earlier table of the name. An empty one (made by hand, say) is fine.
    async fn check_not_leftover(
        &self,
        table: &Table,
        target: &Target,
        info: &TableInfo,
    ) -> Result<()> {
        if schema::user_fields(table).len() < table.schema().fields().len() {
            return Ok(());
        }
        let latest = self.latest_offsets(target, info).await?;
        let records: i64 = latest.values().map(|o| (*o).max(0)).sum();
        if records == 0 {
            return Ok(());
        }
        Err(FlussStoreError::Leftover {
            table: target.name.clone(),
            servers: target.servers.clone(),
            records,
        }
        .into())
    }

    /// The Paimon snapshot to read when Fluss has tiered nothing readable
    /// yet: the newest one its tiering did not commit (the table as it was
    /// promoted), or none.
    async fn base_snapshot(&self, table: &Table) -> Result<Option<i64>> {
        let snapshots = table.snapshot_manager();
        let Some(mut snapshot) = snapshots.get_latest_snapshot().await? else {
            return Ok(None);
        };
        while snapshot.commit_user() == TIERING_COMMIT_USER {
            let previous = snapshot.id() - 1;
            match snapshots.earliest_snapshot_id().await? {
                Some(earliest) if previous >= earliest => {
                    snapshot = snapshots.get_snapshot(previous).await?;
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(snapshot.id()))
    }

    /// Upserts the Paimon table's rows into a new Fluss primary-key table.
    /// Fluss keeps a table's current rows by key and derives its changes
    /// from them: a key it does not hold cannot be deleted or updated, and
    /// its tiering would never remove it from Paimon. A table promoted in
    /// place therefore starts with Paimon's rows in Fluss too.
    async fn load_paimon_rows(&self, table: &Table, target: &Target) -> Result<()> {
        if table
            .snapshot_manager()
            .get_latest_snapshot_id()
            .await?
            .is_none()
        {
            return Ok(());
        }
        let columns: Vec<String> = schema::user_fields(table)
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        let provider = paimon_datafusion::PaimonTableProvider::try_new(table.clone())?;
        let session = datafusion::prelude::SessionContext::new();
        let frame = session
            .read_table(Arc::new(provider))?
            .select_columns(&columns.iter().map(String::as_str).collect::<Vec<_>>())?;
        let mut rows = frame.execute_stream().await?;
        let writer = self.writer(table, target).await?;
        while let Some(batch) = futures::StreamExt::next(&mut rows).await {
            self.send(target, &writer, WriteKind::Upsert, &[batch?])
                .await
                .map_err(|failure| failure.error)?;
        }
        Ok(())
    }

    /// The writer of the Fluss table that `table`'s path names now. Fluss's
    /// coordinator is asked which table that is on every write: a writer
    /// cached for an older incarnation (another process dropped and created
    /// the table again) or schema is dropped and a new one made.
    async fn writer(&self, table: &Table, target: &Target) -> Result<Arc<Writer>> {
        let current = self.table_info(target).await?;
        self.writer_for(table, target, &current).await
    }

    /// [`Self::writer`], for `current`, the Fluss table as the coordinator
    /// just described it.
    async fn writer_for(
        &self,
        table: &Table,
        target: &Target,
        current: &TableInfo,
    ) -> Result<Arc<Writer>> {
        let wanted = Incarnation::of(current, table);
        let mut writers = self.writers.lock().await;
        match writers.get(table.identifier()) {
            Some(writer) if writer.incarnation == wanted => return Ok(Arc::clone(writer)),
            Some(_) => {
                writers.remove(table.identifier());
            }
            None => {}
        }
        let shape = FlussShape::of(table)?;
        let fluss_table = target
            .table(
                &self.connection,
                current.get_table_id(),
                WHILE_WRITING,
                NOTHING_WRITTEN,
            )
            .await?;
        let info = fluss_table.get_table_info();
        if let Some(reason) = shape.mismatch(info) {
            return Err(FlussStoreError::Mismatch {
                table: target.name.clone(),
                reason,
            }
            .into());
        }
        let kind = if target.primary_key {
            let keys = info.get_primary_keys();
            let row_type = info.get_row_type();
            let columns = keys
                .iter()
                .map(|key| row_type.get_field_index(key))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "the Fluss table '{}' names primary key columns {keys:?} it does not have",
                        target.name
                    ))
                })?;
            let key_type = row_type
                .project_with_field_names(keys)
                .map_err(|e| target.fluss_error("write", e))?;
            let lookupers = (0..LOOKUPERS)
                .map(|_| {
                    fluss_table
                        .new_lookup()
                        .and_then(|l| l.create_lookuper())
                        .map(Mutex::new)
                })
                .collect::<fluss::error::Result<Vec<_>>>()
                .map_err(|e| target.fluss_error("write", e))?;
            WriterKind::Upsert(
                fluss_table
                    .new_upsert()
                    .and_then(|u| u.create_writer())
                    .map_err(|e| target.fluss_error("write", e))?,
                Keys {
                    columns,
                    row_type: Arc::new(key_type),
                    lookupers,
                },
            )
        } else {
            WriterKind::Append(
                fluss_table
                    .new_append()
                    .and_then(|a| a.create_writer())
                    .map_err(|e| target.fluss_error("write", e))?,
            )
        };
        let arrow_schema =
            schema::fluss_arrow_schema(&shape).map_err(|reason| FlussStoreError::Unsupported {
                table: target.name.clone(),
                reason,
            })?;
        let writer = Arc::new(Writer {
            incarnation: Incarnation::of(info, table),
            kind,
            row_type: Arc::new(info.get_row_type().clone()),
            arrow_schema,
        });
        writers.insert(table.identifier().clone(), Arc::clone(&writer));
        Ok(writer)
    }

    async fn forget_writer(&self, identifier: &Identifier) {
        self.writers.lock().await.remove(identifier);
    }

    /// Forgets `writer` if it is still the one cached for `identifier`.
    async fn forget_this_writer(&self, identifier: &Identifier, writer: &Arc<Writer>) {
        let mut writers = self.writers.lock().await;
        if writers
            .get(identifier)
            .is_some_and(|cached| Arc::ptr_eq(cached, writer))
        {
            writers.remove(identifier);
        }
    }

    /// Queues `batches` on `writer` and waits until Fluss acknowledged every
    /// row. Every batch is converted before the first is queued, so a batch
    /// that does not convert sends nothing.
    async fn send(
        &self,
        target: &Target,
        writer: &Writer,
        kind: WriteKind,
        batches: &[RecordBatch],
    ) -> std::result::Result<u64, SendFailure> {
        let mut converted = Vec::new();
        let mut held = Vec::new();
        let mut rows = 0u64;
        for batch in batches {
            if batch.num_rows() == 0 {
                continue;
            }
            rows += batch.num_rows() as u64;
            let batch =
                conform(batch, &writer.arrow_schema).map_err(SendFailure::before_sending)?;
            if let (WriterKind::Upsert(_, keys), WriteKind::Delete) = (&writer.kind, kind) {
                held.push(
                    held_keys(target, keys, &batch)
                        .await
                        .map_err(SendFailure::before_sending)?,
                );
            }
            let batch = arrow_bridge::to_arrow59(&batch)
                .map_err(|e| SendFailure::before_sending(FlussStoreError::from(e).into()))?;
            converted.push(batch);
        }
        let mut pending = Vec::new();
        // Once a row is queued, fluss-rs may send it at any moment.
        let failed = |pending: &Vec<_>, e: fluss::error::Error| SendFailure {
            gone: is_gone(&e),
            sent: !pending.is_empty(),
            error: target.fluss_error("write", e),
        };
        for (index, batch) in converted.into_iter().enumerate() {
            match (&writer.kind, kind) {
                (WriterKind::Append(append), WriteKind::Append) => {
                    match append.append_arrow_batch(batch) {
                        Ok(queued) => pending.push(queued),
                        Err(e) => return Err(failed(&pending, e)),
                    }
                }
                (WriterKind::Upsert(upsert, _), WriteKind::Upsert | WriteKind::Delete) => {
                    let count = batch.num_rows();
                    let mut row = match ColumnarRow::new(
                        Arc::new(batch),
                        Arc::clone(&writer.row_type),
                        0,
                        None,
                    ) {
                        Ok(row) => row,
                        Err(e) => return Err(failed(&pending, e)),
                    };
                    for i in 0..count {
                        row.set_row_id(i);
                        // A delete of a key Fluss's key-value store does
                        // not hold (it reached Paimon some other way, as a
                        // load while the mode was off, or another writer
                        // deleted it meanwhile) changes nothing: tiering
                        // would never remove it from Paimon, and Fluss logs
                        // a batch without records. Such a key is sent as the
                        // row's upsert, then its delete, in one bucket in
                        // this order. A key it holds is sent as the delete
                        // alone: nothing to interrupt.
                        let unheld = held
                            .get(index)
                            .is_some_and(|held: &Vec<bool>| !held.get(i).copied().unwrap_or(false));
                        if kind == WriteKind::Delete && unheld {
                            match upsert.upsert(&row) {
                                Ok(queued) => pending.push(queued),
                                Err(e) => return Err(failed(&pending, e)),
                            }
                        }
                        let queued = if kind == WriteKind::Delete {
                            upsert.delete(&row)
                        } else {
                            upsert.upsert(&row)
                        };
                        match queued {
                            Ok(queued) => pending.push(queued),
                            Err(e) => return Err(failed(&pending, e)),
                        }
                    }
                }
                _ => {
                    return Err(SendFailure::before_sending(Error::Internal(format!(
                        "{kind:?} does not fit the Fluss table '{}'",
                        target.name
                    ))))
                }
            }
        }
        // Send now rather than when the batch timeout fires; each row's own
        // future then says whether Fluss acknowledged it.
        let sent = |error: Error| SendFailure {
            error,
            sent: true,
            gone: false,
        };
        let acknowledged = async {
            match &writer.kind {
                WriterKind::Append(append) => append.flush().await?,
                WriterKind::Upsert(upsert, _) => upsert.flush().await?,
            }
            futures::future::try_join_all(pending).await
        };
        match target.answer("write", acknowledged).await.map_err(sent)? {
            Ok(_) => Ok(rows),
            Err(e) => Err(SendFailure {
                gone: is_gone(&e),
                sent: true,
                error: target.fluss_error("write", e),
            }),
        }
    }

    /// Writes `batches` with the writer of the table as it is now. A write
    /// whose table was dropped or created again before it sent anything is
    /// tried once more with a new writer; one that had sent rows is not: its
    /// error says what happened to them.
    async fn write_rows(
        &self,
        table: &Table,
        target: &Target,
        kind: WriteKind,
        batches: &[RecordBatch],
    ) -> Result<u64> {
        let mut tries = 0;
        loop {
            tries += 1;
            // A statement's rows are written only while Fluss tiers the
            // table: a crash while turning the mode off can leave its tiering
            // off, and a write racing a turn-off would strand its rows.
            let writer = match self.table_info(target).await {
                Ok(current) if !tiering_on(&current) => {
                    return Err(FlussStoreError::TieringOff {
                        table: target.name.clone(),
                    }
                    .into())
                }
                Ok(current) => self.writer_for(table, target, &current).await,
                Err(e) => Err(e),
            };
            let writer = match writer {
                Ok(writer) => writer,
                Err(e) if tries == 1 && is_replaced(&e) => continue,
                Err(e) => return Err(self.explain_missing(table, target, e, "written").await),
            };
            let failure = match self.send(target, &writer, kind, batches).await {
                Ok(rows) => return Ok(rows),
                Err(failure) => failure,
            };
            // The next write opens the table afresh (the writer may be broken).
            self.forget_this_writer(table.identifier(), &writer).await;
            match failure {
                SendFailure {
                    sent: false,
                    gone: true,
                    ..
                } if tries == 1 => continue,
                SendFailure {
                    error, sent: false, ..
                } => return Err(self.explain_missing(table, target, error, "written").await),
                SendFailure {
                    error, gone: true, ..
                } => return Err(self.after_sending_to_gone(target, &writer, error).await),
                SendFailure { error, .. } => {
                    return Err(FlussStoreError::OutcomeUnknown {
                        table: target.name.clone(),
                        servers: target.servers.clone(),
                        cause: error.to_string(),
                    }
                    .into())
                }
            }
        }
    }

    /// The error of a write that had sent rows when Fluss said the table is
    /// gone: rows sent to a dropped table are in no table that exists, which
    /// the coordinator confirms; if it still has the writer's table, the
    /// outcome is unknown.
    async fn after_sending_to_gone(&self, target: &Target, writer: &Writer, error: Error) -> Error {
        let change = match self.table_info(target).await {
            Err(Error::StoreTableMissing { .. }) => "dropped",
            Ok(info) if info.get_table_id() != writer.incarnation.table_id => {
                "dropped and created again"
            }
            _ => {
                return FlussStoreError::OutcomeUnknown {
                    table: target.name.clone(),
                    servers: target.servers.clone(),
                    cause: error.to_string(),
                }
                .into()
            }
        };
        target.replaced(change, WHILE_WRITING, SENT_TO_DROPPED)
    }

    /// A missing Fluss table as the truth: if the Paimon table was dropped
    /// too, the statement's table is gone; if it is still there, turning the
    /// mode on attaches a Fluss table, as [`Error::StoreTableMissing`] advises.
    async fn explain_missing(
        &self,
        table: &Table,
        target: &Target,
        error: Error,
        what: &str,
    ) -> Error {
        if !matches!(error, Error::StoreTableMissing { .. }) {
            return self.diagnose(target, error, what).await;
        }
        match self.catalog.get_table(table.identifier()).await {
            Err(paimon::Error::TableNotExist { .. }) => FlussStoreError::Dropped {
                table: target.name.clone(),
                what: what.to_string(),
            }
            .into(),
            _ => self.confirm_missing(target, error, what).await,
        }
    }

    /// A failure to reach or use the table, with its likely cause when
    /// Fluss's coordinator lists no tablet server: then no bucket has a
    /// leader, and Fluss's own answers (unknown tables, missing metadata,
    /// refused connections) do not say so.
    async fn diagnose(&self, target: &Target, error: Error, what: &str) -> Error {
        let relevant = match &error {
            Error::StoreUnavailable { .. } => true,
            Error::StoreFailed { source, .. } => matches!(
                source.downcast_ref::<FlussStoreError>(),
                Some(FlussStoreError::Client { .. } | FlussStoreError::NotSeen { .. })
            ),
            _ => false,
        };
        if !relevant {
            return error;
        }
        let Ok(admin) = self.connection.admin().await else {
            return error;
        };
        let nodes =
            match tokio::time::timeout(target.request_timeout, admin.get_server_nodes()).await {
                Ok(Ok(nodes)) => nodes,
                _ => return error,
            };
        if nodes
            .iter()
            .any(|node| matches!(node.server_type(), ServerType::TabletServer))
        {
            return error;
        }
        Error::StoreUnavailable {
            store: IDENTIFIER.to_string(),
            reason: format!(
                "the Fluss cluster at bootstrap servers '{}' has no tablet server running (its \
                 coordinator lists none), so '{}' cannot be {what}: start the cluster's tablet \
                 servers. What failed: {error}",
                target.servers, target.name
            ),
        }
    }

    /// A [`Error::StoreTableMissing`] some server gave, checked with Fluss's
    /// coordinator, which alone decides: a tablet server that is down,
    /// restarting or behind on metadata answers "no such table" too.
    async fn confirm_missing(&self, target: &Target, error: Error, what: &str) -> Error {
        let operation = match what {
            "read" => "read",
            "written" => "write to",
            other => other,
        };
        let admin = match self.connection.admin().await {
            Ok(admin) => admin,
            Err(e) => return target.fluss_error("reach", e),
        };
        match target
            .answer("check whether it has", admin.table_exists(&target.path))
            .await
        {
            Ok(Ok(false)) => error,
            Ok(Ok(true)) => FlussStoreError::NotSeen {
                table: target.name.clone(),
                servers: target.servers.clone(),
                operation: operation.to_string(),
            }
            .into(),
            Ok(Err(e)) => target.unavailable(
                operation,
                format!(
                    "a server answered that the table does not exist, and Fluss's \
                     coordinator could not be asked whether it does: {}",
                    describe(&e)
                ),
            ),
            Err(e) => target.unavailable(
                operation,
                format!(
                    "a server answered that the table does not exist, and Fluss's \
                     coordinator could not be asked whether it does: {e}"
                ),
            ),
        }
    }
}

/// The change-log records of a table Fluss's tiering has not committed.
struct Untiered {
    /// The Paimon snapshot of the newest lake snapshot, if any.
    snapshot_id: Option<i64>,
    /// `(bucket, from, to)`, `to` exclusive, for buckets with records waiting.
    waiting: Vec<(i32, i64, i64)>,
}

impl Untiered {
    fn records(&self) -> i64 {
        self.waiting.iter().map(|(_, from, to)| to - from).sum()
    }
}

/// Whether `error` is a [`FlussStoreError::Replaced`].
fn is_replaced(error: &Error) -> bool {
    match error {
        Error::StoreFailed { source, .. } => matches!(
            source.downcast_ref::<FlussStoreError>(),
            Some(FlussStoreError::Replaced { .. })
        ),
        _ => false,
    }
}

/// A batch in the Arrow types fluss-rs takes for the table's columns.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    // Nullability follows the data: fluss-rs checks NOT NULL columns itself.
    let fields: Vec<arrow::datatypes::Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let schema = Arc::new(arrow::datatypes::Schema::new(fields));
    crate::batch::cast_to(&schema, batch.columns().to_vec(), batch.num_rows())
        .map_err(|e| super::store_error(IDENTIFIER, e))
}

/// The Fluss table path of a Paimon table: the same database and name.
fn table_path(identifier: &Identifier) -> Result<TablePath> {
    for name in [identifier.database(), identifier.object()] {
        if let Some(problem) = TablePath::detect_invalid_name(name) {
            return Err(FlussStoreError::Unsupported {
                table: identifier.full_name(),
                reason: format!("Fluss rejects the name '{name}': {problem}"),
            }
            .into());
        }
    }
    Ok(TablePath::new(identifier.database(), identifier.object()))
}

#[async_trait]
impl LakestreamStore for FlussStore {
    fn identifier(&self) -> &str {
        IDENTIFIER
    }

    async fn attach_table(&self, table: &Table) -> Result<()> {
        let target = self.target(table)?;
        let shape = FlussShape::of(table)?;
        self.check_lake(&target).await?;
        let created = match self.table_info(&target).await {
            Ok(info) => {
                if let Some(reason) = shape.mismatch(&info) {
                    return Err(FlussStoreError::Mismatch {
                        table: target.name.clone(),
                        reason,
                    }
                    .into());
                }
                self.check_not_leftover(table, &target, &info).await?;
                self.check_no_stranded(table, &target, &info).await?;
                false
            }
            Err(Error::StoreTableMissing { .. }) => {
                self.create_fluss_table(&target, &shape).await?;
                true
            }
            Err(e) => return Err(e),
        };
        let finished = async {
            if created && target.primary_key {
                self.load_paimon_rows(table, &target).await?;
            }
            self.finish_attach(&target, table.identifier()).await
        }
        .await;
        if finished.is_err() && created {
            // Best effort: a half-attached table must not pin a schema for the
            // next attempt. The attach error is the one to report.
            if let Ok(admin) = self.connection.admin().await {
                let _ = target
                    .bounded("drop", admin.drop_table(&target.path, true))
                    .await;
            }
        }
        self.forget_writer(table.identifier()).await;
        finished
    }

    async fn drop_table(&self, identifier: &Identifier) -> Result<()> {
        self.forget_writer(identifier).await;
        let target = Target {
            path: table_path(identifier)?,
            name: identifier.full_name(),
            servers: self.options.bootstrap().to_string(),
            request_timeout: self.options.request_timeout,
            primary_key: false,
            planned: false,
        };
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        if let Err(e) = self.check_replicas_up(&target, &admin).await {
            return Err(match e {
                Error::StoreUnavailable { store, reason } => Error::StoreUnavailable {
                    store,
                    reason: format!(
                        "{reason}. The table '{name}' was not dropped: run DROP TABLE again \
                         once Fluss answers",
                        name = target.name
                    ),
                },
                other => other,
            });
        }
        match target
            .bounded("drop", admin.drop_table(&target.path, true))
            .await
        {
            Err(Error::StoreTableMissing { .. }) | Ok(()) => Ok(()),
            // No answer: the coordinator may still drop it. The Paimon table
            // is kept, and dropping it again finishes either way.
            Err(Error::StoreUnavailable { store, reason }) => Err(Error::StoreUnavailable {
                store,
                reason: format!(
                    "{reason}. The table '{name}' was not dropped, but Fluss may still drop its \
                     Fluss table once it answers: run DROP TABLE again then, which drops what \
                     is left",
                    name = target.name
                ),
            }),
            Err(e) => Err(e),
        }
    }

    async fn stop_tiering(&self, table: &Table) -> Result<()> {
        let target = self.target(table)?;
        // The coordinator's answer: a missing table is missing.
        let info = self.table_info(&target).await?;
        let was_on = tiering_on(&info);
        // Off first, then count: the lake snapshot the count starts from is
        // recorded only after Paimon committed it, so a count of nothing
        // means every row is in Paimon, and a round of the service that ran
        // meanwhile committed rows the count saw as tiered or as waiting.
        if was_on {
            self.set_tiering(&target, false).await?;
        }
        let waiting = self.untiered(&target, &info).await;
        match waiting {
            Ok(untiered) if untiered.waiting.is_empty() => Ok(()),
            other => {
                // The mode stays on: the service tiers the table again.
                let resumed = if was_on {
                    self.set_tiering(&target, true).await
                } else {
                    Ok(())
                };
                let untiered = other?;
                let records = untiered.records();
                let buckets = untiered
                    .waiting
                    .iter()
                    .map(|(bucket, from, to)| {
                        format!("bucket {bucket}: offsets {from} to {}", to - 1)
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let freshness = info
                    .get_properties()
                    .get("table.datalake.freshness")
                    .map_or_else(
                        || "Fluss's default of 3 minutes".to_string(),
                        |f| format!("'{f}'"),
                    );
                let name = &target.name;
                let mut wait = format!(
                    "Wait for Fluss's tiering service to tier them: it tiers the table every \
                     'table.datalake.freshness' ({freshness} for it), and each tiering commits \
                     a snapshot by '{TIERING_COMMIT_USER}' that {name}$snapshots shows. Stop \
                     writers to '{name}' first, or new rows wait too"
                );
                let restart = format!(
                    "turn the mode on again (ALTER TABLE {name} SET TBLPROPERTIES \
                     ('lakestream.enabled'='true')), which turns it on"
                );
                if let Err(e) = resumed {
                    wait = format!(
                        "Fluss's tiering of the table was turned off to count them and could \
                         not be turned on again ({e}): {restart}. {wait}"
                    );
                } else if !was_on {
                    wait = format!(
                        "Fluss's tiering of the table is off ('table.datalake.enabled' is not \
                         'true' on the Fluss table): {restart}. {wait}"
                    );
                }
                Err(Error::UntieredRows {
                    store: IDENTIFIER.to_string(),
                    table: name.clone(),
                    pending: format!("{records} change-log records ({buckets})"),
                    wait,
                })
            }
        }
    }

    async fn plan_read(&self, table: &Table, _mode: ScanMode) -> Result<StoreRead> {
        let target = self.target(table)?;
        match self.plan_log(table, target).await {
            Ok(read) => Ok(read),
            Err(e) => Err(self
                .explain_missing(table, &self.target(table)?, e, "read")
                .await),
        }
    }

    async fn write(
        &self,
        table: &Table,
        kind: WriteKind,
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        let target = self.target(table)?;
        self.write_rows(table, &target, kind, &batches).await
    }
}

impl FlussStore {
    /// Fixes a read of `table`'s log: the Fluss table as it is now, from the
    /// tiered snapshot's offsets to the latest ones.
    async fn plan_log(&self, table: &Table, mut target: Target) -> Result<StoreRead> {
        let shape = FlussShape::of(table)?;
        self.check_lake(&target).await?;
        let info = self.table_info(&target).await?;
        if let Some(reason) = shape.mismatch(&info) {
            return Err(FlussStoreError::Mismatch {
                table: target.name.clone(),
                reason,
            }
            .into());
        }
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        // From here on the read belongs to this Fluss table.
        target.planned = true;
        let target = Arc::new(target);
        let lake = match target
            .answer(
                "find the tiered snapshot of",
                admin.get_lake_snapshot(&target.path, None, Some(true)),
            )
            .await?
        {
            Ok(snapshot) => Some(snapshot),
            Err(e) if e.api_error() == Some(FlussError::LakeSnapshotNotExist) => None,
            Err(e) => return Err(target.fluss_error("find the tiered snapshot of", e)),
        };
        let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
        let ends = target
            .retrying("find the latest offsets of", || {
                admin.list_offsets(&target.path, &buckets, OffsetSpec::Latest)
            })
            .await?;
        // The lake snapshot of a table created again since `info` was read
        // says nothing about this one.
        if lake
            .as_ref()
            .is_some_and(|lake| lake.table_id != info.get_table_id())
        {
            return Err(target.replaced(
                "dropped and created again",
                "while this read was planned",
                "read again",
            ));
        }
        let (snapshot_id, tiered): (Option<i64>, HashMap<i32, i64>) = match &lake {
            Some(lake) => {
                let tiered = lake
                    .bucket_snapshots
                    .iter()
                    .filter(|b| b.partition_id.is_none())
                    .filter_map(|b| b.log_offset.map(|o| (b.bucket_id, o)))
                    .collect();
                lake::check_offsets(&target, lake.snapshot_id, &tiered, &ends)?;
                (
                    Some(lake::read_snapshot(table, lake.snapshot_id).await?),
                    tiered,
                )
            }
            None => (self.base_snapshot(table).await?, HashMap::new()),
        };
        let ranges = buckets
            .iter()
            .map(|bucket| BucketRange {
                bucket: *bucket,
                start: tiered
                    .get(bucket)
                    .copied()
                    .filter(|o| *o >= 0)
                    .unwrap_or(EARLIEST_OFFSET),
                end: ends.get(bucket).copied().unwrap_or(0),
            })
            .collect();
        Ok(StoreRead {
            snapshot_id,
            log: Arc::new(FlussLog {
                target,
                connection: Arc::clone(&self.connection),
                table_id: info.get_table_id(),
                ranges,
                log_schema: log_arrow_schema(table)?,
            }),
        })
    }
}

/// A server list (`h1:9123, h2:9123`) as a sorted set of addresses.
fn server_set(list: &str) -> Vec<String> {
    let mut servers: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    servers.sort();
    servers.dedup();
    servers
}

#[cfg(test)]
mod tests;
