//! `t$rt` has no history: the rule, and every way a statement can ask for
//! history, in one place, with one error ([`Error::RealtimeTimeTravel`]).
//!
//! A statement asks for history in one of three ways, and each is seen by
//! a different reading of it, so the rule has two callers:
//! - **A clause in the text** (`VERSION AS OF`, `TIMESTAMP AS OF`):
//!   `SQLContext` cuts these out of the text and swaps the table for a
//!   temporary one before anything parses the statement, so no planner
//!   ever sees them. The statement filter checks them on the tokens
//!   ([`check_text`]).
//! - **A clause in a parsed tree** (`FOR SYSTEM_TIME AS OF`, or any
//!   version clause in a dialect with table versioning, which an app using
//!   `LakeStreamExtension` without the filter may pick), and
//! - **a Paimon scan option set for the session** (`SET
//!   'paimon.scan.snapshot-id' = ...`): the relation planner checks both as
//!   it plans `t$rt` ([`check_planned`]). `SQLContext` keeps the session's
//!   options privately, so [`PlannerState`] mirrors the ones that select
//!   history.
//!
//! The same module holds what `SQLContext`'s text rewrite needs of a
//! statement that travels in time ([`travels_in_time`], [`check_rewrite`]).

use std::collections::HashMap;

use datafusion::sql::sqlparser::ast::TableVersion;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::parsed::Parsed;
use super::PlannerState;
use crate::error::{Error, Result};
use crate::name::{self, RelationName};

/// Paimon scan options that select history.
const TIME_TRAVEL_KEYS: &[&str] = &[
    "scan.snapshot-id",
    "scan.version",
    "scan.tag-name",
    "scan.timestamp-millis",
    "scan.timestamp",
    "scan.watermark",
    "scan.file-creation-time-millis",
    "scan.mode",
];

/// The statement filter's check: a time-travel clause written after a
/// `t$rt` name in the text, or after its alias (`t$rt x VERSION AS OF 1`,
/// `t$rt AS x ...`: `SQLContext` would take the alias for the table).
pub(crate) fn check_text(parsed: &Parsed<'_>) -> Result<()> {
    let words: Vec<&Token> = parsed.significant().collect();
    let keyword = |index: usize| match words.get(index) {
        Some(Token::Word(w)) => w.keyword,
        _ => Keyword::NoKeyword,
    };
    let realtime = |index: Option<usize>| match index.and_then(|i| words.get(i)) {
        Some(Token::Word(word)) => match name::parse(&word.value) {
            Ok(RelationName::Realtime { table }) => Some((word.value.as_str(), table)),
            _ => None,
        },
        _ => None,
    };
    for i in 1..words.len() {
        let clause = match (keyword(i), keyword(i + 1), keyword(i + 2)) {
            (Keyword::VERSION, Keyword::AS, Keyword::OF) => "VERSION AS OF",
            (Keyword::TIMESTAMP, Keyword::AS, Keyword::OF) => "TIMESTAMP AS OF",
            (Keyword::FOR, Keyword::SYSTEM_TIME, Keyword::AS) => "FOR SYSTEM_TIME AS OF",
            _ => continue,
        };
        // The name, or the name and its alias, with or without `AS`.
        let two_back = i.checked_sub(2).map_or(Keyword::NoKeyword, keyword);
        let named = realtime(Some(i - 1))
            .or_else(|| realtime(i.checked_sub(2)))
            .or_else(|| match two_back {
                Keyword::AS => realtime(i.checked_sub(3)),
                _ => None,
            });
        if let Some((name, table)) = named {
            return Err(refused(name, table, clause.to_string()));
        }
    }
    Ok(())
}

/// The relation planner's check, as it plans `name` (`t$rt`, of `table`):
/// the relation's version clause, then the session's options.
pub(crate) fn check_planned(
    name: &str,
    table: &str,
    version: Option<&TableVersion>,
    state: &PlannerState,
) -> Result<()> {
    if let Some(version) = version {
        return Err(refused(name, table, describe_version(version)));
    }
    if let Some(key) = state.with_dynamic_options(session_option) {
        return Err(refused(
            name,
            table,
            format!("the session option 'paimon.{key}'"),
        ));
    }
    Ok(())
}

