//! Running a script (`-c`, `-f`, piped standard input): statements and
//! backslash commands, each as soon as it is complete, stopping at the
//! first error.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::record_batch::RecordBatch;

use super::command::{self, Command, Flow, Frontend};
use super::errors;
use super::print::{acknowledges, write_batches, Format};
use super::script::{Assembler, Item};
use paimon_lakestream::LakeStreamContext;

/// Settings of a script run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptOptions {
    /// Output format.
    pub format: Format,
    /// No row counts, timing or `OK` lines.
    pub quiet: bool,
    /// Print each statement and command before its result, as psql's `-e`.
    pub echo: bool,
    /// Errors in full (DataFusion's plans included).
    pub verbose: bool,
}

/// Runs the lines of scripts through one session: [`Self::line`] runs what
/// a line completes, [`Self::finish`] what is left at the end of a script.
pub struct ScriptRunner {
    ctx: LakeStreamContext,
    options: ScriptOptions,
    assembler: Assembler,
}

impl ScriptRunner {
    /// A runner over `ctx`.
    pub fn new(ctx: LakeStreamContext, options: ScriptOptions) -> Self {
        Self {
            ctx,
            options,
            assembler: Assembler::new(),
        }
    }

    /// Takes one line of a script and runs the statements and commands it
    /// completed. `Ok(Flow::Quit)` after `\q`.
    pub async fn line(&mut self, line: &str) -> Result<Flow, String> {
        let items = self.assembler.line(line);
        self.run_items(items).await
    }

    /// The end of a script: runs what is left (a last statement may lack its `;`).
    pub async fn finish(&mut self) -> Result<Flow, String> {
        let items = self.assembler.finish();
        self.run_items(items).await
    }

    /// Runs a whole script text, as its lines would arrive.
    pub async fn run_text(&mut self, text: &str) -> Result<Flow, String> {
        for line in text.lines() {
            if self.line(line).await? == Flow::Quit {
                return Ok(Flow::Quit);
            }
        }
        self.finish().await
    }

    async fn run_items(&mut self, items: Vec<Item>) -> Result<Flow, String> {
        for item in items {
            let flow = match item {
                Item::Statement(sql) => {
                    self.echo(&format!("{sql};"))?;
                    self.statement(&sql).await?;
                    Flow::Continue
                }
                Item::Command(line) => {
                    self.echo(&line)?;
                    let parsed = Command::parse(&line)?;
                    command::execute(self, &parsed).await?
                }
            };
            if flow == Flow::Quit {
                // What else waits is not run; an unfinished statement says so.
                if let Some(statement) = self.assembler.unfinished() {
                    eprintln!("{}", command::not_run_at_quit(statement));
                }
                self.assembler = Assembler::new();
                return Ok(Flow::Quit);
            }
        }
        Ok(Flow::Continue)
    }

    /// Prints `text` where status lines go: standard output in the `table`
    /// format; standard error in the others, which keep standard output
    /// for data.
    fn status(&self, text: &str) -> Result<(), String> {
        if self.options.format == Format::Table {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot write to standard output: {e}"))
        } else {
            eprintln!("{text}");
            Ok(())
        }
    }

    fn echo(&self, text: &str) -> Result<(), String> {
        if self.options.echo {
            self.status(text)?;
        }
        Ok(())
    }
}

impl Frontend for ScriptRunner {
    fn context(&mut self) -> &mut LakeStreamContext {
        &mut self.ctx
    }

    fn set_format(&mut self, format: Format) {
        self.options.format = format;
    }

    fn set_quiet(&mut self, quiet: Option<bool>) {
        self.options.quiet = quiet.unwrap_or(!self.options.quiet);
    }

    fn say(&mut self, text: &str) {
        if !self.options.quiet {
            // A message that cannot be written is no reason to stop.
            let _ = self.status(text);
        }
    }

    async fn statement(&mut self, sql: &str) -> Result<(), String> {
        let verbose = self.options.verbose;
        let started = Instant::now();
        let df = self
            .ctx
            .execute(sql)
            .await
            .map_err(|e| errors::describe(&e, verbose))?;
        let schema = Arc::clone(df.schema().inner());
        let batches = df
            .collect()
            .await
            .map_err(|e| errors::describe(&e, verbose))?;
        let elapsed = started.elapsed().as_secs_f64();
        let ack = acknowledges(&schema, &batches);
        if !ack {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            write_batches(&mut out, self.options.format, &schema, &batches)
                .map_err(|e| e.to_string())?;
            out.flush()
                .map_err(|e| format!("cannot write to standard output: {e}"))?;
        }
        if !self.options.quiet {
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            let status = if ack {
                format!("OK. Query took {elapsed:.3} seconds.")
            } else {
                format!("{rows} rows in set. Query took {elapsed:.3} seconds.")
            };
            if self.options.format == Format::Table {
                self.status(&format!("{status}\n"))?;
            } else {
                self.status(&status)?;
            }
        }
        Ok(())
    }
}
