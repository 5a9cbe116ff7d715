//! The test REST catalog server against the paimon crate's `RESTCatalog` and
//! paimon-datafusion's `SQLContext`: DDL, writes and reads end to end.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use paimon::catalog::Identifier;
use paimon::spec::{DataType, IntType, Schema, SchemaChange};
use paimon::{Catalog, CatalogFactory, Error, Options};
use paimon_datafusion::SQLContext;

use crate::rest_server::RestCatalogServer;

async fn rest_catalog(options: HashMap<String, String>) -> paimon::Result<Arc<dyn Catalog>> {
    CatalogFactory::create(Options::from_map(options)).await
}

async fn sql_context(server: &RestCatalogServer) -> SQLContext {
    let catalog = server.catalog().await.unwrap();
    let mut ctx = SQLContext::new();
    ctx.register_catalog("paimon", catalog).await.unwrap();
    ctx
}

async fn run(ctx: &SQLContext, sql: &str) -> Vec<RecordBatch> {
    let frame = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    frame
        .collect()
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

async fn query(ctx: &SQLContext, sql: &str) -> String {
    pretty_format_batches(&run(ctx, sql).await)
        .unwrap()
        .to_string()
}

async fn fails(ctx: &SQLContext, sql: &str) -> bool {
    match ctx.sql(sql).await {
        Err(_) => true,
        Ok(frame) => frame.collect().await.is_err(),
    }
}

fn int_schema(columns: &[&str]) -> Schema {
    columns
        .iter()
        .fold(Schema::builder(), |builder, name| {
            builder.column(*name, DataType::Int(IntType::new()))
        })
        .build()
        .unwrap()
}

fn exists(path: impl AsRef<Path>) -> bool {
    path.as_ref().exists()
}

#[tokio::test]
async fn rest_append_table_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestCatalogServer::start(dir.path()).await.unwrap();
    let ctx = sql_context(&server).await;
    let table_dir = dir.path().join("db.db").join("t");

    run(&ctx, "CREATE DATABASE paimon.db").await;
    run(
        &ctx,
        "CREATE TABLE paimon.db.t (id INT, v STRING) WITH ('k'='v')",
    )
    .await;
    assert!(exists(table_dir.join("schema/schema-0")));

    run(&ctx, "INSERT INTO paimon.db.t VALUES (1, 'a'), (2, 'b')").await;
    run(&ctx, "INSERT INTO paimon.db.t VALUES (3, 'c')").await;
    assert_eq!(
        query(&ctx, "SELECT id, v FROM paimon.db.t ORDER BY id").await,
        [
            "+----+---+",
            "| id | v |",
            "+----+---+",
            "| 1  | a |",
            "| 2  | b |",
            "| 3  | c |",
            "+----+---+",
        ]
        .join("\n")
    );
    // The server publishes commits as snapshot files, which system tables and time travel read.
    assert!(exists(table_dir.join("snapshot/snapshot-2")));
    assert_eq!(
        query(
            &ctx,
            "SELECT snapshot_id FROM paimon.db.t$snapshots ORDER BY snapshot_id"
        )
        .await,
        [
            "+-------------+",
            "| snapshot_id |",
            "+-------------+",
            "| 1           |",
            "| 2           |",
            "+-------------+",
        ]
        .join("\n")
    );

    run(&ctx, "ALTER TABLE paimon.db.t SET TBLPROPERTIES ('x'='y')").await;
    assert_eq!(
        query(
            &ctx,
            "SELECT key, value FROM paimon.db.t$options WHERE key IN ('k', 'x') ORDER BY key"
        )
        .await,
        [
            "+-----+-------+",
            "| key | value |",
            "+-----+-------+",
            "| k   | v     |",
            "| x   | y     |",
            "+-----+-------+",
        ]
        .join("\n")
    );

    // Old files keep schema 0; reading them next to new ones needs every schema version.
    run(&ctx, "ALTER TABLE paimon.db.t ADD COLUMN w INT").await;
    assert!(exists(table_dir.join("schema/schema-2")));
    run(&ctx, "INSERT INTO paimon.db.t VALUES (4, 'd', 40)").await;
    assert_eq!(
        query(&ctx, "SELECT id, v, w FROM paimon.db.t ORDER BY id").await,
        [
            "+----+---+----+",
            "| id | v | w  |",
            "+----+---+----+",
            "| 1  | a |    |",
            "| 2  | b |    |",
            "| 3  | c |    |",
            "| 4  | d | 40 |",
            "+----+---+----+",
        ]
        .join("\n")
    );

    run(&ctx, "ALTER TABLE paimon.db.t RENAME TO u").await;
    assert!(!exists(&table_dir));
    assert!(exists(dir.path().join("db.db/u/snapshot/snapshot-3")));
    assert_eq!(
        query(&ctx, "SELECT count(*) AS n, sum(w) AS w FROM paimon.db.u").await,
        [
            "+---+----+",
            "| n | w  |",
            "+---+----+",
            "| 4 | 40 |",
            "+---+----+",
        ]
        .join("\n")
    );
    assert!(fails(&ctx, "SELECT * FROM paimon.db.t").await);

    run(&ctx, "DROP TABLE paimon.db.u").await;
    assert!(fails(&ctx, "SELECT * FROM paimon.db.u").await);
    assert!(!exists(dir.path().join("db.db/u")));
    let catalog = server.catalog().await.unwrap();
    assert!(catalog.list_tables("db").await.unwrap().is_empty());
}

