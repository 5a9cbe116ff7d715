//! Compaction (data files and manifests) and expiry keep every column,
//! type and partition value: stale schemas across `ADD COLUMN`, null and
//! typed partitions, every type, and maintenance racing writers, deletes
//! and updates. Each test is a way a row could be lost, duplicated or
//! resurrected, or a table made unreadable.

use paimon_lakestream::maintenance::{compact_data_files, When};
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::sorted_rows as rows;
use crate::support::{on_request_context as context, paimon_table as table, run};

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
    if let Err(e) = compact_data_files(&stale, When::Asked).await {
        assert!(e.to_string().contains("schema"), "{e}");
    }
    // After a tiering round (`When::Needed`) it does nothing.
    assert_eq!(
        compact_data_files(&stale, When::Needed)
            .await
            .expect("compact"),
        None
    );
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

/// Partition stats the manifest compaction writes, for partition types
/// other than INT and STRING (negative decimals, wide decimals, dates,
/// timestamps, booleans, NULLs): every filter prunes nothing it should read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_compaction_keeps_filtered_reads_of_typed_partitions() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE tp (d DATE, dc DECIMAL(10, 2), big DECIMAL(22, 3), ts TIMESTAMP, \
         b BOOLEAN, sm SMALLINT, id BIGINT) PARTITIONED BY (d, dc, big, ts, b, sm)",
    )
    .await;
    for i in 0..10i64 {
        let null = i % 4 == 3;
        let v = |s: String| if null { "NULL".to_string() } else { s };
        run(
            &ctx,
            &format!(
                "INSERT INTO tp VALUES ({}, {}, {}, {}, {}, {}, {i})",
                v(format!("DATE '2024-01-{:02}'", i + 1)),
                v(format!("{}.25", i - 5)),
                v(format!("{}123456789012345.5", i - 5)),
                v(format!("TIMESTAMP '2024-01-01 00:00:0{i}.123'")),
                v(format!("{}", i % 2 == 0)),
                v(format!("{}", 100 - i * 30)),
            ),
        )
        .await;
    }
    let filters = [
        "",
        "WHERE d = DATE '2024-01-03'",
        "WHERE d > DATE '2024-01-05'",
        "WHERE d IS NULL",
        "WHERE dc = -3.25",
        "WHERE dc < 0",
        "WHERE dc > 1",
        "WHERE big = -3123456789012345.5",
        "WHERE big < -1000",
        "WHERE big > 1000",
        "WHERE ts = TIMESTAMP '2024-01-01 00:00:02.123'",
        "WHERE ts > TIMESTAMP '2024-01-01 00:00:05'",
        "WHERE b = true",
        "WHERE b = false",
        "WHERE b IS NULL",
        "WHERE sm < 0",
        "WHERE sm = -170",
        "WHERE sm > 50",
    ];
    let mut before = Vec::new();
    for f in filters {
        before.push(rows(&ctx, &format!("SELECT id FROM tp {f}")).await);
    }
    assert_eq!(before[0].len(), 10);
    let answer = rows(&ctx, "CALL sys.compact_manifest('default.tp')").await;
    assert_eq!(answer.len(), 1);
    for (f, expected) in filters.iter().zip(&before) {
        assert_eq!(
            &rows(&ctx, &format!("SELECT id FROM tp {f}")).await,
            expected,
            "tp {f}"
        );
    }
}

/// A lake-stream table altered between tiering rounds whose compactions
/// (after each round) rewrite files of both schemas: the added column's
/// values stay, here and in `t$rt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_compactions_across_an_add_column_keep_its_values() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE la (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'compaction.min.file-num' = '2', 'manifest.merge-min-count' = '2')",
    )
    .await;
    for i in 0..3 {
        run(&ctx, &format!("INSERT INTO la VALUES ({i}, 'v{i}')")).await;
        run(&ctx, "CALL sys.lakestream_tier('default.la')").await;
    }
    run(&ctx, "ALTER TABLE la ADD COLUMN w INT").await;
    for i in 3..7 {
        run(
            &ctx,
            &format!("INSERT INTO la VALUES ({i}, 'v{i}', {})", i * 10),
        )
        .await;
        run(&ctx, "CALL sys.lakestream_tier('default.la')").await;
    }
    let kinds = rows(&ctx, "SELECT commit_kind FROM la$snapshots").await;
    assert!(kinds.iter().any(|k| k == "COMPACT"), "{kinds:?}");
    let mut want: Vec<String> = (0..3).map(|i| format!("{i}|v{i}|")).collect();
    want.extend((3..7).map(|i| format!("{i}|v{i}|{}", i * 10)));
    assert_eq!(rows(&ctx, "SELECT * FROM la").await, want);
    assert_eq!(rows(&ctx, "SELECT * FROM la$rt").await, want);
}

