//! The `local` store's guarantees against other processes: long-lived
//! writers after another process tiered, tables dropped and created again
//! elsewhere, a lost store directory, damaged segments, writes that time out.
//!
//! "Another process" is a second context whose store path reaches the same
//! directory through a symbolic link: the store keeps its caches per root
//! URL, so the two share nothing in memory, exactly as two processes do,
//! while file locks still exclude each other.

use std::path::{Path, PathBuf};

use paimon_lakestream::LakeStreamContext;

use crate::support::{
    run, segments, set_aside_says, sorted_ids, try_ids, try_run, CatalogKind, TestWarehouse,
};

/// A file-system warehouse with a store directory reached under two names,
/// so that two contexts are two processes to each other.
pub(crate) struct Setup {
    pub(crate) warehouse: TestWarehouse,
    pub(crate) store: PathBuf,
    /// The same directory as `store`, under another name.
    pub(crate) alias: PathBuf,
}

impl Setup {
    pub(crate) async fn new() -> Self {
        let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
        let store = warehouse.path().join("store");
        std::fs::create_dir_all(&store).expect("store directory");
        let alias = warehouse.path().join("store-alias");
        std::os::unix::fs::symlink(&store, &alias).expect("symlink");
        Self {
            warehouse,
            store,
            alias,
        }
    }

    /// A context as a separate process would have it, storing under `path`.
    pub(crate) async fn process(&self, path: &Path, extra: &[(&str, &str)]) -> LakeStreamContext {
        let mut options = vec![
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", path.to_str().expect("utf-8 path")),
        ];
        options.extend_from_slice(extra);
        self.warehouse.context_with(&options).await
    }
}

/// Case 1: a long-lived writer keeps writing after another process tiered
/// and the tiered segments were deleted; its rows must not land below the
/// tiered position, where the next tiering would drop them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_writer_never_writes_below_what_another_process_tiered() {
    let setup = Setup::new().await;
    let retention = [("local.log-retention", "1s")];
    let a = setup.process(&setup.store, &retention).await;
    let b = setup.process(&setup.alias, &retention).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1)").await;
    run(&b, "INSERT INTO t VALUES (2)").await;
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    // Past the retention, the next tiering deletes the tiered segments.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert!(
        segments(&setup.store).is_empty(),
        "{:?}",
        segments(&setup.store)
    );
    run(&a, "INSERT INTO t VALUES (3)").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 2, 3]);
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
}

/// Case 1 within the retention: the tiered segments are still there, so the
/// stale writer's numbers are taken and it moves past them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_writer_after_another_tiered_within_the_retention() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    let b = setup.process(&setup.alias, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1)").await;
    run(&b, "INSERT INTO t VALUES (2)").await;
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    run(&a, "INSERT INTO t VALUES (3)").await;
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 2, 3]);
}

/// Case 2: another process drops the table and creates it again; a
/// long-lived process must not serve or tier the dropped table's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_and_created_elsewhere_never_shows_its_old_rows() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    let b = setup.process(&setup.alias, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1), (2), (3)").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
    run(&b, "DROP TABLE t").await;
    run(
        &b,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&b, "INSERT INTO t VALUES (100)").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![100]);
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![100]);
    run(&a, "INSERT INTO t VALUES (101)").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![100, 101]);
}

/// Case 2, variant: the table is dropped by a catalog that names no store
/// (refused while the mode is on, so the mode is turned off there first,
/// and the store's files stay) and created again; the old rows never come
/// back, and turning the mode on attaches a fresh store table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_where_the_store_could_not_see_it() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1), (2), (3)").await;
    let plain = setup.warehouse.context_with(&[]).await;
    let e = try_run(&plain, "DROP TABLE t").await.unwrap_err();
    assert!(e.contains("names no store"), "{e}");
    run(
        &plain,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    run(&plain, "DROP TABLE t").await;
    // Another millisecond, so the new table is told apart by its creation time.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    run(&plain, "CREATE TABLE t (id INT)").await;
    run(&plain, "INSERT INTO t VALUES (50)").await;
    run(
        &a,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![50]);
    run(&a, "INSERT INTO t VALUES (51)").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![50, 51]);
}

/// Case 3: the store's directory is lost after a tiering. Writes are refused
/// until the mode is turned on again, and then never numbered below what
/// Paimon already holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_store_directory_loses_no_later_write() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1), (2)").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    std::fs::remove_dir_all(&setup.store).expect("lose the store");
    let refused = try_run(&a, "INSERT INTO t VALUES (3)").await.unwrap_err();
    assert!(refused.contains("has no table"), "{refused}");
    run(
        &a,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (3)").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 2, 3]);

    // A catalog whose `local.path` names another directory: the table is
    // bound to the first store, so it is moved by turning the mode off and
    // on through the new one.
    let moved = setup.warehouse.path().join("moved-store");
    let c = setup.process(&moved, &[]).await;
    let refused = try_run(&c, "INSERT INTO t VALUES (4)").await.unwrap_err();
    assert!(refused.contains("bound to store"), "{refused}");
    run(
        &c,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    run(
        &c,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&c, "INSERT INTO t VALUES (4)").await;
    run(&c, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&c, "SELECT id FROM t").await, vec![1, 2, 3, 4]);
}