// Multi-threaded, where the other tests use tokio's current-thread default: the server must
// serve clients on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_primary_key_table_upserts() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestCatalogServer::start(dir.path()).await.unwrap();
    let ctx = sql_context(&server).await;

    run(&ctx, "CREATE DATABASE paimon.db").await;
    run(
        &ctx,
        "CREATE TABLE paimon.db.p (id INT NOT NULL, v STRING, PRIMARY KEY (id)) \
         WITH ('bucket'='1')",
    )
    .await;
    run(&ctx, "INSERT INTO paimon.db.p VALUES (1, 'a'), (2, 'b')").await;
    run(&ctx, "INSERT INTO paimon.db.p VALUES (2, 'B'), (3, 'c')").await;
    run(&ctx, "INSERT INTO paimon.db.p VALUES (1, 'A')").await;

    let expected = [
        "+----+---+",
        "| id | v |",
        "+----+---+",
        "| 1  | A |",
        "| 2  | B |",
        "| 3  | c |",
        "+----+---+",
    ]
    .join("\n");
    assert_eq!(
        query(&ctx, "SELECT id, v FROM paimon.db.p ORDER BY id").await,
        expected
    );

    // A second client of the same server sees the same catalog and data.
    let other = sql_context(&server).await;
    assert_eq!(
        query(&other, "SELECT id, v FROM paimon.db.p ORDER BY id").await,
        expected
    );
}

