//! `lakestream-cli` driven as a script runner, the way users and CI call it.

use std::path::Path;
use std::process::{Command, Output};

fn cli(warehouse: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lakestream-cli"))
        .arg("--warehouse")
        .arg(warehouse)
        .args(args)
        .output()
        .expect("run lakestream-cli")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn runs_commands_and_files_in_order_with_formats() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("wh");
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "INSERT INTO t VALUES (2, 'b;c');\n-- a comment; with a semicolon\nINSERT INTO t VALUES (3, NULL);",
    )
    .unwrap();
    let out = cli(
        &warehouse,
        &[
            "-q",
            "-c",
            "CREATE TABLE t (id INT, v STRING); INSERT INTO t VALUES (1, 'a')",
            "-f",
            script.to_str().unwrap(),
            "--format",
            "csv",
            "-c",
            "SELECT id, v FROM t ORDER BY id",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("id,v\n1,a\n2,b;c\n3,\n"),
        "{}",
        stdout(&out)
    );

    // The same warehouse, reopened: json and ndjson, and the default database is current.
    let out = cli(
        &warehouse,
        &[
            "-q",
            "--format",
            "json",
            "-c",
            "SELECT id FROM paimon.default.t WHERE id < 3 ORDER BY id",
        ],
    );
    assert_eq!(
        stdout(&out),
        "[{\"id\":1},{\"id\":2}]\n",
        "{}",
        stderr(&out)
    );
    let out = cli(
        &warehouse,
        &[
            "-q",
            "--format",
            "ndjson",
            "-c",
            "SELECT count(*) AS n FROM t",
        ],
    );
    assert_eq!(stdout(&out), "{\"n\":3}\n");
}

#[test]
fn table_format_prints_rows_and_timing_unless_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["-c", "SELECT 1 AS one"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("| one |"), "{text}");
    assert!(text.contains("1 rows in set. Query took"), "{text}");
    let out = cli(dir.path(), &["-q", "-c", "SELECT 1 AS one"]);
    assert!(!stdout(&out).contains("Query took"));
}

#[test]
fn a_failing_statement_stops_the_script_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        dir.path(),
        &[
            "-q",
            "-c",
            "CREATE TABLE t (id INT)",
            "-c",
            "SELECT * FROM t$rt",
            "-c",
            "CREATE TABLE never (id INT)",
        ],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("table 't$rt' not found: 'default.t' is not a lake-stream table"),
        "{err}"
    );
    // The statement after the failure did not run.
    let out = cli(dir.path(), &["-q", "--format", "csv", "-c", "SHOW TABLES"]);
    assert!(!stdout(&out).contains("never"), "{}", stdout(&out));
}

