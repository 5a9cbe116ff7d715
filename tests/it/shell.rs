//! The interactive shell, driven through a pseudo-terminal by
//! `tests/it/shell/drive.py` (Python's `pty`), the way a person uses it.

use std::process::Command;

#[test]
fn the_shell_runs_statements_commands_and_cancels_a_streaming_query() {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    let history = dir.path().join("history");
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/shell/drive.py");
    let output = Command::new("python3")
        .arg(driver)
        .arg(env!("CARGO_BIN_EXE_lakestream-cli"))
        .arg(&warehouse)
        .arg(&history)
        .output()
        .expect("run python3");
    let session = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{session}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The history file keeps what was typed.
    let kept = std::fs::read_to_string(&history).expect("history file");
    assert!(
        kept.contains("INSERT INTO t VALUES (1, 'a'), (2, 'b');"),
        "{kept}"
    );
    // ... except the values of secret options.
    assert!(kept.contains("CREATE CATALOG third"), "{kept}");
    assert!(!kept.contains("NEVER-PRINT-ME-42"), "{kept}");
    // Nothing the shell printed after the statement (its answer, SHOW
    // CATALOGS, ...) holds the key; the terminal's echo of what was typed may.
    let answered = session
        .rsplit_once("NEVER-PRINT-ME-42")
        .map_or(session.as_ref(), |(_, after)| after);
    assert!(answered.contains("second,local"), "{session}");
    // The statement left unfinished at `\q` did not run.
    assert!(!session.contains("| dropped"), "{session}");
}
