//! Adversarial review of maintenance (data-file compaction, manifest
//! compaction, snapshot expiry): each test is a way a row could be lost,
//! duplicated or resurrected, or a table made unreadable.

use datafusion::arrow::util::display::array_value_to_string;
use paimon::catalog::{Catalog as _, Identifier};
use paimon::table::Table;
use paimon_lakestream::maintenance::{compact_data_files, When};
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::{local_store_options, run};

async fn context(dir: &TempDir) -> LakeStreamContext {
    let options = local_store_options(
        &dir.path().join("warehouse"),
        &dir.path().join("store"),
        "off",
    );
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options)
        .await
        .expect("register the catalog");
    ctx
}

async fn rows(ctx: &LakeStreamContext, sql: &str) -> Vec<String> {
    let batches = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let values: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, row).expect("a printable value"))
                .collect();
            out.push(values.join("|"));
        }
    }
    out.sort();
    out
}

async fn table(ctx: &LakeStreamContext, name: &str) -> Table {
    ctx.catalog("paimon")
        .expect("catalog")
        .get_table(&Identifier::new("default", name))
        .await
        .expect("table")
}

/// A data-file compaction run with a `Table` loaded before an
/// `ALTER TABLE ADD COLUMN` (a background tierer's table, or a procedure's,
/// when the ALTER lands while it runs) must not rewrite files written with
/// the new column through the old schema: that drops the column's values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_compaction_with_a_stale_schema_keeps_added_columns() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(&ctx, "CREATE TABLE ev (id BIGINT, v STRING)").await;
    for i in 0..3 {
        run(&ctx, &format!("INSERT INTO ev VALUES ({i}, 'v{i}')")).await;
    }
    let stale = table(&ctx, "ev").await;
    run(&ctx, "ALTER TABLE ev ADD COLUMN w INT").await;
    for i in 3..6 {
        run(
            &ctx,
            &format!("INSERT INTO ev VALUES ({i}, 'v{i}', {})", i * 10),
        )
        .await;
    }
    let before = rows(&ctx, "SELECT * FROM ev").await;
    assert!(before.contains(&"5|v5|50".to_string()), "{before:?}");
    // Either it refuses, or it keeps every value.
    let _ = compact_data_files(&stale, When::Asked).await;
    assert_eq!(rows(&ctx, "SELECT * FROM ev").await, before);
    // A compaction with the table as it is now keeps every value too.
    let done = compact_data_files(&table(&ctx, "ev").await, When::Asked)
        .await
        .expect("compact");
    assert!(done.is_some());
    assert_eq!(rows(&ctx, "SELECT * FROM ev").await, before);
}

/// Partitions with NULL values, and filtered reads that prune by the
/// partition stats the compactions write: before and after a data-file
/// compaction and a manifest compaction, every filter reads the same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compactions_keep_filtered_reads_of_null_partitions() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE np (p INT, q STRING, id BIGINT) PARTITIONED BY (p, q)",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE fb (id BIGINT, v STRING) WITH ('bucket' = '3', 'bucket-key' = 'id')",
    )
    .await;
    for i in 0..12i64 {
        let p = if i % 3 == 0 {
            "NULL".to_string()
        } else {
            (i % 3).to_string()
        };
        let q = if i % 4 == 0 {
            "NULL".to_string()
        } else {
            format!("'q{}'", i % 2)
        };
        run(&ctx, &format!("INSERT INTO np VALUES ({p}, {q}, {i})")).await;
        run(
            &ctx,
            &format!("INSERT INTO fb VALUES ({i}, 'a'), ({}, 'b')", i + 100),
        )
        .await;
    }
    let filters = [
        "",
        "WHERE p IS NULL",
        "WHERE p IS NOT NULL",
        "WHERE p = 1",
        "WHERE p = 2",
        "WHERE p > 1",
        "WHERE q IS NULL",
        "WHERE q = 'q0'",
        "WHERE q = 'q1' AND p IS NULL",
    ];
    let mut before = Vec::new();
    for f in filters {
        before.push(rows(&ctx, &format!("SELECT * FROM np {f}")).await);
    }
    let fb_before = rows(&ctx, "SELECT * FROM fb").await;
    let fb_buckets = rows(&ctx, "SELECT DISTINCT bucket FROM fb$files").await;
    run(&ctx, "CALL sys.compact('default.np')").await;
    run(&ctx, "CALL sys.compact('default.fb')").await;
    run(&ctx, "CALL sys.compact_manifest('default.np')").await;
    for (f, expected) in filters.iter().zip(&before) {
        assert_eq!(
            &rows(&ctx, &format!("SELECT * FROM np {f}")).await,
            expected,
            "np {f}"
        );
    }
    assert_eq!(rows(&ctx, "SELECT * FROM fb").await, fb_before);
    assert_eq!(
        rows(&ctx, "SELECT DISTINCT bucket FROM fb$files").await,
        fb_buckets
    );
    for id in [0i64, 5, 107] {
        assert_eq!(
            rows(&ctx, &format!("SELECT id FROM fb WHERE id = {id}")).await,
            vec![id.to_string()]
        );
    }
}

