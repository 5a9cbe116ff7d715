//! Reads over a `local` store holding many small writes: the process
//! coalesces the entries it holds into blocks (`src/store/local/table/segments.rs`),
//! and a `t$rt` read still gives every acknowledged row once, in write
//! order, whatever tiering or another process did meanwhile.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use tempfile::TempDir;

use crate::support::{ids, on_request_context, run, sorted_rows};

/// Single-row writes per table: well past the pieces a read coalesces.
const WRITES: i64 = 150;

/// Runs `sql` in a `lakestream-cli` process of its own over the warehouse,
/// with `options` and, if given, a failpoint to abort at.
fn in_another_process(
    dir: &TempDir,
    options: &[&str],
    failpoint: Option<&str>,
    sql: &str,
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lakestream-cli"));
    command
        .arg("--warehouse")
        .arg(dir.path().join("warehouse"))
        .arg("--option")
        .arg(format!("local.path={}", dir.path().join("store").display()))
        .args(["--option", "local.tier-interval=off"]);
    for option in options {
        command.args(["--option", option]);
    }
    if let Some(point) = failpoint {
        command.env("LAKESTREAM_FAILPOINT", point);
    }
    command
        .args(["-q", "-c", sql])
        .output()
        .expect("run lakestream-cli")
}

/// `0..n`, as the ids a read should give.
fn expected(range: std::ops::Range<i64>) -> Vec<i64> {
    range.collect()
}

async fn sorted_ids(ctx: &paimon_lakestream::LakeStreamContext, sql: &str) -> Vec<i64> {
    let mut ids = ids(ctx, sql).await;
    ids.sort_unstable();
    ids
}

/// Many one-row writes, read back between writes (so reads coalesce what
/// earlier reads left, and new entries after it): an append table gives each
/// row once, a primary-key table each key's newest version, deletes applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_writes_read_back_exactly_and_in_order() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = on_request_context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE a (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE k (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    let mut model: BTreeMap<i64, String> = BTreeMap::new();
    for i in 0..WRITES {
        run(&ctx, &format!("INSERT INTO a VALUES ({i}, 'v{i}')")).await;
        let key = i % 17;
        if i % 7 == 6 {
            run(&ctx, &format!("DELETE FROM k WHERE id = {key}")).await;
            model.remove(&key);
        } else {
            run(&ctx, &format!("INSERT INTO k VALUES ({key}, 'v{i}')")).await;
            model.insert(key, format!("v{i}"));
        }
        if i % 40 == 39 || i == WRITES - 1 {
            assert_eq!(
                sorted_ids(&ctx, "SELECT id FROM a$rt").await,
                expected(0..i + 1),
                "after write {i}"
            );
            let mut want: Vec<String> = model.iter().map(|(k, v)| format!("{k}|{v}")).collect();
            want.sort();
            assert_eq!(
                sorted_rows(&ctx, "SELECT id, v FROM k$rt").await,
                want,
                "after write {i}"
            );
        }
    }
    // A point query, as the benchmark's, and a read of a single key.
    let probe = WRITES / 2;
    assert_eq!(
        sorted_rows(&ctx, &format!("SELECT v FROM a$rt WHERE id = {probe}")).await,
        [format!("v{probe}")]
    );
    for key in [0, 5, 16] {
        let want: Vec<String> = model.get(&key).into_iter().cloned().collect();
        assert_eq!(
            sorted_rows(&ctx, &format!("SELECT v FROM k$rt WHERE id = {key}")).await,
            want,
            "key {key}"
        );
    }
}

/// Another process tiers the first 40 entries of a stretch this process has
/// coalesced, then dies before trimming: the read starts inside a block and
/// must give the block's rows from there on only (the others are in Paimon).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_part_of_a_block_shows_each_row_once() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = on_request_context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    for i in 0..WRITES {
        run(&ctx, &format!("INSERT INTO t VALUES ({i}, 'v{i}')")).await;
    }
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        expected(0..WRITES)
    );
    let output = in_another_process(
        &dir,
        &["local.tier-max-rows=40"],
        Some("tier-after-commit"),
        "CALL sys.lakestream_tier('t')",
    );
    assert!(
        !output.status.success(),
        "the tierer should have aborted after its first commit"
    );
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, expected(0..40));
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        expected(0..WRITES)
    );
    for i in WRITES..WRITES + 40 {
        run(&ctx, &format!("INSERT INTO t VALUES ({i}, 'v{i}')")).await;
    }
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        expected(0..WRITES + 40)
    );
    // Tiering the rest in this process, then reading again.
    run(&ctx, "CALL sys.lakestream_tier('t')").await;
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        expected(0..WRITES + 40)
    );
}

/// Another process drops the table and creates it again: the new
/// incarnation's log starts at position 0 again, and what this process
/// coalesced of the old one must not stand for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_created_again_elsewhere_does_not_read_the_old_blocks() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = on_request_context(&dir).await;
    let ddl = "CREATE TABLE t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true')";
    run(&ctx, ddl).await;
    for i in 0..WRITES {
        run(&ctx, &format!("INSERT INTO t VALUES ({i}, 'v{i}')")).await;
    }
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        expected(0..WRITES)
    );
    let output = in_another_process(
        &dir,
        &[],
        None,
        &format!(
            "DROP TABLE t; {ddl}; INSERT INTO t VALUES (1000, 'new'); \
             INSERT INTO t VALUES (1001, 'new'); INSERT INTO t VALUES (1002, 'new')"
        ),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        sorted_ids(&ctx, "SELECT id FROM t$rt").await,
        [1000, 1001, 1002]
    );
    for i in 0..WRITES {
        run(&ctx, &format!("INSERT INTO t VALUES ({i}, 'again')")).await;
    }
    let mut want = expected(0..WRITES);
    want.extend([1000, 1001, 1002]);
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, want);
}
