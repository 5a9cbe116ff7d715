//! `lakestream-bench`: measures lake-stream tables side by side with plain
//! paimon-datafusion on the same data, in the same run, and prints one
//! `name: value` line per figure.
//!
//! ```text
//! cargo bench --bench lakestream-bench              # full run
//! cargo bench --bench lakestream-bench -- --quick   # under two minutes
//! ```
//!
//! `cargo bench` builds it optimized and runs it from the repository's
//! root, so relative paths (`--dir`, `--chart`) are taken from there.
//!
//! Figures: freshness (acknowledged INSERT to visible in a `t$rt` point
//! query, p50/p99), the same while 10,000 single-row writes wait untiered
//! (`freshness_backlog_*`), single-row INSERT speed against Paimon, bulk INSERT
//! throughput, the cost of a
//! `t$rt` aggregate over `t`'s with 0, 1 and 10 % of the rows in the store
//! (append and primary-key tables), tiering throughput against a
//! paimon-datafusion `INSERT INTO ... SELECT` of the same rows, and a soak:
//! many tiering rounds of 10 rows, after which a scan of `t` is timed against
//! the same rows in one commit, with maintenance as shipped and without
//! (`write-only`), with the manifests and data files the newest snapshot
//! names (`scan_after_tiers_*`, `manifest_files_after_tiers_*`,
//! `data_files_after_tiers_*`; the scan time every tenth of the rounds goes
//! to stderr, and to an SVG chart with `--soak-chart FILE`), and what
//! compacting the unmaintained tables' small files costs
//! (`compaction_rows_per_s`, `compaction_rows_per_s_pk`).
//!
//! With `--warehouse s3://bucket/path` and the catalog's `s3.*` options
//! (`--option s3.endpoint=...`; keys from `--option` or the AWS
//! environment), the warehouse and the `local` store live on S3;
//! `--object-latency 20ms` then puts a proxy before the endpoint that holds
//! every request that long, as a cloud object store's round trip would.
//!
//! With `--store fluss`, the catalog's Paimon warehouse must be the one the
//! cluster tiers into (`--dir D` uses `D/warehouse`), and the run also
//! measures the `local` store's write figures (`local_*`) side by side.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;

mod latency_proxy;
use datafusion::arrow::array::RecordBatch;
use paimon_lakestream::LakeStreamContext;

#[derive(Debug, Parser)]
#[command(name = "lakestream-bench")]
struct Args {
    /// Smaller sizes: finishes within two minutes on a 2-core machine.
    #[arg(long)]
    quick: bool,

    /// The store to measure (`local`, or `fluss` with its options).
    #[arg(long, default_value = "local")]
    store: String,

    /// A further catalog option, e.g. `fluss.bootstrap.servers=host:9123`.
    #[arg(long = "option", value_name = "KEY=VALUE")]
    options: Vec<String>,

    /// Where to write an SVG chart of the results.
    #[arg(long, value_name = "FILE")]
    chart: Option<PathBuf>,

    /// Keep the warehouse here instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// The catalog's warehouse, e.g. `s3://bucket/bench` with `--option
    /// s3.endpoint=...` (default: `warehouse` under `--dir`).
    #[arg(long, value_name = "LOCATION")]
    warehouse: Option<String>,

    /// Holds every request to the S3 endpoint this long (`20ms`), through a
    /// proxy before `s3.endpoint`: what a cloud store's latency does.
    #[arg(long, value_name = "DURATION")]
    object_latency: Option<String>,

    /// Run only these parts (comma-separated): freshness, backlog, inserts,
    /// reads, tiered-reads (with `--after-tiering`), tiering, soak.
    #[arg(long, value_name = "PARTS")]
    only: Option<String>,

    /// Tiering rounds of the soak (default: 300 with --quick, else 1000).
    #[arg(long, value_name = "N")]
    soak_rounds: Option<usize>,

    /// Where to write an SVG chart of the soak: scan time against rounds,
    /// with and without maintenance.
    #[arg(long, value_name = "FILE")]
    soak_chart: Option<PathBuf>,

    /// With a store its own service tiers (Fluss): also measure a primary-key
    /// table at 1 % once that service has tiered it
    /// (`union_read_ratio_pk_1pct_after_tiering`), waiting at most this long
    /// (`5min`; part `tiered-reads`). The service must run and tier often, e.g.
    /// `--option fluss.table.datalake.freshness=10s`.
    #[arg(long, value_name = "DURATION")]
    after_tiering: Option<String>,

