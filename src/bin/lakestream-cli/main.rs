//! `lakestream-cli`: run SQL against a Paimon warehouse in lake-stream mode,
//! or run the tiering service.
//!
//! ```text
//! lakestream-cli --warehouse ./warehouse -c "CREATE TABLE t (id INT)" -f script.sql
//! lakestream-cli tier --warehouse ./warehouse --interval 30s
//! ```
//!
//! The shell is made of the modules below: splitting scripts into statements
//! and commands, running them, printing results and errors. They are this
//! program's, not the library's: an app that embeds the library runs SQL
//! through `LakeStreamContext`. Built with the cargo feature `cli` (on by
//! default), which brings clap and rustyline.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use paimon::catalog::{Catalog, Identifier};
use paimon_lakestream::catalog::WhenOff;
use paimon_lakestream::name::{parse_table_name, parse_table_name_keeping_case, sql_name};
use paimon_lakestream::{LakeStreamCatalog, LakeStreamContext};

mod command;
mod errors;
mod log;
mod print;
mod runner;
mod script;
mod shell;

use command::Flow;
use print::Format;
use runner::{ScriptOptions, ScriptRunner};
use shell::ShellOptions;

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

    /// Print each statement (and backslash command) of `-c`, `-f` or
    /// standard input before its result, as psql's `-e`.
    #[arg(short = 'e', long = "echo-queries")]
    echo: bool,

    /// Print errors in full: DataFusion's whole message, plans included
    /// (by default a long one is cut).
    #[arg(long)]
    verbose: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Tier the store's rows into Paimon, again and again, until stopped
    /// (SIGTERM or Ctrl-C): the service for deployments whose writers are
    /// short-lived processes.
    Tier {
        /// A table to tier, named as in SQL (`t`, `db.t`, `catalog.db.t`;
        /// quote a part to keep its case or dots: `default."MyTable"`);
        /// repeatable. Default: every lake-stream table. A table named here
        /// is tiered even if its mode is off, for rows its store still holds.
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
    if sources.is_empty() && std::io::stdin().is_terminal() {
        let mut ctx = ctx;
        return shell::run(
            &mut ctx,
            ShellOptions {
                format: args.format,
                quiet: args.quiet,
                history: shell::default_history(),
                verbose: args.verbose,
            },
        )
        .await;
    }
    let mut runner = ScriptRunner::new(
        ctx,
        ScriptOptions {
            format: args.format,
            quiet: args.quiet,
            echo: args.echo,
            verbose: args.verbose,
        },
    );
    if sources.is_empty() {
        return run_stdin(&mut runner).await;
    }
    for source in sources {
        let flow = match source {
            Source::Command(sql) => runner.run_text(&sql).await?,
            Source::File(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read '{path}': {e}"))?;
                runner.run_text(&text).await?
            }
        };
        if flow == Flow::Quit {
            break;
        }
    }
    Ok(())
}

/// Runs standard input as a script, each statement as soon as its `;` has
/// arrived: a thread reads the lines while statements run.
async fn run_stdin(runner: &mut ScriptRunner) -> Result<(), String> {
    let (lines, mut arriving) = tokio::sync::mpsc::channel::<std::io::Result<String>>(64);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            // Closed: the script ended (`\q`, an error).
            if lines.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = arriving.recv().await {
        let line = line.map_err(|e| format!("cannot read standard input: {e}"))?;
        if runner.line(&line).await? == Flow::Quit {
            return Ok(());
        }
    }
    runner.finish().await.map(|_| ())
}

/// The lake-stream tables of the catalog.
async fn lakestream_tables(catalog: &LakeStreamCatalog) -> Result<Vec<Identifier>, String> {
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
                tables.push(identifier);
            }
        }
    }
    Ok(tables)
}

/// A table the service tiers.
struct Target {
    identifier: Identifier,
    when_off: WhenOff,
    /// For a `--table` whose unquoted parts had capitals: what to write to
    /// keep them, should the lower-cased name not be found.
    case_hint: Option<String>,
}

