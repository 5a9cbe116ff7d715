//! The embedded `local` store: the conformance suite, and what only a real
//! store on disk has to prove (durability, crashes, processes, tiering).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::util::pretty::pretty_format_batches;
use paimon_lakestream::LakeStreamContext;

use paimon_lakestream::testing::{
    conformance, Capability, StoreCondition, StoreHarness, Warehouse,
};

use crate::support::TestWarehouse;

/// The `local` store under the test warehouse (`<warehouse>/_lakestream`),
/// background tiering off so that tests decide when rows move.
pub struct LocalHarness;

#[async_trait]
impl StoreHarness for LocalHarness {
    fn identifier(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Vec<Capability> {
        vec![Capability::Deletes, Capability::Tiering]
    }

    async fn open(&self, warehouse: &Warehouse, condition: StoreCondition) -> LakeStreamContext {
        match condition {
            StoreCondition::Reachable => {
                // Explicit, so it works for REST catalogs too, whose
                // warehouse is a name rather than a directory.
                let path = warehouse.path().join("store");
                warehouse
                    .context_with(&[
                        ("lakestream.store", "local"),
                        ("local.tier-interval", "off"),
                        ("local.path", path.to_str().expect("utf-8 path")),
                    ])
                    .await
            }
            // A store directory that cannot be created: the store cannot open.
            StoreCondition::Unreachable | StoreCondition::Slow => {
                let blocker = warehouse.path().join("not-a-directory");
                std::fs::write(&blocker, b"a file where the store's directory should be")
                    .expect("write blocker");
                let path = blocker.join("store");
                warehouse
                    .context_with(&[
                        ("lakestream.store", "local"),
                        ("local.path", path.to_str().expect("utf-8 path")),
                    ])
                    .await
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_local() {
    conformance(Arc::new(LocalHarness)).await;
}

/// The store on `memory://`: writes, reads and tiering, with nothing on disk
/// but the Paimon warehouse (and its schema lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_runs_on_memory_urls_too() {
    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let url = format!("memory://lakestream-{}", std::process::id());
    let ctx = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.path", &url),
            ("local.tier-interval", "off"),
        ])
        .await;
    for sql in [
        "CREATE TABLE m (id INT) WITH ('lakestream.enabled' = 'true')",
        "INSERT INTO m VALUES (1), (2)",
    ] {
        ctx.sql(sql).await.unwrap().collect().await.unwrap();
    }
    let count = |sql: &'static str| {
        let ctx = &ctx;
        async move {
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            pretty_format_batches(&batches).unwrap().to_string()
        }
    };
    assert!(count("SELECT count(*) AS n FROM m$rt")
        .await
        .contains("| 2 |"));
    assert!(count("SELECT count(*) AS n FROM m").await.contains("| 0 |"));
    count("SELECT * FROM lakestream_tier('m')").await;
    assert!(count("SELECT count(*) AS n FROM m").await.contains("| 2 |"));
    assert!(count("SELECT count(*) AS n FROM m$rt")
        .await
        .contains("| 2 |"));
    // Nothing of the store is on disk. What `<warehouse>/_lakestream` may
    // hold is the warehouse's own schema lock (`schema-lock/`), which
    // every DDL on a local warehouse takes whatever the store is.
    let on_disk: Vec<_> = std::fs::read_dir(warehouse.path().join("warehouse").join("_lakestream"))
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        on_disk.iter().all(|name| name == "schema-lock"),
        "the store on memory URLs left files on disk: {on_disk:?}"
    );
}

