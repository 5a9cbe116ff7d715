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
mod lease;
mod leftovers;
mod path;
mod root;
mod segment;
mod table;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use paimon::catalog::{Catalog, Identifier};
use paimon::table::Table;

pub(crate) use crate::failpoint::failpoint;
pub use root::{register_object_store, register_object_store_with_lease};
pub use table::TIER_USER;

use self::root::Root;
use self::table::{with_row_kind, PartsWriter};
use crate::error::{Error, Result};
use crate::maintenance;
use crate::object_storage::S3Options;
use crate::options::{self, parse_duration, parse_size};
use crate::store::{
    primary_keys, LakestreamStore, StoreContext, StoreFactory, StoreRead, StoreWrite, TierReport,
    WriteKind,
};

/// The identifier of the embedded store.
pub const LOCAL: &str = "local";

const PATH: &str = "path";
const TIER_INTERVAL: &str = "tier-interval";
const TIER_TARGET_SIZE: &str = "tier-target-size";
const TIER_MAX_DELAY: &str = "tier-max-delay";
const TIER_MAX_ROWS: &str = "tier-max-rows";
const LOG_RETENTION: &str = "log-retention";
const SEGMENT_SIZE: &str = "segment-size";
const LEASE_TTL: &str = "lease-ttl";
const KNOWN_OPTIONS: &[&str] = &[
    PATH,
    TIER_INTERVAL,
    TIER_TARGET_SIZE,
    TIER_MAX_DELAY,
    TIER_MAX_ROWS,
    LOG_RETENTION,
    SEGMENT_SIZE,
    LEASE_TTL,
];
/// Long enough that a holder renewing every third of it rides out a slow
/// request or two; short enough that a tierer that died is waited out
/// within half a minute.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);
/// A holder renews every third of its lease: below this, renewals would
/// crowd out the requests they protect.
const MIN_LEASE_TTL: Duration = Duration::from_secs(3);
/// Big enough that a part's fixed costs (a put, an fsync) are small beside
/// its rows; small enough that a write, a read and a tiering each hold a
/// few of them at once well within memory.
const DEFAULT_SEGMENT_SIZE: u64 = 32 << 20;
/// Long enough for a streaming read to ride out a pause, and for any write
/// to finish well within it (see `table.rs`: a write never lands below the
/// tiered position while it is younger than half of this).
const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(600);
const MIN_LOG_RETENTION: Duration = Duration::from_secs(1);
/// Short enough that a table reaching its target size is tiered within
/// seconds; a check is a listing of the log and a look at the newest
/// snapshot, cheap beside the round it may start.
const DEFAULT_TIER_INTERVAL: Duration = Duration::from_secs(5);
/// A round commits one snapshot (a manifest and at least one data file per
/// bucket written). This much of the store's (uncompressed Arrow) segments
/// makes Parquet files up to the size Paimon's writers aim for anyway
/// (`target-file-size`: 128 MB for primary-key tables, 256 MB for append
/// tables), so rounds no longer leave a trail of small files and manifests;
/// more would only lengthen the backlog every `t$rt` read goes through.
const DEFAULT_TIER_TARGET_SIZE: u64 = 128 << 20;
/// Fluss's default lake freshness (`table.datalake.freshness`) is 3
/// minutes; `t$rt` serves the rows meanwhile, so Paimon readers of `t`
/// alone see rows at most this much later (plus one check interval).
const DEFAULT_TIER_MAX_DELAY: Duration = Duration::from_secs(180);
const DEFAULT_TIER_MAX_ROWS: u64 = 2_000_000;

/// Options of the `local` store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOptions {
    /// Where the store keeps its files: a path or a URL.
    pub path: String,
    /// How often the writing process checks whether a table is due for
    /// tiering (see `tier_target_size`, `tier_max_delay`); `None`: no
    /// background tiering, only on demand.
    pub tier_interval: Option<Duration>,
    /// The background tierer tiers once the store holds this many bytes
    /// (on disk) of rows Paimon lacks ...
    pub tier_target_size: u64,
    /// ... or once the oldest of them has waited this long.
    pub tier_max_delay: Duration,
    /// Rows per tiering commit, at most (whole segments are never split).
    pub tier_max_rows: u64,
    /// How long segments stay after tiering passed them: streaming reads
    /// that fall behind by less go on from the log.
    pub log_retention: Duration,
    /// Bytes of rows (in memory) at which a write rolls into a new part.
    pub segment_size: u64,
    /// How long a tierer's lease on an object store (S3) lasts unless
    /// renewed: the longest that tiering, DROP and maintenance of a table
    /// wait for a tierer that died. Unused on local disk (a file lock).
    pub lease_ttl: Duration,
    /// The catalog's S3 options (`s3.endpoint`, keys, ...), for a `path` on
    /// S3: the store's bucket is reached as the warehouse is.
    pub s3: S3Options,
}

