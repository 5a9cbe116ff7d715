//! Where `SQLContext` (paimon-datafusion 0.4) finds the time-travel
//! clauses it rewrites out of a statement's text (`VERSION AS OF`,
//! `TIMESTAMP AS OF`) before anything parses it: [`Parsed`] asks once, and
//! the filter and the history rule ([`super::history`]) read its answer.
//!
//! [`Parsed`]: super::parsed::Parsed

/// Whether `sql` holds a time-travel clause as `SQLContext` finds them
/// (`VERSION AS OF`, `TIMESTAMP AS OF`, rewritten from the text before it
/// parses), looking inside strings and comments too: wider than its own
/// test, so nothing it would rewrite is missed.
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
/// character would shift its byte positions ([`super::history::check_rewrite`]
/// refuses those) or two clauses overlap (it would garble the statement).
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
