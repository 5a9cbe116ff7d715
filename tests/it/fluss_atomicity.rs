//! What a statement promises on Fluss (issue 11, item 5). Fluss has no
//! transactions: a statement's rows are sent in batches, each acknowledged
//! on its own. A statement whose process dies part-way leaves some of its
//! rows, each exactly once (the writer is idempotent). They need not be the
//! first ones: DataFusion may produce a statement's rows from several
//! partitions at once. docs/fluss.md states it; this test pins it down with
//! `kill -9`.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array};
use paimon_lakestream::LakeStreamContext;

use crate::fluss::{child_context, cluster, open, run, FlussHarness};
use crate::slt::StoreCondition;
use crate::support::child_command;

/// Rows of the statement the child runs.
const ROWS: i64 = 10_000_000;

/// The child's side: runs one big `INSERT ... SELECT` when
/// `LAKESTREAM_FLUSS_CHILD` names a table, does nothing otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process: the test that spawns it runs it"]
async fn fluss_statement_child() {
    let Ok(table) = std::env::var("LAKESTREAM_FLUSS_CHILD") else {
        return;
    };
    let ctx = child_context().await;
    println!("STARTED");
    run(
        &ctx,
        &format!(
            "INSERT INTO {table} SELECT value, concat('row-', CAST(value AS STRING)) \
             FROM generate_series(1, {ROWS})"
        ),
    )
    .await;
    println!("DONE");
}

/// `count(*)`, `count(DISTINCT k)` and `max(k)` of `table$rt`.
async fn summary(ctx: &LakeStreamContext, table: &str) -> (i64, i64, i64) {
    let batches = run(
        ctx,
        &format!("SELECT count(*), count(DISTINCT k), coalesce(max(k), 0) FROM {table}$rt"),
    )
    .await;
    let value = |column: usize| {
        batches[0]
            .column(column)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("BIGINT")
            .value(0)
    };
    (value(0), value(1), value(2))
}

/// Runs the statement in a child process into `table` and kills it with
/// SIGKILL as soon as `table$rt` shows some of its rows.
async fn kill_statement_into(ctx: &LakeStreamContext, table: &str) {
    let cluster = cluster();
    let mut child = child_command("fluss_atomicity::fluss_statement_child")
        .env("LAKESTREAM_FLUSS_CHILD", table)
        .env("CHILD_WAREHOUSE", cluster.warehouse())
        .env("CHILD_BOOTSTRAP", cluster.bootstrap())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("piped stdout");
    let started = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.ends_with("STARTED"))
    })
    .await
    .expect("join");
    assert!(started, "the child did not start");
    let t0 = Instant::now();
    loop {
        let (rows, _, _) = summary(ctx, table).await;
        if rows > 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{table}: no row of the statement arrived"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().expect("kill -9 the child");
    let _ = child.wait();
    eprintln!("{table}: killed after {:?}", t0.elapsed());
}

/// A killed statement leaves some of its rows, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_killed_statement_leaves_some_of_its_rows_each_once() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let harness = FlussHarness::on(cluster);
    let (_warehouse, ctx) = open(&harness, StoreCondition::Reachable).await;
    for (table, ddl) in [
        (
            "killed_log",
            "CREATE TABLE killed_log (k BIGINT, v STRING) \
             WITH ('bucket' = '1', 'bucket-key' = 'k', 'lakestream.enabled' = 'true')",
        ),
        (
            "killed_kv",
            "CREATE TABLE killed_kv (k BIGINT NOT NULL, v STRING, PRIMARY KEY (k)) \
             WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
        ),
    ] {
        run(&ctx, ddl).await;
        kill_statement_into(&ctx, table).await;
        let (rows, distinct, max) = summary(&ctx, table).await;
        eprintln!("{table}: {rows} rows, {distinct} distinct keys, max key {max}");
        assert_eq!(
            rows, distinct,
            "{table}: a row of the statement is there twice"
        );
        assert!(max <= ROWS, "{table}: a row the statement never wrote");
        assert!(
            rows > 0 && rows < ROWS,
            "{table}: the kill did not fall inside the statement ({rows} rows)"
        );
    }
}