impl Target {
    fn listed(identifier: Identifier) -> Self {
        Self {
            identifier,
            when_off: WhenOff::Refuse,
            case_hint: None,
        }
    }

    /// The table as SQL names it, for what the service prints.
    fn display(&self) -> String {
        sql_name(&[self.identifier.database(), self.identifier.object()])
    }
}

/// A `--table` argument, parsed as SQL parses a table name, in catalog
/// `catalog` with database `default_database` when the name has none.
fn named_target(text: &str, catalog: &str, default_database: &str) -> Result<Target, String> {
    let parts = parse_table_name(text).map_err(|e| format!("--table {text}: {e}"))?;
    let (database, table) = match parts.as_slice() {
        [table] => (default_database, table.as_str()),
        [database, table] => (database.as_str(), table.as_str()),
        [named, database, table] if named == catalog => (database.as_str(), table.as_str()),
        [named, ..] => {
            return Err(format!(
                "--table {text}: it names catalog '{named}', but the service tiers catalog \
                 '{catalog}' (--catalog)"
            ))
        }
        [] => return Err(format!("--table {text}: the name is empty")),
    };
    let kept = parse_table_name_keeping_case(text).map_err(|e| format!("--table {text}: {e}"))?;
    let case_hint = (kept != parts).then(|| {
        let written = match kept.as_slice() {
            [.., database, table] => sql_name(&[database, table]),
            other => sql_name(other),
        };
        format!(
            "unquoted names are lower-cased, as in SQL: to keep the case, quote it: --table '{written}'"
        )
    });
    Ok(Target {
        identifier: Identifier::new(database, table),
        when_off: WhenOff::Tier,
        case_hint,
    })
}

/// Tiers the named tables (or every lake-stream table) each `interval`
/// until SIGTERM or Ctrl-C. A table that fails is reported and retried in
/// the next round; the service keeps going. With `once`, one round, which
/// fails if any table failed.
async fn tier_service(
    ctx: &LakeStreamContext,
    catalog: &str,
    tables: &[String],
    interval: Duration,
    once: bool,
    quiet: bool,
) -> Result<(), String> {
    let lakestream = ctx
        .catalog(catalog)
        .ok_or_else(|| format!("no catalog '{catalog}'"))?;
    let default_database = ctx
        .session()
        .state()
        .config_options()
        .catalog
        .default_schema
        .clone();
    // Names are checked before the first round: a name that cannot be
    // parsed is a mistake to fix, not a failure to retry.
    let named: Vec<Target> = tables
        .iter()
        .map(|text| named_target(text, catalog, &default_database))
        .collect::<Result<_, _>>()?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    if !quiet && !once {
        eprintln!("lakestream-cli tier: tiering every {interval:?}; stop with SIGTERM or Ctrl-C");
    }
    loop {
        let listed;
        let round: &[Target] = if named.is_empty() {
            listed = lakestream_tables(&lakestream)
                .await?
                .into_iter()
                .map(Target::listed)
                .collect::<Vec<_>>();
            &listed
        } else {
            &named
        };
        let mut failed = 0usize;
        for target in round {
            match lakestream.tier(&target.identifier, target.when_off).await {
                Ok(report) => {
                    if report.rows > 0 && !quiet {
                        println!("tiered {} rows of {}", report.rows, target.display());
                    }
                }
                Err(e) => {
                    failed += 1;
                    let missing = matches!(
                        &e,
                        paimon_lakestream::Error::Paimon(paimon::Error::TableNotExist { .. })
                    );
                    eprintln!("Error: tiering {}: {e}", target.display());
                    if let (Some(hint), true) = (&target.case_hint, missing) {
                        eprintln!("Hint: {hint}");
                    }
                }
            }
        }
        if once {
            if failed > 0 {
                return Err(format!(
                    "{failed} of {} tables could not be tiered (see above)",
                    round.len()
                ));
            }
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

fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    // The background tierer's failures reach the user on stderr.
    log::install();
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
