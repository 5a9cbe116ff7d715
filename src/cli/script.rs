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
    let dialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, text).tokenize_with_location() else {
        return non_blank(text).into_iter().collect();
    };
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
            Token::Whitespace(Whitespace::Space | Whitespace::Newline | Whitespace::Tab)
            | Token::Whitespace(Whitespace::SingleLineComment { .. })
            | Token::Whitespace(Whitespace::MultiLineComment(_))
            | Token::EOF => {}
            _ => has_content = true,
        }
    }
    if has_content {
        statements.extend(text.get(start..).and_then(non_blank));
    }
    statements
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

    #[test]
    fn unreadable_text_is_one_statement() {
        assert_eq!(split_statements("SELECT 'oops; x"), vec!["SELECT 'oops; x"]);
    }
}