impl LocalOptions {
    /// Reads `local.<key>` options (prefix stripped). `warehouse` is the
    /// catalog's warehouse when it is a location (filesystem catalogs), the
    /// default parent of the store's directory.
    pub fn from_options(
        options: &BTreeMap<String, String>,
        warehouse: Option<&str>,
    ) -> Result<Self> {
        let invalid = |key: &str, reason: String| Error::InvalidOption {
            key: format!("{LOCAL}.{key}"),
            reason,
        };
        if let Some(key) = options
            .keys()
            .find(|k| !KNOWN_OPTIONS.contains(&k.as_str()))
        {
            return Err(invalid(
                key,
                format!(
                    "the local store has no such option; it knows: {}",
                    KNOWN_OPTIONS
                        .iter()
                        .map(|k| format!("{LOCAL}.{k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let path = match (options.get(PATH), warehouse) {
            (Some(path), _) if !path.trim().is_empty() => path.clone(),
            (Some(_), _) => return Err(invalid(PATH, "is empty".to_string())),
            (None, Some(warehouse)) => format!("{}/_lakestream", warehouse.trim_end_matches('/')),
            (None, None) => {
                return Err(invalid(
                    PATH,
                    "is needed: the catalog has no warehouse directory to put the store under \
                     (a REST catalog's warehouse is a name, not a directory)"
                        .to_string(),
                ))
            }
        };
        let tier_interval = match options.get(TIER_INTERVAL).map(|v| v.trim()) {
            None => Some(DEFAULT_TIER_INTERVAL),
            Some(off) if off.eq_ignore_ascii_case("off") => None,
            Some(text) => {
                let interval = parse_duration(text).map_err(|r| invalid(TIER_INTERVAL, r))?;
                if interval.is_zero() {
                    return Err(invalid(
                        TIER_INTERVAL,
                        "must be above zero, or 'off'".to_string(),
                    ));
                }
                Some(interval)
            }
        };
        let tier_target_size = match options.get(TIER_TARGET_SIZE) {
            None => DEFAULT_TIER_TARGET_SIZE,
            Some(text) => {
                let size = parse_size(text).map_err(|r| invalid(TIER_TARGET_SIZE, r))?;
                if size == 0 {
                    return Err(invalid(
                        TIER_TARGET_SIZE,
                        "must be above zero ('1b': tier whenever a row waits)".to_string(),
                    ));
                }
                size
            }
        };
        let tier_max_delay = match options.get(TIER_MAX_DELAY) {
            None => DEFAULT_TIER_MAX_DELAY,
            Some(text) => {
                let delay = parse_duration(text).map_err(|r| invalid(TIER_MAX_DELAY, r))?;
                if delay.is_zero() {
                    return Err(invalid(TIER_MAX_DELAY, "must be above zero".to_string()));
                }
                delay
            }
        };
        let tier_max_rows = match options.get(TIER_MAX_ROWS) {
            None => DEFAULT_TIER_MAX_ROWS,
            Some(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    invalid(TIER_MAX_ROWS, format!("'{text}' is not a positive number"))
                })?,
        };
        // A duration of at least `min`, `default` when not given.
        let duration_at_least = |key: &str, default: Duration, min: Duration| {
            let Some(text) = options.get(key) else {
                return Ok(default);
            };
            let duration = parse_duration(text).map_err(|r| invalid(key, r))?;
            if duration < min {
                return Err(invalid(key, format!("must be at least {min:?}")));
            }
            Ok(duration)
        };
        let log_retention =
            duration_at_least(LOG_RETENTION, DEFAULT_LOG_RETENTION, MIN_LOG_RETENTION)?;
        let segment_size = match options.get(SEGMENT_SIZE) {
            None => DEFAULT_SEGMENT_SIZE,
            Some(text) => {
                let size = parse_size(text).map_err(|r| invalid(SEGMENT_SIZE, r))?;
                if size == 0 {
                    return Err(invalid(SEGMENT_SIZE, "must be above zero".to_string()));
                }
                size
            }
        };
        let lease_ttl = duration_at_least(LEASE_TTL, DEFAULT_LEASE_TTL, MIN_LEASE_TTL)?;
        Ok(Self {
            path,
            tier_interval,
            tier_target_size,
            tier_max_delay,
            tier_max_rows,
            log_retention,
            segment_size,
            lease_ttl,
            s3: S3Options::default(),
        })
    }
}

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

/// The `local` store's options in a catalog's store context: `path`
/// defaults under the warehouse of a filesystem catalog.
fn local_options(context: &StoreContext) -> Result<LocalOptions> {
    let filesystem = context
        .catalog_options
        .get("metastore")
        .is_none_or(|m| m.eq_ignore_ascii_case("filesystem"));
    let warehouse = context
        .catalog_options
        .get("warehouse")
        .filter(|_| filesystem)
        .map(String::as_str);
    let mut options = LocalOptions::from_options(&context.options, warehouse)?;
    options.s3 = S3Options::from_options(&context.catalog_options);
    Ok(options)
}

/// Where the `local` store of a catalog keeps its files, as a table's store
/// binding records it: the root's URL, without credentials, and for local
/// disk with symbolic links resolved, so two paths to one directory are one
/// store (and two directories are two, whatever their paths look like).
fn binding_location(context: &StoreContext) -> Result<String> {
    let options = local_options(context)?;
    let mut url = root::to_url(&options.path)?;
    if let Ok(dir) = url.to_file_path() {
        if let Ok(resolved) = url::Url::from_directory_path(resolve_links(&dir)) {
            url = resolved;
        }
    }
    // Secrets never print: user, password, query and fragment go.
    Ok(root::display_url(&url))
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
                let state = self.store.root.table(self.table.identifier());
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
        let state = self.store.root.table(self.table.identifier());
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

/// Checks one table every `interval` while the store lives and the table is
/// a lake-stream table, and tiers it when a round is due (see
/// [`Inner::due`]).
///
/// A round that fails is logged (`log` target [`TIERING_LOG`], a warning
/// naming the table, its location and the error), and the next is tried
/// after a wait that doubles with each failure in a row, up to
/// `tier-max-delay` (see [`Backoff`]): a failure that lasts (a damaged
/// segment, a warehouse that refuses writes) neither goes unseen nor
/// repeats its work every tick. After a failure the next round runs when
/// its wait is over, due or not, and the first that works is logged as
/// information. A round that committed its rows and then failed its
/// maintenance (compaction, expiry) is a warning that says so, and no
/// failure of tiering.
async fn background_tiering(store: Weak<Inner>, identifier: Identifier, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut backoff = Backoff::default();
    loop {
        let now = ticker.tick().await;
        let Some(store) = store.upgrade() else { return };
        if !backoff.due(now) {
            continue;
        }
        let name = identifier.full_name();
        let cap = store.options.tier_max_delay;
        let table = match store.catalog.get_table(&identifier).await {
            Ok(table) if options::is_enabled(table.schema().options()) => table,
            // Dropped or turned off: this tierer's work is over.
            Ok(_) | Err(paimon::Error::TableNotExist { .. }) => break,
            Err(e) => {
                let what = format!("'{name}' (loading the table)");
                backoff.failed(&name, &what, &e.into(), (now, interval, cap));
                continue;
            }
        };
        // A failure leaves everything in place for the next round.
        let round = match backoff.failures {
            0 => match store.due(&table).await {
                Ok(true) => store.tier(&table).await.map(Some),
                Ok(false) => Ok(None),
                Err(e) => Err(e),
            },
            _ => store.tier(&table).await.map(Some),
        };
        let what = format!("'{name}' ({})", table.location());
        match round {
            Ok(Some(report)) => backoff.worked(&what, report.rows),
            Ok(None) => {}
            Err(e @ Error::MaintenanceFailed { .. }) => backoff.maintenance_failed(&what, &e),
            Err(e) => backoff.failed(&name, &what, &e, (now, interval, cap)),
        }
    }
    if let Some(store) = store.upgrade() {
        store
            .tiering
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&identifier);
    }
}

/// Takes the schema lease of database `database` in the S3 warehouse at
/// `warehouse` (reached with `s3`), waiting while another process holds
/// it: the tiering lease's mechanism ([`lease::Lease`]) on the objects
/// `<warehouse>/_lakestream/schema-lock/<database>/lease/`, for
/// `crate::object_storage`'s schema lock. Held until dropped; it lasts
/// the default lease length (30 s) unless renewed, which its holder does.
/// paimon lists only `*.db` directories as databases, so the objects are
/// never taken for one.
#[cfg(feature = "s3")]
pub(crate) async fn schema_lease(
    warehouse: &str,
    s3: &S3Options,
    database: &str,
) -> Result<lease::Lease> {
    let root = Root::open(warehouse, s3, DEFAULT_LEASE_TTL)?;
    // A server that ignores the condition would hand the lease to all.
    root.check_create_if_absent().await?;
    let dir = object_store::path::Path::from_iter(["_lakestream", "schema-lock", database]);
    lease::Lease::acquire(&root, &dir, DEFAULT_LEASE_TTL).await
}

/// The `log` target of the background tierer's reports.
pub const TIERING_LOG: &str = "paimon_lakestream::tiering";

/// How a table's background tierer spaces its rounds while they fail: after
/// the `n`th failure in a row it waits `interval * 2^(n-1)`, at most
/// `tier-max-delay` (and never less than `interval`).
#[derive(Debug, Default)]
struct Backoff {
    /// Failures in a row.
    failures: u32,
    /// No round before this.
    until: Option<tokio::time::Instant>,
}

impl Backoff {
    fn due(&self, now: tokio::time::Instant) -> bool {
        self.until.is_none_or(|until| now >= until)
    }

    /// The wait after the `failures`th failure in a row.
    fn wait(failures: u32, interval: Duration, cap: Duration) -> Duration {
        let doubled = interval.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        doubled.min(cap).max(interval)
    }

    /// Records a failure to tier table `name` (described as `what`) in the
    /// round of the tick at `now`, and logs it.
    fn failed(
        &mut self,
        name: &str,
        what: &str,
        error: &Error,
        (now, interval, cap): (tokio::time::Instant, Duration, Duration),
    ) {
        self.failures = self.failures.saturating_add(1);
        let wait = Self::wait(self.failures, interval, cap);
        self.until = Some(now + wait);
        log::warn!(
            target: TIERING_LOG,
            "background tiering of {what} failed ({} in a row, next try in {}): {error}. Until \
             a round works, the rows waiting in the store are not in '{name}'; `CALL \
             sys.lakestream_tier('{name}')` runs a round and returns its error",
            self.failures,
            humantime(wait),
        );
    }

    /// Records a round that worked, and logs it if rounds failed before.
    fn worked(&mut self, what: &str, rows: u64) {
        if self.failures > 0 {
            log::info!(
                target: TIERING_LOG,
                "background tiering of {what} works again after {}: it tiered {rows} rows",
                rounds(self.failures),
            );
        }
        *self = Self::default();
    }

    /// Records a round that committed its rows, then failed the
    /// maintenance after the commit, and logs it.
    fn maintenance_failed(&mut self, what: &str, error: &Error) {
        log::warn!(
            target: TIERING_LOG,
            "background tiering of {what}: {error}. The rows it tiered are in the table; the \
             maintenance runs again after the next round that commits, or with `CALL sys.compact`"
        );
        *self = Self::default();
    }
}

/// `n` failed rounds, in words.
fn rounds(n: u32) -> String {
    match n {
        1 => "1 failed round".to_string(),
        n => format!("{n} failed rounds"),
    }
}

/// `duration` as `250ms`, `20s` or `3min`.
fn humantime(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 || !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) {
        format!("{}min", ms / 60_000)
    } else {
        format!("{}s", ms / 1000)
    }
}

impl Inner {
    /// Starts the background tierer of `table` in this process, once.
    fn ensure_tiering(self: &Arc<Self>, identifier: &Identifier) {
        let Some(interval) = self.options.tier_interval else {
            return;
        };
        let first = self
            .tiering
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(identifier.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if first {
            let weak = Arc::downgrade(self);
            runtime.spawn(background_tiering(weak, identifier.clone(), interval));
        }
    }

    /// Whether the background tierer should tier `table` now: the rows
    /// Paimon lacks reach `local.tier-target-size` on disk, or the oldest
    /// of them has waited `local.tier-max-delay`. Both come from the
    /// store's files (the log's listing), never from what this process
    /// wrote: other processes write the same tables.
    async fn due(&self, table: &Table) -> Result<bool> {
        let waiting = self.root.table(table.identifier()).waiting(table).await?;
        Ok(waiting.due(
            self.options.tier_target_size,
            self.options.tier_max_delay,
            table::now_ms(),
        ))
    }

    /// Tiers `table` (first removing what killed writers left in its store
    /// table once a day old: [`leftovers`]), then, when the round
    /// committed, runs the maintenance
    /// after a commit ([`maintenance::after_commit`]: what the table's
    /// `lakestream.maintenance` lists, past Paimon's thresholds) under the
    /// table's tiering locks, as `CALL`ed maintenance does. A
    /// compaction or expiry that fails leaves the table readable, and says
    /// so after what the tiering did.
    async fn tier(&self, table: &Table) -> Result<TierReport> {
        let state = self.root.table(table.identifier());
        let report = state
            .tier(
                table,
                &self.options.s3,
                self.options.tier_max_rows,
                // Paimon's writers buffer a few segments' worth at most.
                self.options.segment_size.saturating_mul(2),
                self.options.log_retention,
            )
            .await?;
        if report.commits == 0 {
            return Ok(report);
        }
        let failed = |what: &str, e: Error| {
            Error::MaintenanceFailed {
            table: table.identifier().full_name(),
            reason: format!(
                "tiering committed {} rows in {} snapshots up to position {}, then {what}                  failed (the next round tries again): {e}",
                report.rows, report.commits, report.position
            ),
        }
        };
        let auto = options::AutoMaintenance::of_table(
            &table.identifier().full_name(),
            table.schema().options(),
        )
        .map_err(|e| failed("reading its maintenance option", e))?;
        state
            // Boxed: maintenance futures are large, and a caller's stack in
            // a debug build is not.
            .with_tiering_lock(Box::pin(async {
                Ok(maintenance::after_commit(table, auto).await)
            }))
            .await
            .map_err(|e| failed("taking the tiering lock for maintenance", e))?
            .map_err(|f| failed(f.step, f.error))?;
        Ok(report)
    }
}

/// `dir` with symbolic links resolved as far as it exists: its nearest
/// existing ancestor canonicalized, the rest appended.
fn resolve_links(dir: &std::path::Path) -> std::path::PathBuf {
    let mut rest = Vec::new();
    let mut existing = dir;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            return rest
                .iter()
                .rev()
                .fold(canonical, |path, part| path.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return dir.to_path_buf(),
        }
    }
}

#[async_trait]
impl LakestreamStore for LocalStore {
    fn identifier(&self) -> &str {
        LOCAL
    }

    async fn attach_table(&self, table: &Table) -> Result<()> {
        self.inner
            .root
            .table(table.identifier())
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
        self.inner.root.table(table).with_tiering_lock(work).await
    }

    /// The Paimon table goes first, under the store's locks: a drop cut
    /// short leaves store files of a dropped table (never served, replaced
    /// when the name is created again), never a table without its store.
    async fn drop_with_catalog(
        &self,
        identifier: &Identifier,
        drop_in_catalog: BoxFuture<'_, Result<()>>,
    ) -> Result<()> {
        self.inner
            .root
            .table(identifier)
            .drop_with(drop_in_catalog)
            .await
    }

    async fn plan_read(&self, table: &Table) -> Result<StoreRead> {
        let log = self
            .inner
            .root
            .table(table.identifier())
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
        let store = self.inner.root.table(table.identifier());
        store.pending_rows(table).await
    }

    /// Moves the damaged segment at `position` of `table` aside, so reads
    /// and tiering go on past it (its rows are lost); says what it held.
    async fn set_aside(&self, table: &Table, position: u64) -> Result<String> {
        let store = self.inner.root.table(table.identifier());
        store.set_aside(table, position).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::map_of as opts;

    #[test]
    fn failed_rounds_wait_twice_as_long_each_time_up_to_the_cap() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (1..=6)
            .map(|n| Backoff::wait(n, ms(100), ms(1_000)))
            .collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1_000), ms(1_000)]
        );
        // Never shorter than the interval, however small the cap; no
        // overflow after very many failures.
        assert_eq!(Backoff::wait(3, ms(100), ms(0)), ms(100));
        assert_eq!(
            Backoff::wait(u32::MAX, Duration::from_secs(5), Duration::from_secs(180)),
            Duration::from_secs(180)
        );
        assert_eq!(humantime(ms(250)), "250ms");
        assert_eq!(humantime(ms(20_000)), "20s");
        assert_eq!(humantime(ms(180_000)), "3min");
        assert_eq!(humantime(ms(1_500)), "1500ms");
    }

