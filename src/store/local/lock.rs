//! The table locks a root holds across processes: the tiering lock (one
//! tierer, attacher or dropper of a table at a time) and the trim lock
//! (writes shared, deleting segments exclusive).
//!
//! These are methods of [`Root`], which knows where it is; the storage
//! layer's lock ([`Across`]) takes them:
//!
//! - **Local disk:** a lock file (`tier.lock`, `trim.lock` in the table's
//!   directory), released by the system when its holder dies, locked again
//!   should it be replaced while a process waited on it.
//! - **S3:** the tiering lock is a lease ([`Lease`], the storage layer's,
//!   on this root's objects: [`Root`] is its [`LeaseObjects`]), which a
//!   holder that dies holds until it expires; its commits are fenced besides. There is
//!   no trim lock: the log retention keeps deleted numbers out of a write's
//!   reach.
//! - **Other roots** (`memory://`, registered ones) are used by one
//!   process: the caller's in-process lock is all there is.
//!
//! The trim lock's reads happen under the lock, in its own trip to the
//! blocking pool, so an exclusive holder cannot run between the two.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;

use super::error::LocalStoreError;
use super::path;
use super::root::{PutFailed, Root};
use crate::error::{Error, Result};
use crate::object_storage;
use crate::object_storage::create::Created;
#[cfg(doc)]
use crate::object_storage::lease::Lease;
use crate::object_storage::lease::{LeaseObjects, WaitedOut};
use crate::object_storage::lock::{lock_file_then, Across, Dirs, FileLock, Held, HoldFailed, Mode};

/// A table's tiering lock across processes, held until dropped.
pub(crate) type TierLock = Held<Root>;

/// A held trim lock and the files read under it (`None`: absent).
pub(crate) type LockedReads = (FileLock, Vec<Option<Bytes>>);

impl Root {
    /// Holds the table's tiering lock across processes until dropped. On
    /// local disk it is a file lock, so a holder that crashes releases
    /// it; on S3 a lease ([`Lease`]), which a holder that crashes holds
    /// until it expires; other roots (`memory://`, registered ones) are used
    /// by one process, and the caller's in-process lock is enough.
    pub(crate) async fn lock_tiering(
        self: &Arc<Self>,
        table_dir: &Path,
        table: &str,
    ) -> Result<TierLock> {
        let name = "tier.lock";
        let across = if object_storage::is_s3(&self.url) {
            Across::Lease {
                objects: Arc::clone(self),
                dir: path::lease_dir(table_dir),
                ttl: self.lease_ttl,
                what: format!("the tiering lease of table '{table}'"),
            }
        } else {
            match self.local_file(&table_dir.clone().join(name)) {
                Some(path) => Across::File {
                    path,
                    mode: Mode::Exclusive,
                    dirs: Dirs::Make {
                        top: self.local_dir.clone(),
                    },
                },
                None => Across::InProcess,
            }
        };
        across.hold().await.map_err(|failed| match failed {
            HoldFailed::File(source) => LocalStoreError::Lock {
                name: name.to_string(),
                source,
            }
            .into(),
            HoldFailed::Lease(e) => e,
        })
    }

    /// Holds the table's trim lock until dropped: shared by writes between
    /// reading the tiered position and creating their segment, exclusive
    /// while tiering deletes segments, so a segment number is never taken
    /// again after its segment was deleted. On local disk only; elsewhere
    /// the log retention keeps deleted numbers out of a write's reach.
    pub(crate) async fn lock_trim(
        &self,
        table_dir: &Path,
        shared: bool,
    ) -> Result<Option<FileLock>> {
        Ok(self
            .lock_file(table_dir, "trim.lock", shared, Vec::new())
            .await?
            .map(|(lock, _)| lock))
    }

    /// [`Self::lock_trim`], shared, and then the objects `paths` read
    /// under it (each `None` when absent), in the same trip to the
    /// blocking pool: a write's checks cost one hop, not one per file.
    /// `None` off local disk.
    pub(crate) async fn lock_trim_reading(
        &self,
        table_dir: &Path,
        paths: Vec<Path>,
    ) -> Result<Option<LockedReads>> {
        self.lock_file(table_dir, "trim.lock", true, paths).await
    }

    async fn lock_file(
        &self,
        table_dir: &Path,
        name: &str,
        shared: bool,
        paths: Vec<Path>,
    ) -> Result<Option<LockedReads>> {
        let Some(file) = self.local_file(&table_dir.clone().join(name)) else {
            return Ok(None);
        };
        let Some(files) = paths
            .iter()
            .map(|path| self.local_file(path))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let mode = if shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let dirs = Dirs::Make {
            top: self.local_dir.clone(),
        };
        // Read only once the lock is held, and in its thread.
        let read = move || {
            Ok(files
                .iter()
                .map(|file| match std::fs::read(file) {
                    Ok(bytes) => Ok(Some(Bytes::from(bytes))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                })
                .collect::<Vec<_>>())
        };
        let locked = lock_file_then(&file, mode, &dirs, read)
            .await
            .map_err(|source| match source.downcast::<tokio::task::JoinError>() {
                // The lock's blocking task panicked or was cancelled: not
                // the file system's answer.
                Ok(source) => LocalStoreError::Blocking {
                    what: format!("locking '{name}'"),
                    source,
                },
                Err(source) => LocalStoreError::Lock {
                    name: name.to_string(),
                    source,
                },
            })?;
        // No lock file and none can be made (a root this process may not
        // write): nothing here can change, and nothing is held.
        let Some((lock, read)) = locked else {
            return Ok(None);
        };
        let read = read
            .into_iter()
            .zip(paths)
            .map(|(read, path)| read.map_err(|source| LocalStoreError::ReadFile { path, source }))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Some((lock, read)))
    }
}