    /// Passed by `cargo bench` to every bench; nothing to do here.
    #[arg(long = "bench", hide = true)]
    _cargo_bench: bool,
}

impl Args {
    fn runs(&self, part: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|only| only.split(',').any(|p| p.trim() == part))
    }
}

struct Sizes {
    freshness_writes: usize,
    backlog_entries: usize,
    backlog_probes: usize,
    small_inserts: usize,
    bulk_rows: usize,
    read_rows: usize,
    read_repeats: usize,
    tier_rows: usize,
    soak_rounds: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                freshness_writes: 1_000,
                backlog_entries: 10_000,
                backlog_probes: 200,
                small_inserts: 60,
                bulk_rows: 50_000,
                read_rows: 200_000,
                read_repeats: 3,
                tier_rows: 200_000,
                soak_rounds: 300,
            }
        } else {
            Self {
                freshness_writes: 2_000,
                backlog_entries: 10_000,
                backlog_probes: 1_000,
                small_inserts: 300,
                bulk_rows: 200_000,
                read_rows: 1_000_000,
                read_repeats: 5,
                tier_rows: 1_000_000,
                soak_rounds: 1_000,
            }
        }
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Single-row INSERTs into one table: statements per second, and a
/// statement's milliseconds in `ctx.sql` (parse, logical planning, routing),
/// in physical planning and in the run (the write, and the commit for Paimon).
#[derive(Debug, Default, Clone, Copy)]
struct InsertTimes {
    per_s: f64,
    sql_ms: f64,
    plan_ms: f64,
    run_ms: f64,
}

struct Bench {
    ctx: LakeStreamContext,
    store: String,
}

impl Bench {
    /// A context whose catalog `paimon` on `warehouse` names `store`, with
    /// the `local` store's background tiering off, plus `extra` options.
    async fn open(warehouse: &str, store: &str, extra: &[(&str, &str)]) -> Result<Self, Error> {
        let mut options = HashMap::from([
            ("warehouse".to_string(), warehouse.to_string()),
            ("lakestream.store".to_string(), store.to_string()),
        ]);
        if store == "local" {
            options.insert("local.tier-interval".to_string(), "off".to_string());
        }
        options.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut ctx = LakeStreamContext::new();
        ctx.register_catalog("paimon", options).await?;
        Ok(Self {
            ctx,
            store: store.to_string(),
        })
    }

    async fn run(&self, sql: &str) -> Result<Vec<RecordBatch>, Error> {
        let df = self.ctx.sql(sql).await.map_err(|e| format!("{sql}: {e}"))?;
        Ok(df.collect().await.map_err(|e| format!("{sql}: {e}"))?)
    }

    async fn rows(&self, sql: &str) -> Result<usize, Error> {
        Ok(self.run(sql).await?.iter().map(RecordBatch::num_rows).sum())
    }

    async fn timed(&self, sql: &str) -> Result<Duration, Error> {
        let started = Instant::now();
        self.run(sql).await?;
        Ok(started.elapsed())
    }

    /// Fills `table` with `rows` rows straight into Paimon (one commit per
    /// 500k rows), generated by DataFusion.
    async fn fill_paimon(&self, table: &str, from: usize, rows: usize) -> Result<(), Error> {
        self.insert_series(table, from, from + rows, 500_000).await
    }

    /// Writes rows `from..to` to the lake-stream `table`, in statements of
    /// 10k rows as writers would send them.
    async fn write_through_store(&self, table: &str, from: usize, to: usize) -> Result<(), Error> {
        self.insert_series(table, from, to, 10_000).await
    }

    /// Inserts rows `from..to` into `table`, `chunk` rows per statement.
    async fn insert_series(
        &self,
        table: &str,
        from: usize,
        to: usize,
        chunk: usize,
    ) -> Result<(), Error> {
        let mut start = from;
        while start < to {
            let end = (start + chunk).min(to);
            self.run(&format!(
                "INSERT INTO {table} SELECT CAST(value AS INT), 'row-' || CAST(value AS VARCHAR), \
                 CAST(value % 1000 AS BIGINT) FROM generate_series({start}, {}) AS s(value)",
                end - 1
            ))
            .await?;
            start = end;
        }
        Ok(())
    }

    async fn freshness(&self, writes: usize) -> Result<(f64, f64), Error> {
        self.run(
            "CREATE TABLE fresh (id INT, v STRING, n BIGINT) WITH ('lakestream.enabled' = 'true')",
        )
        .await?;
        self.probe_freshness("fresh", 0, writes).await
    }

