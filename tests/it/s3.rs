//! Warehouses and the `local` store on S3, against a real S3-compatible
//! server (`scripts/s3-server.sh`, versitygw): tables, the store's log,
//! tiering and maintenance; commits that race never replace each other's
//! snapshot; and a server that ignores conditional writes is refused.

use std::collections::HashMap;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStore;
use paimon_lakestream::store::local::register_object_store;
use paimon_lakestream::testing::faulty::{Fault, Faults, FaultyStore, Op, Rule};
use paimon_lakestream::LakeStreamContext;

use crate::s3_server::TestS3;
use crate::support::{run, sorted_rows, try_run, CatalogKind, TestWarehouse};
use paimon_lakestream::testing::{
    conformance, Capability, StoreCondition, StoreHarness, Warehouse,
};

/// The `local` store on S3 for the `.slt` suites: each file gets a fresh
/// warehouse in the bucket of one test server, the store beside it at its
/// default `<warehouse>/_lakestream`, background tiering off.
struct S3Harness {
    s3: TestS3,
    warehouses: std::sync::atomic::AtomicUsize,
}

impl S3Harness {
    fn start() -> Arc<Self> {
        Arc::new(Self {
            s3: TestS3::start(),
            warehouses: std::sync::atomic::AtomicUsize::new(0),
        })
    }
}

#[async_trait::async_trait]
impl StoreHarness for S3Harness {
    fn identifier(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Vec<Capability> {
        vec![Capability::Deletes, Capability::Tiering]
    }

    /// S3 warehouses are filesystem catalogs.
    async fn warehouse(&self) -> Warehouse {
        let n = self
            .warehouses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        TestWarehouse::with_options(self.s3.catalog_options(&format!("slt-{n}"), &[])).into_inner()
    }

    async fn open(&self, warehouse: &Warehouse, condition: StoreCondition) -> LakeStreamContext {
        match condition {
            StoreCondition::Reachable => {
                warehouse
                    .context_with(&[
                        ("lakestream.store", "local"),
                        ("local.tier-interval", "off"),
                    ])
                    .await
            }
            // As for the store on disk: a store directory that cannot be made.
            StoreCondition::Unreachable | StoreCondition::Slow => {
                crate::local_store::LocalHarness
                    .open(warehouse, condition)
                    .await
            }
        }
    }
}

/// The store conformance suite and the files scheduled for `filesystem/s3`
/// (tiering, procedures, maintenance, options), with the warehouse and the
/// store on S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_suites_on_s3() {
    let harness = S3Harness::start();
    conformance(Arc::clone(&harness) as Arc<dyn StoreHarness>).await;
    crate::slt::run_scheduled(
        crate::slt::Combination {
            catalog: CatalogKind::Filesystem,
            store: crate::slt::StoreName::S3,
        },
        Some(harness as Arc<dyn StoreHarness>),
    )
    .await;
}

async fn context(options: HashMap<String, String>) -> LakeStreamContext {
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options)
        .await
        .expect("register the catalog");
    ctx
}

/// The keys of the objects under `prefix` in the server's bucket, read
/// with a client of the test's own.
async fn keys_under(s3: &TestS3, prefix: &str) -> Vec<String> {
    client(s3)
        .list(Some(&object_store::path::Path::from(prefix)))
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .expect("list")
}

