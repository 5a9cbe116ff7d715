//! Writes to a branch of a lake-stream table (issue 10, case 4). A branch
//! copies its table's options, `lakestream.enabled` included, but is never
//! itself lake-stream: its writes go to the branch as plain Paimon writes
//! or are refused, and never reach the main table's store.

use paimon::catalog::{Catalog, Identifier};
use paimon::table::BranchManager;

use crate::support::{run, sorted_ids, try_run, CatalogKind, TestWarehouse};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_writes_never_reach_the_main_tables_store() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let ctx = warehouse
        .context_with(&[("lakestream.store", "memory")])
        .await;
    run(
        &ctx,
        "CREATE TABLE t (k INT NOT NULL, v STRING, PRIMARY KEY (k)) WITH ('bucket' = '1')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (1, 'main')").await;
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (2, 'store')").await;

    let catalog = ctx.catalog("paimon").expect("catalog");
    let table = catalog
        .get_table(&Identifier::new("default", "t"))
        .await
        .expect("table");
    BranchManager::new(table.file_io().clone(), table.location().to_string())
        .create_branch("b")
        .await
        .expect("branch");

    // INSERT into the branch is Paimon's: paimon-datafusion 0.4 refuses
    // branch writes; were it to take them, the row would be in the branch.
    // (An empty branch: created from no tag, it holds none of main's snapshots.)
    let branch_rows = match try_run(&ctx, "INSERT INTO t$branch_b VALUES (3, 'branch')").await {
        Ok(()) => vec![3],
        Err(e) => {
            assert!(e.contains("branch 'b'"), "{e}");
            vec![]
        }
    };
    assert_eq!(
        sorted_ids(&ctx, "SELECT k FROM t$branch_b").await,
        branch_rows
    );
    assert_eq!(sorted_ids(&ctx, "SELECT k FROM t$rt").await, [1, 2]);
    assert_eq!(sorted_ids(&ctx, "SELECT k FROM t").await, [1]);

    // Other writes of the branch go to the branch or are refused.
    for sql in [
        "DELETE FROM t$branch_b WHERE k = 1",
        "UPDATE t$branch_b SET v = 'u' WHERE k = 1",
        "TRUNCATE TABLE t$branch_b",
        "INSERT OVERWRITE t$branch_b VALUES (4, 'o')",
    ] {
        let _ = try_run(&ctx, sql).await;
        assert_eq!(
            sorted_ids(&ctx, "SELECT k FROM t$rt").await,
            [1, 2],
            "{sql}"
        );
        assert_eq!(sorted_ids(&ctx, "SELECT k FROM t").await, [1], "{sql}");
    }
    let updated = sorted_ids(&ctx, "SELECT count(*) FROM t$rt WHERE v = 'u'").await;
    assert_eq!(updated, [0]);
}
