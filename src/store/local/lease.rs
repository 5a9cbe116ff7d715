//! The tiering lease: one tierer per table across processes on an object
//! store, where there is no file lock.
//!
//! A lease is an object `<table>/lease/tier-<generation>` holding its
//! holder and the time it expires. It is taken by creating the next
//! generation with a conditional put (create-if-absent), which exactly one
//! process wins, and only once the newest generation has expired or is
//! gone. The holder renews it every third of its length (`local.lease-ttl`)
//! by creating the next generation itself, and releases it when done by
//! creating the next generation as already expired; a holder that died is
//! waited out until its lease expires. Each generation carries its own
//! expiry, so processes with other lease lengths wait for each other
//! correctly.
//!
//! Generations only grow: the newest is never deleted (a release leaves an
//! expired one), so a number is never handed to two holders in turn. Older
//! ones are deleted by whoever takes the lease next, so a create that
//! reaches the store late (a renewal or a take-over stalled in retries, a
//! paused process) can land on a number deleted since; such a generation is
//! below the newest, and its creator, which looks after every create,
//! finds it is not the holder.
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

/// The clock a lease's expiry is set and judged by: this machine's, which
/// may be wrong. Nothing may depend on it for safety: a process whose clock
/// runs far ahead takes leases that have not expired.
fn clock_ms() -> i64 {
    now_ms().saturating_add(clock_skew_ms())
}