/// A root's objects hold its tables' tiering leases.
#[async_trait::async_trait]
impl LeaseObjects for Root {
    type Error = Error;

    async fn list(&self, dir: &Path) -> Result<Vec<Path>> {
        use futures::TryStreamExt;
        let listed = self
            .objects
            .list(Some(dir))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|source| LocalStoreError::ListLease { source })?;
        Ok(listed)
    }

    async fn get(&self, path: &Path) -> Result<Option<Bytes>> {
        Root::get(self, path).await
    }

    async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created> {
        match self.put_new(path, bytes).await {
            Ok(created) => Ok(created),
            Err(PutFailed::NotApplied(e) | PutFailed::Unknown(e)) => Err(e),
        }
    }

    async fn delete(&self, path: &Path) -> Result<()> {
        Root::delete(self, path).await
    }

    fn waited_out(&self, waited: WaitedOut) -> Error {
        LocalStoreError::LeaseWaitedOut(waited).into()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::root::test_roots;
    use super::*;
    use crate::object_storage::lease::{holders, Lease};
    use crate::testing::faulty::{Fault, Faults, FaultyStore, Op, Rule};

    /// A write's checks read their files while it holds the trim lock, in
    /// the lock's own trip: an exclusive holder (a trim, a drop) cannot run
    /// between the lock and the reads.
    #[tokio::test]
    async fn files_are_read_under_a_held_trim_lock() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = test_roots::in_dir(dir.path());
        let table = Path::from("db/t");
        let there = table.clone().join("table.json");
        let absent = table.clone().join("tiered.json");
        root.put_replace(&there, Bytes::from_static(b"{}"))
            .await
            .expect("a put");
        let (lock, read) = root
            .lock_trim_reading(&table, vec![there, absent])
            .await
            .expect("the lock and the reads")
            .expect("a local root locks");
        assert_eq!(read, vec![Some(Bytes::from_static(b"{}")), None]);
        // Held shared: an exclusive lock must wait until it goes.
        let file = dir.path().join("db/t/trim.lock");
        let exclusive = std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .expect("the lock file");
        assert!(
            exclusive.try_lock().is_err(),
            "a trim got in under a write's lock"
        );
        drop(lock);
        assert!(exclusive.try_lock().is_ok());
    }

    /// A tiering lock file removed while a tierer waits on it (the table's
    /// directory removed by hand): the waiter must lock the file the name
    /// names when its turn comes, not the removed one, which another
    /// process that opens the name no longer sees. The store's lock did
    /// not check this before it was the storage layer's.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_tierer_waiting_on_a_removed_lock_file_locks_the_new_one() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = test_roots::in_dir(dir.path());
        let table = Path::from("db/t");
        let holder = root.lock_tiering(&table, "db.t").await.expect("the lock");
        let waiter = {
            let (root, table) = (Arc::clone(&root), table.clone());
            tokio::spawn(async move { root.lock_tiering(&table, "db.t").await.expect("the lock") })
        };
        let file = dir.path().join("db/t/tier.lock");
        let opened_twice = || {
            std::fs::read_dir("/proc/self/fd").map_or(0, |fds| {
                fds.filter_map(|fd| fd.ok())
                    .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == file))
                    .count()
            }) >= 2
        };
        while !opened_twice() {
            assert!(!waiter.is_finished(), "the waiter did not wait");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        std::fs::remove_dir_all(dir.path().join("db")).expect("remove");
        // Another process: the lock file alone, made again by its name.
        std::fs::create_dir_all(dir.path().join("db/t")).expect("dir");
        let other = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&file)
            .expect("the lock file");
        other.lock().expect("locked");
        drop(holder);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "the waiter took the removed lock file while another process holds the new one"
        );
        drop(other);
        drop(waiter.await.expect("the waiter"));
    }

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
        let dir = path::lease_dir(&table);
        let late = Lease::acquire(Arc::clone(&late_root), dir.clone(), ttl, "the lease")
            .await
            .expect("the first lease");
        // Its first renewal (after 1 s) reaches the store 6 s late: the
        // lease runs out after 3 s.
        let stalled = faults.add(
            Rule::new(Op::Put, Fault::Delay(Duration::from_secs(6)))
                .path_contains("/lease/")
                .times(1),
        );
        let second = Lease::acquire(Arc::clone(&next_root), dir.clone(), ttl, "the lease")
            .await
            .expect("taken over once the first ran out");
        assert_eq!(faults.fired(stalled), 1, "the renewal is on its way");
        drop(second);
        let third = Lease::acquire(Arc::clone(&next_root), dir.clone(), ttl, "the lease")
            .await
            .expect("taken after a release");
        // The late renewal lands (about 7 s after the first lease); the
        // third holder renews each second, and is looked at between two.
        tokio::time::sleep(Duration::from_millis(5_500)).await;
        assert!(
            !late.renewing(),
            "the late holder knows it no longer holds the lease"
        );
        let holders = holders(&*next_root, &dir).await.expect("holders");
        for (generation, holder) in &holders {
            assert_ne!(holder, late.holder(), "{generation} is the late one's");
        }
        assert_eq!(
            holders.last().map(|(_, h)| h.as_str()),
            Some(third.holder()),
            "the third holder's generation is the newest: {holders:?}"
        );
        drop(third);
        drop(late);
    }
}
