//! Planning reuses table handles (`src/table_cache.rs`); another process
//! that alters, drops or re-creates the table is seen at the next statement.

use std::path::Path;
use std::process::Command;

use crate::support::{on_request_context, sorted_rows, try_sorted_rows};

/// Runs `sql` in a `lakestream-cli` process of its own over the warehouse.
fn in_another_process(warehouse: &Path, store: &Path, sql: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_lakestream-cli"))
        .arg("--warehouse")
        .arg(warehouse)
        .arg("--option")
        .arg(format!("local.path={}", store.display()))
        .args(["--option", "local.tier-interval=off", "-q", "-c", sql])
        .output()
        .expect("run lakestream-cli");
    assert!(
        output.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_altering_dropping_and_creating_is_seen() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = on_request_context(&dir).await;
    let (warehouse, store) = (dir.path().join("warehouse"), dir.path().join("store"));
    for table in ["plain", "fresh"] {
        let with = if table == "fresh" {
            " WITH ('lakestream.enabled' = 'true')"
        } else {
            ""
        };
        crate::support::run(&ctx, &format!("CREATE TABLE {table} (id INT){with}")).await;
        crate::support::run(&ctx, &format!("INSERT INTO {table} VALUES (1)")).await;
        let rows = if table == "fresh" {
            format!("SELECT * FROM {table}$rt")
        } else {
            format!("SELECT * FROM {table}")
        };
        // Loaded, and cached, here.
        assert_eq!(sorted_rows(&ctx, &rows).await, ["1"]);

        in_another_process(
            &warehouse,
            &store,
            &format!(
                "ALTER TABLE {table} ADD COLUMN v STRING; INSERT INTO {table} VALUES (2, 'b')"
            ),
        );
        crate::support::run(&ctx, &format!("INSERT INTO {table} VALUES (3, 'c')")).await;
        assert_eq!(sorted_rows(&ctx, &rows).await, ["1|", "2|b", "3|c"]);

        in_another_process(
            &warehouse,
            &store,
            &format!(
                "DROP TABLE {table}; CREATE TABLE {table} (name STRING){with}; \
                 INSERT INTO {table} VALUES ('x')"
            ),
        );
        assert_eq!(sorted_rows(&ctx, &rows).await, ["x"]);
        crate::support::run(&ctx, &format!("INSERT INTO {table} VALUES ('y')")).await;
        assert_eq!(sorted_rows(&ctx, &rows).await, ["x", "y"]);

        in_another_process(&warehouse, &store, &format!("DROP TABLE {table}"));
        let gone = try_sorted_rows(&ctx, &rows).await.unwrap_err();
        assert!(gone.contains(table), "{gone}");
        let write = crate::support::try_run(&ctx, &format!("INSERT INTO {table} VALUES ('z')"))
            .await
            .unwrap_err();
        assert!(write.contains(table), "{write}");
    }
}

/// A database is remembered once seen, and each statement on it still
/// checks the files: after another process drops it, reads, writes and
/// `CREATE TABLE` in it fail, naming what is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_dropping_the_database_is_seen() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ctx = on_request_context(&dir).await;
    let (warehouse, store) = (dir.path().join("warehouse"), dir.path().join("store"));
    crate::support::run(&ctx, "CREATE SCHEMA d").await;
    crate::support::run(&ctx, "CREATE TABLE d.t (id INT)").await;
    crate::support::run(&ctx, "INSERT INTO d.t VALUES (1)").await;
    assert_eq!(sorted_rows(&ctx, "SELECT * FROM d.t").await, ["1"]);

    in_another_process(&warehouse, &store, "DROP SCHEMA d CASCADE");
    let read = try_sorted_rows(&ctx, "SELECT * FROM d.t")
        .await
        .unwrap_err();
    assert!(read.contains("d.t") || read.contains("'t'"), "{read}");
    let write = crate::support::try_run(&ctx, "INSERT INTO d.t VALUES (2)")
        .await
        .unwrap_err();
    assert!(write.contains("d.t") || write.contains("'t'"), "{write}");
    let create = crate::support::try_run(&ctx, "CREATE TABLE d.u (id INT)")
        .await
        .unwrap_err();
    assert!(create.contains('d'), "{create}");

    // Made again by the other process: used again here.
    in_another_process(
        &warehouse,
        &store,
        "CREATE SCHEMA d; CREATE TABLE d.t (name STRING); INSERT INTO d.t VALUES ('x')",
    );
    assert_eq!(sorted_rows(&ctx, "SELECT * FROM d.t").await, ["x"]);
}
