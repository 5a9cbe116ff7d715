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
//!   options privately, so [`LakeStreamSession`] mirrors the ones that select
//!   history.
//!
//! The same module refuses what `SQLContext`'s text rewrite of time-travel
//! clauses ([`super::travel`]) would garble ([`check_rewrite`]).

use std::collections::HashMap;

use datafusion::sql::sqlparser::ast::TableVersion;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::parsed::Parsed;
use crate::error::{Error, Result};
use crate::name::{self, RelationName};
use crate::table::LakeStreamSession;

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
    state: &LakeStreamSession,
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
        let state = LakeStreamSession::default();
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
