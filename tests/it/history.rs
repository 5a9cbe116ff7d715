//! The history checker: a seeded, randomized run of several processes
//! against one lake-stream table of the `local` store, checked at the end
//! against what each process was told.
//!
//! The processes (children are this test binary run again with
//! `LAKESTREAM_HISTORY_CHILD` naming the role, as in `crash.rs`):
//! - `WRITERS` long-lived writers, one `LakeStreamContext` each for their
//!   whole life, inserting unique ids into `t` (some tier in the background
//!   themselves, `local.tier-interval` = 2s);
//! - a tiering service, `lakestream-cli tier --table default.t --interval 1s`;
//! - ad-hoc tierings from short-lived processes (`CALL sys.lakestream_tier`);
//! - `DROP TABLE` + `CREATE TABLE` of `t` from short-lived processes, and
//!   `ALTER TABLE t ADD COLUMN`;
//! - one streaming reader at a time (`SET lakestream.scan_mode =
//!   'streaming'`, `SELECT id FROM t$rt`), printing every id it sees;
//! - maintenance from short-lived processes, one at a time, about every 2 s:
//!   `CALL sys.compact`, `sys.compact_manifest`, `sys.expire_snapshots` or
//!   `sys.remove_orphan_files` (files older than 30 s) on `t`, racing the
//!   tierings (which maintain `t` themselves after each round that commits)
//!   and the writers; `t` is created with [`MAINTENANCE_OPTIONS`], so that
//!   both happen often;
//! - `kill -9` of any of them at random moments; a killed writer, service or
//!   reader is replaced by a new process.
//!
//! Children print protocol lines `@@ <KIND> <fields> ;;` (times are
//! microseconds since the epoch, taken in the child): a writer `TRY start ids`
//! before each INSERT, then `ACK start end ids` or `ERR start end ids message`;
//! a reader `START t`, `PLANNED t`, `SEEN t ids`, and `END t` or `ERR t
//! message`; a DDL process `BEGIN t i`, then `OK t i` or `ERR t i message` for
//! its i-th statement; an ad-hoc tiering `TIERED start end rows` or `ERR ...`;
//! a maintenance process `MAINT start end what answer` (`answer` the
//! procedure's row as `column=value,...`) or `ERR start end what message`,
//! then `SNAPSHOTS count earliest latest compacts` (what `t$snapshots`
//! shows right after, `none` if it could not be read). Maintenance may fail
//! (another commit kept winning, the table was dropped under it): its errors
//! are in `history.log` and the summary, and are no failure of their own.
//!
//! After the run (writers stopped, a final tiering) it checks:
//! - (a) every row acknowledged in the current incarnation of `t` (its
//!   statement began after the last DROP ended) is in `t$rt` exactly once
//!   before the final tiering, and in `t` and `t$rt` exactly once after it;
//! - (b) no row of a dropped incarnation (its statement ended before a DROP
//!   that succeeded began) appears in any final read, nor in a streaming read
//!   that started after that DROP; rows whose statement overlapped a DROP, was
//!   in flight when its writer was killed, or failed with an error that says
//!   the outcome is unknown may be present (once) or absent;
//! - (c) every streaming reader that did not end with an error, and ran for
//!   at least 5 s after it planned, saw every row
//!   acknowledged in its incarnation up to 5 s before it was stopped, exactly
//!   once (rows acknowledged before the read started included: a streaming
//!   read starts where a batch read would), and no id twice;
//! - (d) no row appears that was never written, no statement is partly
//!   visible, and no row of a statement that failed with an error that does
//!   not say its outcome is unknown appears (an error means nothing was
//!   written, or says so). An error says the outcome is unknown when its text
//!   contains "unknown" together with "outcome" (any case), or "may have been
//!   written".
//! - (e) the table keeps working: writes do not all fail for more than 10 s
//!   in a row, and no DDL, tiering or maintenance process is still running
//!   60 s after the run ended.
//! - (f) maintenance really happened, so that (a) to (d) also hold of a
//!   maintained table: with `tier`, once `compact` (`expire_snapshots`)
//!   ran to its end at least three times, some snapshot of kind
//!   `COMPACT` was seen (a compaction's answer, or `t$snapshots` read by a
//!   maintenance process or after the final tiering) and some snapshot
//!   expired (an expiry's answer, or an earliest snapshot after 1); with
//!   `maint`, each procedure that ran to its end at least three times
//!   succeeded at least once.
//! - (g) no process (writer, reader, tiering, maintenance) failed because a
//!   data file of `t` was missing (a `NotFound` or "No such file" error on
//!   a `bucket-` path), unless a DROP began while it ran (and ended at most
//!   5 s before the error): maintenance that deletes a file still
//!   referenced shows there first, even when the incarnation it damaged is
//!   dropped before the final reads.
//!
//! Maintenance that loses or duplicates rows is caught by (a), (b) and (d)
//! on the final reads of `t` and `t$rt` (`t` after the final tiering is the
//! Paimon table alone), and by (c) and (d) on the streaming reads.
//!
//! Whether a DROP whose process was killed (or that failed) dropped the
//! table is found out from the next DDL process, which prints the table's
//! incarnation: the `update_time` of schema 0 in `t$schemas`. A DROP whose
//! outcome stays unknown makes the rows before it "may be present".
//!
//! Environment: `LAKESTREAM_HISTORY_SEED` replays a seed (the run prints
//! `history seed: N`); `LAKESTREAM_HISTORY_SECS` sets the length (default 60);
//! `LAKESTREAM_HISTORY_FAULTS` lists what is injected, of `kill`, `ddl`,
//! `alter`, `tier` (tiering while writers write; without it only the final
//! tiering runs) and `maint` (the maintenance processes); default all five,
//! `none` for none. A seed replays the same plan (which action at which
//! 100 ms tick, and when a maintenance process is killed); how the
//! processes interleave is up to the machine. A failing run keeps its directory (warehouse,
//! store, each child's stderr, and `history.log`, every protocol line) and
//! prints where it is.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::array_value_to_string;
use futures::StreamExt;
use paimon_lakestream::LakeStreamContext;

use paimon_lakestream::testing::faulty::SplitMix64;

use crate::s3_server::TestS3;
use crate::support::{child_command, forward_lines, local_store_options, try_ids};

/// The test the children run.
const CHILD_TEST: &str = "history::history_child";
/// Names the child's role; unset in the parent.
const ROLE_ENV: &str = "LAKESTREAM_HISTORY_CHILD";
/// The scheduler's step.
const TICK: Duration = Duration::from_millis(100);
/// One history run at a time: each keeps two cores busy with processes.
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where a run keeps `t`: a warehouse and store directory on local disk, or
/// a warehouse in a bucket of the S3 test server with the store beside it
/// (`local.path` left to its default, `<warehouse>/_lakestream`).
#[derive(Clone)]
enum Place {
    Disk {
        warehouse: PathBuf,
        store: PathBuf,
    },
    S3 {
        warehouse: String,
        endpoint: String,
        region: String,
        access_key: String,
        secret_key: String,
    },
}

impl Place {
    /// The place the parent passed to this child process. On S3 the child
    /// is given no keys: they come from the AWS environment variables (the
    /// credential chain), never from a command line.
    fn in_child() -> Self {
        let env = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} not set"));
        match std::env::var("HISTORY_S3_ENDPOINT") {
            Ok(endpoint) => Place::S3 {
                warehouse: env("HISTORY_WAREHOUSE"),
                endpoint,
                region: env("HISTORY_S3_REGION"),
                access_key: String::new(),
                secret_key: String::new(),
            },
            Err(_) => Place::Disk {
                warehouse: PathBuf::from(env("HISTORY_WAREHOUSE")),
                store: PathBuf::from(env("HISTORY_STORE")),
            },
        }
    }

    /// Options of a catalog with `t`; keys only when this process has them.
    fn options(&self, tier_interval: &str) -> HashMap<String, String> {
        match self {
            Place::Disk { warehouse, store } => {
                local_store_options(warehouse, store, tier_interval)
            }
            Place::S3 {
                warehouse,
                access_key,
                secret_key,
                ..
            } => {
                let mut options: HashMap<String, String> = self
                    .s3_options()
                    .into_iter()
                    .chain([
                        ("warehouse".to_string(), warehouse.clone()),
                        ("lakestream.store".to_string(), "local".to_string()),
                        ("local.tier-interval".to_string(), tier_interval.to_string()),
                        ("local.tier-target-size".to_string(), "1b".to_string()),
                    ])
                    .collect();
                if !access_key.is_empty() {
                    options.insert("s3.access-key".to_string(), access_key.clone());
                    options.insert("s3.secret-key".to_string(), secret_key.clone());
                }
                options
            }
        }
    }

    /// The options of the place that are no secret. On S3: the server, and
    /// a tiering lease short enough that a killed tierer is waited out in
    /// seconds, not in half of a 40 s run (its default 30 s would leave
    /// maintenance and tiering no time to be seen working).
    fn s3_options(&self) -> Vec<(String, String)> {
        match self {
            Place::Disk { .. } => Vec::new(),
            Place::S3 {
                endpoint, region, ..
            } => vec![
                ("s3.endpoint".to_string(), endpoint.clone()),
                ("s3.region".to_string(), region.clone()),
                ("s3.path-style-access".to_string(), "true".to_string()),
                ("local.lease-ttl".to_string(), "5s".to_string()),
            ],
        }
    }

    fn warehouse(&self) -> String {
        match self {
            Place::Disk { warehouse, .. } => warehouse.display().to_string(),
            Place::S3 { warehouse, .. } => warehouse.clone(),
        }
    }

    /// Tells a child process where `t` is.
    fn pass_to(&self, command: &mut Command) {
        command.env("HISTORY_WAREHOUSE", self.warehouse());
        match self {
            Place::Disk { store, .. } => {
                command.env("HISTORY_STORE", store);
            }
            Place::S3 {
                endpoint,
                region,
                access_key,
                secret_key,
                ..
            } => {
                command
                    .env("HISTORY_S3_ENDPOINT", endpoint)
                    .env("HISTORY_S3_REGION", region)
                    .env("AWS_ACCESS_KEY_ID", access_key)
                    .env("AWS_SECRET_ACCESS_KEY", secret_key);
            }
        }
    }
}
/// Long-lived writer processes at any time.
const WRITERS: usize = 3;
/// Writer instance `k` writes ids from `k * ID_BLOCK`.
const ID_BLOCK: i64 = 1_000_000;
/// How long a streaming reader may take to show a row.
const READER_GRACE_US: i64 = 5_000_000;
/// Options of `t` that make maintenance happen often in a short run (a
/// macro, so that [`CREATE`] and [`ENSURE`] can `concat!` it; read it as
/// [`MAINTENANCE_OPTIONS`]). After a tiering round: manifests are merged
/// once a snapshot names 4 (default 30), a bucket's data files once it has 3
/// small ones (default 5), so every second or third round (the service tiers
/// every second); snapshots expire beyond the newest 4, or beyond the newest
/// 2 once older than 1 s (`parse_duration` syntax; defaults 10, none, 1 h).
/// The thresholds are above the procedures' (which compact two files or
/// manifests): between rounds a `CALL sys.compact` or `compact_manifest`
/// has work to do, and so races the next round's commit.
macro_rules! maintenance_options {
    () => {
        "'manifest.merge-min-count' = '4', 'compaction.min.file-num' = '3', \
         'snapshot.num-retained.min' = '2', 'snapshot.num-retained.max' = '4', \
         'snapshot.time-retained' = '1 s'"
    };
}
/// The options of `t` that make maintenance happen often; see
/// [`maintenance_options`].
const MAINTENANCE_OPTIONS: &str = maintenance_options!();
/// The table, as statements name it.
const CREATE: &str = concat!(
    "CREATE TABLE t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true', ",
    maintenance_options!(),
    ")"
);
const ENSURE: &str = concat!(
    "CREATE TABLE IF NOT EXISTS t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true', ",
    maintenance_options!(),
    ")"
);
const DROP: &str = "DROP TABLE IF EXISTS t";
const TIER: &str = "CALL sys.lakestream_tier('default.t')";
/// Every write failing for longer than this is a failure of its own.
const STUCK_US: i64 = 10_000_000;
/// How long after a DDL process is killed the next DDL may wait for the
/// schema lease it left (S3: 30 s, `object_storage::schema_lock`), with
/// 5 s for that DDL to run once it has the lease.
const SCHEMA_LEASE_WAIT_US: i64 = 35_000_000;

