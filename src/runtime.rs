//! Running async catalog and store calls from DataFusion's synchronous
//! planning hooks.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

use crate::error::{Error, Result};

/// A small runtime of our own: the caller's may be a current-thread runtime
/// whose only thread is the one blocked waiting.
fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::io::Result<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("lakestream-planning")
                .enable_all()
                .build()
        })
        .as_ref()
        .map_err(|e| Error::Internal(format!("cannot start the planning runtime: {e}")))
}

/// Runs `future` to completion from synchronous code.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (sender, receiver) = std::sync::mpsc::channel();
    runtime()?.spawn(async move {
        // The receiver only goes away if the caller is gone too.
        let _ = sender.send(future.await);
    });
    let wait = move || {
        receiver
            .recv()
            .map_err(|_| Error::Internal("a planning task stopped without answering".to_string()))
    };
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}