/// Every supported type survives a data-file compaction (the small files
/// are read to Arrow and written again): same values, and `VERSION AS OF`
/// the snapshot before it reads the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_compaction_keeps_every_type() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    let columns = "k INT NOT NULL, b BOOLEAN, ti TINYINT, si SMALLINT, bi BIGINT, f FLOAT, \
                   d DOUBLE, dc DECIMAL(10, 2), dt DATE, ts0 TIMESTAMP(0), ts3 TIMESTAMP, \
                   ts6 TIMESTAMP(6), ts9 TIMESTAMP(9), tz TIMESTAMP WITH TIME ZONE, c CHAR(3), \
                   s STRING, bin BINARY(2), bs BYTEA";
    run(
        &ctx,
        &format!("CREATE TABLE ty ({columns}) PARTITIONED BY (dt)"),
    )
    .await;
    for i in 0..3 {
        run(
            &ctx,
            &format!(
                "INSERT INTO ty VALUES ({i}, true, -1, 300, 5000000000, 1.5, -2.25, 12.34, \
                 DATE '2024-02-29', TIMESTAMP '2024-01-02 03:04:05', \
                 TIMESTAMP '2024-01-02 03:04:05.123', TIMESTAMP '2024-01-02 03:04:05.123456', \
                 TIMESTAMP '2024-01-02 03:04:05.123456789', TIMESTAMP '2024-01-02 03:04:05.678', \
                 'ab', 'x{i}', X'0102', X'CAFE'), \
                 ({}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
                 NULL, NULL, NULL, NULL, NULL)",
                i + 10
            ),
        )
        .await;
    }
    let before = rows(&ctx, "SELECT * FROM ty").await;
    let done = compact_data_files(&table(&ctx, "ty").await, When::Asked)
        .await
        .expect("compact")
        .expect("compacted");
    assert_eq!(rows(&ctx, "SELECT * FROM ty").await, before);
    assert_eq!(
        rows(
            &ctx,
            &format!("SELECT * FROM ty VERSION AS OF {}", done.snapshot_id - 1)
        )
        .await,
        before
    );
    assert_eq!(
        rows(
            &ctx,
            "SELECT k FROM ty WHERE ts9 = TIMESTAMP '2024-01-02 03:04:05.123456789'"
        )
        .await
        .len(),
        3
    );
}

/// A column added with no row written since: the compaction's files carry
/// the new schema, and its snapshot (and the one before) read the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_compaction_after_an_add_column_with_no_rows_since() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(&ctx, "CREATE TABLE ac (id BIGINT, v STRING)").await;
    for i in 0..3 {
        run(&ctx, &format!("INSERT INTO ac VALUES ({i}, 'v{i}')")).await;
    }
    let old = rows(&ctx, "SELECT * FROM ac").await;
    run(&ctx, "ALTER TABLE ac ADD COLUMN w INT").await;
    let before = rows(&ctx, "SELECT * FROM ac").await;
    let done = compact_data_files(&table(&ctx, "ac").await, When::Asked)
        .await
        .expect("compact")
        .expect("compacted");
    assert_eq!(rows(&ctx, "SELECT * FROM ac").await, before);
    assert_eq!(
        rows(
            &ctx,
            &format!("SELECT * FROM ac VERSION AS OF {}", done.snapshot_id)
        )
        .await,
        before
    );
    assert_eq!(
        rows(
            &ctx,
            &format!("SELECT * FROM ac VERSION AS OF {}", done.snapshot_id - 1)
        )
        .await,
        old
    );
    run(&ctx, "INSERT INTO ac VALUES (7, 'x', 70)").await;
    assert_eq!(
        rows(&ctx, "SELECT count(*) FROM ac WHERE w = 70").await,
        vec!["1"]
    );
}