#[tokio::test]
async fn rest_catalog_errors_map_to_paimon_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestCatalogServer::start(dir.path()).await.unwrap();
    let catalog = server.catalog().await.unwrap();
    let t = Identifier::new("db", "t");
    let missing = Identifier::new("db", "missing");

    catalog
        .create_database("db", false, HashMap::new())
        .await
        .unwrap();
    assert!(matches!(
        catalog.create_database("db", false, HashMap::new()).await,
        Err(Error::DatabaseAlreadyExist { .. })
    ));
    catalog
        .create_database("db", true, HashMap::new())
        .await
        .unwrap();
    assert!(matches!(
        catalog.get_database("nope").await,
        Err(Error::DatabaseNotExist { .. })
    ));
    assert!(matches!(
        catalog.list_tables("nope").await,
        Err(Error::DatabaseNotExist { .. })
    ));
    assert!(matches!(
        catalog.drop_database("nope", false, false).await,
        Err(Error::DatabaseNotExist { .. })
    ));
    catalog.drop_database("nope", true, false).await.unwrap();
    assert_eq!(
        catalog.list_databases().await.unwrap(),
        vec!["db".to_string()]
    );

    catalog
        .create_table(&t, int_schema(&["id"]), false)
        .await
        .unwrap();
    assert!(matches!(
        catalog.create_table(&t, int_schema(&["id"]), false).await,
        Err(Error::TableAlreadyExist { .. })
    ));
    catalog
        .create_table(&t, int_schema(&["id"]), true)
        .await
        .unwrap();
    // The client maps every non-column 404 of a table route to TableNotExist, a missing
    // database included (the filesystem catalog says DatabaseNotExist here).
    assert!(matches!(
        catalog
            .create_table(&Identifier::new("nope", "t"), int_schema(&["id"]), false)
            .await,
        Err(Error::TableNotExist { .. })
    ));
    assert!(matches!(
        catalog.get_table(&missing).await,
        Err(Error::TableNotExist { .. })
    ));
    assert!(matches!(
        catalog.drop_table(&missing, false).await,
        Err(Error::TableNotExist { .. })
    ));
    catalog.drop_table(&missing, true).await.unwrap();

    catalog
        .create_table(&Identifier::new("db", "s"), int_schema(&["id"]), false)
        .await
        .unwrap();
    assert!(matches!(
        catalog
            .rename_table(&t, &Identifier::new("db", "s"), false)
            .await,
        Err(Error::TableAlreadyExist { .. })
    ));
    assert!(matches!(
        catalog.rename_table(&missing, &t, false).await,
        Err(Error::TableNotExist { .. })
    ));
    catalog.rename_table(&missing, &t, true).await.unwrap();

    catalog
        .alter_table(
            &t,
            vec![
                SchemaChange::set_option("x".to_string(), "y".to_string()),
                SchemaChange::add_column("v".to_string(), DataType::Int(IntType::new())),
            ],
            false,
        )
        .await
        .unwrap();
    let table = catalog.get_table(&t).await.unwrap();
    assert_eq!(table.schema().id(), 1);
    assert_eq!(
        table.schema().options().get("x").map(String::as_str),
        Some("y")
    );
    assert_eq!(table.schema().fields().len(), 2);
    assert!(exists(dir.path().join("db.db/t/schema/schema-1")));
    assert!(matches!(
        catalog
            .alter_table(
                &t,
                vec![SchemaChange::add_column(
                    "v".to_string(),
                    DataType::Int(IntType::new())
                )],
                false,
            )
            .await,
        Err(Error::ColumnAlreadyExist { .. })
    ));
    assert!(matches!(
        catalog
            .alter_table(
                &t,
                vec![SchemaChange::drop_column("nope".to_string())],
                false
            )
            .await,
        Err(Error::ColumnNotExist { .. })
    ));
    assert!(matches!(
        catalog
            .alter_table(
                &missing,
                vec![SchemaChange::set_option("x".to_string(), "z".to_string())],
                false
            )
            .await,
        Err(Error::TableNotExist { .. })
    ));
    // A rejected batch leaves the schema as it was.
    assert_eq!(catalog.get_table(&t).await.unwrap().schema().id(), 1);

    assert!(matches!(
        catalog.drop_database("db", false, false).await,
        Err(Error::DatabaseNotEmpty { .. })
    ));
    catalog.drop_database("db", false, true).await.unwrap();
    assert!(!exists(dir.path().join("db.db")));
    assert!(catalog.list_databases().await.unwrap().is_empty());
}

#[tokio::test]
async fn rest_server_refuses_wrong_token_and_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestCatalogServer::start(dir.path()).await.unwrap();
    assert_eq!(
        server
            .catalog_options()
            .get("warehouse")
            .map(String::as_str),
        Some(server.warehouse())
    );

    let mut wrong_token = server.catalog_options();
    wrong_token.insert("token".to_string(), "wrong".to_string());
    assert!(rest_catalog(wrong_token).await.is_err());

    let mut wrong_warehouse = server.catalog_options();
    wrong_warehouse.insert("warehouse".to_string(), "elsewhere".to_string());
    assert!(rest_catalog(wrong_warehouse).await.is_err());

    // Dropping the server stops it.
    let options = server.catalog_options();
    drop(server);
    assert!(rest_catalog(options).await.is_err());
}
