//! Times the parts of one-row INSERTs into a lake-stream table.
//! Run: `cargo run --release --example insert_probe -- [N] [lakestream|paimon]`
use std::collections::HashMap;
use std::time::{Duration, Instant};

use paimon_lakestream::LakeStreamContext;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(500);
    if n == 0 {
        return Err("N, the number of statements, must be at least 1".into());
    }
    let kind = args.next().unwrap_or_else(|| "lakestream".to_string());
    let with = match kind.as_str() {
        "lakestream" => " WITH ('lakestream.enabled' = 'true')",
        "paimon" => "",
        other => {
            return Err(format!("the table kind is 'lakestream' or 'paimon', not '{other}'").into())
        }
    };
    let dir = tempfile::tempdir()?;
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse)?;
    let options = HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
        ("local.tier-interval".to_string(), "off".to_string()),
    ]);
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options).await?;
    ctx.sql(&format!(
        "CREATE TABLE t (id INT, v STRING, n BIGINT){with}"
    ))
    .await?
    .collect()
    .await?;
    let (mut sql, mut plan, mut run) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let started = Instant::now();
    for i in 0..n {
        let t0 = Instant::now();
        let df = ctx
            .sql(&format!("INSERT INTO t VALUES ({i}, 'x', 1)"))
            .await?;
        let t1 = Instant::now();
        let task_ctx = df.task_ctx();
        let physical = df.create_physical_plan().await?;
        let t2 = Instant::now();
        datafusion::physical_plan::collect(physical, std::sync::Arc::new(task_ctx)).await?;
        let t3 = Instant::now();
        sql += t1 - t0;
        plan += t2 - t1;
        run += t3 - t2;
    }
    let total = started.elapsed();
    let per = |d: Duration| d.as_secs_f64() * 1000.0 / n as f64;
    println!(
        "{kind}: {n} statements, {:.1}/s; per statement: sql {:.3} ms, plan {:.3} ms, run {:.3} ms",
        n as f64 / total.as_secs_f64(),
        per(sql),
        per(plan),
        per(run)
    );
    Ok(())
}