    /// Freshness while `backlog` single-row writes wait untiered (background
    /// tiering is off): the backlog is written first, unread, then `probes`
    /// writes are timed as in [`Self::freshness`]. Returns p50 and p99 (ms).
    async fn freshness_backlog(&self, backlog: usize, probes: usize) -> Result<(f64, f64), Error> {
        self.run(
            "CREATE TABLE backlog (id INT, v STRING, n BIGINT) WITH ('lakestream.enabled' = 'true')",
        )
        .await?;
        let started = Instant::now();
        for i in 0..backlog {
            self.run(&format!("INSERT INTO backlog VALUES ({i}, 'x', 1)"))
                .await?;
        }
        eprintln!(
            "  backlog of {backlog} single-row writes written ({:.0?})",
            started.elapsed()
        );
        self.probe_freshness("backlog", backlog, probes).await
    }

    /// Writes rows `from..from + writes` of `table` one INSERT each, and
    /// times each from its acknowledgement to its showing in a point query.
    async fn probe_freshness(
        &self,
        table: &str,
        from: usize,
        writes: usize,
    ) -> Result<(f64, f64), Error> {
        let mut latencies = Vec::with_capacity(writes);
        for i in from..from + writes {
            self.run(&format!("INSERT INTO {table} VALUES ({i}, 'x', 1)"))
                .await?;
            let acknowledged = Instant::now();
            loop {
                if self
                    .rows(&format!("SELECT id FROM {table}$rt WHERE id = {i}"))
                    .await?
                    == 1
                {
                    break;
                }
            }
            latencies.push(acknowledged.elapsed().as_secs_f64() * 1e3);
        }
        latencies.sort_by(f64::total_cmp);
        Ok((percentile(&latencies, 0.50), percentile(&latencies, 0.99)))
    }

    /// Single-row INSERT statements into a lake-stream table and into a plain
    /// Paimon table: for each, statements per second and where a statement's
    /// time goes (`ctx.sql`, physical planning, the run), in milliseconds.
    async fn small_inserts(&self, count: usize) -> Result<[InsertTimes; 2], Error> {
        self.run("CREATE TABLE small_ls (id INT, v STRING, n BIGINT) WITH ('lakestream.enabled' = 'true')")
            .await?;
        self.run("CREATE TABLE small_paimon (id INT, v STRING, n BIGINT)")
            .await?;
        let mut times = [InsertTimes::default(), InsertTimes::default()];
        for (table, times) in ["small_ls", "small_paimon"].into_iter().zip(&mut times) {
            let (mut sql, mut plan, mut run) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
            let started = Instant::now();
            for i in 0..count {
                let statement = format!("INSERT INTO {table} VALUES ({i}, 'x', 1)");
                let t0 = Instant::now();
                let df = self
                    .ctx
                    .sql(&statement)
                    .await
                    .map_err(|e| format!("{statement}: {e}"))?;
                let t1 = Instant::now();
                let task = std::sync::Arc::new(df.task_ctx());
                let physical = df
                    .create_physical_plan()
                    .await
                    .map_err(|e| format!("{statement}: {e}"))?;
                let t2 = Instant::now();
                datafusion::physical_plan::collect(physical, task)
                    .await
                    .map_err(|e| format!("{statement}: {e}"))?;
                let t3 = Instant::now();
                sql += t1 - t0;
                plan += t2 - t1;
                run += t3 - t2;
            }
            let per_statement = |d: Duration| d.as_secs_f64() * 1e3 / count as f64;
            *times = InsertTimes {
                per_s: count as f64 / started.elapsed().as_secs_f64(),
                sql_ms: per_statement(sql),
                plan_ms: per_statement(plan),
                run_ms: per_statement(run),
            };
        }
        Ok(times)
    }

    /// Rows per second written to a lake-stream table in INSERT statements of
    /// 10k rows each.
    async fn bulk_inserts(&self, rows: usize) -> Result<f64, Error> {
        self.run("CREATE TABLE bulk_ls (id INT, v STRING, n BIGINT) WITH ('lakestream.enabled' = 'true')")
            .await?;
        let started = Instant::now();
        self.write_through_store("bulk_ls", 0, rows).await?;
        Ok(rows as f64 / started.elapsed().as_secs_f64())
    }

