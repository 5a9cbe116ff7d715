//! Drops take the store's side with them: `DROP TABLE` and `DROP DATABASE
//! ... CASCADE` of a lake-stream table remove its rows in the store, or are
//! refused where the catalog cannot reach that store, so a table created
//! later under the same name never sees the old rows.

use std::path::{Path, PathBuf};

use paimon_lakestream::LakeStreamContext;

use crate::support::{files_where, run, sorted_ids, try_run, CatalogKind, TestWarehouse};

const STORE: [(&str, &str); 2] = [
    ("lakestream.store", "local"),
    ("local.tier-interval", "off"),
];

const CREATE_KV: &str = "CREATE TABLE kv (k INT, v STRING, PRIMARY KEY (k) NOT ENFORCED) \
                         WITH ('lakestream.enabled' = 'true')";

async fn with_store(warehouse: &TestWarehouse) -> LakeStreamContext {
    warehouse.context_with(&STORE).await
}

/// The `local` store's default directory of database `db`.
fn store_dir(warehouse: &TestWarehouse, db: &str) -> PathBuf {
    warehouse
        .path()
        .join("warehouse")
        .join("_lakestream")
        .join(format!("db-{db}"))
}

/// The files under `dir` other than the lock files processes share.
fn store_files(dir: &Path) -> Vec<PathBuf> {
    files_where(dir, |path| {
        !path
            .file_name()
            .is_some_and(|n| n == "tier.lock" || n == "trim.lock")
    })
}

/// A catalog without a store refuses to drop a lake-stream table, naming
/// the store to drop it through; that store's catalog drops it with its
/// rows, and a table created again starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_table_without_the_store_is_refused_and_names_it() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let a = with_store(&warehouse).await;
    run(&a, CREATE_KV).await;
    run(&a, "INSERT INTO kv VALUES (1, 'a'), (2, 'b')").await;
    let plain = warehouse.context_with(&[]).await;
    let e = try_run(&plain, "DROP TABLE kv").await.unwrap_err();
    assert!(e.contains("DROP TABLE 'default.kv' is refused"), "{e}");
    assert!(e.contains("store 'local:file://"), "{e}");
    assert!(e.contains("names no store"), "{e}");
    assert_eq!(sorted_ids(&a, "SELECT k FROM kv$rt").await, vec![1, 2]);
    run(&a, "DROP TABLE kv").await;
    assert_eq!(
        store_files(&store_dir(&warehouse, "default")),
        Vec::<PathBuf>::new()
    );
    run(&a, CREATE_KV).await;
    assert_eq!(
        sorted_ids(&a, "SELECT k FROM kv$rt").await,
        Vec::<i64>::new()
    );
}

/// A catalog whose store is another one refuses too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_table_through_another_store_is_refused() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let a = with_store(&warehouse).await;
    run(&a, CREATE_KV).await;
    run(&a, "INSERT INTO kv VALUES (1, 'a')").await;
    let elsewhere = warehouse.path().join("elsewhere");
    let elsewhere = elsewhere.to_str().expect("utf-8 path");
    let b = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", elsewhere),
        ])
        .await;
    let e = try_run(&b, "DROP TABLE kv").await.unwrap_err();
    assert!(e.contains("DROP TABLE 'default.kv' is refused"), "{e}");
    assert!(e.contains("this catalog's store is 'local:"), "{e}");
    assert_eq!(sorted_ids(&a, "SELECT k FROM kv$rt").await, vec![1]);
}

/// Rows left in the store when the mode was turned off without tiering
/// (through a catalog without the store) go with a drop through the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_table_after_the_mode_was_turned_off_takes_the_stranded_rows() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let a = with_store(&warehouse).await;
    run(&a, CREATE_KV).await;
    run(&a, "INSERT INTO kv VALUES (1, 'a')").await;
    let plain = warehouse.context_with(&[]).await;
    run(
        &plain,
        "ALTER TABLE kv SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    assert_ne!(
        store_files(&store_dir(&warehouse, "default")),
        Vec::<PathBuf>::new()
    );
    run(&a, "DROP TABLE kv").await;
    assert_eq!(
        store_files(&store_dir(&warehouse, "default")),
        Vec::<PathBuf>::new()
    );
}

