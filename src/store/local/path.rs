//! Where a table's files live under the store's root. Database and table
//! names become single path segments that cannot climb out of the root.

use object_store::path::Path;
use paimon::catalog::Identifier;

/// Encodes a name as one path segment: ASCII letters, digits, `_` and `-`
/// stay; every other byte (`.`, `/`, `\`, NUL, `%`, non-ASCII, ...) becomes
/// `%XX`. So `..` is `%2E%2E`, never a parent directory, and two different
/// names never share a segment.
pub(crate) fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The directory of a table's store-side files.
pub(crate) fn table_dir(root: &Path, table: &Identifier) -> Path {
    root.clone()
        .join(format!("db-{}", encode_segment(table.database())))
        .join(format!("t-{}", encode_segment(table.object())))
}

/// A log segment's object: `<table dir>/log/<seq>.seg`, zero-padded so the
/// names sort as the numbers do.
pub(crate) fn segment(table_dir: &Path, seq: u64) -> Path {
    table_dir.clone().join("log").join(format!("{seq:020}.seg"))
}

/// Parses a segment object's sequence number back from its file name.
/// The directory of a multi-part write's parts.
pub(crate) fn parts_dir(table_dir: &Path, write_id: &str) -> Path {
    table_dir
        .clone()
        .join("parts")
        .join(encode_segment(write_id))
}

/// Who decides the fate of a multi-part write's parts: created only if
/// absent, by the write's commit before its log entry, or by the sweep of
/// killed writers' leftovers before it deletes them (`leftovers.rs`).
pub(crate) fn parts_fate(table_dir: &Path, write_id: &str) -> Path {
    parts_dir(table_dir, write_id).join(FATE)
}

/// The file name of [`parts_fate`]; no part is named so.
pub(crate) const FATE: &str = "fate";

/// Part `index` of a multi-part write.
pub(crate) fn part(table_dir: &Path, write_id: &str, index: usize) -> Path {
    parts_dir(table_dir, write_id).join(format!("{index:06}.seg"))
}

pub(crate) fn segment_seq(path: &Path) -> Option<u64> {
    path.filename()?.strip_suffix(".seg")?.parse().ok()
}

/// The table's store-side metadata object.
pub(crate) fn table_meta(table_dir: &Path) -> Path {
    table_dir.clone().join("table.json")
}

/// The directory of the table's tiering lease generations (S3 roots).
pub(crate) fn lease_dir(table_dir: &Path) -> Path {
    table_dir.clone().join("lease")
}

/// The marker of the last tiering whose trim is done.
pub(crate) fn tiered_marker(table_dir: &Path) -> Path {
    table_dir.clone().join("tiered.json")
}

/// What a search for the tiered position proved where Paimon had expired
/// the snapshots that said it (see `TableState::tiered`).
pub(crate) fn tiered_proof(table_dir: &Path) -> Path {
    table_dir.clone().join("tiered-proof.json")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn odd_names_stay_inside_the_root() {
        let root = Path::from("root");
        for (db, t) in [
            ("..", ".."),
            ("a/b", "c\\d"),
            ("nul\0", "%2E"),
            ("é", "t t"),
            (".", "t$rt"),
        ] {
            let dir = table_dir(&root, &Identifier::new(db, t));
            let parts: Vec<_> = dir.parts().map(|p| p.as_ref().to_string()).collect();
            assert_eq!(parts.len(), 3, "{dir}");
            assert_eq!(parts[0], "root");
            for part in &parts[1..] {
                assert!(
                    part.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-%".contains(c)),
                    "{part}"
                );
            }
        }
        assert_eq!(encode_segment(".."), "%2E%2E");
        assert_ne!(encode_segment("%2E"), encode_segment("."));
    }

    #[test]
    fn segment_names_round_trip_and_sort() {
        let dir = Path::from("d");
        assert_eq!(segment_seq(&segment(&dir, 42)), Some(42));
        assert!(segment(&dir, 9).to_string() < segment(&dir, 10).to_string());
        assert_eq!(
            segment_seq(&Path::from("d/log/00000000000000000001.seg#tmp")),
            None
        );
    }

    proptest! {
        #[test]
        fn encoding_is_injective_and_safe(a in "\\PC{0,12}", b in "\\PC{0,12}") {
            let (ea, eb) = (encode_segment(&a), encode_segment(&b));
            prop_assert_eq!(a == b, ea == eb);
            prop_assert!(!ea.contains('/') && !ea.contains('.') && !ea.contains('\\'));
        }
    }
}
