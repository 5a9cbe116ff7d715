//! A commit held just before its file gets its name, for tests (built with
//! `cfg(test)` or the `testing` feature only): while a [`PublishPause`] is
//! held, the first create-only publish ([`super::create_only`]: a snapshot,
//! schema or tag) under its directory through [`super::local`]'s file IO
//! waits there, until the pause is released or dropped. Whatever the paused
//! work holds meanwhile (a tiering's locks) it keeps holding, so a test can
//! run another statement while the first is mid-commit, every time, instead
//! of hoping that a race happens.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// The pauses held now.
static PAUSES: Mutex<Vec<Arc<Armed>>> = Mutex::new(Vec::new());

#[derive(Debug)]
struct Armed {
    id: u64,
    dir: PathBuf,
    /// The file whose publish it holds, once one reached it.
    caught: watch::Sender<Option<PathBuf>>,
    released: watch::Sender<bool>,
}

/// Holds the next publish under a directory (see the module docs).
#[derive(Debug)]
pub struct PublishPause {
    armed: Arc<Armed>,
}

impl PublishPause {
    /// Holds the first create-only publish under `dir` from now on.
    pub fn new(dir: &Path) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let armed = Arc::new(Armed {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            dir: dir.to_path_buf(),
            caught: watch::Sender::new(None),
            released: watch::Sender::new(false),
        });
        PAUSES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&armed));
        Self { armed }
    }

    /// Waits until a publish is held here, and answers the file it was to
    /// publish.
    pub async fn reached(&self) -> PathBuf {
        let mut caught = self.armed.caught.subscribe();
        // The sender lives in `self`: the wait ends only with a file.
        let file = match caught.wait_for(Option::is_some).await {
            Ok(file) => file.clone().unwrap_or_default(),
            Err(_) => PathBuf::new(),
        };
        file
    }

    /// Lets the held publish (and any later one) go on.
    pub fn release(self) {}
}

impl Drop for PublishPause {
    fn drop(&mut self) {
        PAUSES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|armed| armed.id != self.armed.id);
        self.armed.released.send_replace(true);
    }
}

/// Where the local file IO is about to publish `file` under its name: held
/// here while a [`PublishPause`] of a directory above it waits for one.
pub(super) async fn before_publish(file: &Path) {
    let armed = {
        let pauses = PAUSES.lock().unwrap_or_else(|e| e.into_inner());
        pauses
            .iter()
            .find(|armed| file.starts_with(&armed.dir) && armed.caught.borrow().is_none())
            .map(|armed| {
                armed.caught.send_replace(Some(file.to_path_buf()));
                Arc::clone(armed)
            })
    };
    if let Some(armed) = armed {
        let mut released = armed.released.subscribe();
        // The pause's sender lives in `armed`: the wait ends with a value.
        let _ = released.wait_for(|released| *released).await;
    }
}