    /// `t$rt` over `t`: the median of `repeats` runs of an aggregate each.
    async fn read_ratio(
        &self,
        table: &str,
        primary_key: bool,
        rows: usize,
        store_percent: usize,
        repeats: usize,
        after_tiering: Option<Duration>,
    ) -> Result<f64, Error> {
        let ddl = if primary_key {
            format!(
                "CREATE TABLE {table} (id INT NOT NULL, v STRING, n BIGINT, PRIMARY KEY (id)) \
                 WITH ('bucket' = '2')"
            )
        } else {
            format!("CREATE TABLE {table} (id INT, v STRING, n BIGINT)")
        };
        self.run(&ddl).await?;
        let in_store = rows * store_percent / 100;
        self.fill_paimon(table, 0, rows - in_store).await?;
        self.run(&format!(
            "ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled' = 'true')"
        ))
        .await?;
        if in_store > 0 {
            self.write_through_store(table, rows - in_store, rows)
                .await?;
        }
        if let Some(patience) = after_tiering {
            self.await_tiering(table, rows, patience).await?;
        }
        let paimon = format!("SELECT count(*), sum(n) FROM {table}");
        let union = format!("SELECT count(*), sum(n) FROM {table}$rt");
        // Warm both once, then alternate.
        self.run(&paimon).await?;
        self.run(&union).await?;
        let (mut ratios, mut plain_ms, mut union_ms) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeats {
            let t = self.timed(&paimon).await?;
            let rt = self.timed(&union).await?;
            ratios.push(rt.as_secs_f64() / t.as_secs_f64());
            plain_ms.push(t.as_secs_f64() * 1e3);
            union_ms.push(rt.as_secs_f64() * 1e3);
        }
        for times in [&mut ratios, &mut plain_ms, &mut union_ms] {
            times.sort_by(f64::total_cmp);
        }
        eprintln!(
            "  {table}: {:.1} ms, {table}$rt {:.1} ms (medians of {repeats})",
            percentile(&plain_ms, 0.5),
            percentile(&union_ms, 0.5),
        );
        Ok(percentile(&ratios, 0.5))
    }

