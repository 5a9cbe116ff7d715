//! Sized tiering (issue 12): the `local` store's background tierer checks a
//! table every `local.tier-interval` and tiers it only once the rows Paimon
//! lacks reach `local.tier-target-size` on disk or the oldest of them has
//! waited `local.tier-max-delay`, as the store's files say (other processes
//! write the same tables). `t$rt` shows every row meanwhile; on-demand
//! tiering tiers whatever waits.
//!
//! No assert here is on speed: waits are generous polls, and the only time
//! asserted is a lower bound (nothing tiered before the max delay).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::{child_command, files_where, local_store_options, run, sorted_ids};

/// How long a poll waits for the background tierer before it gives up.
const PATIENCE: Duration = Duration::from_secs(90);

/// How often the tierers of these tests check.
const INTERVAL: &str = "100ms";

fn warehouse(dir: &TempDir) -> PathBuf {
    dir.path().join("warehouse")
}

fn store(dir: &TempDir) -> PathBuf {
    dir.path().join("store")
}

fn options(
    warehouse: &Path,
    store: &Path,
    interval: &str,
    target: &str,
    delay: &str,
) -> HashMap<String, String> {
    let mut options = local_store_options(warehouse, store, interval);
    options.insert("local.tier-target-size".to_string(), target.to_string());
    options.insert("local.tier-max-delay".to_string(), delay.to_string());
    options
}

async fn context(options: HashMap<String, String>) -> LakeStreamContext {
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options)
        .await
        .expect("register the catalog");
    ctx
}

/// The bytes of one segment of a one-row `INSERT` into a `(id INT)` table,
/// measured in a store of its own (nothing tiers there).
async fn one_row_segment_bytes() -> u64 {
    let dir = TempDir::new().expect("temporary directory");
    let ctx = context(options(&warehouse(&dir), &store(&dir), "off", "1gb", "1h")).await;
    run(
        &ctx,
        "CREATE TABLE c (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO c VALUES (1)").await;
    let segments = files_where(&store(&dir), |p| p.extension().is_some_and(|e| e == "seg"));
    assert_eq!(segments.len(), 1, "{segments:?}");
    std::fs::metadata(&segments[0]).expect("segment").len()
}

/// Polls `check` until it holds or [`PATIENCE`] runs out; says whether it held.
async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < PATIENCE {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The rows Paimon holds (without the store's).
async fn in_paimon(ctx: &LakeStreamContext, table: &str) -> Vec<i64> {
    sorted_ids(ctx, &format!("SELECT id FROM {table}")).await
}

async fn create(ctx: &LakeStreamContext, table: &str) {
    run(
        ctx,
        &format!("CREATE TABLE {table} (id INT) WITH ('lakestream.enabled' = 'true')"),
    )
    .await;
}

/// A table waits while its rows are below the target size, and is tiered
/// by the background tierer once they reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_size_starts_a_round() {
    let segment = one_row_segment_bytes().await;
    let dir = TempDir::new().expect("temporary directory");
    // Two one-row segments stay below it, three reach it.
    let target = format!("{}b", segment * 5 / 2);
    let ctx = context(options(
        &warehouse(&dir),
        &store(&dir),
        INTERVAL,
        &target,
        "1h",
    ))
    .await;
    create(&ctx, "t").await;
    run(&ctx, "INSERT INTO t VALUES (1)").await;
    run(&ctx, "INSERT INTO t VALUES (2)").await;
    // Twenty checks and more: none finds the target reached.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(in_paimon(&ctx, "t").await, Vec::<i64>::new());
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![1, 2]);
    run(&ctx, "INSERT INTO t VALUES (3)").await;
    assert!(
        eventually(|| async { in_paimon(&ctx, "t").await == vec![1, 2, 3] }).await,
        "three segments ({segment} bytes each, target {target}) were not tiered"
    );
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
}

/// A few rows are tiered once the oldest has waited the max delay, and not
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_max_delay_starts_a_round() {
    let delay = Duration::from_secs(4);
    let dir = TempDir::new().expect("temporary directory");
    let ctx = context(options(
        &warehouse(&dir),
        &store(&dir),
        INTERVAL,
        "1gb",
        "4s",
    ))
    .await;
    create(&ctx, "t").await;
    let written = Instant::now();
    run(&ctx, "INSERT INTO t VALUES (7)").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![7]);
    assert!(
        eventually(|| async { in_paimon(&ctx, "t").await == vec![7] }).await,
        "a row that waited {delay:?} was not tiered"
    );
    // The segment's time is at or after `written` (the file system's clock
    // may round it down a little).
    let waited = written.elapsed();
    assert!(
        waited + Duration::from_millis(100) >= delay,
        "tiered after {waited:?}, before the max delay of {delay:?}"
    );
}

