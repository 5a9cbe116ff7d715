//! The catalog decorator through the `paimon::Catalog` API, for what SQL does
//! not reach: branches, defaulted methods answering as the wrapped catalog
//! does, `as_any`.

use std::collections::HashMap;
use std::sync::Arc;

use paimon::catalog::{Catalog, Identifier};
use paimon::spec::{DataType, IntType, Schema, SchemaChange};
use paimon::table::BranchManager;
use paimon_lakestream::options::CatalogStoreOptions;
use paimon_lakestream::store::{StoreFactory, StoreRegistry};
use paimon_lakestream::{Error, ErrorKind, LakeStreamCatalog};

use crate::memory_store;
use crate::support::{run, sorted_ids, CatalogKind, TestWarehouse};

/// The decorator over `warehouse`'s catalog, naming the memory test store.
async fn decorated(warehouse: &TestWarehouse) -> LakeStreamCatalog {
    let inner =
        paimon::CatalogFactory::create(paimon::Options::from_map(warehouse.catalog_options()))
            .await
            .expect("catalog");
    let registry = Arc::new(StoreRegistry::new());
    registry.register(Arc::clone(&warehouse.memory) as Arc<dyn StoreFactory>);
    LakeStreamCatalog::new(
        "paimon",
        inner,
        CatalogStoreOptions::for_store(memory_store::IDENTIFIER, Default::default()).unwrap(),
        registry,
        HashMap::new(),
    )
}

fn schema(options: &[(&str, &str)]) -> Schema {
    let mut builder = Schema::builder().column("id", DataType::Int(IntType::new()));
    for (k, v) in options {
        builder = builder.option(*k, *v);
    }
    builder.build().expect("schema")
}