/// A client of the test's own for the server's bucket.
fn client(s3: &TestS3) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(&s3.bucket)
        .with_endpoint(&s3.options["s3.endpoint"])
        .with_allow_http(true)
        .with_access_key_id(&s3.options["s3.access-key"])
        .with_secret_access_key(&s3.options["s3.secret-key"])
        .with_region(&s3.options["s3.region"])
        .build()
        .expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lake_stream_tables_live_on_s3_with_their_store_beside_them() {
    let s3 = TestS3::start();
    let options = s3.catalog_options(
        "lake",
        &[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
        ],
    );
    let ctx = context(options.clone()).await;
    run(
        &ctx,
        "CREATE TABLE logs (id INT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE kv (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('lakestream.enabled' = 'true', 'bucket' = '1')",
    )
    .await;
    run(&ctx, "INSERT INTO logs VALUES (1, 'a'), (2, 'b')").await;
    run(&ctx, "INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;
    run(&ctx, "UPDATE kv SET v = 'B' WHERE k = 2").await;
    run(&ctx, "DELETE FROM kv WHERE k = 3").await;
    // Fresh rows are read from the store's log in the bucket ...
    assert_eq!(
        sorted_rows(&ctx, "SELECT * FROM logs$rt").await,
        ["1|a", "2|b"]
    );
    assert_eq!(
        sorted_rows(&ctx, "SELECT * FROM kv$rt").await,
        ["1|a", "2|B"]
    );
    assert!(sorted_rows(&ctx, "SELECT * FROM logs").await.is_empty());
    let log = keys_under(&s3, "lake/_lakestream").await;
    assert!(
        log.iter().any(|k| k.contains("/log/")),
        "the store's log is under the warehouse by default: {log:?}"
    );
    // ... and tiered into Paimon on S3.
    run(&ctx, "CALL sys.lakestream_tier('default.logs')").await;
    run(&ctx, "CALL sys.lakestream_tier('default.kv')").await;
    assert_eq!(
        sorted_rows(&ctx, "SELECT * FROM logs").await,
        ["1|a", "2|b"]
    );
    assert_eq!(sorted_rows(&ctx, "SELECT * FROM kv").await, ["1|a", "2|B"]);
    let snapshots = keys_under(&s3, "lake/default.db/kv/snapshot").await;
    assert!(
        snapshots.iter().any(|k| k.ends_with("snapshot-1")),
        "{snapshots:?}"
    );
    // More rounds, then maintenance on request: compaction and expiry
    // publish through the same conditional writes.
    for round in 0..3 {
        run(
            &ctx,
            &format!("INSERT INTO kv VALUES ({round}, 'r{round}')"),
        )
        .await;
        run(&ctx, "CALL sys.lakestream_tier('default.kv')").await;
    }
    run(&ctx, "CALL sys.compact('default.kv')").await;
    assert_eq!(
        sorted_rows(&ctx, "SELECT * FROM kv").await,
        ["0|r0", "1|r1", "2|r2"]
    );
    // pypaimon, an independent reader, reads the tables on S3 as we do.
    for table in ["logs", "kv"] {
        let ours = crate::independent::render(
            &ctx.sql(&format!("SELECT * FROM {table}"))
                .await
                .expect("plan")
                .collect()
                .await
                .expect("read"),
        );
        let theirs = crate::independent::pypaimon_rows_at(
            &options["warehouse"],
            &format!("default.{table}"),
            &s3.options,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(theirs, ours, "pypaimon reads default.{table} as we do");
    }
    // Opened by path, with the S3 options in the statement, a table reads
    // and commits as the catalog's do.
    let external = format!(
        "CREATE EXTERNAL TABLE datafusion.public.ext STORED AS PAIMON \
         LOCATION 's3://{}/lake/default.db/logs' OPTIONS ({})",
        s3.bucket,
        s3.options
            .iter()
            .map(|(k, v)| format!("'{k}' '{v}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    run(&ctx, &external).await;
    assert_eq!(
        sorted_rows(&ctx, "SELECT * FROM datafusion.public.ext").await,
        ["1|a", "2|b"]
    );
    // Another session (another catalog, other clients) sees the same.
    let other = context(options).await;
    assert_eq!(
        sorted_rows(&other, "SELECT * FROM kv$rt").await,
        ["0|r0", "1|r1", "2|r2"]
    );
    assert_eq!(
        sorted_rows(&other, "SELECT * FROM logs$rt").await,
        ["1|a", "2|b"]
    );
}

/// paimon 0.4 commits on S3 by checking that the next snapshot file is
/// absent and then writing it; commits racing through that window replace
/// each other's snapshot and lose rows. Through this crate they create it
/// conditionally: every acknowledged INSERT is in the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_commits_on_s3_never_replace_each_other() {
    let s3 = TestS3::start();
    let options = s3.catalog_options("race", &[]);
    let setup = context(options.clone()).await;
    run(&setup, "CREATE TABLE plain (writer INT, n INT)").await;
    // Each writer has a catalog (and so clients and caches) of its own, as
    // a process of its own would.
    let mut writers = Vec::new();
    for writer in 0..4 {
        let options = options.clone();
        writers.push(tokio::spawn(async move {
            let ctx = context(options).await;
            let mut acknowledged = Vec::new();
            for n in 0..5 {
                let sql = format!("INSERT INTO plain VALUES ({writer}, {n})");
                if try_run(&ctx, &sql).await.is_ok() {
                    acknowledged.push(format!("{writer}|{n}"));
                }
            }
            acknowledged
        }));
    }
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("writer"));
    }
    acknowledged.sort();
    assert_eq!(acknowledged.len(), 20, "every INSERT is acknowledged");
    assert_eq!(
        sorted_rows(&setup, "SELECT * FROM plain").await,
        acknowledged,
        "every acknowledged row is in the table"
    );
}

/// paimon's catalog writes a table's next schema file after reading the
/// newest one, with a plain put: two processes' `ALTER TABLE`s at once
/// write the same file, and the later silently undoes the other. Through
/// this crate the DDL of a database takes its schema lease first: every
/// ALTER that returned, in four processes at once, is in the schema
/// afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_alters_on_s3_all_land() {
    racing_alters("alters", &[0, 0, 0, 0]).await;
}

/// As [`racing_alters_on_s3_all_land`], with two of the four processes'
/// clocks 120 s ahead: they take leases that have not expired, so the lease
/// holds nothing off. The schema file itself is created only if its name is
/// free, and an ALTER that finds it taken applies its change again to the
/// newer schema: every ALTER that returned is still in the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_alters_with_clocks_ahead_all_land() {
    racing_alters("skewed", &[120_000, 0, 120_000, 0]).await;
}