/// A tiering shows how far it has got while it runs (the shell's status
/// line reads this board), and leaves the board when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tiering_reports_its_progress() {
    use paimon_lakestream::progress::running_work;

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    // One segment per commit: 12 commits, each its own Paimon snapshot.
    let ctx = Arc::new(
        warehouse
            .context_with(&[
                ("lakestream.store", "local"),
                ("local.tier-interval", "off"),
                ("local.tier-max-rows", "1"),
            ])
            .await,
    );
    ctx.sql("CREATE TABLE progress_board (id INT) WITH ('lakestream.enabled' = 'true')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    for i in 0..12 {
        ctx.sql(&format!("INSERT INTO progress_board VALUES ({i}), ({i})"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
    // Every update the tiering makes, in order: no polling, no timing.
    let updates = paimon_lakestream::progress::subscribe();
    ctx.sql("SELECT * FROM lakestream_tier('progress_board')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let seen: Vec<(u64, u64)> = updates
        .take()
        .into_iter()
        .filter(|s| s.table == "default.progress_board" && s.activity == "tiering")
        .inspect(|s| assert_eq!(s.unit, "rows"))
        .map(|s| (s.done, s.total))
        .collect();
    // It starts knowing nothing, counts the store's 24 rows, then reports
    // each of the 12 commits of 2 rows.
    let mut expected = vec![(0, 0), (0, 24)];
    expected.extend((1..=12).map(|commit| (commit * 2, 24)));
    assert_eq!(seen, expected);
    assert!(running_work()
        .iter()
        .all(|s| s.table != "default.progress_board"));
}

/// A context on `warehouse` whose `local` store lives in `<warehouse>/<dir>`.
async fn store_at(warehouse: &TestWarehouse, dir: &str) -> LakeStreamContext {
    let path = warehouse.path().join(dir);
    warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", path.to_str().expect("utf-8 path")),
        ])
        .await
}

/// The value of table option `key` of `default.t`, if set.
async fn option_of(ctx: &LakeStreamContext, key: &str) -> Option<String> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::DataType;
    let batches = ctx
        .sql(&format!("SELECT value FROM t$options WHERE key = '{key}'"))
        .await
        .expect("plan")
        .collect()
        .await
        .expect("options");
    batches
        .iter()
        .flat_map(|b| {
            let column = cast(b.column(0), &DataType::Utf8).expect("text");
            column
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .next()
}

/// One warehouse, two catalogs whose `local.path` differ: the table is
/// served by the store that turned its mode on; the other catalog's store
/// refuses to read, write, tier or take it over, naming both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_is_served_by_the_store_it_is_bound_to_only() {
    use crate::support::{run, sorted_ids, try_run};

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let a = store_at(&warehouse, "store-a").await;
    let b = store_at(&warehouse, "store-b").await;
    run(
        &a,
        "CREATE TABLE t (id INT NOT NULL, v STRING, PRIMARY KEY (id)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&a, "INSERT INTO t VALUES (1, 'a')").await;
    let binding = option_of(&a, "lakestream.store-binding")
        .await
        .expect("a binding is recorded");
    assert!(binding.starts_with("local:file://"), "{binding}");
    assert!(binding.contains("store-a"), "{binding}");

    for statement in [
        "INSERT INTO t VALUES (2, 'b')",
        "SELECT * FROM t$rt",
        "DELETE FROM t WHERE id = 1",
        "CALL sys.lakestream_tier('default.t')",
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    ] {
        let error = try_run(&b, statement)
            .await
            .expect_err("another store must not serve the table");
        assert!(error.contains("'default.t'"), "{statement}: {error}");
        assert!(error.contains("bound to store"), "{statement}: {error}");
        assert!(error.contains("store-a"), "{statement}: {error}");
        assert!(error.contains("store-b"), "{statement}: {error}");
    }
    // Nobody sets the binding by hand.
    let error = try_run(
        &a,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.store-binding' = 'local:file:///x/')",
    )
    .await
    .expect_err("the binding is not settable");
    assert!(error.contains("lakestream.store-binding"), "{error}");
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1]);
    assert_eq!(
        option_of(&a, "lakestream.store-binding").await,
        Some(binding)
    );
}