fn enable() -> Vec<SchemaChange> {
    vec![SchemaChange::SetOption {
        key: "lakestream.enabled".to_string(),
        value: "true".to_string(),
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_cannot_be_enabled_through_the_api() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let catalog = decorated(&warehouse).await;
    catalog
        .create_database("db", true, HashMap::new())
        .await
        .unwrap();
    let t = Identifier::new("db", "t");
    catalog.create_table(&t, schema(&[]), false).await.unwrap();
    let table = catalog.get_table(&t).await.unwrap();
    BranchManager::new(table.file_io().clone(), table.location().to_string())
        .create_branch("b1")
        .await
        .unwrap();

    let err = catalog
        .alter_table(&Identifier::new("db", "t$branch_b1"), enable(), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot set 'lakestream.enabled'='true' on branch 'db.t$branch_b1'"),
        "{err}"
    );
    let err = catalog
        .create_table(
            &Identifier::new("db", "u$branch_b1"),
            schema(&[("lakestream.enabled", "true")]),
            false,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("on branch 'db.u$branch_b1'"), "{err}");
    // Branches read as in Paimon, through SQL too.
    let mut ctx = paimon_lakestream::LakeStreamContext::new();
    ctx.register_catalog("paimon", warehouse.catalog_options())
        .await
        .unwrap();
    let branch = ctx
        .sql("SELECT count(*) FROM paimon.db.t$branch_b1")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(branch[0].num_rows(), 1);
    let err = ctx
        .sql("SELECT * FROM paimon.db.t$branch_b1$rt")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("main branch's data only"), "{err}");
    // The main branch can be enabled, and then its rename is refused.
    catalog.alter_table(&t, enable(), false).await.unwrap();
    let err = catalog
        .rename_table(&t, &Identifier::new("db", "u"), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot rename lake-stream table 'db.t'"),
        "{err}"
    );
    assert!(catalog.get_table(&t).await.is_ok());
}

async fn answers_as_the_wrapped_catalog(kind: CatalogKind) {
    let warehouse = TestWarehouse::new(kind).await;
    let catalog = decorated(&warehouse).await;
    let any = catalog.as_any().expect("as_any is forwarded");
    match kind {
        CatalogKind::Filesystem => assert!(any.is::<paimon::FileSystemCatalog>()),
        CatalogKind::Rest => assert!(any.is::<paimon::catalog::RESTCatalog>()),
    }
    catalog
        .create_database("db", true, HashMap::new())
        .await
        .unwrap();
    let t = Identifier::new("db", "t");
    catalog.create_table(&t, schema(&[]), false).await.unwrap();
    assert_eq!(catalog.list_tables("db").await.unwrap(), vec!["t"]);
    // Methods the trait defaults: the decorator answers as the wrapped
    // catalog does. This is all it checks: a missing forward would answer
    // the same here (the filesystem catalog keeps both defaults, the REST
    // test server serves no views, and `list_partitions`' default reads the
    // same files), so the name claims equal answers, not forwarding.
    let direct: Arc<dyn Catalog> =
        paimon::CatalogFactory::create(paimon::Options::from_map(warehouse.catalog_options()))
            .await
            .unwrap();
    assert_eq!(
        catalog.list_partitions(&t).await.map(|p| p.len()).ok(),
        direct.list_partitions(&t).await.map(|p| p.len()).ok()
    );
    assert_eq!(
        catalog.list_views("db").await.is_ok(),
        direct.list_views("db").await.is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_the_wrapped_catalog_filesystem() {
    answers_as_the_wrapped_catalog(CatalogKind::Filesystem).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_as_the_wrapped_catalog_rest() {
    answers_as_the_wrapped_catalog(CatalogKind::Rest).await;
}

/// Removing an option that fixes merging or bucketing (no SQL statement
/// does, the API does) is refused while the mode is on, like setting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_options_cannot_be_removed_while_the_mode_is_on() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let catalog = decorated(&warehouse).await;
    catalog
        .create_database("db", true, HashMap::new())
        .await
        .unwrap();
    let t = Identifier::new("db", "t");
    let creation = Schema::builder()
        .column("id", DataType::Int(IntType::with_nullable(false)))
        .column("v", DataType::Int(IntType::new()))
        .primary_key(["id"])
        .option("bucket", "1")
        .option("merge-engine", "partial-update")
        .option("lakestream.enabled", "true")
        .build()
        .expect("schema");
    catalog.create_table(&t, creation, false).await.unwrap();
    let remove = |key: &str| {
        vec![SchemaChange::RemoveOption {
            key: key.to_string(),
        }]
    };
    for key in ["merge-engine", "bucket"] {
        let err = catalog
            .alter_table(&t, remove(key), false)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "cannot change '{key}' (removing it) of lake-stream table 'db.t'"
            )),
            "{err}"
        );
    }
    // Removing one that is not set changes nothing.
    catalog
        .alter_table(&t, remove("sequence.field"), false)
        .await
        .unwrap();
    let options = catalog
        .get_table(&t)
        .await
        .unwrap()
        .schema()
        .options()
        .clone();
    assert_eq!(
        options.get("merge-engine").map(String::as_str),
        Some("partial-update")
    );
    assert_eq!(options.get("bucket").map(String::as_str), Some("1"));
}

