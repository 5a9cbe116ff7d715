//! The read side of the Fluss store against a real Fluss 0.9.1 cluster:
//! logs that end in batches without records, deletes of keys Fluss's
//! key-value store does not hold, and which Paimon snapshot `t$rt` starts
//! from after rows were loaded into Paimon directly.

use std::time::{Duration, Instant};

use fluss::metadata::TablePath;
use fluss::row::GenericRow;

use crate::fluss::{
    cluster, eventually, fails, lines, open, run, tiering_cluster, Cluster, FlussHarness,
};
use crate::slt::StoreCondition;

/// Deletes key `key` of the Fluss table `default.<table>` (columns `k INT,
/// v STRING`) with fluss-rs directly. When Fluss's key-value store does not
/// hold the key, Fluss logs a batch without records.
async fn fluss_delete(cluster: &Cluster, table: &str, key: i32) {
    let connection = cluster.connection().await;
    let table = connection
        .get_table(&TablePath::new("default", table))
        .await
        .expect("open the Fluss table");
    let writer = table
        .new_upsert()
        .and_then(|u| u.create_writer())
        .expect("an upsert writer");
    let mut row = GenericRow::new(2);
    row.set_field(0, key);
    row.set_field(1, None::<&()>);
    let acknowledged = writer.delete(&row).expect("queue the delete");
    writer.flush().await.expect("flush");
    acknowledged.await.expect("the delete is acknowledged");
}

/// The latest offset of bucket 0 of `default.<table>`.
async fn latest_offset(cluster: &Cluster, table: &str) -> i64 {
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    let offsets = admin
        .list_offsets(
            &TablePath::new("default", table),
            &[0],
            fluss::rpc::message::OffsetSpec::Latest,
        )
        .await
        .expect("list offsets");
    offsets.get(&0).copied().expect("bucket 0")
}

/// `t$rt` within `patience`: the rows, and how long the read took.
async fn timed(ctx: &paimon_lakestream::LakeStreamContext, sql: &str) -> (Vec<String>, Duration) {
    let started = Instant::now();
    let rows = lines(&run(ctx, sql).await);
    (rows, started.elapsed())
}

/// Item 1: a log that ends in a batch without records (a delete of a key
/// Fluss does not hold, from any client) is read to its end at once, and
/// DELETE and UPDATE, which read `t$rt` first, keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_log_that_ends_in_a_batch_without_records_is_read() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fr_tail (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fr_tail VALUES (1, 'a'), (2, 'b')").await;
    let before = latest_offset(cluster, "fr_tail").await;
    fluss_delete(cluster, "fr_tail", 99).await;
    fluss_delete(cluster, "fr_tail", 98).await;
    // Fluss took offsets for the two deletes, and logged no record.
    assert_eq!(latest_offset(cluster, "fr_tail").await, before + 2);

    let (rows, took) = timed(&ctx, "SELECT * FROM fr_tail$rt").await;
    assert_eq!(rows, vec!["1|a", "2|b"]);
    assert!(took < Duration::from_secs(15), "t$rt took {took:?}");

    run(&ctx, "DELETE FROM fr_tail WHERE k = 1").await;
    run(&ctx, "UPDATE fr_tail SET v = 'B' WHERE k = 2").await;
    let (rows, took) = timed(&ctx, "SELECT * FROM fr_tail$rt").await;
    assert_eq!(rows, vec!["2|B"]);
    assert!(took < Duration::from_secs(15), "t$rt took {took:?}");
}

/// Item 1, the one case left: a log holding nothing but batches without
/// records (another client's deletes of keys Fluss does not hold) has no
/// record that shows where it ends. The read says so within the request
/// timeout, never reads a wrong result, and works again after a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_log_of_only_batches_without_records_is_explained() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fr_none (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    fluss_delete(cluster, "fr_none", 7).await;
    assert_eq!(latest_offset(cluster, "fr_none").await, 1);
    let error = fails(&ctx, "SELECT * FROM fr_none$rt").await;
    assert!(error.contains("batches without records"), "{error}");
    run(&ctx, "INSERT INTO fr_none VALUES (1, 'a')").await;
    let (rows, took) = timed(&ctx, "SELECT * FROM fr_none$rt").await;
    assert_eq!(rows, vec!["1|a"]);
    assert!(took < Duration::from_secs(15), "t$rt took {took:?}");
}

/// A DELETE of keys Fluss's key-value store holds sends the deletes alone:
/// one change-log record each, and nothing a crash could split. (A key it
/// does not hold goes as an upsert and then its delete: below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_delete_of_held_keys_is_only_their_deletes() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fr_held (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    let values: Vec<String> = (1..=100).map(|k| format!("({k}, 'v{k}')")).collect();
    run(
        &ctx,
        &format!("INSERT INTO fr_held VALUES {}", values.join(", ")),
    )
    .await;
    let before = latest_offset(cluster, "fr_held").await;
    run(&ctx, "DELETE FROM fr_held WHERE k > 40").await;
    assert_eq!(latest_offset(cluster, "fr_held").await, before + 60);
    let rows = lines(&run(&ctx, "SELECT count(*), min(k), max(k) FROM fr_held$rt").await);
    assert_eq!(rows, vec!["40|1|40"]);
}

