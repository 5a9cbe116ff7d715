//! The lifecycle of a table on Fluss against a real cluster: turning the
//! mode off while Fluss holds rows Paimon lacks, dropping a table whose
//! mode is off, and what errors say when part of the cluster is down.
//!
//! The tests that need Fluss's tiering service share one cluster of their
//! own with the service running (`LAKESTREAM_FLUSS_TIERING=0` at build time ignores them);
//! the test that stops servers has a cluster of its own too.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use fluss::metadata::TablePath;

use crate::fluss::{eventually, fails, lines, open, run, Cluster, FlussHarness};
use crate::slt::{StoreCondition, StoreHarness};

fn tiering_enabled() -> bool {
    std::env::var("LAKESTREAM_FLUSS_TIERING").as_deref() != Ok("0")
}

/// The cluster of these tests, with Fluss's tiering service running unless
/// `LAKESTREAM_FLUSS_TIERING=0`.
fn lifecycle_cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    let started = CLUSTER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!(
            "paimon-lakestream-fluss-lifecycle-{}",
            std::process::id()
        ));
        let cluster = Cluster::start(&dir)?;
        if tiering_enabled() {
            cluster.run("tiering-start")?;
        }
        Ok(cluster)
    });
    match started {
        Ok(cluster) => cluster,
        Err(e) => panic!("no Fluss cluster for the test: {e}"),
    }
}

async fn any_cluster() -> &'static Cluster {
    tokio::task::spawn_blocking(lifecycle_cluster)
        .await
        .expect("cluster start")
}

/// The cluster, for tests that need Fluss's tiering service (ignored when
/// built with `LAKESTREAM_FLUSS_TIERING=0`: see build.rs).
async fn tiering() -> &'static Cluster {
    crate::fluss::assert_tiering_wanted();
    any_cluster().await
}

const PATIENCE: Duration = Duration::from_secs(180);

/// Turns the mode of `table` off once Fluss recorded the tiering of what it
/// holds: a row shows in `t` as soon as Paimon committed it, and Fluss's
/// lake snapshot, which the count starts from, follows a moment later.
/// What the statement returned (its notice).
async fn turn_off_once_tiered(
    ctx: &paimon_lakestream::LakeStreamContext,
    table: &str,
) -> Vec<String> {
    let sql = format!("ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled' = 'false')");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        match crate::fluss::query(ctx, &sql).await {
            Ok(batches) => return lines(&batches),
            Err(e)
                if e.to_string().contains("not yet tiered")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("{sql}: {e}"),
        }
    }
}

/// The Fluss table's property `key`, `None` when the table does not exist.
async fn fluss_property(cluster: &Cluster, table: &str, key: &str) -> Option<Option<String>> {
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    let path = TablePath::new("default", table);
    if !admin.table_exists(&path).await.expect("table exists") {
        return None;
    }
    let info = admin.get_table_info(&path).await.expect("table info");
    Some(info.get_properties().get(key).cloned())
}

async fn fluss_table_exists(cluster: &Cluster, table: &str) -> bool {
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    admin
        .table_exists(&TablePath::new("default", table))
        .await
        .expect("table exists")
}

/// Issue 11 item 4: turning the mode off while Fluss holds rows its tiering
/// has not written into Paimon yet is refused, with how many there are and
/// how to wait for them; the mode stays on and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    all(fluss_off, not(fluss_tiering_off)),
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
#[cfg_attr(
    fluss_tiering_off,
    ignore = "LAKESTREAM_FLUSS_TIERING=0: Fluss's tiering service is not started"
)]
async fn turning_off_with_untiered_rows_is_refused_with_a_count() {
    let cluster = tiering().await;
    // Fluss tiers these tables only every hour: their rows stay un-tiered.
    let harness = FlussHarness::on(cluster).with("fluss.table.datalake.freshness", "1h");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_untiered (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '2', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &ctx,
        "INSERT INTO fl_untiered VALUES (1, 'fluss-old'), (2, 'b'), (3, 'c')",
    )
    .await;
    let error = fails(
        &ctx,
        "ALTER TABLE fl_untiered SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    assert!(
        error.contains("cannot turn lake-stream mode of 'default.fl_untiered' off"),
        "{error}"
    );
    assert!(error.contains("3 change-log records"), "{error}");
    assert!(error.contains("not yet tiered into Paimon"), "{error}");
    assert!(error.contains("table.datalake.freshness"), "{error}");
    assert!(error.contains("turn the mode off again"), "{error}");
    // Still on, rows still served, and Fluss still tiers the table.
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fl_untiered$rt").await),
        vec!["1|fluss-old", "2|b", "3|c"]
    );
    assert_eq!(
        fluss_property(cluster, "fl_untiered", "table.datalake.enabled").await,
        Some(Some("true".to_string()))
    );
}

