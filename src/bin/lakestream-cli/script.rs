//! Splitting SQL text into statements.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

/// Splits `text` at top-level semicolons, ignoring those in strings, quoted
/// names and comments. Statements that hold only whitespace and comments are
/// dropped; each statement keeps its text as written, without the `;`.
///
/// Text the tokenizer cannot read (an unterminated string, say) comes back as
/// one statement, so that running it reports the error.
pub fn split_statements(text: &str) -> Vec<String> {
    let Some((mut statements, end)) = split_terminated(text) else {
        return non_blank(text).into_iter().collect();
    };
    if let Some(rest) = text.get(end..) {
        if has_content(rest) {
            statements.extend(non_blank(rest));
        }
    }
    statements
}

/// The statements of `text` that end with a top-level `;`, and the byte
/// offset just after the last such `;` (0 when there is none): what follows
/// is an unfinished statement, or only whitespace and comments. `None` when
/// the tokenizer cannot read the text (an open string, say).
fn split_terminated(text: &str) -> Option<(Vec<String>, usize)> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .ok()?;
    let offsets = LineOffsets::new(text);
    let mut statements = Vec::new();
    let mut start = 0;
    let mut has_content = false;
    for token in &tokens {
        match &token.token {
            Token::SemiColon => {
                let end = offsets.byte_offset(token.span.start.line, token.span.start.column);
                if has_content {
                    // `get`: a position the tokenizer and this mapping disagree
                    // on is no reason to panic; the rest stays one statement.
                    let Some(statement) = text.get(start..end) else {
                        break;
                    };
                    statements.extend(non_blank(statement));
                }
                start = end + 1;
                has_content = false;
            }
            token if is_blank(token) => {}
            _ => has_content = true,
        }
    }
    Some((statements, start.min(text.len())))
}

/// Whether `token` is whitespace, a comment or the end of the text.
pub(crate) fn is_blank(token: &Token) -> bool {
    matches!(
        token,
        Token::Whitespace(
            Whitespace::Space
                | Whitespace::Newline
                | Whitespace::Tab
                | Whitespace::SingleLineComment { .. }
                | Whitespace::MultiLineComment(_)
        ) | Token::EOF
    )
}

/// Whether the tokenizer reads `text` to its end: no string, quoted name or
/// comment is left open.
fn readable(text: &str) -> bool {
    Tokenizer::new(&GenericDialect {}, text).tokenize().is_ok()
}

/// Whether `text` holds more than whitespace and comments (text the
/// tokenizer cannot read counts as content).
fn has_content(text: &str) -> bool {
    match Tokenizer::new(&GenericDialect {}, text).tokenize() {
        Ok(tokens) => !tokens.iter().all(is_blank),
        Err(_) => !text.trim().is_empty(),
    }
}

/// A line of a script, once it is complete: a statement (without its `;`)
/// or a backslash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A statement, as written (comments before it included).
    Statement(String),
    /// A line that starts with `\` between statements, trimmed.
    Command(String),
}

/// Cuts a script into statements and backslash commands as its lines
/// arrive, so that each statement can run as soon as its `;` has arrived
/// (piped standard input need not be closed first), the way the interactive
/// shell does:
///
/// - a line that starts with `\` is a command, unless it continues a string,
///   a quoted name or a comment; as in psql, a command between the lines of
///   an unfinished statement leaves the statement waiting for its `;`
///   ([`Self::unfinished`]; `\q` then quits without running it);
/// - anything else is SQL; every statement whose `;` has arrived is handed
///   out, the text after the last `;` waits for more lines;
/// - at the end ([`Self::finish`]) what waits is a statement, even without
///   a `;`.
#[derive(Debug, Default)]
pub struct Assembler {
    pending: String,
}

impl Assembler {
    /// An assembler with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one line (with or without its line ending) and returns what it
    /// completed.
    pub fn line(&mut self, line: &str) -> Vec<Item> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim_start().starts_with('\\') && readable(&self.pending) {
            if !has_content(&self.pending) {
                // Comments before a command go with it.
                self.pending.clear();
            }
            return vec![Item::Command(line.trim().to_string())];
        }
        self.pending.push_str(line);
        self.pending.push('\n');
        // Only a line with a `;` can complete a statement: the others need
        // not tokenize what waits again.
        if !line.contains(';') {
            return Vec::new();
        }
        let Some((statements, end)) = split_terminated(&self.pending) else {
            return Vec::new();
        };
        if end == 0 {
            return Vec::new();
        }
        self.pending.drain(..end);
        statements.into_iter().map(Item::Statement).collect()
    }

    /// The statement waiting for its `;`, if one has begun.
    pub fn unfinished(&self) -> Option<&str> {
        has_content(&self.pending).then(|| self.pending.trim())
    }

    /// The end of the script: what waits, as statements.
    pub fn finish(&mut self) -> Vec<Item> {
        let pending = std::mem::take(&mut self.pending);
        split_statements(&pending)
            .into_iter()
            .map(Item::Statement)
            .collect()
    }
}

