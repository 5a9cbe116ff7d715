//! One holder at a time across processes: a file lock on local disk, a
//! lease on an object store. The local store's tiering and trim locks and
//! the catalog's schema lock are all taken here ([`Across::hold`]); each
//! caller says where the lock lives (a lock file, a lease's objects and
//! directory), never how it is taken.
//!
//! Invariants it keeps:
//!
//! - **Released when its holder dies.** A file lock is the system's
//!   (`flock` on Unix), taken on an open file: two opens conflict even in
//!   one process, so callers order their own tasks first (an in-process
//!   lock) and never wait for themselves. A lease ([`Lease`]) is held until
//!   it expires.
//! - **Shared or exclusive.** Shared holders of a lock file keep out an
//!   exclusive one, not each other ([`Mode`]); a lease is exclusive.
//! - **The lock is on the file its name names.** A lock file removed or
//!   replaced while a process waited on it (a directory removed by hand, a
//!   database's directory by `DROP DATABASE`) keeps out no one who opens
//!   the name afterwards, so the lock is taken again by the name, at most
//!   [`RELOCK`]'s tries.
//! - **Its directories are made, never read.** A lock lives as long as
//!   its holder's process, which a power loss ends too, so the directories
//!   made for a lock file are not fsynced ([`super::durable::create_dirs`]),
//!   and no directory above is opened: a warehouse whose parent this
//!   process may not read still locks.
//! - **Read-only locations still lock.** A location this process may not
//!   write takes the lock through a read-only open of an existing lock file
//!   (a statement that changes nothing still runs there). With no lock file
//!   there, or no directory where it must exist ([`Dirs::Existing`]), the
//!   holder holds nothing ([`Held::NoFile`]): nothing of it can change
//!   there.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::durable::create_dirs;
use super::lease::{Lease, LeaseObjects};
use crate::retry::{Retry, Try};

/// How a lock file is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Beside other shared holders; keeps out an exclusive one.
    Shared,
    /// Alone.
    Exclusive,
}

/// Where a lock file's directory comes from.
#[derive(Debug, Clone)]
pub(crate) enum Dirs {
    /// Made when missing, up to `top` (a store's root, a
    /// warehouse; `None`: as far up as needed).
    Make { top: Option<PathBuf> },
    /// Never made: a lock file whose directory is missing is not taken.
    Existing,
}

/// A lock file held until dropped.
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: std::fs::File,
}

/// How many times a lock file replaced under its waiter is locked again
/// before the lock gives up.
pub(crate) const RELOCK: Retry = Retry::immediately(8);

/// Where a lock across processes lives.
#[derive(Debug)]
pub(crate) enum Across<O: LeaseObjects> {
    /// Local disk: a lock file.
    File {
        path: PathBuf,
        mode: Mode,
        dirs: Dirs,
    },
    /// An object store: a lease on `objects` under `dir`, lasting `ttl`
    /// unless renewed; `what` names it in the error of a wait that gives up
    /// (`the tiering lease of table 'db.t'`).
    Lease {
        objects: Arc<O>,
        dir: object_store::path::Path,
        ttl: Duration,
        what: String,
    },
    /// A location one process uses (`memory://`, a registered object
    /// store): the caller's in-process lock is all there is.
    InProcess,
}

/// A lock across processes, held until dropped.
#[derive(Debug)]
pub(crate) enum Held<O: LeaseObjects> {
    /// Local disk: a file lock.
    File { _lock: FileLock },
    /// An object store: a lease.
    Lease { _lease: Lease<O> },
    /// Local disk, but no lock file there and none can be made (a
    /// location this process may not write, a directory that does not
    /// exist): nothing to keep others from.
    NoFile,
    /// A location one process uses.
    InProcess,
}

/// Why a lock across processes could not be taken.
#[derive(Debug)]
pub(crate) enum HoldFailed<E> {
    /// The lock file could not be locked.
    File(std::io::Error),
    /// The lease's objects failed.
    Lease(E),
}

impl<O: LeaseObjects> Across<O> {
    /// Holds the lock, waiting while others hold it.
    pub(crate) async fn hold(self) -> Result<Held<O>, HoldFailed<O::Error>> {
        match self {
            Across::File { path, mode, dirs } => Ok(lock_file(&path, mode, &dirs)
                .await
                .map_err(HoldFailed::File)?
                .map_or(Held::NoFile, |lock| Held::File { _lock: lock })),
            Across::Lease {
                objects,
                dir,
                ttl,
                what,
            } => Lease::acquire(objects, dir, ttl, &what)
                .await
                .map(|lease| Held::Lease { _lease: lease })
                .map_err(HoldFailed::Lease),
            Across::InProcess => Ok(Held::InProcess),
        }
    }
}