/// `DROP DATABASE ... CASCADE` through the store's catalog removes the
/// store's side of every table; a table created again starts empty, and
/// tiering commits only its own rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_database_cascade_takes_the_store_side() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let a = with_store(&warehouse).await;
    run(&a, "CREATE SCHEMA d").await;
    run(
        &a,
        "CREATE TABLE d.x (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &a,
        "CREATE TABLE d.y (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "CREATE TABLE d.p (id INT)").await;
    run(&a, "INSERT INTO d.x VALUES (1), (2)").await;
    run(&a, "INSERT INTO d.y VALUES (3)").await;
    run(&a, "DROP SCHEMA d CASCADE").await;
    assert_eq!(
        store_files(&store_dir(&warehouse, "d")),
        Vec::<PathBuf>::new()
    );
    run(&a, "CREATE SCHEMA d").await;
    run(
        &a,
        "CREATE TABLE d.x (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    assert_eq!(
        sorted_ids(&a, "SELECT id FROM d.x$rt").await,
        Vec::<i64>::new()
    );
    run(&a, "INSERT INTO d.x VALUES (10)").await;
    run(&a, "CALL sys.lakestream_tier('d.x')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM d.x").await, vec![10]);
}

/// `DROP DATABASE ... CASCADE` through a catalog without the store is
/// refused before anything is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_database_cascade_without_the_store_is_refused() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let a = with_store(&warehouse).await;
    run(&a, "CREATE SCHEMA d").await;
    run(&a, "CREATE TABLE d.p (id INT)").await;
    run(
        &a,
        "CREATE TABLE d.x (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO d.p VALUES (7)").await;
    run(&a, "INSERT INTO d.x VALUES (1)").await;
    let plain = warehouse.context_with(&[]).await;
    let e = try_run(&plain, "DROP SCHEMA d CASCADE").await.unwrap_err();
    assert!(e.contains("DROP DATABASE 'd' CASCADE is refused"), "{e}");
    assert!(e.contains("'d.x'"), "{e}");
    assert_eq!(sorted_ids(&a, "SELECT id FROM d.p").await, vec![7]);
    assert_eq!(sorted_ids(&a, "SELECT id FROM d.x$rt").await, vec![1]);
    run(&a, "DROP SCHEMA d CASCADE").await;
    assert_eq!(
        store_files(&store_dir(&warehouse, "d")),
        Vec::<PathBuf>::new()
    );
}

/// A table dropped and created again outside the store (the mode turned off
/// there first) is replaced when the store attaches the new one. A process
/// writing meanwhile through a handle on the old table either has its rows
/// go with the old table or is refused: none lands in a directory the
/// replacement already emptied, where nothing would ever read or delete it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_racing_a_replacement_leaves_nothing_behind() {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::record_batch::RecordBatch;
    use paimon_lakestream::store::local::{LocalOptions, LocalStore};
    use paimon_lakestream::store::{table_arrow_schema, LakestreamStore as _, WriteKind};

    use crate::support::paimon_table;

    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let a = with_store(&warehouse).await;
    let plain = warehouse.context_with(&[]).await;
    let table_dir = store_dir(&warehouse, "default").join("t-t");
    let root = warehouse.path().join("warehouse").join("_lakestream");
    let options = BTreeMap::from([("path".to_string(), root.display().to_string())]);
    let catalog = Arc::clone(a.catalog("paimon").expect("catalog").inner());
    let store = Arc::new(
        LocalStore::open(
            LocalOptions::from_options(&options, None).expect("options"),
            catalog,
        )
        .expect("open the store"),
    );
    run(&plain, "CREATE TABLE t (id INT)").await;
    for round in 0..25 {
        // The table as a long-lived writer knows it, its handle verified
        // by a first write.
        let old = paimon_table(&plain, "t").await;
        store.attach_table(&old).await.expect("attach");
        let schema = table_arrow_schema(&old).expect("schema");
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![round]))])
            .expect("batch");
        store
            .write(&old, WriteKind::Append, vec![batch.clone()])
            .await
            .expect("first write");
        run(&plain, "DROP TABLE t").await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        run(&plain, "CREATE TABLE t (id INT)").await;
        let new = paimon_table(&plain, "t").await;
        let writers: Vec<_> = (0..3)
            .map(|_| {
                let (store, old, batch) = (Arc::clone(&store), old.clone(), batch.clone());
                tokio::spawn(async move {
                    for _ in 0..200 {
                        if store
                            .write(&old, WriteKind::Append, vec![batch.clone()])
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        store.attach_table(&new).await.expect("replace");
        for writer in writers {
            writer.await.expect("writer");
        }
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(table_dir.join("table.json")).expect("table.json"),
        )
        .expect("table.json parses");
        let current = table_dir.join(format!(
            "i-{}",
            meta["incarnation"].as_str().expect("an incarnation")
        ));
        let left: Vec<PathBuf> = store_files(&table_dir)
            .into_iter()
            .filter(|path| {
                !path.starts_with(&current)
                    && !path.starts_with(table_dir.join("lease"))
                    && *path != table_dir.join("table.json")
            })
            .collect();
        assert_eq!(left, Vec::<PathBuf>::new(), "round {round}");
    }
}
