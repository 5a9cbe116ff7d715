//! The interactive shell of `lakestream-cli`: datafusion-cli's way of
//! working (line editing, history, multi-line statements ending in `;`,
//! backslash commands, output formats, timing) over [`LakeStreamContext`],
//! so every statement this project knows works, DDL and `CALL` included.
//!
//! A query runs until it ends or Ctrl-C cancels it; Ctrl-C never ends the
//! shell (Ctrl-D or `\q` do). A streaming `t$rt` query prints rows as they
//! arrive. A statement that runs for more than a second shows how long it
//! has been running and how far the tierings it started have got.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_plan::execution_plan::Boundedness;
use datafusion::physical_plan::ExecutionPlanProperties;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use futures::StreamExt;
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Editor, Helper};

use super::command::{self, Command, Flow, Frontend};
use super::errors;
use super::print::{acknowledges, write_part, Format};
use super::script::{is_blank, Assembler, Item};
use paimon_lakestream::progress::{running_work, WorkStatus};
use paimon_lakestream::LakeStreamContext;

/// Settings of a shell session.
#[derive(Debug, Clone)]
pub struct ShellOptions {
    /// Output format.
    pub format: Format,
    /// No row counts or timing.
    pub quiet: bool,
    /// Where history is kept; `None`: not kept.
    pub history: Option<PathBuf>,
    /// Errors in full (DataFusion's plans included).
    pub verbose: bool,
}

/// Where the shell keeps its history: `$LAKESTREAM_HISTORY`, else `~/.lakestream_history`.
pub fn default_history() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LAKESTREAM_HISTORY") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".lakestream_history"))
}

/// Accepts a line as complete when it is a backslash command or its SQL ends with `;`.
struct SqlHelper;

impl Validator for SqlHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Completer for SqlHelper {
    type Candidate = String;
}

impl Hinter for SqlHelper {
    type Hint = String;
}

impl Highlighter for SqlHelper {}

impl Helper for SqlHelper {}

/// Whether `input` is ready to run: a backslash command (on a line of its
/// own after unfinished SQL too, as in psql), blank, or SQL whose last token
/// (ignoring whitespace and comments) is a `;` outside strings.
pub fn is_complete(input: &str) -> bool {
    let trimmed = input.trim();
    if trimmed.is_empty() || trimmed.starts_with('\\') {
        return true;
    }
    if let Some((before, last)) = trimmed.rsplit_once('\n') {
        if last.trim_start().starts_with('\\')
            && Tokenizer::new(&GenericDialect {}, before)
                .tokenize()
                .is_ok()
        {
            return true;
        }
    }
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, input).tokenize() else {
        // An open string or quoted name: wait for more.
        return false;
    };
    tokens
        .iter()
        .rev()
        .find(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .is_some_and(|t| matches!(t, Token::SemiColon))
        || tokens.iter().all(is_blank)
}

