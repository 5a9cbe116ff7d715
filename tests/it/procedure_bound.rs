//! Procedures have a bound of their own (issue 37): `CALL
//! sys.lakestream_tier` over a backlog runs as long as the backlog needs,
//! bounded by the catalog option `lakestream.procedure-timeout` (no bound by
//! default), not by `lakestream.timeout`, which bounds single store calls.
//! A run the procedure bound stops says how far it got, and loses nothing:
//! each tiering commit it made stays, the rest waits in the store, and the
//! next run tiers it, every row exactly once.
//!
//! No assert here is on speed. The bounds are set against the work instead:
//! a `1ms` bound cannot cover a tiering round (files written, a Paimon
//! commit), and twenty commits of one entry each can only be longer.

use std::collections::HashMap;

use datafusion::arrow::array::UInt64Array;
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::{local_store_options, run, sorted_ids, try_run};

/// One-row writes, each tiered in a commit of its own.
const WRITES: i64 = 20;

/// A context with two catalogs over the same warehouse and `local` store,
/// tiering only on request, one entry per tiering commit: `paimon` with the
/// default bounds, which writes, and `bounded` with `bounds` as well.
async fn two_catalogs(dir: &TempDir, bounds: &[(&str, &str)]) -> LakeStreamContext {
    let options = |extra: &[(&str, &str)]| -> HashMap<String, String> {
        let mut options = local_store_options(
            &dir.path().join("warehouse"),
            &dir.path().join("store"),
            "off",
        );
        options.insert("local.tier-max-rows".to_string(), "1".to_string());
        for (key, value) in extra {
            options.insert((*key).to_string(), (*value).to_string());
        }
        options
    };
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options(&[]))
        .await
        .expect("register the catalog");
    ctx.register_catalog("bounded", options(bounds))
        .await
        .expect("register the bounded catalog");
    ctx
}

/// A lake-stream table `t` with [`WRITES`] rows waiting in the store.
async fn backlog(ctx: &LakeStreamContext) {
    run(
        ctx,
        "CREATE TABLE t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    for i in 0..WRITES {
        run(ctx, &format!("INSERT INTO t VALUES ({i}, 'v{i}')")).await;
    }
}

/// What a `CALL sys.lakestream_tier` answers in `rows_tiered`, or its error.
async fn rows_tiered(ctx: &LakeStreamContext, sql: &str) -> Result<u64, String> {
    let batches = Box::pin(async { ctx.sql(sql).await?.collect().await })
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    let batch = batches.first().ok_or("no answer")?;
    let column = batch
        .column_by_name("rows_tiered")
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .ok_or("no rows_tiered column")?;
    Ok(column.value(0))
}

fn all() -> Vec<i64> {
    (0..WRITES).collect()
}

/// `lakestream.timeout` bounds each store call, not a procedure's run: with
/// it far below what tiering the backlog takes, `CALL sys.lakestream_tier`
/// still tiers every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiering_call_is_not_bounded_by_the_store_call_timeout() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = two_catalogs(&dir, &[("lakestream.timeout", "1ms")]).await;
    backlog(&ctx).await;
    let tiered = rows_tiered(&ctx, "CALL bounded.sys.lakestream_tier('default.t')")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tiered, u64::try_from(WRITES).expect("a count"));
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, all());
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, all());
}

/// A run the procedure bound stops fails naming the bound, and leaves the
/// table consistent: `t` holds a prefix of the rows (each tiering commit it
/// made), each once; `t$rt` every row. The next run tiers the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiering_run_stopped_by_the_procedure_bound_loses_nothing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = two_catalogs(&dir, &[("lakestream.procedure-timeout", "1ms")]).await;
    backlog(&ctx).await;
    for _ in 0..3 {
        let err = rows_tiered(&ctx, "CALL bounded.sys.lakestream_tier('default.t')")
            .await
            .expect_err("1ms is too short for a tiering round");
        assert!(err.contains("lakestream_tier of 'default.t'"), "{err}");
        assert!(err.contains("'lakestream.procedure-timeout'"), "{err}");
        assert!(err.contains("Run it again"), "{err}");
        let tiered = sorted_ids(&ctx, "SELECT id FROM t").await;
        let prefix: Vec<i64> = (0..i64::try_from(tiered.len()).expect("a count")).collect();
        assert_eq!(tiered, prefix, "tiered in order, each row once");
        assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, all());
    }
    let before = sorted_ids(&ctx, "SELECT id FROM t").await.len();
    let tiered = rows_tiered(&ctx, "CALL sys.lakestream_tier('default.t')")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        tiered,
        u64::try_from(all().len() - before).expect("a count"),
        "the next run tiers what the stopped ones left"
    );
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, all());
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, all());
}

/// The maintenance procedures are bounded the same way: a compaction the
/// bound stops commits nothing, and the table reads as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_is_bounded_by_the_procedure_bound_too() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = two_catalogs(&dir, &[("lakestream.procedure-timeout", "1ms")]).await;
    backlog(&ctx).await;
    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    let err = try_run(&ctx, "CALL bounded.sys.compact(table => 'default.t')")
        .await
        .expect_err("1ms is too short for a compaction");
    assert!(err.contains("compact of 'default.t'"), "{err}");
    assert!(err.contains("'lakestream.procedure-timeout'"), "{err}");
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, all());
    run(&ctx, "CALL sys.compact(table => 'default.t')").await;
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, all());
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t$rt").await, all());
}
