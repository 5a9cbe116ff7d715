//! DDL on a full disk fails and changes nothing.
//!
//! paimon 0.4 writes `schema/schema-N` and tags in place. On a full disk an
//! `ALTER TABLE` failed but left a 0-byte `schema-1`, and from then on every
//! statement on the table failed ("Failed to parse schema file ... EOF"),
//! turning the mode off, `DROP` and a new `CREATE` included; a `CREATE`
//! left an empty `schema-0`, and `CALL sys.create_tag` a 0-byte tag that
//! broke `$tags`, expiry and orphan removal. Every metadata file is now
//! written aside and published whole (`src/object_storage/guard.rs`), the
//! catalog's own schema files included (`src/object_storage/ddl.rs`).

use paimon_lakestream::testing::DiskFull;
use tempfile::TempDir;

use crate::support::on_request_context as context;
use crate::support::{files_where, run, sorted_rows, try_run};

/// Statements that write metadata files, each of which the full disk fails.
const DDL: &[&str] = &[
    "ALTER TABLE t SET TBLPROPERTIES ('k' = 'v')",
    "ALTER TABLE t ADD COLUMN name STRING",
    "CREATE TABLE u (id BIGINT)",
    "CALL sys.create_tag(table => 'default.t', tag => 'full')",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_on_a_full_disk_fails_and_the_table_works_afterwards() {
    let dir = TempDir::new().expect("temp dir");
    let warehouse = dir.path().join("warehouse");
    let ctx = context(&dir).await;
    run(&ctx, "CREATE TABLE t (id BIGINT)").await;
    run(&ctx, "INSERT INTO t VALUES (1), (2)").await;
    // No room at all (the 0-byte files of the report), then some: a file
    // cut short; then room for every file but none for a new name in its
    // directory: the publish fails (it used to rename the file into place
    // instead, and the statement succeeded).
    for room in [0, 64, 1 << 20] {
        let full = DiskFull::new(&warehouse, room);
        for sql in DDL {
            let Err(error) = try_run(&ctx, sql).await else {
                panic!("{sql} succeeded on a full disk");
            };
            assert!(error.contains("No space left"), "{sql}: {error}");
        }
        drop(full);
        // No temporary, and no short metadata file.
        let left = files_where(&warehouse, |path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let metadata = path.parent().is_some_and(|dir| {
                ["schema", "snapshot", "tag"]
                    .iter()
                    .any(|name| dir.ends_with(name))
            });
            name.is_some_and(|n| n.ends_with(".tmp"))
                || (metadata && std::fs::metadata(path).is_ok_and(|m| m.len() == 0))
        });
        assert!(left.is_empty(), "room {room}: left behind: {left:?}");
        let schemas = files_where(&warehouse.join("default.db"), |path| {
            path.parent().is_some_and(|p| p.ends_with("schema"))
        });
        assert_eq!(
            schemas,
            [warehouse.join("default.db/t/schema/schema-0")],
            "room {room}: a failed DDL published a schema file"
        );
    }
    // Everything works on the table afterwards.
    assert_eq!(sorted_rows(&ctx, "SELECT id FROM t").await, ["1", "2"]);
    assert!(sorted_rows(&ctx, "SELECT tag_name FROM t$tags")
        .await
        .is_empty());
    for sql in DDL {
        run(&ctx, sql).await;
    }
    assert_eq!(
        sorted_rows(&ctx, "SELECT tag_name FROM t$tags").await,
        ["full"]
    );
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (3, 'c')").await;
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    assert_eq!(sorted_rows(&ctx, "SELECT id FROM t").await, ["1", "2", "3"]);
    run(&ctx, "CALL sys.expire_snapshots(table => 'default.t')").await;
    run(&ctx, "CALL sys.remove_orphan_files(table => 'default.t')").await;
    run(&ctx, "DROP TABLE t").await;
    run(&ctx, "CREATE TABLE t (id BIGINT)").await;
    run(&ctx, "DROP TABLE u").await;
}