/// Runs the shell until `\q` or end of input.
pub async fn run(ctx: &mut LakeStreamContext, mut options: ShellOptions) -> Result<(), String> {
    let mut editor: Editor<SqlHelper, rustyline::history::DefaultHistory> =
        Editor::new().map_err(|e| format!("cannot start the line editor: {e}"))?;
    editor.set_helper(Some(SqlHelper));
    if let Some(history) = &options.history {
        // No history yet is fine.
        let _ = editor.load_history(history);
    }
    println!(
        "paimon-lakestream {} shell. \\? for help, \\q to quit.",
        env!("CARGO_PKG_VERSION")
    );
    // A statement left unfinished by a command typed after it (psql's
    // query buffer): the next prompt starts with it.
    let mut unfinished = String::new();
    loop {
        let read = tokio::task::block_in_place(|| {
            if unfinished.is_empty() {
                editor.readline("lakestream> ")
            } else {
                editor.readline_with_initial("lakestream> ", (unfinished.as_str(), ""))
            }
        });
        unfinished.clear();
        let input = match read {
            Ok(input) => input,
            // Ctrl-C at the prompt drops the line being typed.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(format!("cannot read input: {e}")),
        };
        if input.trim().is_empty() {
            continue;
        }
        // Keys typed into CREATE CATALOG never reach the history file.
        let kept = paimon_lakestream::object_storage::redact_secrets(input.trim_end());
        if !kept.is_empty() {
            let _ = editor.add_history_entry(kept);
        }
        if let Some(history) = &options.history {
            let _ = editor.save_history(history);
        }
        // Statements and commands as a script's (`Assembler`): a command
        // after an unfinished statement runs, and the statement waits.
        let mut assembler = Assembler::new();
        for line in input.lines() {
            for item in assembler.line(line) {
                let sql = match item {
                    Item::Statement(sql) => sql,
                    Item::Command(line) => {
                        let mut shell = Shell {
                            ctx: &mut *ctx,
                            options: &mut options,
                        };
                        let flow = match Command::parse(&line) {
                            Ok(parsed) => command::execute(&mut shell, &parsed).await,
                            Err(e) => Err(e),
                        };
                        match flow {
                            Ok(Flow::Continue) => {}
                            Ok(Flow::Quit) => {
                                if let Some(statement) = assembler.unfinished() {
                                    eprintln!("{}", command::not_run_at_quit(statement));
                                }
                                return Ok(());
                            }
                            Err(e) => eprintln!("Error: {e}"),
                        }
                        continue;
                    }
                };
                if let Err(e) = run_statement(ctx, &sql, &options).await {
                    eprintln!("Error: {e}");
                }
            }
        }
        if let Some(statement) = assembler.unfinished() {
            unfinished = statement.to_string();
        }
    }
    Ok(())
}

/// The shell, as backslash commands see it.
struct Shell<'a> {
    ctx: &'a mut LakeStreamContext,
    options: &'a mut ShellOptions,
}

impl Frontend for Shell<'_> {
    fn context(&mut self) -> &mut LakeStreamContext {
        self.ctx
    }

    fn set_format(&mut self, format: Format) {
        self.options.format = format;
    }

    fn set_quiet(&mut self, quiet: Option<bool>) {
        self.options.quiet = quiet.unwrap_or(!self.options.quiet);
    }

    fn say(&mut self, text: &str) {
        println!("{text}");
    }

    async fn statement(&mut self, sql: &str) -> Result<(), String> {
        run_statement(self.ctx, sql, self.options).await
    }
}

/// Runs one statement and prints its result. Ctrl-C cancels it.
pub async fn run_statement(
    ctx: &mut LakeStreamContext,
    sql: &str,
    options: &ShellOptions,
) -> Result<(), String> {
    let started = Instant::now();
    let progress = Progress::start(started);
    let work = execute(ctx, sql, options, &progress);
    let outcome = tokio::select! {
        outcome = work => outcome,
        _ = tokio::signal::ctrl_c() => {
            progress.stop();
            println!("Query cancelled.");
            return Ok(());
        }
    };
    progress.stop();
    let rows = outcome?;
    if !options.quiet {
        let took = started.elapsed().as_secs_f64();
        match rows {
            Shown::Acknowledged => println!("OK. Query took {took:.3} seconds.\n"),
            Shown::Rows(rows) => println!("{rows} rows in set. Query took {took:.3} seconds.\n"),
        }
    }
    Ok(())
}

/// What a statement showed.
enum Shown {
    /// DDL and the like: done, nothing to show.
    Acknowledged,
    Rows(usize),
}

/// Plans and runs a statement, printing as results come.
async fn execute(
    ctx: &mut LakeStreamContext,
    sql: &str,
    options: &ShellOptions,
    progress: &Progress,
) -> Result<Shown, String> {
    let describe = |e: datafusion::error::DataFusionError| errors::describe(&e, options.verbose);
    let df = ctx.execute(sql).await.map_err(describe)?;
    let schema = Arc::clone(df.schema().inner());
    // Planned once: a t$rt read fixes its end when it is planned.
    let plan = df.create_physical_plan().await.map_err(describe)?;
    let streaming = matches!(plan.boundedness(), Boundedness::Unbounded { .. });
    let mut stream = datafusion::physical_plan::execute_stream(plan, ctx.session().task_ctx())
        .map_err(describe)?;
    let mut rows = 0;
    if streaming {
        // Rows as they arrive, until the stream ends or Ctrl-C.
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(describe)?;
            if batch.num_rows() == 0 {
                continue;
            }
            progress.stop();
            print_part(
                options.format,
                &schema,
                std::slice::from_ref(&batch),
                rows == 0,
            )?;
            rows += batch.num_rows();
        }
        return Ok(Shown::Rows(rows));
    }
    let mut batches: Vec<RecordBatch> = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(describe)?;
        rows += batch.num_rows();
        batches.push(batch);
    }
    if acknowledges(&schema, &batches) {
        return Ok(Shown::Acknowledged);
    }
    progress.stop();
    print_part(options.format, &schema, &batches, true)?;
    Ok(Shown::Rows(rows))
}