/// The normal paths: the same directory through another path is the same
/// store; a table turned off through its store can be turned on through
/// another, which serves it from then on; a table turned on before
/// bindings were recorded is served, and gets one the next time it is
/// turned on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_moves_to_another_store_when_turned_off_and_on() {
    use crate::support::{run, sorted_ids, try_run};

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let a = store_at(&warehouse, "store-a").await;
    std::os::unix::fs::symlink(
        warehouse.path().join("store-a"),
        warehouse.path().join("alias-a"),
    )
    .expect("symlink");
    let alias = store_at(&warehouse, "alias-a").await;
    let b = store_at(&warehouse, "store-b").await;
    run(
        &a,
        "CREATE TABLE t (id INT NOT NULL, v STRING, PRIMARY KEY (id)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    run(&alias, "INSERT INTO t VALUES (1, 'a')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t$rt").await, vec![1]);

    // Off through its store (which tiers), on through another.
    run(
        &a,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    run(
        &b,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    let binding = option_of(&b, "lakestream.store-binding")
        .await
        .expect("binding");
    assert!(binding.contains("store-b"), "{binding}");
    run(&b, "INSERT INTO t VALUES (2, 'b')").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 2]);
    let error = try_run(&a, "INSERT INTO t VALUES (3, 'c')")
        .await
        .expect_err("the first store no longer serves the table");
    assert!(error.contains("store-b"), "{error}");

    // A table from before bindings: served, and bound when turned on again.
    raw_alter(
        &warehouse,
        vec![paimon::spec::SchemaChange::RemoveOption {
            key: "lakestream.store-binding".to_string(),
        }],
    )
    .await;
    run(&b, "INSERT INTO t VALUES (3, 'c')").await;
    assert_eq!(sorted_ids(&b, "SELECT id FROM t$rt").await, vec![1, 2, 3]);
    run(
        &b,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    let binding = option_of(&b, "lakestream.store-binding").await;
    assert!(binding.is_some_and(|b| b.contains("store-b")));
    run(&b, "CALL sys.lakestream_tier('default.t')").await;
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 2, 3]);
}

/// A write learns that the store lost the table while it runs: its error
/// names the table, and does not claim it was raised "during planning".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_store_table_is_gone_fails_at_run_time() {
    use crate::support::{run, try_run};

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let ctx = store_at(&warehouse, "store").await;
    run(
        &ctx,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (1)").await;
    std::fs::remove_dir_all(warehouse.path().join("store")).expect("remove the store");
    let error = try_run(&ctx, "INSERT INTO t VALUES (2)")
        .await
        .expect_err("the store has no table for t");
    assert!(error.contains("default.t"), "{error}");
    assert!(!error.contains("during planning"), "{error}");
}

/// The raw Paimon catalog of `warehouse`: no lake-stream guards, as a
/// catalog that names no store (or another engine) changes the table.
async fn raw_alter(warehouse: &TestWarehouse, changes: Vec<paimon::spec::SchemaChange>) {
    let catalog =
        paimon::CatalogFactory::create(paimon::Options::from_map(warehouse.catalog_options()))
            .await
            .expect("catalog");
    catalog
        .alter_table(
            &paimon::catalog::Identifier::new("default", "t"),
            changes,
            false,
        )
        .await
        .expect("alter the table");
}

/// Turns the mode off as a catalog without a store would: no tiering first.
fn mode_off() -> paimon::spec::SchemaChange {
    paimon::spec::SchemaChange::set_option("lakestream.enabled".to_string(), "false".to_string())
}

/// Adds a `STRING` column `name` (back).
fn add_string_column(name: &str) -> paimon::spec::SchemaChange {
    use paimon::spec::{DataType, VarCharType};
    paimon::spec::SchemaChange::add_column(
        name.to_string(),
        DataType::VarChar(VarCharType::new(VarCharType::MAX_LENGTH).expect("type")),
    )
}

