//! Parsing relation names: `t`, `t$rt`, and the mixes of `$rt` with branches
//! and system tables that the store cannot serve.
//!
//! Only names with an `rt` part are ours. Every other name (`t`, `t$snapshots`,
//! `t$branch_b1`, `t$`) is handed to Paimon unchanged, so Paimon keeps deciding
//! what its own names mean.

use datafusion::sql::sqlparser::ast::Ident;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::error::NameError;

/// The suffix that reads a lake-stream table from its store.
pub(crate) const RT_SUFFIX: &str = "rt";
const SPLITTER: char = '$';
const BRANCH_PREFIX: &str = "branch_";

/// What a relation name asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RelationName<'a> {
    /// Not ours: Paimon resolves it (tables, system tables, branches).
    Paimon(&'a str),
    /// `t$rt`: the store's read of table `t` (main branch).
    Realtime {
        /// The table part, case kept.
        table: &'a str,
    },
}

/// Parses an object name (the last part of `catalog.db.object`).
///
/// Never panics; every input is either [`RelationName`] or a [`NameError`].
pub(crate) fn parse(object: &str) -> Result<RelationName<'_>, NameError> {
    let parts: Vec<&str> = object.split(SPLITTER).collect();
    let is_rt = |part: &&str| part.eq_ignore_ascii_case(RT_SUFFIX);
    if !parts.iter().skip(1).any(is_rt) {
        return Ok(RelationName::Paimon(object));
    }
    let table = parts[0];
    if table.trim().is_empty() {
        return Err(NameError::EmptyTable {
            name: object.to_string(),
        });
    }
    match parts.as_slice() {
        [_, _rt] => Ok(RelationName::Realtime { table }),
        [_, middle @ .., last] if is_rt(last) => {
            if middle.iter().any(is_rt) {
                Err(NameError::RealtimeTwice {
                    name: object.to_string(),
                    table: table.to_string(),
                })
            } else if let [branch] = middle {
                match branch.strip_prefix(BRANCH_PREFIX) {
                    Some(branch) => Err(NameError::RealtimeOfBranch {
                        name: object.to_string(),
                        table: table.to_string(),
                        branch: branch.to_string(),
                    }),
                    None => Err(NameError::RealtimeOfSystemTable {
                        name: object.to_string(),
                        table: table.to_string(),
                        system: branch.to_string(),
                    }),
                }
            } else {
                Err(NameError::RealtimeOfSystemTable {
                    name: object.to_string(),
                    table: table.to_string(),
                    system: middle.join("$"),
                })
            }
        }
        // `rt` in the middle: `t$rt$snapshots`, `t$rt$branch_b1`, ...
        [_, .., last] => Err(NameError::SuffixAfterRealtime {
            name: object.to_string(),
            table: table.to_string(),
            suffix: last.to_string(),
        }),
        // `parts` has at least two elements here: one `rt` after the first.
        [_] | [] => Ok(RelationName::Paimon(object)),
    }
}

/// Parses a table name as SQL writes it: `t`, `db.t` or `catalog.db.t`,
/// each part an identifier. Quoted parts (`"My.Table"`) keep their text and
/// case; unquoted ones are lower-cased, as DataFusion does. The parts come
/// back in order, one to three of them.
///
/// Never panics; text that is not such a name is a [`NameError::InvalidTableName`].
pub fn parse_table_name(text: &str) -> Result<Vec<String>, NameError> {
    parse_parts(text).map(|idents| {
        idents
            .into_iter()
            .map(|ident| match ident.quote_style {
                Some(_) => ident.value,
                None => ident.value.to_ascii_lowercase(),
            })
            .collect()
    })
}

/// Like [`parse_table_name`], but unquoted parts keep the case they were
/// written in: what a user who forgot to quote a mixed-case name meant.
pub fn parse_table_name_keeping_case(text: &str) -> Result<Vec<String>, NameError> {
    parse_parts(text).map(|idents| idents.into_iter().map(|i| i.value).collect())
}