/// Item 1: a DELETE never becomes a batch without records, even of a key
/// another process deleted first: Fluss logs records for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn two_processes_deleting_one_row_leave_records() {
    let cluster = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let harness = FlussHarness::on(cluster);
    let (w, ctx) = open(&harness, StoreCondition::Reachable).await;
    let other = crate::slt::StoreHarness::open(&harness, &w, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fr_twice (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fr_twice VALUES (1, 'a'), (2, 'b')").await;
    // Both plan their DELETE on a t$rt that holds key 1.
    let first = ctx
        .sql("DELETE FROM fr_twice WHERE k = 1")
        .await
        .expect("plan");
    let second = other
        .sql("DELETE FROM fr_twice WHERE k = 1")
        .await
        .expect("plan");
    // Both read t$rt, which holds key 1, before either writes: the second
    // deletes a key Fluss's key-value store no longer holds.
    let (first, second) = tokio::join!(first.collect(), second.collect());
    first.expect("the first DELETE");
    second.expect("the second DELETE");
    let (rows, took) = timed(&ctx, "SELECT * FROM fr_twice$rt").await;
    assert_eq!(rows, vec!["2|b"]);
    assert!(took < Duration::from_secs(15), "t$rt took {took:?}");
    run(&other, "DELETE FROM fr_twice WHERE k = 2").await;
    assert!(lines(&run(&ctx, "SELECT * FROM fr_twice$rt").await).is_empty());
}

/// Items 1 and 2 with Fluss's tiering service, on a cluster of its own:
/// rows loaded into Paimon while the mode was off are in `t$rt` once it is
/// on again, and a DELETE of such a row (a key Fluss's key-value store never
/// held) reaches Paimon through tiering. Tiering keeps running after deletes
/// and inserts while it tiers (item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    all(fluss_off, not(fluss_tiering_off)),
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
#[cfg_attr(
    fluss_tiering_off,
    ignore = "LAKESTREAM_FLUSS_TIERING=0: Fluss's tiering service is not started"
)]
async fn rows_loaded_while_off_are_read_and_deleted() {
    let cluster = tiering_cluster("reads").await;
    let harness = FlussHarness::on(&cluster).with("fluss.table.datalake.freshness", "2s");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    let patience = Duration::from_secs(180);

    run(
        &ctx,
        "CREATE TABLE fr_load (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fr_load VALUES (1, 'a'), (2, 'b')").await;
    cluster
        .run("tiering-start")
        .expect("start the tiering service");
    eventually(&ctx, "SELECT * FROM fr_load", &["1|a", "2|b"], patience).await;

    // Off, a plain load into Paimon, on again.
    run(
        &ctx,
        "ALTER TABLE fr_load SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    run(
        &ctx,
        "INSERT INTO fr_load VALUES \
         (3, 'c', 0, -1, CAST(TIMESTAMP '2024-01-01 00:00:00' AS TIMESTAMP WITH TIME ZONE)), \
         (5, 'e', 0, -1, CAST(TIMESTAMP '2024-01-01 00:00:00' AS TIMESTAMP WITH TIME ZONE))",
    )
    .await;
    run(
        &ctx,
        "ALTER TABLE fr_load SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    let all = ["1|a", "2|b", "3|c", "5|e"];
    assert_eq!(lines(&run(&ctx, "SELECT * FROM fr_load").await), all);
    assert_eq!(lines(&run(&ctx, "SELECT * FROM fr_load$rt").await), all);

    // Deletes of keys only Paimon holds, one of them twice.
    run(&ctx, "DELETE FROM fr_load WHERE k = 3").await;
    run(&ctx, "DELETE FROM fr_load WHERE k = 3").await;
    run(&ctx, "INSERT INTO fr_load VALUES (6, 'f')").await;
    let after = ["1|a", "2|b", "5|e", "6|f"];
    assert_eq!(lines(&run(&ctx, "SELECT * FROM fr_load$rt").await), after);
    // The delete reaches Paimon: tiering removes key 3, and keeps tiering.
    eventually(&ctx, "SELECT * FROM fr_load", &after, patience).await;
    assert_eq!(lines(&run(&ctx, "SELECT * FROM fr_load$rt").await), after);
    run(&ctx, "DELETE FROM fr_load WHERE k = 5").await;
    run(&ctx, "INSERT INTO fr_load VALUES (7, 'g')").await;
    let last = ["1|a", "2|b", "6|f", "7|g"];
    eventually(&ctx, "SELECT * FROM fr_load", &last, patience).await;
    assert_eq!(lines(&run(&ctx, "SELECT * FROM fr_load$rt").await), last);
    cluster.run("stop").expect("stop the tiering cluster");
}
