//! The Fluss store against a real Fluss 0.9.1 cluster, started from the jars
//! on Maven Central by `scripts/fluss-cluster.sh` (Java 17 and Maven needed).
//!
//! One cluster serves every test of this binary run: it starts on first use,
//! and a watchdog process stops it once the test process has exited (also
//! after a panic or a kill). Tests use table names of their own.
//!
//! The end-to-end tiering test runs Fluss's own tiering service (a Flink job)
//! on a cluster of its own (`LAKESTREAM_FLUSS_TIERING=0` at build time ignores it).

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use fluss::client::FlussConnection;
use fluss::config::Config;
use fluss::metadata::{DataTypes, Schema, TableBucket, TableDescriptor, TablePath};
use paimon_lakestream::LakeStreamContext;

use crate::support::{CatalogKind, TestWarehouse};
use paimon_lakestream::testing::{Capability, StoreCondition, StoreHarness, Warehouse};

/// A running cluster: its address and the Paimon warehouse it tiers into.
#[derive(Clone)]
pub(crate) struct Cluster {
    pub(crate) bootstrap: String,
    pub(crate) warehouse: PathBuf,
    pub(crate) state_file: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fluss-cluster.sh")
}

/// The script with `args` on the cluster recorded in `state_file`.
fn run_script(state_file: &Path, args: &[&str]) -> Result<(), String> {
    let command = args.join(" ");
    let status = Command::new(script())
        .args(args)
        .env("FLUSS_STATE_FILE", state_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "scripts/fluss-cluster.sh {command} failed: {status}"
        ))
    }
}

impl Cluster {
    /// Starts a cluster whose state is recorded under `dir`, stopped by a
    /// watchdog when this process exits.
    pub(crate) fn start(dir: &Path) -> Result<Self, String> {
        Self::start_with(dir, &[])
    }

    /// [`Self::start`], with more of the script's environment (e.g.
    /// `FLUSS_TABLETS`).
    pub(crate) fn start_with(dir: &Path, env: &[(&str, &str)]) -> Result<Self, String> {
        assert_fluss_wanted();
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let state_file = dir.join("cluster.state");
        // The coordinator checks Paimon tables our catalog changes
        // underneath it: no cached copies.
        let mut extra = "datalake.paimon.cache-enabled: false".to_string();
        for (key, value) in env {
            if *key == "FLUSS_EXTRA_CONFIG" {
                extra = format!("{extra}\n{value}");
            }
        }
        // A start can fail for reasons of the moment: a coordinator that
        // loses ZooKeeper while other clusters start on a loaded machine
        // exits. The script stops what it started; one more try follows.
        let start = || {
            Command::new(script())
                .arg("start")
                .envs(
                    env.iter()
                        .copied()
                        .filter(|(k, _)| *k != "FLUSS_EXTRA_CONFIG"),
                )
                .env("FLUSS_STATE_FILE", &state_file)
                .env("FLUSS_EXTRA_CONFIG", &extra)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script().display()))
        };
        let mut output = start()?;
        // Whatever happened, the watchdog stops what was started.
        spawn_watchdog(&state_file, dir);
        if !output.status.success() {
            eprintln!(
                "scripts/fluss-cluster.sh start failed ({}); stopping what is left and trying once more",
                output.status
            );
            let _ = run_script(&state_file, &["stop"]);
            std::thread::sleep(Duration::from_secs(5));
            output = start()?;
        }
        if !output.status.success() {
            return Err(format!(
                "scripts/fluss-cluster.sh start failed twice ({}); see its output above",
                output.status
            ));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let bootstrap = stdout
            .lines()
            .last()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .ok_or("scripts/fluss-cluster.sh start printed no address")?
            .to_string();
        let state = std::fs::read_to_string(&state_file)
            .map_err(|e| format!("{}: {e}", state_file.display()))?;
        let warehouse = state
            .lines()
            .find_map(|l| l.strip_prefix("WAREHOUSE="))
            .map(|w| PathBuf::from(w.trim_matches('\'')))
            .ok_or("the cluster's state file names no warehouse")?;
        Ok(Self {
            bootstrap,
            warehouse,
            state_file,
        })
    }

    /// The id of the tablet server leading bucket `bucket` of
    /// `default.<table>`, if the cluster says.
    pub(crate) async fn leader(&self, table: &str, bucket: i32) -> Option<i32> {
        let connection = self.connection().await;
        let path = TablePath::new("default", table);
        let fluss_table = connection.get_table(&path).await.ok()?;
        let bucket = TableBucket::new(fluss_table.get_table_info().get_table_id(), bucket);
        let leader = connection.get_metadata().leader_for(&path, &bucket).await;
        leader.ok().flatten().map(|node| node.id())
    }

    /// The coordinator's address.
    pub(crate) fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The Paimon warehouse the cluster tiers into.
    pub(crate) fn warehouse(&self) -> &Path {
        &self.warehouse
    }

    pub(crate) fn run(&self, command: &str) -> Result<(), String> {
        self.run_args(&[command])
    }

    /// The script with `args` (e.g. `["restart-tablet", "1"]`) on this cluster.
    pub(crate) fn run_args(&self, args: &[&str]) -> Result<(), String> {
        run_script(&self.state_file, args)
    }

    /// Fluss's client, for setting up the Fluss side by hand.
    pub(crate) async fn connection(&self) -> FlussConnection {
        let config = Config {
            bootstrap_servers: self.bootstrap.clone(),
            ..Config::default()
        };
        FlussConnection::new(config)
            .await
            .expect("connect to the test cluster")
    }
}

