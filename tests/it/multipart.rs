//! Multi-part writes of the `local` store: a write bigger than
//! `local.segment-size` rolls into parts that one log entry commits, so a
//! statement of any size is written, read and tiered in bounded memory.
//! Each test checks what a user sees (`t$rt`, `t` after tiering, another
//! process's view) and what is left on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use paimon_lakestream::store::local::register_object_store;
use paimon_lakestream::testing::faulty::{Fault, Faults, FaultyStore, Op, Rule};
use paimon_lakestream::LakeStreamContext;

use crate::support::{
    files_where, ids, run, set_aside_says, sorted_ids, try_run, CatalogKind, TestWarehouse,
};

const CREATE: &str = "CREATE TABLE t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true')";

/// 20,000 rows of about 50 bytes: several parts of [`SEGMENT_SIZE`].
const BIG_INSERT: &str =
    "INSERT INTO t SELECT value, repeat('x', 40) FROM generate_series(1, 20000)";

/// Small enough that a few thousand rows roll into several parts.
const SEGMENT_SIZE: (&str, &str) = ("local.segment-size", "16kb");

async fn process(warehouse: &TestWarehouse, store: &Path) -> LakeStreamContext {
    warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.log-retention", "1s"),
            ("local.path", store.to_str().expect("utf-8 path")),
            SEGMENT_SIZE,
        ])
        .await
}

/// Files under `dir` whose path has a component `component`.
fn files_under(dir: &Path, component: &str) -> Vec<PathBuf> {
    files_where(dir, |path| {
        path.components().any(|c| c.as_os_str() == component)
    })
}