fn print_part(
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    first: bool,
) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    write_part(&mut out, format, schema, batches, first).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

/// The status line of a running statement, on a terminal's stderr: from a
/// second after the start until [`Progress::stop`], which clears it before
/// the statement prints anything.
struct Progress {
    /// `true` once stopped; held while the line is drawn, so a stop never
    /// interleaves with a draw.
    stopped: Arc<std::sync::Mutex<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(started: Instant) -> Self {
        let stopped = Arc::new(std::sync::Mutex::new(false));
        let flag = Arc::clone(&stopped);
        let task = tokio::spawn(async move {
            if !std::io::stderr().is_terminal() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            loop {
                {
                    let stopped = flag.lock().unwrap_or_else(|e| e.into_inner());
                    if *stopped {
                        return;
                    }
                    eprint!(
                        "\r\x1b[2K{}",
                        status_line(started.elapsed(), &running_work())
                    );
                    let _ = std::io::stderr().flush();
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Self { stopped, task }
    }

    /// Stops and clears the line; later calls do nothing.
    fn stop(&self) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        if !*stopped {
            *stopped = true;
            self.task.abort();
            if std::io::stderr().is_terminal() {
                eprint!("\r\x1b[2K");
                let _ = std::io::stderr().flush();
            }
        }
    }
}

/// The status line of a running statement.
fn status_line(elapsed: Duration, work: &[WorkStatus]) -> String {
    let mut line = format!("… running for {:.0} s", elapsed.as_secs_f64());
    for work in work {
        line.push_str(" · ");
        line.push_str(&work.to_string());
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn completeness_never_panics(input in "(\\PC|[;'\"\n\\\\é]|--|/\\*){0,40}") {
            let _ = is_complete(&input);
        }
    }

    #[test]
    fn the_status_line_shows_running_work() {
        assert_eq!(
            status_line(Duration::from_secs(3), &[]),
            "… running for 3 s"
        );
        let tiering = WorkStatus {
            activity: "tiering",
            table: "default.t".to_string(),
            done: 2_000_000,
            total: 5_000_000,
            unit: "rows",
        };
        let compaction = WorkStatus {
            activity: "compacting",
            table: "default.u".to_string(),
            done: 3,
            total: 8,
            unit: "files",
        };
        assert_eq!(
            status_line(Duration::from_millis(7_400), &[tiering, compaction]),
            "… running for 7 s · tiering default.t: 2000000 of 5000000 rows · compacting \
             default.u: 3 of 8 files"
        );
    }

    #[test]
    fn completeness() {
        assert!(is_complete("SELECT 1;"));
        assert!(is_complete("SELECT 1; -- done"));
        assert!(is_complete("  \\d t"));
        assert!(is_complete(""));
        assert!(is_complete("-- only a comment"));
        assert!(!is_complete("SELECT 1"));
        assert!(!is_complete("SELECT 'a;"));
        assert!(!is_complete("SELECT ';'"));
        assert!(!is_complete("SELECT 1 /* ; */"));
        assert!(is_complete("SELECT 1;\nSELECT 2;"));
        // A command after an unfinished statement, as in psql.
        assert!(is_complete("SELECT 1\n\\q"));
        assert!(is_complete("SELECT 1\n  \\pset format csv\n"));
        assert!(!is_complete("SELECT 'a\n\\q"));
        assert!(!is_complete("SELECT 1 /* a\n\\q"));
    }
}