/// `scripts/fluss-cluster.sh stop` once this process is gone, from a process
/// of its own session, so neither a panic nor Ctrl-C leaves JVMs behind.
fn spawn_watchdog(state_file: &Path, dir: &Path) {
    let watch = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         FLUSS_STATE_FILE='{state}' '{script}' stop >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        state = state_file.display(),
        script = script().display(),
        dir = dir.display(),
    );
    let mut command = if Path::new("/usr/bin/setsid").exists() {
        let mut c = Command::new("/usr/bin/setsid");
        c.arg("sh");
        c
    } else {
        Command::new("sh")
    };
    let spawned = command
        .arg("-c")
        .arg(watch)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("cannot start the Fluss cluster watchdog: {e}; stop the cluster by hand");
    }
}

/// The cluster of this test process.
pub(crate) fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    let started = CLUSTER.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("paimon-lakestream-fluss-{}", std::process::id()));
        Cluster::start(&dir)
    });
    match started {
        Ok(cluster) => cluster,
        Err(e) => panic!("no Fluss cluster for the test: {e}"),
    }
}

/// The context of a child process of a Fluss test: a catalog on the
/// warehouse `CHILD_WAREHOUSE` whose store is the cluster at
/// `CHILD_BOOTSTRAP` (set by the parent).
pub(crate) async fn child_context() -> LakeStreamContext {
    let env = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} not set"));
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog(
        "paimon",
        [
            ("warehouse", env("CHILD_WAREHOUSE")),
            ("lakestream.store", "fluss".to_string()),
            ("fluss.bootstrap.servers", env("CHILD_BOOTSTRAP")),
            ("fluss.client.request-timeout", "20s".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    )
    .await
    .expect("catalog");
    ctx
}

/// A cluster of its own with Fluss's tiering service for test `name`. Tests
/// that need it are ignored when built with `LAKESTREAM_FLUSS_TIERING=0`
/// (see build.rs).
pub(crate) async fn tiering_cluster(name: &str) -> Cluster {
    assert_tiering_wanted();
    let dir = std::env::temp_dir().join(format!(
        "paimon-lakestream-fluss-{name}-{}",
        std::process::id()
    ));
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(&dir))
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("no Fluss cluster for the tiering test: {e}"));
    cluster
}

/// A test that needs Fluss's tiering service runs only when it is wanted:
/// a binary built without `LAKESTREAM_FLUSS_TIERING=0` but run with it fails
/// rather than passes (cargo rebuilds when the variable changes).
pub(crate) fn assert_tiering_wanted() {
    assert!(
        std::env::var("LAKESTREAM_FLUSS_TIERING").as_deref() != Ok("0"),
        "LAKESTREAM_FLUSS_TIERING=0, but this test binary was built without it: \
         run it through cargo, which rebuilds it and ignores the tiering tests"
    );
}

/// A Fluss cluster starts only when the Fluss tests are wanted: a binary
/// built without `LAKESTREAM_FLUSS=0` but run with it fails rather than
/// starts a cluster the run was asked to leave out (cargo rebuilds when the
/// variable changes, which ignores the Fluss tests: see build.rs).
pub(crate) fn assert_fluss_wanted() {
    assert!(
        std::env::var("LAKESTREAM_FLUSS").as_deref() != Ok("0") || cfg!(fluss_off),
        "LAKESTREAM_FLUSS=0, but this test binary was built without it: run it through \
         cargo, which rebuilds it and ignores the Fluss tests"
    );
}

/// A closed loopback port: connecting to it is refused at once.
pub(crate) fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let address = listener.local_addr().expect("local address");
    drop(listener);
    address.to_string()
}

/// Opens contexts on the cluster's warehouse whose catalog names the Fluss store.
pub struct FlussHarness {
    bootstrap: String,
    warehouse: PathBuf,
    extra: Vec<(String, String)>,
}

impl FlussHarness {
    pub(crate) fn on(cluster: &Cluster) -> Self {
        Self {
            bootstrap: cluster.bootstrap.clone(),
            warehouse: cluster.warehouse.clone(),
            extra: Vec::new(),
        }
    }

    pub(crate) fn with(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }
}

#[async_trait]
impl StoreHarness for FlussHarness {
    fn identifier(&self) -> &str {
        "fluss"
    }

    /// Fluss's own tiering service tiers: no tiering on request.
    fn capabilities(&self) -> Vec<Capability> {
        vec![Capability::Deletes]
    }

    async fn warehouse(&self) -> Warehouse {
        TestWarehouse::existing(&self.warehouse).into_inner()
    }