async fn call(ctx: &LakeStreamContext, sql: &str) -> Result<(), String> {
    match ctx.sql(sql).await {
        Ok(frame) => frame.collect().await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Compactions (data files, manifests) and expiries keeping only the latest
/// snapshot, from three contexts at once while a fourth writes: every row
/// once, and every snapshot left reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compactions_and_expiries_racing_a_writer() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(&ctx, "CREATE TABLE rc (id BIGINT, v STRING)").await;
    for i in 0..5 {
        run(&ctx, &format!("INSERT INTO rc VALUES ({i}, 'v{i}')")).await;
    }
    let writer = {
        let ctx = context(&dir).await;
        tokio::spawn(async move {
            for i in 100..130 {
                ctx.sql(&format!("INSERT INTO rc VALUES ({i}, 'w')"))
                    .await
                    .expect("plan")
                    .collect()
                    .await
                    .expect("insert");
            }
        })
    };
    let a = context(&dir).await;
    let b = context(&dir).await;
    let c = context(&dir).await;
    let mut errors = Vec::new();
    for _ in 0..10 {
        let (x, y, z) = tokio::join!(
            call(&a, "CALL sys.compact('default.rc')"),
            call(&b, "CALL sys.compact_manifest('default.rc')"),
            call(
                &c,
                "CALL sys.expire_snapshots(table => 'default.rc', retain_min => 1, \
                 older_than => '2999-01-01 00:00:00', max_deletes => 1000)"
            ),
        );
        for outcome in [x, y, z] {
            if let Err(e) = outcome {
                errors.push(e);
            }
        }
        // Every snapshot left reads, whatever is going on.
        for id in rows(&ctx, "SELECT snapshot_id FROM rc$snapshots").await {
            if let Ok(frame) = ctx
                .sql(&format!("SELECT * FROM rc VERSION AS OF {id}"))
                .await
            {
                if let Err(e) = frame.collect().await {
                    let e = e.to_string();
                    // Expired since it was listed: fine; anything else is not.
                    assert!(
                        e.contains("not exist") || e.contains("NotExist") || e.contains("expired"),
                        "snapshot {id}: {e}"
                    );
                }
            }
        }
    }
    writer.await.expect("writer");
    let ids = rows(&ctx, "SELECT id FROM rc").await;
    let mut expected: Vec<String> = (0..5).chain(100..130).map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(ids, expected, "errors along the way: {errors:?}");
    // A last compaction and expiry on a quiet table leave it whole.
    run(&ctx, "CALL sys.compact('default.rc')").await;
    run(
        &ctx,
        "CALL sys.expire_snapshots(table => 'default.rc', retain_min => 1, \
         older_than => '2999-01-01 00:00:00', max_deletes => 1000)",
    )
    .await;
    assert_eq!(rows(&ctx, "SELECT id FROM rc").await, expected);
    eprintln!("errors along the way: {errors:?}");
}

/// Data-file compactions racing copy-on-write `DELETE`s and `UPDATE`s of a
/// plain append table (which rewrite the files the compaction replaces):
/// no deleted row comes back, no row is lost or doubled. paimon 0.4's
/// file-system commit checks that the snapshot file is absent, then renames
/// over it: a compaction published that way replaced an `UPDATE`'s snapshot
/// now and then (one run in five here: 19 `OVERWRITE` snapshots for 20
/// statements, the update undone), so the compaction publishes with a hard
/// link, which fails when the name is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compactions_racing_deletes_and_updates() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(&ctx, "CREATE TABLE cw (id BIGINT, v STRING)").await;
    for i in 0..20 {
        run(&ctx, &format!("INSERT INTO cw VALUES ({i}, 'v')")).await;
    }
    let writer = {
        let ctx = context(&dir).await;
        tokio::spawn(async move {
            let mut errors = Vec::new();
            for i in 0..10 {
                for sql in [
                    format!("DELETE FROM cw WHERE id = {i}"),
                    format!("UPDATE cw SET v = 'u' WHERE id = {}", i + 10),
                    format!("INSERT INTO cw VALUES ({}, 'n')", i + 100),
                ] {
                    if let Err(e) = call(&ctx, &sql).await {
                        errors.push(format!("{sql}: {e}"));
                    }
                }
            }
            errors
        })
    };
    let other = context(&dir).await;
    let mut compactions = 0;
    while !writer.is_finished() {
        if call(&other, "CALL sys.compact('default.cw')").await.is_ok() {
            compactions += 1;
        }
    }
    eprintln!("compactions: {compactions}");
    let errors = writer.await.expect("writer");
    eprintln!("writer errors: {errors:?}");
    // What the statements that succeeded say the table holds.
    let failed = |sql: &str| errors.iter().any(|e| e.starts_with(sql));
    let mut want = Vec::new();
    for i in 0..10 {
        if failed(&format!("DELETE FROM cw WHERE id = {i}:")) {
            want.push(format!("{i}|v"));
        }
    }
    for i in 10..20 {
        let v = if failed(&format!("UPDATE cw SET v = 'u' WHERE id = {i}:")) {
            "v"
        } else {
            "u"
        };
        want.push(format!("{i}|{v}"));
    }
    for i in 100..110 {
        if !failed(&format!("INSERT INTO cw VALUES ({i}, 'n'):")) {
            want.push(format!("{i}|n"));
        }
    }
    want.sort();
    let got = rows(&ctx, "SELECT * FROM cw").await;
    if got != want {
        let kinds = rows(&ctx, "SELECT commit_kind FROM cw$snapshots").await;
        let count = |k: &str| kinds.iter().filter(|x| x.as_str() == k).count();
        eprintln!(
            "APPEND {} OVERWRITE {} COMPACT {}",
            count("APPEND"),
            count("OVERWRITE"),
            count("COMPACT")
        );
    }
    assert_eq!(got, want);
}