    #[test]
    fn options_default_under_the_warehouse() {
        let o = LocalOptions::from_options(&opts(&[]), Some("/w/")).unwrap();
        assert_eq!(o.path, "/w/_lakestream");
        assert_eq!(o.tier_interval, Some(Duration::from_secs(5)));
        assert_eq!(o.tier_target_size, 128 << 20);
        assert_eq!(o.tier_max_delay, Duration::from_secs(180));
        assert_eq!(o.tier_max_rows, 2_000_000);
        assert_eq!(o.log_retention, Duration::from_secs(600));
        assert_eq!(o.segment_size, 32 << 20);
        assert_eq!(o.lease_ttl, Duration::from_secs(30));
        let o = LocalOptions::from_options(
            &opts(&[
                ("path", "memory://x"),
                ("tier-interval", "OFF"),
                ("tier-max-rows", "10"),
                ("tier-target-size", "16kb"),
                ("tier-max-delay", "2min"),
                ("lease-ttl", "5s"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(o.lease_ttl, Duration::from_secs(5));
        assert_eq!(o.path, "memory://x");
        assert_eq!(o.tier_interval, None);
        assert_eq!(o.tier_max_rows, 10);
        assert_eq!(o.tier_target_size, 16 << 10);
        assert_eq!(o.tier_max_delay, Duration::from_secs(120));
    }

    #[test]
    fn bad_options_name_the_key() {
        for (pairs, key) in [
            (vec![("pathh", "x")], "local.pathh"),
            (vec![("path", " ")], "local.path"),
            (vec![("tier-interval", "0s")], "local.tier-interval"),
            (vec![("tier-interval", "soon")], "local.tier-interval"),
            (vec![("tier-max-rows", "0")], "local.tier-max-rows"),
            (vec![("tier-target-size", "0")], "local.tier-target-size"),
            (vec![("tier-target-size", "huge")], "local.tier-target-size"),
            (vec![("tier-target-size", "5s")], "local.tier-target-size"),
            (vec![("tier-max-delay", "0s")], "local.tier-max-delay"),
            (vec![("tier-max-delay", "never")], "local.tier-max-delay"),
            (vec![("tier-max-delay", "64mb")], "local.tier-max-delay"),
            (vec![("log-retention", "500ms")], "local.log-retention"),
            (vec![("log-retention", "later")], "local.log-retention"),
            (vec![("segment-size", "0")], "local.segment-size"),
            (vec![("segment-size", "big")], "local.segment-size"),
            (vec![("lease-ttl", "2s")], "local.lease-ttl"),
            (vec![("lease-ttl", "forever")], "local.lease-ttl"),
        ] {
            let err = LocalOptions::from_options(&opts(&pairs), Some("/w"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{err}");
        }
        let err = LocalOptions::from_options(&opts(&[]), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("warehouse"), "{err}");
        // An unknown option lists the new ones.
        let err = LocalOptions::from_options(&opts(&[("tier-size", "1mb")]), Some("/w"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("local.tier-target-size") && err.contains("local.tier-max-delay"),
            "{err}"
        );
    }

    #[test]
    fn a_round_is_due_at_the_target_size_or_the_max_delay() {
        let delay = Duration::from_secs(180);
        let nothing = table::Waiting::default();
        assert!(!nothing.due(1, delay, i64::MAX));
        let young = table::Waiting {
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
