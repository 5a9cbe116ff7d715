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

/// The `notice` rows a statement printed in `--format ndjson`.
fn notices(output: &Output) -> Vec<String> {
    stdout(output)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|row| row.get("notice")?.as_str().map(str::to_string))
        .collect()
}

/// The `lakestream-cli ...` command a notice advises, as arguments, split as
/// a POSIX shell splits them (single quotes only). It ends at the first `,`
/// or `;` outside quotes.
fn advised_command(notice: &str) -> Vec<String> {
    let start = notice
        .find("lakestream-cli ")
        .unwrap_or_else(|| panic!("no lakestream-cli command in: {notice}"));
    let mut args = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in notice[start + "lakestream-cli ".len()..].chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !current.is_empty() {
                    args.push(std::mem::take(&mut current));
                }
            }
            ',' | ';' if !quoted => break,
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        args.push(current);
    }
    args
}

/// `SELECT count(*)` of `table` in `warehouse`, read from Paimon.
fn paimon_count(warehouse: &Path, table: &str, extra: &[&str]) -> String {
    let sql = format!("SELECT count(*) AS n FROM {table}");
    let mut args = vec!["-q", "--format", "csv"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-c", &sql]);
    let out = cli(warehouse, &args);
    assert!(out.status.success(), "{sql}: {}", stderr(&out));
    stdout(&out).trim_start_matches("n\n").trim().to_string()
}

#[test]
fn tier_takes_any_name_sql_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let setup = cli(
        dir.path(),
        &[
            "-q",
            "--option",
            "local.tier-interval=off",
            "-c",
            "CREATE TABLE \"MyTable\" (id INT) WITH ('lakestream.enabled' = 'true'); \
             CREATE TABLE \"my.table\" (id INT) WITH ('lakestream.enabled' = 'true'); \
             CREATE TABLE \"Ünï code\" (id INT) WITH ('lakestream.enabled' = 'true'); \
             INSERT INTO \"MyTable\" VALUES (1), (2); INSERT INTO \"my.table\" VALUES (3); \
             INSERT INTO \"Ünï code\" VALUES (4)",
        ],
    );
    assert!(setup.status.success(), "{}", stderr(&setup));

    // An unquoted name is lower-cased, as in SQL: the error says how to keep the case.
    let out = cli(
        dir.path(),
        &["tier", "--once", "--table", "default.MyTable"],
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("default.\"MyTable\""),
        "{}",
        stderr(&out)
    );
    assert!(!panicked(&out), "{}", stderr(&out));
    let out = cli(dir.path(), &["tier", "--once", "--table", "a.b.c.d"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not a table name"),
        "{}",
        stderr(&out)
    );

    // Quoted names keep their case and dots, with or without the database
    // and the catalog.
    let out = cli(
        dir.path(),
        &["tier", "--once", "--table", "default.\"MyTable\""],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tiered 2 rows of default.\"MyTable\""),
        "{}",
        stdout(&out)
    );
    let out = cli(
        dir.path(),
        &["tier", "--once", "--table", "paimon.default.\"my.table\""],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tiered 1 rows of default.\"my.table\""),
        "{}",
        stdout(&out)
    );
    assert_eq!(paimon_count(dir.path(), "\"MyTable\"", &[]), "2");
    assert_eq!(paimon_count(dir.path(), "\"my.table\"", &[]), "1");

    // The service's own round (every lake-stream table) tiers them too.
    let out = cli(dir.path(), &["tier", "--once"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tiered 1 rows of default.\"Ünï code\""),
        "{}",
        stdout(&out)
    );
    assert_eq!(paimon_count(dir.path(), "\"Ünï code\"", &[]), "1");
}