/// The longest part of `[from, to]` that no window of `excused` covers.
fn longest_outside(from: i64, to: i64, excused: &[(i64, i64)]) -> i64 {
    let mut windows: Vec<(i64, i64)> = excused
        .iter()
        .map(|&(a, b)| (a.max(from), b.min(to)))
        .filter(|(a, b)| a < b)
        .collect();
    windows.sort_unstable();
    let (mut longest, mut at) = (0, from);
    for (a, b) in windows {
        longest = longest.max(a - at);
        at = at.max(b);
    }
    longest.max(to - at)
}
/// How many examples of one kind of failure are printed.
const EXAMPLES: usize = 15;

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as i64
}

/// The run's seeded generator.
#[derive(Debug, Clone)]
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0.next_f64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

fn one_line(text: impl std::fmt::Display) -> String {
    text.to_string().replace(['\n', '\r'], " ")
}

fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

fn parse_ids(text: &str) -> Vec<i64> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("id"))
        .collect()
}

/// Whether an error says that its statement's outcome is unknown.
pub(crate) fn says_outcome_unknown(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("unknown") && m.contains("outcome")) || m.contains("may have been written")
}

/// Whether an error says that a data file of the table was missing (a file
/// that maintenance deleted too early, say).
fn says_file_missing(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("notfound") || m.contains("no such file")) && m.contains("/bucket-")
}

// ---------------------------------------------------------------- children

/// Prints one protocol line.
fn emit(line: &str) {
    println!("@@ {line} ;;");
}

/// Ends this child when the parent is gone, so no child outlives a run.
fn watch_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(3);
        }
    });
}

async fn run(ctx: &LakeStreamContext, sql: &str) -> Result<(), String> {
    ctx.sql(sql)
        .await
        .map_err(one_line)?
        .collect()
        .await
        .map_err(one_line)?;
    Ok(())
}

/// The child's side: runs when `LAKESTREAM_HISTORY_CHILD` is set, does nothing otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process: the test that spawns it runs it"]
async fn history_child() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    watch_parent();
    let env = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} not set"));
    let tier_interval = env("HISTORY_TIER_INTERVAL");
    let mut options = Place::in_child().options(&tier_interval);
    let multi_part = std::env::var("HISTORY_SEGMENT_SIZE").ok();
    if let Some(size) = &multi_part {
        options.insert("local.segment-size".to_string(), size.clone());
    }
    let mut ctx = LakeStreamContext::new();
    if let Err(e) = ctx.register_catalog("paimon", options).await {
        emit(&format!("FATAL {}", one_line(e)));
        return;
    }
    match role.as_str() {
        "writer" => {
            let first: i64 = env("HISTORY_FIRST_ID").parse().expect("first id");
            let seed: u64 = env("HISTORY_SEED").parse().expect("seed");
            writer(&ctx, first, seed, multi_part.is_some()).await;
        }
        "reader" => reader(&ctx).await,
        "tier" => tier_once(&ctx).await,
        "ddl" => ddl(&ctx, &env("HISTORY_SQL")).await,
        "maint" => {
            let what = env("HISTORY_MAINT");
            let op = MaintOp::ALL
                .into_iter()
                .find(|op| op.name() == what)
                .unwrap_or_else(|| panic!("unknown maintenance {what}"));
            maint_once(&ctx, op).await;
        }
        other => panic!("unknown role {other}"),
    }
}