/// With a large target and a long delay, the background tierer leaves the
/// rows in the store (`t$rt` shows them all); tiering on demand takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_both_nothing_is_tiered_until_asked() {
    let dir = TempDir::new().expect("temporary directory");
    let ctx = context(options(
        &warehouse(&dir),
        &store(&dir),
        INTERVAL,
        "1gb",
        "1h",
    ))
    .await;
    create(&ctx, "t").await;
    for n in 0..5 {
        run(&ctx, &format!("INSERT INTO t VALUES ({n}), ({})", n + 100)).await;
    }
    let all = vec![0, 1, 2, 3, 4, 100, 101, 102, 103, 104];
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(in_paimon(&ctx, "t").await, Vec::<i64>::new());
        assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, all);
    }
    run(&ctx, "CALL sys.lakestream_tier('t')").await;
    assert_eq!(in_paimon(&ctx, "t").await, all);
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, all);
}

/// Another process writes: its rows count towards the target of this
/// process's tierer, which knows only its own write. The other process does
/// not tier at all (`local.tier-interval` = `off`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_another_process_count() {
    let segment = one_row_segment_bytes().await;
    let dir = TempDir::new().expect("temporary directory");
    let target = format!("{}b", segment * 5 / 2);
    let ctx = context(options(
        &warehouse(&dir),
        &store(&dir),
        INTERVAL,
        &target,
        "1h",
    ))
    .await;
    create(&ctx, "t").await;
    run(&ctx, "INSERT INTO t VALUES (1)").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(in_paimon(&ctx, "t").await, Vec::<i64>::new());
    let output = child_command("sized_tiering::child_writer")
        .env("SIZED_CHILD_WAREHOUSE", warehouse(&dir))
        .env("SIZED_CHILD_STORE", store(&dir))
        .env("SIZED_CHILD_ROWS", "10,11")
        .output()
        .expect("run the child writer");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && said.contains("WROTE 2"),
        "the child writer failed: {said}"
    );
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        vec![1, 10, 11]
    );
    assert!(
        eventually(|| async { in_paimon(&ctx, "t").await == vec![1, 10, 11] }).await,
        "the other process's segments did not count towards the target {target}"
    );
}

/// The child's side of [`rows_of_another_process_count`]: writes one
/// segment per row of `SIZED_CHILD_ROWS` into `t`, never tiering; does
/// nothing unless run as the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process: the test that spawns it runs it"]
async fn child_writer() {
    let Ok(rows) = std::env::var("SIZED_CHILD_ROWS") else {
        return;
    };
    let env = |key: &str| PathBuf::from(std::env::var(key).expect(key));
    let ctx = context(options(
        &env("SIZED_CHILD_WAREHOUSE"),
        &env("SIZED_CHILD_STORE"),
        "off",
        "1b",
        "1ms",
    ))
    .await;
    let mut wrote = 0;
    for row in rows.split(',') {
        run(&ctx, &format!("INSERT INTO t VALUES ({row})")).await;
        wrote += 1;
    }
    println!("WROTE {wrote}");
}

/// The measurement behind the defaults (docs/benchmarks.md, "Sized
/// tiering"): the same rows tiered in many small rounds or in one, and what
/// each leaves for readers of `t`. Prints its numbers; asserts nothing on
/// time. Run it with
/// `cargo test --test it sized_tiering::small_rounds_versus_one -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn small_rounds_versus_one() {
    const ROUNDS: usize = 60;
    const ROWS: usize = 200;
    let dir = TempDir::new().expect("temporary directory");
    let ctx = context(options(&warehouse(&dir), &store(&dir), "off", "1gb", "1h")).await;
    let insert = |table: &str, round: usize| {
        let values: Vec<String> = (0..ROWS)
            .map(|i| format!("({})", round * ROWS + i))
            .collect();
        format!("INSERT INTO {table} VALUES {}", values.join(", "))
    };
    let mut report = Vec::new();
    for (table, every_round) in [("small", true), ("big", false)] {
        create(&ctx, table).await;
        let mut tiering = Duration::ZERO;
        for round in 0..ROUNDS {
            run(&ctx, &insert(table, round)).await;
            if every_round {
                let started = Instant::now();
                run(&ctx, &format!("CALL sys.lakestream_tier('{table}')")).await;
                tiering += started.elapsed();
            }
        }
        let started = Instant::now();
        run(&ctx, &format!("CALL sys.lakestream_tier('{table}')")).await;
        tiering += started.elapsed();
        let location = warehouse(&dir).join("default.db").join(table);
        let data_files =
            files_where(&location, |p| p.extension().is_some_and(|e| e == "parquet")).len();
        let manifests = files_where(&location.join("manifest"), |_| true).len();
        let snapshots = files_where(&location.join("snapshot"), |p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("snapshot-"))
        })
        .len();
        // Reading `t` (Paimon alone), a few times.
        let started = Instant::now();
        for _ in 0..5 {
            let rows = in_paimon(&ctx, table).await;
            assert_eq!(rows.len(), ROUNDS * ROWS);
        }
        let read = started.elapsed() / 5;
        report.push(format!(
            "{table}: {} rounds, tiering {tiering:?} in all, {snapshots} snapshots, \
             {data_files} data files, {manifests} manifest files, a full read of t {read:?}",
            if every_round { ROUNDS + 1 } else { 1 }
        ));
    }
    for line in report {
        println!("MEASURE {line}");
    }
}