/// Four processes (one per entry of `skews_ms`, its clock that far ahead)
/// run six `ALTER TABLE ... SET TBLPROPERTIES` each on one table of
/// warehouse `name`; every one returns, and is in the schema afterwards.
async fn racing_alters(name: &str, skews_ms: &[i64]) {
    let s3 = TestS3::start();
    let options = s3.catalog_options(name, &[]);
    let setup = context(options.clone()).await;
    run(&setup, "CREATE TABLE a (id BIGINT)").await;
    let children: Vec<_> = skews_ms
        .iter()
        .enumerate()
        .map(|(w, skew)| {
            crate::support::child_command("s3::racing_alters_child")
                .env(
                    "LAKESTREAM_ALTER_OPTIONS",
                    serde_json::to_string(&options).expect("options"),
                )
                .env("LAKESTREAM_ALTER_WRITER", w.to_string())
                .env("LAKESTREAM_TESTING_CLOCK_SKEW_MS", skew.to_string())
                .spawn()
                .expect("a child process")
        })
        .collect();
    let (mut altered, mut errors) = (Vec::new(), Vec::new());
    for child in children {
        let output = child.wait_with_output().expect("the child's output");
        assert!(output.status.success(), "a child failed: {output:?}");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            // The harness's "test ... " may begin the first line.
            if let Some((_, key)) = line.split_once("@altered ") {
                altered.push(key.to_string());
            } else if let Some((_, error)) = line.split_once("@failed ") {
                errors.push(error.to_string());
            }
        }
    }
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(altered.len(), 24, "{altered:?}");
    let table = crate::support::paimon_table(&setup, "a").await;
    let options = table.schema().options();
    let lost: Vec<&String> = altered
        .iter()
        .filter(|key| !options.contains_key(*key))
        .collect();
    assert!(
        lost.is_empty(),
        "ALTERs that returned, then undone: {lost:?}"
    );
    assert_eq!(table.schema().id(), 24, "one schema per ALTER");
    // The lease lives beside the databases, in no `*.db` directory.
    let leases = keys_under(
        &s3,
        &format!("{name}/_lakestream/schema-lock/default/lease"),
    )
    .await;
    assert!(!leases.is_empty(), "the schema lease's objects");
    assert_eq!(
        sorted_rows(&setup, "SHOW DATABASES").await,
        ["default".to_string()]
    );
}

/// One process of [`racing_alters`]: six ALTERs as writer
/// `$LAKESTREAM_ALTER_WRITER`, on the catalog whose options
/// `$LAKESTREAM_ALTER_OPTIONS` holds; says which returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a process of racing_alters"]
async fn racing_alters_child() {
    let Ok(options) = std::env::var("LAKESTREAM_ALTER_OPTIONS") else {
        return;
    };
    let options: HashMap<String, String> = serde_json::from_str(&options).expect("options");
    let w = std::env::var("LAKESTREAM_ALTER_WRITER").expect("the writer");
    let ctx = context(options).await;
    for s in 0..6 {
        let sql = format!("ALTER TABLE a SET TBLPROPERTIES ('k{w}_{s}' = 'v')");
        match try_run(&ctx, &sql).await {
            Ok(()) => println!("@altered k{w}_{s}"),
            Err(e) => println!("@failed {sql}: {}", e.replace('\n', " ")),
        }
    }
}