    async fn open(&self, warehouse: &Warehouse, condition: StoreCondition) -> LakeStreamContext {
        let bootstrap = match condition {
            StoreCondition::Reachable => self.bootstrap.clone(),
            // A silent cluster and a closed port fail the same way here:
            // within the client's timeouts, naming the servers.
            StoreCondition::Unreachable | StoreCondition::Slow => closed_port(),
        };
        let mut options: Vec<(&str, &str)> = vec![
            ("lakestream.store", "fluss"),
            ("fluss.bootstrap.servers", &bootstrap),
            ("fluss.client.connect-timeout", "2s"),
            // A new table's buckets get leaders within seconds, but on a
            // 2-core machine running tests beside the cluster's JVMs it has
            // taken over 20 s: a bound for a stalled cluster, not a slow one.
            ("fluss.client.request-timeout", "60s"),
        ];
        if condition == StoreCondition::Reachable {
            // The bound of each store call, above the request timeout.
            options.push(("lakestream.timeout", "90s"));
        } else {
            options.push(("lakestream.timeout", "5s"));
        }
        options.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        warehouse.context_with(&options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn conformance_fluss() {
    let cluster = tokio::task::spawn_blocking(cluster)
        .await
        .expect("cluster start");
    paimon_lakestream::testing::conformance(Arc::new(FlussHarness::on(cluster))).await;
}

/// Held by each test that starts a cluster of several tablet servers of its
/// own and kills them: on a 2-core machine, two of them at once (with the
/// shared clusters' tests beside them) starve the servers' JVMs until leader
/// elections take longer than the client's timeouts.
pub(crate) async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}

pub(crate) async fn query(
    ctx: &LakeStreamContext,
    sql: &str,
) -> datafusion::error::Result<Vec<RecordBatch>> {
    // Boxed: planning futures are large in debug builds, and a test body
    // awaiting many of them would otherwise overflow the test thread's stack.
    Box::pin(async { ctx.sql(sql).await?.collect().await }).await
}

pub(crate) async fn run(ctx: &LakeStreamContext, sql: &str) -> Vec<RecordBatch> {
    match query(ctx, sql).await {
        Ok(batches) => batches,
        Err(e) => panic!("{sql}: {e}"),
    }
}

pub(crate) async fn fails(ctx: &LakeStreamContext, sql: &str) -> String {
    match query(ctx, sql).await {
        Ok(_) => panic!("{sql}: expected an error"),
        Err(e) => e.to_string(),
    }
}

/// The rows of a result as `a|b|c` lines, sorted.
pub(crate) fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, row).unwrap_or_else(|e| e.to_string()))
                .collect();
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}

pub(crate) async fn open(
    harness: &FlussHarness,
    condition: StoreCondition,
) -> (TestWarehouse, LakeStreamContext) {
    let warehouse = TestWarehouse::existing(&harness.warehouse);
    let ctx = harness.open(&warehouse, condition).await;
    (warehouse, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn fluss_tables_match_paimon_and_hide_system_columns() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fx_shape (k INT NOT NULL, v STRING, n BIGINT, PRIMARY KEY (k)) \
               WITH ('bucket' = '2')",
    )
    .await;
    run(&ctx, "INSERT INTO fx_shape VALUES (1, 'paimon', 10)").await;
    run(
        &ctx,
        "ALTER TABLE fx_shape SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;

    // The Fluss table: same columns, key and buckets, tiering on.
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    let info = admin
        .get_table_info(&TablePath::new("default", "fx_shape"))
        .await
        .expect("the Fluss table exists");
    assert_eq!(info.get_row_type().get_field_names(), vec!["k", "v", "n"]);
    assert_eq!(info.get_primary_keys(), &vec!["k".to_string()]);
    assert_eq!(info.get_num_buckets(), 2);
    assert_eq!(
        info.get_properties()
            .get("table.datalake.enabled")
            .map(String::as_str),
        Some("true")
    );

    // The Paimon table carries Fluss's system columns, but t and t$rt show
    // the table's own columns, and INSERT takes them.
    let catalog = paimon::CatalogFactory::create(paimon::Options::from_map(HashMap::from([(
        "warehouse".to_string(),
        cluster.warehouse.to_string_lossy().into_owned(),
    )])))
    .await
    .expect("paimon catalog");
    let paimon_table = catalog
        .get_table(&paimon::catalog::Identifier::new("default", "fx_shape"))
        .await
        .expect("paimon table");
    let names: Vec<&str> = paimon_table
        .schema()
        .fields()
        .iter()
        .map(|f| f.name())
        .collect();
    assert_eq!(
        names,
        vec!["k", "v", "n", "__bucket", "__offset", "__timestamp"]
    );
    run(&ctx, "INSERT INTO fx_shape VALUES (2, 'fluss', 20)").await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_shape").await),
        vec!["1|paimon|10"]
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_shape$rt").await),
        vec!["1|paimon|10", "2|fluss|20"]
    );
    let columns = lines(
        &run(
            &ctx,
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'fx_shape'",
        )
        .await,
    );
    assert_eq!(columns, vec!["k", "n", "v"]);

    // Fluss fixes the columns: a column added to Paimon would come after
    // the system columns, so ADD COLUMN is refused and changes nothing.
    let error = fails(&ctx, "ALTER TABLE fx_shape ADD COLUMN extra INT").await;
    assert!(
        error.contains("ADD COLUMN extra") && error.contains("__bucket, __offset, __timestamp"),
        "{error}"
    );
    let paimon_table = catalog
        .get_table(&paimon::catalog::Identifier::new("default", "fx_shape"))
        .await
        .expect("paimon table");
    assert_eq!(paimon_table.schema().fields().len(), names.len());
    run(&ctx, "INSERT INTO fx_shape VALUES (3, 'after', 30)").await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_shape$rt").await),
        vec!["1|paimon|10", "2|fluss|20", "3|after|30"]
    );
}