/// Rows left in the store when the mode went off without tiering, then a
/// column of theirs dropped: tiering never stops at them in silence (it
/// used to commit nothing and report success, for ever), and the mode is
/// not turned on again over them. Once the column is back, they tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_whose_column_was_dropped_stop_tiering_loudly() {
    use crate::support::{run, sorted_ids, try_run};
    use paimon::spec::SchemaChange;
    use paimon_lakestream::catalog::WhenOff;

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let ctx = store_at(&warehouse, "store").await;
    run(
        &ctx,
        "CREATE TABLE t (id INT, c STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (1, 'x')").await;
    raw_alter(&warehouse, vec![mode_off()]).await;
    raw_alter(&warehouse, vec![SchemaChange::drop_column("c".to_string())]).await;

    let error = try_run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await
    .expect_err("the mode must not go on over rows whose column is gone");
    assert!(error.contains("'default.t'"), "{error}");
    assert!(error.contains("'c'"), "{error}");

    let catalog = ctx.catalog("paimon").expect("catalog");
    let id = paimon::catalog::Identifier::new("default", "t");
    let error = catalog
        .tier(&id, WhenOff::Tier)
        .await
        .expect_err("tiering must not pass rows it cannot commit whole")
        .to_string();
    assert!(error.contains("'default.t'"), "{error}");
    assert!(error.contains("'c'"), "{error}");
    assert!(error.contains("position 0"), "{error}");

    raw_alter(&warehouse, vec![add_string_column("c")]).await;
    let report = catalog.tier(&id, WhenOff::Tier).await.expect("tier");
    assert_eq!(report.rows, 1);
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![1]);

    // Such a write is sound, so it is never set aside (processes that read
    // it keep it, and would serve and tier it still): the way out is to add
    // the column back.
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (2, 'y')").await;
    let error = try_run(&ctx, "CALL sys.lakestream_set_aside('default.t', 1)")
        .await
        .expect_err("a sound write with the table's columns is not set aside");
    assert!(error.contains("not damaged"), "{error}");
    raw_alter(&warehouse, vec![mode_off()]).await;
    raw_alter(&warehouse, vec![SchemaChange::drop_column("c".to_string())]).await;
    let error = try_run(&ctx, "CALL sys.lakestream_set_aside('default.t', 1)")
        .await
        .expect_err("a sound write whose column is gone is not set aside either");
    assert!(error.contains("not damaged"), "{error}");
    assert!(error.contains("column 'c'"), "{error}");
    assert!(error.contains("ADD COLUMN"), "{error}");
    raw_alter(&warehouse, vec![add_string_column("c")]).await;
    let report = catalog.tier(&id, WhenOff::Tier).await.expect("tier");
    assert_eq!((report.rows, report.position), (1, 2));
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![1, 2]);
}

/// A write planned while the mode was on, which lands after the mode went
/// off, a column of it was dropped, and the mode went on again: it reached
/// the store with values for a column the table lacks, which tiering cannot
/// commit. It is never acknowledged; once the column is back, it is tiered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_column_went_while_it_ran_is_not_acknowledged() {
    use crate::support::{run, sorted_ids};
    use paimon::spec::SchemaChange;
    use paimon_lakestream::catalog::WhenOff;

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let ctx = store_at(&warehouse, "store").await;
    run(
        &ctx,
        "CREATE TABLE t (id INT, c STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let planned = ctx
        .sql("INSERT INTO t VALUES (1, 'x')")
        .await
        .expect("plan the write");
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    raw_alter(&warehouse, vec![SchemaChange::drop_column("c".to_string())]).await;
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
    )
    .await;
    let error = planned
        .collect()
        .await
        .expect_err("a write with values for a column the table lacks is not acknowledged")
        .to_string();
    assert!(error.contains("outcome"), "{error}");
    assert!(error.contains("'default.t'"), "{error}");
    assert!(error.contains("Column 'c'"), "{error}");
    assert!(error.contains("ADD COLUMN"), "{error}");

    // Tiering stops at it, saying what to do; with the column back it goes on.
    let catalog = ctx.catalog("paimon").expect("catalog");
    let id = paimon::catalog::Identifier::new("default", "t");
    let error = catalog
        .tier(&id, WhenOff::Tier)
        .await
        .expect_err("tiering must not commit the write without its column")
        .to_string();
    assert!(error.contains("column 'c'"), "{error}");
    assert!(error.contains("ADD COLUMN"), "{error}");
    assert!(!error.contains("set_aside"), "{error}");
    raw_alter(&warehouse, vec![add_string_column("c")]).await;
    let report = catalog.tier(&id, WhenOff::Tier).await.expect("tier");
    assert_eq!(report.rows, 1);
    assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![1]);
}

