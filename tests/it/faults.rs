//! The `local` store's log and tiering over a fault-injecting object store:
//! failed, slow and landed-then-failed puts, failed gets and deletes, lists
//! that miss new objects. Each test says what the writer was told and checks
//! that every acknowledged row is read, and tiered, exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use paimon_lakestream::store::local::register_object_store;
use paimon_lakestream::testing::faulty::{Fault, Faults, FaultyStore, Op, Rule};
use paimon_lakestream::{Error, ErrorKind, LakeStreamContext};

use crate::support::{run, sorted_ids, try_run, CatalogKind, TestWarehouse};

/// A store root `faulty://<bucket>#<process>` over `inner`, with its own
/// fault switches: two roots over one `inner` are two processes sharing one
/// bucket. (The store keeps its caches per root URL, fragment included, and
/// binds tables to the URL without it: one bucket, one store.)
fn root(inner: &Arc<dyn ObjectStore>) -> (String, Faults) {
    static N: AtomicU64 = AtomicU64::new(0);
    let bucket = Arc::as_ptr(inner).cast::<()>() as usize;
    let url = format!(
        "faulty://bucket-{}-{bucket:x}#process-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let faults = Faults::seeded(1);
    let store = FaultyStore::new(Arc::clone(inner), faults.clone());
    register_object_store(&url, Arc::new(store)).expect("register");
    (url, faults)
}

async fn process(
    warehouse: &TestWarehouse,
    url: &str,
    extra: &[(&str, &str)],
) -> LakeStreamContext {
    let mut options = vec![
        ("lakestream.store", "local"),
        ("local.tier-interval", "off"),
        ("local.log-retention", "1s"),
        ("local.path", url),
    ];
    options.extend_from_slice(extra);
    warehouse.context_with(&options).await
}

const CREATE: &str = "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')";

/// An object store's failed put may have reached the server (a timeout),
/// so the writer hears "outcome unknown"; here it did not land, and the row
/// never shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_put_is_an_unknown_outcome_and_shows_nothing_it_did_not_write() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (url, faults) = root(&inner);
    let ctx = process(&warehouse, &url, &[]).await;
    run(&ctx, CREATE).await;
    faults.add(
        Rule::new(Op::Put, Fault::fail())
            .path_contains("/log/")
            .times(1),
    );
    let error = try_run(&ctx, "INSERT INTO t VALUES (1)").await.unwrap_err();
    assert!(
        error.contains("outcome") && error.contains("unknown"),
        "{error}"
    );
    run(&ctx, "INSERT INTO t VALUES (2)").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_lands_then_fails_is_an_unknown_outcome_and_counts_once() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (url, faults) = root(&inner);
    let ctx = process(&warehouse, &url, &[]).await;
    run(&ctx, CREATE).await;
    faults.add(
        Rule::new(Op::Put, Fault::lands_then_times_out())
            .path_contains("/log/")
            .times(1),
    );
    let error = try_run(&ctx, "INSERT INTO t VALUES (1)").await.unwrap_err();
    assert!(
        error.contains("outcome") && error.contains("unknown"),
        "{error}"
    );
    // It landed: the row is there, once, and the next write goes after it.
    run(&ctx, "INSERT INTO t VALUES (2)").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![1, 2]);
    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_put_past_the_timeout_finishes_once() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (url, faults) = root(&inner);
    let ctx = process(&warehouse, &url, &[("lakestream.timeout", "200ms")]).await;
    run(&ctx, CREATE).await;
    faults.add(
        Rule::new(Op::Put, Fault::Delay(Duration::from_millis(600)))
            .path_contains("/log/")
            .times(1),
    );
    let error = try_run(&ctx, "INSERT INTO t VALUES (1)").await.unwrap_err();
    assert!(
        error.contains("outcome") && error.contains("unknown"),
        "{error}"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, vec![1]);
}