/// Case 4: a segment whose header has one flipped bit is an error naming the
/// file, for reads and for tiering; nothing is skipped, tiered or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_segment_is_an_error_naming_it() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    for id in 1..=3 {
        run(&a, &format!("INSERT INTO t VALUES ({id})")).await;
    }
    let files = segments(&setup.store);
    assert_eq!(files.len(), 3, "{files:?}");
    for (byte, what) in [(0usize, "magic"), (9, "length")] {
        let mut bytes = std::fs::read(&files[1]).expect("read segment");
        let original = bytes.clone();
        bytes[byte] ^= 0x01;
        std::fs::write(&files[1], &bytes).expect("damage segment");
        // A fresh process: nothing cached.
        let b = setup.process(&setup.alias, &[]).await;
        for sql in [
            "SELECT id FROM t$rt",
            "CALL sys.lakestream_tier('default.t')",
        ] {
            let error = try_run(&b, sql).await.unwrap_err();
            let name = files[1].file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                error.contains(&name) && error.contains("damaged"),
                "{what}: {sql}: {error}"
            );
            assert!(error.contains("it held 1 rows"), "{what}: {error}");
        }
        assert_eq!(sorted_ids(&b, "SELECT id FROM t").await, Vec::<i64>::new());
        assert_eq!(segments(&setup.store).len(), 3);
        std::fs::write(&files[1], &original).expect("repair segment");
    }
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 2, 3]);

    // The operator's way out: set the damaged segment aside, losing its row.
    let mut bytes = std::fs::read(&files[1]).expect("read segment");
    bytes[20] ^= 0x10;
    std::fs::write(&files[1], &bytes).expect("damage segment");
    let b = setup.process(&setup.alias, &[]).await;
    let refused = try_run(&b, "CALL sys.lakestream_set_aside('default.t', 0)")
        .await
        .unwrap_err();
    assert!(refused.contains("not damaged"), "{refused}");
    let said = set_aside_says(&b, "default.t", 1).await;
    assert!(said.contains("held 1 rows"), "{said}");
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 3]);
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 3]);
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 3]);

    // A damaged last segment, alone after everything tiered: set aside, it
    // leaves nothing to commit, and tiering still passes it and ends.
    run(&a, "INSERT INTO t VALUES (4)").await;
    let last = segments(&setup.store).pop().expect("a segment");
    let mut bytes = std::fs::read(&last).expect("read segment");
    bytes[20] ^= 0x10;
    std::fs::write(&last, &bytes).expect("damage segment");
    run(&b, "CALL sys.lakestream_set_aside('default.t', 3)").await;
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    run(&b, "INSERT INTO t VALUES (5)").await;
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 3, 5]);
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 3, 5]);
}

/// Case 5: a write that times out says its outcome is unknown, and finishes
/// durably in the background; it never says it failed while its rows land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_times_out_says_its_outcome_is_unknown() {
    let setup = Setup::new().await;
    let a = setup
        .process(&setup.store, &[("lakestream.timeout", "1ms")])
        .await;
    let ok = setup.process(&setup.alias, &[]).await;
    run(
        &ok,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let insert = "INSERT INTO t SELECT CAST(value AS INT) FROM generate_series(1, 200000)";
    let error = try_run(&a, insert)
        .await
        .expect_err("a 200,000-row write does not finish within 1ms");
    assert!(error.contains("outcome"), "{error}");
    assert!(error.contains("unknown"), "{error}");
    assert!(!error.contains("during planning"), "{error}");
    // Whatever was answered, the write finishes whole: all rows or none.
    let mut count = 0;
    for _ in 0..100 {
        count = sorted_ids(&ok, "SELECT id FROM t$rt").await.len();
        if count == 200_000 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(count, 200_000);
}

/// Case 6: a streaming read that falls behind a trim fails with an error
/// that says so, instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_read_behind_a_trim_fails_loudly() {
    use futures::StreamExt;

    let setup = Setup::new().await;
    let retention = [("local.log-retention", "1s")];
    let reader = setup.process(&setup.store, &retention).await;
    let writer = setup.process(&setup.alias, &retention).await;
    run(
        &writer,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&writer, "INSERT INTO t VALUES (1)").await;
    run(&reader, "SET lakestream.scan_mode = 'streaming'").await;
    // One partition: nothing reads ahead of the test in the background.
    run(&reader, "SET datafusion.execution.target_partitions = 1").await;
    let mut stream = reader
        .sql("SELECT id FROM t$rt")
        .await
        .expect("plan")
        .execute_stream()
        .await
        .expect("stream");
    let first = stream.next().await.expect("a batch").expect("rows");
    assert_eq!(first.num_rows(), 1);
    // While the reader does not look, rows come, are tiered and, past the
    // retention, deleted.
    run(&writer, "INSERT INTO t VALUES (2)").await;
    run(&writer, "CALL sys.lakestream_tier('default.t')").await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    run(&writer, "CALL sys.lakestream_tier('default.t')").await;
    let next = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
        .await
        .expect("the streaming read stalled instead of failing");
    let error = match next {
        Some(Err(e)) => e.to_string(),
        other => panic!("expected an error, got {other:?}"),
    };
    assert!(error.contains("fell behind"), "{error}");
}