/// A `CREATE` whose store does not attach the table. A store that refuses
/// (user input, not supported, conflict) holds nothing: the Paimon table is
/// dropped again. One that could not answer (unavailable, corrupt,
/// internal) may hold the table already, and another process's
/// `CREATE TABLE IF NOT EXISTS` may have attached it and had writes
/// acknowledged: the Paimon table stays, the error keeps the store's kind
/// and says that the same statement with `IF NOT EXISTS` finishes it, and
/// that statement does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_drops_its_paimon_table_only_when_the_store_refuses() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let catalog = decorated(&warehouse).await;
    catalog
        .create_database("db", true, HashMap::new())
        .await
        .unwrap();
    let ctx = warehouse
        .context_with(&[("lakestream.store", memory_store::IDENTIFIER)])
        .await;
    let attach_fails = &warehouse.memory.switches.attach_fails;
    for kind in ErrorKind::ALL {
        let name = format!("t_{kind:?}").to_lowercase();
        let t = Identifier::new("db", &name);
        let creation = || schema(&[("lakestream.enabled", "true")]);
        *attach_fails.lock().unwrap() = Some(kind);
        let error = catalog
            .create_table(&t, creation(), false)
            .await
            .unwrap_err();
        *attach_fails.lock().unwrap() = None;
        let text = error.to_string();
        assert_eq!(Error::Paimon(error).kind(), kind, "{text}");
        let kept = catalog.get_table(&t).await.is_ok();
        if kind.is_users_to_fix() {
            assert!(
                !kept,
                "{kind:?}: the refused table is dropped again: {text}"
            );
            continue;
        }
        assert!(kept, "{kind:?}: the table is kept: {text}");
        assert!(
            text.contains(&format!("'db.{name}'")) && text.contains("IF NOT EXISTS"),
            "{kind:?}: {text}"
        );
        catalog.create_table(&t, creation(), true).await.unwrap();
        run(&ctx, &format!("INSERT INTO db.{name} VALUES (1)")).await;
        assert_eq!(
            sorted_ids(&ctx, &format!("SELECT * FROM db.{name}$rt")).await,
            vec![1],
            "{kind:?}"
        );
    }
}

/// On a REST catalog the server makes and keeps a table's tags: `CALL
/// sys.create_tag` asks it, as the catalog API's `create_tag` does (one
/// path), and answers the snapshot the server tagged. (The call used to
/// write the tag file itself, which the server never heard of.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_of_a_rest_catalog_are_made_by_its_server() {
    use crate::support::{sorted_rows, try_run};

    let warehouse = TestWarehouse::new(CatalogKind::Rest).await;
    let ctx = warehouse.context_with(&[]).await;
    run(&ctx, "CREATE TABLE t (id INT)").await;
    run(&ctx, "INSERT INTO t VALUES (1)").await;
    run(&ctx, "INSERT INTO t VALUES (2)").await;
    assert_eq!(
        sorted_rows(
            &ctx,
            "CALL sys.create_tag(table => 'default.t', tag => 'latest')"
        )
        .await,
        ["default.t|latest|2"]
    );
    assert_eq!(
        sorted_rows(
            &ctx,
            "CALL sys.create_tag(table => 'default.t', tag => 'first', snapshot_id => 1)"
        )
        .await,
        ["default.t|first|1"]
    );
    let again = try_run(
        &ctx,
        "CALL sys.create_tag(table => 'default.t', tag => 'first')",
    )
    .await
    .expect_err("the name is taken");
    assert!(again.contains("already exist"), "{again}");
    let missing = try_run(
        &ctx,
        "CALL sys.create_tag(table => 'default.t', tag => 'gone', snapshot_id => 9)",
    )
    .await
    .expect_err("no snapshot 9");
    assert!(missing.contains('9'), "{missing}");
    // Through the catalog API too.
    let t = Identifier::new("default", "t");
    let catalog = decorated(&warehouse).await;
    catalog.create_tag(&t, "api", Some(1), false).await.unwrap();
    catalog.create_tag(&t, "api", Some(2), true).await.unwrap();
    // The server has them all, over the snapshots asked for.
    let server: Arc<dyn Catalog> =
        paimon::CatalogFactory::create(paimon::Options::from_map(warehouse.catalog_options()))
            .await
            .unwrap();
    for (tag, snapshot) in [("latest", 2), ("first", 1), ("api", 1)] {
        let made = server
            .get_tag(&t, tag)
            .await
            .unwrap_or_else(|e| panic!("{tag}: {e}"));
        assert_eq!(made.snapshot.id(), snapshot, "{tag}");
    }
    assert!(server.get_tag(&t, "gone").await.is_err());
    // Readers of the table see them.
    assert_eq!(
        sorted_rows(&ctx, "SELECT tag_name, snapshot_id FROM t$tags").await,
        ["api|1", "first|1", "latest|2"]
    );
}