fn count_and_sum(ctx_rows: Vec<i64>) -> (usize, i64) {
    (ctx_rows.len(), ctx_rows.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_insert_rolls_into_parts_that_read_and_tier_as_one_write() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let store = warehouse.path().join("store");
    let a = process(&warehouse, &store).await;
    run(&a, CREATE).await;
    run(&a, "INSERT INTO t VALUES (0, 'small')").await;
    run(&a, BIG_INSERT).await;
    // generate_series gives batches of 8,192 rows, each well over 16 kB.
    let (fates, parts): (Vec<PathBuf>, Vec<PathBuf>) = files_under(&store, "parts")
        .into_iter()
        .partition(|p| p.ends_with("fate"));
    assert_eq!(parts.len(), 3, "{parts:?}");
    // The commit decided the parts' fate: no sweep takes them.
    assert_eq!(fates.len(), 1, "{fates:?}");
    // Two writes, two log entries: the big one is one entry naming its parts.
    assert_eq!(files_under(&store, "log").len(), 2);
    let expected = (20001, (1..=20000).sum::<i64>());
    assert_eq!(
        count_and_sum(ids(&a, "SELECT id FROM t$rt").await),
        expected
    );
    // Another process reads the parts from the files.
    let alias = warehouse.path().join("store-alias");
    std::os::unix::fs::symlink(&store, &alias).expect("symlink");
    let b = process(&warehouse, &alias).await;
    assert_eq!(
        count_and_sum(ids(&b, "SELECT id FROM t$rt").await),
        expected
    );
    assert_eq!(
        ids(&b, "SELECT count(*) FROM t$rt WHERE v = 'small'").await,
        vec![1]
    );

    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(count_and_sum(ids(&a, "SELECT id FROM t").await), expected);
    assert_eq!(
        count_and_sum(ids(&a, "SELECT id FROM t$rt").await),
        expected
    );
    // Once the retention passed, a trim deletes the entry and its parts.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    run(&a, "INSERT INTO t VALUES (-1, 'after')").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(files_under(&store, "parts"), Vec::<PathBuf>::new());
    assert_eq!(files_under(&store, "log"), Vec::<PathBuf>::new());
    assert_eq!(
        count_and_sum(ids(&b, "SELECT id FROM t$rt").await),
        (20002, expected.1 - 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_part_upserts_and_deletes_merge_as_they_do_after_tiering() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let store = warehouse.path().join("store");
    let ctx = process(&warehouse, &store).await;
    run(
        &ctx,
        "CREATE TABLE kv (k BIGINT, v BIGINT, PRIMARY KEY (k) NOT ENFORCED) \
         WITH ('lakestream.enabled' = 'true', 'bucket' = '2')",
    )
    .await;
    run(
        &ctx,
        "INSERT INTO kv SELECT value AS k, value AS v FROM generate_series(1, 6000)",
    )
    .await;
    run(&ctx, "CALL sys.lakestream_tier('default.kv')").await;
    // Overwrite every third key twice within one multi-part write (the later
    // version wins), then delete the even keys among the first 3,000.
    run(
        &ctx,
        "INSERT INTO kv SELECT k, v FROM ( \
           SELECT value AS k, -value AS v, 1 AS o FROM generate_series(3, 6000, 3) \
           UNION ALL \
           SELECT value AS k, value * 10 AS v, 2 AS o FROM generate_series(3, 6000, 3) \
         ) ORDER BY o",
    )
    .await;
    run(&ctx, "DELETE FROM kv WHERE k <= 3000 AND k % 2 = 0").await;
    // More than one part (the fate file aside): multi-part writes.
    let parts = files_under(&store, "parts");
    assert!(parts.iter().filter(|p| !p.ends_with("fate")).count() > 1);
    let query = "SELECT sum(v) FROM kv$rt";
    let before = ids(&ctx, query).await;
    let rows_before = ids(&ctx, "SELECT count(*) FROM kv$rt").await;
    run(&ctx, "CALL sys.lakestream_tier('default.kv')").await;
    assert_eq!(ids(&ctx, "SELECT sum(v) FROM kv").await, before);
    assert_eq!(ids(&ctx, "SELECT count(*) FROM kv").await, rows_before);
    // What the statements say, worked out by hand.
    let expected: i64 = (1..=6000i64)
        .filter(|k| !(*k <= 3000 && k % 2 == 0))
        .map(|k| if k % 3 == 0 { k * 10 } else { k })
        .sum();
    assert_eq!(before, vec![expected]);
    assert_eq!(rows_before, vec![6000 - 1500]);
}

/// A store root `faulty://<name>` over a fresh in-memory bucket.
fn faulty_root() -> (String, Faults) {
    let url = format!("faulty://multipart-{}", std::process::id());
    let faults = Faults::seeded(7);
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    register_object_store(&url, Arc::new(FaultyStore::new(inner, faults.clone())))
        .expect("register");
    (url, faults)
}

/// A part that fails, even one that lands, leaves the write invisible: the
/// statement says nothing was written, and nothing of it ever shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_part_write_that_fails_part_way_writes_nothing() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let (url, faults) = faulty_root();
    let ctx = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", url.as_str()),
            SEGMENT_SIZE,
        ])
        .await;
    run(&ctx, CREATE).await;
    run(&ctx, "INSERT INTO t VALUES (0, 'before')").await;
    for fault in [Fault::fail(), Fault::lands_then_times_out()] {
        let rule = faults.add(
            Rule::new(Op::Put, fault)
                .path_contains("/parts/")
                .skip(2)
                .times(1),
        );
        let error = try_run(&ctx, BIG_INSERT).await.unwrap_err();
        assert!(error.contains("nothing was written"), "{error}");
        faults.remove(rule);
        assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![0]);
    }
    // The commit's claim of its parts (their fate file) failing, or landing
    // and then timing out: it refuses, and nothing of it ever shows.
    for fault in [Fault::fail(), Fault::lands_then_times_out()] {
        let rule = faults.add(Rule::new(Op::Put, fault).path_contains("/fate").times(1));
        let error = try_run(&ctx, BIG_INSERT).await.unwrap_err();
        assert!(error.contains("nothing was written"), "{error}");
        assert_eq!(faults.fired(rule), 1);
        faults.remove(rule);
        assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![0]);
    }
    // The commit's own entry failing is an unknown outcome, as any write's.
    let rule = faults.add(
        Rule::new(Op::Put, Fault::fail())
            .path_contains("/log/")
            .times(1),
    );
    let error = try_run(&ctx, BIG_INSERT).await.unwrap_err();
    assert!(error.contains("unknown"), "{error}");
    faults.remove(rule);
    run(&ctx, "INSERT INTO t VALUES (-1, 'after')").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![-1, 0]);
    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![-1, 0]);
}

