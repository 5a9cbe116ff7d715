//! The backslash commands (`\q`, `\d`, `\pset format csv`, ...): the same in
//! the interactive shell, in piped standard input and in `-f` files.

use super::print::Format;
use paimon_lakestream::LakeStreamContext;

/// The help `\?` prints.
pub const HELP: &str = "\
Statements end with ';' and may span lines. Commands:
  \\q              quit (or Ctrl-D)
  \\?              this help
  \\d              list tables
  \\d NAME         describe a table (columns, and options of Paimon tables)
  \\pset format F  output format: table, csv, json, ndjson
  \\quiet [on|off] hide or show row counts and timing
Ctrl-C cancels a running query (a streaming t$rt read runs until cancelled).
lake-stream: `t` reads Paimon snapshots, `t$rt` the store's fresh rows;
CALL sys.lakestream_tier('db.t') tiers now; SET lakestream.scan_mode = 'streaming'.";

/// A backslash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `\q`, `\quit`: stop.
    Quit,
    /// `\?`, `\h`, `\help`.
    Help,
    /// `\d`: the tables of every catalog.
    ListTables,
    /// `\d NAME`: a table's columns, and a Paimon table's options.
    Describe(String),
    /// `\pset format F`.
    SetFormat(Format),
    /// `\quiet` (`None`: toggle), `\quiet on`, `\quiet off`.
    Quiet(Option<bool>),
}

impl Command {
    /// Parses a line that starts with `\`. The error names the line and says
    /// where the list of commands is.
    pub fn parse(line: &str) -> Result<Self, String> {
        let line = line.trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        Ok(match words.as_slice() {
            ["\\q"] | ["\\quit"] => Command::Quit,
            ["\\?"] | ["\\h"] | ["\\help"] => Command::Help,
            ["\\d"] => Command::ListTables,
            ["\\d", name] => Command::Describe((*name).to_string()),
            ["\\pset", "format", format] => {
                Command::SetFormat(format.parse().map_err(|e| format!("{line}: {e}"))?)
            }
            ["\\quiet"] => Command::Quiet(None),
            ["\\quiet", "on"] => Command::Quiet(Some(true)),
            ["\\quiet", "off"] => Command::Quiet(Some(false)),
            _ => return Err(format!("unknown command '{line}'; \\? lists the commands")),
        })
    }
}

/// What `\q` prints (on standard error) when it finds a statement that has
/// begun without its `;`: that statement is not run, as in psql, and says so.
pub fn not_run_at_quit(statement: &str) -> String {
    let mut lines = statement.lines();
    let first = lines.next().unwrap_or_default();
    let more = if lines.next().is_some() { " ..." } else { "" };
    format!("Warning: \\q: not run, as it lacks its terminating ';': {first}{more}")
}

/// Whether to go on after a command or statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// `\q`: stop, successfully.
    Quit,
}

/// What a front end (the shell, a script) gives [`execute`].
pub(crate) trait Frontend {
    fn context(&mut self) -> &mut LakeStreamContext;
    fn set_format(&mut self, format: Format);
    /// `None`: toggle.
    fn set_quiet(&mut self, quiet: Option<bool>);
    /// Prints a message of the shell itself (help, a changed setting).
    fn say(&mut self, text: &str);
    /// Runs a statement and prints its result.
    async fn statement(&mut self, sql: &str) -> Result<(), String>;
}

/// The statement `\d` runs.
const LIST_TABLES: &str = "SELECT table_catalog, table_schema, table_name, table_type \
     FROM information_schema.tables \
     WHERE table_schema <> 'information_schema' \
     ORDER BY table_catalog, table_schema, table_name";

/// Carries out `command`.
pub(crate) async fn execute<F: Frontend>(
    frontend: &mut F,
    command: &Command,
) -> Result<Flow, String> {
    match command {
        Command::Quit => return Ok(Flow::Quit),
        Command::Help => frontend.say(HELP),
        Command::ListTables => frontend.statement(LIST_TABLES).await?,
        Command::Describe(name) => {
            frontend.statement(&format!("DESCRIBE {name}")).await?;
            // Paimon tables show their options, lake-stream ones included.
            let options_sql = format!("SELECT key, value FROM {name}$options ORDER BY key");
            if frontend.context().sql(&options_sql).await.is_ok() {
                frontend.statement(&options_sql).await?;
            }
        }
        Command::SetFormat(format) => {
            frontend.set_format(*format);
            frontend.say(&format!("Output format is {format}."));
        }
        Command::Quiet(quiet) => frontend.set_quiet(*quiet),
    }
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_unknown_ones_say_so() {
        assert_eq!(Command::parse("  \\q "), Ok(Command::Quit));
        assert_eq!(Command::parse("\\quit"), Ok(Command::Quit));
        assert_eq!(Command::parse("\\?"), Ok(Command::Help));
        assert_eq!(Command::parse("\\d"), Ok(Command::ListTables));
        assert_eq!(
            Command::parse("\\d db.t"),
            Ok(Command::Describe("db.t".into()))
        );
        assert_eq!(
            Command::parse("\\pset format CSV"),
            Ok(Command::SetFormat(Format::Csv))
        );
        assert_eq!(Command::parse("\\quiet on"), Ok(Command::Quiet(Some(true))));
        let err = Command::parse("\\pset format xml").unwrap_err();
        assert!(
            err.contains("\\pset format xml") && err.contains("csv"),
            "{err}"
        );
        let err = Command::parse("\\x").unwrap_err();
        assert!(err.contains("unknown command '\\x'"), "{err}");
    }

    #[test]
    fn quitting_names_the_statement_it_does_not_run() {
        assert_eq!(
            not_run_at_quit("SELECT 1"),
            "Warning: \\q: not run, as it lacks its terminating ';': SELECT 1"
        );
        assert_eq!(
            not_run_at_quit("DELETE FROM t\nWHERE id = 1"),
            "Warning: \\q: not run, as it lacks its terminating ';': DELETE FROM t ..."
        );
    }
}