/// The Fluss table's description now.
async fn fluss_info(cluster: &Cluster, table: &str) -> fluss::metadata::TableInfo {
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    admin
        .get_table_info(&TablePath::new("default", table))
        .await
        .expect("table info")
}

/// Issue 37 item 12: a turn-off refused over records Fluss has not tiered
/// touches nothing: retried as its error advises, it never turns Fluss's
/// tiering of the table off and on again (which restarts the tiering and,
/// meanwhile, fails the table's writes with "tiering ... is off"), and
/// writers beside it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_refused_turn_off_leaves_tiering_and_writers_alone() {
    let cluster = any_cluster().await;
    // Fluss tiers these tables only every hour: their rows stay un-tiered.
    let harness = FlussHarness::on(cluster).with("fluss.table.datalake.freshness", "1h");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    let (_w2, writer_ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_refused (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '2', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_refused VALUES (1, 'a'), (2, 'b')").await;
    let before = fluss_info(cluster, "fl_refused").await;

    let writer = tokio::spawn(async move {
        let mut failed = Vec::new();
        for k in 10..40 {
            let sql = format!("INSERT INTO fl_refused VALUES ({k}, 'w')");
            if let Err(e) = crate::fluss::query(&writer_ctx, &sql).await {
                failed.push(format!("{sql}: {e}"));
            }
        }
        failed
    });
    let mut errors = Vec::new();
    for _ in 0..5 {
        errors.push(
            fails(
                &ctx,
                "ALTER TABLE fl_refused SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
            )
            .await,
        );
    }
    let failed = writer.await.expect("the writer");
    assert!(
        failed.is_empty(),
        "writes beside the refusals failed: {failed:?}"
    );
    let after = fluss_info(cluster, "fl_refused").await;
    assert_eq!(
        (after.get_table_id(), after.get_modified_time()),
        (before.get_table_id(), before.get_modified_time()),
        "a refused turn-off changed the Fluss table"
    );
    for error in errors {
        assert!(
            error.contains("cannot turn lake-stream mode of 'default.fl_refused' off"),
            "{error}"
        );
        assert!(error.contains("Nothing was changed"), "{error}");
        assert!(error.contains("'1h' for it"), "{error}");
    }
    assert_eq!(
        after.get_properties().get("table.datalake.enabled"),
        Some(&"true".to_string())
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT count(*) FROM fl_refused$rt").await),
        vec!["32"]
    );
}

/// Issue 37 item 13: a `DROP TABLE` that meets the table just made again
/// by another process (its Fluss table id changed, its buckets still being
/// given leaders while every tablet server is up) never blames a tablet
/// server that is down: it waits for the new table's leaders, or names
/// what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_drop_racing_a_create_elsewhere_names_the_real_cause() {
    let cluster = any_cluster().await;
    let harness = FlussHarness::on(cluster);
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    for round in 0..5 {
        run(
            &ctx,
            "CREATE TABLE fl_race (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
             WITH ('bucket' = '4', 'lakestream.enabled' = 'true')",
        )
        .await;
        // Another process drops the Fluss table and makes it again: the
        // DROP below meets a table Fluss has only just registered.
        let path = TablePath::new("default", "fl_race");
        let info = admin.get_table_info(&path).await.expect("table info");
        // As this crate makes it: tiering off (Fluss would check the Paimon
        // table), the lake's options left to the cluster.
        let mut properties: std::collections::HashMap<String, String> = info
            .get_properties()
            .iter()
            .filter(|(key, _)| !key.starts_with("table.datalake.paimon."))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        properties.insert("table.datalake.enabled".to_string(), "false".to_string());
        let descriptor = fluss::metadata::TableDescriptor::builder()
            .schema(info.get_schema().clone())
            .distributed_by(
                Some(info.get_num_buckets()),
                info.get_bucket_keys().to_vec(),
            )
            .properties(properties)
            .build()
            .expect("descriptor");
        admin.drop_table(&path, false).await.expect("drop");
        // Fluss 0.9.1's coordinator forgets a table made again before it
        // finished deleting the old one (see `until_created_taken_in`).
        tokio::time::sleep(Duration::from_secs(2)).await;
        admin
            .create_table(&path, &descriptor, false)
            .await
            .expect("create again");
        match crate::fluss::query(&ctx, "DROP TABLE fl_race").await {
            Ok(_) => {}
            Err(e) => {
                let error = e.to_string();
                assert!(
                    !error.contains("tablet server that is down")
                        && error.contains("dropped and created again"),
                    "round {round}: {error}"
                );
                run(&ctx, "DROP TABLE fl_race").await;
            }
        }
        assert!(
            !fluss_table_exists(cluster, "fl_race").await,
            "round {round}"
        );
    }
}

