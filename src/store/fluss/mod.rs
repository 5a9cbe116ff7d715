//! The Apache Fluss store (cargo feature `fluss`): a lake-stream table `db.t`
//! is the Fluss table `db.t`, and Fluss's own tiering service writes it into
//! the Paimon table `db.t`.
//!
//! - Attaching creates (or checks) the Fluss table with the Paimon table's
//!   columns, primary key and buckets, gives the Paimon table the shape Fluss
//!   tiers into (its system columns and options, see `schema`), and turns
//!   `table.datalake.enabled` on.
//! - Reads follow Fluss's own union read: the readable lake snapshot gives the
//!   Paimon snapshot (or a newer one others committed on top, see `lake`)
//!   and, per bucket, the log offset tiering has reached (exclusive); the log
//!   is read from there to the latest offset fixed now (`log`, `probe`).
//! - Writes go through fluss-rs and return once Fluss acknowledged them. A
//!   write that did not settle leaves fluss-rs's writer client open for
//!   good, since closing it can hang (see `writer::Unsettled`).
//! - Turning the mode off ([`LakestreamStore::stop_tiering`]) first counts,
//!   per bucket, the log after the offsets of the newest lake snapshot, and
//!   refuses with the count while any record waits, touching nothing. With
//!   none, it turns `table.datalake.enabled` off and counts again. Fluss
//!   records a lake snapshot only after Paimon committed it, so nothing
//!   counted means every row is in Paimon, whatever a tiering round running
//!   meanwhile does; anything counted (a write that came in between) turns
//!   tiering back on and refuses, with the count. Rows that
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
//!   a writer made for another; a read plans on a description it kept only
//!   once Fluss names that id and schema again, and stays on the id it was
//!   planned on.
//!   A write that sent nothing before finding its table re-created is tried
//!   once more; one that had sent rows is not, and its error says what
//!   became of them (gone with the dropped table, or unknown).
//!
//! fluss-rs speaks arrow 59; `arrow_bridge` crosses to arrow 58.
//!
//! The modules, one concern each: `connection` (the factory, and an admin
//! client that finds the coordinator again), `error` (the store's errors),
//! `target` (one table's calls, bounded by the request timeout and retried
//! while Fluss says "not yet"), `identity` (whose tables these are, and what
//! a missing one means), `writer` (the writer cache and what a failed write
//! sent), `attach` (creating the Fluss table, copying Paimon's rows into it,
//! tiering on and off), `schema`, `lake`, `log`, `probe` and `arrow_bridge`;
//! this file holds the store and the [`LakestreamStore`] calls.

mod arrow_bridge;
mod attach;
mod connection;
mod error;
mod identity;
mod lake;
mod log;
mod options;
mod overlap;
mod probe;
mod schema;
mod target;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
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
    table_arrow_schema, Capabilities, LakestreamStore, StoreContext, StoreFactory, StoreRead,
    Tiering, WriteKind,
};
use crate::error::{Error, Result};
use crate::retry::{Retry, Try};

use self::attach::TAKE_IN_WAIT;
pub use self::connection::FlussStoreFactory;
pub use self::error::FlussStoreError;
pub use self::schema::SYSTEM_COLUMNS;
use self::{connection::*, error::*, identity::*, target::*, writer::*};

/// The store's identifier, as catalogs name it in `lakestream.store`.
pub const IDENTIFIER: &str = "fluss";

/// The `log` target of what the store works around in the cluster (a new
/// table Fluss's coordinator missed, see `attach.rs`).
pub const FLUSS_LOG: &str = "paimon_lakestream::fluss";

/// The store: one connection to a Fluss cluster, shared by its tables.
pub struct FlussStore {
    options: FlussOptions,
    connection: Arc<FlussConnection>,
    catalog: Arc<dyn Catalog>,
    /// The Paimon catalog this store serves, to compare with Fluss's.
    lake: LakeCatalog,
    lake_checked: tokio::sync::OnceCell<()>,
    writers: Mutex<HashMap<Identifier, Arc<Writer>>>,
    /// The last description of each Fluss table a read was planned on: what
    /// a read plans on while Fluss still names that table (`plan_known`).
    described: std::sync::Mutex<HashMap<TablePath, TableInfo>>,
}

