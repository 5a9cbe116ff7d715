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

/// A front for a test server that tells clients a refused conditional
/// `PUT` (`412 Precondition Failed` to `If-None-Match: *`) succeeded: to
/// them, a server that ignores the condition (as some S3-compatible servers
/// do). Requests pass unchanged (they are signed), one per connection.
/// Answers its endpoint; it serves until the runtime ends.
pub async fn ignoring_conditions(endpoint: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    let upstream = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    /// Reads until the end of an HTTP head (`\r\n\r\n`): the head and what
    /// came after it.
    async fn head(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
        let mut read = Vec::new();
        let mut buffer = [0u8; 8192];
        loop {
            let n = stream.read(&mut buffer).await.ok()?;
            if n == 0 {
                return None;
            }
            read.extend_from_slice(&buffer[..n]);
            if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                let rest = read.split_off(end + 4);
                return Some((String::from_utf8_lossy(&read).into_owned(), rest));
            }
        }
    }
    async fn serve(mut client: TcpStream, upstream: String) -> Option<()> {
        let (request, body) = head(&mut client).await?;
        let put = request.starts_with("PUT ");
        // One request per connection: the server closes after answering.
        let request = request.replacen("\r\n", "\r\nConnection: close\r\n", 1);
        let mut server = TcpStream::connect(&upstream).await.ok()?;
        server.write_all(request.as_bytes()).await.ok()?;
        server.write_all(&body).await.ok()?;
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let forward = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        });
        let mut answer = Vec::new();
        server_read.read_to_end(&mut answer).await.ok()?;
        forward.abort();
        let refused = b"HTTP/1.1 412";
        if put && answer.starts_with(refused) {
            // The head says 200, and no body follows it.
            let end = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
            let head = String::from_utf8_lossy(&answer[..end]);
            let mut lines = head.split("\r\n").skip(1).filter(|line| {
                let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
                !line.is_empty()
                    && !["content-length", "content-type", "transfer-encoding"]
                        .contains(&name.as_str())
            });
            let mut faked = String::from("HTTP/1.1 200 OK\r\n");
            for line in lines.by_ref() {
                faked.push_str(line);
                faked.push_str("\r\n");
            }
            // As a put that replaced the object answers.
            faked.push_str("ETag: \"replaced\"\r\nContent-Length: 0\r\n\r\n");
            answer = faked.into_bytes();
        }
        client_write.write_all(&answer).await.ok()?;
        client_write.shutdown().await.ok()
    }
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(serve(client, upstream.clone()));
        }
    });
    format!("http://{address}")
}