/// Inserts 1 to 4 new ids at a time until killed; with `multi_part`, each
/// row arrives as a batch of its own (a `UNION ALL` of one-row selects).
async fn writer(ctx: &LakeStreamContext, first: i64, seed: u64, multi_part: bool) {
    let mut rng = Rng::new(seed);
    let mut next = first;
    loop {
        let n = 1 + rng.below(4) as i64;
        let ids: Vec<i64> = (next..next + n).collect();
        next += n;
        let sql = if multi_part {
            let selects: Vec<String> = ids
                .iter()
                .map(|id| format!("SELECT CAST({id} AS BIGINT) AS id, 'w' AS v"))
                .collect();
            format!("INSERT INTO t (id, v) {}", selects.join(" UNION ALL "))
        } else {
            let values: Vec<String> = ids.iter().map(|id| format!("({id}, 'w')")).collect();
            format!("INSERT INTO t (id, v) VALUES {}", values.join(", "))
        };
        let list = id_list(&ids);
        let start = now_us();
        emit(&format!("TRY {start} {list}"));
        let result = run(ctx, &sql).await;
        let end = now_us();
        match result {
            Ok(()) => emit(&format!("ACK {start} {end} {list}")),
            Err(e) => {
                emit(&format!("ERR {start} {end} {list} {e}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
    }
}

/// Follows `t$rt` until killed, or until the read ends.
async fn reader(ctx: &LakeStreamContext) {
    emit(&format!("START {}", now_us()));
    if let Err(e) = run(ctx, "SET lakestream.scan_mode = 'streaming'").await {
        emit(&format!("ERR {} {e}", now_us()));
        return;
    }
    let stream = match ctx.sql("SELECT id FROM t$rt").await {
        Ok(df) => df.execute_stream().await,
        Err(e) => Err(e),
    };
    let mut stream = match stream {
        Ok(stream) => stream,
        Err(e) => {
            emit(&format!("ERR {} {}", now_us(), one_line(e)));
            return;
        }
    };
    emit(&format!("PLANNED {}", now_us()));
    while let Some(batch) = stream.next().await {
        let ids = batch.map_err(one_line).and_then(|batch| {
            let column = cast(batch.column(0), &DataType::Int64).map_err(one_line)?;
            let column = column
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or("ids are not Int64")?;
            Ok::<Vec<i64>, String>(column.iter().flatten().collect())
        });
        match ids {
            Ok(ids) => {
                let now = now_us();
                for chunk in ids.chunks(200) {
                    emit(&format!("SEEN {now} {}", id_list(chunk)));
                }
            }
            Err(e) => {
                emit(&format!("ERR {} {e}", now_us()));
                return;
            }
        }
    }
    emit(&format!("END {}", now_us()));
}

/// One ad-hoc tiering.
async fn tier_once(ctx: &LakeStreamContext) {
    let start = now_us();
    let result = match ctx.sql(TIER).await {
        Ok(df) => df.collect().await.map_err(one_line),
        Err(e) => Err(one_line(e)),
    };
    let end = now_us();
    match result {
        Ok(batches) => {
            let mut rows = 0;
            for batch in &batches {
                if let Some(column) = batch.column_by_name("rows_tiered") {
                    let column = cast(column, &DataType::Int64).expect("rows_tiered");
                    let column = column.as_any().downcast_ref::<Int64Array>().expect("Int64");
                    rows += column.iter().flatten().sum::<i64>();
                }
            }
            emit(&format!("TIERED {start} {end} {rows}"));
        }
        Err(e) => emit(&format!("ERR {start} {end} {e}")),
    }
}

/// A maintenance procedure a maintenance process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum MaintOp {
    Compact,
    CompactManifest,
    Expire,
    Orphans,
}

impl MaintOp {
    const ALL: [MaintOp; 4] = [
        MaintOp::Compact,
        MaintOp::CompactManifest,
        MaintOp::Expire,
        MaintOp::Orphans,
    ];

    fn name(self) -> &'static str {
        match self {
            MaintOp::Compact => "compact",
            MaintOp::CompactManifest => "compact_manifest",
            MaintOp::Expire => "expire_snapshots",
            MaintOp::Orphans => "remove_orphan_files",
        }
    }

    /// The statement, run at `now_us`: orphan files older than 30 s go.
    fn sql(self, now_us: i64) -> String {
        match self {
            MaintOp::Compact => "CALL sys.compact('default.t')".to_string(),
            MaintOp::CompactManifest => "CALL sys.compact_manifest('default.t')".to_string(),
            MaintOp::Expire => "CALL sys.expire_snapshots(table => 'default.t')".to_string(),
            MaintOp::Orphans => format!(
                "CALL sys.remove_orphan_files(table => 'default.t', older_than => '{}', \
                 dry_run => false)",
                utc_timestamp(now_us - 30_000_000)
            ),
        }
    }
}

/// `YYYY-MM-DD hh:mm:ss` (UTC) of microseconds since the epoch.
fn utc_timestamp(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// What `t$snapshots` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SnapshotState {
    count: i64,
    earliest: Option<i64>,
    latest: Option<i64>,
    /// Snapshots of kind `COMPACT` (data or manifest compactions).
    compacts: i64,
}

impl SnapshotState {
    async fn read(ctx: &LakeStreamContext) -> Result<Self, String> {
        let sql = "SELECT count(*), min(snapshot_id), max(snapshot_id), \
                   sum(CASE WHEN commit_kind = 'COMPACT' THEN 1 ELSE 0 END) FROM t$snapshots";
        let batches = ctx
            .sql(sql)
            .await
            .map_err(one_line)?
            .collect()
            .await
            .map_err(one_line)?;
        let batch = batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .ok_or("t$snapshots: no answer")?;
        let value = |i: usize| -> Result<Option<i64>, String> {
            let column = cast(batch.column(i), &DataType::Int64).map_err(one_line)?;
            let column = column
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or("not Int64")?;
            Ok((!column.is_null(0)).then(|| column.value(0)))
        };
        Ok(Self {
            count: value(0)?.unwrap_or(0),
            earliest: value(1)?,
            latest: value(2)?,
            compacts: value(3)?.unwrap_or(0),
        })
    }

    fn line(&self) -> String {
        let opt = |v: Option<i64>| v.map_or("null".to_string(), |v| v.to_string());
        format!(
            "{} {} {} {}",
            self.count,
            opt(self.earliest),
            opt(self.latest),
            self.compacts
        )
    }

    fn parse(fields: &str) -> Option<Self> {
        let parts: Vec<&str> = fields.split(' ').collect();
        let [count, earliest, latest, compacts] = parts[..] else {
            return None;
        };
        let opt = |v: &str| -> Option<Option<i64>> {
            match v {
                "null" => Some(None),
                v => v.parse().ok().map(Some),
            }
        };
        Some(Self {
            count: count.parse().ok()?,
            earliest: opt(earliest)?,
            latest: opt(latest)?,
            compacts: compacts.parse().ok()?,
        })
    }
}

/// One maintenance procedure, then what `t$snapshots` shows.
async fn maint_once(ctx: &LakeStreamContext, op: MaintOp) {
    let start = now_us();
    let sql = op.sql(start);
    let result = match ctx.sql(&sql).await {
        Ok(df) => df.collect().await.map_err(one_line),
        Err(e) => Err(one_line(e)),
    };
    let end = now_us();
    let what = op.name();
    match result {
        Ok(batches) => {
            let mut answer = Vec::new();
            for batch in &batches {
                for row in 0..batch.num_rows() {
                    for (i, field) in batch.schema().fields().iter().enumerate() {
                        let column = batch.column(i);
                        let value = if column.is_null(row) {
                            "null".to_string()
                        } else {
                            array_value_to_string(column, row).unwrap_or_else(one_line)
                        };
                        answer.push(format!(
                            "{}={}",
                            field.name(),
                            value.replace([' ', ','], "_")
                        ));
                    }
                }
            }
            emit(&format!("MAINT {start} {end} {what} {}", answer.join(",")));
        }
        Err(e) => emit(&format!("ERR {start} {end} {what} {e}")),
    }
    match SnapshotState::read(ctx).await {
        Ok(state) => emit(&format!("SNAPSHOTS {}", state.line())),
        Err(_) => emit("SNAPSHOTS none"),
    }
}

/// Runs `;`-separated statements in order, each whatever the one before did.
async fn ddl(ctx: &LakeStreamContext, sql: &str) {
    for (i, statement) in sql
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .enumerate()
    {
        emit(&format!("BEGIN {} {i}", now_us()));
        match run(ctx, statement).await {
            Ok(()) => emit(&format!("OK {} {i}", now_us())),
            Err(e) => emit(&format!("ERR {} {i} {e}", now_us())),
        }
    }
    // Which incarnation of `t` is there now: the time its first schema was
    // written (a DROP and CREATE make a new one), or none.
    match try_ids(ctx, "SELECT update_time FROM t$schemas WHERE schema_id = 0").await {
        Ok(times) => match times.first() {
            Some(ms) => emit(&format!("INCARNATION {ms}")),
            None => emit("INCARNATION none"),
        },
        Err(e) if e.to_ascii_lowercase().contains("not found") => emit("INCARNATION none"),
        Err(e) => emit(&format!("INCARNATION error {}", one_line(e))),
    }
    emit("DONE");
}

// ---------------------------------------------------------------- the record

/// How a write statement ended.
#[derive(Debug, Clone)]
enum Outcome {
    Acked,
    Failed {
        message: String,
        unknown: bool,
    },
    /// Never answered: its writer was killed (or stopped) first.
    InFlight,
}

#[derive(Debug, Clone)]
struct Stmt {
    writer: i64,
    ids: Vec<i64>,
    start: i64,
    /// The answer's time; for one in flight, when its writer died.
    end: Option<i64>,
    outcome: Outcome,
}

/// What the final reads may show of a statement's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Acknowledged in the current incarnation: exactly once.
    Current,
    /// Overlapped a DROP, in flight, or an unknown outcome: once or not at all.
    Maybe,
    /// Of a dropped incarnation: never.
    Dropped,
    /// Failed with an error that does not say the outcome is unknown: never.
    Failed,
}

/// One DROP statement that began.
#[derive(Debug, Clone)]
struct DropRec {
    start: i64,
    end: i64,
    /// It answered OK (else: failed, or its process was killed).
    done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DdlOp {
    Drop,
    Create,
    Ensure,
    Alter,
}

impl DdlOp {
    fn sql(self, column: usize) -> String {
        match self {
            DdlOp::Drop => DROP.to_string(),
            DdlOp::Create => CREATE.to_string(),
            DdlOp::Ensure => ENSURE.to_string(),
            DdlOp::Alter => format!("ALTER TABLE t ADD COLUMN c{column} INT"),
        }
    }
}

#[derive(Debug, Clone)]
struct DdlStep {
    op: DdlOp,
    begin: Option<i64>,
    end: Option<i64>,
    result: Option<Result<(), String>>,
    /// For a DROP that did not answer OK: whether it happened after all, as
    /// the incarnation seen by the next DDL process tells.
    happened: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ReaderEnd {
    /// Killed by the run (its normal way to stop).
    Killed,
    /// The stream ended by itself.
    Ended,
    Error(String),
}

#[derive(Debug, Clone, Default)]
struct ReaderRun {
    /// When it last showed a row.
    last_seen: Option<i64>,
    start: Option<i64>,
    planned: Option<i64>,
    seen: Vec<i64>,
    end: Option<(i64, ReaderEnd)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Writer { instance: i64 },
    Service,
    Reader,
    Adhoc,
    Ddl,
    Maint { op: MaintOp },
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Writer { .. } => "writer",
            Kind::Service => "tier-service",
            Kind::Reader => "reader",
            Kind::Adhoc => "adhoc-tier",
            Kind::Ddl => "ddl",
            Kind::Maint { .. } => "maint",
        }
    }
}

struct Proc {
    kind: Kind,
    child: Option<Child>,
    /// When it died (was killed, or exited), once known.
    died: Option<i64>,
    killed: bool,
    started: i64,
    /// For DDL processes: the statements and how each went.
    steps: Vec<DdlStep>,
    /// Whether this DDL process may be killed (an "ensure" is not).
    killable: bool,
    reader: Option<usize>,
}

/// Which faults a run injects.
#[derive(Debug, Clone, Copy)]
struct Faults {
    kill: bool,
    ddl: bool,
    alter: bool,
    /// Tiering while writers write: the service, ad-hoc tierings and the
    /// writers' own background tiering. Without it, only the final tiering.
    tier: bool,
    /// Maintenance processes (compaction, expiry, orphan file removal).
    maint: bool,
}

impl Faults {
    fn from_env() -> Self {
        let text = std::env::var("LAKESTREAM_HISTORY_FAULTS")
            .unwrap_or_else(|_| "kill,ddl,alter,tier,maint".to_string());
        let words: HashSet<&str> = text.split(',').map(str::trim).collect();
        for word in &words {
            assert!(
                ["kill", "ddl", "alter", "tier", "maint", "none", ""].contains(word),
                "LAKESTREAM_HISTORY_FAULTS: unknown fault '{word}' (kill, ddl, alter, tier, maint, none)"
            );
        }
        Self {
            kill: words.contains("kill"),
            ddl: words.contains("ddl"),
            alter: words.contains("alter"),
            tier: words.contains("tier"),
            maint: words.contains("maint"),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    kills: BTreeMap<&'static str, u64>,
    spawned: BTreeMap<&'static str, u64>,
    service_rounds: u64,
    service_rows: u64,
    adhoc_ok: u64,
    adhoc_rows: i64,
    adhoc_errors: Vec<String>,
    /// Maintenance processes by procedure.
    maint: BTreeMap<MaintOp, MaintCount>,
    /// Compactions (data or manifests) that answered a snapshot they published.
    maint_published: u64,
    /// Snapshots expiries on request expired.
    maint_expired: u64,
    /// Files orphan file removals deleted.
    maint_orphans: u64,
    /// Failed procedures: what, when, the error.
    maint_errors: Vec<String>,
    /// What `t$snapshots` showed after the maintenance processes.
    snapshot_samples: Vec<SnapshotState>,
    /// Lines that say a data file was missing: process, when, the line.
    missing_files: Vec<(usize, i64, String)>,
    fatal: Vec<String>,
}

/// How the maintenance processes running one procedure went.
#[derive(Debug, Default, Clone, Copy)]
struct MaintCount {
    started: u64,
    ok: u64,
    failed: u64,
}

// ---------------------------------------------------------------- the run

struct Run {
    seed: u64,
    place: Place,
    /// The S3 test server of a run on S3, stopped with the run.
    _s3: Option<TestS3>,
    ticks: u64,
    faults: Faults,
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    rng: Rng,
    t0: i64,
    lines_tx: Sender<(usize, String)>,
    lines_rx: Receiver<(usize, String)>,
    threads: Vec<JoinHandle<()>>,
    log: File,
    procs: Vec<Proc>,
    writers: [Option<usize>; WRITERS],
    service: Option<usize>,
    reader: Option<usize>,
    adhoc: Option<usize>,
    ddl: Option<usize>,
    maint: Option<usize>,
    /// When the running maintenance process is killed, if it is.
    maint_kill_at: Option<Instant>,
    /// After a DDL process that may have left no table: create it if missing.
    need_ensure: bool,
    /// The run is over: kills from now on are how it stops, not faults.
    stopping: bool,
    /// The incarnation of `t` the last DDL process saw: `Some(None)` no
    /// table, `None` not known.
    known_incarnation: Option<Option<i64>>,
    /// Short-lived processes that did not finish after the run.
    hung: Vec<String>,
    /// DROPs that began without an OK yet: process, step, the incarnation before.
    pending_drops: Vec<(usize, usize, Option<Option<i64>>)>,
    next_instance: i64,
    /// DROP + CREATE and ADD COLUMN processes started.
    recreates: u64,
    alters: u64,
    next_column: usize,
    stmts: Vec<Stmt>,
    /// The statement of each id a writer tried.
    owner: HashMap<i64, usize>,
    readers: Vec<ReaderRun>,
    counters: Counters,
}

impl Drop for Run {
    fn drop(&mut self) {
        for proc in &mut self.procs {
            if let Some(child) = proc.child.as_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("history: kept {}", dir.keep().display());
            }
        }
    }
}

impl Run {
    fn new(seed: u64, secs: u64, faults: Faults, on_s3: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lakestream-history-")
            .tempdir()
            .expect("temporary directory");
        let root = dir.path().to_path_buf();
        let s3 = on_s3.then(TestS3::start);
        let place = match &s3 {
            None => Place::Disk {
                warehouse: root.join("warehouse"),
                store: root.join("store"),
            },
            Some(s3) => Place::S3 {
                warehouse: format!("s3://{}/history-{seed}", s3.bucket),
                endpoint: s3.options["s3.endpoint"].clone(),
                region: s3.options["s3.region"].clone(),
                access_key: s3.options["s3.access-key"].clone(),
                secret_key: s3.options["s3.secret-key"].clone(),
            },
        };
        std::fs::create_dir_all(root.join("warehouse")).expect("warehouse");
        std::fs::create_dir_all(root.join("logs")).expect("logs");
        let log = File::create(root.join("history.log")).expect("history.log");
        let (lines_tx, lines_rx) = channel();
        Self {
            seed,
            place,
            _s3: s3,
            ticks: secs * (1000 / TICK.as_millis() as u64),
            faults,
            dir: Some(dir),
            root,
            rng: Rng::new(seed),
            t0: now_us(),
            lines_tx,
            lines_rx,
            threads: Vec::new(),
            log,
            procs: Vec::new(),
            writers: [None; WRITERS],
            service: None,
            reader: None,
            adhoc: None,
            ddl: None,
            maint: None,
            maint_kill_at: None,
            need_ensure: false,
            stopping: false,
            known_incarnation: None,
            pending_drops: Vec::new(),
            hung: Vec::new(),
            next_instance: 1,
            recreates: 0,
            alters: 0,
            next_column: 1,
            stmts: Vec::new(),
            owner: HashMap::new(),
            readers: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Seconds since the run began, for messages.
    fn at(&self, us: i64) -> String {
        format!("{:.3}s", (us - self.t0) as f64 / 1e6)
    }

    fn running(&self, key: Option<usize>) -> bool {
        key.is_some_and(|k| self.procs[k].child.is_some())
    }

    fn spawn(&mut self, kind: Kind, mut command: Command) -> usize {
        let key = self.procs.len();
        let stderr = File::create(
            self.root
                .join("logs")
                .join(format!("{key:04}-{}.stderr", kind.name())),
        )
        .expect("stderr file");
        command.stderr(stderr).stdout(Stdio::piped());
        let mut child = command.spawn().expect("spawn child");
        let stdout = child.stdout.take().expect("piped stdout");
        self.threads
            .push(forward_lines(stdout, key, self.lines_tx.clone()));
        *self.counters.spawned.entry(kind.name()).or_default() += 1;
        self.procs.push(Proc {
            kind,
            child: Some(child),
            died: None,
            killed: false,
            started: now_us(),
            steps: Vec::new(),
            killable: true,
            reader: None,
        });
        key
    }

    fn child(&self, role: &str, tier_interval: &str) -> Command {
        let mut command = child_command(CHILD_TEST);
        command
            .env(ROLE_ENV, role)
            .env("HISTORY_TIER_INTERVAL", tier_interval);
        self.place.pass_to(&mut command);
        command
    }

    fn spawn_writer(&mut self, slot: usize) {
        let instance = self.next_instance;
        self.next_instance += 1;
        let writer_seed = self.seed ^ (instance as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // Half the writers also tier in the background, as long-lived writers do.
        let tier_interval = if !self.faults.tier || writer_seed.is_multiple_of(2) {
            "off"
        } else {
            "2s"
        };
        let mut command = self.child("writer", tier_interval);
        command
            .env("HISTORY_FIRST_ID", (instance * ID_BLOCK).to_string())
            .env("HISTORY_SEED", writer_seed.to_string());
        // A third of the writers roll every row into a part of its own: their
        // writes are multi-part writes, committed by one log entry each.
        if (writer_seed >> 8).is_multiple_of(3) {
            command.env("HISTORY_SEGMENT_SIZE", "1b");
        }
        let key = self.spawn(Kind::Writer { instance }, command);
        self.writers[slot] = Some(key);
    }

    fn spawn_service(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lakestream-cli"));
        command
            .arg("tier")
            .arg("--warehouse")
            .arg(self.place.warehouse())
            .arg("--option")
            .arg("local.tier-interval=off");
        if let Place::Disk { store, .. } = &self.place {
            command
                .arg("--option")
                .arg(format!("local.path={}", store.display()));
        }
        for (key, value) in self.place.s3_options() {
            command.arg("--option").arg(format!("{key}={value}"));
        }
        self.place.pass_to(&mut command);
        command
            .args(["--table", "default.t", "--interval", "1s"])
            .stdin(Stdio::null());
        self.service = Some(self.spawn(Kind::Service, command));
    }

    fn spawn_reader(&mut self) {
        let command = self.child("reader", "off");
        let key = self.spawn(Kind::Reader, command);
        self.readers.push(ReaderRun::default());
        self.procs[key].reader = Some(self.readers.len() - 1);
        self.reader = Some(key);
    }

    fn spawn_adhoc(&mut self) {
        let command = self.child("tier", "off");
        self.adhoc = Some(self.spawn(Kind::Adhoc, command));
    }

    fn spawn_maint(&mut self, op: MaintOp) {
        let mut command = self.child("maint", "off");
        command.env("HISTORY_MAINT", op.name());
        self.counters.maint.entry(op).or_default().started += 1;
        self.maint = Some(self.spawn(Kind::Maint { op }, command));
    }

    fn spawn_ddl(&mut self, ops: &[DdlOp], killable: bool) -> usize {
        let column = self.next_column;
        if ops.contains(&DdlOp::Alter) {
            self.next_column += 1;
        }
        let sql: Vec<String> = ops.iter().map(|op| op.sql(column)).collect();
        let mut command = self.child("ddl", "off");
        command.env("HISTORY_SQL", sql.join(";\n"));
        let key = self.spawn(Kind::Ddl, command);
        self.procs[key].killable = killable;
        self.procs[key].steps = ops
            .iter()
            .map(|op| DdlStep {
                op: *op,
                begin: None,
                end: None,
                result: None,
                happened: None,
            })
            .collect();
        key
    }

    fn kill(&mut self, key: usize) {
        let proc = &mut self.procs[key];
        if let Some(mut child) = proc.child.take() {
            // SIGKILL: no destructor, no flush, no goodbye.
            let _ = child.kill();
            let _ = child.wait();
            proc.died = Some(now_us());
            proc.killed = true;
            if !self.stopping {
                *self.counters.kills.entry(proc.kind.name()).or_default() += 1;
            }
        }
    }

    /// Notes children that exited on their own.
    fn reap(&mut self) {
        for proc in &mut self.procs {
            if let Some(child) = proc.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    proc.child = None;
                    proc.died = Some(now_us());
                }
            }
        }
    }

    /// Takes in the children's lines until `deadline`.
    fn pump_until(&mut self, deadline: Instant) {
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match self.lines_rx.recv_timeout(deadline - now) {
                Ok((key, line)) => self.line(key, &line),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    fn line(&mut self, key: usize, line: &str) {
        let kind = self.procs[key].kind;
        let _ = writeln!(self.log, "{key} {} {line}", kind.name());
        if says_file_missing(line) {
            self.counters
                .missing_files
                .push((key, now_us(), line.to_string()));
        }
        if kind == Kind::Service {
            // `tiered <n> rows of default.t`
            if let Some(rest) = line.strip_prefix("tiered ") {
                let rows: u64 = rest
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                self.counters.service_rounds += 1;
                self.counters.service_rows += rows;
            }
            return;
        }
        let Some((_, rest)) = line.split_once("@@ ") else {
            return;
        };
        // A line cut off by a kill has no end marker: it is not taken.
        let Some(body) = rest.strip_suffix(" ;;") else {
            return;
        };
        let (word, fields) = body.split_once(' ').unwrap_or((body, ""));
        if word == "FATAL" {
            self.counters
                .fatal
                .push(format!("{} {key}: {fields}", kind.name()));
            return;
        }
        match kind {
            Kind::Writer { instance } => self.writer_line(instance, word, fields),
            Kind::Reader => self.reader_line(key, word, fields),
            Kind::Adhoc => {
                let mut parts = fields.splitn(3, ' ');
                let _start = parts.next();
                let _end = parts.next();
                let rest = parts.next().unwrap_or("");
                match word {
                    "TIERED" => {
                        self.counters.adhoc_ok += 1;
                        self.counters.adhoc_rows += rest.parse::<i64>().unwrap_or(0);
                    }
                    _ => self.counters.adhoc_errors.push(rest.to_string()),
                }
            }
            Kind::Ddl => self.ddl_line(key, word, fields),
            Kind::Maint { op } => self.maint_line(op, word, fields),
            Kind::Service => {}
        }
    }

    fn maint_line(&mut self, op: MaintOp, word: &str, fields: &str) {
        if word == "SNAPSHOTS" {
            if let Some(state) = SnapshotState::parse(fields) {
                self.counters.snapshot_samples.push(state);
            }
            return;
        }
        let mut parts = fields.splitn(4, ' ');
        let start = parts.next().and_then(|t| t.parse::<i64>().ok());
        let _end = parts.next();
        let _what = parts.next();
        let rest = parts.next().unwrap_or("");
        let count = self.counters.maint.entry(op).or_default();
        match word {
            "MAINT" => {
                count.ok += 1;
                let answer: HashMap<&str, &str> = rest
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .collect();
                let number = |key: &str| -> u64 {
                    answer
                        .get(key)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_default()
                };
                match op {
                    MaintOp::Compact | MaintOp::CompactManifest => {
                        if answer.get("snapshot_id").is_some_and(|v| *v != "null") {
                            self.counters.maint_published += 1;
                        }
                    }
                    MaintOp::Expire => self.counters.maint_expired += number("expired_snapshots"),
                    MaintOp::Orphans => self.counters.maint_orphans += number("deleted_files"),
                }
            }
            "ERR" => {
                count.failed += 1;
                let at = start.map(|s| self.at(s)).unwrap_or_default();
                self.counters
                    .maint_errors
                    .push(format!("{} at {at}: {rest}", op.name()));
            }
            _ => {}
        }
    }

    fn writer_line(&mut self, instance: i64, word: &str, fields: &str) {
        let mut parts = fields.splitn(4, ' ');
        match word {
            "TRY" => {
                let start: i64 = parts.next().expect("start").parse().expect("start");
                let ids = parse_ids(parts.next().unwrap_or(""));
                let index = self.stmts.len();
                for id in &ids {
                    assert!(
                        self.owner.insert(*id, index).is_none(),
                        "id {id} was tried twice (a bug in the checker)"
                    );
                }
                self.stmts.push(Stmt {
                    writer: instance,
                    ids,
                    start,
                    end: None,
                    outcome: Outcome::InFlight,
                });
            }
            "ACK" | "ERR" => {
                let _start = parts.next();
                let end: i64 = parts.next().expect("end").parse().expect("end");
                let ids = parse_ids(parts.next().unwrap_or(""));
                let message = parts.next().unwrap_or("").to_string();
                let Some(&index) = ids.first().and_then(|id| self.owner.get(id)) else {
                    return;
                };
                let stmt = &mut self.stmts[index];
                stmt.end = Some(end);
                stmt.outcome = if word == "ACK" {
                    Outcome::Acked
                } else {
                    Outcome::Failed {
                        unknown: says_outcome_unknown(&message),
                        message,
                    }
                };
            }
            _ => {}
        }
    }

    fn reader_line(&mut self, key: usize, word: &str, fields: &str) {
        let Some(index) = self.procs[key].reader else {
            return;
        };
        let (time, rest) = fields.split_once(' ').unwrap_or((fields, ""));
        let Ok(time) = time.parse::<i64>() else {
            return;
        };
        let run = &mut self.readers[index];
        match word {
            "START" => run.start = Some(time),
            "PLANNED" => run.planned = Some(time),
            "SEEN" => {
                run.seen.extend(parse_ids(rest));
                run.last_seen = Some(time);
            }
            "END" => run.end = Some((time, ReaderEnd::Ended)),
            "ERR" => run.end = Some((time, ReaderEnd::Error(rest.to_string()))),
            _ => {}
        }
    }

    fn ddl_line(&mut self, key: usize, word: &str, fields: &str) {
        if word == "INCARNATION" {
            self.incarnation(fields);
            return;
        }
        let mut parts = fields.splitn(3, ' ');
        let (Some(time), Some(step)) = (parts.next(), parts.next()) else {
            return;
        };
        let (Ok(time), Ok(step)) = (time.parse::<i64>(), step.parse::<usize>()) else {
            return;
        };
        let message = parts.next().unwrap_or("").to_string();
        let Some(entry) = self.procs[key].steps.get_mut(step) else {
            return;
        };
        let op = entry.op;
        match word {
            "BEGIN" => {
                entry.begin = Some(time);
                if op == DdlOp::Drop {
                    self.pending_drops.push((key, step, self.known_incarnation));
                }
            }
            "OK" => {
                entry.end = Some(time);
                entry.result = Some(Ok(()));
                if op == DdlOp::Drop {
                    self.pending_drops.retain(|p| (p.0, p.1) != (key, step));
                }
            }
            "ERR" => {
                entry.end = Some(time);
                entry.result = Some(Err(message));
            }
            _ => {}
        }
    }

    /// A DDL process saw this incarnation (`none`, a time, or `error ...`):
    /// a DROP that did not answer OK happened if the incarnation changed.
    fn incarnation(&mut self, fields: &str) {
        let seen = match fields {
            "none" => Some(None),
            text => text.parse::<i64>().ok().map(Some),
        };
        let Some(seen) = seen else {
            // Unknown: DROPs waiting for an answer keep waiting.
            self.known_incarnation = None;
            return;
        };
        for (key, step, before) in std::mem::take(&mut self.pending_drops) {
            match before {
                Some(before) => self.procs[key].steps[step].happened = Some(before != seen),
                None => self.pending_drops.push((key, step, before)),
            }
        }
        self.known_incarnation = Some(seen);
    }

    /// Runs DDL in a child to its end (not killed), taking in its lines.
    fn ddl_to_end(&mut self, ops: &[DdlOp]) -> usize {
        let key = self.spawn_ddl(ops, false);
        let started = Instant::now();
        while self.procs[key].child.is_some() {
            self.pump_until(Instant::now() + TICK);
            self.reap();
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "DDL {ops:?} took more than 2 minutes; see {}",
                self.root.display()
            );
        }
        // Its last lines.
        self.pump_until(Instant::now() + Duration::from_millis(300));
        key
    }

    /// Whether a DDL process may have left the table missing.
    fn may_lack_table(&self, key: usize) -> bool {
        let proc = &self.procs[key];
        proc.killed
            || proc.steps.iter().any(|s| s.op == DdlOp::Drop)
                && !proc
                    .steps
                    .iter()
                    .any(|s| s.op == DdlOp::Create && s.result == Some(Ok(())))
    }

    fn go(&mut self) -> Report {
        println!(
            "history seed: {} ({} s, faults: {:?}; replay with LAKESTREAM_HISTORY_SEED={})",
            self.seed,
            self.ticks / 10,
            self.faults,
            self.seed
        );
        let first = self.ddl_to_end(&[DdlOp::Create]);
        let created = self.procs[first].steps[0].result.clone();
        assert_eq!(
            created,
            Some(Ok(())),
            "creating the table failed; see {}",
            self.root.display()
        );

        for slot in 0..WRITERS {
            self.spawn_writer(slot);
        }
        if self.faults.tier {
            self.spawn_service();
        }
        self.spawn_reader();

        let ddl_until = self.ticks * 85 / 100;
        let start = Instant::now();
        for tick in 0..self.ticks {
            let tick_end = start + TICK * (tick as u32 + 1);
            if let Some(at) = self.maint_kill_at.filter(|at| *at < tick_end) {
                self.pump_until(at);
                self.reap();
                self.maint_kill_at = None;
                if let Some(key) = self.maint {
                    self.kill(key);
                }
            }
            self.pump_until(tick_end);
            self.reap();
            // The same draws every tick, whatever the processes did: a seed
            // replays the same plan.
            let r: Vec<f64> = (0..13).map(|_| self.rng.unit()).collect();
            self.act(tick, ddl_until, &r);
        }
        self.finish()
    }

    fn act(&mut self, tick: u64, ddl_until: u64, r: &[f64]) {
        let now = now_us();
        let dead_for = |run: &Run, key: Option<usize>| {
            key.map_or(i64::MAX, |k| run.procs[k].died.map_or(0, |died| now - died))
        };
        // Replace dead writers and a dead service (after a pause, so a
        // process that fails at once does not spin).
        for slot in 0..WRITERS {
            if !self.running(self.writers[slot]) && dead_for(self, self.writers[slot]) > 300_000 {
                self.spawn_writer(slot);
            }
        }
        if self.faults.tier
            && !self.running(self.service)
            && dead_for(self, self.service) > 1_000_000
        {
            self.spawn_service();
        }
        if self.faults.kill {
            if r[0] < 1.0 / 80.0 {
                let slot = (r[1] * WRITERS as f64) as usize;
                if let Some(key) = self.writers[slot] {
                    self.kill(key);
                }
            }
            if r[2] < 1.0 / 150.0 {
                if let Some(key) = self.service {
                    self.kill(key);
                }
            }
        }
        // One streaming reader at a time: stopped (killed) now and then,
        // started again a little later.
        if self.running(self.reader) {
            if r[3] < 1.0 / 150.0 {
                self.kill(self.reader.expect("reader"));
            }
        } else if r[8] < 1.0 / 20.0 {
            self.spawn_reader();
        }
        if self.faults.tier && !self.running(self.adhoc) && r[4] < 1.0 / 50.0 {
            self.spawn_adhoc();
        }
        // Maintenance, one process at a time, about every 2 s. A maintenance
        // process lives 0.1 to 0.4 s (its procedure takes 20 to 300 ms), so
        // a third of them are killed 10 to 310 ms after they started, between
        // ticks (see `go`): while starting, in the procedure, or after it.
        if self.faults.maint && !self.running(self.maint) && r[10] < 1.0 / 15.0 {
            let op = MaintOp::ALL[(r[11] * 4.0) as usize % 4];
            self.spawn_maint(op);
            self.maint_kill_at = (self.faults.kill && r[12] < 1.0 / 3.0)
                .then(|| Instant::now() + Duration::from_millis(10 + (r[12] * 3.0 * 300.0) as u64));
        }
        if !self.running(self.ddl) {
            if let Some(key) = self.ddl {
                if self.may_lack_table(key) {
                    self.need_ensure = true;
                }
                self.ddl = None;
            }
            if self.need_ensure {
                self.need_ensure = false;
                self.ddl = Some(self.spawn_ddl(&[DdlOp::Ensure], false));
            } else if self.faults.ddl
                && tick < ddl_until
                && (r[5] < 1.0 / 200.0 || self.recreates == 0 && tick >= self.ticks / 2)
            {
                // About one every 20 s, and at least one by half time.
                self.recreates += 1;
                self.ddl = Some(self.spawn_ddl(&[DdlOp::Drop, DdlOp::Create], true));
            } else if self.faults.alter
                && (r[6] < 1.0 / 150.0 || self.alters == 0 && tick >= self.ticks * 4 / 10)
            {
                self.alters += 1;
                self.ddl = Some(self.spawn_ddl(&[DdlOp::Alter], true));
            }
        }
        if self.faults.kill && r[7] < 0.01 {
            let mut victims: Vec<usize> = Vec::new();
            if let Some(key) = self.ddl.filter(|k| self.procs[*k].killable) {
                victims.push(key);
            }
            victims.extend(self.adhoc);
            victims.extend(self.maint);
            victims.retain(|k| self.procs[*k].child.is_some());
            if !victims.is_empty() {
                let key = victims[(r[9] * victims.len() as f64) as usize % victims.len()];
                self.kill(key);
            }
        }
    }

    /// Stops everything, then reads and tiers from a fresh process.
    fn finish(&mut self) -> Report {
        self.stopping = true;
        // Writers first: what they acknowledged until now is the history.
        for slot in 0..WRITERS {
            if let Some(key) = self.writers[slot] {
                self.kill(key);
            }
        }
        // Short-lived processes finish what they do.
        let waited = Instant::now();
        while self.running(self.ddl) || self.running(self.adhoc) || self.running(self.maint) {
            self.pump_until(Instant::now() + TICK);
            self.reap();
            if waited.elapsed() > Duration::from_secs(60) {
                for key in [self.ddl, self.adhoc, self.maint].into_iter().flatten() {
                    if self.procs[key].child.is_some() {
                        let started = self.procs[key].started;
                        self.hung.push(format!(
                            "a {} process started at {}",
                            self.procs[key].kind.name(),
                            self.at(started)
                        ));
                        self.kill(key);
                    }
                }
            }
        }
        if let Some(key) = self.ddl.take() {
            if self.may_lack_table(key) {
                self.need_ensure = true;
            }
        }
        if self.need_ensure {
            self.ddl_to_end(&[DdlOp::Ensure]);
        }
        // The reader gets time to show the last rows, then stops.
        if self.running(self.reader) {
            self.pump_until(
                Instant::now() + Duration::from_micros(READER_GRACE_US as u64 + 1_000_000),
            );
            self.reap();
            if let Some(key) = self.reader {
                self.kill(key);
            }
        }
        if let Some(key) = self.service {
            self.kill(key);
        }
        for proc in &mut self.procs {
            if let Some(mut child) = proc.child.take() {
                let _ = child.kill();
                let _ = child.wait();
                proc.died = Some(now_us());
                proc.killed = true;
            }
        }
        // Every child is gone: their output ends, and every line is in.
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        while let Ok((key, line)) = self.lines_rx.try_recv() {
            self.line(key, &line);
        }
        let _ = self.log.flush();
        self.settle();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let options = self.place.options("off");
        let finals = runtime.block_on(async move {
            let fresh = || async {
                let mut ctx = LakeStreamContext::new();
                ctx.register_catalog("paimon", options.clone())
                    .await
                    .expect("catalog");
                ctx
            };
            let ctx = fresh().await;
            let rt_before = try_ids(&ctx, "SELECT id FROM t$rt").await;
            let tier = run(&ctx, TIER).await;
            let ctx = fresh().await;
            let t_after = try_ids(&ctx, "SELECT id FROM t").await;
            let rt_after = try_ids(&ctx, "SELECT id FROM t$rt").await;
            let snapshots = SnapshotState::read(&ctx).await;
            Finals {
                rt_before,
                tier,
                t_after,
                rt_after,
                snapshots,
            }
        });
        self.check(&finals)
    }

    /// Gives each statement and reader its end, from the processes' deaths.
    fn settle(&mut self) {
        let died: HashMap<i64, i64> = self
            .procs
            .iter()
            .filter_map(|p| match p.kind {
                Kind::Writer { instance } => Some((instance, p.died.unwrap_or_else(now_us))),
                _ => None,
            })
            .collect();
        for stmt in &mut self.stmts {
            if stmt.end.is_none() {
                stmt.end = Some(died.get(&stmt.writer).copied().unwrap_or_else(now_us));
            }
        }
        for proc in &self.procs {
            if let Some(index) = proc.reader {
                let run = &mut self.readers[index];
                if run.end.is_none() {
                    let died = proc.died.unwrap_or_else(now_us);
                    run.end = Some((died, ReaderEnd::Killed));
                }
            }
        }
    }

    /// Every DROP that began, with its end (or its process's death).
    fn drops(&self) -> Vec<DropRec> {
        let mut drops = Vec::new();
        for proc in &self.procs {
            for step in &proc.steps {
                if step.op != DdlOp::Drop {
                    continue;
                }
                let Some(start) = step.begin else { continue };
                if step.happened == Some(false) {
                    continue;
                }
                drops.push(DropRec {
                    start,
                    end: step.end.or(proc.died).unwrap_or_else(now_us),
                    done: step.result == Some(Ok(())) || step.happened == Some(true),
                });
            }
        }
        drops.sort_by_key(|d| d.start);
        drops
    }

    fn classify(stmt: &Stmt, drops: &[DropRec]) -> Class {
        let end = stmt.end.expect("settled");
        if drops.iter().any(|d| d.done && d.start > end) {
            return Class::Dropped;
        }
        let later = drops.iter().any(|d| d.start > end);
        let overlapping = drops.iter().any(|d| d.start <= end && d.end >= stmt.start);
        match &stmt.outcome {
            Outcome::Failed { unknown: false, .. } => Class::Failed,
            Outcome::Acked if !later && !overlapping => Class::Current,
            _ => Class::Maybe,
        }
    }

    fn describe(&self, id: i64) -> String {
        let Some(&index) = self.owner.get(&id) else {
            return format!("id {id} (never written)");
        };
        let stmt = &self.stmts[index];
        let end = stmt.end.map(|e| self.at(e)).unwrap_or_default();
        let how = match &stmt.outcome {
            Outcome::Acked => format!("acked {}–{end}", self.at(stmt.start)),
            Outcome::Failed { message, .. } => {
                let short: String = message.chars().take(160).collect();
                format!("failed {}–{end}: {short}", self.at(stmt.start))
            }
            Outcome::InFlight => format!(
                "in flight from {} until killed at {end}",
                self.at(stmt.start)
            ),
        };
        format!(
            "id {id} (writer #{}, a statement of {} rows, {how})",
            stmt.writer,
            stmt.ids.len()
        )
    }

    fn check(&self, finals: &Finals) -> Report {
        let drops = self.drops();
        let classes: Vec<Class> = self
            .stmts
            .iter()
            .map(|s| Self::classify(s, &drops))
            .collect();
        let mut failures = Failures::default();

        // The final reads.
        let reads: [(&str, &Result<Vec<i64>, String>); 3] = [
            ("t$rt before the final tiering", &finals.rt_before),
            ("t after the final tiering", &finals.t_after),
            ("t$rt after the final tiering", &finals.rt_after),
        ];
        if let Err(e) = &finals.tier {
            failures.add("the final tiering failed", one_line(e));
        }
        let mut missing_by_writer: BTreeMap<&str, BTreeMap<i64, usize>> = BTreeMap::new();
        for (name, read) in reads {
            let ids = match read {
                Ok(ids) => ids,
                Err(e) => {
                    failures.add(&format!("reading {name} failed"), one_line(e));
                    continue;
                }
            };
            let mut counts: HashMap<i64, usize> = HashMap::new();
            for id in ids {
                *counts.entry(*id).or_default() += 1;
            }
            for (id, n) in &counts {
                if !self.owner.contains_key(id) {
                    failures.add(
                        &format!("(d) {name}: rows never written"),
                        format!("id {id} ({n} times)"),
                    );
                }
            }
            for (stmt, class) in self.stmts.iter().zip(&classes) {
                let present: Vec<i64> = stmt
                    .ids
                    .iter()
                    .copied()
                    .filter(|id| counts.contains_key(id))
                    .collect();
                if !present.is_empty() && present.len() != stmt.ids.len() {
                    failures.add(
                        &format!("(d) {name}: statements partly visible"),
                        format!(
                            "{} rows of {} of: {}",
                            present.len(),
                            stmt.ids.len(),
                            self.describe(stmt.ids[0])
                        ),
                    );
                }
                for id in &stmt.ids {
                    let n = counts.get(id).copied().unwrap_or(0);
                    let wrong = match class {
                        Class::Current => n != 1,
                        Class::Maybe => n > 1,
                        Class::Dropped | Class::Failed => n > 0,
                    };
                    if !wrong {
                        continue;
                    }
                    let what = match (class, n) {
                        (Class::Current, 0) => "(a) acknowledged rows missing",
                        (Class::Dropped, _) => "(b) rows of a dropped incarnation present",
                        (Class::Failed, _) => {
                            "(d) rows of statements that failed (without saying the outcome is unknown) present"
                        }
                        _ => "(a) rows present more than once",
                    };
                    failures.add(
                        &format!("{what} in {name}"),
                        format!("{} ×{n}", self.describe(*id)),
                    );
                    if class == &Class::Current && n == 0 {
                        *missing_by_writer
                            .entry(name)
                            .or_default()
                            .entry(stmt.writer)
                            .or_default() += 1;
                    }
                }
            }
        }
        for (name, by_writer) in &missing_by_writer {
            let list: Vec<String> = by_writer
                .iter()
                .map(|(writer, n)| format!("writer #{writer}: {n}"))
                .collect();
            failures.note(
                &format!("(a) acknowledged rows missing in {name}"),
                format!("missing rows by writer: {}", list.join(", ")),
            );
        }
        if let (Ok(t), Ok(rt)) = (&finals.t_after, &finals.rt_after) {
            let t: HashSet<i64> = t.iter().copied().collect();
            let rt: HashSet<i64> = rt.iter().copied().collect();
            for id in t.symmetric_difference(&rt) {
                failures.add(
                    "after the final tiering, t and t$rt differ",
                    format!(
                        "{} in {}",
                        self.describe(*id),
                        if t.contains(id) {
                            "t only"
                        } else {
                            "t$rt only"
                        }
                    ),
                );
            }
        }

        for hung in &self.hung {
            failures.add(
                "(e) short-lived processes still running 60 s after the run (killed)",
                hung.clone(),
            );
        }
        // Progress: the table keeps taking writes (between a DROP and its
        // CREATE, writes fail for a moment, not for seconds).
        let mut by_start: Vec<&Stmt> = self.stmts.iter().collect();
        by_start.sort_by_key(|s| s.start);
        let mut failing: Option<(i64, usize, String)> = None;
        // A DDL process killed while it held the schema lock on S3 (a
        // lease; on disk a file lock, which the kill releases) holds up the next DDL until the lease expires: the wait
        // after a kill, up to the lease's 30 s and the next CREATE's own
        // few seconds, is the documented wait, not a stuck table.
        let lease_waits: Vec<(i64, i64)> = self
            .procs
            .iter()
            .filter(|p| matches!(self.place, Place::S3 { .. }) && p.kind == Kind::Ddl && p.killed)
            .filter_map(|p| p.died)
            .map(|k| (k, k + SCHEMA_LEASE_WAIT_US))
            .collect();
        let stuck = |from: i64, to: i64, n: usize, message: &str, failures: &mut Failures| {
            if longest_outside(from, to, &lease_waits) > STUCK_US {
                let short: String = message.chars().take(200).collect();
                failures.add(
                    "(e) every write failed for more than 10 s in a row",
                    format!(
                        "{}–{}: {n} statements failed, the last with: {short}",
                        self.at(from),
                        self.at(to)
                    ),
                );
            }
        };
        for stmt in &by_start {
            match &stmt.outcome {
                Outcome::Acked => {
                    if let Some((from, n, message)) = failing.take() {
                        stuck(from, stmt.start, n, &message, &mut failures);
                    }
                }
                Outcome::Failed { message, .. } => {
                    let entry = failing.get_or_insert((stmt.start, 0, String::new()));
                    entry.1 += 1;
                    entry.2 = message.clone();
                }
                Outcome::InFlight => {}
            }
        }
        if let (Some((from, n, message)), Some(last)) = (failing, by_start.last()) {
            stuck(from, last.start, n, &message, &mut failures);
        }

        self.check_maintained(finals, &mut failures);
        self.check_missing_files(&drops, &mut failures);

        // The streaming readers.
        let mut readers_checked = 0;
        let mut reader_errors = Vec::new();
        for (index, run) in self.readers.iter().enumerate() {
            self.check_reader(
                index,
                run,
                &drops,
                &classes,
                &mut failures,
                &mut readers_checked,
                &mut reader_errors,
            );
        }

        Report {
            summary: self.summary(&drops, &classes, finals, readers_checked, &reader_errors),
            failures,
        }
    }

    /// (g): no process found a data file missing, unless a DROP (which
    /// deletes the files) began while it ran, and ended at most 5 s before.
    fn check_missing_files(&self, drops: &[DropRec], failures: &mut Failures) {
        for (key, at, line) in &self.counters.missing_files {
            let proc = &self.procs[*key];
            // A DROP that began before the error, after (or soon after) the
            // process started, and had ended at most 5 s before the error.
            if drops
                .iter()
                .any(|d| d.start <= *at && d.end >= proc.started && *at - d.end < 5_000_000)
            {
                continue;
            }
            let short: String = line.chars().take(400).collect();
            failures.add(
                "(g) a process found a data file missing (no DROP while it ran)",
                format!(
                    "{} process {key} (started {}), at {}: {short}",
                    proc.kind.name(),
                    self.at(proc.started),
                    self.at(*at)
                ),
            );
        }
    }

    /// (f): the run did exercise maintenance, so that the checks above were
    /// checks of a maintained table.
    fn check_maintained(&self, finals: &Finals, failures: &mut Failures) {
        let c = &self.counters;
        if let Err(e) = &finals.snapshots {
            failures.add(
                "reading t$snapshots after the final tiering failed",
                e.clone(),
            );
        }
        for (op, count) in &c.maint {
            if count.ok == 0 && count.ok + count.failed >= 3 {
                failures.add(
                    "(f) a maintenance procedure that ran at least 3 times never succeeded",
                    format!(
                        "{}: {} failed, e.g. {}",
                        op.name(),
                        count.failed,
                        c.maint_errors
                            .iter()
                            .find(|e| e.starts_with(&format!("{} at", op.name())))
                            .cloned()
                            .unwrap_or_default()
                    ),
                );
            }
        }
        // Without tiering during the run, only the final tiering commits to
        // Paimon: nothing to compact or expire before it.
        if !self.faults.tier {
            return;
        }
        let states = c
            .snapshot_samples
            .iter()
            .chain(finals.snapshots.as_ref().ok());
        let compacted = c.maint_published > 0 || states.clone().any(|s| s.compacts > 0);
        let expired = c.maint_expired > 0 || states.clone().any(|s| s.earliest > Some(1));
        // Evidence is asked of a procedure that ran to its end at least
        // three times, as above: a slow machine may start one only once
        // in a short run, over a table just created again.
        let ran = |op: MaintOp| c.maint.get(&op).map_or(0, |m| m.ok + m.failed);
        if !compacted && ran(MaintOp::Compact) >= 3 {
            failures.add(
                "(f) no compaction was seen during the run",
                format!(
                    "no compaction answered a snapshot, and t$snapshots never showed a COMPACT one ({} reads)",
                    c.snapshot_samples.len() + usize::from(finals.snapshots.is_ok())
                ),
            );
        }
        if !expired && ran(MaintOp::Expire) >= 3 {
            failures.add(
                "(f) no snapshot expired during the run",
                format!(
                    "no expiry answered an expired snapshot, and t$snapshots never began after snapshot 1 ({} reads)",
                    c.snapshot_samples.len() + usize::from(finals.snapshots.is_ok())
                ),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_reader(
        &self,
        index: usize,
        run: &ReaderRun,
        drops: &[DropRec],
        classes: &[Class],
        failures: &mut Failures,
        checked: &mut usize,
        errors: &mut Vec<String>,
    ) {
        let name = format!("streaming reader {index}");
        let (end, how) = run.end.clone().expect("settled");
        let mut counts: HashMap<i64, usize> = HashMap::new();
        for id in &run.seen {
            *counts.entry(*id).or_default() += 1;
        }
        for (id, n) in &counts {
            match self.owner.get(id) {
                None => failures.add(
                    "(d) streaming readers saw rows never written",
                    format!("{name}: id {id}"),
                ),
                Some(&s) => {
                    if *n > 1 {
                        failures.add(
                            "(c) streaming readers saw a row more than once",
                            format!("{name}: {} ×{n}", self.describe(*id)),
                        );
                    }
                    if classes[s] == Class::Failed {
                        failures.add(
                            "(d) streaming readers saw rows of statements that failed (without saying the outcome is unknown)",
                            format!("{name}: {}", self.describe(*id)),
                        );
                    }
                }
            }
        }
        let Some(start) = run.start else {
            return;
        };
        // Rows of an incarnation dropped before the read started.
        for drop in drops.iter().filter(|d| d.done && d.end < start) {
            for (id, _) in counts.iter() {
                let Some(&s) = self.owner.get(id) else {
                    continue;
                };
                if self.stmts[s].end.expect("settled") < drop.start {
                    failures.add(
                        "(b) streaming readers saw rows of a table dropped before they started",
                        format!(
                            "{name} (started {}, drop {}–{}): {}",
                            self.at(start),
                            self.at(drop.start),
                            self.at(drop.end),
                            self.describe(*id)
                        ),
                    );
                }
            }
        }
        if let ReaderEnd::Error(message) = &how {
            errors.push(format!("{name} at {}: {message}", self.at(end)));
            return;
        }
        let Some(planned) = run.planned else {
            return;
        };
        // Its incarnation: it must have started and planned between drops.
        if drops.iter().any(|d| d.start <= planned && d.end >= start) {
            return;
        }
        let after = drops
            .iter()
            .filter(|d| d.end < start)
            .map(|d| d.end)
            .max()
            .unwrap_or(i64::MIN);
        let next_drop = drops
            .iter()
            .filter(|d| d.start > planned)
            .map(|d| d.start)
            .min();
        if how == ReaderEnd::Ended && next_drop.is_none_or(|d| d > end) {
            failures.add(
                "(c) streaming reads that ended on their own",
                format!("{name}: started {}, ended {}", self.at(start), self.at(end)),
            );
        }
        // A reader stopped soon after it planned had no time to show the
        // rows it starts with: nothing to hold it to.
        if end - planned < READER_GRACE_US {
            return;
        }
        let horizon = next_drop.unwrap_or(i64::MAX).min(end - READER_GRACE_US);
        *checked += 1;
        let mut required = 0;
        let mut missed = Vec::new();
        for stmt in &self.stmts {
            if !matches!(stmt.outcome, Outcome::Acked) {
                continue;
            }
            let stmt_end = stmt.end.expect("settled");
            if stmt.start <= after || stmt_end >= horizon {
                continue;
            }
            required += stmt.ids.len();
            missed.extend(stmt.ids.iter().filter(|id| !counts.contains_key(id)));
        }
        if missed.is_empty() {
            return;
        }
        let last_seen = run.last_seen.map_or("never".to_string(), |t| self.at(t));
        let examples: Vec<String> = missed.iter().take(3).map(|id| self.describe(*id)).collect();
        failures.add(
            "(c) streaming readers missed acknowledged rows (one line per reader)",
            format!(
                "{name} (started {}, planned {}, stopped {}, last row shown at {last_seen}): \
                 missed {} of the {required} rows it had to show, first: {}",
                self.at(start),
                self.at(planned),
                self.at(end),
                missed.len(),
                examples.join("; ")
            ),
        );
    }

    fn summary(
        &self,
        drops: &[DropRec],
        classes: &[Class],
        finals: &Finals,
        readers_checked: usize,
        reader_errors: &[String],
    ) -> String {
        let mut s = String::new();
        let count = |f: &dyn Fn(&Stmt) -> bool| self.stmts.iter().filter(|s| f(s)).count();
        let acked = count(&|s| matches!(s.outcome, Outcome::Acked));
        let failed = count(&|s| matches!(s.outcome, Outcome::Failed { .. }));
        let unknown = count(&|s| matches!(s.outcome, Outcome::Failed { unknown: true, .. }));
        let in_flight = count(&|s| matches!(s.outcome, Outcome::InFlight));
        let rows_acked: usize = self
            .stmts
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Acked))
            .map(|s| s.ids.len())
            .sum();
        let by_class = |c: Class| classes.iter().filter(|x| **x == c).count();
        let _ = writeln!(s, "history seed {} summary:", self.seed);
        let _ = writeln!(
            s,
            "  writes: {} statements tried, {acked} acknowledged ({rows_acked} rows), {failed} failed ({unknown} saying the outcome is unknown), {in_flight} in flight when killed",
            self.stmts.len()
        );
        let _ = writeln!(
            s,
            "  classes: {} current, {} maybe, {} dropped, {} failed",
            by_class(Class::Current),
            by_class(Class::Maybe),
            by_class(Class::Dropped),
            by_class(Class::Failed)
        );
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        for stmt in &self.stmts {
            if let Outcome::Failed { message, .. } = &stmt.outcome {
                let short: String = message.chars().take(120).collect();
                *errors.entry(short).or_default() += 1;
            }
        }
        for (message, n) in errors.iter().take(8) {
            let _ = writeln!(s, "    write error ×{n}: {message}");
        }
        let _ = writeln!(s, "  processes started: {:?}", self.counters.spawned);
        let _ = writeln!(s, "  kills: {:?}", self.counters.kills);
        let drop_list: Vec<String> = drops
            .iter()
            .map(|d| {
                format!(
                    "{}–{}{}",
                    self.at(d.start),
                    self.at(d.end),
                    if d.done {
                        ""
                    } else {
                        " (not known to be done)"
                    }
                )
            })
            .collect();
        let _ = writeln!(s, "  drops: {} [{}]", drops.len(), drop_list.join(", "));
        let not_happened = self
            .procs
            .iter()
            .flat_map(|p| p.steps.iter())
            .filter(|st| st.op == DdlOp::Drop && st.happened == Some(false))
            .count();
        if not_happened > 0 {
            let _ = writeln!(
                s,
                "    and {not_happened} DROPs cut short that did not drop the table (its incarnation did not change)"
            );
        }
        let creates: Vec<String> = self
            .procs
            .iter()
            .flat_map(|p| p.steps.iter())
            .filter(|st| matches!(st.op, DdlOp::Create | DdlOp::Ensure))
            .filter_map(|st| {
                st.begin.map(|b| {
                    format!(
                        "{}{}",
                        self.at(b),
                        match &st.result {
                            Some(Ok(())) => "",
                            Some(Err(_)) => " (failed)",
                            None => " (no answer)",
                        }
                    )
                })
            })
            .collect();
        let _ = writeln!(s, "  creates: {} [{}]", creates.len(), creates.join(", "));
        for proc in &self.procs {
            for step in &proc.steps {
                if let Some(Err(e)) = &step.result {
                    let short: String = e.chars().take(160).collect();
                    let _ = writeln!(s, "    {:?} failed: {short}", step.op);
                }
            }
        }
        let alters = self
            .procs
            .iter()
            .flat_map(|p| p.steps.iter())
            .filter(|st| st.op == DdlOp::Alter)
            .count();
        let alters_ok = self
            .procs
            .iter()
            .flat_map(|p| p.steps.iter())
            .filter(|st| st.op == DdlOp::Alter && st.result == Some(Ok(())))
            .count();
        let _ = writeln!(s, "  add column: {alters} tried, {alters_ok} ok");
        let _ = writeln!(
            s,
            "  tierings: service {} rounds with rows ({} rows); ad hoc {} ok ({} rows), {} failed; final: {}",
            self.counters.service_rounds,
            self.counters.service_rows,
            self.counters.adhoc_ok,
            self.counters.adhoc_rows,
            self.counters.adhoc_errors.len(),
            match &finals.tier {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("failed: {e}"),
            }
        );
        for e in self.counters.adhoc_errors.iter().take(5) {
            let short: String = e.chars().take(160).collect();
            let _ = writeln!(s, "    ad-hoc tiering failed: {short}");
        }
        let c = &self.counters;
        let by_op: Vec<String> = c
            .maint
            .iter()
            .map(|(op, n)| {
                format!(
                    "{} {} started, {} ok, {} failed",
                    op.name(),
                    n.started,
                    n.ok,
                    n.failed
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  maintenance (t WITH {MAINTENANCE_OPTIONS}): {}",
            if by_op.is_empty() {
                "none run".to_string()
            } else {
                by_op.join("; ")
            }
        );
        let most_compacts = c.snapshot_samples.iter().map(|s| s.compacts).max();
        let latest_earliest = c.snapshot_samples.iter().filter_map(|s| s.earliest).max();
        let _ = writeln!(
            s,
            "    {} compactions published a snapshot, {} snapshots expired, {} orphan files deleted (on request); \
             t$snapshots read {} times after them: most COMPACT snapshots at once {most_compacts:?}, latest earliest snapshot {latest_earliest:?}",
            c.maint_published,
            c.maint_expired,
            c.maint_orphans,
            c.snapshot_samples.len()
        );
        let mut maint_errors: BTreeMap<String, usize> = BTreeMap::new();
        for e in &c.maint_errors {
            // Without the time, so that alike errors count together.
            let (op, rest) = e.split_once(" at ").unwrap_or((e, ""));
            let message = rest.split_once(": ").map_or(rest, |(_, m)| m);
            let short: String = message.chars().take(140).collect();
            *maint_errors.entry(format!("{op}: {short}")).or_default() += 1;
        }
        for (e, n) in maint_errors.iter().take(8) {
            let _ = writeln!(s, "    maintenance failed ×{n}: {e}");
        }
        let _ = writeln!(
            s,
            "  t$snapshots after the final tiering: {}",
            match &finals.snapshots {
                Ok(st) => format!(
                    "{} snapshots ({:?}..{:?}), {} COMPACT",
                    st.count, st.earliest, st.latest, st.compacts
                ),
                Err(e) => format!("error: {e}"),
            }
        );
        let seen: usize = self.readers.iter().map(|r| r.seen.len()).sum();
        let _ = writeln!(
            s,
            "  streaming readers: {} started, {readers_checked} checked for completeness, {} ended with an error, {seen} rows seen",
            self.readers.len(),
            reader_errors.len()
        );
        for e in reader_errors.iter().take(5) {
            let short: String = e.chars().take(200).collect();
            let _ = writeln!(s, "    {short}");
        }
        for f in &self.counters.fatal {
            let _ = writeln!(s, "  a child could not start: {f}");
        }
        let sizes = |r: &Result<Vec<i64>, String>| match r {
            Ok(v) => v.len().to_string(),
            Err(_) => "error".to_string(),
        };
        let _ = writeln!(
            s,
            "  final reads: t$rt before tiering {} rows, t after {} rows, t$rt after {} rows",
            sizes(&finals.rt_before),
            sizes(&finals.t_after),
            sizes(&finals.rt_after)
        );
        s
    }
}

struct Finals {
    rt_before: Result<Vec<i64>, String>,
    tier: Result<(), String>,
    t_after: Result<Vec<i64>, String>,
    rt_after: Result<Vec<i64>, String>,
    /// `t$snapshots` after the final tiering (and the maintenance it runs).
    snapshots: Result<SnapshotState, String>,
}

/// Failures by what went wrong, with examples.
#[derive(Default)]
struct Failures {
    by_kind: BTreeMap<String, (usize, Vec<String>)>,
    notes: BTreeMap<String, Vec<String>>,
}

impl Failures {
    fn add(&mut self, kind: &str, example: String) {
        let entry = self.by_kind.entry(kind.to_string()).or_default();
        entry.0 += 1;
        if entry.1.len() < EXAMPLES {
            entry.1.push(example);
        }
    }

    /// A line printed after a kind's examples.
    fn note(&mut self, kind: &str, note: String) {
        self.notes.entry(kind.to_string()).or_default().push(note);
    }

    fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    fn render(&self) -> String {
        let mut s = String::new();
        for (kind, (n, examples)) in &self.by_kind {
            let _ = writeln!(s, "FAILED {kind}: {n}");
            for e in examples {
                let _ = writeln!(s, "    {e}");
            }
            if *n > examples.len() {
                let _ = writeln!(s, "    ... and {} more", n - examples.len());
            }
            for note in self.notes.get(kind).into_iter().flatten() {
                let _ = writeln!(s, "    {note}");
            }
        }
        s
    }
}

struct Report {
    summary: String,
    failures: Failures,
}

#[test]
fn longest_outside_subtracts_the_excused_windows() {
    assert_eq!(longest_outside(0, 100, &[]), 100);
    assert_eq!(longest_outside(0, 100, &[(10, 40)]), 60);
    assert_eq!(longest_outside(0, 100, &[(-50, 30), (60, 200)]), 30);
    assert_eq!(longest_outside(0, 100, &[(20, 50), (30, 70)]), 30);
    assert_eq!(longest_outside(0, 100, &[(200, 300)]), 100);
    assert_eq!(longest_outside(0, 100, &[(0, 100)]), 0);
}

#[test]
fn history_checker() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    check_history(false, "LAKESTREAM_HISTORY_SECS", 60);
}

/// The same history with `t` and the store in a bucket of the S3 test
/// server: every process reaches it with the keys in its environment, the
/// tiering service and the background tierers race with no lock but the
/// conditional writes (`LAKESTREAM_HISTORY_S3_SECS`, default 40).
#[test]
fn history_checker_on_s3() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    check_history(true, "LAKESTREAM_HISTORY_S3_SECS", 40);
}

fn check_history(on_s3: bool, secs_env: &str, default_secs: u64) {
    let _one_run = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
    let seed = match std::env::var("LAKESTREAM_HISTORY_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .expect("LAKESTREAM_HISTORY_SEED: a number"),
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64;
            Rng::new(nanos ^ u64::from(std::process::id())).next_u64() % 1_000_000_000
        }
    };
    let secs: u64 = std::env::var(secs_env)
        .map(|t| t.trim().parse().expect("seconds"))
        .unwrap_or(default_secs);
    let began = Instant::now();
    let mut run = Run::new(seed, secs, Faults::from_env(), on_s3);
    let report = run.go();
    println!("{}", report.summary);
    println!("  run time: {:.1} s", began.elapsed().as_secs_f64());
    if report.failures.is_empty() {
        return;
    }
    let kept = run.dir.take().map(|d| d.keep()).unwrap_or_default();
    let failures = report.failures.render();
    println!("{failures}");
    let _ = std::fs::write(
        kept.join("failures.txt"),
        format!("{}\n{failures}", report.summary),
    );
    let kinds: Vec<String> = report
        .failures
        .by_kind
        .iter()
        .map(|(kind, (n, _))| format!("{kind}: {n}"))
        .collect();
    panic!(
        "history seed {seed}: the history check failed: {}. Details above and in {}/failures.txt. \
         Replay: LAKESTREAM_HISTORY_SEED={seed} {secs_env}={secs} cargo test --test it {}",
        kinds.join("; "),
        kept.display(),
        if on_s3 {
            "history_checker_on_s3"
        } else {
            "history_checker"
        },
    );
}
