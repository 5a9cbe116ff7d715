//! DDL statements racing another process's on the same table: what an
//! `ALTER TABLE` checked is what it changes, and a `CREATE TABLE IF NOT
//! EXISTS` never drops a table another process created and wrote.
//!
//! "Another process" is a second context whose store path reaches the same
//! directory through a symbolic link (as in `durability.rs`): the two share
//! nothing in memory. A pause point (`paimon_lakestream::testing::Pause`)
//! holds the first statement where the race opens, while the other runs.

use paimon_lakestream::testing::Pause;
use paimon_lakestream::LakeStreamContext;

use crate::durability::Setup;
use crate::support::{paimon_table, run, sorted_ids, try_run};

/// Two contexts on one warehouse and one store directory (reached under
/// two names), as two processes have them.
async fn two_processes() -> (Setup, LakeStreamContext, LakeStreamContext) {
    let setup = Setup::new().await;
    let a = setup.process(&setup.store, &[]).await;
    let b = setup.process(&setup.alias, &[]).await;
    (setup, a, b)
}

/// Runs `paused` in `a` until it reaches `point` on `default.<table>`, then
/// each of `meanwhile` in `b` (each must succeed), then lets `paused` go
/// on; answers its outcome.
async fn race(
    a: &LakeStreamContext,
    paused: &str,
    point: &str,
    table: &str,
    b: &LakeStreamContext,
    meanwhile: &[&str],
) -> Result<(), String> {
    let pause = Pause::new(point, format!("default.{table}"));
    let first = Box::pin(try_run(a, paused));
    let second = async {
        pause.reached().await;
        for sql in meanwhile {
            Box::pin(run(b, sql)).await;
        }
        pause.release();
    };
    let (outcome, ()) = tokio::join!(first, second);
    outcome
}

/// A column change checked while the table was plain, applied after
/// another process turned the mode on: the column guard decides on the
/// schema the change is applied to, so it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_change_is_refused_when_the_mode_went_on_meanwhile() {
    let (_setup, a, b) = two_processes().await;
    run(&a, "CREATE TABLE c (id INT, v INT)").await;
    run(&a, "INSERT INTO c VALUES (1, 10)").await;
    let outcome = race(
        &a,
        "ALTER TABLE c DROP COLUMN v",
        "alter-before-write",
        "c",
        &b,
        &["ALTER TABLE c SET TBLPROPERTIES ('lakestream.enabled' = 'true')"],
    )
    .await;
    let error = outcome.expect_err("the DROP COLUMN is refused");
    assert!(
        error.contains("DROP COLUMN v on lake-stream table 'default.c' is not supported"),
        "{error}"
    );
    assert_eq!(sorted_ids(&a, "SELECT v FROM c$rt").await, vec![10]);
}

/// Turning the mode on, checked and attached on one schema, while another
/// process changes the merge engine to one the mode refuses: the ALTER is
/// refused as a whole (nothing changed, run it again), and run again it is
/// refused for the merge engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_the_mode_on_is_refused_when_the_schema_changed_meanwhile() {
    let (_setup, a, b) = two_processes().await;
    run(
        &a,
        "CREATE TABLE kv (k INT NOT NULL, v STRING, PRIMARY KEY (k))",
    )
    .await;
    let enable = "ALTER TABLE kv SET TBLPROPERTIES ('lakestream.enabled' = 'true')";
    let outcome = race(
        &a,
        enable,
        "alter-before-write",
        "kv",
        &b,
        &["ALTER TABLE kv SET TBLPROPERTIES ('merge-engine' = 'first-row')"],
    )
    .await;
    let error = outcome.expect_err("turning the mode on is refused");
    assert!(
        error.contains("the table's schema changed while this ALTER ran")
            && error.contains("nothing was changed, run it again"),
        "{error}"
    );
    let options = paimon_table(&a, "kv").await.schema().options().clone();
    assert_eq!(
        options.get("merge-engine").map(String::as_str),
        Some("first-row")
    );
    assert!(!options.contains_key("lakestream.enabled"), "{options:?}");
    let again = try_run(&a, enable).await.expect_err("refused");
    assert!(
        again.contains("'merge-engine'='first-row' is not supported"),
        "{again}"
    );
}

/// Two processes create one lake-stream table with IF NOT EXISTS; the one
/// that finds no table is held before it creates it while the other
/// creates it, writes, and tiers the row into Paimon. The first then finds
/// the table taken: it finishes it, and drops nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_if_not_exists_keeps_a_table_another_process_created_and_wrote() {
    let (_setup, a, b) = two_processes().await;
    let create = "CREATE TABLE IF NOT EXISTS t (id INT) WITH ('lakestream.enabled' = 'true')";
    let outcome = race(
        &a,
        create,
        "create-before-create",
        "t",
        &b,
        &[
            create,
            "INSERT INTO t VALUES (1)",
            "CALL sys.lakestream_tier('default.t')",
        ],
    )
    .await;
    outcome.expect("the CREATE finds the table and finishes it");
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1]);
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1]);
    run(&a, "INSERT INTO t VALUES (2)").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 2]);

    // Without IF NOT EXISTS, the statement that lost says so.
    let plain = "CREATE TABLE u (id INT) WITH ('lakestream.enabled' = 'true')";
    let outcome = race(&a, plain, "create-before-create", "u", &b, &[plain]).await;
    let error = outcome.expect_err("the table exists");
    assert!(error.contains("already exist"), "{error}");
}

/// As above, with the first process held after it created the table: the
/// other's CREATE IF NOT EXISTS finds it, writes and tiers; the snapshot
/// the first then finds is that process's, and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_table_written_by_another_process_before_the_check_is_kept() {
    let (_setup, a, b) = two_processes().await;
    let create = "CREATE TABLE IF NOT EXISTS t (id INT) WITH ('lakestream.enabled' = 'true')";
    let outcome = race(
        &a,
        create,
        "create-before-check",
        "t",
        &b,
        &[
            create,
            "INSERT INTO t VALUES (1)",
            "CALL sys.lakestream_tier('default.t')",
        ],
    )
    .await;
    outcome.expect("the CREATE finishes");
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1]);
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1]);
}