/// Locks the lock file `path` (made when missing, see [`Dirs`]) as `mode`;
/// `None` when there is no lock file and none can be made (see the module
/// docs).
pub(crate) async fn lock_file(
    path: &Path,
    mode: Mode,
    dirs: &Dirs,
) -> std::io::Result<Option<FileLock>> {
    Ok(lock_file_then(path, mode, dirs, || Ok(()))
        .await?
        .map(|(lock, ())| lock))
}

/// [`lock_file`], then `under` run while the lock is held, in the same
/// trip to the blocking pool: no other holder runs between the lock and
/// what `under` reads.
pub(crate) async fn lock_file_then<R, F>(
    path: &Path,
    mode: Mode,
    dirs: &Dirs,
    under: F,
) -> std::io::Result<Option<(FileLock, R)>>
where
    R: Send + 'static,
    F: Fn() -> std::io::Result<R> + Clone + Send + 'static,
{
    RELOCK
        .run(|| {
            let (path, dirs, under) = (path.to_path_buf(), dirs.clone(), under.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let Some(file) = lock_once(&path, mode, &dirs)? else {
                        return Ok(Try::Done(None));
                    };
                    if !names(&path, &file)? {
                        return Ok(Try::Again(std::io::Error::other(format!(
                            "the lock file was replaced each of the {} times it was locked",
                            RELOCK.tries
                        ))));
                    }
                    let read = under()?;
                    Ok(Try::Done(Some((FileLock { _file: file }, read))))
                })
                .await
                // A panic of the task stays a `JoinError` inside the I/O
                // error, for callers that tell it apart.
                .map_err(std::io::Error::other)?
            }
        })
        .await
}

/// Whether `path` names the open file `file`.
#[cfg(unix)]
fn names(path: &Path, file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Without Unix's device and inode numbers the check is left out.
#[cfg(not(unix))]
fn names(_path: &Path, _file: &std::fs::File) -> std::io::Result<bool> {
    Ok(true)
}

/// Whether `e` says this process may not write there.
fn read_only(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
    )
}