/// Issue 11 item 4: once everything is tiered the mode turns off, and Fluss's
/// tiering of the table stops with it, so rows Fluss still gets (a writer
/// that planned before the change) never land over later writes to Paimon.
/// Turning the mode on again starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    all(fluss_off, not(fluss_tiering_off)),
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
#[cfg_attr(
    fluss_tiering_off,
    ignore = "LAKESTREAM_FLUSS_TIERING=0: Fluss's tiering service is not started"
)]
async fn turning_off_stops_fluss_tiering_the_table() {
    let cluster = tiering().await;
    let harness = FlussHarness::on(cluster).with("fluss.table.datalake.freshness", "2s");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_stop (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_stop VALUES (1, 'fluss-old')").await;
    eventually(&ctx, "SELECT k, v FROM fl_stop", &["1|fluss-old"], PATIENCE).await;
    // Tiered: turning off is no longer refused...
    let notice = turn_off_once_tiered(&ctx, "fl_stop").await;
    assert_eq!(notice.len(), 1, "{notice:?}");
    assert!(notice[0].contains("no longer tiers"), "{notice:?}");
    // ...and Fluss no longer tiers the table.
    assert_eq!(
        fluss_property(cluster, "fl_stop", "table.datalake.enabled").await,
        Some(Some("false".to_string()))
    );
    // On again: tiering is back on.
    run(
        &ctx,
        "ALTER TABLE fl_stop SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert_eq!(
        fluss_property(cluster, "fl_stop", "table.datalake.enabled").await,
        Some(Some("true".to_string()))
    );
}

/// Upserts `(k, v)` into the Fluss table `default.<table>` (columns `k INT,
/// v STRING`) with fluss-rs directly, as another Fluss client would.
async fn fluss_upsert(cluster: &Cluster, table: &str, k: i32, v: &str) {
    let connection = cluster.connection().await;
    let table = connection
        .get_table(&TablePath::new("default", table))
        .await
        .expect("open the Fluss table");
    let writer = table
        .new_upsert()
        .and_then(|u| u.create_writer())
        .expect("an upsert writer");
    let mut row = fluss::row::GenericRow::new(2);
    row.set_field(0, k);
    row.set_field(1, v);
    let acknowledged = writer.upsert(&row).expect("queue the upsert");
    writer.flush().await.expect("flush");
    acknowledged.await.expect("the upsert is acknowledged");
}

/// Issue 11 items 4 and 5: a statement planned while the mode was on and run
/// once it is off writes nothing: Fluss no longer tiers the table, and the
/// error says so. Rows that reach the Fluss table after the mode was turned
/// off anyway (another Fluss client; a write racing the change) are never
/// tiered over rows written to Paimon directly since: turning the mode on
/// again over them is refused, with how many wait and the ways out, and the
/// newer row stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    all(fluss_off, not(fluss_tiering_off)),
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
#[cfg_attr(
    fluss_tiering_off,
    ignore = "LAKESTREAM_FLUSS_TIERING=0: Fluss's tiering service is not started"
)]
async fn turning_on_over_rows_fluss_got_after_off_is_refused_once_paimon_has_newer_rows() {
    let cluster = tiering().await;
    let harness = FlussHarness::on(cluster).with("fluss.table.datalake.freshness", "2s");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_late (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_late VALUES (1, 'a')").await;
    eventually(&ctx, "SELECT k, v FROM fl_late", &["1|a"], PATIENCE).await;
    // A write planned while the mode is on, run once it is off.
    let late = ctx
        .sql("INSERT INTO fl_late VALUES (1, 'fluss-old')")
        .await
        .expect("plan the write");
    turn_off_once_tiered(&ctx, "fl_late").await;
    let error = late
        .collect()
        .await
        .expect_err("a write planned before the mode was turned off")
        .to_string();
    assert!(
        error.contains("Fluss's tiering of the Fluss table 'default.fl_late' is off")
            && error.contains("Nothing was written"),
        "{error}"
    );
    assert_eq!(
        lines(&run(&ctx, "SELECT k, v FROM fl_late").await),
        vec!["1|a"]
    );
    fluss_upsert(cluster, "fl_late", 1, "fluss-old").await;
    // A newer value written to Paimon directly.
    run(
        &ctx,
        "INSERT INTO fl_late VALUES (1, 'direct-new', NULL, NULL, NULL)",
    )
    .await;
    let error = fails(
        &ctx,
        "ALTER TABLE fl_late SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert!(
        error.contains("cannot turn lake-stream mode of 'default.fl_late' on"),
        "{error}"
    );
    // The upsert of a key Fluss holds is two records: the old row and the new.
    assert!(error.contains("holds 2 change-log records"), "{error}");
    assert!(error.contains("not by Fluss's tiering"), "{error}");
    assert!(
        error.contains("drop the Fluss table 'default.fl_late'"),
        "{error}"
    );
    // Fluss's tiering never brings the older value back.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        lines(&run(&ctx, "SELECT k, v FROM fl_late").await),
        vec!["1|direct-new"]
    );
}