/// As above, with the column added again under its name but another type:
/// by name the column is there, but it is another field. The write is not
/// acknowledged, and a value the new type cannot hold stops tiering (and
/// reads) rather than become a null; with the column back as it was, the
/// value is tiered as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_column_changed_type_while_it_ran_keeps_its_values() {
    use crate::support::{run, sorted_rows, try_run};
    use paimon::spec::{DataType, IntType, SchemaChange};
    use paimon_lakestream::catalog::WhenOff;

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let ctx = store_at(&warehouse, "store").await;
    run(
        &ctx,
        "CREATE TABLE t (id INT, c STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    let planned = ctx
        .sql("INSERT INTO t VALUES (1, 'x')")
        .await
        .expect("plan the write");
    const OFF: &str = "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')";
    const ON: &str = "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')";
    run(&ctx, OFF).await;
    raw_alter(&warehouse, vec![SchemaChange::drop_column("c".to_string())]).await;
    raw_alter(
        &warehouse,
        vec![SchemaChange::add_column(
            "c".to_string(),
            DataType::Int(IntType::new()),
        )],
    )
    .await;
    run(&ctx, ON).await;
    let error = planned
        .collect()
        .await
        .expect_err("a write whose column changed is not acknowledged")
        .to_string();
    assert!(error.contains("outcome"), "{error}");
    assert!(error.contains("Column 'c'"), "{error}");

    let catalog = ctx.catalog("paimon").expect("catalog");
    let id = paimon::catalog::Identifier::new("default", "t");
    let error = catalog
        .tier(&id, WhenOff::Tier)
        .await
        .expect_err("'x' is no INT: tiering must not commit it as a null")
        .to_string();
    assert!(error.contains("'x'") || error.contains("Int32"), "{error}");
    let error = try_run(&ctx, "SELECT * FROM t$rt")
        .await
        .expect_err("nor may a read show it as a null");
    assert!(error.contains("'x'") || error.contains("Int32"), "{error}");

    run(&ctx, OFF).await;
    raw_alter(&warehouse, vec![SchemaChange::drop_column("c".to_string())]).await;
    raw_alter(&warehouse, vec![add_string_column("c")]).await;
    let report = catalog.tier(&id, WhenOff::Tier).await.expect("tier");
    assert_eq!(report.rows, 1);
    assert_eq!(sorted_rows(&ctx, "SELECT * FROM t").await, vec!["1|x"]);
}

/// An INSERT planned while the mode was on and run after it went off: its
/// rows are in Paimon, or the statement fails saying the outcome is
/// unknown. Never an acknowledgement of rows left where no read sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_planned_before_the_mode_went_off_is_never_acknowledged_unseen() {
    Box::pin(planned_before_the_mode_went_off(
        crate::support::CatalogKind::Filesystem,
    ))
    .await;
}

/// The same through a REST catalog, whose schemas are its server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_planned_before_the_mode_went_off_is_never_acknowledged_unseen_on_rest() {
    Box::pin(planned_before_the_mode_went_off(
        crate::support::CatalogKind::Rest,
    ))
    .await;
}

