//! The union read of a primary-key table with a store backlog larger than
//! its memory budget (`lakestream.union_read_memory_budget`): the store's
//! log is read twice, and `t$rt` still gives what Paimon gives after tiering.
//!
//! The budget is set to one byte here, so a small backlog takes that path;
//! `EXPLAIN ANALYZE` shows it as `store_log_reads=2`.

use datafusion::arrow::util::pretty::pretty_format_batches;
use paimon_lakestream::LakeStreamContext;

use crate::support::{CatalogKind, TestWarehouse};

async fn run(ctx: &LakeStreamContext, sql: &str) -> String {
    // Boxed: planning futures are large in debug builds, and a test body
    // awaiting many of them would otherwise overflow the test thread's stack.
    let batches = Box::pin(async { ctx.sql(sql).await?.collect().await })
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pretty_format_batches(&batches)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .to_string()
}

async fn local_context(warehouse: &TestWarehouse) -> LakeStreamContext {
    let path = warehouse.path().join("store");
    warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", path.to_str().expect("utf-8 path")),
        ])
        .await
}

/// How often the store's log was read for `sql`, from `EXPLAIN ANALYZE`.
async fn log_reads(ctx: &LakeStreamContext, sql: &str) -> String {
    let plan = run(ctx, &format!("EXPLAIN ANALYZE {sql}")).await;
    let at = plan
        .find("store_log_reads=")
        .unwrap_or_else(|| panic!("no store_log_reads in:\n{plan}"));
    plan[at..]
        .split([',', ']', ' '])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Writes to `t` (key `k`, values `v`, `n`): rows in Paimon before the mode
/// is on, then a tiered round, then a backlog in many statements (so many
/// log batches) that inserts new keys, updates keys several times (tiered
/// ones and new ones) and, where `deletes`, deletes keys of both kinds and
/// writes some of them again.
async fn write_history(ctx: &LakeStreamContext, options: &str, deletes: bool) {
    run(
        ctx,
        &format!(
            "CREATE TABLE t (k INT NOT NULL, v STRING, n BIGINT, PRIMARY KEY (k)) \
             WITH ('bucket' = '1'{options})"
        ),
    )
    .await;
    let rows = |from: i64, to: i64, round: i64| -> String {
        (from..to)
            .map(|k| format!("({k}, 'v{k}-{round}', {})", k * 10 + round))
            .collect::<Vec<_>>()
            .join(", ")
    };
    run(ctx, &format!("INSERT INTO t VALUES {}", rows(0, 100, 0))).await;
    run(
        ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(ctx, &format!("INSERT INTO t VALUES {}", rows(50, 150, 1))).await;
    run(ctx, "CALL sys.lakestream_tier('default.t')").await;
    // The backlog: 12 rounds over overlapping key ranges.
    for round in 2..14 {
        let from = (round * 37) % 200;
        run(
            ctx,
            &format!("INSERT INTO t VALUES {}", rows(from, from + 60, round)),
        )
        .await;
        if deletes && round % 3 == 0 {
            run(
                ctx,
                &format!(
                    "DELETE FROM t WHERE k % 7 = {} AND k < {}",
                    round % 7,
                    from + 30
                ),
            )
            .await;
        }
    }
    if deletes {
        // Deleted, then written again: the newest version is live.
        run(ctx, "DELETE FROM t WHERE k IN (3, 4, 60)").await;
        run(ctx, &format!("INSERT INTO t VALUES {}", rows(3, 4, 99))).await;
        run(ctx, "DELETE FROM t WHERE k = 5").await;
    }
}

/// `t$rt` read with the log in memory and read twice must agree with each
/// other and with `t` after tiering the backlog.
async fn check(options: &str, deletes: bool) {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let ctx = local_context(&warehouse).await;
    write_history(&ctx, options, deletes).await;
    let query = "SELECT * FROM t$rt ORDER BY k";
    let in_memory = run(&ctx, query).await;
    assert_eq!(log_reads(&ctx, query).await, "store_log_reads=1");

    run(&ctx, "SET lakestream.union_read_memory_budget = '1'").await;
    assert_eq!(log_reads(&ctx, query).await, "store_log_reads=2");
    let two_pass = run(&ctx, query).await;
    let projected = run(&ctx, "SELECT n FROM t$rt WHERE v LIKE '%-1%' ORDER BY n").await;
    let counted = run(&ctx, "SELECT count(*) FROM t$rt").await;
    run(&ctx, "SET lakestream.union_read_memory_budget = '67108864'").await;

    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    let tiered = run(&ctx, "SELECT * FROM t ORDER BY k").await;
    assert_eq!(
        in_memory, tiered,
        "{options}: in memory (left), tiered (right)"
    );
    assert_eq!(
        two_pass, tiered,
        "{options}: two reads (left), tiered (right)"
    );
    assert_eq!(
        projected,
        run(&ctx, "SELECT n FROM t WHERE v LIKE '%-1%' ORDER BY n").await,
        "{options}"
    );
    assert_eq!(
        counted,
        run(&ctx, "SELECT count(*) FROM t").await,
        "{options}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplicate_reads_a_large_backlog_twice() {
    check("", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplicate_ignore_delete_reads_a_large_backlog_twice() {
    // Such a table refuses DELETE: its log holds upserts only.
    check(", 'ignore-delete' = 'true'", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_versions_merge_over_a_second_read() {
    for options in [
        ", 'merge-engine' = 'partial-update'",
        ", 'merge-engine' = 'aggregation', 'fields.n.aggregate-function' = 'sum', \
         'fields.v.aggregate-function' = 'listagg'",
        ", 'sequence.field' = 'n', 'sequence.field.sort-order' = 'descending'",
    ] {
        check(options, false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_is_a_number_of_bytes() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let ctx = local_context(&warehouse).await;
    let err = Box::pin(ctx.sql("SET lakestream.union_read_memory_budget = 'lots'"))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("union_read_memory_budget"), "{err}");
}