/// A DROP cut short (its process killed while Paimon deleted the table's
/// directory) can leave the dropped table's snapshots behind; creating the
/// table again must not bring their rows back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_created_over_a_drop_cut_short_starts_empty() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1), (2)").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    run(&a, "INSERT INTO t VALUES (3)").await;
    // What a killed DROP can leave: the schemas gone, the snapshots not.
    let table_dir = setup
        .warehouse
        .path()
        .join("warehouse")
        .join("default.db")
        .join("t");
    std::fs::remove_dir_all(table_dir.join("schema")).expect("remove schemas");
    assert!(table_dir.join("snapshot").exists());
    let b = setup.process(&setup.alias, &[]).await;
    run(
        &b,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&b, "INSERT INTO t VALUES (100)").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![100]);
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, Vec::<i64>::new());
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t").await, vec![100]);
}

/// The `local` store's file called `name` of table `t`, under `store`.
fn store_file(store: &Path, name: &str) -> PathBuf {
    let mut stack = vec![store.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return path;
            }
        }
    }
    panic!("no '{name}' under {}", store.display())
}

/// Another engine's work on `default.t`: one empty commit of its own, then
/// Paimon's snapshot expiry as Java's `expire_snapshots` does it (the
/// snapshot files before the newest one deleted, oldest first, then the
/// EARLIEST hint moved).
async fn commit_and_expire_elsewhere(warehouse: &TestWarehouse) {
    let catalog =
        paimon::CatalogFactory::create(paimon::Options::from_map(warehouse.catalog_options()))
            .await
            .expect("catalog");
    let table = catalog
        .get_table(&paimon::catalog::Identifier::new("default", "t"))
        .await
        .expect("table");
    table
        .new_write_builder()
        .with_commit_user("another-engine")
        .expect("commit user")
        .new_commit()
        .with_ignore_empty_commit(false)
        .commit(Vec::new())
        .await
        .expect("another engine's commit");
    let manager = table.snapshot_manager();
    let latest = manager
        .get_latest_snapshot_id()
        .await
        .expect("latest")
        .expect("a snapshot");
    let earliest = manager
        .earliest_snapshot_id()
        .await
        .expect("earliest")
        .unwrap_or(1);
    for id in earliest..latest {
        manager.delete_snapshot(id).await.expect("expire");
    }
    manager.write_earliest_hint(latest).await.expect("hint");
}

/// Case 7: a tiering process died between its commit and its marker, and
/// another engine expired that commit's snapshot since. The marker alone
/// would put the tiered position back, and the rows after it would be
/// shown and tiered twice; the store refuses instead, naming the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_tiering_snapshot_never_puts_the_tiered_position_back() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1)").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    let marker = store_file(&setup.store, "tiered.json");
    let before = std::fs::read(&marker).expect("marker");
    run(&a, "INSERT INTO t VALUES (2)").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    // The second tiering's marker never written: its process died.
    std::fs::write(&marker, before).expect("old marker");
    commit_and_expire_elsewhere(&setup.warehouse).await;

    // Another process, with nothing cached.
    let b = setup.process(&setup.alias, &[]).await;
    match try_ids(&b, "SELECT id FROM t$rt").await {
        Ok(mut rows) => {
            rows.sort_unstable();
            assert_eq!(rows, vec![1, 2], "rows shown twice");
        }
        Err(e) => {
            assert!(
                e.contains("cannot tell how far tiering of 'default.t'"),
                "{e}"
            );
            assert!(e.contains("expired"), "{e}");
            // Who expired it is not known: the error says what is.
            assert!(!e.contains("another engine"), "{e}");
        }
    }
    let _ = try_run(&b, "CALL sys.lakestream_tier('default.t')").await;
    let _ = try_run(&b, "INSERT INTO t VALUES (3)").await;
    let _ = try_run(&b, "CALL sys.lakestream_tier('default.t')").await;
    let tiered = sorted_ids(&b, "SELECT id FROM t").await;
    assert!(
        tiered == vec![1, 2] || tiered == vec![1, 2, 3],
        "tiered twice: {tiered:?}"
    );
}

