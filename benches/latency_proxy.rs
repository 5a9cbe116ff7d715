//! A TCP proxy before an `http://` S3 endpoint that holds every request a
//! fixed time before passing it on: the round trip of a cloud object store,
//! for every client at once (Paimon's file IO and the `local` store's object
//! store alike), without touching either.
//!
//! A request is the bytes a client sends after the server last answered on
//! that connection (HTTP/1.1, one request at a time per connection): its
//! first bytes wait, the rest of its body follows them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A running proxy; stops when dropped.
pub struct LatencyProxy {
    address: SocketAddr,
    accept: JoinHandle<()>,
}

impl LatencyProxy {
    /// Proxies `endpoint` (`http://host:port`), holding each request `latency`.
    pub async fn start(endpoint: &str, latency: Duration) -> Result<Self, Error> {
        let upstream = endpoint
            .strip_prefix("http://")
            .ok_or_else(|| format!("--object-latency needs an http:// endpoint, not '{endpoint}'"))?
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        relay(client, server, latency).await;
                    }
                });
            }
        });
        Ok(Self { address, accept })
    }

    /// The endpoint to give clients instead of the real one.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Whether to print every request's first line to stderr
/// (`LAKESTREAM_BENCH_REQUESTS=1`): which requests a statement makes.
fn log_requests() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("LAKESTREAM_BENCH_REQUESTS").is_some())
}

fn log_request(bytes: &[u8]) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    let line = bytes.split(|b| *b == b'\r').next().unwrap_or_default();
    eprintln!(
        "request {:.3} {}",
        start.elapsed().as_secs_f64(),
        String::from_utf8_lossy(line)
    );
}

async fn relay(client: TcpStream, server: TcpStream, latency: Duration) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Set when the server has answered: the client's next bytes start a request.
    let answered = Arc::new(AtomicBool::new(true));
    let requests = {
        let answered = Arc::clone(&answered);
        async move {
            let mut buffer = vec![0u8; 64 << 10];
            loop {
                let n = match client_read.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if answered.swap(false, Ordering::SeqCst) {
                    if log_requests() {
                        log_request(&buffer[..n]);
                    }
                    tokio::time::sleep(latency).await;
                }
                if server_write.write_all(&buffer[..n]).await.is_err() {
                    break;
                }
            }
            let _ = server_write.shutdown().await;
        }
    };
    let answers = async move {
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            let n = match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            answered.store(true, Ordering::SeqCst);
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(requests, answers);
}