/// Another process's list misses the newest segment: its write still never
/// overwrites or hides it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_misses_new_segments_loses_nothing() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (url_a, _) = root(&inner);
    let (url_b, faults_b) = root(&inner);
    let a = process(&warehouse, &url_a, &[]).await;
    run(&a, CREATE).await;
    for id in 1..=3 {
        run(&a, &format!("INSERT INTO t VALUES ({id})")).await;
    }
    faults_b.add(Rule::new(
        Op::List,
        Fault::ListMissesModifiedWithin(Duration::from_secs(60)),
    ));
    let b = process(&warehouse, &url_b, &[]).await;
    run(&b, "INSERT INTO t VALUES (4)").await;
    faults_b.clear();
    assert_eq!(
        sorted_ids(&a, "SELECT id FROM t$rt").await,
        vec![1, 2, 3, 4]
    );
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 2, 3, 4]);
}

/// Tiering that meets failed gets, or deletes that fail after its commit,
/// fails; the next run carries on, and every row reaches `t` once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_through_failed_gets_and_deletes_commits_each_row_once() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (url, faults) = root(&inner);
    let ctx = process(&warehouse, &url, &[]).await;
    run(&ctx, CREATE).await;
    for id in 1..=3 {
        run(&ctx, &format!("INSERT INTO t VALUES ({id})")).await;
    }
    let get = faults.add(
        Rule::new(Op::Get, Fault::fail())
            .path_contains("/log/")
            .times(1),
    );
    assert!(try_run(&ctx, "CALL sys.lakestream_tier('default.t')")
        .await
        .is_err());
    assert_eq!(faults.fired(get), 1);
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t").await,
        Vec::<i64>::new()
    );
    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![1, 2, 3]);
    // Past the retention the next run deletes; its deletes fail.
    run(&ctx, "INSERT INTO t VALUES (4)").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let delete = faults.add(Rule::new(Op::Delete, Fault::fail()).path_contains("/log/"));
    let _ = try_run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    assert!(faults.fired(delete) > 0);
    faults.clear();
    run(&ctx, "INSERT INTO t VALUES (5)").await;
    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t").await,
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        vec![1, 2, 3, 4, 5]
    );
}

/// A `CREATE` whose attach the store did not answer (the put of the store
/// table's metadata failed with a timeout, landed and then timed out, or
/// took past `lakestream.timeout`) keeps the Paimon table: the store may
/// hold its table, and another process's `CREATE TABLE IF NOT EXISTS` may
/// have attached it and had writes acknowledged. The error names the table
/// and the statement that finishes it; that statement, run by another
/// process, attaches it, and the table takes writes and serves `t$rt` in
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_attach_is_not_answered_keeps_the_table_for_if_not_exists() {
    for fault in [
        Fault::timeout(),
        Fault::lands_then_times_out(),
        Fault::Delay(Duration::from_millis(600)),
    ] {
        let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (url_a, faults) = root(&inner);
        let (url_b, _) = root(&inner);
        let a = process(&warehouse, &url_a, &[("lakestream.timeout", "200ms")]).await;
        faults.add(
            Rule::new(Op::Put, fault.clone())
                .path_contains("table.json")
                .times(1),
        );
        let error = match a.sql(CREATE).await {
            Ok(frame) => frame.collect().await.map(|_| ()),
            Err(e) => Err(e),
        }
        .expect_err("the attach fails");
        let text = error.to_string();
        assert!(
            text.contains("'default.t'")
                && text.contains("CREATE TABLE IF NOT EXISTS")
                && !text.contains("during planning"),
            "{fault:?}: {text}"
        );
        assert_eq!(
            Error::DataFusion(error).kind(),
            ErrorKind::Unavailable,
            "{fault:?}: {text}"
        );
        assert_eq!(
            sorted_ids(&a, "SELECT id FROM t").await,
            Vec::<i64>::new(),
            "{fault:?}: the Paimon table is kept"
        );
        // A put past the timeout is not waited for.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let b = process(&warehouse, &url_b, &[]).await;
        run(
            &b,
            "CREATE TABLE IF NOT EXISTS t (id INT) WITH ('lakestream.enabled' = 'true')",
        )
        .await;
        run(&b, "INSERT INTO t VALUES (1)").await;
        assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1]);
        run(&a, "INSERT INTO t VALUES (2)").await;
        assert_eq!(
            sorted_ids(&a, "SELECT id FROM t$rt").await,
            vec![1, 2],
            "{fault:?}"
        );
    }
}