fn non_blank(text: &str) -> Option<String> {
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// Maps the tokenizer's 1-based line and character column to byte offsets.
struct LineOffsets<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineOffsets<'a> {
    fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, line_starts }
    }

    fn byte_offset(&self, line: u64, column: u64) -> usize {
        let line_index = usize::try_from(line.saturating_sub(1)).unwrap_or(usize::MAX);
        let Some(&line_start) = self.line_starts.get(line_index) else {
            return self.text.len();
        };
        let chars_in = usize::try_from(column.saturating_sub(1)).unwrap_or(usize::MAX);
        self.text
            .get(line_start..)
            .and_then(|line| line.char_indices().nth(chars_in))
            .map_or(self.text.len(), |(i, _)| line_start + i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_top_level_semicolons() {
        assert_eq!(
            split_statements("SELECT 1; SELECT 'a;b';\n-- c;\nSELECT \"x;\" /* ; */ FROM t;"),
            vec![
                "SELECT 1",
                "SELECT 'a;b'",
                "-- c;\nSELECT \"x;\" /* ; */ FROM t"
            ]
        );
    }

    #[test]
    fn drops_blank_and_comment_only_statements() {
        assert_eq!(
            split_statements(" ;; -- only a comment\n ; "),
            Vec::<String>::new()
        );
        assert_eq!(split_statements("SELECT 1"), vec!["SELECT 1"]);
    }

    #[test]
    fn keeps_multibyte_text_intact() {
        assert_eq!(
            split_statements("SELECT 'é;ü' AS «x»;\nSELECT 2"),
            vec!["SELECT 'é;ü' AS «x»", "SELECT 2"]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any text splits without a panic, into statements found in it.
        #[test]
        fn splitting_never_panics(text in "(\\PC|[;'\"\n$.é]|--|/\\*|\\*/){0,60}") {
            for statement in split_statements(&text) {
                proptest::prop_assert!(text.contains(&statement));
            }
        }
    }

    fn items(lines: &[&str]) -> Vec<Vec<Item>> {
        let mut assembler = Assembler::new();
        let mut out: Vec<Vec<Item>> = lines.iter().map(|l| assembler.line(l)).collect();
        out.push(assembler.finish());
        out
    }

    fn statement(text: &str) -> Item {
        Item::Statement(text.to_string())
    }

    #[test]
    fn statements_are_handed_out_when_their_semicolon_arrives() {
        assert_eq!(
            items(&["SELECT 1;", "SELECT", "2; SELECT 3", ";", "SELECT 4"]),
            vec![
                vec![statement("SELECT 1")],
                vec![],
                vec![statement("SELECT\n2")],
                vec![statement("SELECT 3")],
                vec![],
                vec![statement("SELECT 4")],
            ]
        );
        // A `;` in a string, a quoted name or a comment ends nothing.
        assert_eq!(
            items(&["SELECT 'a;", "b' AS \"x;\" -- ;", "FROM t /* ; */;"]),
            vec![
                vec![],
                vec![],
                vec![statement("SELECT 'a;\nb' AS \"x;\" -- ;\nFROM t /* ; */")],
                vec![],
            ]
        );
    }

    #[test]
    fn backslash_lines_between_statements_are_commands() {
        assert_eq!(
            items(&[
                "SELECT 1;",
                "\\pset format csv",
                "-- a comment",
                "  \\q  ",
                "SELECT 2;"
            ]),
            vec![
                vec![statement("SELECT 1")],
                vec![Item::Command("\\pset format csv".into())],
                vec![],
                vec![Item::Command("\\q".into())],
                vec![statement("SELECT 2")],
                vec![],
            ]
        );
        // Inside a string, a quoted name or a comment, such a line is SQL.
        assert_eq!(
            items(&["SELECT 'a", "\\q';"]),
            vec![vec![], vec![statement("SELECT 'a\n\\q'")], vec![]]
        );
        assert_eq!(
            items(&["SELECT 1 /* a", "\\q */;"]),
            vec![vec![], vec![statement("SELECT 1 /* a\n\\q */")], vec![]]
        );
        // Comments after a `;` do not open a statement.
        assert_eq!(
            items(&["SELECT 1; -- done", "\\q"]),
            vec![
                vec![statement("SELECT 1")],
                vec![Item::Command("\\q".into())],
                vec![]
            ]
        );
    }

    /// As in psql: a command on the line after an unfinished statement runs,
    /// and the statement waits for its `;`; it is never part of the command.
    #[test]
    fn a_command_after_an_unfinished_statement_leaves_it_waiting() {
        let mut assembler = Assembler::new();
        assert_eq!(assembler.line("SELECT 1"), vec![]);
        assert_eq!(assembler.unfinished(), Some("SELECT 1"));
        assert_eq!(
            assembler.line("\\pset format csv"),
            vec![Item::Command("\\pset format csv".into())]
        );
        assert_eq!(
            assembler.line("AS one;"),
            vec![statement("SELECT 1\nAS one")]
        );
        assert_eq!(assembler.unfinished(), None);
        assert_eq!(assembler.line("SELECT 2 -- no ';'"), vec![]);
        assert_eq!(assembler.line("\\q"), vec![Item::Command("\\q".into())]);
        assert_eq!(assembler.unfinished(), Some("SELECT 2 -- no ';'"));
        // Comments alone are no unfinished statement.
        let mut assembler = Assembler::new();
        assert_eq!(assembler.line("-- a comment"), vec![]);
        assert_eq!(assembler.unfinished(), None);
    }

    #[test]
    fn unreadable_text_is_one_statement() {
        assert_eq!(split_statements("SELECT 'oops; x"), vec!["SELECT 'oops; x"]);
    }
}