#[test]
fn tier_once_fails_when_a_table_fails() {
    let dir = tempfile::tempdir().unwrap();
    let setup = cli(
        dir.path(),
        &[
            "-q",
            "--option",
            "local.tier-interval=off",
            "-c",
            "CREATE TABLE a (id INT) WITH ('lakestream.enabled' = 'true'); \
             INSERT INTO a VALUES (1), (2)",
        ],
    );
    assert!(setup.status.success(), "{}", stderr(&setup));
    // One table that does not exist: the others are tiered, and the exit
    // status says that not all were.
    let out = cli(
        dir.path(),
        &[
            "tier",
            "--once",
            "--table",
            "default.a",
            "--table",
            "default.nope",
        ],
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("default.nope"), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("tiered 2 rows of default.a"),
        "{}",
        stdout(&out)
    );
    // A catalog that names no store cannot tier a lake-stream table.
    let out = cli(
        dir.path(),
        &["--store", "none", "tier", "--once", "--table", "default.a"],
    );
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("needs a store"), "{}", stderr(&out));
    // Every table tiered: success.
    let out = cli(dir.path(), &["tier", "--once", "--table", "default.a"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn turning_off_without_a_store_says_rows_may_wait_and_its_advice_tiers_them() {
    let dir = tempfile::tempdir().unwrap();
    let setup = cli(
        dir.path(),
        &[
            "-q",
            "--option",
            "local.tier-interval=off",
            "-c",
            "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true'); \
             INSERT INTO t VALUES (1), (2)",
        ],
    );
    assert!(setup.status.success(), "{}", stderr(&setup));
    let off = cli(
        dir.path(),
        &[
            "--store",
            "none",
            "-q",
            "--format",
            "ndjson",
            "-c",
            "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
        ],
    );
    assert!(off.status.success(), "{}", stderr(&off));
    let notices = notices(&off);
    let [notice] = notices.as_slice() else {
        panic!("expected one notice, got {notices:?}: {}", stdout(&off));
    };
    assert!(notice.contains("names no store"), "{notice}");
    assert!(notice.contains("may still wait"), "{notice}");
    assert_eq!(paimon_count(dir.path(), "t", &["--store", "none"]), "0");

    // Follow the advice: name the store the table used.
    let args: Vec<String> = advised_command(notice)
        .into_iter()
        .map(|a| a.replace("<store>", "local"))
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli(dir.path(), &args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    assert!(
        stdout(&out).contains("tiered 2 rows of default.t"),
        "{}",
        stdout(&out)
    );
    assert_eq!(paimon_count(dir.path(), "t", &["--store", "none"]), "2");
    // Nothing is tiered twice.
    let out = cli(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(paimon_count(dir.path(), "t", &[]), "2");
}

#[test]
fn turning_off_while_the_store_is_down_says_the_count_is_unknown_and_its_advice_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("wh");
    let store = format!("local.path={}", dir.path().join("store").display());
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let down = format!("local.path={}", not_a_dir.join("store").display());
    let setup = cli(
        &warehouse,
        &[
            "-q",
            "--option",
            &store,
            "--option",
            "local.tier-interval=off",
            "-c",
            "CREATE TABLE \"Waits\" (id INT) WITH ('lakestream.enabled' = 'true'); \
             INSERT INTO \"Waits\" VALUES (1), (2), (3)",
        ],
    );
    assert!(setup.status.success(), "{}", stderr(&setup));
    let off = cli(
        &warehouse,
        &[
            "--option",
            &down,
            "-q",
            "--format",
            "ndjson",
            "-c",
            "ALTER TABLE \"Waits\" SET TBLPROPERTIES ('lakestream.enabled' = 'false')",
        ],
    );
    assert!(off.status.success(), "{}", stderr(&off));
    let notices = notices(&off);
    let [notice] = notices.as_slice() else {
        panic!("expected one notice, got {notices:?}: {}", stdout(&off));
    };
    assert!(!notice.contains("rows not yet tiered"), "{notice}");
    assert!(
        notice.contains("how many rows wait in it is unknown"),
        "{notice}"
    );
    assert!(notice.contains("could not be reached"), "{notice}");

    // Follow the advice once the store is back.
    let mut args = vec!["--option".to_string(), store.clone()];
    args.extend(advised_command(notice));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli(&warehouse, &args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    assert!(
        stdout(&out).contains("tiered 3 rows of default.\"Waits\""),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        paimon_count(&warehouse, "\"Waits\"", &["--option", &store]),
        "3"
    );
}

/// Runs `lakestream-cli` on `warehouse` with `input` on standard input.
fn cli_with_input(warehouse: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lakestream-cli"))
        .arg("--warehouse")
        .arg(warehouse)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run lakestream-cli");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input.as_bytes()).expect("write stdin");
    drop(stdin);
    child.wait_with_output().expect("wait for lakestream-cli")
}

#[test]
fn backslash_commands_work_in_piped_input_and_files() {
    let dir = tempfile::tempdir().unwrap();
    // psql's and datafusion-cli's way: `\q` ends the script, with success.
    let out = cli_with_input(
        dir.path(),
        &[],
        "SELECT 1 AS one;\n\\pset format csv\n-- a comment\nSELECT 2 AS two;\n\\q\nSELECT 3 AS three;\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("| one |"), "{text}");
    assert!(text.contains("two\n2\n"), "{text}");
    assert!(!text.contains("three"), "{text}");

    // The same in a file given with -f, and a command after -f's `\q` stops
    // the later sources too.
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "\\quiet on\nSELECT 4 AS four;\n\\pset format ndjson\nSELECT 5 AS five;\n\\q\nSELECT 6 AS six;",
    )
    .unwrap();
    let out = cli(
        dir.path(),
        &["-f", script.to_str().unwrap(), "-c", "SELECT 7 AS seven"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("| four |"), "{text}");
    assert!(!text.contains("rows in set"), "{text}");
    assert!(text.ends_with("{\"five\":5}\n"), "{text}");

    // An unknown command fails the script like a failing statement.
    let out = cli_with_input(dir.path(), &["-q"], "\\nope\nSELECT 8 AS eight;\n");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown command '\\nope'"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).contains("eight"), "{}", stdout(&out));
}

/// psql's way with a backslash command on the line after a statement that
/// lacks its `;`: the command is not read as part of the statement (which
/// used to fail the script with a parse error); `\q` quits without running
/// the statement and says so (status 0), another command runs and the
/// statement waits for its `;`.
#[test]
fn a_command_after_a_statement_without_its_semicolon_is_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli_with_input(dir.path(), &[], "SELECT 1 AS one\n\\q\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("one"), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        "Warning: \\q: not run, as it lacks its terminating ';': SELECT 1 AS one\n"
    );
    // The same in a file, and a statement over lines is named by its first.
    let script = dir.path().join("unfinished.sql");
    std::fs::write(
        &script,
        "SELECT 2 AS two;\nSELECT 3\nAS three\n\\q\nSELECT 4;\n",
    )
    .unwrap();
    let out = cli(
        dir.path(),
        &["-q", "--format", "csv", "-f", script.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "two\n2\n");
    assert!(
        stderr(&out).contains("not run, as it lacks its terminating ';': SELECT 3 ..."),
        "{}",
        stderr(&out)
    );
    // Any other command runs, and the statement goes on to its `;`.
    let out = cli_with_input(
        dir.path(),
        &["-q"],
        "SELECT 5\n\\pset format csv\nAS five;\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "five\n5\n");
}

#[test]
fn piped_statements_run_before_standard_input_is_closed() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lakestream-cli"))
        .arg("--warehouse")
        .arg(dir.path())
        .args(["-q", "--format", "csv"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run lakestream-cli");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (lines, arriving) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    // The statement's `;` line arrives; standard input stays open.
    stdin.write_all(b"SELECT 41 + 1\n  AS answer;\n").unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut seen = Vec::new();
    while !seen.iter().any(|line: &String| line == "42") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match arriving.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("no answer before standard input was closed ({e}): {seen:?}");
            }
        }
    }
    // A second statement, then the end of input.
    stdin.write_all(b"SELECT 'second' AS s;\n").unwrap();
    drop(stdin);
    let status = child.wait().expect("wait for lakestream-cli");
    assert!(status.success());
    let rest: Vec<String> = arriving.iter().collect();
    assert!(rest.contains(&"second".to_string()), "{seen:?} {rest:?}");
}

#[test]
fn echo_prints_each_statement_before_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "-- the first\nSELECT 1 AS first;\n\\quiet on\nSELECT 2 AS second;\n",
    )
    .unwrap();
    let out = cli(dir.path(), &["-e", "-f", script.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"))
    };
    assert!(
        at("-- the first\nSELECT 1 AS first;\n") < at("| first |"),
        "{text}"
    );
    assert!(at("| first |") < at("\\quiet on\n"), "{text}");
    assert!(at("\\quiet on\n") < at("SELECT 2 AS second;\n"), "{text}");
    assert!(at("SELECT 2 AS second;\n") < at("| second |"), "{text}");
    // Without -e, no statement is printed.
    let out = cli(dir.path(), &["-f", script.to_str().unwrap()]);
    assert!(!stdout(&out).contains("SELECT"), "{}", stdout(&out));
    // In the machine-readable formats the echo goes to standard error,
    // with the status lines, and standard output keeps the data.
    let out = cli(
        dir.path(),
        &[
            "--echo-queries",
            "--format",
            "csv",
            "-c",
            "SELECT 3 AS third",
        ],
    );
    assert_eq!(stdout(&out), "third\n3\n");
    assert!(
        stderr(&out).contains("SELECT 3 AS third;"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_pipeline_breaking_query_says_what_it_did_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let sql = "CREATE TABLE c (id INT) WITH ('lakestream.enabled' = 'true'); \
               SET lakestream.scan_mode = 'streaming'; \
               SELECT count(*) FROM c$rt";
    let out = cli(dir.path(), &["-q", "-c", sql]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("into an aggregation (count, GROUP BY, ...) (AggregateExec)"),
        "{err}"
    );
    assert!(err.contains("SET lakestream.scan_mode = 'batch'"), "{err}");
    assert!(!err.contains("AggregateExec {"), "{err}");
    assert!(err.len() < 1000, "{} bytes: {err}", err.len());
    // --verbose shows DataFusion's whole message, plan included.
    let again = "SET lakestream.scan_mode = 'streaming'; SELECT count(*) FROM c$rt";
    let out = cli(dir.path(), &["-q", "--verbose", "-c", again]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("AggregateExec {"), "{}", stderr(&out));
}

#[test]
fn statements_that_change_settings_answer_ok() {
    let dir = tempfile::tempdir().unwrap();
    let location = dir.path().join("default.db").join("t");
    let sql = format!(
        "CREATE TABLE t (id INT); \
         SET lakestream.scan_mode = 'batch'; \
         CREATE EXTERNAL TABLE datafusion.public.x STORED AS PAIMON LOCATION '{}'",
        location.display()
    );
    let out = cli(dir.path(), &["-c", &sql]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.matches("OK. Query took").count(), 3, "{text}");
    assert!(!text.contains("rows in set"), "{text}");
}

#[test]
fn a_zero_timeout_is_refused_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        dir.path(),
        &["--option", "lakestream.timeout=0", "-c", "SELECT 1"],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("lakestream.timeout"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("above zero"), "{}", stderr(&out));
    // In a session it is refused too (it is a catalog option), and so is
    // an external table's OPTIONS.
    let out = cli(dir.path(), &["-c", "SET lakestream.timeout = '0'"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("'lakestream.timeout'"),
        "{}",
        stderr(&out)
    );
    let out = cli(
        dir.path(),
        &[
            "-c",
            "CREATE TABLE t (id INT)",
            "-c",
            &format!(
                "CREATE EXTERNAL TABLE datafusion.public.x STORED AS PAIMON LOCATION '{}' \
                 OPTIONS ('lakestream.timeout' '0ms')",
                dir.path().join("default.db").join("t").display()
            ),
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("above zero"), "{}", stderr(&out));
}

/// The package's targets as cargo sees them: `(name, kinds)`.
fn cargo_targets() -> Vec<(String, Vec<String>)> {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        stderr(&output)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("its JSON");
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| {
            packages
                .iter()
                .find(|package| package["name"] == env!("CARGO_PKG_NAME"))
        })
        .expect("this package");
    package["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|target| {
            let kinds = target["kind"].as_array().expect("kinds");
            (
                target["name"].as_str().expect("name").to_string(),
                kinds
                    .iter()
                    .map(|kind| kind.as_str().expect("kind").to_string())
                    .collect(),
            )
        })
        .collect()
}

/// `cargo install` installs the shell only (it installs a package's `bin`
/// targets): the bench is a bench target, run with `cargo bench`.
#[test]
fn cargo_install_installs_the_shell_only() {
    let targets = cargo_targets();
    let programs: Vec<&str> = targets
        .iter()
        .filter(|(_, kinds)| kinds.iter().any(|kind| kind == "bin"))
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(programs, ["lakestream-cli"], "{targets:?}");
    assert!(
        targets
            .iter()
            .any(|(name, kinds)| name == "lakestream-bench" && kinds == &["bench"]),
        "{targets:?}"
    );
}
