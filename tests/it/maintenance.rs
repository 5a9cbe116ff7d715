//! Manifest compaction (issue 12): tiering rounds keep the number of
//! manifests a scan reads bounded, `CALL sys.compact_manifest` compacts any
//! Paimon table on request, and neither changes a row of any snapshot.

use std::collections::BTreeMap;

use datafusion::arrow::util::display::array_value_to_string;
use paimon::spec::ManifestList;
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::local_store_options;
use crate::support::on_request_context as context;
use crate::support::sorted_rows as rows;

/// Runs `sql`, boxed (see [`crate::support::try_sorted_rows`]).
async fn run(ctx: &LakeStreamContext, sql: &str) {
    Box::pin(crate::support::run(ctx, sql)).await;
}

/// The newest snapshot of `default.<table>`: its id, kind, and how many
/// manifests it names.
async fn newest(ctx: &LakeStreamContext, table: &str) -> (i64, String, usize) {
    let table = crate::support::paimon_table(ctx, table).await;
    let snapshots = table.snapshot_manager();
    let latest = snapshots
        .get_latest_snapshot()
        .await
        .expect("read the newest snapshot")
        .expect("a snapshot");
    let dir = snapshots.manifest_dir();
    let mut count = 0;
    for list in [latest.base_manifest_list(), latest.delta_manifest_list()] {
        count += ManifestList::read(table.file_io(), &format!("{dir}/{list}"))
            .await
            .expect("read a manifest list")
            .len();
    }
    (latest.id(), format!("{:?}", latest.commit_kind()), count)
}

/// Tiering rounds into an append table and a partitioned primary-key table:
/// no snapshot names more than `manifest.merge-min-count` manifests, every
/// row is there once, and every snapshot reads as it did when committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_rounds_keep_the_manifests_a_scan_reads_bounded() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE lg (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'manifest.merge-min-count' = '8')",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE kv (p INT NOT NULL, k BIGINT NOT NULL, v STRING, PRIMARY KEY (p, k)) \
         PARTITIONED BY (p) WITH ('lakestream.enabled' = 'true', 'bucket' = '2', \
         'manifest.merge-min-count' = '8')",
    )
    .await;
    // What each snapshot read when it was the newest.
    let mut seen: BTreeMap<(&str, i64), Vec<String>> = BTreeMap::new();
    let mut compactions = 0;
    for round in 0..30i64 {
        run(
            &ctx,
            &format!(
                "INSERT INTO lg VALUES ({round}, 'v{round}'), ({}, 'w')",
                round + 1000
            ),
        )
        .await;
        // Keys repeat across rounds and partitions: later values win, and
        // a delete every fifth round removes one.
        run(
            &ctx,
            &format!(
                "INSERT INTO kv VALUES ({}, {}, 'r{round}'), ({}, {round}, 'n{round}')",
                round % 3,
                round % 7,
                (round + 1) % 3,
            ),
        )
        .await;
        if round % 5 == 4 {
            run(&ctx, &format!("DELETE FROM kv WHERE k = {}", round % 7)).await;
        }
        for table in ["lg", "kv"] {
            run(
                &ctx,
                &format!("CALL sys.lakestream_tier('default.{table}')"),
            )
            .await;
            let (id, kind, manifests) = newest(&ctx, table).await;
            assert!(
                manifests <= 8,
                "{table}: snapshot {id} ({kind}) names {manifests} manifests after round {round}"
            );
            if kind == "COMPACT" {
                compactions += 1;
            }
            seen.insert(
                (table, id),
                rows(&ctx, &format!("SELECT * FROM {table}")).await,
            );
        }
        assert_eq!(
            rows(&ctx, "SELECT * FROM lg").await,
            rows(&ctx, "SELECT * FROM lg$rt").await
        );
        assert_eq!(
            rows(&ctx, "SELECT * FROM kv").await,
            rows(&ctx, "SELECT * FROM kv$rt").await
        );
    }
    assert!(compactions >= 4, "only {compactions} compactions ran");
    assert_eq!(rows(&ctx, "SELECT count(*) FROM lg").await, vec!["60"]);
    // Every snapshot, before and after compactions, reads what it read.
    for ((table, id), expected) in &seen {
        assert_eq!(
            &rows(&ctx, &format!("SELECT * FROM {table} VERSION AS OF {id}")).await,
            expected,
            "{table} at snapshot {id}"
        );
    }
}

