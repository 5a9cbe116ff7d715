//! Safe Paimon commits on local disk.
//!
//! paimon 0.4 publishes a snapshot by writing it aside, checking that the
//! name `snapshot-<id>` is free, and renaming the file onto it. A POSIX
//! rename replaces its target, so when another commit creates the same
//! snapshot between the check and the rename (two processes, or a writer
//! and a compaction, committing to one table), the second rename replaces
//! the first snapshot: its rows are gone, although its commit was
//! acknowledged. (`tests/it/local_commits.rs` lost rows this way in most
//! runs before this file IO.)
//!
//! Tables of a warehouse on local disk are therefore opened on a file IO
//! of our own: paimon's file-system service under a layer whose rename onto
//! a snapshot or schema name ([`super::create_only`]) never replaces. It
//! links the file under its new name, which fails when the name is taken,
//! then removes the old name. The loser's rename fails; paimon's commit
//! then finds the snapshot present and retries on the next id, as it does
//! when its check finds the name taken. A plain write of such a file is made
//! only if the name is free, for the same reason. A table's metadata files
//! (schemas, snapshots, the hints paimon rewrites after each commit, tags,
//! consumers) are written aside and published whole by the guard layer
//! (`guard::Whole`): renamed onto their names, without replacing for a
//! snapshot or schema. Everything else is the file-system service's own
//! behaviour. The catalog's own `CREATE TABLE` and `ALTER TABLE` write
//! their schema files through this file IO too (`super::catalog`).
//!
//! Not covered: writers outside this crate (Java Paimon, other builds), and
//! file systems without hard links (see [`rename_no_replace`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use opendal::raw::*;
use opendal::*;
use opendal_service_fs::FsConfig;
use paimon::io::{FileIO, FileIOBuilder};

use super::create_only;
use super::guard::{Guard, Rules};

/// The file IO of a local warehouse's tables (see the module docs).
pub(super) fn file_io() -> paimon::Result<FileIO> {
    let mut config = FsConfig::default();
    config.root = Some("/".to_string());
    let operator = Operator::from_config(config).map_err(|e| paimon::Error::ConfigInvalid {
        message: format!("cannot open the local file system: {e}"),
    })?;
    // Tests fill the disk under this file IO's rules (`testing::DiskFull`).
    #[cfg(any(test, feature = "testing"))]
    let operator = operator.layer(Guard(Arc::new(super::disk_full::FullDisks)));
    let operator = operator.layer(Guard(Arc::new(NoReplace)));
    FileIOBuilder::new("file")
        .with_fs_operator(operator)
        .build()
}

/// The lock file, in a database's directory, that the schema writes of its
/// tables take (see [`with_schema_lock`]). A file, so paimon and pypaimon, which
/// list a database's tables as its directories, never take it for a table.
const SCHEMA_LOCK: &str = ".lakestream-schema.lock";

/// The directory a local location names (`/w`, `file:/w`, `file:///w`).
fn local_path(location: &str) -> PathBuf {
    PathBuf::from(location.strip_prefix("file:").unwrap_or(location))
}

/// Runs `work` holding database `database`'s schema lock in the local
/// warehouse at `warehouse`, exclusively: every process's `CREATE`,
/// `ALTER`, `DROP` and `RENAME` of a table of the database, and `DROP
/// DATABASE`, through this crate's catalog, one at a time.
///
/// paimon's file-system catalog writes a table's next schema file in place
/// after reading the newest one (`ALTER TABLE`), or after checking that the
/// first is absent (`CREATE TABLE`), through its own file IO, which
/// [`file_io`] does not reach: two processes at once write the same file,
/// and the later one silently undoes the other's change (a column, an
/// option, the lake-stream mode).
///
/// Within a process, statements wait their turn on a mutex before the file
/// lock, so waiting ties up no thread. A database without a directory takes
/// no lock (paimon then says it does not exist).
pub(super) async fn with_schema_lock<T>(
    warehouse: &str,
    database: &str,
    work: impl std::future::Future<Output = paimon::Result<T>>,
) -> paimon::Result<T> {
    let path = local_path(warehouse)
        .join(format!("{database}.db"))
        .join(SCHEMA_LOCK);
    let key = path.display().to_string();
    let take = async {
        let failed = |reason: String| paimon::Error::UnexpectedError {
            message: format!(
                "cannot take the schema lock of database '{database}' ({}): {reason}; \
                 nothing was changed",
                path.display()
            ),
            source: None,
        };
        let path = path.clone();
        tokio::task::spawn_blocking(move || lock(&path))
            .await
            .map_err(|e| failed(e.to_string()))?
            .map_err(|e| failed(e.to_string()))
    };
    super::schema_lock::holding(key, take, work).await
}