/// A store root that ignores conditional puts (an S3-compatible server
/// without `If-None-Match`) is refused when a table attaches, naming what
/// is missing, and nothing is written to it or left in the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_ignores_conditional_writes_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let faults = Faults::seeded(1);
    faults.add(Rule::new(Op::Put, Fault::IgnoresCondition));
    let url = format!("faulty://ignores-conditions-{}", std::process::id());
    register_object_store(
        &url,
        Arc::new(FaultyStore::new(
            Arc::new(object_store::memory::InMemory::new()),
            faults.clone(),
        )),
    )
    .expect("register");
    let options = HashMap::from([
        (
            "warehouse".to_string(),
            dir.path().join("warehouse").display().to_string(),
        ),
        ("lakestream.store".to_string(), "local".to_string()),
        ("local.path".to_string(), url),
        ("local.tier-interval".to_string(), "off".to_string()),
    ]);
    let ctx = context(options).await;
    let error = try_run(
        &ctx,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await
    .expect_err("refused");
    assert!(
        error.contains("create-if-absent") && error.contains("ignored"),
        "{error}"
    );
    // The probe is all it wrote, and it is gone. The store refused, so the
    // Paimon table is dropped again: no table is left that the same
    // statement with IF NOT EXISTS could never finish.
    assert!(
        try_run(&ctx, "SELECT * FROM t$rt").await.is_err(),
        "no lake-stream table"
    );
    let left = try_run(&ctx, "SELECT * FROM t")
        .await
        .expect_err("no table");
    assert!(left.contains("not found"), "{left}");
}

/// A warehouse on a server that ignores conditional writes: every write
/// that must create its file only if absent is refused before it is made,
/// and the refusal names what was refused (the statement and the table, the
/// tag, or the commit) rather than speaking of commits for all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warehouse_that_ignores_conditional_writes_refuses_what_it_cannot_make_safely() {
    let s3 = TestS3::start();
    let options = s3.catalog_options("ignoring", &[]);
    // The table is made on the server itself; then reached through a
    // front that makes it ignore the condition.
    let honest = context(options.clone()).await;
    run(&honest, "CREATE TABLE t (id INT)").await;
    run(&honest, "INSERT INTO t VALUES (1)").await;
    let mut ignoring = options.clone();
    ignoring.insert(
        "s3.endpoint".to_string(),
        crate::s3_server::ignoring_conditions(&options["s3.endpoint"]).await,
    );
    let ctx = context(ignoring).await;
    assert_eq!(sorted_rows(&ctx, "SELECT id FROM t").await, ["1"]);
    for (sql, names) in [
        (
            "CREATE TABLE u (id INT)",
            "CREATE TABLE default.u is refused",
        ),
        (
            "ALTER TABLE t SET TBLPROPERTIES ('k' = 'v')",
            "ALTER TABLE default.t is refused",
        ),
        (
            "CALL sys.create_tag(table => 'default.t', tag => 'nightly')",
            "creating the tag 'nightly' of default.t is refused",
        ),
        (
            "INSERT INTO t VALUES (2)",
            "a commit to default.t is refused",
        ),
    ] {
        let error = try_run(&ctx, sql).await.expect_err(sql);
        assert!(error.contains(names), "{sql}: {error}");
        assert!(
            error.contains("ignores conditional writes"),
            "{sql}: {error}"
        );
    }
    // Nothing was made.
    assert!(try_run(&honest, "SELECT * FROM u").await.is_err());
    assert_eq!(sorted_rows(&honest, "SELECT id FROM t").await, ["1"]);
    assert!(sorted_rows(&honest, "SELECT tag_name FROM t$tags")
        .await
        .is_empty());
}

/// Keys never print: not in `SHOW CATALOGS`, `EXPLAIN`, a catalog's
/// `Debug`, nor in the errors of a catalog whose secret key is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_never_print() {
    let s3 = TestS3::start();
    let secret = s3.options["s3.secret-key"].clone();
    let options = s3.catalog_options(
        "secrets",
        &[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
        ],
    );
    let mut ctx = context(options.clone()).await;
    run(
        &ctx,
        "CREATE TABLE t (id INT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (1, 'a')").await;
    let mut printed = Vec::new();
    for sql in [
        "EXPLAIN SELECT * FROM t$rt",
        "EXPLAIN SELECT * FROM t",
        "EXPLAIN INSERT INTO t VALUES (2, 'b')",
    ] {
        printed.extend(sorted_rows(&ctx, sql).await);
    }
    let catalogs = ctx.execute("SHOW CATALOGS").await.expect("SHOW CATALOGS");
    let catalogs = catalogs.collect().await.expect("rows");
    printed.push(
        arrow::util::pretty::pretty_format_batches(&catalogs)
            .expect("format")
            .to_string(),
    );
    printed.push(format!("{:?}", ctx.catalog("paimon").expect("the catalog")));
    // A catalog with a wrong secret is refused (the warehouse cannot be
    // read), without saying the secret.
    let wrong = "wrong-secret-that-must-not-print-0123456789";
    let mut bad = options;
    bad.insert("s3.secret-key".to_string(), wrong.to_string());
    let error = LakeStreamContext::new()
        .register_catalog("bad", bad)
        .await
        .expect_err("a wrong key is refused")
        .to_string();
    assert!(error.contains("SignatureDoesNotMatch"), "{error}");
    let errors = [error];
    for text in printed.iter().chain(&errors) {
        assert!(!text.contains(&secret), "the secret key printed: {text}");
        assert!(
            !text.contains(wrong),
            "the wrong secret key printed: {text}"
        );
    }
}