fn refused(name: &str, table: &str, clause: String) -> Error {
    Error::RealtimeTimeTravel {
        name: name.to_string(),
        table: table.to_string(),
        clause,
    }
}

/// The first option set for the session that selects history.
fn session_option(options: &HashMap<String, String>) -> Option<&'static str> {
    TIME_TRAVEL_KEYS
        .iter()
        .find(|key| options.contains_key(**key))
        .copied()
}

fn describe_version(version: &TableVersion) -> String {
    match version {
        TableVersion::VersionAsOf(_) => "VERSION AS OF".to_string(),
        TableVersion::TimestampAsOf(_) => "TIMESTAMP AS OF".to_string(),
        TableVersion::ForSystemTimeAsOf(_) => "FOR SYSTEM_TIME AS OF".to_string(),
        other => format!("the clause '{other}'"),
    }
}

/// Whether `sql` holds a time-travel clause as `SQLContext` finds them
/// (`VERSION AS OF`, `TIMESTAMP AS OF`, rewritten from the text before it
/// parses), looking inside strings and comments too: wider than its own
/// test, so nothing it would rewrite is missed. [`Parsed`] asks once.
pub(crate) fn travels_in_time(sql: &str) -> bool {
    let contains = |clause: &str| {
        sql.as_bytes()
            .windows(clause.len())
            .any(|w| w.eq_ignore_ascii_case(clause.as_bytes()))
    };
    contains("version as of ") || contains("timestamp as of ")
}

/// A time-travel clause as `SQLContext` finds it in a statement's text,
/// with the name before it: `SQLContext` swaps `text` for a temporary table
/// of `name`'s snapshot before anything parses the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Clause {
    /// Where `name` and its clause are in the text.
    pub(crate) range: std::ops::Range<usize>,
    /// The name, as written (`t`, `db."T"`).
    pub(crate) name: String,
    /// `VERSION AS OF ...` or `TIMESTAMP AS OF ...`, as written.
    pub(crate) clause: String,
}

/// Every clause `SQLContext` (paimon-datafusion 0.4) rewrites out of `sql`,
/// in text order, found as it finds them (its own functions are private):
/// `version as of ` followed by digits or a quoted tag, `timestamp as of `
/// followed by a quoted timestamp, outside single-quoted strings and
/// comments, any ASCII case; the name is the text back to the nearest
/// whitespace, comma or parenthesis. Empty where it finds none, and where a
/// character would shift its byte positions ([`check_rewrite`] refuses
/// those) or two clauses overlap (it would garble the statement).
pub(crate) fn sqlcontext_clauses(sql: &str) -> Vec<Clause> {
    let lower = sql.to_lowercase();
    if lower.len() != sql.len() {
        return Vec::new();
    }
    let mut clauses = Vec::new();
    for (keyword, quoted_only) in [("version as of ", false), ("timestamp as of ", true)] {
        clauses.extend(find_clauses(sql, &lower, keyword, quoted_only));
    }
    clauses.sort_by_key(|c| c.range.start);
    let overlapping = clauses
        .windows(2)
        .any(|pair| pair[0].range.end > pair[1].range.start);
    if overlapping {
        return Vec::new();
    }
    clauses
}