/// The ADD COLUMN guard follows the store a table is bound to, not the
/// catalog the statement runs in: a catalog on the same warehouse that
/// names no store, or the `local` store, refuses to add a column to a table
/// Fluss serves, naming the column and Fluss's system columns, and the
/// Paimon schema stays as it was.
/// A `CREATE` and another process's `CREATE TABLE IF NOT EXISTS` of the
/// same table at once: both attach the one Fluss table, and neither undoes
/// what the other finished. Before, the `CREATE` that lost the race to add
/// Fluss's system columns to the Paimon table failed and dropped the Fluss
/// table and the Paimon table under the other, which had written to them.
/// The race is timing's: a run may not reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_create_beside_an_if_not_exists_undoes_nothing_the_other_did() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let harness = FlussHarness::on(cluster);
    let (warehouse, a) = open(&harness, StoreCondition::Reachable).await;
    let b = harness.open(&warehouse, StoreCondition::Reachable).await;
    for round in 0..4 {
        let columns = "(k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
                       WITH ('bucket' = '1', 'lakestream.enabled' = 'true')";
        let create = format!("CREATE TABLE fx_race_{round} {columns}");
        let if_not_exists = format!("CREATE TABLE IF NOT EXISTS fx_race_{round} {columns}");
        let (created, finished) = tokio::join!(query(&a, &create), query(&b, &if_not_exists));
        if let Err(e) = &created {
            // Only the loser of the race to create the Paimon table may fail.
            assert!(
                e.to_string().contains("already exist"),
                "round {round}: {e}"
            );
        }
        if let Err(e) = finished {
            panic!("round {round}: CREATE TABLE IF NOT EXISTS: {e}");
        }
        run(&b, &format!("INSERT INTO fx_race_{round} VALUES (1, 'b')")).await;
        run(&a, &format!("INSERT INTO fx_race_{round} VALUES (2, 'a')")).await;
        let rows = run(&a, &format!("SELECT k, v FROM fx_race_{round}$rt")).await;
        assert_eq!(lines(&rows), vec!["1|b", "2|a"], "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn add_column_is_refused_on_a_fluss_table_through_any_catalog() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (warehouse, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fx_cross (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    let catalog = paimon::CatalogFactory::create(paimon::Options::from_map(HashMap::from([(
        "warehouse".to_string(),
        cluster.warehouse.to_string_lossy().into_owned(),
    )])))
    .await
    .expect("paimon catalog");
    let identifier = paimon::catalog::Identifier::new("default", "fx_cross");
    let fields = |table: paimon::table::Table| -> Vec<String> {
        table
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().to_string())
            .collect()
    };
    let before = fields(catalog.get_table(&identifier).await.expect("table"));
    assert_eq!(
        before,
        vec!["k", "v", "__bucket", "__offset", "__timestamp"]
    );
    let store_dir = tempfile::tempdir().expect("temp dir");
    let store_path = store_dir.path().display().to_string();
    let others: [(&str, Vec<(&str, &str)>); 2] = [
        ("no store", vec![]),
        (
            "the local store",
            vec![
                ("lakestream.store", "local"),
                ("local.path", &store_path),
                ("local.tier-interval", "off"),
            ],
        ),
    ];
    for (which, options) in others {
        let other = warehouse.context_with(&options).await;
        let error = fails(&other, "ALTER TABLE fx_cross ADD COLUMN c INT").await;
        assert!(
            error.contains("ADD COLUMN c") && error.contains("__bucket, __offset, __timestamp"),
            "{which}: {error}"
        );
        let after = fields(catalog.get_table(&identifier).await.expect("table"));
        assert_eq!(after, before, "{which}: the Paimon schema is unchanged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_fluss_table_that_does_not_match_is_an_error() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    admin
        .create_database("default", None, true)
        .await
        .expect("database");
    // Fluss tables made by hand, unlike the Paimon tables below.
    let wrong_type = Schema::builder()
        .column("id", DataTypes::bigint())
        .build()
        .expect("schema");
    let descriptor = TableDescriptor::builder()
        .schema(wrong_type)
        .build()
        .expect("descriptor");
    admin
        .create_table(&TablePath::new("default", "fx_types"), &descriptor, false)
        .await
        .expect("fluss table");
    let one_bucket = Schema::builder()
        .column("k", DataTypes::int().as_non_nullable())
        .column("v", DataTypes::string())
        .primary_key(vec!["k"])
        .expect("key")
        .build()
        .expect("schema");
    let descriptor = TableDescriptor::builder()
        .schema(one_bucket)
        .distributed_by(Some(1), vec![])
        .build()
        .expect("descriptor");
    admin
        .create_table(&TablePath::new("default", "fx_buckets"), &descriptor, false)
        .await
        .expect("fluss table");

    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    let error = fails(
        &ctx,
        "CREATE TABLE fx_types (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    assert!(error.contains("does not match"), "{error}");
    assert!(
        error.contains("id BIGINT") || error.contains("id: BIGINT") || error.contains("BIGINT"),
        "{error}"
    );
    // Nothing half-made: the Paimon table is gone again.
    let tables = lines(&run(&ctx, "SHOW TABLES").await);
    assert!(!tables.iter().any(|t| t.contains("fx_types")), "{tables:?}");

    run(
        &ctx,
        "CREATE TABLE fx_buckets (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
               WITH ('bucket' = '2')",
    )
    .await;
    let error = fails(
        &ctx,
        "ALTER TABLE fx_buckets SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert!(error.contains("1 buckets"), "{error}");
    assert!(error.contains("'bucket' = '2'"), "{error}");

    // A primary-key table needs fixed buckets, and VARCHAR(n) has no Fluss type.
    run(
        &ctx,
        "CREATE TABLE fx_dynamic (k INT NOT NULL, PRIMARY KEY (k))",
    )
    .await;
    let error = fails(
        &ctx,
        "ALTER TABLE fx_dynamic SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert!(error.contains("fixed bucket count"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_catalog_fluss_does_not_tier_into_is_refused() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let harness = FlussHarness::on(cluster);
    // A warehouse of its own, not the one the cluster tiers into.
    let elsewhere = TestWarehouse::new(CatalogKind::Filesystem).await;
    let ctx = harness.open(&elsewhere, StoreCondition::Reachable).await;
    let error = fails(
        &ctx,
        "CREATE TABLE fx_elsewhere (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    assert!(error.contains("tiers into the Paimon catalog"), "{error}");
    assert!(
        error.contains(&*cluster.warehouse.to_string_lossy()),
        "{error}"
    );
    let tables = lines(&run(&ctx, "SHOW TABLES").await);
    assert!(
        !tables.iter().any(|t| t.contains("fx_elsewhere")),
        "{tables:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_missing_fluss_table_is_named() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fx_gone (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fx_gone VALUES (1)").await;
    // Read once: the store keeps the table's description.
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_gone$rt").await),
        vec!["1"]
    );
    let connection = cluster.connection().await;
    connection
        .get_admin()
        .expect("admin")
        .drop_table(&TablePath::new("default", "fx_gone"), false)
        .await
        .expect("drop the Fluss table");
    let error = fails(&ctx, "SELECT * FROM fx_gone$rt").await;
    assert!(error.contains("'fluss'"), "{error}");
    assert!(error.contains("default.fx_gone"), "{error}");
    // Named as missing, with what to do, not as a cluster that failed.
    assert!(error.contains("has no table"), "{error}");
    assert!(!error.contains("not available"), "{error}");
    // Turning the mode on again attaches a new Fluss table.
    run(
        &ctx,
        "ALTER TABLE fx_gone SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_gone$rt").await),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn an_unreachable_cluster_is_named_and_leaves_the_catalog_working() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let harness = FlussHarness::on(cluster);
    let (warehouse, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fx_down (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let down = harness.open(&warehouse, StoreCondition::Unreachable).await;
    for sql in ["SELECT * FROM fx_down$rt", "INSERT INTO fx_down VALUES (1)"] {
        let error = fails(&down, sql).await;
        assert!(error.contains("is not available"), "{sql}: {error}");
        assert!(
            error.contains("bootstrap servers '127.0.0.1:"),
            "{sql}: {error}"
        );
    }
    run(&down, "SELECT * FROM fx_down").await;
    run(&down, "SHOW CREATE TABLE fx_down").await;
    run(
        &down,
        "ALTER TABLE fx_down SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn options_are_checked_and_secrets_stay_hidden() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let secret = "n0t-for-your-eyes";
    let harness = FlussHarness::on(cluster)
        .with("fluss.client.security.sasl.password", secret)
        .with("fluss.client.security.sasl.username", "someone");
    let (warehouse, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fx_secret (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fx_secret VALUES (1)").await;
    for sql in [
        "SHOW CREATE TABLE fx_secret",
        "SELECT * FROM fx_secret$options",
    ] {
        let text = lines(&run(&ctx, sql).await).join("\n");
        assert!(!text.contains(secret), "{sql}: {text}");
    }

    let unknown = FlussHarness::on(cluster).with("fluss.client.writer.bogus", secret);
    let ctx = unknown.open(&warehouse, StoreCondition::Reachable).await;
    let error = fails(&ctx, "SELECT * FROM fx_secret$rt").await;
    assert!(error.contains("fluss.client.writer.bogus"), "{error}");
    assert!(error.contains("client.request-timeout"), "{error}");

    let bad_secret = FlussHarness::on(cluster)
        .with("fluss.client.security.protocol", "SASL")
        .with("fluss.client.security.sasl.jaas.config", secret);
    let ctx = bad_secret.open(&warehouse, StoreCondition::Reachable).await;
    let error = fails(&ctx, "SELECT * FROM fx_secret$rt").await;
    assert!(error.contains("jaas.config"), "{error}");
    assert!(!error.contains(secret), "{error}");
}

/// Waits until `sql` returns `expected`, polling; fails after `patience`.
pub(crate) async fn eventually(
    ctx: &LakeStreamContext,
    sql: &str,
    expected: &[&str],
    patience: Duration,
) {
    let deadline = Instant::now() + patience;
    loop {
        let got = lines(&run(ctx, sql).await);
        if got == expected {
            return;
        }
        if Instant::now() > deadline {
            panic!("{sql}: still {got:?} after {patience:?}, expected {expected:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Fluss's own tiering service (a Flink job) moves the store's rows into the
/// Paimon tables. It runs on a cluster of its own, so no other test sees
/// tiering; `LAKESTREAM_FLUSS_TIERING=0` at build time ignores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    all(fluss_off, not(fluss_tiering_off)),
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
#[cfg_attr(
    fluss_tiering_off,
    ignore = "LAKESTREAM_FLUSS_TIERING=0: Fluss's tiering service is not started"
)]
async fn tiering_end_to_end() {
    let cluster = tiering_cluster("tiering").await;
    let harness = FlussHarness::on(&cluster).with("fluss.table.datalake.freshness", "2s");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;

    // Tables promoted in place with rows in Paimon: a log table and a
    // primary-key table; and a log table of every supported type.
    run(&ctx, "CREATE TABLE tier_log (id INT, v STRING)").await;
    run(&ctx, "INSERT INTO tier_log VALUES (1, 'paimon')").await;
    run(
        &ctx,
        "ALTER TABLE tier_log SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &ctx,
        "INSERT INTO tier_log VALUES (2, 'fluss'), (3, 'fluss')",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE tier_kv (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
               WITH ('bucket' = '2')",
    )
    .await;
    run(
        &ctx,
        "INSERT INTO tier_kv VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    )
    .await;
    run(
        &ctx,
        "ALTER TABLE tier_kv SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO tier_kv VALUES (2, 'B'), (4, 'd')").await;
    // Key 3 is one Paimon held before the promotion.
    run(&ctx, "DELETE FROM tier_kv WHERE k = 3").await;
    let types = "k INT, b BOOLEAN, dc DECIMAL(10, 2), dt DATE, ts TIMESTAMP, \
                 tz TIMESTAMP WITH TIME ZONE, c CHAR(3), s STRING, bin BINARY(2), bs BYTEA";
    let values = "(1, true, 12.34, DATE '2024-02-29', TIMESTAMP '2024-01-02 03:04:05.123', \
                  TIMESTAMP '2024-01-02 03:04:05.678', 'abc', 'fluss', X'0102', X'CAFE'), \
                  (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)";
    run(&ctx, &format!("CREATE TABLE tier_plain ({types})")).await;
    run(
        &ctx,
        &format!("CREATE TABLE tier_types ({types}) WITH ('lakestream.enabled' = 'true')"),
    )
    .await;
    run(&ctx, &format!("INSERT INTO tier_plain VALUES {values}")).await;
    run(&ctx, &format!("INSERT INTO tier_types VALUES {values}")).await;
    let all_types = lines(&run(&ctx, "SELECT * FROM tier_plain").await);
    let all_types: Vec<&str> = all_types.iter().map(String::as_str).collect();
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_log").await),
        vec!["1|paimon"]
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_kv").await),
        vec!["1|a", "2|b", "3|c"]
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_kv$rt").await),
        vec!["1|a", "2|B", "4|d"]
    );

    cluster
        .run("tiering-start")
        .expect("start the tiering service");
    let patience = Duration::from_secs(180);
    eventually(
        &ctx,
        "SELECT * FROM tier_log",
        &["1|paimon", "2|fluss", "3|fluss"],
        patience,
    )
    .await;
    eventually(
        &ctx,
        "SELECT * FROM tier_kv",
        &["1|a", "2|B", "4|d"],
        patience,
    )
    .await;
    eventually(&ctx, "SELECT * FROM tier_types", &all_types, patience).await;
    // Each row once in t$rt: Paimon up to the tiered offsets, the log after them.
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_log$rt").await),
        vec!["1|paimon", "2|fluss", "3|fluss"]
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_kv$rt").await),
        vec!["1|a", "2|B", "4|d"]
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_types$rt").await),
        all_types
    );

    // Writes after tiering: in t$rt at once, in t once tiered again.
    run(&ctx, "INSERT INTO tier_log VALUES (4, 'later')").await;
    run(&ctx, "INSERT INTO tier_kv VALUES (1, 'A'), (5, 'e')").await;
    run(&ctx, "DELETE FROM tier_kv WHERE k = 2").await;
    let log_after = ["1|paimon", "2|fluss", "3|fluss", "4|later"];
    let kv_after = ["1|A", "4|d", "5|e"];
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_log$rt").await),
        log_after
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_kv$rt").await),
        kv_after
    );
    eventually(&ctx, "SELECT * FROM tier_log", &log_after, patience).await;
    eventually(&ctx, "SELECT * FROM tier_kv", &kv_after, patience).await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_log$rt").await),
        log_after
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM tier_kv$rt").await),
        kv_after
    );
    cluster.run("stop").expect("stop the tiering cluster");
}

/// Every type the store supports goes through Fluss and comes back as Paimon
/// holds it: the same rows in a plain Paimon table and in `t$rt` of a log
/// table (Arrow appends) and a primary-key table (row upserts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn every_supported_type_goes_through_fluss() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    let columns = "k INT NOT NULL, b BOOLEAN, ti TINYINT, si SMALLINT, bi BIGINT, f FLOAT, \
                   d DOUBLE, dc DECIMAL(10, 2), dt DATE, ts0 TIMESTAMP(0), ts3 TIMESTAMP, \
                   ts6 TIMESTAMP(6), ts9 TIMESTAMP(9), tz TIMESTAMP WITH TIME ZONE, c CHAR(3), \
                   s STRING, bin BINARY(2), bs BYTEA";
    let rows = "(1, true, -1, 300, 5000000000, 1.5, -2.25, 12.34, DATE '2024-02-29', \
                TIMESTAMP '2024-01-02 03:04:05', TIMESTAMP '2024-01-02 03:04:05.123', \
                TIMESTAMP '2024-01-02 03:04:05.123456', TIMESTAMP '2024-01-02 03:04:05.123456789', \
                TIMESTAMP '2024-01-02 03:04:05.678', 'abc', 'fluss', X'0102', X'CAFE'), \
                (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
                NULL, NULL, NULL, NULL)";
    run(&ctx, &format!("CREATE TABLE fx_all_plain ({columns})")).await;
    run(
        &ctx,
        &format!("CREATE TABLE fx_all_log ({columns}) WITH ('lakestream.enabled' = 'true')"),
    )
    .await;
    run(
        &ctx,
        &format!(
            "CREATE TABLE fx_all_kv ({columns}, PRIMARY KEY (k)) \
                        WITH ('bucket' = '1', 'lakestream.enabled' = 'true')"
        ),
    )
    .await;
    for table in ["fx_all_plain", "fx_all_log", "fx_all_kv"] {
        run(&ctx, &format!("INSERT INTO {table} VALUES {rows}")).await;
    }
    let expected = lines(&run(&ctx, "SELECT * FROM fx_all_plain").await);
    assert_eq!(expected.len(), 2);
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_all_log$rt").await),
        expected
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fx_all_kv$rt").await),
        expected
    );
    // Fluss keeps BINARY(n) at a fixed width, and Paimon does not check it:
    // a value of another length is refused by column, never stored as null.
    for table in ["fx_all_log", "fx_all_kv"] {
        let error = fails(
            &ctx,
            &format!("INSERT INTO {table} (k, bin) VALUES (3, X'01')"),
        )
        .await;
        assert!(
            error.contains("nothing was written") && error.contains("column 'bin' is BINARY(2)"),
            "{table}: {error}"
        );
        assert_eq!(
            lines(&run(&ctx, &format!("SELECT k FROM {table}$rt WHERE k = 3")).await),
            Vec::<String>::new(),
            "{table}"
        );
    }
}

/// `docs/fluss.md` is a walkthrough on a real cluster: its SQL runs here, in
/// order, on the test cluster, as the shell of its section 2 opens it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn the_fluss_walkthrough_runs() {
    let cluster = tokio::task::spawn_blocking(cluster)
        .await
        .expect("cluster start");
    let harness = FlussHarness::on(cluster).with("fluss.table.datalake.freshness", "10s");
    let (_w, mut ctx) = open(&harness, StoreCondition::Reachable).await;
    let blocks = crate::docs::run_markdown_in(&mut ctx, "docs/fluss.md").await;
    assert!(blocks > 0, "docs/fluss.md has no ```sql blocks");

    // Its section 6: turning the mode off says where Fluss's rows go.
    run(
        &ctx,
        "CREATE TABLE walk_off (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let notice = lines(
        &run(
            &ctx,
            "ALTER TABLE walk_off SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
        )
        .await,
    );
    assert_eq!(notice.len(), 1, "{notice:?}");
    assert!(
        notice[0].contains("its tiering service no longer tiers the table"),
        "{notice:?}"
    );
}

/// Two contexts on one cluster and warehouse are two processes, each with a
/// store of its own. What one of them caches about a table (writers, table
/// handles, ids, schemas) never serves a table the other dropped and created
/// again: the first write after the re-create goes to the new table, a read
/// shows only the new table's rows, and errors about missing or replaced
/// tables say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn another_process_dropping_and_creating_a_table_is_seen() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let harness = FlussHarness::on(cluster);
    let (warehouse, a) = open(&harness, StoreCondition::Reachable).await;
    let b = harness.open(&warehouse, StoreCondition::Reachable).await;

    // A log table created again with another column, and a primary-key
    // table created again with the same shape.
    let tables = [
        (
            "fx_again_log",
            "(id INT) WITH ('lakestream.enabled' = 'true')",
            "(id INT, v STRING) WITH ('lakestream.enabled' = 'true')",
            ["(1)", "(2)", "(3)"],
            ["(100, 'new')", "(4, 'a')", "(5, 'a')"],
            vec!["100|new", "4|a"],
        ),
        (
            "fx_again_kv",
            "(k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
             WITH ('bucket' = '2', 'lakestream.enabled' = 'true')",
            "(k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
             WITH ('bucket' = '2', 'lakestream.enabled' = 'true')",
            ["(1, 'old')", "(2, 'old')", "(3, 'old')"],
            ["(100, 'new')", "(4, 'a')", "(5, 'a')"],
            vec!["100|new", "4|a"],
        ),
    ];
    for (name, old, new, old_rows, new_rows, expected) in tables {
        // A creates the table, writes and reads: its store now holds a
        // writer and has read the table's log.
        run(&a, &format!("CREATE TABLE {name} {old}")).await;
        run(&a, &format!("INSERT INTO {name} VALUES {}", old_rows[0])).await;
        run(&a, &format!("INSERT INTO {name} VALUES {}", old_rows[1])).await;
        assert_eq!(
            lines(&run(&a, &format!("SELECT * FROM {name}$rt")).await).len(),
            2,
            "{name}"
        );
        // A read A planned before the re-create, run after it.
        let planned = a
            .sql(&format!("SELECT * FROM {name}$rt"))
            .await
            .expect("plan the read");
        let task = Arc::new(planned.task_ctx());
        let plan = planned.create_physical_plan().await.expect("physical plan");

        // Another process drops the table and creates it again.
        run(&b, &format!("DROP TABLE {name}")).await;
        run(&b, &format!("CREATE TABLE {name} {new}")).await;
        run(&b, &format!("INSERT INTO {name} VALUES {}", new_rows[0])).await;

        // A's next write goes to the new table, the first time.
        let sql = format!("INSERT INTO {name} VALUES {}", new_rows[1]);
        if let Err(e) = query(&a, &sql).await {
            panic!("{sql}: the first write after another process re-created {name}: {e}");
        }
        // Only the new table's rows, in both processes.
        let rt = format!("SELECT * FROM {name}$rt");
        assert_eq!(lines(&run(&a, &rt).await), expected, "{name} from A");
        assert_eq!(lines(&run(&b, &rt).await), expected, "{name} from B");

        // The read planned on the old table does not serve its rows, and its
        // error says why rather than advising to attach the table.
        match datafusion::physical_plan::collect(plan, task).await {
            Ok(batches) => panic!(
                "{name}: a read planned before the re-create returned {:?}",
                lines(&batches)
            ),
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("dropped and created again"), "{name}: {e}");
                assert!(e.contains("Run the query again"), "{name}: {e}");
                assert!(!e.contains("Turning the mode on"), "{name}: {e}");
            }
        }

        // The Fluss table alone dropped behind A's back: A's write says the
        // store has no table, and the advice it gives works.
        let connection = cluster.connection().await;
        connection
            .get_admin()
            .expect("admin")
            .drop_table(&TablePath::new("default", name), false)
            .await
            .expect("drop the Fluss table");
        let error = fails(&a, &format!("INSERT INTO {name} VALUES {}", new_rows[2])).await;
        assert!(error.contains("has no table for"), "{name}: {error}");
        let advice =
            format!("ALTER TABLE default.{name} SET TBLPROPERTIES ('lakestream.enabled'='true')");
        assert!(error.contains(&advice), "{name}: {error}");
        run(&a, &advice).await;
        run(&a, &format!("INSERT INTO {name} VALUES {}", new_rows[2])).await;
        assert_eq!(
            lines(&run(&b, &rt).await),
            vec![new_rows[2]
                .trim_matches(|c| c == '(' || c == ')')
                .replace(", ", "|")
                .replace('\'', "")],
            "{name}: the re-attached table starts from Paimon, which holds nothing yet"
        );

        // A read and a write A planned, then B drops the table: both say
        // the table was dropped, and neither advises attaching it.
        let read = a.sql(&rt).await.expect("plan the read");
        let task = Arc::new(read.task_ctx());
        let read = read.create_physical_plan().await.expect("physical plan");
        let insert = a
            .sql(&format!("INSERT INTO {name} VALUES {}", new_rows[1]))
            .await
            .expect("plan the insert");
        run(&b, &format!("DROP TABLE {name}")).await;
        let error = match datafusion::physical_plan::collect(read, task).await {
            Ok(batches) => panic!("{name}: read a dropped table: {:?}", lines(&batches)),
            Err(e) => e.to_string(),
        };
        assert!(
            error.contains("was dropped after this read was planned"),
            "{name}: {error}"
        );
        assert!(!error.contains("Turning the mode on"), "{name}: {error}");
        let error = match insert.collect().await {
            Ok(_) => panic!("{name}: wrote to a dropped table"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.contains("was dropped after this statement was planned"),
            "{name}: {error}"
        );
        assert!(error.contains("nothing was written"), "{name}: {error}");
        assert!(!error.contains("Turning the mode on"), "{name}: {error}");
    }
}