/// `CALL sys.compact_manifest` compacts any Paimon table of the catalog,
/// lake-stream or not, whatever the count; a table with one manifest is
/// left alone; a table that is `write-only` is compacted only on request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_manifest_on_request() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE plain (id BIGINT, v STRING) WITH ('write-only' = 'true')",
    )
    .await;
    for i in 0..5 {
        run(&ctx, &format!("INSERT INTO plain VALUES ({i}, 'v{i}')")).await;
    }
    let before = rows(&ctx, "SELECT * FROM plain").await;
    let (id, _, manifests) = newest(&ctx, "plain").await;
    assert_eq!((id, manifests), (5, 5));
    let answer = rows(&ctx, "CALL sys.compact_manifest(table => 'default.plain')").await;
    assert_eq!(answer, vec!["default.plain|6|5|1"]);
    assert_eq!(newest(&ctx, "plain").await, (6, "COMPACT".to_string(), 1));
    assert_eq!(rows(&ctx, "SELECT * FROM plain").await, before);
    // Nothing left to do: no snapshot.
    let answer = rows(&ctx, "CALL sys.compact_manifest('default.plain')").await;
    assert_eq!(answer, vec!["default.plain|||"]);
    assert_eq!(newest(&ctx, "plain").await.0, 6);
    // Writes go on on top of the compacted snapshot.
    run(&ctx, "INSERT INTO plain VALUES (9, 'after')").await;
    assert_eq!(rows(&ctx, "SELECT count(*) FROM plain").await, vec!["6"]);
    assert_eq!(
        rows(&ctx, "SELECT * FROM plain VERSION AS OF 3").await,
        before[..3].to_vec()
    );
    // The table function works as well, and names what it cannot find.
    let outcome = match ctx
        .sql("SELECT * FROM compact_manifest('default.nope')")
        .await
    {
        Ok(frame) => frame.collect().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let error = outcome
        .expect_err("a table that does not exist")
        .to_string();
    assert!(error.contains("default.nope"), "{error}");
}

/// The data files the newest snapshot of `default.<table>` names.
async fn data_files(ctx: &LakeStreamContext, table: &str) -> usize {
    rows(ctx, &format!("SELECT file_path FROM {table}$files"))
        .await
        .len()
}