/// A part whose bytes do not verify stops reads and tiering with an error
/// that names the part; setting the write aside says what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_part_is_an_error_naming_it_until_set_aside() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let store = warehouse.path().join("store");
    let ctx = process(&warehouse, &store).await;
    run(&ctx, CREATE).await;
    run(&ctx, BIG_INSERT).await;
    run(&ctx, "INSERT INTO t VALUES (-1, 'after')").await;
    let parts = files_under(&store, "parts");
    let victim = &parts[1];
    let mut bytes = std::fs::read(victim).expect("part");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(victim, bytes).expect("damage");
    // A new process: nothing cached.
    let fresh = {
        let alias = warehouse.path().join("store-alias");
        std::os::unix::fs::symlink(&store, &alias).expect("symlink");
        process(&warehouse, &alias).await
    };
    let name = victim
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name")
        .to_string();
    let error = try_run(&fresh, "SELECT count(*) FROM t$rt")
        .await
        .unwrap_err();
    assert!(
        error.contains("damaged") && error.contains(&name),
        "{error}"
    );
    let error = try_run(&fresh, "CALL sys.lakestream_tier('default.t')")
        .await
        .unwrap_err();
    assert!(error.contains(&name), "{error}");
    assert_eq!(ids(&fresh, "SELECT count(*) FROM t").await, vec![0]);
    let said = crate::support::try_ids(&fresh, "CALL sys.lakestream_set_aside('default.t', 1)")
        .await
        .unwrap_err();
    assert!(said.contains("not damaged"), "{said}");
    let said = set_aside_says(&fresh, "default.t", 0).await;
    assert!(said.contains("20000 rows"), "{said}");
    assert_eq!(sorted_ids(&fresh, "SELECT id FROM t$rt").await, vec![-1]);
    run(&fresh, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![-1]);
}

/// A primary-key table without fixed buckets keeps a hash index per bucket:
/// tiering a write big enough to flush Paimon's writers part way must leave
/// the table writable, by the next tiering and by Paimon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_a_big_write_into_dynamic_buckets_leaves_them_writable() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let store = warehouse.path().join("store");
    let ctx = process(&warehouse, &store).await;
    run(
        &ctx,
        "CREATE TABLE kv (k BIGINT, v BIGINT, PRIMARY KEY (k) NOT ENFORCED) \
         WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &ctx,
        "INSERT INTO kv SELECT value AS k, value AS v FROM generate_series(1, 30000)",
    )
    .await;
    run(&ctx, "CALL sys.lakestream_tier('default.kv')").await;
    run(
        &ctx,
        "INSERT INTO kv SELECT value AS k, -value AS v FROM generate_series(29990, 30010)",
    )
    .await;
    run(&ctx, "CALL sys.lakestream_tier('default.kv')").await;
    let expected: i64 = (1..29990i64).sum::<i64>() - (29990..=30010i64).sum::<i64>();
    assert_eq!(ids(&ctx, "SELECT sum(v) FROM kv").await, vec![expected]);
    assert_eq!(ids(&ctx, "SELECT count(*) FROM kv").await, vec![30010]);
    assert_eq!(ids(&ctx, "SELECT sum(v) FROM kv$rt").await, vec![expected]);
}

/// A streaming read of `t$rt` in the same process polls the log at its own
/// position; batch reads planned meanwhile still see every row of the
/// backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_reads_beside_a_streaming_read_see_the_whole_backlog() {
    use futures::StreamExt;

    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let store = warehouse.path().join("store");
    let writer = process(&warehouse, &store).await;
    run(
        &writer,
        "CREATE TABLE t (id BIGINT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    for id in 1..=20 {
        run(&writer, &format!("INSERT INTO t VALUES ({id})")).await;
    }
    // The same store root: the same process-wide caches.
    let reader = process(&warehouse, &store).await;
    run(&reader, "SET lakestream.scan_mode = 'streaming'").await;
    let mut stream = reader
        .sql("SELECT id FROM t$rt")
        .await
        .expect("plan")
        .execute_stream()
        .await
        .expect("stream");
    let follower = tokio::spawn(async move {
        while let Some(batch) = stream.next().await {
            batch.expect("streamed rows");
        }
    });
    for round in 0..60 {
        let id = 21 + round;
        run(&writer, &format!("INSERT INTO t VALUES ({id})")).await;
        assert_eq!(
            ids(&writer, "SELECT count(*) FROM t$rt").await,
            vec![id],
            "round {round}"
        );
    }
    follower.abort();
}
