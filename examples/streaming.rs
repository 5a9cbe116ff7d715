//! Following a lake-stream table: a streaming read of `t$rt`.
//!
//! Shows: `SET lakestream.scan_mode = 'streaming'` turns reads of `t$rt` into
//! unbounded reads that start where a batch read would (the tiered Paimon
//! snapshot plus the store's rows) and then emit each new row as it is
//! written. Another task writes rows while the read follows them; the
//! example stops after `ROWS` rows by dropping the stream.
//!
//! A streaming read emits rows and upserts; it cannot take a row back, so a
//! later DELETE of a primary-key table does not show in it. Aggregates,
//! `ORDER BY` and other operators that need the whole input are refused on an
//! unbounded read: use `LIMIT`, filters and projections, or read in batch mode.
//!
//! Run: `cargo run --example streaming`

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use futures::StreamExt;
use paimon_lakestream::LakeStreamContext;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How many rows the read follows before it stops.
const ROWS: usize = 5;

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse)?;

    let mut ctx = LakeStreamContext::new();
    let options = HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
    ]);
    ctx.register_catalog("paimon", options).await?;
    let ctx = Arc::new(ctx);

    run(
        &ctx,
        "CREATE TABLE events (id INT, msg STRING) WITH ('lakestream.enabled' = 'true')",
    )
    .await?;
    run(
        &ctx,
        "INSERT INTO events VALUES (1, 'written before the read started')",
    )
    .await?;

    // The setting is per session; it applies to reads of `t$rt` only.
    run(&ctx, "SET lakestream.scan_mode = 'streaming'").await?;
    let mut stream = ctx
        .sql("SELECT id, msg FROM events$rt")
        .await?
        .execute_stream()
        .await?;

    // Another task writes while the read follows.
    let writer = tokio::spawn({
        let ctx = Arc::clone(&ctx);
        async move {
            for id in 2.. {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let sql = format!("INSERT INTO events VALUES ({id}, 'written while following')");
                if let Err(e) = run(&ctx, &sql).await {
                    eprintln!("writer: {e}");
                    return;
                }
            }
        }
    });

    let mut seen = 0;
    while seen < ROWS {
        let Some(batch) = stream.next().await else {
            break;
        };
        let batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        seen += batch.num_rows();
        println!("{}", pretty_format_batches(&[batch])?);
    }
    // Dropping the stream ends the read; the writer has no more to do.
    drop(stream);
    writer.abort();
    println!("followed {seen} rows");
    Ok(())
}

/// Runs a statement to completion.
async fn run(ctx: &LakeStreamContext, sql: &str) -> Result<()> {
    ctx.sql(sql).await?.collect().await?;
    Ok(())
}
