//! Property tests over the whole SQL path: generated statements with odd
//! text (non-ASCII letters, quotes, dots, `$`, whitespace, comments) run
//! through `LakeStreamContext`, statement filter and `SQLContext` included.
//! Errors are fine; a panic is a bug.

use std::time::Duration;

use paimon_lakestream::LakeStreamContext;
use proptest::prelude::*;

/// A fragment of statement text.
fn fragment() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("'".to_string()),
            Just("\"".to_string()),
            Just(".".to_string()),
            Just("$".to_string()),
            Just("$rt".to_string()),
            Just(" ".to_string()),
            Just("\n".to_string()),
            Just("=".to_string()),
            Just("/*+".to_string()),
            Just("*/".to_string()),
            Just("paimon.".to_string()),
            Just("lakestream.".to_string()),
            Just(" VERSION AS OF ".to_string()),
            Just(" TIMESTAMP AS OF ".to_string()),
            Just("t".to_string()),
            Just("é".to_string()),
            Just("İ".to_string()),
            Just("ẞ".to_string()),
            Just("\u{212A}".to_string()),
            Just("\u{301}".to_string()),
            "[a-zA-Z0-9_(),]{1,4}",
            "[a-z.]{6,12}",
            "\\PC{1,6}",
        ],
        0..6,
    )
    .prop_map(|parts| parts.concat())
}

/// A statement of a kind the lake-stream layer or `SQLContext` reads.
fn statement() -> impl Strategy<Value = String> {
    (0..20usize, fragment(), fragment()).prop_map(|(kind, a, b)| match kind {
        0 => format!("SET {a} = {b}"),
        1 => format!("SET 'paimon.{a}' = '{b}'"),
        2 => format!("RESET {a}"),
        3 => format!("SELECT * FROM {a}"),
        4 => format!("SELECT * FROM t{a} {b}"),
        5 => format!("SELECT * FROM t VERSION AS OF {a} WHERE id = '{b}'"),
        6 => format!("SELECT '{a}' FROM t TIMESTAMP AS OF '{b}'"),
        7 => format!("SELECT * FROM t /*+ OPTIONS('{a}'='{b}') */"),
        8 => format!("INSERT INTO {a} VALUES ('{b}')"),
        9 => format!("INSERT INTO t VALUES ('{a}{b}')"),
        10 => format!("DELETE FROM {a} WHERE v = '{b}'"),
        11 => format!("UPDATE {a} SET v = '{b}'"),
        12 => format!("CALL sys.lakestream_tier('{a}')"),
        13 => format!("CREATE CATALOG c WITH ('{a}' = '{b}')"),
        14 => format!("CREATE TABLE {a} (id INT) WITH ('{b}' = 'true')"),
        15 => format!("CREATE TABLE x (id INT) PARTITIONED BY ({a}) {b}"),
        16 => format!("ALTER TABLE {a} SET TBLPROPERTIES ('{b}' = 'false')"),
        17 => format!("DESCRIBE {a}"),
        18 => format!("SHOW {a}"),
        _ => format!("{a}{b}"),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn no_statement_text_panics(statements in proptest::collection::vec(statement(), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut ctx = LakeStreamContext::new();
            let options = [
                ("warehouse", dir.path().display().to_string()),
                ("lakestream.store", "local".to_string()),
                ("local.tier-interval", "off".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            ctx.register_catalog("paimon", options).await.unwrap();
            ctx.execute("CREATE TABLE t (id INT, v STRING) WITH ('lakestream.enabled' = 'true')")
                .await
                .unwrap();
            for sql in &statements {
                let Ok(df) = ctx.execute(sql).await else { continue };
                let _ = tokio::time::timeout(Duration::from_secs(5), df.collect()).await;
            }
        });
    }
}