/// The clauses of one keyword, as `SQLContext`'s scan for it finds them.
fn find_clauses(sql: &str, lower: &str, keyword: &str, quoted_only: bool) -> Vec<Clause> {
    let bytes = lower.as_bytes();
    let original = sql.as_bytes();
    let len = bytes.len();
    let mut found = Vec::new();
    let mut i = 0;
    while i < len {
        match bytes[i] {
            b'\'' => {
                i += 1;
                while i < len {
                    if original[i] == b'\'' {
                        i += 1;
                        if i < len && original[i] == b'\'' {
                            i += 1;
                        } else {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i += 2;
                while i < len && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < len {
                    if bytes[i] == b'*' && bytes[i + 1] == b'/' {
                        i += 2;
                        break;
                    }
                    i += 1;
                }
            }
            _ if bytes[i..].starts_with(keyword.as_bytes()) => {
                let value_start = i + keyword.len();
                let Some(value_end) = clause_value_end(sql, value_start, quoted_only) else {
                    i += 1;
                    continue;
                };
                let Some(before) = sql.get(..i) else {
                    i += 1;
                    continue;
                };
                let name_end = before.trim_end_matches(' ').len();
                let name_start = before[..name_end]
                    .rfind(|c: char| c.is_whitespace() || c == ',' || c == '(')
                    .map_or(0, |at| at + 1);
                let name = &sql[name_start..name_end];
                if !name.is_empty() {
                    found.push(Clause {
                        range: name_start..value_end,
                        name: name.to_string(),
                        clause: sql[i..value_end].to_string(),
                    });
                }
                i = value_end;
            }
            _ => i += 1,
        }
    }
    found
}

/// Where the value of a clause starting at `start` ends: a quoted string,
/// or (unless `quoted_only`) ASCII digits; `None` where there is neither.
fn clause_value_end(sql: &str, start: usize, quoted_only: bool) -> Option<usize> {
    let rest = sql.get(start..)?;
    if let Some(quoted) = rest.strip_prefix('\'') {
        return quoted.find('\'').map(|close| start + close + 2);
    }
    if quoted_only {
        return None;
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0).then_some(start + digits)
}

/// `SQLContext` (paimon-datafusion 0.4) finds `VERSION AS OF` and
/// `TIMESTAMP AS OF` clauses by their byte positions in the lower-cased
/// text and slices the statement there. A character whose lower case has
/// another length in bytes (`İ`, `ẞ`, the Kelvin sign) shifts those
/// positions: the statement panicked, or was rewritten at the wrong place.
/// Such statements are refused before `SQLContext` sees them.
pub(crate) fn check_rewrite(parsed: &Parsed<'_>) -> Result<()> {
    if !parsed.travels_in_time() {
        return Ok(());
    }
    let shifting = parsed
        .sql()
        .chars()
        .find(|c| c.to_lowercase().map(char::len_utf8).sum::<usize>() != c.len_utf8());
    match shifting {
        None => Ok(()),
        Some(c) => Err(Error::InvalidStatement {
            statement: "VERSION AS OF / TIMESTAMP AS OF".to_string(),
            reason: format!(
                "the statement holds '{c}', whose lower case is longer or shorter in bytes, and \
                 paimon-datafusion 0.4 locates time-travel clauses by byte position in the \
                 lower-cased text, which '{c}' would shift. Write it as chr({}) in this \
                 statement, or read without time travel",
                u32::from(c)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::ast::{Expr, Value};

    use super::*;

    #[test]
    fn time_travel_on_rt_is_refused_from_the_text() {
        for (sql, clause) in [
            ("SELECT * FROM t$rt VERSION AS OF 1", "VERSION AS OF"),
            ("SELECT * FROM t$rt VERSION AS OF 'tag'", "VERSION AS OF"),
            (
                "SELECT * FROM db.\"T$RT\" TIMESTAMP AS OF '2024-01-01 00:00:00'",
                "TIMESTAMP AS OF",
            ),
            (
                "SELECT * FROM t$rt FOR SYSTEM_TIME AS OF '2024-01-01'",
                "FOR SYSTEM_TIME AS OF",
            ),
            (
                "SELECT * FROM t$rt /* a comment */ VERSION\nAS OF 1",
                "VERSION AS OF",
            ),
            ("SELECT * FROM t$rt x VERSION AS OF 1", "VERSION AS OF"),
            (
                "SELECT * FROM c.db.t$rt AS x TIMESTAMP AS OF '2024-01-01'",
                "TIMESTAMP AS OF",
            ),
        ] {
            let err = check_text(&Parsed::generic(sql)).unwrap_err().to_string();
            assert!(err.contains(clause), "{err}");
            assert!(err.contains("has no history"), "{err}");
        }
        check_text(&Parsed::generic("SELECT * FROM t VERSION AS OF 1")).unwrap();
        check_text(&Parsed::generic("SELECT 't$rt VERSION AS OF 1'")).unwrap();
        check_text(&Parsed::generic("SELECT * FROM t x VERSION AS OF 1")).unwrap();
        check_text(&Parsed::generic(
            "SELECT * FROM t$rt JOIN u VERSION AS OF 1 ON t.a = u.a",
        ))
        .unwrap();
    }

    #[test]
    fn a_planned_clause_or_a_session_option_is_refused() {
        let state = PlannerState::default();
        check_planned("t$rt", "t", None, &state).unwrap();
        let version =
            TableVersion::ForSystemTimeAsOf(Expr::value(Value::Number("1".to_string(), false)));
        let err = check_planned("t$rt", "t", Some(&version), &state)
            .unwrap_err()
            .to_string();
        assert!(err.contains("FOR SYSTEM_TIME AS OF"), "{err}");
        state.set_dynamic_option("scan.tag-name", Some("x".to_string()));
        let err = check_planned("t$rt", "t", None, &state)
            .unwrap_err()
            .to_string();
        assert!(err.contains("'paimon.scan.tag-name'"), "{err}");
        state.set_dynamic_option("scan.tag-name", None);
        state.set_dynamic_option("scan.manifest.format", Some("avro".to_string()));
        check_planned("t$rt", "t", None, &state).unwrap();
    }

    #[test]
    fn clauses_are_found_where_sqlcontext_finds_them() {
        let found = |sql: &str| -> Vec<(String, String)> {
            sqlcontext_clauses(sql)
                .into_iter()
                .map(|c| {
                    assert_eq!(&sql[c.range.clone()], format!("{} {}", c.name, c.clause));
                    (c.name, c.clause)
                })
                .collect()
        };
        let pair = |name: &str, clause: &str| (name.to_string(), clause.to_string());
        assert_eq!(
            found("SELECT * FROM db.\"T\" Version As Of 12 WHERE k = 1"),
            [pair("db.\"T\"", "Version As Of 12")]
        );
        assert_eq!(
            found(
                "INSERT INTO t SELECT * FROM a TIMESTAMP AS OF '2024-01-01 00:00:00' \
                 JOIN (SELECT * FROM b VERSION AS OF 'tag') x ON true,c VERSION AS OF 3"
            ),
            [
                pair("a", "TIMESTAMP AS OF '2024-01-01 00:00:00'"),
                pair("b", "VERSION AS OF 'tag'"),
                pair("c", "VERSION AS OF 3"),
            ]
        );
        // Not in strings or comments, not without a value, not across a
        // line break (SQLContext's name would be empty).
        for sql in [
            "SELECT 't VERSION AS OF 1'",
            "SELECT 1 -- t VERSION AS OF 1",
            "SELECT 1 /* t VERSION AS OF 1 */",
            "SELECT * FROM t VERSION AS OF x",
            "SELECT * FROM t TIMESTAMP AS OF 1",
            "SELECT * FROM t\nVERSION AS OF 1",
            "SELECT * FROM t VERSION AS OF 1 WHERE a = 'İ'",
        ] {
            assert_eq!(found(sql), [], "{sql}");
        }
    }

    #[test]
    fn time_travel_with_length_changing_characters_is_refused() {
        let check = |sql: &str| check_rewrite(&Parsed::generic(sql));
        for sql in [
            "SELECT * FROM t VERSION AS OF 1 WHERE a = 'İ'",
            "select 'ẞ' from t timestamp as of '2024-01-01'",
            "SELECT '\u{212A}' FROM t Version As Of 1",
        ] {
            let err = check(sql).unwrap_err().to_string();
            assert!(err.contains("chr("), "{err}");
        }
        check("SELECT * FROM t VERSION AS OF 1 WHERE a = 'é'").unwrap();
        check("SELECT 'İ' FROM t").unwrap();
        check("SELECT 'İ' FROM version").unwrap();
    }
}
