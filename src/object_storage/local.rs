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
//! A file system without hard links gets a rename that refuses to replace
//! instead, where the system has one (see [`rename_no_replace`]); a full
//! disk fails the publish with its error. Not covered: writers outside this
//! crate (Java Paimon, other builds).

use std::sync::Arc;

use opendal::raw::*;
use opendal::*;
use opendal_service_fs::FsConfig;
use paimon::io::{FileIO, FileIOBuilder};

use super::create::Created;
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

/// The rules of [`file_io`]: renames onto a snapshot or schema name never
/// replace; metadata files are published whole (a file system shows a file
/// while it is written); writes are checked by name only.
#[derive(Debug)]
struct NoReplace;

impl Rules for NoReplace {
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

/// Gives `from` the name `to` unless a file has it: a hard link, then the
/// old name removed; the directory is fsynced, so the published name
/// survives power loss (the one durable create-if-absent on local disk,
/// [`super::durable::link_new`], which the store's objects use too).
///
/// A full disk (or quota) fails the link, and the publish with it, with the
/// disk's error: nothing is renamed over anything. On a file system that
/// cannot link (FAT, some network and FUSE mounts) the link fails with
/// another error; the file is then moved by a rename that refuses to
/// replace ([`move_no_replace`]: `renameat2(RENAME_NOREPLACE)` on Linux,
/// `renamex_np(RENAME_EXCL)` on macOS). Only where neither exists does it
/// rename once the name is found free, paimon's own behaviour there, its
/// race included (two publishes of one name at once can both succeed, the
/// second replacing the first): failing instead would make paimon write
/// the snapshot in place under its name, which a crash can leave half
/// written for every later reader.
async fn rename_no_replace(
    inner: &Servicer,
    ctx: &OperationContext,
    (from_key, to_key): (&str, &str),
    args: OpRename,
) -> Result<()> {
    let (from, to) = (super::absolute(from_key), super::absolute(to_key));
    crate::failpoint::failpoint_in("publish-before-link", to.display()).await;
    let linked = {
        let (from, to) = (from.clone(), to.clone());
        tokio::task::spawn_blocking(move || super::durable::link_new(&from, &to))
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("a link task failed: {e}")))?
    };
    let error = match linked {
        Ok(Created::Yes) => {
            // The name is published; a leftover old name is harmless.
            let _ = tokio::fs::remove_file(&from).await;
            return Ok(());
        }
        Ok(Created::AlreadyExists) => return Err(taken(&to)),
        // Linked, but the directory was not synced.
        Err((true, e)) => {
            let _ = tokio::fs::remove_file(&from).await;
            return Err(not_durable(&to, e));
        }
        Err((false, e)) => e,
    };
    match error.kind() {
        std::io::ErrorKind::AlreadyExists => Err(taken(&to)),
        std::io::ErrorKind::NotFound => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "cannot link '{}' as '{}': {error}",
                from.display(),
                to.display()
            ),
        )),
        _ if full(&error) => Err(not_published(&to, error)),
        _ => match move_no_replace(&from, &to).await? {
            Moved::Moved => Ok(()),
            Moved::Unsupported => {
                if tokio::fs::symlink_metadata(&to).await.is_ok() {
                    return Err(taken(&to));
                }
                inner.rename(ctx, from_key, to_key, args).await.map(|_| ())
            }
        },
    }
}

/// Whether `error` says the disk (or the user's quota) is full.
fn full(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// The error of a publish onto a name another commit took first.
fn taken(to: &std::path::Path) -> Error {
    Error::new(
        ErrorKind::ConditionNotMatch,
        format!("'{}' exists: another commit created it first", to.display()),
    )
}

/// The error of a publish that failed with `error`, nothing published.
fn not_published(to: &std::path::Path, error: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("cannot publish '{}': {error}", to.display()),
    )
    .set_source(error)
}

/// The error of a publish whose name is there but whose directory could
/// not be fsynced: it may not survive a power loss.
fn not_durable(to: &std::path::Path, error: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!(
            "'{}' was published, but its directory could not be synced ({error}): it may not \
             survive a power loss",
            to.display()
        ),
    )
    .set_source(error)
}

/// What [`move_no_replace`] did.
#[derive(Debug, PartialEq, Eq)]
enum Moved {
    /// `from` has the name `to`.
    Moved,
    /// The system or file system has no rename that refuses to replace:
    /// nothing was done.
    Unsupported,
}

