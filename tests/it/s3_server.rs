//! The S3-compatible server the S3 suite runs against (issue 13):
//! `scripts/s3-server.sh` installs it (Go's module proxy, cached), starts it
//! over a fresh directory with random keys and a bucket, and prints the
//! options to use; its `check` proves the server implements what the store
//! relies on, conditional writes (`If-None-Match: *` on PutObject), and
//! fails against a server that does not.

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server.sh")
}

/// Runs `scripts/s3-server.sh <command>` with its state in `state`; its
/// stdout, or the failure with its stderr.
fn server(state: &Path, command: &str) -> Result<String, String> {
    let output = Command::new("bash")
        .arg(script())
        .arg(command)
        .env("S3_STATE_FILE", state)
        .output()
        .map_err(|e| format!("cannot run scripts/s3-server.sh: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "scripts/s3-server.sh {command} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Stops the server when the test ends, passed or not.
struct Stop<'a>(&'a Path);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let _ = server(self.0, "stop");
    }
}

#[test]
fn the_test_server_speaks_s3_with_conditional_writes() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let state = dir.path().join("server.state");
    let _stop = Stop(&state);
    let started = server(&state, "start").unwrap_or_else(|e| panic!("{e}"));
    let line = started.lines().last().expect("an options line");
    let options: Vec<(&str, &str)> = line
        .split(' ')
        .map(|pair| pair.split_once('=').expect("KEY=VALUE"))
        .collect();
    let keys: Vec<&str> = options.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        [
            "s3.endpoint",
            "s3.access-key",
            "s3.secret-key",
            "s3.region",
            "s3.path-style-access",
            "bucket"
        ],
        "{line}"
    );
    assert!(options[0].1.starts_with("http://127.0.0.1:"), "{line}");
    // The secret is random per start and is on no command line.
    let secret = options[2].1;
    assert!(secret.len() >= 32, "{line}");
    let commands = Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .expect("ps");
    assert!(
        !String::from_utf8_lossy(&commands.stdout).contains(secret),
        "the secret key is on a command line"
    );
    server(&state, "check").unwrap_or_else(|e| panic!("{e}"));
    // `status` answers the same options while it runs.
    let status = server(&state, "status").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.lines().last(), Some(line));
    server(&state, "stop").unwrap_or_else(|e| panic!("{e}"));
    assert!(server(&state, "status").is_err(), "stopped");
}

/// A test server of its own, stopped when dropped: for the tests that run
/// warehouses and stores on S3 (`s3.rs`).
pub struct TestS3 {
    dir: tempfile::TempDir,
    /// The `s3.*` options the server printed.
    pub options: std::collections::HashMap<String, String>,
    /// The bucket it created.
    pub bucket: String,
}

impl TestS3 {
    pub fn start() -> Self {
        let dir = tempfile::TempDir::new().expect("temp dir");
        let state = dir.path().join("server.state");
        let started = server(&state, "start").unwrap_or_else(|e| panic!("{e}"));
        let line = started.lines().last().expect("an options line");
        let mut options: std::collections::HashMap<String, String> = line
            .split(' ')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let bucket = options.remove("bucket").expect("the bucket");
        Self {
            dir,
            options,
            bucket,
        }
    }

    /// Catalog options of a warehouse at `s3://<bucket>/<path>`, plus `extra`.
    pub fn catalog_options(
        &self,
        path: &str,
        extra: &[(&str, &str)],
    ) -> std::collections::HashMap<String, String> {
        let mut options = self.options.clone();
        options.insert(
            "warehouse".to_string(),
            format!("s3://{}/{path}", self.bucket),
        );
        options.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        options
    }

    /// The directory the server keeps its buckets in, one directory each,
    /// an object as a file under its key (dated by its modification time).
    pub fn data_dir(&self) -> PathBuf {
        let state = std::fs::read_to_string(self.dir.path().join("server.state"))
            .expect("the server's state");
        let dir = state
            .lines()
            .find_map(|line| line.strip_prefix("DIR="))
            .expect("DIR= in the server's state");
        Path::new(dir).join("root")
    }
}

impl Drop for TestS3 {
    fn drop(&mut self) {
        let _ = server(&self.dir.path().join("server.state"), "stop");
    }
}