/// Two processes (two store roots over one bucket, as two machines would
/// have) write and tier one table at once: the tiering lease makes their
/// rounds take turns, so none fails against the other's commit, and every
/// row lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tierers_in_two_processes_take_turns_through_the_lease() {
    let s3 = TestS3::start();
    let first = s3.catalog_options(
        "lease",
        &[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
        ],
    );
    // The same server spelled another way: a root of its own, with no lock
    // in common with the first in this process.
    let mut second = first.clone();
    let endpoint = format!("{}/", second["s3.endpoint"]);
    second.insert("s3.endpoint".to_string(), endpoint);
    let setup = context(first.clone()).await;
    run(
        &setup,
        "CREATE TABLE t (id INT, p INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let mut processes = Vec::new();
    for (process, options) in [first, second].into_iter().enumerate() {
        processes.push(tokio::spawn(async move {
            let ctx = context(options).await;
            let mut failures = Vec::new();
            for i in 0..8 {
                run(&ctx, &format!("INSERT INTO t VALUES ({i}, {process})")).await;
                if let Err(e) = try_run(&ctx, "CALL sys.lakestream_tier('default.t')").await {
                    failures.push(e);
                }
            }
            failures
        }));
    }
    for process in processes {
        let failures = process.await.expect("process");
        assert!(failures.is_empty(), "tiering rounds failed: {failures:?}");
    }
    let mut expected: Vec<String> = (0..8)
        .flat_map(|i| [format!("{i}|0"), format!("{i}|1")])
        .collect();
    expected.sort();
    assert_eq!(sorted_rows(&setup, "SELECT * FROM t").await, expected);
    assert_eq!(sorted_rows(&setup, "SELECT * FROM t$rt").await, expected);
}

/// A tiering service that tiers once and exits releases its lease: the
/// next tiering does not wait it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiering_process_that_exits_releases_its_lease() {
    let s3 = TestS3::start();
    let options = s3.catalog_options(
        "exit",
        &[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
        ],
    );
    let ctx = context(options.clone()).await;
    run(
        &ctx,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (1), (2)").await;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lakestream-cli"));
    command
        .args(["tier", "--once", "--table", "default.t", "--warehouse"])
        .arg(&options["warehouse"])
        .env("AWS_ACCESS_KEY_ID", &s3.options["s3.access-key"])
        .env("AWS_SECRET_ACCESS_KEY", &s3.options["s3.secret-key"])
        .stdin(std::process::Stdio::null());
    for key in ["s3.endpoint", "s3.region", "s3.path-style-access"] {
        command
            .arg("--option")
            .arg(format!("{key}={}", s3.options[key]));
    }
    command.arg("--option").arg("local.tier-interval=off");
    let output = command.output().expect("lakestream-cli");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(sorted_rows(&ctx, "SELECT * FROM t").await, ["1", "2"]);
    // What is left of the lease is its release: a generation already
    // expired (generations only grow, so the newest stays).
    let leases: Vec<String> = keys_under(&s3, "exit/_lakestream")
        .await
        .into_iter()
        .filter(|k| k.contains("/lease/"))
        .collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis();
    let mut newest_expires_ms = None;
    for key in &leases {
        let bytes = object_store::ObjectStoreExt::get(
            &client(&s3),
            &object_store::path::Path::from(key.as_str()),
        )
        .await
        .expect("get")
        .bytes()
        .await
        .expect("read");
        let lease: serde_json::Value = serde_json::from_slice(&bytes).expect("a lease");
        let expires_ms = lease["expires_ms"].as_u64().expect("expires_ms");
        assert!(
            u128::from(expires_ms) <= now_ms,
            "the exited process left a held lease {key}: {lease}"
        );
        newest_expires_ms = Some(expires_ms);
    }
    // Listed in order: the newest generation is a release.
    assert_eq!(newest_expires_ms, Some(0), "{leases:?}");
}