/// Issue 11 item 4: turning the mode off while Fluss cannot be reached works
/// (it touches only the catalog), and the notice says what could not be
/// done and what to do, rather than naming a tiering command Fluss has not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn turning_off_while_fluss_is_unreachable_says_what_to_do() {
    let cluster = any_cluster().await;
    let harness = FlussHarness::on(cluster);
    let (warehouse, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_off_down (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let down = harness.open(&warehouse, StoreCondition::Unreachable).await;
    let notice = lines(
        &run(
            &down,
            "ALTER TABLE fl_off_down SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
        )
        .await,
    );
    assert_eq!(notice.len(), 1, "{notice:?}");
    assert!(notice[0].contains("could not be asked"), "{notice:?}");
    assert!(
        notice[0].contains("turn the mode on and off again"),
        "{notice:?}"
    );
    assert!(!notice[0].contains("lakestream-cli tier"), "{notice:?}");
}

/// Issue 11 item 3: `DROP TABLE` of a table whose mode was turned off drops
/// the Fluss table too, so a table created again under the name never
/// shows the old rows, and Fluss's tiering never writes into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    all(fluss_off, not(fluss_tiering_off)),
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
#[cfg_attr(
    fluss_tiering_off,
    ignore = "LAKESTREAM_FLUSS_TIERING=0: Fluss's tiering service is not started"
)]
async fn dropping_a_table_whose_mode_is_off_drops_its_fluss_table() {
    let cluster = tiering().await;
    let harness = FlussHarness::on(cluster).with("fluss.table.datalake.freshness", "2s");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    let create = "CREATE TABLE fl_drop (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
                  WITH ('bucket' = '1', 'lakestream.enabled' = 'true')";
    run(&ctx, create).await;
    run(&ctx, "INSERT INTO fl_drop VALUES (1, 'old')").await;
    eventually(&ctx, "SELECT k, v FROM fl_drop", &["1|old"], PATIENCE).await;
    turn_off_once_tiered(&ctx, "fl_drop").await;
    run(&ctx, "DROP TABLE fl_drop").await;
    assert!(
        !fluss_table_exists(cluster, "fl_drop").await,
        "the Fluss table survived DROP TABLE of a table whose mode was off"
    );

    // Created again with the mode on: none of the old rows.
    run(&ctx, create).await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fl_drop$rt").await),
        Vec::<String>::new()
    );
    run(&ctx, "INSERT INTO fl_drop VALUES (2, 'new')").await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fl_drop$rt").await),
        vec!["2|new"]
    );
    // Dropped with the mode on: the Fluss table goes too.
    run(&ctx, "DROP TABLE fl_drop").await;
    assert!(!fluss_table_exists(cluster, "fl_drop").await);

    // Created again as a plain table: plain writes and reads, and tiering
    // still works for other tables.
    run(
        &ctx,
        "CREATE TABLE fl_drop (k INT NOT NULL, v STRING, PRIMARY KEY (k)) WITH ('bucket' = '1')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_drop VALUES (3, 'plain')").await;
    run(&ctx, create.replace("fl_drop", "fl_drop_other").as_str()).await;
    run(&ctx, "INSERT INTO fl_drop_other VALUES (4, 'other')").await;
    eventually(
        &ctx,
        "SELECT k, v FROM fl_drop_other",
        &["4|other"],
        PATIENCE,
    )
    .await;
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fl_drop").await),
        vec!["3|plain"]
    );
}