/// Case 7, the common ways: the marker is up to date, or the store never
/// tiered anything; another engine expiring every tiering snapshot changes
/// nothing, before or after later writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_snapshots_keep_a_proven_tiered_position() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    // Never tiered: only another engine's snapshots, then expired.
    commit_and_expire_elsewhere(&setup.warehouse).await;
    commit_and_expire_elsewhere(&setup.warehouse).await;
    run(&a, "INSERT INTO t VALUES (1)").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1]);
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    run(&a, "INSERT INTO t VALUES (2)").await;
    run(&a, "CALL sys.lakestream_tier('default.t')").await;
    // The marker is up to date; the tiering snapshots expire.
    commit_and_expire_elsewhere(&setup.warehouse).await;
    let b = setup.process(&setup.alias, &[]).await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 2]);
    run(&b, "INSERT INTO t VALUES (3)").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 2, 3]);
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
}

/// The mode turned off while the store could not tier (here: through a
/// catalog without a store), then rows written to Paimon directly, then the
/// mode turned on again: on a primary-key table the store's older rows
/// would be tiered over the newer ones, so turning it on is refused, naming
/// the table and both ways out; without direct writes, or on an append
/// table, the store's rows are simply served and tiered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_the_mode_on_never_tiers_older_rows_over_direct_writes() {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    let plain = setup.warehouse.context_with(&[]).await;
    // In parts, each on the heap: one test function awaiting all these
    // statements needs more stack than a test thread has in debug builds.
    Box::pin(stranded_rows_are_served(&a, &plain)).await;
    Box::pin(stranded_rows_under_direct_writes(&setup, &a, &plain)).await;
    Box::pin(stranded_rows_of_an_append_table(&a, &plain)).await;
}

const OFF: &str = "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')";
const ON: &str = "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')";

/// Off and on with nothing written in between: the row waits and is served.
async fn stranded_rows_are_served(a: &LakeStreamContext, plain: &LakeStreamContext) {
    run(
        a,
        "CREATE TABLE t (id INT NOT NULL, v INT, PRIMARY KEY (id)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(a, "INSERT INTO t VALUES (1, 10), (2, 20)").await;
    run(a, "CALL sys.lakestream_tier('default.t')").await;
    run(a, "INSERT INTO t VALUES (1, 11)").await;
    run(plain, OFF).await;
    run(a, ON).await;
    assert_eq!(sorted_ids(a, "SELECT v FROM t$rt").await, vec![11, 20]);
}

/// Off, a direct write of the same key, on: refused; discarding the rows
/// as the error says lets the mode on with Paimon's rows.
async fn stranded_rows_under_direct_writes(
    setup: &Setup,
    a: &LakeStreamContext,
    plain: &LakeStreamContext,
) {
    run(plain, OFF).await;
    run(plain, "INSERT INTO t VALUES (1, 12)").await;
    let refused = try_run(a, ON)
        .await
        .expect_err("older rows over newer ones");
    assert!(refused.contains("'default.t'"), "{refused}");
    assert!(refused.contains("1 rows"), "{refused}");
    assert!(
        refused.contains("lakestream-cli tier --once --table default.t"),
        "{refused}"
    );
    assert!(refused.contains("db-default/t-t"), "{refused}");
    assert_eq!(sorted_ids(a, "SELECT v FROM t").await, vec![12, 20]);
    // Refused means the mode stayed off: Paimon takes writes directly.
    run(plain, "INSERT INTO t VALUES (2, 21)").await;
    std::fs::remove_dir_all(setup.store.join("db-default").join("t-t")).expect("discard");
    run(a, ON).await;
    assert_eq!(sorted_ids(a, "SELECT v FROM t$rt").await, vec![12, 21]);
    run(a, "INSERT INTO t VALUES (2, 22)").await;
    run(a, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(a, "SELECT v FROM t").await, vec![12, 22]);
}

/// An append table keeps its waiting rows through the same steps.
async fn stranded_rows_of_an_append_table(a: &LakeStreamContext, plain: &LakeStreamContext) {
    run(
        a,
        "CREATE TABLE u (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(a, "INSERT INTO u VALUES (1)").await;
    run(
        plain,
        "ALTER TABLE u SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    run(plain, "INSERT INTO u VALUES (2)").await;
    run(
        a,
        "ALTER TABLE u SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(a, "CALL sys.lakestream_tier('default.u')").await;
    assert_eq!(sorted_ids(a, "SELECT id FROM u").await, vec![1, 2]);
}