/// A primary-key bucket whose files together are smaller than
/// `compaction.total-size-threshold` (1 MiB unless set) is compacted after
/// any round that leaves it two files; `'0'` leaves it to
/// `num-sorted-run.compaction-trigger` (`compaction.min.file-num` is of
/// append tables, as in Java Paimon); a value that is not a size is
/// refused, naming the option and the table, and the round's rows stay
/// tiered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_primary_key_buckets_are_compacted_every_round() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    let off = ", 'compaction.total-size-threshold' = '0'";
    for (table, threshold) in [
        ("small", String::new()),
        // Of append tables only: ignored here.
        ("off", format!("{off}, 'compaction.min.file-num' = '2'")),
        (
            "runs",
            format!("{off}, 'num-sorted-run.compaction-trigger' = '2'"),
        ),
    ] {
        run(
            &ctx,
            &format!(
                "CREATE TABLE {table} (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
                 WITH ('bucket' = '2', 'lakestream.enabled' = 'true'{threshold})"
            ),
        )
        .await;
    }
    let mut expected = Vec::new();
    for round in 0..4i64 {
        for table in ["small", "off", "runs"] {
            run(
                &ctx,
                &format!(
                    "INSERT INTO {table} VALUES ({round}, 'a'), ({}, 'b'), (0, 'r{round}')",
                    round + 100
                ),
            )
            .await;
            if round == 2 {
                run(&ctx, &format!("DELETE FROM {table} WHERE id = 100")).await;
            }
            run(
                &ctx,
                &format!("CALL sys.lakestream_tier('default.{table}')"),
            )
            .await;
        }
        expected = rows(&ctx, "SELECT * FROM off").await;
        assert_eq!(rows(&ctx, "SELECT * FROM small").await, expected);
        assert_eq!(rows(&ctx, "SELECT * FROM runs").await, expected);
        // Two buckets, each compacted whole after every round (`small`) or
        // from two small files (`runs`).
        for table in ["small", "runs"] {
            let files = data_files(&ctx, table).await;
            assert!(files <= 2, "{table}, round {round}: {files} files");
            // The snapshot counts the rows its files hold, as Paimon's do.
            assert_eq!(
                rows(
                    &ctx,
                    &format!(
                        "SELECT total_record_count FROM {table}$snapshots \
                         ORDER BY snapshot_id DESC LIMIT 1"
                    )
                )
                .await,
                rows(
                    &ctx,
                    &format!("SELECT sum(record_count) FROM {table}$files")
                )
                .await,
                "{table}, round {round}"
            );
        }
        // Each round adds a file to each bucket it writes (key 0's every
        // round): below `num-sorted-run.compaction-trigger` (5) nothing is
        // compacted.
        let rounds = usize::try_from(round + 1).expect("a small number");
        assert!(data_files(&ctx, "off").await >= rounds, "round {round}");
    }
    assert!(expected.contains(&"0|r3".to_string()), "{expected:?}");
    assert!(
        !expected.iter().any(|r| r.starts_with("100|")),
        "{expected:?}"
    );
    assert_eq!(rows(&ctx, "SELECT * FROM small$rt").await, expected);
    assert_eq!(
        rows(
            &ctx,
            "SELECT commit_kind, count(*) FROM small$snapshots GROUP BY commit_kind"
        )
        .await,
        vec!["APPEND|4", "COMPACT|6"]
    );

    run(
        &ctx,
        "ALTER TABLE small SET TBLPROPERTIES ('compaction.total-size-threshold' = 'huge')",
    )
    .await;
    run(&ctx, "INSERT INTO small VALUES (7, 'z')").await;
    let error = crate::support::try_sorted_rows(&ctx, "CALL sys.lakestream_tier('default.small')")
        .await
        .expect_err("a threshold that is not a size")
        .to_string();
    assert!(
        error.contains("compaction.total-size-threshold") && error.contains("default.small"),
        "{error}"
    );
    assert!(rows(&ctx, "SELECT * FROM small")
        .await
        .contains(&"7|z".to_string()));
}