/// Issue 11 item 3: a Fluss table left behind by a drop that did not go
/// through a catalog with the Fluss store (another engine, or a catalog
/// without the store after the mode was off) is never served to a Paimon
/// table created later under its name: turning the mode on refuses it,
/// naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn a_fluss_table_left_by_another_drop_is_not_attached() {
    let cluster = any_cluster().await;
    let harness = FlussHarness::on(cluster);
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_left (id INT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_left VALUES (1, 'dropped')").await;
    // Another engine drops the Paimon table; the Fluss table stays.
    drop_paimon_table_directly(&cluster.warehouse, "fl_left");
    assert!(fluss_table_exists(cluster, "fl_left").await);

    let error = fails(
        &ctx,
        "CREATE TABLE fl_left (id INT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    assert!(error.contains("Fluss table 'default.fl_left'"), "{error}");
    assert!(error.contains("drop"), "{error}");
    // Nothing half-made, and the rows never show.
    let tables = lines(&run(&ctx, "SHOW TABLES").await);
    assert!(!tables.iter().any(|t| t.contains("fl_left")), "{tables:?}");
}

/// Removes a Paimon table of the filesystem catalog the way another engine
/// would, without this crate.
fn drop_paimon_table_directly(warehouse: &Path, table: &str) {
    let dir: PathBuf = warehouse.join("default.db").join(table);
    std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
}

/// The pid of a component (`coordinator`, `tablet`) of `cluster`.
fn component_pid(cluster: &Cluster, component: &str) -> String {
    let state = std::fs::read_to_string(&cluster.state_file).expect("the cluster's state file");
    let dir = state
        .lines()
        .find_map(|l| l.strip_prefix("STATE_DIR="))
        .map(|d| d.trim_matches('\'').to_string())
        .expect("the state file names the state directory");
    let file = Path::new(&dir)
        .join("pids")
        .join(format!("{component}.pid"));
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .to_string()
}

fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

/// Issue 11 items 3 and 7: with the coordinator not answering, `DROP TABLE`
/// fails and says so, leaving the table; with the tablet server down,
/// reads and writes say what failed, never that Fluss has no table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn errors_say_what_failed_while_a_server_is_down() {
    let dir = std::env::temp_dir().join(format!(
        "paimon-lakestream-fluss-down-{}",
        std::process::id()
    ));
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(&dir))
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("no Fluss cluster for the test: {e}"));
    let harness = FlussHarness::on(&cluster)
        .with("fluss.client.request-timeout", "4s")
        .with("lakestream.timeout", "15s");
    let (_w, ctx) = open(&harness, StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_down (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(
        &ctx,
        "CREATE TABLE fl_down_log (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_down VALUES (1, 'a')").await;
    run(&ctx, "INSERT INTO fl_down_log VALUES (1)").await;
    run(
        &ctx,
        "CREATE TABLE fl_gone (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;

    // The coordinator does not answer: the drop fails, naming the cluster,
    // and the Paimon table stays. (The coordinator may still drop the Fluss
    // table once it answers again: the drop is run again below.)
    let coordinator = component_pid(&cluster, "coordinator");
    signal(&coordinator, "-STOP");
    let error = fails(&ctx, "DROP TABLE fl_gone").await;
    signal(&coordinator, "-CONT");
    assert!(error.contains("default.fl_gone"), "{error}");
    assert!(
        error.contains("did not answer") || error.contains("no answer"),
        "{error}"
    );
    assert!(error.contains("DROP TABLE again"), "{error}");
    let tables = lines(&run(&ctx, "SHOW TABLES").await);
    assert!(tables.iter().any(|t| t.contains("fl_gone")), "{tables:?}");
    run(&ctx, "DROP TABLE fl_gone").await;
    assert!(!fluss_table_exists(&cluster, "fl_gone").await);
    let tables = lines(&run(&ctx, "SHOW TABLES").await);
    assert!(!tables.iter().any(|t| t.contains("fl_gone")), "{tables:?}");
    assert_eq!(
        lines(&run(&ctx, "SELECT * FROM fl_down$rt").await),
        vec!["1|a"]
    );

    // The tablet server is gone.
    // Stopped the way an operator stops it: it leaves the cluster, and its
    // buckets have no leader.
    signal(&component_pid(&cluster, "tablet"), "-TERM");
    tokio::time::sleep(Duration::from_secs(8)).await;
    for round in 0..3 {
        for sql in [
            "SELECT * FROM fl_down$rt",
            "INSERT INTO fl_down VALUES (2, 'b')",
            "SELECT * FROM fl_down_log$rt",
            "INSERT INTO fl_down_log VALUES (2)",
        ] {
            let error = fails(&ctx, sql).await;
            eprintln!("tablet server down, {sql}: {error}");
            assert!(
                !error.contains("has no table for"),
                "{round}: {sql}: {error}"
            );
            assert!(
                !error.contains("Turning the mode on"),
                "{round}: {sql}: {error}"
            );
            assert!(error.contains("default.fl_down"), "{round}: {sql}: {error}");
            assert!(
                error.contains("has no tablet server running"),
                "{round}: {sql}: {error}"
            );
        }
    }
    cluster.run("stop").expect("stop the cluster");
}

/// Issue 11: a process that dies while turning the mode off, after it turned
/// Fluss's tiering of the table off, leaves the table in lake-stream mode
/// with nothing tiering it. Writes then say so and write nothing, reads go
/// on, and turning the mode on again resumes tiering. (No tiering service
/// is needed: only the table's property is looked at.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn writes_are_refused_while_fluss_does_not_tier_the_table() {
    use fluss::metadata::{AlterConfig, AlterConfigOpType, AlterTableChanges};
    let cluster = any_cluster().await;
    let (_w, ctx) = open(&FlussHarness::on(cluster), StoreCondition::Reachable).await;
    run(
        &ctx,
        "CREATE TABLE fl_halfway (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO fl_halfway VALUES (1, 'a')").await;
    // What a turn-off that died midway leaves: tiering off in Fluss only.
    let connection = cluster.connection().await;
    let admin = connection.get_admin().expect("admin");
    admin
        .alter_table(
            &TablePath::new("default", "fl_halfway"),
            false,
            AlterTableChanges {
                config_changes: vec![AlterConfig::new(
                    "table.datalake.enabled",
                    Some("false".to_string()),
                    AlterConfigOpType::Set,
                )],
                ..Default::default()
            },
        )
        .await
        .expect("turn tiering off in Fluss");
    for sql in [
        "INSERT INTO fl_halfway VALUES (2, 'b')",
        "UPDATE fl_halfway SET v = 'A' WHERE k = 1",
        "DELETE FROM fl_halfway WHERE k = 1",
    ] {
        let error = fails(&ctx, sql).await;
        assert!(
            error.contains("Fluss's tiering of the Fluss table 'default.fl_halfway' is off")
                && error.contains("Turn the mode on"),
            "{sql}: {error}"
        );
    }
    assert_eq!(
        lines(&run(&ctx, "SELECT k, v FROM fl_halfway$rt").await),
        vec!["1|a"]
    );
    run(
        &ctx,
        "ALTER TABLE fl_halfway SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    assert_eq!(
        fluss_property(cluster, "fl_halfway", "table.datalake.enabled").await,
        Some(Some("true".to_string()))
    );
    run(&ctx, "INSERT INTO fl_halfway VALUES (2, 'b')").await;
    assert_eq!(
        lines(&run(&ctx, "SELECT k, v FROM fl_halfway$rt").await),
        vec!["1|a", "2|b"]
    );
}

/// Fluss 0.9.1's coordinator learns of a new table from a ZooKeeper watch,
/// and now and then misses one (apache/fluss#2710 is one such race, fixed
/// after 0.9.1): the table never gets a bucket leader and every write to it
/// fails. It failed a CI run on a table made again right after its drop,
/// while the coordinator was still deleting the old one. Here the
/// coordinator runs a third of the time (stopped and continued every few
/// milliseconds, as on a starved machine) while tables of several
/// databases are dropped and made again at once (DDL of one database takes
/// turns, hence one table per database). The miss is rare even so: without
/// the store making a missed table again, one of five runs of this shape
/// failed ("buckets [0, 1] of the new table still have no leader after
/// 60s"), so this test guards the path more than it proves it; no way was
/// found to make the coordinator miss a table on purpose (starving its
/// ZooKeeper threads did not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    fluss_off,
    ignore = "LAKESTREAM_FLUSS=0: the Fluss tests are left out (they start a Fluss cluster: Java 17, Maven, Maven Central)"
)]
async fn tables_made_again_on_a_starved_coordinator_all_take_writes() {
    const TABLES: usize = 4;
    let rounds: usize = std::env::var("LAKESTREAM_MADE_AGAIN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let dir = std::env::temp_dir().join(format!(
        "paimon-lakestream-fluss-again-{}",
        std::process::id()
    ));
    let cluster = tokio::task::spawn_blocking(move || Cluster::start(&dir))
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("no Fluss cluster for the test: {e}"));
    let (_w, ctx) = open(&FlussHarness::on(&cluster), StoreCondition::Reachable).await;
    let names: Vec<String> = (0..TABLES).map(|i| format!("fl_again_{i}.t")).collect();
    for name in &names {
        let database = name.split('.').next().unwrap_or_default();
        run(&ctx, &format!("CREATE DATABASE {database}")).await;
    }
    let coordinator = component_pid(&cluster, "coordinator");
    let _starved = Toggled::start(&coordinator);
    for round in 0..rounds {
        let made = futures::future::join_all(names.iter().enumerate().map(|(i, name)| {
            let ctx = &ctx;
            async move {
                for sql in [
                    format!("DROP TABLE IF EXISTS {name}"),
                    format!(
                        "CREATE TABLE {name} (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
                         WITH ('bucket' = '2', 'lakestream.enabled' = 'true')"
                    ),
                    format!("INSERT INTO {name} VALUES ({round}, 'v{i}')"),
                ] {
                    crate::fluss::query(ctx, &sql)
                        .await
                        .map_err(|e| format!("{sql}: {e}"))?;
                }
                Ok::<_, String>(())
            }
        }))
        .await;
        let failed: Vec<&String> = made.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(failed.is_empty(), "round {round}: {failed:#?}");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(
                lines(&run(&ctx, &format!("SELECT k, v FROM {name}$rt")).await),
                vec![format!("{round}|v{i}")],
                "{name}"
            );
        }
    }
}

/// A process stopped and continued over and over (4 ms stopped, 2 ms
/// running) until dropped, then left running.
struct Toggled {
    pid: String,
    toggler: std::process::Child,
}

impl Toggled {
    fn start(pid: &str) -> Self {
        let toggler = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap 'kill -CONT {pid}; exit 0' TERM; \
                 while :; do kill -STOP {pid}; sleep 0.004; kill -CONT {pid}; sleep 0.002; done"
            ))
            .spawn()
            .expect("start the toggling shell");
        Self {
            pid: pid.to_string(),
            toggler,
        }
    }
}

impl Drop for Toggled {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.toggler.id().to_string())
            .status();
        let _ = self.toggler.wait();
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.pid])
            .status();
    }
}
