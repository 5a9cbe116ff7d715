//! Parsing relation names: `t`, `t$rt`, and the mixes of `$rt` with branches
//! and system tables that the store cannot serve.
//!
//! Only names with an `rt` part are ours. Every other name (`t`, `t$snapshots`,
//! `t$branch_b1`, `t$`) is handed to Paimon unchanged, so Paimon keeps deciding
//! what its own names mean.

use crate::error::NameError;

/// The suffix that reads a lake-stream table from its store.
pub const RT_SUFFIX: &str = "rt";
const SPLITTER: char = '$';
const BRANCH_PREFIX: &str = "branch_";

/// What a relation name asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelationName<'a> {
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
pub fn parse(object: &str) -> Result<RelationName<'_>, NameError> {
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

/// The name `t$rt` for table `t`, for messages.
pub fn realtime_name(table: &str) -> String {
    format!("{table}{SPLITTER}{RT_SUFFIX}")
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

    proptest! {
        #[test]
        fn never_panics(name in "\\PC{0,40}") {
            let _ = parse(&name);
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
                    prop_assert_eq!(realtime_name(table).to_ascii_lowercase(), name.to_ascii_lowercase());
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