/// Tiering rounds into append tables, partitioned and not: no bucket keeps
/// more than `compaction.min.file-num` small files, every row is there
/// once, and every snapshot reads as it did when committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_rounds_keep_an_append_tables_data_files_bounded() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE flat (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'compaction.min.file-num' = '4')",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE parts (p INT, id BIGINT, v STRING) PARTITIONED BY (p) WITH \
         ('lakestream.enabled' = 'true', 'compaction.min.file-num' = '4')",
    )
    .await;
    let mut seen: BTreeMap<(&str, i64), Vec<String>> = BTreeMap::new();
    for round in 0..20i64 {
        run(
            &ctx,
            &format!(
                "INSERT INTO flat VALUES ({round}, 'a{round}'), ({}, NULL)",
                round + 100
            ),
        )
        .await;
        run(
            &ctx,
            &format!(
                "INSERT INTO parts VALUES ({}, {round}, 'b'), ({}, {}, 'c')",
                round % 2,
                round % 3,
                round + 100
            ),
        )
        .await;
        for (table, most) in [("flat", 4), ("parts", 3 * 4)] {
            run(
                &ctx,
                &format!("CALL sys.lakestream_tier('default.{table}')"),
            )
            .await;
            let files = data_files(&ctx, table).await;
            assert!(
                files < most,
                "{table}: {files} data files after round {round}"
            );
            let (id, _, _) = newest(&ctx, table).await;
            seen.insert(
                (table, id),
                rows(&ctx, &format!("SELECT * FROM {table}")).await,
            );
            assert_eq!(
                rows(&ctx, &format!("SELECT * FROM {table}")).await,
                rows(&ctx, &format!("SELECT * FROM {table}$rt")).await
            );
        }
    }
    assert_eq!(rows(&ctx, "SELECT count(*) FROM flat").await, vec!["40"]);
    assert_eq!(rows(&ctx, "SELECT count(*) FROM parts").await, vec!["40"]);
    let kinds = rows(&ctx, "SELECT commit_kind FROM flat$snapshots").await;
    assert!(kinds.iter().any(|k| k == "COMPACT"), "{kinds:?}");
    for ((table, id), expected) in &seen {
        assert_eq!(
            &rows(&ctx, &format!("SELECT * FROM {table} VERSION AS OF {id}")).await,
            expected,
            "{table} at snapshot {id}"
        );
    }
}

/// `CALL sys.compact` rewrites a plain append table's small files into one,
/// and a fixed-bucket primary-key table's bucket into its merged rows;
/// leaves dynamic-bucket tables alone (saying so with NULLs); and two
/// compactions racing each other and a writer lose, duplicate and
/// resurrect nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_on_request_and_under_races() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    run(&ctx, "CREATE TABLE ap (id BIGINT, v STRING)").await;
    for i in 0..5 {
        run(&ctx, &format!("INSERT INTO ap VALUES ({i}, 'v{i}')")).await;
    }
    let before = rows(&ctx, "SELECT * FROM ap").await;
    assert_eq!(data_files(&ctx, "ap").await, 5);
    // Snapshot 6 replaces the files, 7 compacts the manifests (dropping the
    // delete entries 6 wrote): the answer names the last.
    let answer = rows(&ctx, "CALL sys.compact(table => 'default.ap')").await;
    assert_eq!(answer, vec!["default.ap|7|5|1|5"]);
    assert_eq!(data_files(&ctx, "ap").await, 1);
    assert_eq!(rows(&ctx, "SELECT * FROM ap").await, before);
    assert_eq!(
        rows(
            &ctx,
            "SELECT commit_kind FROM ap$snapshots WHERE snapshot_id >= 6"
        )
        .await,
        vec!["COMPACT", "COMPACT"]
    );
    assert_eq!(newest(&ctx, "ap").await.2, 1);

    run(
        &ctx,
        "CREATE TABLE pk (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true', \
         'compaction.total-size-threshold' = '0')",
    )
    .await;
    run(&ctx, "INSERT INTO pk VALUES (1, 'a'), (2, 'x')").await;
    run(&ctx, "CALL sys.lakestream_tier('default.pk')").await;
    run(&ctx, "INSERT INTO pk VALUES (1, 'b')").await;
    run(&ctx, "DELETE FROM pk WHERE id = 2").await;
    run(&ctx, "CALL sys.lakestream_tier('default.pk')").await;
    // A primary-key bucket is rewritten whole, as its merged rows.
    assert_eq!(
        rows(&ctx, "CALL sys.compact('default.pk')").await,
        vec!["default.pk|4|2|1|1"]
    );
    assert_eq!(rows(&ctx, "SELECT * FROM pk").await, vec!["1|b"]);
    assert_eq!(data_files(&ctx, "pk").await, 1);
    // Later writes win over the rewritten rows, and deletes stay deleted.
    run(&ctx, "INSERT INTO pk VALUES (1, 'c'), (3, 'y')").await;
    run(&ctx, "CALL sys.lakestream_tier('default.pk')").await;
    assert_eq!(rows(&ctx, "SELECT * FROM pk").await, vec!["1|c", "3|y"]);
    assert_eq!(rows(&ctx, "SELECT * FROM pk$rt").await, vec!["1|c", "3|y"]);
    assert_eq!(
        rows(&ctx, "SELECT * FROM pk VERSION AS OF 2").await,
        vec!["1|b"]
    );
    // Tables it must not rewrite: a dynamic-bucket primary-key table.
    run(
        &ctx,
        "CREATE TABLE dynamic (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id))",
    )
    .await;
    run(&ctx, "INSERT INTO dynamic VALUES (1, 'a')").await;
    run(&ctx, "INSERT INTO dynamic VALUES (2, 'b')").await;
    assert_eq!(
        rows(&ctx, "CALL sys.compact('default.dynamic')").await,
        vec!["default.dynamic||||"]
    );

    // Races: writers, and compactions from two contexts.
    let other = context_on(&dir).await;
    let writer = {
        let ctx = context_on(&dir).await;
        tokio::spawn(async move {
            for i in 100..140 {
                ctx.sql(&format!("INSERT INTO ap VALUES ({i}, 'w')"))
                    .await
                    .expect("plan")
                    .collect()
                    .await
                    .expect("insert");
            }
        })
    };
    for _ in 0..8 {
        let (a, b) = tokio::join!(
            async {
                ctx.sql("CALL sys.compact('default.ap')")
                    .await?
                    .collect()
                    .await
            },
            async {
                other
                    .sql("CALL sys.compact('default.ap')")
                    .await?
                    .collect()
                    .await
            },
        );
        for outcome in [a, b] {
            if let Err(e) = outcome {
                // Losing every race is reported, never wrong.
                assert!(e.to_string().contains("kept winning"), "{e}");
            }
        }
    }
    writer.await.expect("writer");
    let ids = rows(&ctx, "SELECT id FROM ap").await;
    let mut expected: Vec<String> = (0..5).chain(100..140).map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(ids, expected);
}