#[test]
fn store_option_is_recorded_in_the_catalog_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["--store", "bad store", "-c", "SELECT 1"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("lakestream.store"),
        "{}",
        stderr(&out)
    );
    let out = cli(
        dir.path(),
        &[
            "--store",
            "none",
            "--option",
            "lakestream.enabled=true",
            "-c",
            "SELECT 1",
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("table option"), "{}", stderr(&out));
    let out = cli(dir.path(), &["--option", "novalue", "-c", "SELECT 1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("KEY=VALUE"), "{}", stderr(&out));
}

#[test]
fn tier_service_tiers_every_lakestream_table_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let setup = cli(
        dir.path(),
        &[
            "-q",
            "--option",
            "local.tier-interval=off",
            "-c",
            "CREATE TABLE a (id INT) WITH ('lakestream.enabled' = 'true'); \
             CREATE TABLE b (id INT) WITH ('lakestream.enabled' = 'true'); \
             CREATE TABLE plain (id INT); \
             INSERT INTO a VALUES (1), (2); INSERT INTO b VALUES (3)",
        ],
    );
    assert!(setup.status.success(), "{}", stderr(&setup));

    let service = Command::new(env!("CARGO_BIN_EXE_lakestream-cli"))
        .args(["tier", "--warehouse"])
        .arg(dir.path())
        .args(["--interval", "100ms", "--option", "local.tier-interval=off"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the tiering service");
    // Paimon gets the rows without anyone else tiering.
    let started = std::time::Instant::now();
    loop {
        let out = cli(
            dir.path(),
            &[
                "-q",
                "--format",
                "csv",
                "-c",
                "SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b) AS n",
            ],
        );
        if stdout(&out).contains("\n3\n") {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the service did not tier: {}",
            stdout(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let pid = service.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let output = service.wait_with_output().unwrap();
    assert!(output.status.success(), "exit: {:?}", output.status);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("tiered 2 rows of default.a"), "{printed}");
    assert!(printed.contains("tiered 1 rows of default.b"), "{printed}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("stopped"));

    // --once, on a named table, with nothing left: exits at once.
    let out = cli(dir.path(), &["tier", "--once", "--table", "default.a"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Whether the process ended in a panic (Rust's exit status 101, or its message).
fn panicked(output: &Output) -> bool {
    output.status.code() == Some(101) || stderr(output).contains("panicked")
}

#[test]
fn non_ascii_option_keys_are_errors_or_accepted_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    let create_catalog = format!(
        "CREATE CATALOG other WITH ('warehouse' = '{}', 'aaaaaaaaaaé' = '1', 'ééééééé' = 'x')",
        other.display()
    );
    let runs: Vec<Vec<&str>> = vec![
        // Session options whose key is not ASCII: bare, quoted, Paimon-prefixed.
        vec!["-c", "SET \"ééééééé\" = 1"],
        vec!["-c", "SET paimon.ééééééé = 1"],
        vec!["-c", "SET 'paimon.ééééééé' = '1'"],
        vec!["-c", "SET lakestreaméé = 1"],
        vec!["-c", "RESET paimon.ééééééé"],
        // A catalog option on the command line, and in CREATE CATALOG.
        vec!["--option", "aaaaaaaaaaé=1", "-c", "SELECT 1"],
        vec!["-c", &create_catalog],
    ];
    let mut panics = Vec::new();
    for args in &runs {
        let out = cli(dir.path(), args);
        if panicked(&out) {
            panics.push(format!("{args:?}: {}", stderr(&out)));
        }
    }
    assert!(panics.is_empty(), "{}", panics.join("\n"));
    // Keys that are not lake-stream keys are plain catalog options.
    let out = cli(dir.path(), &["--option", "aaaaaaaaaaé=1", "-c", "SELECT 1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(dir.path(), &["-q", "-c", &create_catalog]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn time_travel_next_to_text_whose_lower_case_changes_length_never_panics() {
    // paimon-datafusion 0.4 finds time-travel clauses by byte position in the
    // lower-cased text, which is longer than the text for 'İ' and shorter for
    // 'ẞ': it sliced inside characters or past the end.
    let dir = tempfile::tempdir().unwrap();
    let setup = cli(
        dir.path(),
        &[
            "-q",
            "-c",
            "CREATE TABLE t (a STRING); INSERT INTO t VALUES ('x')",
        ],
    );
    assert!(setup.status.success(), "{}", stderr(&setup));
    let mut panics = Vec::new();
    for sql in [
        "SELECT * FROM İ VERSION AS OF éé",
        "SELECT * FROM t VERSION AS OF 1 WHERE a = 'İİ'",
        "SELECT 'İ', * FROM t TIMESTAMP AS OF 'éé",
        "SELECT 'ẞẞ', * FROM t VERSION AS OF 1",
    ] {
        let out = cli(dir.path(), &["-q", "-c", sql]);
        if panicked(&out) {
            panics.push(format!("{sql}: {}", stderr(&out)));
        } else {
            assert!(!out.status.success(), "{sql}: {}", stdout(&out));
        }
    }
    assert!(panics.is_empty(), "{}", panics.join("\n"));
    // Time travel itself works, and so does the character outside it.
    let out = cli(
        dir.path(),
        &[
            "-q",
            "--format",
            "csv",
            "-c",
            "SELECT a FROM t VERSION AS OF 1",
        ],
    );
    assert!(stdout(&out).ends_with("a\nx\n"), "{}", stderr(&out));
    let out = cli(
        dir.path(),
        &["-q", "--format", "csv", "-c", "SELECT 'İ' AS i FROM t"],
    );
    assert!(stdout(&out).ends_with("i\nİ\n"), "{}", stderr(&out));
}