fn parse_parts(text: &str) -> Result<Vec<Ident>, NameError> {
    let invalid = |reason: String| NameError::InvalidTableName {
        name: text.to_string(),
        reason,
    };
    let dialect = GenericDialect {};
    let idents = Parser::new(&dialect)
        .try_with_sql(text)
        .and_then(|mut parser| parser.parse_multipart_identifier())
        .map_err(|e| invalid(e.to_string()))?;
    if idents.len() > 3 {
        return Err(invalid(format!(
            "it has {} parts; a table name has at most three (catalog.database.table). \
             Quote a part that holds dots: \"my.table\"",
            idents.len()
        )));
    }
    if let Some(empty) = idents.iter().find(|i| i.value.is_empty()) {
        return Err(invalid(format!("the part {empty} is empty")));
    }
    Ok(idents)
}

/// Columns named in a message: `column 'c'`, or `columns 'a', 'b'`.
pub(crate) fn columns_phrase(columns: &[String]) -> String {
    let quoted: Vec<String> = columns.iter().map(|c| format!("'{c}'")).collect();
    match quoted.as_slice() {
        [one] => format!("column {one}"),
        many => format!("columns {}", many.join(", ")),
    }
}

/// `parts` written as SQL: a part that is not a plain lower-case word is
/// double-quoted, so that [`parse_table_name`] gives the same parts back.
/// For messages that tell the user what to type.
pub fn sql_name<S: AsRef<str>>(parts: &[S]) -> String {
    parts
        .iter()
        .map(|part| {
            let part = part.as_ref();
            let mut chars = part.chars();
            let plain = chars
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if plain {
                part.to_string()
            } else {
                format!("\"{}\"", part.replace('"', "\"\""))
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err(name: &str) -> String {
        parse(name).unwrap_err().to_string()
    }

    #[test]
    fn plain_and_paimon_names_pass_through() {
        for name in [
            "t",
            "t$snapshots",
            "t$branch_b1",
            "t$branch_b1$snapshots",
            "t$",
            "rt",
            "t$rtx",
            "t$xrt",
            "my.table",
            "",
            "$",
        ] {
            assert_eq!(parse(name), Ok(RelationName::Paimon(name)), "{name}");
        }
    }

    #[test]
    fn rt_suffix_ignores_ascii_case() {
        for name in ["t$rt", "t$RT", "t$Rt", "t$rT"] {
            assert_eq!(
                parse(name),
                Ok(RelationName::Realtime { table: "t" }),
                "{name}"
            );
        }
        assert_eq!(
            parse("MyTable$RT"),
            Ok(RelationName::Realtime { table: "MyTable" })
        );
        assert_eq!(parse("rt$rt"), Ok(RelationName::Realtime { table: "rt" }));
        assert_eq!(
            parse("my.table$rt"),
            Ok(RelationName::Realtime { table: "my.table" })
        );
    }

    #[test]
    fn branch_rt_points_at_main_and_branch() {
        let e = err("t$branch_b1$rt");
        assert!(e.contains("main branch"), "{e}");
        assert!(e.contains("t$rt"), "{e}");
        assert!(e.contains("t$branch_b1"), "{e}");
    }

    #[test]
    fn rt_system_table_points_at_the_paimon_system_table() {
        let e = err("t$rt$snapshots");
        assert!(e.contains("t$snapshots"), "{e}");
        let e = err("t$snapshots$rt");
        assert!(e.contains("t$snapshots"), "{e}");
        assert!(e.contains("t$rt"), "{e}");
        let e = err("t$rt$branch_b1");
        assert!(e.contains("t$branch_b1"), "{e}");
    }

    #[test]
    fn rt_twice() {
        for name in ["t$rt$rt", "t$RT$rt", "t$rt$rt$rt"] {
            let e = err(name);
            assert!(e.contains("'t$rt'"), "{e}");
        }
    }

    #[test]
    fn empty_table_part() {
        for name in ["$rt", " $rt", "$RT", "$rt$rt"] {
            let e = err(name);
            assert!(e.contains("empty"), "{e}");
        }
    }

    #[test]
    fn quoted_names_with_dollars_and_dots() {
        // Paimon splits object names on `$` too, so `a$b$rt` is `$rt` of the
        // Paimon name `a$b` (table a, system table b): not servable.
        let e = err("a$b$rt");
        assert!(e.contains("a$b"), "{e}");
        assert_eq!(
            parse("a.b.c$rt"),
            Ok(RelationName::Realtime { table: "a.b.c" })
        );
    }

    #[test]
    fn table_names_parse_as_sql_does() {
        let parts = |text: &str| parse_table_name(text).unwrap();
        assert_eq!(parts("t"), ["t"]);
        assert_eq!(parts("default.MyTable"), ["default", "mytable"]);
        assert_eq!(parts("default.\"MyTable\""), ["default", "MyTable"]);
        assert_eq!(parts("\"my.table\""), ["my.table"]);
        assert_eq!(
            parts(" Lake . \"db\" . \"a\"\"b\" "),
            ["lake", "db", "a\"b"]
        );
        assert_eq!(parts("t$rt"), ["t$rt"]);
        assert_eq!(parts("\"é.ü\""), ["é.ü"]);
        assert_eq!(
            parse_table_name_keeping_case("default.MyTable").unwrap(),
            ["default", "MyTable"]
        );
        for bad in [
            "",
            " ",
            "a.",
            ".a",
            "a b",
            "a.b.c.d",
            "'t'",
            "\"unterminated",
            "\"\"",
            "a;b",
        ] {
            let e = parse_table_name(bad).unwrap_err().to_string();
            assert!(e.contains("is not a table name"), "{bad}: {e}");
        }
    }

    #[test]
    fn sql_names_quote_what_needs_it() {
        assert_eq!(sql_name(&["default", "t_1"]), "default.t_1");
        assert_eq!(sql_name(&["default", "MyTable"]), "default.\"MyTable\"");
        assert_eq!(sql_name(&["my.table"]), "\"my.table\"");
        assert_eq!(
            sql_name(&["a\"b", "1t", "t$rt"]),
            "\"a\"\"b\".\"1t\".\"t$rt\""
        );
    }

    /// Name text: letters of several scripts and cases, quotes, dots, `$`,
    /// whitespace and SQL punctuation.
    fn name_text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("rt".to_string()),
                Just("RT".to_string()),
                Just("$".to_string()),
                Just(".".to_string()),
                Just("\"".to_string()),
                Just("'".to_string()),
                Just("`".to_string()),
                Just(" ".to_string()),
                Just("\t".to_string()),
                Just("é".to_string()),
                Just("ß".to_string()),
                Just("\u{301}".to_string()),
                Just("日本".to_string()),
                Just("branch_".to_string()),
                "[a-zA-Z0-9_;,()=*-]{1,3}",
                "\\PC{1,2}",
            ],
            0..12,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_panics(name in "\\PC{0,40}") {
            let _ = parse(&name);
            let _ = parse_table_name(&name);
            let _ = parse_table_name_keeping_case(&name);
        }

        #[test]
        fn mixed_name_text_never_panics(name in name_text()) {
            let _ = parse(&name);
            if let Ok(parts) = parse_table_name(&name) {
                prop_assert!((1..=3).contains(&parts.len()));
                // Written back as SQL, the parts parse to themselves.
                prop_assert_eq!(parse_table_name(&sql_name(&parts)), Ok(parts));
            }
        }

        #[test]
        fn sql_names_round_trip(parts in proptest::collection::vec(
            prop_oneof!["\\PC{1,12}", "[a-z_][a-z0-9_]{0,8}", "[A-Za-z.$\" é]{1,8}"],
            1..=3,
        )) {
            let text = sql_name(&parts);
            prop_assert_eq!(parse_table_name(&text), Ok(parts));
        }

        #[test]
        fn never_panics_on_dollar_heavy_names(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("rt".to_string()), Just("RT".to_string()), Just("".to_string()),
                    Just("branch_b".to_string()), Just("snapshots".to_string()), "[a-z.$ ]{0,4}"
                ],
                0..6,
            )
        ) {
            let name = parts.join("$");
            match parse(&name) {
                Ok(RelationName::Realtime { table }) => {
                    prop_assert_eq!(format!("{table}$rt").to_ascii_lowercase(), name.to_ascii_lowercase());
                }
                Ok(RelationName::Paimon(n)) => {
                    prop_assert_eq!(n, name.as_str());
                    prop_assert!(!name.split('$').skip(1).any(|p| p.eq_ignore_ascii_case("rt")));
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