/// The lock file `path` opened and locked exclusively; `None` when its
/// directory does not exist. A warehouse this process may not write gets
/// the lock through a read-only open of an existing file (a statement that
/// changes nothing still runs there), or none.
///
/// `DROP DATABASE` removes the lock file with its directory while holding
/// it; a process that waited on it then holds a lock on a file no one opens
/// again. So the lock holds only while `path` still names the locked file;
/// otherwise the file `path` names now is locked.
fn lock(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    loop {
        let Some(file) = lock_once(path)? else {
            return Ok(None);
        };
        if names(path, &file)? {
            return Ok(Some(file));
        }
    }
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

fn lock_once(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            match std::fs::File::open(path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    file.lock()?;
    Ok(Some(file))
}

/// The rules of [`file_io`]: renames onto a snapshot or schema name never
/// replace; metadata files are published whole (a file system shows a file
/// while it is written); writes are checked by name only.
#[derive(Debug)]
struct NoReplace;

impl Rules for NoReplace {
    fn check_write(&self, _path: &str) -> Result<()> {
        Ok(())
    }

    fn shows_partial_writes(&self) -> bool {
        true
    }

    async fn rename(
        &self,
        inner: &Servicer,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> Result<RpRename> {
        if create_only(to) {
            rename_no_replace(inner, ctx, (from, to), args).await?;
            return Ok(RpRename::default());
        }
        inner.rename(ctx, from, to, args).await
    }
}

/// The file that `path`, relative to the service's root `/`, names.
pub(super) fn absolute(path: &str) -> PathBuf {
    PathBuf::from("/").join(path.trim_start_matches('/'))
}

/// Gives `from` the name `to` unless a file has it: a hard link, then the
/// old name removed.
///
/// On a file system that cannot link (FAT, some network and FUSE mounts)
/// the link fails with another error. Failing the rename would make paimon
/// write the snapshot in place under its name, which a crash can leave
/// half written for every later reader; renaming once the name is found
/// free keeps paimon's own behaviour there instead, its race included.
async fn rename_no_replace(
    inner: &Servicer,
    ctx: &OperationContext,
    (from_key, to_key): (&str, &str),
    args: OpRename,
) -> Result<()> {
    let (from, to) = (absolute(from_key), absolute(to_key));
    match tokio::fs::hard_link(&from, &to).await {
        Ok(()) => {
            // The name is published; a leftover old name is harmless.
            let _ = tokio::fs::remove_file(&from).await;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::new(
            ErrorKind::ConditionNotMatch,
            format!("'{}' exists: another commit created it first", to.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "cannot link '{}' as '{}': {e}",
                from.display(),
                to.display()
            ),
        )),
        Err(_) => {
            if tokio::fs::symlink_metadata(&to).await.is_ok() {
                return Err(Error::new(
                    ErrorKind::ConditionNotMatch,
                    format!("'{}' exists: another commit created it first", to.display()),
                ));
            }
            inner.rename(ctx, from_key, to_key, args).await.map(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(dir: &Path, name: &str) -> String {
        dir.join(name).display().to_string()
    }

    /// `DROP DATABASE` removes the database's directory, lock file and all,
    /// while it holds the lock. A process already waiting on that file then
    /// gets a lock on a file no one else will open again: after a `CREATE
    /// DATABASE` of the same name, another process locks the new file, and
    /// both would change the database's tables at once. The waiter must
    /// lock the file the path names when it gets its turn.
    #[test]
    fn a_waiter_on_a_lock_file_removed_under_it_locks_the_new_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let database = dir.path().join("d.db");
        std::fs::create_dir_all(&database).expect("dir");
        let path = database.join(SCHEMA_LOCK);
        let dropper = lock(&path).expect("lock").expect("a lock file");
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || lock(&path).expect("lock").expect("a lock file"))
        };
        std::thread::sleep(Duration::from_millis(100));
        // DROP DATABASE, then CREATE DATABASE and another process's DDL.
        std::fs::remove_dir_all(&database).expect("drop");
        std::fs::create_dir_all(&database).expect("create");
        let other = lock(&path).expect("lock").expect("a lock file");
        drop(dropper);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !waiter.is_finished(),
            "the waiter took a lock on the removed file while another process holds the new one"
        );
        drop(other);
        let held = waiter.join().expect("waiter");
        drop(held);
    }

    /// Paimon rewrites its `LATEST` hint in place after each commit, and
    /// a late commit writes an older id: "9" written over "10" by two
    /// writers at once, each truncating then writing at offset 0, leaves
    /// "90", and readers then look for a snapshot 90 that does not exist.
    /// A hint is replaced whole, so a reader sees one writer's id.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_hint_rewritten_at_once_by_two_writers_is_one_of_theirs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let snapshots = dir.path().join("t").join("snapshot");
        std::fs::create_dir_all(&snapshots).expect("dir");
        let io = file_io().expect("file io");
        let hint = path(&snapshots, "LATEST");
        for round in 0..300 {
            let writers = ["9", "10"].map(|id| {
                let (io, hint) = (io.clone(), hint.clone());
                tokio::spawn(async move {
                    io.new_output(&hint)
                        .expect("output")
                        .write(bytes::Bytes::from(id))
                        .await
                        .expect("write");
                })
            });
            for writer in writers {
                writer.await.expect("join");
            }
            let read = std::fs::read_to_string(snapshots.join("LATEST")).expect("read");
            assert!(
                read == "9" || read == "10",
                "round {round}: the hint reads '{read}'"
            );
        }
        // Nothing is left beside the hint.
        let names: Vec<_> = std::fs::read_dir(&snapshots)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["LATEST"]);
    }

    /// The files under `dir`, by name, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// paimon writes schema files, tags and consumers in place, and its
    /// hints by truncating them: on a full disk an `ALTER` left a 0-byte
    /// `schema-1`, which every later statement on the table failed to
    /// parse, and `create_tag` a 0-byte tag. A metadata write that fails
    /// part way leaves its name as it was, and nothing beside it.
    #[tokio::test]
    async fn a_metadata_write_that_fails_part_way_leaves_the_name_as_it_was() {
        let dir = tempfile::tempdir().expect("temp dir");
        let table = dir.path().join("w").join("d.db").join("t");
        for sub in ["schema", "snapshot", "tag", "consumer", "bucket-0"] {
            std::fs::create_dir_all(table.join(sub)).expect("dir");
        }
        std::fs::write(table.join("schema").join("schema-0"), "{\"id\":0}").expect("write");
        std::fs::write(table.join("snapshot").join("LATEST"), "3").expect("write");
        let io = file_io().expect("file io");
        let write = |name: &str, body: &'static str| {
            let (io, file) = (io.clone(), path(&table, name));
            async move {
                io.new_output(&file)
                    .expect("output")
                    .write(bytes::Bytes::from(body))
                    .await
            }
        };
        for room in [0, 4] {
            let full = super::super::disk_full::DiskFull::new(dir.path(), room);
            for (name, body) in [
                ("schema/schema-1", "{\"id\":1,\"fields\":[]}"),
                ("snapshot/snapshot-4", "{\"id\":4}"),
                ("snapshot/LATEST", "12345678"),
                ("tag/tag-a", "{\"id\":3}"),
                ("consumer/consumer-c", "{\"nextSnapshot\":3}"),
            ] {
                let error = write(name, body).await.expect_err(name);
                assert!(
                    error.to_string().contains("No space left"),
                    "{name}: {error}"
                );
            }
            assert_eq!(names(&table.join("schema")), ["schema-0"], "room {room}");
            assert_eq!(names(&table.join("snapshot")), ["LATEST"], "room {room}");
            assert!(names(&table.join("tag")).is_empty(), "room {room}");
            assert!(names(&table.join("consumer")).is_empty(), "room {room}");
            assert_eq!(
                std::fs::read_to_string(table.join("snapshot").join("LATEST")).expect("read"),
                "3"
            );
            // A data file is written in place (the disk is full indeed):
            // a short one is an orphan no snapshot names.
            write("bucket-0/data-1.parquet", "rows and rows")
                .await
                .expect_err("a data file on a full disk");
            drop(full);
        }
        // With room again, each is published whole; a schema or snapshot
        // name is created once.
        write("schema/schema-1", "{\"id\":1}")
            .await
            .expect("schema");
        write("tag/tag-a", "{\"id\":3}").await.expect("tag");
        write("snapshot/LATEST", "4").await.expect("hint");
        assert!(write("schema/schema-1", "{\"id\":9}").await.is_err());
        assert_eq!(
            std::fs::read_to_string(table.join("schema").join("schema-1")).expect("read"),
            "{\"id\":1}"
        );
        assert_eq!(names(&table.join("schema")), ["schema-0", "schema-1"]);
        assert_eq!(names(&table.join("tag")), ["tag-a"]);
        assert_eq!(
            std::fs::read_to_string(table.join("snapshot").join("LATEST")).expect("read"),
            "4"
        );
    }

    #[tokio::test]
    async fn a_rename_onto_a_snapshot_never_replaces_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let snapshots = dir.path().join("t").join("snapshot");
        std::fs::create_dir_all(&snapshots).expect("dir");
        let io = file_io().expect("file io");
        let target = path(&snapshots, "snapshot-3");
        for (temp, body) in [("first.tmp", "first"), ("second.tmp", "second")] {
            io.new_output(&path(&snapshots, temp))
                .expect("output")
                .write(bytes::Bytes::from(body))
                .await
                .expect("write");
        }
        io.rename(&path(&snapshots, "first.tmp"), &target)
            .await
            .expect("the first rename publishes");
        assert!(!snapshots.join("first.tmp").exists());
        let second = io.rename(&path(&snapshots, "second.tmp"), &target).await;
        assert!(second.is_err(), "the second rename must fail");
        assert_eq!(
            std::fs::read_to_string(snapshots.join("snapshot-3")).expect("read"),
            "first"
        );
        // Nothing was moved: the loser's file is where it was.
        assert!(snapshots.join("second.tmp").exists());
        // A plain write of a taken snapshot name fails too.
        let write = io
            .new_output(&target)
            .expect("output")
            .write(bytes::Bytes::from("third"))
            .await;
        assert!(write.is_err(), "a write over a snapshot must fail");
        assert_eq!(
            std::fs::read_to_string(snapshots.join("snapshot-3")).expect("read"),
            "first"
        );
        // Other files rename as before, replacing.
        io.new_output(&path(&snapshots, "LATEST.tmp"))
            .expect("output")
            .write(bytes::Bytes::from("3"))
            .await
            .expect("write");
        std::fs::write(snapshots.join("LATEST"), "2").expect("write");
        io.rename(&path(&snapshots, "LATEST.tmp"), &path(&snapshots, "LATEST"))
            .await
            .expect("rename");
        assert_eq!(
            std::fs::read_to_string(snapshots.join("LATEST")).expect("read"),
            "3"
        );
    }
}
