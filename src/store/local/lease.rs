//! The tiering lease: one tierer per table across processes on an object
//! store, where there is no file lock.
//!
//! A lease is an object `<table>/lease/tier-<generation>` holding its
//! holder and the time it expires. It is taken by creating the next
//! generation with a conditional put (create-if-absent), which exactly one
//! process wins, and only once the newest generation has expired or is
//! gone. The holder renews it every third of its length (`local.lease-ttl`)
//! by creating the next generation itself, and deletes its generation when
//! done; a holder that died is waited out until its lease expires. Each
//! generation carries its own expiry, so processes with other lease lengths
//! wait for each other correctly.
//!
//! The lease keeps tierers from racing; it is not what keeps a row from
//! being tiered twice. A holder can pause past its expiry (a stopped VM)
//! and still commit: that commit is fenced instead (it may only create the
//! snapshot after the one its position was read from, see
//! `crate::object_storage`), so it fails if the next holder committed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::error::LocalStoreError;
use super::path;
use super::root::{Created, PutFailed, Root};
use super::table::now_ms;
use crate::error::Result;

/// How often a process waiting for a lease looks again.
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Serialize, Deserialize)]
struct Held {
    holder: String,
    expires_ms: i64,
}

/// A held lease; released when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    root: Arc<Root>,
    /// The generation this process holds now (the renewer moves it on).
    current: Arc<std::sync::Mutex<Path>>,
    renewer: tokio::task::JoinHandle<()>,
}

fn generation_of(path: &Path) -> Option<u64> {
    path.filename()?.strip_prefix("tier-")?.parse().ok()
}

fn generation_path(dir: &Path, generation: u64) -> Path {
    dir.clone().join(format!("tier-{generation:020}"))
}

impl Lease {
    /// Takes the lease of the table at `table_dir`, waiting while another
    /// process holds it.
    /// The lease lasts `ttl` unless renewed.
    pub(crate) async fn acquire(
        root: &Arc<Root>,
        table_dir: &Path,
        ttl: Duration,
    ) -> Result<Lease> {
        let dir = path::lease_dir(table_dir);
        let holder = uuid::Uuid::new_v4().to_string();
        loop {
            let mut generations: Vec<(u64, Path)> = root
                .objects
                .list(Some(&dir))
                .try_filter_map(|meta| async move {
                    Ok(generation_of(&meta.location).map(|g| (g, meta.location)))
                })
                .try_collect()
                .await
                .map_err(|source| LocalStoreError::ListLease { source })?;
            generations.sort_by_key(|(g, _)| *g);
            let next = match generations.last() {
                None => 0,
                Some((newest, path)) => {
                    let held = match root.get(path).await? {
                        // Released meanwhile: look again.
                        None => continue,
                        Some(bytes) => serde_json::from_slice::<Held>(&bytes).ok(),
                    };
                    if held.as_ref().is_some_and(|h| h.expires_ms > now_ms()) {
                        tokio::time::sleep(POLL).await;
                        continue;
                    }
                    newest + 1
                }
            };
            let path = generation_path(&dir, next);
            match create(root, &path, &holder, ttl).await? {
                Created::AlreadyExists => continue,
                Created::Yes => {}
            }
            // Older generations are expired or released: clear them away.
            for (_, old) in &generations {
                let _ = root.delete(old).await;
            }
            let current = Arc::new(std::sync::Mutex::new(path));
            let renewer = tokio::spawn(renew(
                Arc::clone(root),
                dir,
                next,
                holder,
                ttl,
                Arc::clone(&current),
            ));
            return Ok(Lease {
                root: Arc::clone(root),
                current,
                renewer,
            });
        }
    }
}

async fn create(root: &Root, path: &Path, holder: &str, ttl: Duration) -> Result<Created> {
    let held = Held {
        holder: holder.to_string(),
        expires_ms: now_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2),
    };
    let bytes =
        serde_json::to_vec(&held).map_err(|e| LocalStoreError::encoding("a tiering lease", e))?;
    match root.put_new(path, Bytes::from(bytes)).await {
        Ok(created) => Ok(created),
        Err(PutFailed::NotApplied(e) | PutFailed::Unknown(e)) => Err(e),
    }
}

/// Renews the lease every third of its life by creating the next
/// generation, until the lease is dropped or another process took it over.
async fn renew(
    root: Arc<Root>,
    dir: Path,
    mut generation: u64,
    holder: String,
    ttl: Duration,
    current: Arc<std::sync::Mutex<Path>>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let next = generation_path(&dir, generation + 1);
        match create(&root, &next, &holder, ttl).await {
            Ok(Created::Yes) => {
                let old = std::mem::replace(
                    &mut *current.lock().unwrap_or_else(|e| e.into_inner()),
                    next,
                );
                let _ = root.delete(&old).await;
                generation += 1;
            }
            // Taken over (this process paused past the expiry): its
            // commits are fenced; renewing could only confuse the holder.
            Ok(Created::AlreadyExists) => return,
            // The store did not answer: try again at the next turn, while
            // the lease still lasts.
            Err(_) => {}
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
        let path = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let root = Arc::clone(&self.root);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Released before the holder goes on (a process that exits right
        // after, as `lakestream-cli tier --once` does, must not leave its
        // lease for the next one to wait out); where this thread cannot
        // block, in the background. A lease not deleted expires anyway.
        let release = async move {
            let _ = root.delete(&path).await;
        };
        if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| runtime.block_on(release));
        } else {
            runtime.spawn(release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_are_named_in_order() {
        let dir = Path::from("t/lease");
        let path = generation_path(&dir, 42);
        assert_eq!(path.as_ref(), "t/lease/tier-00000000000000000042");
        assert_eq!(generation_of(&path), Some(42));
        assert_eq!(generation_of(&Path::from("t/lease/other")), None);
        assert!(generation_path(&dir, 9).as_ref() < generation_path(&dir, 10).as_ref());
    }
}
