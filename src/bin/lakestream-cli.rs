//! `lakestream-cli`: run SQL against a Paimon warehouse in lake-stream mode,
//! or run the tiering service.
//!
//! ```text
//! lakestream-cli --warehouse ./warehouse -c "CREATE TABLE t (id INT)" -f script.sql
//! lakestream-cli tier --warehouse ./warehouse --interval 30s
//! ```

use std::collections::HashMap;
use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::record_batch::RecordBatch;
use paimon_lakestream::cli::print::{is_acknowledgement, write_batches, Format};
use paimon_lakestream::cli::script::split_statements;
use paimon_lakestream::cli::shell::{self, ShellOptions};
use paimon_lakestream::LakeStreamContext;

/// Run SQL against a Paimon warehouse whose tables can be in lake-stream mode.
#[derive(Debug, Parser)]
#[command(name = "lakestream-cli", version)]
struct Args {
    /// Warehouse directory or URL of the Paimon catalog.
    #[arg(
        long,
        global = true,
        default_value = "./warehouse",
        value_name = "DIR|URL"
    )]
    warehouse: String,

    /// Name the catalog is registered under.
    #[arg(long, global = true, default_value = "paimon", value_name = "NAME")]
    catalog: String,

    /// Lakestream store of the catalog (`lakestream.store`), or `none`.
    #[arg(long, global = true, default_value = "local", value_name = "ID|none")]
    store: String,

    /// A further catalog option, e.g. `metastore=rest` or `fluss.bootstrap.servers=host:9123`.
    #[arg(long = "option", global = true, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    options: Vec<(String, String)>,

    #[command(subcommand)]
    command: Option<Command>,

    /// SQL to run; statements separated by `;`. Repeatable; runs in order with `-f`.
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    commands: Vec<String>,

    /// File of SQL statements to run. Repeatable; runs in order with `-c`.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    files: Vec<String>,

    /// Output format: table, csv, json or ndjson.
    #[arg(long, default_value = "table")]
    format: Format,

    /// Print results only: no timing or acknowledgement lines.
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Tier the store's rows into Paimon, again and again, until stopped
    /// (SIGTERM or Ctrl-C): the service for deployments whose writers are
    /// short-lived processes.
    Tier {
        /// A table to tier (`db.t`); repeatable. Default: every lake-stream table.
        #[arg(long = "table", value_name = "DB.TABLE")]
        tables: Vec<String>,

        /// Time between tiering rounds.
        #[arg(long, default_value = "30s", value_parser = parse_interval)]
        interval: Duration,

        /// Tier once and exit.
        #[arg(long)]
        once: bool,
    },
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    paimon_lakestream::options::parse_duration(text)
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("expected KEY=VALUE, got '{text}'")),
    }
}

/// One `-c` or `-f`, in the order given.
enum Source {
    Command(String),
    File(String),
}

/// The `-c` and `-f` arguments interleaved as they appeared on the command line.
fn sources_in_order(args: &Args, matches: &ArgMatches) -> Vec<Source> {
    let commands = matches
        .indices_of("commands")
        .into_iter()
        .flatten()
        .zip(args.commands.iter().cloned().map(Source::Command));
    let files = matches
        .indices_of("files")
        .into_iter()
        .flatten()
        .zip(args.files.iter().cloned().map(Source::File));
    let mut sources: Vec<(usize, Source)> = commands.chain(files).collect();
    sources.sort_by_key(|(index, _)| *index);
    sources.into_iter().map(|(_, source)| source).collect()
}

fn catalog_options(args: &Args) -> Result<HashMap<String, String>, String> {
    let warehouse = if args.warehouse.contains("://") {
        args.warehouse.clone()
    } else {
        let path = Path::new(&args.warehouse);
        std::fs::create_dir_all(path)
            .and_then(|()| path.canonicalize())
            .map_err(|e| format!("cannot use warehouse directory '{}': {e}", args.warehouse))?
            .to_string_lossy()
            .into_owned()
    };
    let mut options = HashMap::from([("warehouse".to_string(), warehouse)]);
    if args.store != "none" {
        options.insert("lakestream.store".to_string(), args.store.clone());
    }
    options.extend(args.options.iter().cloned());
    Ok(options)
}

struct Runner {
    ctx: LakeStreamContext,
    format: Format,
    quiet: bool,
}