impl fmt::Debug for FlussStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlussStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Whether Fluss's tiering service tiers the Fluss table `info`.
fn tiering_on(info: &TableInfo) -> bool {
    info.get_properties()
        .get(DATALAKE_ENABLED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The refusal of a turn-off while `untiered` records wait, with how long
/// to wait for them; `note` first, what became of the table's tiering when
/// it was not left as it was.
fn untiered_error(
    target: &Target,
    info: &TableInfo,
    untiered: &attach::Untiered,
    note: Option<String>,
) -> Error {
    let records = untiered.records();
    let buckets = untiered
        .waiting
        .iter()
        .map(|(bucket, from, to)| format!("bucket {bucket}: offsets {from} to {}", to - 1))
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
    let wait = format!(
        "Wait for Fluss's tiering service to tier them: it tiers the table every \
         'table.datalake.freshness' ({freshness} for it), so they are in Paimon within about \
         that long while the service runs, and each tiering commits a snapshot by \
         '{TIERING_COMMIT_USER}' that {name}$snapshots shows. Stop writers to '{name}' first, \
         or new rows wait too"
    );
    let note = note.unwrap_or_else(|| {
        "Nothing was changed: Fluss goes on tiering the table and taking its writes.".to_string()
    });
    let wait = format!("{note} {wait}");
    Error::UntieredRows {
        store: IDENTIFIER.to_string(),
        table: name.clone(),
        pending: format!("{records} change-log records ({buckets})"),
        wait,
    }
}

/// The error of a `DROP TABLE` that found its Fluss table dropped and made
/// again (another table id) by another process while it checked it.
fn replaced_while_dropping(target: &Target) -> Error {
    target.replaced(
        "dropped and created again",
        "while this DROP ran",
        "the table made again was not dropped. Run DROP TABLE again to drop it",
    )
}

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

    /// Refuses to drop a table while one of its replicas is on a tablet
    /// server the coordinator knows to be down: Fluss 0.9.1 cannot start that
    /// server again afterwards (it fails recovering the dropped table's
    /// replica). Seen from here, a replica is down when fewer tablet servers
    /// are up than the table keeps replicas, or when a bucket of an
    /// unpartitioned table has no leader among them. A server killed a moment
    /// ago still counts as up until its coordinator session expires.
    ///
    /// Buckets without any leader while no server is known down are checked
    /// against the coordinator first: another process may have dropped the
    /// table (nothing left to drop here), dropped and created it again (its
    /// table id changed: refused, naming that), or just created it (Fluss
    /// gives a new table's buckets leaders within a second, waited for).
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
            let leaders = match self.bucket_leaders(target, &info).await {
                Ok(leaders) => leaders,
                // Fluss fails the metadata of a table dropped meanwhile.
                Err(e) => {
                    return match self.table_info(target).await {
                        Err(Error::StoreTableMissing { .. }) => Ok(()),
                        Ok(now) if now.get_table_id() != info.get_table_id() => {
                            Err(replaced_while_dropping(target))
                        }
                        _ => Err(e),
                    }
                }
            };
            let on_down: Vec<i32> = leaders
                .iter()
                .filter(|(_, leader)| leader.is_some_and(|id| !up.contains(&id)))
                .map(|(bucket, _)| *bucket)
                .collect();
            let mut leaderless: Vec<i32> = leaders
                .iter()
                .filter(|(_, leader)| leader.is_none())
                .map(|(bucket, _)| *bucket)
                .collect();
            if on_down.is_empty() && !leaderless.is_empty() {
                // No leader, and no server known to be down: the table at
                // the path may not be the one described a moment ago
                // (another process dropped it, or dropped and created it
                // again), or a new one Fluss is still giving leaders.
                let now = match self.table_info(target).await {
                    Ok(now) => now,
                    Err(Error::StoreTableMissing { .. }) => return Ok(()),
                    Err(e) => return Err(e),
                };
                if now.get_table_id() != info.get_table_id() {
                    return Err(replaced_while_dropping(target));
                }
                leaderless = self
                    .leaderless_within(target, &now, TAKE_IN_WAIT.min(target.request_timeout))
                    .await?;
            }
            if !on_down.is_empty() {
                down = Some(format!(
                    "buckets {on_down:?} have their leader on a tablet server that is not up"
                ));
            } else if !leaderless.is_empty() {
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

    /// The leader (a tablet server's id) of each bucket of the unpartitioned
    /// table at the target's path, from metadata fetched now; `None` for a
    /// bucket without one.
    async fn bucket_leaders(
        &self,
        target: &Target,
        info: &TableInfo,
    ) -> Result<Vec<(i32, Option<i32>)>> {
        let metadata = self.connection.get_metadata();
        target
            .retrying_when(
                "find the bucket leaders of",
                or_connection_errors(2),
                || metadata.update_table_metadata(&target.path),
            )
            .await?;
        let cluster = metadata.get_cluster();
        // The table at the path now: it may have been dropped and made again.
        let table_id = cluster
            .get_table_id(&target.path)
            .unwrap_or_else(|| info.get_table_id());
        Ok((0..info.get_num_buckets())
            .map(|bucket| {
                let bucket_id = fluss::metadata::TableBucket::new(table_id, bucket);
                (
                    bucket,
                    cluster.leader_for(&bucket_id).map(fluss::ServerNode::id),
                )
            })
            .collect())
    }

    async fn table_info(&self, target: &Target) -> Result<TableInfo> {
        let admin = target.admin(&self.connection).await?;
        // fluss-rs follows the coordinator's answer with a metadata refresh
        // from a tablet server it picks at random.
        target
            .retrying_when("describe", or_connection_errors(2), || {
                admin.get_table_info(&target.path)
            })
            .await
    }
}

/// How attaching looks for the Fluss table, or creates it, again when
/// another process creating it at the same moment made Fluss refuse the
/// create or fail to describe the table: three tries in all, 100 ms and
/// then 200 ms apart.
const CREATE_AGAIN: Retry =
    Retry::growing(3, Duration::from_millis(100), Duration::from_millis(200));

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
        // Another process may create the Fluss table at the same moment:
        // Fluss then refuses this create (as existing, or as a schema it
        // failed to register), or fails to describe the table it is still
        // creating; another look finds the table.
        let created = CREATE_AGAIN
            .run(|| async {
                match self.table_info(&target).await {
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
                        Ok(Try::Done(false))
                    }
                    Err(Error::StoreTableMissing { .. }) => {
                        match self.create_fluss_table(&target, &shape).await {
                            Ok(()) => {
                                // Before any write: copying the Paimon rows
                                // needs the buckets' leaders.
                                self.until_created_taken_in(&target, &shape).await?;
                                Ok(Try::Done(true))
                            }
                            Err(e) => Ok(Try::Again(e)),
                        }
                    }
                    Err(e) if !e.kind().is_users_to_fix() => Ok(Try::Again(e)),
                    Err(e) => Err(e),
                }
            })
            .await?;
        let finished = async {
            if created && target.primary_key {
                self.load_paimon_rows(table, &target).await?;
            }
            self.finish_attach(&target, table.identifier()).await
        }
        .await;
        let refused = finished
            .as_ref()
            .err()
            .is_some_and(|e| e.kind().is_users_to_fix());
        if refused && created {
            // Best effort: a table the store refused must not pin a schema
            // for the next attempt. The attach error is the one to report.
            // Without an answer the table stays: another process's `CREATE
            // TABLE IF NOT EXISTS` may have attached it and written to it,
            // and the next attempt attaches it again.
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
        let admin = target.admin(&self.connection).await?;
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
        if was_on {
            // Counted first, with tiering left on: while records wait, the
            // turn-off is refused without touching the table, so retrying
            // it (as its error advises) neither holds tiering back nor
            // fails the table's writes.
            let untiered = self.untiered(&target, &info).await?;
            if !untiered.waiting.is_empty() {
                return Err(untiered_error(&target, &info, &untiered, None));
            }
            // Off, then counted again: the lake snapshot the count starts
            // from is recorded only after Paimon committed it, so a count of
            // nothing means every row is in Paimon, and a round of the
            // service that ran meanwhile committed rows the count saw as
            // tiered or as waiting.
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
                let restart = format!(
                    "turn the mode on again (ALTER TABLE {name} SET TBLPROPERTIES \
                     ('lakestream.enabled'='true')), which turns it on",
                    name = target.name
                );
                let note = if let Err(e) = resumed {
                    Some(format!(
                        "Fluss's tiering of the table was turned off to count them and could \
                         not be turned on again ({e}): {restart}."
                    ))
                } else if !was_on {
                    Some(format!(
                        "Fluss's tiering of the table is off ('table.datalake.enabled' is not \
                         'true' on the Fluss table): {restart}."
                    ))
                } else {
                    None
                };
                Err(untiered_error(&target, &info, &untiered, note))
            }
        }
    }

    async fn plan_read(&self, table: &Table) -> Result<StoreRead> {
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
    /// tiered snapshot's offsets to the latest ones. A table this process
    /// described before is planned on that description when Fluss still
    /// names it ([`Self::plan_known`]); otherwise the description is asked
    /// alongside the lake snapshot, and the latest offsets of the buckets it
    /// names once both answered (see `overlap`).
    async fn plan_log(&self, table: &Table, target: Target) -> Result<StoreRead> {
        let shape = FlussShape::of(table)?;
        self.check_lake(&target).await?;
        let admin = target.admin(&self.connection).await?;
        let known = self
            .described
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&target.path)
            .cloned();
        if let Some(info) = known.filter(|info| shape.mismatch(info).is_none()) {
            if let Some(read) = self.plan_known(table, &target, &admin, info).await? {
                return Ok(read);
            }
        }
        // The lake snapshot and the offsets are asked of the table the
        // description names: a table missing to them was dropped meanwhile
        // (the description's own error comes first, and says whether the
        // table was there at all).
        let planned = Target {
            planned: true,
            ..target.clone()
        };
        let describe = self.table_info(&target);
        let lake = lake_snapshot(&admin, &planned);
        // The offsets of the buckets the description names, asked once it
        // and the lake snapshot answered (see `overlap`).
        let latest = |info: &TableInfo| latest_offsets(&admin, &planned, info.get_num_buckets());
        let (info, lake, (buckets, ends)) = overlap::plan_calls(describe, lake, latest).await?;
        if let Some(reason) = shape.mismatch(&info) {
            return Err(FlussStoreError::Mismatch {
                table: target.name.clone(),
                reason,
            }
            .into());
        }
        self.described
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(target.path.clone(), info.clone());
        self.plan_from(table, planned, info, lake, buckets, ends)
            .await
    }

    /// [`Self::plan_log`] on the description `info` this process had: the
    /// lake snapshot, the table id any server reads from Fluss's metadata,
    /// and the latest offsets, all at once, with no description asked first.
    /// `None` when they do not all name `info`'s table (id and schema), or
    /// the offsets are below what the lake snapshot tiered (asked before it
    /// answered, they may be older): the full planning then looks again and
    /// says what changed. An unreachable cluster is the read's error.
    ///
    /// The table id is read from Fluss's own metadata (ZooKeeper, through
    /// any server) after the read began: a table dropped before is not read.
    /// The offsets may be asked before the lake snapshot answers; each must
    /// be at or past what the lake snapshot tiered, or the full planning
    /// asks again. Paimon's snapshot and the log from there to the offsets
    /// then hold every row the log had when they were asked.
    async fn plan_known(
        &self,
        table: &Table,
        target: &Target,
        admin: &fluss::client::FlussAdmin,
        info: TableInfo,
    ) -> Result<Option<StoreRead>> {
        let metadata = self.connection.get_metadata();
        let id = info.get_table_id();
        let unavailable = |e: &Error| e.kind() == crate::error::ErrorKind::Unavailable;
        // Whether Fluss still names the described table. Any other answer is
        // for the full planning to look into (it asks the coordinator, and
        // says what changed), at once: the other calls are not waited for.
        let current = async {
            let fetched = target
                .retrying_when("describe", or_connection_errors(2), || {
                    metadata.fetch_table_id(&target.path)
                })
                .await;
            match fetched {
                Ok(current) if current == Some(id) => ControlFlow::Continue(()),
                Ok(_) => ControlFlow::Break(Ok(None)),
                Err(e) if unavailable(&e) => ControlFlow::Break(Err(e)),
                Err(_) => ControlFlow::Break(Ok(None)),
            }
        };
        let rest = futures::future::join(
            lake_snapshot(admin, target),
            latest_offsets(admin, target, info.get_num_buckets()),
        );
        let (lake, latest) = match overlap::unless(current, rest).await {
            ControlFlow::Continue(answers) => answers,
            ControlFlow::Break(decided) => return decided,
        };
        let (lake, (buckets, ends)) = match (lake, latest) {
            (Ok(lake), Ok(latest)) => (lake, latest),
            (Err(e), _) | (_, Err(e)) if unavailable(&e) => return Err(e),
            _ => return Ok(None),
        };
        // The description the offsets' own metadata refresh brought.
        let refreshed = metadata
            .get_cluster()
            .opt_get_table(&target.path)
            .map(|now| (now.get_table_id(), now.get_schema_id()));
        let tiered_past_ends = lake
            .as_ref()
            .is_some_and(|lake| !lake::past_ends(&lake::tiered_offsets(lake), &ends).is_empty());
        let same = lake.as_ref().is_none_or(|lake| lake.table_id == id)
            && refreshed == Some((id, info.get_schema_id()));
        if !same || tiered_past_ends {
            return Ok(None);
        }
        let planned = Target {
            planned: true,
            ..target.clone()
        };
        self.plan_from(table, planned, info, lake, buckets, ends)
            .await
            .map(Some)
    }

    /// The read planned on the Fluss table `info`, its lake snapshot and the
    /// latest offsets of its `buckets`.
    async fn plan_from(
        &self,
        table: &Table,
        planned: Target,
        info: TableInfo,
        lake: Option<fluss::metadata::LakeSnapshotInfo>,
        buckets: Vec<i32>,
        ends: HashMap<i32, i64>,
    ) -> Result<StoreRead> {
        // From here on the read belongs to this Fluss table.
        let target = Arc::new(planned);
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
                let tiered = lake::tiered_offsets(lake);
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
                info,
                ranges,
                schema: table_arrow_schema(table)?,
            }),
        })
    }
}

/// The readable lake snapshot of `target`'s table, `None` before Fluss's
/// tiering committed one.
async fn lake_snapshot(
    admin: &fluss::client::FlussAdmin,
    target: &Target,
) -> Result<Option<fluss::metadata::LakeSnapshotInfo>> {
    match target
        .answer(
            "find the tiered snapshot of",
            admin.get_lake_snapshot(&target.path, None, Some(true)),
        )
        .await?
    {
        Ok(snapshot) => Ok(Some(snapshot)),
        Err(e) if e.api_error() == Some(FlussError::LakeSnapshotNotExist) => Ok(None),
        Err(e) => Err(target.fluss_error("find the tiered snapshot of", e)),
    }
}

/// The latest offsets of the table's buckets `0..buckets`.
async fn latest_offsets(
    admin: &fluss::client::FlussAdmin,
    target: &Target,
    buckets: i32,
) -> Result<(Vec<i32>, HashMap<i32, i64>)> {
    let buckets: Vec<i32> = (0..buckets).collect();
    let ends = target
        .retrying("find the latest offsets of", || {
            admin.list_offsets(&target.path, &buckets, OffsetSpec::Latest)
        })
        .await?;
    Ok((buckets, ends))
}

#[cfg(test)]
mod tests;