/// Another context on the same warehouse and store, as another process has.
async fn context_on(dir: &TempDir) -> LakeStreamContext {
    context(dir).await
}

/// Long maintenance shows on the progress board (what the shell's status
/// line reads) while it runs, and leaves it when done. Maintenance asked for
/// on a lake-stream table waits for a running tiering of it (the store's
/// commit lock), so a tiering commit never races it: the board never shows
/// both at once.
///
/// No timing decides it: the tiering is held just before its first commit
/// lands (a `Pause` at `publish-before-link`) while the compaction is asked for, and every
/// update of the board is heard, in order, through a subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_reports_progress_and_waits_for_a_running_tiering() {
    use paimon_lakestream::progress::{running_work, subscribe, WorkStatus};
    use paimon_lakestream::testing::Pause;
    use std::sync::Arc;

    let dir = TempDir::new().expect("temp dir");
    let mut options = local_store_options(
        &dir.path().join("warehouse"),
        &dir.path().join("store"),
        "off",
    );
    // One segment per commit: a tiering of many commits takes a while.
    options.insert("local.tier-max-rows".to_string(), "1".to_string());
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options)
        .await
        .expect("register the catalog");
    let ctx = Arc::new(ctx);
    run(
        &ctx,
        "CREATE TABLE pr (id INT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'lakestream.maintenance' = 'none')",
    )
    .await;
    for i in 0..40 {
        run(&ctx, &format!("INSERT INTO pr VALUES ({i}, 'v{i}')")).await;
    }
    let of_pr = |work: &[WorkStatus]| -> Vec<WorkStatus> {
        work.iter()
            .filter(|w| w.table == "default.pr")
            .cloned()
            .collect()
    };
    let call = |sql: &'static str| {
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move { ctx.sql(sql).await?.collect().await })
    };
    let updates = subscribe();
    let pause = Pause::new(
        "publish-before-link",
        dir.path().join("warehouse/default.db/pr"),
    );
    let tiering = call("CALL sys.lakestream_tier('default.pr')");
    let held = pause.reached().await;
    assert!(
        held.ends_with("snapshot/snapshot-1"),
        "the tiering's first commit is held, not {held:?}"
    );
    // The tiering is on the board, holding the store's commit lock, while
    // the compaction is asked for: it must wait.
    let board = of_pr(&running_work());
    assert!(
        board.iter().any(|w| w.activity == "tiering"),
        "the tiering is not on the board: {board:?}"
    );
    let compaction = call("CALL sys.compact('default.pr')");
    // Time for a compaction that did not wait to show (a wrong one would
    // compact the files of the commits so far).
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let board = of_pr(&running_work());
        assert!(
            board.iter().all(|w| w.activity == "tiering"),
            "maintenance ran while a tiering of the table did: {board:?}"
        );
        assert!(!compaction.is_finished(), "the compaction did not wait");
    }
    pause.release();
    tiering.await.expect("join").expect("tiering");
    let report = compaction.await.expect("join").expect("compaction");
    // It waited for the whole tiering: it compacted all 40 files.
    let files_before = report
        .first()
        .and_then(|b| b.column_by_name("files_before"))
        .map(|c| array_value_to_string(c, 0).expect("a value"));
    assert_eq!(files_before.as_deref(), Some("40"), "{report:?}");
    // Every update, in the order made: the tiering's all come before the
    // compaction's first (its last, 40 of 40 rows, came before it let go
    // of the lock).
    let heard = of_pr(&updates.take());
    let tierings: Vec<_> = heard.iter().filter(|w| w.activity == "tiering").collect();
    assert_eq!(
        tierings.last().map(|w| (w.done, w.total)),
        Some((40, 40)),
        "{tierings:?}"
    );
    let first_maintenance = heard.iter().position(|w| w.activity != "tiering");
    let last_tiering = heard.iter().rposition(|w| w.activity == "tiering");
    assert!(
        matches!((first_maintenance, last_tiering), (Some(m), Some(t)) if m > t),
        "maintenance ran while a tiering of the table did: {heard:?}"
    );
    // The compaction starts knowing nothing, counts the 40 files, and ends
    // with all of them done.
    let files: Vec<_> = heard
        .iter()
        .filter(|w| w.activity == "compacting")
        .map(|w| (w.unit, w.done, w.total))
        .collect();
    assert_eq!(files.first(), Some(&("files", 0, 0)), "{heard:?}");
    assert_eq!(files.last(), Some(&("files", 40, 40)), "{heard:?}");
    assert!(
        files[1..]
            .iter()
            .all(|&(unit, done, total)| unit == "files" && total == 40 && done <= total),
        "{files:?}"
    );
    assert_eq!(rows(&ctx, "SELECT count(*) FROM pr$files").await, ["1"]);

    // Expiry shows too, counted in the files it deletes: every snapshot but
    // the newest, and the 40 small files only they name.
    call("CALL sys.expire_snapshots(table => 'default.pr', retain_min => 1, retain_max => 1, max_deletes => 100)")
        .await
        .expect("join")
        .expect("expiry");
    let expiring: Vec<_> = of_pr(&updates.take())
        .into_iter()
        .filter(|w| w.activity == "expiring snapshots")
        .collect();
    let first = expiring.first().map(|w| (w.unit, w.done, w.total));
    assert_eq!(first, Some(("files", 0, 0)), "{expiring:?}");
    assert!(
        expiring[1..]
            .iter()
            .all(|w| w.unit == "files" && w.total > 40 && w.done <= w.total),
        "{expiring:?}"
    );
    assert!(
        expiring.last().is_some_and(|w| w.done == w.total),
        "{expiring:?}"
    );
    assert!(running_work().iter().all(|w| w.table != "default.pr"));
    let mut expected: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    expected.sort();
    assert_eq!(rows(&ctx, "SELECT id FROM pr").await, expected);
}