async fn planned_before_the_mode_went_off(kind: crate::support::CatalogKind) {
    use crate::support::{run, sorted_ids};

    let warehouse = TestWarehouse::new(kind).await;
    let ctx = store_at(&warehouse, "store").await;
    run(
        &ctx,
        "CREATE TABLE t (id INT, v STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    run(&ctx, "INSERT INTO t VALUES (0, 'z')").await;
    let planned = ctx
        .sql("INSERT INTO t VALUES (1, 'a')")
        .await
        .expect("plan the write");
    let empty = ctx
        .sql("INSERT INTO t SELECT 5, 'e' WHERE false")
        .await
        .expect("plan a write of no rows");
    run(
        &ctx,
        "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
    )
    .await;
    // A write of no rows wrote nothing anywhere: nothing is unknown.
    empty.collect().await.expect("a write of no rows");
    match planned.collect().await {
        Ok(_) => assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![0, 1]),
        Err(e) => {
            let error = e.to_string();
            assert!(error.contains("'default.t'"), "{error}");
            assert!(error.contains("turned off"), "{error}");
            assert_eq!(sorted_ids(&ctx, "SELECT id FROM t").await, vec![0]);
        }
    }
}

/// A writer that keeps inserting while another context turns the mode
/// off: every row it was told is written is in Paimon once the ALTER has
/// returned, whether the write reached the store before the first tiering,
/// between it and the option's commit, or after (when it is not
/// acknowledged). Rounds at seeded delays, each on a table of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_the_mode_going_off_are_in_paimon_once_acknowledged() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crate::support::{run, sorted_ids};

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let writer = Arc::new(store_at(&warehouse, "store").await);
    let admin = store_at(&warehouse, "store").await;
    let mut seed: u64 = 0x5eed_0f0f;
    for round in 0..8 {
        let table = format!("race_{round}");
        run(
            &admin,
            &format!(
                "CREATE TABLE {table} (id INT, v STRING) WITH ('lakestream.enabled' = 'true')"
            ),
        )
        .await;
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (writer, stop, table) = (Arc::clone(&writer), Arc::clone(&stop), table.clone());
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                let mut id = 0i64;
                while !stop.load(Ordering::SeqCst) {
                    let sql = format!("INSERT INTO {table} VALUES ({id}, 'x')");
                    let done = match writer.sql(&sql).await {
                        Ok(df) => df.collect().await.is_ok(),
                        Err(_) => false,
                    };
                    if done {
                        acknowledged.push(id);
                    }
                    id += 1;
                }
                acknowledged
            })
        };
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        tokio::time::sleep(std::time::Duration::from_millis(5 + (seed >> 33) % 40)).await;
        let said = admin
            .sql(&format!(
                "ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled' = 'false')"
            ))
            .await
            .expect("plan ALTER")
            .collect()
            .await
            .expect("ALTER");
        let said = pretty_format_batches(&said).expect("format").to_string();
        stop.store(true, Ordering::SeqCst);
        let acknowledged = task.await.expect("writer");
        if said.contains("wait in store") {
            eprintln!("round {round}: {said}");
            // Rows that reached the store between the tiering and the
            // option's commit: the notice names them, and they tier once
            // the writer stops, as it says.
            assert!(said.contains("tier --once"), "{said}");
            let id = paimon::catalog::Identifier::new("default", &table);
            writer
                .catalog("paimon")
                .expect("catalog")
                .tier(&id, paimon_lakestream::catalog::WhenOff::Tier)
                .await
                .expect("tier what the notice names");
        }
        let in_paimon = sorted_ids(&admin, &format!("SELECT id FROM {table}")).await;
        let lost: Vec<i64> = acknowledged
            .iter()
            .filter(|id| in_paimon.binary_search(id).is_err())
            .copied()
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: acknowledged rows {lost:?} are not in Paimon ({} acknowledged); \
             the ALTER said:\n{said}",
            acknowledged.len()
        );
    }
}