/// Opens and locks `path` once; `None` when there is no lock file and none
/// can be made.
fn lock_once(path: &Path, mode: Mode, dirs: &Dirs) -> std::io::Result<Option<std::fs::File>> {
    if let (Dirs::Make { top }, Some(dir)) = (dirs, path.parent()) {
        match create_dirs(top.as_deref(), dir) {
            Ok(()) => {}
            // A location this process may not write: an existing file is
            // opened read-only below.
            Err(e) if read_only(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if read_only(&e) => match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    };
    match mode {
        Mode::Shared => file.lock_shared()?,
        Mode::Exclusive => file.lock()?,
    }
    Ok(Some(file))
}

impl FileLock {
    /// The locked file.
    #[cfg(test)]
    fn file(&self) -> &std::fs::File {
        &self._file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock file's directories are made without opening any directory
    /// above them: a warehouse whose parent this process may not read
    /// (`0711`) still takes its lock. When they were fsynced into their
    /// parents, the parent's open failed, which the lock took for a
    /// read-only place, and the lock was skipped.
    #[tokio::test]
    async fn a_lock_under_a_parent_that_cannot_be_read_is_taken() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let warehouse = dir.path().join("wh");
        std::fs::create_dir(&warehouse).expect("the warehouse");
        super::super::durable::tests::SYNC_FAILS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((
                dir.path().to_path_buf(),
                std::io::ErrorKind::PermissionDenied,
            ));
        let path = warehouse.join("_lakestream/schema-lock/d.lock");
        let held = lock_file(&path, Mode::Exclusive, &make()).await;
        assert!(
            matches!(held, Ok(Some(_))),
            "the lock was not taken: {held:?}"
        );
    }

    /// A panic of the work done under the lock reaches the caller as the
    /// task's `JoinError` inside the I/O error, so a caller can report it
    /// as the bug it is rather than as the file system's answer.
    #[tokio::test]
    async fn a_panic_under_the_lock_stays_a_panic() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("t.lock");
        let failed = lock_file_then(
            &path,
            Mode::Exclusive,
            &make(),
            || -> std::io::Result<()> { panic!("a bug under the lock") },
        )
        .await
        .expect_err("the work panicked");
        let join = failed
            .downcast::<tokio::task::JoinError>()
            .expect("the task's JoinError");
        assert!(join.is_panic(), "{join}");
    }

    fn make() -> Dirs {
        Dirs::Make { top: None }
    }

    /// Whether two open files of `path` are open in this process: a waiter
    /// beside a holder.
    #[cfg(target_os = "linux")]
    fn opened_twice(path: &Path) -> bool {
        std::fs::read_dir("/proc/self/fd").map_or(0, |fds| {
            fds.filter_map(|fd| fd.ok())
                .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == path))
                .count()
        }) >= 2
    }

    /// A lock file removed while a process waits on it (a directory removed
    /// by hand, or a database's directory, with the lock file older
    /// versions take, by `DROP DATABASE`): the waiter must lock the file the
    /// path names when its turn comes, not the removed one, which no other
    /// process opens again. (The store's tiering and trim locks did not
    /// check this; the schema lock did.)
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_waiter_on_a_lock_file_removed_under_it_locks_the_new_one() {
        for mode in [Mode::Exclusive, Mode::Shared] {
            let dir = tempfile::tempdir().expect("temp dir");
            let locks = dir.path().join("locks");
            let path = locks.join("d.lock");
            let holder = lock_file(&path, Mode::Exclusive, &make())
                .await
                .expect("lock")
                .expect("a lock file");
            let waiter = {
                let path = path.clone();
                tokio::spawn(async move {
                    lock_file(&path, mode, &make())
                        .await
                        .expect("lock")
                        .expect("a lock file")
                })
            };
            while !opened_twice(&path) {
                assert!(!waiter.is_finished(), "the waiter did not wait");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            std::fs::remove_dir_all(&locks).expect("remove");
            let other = lock_file(&path, Mode::Exclusive, &make())
                .await
                .expect("lock")
                .expect("a lock file");
            drop(holder);
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                !waiter.is_finished(),
                "{mode:?}: the waiter took a lock on the removed file while another holds the \
                 new one"
            );
            drop(other);
            drop(waiter.await.expect("waiter"));
        }
    }

    /// Shared holders keep out an exclusive one and not each other.
    #[tokio::test]
    async fn shared_holders_keep_out_an_exclusive_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("trim.lock");
        let first = lock_file(&path, Mode::Shared, &make())
            .await
            .expect("lock")
            .expect("a lock file");
        let second = lock_file(&path, Mode::Shared, &make())
            .await
            .expect("lock")
            .expect("a lock file");
        let exclusive = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("the lock file");
        assert!(exclusive.try_lock().is_err(), "exclusive beside shared");
        drop(first);
        assert!(exclusive.try_lock().is_err(), "exclusive beside shared");
        drop(second);
        assert!(exclusive.try_lock().is_ok());
        assert!(first_lock_fails_shared(&path), "shared beside exclusive");
    }

    fn first_lock_fails_shared(path: &Path) -> bool {
        std::fs::File::open(path)
            .expect("open")
            .try_lock_shared()
            .is_err()
    }

    /// The lock file's directories are made, fsynced into their parents
    /// (the schema lock made them with `create_dir_all`, not fsynced), and
    /// [`Dirs::Existing`] makes none: a lock file whose directory is missing
    /// is not taken.
    #[tokio::test]
    async fn directories_are_made_only_when_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let deep = dir.path().join("a").join("b").join("c.lock");
        let held = lock_file(&deep, Mode::Exclusive, &Dirs::Existing)
            .await
            .expect("lock");
        assert!(held.is_none());
        assert!(!dir.path().join("a").exists());
        let top = Dirs::Make {
            top: Some(dir.path().to_path_buf()),
        };
        let held = lock_file(&deep, Mode::Exclusive, &top)
            .await
            .expect("lock")
            .expect("a lock file");
        assert!(deep.is_file());
        assert!(held.file().try_lock().is_ok(), "the holder's own file");
    }

    /// What `under` reads is read while the lock is held: an exclusive
    /// holder cannot run between the lock and the read.
    #[tokio::test]
    async fn under_runs_while_the_lock_is_held() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.lock");
        let probe = path.clone();
        let (held, was_locked) = lock_file_then(&path, Mode::Shared, &make(), move || {
            Ok(first_lock_fails_exclusive(&probe))
        })
        .await
        .expect("lock")
        .expect("a lock file");
        assert!(was_locked, "read before the lock was held");
        drop(held);
        assert!(!first_lock_fails_exclusive(&path));
    }

    fn first_lock_fails_exclusive(path: &Path) -> bool {
        std::fs::File::open(path).expect("open").try_lock().is_err()
    }
}