impl Runner {
    async fn run_statement(&mut self, sql: &str) -> Result<(), String> {
        let started = Instant::now();
        let df = self.ctx.execute(sql).await.map_err(|e| e.to_string())?;
        let schema = Arc::clone(df.schema().inner());
        let batches = df.collect().await.map_err(|e| e.to_string())?;
        let elapsed = started.elapsed().as_secs_f64();
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let ack = is_acknowledgement(&batches);
        if !ack {
            write_batches(&mut out, self.format, &schema, &batches).map_err(|e| e.to_string())?;
        }
        if !self.quiet {
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            let status = if ack {
                format!("OK. Query took {elapsed:.3} seconds.")
            } else {
                format!("{rows} rows in set. Query took {elapsed:.3} seconds.")
            };
            // Machine-readable formats keep stdout for data.
            if self.format == Format::Table {
                writeln!(out, "{status}\n").map_err(|e| e.to_string())?;
            } else {
                eprintln!("{status}");
            }
        }
        out.flush().map_err(|e| e.to_string())
    }

    async fn run_script(&mut self, text: &str) -> Result<(), String> {
        for statement in split_statements(text) {
            self.run_statement(&statement).await?;
        }
        Ok(())
    }
}

async fn run(args: Args, matches: ArgMatches) -> Result<(), String> {
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog(&args.catalog, catalog_options(&args)?)
        .await
        .map_err(|e| format!("cannot open catalog '{}': {e}", args.catalog))?;
    if let Some(Command::Tier {
        tables,
        interval,
        once,
    }) = &args.command
    {
        return tier_service(&ctx, &args.catalog, tables, *interval, *once, args.quiet).await;
    }
    let sources = sources_in_order(&args, &matches);
    let mut runner = Runner {
        ctx,
        format: args.format,
        quiet: args.quiet,
    };
    if sources.is_empty() {
        let mut stdin = std::io::stdin();
        if stdin.is_terminal() {
            let mut ctx = runner.ctx;
            return shell::run(
                &mut ctx,
                ShellOptions {
                    format: runner.format,
                    quiet: runner.quiet,
                    history: shell::default_history(),
                },
            )
            .await;
        }
        let mut text = String::new();
        stdin
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        return runner.run_script(&text).await;
    }
    for source in sources {
        match source {
            Source::Command(sql) => runner.run_script(&sql).await?,
            Source::File(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read '{path}': {e}"))?;
                runner.run_script(&text).await?;
            }
        }
    }
    Ok(())
}

/// The lake-stream tables of the catalog, as `db.table`.
async fn lakestream_tables(ctx: &LakeStreamContext, catalog: &str) -> Result<Vec<String>, String> {
    use paimon::catalog::{Catalog, Identifier};
    let catalog = ctx
        .catalog(catalog)
        .ok_or_else(|| format!("no catalog '{catalog}'"))?;
    let mut tables = Vec::new();
    for database in catalog.list_databases().await.map_err(|e| e.to_string())? {
        for table in catalog
            .list_tables(&database)
            .await
            .map_err(|e| e.to_string())?
        {
            let identifier = Identifier::new(database.clone(), table);
            if catalog
                .lakestream_table(&identifier)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                tables.push(identifier.full_name());
            }
        }
    }
    Ok(tables)
}

/// Tiers the named tables (or every lake-stream table) each `interval`
/// until SIGTERM or Ctrl-C. A table that fails is reported and retried in
/// the next round; the service keeps going.
async fn tier_service(
    ctx: &LakeStreamContext,
    catalog: &str,
    tables: &[String],
    interval: Duration,
    once: bool,
    quiet: bool,
) -> Result<(), String> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    if !quiet {
        eprintln!("lakestream-cli tier: tiering every {interval:?}; stop with SIGTERM or Ctrl-C");
    }
    loop {
        let round = if tables.is_empty() {
            lakestream_tables(ctx, catalog).await?
        } else {
            tables.to_vec()
        };
        for table in &round {
            let sql = format!(
                "SELECT rows_tiered, commits FROM lakestream_tier('{catalog}.{}')",
                table.replace('\'', "''")
            );
            let result = match ctx.sql(&sql).await {
                Ok(df) => df.collect().await,
                Err(e) => Err(e),
            };
            match result {
                Ok(batches) => {
                    let rows = tiered_rows(&batches);
                    if rows > 0 && !quiet {
                        println!("tiered {rows} rows of {table}");
                    }
                }
                Err(e) => eprintln!("Error: tiering {table}: {e}"),
            }
        }
        if once {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    if !quiet {
        eprintln!("lakestream-cli tier: stopped");
    }
    Ok(())
}

fn tiered_rows(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .map(|a| a.iter().flatten().sum::<u64>())
        })
        .sum()
}

fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args, matches)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("Error: {message}");
            ExitCode::FAILURE
        }
    }
}