/// How far a test puts this process's clock ahead
/// (`LAKESTREAM_TESTING_CLOCK_SKEW_MS`, feature "testing" only).
#[cfg(feature = "testing")]
fn clock_skew_ms() -> i64 {
    std::env::var("LAKESTREAM_TESTING_CLOCK_SKEW_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}

#[cfg(not(feature = "testing"))]
fn clock_skew_ms() -> i64 {
    0
}

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
    /// The lease's directory, and this holder's id.
    dir: Path,
    holder: String,
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
            let generations = list(root, &dir).await?;
            let next = match generations.last() {
                None => 0,
                Some((newest, path)) => {
                    let held = match root.get(path).await? {
                        // Released meanwhile: look again.
                        None => continue,
                        Some(bytes) => serde_json::from_slice::<Held>(&bytes).ok(),
                    };
                    if held.as_ref().is_some_and(|h| h.expires_ms > clock_ms()) {
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
            // Taken over meanwhile, this create having reached the store
            // late: a lower number, not the lease.
            match overtaken(root, &dir, next).await {
                Ok(false) => {}
                Ok(true) => {
                    let _ = root.delete(&path).await;
                    tokio::time::sleep(POLL).await;
                    continue;
                }
                // Not known: given back, so that no one waits it out.
                Err(e) => {
                    release(root, &dir, &path, &holder).await;
                    return Err(e);
                }
            }
            // Older generations are expired or released: clear them away.
            for (_, old) in &generations {
                let _ = root.delete(old).await;
            }
            let current = Arc::new(std::sync::Mutex::new(path));
            let renewer = tokio::spawn(renew(
                Arc::clone(root),
                dir.clone(),
                next,
                holder.clone(),
                ttl,
                Arc::clone(&current),
            ));
            return Ok(Lease {
                root: Arc::clone(root),
                current,
                dir,
                holder,
                renewer,
            });
        }
    }
}

/// The table's lease generations, oldest first.
async fn list(root: &Root, dir: &Path) -> Result<Vec<(u64, Path)>> {
    let mut generations: Vec<(u64, Path)> = root
        .objects
        .list(Some(dir))
        .try_filter_map(|meta| async move {
            Ok(generation_of(&meta.location).map(|g| (g, meta.location)))
        })
        .try_collect()
        .await
        .map_err(|source| LocalStoreError::ListLease { source })?;
    generations.sort_by_key(|(g, _)| *g);
    Ok(generations)
}

/// Whether another process took the lease over with a later generation
/// than `generation`, just created, before this create reached the store.
/// (A listing that misses `generation` itself, on a store whose listings
/// lag, is not a take-over: the newest is never deleted for it.)
async fn overtaken(root: &Root, dir: &Path, generation: u64) -> Result<bool> {
    Ok(list(root, dir)
        .await?
        .last()
        .is_some_and(|(newest, _)| *newest > generation))
}

/// Gives the generation at `path` back: creates the next one, already
/// expired, then deletes `path`, so the newest is never deleted and
/// numbers only grow. Taken over already (the next exists), `path` is no
/// longer the newest either, and goes too.
async fn release(root: &Root, dir: &Path, path: &Path, holder: &str) {
    let Some(generation) = generation_of(path) else {
        return;
    };
    let released = generation_path(dir, generation + 1);
    if create_expiring(root, &released, holder, 0).await.is_ok() {
        let _ = root.delete(path).await;
    }
}

async fn create(root: &Root, path: &Path, holder: &str, ttl: Duration) -> Result<Created> {
    let expires_ms = clock_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
    create_expiring(root, path, holder, expires_ms).await
}

async fn create_expiring(
    root: &Root,
    path: &Path,
    holder: &str,
    expires_ms: i64,
) -> Result<Created> {
    let held = Held {
        holder: holder.to_string(),
        expires_ms,
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
                // Taken over while this renewal was on its way: the number
                // was free again, but it is not the lease. (Not known for
                // now: the next turn looks again.)
                if let Ok(true) = overtaken(&root, &dir, generation + 1).await {
                    let _ = root.delete(&next).await;
                    return;
                }
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
        let (dir, holder) = (self.dir.clone(), self.holder.clone());
        // Released before the holder goes on (a process that exits right
        // after, as `lakestream-cli tier --once` does, must not leave its
        // lease for the next one to wait out); where this thread cannot
        // block, in the background. A lease not released expires anyway.
        // Released by the next generation, already expired: the newest is
        // never deleted, so numbers only grow.
        let release = async move { release(&root, &dir, &path, &holder).await };
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
    use crate::testing::faulty::{Fault, Faults, FaultyStore, Op, Rule};

    /// A renewal that reaches the store after the lease ran out, was taken
    /// over, released and taken again lands on a number free again: it
    /// must neither count as the lease nor take the new holder's away.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_renewal_takes_nothing_from_the_next_holders() {
        let ttl = Duration::from_secs(3);
        let objects: Arc<dyn object_store::ObjectStore> =
            Arc::new(object_store::memory::InMemory::new());
        let faults = Faults::seeded(5);
        let id = std::process::id();
        let (late_url, next_url) = (
            format!("faulty://late-renewal-{id}"),
            format!("faulty://next-holders-{id}"),
        );
        let late_objects = Arc::new(FaultyStore::new(Arc::clone(&objects), faults.clone()));
        super::super::register_object_store_with_lease(&late_url, late_objects, ttl)
            .expect("register");
        super::super::register_object_store_with_lease(&next_url, objects, ttl).expect("register");
        let late_root = Root::open(&late_url, &Default::default(), ttl).expect("root");
        let next_root = Root::open(&next_url, &Default::default(), ttl).expect("root");
        let table = Path::from("db/t");
        let late = Lease::acquire(&late_root, &table, ttl)
            .await
            .expect("the first lease");
        // Its first renewal (after 1 s) reaches the store 6 s late: the
        // lease runs out after 3 s.
        let stalled = faults.add(
            Rule::new(Op::Put, Fault::Delay(Duration::from_secs(6)))
                .path_contains("/lease/")
                .times(1),
        );
        let second = Lease::acquire(&next_root, &table, ttl)
            .await
            .expect("taken over once the first ran out");
        assert_eq!(faults.fired(stalled), 1, "the renewal is on its way");
        drop(second);
        let third = Lease::acquire(&next_root, &table, ttl)
            .await
            .expect("taken after a release");
        // The late renewal lands (about 7 s after the first lease); the
        // third holder renews each second, and is looked at between two.
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        assert!(
            late.renewer.is_finished(),
            "the late holder knows it no longer holds the lease"
        );
        let generations = list(&next_root, &path::lease_dir(&table))
            .await
            .expect("list");
        let mut holders = Vec::new();
        for (_, generation) in &generations {
            // Deleted since the list: an older one the renewal replaced.
            let Some(bytes) = next_root.get(generation).await.expect("get") else {
                continue;
            };
            let there: Held = serde_json::from_slice(&bytes).expect("a lease");
            assert_ne!(there.holder, late.holder, "{generation} is the late one's");
            holders.push(there.holder);
        }
        assert_eq!(
            holders.last(),
            Some(&third.holder),
            "the third holder's generation is the newest: {generations:?}"
        );
        drop(third);
        drop(late);
    }

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
