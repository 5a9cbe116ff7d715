//! Lake-stream tables in an app's own DataFusion `SessionContext`.
//!
//! Shows: installing `LakeStreamExtension` into a session the app built,
//! registering a Paimon catalog whose `local` store lives under a temporary
//! warehouse, creating a lake-stream table through the catalog API (DataFusion
//! does not plan Paimon DDL), then INSERT, DELETE and UPDATE going to the
//! store, `t$rt` serving them at once while `t` (Paimon) does not have them
//! yet, and `lakestream_tier` moving them into Paimon.
//!
//! Run: `cargo run --example embed`

use std::collections::HashMap;

use datafusion::prelude::SessionContext;
use paimon::catalog::{Catalog, Identifier};
use paimon::spec::{DataType, IntType, Schema, VarCharType};
use paimon_lakestream::LakeStreamExtension;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse)?;

    // The app's own session; the extension adds `t$rt`, write routing,
    // `SET lakestream.scan_mode`, `lakestream_tier` and connector mode.
    let ctx = SessionContext::new();
    let lakestream = LakeStreamExtension::install(&ctx)?;
    let options = HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
        // This example tiers by hand. By default the writing process checks
        // every 5s and tiers a table once 128 MB of its rows wait or the
        // oldest has waited 3 min (`local.tier-target-size`, `local.tier-max-delay`).
        ("local.tier-interval".to_string(), "off".to_string()),
    ]);
    let catalog = lakestream.register_catalog(&ctx, "lake", options).await?;

    // DataFusion does not plan Paimon DDL: create the table through the catalog.
    // A primary key makes INSERT an upsert and allows DELETE and UPDATE.
    let schema = Schema::builder()
        .column("id", DataType::Int(IntType::with_nullable(false)))
        .column("item", DataType::VarChar(VarCharType::new(100)?))
        .column("qty", DataType::Int(IntType::new()))
        .primary_key(["id"])
        .option("bucket", "1")
        .option("lakestream.enabled", "true")
        .build()?;
    catalog
        .create_table(&Identifier::new("default", "orders"), schema, false)
        .await?;

    run(
        &ctx,
        "INSERT INTO lake.default.orders VALUES (1, 'apple', 3), (2, 'pear', 5), (3, 'fig', 1)",
    )
    .await?;
    run(
        &ctx,
        "INSERT INTO lake.default.orders VALUES (2, 'pear', 6)",
    )
    .await?; // an upsert of key 2
    run(&ctx, "DELETE FROM lake.default.orders WHERE id = 3").await?;
    run(
        &ctx,
        "UPDATE lake.default.orders SET qty = qty + 1 WHERE id = 1",
    )
    .await?;

    println!("orders$rt, served by the store as soon as each write returns:");
    show(&ctx, "SELECT * FROM lake.default.orders$rt ORDER BY id").await?;
    println!("orders, Paimon's snapshots, before tiering:");
    show(
        &ctx,
        "SELECT count(*) AS paimon_rows FROM lake.default.orders",
    )
    .await?;

    println!("tiering moves the store's changes into Paimon:");
    show(&ctx, "SELECT * FROM lakestream_tier('lake.default.orders')").await?;
    show(&ctx, "SELECT * FROM lake.default.orders ORDER BY id").await?;
    Ok(())
}

/// Runs a statement to completion (writes run when their plan is collected).
async fn run(ctx: &SessionContext, sql: &str) -> Result<()> {
    ctx.sql(sql).await?.collect().await?;
    Ok(())
}

async fn show(ctx: &SessionContext, sql: &str) -> Result<()> {
    ctx.sql(sql).await?.show().await?;
    Ok(())
}
