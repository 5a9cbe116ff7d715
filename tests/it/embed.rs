//! Lake-stream tables in an app's own `SessionContext` (no SQLContext):
//! reads, writes, streaming setting, tiering and connector mode.

use std::collections::HashMap;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
use paimon::catalog::{Catalog, Identifier};
use paimon::spec::{DataType, IntType, Schema, VarCharType};
use paimon_lakestream::LakeStreamExtension;

async fn rows(ctx: &SessionContext, sql: &str) -> String {
    let batches: Vec<RecordBatch> = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pretty_format_batches(&batches).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_session_reads_writes_and_tiers_lakestream_tables() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse).unwrap();
    let ctx = SessionContext::new();
    let lakestream = LakeStreamExtension::install(&ctx).unwrap();
    let options = HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
        ("local.tier-interval".to_string(), "off".to_string()),
    ]);
    let catalog = lakestream
        .register_catalog(&ctx, "lake", options)
        .await
        .unwrap();
    // DDL is not planned by DataFusion: the app creates tables through the catalog.
    let schema = Schema::builder()
        .column("id", DataType::Int(IntType::new()))
        .column("v", DataType::VarChar(VarCharType::new(100).unwrap()))
        .option("lakestream.enabled", "true")
        .build()
        .unwrap();
    catalog
        .create_table(&Identifier::new("default", "events"), schema, false)
        .await
        .unwrap();

    rows(
        &ctx,
        "INSERT INTO lake.default.events VALUES (1, 'a'), (2, 'b')",
    )
    .await;
    let fresh = rows(&ctx, "SELECT * FROM lake.default.events$rt ORDER BY id").await;
    assert!(fresh.contains("| 2  | b |"), "{fresh}");
    let paimon = rows(&ctx, "SELECT count(*) AS n FROM lake.default.events").await;
    assert!(paimon.contains("| 0 |"), "{paimon}");

    let tiered = rows(
        &ctx,
        "SELECT rows_tiered FROM lakestream_tier('lake.default.events')",
    )
    .await;
    assert!(tiered.contains("| 2           |"), "{tiered}");
    let paimon = rows(&ctx, "SELECT count(*) AS n FROM lake.default.events").await;
    assert!(paimon.contains("| 2 |"), "{paimon}");

    // Session settings: streaming is accepted, routing keys are refused.
    rows(&ctx, "SET lakestream.scan_mode = 'streaming'").await;
    let err = ctx
        .sql("SET lakestream.enabled = 'false'")
        .await
        .expect_err("refused")
        .to_string();
    assert!(err.contains("stored options"), "{err}");
    rows(&ctx, "SET lakestream.scan_mode = 'batch'").await;

    // Connector mode in the app's session.
    let location = warehouse.join("default.db").join("events");
    rows(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE ext STORED AS PAIMON LOCATION '{}'",
            location.display()
        ),
    )
    .await;
    let ext = rows(&ctx, "SELECT count(*) AS n FROM ext").await;
    assert!(ext.contains("| 2 |"), "{ext}");
    let err = match ctx.sql("INSERT INTO ext VALUES (3, 'c')").await {
        Ok(df) => df.collect().await.err(),
        Err(e) => Some(e),
    }
    .expect("a write to a lake-stream table opened without a store is refused")
    .to_string();
    assert!(
        err.contains("needs a store, but the external table 'ext' names none"),
        "{err}"
    );
}

/// Both `register_catalog`s check the lake-stream options before they create
/// anything: a bad one is an error naming it, and the warehouse stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_option_registers_nothing_and_touches_no_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    let options = HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
        ("lakestream.timeout".to_string(), "soon".to_string()),
    ]);

    let ctx = SessionContext::new();
    let lakestream = LakeStreamExtension::install(&ctx).unwrap();
    let error = lakestream
        .register_catalog(&ctx, "lake", options.clone())
        .await
        .expect_err("a bad lakestream.timeout is refused");
    assert!(error.to_string().contains("lakestream.timeout"), "{error}");
    assert!(ctx.catalog("lake").is_none());
    assert!(!warehouse.exists(), "the extension created the warehouse");

    let mut context = paimon_lakestream::LakeStreamContext::new();
    let error = context
        .register_catalog("lake", options)
        .await
        .expect_err("a bad lakestream.timeout is refused");
    assert!(error.to_string().contains("lakestream.timeout"), "{error}");
    assert!(!warehouse.exists(), "the context created the warehouse");
}

/// An app that changes a table through the catalog API gets the notices of
/// that call back with it, through `notice::collecting`; a call outside it
/// leaves them on the catalog for `take_notices`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_calls_return_their_notices() {
    use paimon::spec::SchemaChange;
    use paimon_lakestream::notice::collecting;

    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse).unwrap();
    let ctx = SessionContext::new();
    let lakestream = LakeStreamExtension::install(&ctx).unwrap();
    let warehouse_option = ("warehouse".to_string(), warehouse.display().to_string());
    let with_store = lakestream
        .register_catalog(
            &ctx,
            "lake",
            HashMap::from([
                warehouse_option.clone(),
                ("lakestream.store".to_string(), "local".to_string()),
                ("local.tier-interval".to_string(), "off".to_string()),
            ]),
        )
        .await
        .unwrap();
    let without_store = lakestream
        .register_catalog(&ctx, "plain", HashMap::from([warehouse_option]))
        .await
        .unwrap();
    for name in ["a", "b"] {
        let schema = Schema::builder()
            .column("id", DataType::Int(IntType::new()))
            .option("lakestream.enabled", "true")
            .build()
            .unwrap();
        with_store
            .create_table(&Identifier::new("default", name), schema, false)
            .await
            .unwrap();
    }
    let turn_off = |name: &str| {
        let catalog = std::sync::Arc::clone(&without_store);
        let identifier = Identifier::new("default", name);
        async move {
            let change =
                SchemaChange::set_option("lakestream.enabled".to_string(), "false".to_string());
            catalog.alter_table(&identifier, vec![change], false).await
        }
    };

    let (result, notices) = collecting(turn_off("a")).await;
    result.unwrap();
    let [notice] = notices.as_slice() else {
        panic!("expected one notice, got {notices:?}");
    };
    assert!(notice.contains("'default.a' is off"), "{notice}");
    assert!(without_store.take_notices().is_empty());

    turn_off("b").await.unwrap();
    let left = without_store.take_notices();
    assert!(
        left.len() == 1 && left[0].contains("'default.b' is off"),
        "{left:?}"
    );
}