    /// Waits until the store's own tiering service has put every one of
    /// `table`'s `rows` rows (keys `0..rows`) into Paimon: the rows written
    /// through the store have keys Paimon did not hold.
    async fn await_tiering(
        &self,
        table: &str,
        rows: usize,
        patience: Duration,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let count = format!("SELECT id FROM {table}");
        loop {
            let tiered = self.rows(&count).await?;
            if tiered >= rows {
                eprintln!(
                    "  {table}: tiered by the store's service after {:.0?}",
                    started.elapsed()
                );
                return Ok(());
            }
            if started.elapsed() > patience {
                return Err(format!(
                    "{table}: the store's tiering service tiered {tiered} of {rows} rows within \
                     {patience:?}; is it running (scripts/fluss-cluster.sh tiering-start), and is \
                     'table.datalake.freshness' short (--option \
                     fluss.table.datalake.freshness=10s)?"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn tiering(&self, rows: usize) -> Result<(f64, f64), Error> {
        self.run("CREATE TABLE tier_src (id INT, v STRING, n BIGINT)")
            .await?;
        self.fill_paimon("tier_src", 0, rows).await?;
        self.run("CREATE TABLE tier_ls (id INT, v STRING, n BIGINT) WITH ('lakestream.enabled' = 'true')")
            .await?;
        self.run("CREATE TABLE tier_paimon (id INT, v STRING, n BIGINT)")
            .await?;
        let mut start = 0;
        while start < rows {
            let end = (start + 50_000).min(rows);
            self.run(&format!(
                "INSERT INTO tier_ls SELECT * FROM tier_src WHERE id >= {start} AND id < {end}"
            ))
            .await?;
            start = end;
        }
        let started = Instant::now();
        self.run("CALL sys.lakestream_tier('tier_ls')").await?;
        let tiering = started.elapsed().as_secs_f64();
        let started = Instant::now();
        self.run("INSERT INTO tier_paimon SELECT * FROM tier_src")
            .await?;
        let insert = started.elapsed().as_secs_f64();
        let tiered = self.rows("SELECT id FROM tier_ls").await?;
        if tiered != rows {
            return Err(format!("tiering moved {tiered} rows of {rows}").into());
        }
        Ok((rows as f64 / tiering, insert / tiering))
    }
}

/// What a soak of tiering rounds left: the scan's cost against the same
/// rows in one commit, and what the newest snapshot names.
struct Soak {
    ratio: f64,
    manifests: f64,
    data_files: f64,
    /// `(round, scan ms)` every tenth of the rounds.
    curve: Vec<(usize, f64)>,
    /// Of a table soaked without maintenance: the rows per second of
    /// `CALL sys.compact` run until nothing is left to compact.
    compaction_rows_per_s: Option<f64>,
}

impl Bench {
    /// `rounds` tiering rounds of 10 rows each into a new table (`maintained`:
    /// with maintenance as shipped; else `write-only`, which turns it off).
    async fn soak(
        &self,
        primary_key: bool,
        maintained: bool,
        rounds: usize,
    ) -> Result<Soak, Error> {
        let kind = if primary_key { "pk" } else { "append" };
        let suffix = if maintained { "" } else { "_off" };
        let table = format!("soak_{kind}{suffix}");
        let one = format!("soak_{kind}{suffix}_one");
        let columns = if primary_key {
            "(id INT NOT NULL, v STRING, n BIGINT, PRIMARY KEY (id))"
        } else {
            "(id INT, v STRING, n BIGINT)"
        };
        let bucket = if primary_key { "'bucket' = '2', " } else { "" };
        let write_only = if maintained {
            ""
        } else {
            ", 'write-only' = 'true'"
        };
        self.run(&format!(
            "CREATE TABLE {table} {columns} WITH ({bucket}'lakestream.enabled' = 'true'{write_only})"
        ))
        .await?;
        self.run(&format!(
            "CREATE TABLE {one} {columns} WITH ({bucket}'write-only' = 'true')"
        ))
        .await?;
        let scan = |t: &str| format!("SELECT count(*), sum(n) FROM {t}");
        let mut curve = Vec::new();
        let step = (rounds / 10).max(1);
        for round in 0..rounds {
            self.insert_series(&table, round * 10, round * 10 + 10, 10)
                .await?;
            self.run(&format!("CALL sys.lakestream_tier('{table}')"))
                .await?;
            if (round + 1) % step == 0 {
                self.run(&scan(&table)).await?;
                let mut took = Vec::new();
                for _ in 0..3 {
                    took.push(self.timed(&scan(&table)).await?.as_secs_f64());
                }
                took.sort_by(f64::total_cmp);
                curve.push((round + 1, percentile(&took, 0.5) * 1e3));
            }
        }
        self.run(&format!("INSERT INTO {one} SELECT * FROM {table}"))
            .await?;
        let (mut soaked, mut single) = (Vec::new(), Vec::new());
        self.run(&scan(&table)).await?;
        self.run(&scan(&one)).await?;
        // Interleaved, 15 each: a scan takes milliseconds, and a median of
        // few is at the mercy of the machine's other work.
        for _ in 0..15 {
            soaked.push(self.timed(&scan(&table)).await?.as_secs_f64());
            single.push(self.timed(&scan(&one)).await?.as_secs_f64());
        }
        soaked.sort_by(f64::total_cmp);
        single.sort_by(f64::total_cmp);
        let count = |sql: String| async move {
            let batches = self.run(&sql).await?;
            let value = batches
                .first()
                .filter(|b| b.num_rows() == 1)
                .map(|b| arrow::util::display::array_value_to_string(b.column(0), 0))
                .transpose()?
                .unwrap_or_default();
            value
                .parse::<f64>()
                .map_err(|e| Error::from(format!("{sql}: {value}: {e}")))
        };
        let ratio = percentile(&soaked, 0.5) / percentile(&single, 0.5);
        let manifests = count(format!("SELECT count(*) FROM {table}$manifests")).await?;
        let data_files = count(format!("SELECT count(*) FROM {table}$files")).await?;
        // What compacting the unmaintained table's small files costs: as
        // many calls as it takes (each takes `compaction.max.file-num`
        // files of a bucket at most).
        let compaction_rows_per_s = if maintained {
            None
        } else {
            let started = Instant::now();
            let mut rows = 0.0;
            loop {
                let compacted =
                    count(format!("SELECT coalesce(rows, -1) FROM compact('{table}')")).await?;
                if compacted < 0.0 {
                    break;
                }
                rows += compacted;
            }
            Some(rows / started.elapsed().as_secs_f64())
        };
        Ok(Soak {
            ratio,
            manifests,
            data_files,
            curve,
            compaction_rows_per_s,
        })
    }
}

/// A line chart of the soaks' scan times against rounds.
fn soak_chart(curves: &[(&str, Vec<(usize, f64)>)]) -> String {
    let (width, height) = (760.0, 420.0);
    let (left, right, top, bottom) = (70.0, 20.0, 40.0, 110.0);
    let max_round = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(r, _)| *r))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_ms = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(_, ms)| *ms))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let x = |round: f64| left + round / max_round * (width - left - right);
    let y = |ms: f64| height - bottom - ms / max_ms * (height - top - bottom);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-weight=\"bold\">SELECT count(*), sum(n) after N tiering rounds of 10 rows (ms)</text>"
    );
    // Axes, with the top value and the last round named.
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\
         <text x=\"5\" y=\"{}\">{max_ms:.1} ms</text><text x=\"5\" y=\"{}\">0</text>\
         <text x=\"{}\" y=\"{}\">{max_round} rounds</text>",
        height - bottom,
        height - bottom,
        width - right,
        height - bottom,
        top + 4.0,
        height - bottom,
        width - right - 80.0,
        height - bottom + 18.0
    );
    let colors = ["#4a7ab5", "#c0504d", "#9bbb59", "#f79646"];
    for (at, (name, curve)) in curves.iter().enumerate() {
        let color = colors[at % colors.len()];
        let points: Vec<String> = curve
            .iter()
            .map(|(round, ms)| format!("{:.1},{:.1}", x(*round as f64), y(*ms)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\
             <rect x=\"{left}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{color}\"/>\
             <text x=\"{}\" y=\"{}\">{name}</text>",
            points.join(" "),
            height - bottom + 30.0 + at as f64 * 18.0,
            left + 18.0,
            height - bottom + 41.0 + at as f64 * 18.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// A bar chart of the figures whose names start with each prefix.
fn chart(figures: &BTreeMap<&'static str, f64>) -> String {
    let groups: [(&str, &str, &[&str]); 2] = [
        (
            "Freshness: acknowledged INSERT to visible in t$rt (ms)",
            "ms",
            &[
                "freshness_p50_ms",
                "freshness_p99_ms",
                "freshness_backlog_p50_ms",
                "freshness_backlog_p99_ms",
                "local_freshness_p50_ms",
                "local_freshness_p99_ms",
            ],
        ),
        (
            "t$rt aggregate time / t aggregate time (1.0 = same as plain Paimon)",
            "x",
            &[
                "union_read_ratio_append_0pct",
                "union_read_ratio_append_1pct",
                "union_read_ratio_append_10pct",
                "union_read_ratio_pk_0pct",
                "union_read_ratio_pk_1pct",
                "union_read_ratio_pk_10pct",
                "union_read_ratio_pk_1pct_after_tiering",
            ],
        ),
    ];
    let width = 760;
    let bar_height = 22;
    let mut svg = String::new();
    // Only the figures this run measured (`local_*` only beside another store).
    let groups = groups.map(|(title, unit, names)| {
        let names: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| figures.contains_key(n))
            .collect();
        (title, unit, names)
    });
    let total_bars: usize = groups.iter().map(|(_, _, names)| names.len()).sum();
    let height = 40 + groups.len() * 50 + total_bars * (bar_height + 8);
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
    );
    let mut y = 30;
    for (title, unit, names) in groups {
        let _ = writeln!(
            svg,
            "<text x=\"10\" y=\"{y}\" font-weight=\"bold\">{}</text>",
            title.replace('&', "&amp;")
        );
        y += 16;
        let max = names
            .iter()
            .filter_map(|n| figures.get(*n))
            .fold(0.0f64, |m, v| m.max(*v))
            .max(1e-9);
        for name in names {
            let value = figures.get(name).copied().unwrap_or(f64::NAN);
            let length = if value.is_finite() {
                (value / max * 420.0).max(1.0)
            } else {
                0.0
            };
            let _ = writeln!(
                svg,
                "<text x=\"10\" y=\"{}\">{name}</text>\
                 <rect x=\"250\" y=\"{y}\" width=\"{length:.1}\" height=\"{bar_height}\" fill=\"#4a7ab5\"/>\
                 <text x=\"{:.1}\" y=\"{}\">{value:.2} {unit}</text>",
                y + 16,
                255.0 + length,
                y + 16
            );
            y += bar_height + 8;
        }
        y += 30;
    }
    svg.push_str("</svg>\n");
    svg
}

/// The parts `--only` names.
const PARTS: [&str; 7] = [
    "freshness",
    "backlog",
    "inserts",
    "reads",
    "tiered-reads",
    "tiering",
    "soak",
];

async fn bench(args: Args) -> Result<(), Error> {
    let mut sizes = Sizes::new(args.quick);
    if let Some(rounds) = args.soak_rounds {
        sizes.soak_rounds = rounds;
    }
    let after_tiering = match &args.after_tiering {
        Some(patience) => Some(
            paimon_lakestream::options::parse_duration(patience)
                .map_err(|e| format!("--after-tiering: {e}"))?,
        ),
        None => None,
    };
    if let Some(only) = &args.only {
        for part in only.split(',') {
            if !PARTS.contains(&part.trim()) {
                return Err(format!(
                    "--only: unknown part '{part}'; the parts are {}",
                    PARTS.join(", ")
                )
                .into());
            }
        }
    }
    let (dir, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("lakestream-bench-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir)?;
    let warehouse = match &args.warehouse {
        Some(location) => location.clone(),
        None => {
            let warehouse = dir.join("warehouse");
            std::fs::create_dir_all(&warehouse)?;
            warehouse.display().to_string()
        }
    };
    let mut extra = args
        .options
        .iter()
        .map(|option| {
            option
                .split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("expected KEY=VALUE, got '{option}'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let _proxy = match &args.object_latency {
        None => None,
        Some(latency) => {
            let latency = paimon_lakestream::options::parse_duration(latency)
                .map_err(|e| format!("--object-latency: {e}"))?;
            let endpoint = extra
                .iter_mut()
                .find(|(k, _)| k == "s3.endpoint")
                .ok_or("--object-latency needs an S3 warehouse and --option s3.endpoint=...")?;
            let proxy = latency_proxy::LatencyProxy::start(&endpoint.1, latency).await?;
            eprintln!(
                "lakestream-bench: every request to {} is held {latency:?}",
                endpoint.1
            );
            endpoint.1 = proxy.endpoint();
            Some(proxy)
        }
    };
    let extra: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let bench = Bench::open(&warehouse, &args.store, &extra).await?;
    eprintln!(
        "lakestream-bench: store {}, {} sizes, warehouse {warehouse}",
        bench.store,
        if args.quick { "quick" } else { "full" },
    );

    let mut figures: BTreeMap<&'static str, f64> = BTreeMap::new();
    let started = Instant::now();
    if args.runs("freshness") {
        let (p50, p99) = bench.freshness(sizes.freshness_writes).await?;
        figures.insert("freshness_p50_ms", p50);
        figures.insert("freshness_p99_ms", p99);
        eprintln!("  freshness done ({:.0?})", started.elapsed());
    }
    if args.runs("backlog") {
        let (p50, p99) = bench
            .freshness_backlog(sizes.backlog_entries, sizes.backlog_probes)
            .await?;
        figures.insert("freshness_backlog_p50_ms", p50);
        figures.insert("freshness_backlog_p99_ms", p99);
        eprintln!("  backlog freshness done ({:.0?})", started.elapsed());
    }
    if args.runs("inserts") {
        let [store, paimon] = bench.small_inserts(sizes.small_inserts).await?;
        figures.insert("small_insert_speedup", store.per_s / paimon.per_s);
        figures.insert("small_inserts_per_s", store.per_s);
        figures.insert("small_insert_sql_ms", store.sql_ms);
        figures.insert("small_insert_plan_ms", store.plan_ms);
        figures.insert("small_insert_run_ms", store.run_ms);
        figures.insert("paimon_small_inserts_per_s", paimon.per_s);
        figures.insert("paimon_small_insert_run_ms", paimon.run_ms);
        figures.insert(
            "bulk_insert_rows_per_s",
            bench.bulk_inserts(sizes.bulk_rows).await?,
        );
        eprintln!("  inserts done ({:.0?})", started.elapsed());
    }
    if bench.store != "local" && args.runs("inserts") {
        // The same write figures for the local store, in the same run, on a
        // warehouse of its own.
        let warehouse = dir.join("local-warehouse");
        std::fs::create_dir_all(&warehouse)?;
        let local = Bench::open(&warehouse.display().to_string(), "local", &[]).await?;
        let (p50, p99) = local.freshness(sizes.freshness_writes).await?;
        figures.insert("local_freshness_p50_ms", p50);
        figures.insert("local_freshness_p99_ms", p99);
        let [local_inserts, _] = local.small_inserts(sizes.small_inserts).await?;
        figures.insert("local_small_inserts_per_s", local_inserts.per_s);
        figures.insert(
            "local_bulk_insert_rows_per_s",
            local.bulk_inserts(sizes.bulk_rows).await?,
        );
        eprintln!("  local store's writes done ({:.0?})", started.elapsed());
    }
    for (kind, primary_key) in [("append", false), ("pk", true)] {
        if !args.runs("reads") {
            break;
        }
        for percent in [0, 1, 10] {
            let name: &'static str = match (kind, percent) {
                ("append", 0) => "union_read_ratio_append_0pct",
                ("append", 1) => "union_read_ratio_append_1pct",
                ("append", _) => "union_read_ratio_append_10pct",
                (_, 0) => "union_read_ratio_pk_0pct",
                (_, 1) => "union_read_ratio_pk_1pct",
                _ => "union_read_ratio_pk_10pct",
            };
            let table = format!("read_{kind}_{percent}");
            let ratio = bench
                .read_ratio(
                    &table,
                    primary_key,
                    sizes.read_rows,
                    percent,
                    sizes.read_repeats,
                    None,
                )
                .await?;
            figures.insert(name, ratio);
        }
        eprintln!("  {kind} reads done ({:.0?})", started.elapsed());
    }
    if let (true, Some(patience)) = (args.runs("tiered-reads"), after_tiering) {
        // A primary-key table once the store's own tiering service has
        // tiered it: the store's log past the lake snapshot is what is left.
        let ratio = bench
            .read_ratio(
                "read_pk_1_tiered",
                true,
                sizes.read_rows,
                1,
                sizes.read_repeats,
                Some(patience),
            )
            .await?;
        figures.insert("union_read_ratio_pk_1pct_after_tiering", ratio);
        eprintln!("  pk reads after tiering done ({:.0?})", started.elapsed());
    }
    if args.runs("tiering") {
        let (rows_per_s, vs_insert) = if bench.store == "local" {
            bench.tiering(sizes.tier_rows).await?
        } else {
            // Fluss tiers with its own service: nothing to time from here.
            (f64::NAN, f64::NAN)
        };
        figures.insert("tiering_rows_per_s", rows_per_s);
        figures.insert("tiering_vs_paimon_insert_ratio", vs_insert);
        eprintln!("  tiering done ({:.0?})", started.elapsed());
    }
    if bench.store == "local" && args.runs("soak") {
        let mut curves = Vec::new();
        for (primary_key, maintained) in
            [(false, true), (true, true), (false, false), (true, false)]
        {
            let soak = bench
                .soak(primary_key, maintained, sizes.soak_rounds)
                .await?;
            let (ratio, manifests, files): (&'static str, &'static str, &'static str) =
                match (primary_key, maintained) {
                    (false, true) => (
                        "scan_after_tiers_ratio_append",
                        "manifest_files_after_tiers_append",
                        "data_files_after_tiers_append",
                    ),
                    (true, true) => (
                        "scan_after_tiers_ratio_pk",
                        "manifest_files_after_tiers_pk",
                        "data_files_after_tiers_pk",
                    ),
                    (false, false) => (
                        "scan_after_tiers_ratio_append_unmaintained",
                        "manifest_files_after_tiers_append_unmaintained",
                        "data_files_after_tiers_append_unmaintained",
                    ),
                    (true, false) => (
                        "scan_after_tiers_ratio_pk_unmaintained",
                        "manifest_files_after_tiers_pk_unmaintained",
                        "data_files_after_tiers_pk_unmaintained",
                    ),
                };
            figures.insert(ratio, soak.ratio);
            figures.insert(manifests, soak.manifests);
            figures.insert(files, soak.data_files);
            match (primary_key, soak.compaction_rows_per_s) {
                (false, Some(rows_per_s)) => {
                    figures.insert("compaction_rows_per_s", rows_per_s);
                }
                (true, Some(rows_per_s)) => {
                    figures.insert("compaction_rows_per_s_pk", rows_per_s);
                }
                _ => {}
            }
            curves.push((
                match (primary_key, maintained) {
                    (false, true) => "append, maintained",
                    (true, true) => "primary key, maintained",
                    (false, false) => "append, no maintenance",
                    (true, false) => "primary key, no maintenance",
                },
                soak.curve.clone(),
            ));
            let curve: Vec<String> = soak
                .curve
                .iter()
                .map(|(round, ms)| format!("{round}:{ms:.1}"))
                .collect();
            eprintln!(
                "  soak {ratio}: scan ms by round {} ({:.0?})",
                curve.join(" "),
                started.elapsed()
            );
        }
        if let Some(path) = &args.soak_chart {
            std::fs::write(path, soak_chart(&curves))?;
            eprintln!("  soak chart written to {}", path.display());
        }
    }

    if let Some(path) = &args.chart {
        std::fs::write(path, chart(&figures))?;
        eprintln!("  chart written to {}", path.display());
    }
    for (name, value) in &figures {
        println!("{name}: {value:.3}");
    }
    if temporary {
        // Best effort: a leftover temporary directory harms nothing.
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