/// Renames `from` to `to` unless a file has that name, atomically, where
/// the system has such a rename, and fsyncs the directory; a taken name
/// fails with `ConditionNotMatch`.
async fn move_no_replace(from: &std::path::Path, to: &std::path::Path) -> Result<Moved> {
    let (source, target) = (from.to_path_buf(), to.to_path_buf());
    let renamed =
        tokio::task::spawn_blocking(move || -> std::io::Result<std::io::Result<Moved>> {
            let moved = rename_exclusive(&source, &target)?;
            if moved == Moved::Moved {
                if let Some(dir) = target.parent() {
                    // Moved: the name is there, whatever the sync says.
                    return Ok(super::durable::sync_dir(dir).map(|()| moved));
                }
            }
            Ok(Ok(moved))
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("a rename task failed: {e}")))?;
    match renamed {
        Ok(Ok(moved)) => Ok(moved),
        Ok(Err(e)) => Err(not_durable(to, e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(taken(to)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "cannot rename '{}' to '{}': {e}",
                from.display(),
                to.display()
            ),
        )),
        Err(e) => Err(not_published(to, e)),
    }
}

/// The system's rename that never replaces its target.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios"
))]
fn rename_exclusive(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<Moved> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use rustix::io::Errno;
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(Moved::Moved),
        // A kernel or file system without the flag (some network and FUSE
        // mounts answer EINVAL).
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => Ok(Moved::Unsupported),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "ios"
)))]
fn rename_exclusive(_from: &std::path::Path, _to: &std::path::Path) -> std::io::Result<Moved> {
    Ok(Moved::Unsupported)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn path(dir: &Path, name: &str) -> String {
        dir.join(name).display().to_string()
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

    /// A link needs a directory entry, which a full disk may not have:
    /// the publish fails with the disk's error, and nothing is renamed
    /// onto the name (it used to be, after a check that another commit
    /// could pass at the same time), whether the file was written aside
    /// first or renamed by paimon.
    #[tokio::test]
    async fn a_publish_on_a_full_disk_fails_with_the_disks_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let table = dir.path().join("t");
        for sub in ["schema", "snapshot", "tag"] {
            std::fs::create_dir_all(table.join(sub)).expect("dir");
        }
        let io = file_io().expect("file io");
        io.new_output(&path(&table, "snapshot/snapshot-3.tmp"))
            .expect("output")
            .write(bytes::Bytes::from("{\"id\":3}"))
            .await
            .expect("write");
        // Room for every byte: only the new name fails.
        let full = super::super::disk_full::DiskFull::new(dir.path(), 1 << 20);
        let renamed = io
            .rename(
                &path(&table, "snapshot/snapshot-3.tmp"),
                &path(&table, "snapshot/snapshot-3"),
            )
            .await;
        let error = renamed.expect_err("a rename onto a new name on a full disk");
        assert!(error.to_string().contains("No space left"), "{error}");
        assert_eq!(names(&table.join("snapshot")), ["snapshot-3.tmp"]);
        for name in ["schema/schema-0", "tag/tag-a"] {
            let written = io
                .new_output(&path(&table, name))
                .expect("output")
                .write(bytes::Bytes::from("{\"id\":0}"))
                .await;
            let error = written.expect_err(name);
            assert!(
                error.to_string().contains("No space left"),
                "{name}: {error}"
            );
        }
        assert!(names(&table.join("schema")).is_empty());
        assert!(names(&table.join("tag")).is_empty());
        drop(full);
        io.rename(
            &path(&table, "snapshot/snapshot-3.tmp"),
            &path(&table, "snapshot/snapshot-3"),
        )
        .await
        .expect("published with room again");
        assert_eq!(names(&table.join("snapshot")), ["snapshot-3"]);
    }

    /// Without hard links, a file is moved onto a name only if the name is
    /// free, in one step: of two moves onto one name at once, one wins and
    /// the other fails, its file left where it was.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_hard_links_a_publish_never_replaces() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (a, b, target) = (
            dir.path().join("a.tmp"),
            dir.path().join("b.tmp"),
            dir.path().join("snapshot-1"),
        );
        std::fs::write(&a, "a").expect("write");
        let moved = move_no_replace(&a, &target).await.expect("moved");
        if cfg!(any(target_os = "linux", target_os = "macos")) {
            assert_eq!(moved, Moved::Moved);
        }
        if moved == Moved::Unsupported {
            return;
        }
        std::fs::write(&b, "b").expect("write");
        let error = move_no_replace(&b, &target).await.expect_err("taken");
        assert_eq!(error.kind(), ErrorKind::ConditionNotMatch, "{error}");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "a");
        assert!(b.exists());
        for round in 0..100 {
            std::fs::remove_file(&target).expect("remove");
            std::fs::write(&a, "a").expect("write");
            std::fs::write(&b, "b").expect("write");
            let racers = [(a.clone(), "a"), (b.clone(), "b")].map(|(from, body)| {
                let target = target.clone();
                tokio::spawn(async move { (move_no_replace(&from, &target).await.is_ok(), body) })
            });
            let mut won = Vec::new();
            for racer in racers {
                let (moved, body) = racer.await.expect("join");
                if moved {
                    won.push(body);
                }
            }
            assert_eq!(won.len(), 1, "round {round}: {won:?} moved");
            assert_eq!(
                std::fs::read_to_string(&target).expect("read"),
                won[0],
                "round {round}"
            );
        }
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
