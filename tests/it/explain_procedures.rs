//! `EXPLAIN` shows a plan and runs nothing: `EXPLAIN CALL sys.<procedure>`
//! and `EXPLAIN SELECT * FROM <procedure>(...)` of every kind of procedure
//! (tiering, compaction, expiry, orphan removal, tags) leave the table as it
//! was (its snapshots, tags, files, the rows in Paimon and in the store), as
//! `EXPLAIN` of an INSERT, DELETE or UPDATE of a lake-stream table writes no
//! row. `EXPLAIN ANALYZE` executes the statement, so it runs the procedure
//! (docs/maintenance.md).

use std::path::{Path, PathBuf};

use paimon_lakestream::LakeStreamContext;

use crate::support::{files_where, on_request_context, paimon_table, run, sorted_rows};

/// Far enough ahead that every file counts as old.
const FUTURE: &str = "2999-01-01 00:00:00";

/// Everything a procedure or a write could change of `t`.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    snapshots: Vec<String>,
    tags: Vec<String>,
    paimon: Vec<String>,
    realtime: Vec<String>,
    files: Vec<PathBuf>,
}

async fn seen(ctx: &LakeStreamContext, root: &Path) -> Seen {
    let tags = paimon_table(ctx, "t")
        .await
        .tag_manager()
        .list_all()
        .await
        .expect("tags")
        .into_iter()
        .map(|(name, snapshot)| format!("{name}@{}", snapshot.id()))
        .collect();
    Seen {
        snapshots: sorted_rows(ctx, "SELECT snapshot_id, commit_kind FROM t$snapshots").await,
        tags,
        paimon: sorted_rows(ctx, "SELECT * FROM t").await,
        realtime: sorted_rows(ctx, "SELECT * FROM t$rt").await,
        files: files_where(root, |_| true),
    }
}

/// The text of a plan `EXPLAIN` answers.
async fn explain(ctx: &LakeStreamContext, sql: &str) -> String {
    sorted_rows(ctx, sql).await.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_runs_no_procedure_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = on_request_context(&dir).await;
    run(
        &ctx,
        "CREATE TABLE t (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    // Two tiering commits (expiry and compaction have work), then rows
    // waiting in the store (tiering has work), and a stray file (orphan
    // removal has work).
    for round in 0..2 {
        run(&ctx, &format!("INSERT INTO t VALUES ({round}, 'a')")).await;
        run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    }
    run(
        &ctx,
        "INSERT INTO t VALUES (10, 'waiting'), (11, 'waiting')",
    )
    .await;
    let root = dir.path().join("warehouse/default.db/t");
    let stray = root.join("manifest/manifest-stray-0");
    std::fs::write(&stray, b"stray").expect("write a stray file");
    let before = seen(&ctx, &root).await;
    assert!(before.snapshots.len() >= 2, "{before:?}");
    assert_eq!(before.realtime.len(), 4, "{before:?}");

    let expiry = "expire_snapshots(table => 'default.t', retain_max => 1, retain_min => 1, \
                  older_than => '2999-01-01 00:00:00')";
    let orphans = format!("remove_orphan_files(table => 'default.t', older_than => '{FUTURE}')");
    for (statement, names) in [
        (
            "CALL sys.lakestream_tier('default.t')".to_string(),
            "lakestream_tier",
        ),
        (
            "SELECT * FROM lakestream_tier('default.t')".to_string(),
            "lakestream_tier",
        ),
        (
            "CALL paimon.sys.lakestream_tier('default.t')".to_string(),
            "lakestream_tier",
        ),
        ("CALL sys.compact('default.t')".to_string(), "compact"),
        (
            "CALL sys.compact_manifest(table => 'default.t')".to_string(),
            "compact_manifest",
        ),
        (format!("CALL sys.{expiry}"), "expire_snapshots"),
        (
            format!("SELECT * FROM expire_snapshots('default.t', 1, 1, '{FUTURE}')"),
            "expire_snapshots",
        ),
        (format!("CALL sys.{orphans}"), "remove_orphan_files"),
        (
            "CALL sys.create_tag(table => 'default.t', tag => 'x')".to_string(),
            "create_tag",
        ),
        (
            "SELECT * FROM create_tag('default.t', 'y', 1)".to_string(),
            "create_tag",
        ),
    ] {
        for explain_kind in ["EXPLAIN", "EXPLAIN VERBOSE"] {
            let sql = format!("{explain_kind} {statement}");
            let plan = explain(&ctx, &sql).await;
            assert!(
                plan.contains(names),
                "{sql}: the plan does not name the procedure: {plan}"
            );
            assert_eq!(seen(&ctx, &root).await, before, "{sql} ran the procedure");
        }
    }

    // Writes of a lake-stream table: planned, not run.
    for statement in [
        "INSERT INTO t VALUES (20, 'new')",
        "DELETE FROM t WHERE id = 10",
        "UPDATE t SET v = 'changed' WHERE id = 11",
    ] {
        let sql = format!("EXPLAIN {statement}");
        explain(&ctx, &sql).await;
        assert_eq!(seen(&ctx, &root).await, before, "{sql} wrote");
    }

    // EXPLAIN ANALYZE executes the statement: the procedure runs.
    explain(
        &ctx,
        "EXPLAIN ANALYZE CALL sys.lakestream_tier('default.t')",
    )
    .await;
    let after = seen(&ctx, &root).await;
    assert!(after.snapshots.len() > before.snapshots.len(), "{after:?}");
    assert_eq!(after.paimon, after.realtime, "{after:?}");
    explain(
        &ctx,
        "EXPLAIN ANALYZE CALL sys.create_tag(table => 'default.t', tag => 'z')",
    )
    .await;
    let tagged = seen(&ctx, &root).await;
    assert_eq!(tagged.tags.len(), 1, "{tagged:?}");
    assert!(tagged.tags[0].starts_with("z@"), "{tagged:?}");
    assert!(stray.exists(), "nothing removed the stray file");
}
