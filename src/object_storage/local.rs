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
//! only if the name is free, for the same reason. The hint files paimon
//! rewrites after each commit (`LATEST`, `EARLIEST`) are replaced whole
//! ([`WholeFile`]). Everything else is the file-system service's own
//! behaviour.
//!
//! Not covered: schema files that the catalog itself writes (`CREATE TABLE`,
//! `ALTER TABLE` go through its own file IO, as on S3), writers outside this
//! crate (Java Paimon, other builds), and file systems without hard links
//! (see [`rename_no_replace`]).

use std::path::PathBuf;
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
    let operator = Operator::from_config(config)
        .map_err(|e| paimon::Error::ConfigInvalid {
            message: format!("cannot open the local file system: {e}"),
        })?
        .layer(Guard(Arc::new(NoReplace)));
    FileIOBuilder::new("file")
        .with_fs_operator(operator)
        .build()
}

/// The rules of [`file_io`]: renames onto a snapshot or schema name never
/// replace; writes are checked by name only.
#[derive(Debug)]
struct NoReplace;

impl Rules for NoReplace {
    fn check_write(&self, _path: &str) -> Result<()> {
        Ok(())
    }

    fn write(
        &self,
        inner: &Servicer,
        ctx: &OperationContext,
        path: &str,
        args: OpWrite,
    ) -> Result<oio::Writer> {
        if is_hint(path) && !args.append() && !args.if_not_exists() {
            return Ok(Box::new(WholeFile {
                target: absolute(path),
                bytes: Vec::new(),
            }));
        }
        inner.write(ctx, path, args)
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

/// Whether `path` names one of the hint files paimon rewrites in place
/// (`LATEST`, `EARLIEST`: the newest and oldest snapshot, or changelog, id).
fn is_hint(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(name, "LATEST" | "EARLIEST")
}

/// The write of a file that replaces it whole: its bytes, kept until the
/// close writes them to a new file beside it and renames that over it.
///
/// paimon rewrites its hints after every commit through a plain write,
/// which truncates the file and then writes at its start. Two commits
/// rewriting one at once (and a late commit writes an older id) mix their
/// bytes: "9" written over "10" leaves "90", and every reader then looks
/// for a snapshot 90 that does not exist (or fails the write's own length
/// check). A rename makes each hint one writer's whole.
struct WholeFile {
    target: PathBuf,
    bytes: Vec<u8>,
}

impl oio::Write for WholeFile {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        self.bytes.extend_from_slice(&bs.to_bytes());
        Ok(())
    }

    async fn close(&mut self) -> Result<Metadata> {
        let temp = super::temporary_beside(&self.target);
        let failed = |what: &str, e: std::io::Error| {
            let kind = if e.kind() == std::io::ErrorKind::NotFound {
                ErrorKind::NotFound
            } else {
                ErrorKind::Unexpected
            };
            Error::new(kind, format!("cannot {what} '{}'", self.target.display())).set_source(e)
        };
        if let Err(e) = tokio::fs::write(&temp, &self.bytes).await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(failed("write the new content of", e));
        }
        if let Err(e) = tokio::fs::rename(&temp, &self.target).await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(failed("replace", e));
        }
        Ok(Metadata::new(EntryMode::FILE).with_content_length(self.bytes.len() as u64))
    }

    async fn abort(&mut self) -> Result<()> {
        self.bytes.clear();
        Ok(())
    }
}

/// The file that `path`, relative to the service's root `/`, names.
fn absolute(path: &str) -> PathBuf {
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
