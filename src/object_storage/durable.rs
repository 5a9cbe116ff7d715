//! Durable files on local disk: how a file reaches its name whole and
//! survives power loss there. The one durable create-if-absent
//! ([`link_new`], [`durable_create`]) and replace ([`durable_replace`]) on
//! local disk: a store root's objects, paimon's snapshot and schema files
//! (`super::local`) are made with them. A lock file's directories need
//! their names only while their holder lives ([`create_dirs`]).
//!
//! Invariants it keeps:
//!
//! - **Whole under the name.** A file is written to a temporary name
//!   ([`temporary_name`]), fsynced, then linked (create-if-absent: the link
//!   fails when the name is taken) or renamed (replace) to its name.
//! - **Durable before acknowledged.** The directory is fsynced after the
//!   link or rename, and every directory created on the way is fsynced into
//!   its parent. A create whose link landed but whose directory could not
//!   be fsynced says so (its error's `true`): the name is there, but may
//!   not survive a power loss.
//! - A temporary file left by a write that died is removed only once old
//!   ([`remove_temporaries`]); removing one a live write holds fails that
//!   write before anything of it is published.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::create::Created;

/// Creates the directories up to `dir` that are missing, fsyncing each new
/// one into its parent, so their entries survive power loss. `top` (a
/// store's root, a warehouse) is where the walk stops.
pub(crate) fn create_dirs_durably(
    top: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> std::io::Result<()> {
    // Directories this process made durable (or found and fsynced into
    // their parents): another process may have created one and not yet
    // fsynced it, so an existing directory is synced once too.
    static DURABLE: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    let durable = DURABLE.get_or_init(Default::default);
    if durable
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(dir)
        && dir.is_dir()
    {
        return Ok(());
    }
    make_dir(top, dir, create_dirs_durably)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    durable
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(dir.to_path_buf());
    Ok(())
}

/// Creates the directories up to `dir` that are missing, as
/// [`create_dirs_durably`] does but with no fsync, nor any open of a
/// directory: for what needs the name only while its process lives (a
/// lock file), in places whose parents this process may not read.
pub(crate) fn create_dirs(
    top: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> std::io::Result<()> {
    make_dir(top, dir, create_dirs)
}

/// Makes `dir` when missing, its missing parents below `top` first (with
/// `parents`).
fn make_dir(
    top: Option<&std::path::Path>,
    dir: &std::path::Path,
    parents: fn(Option<&std::path::Path>, &std::path::Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        if top.is_none_or(|top| parent.starts_with(top)) {
            parents(top, parent)?;
        }
    }
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Fsyncs a directory, so the names made in it survive power loss (`""`,
/// the parent of a relative path's first part, is the current directory).
/// A file system that cannot fsync a directory at all (`EINVAL`: some FUSE
/// and SMB mounts) is taken as it is, as PostgreSQL takes it: the name is
/// as durable as that file system makes it, and refusing every publish
/// there would make a warehouse on it unusable.
pub(crate) fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        dir
    };
    #[cfg(test)]
    let fails = tests::SYNC_FAILS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(failing, _)| failing == dir)
        .map(|(_, kind)| *kind);
    #[cfg(test)]
    if fails == Some(std::io::ErrorKind::PermissionDenied) {
        return Err(std::io::ErrorKind::PermissionDenied.into());
    }
    let opened = std::fs::File::open(dir)?;
    #[cfg(test)]
    let synced = match fails {
        Some(kind) => Err(kind.into()),
        None => opened.sync_all(),
    };
    #[cfg(not(test))]
    let synced = opened.sync_all();
    match synced {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        other => other,
    }
}

/// A fresh name for the temporary file a write of the file `name` goes
/// to before it is linked or renamed to `name`: `.NAME.<pid>-<n>.tmp`.
fn temporary_name(name: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".{name}.{}-{n}.tmp", std::process::id())
}

/// Whether `file_name` is one of [`temporary_name`]'s names.
fn is_temporary(file_name: &str) -> bool {
    let Some(rest) = file_name
        .strip_prefix('.')
        .and_then(|rest| rest.strip_suffix(".tmp"))
    else {
        return false;
    };
    let Some((name, suffix)) = rest.rsplit_once('.') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    !name.is_empty()
        && suffix
            .split_once('-')
            .is_some_and(|(pid, n)| digits(pid) && digits(n))
}

/// Removes the temporary files ([`temporary_name`]) under `dir` last
/// modified before `before`, its subdirectories included (symbolic links
/// are not followed); what it removed, as (files, bytes).
///
/// A temporary file is its write's alone until the write links or renames
/// it; one left behind is a write that died (a process killed) before.
/// Removing one a live write still holds fails that write before anything
/// of it is published (its link or rename finds no file), never a write
/// that was acknowledged, so the age is a courtesy to writes that are slow,
/// not what keeps data safe.
pub(crate) fn remove_temporaries(
    dir: &std::path::Path,
    before: std::time::SystemTime,
) -> std::io::Result<(u64, u64)> {
    let mut removed = (0, 0);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            let (files, bytes) = remove_temporaries(&entry.path(), before)?;
            removed = (removed.0 + files, removed.1 + bytes);
            continue;
        }
        if !kind.is_file() || !is_temporary(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.modified()? >= before {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed = (removed.0 + 1, removed.1 + meta.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Writes `bytes` to a fresh temporary file beside `file` and fsyncs it.
fn write_temp(
    top: Option<&std::path::Path>,
    file: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let dir = file
        .parent()
        .ok_or_else(|| std::io::Error::other("an object path has no directory"))?;
    create_dirs_durably(top, dir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(temporary_name(&name));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    out.write_all(bytes)?;
    out.sync_all()?;
    Ok(temp)
}

/// Create-if-absent on local disk: `bytes` written aside, fsynced, and
/// given the name `file` by [`link_new`]. An error says whether the object
/// may have landed under its name (`true`) or surely did not.
pub(crate) fn durable_create(
    top: Option<&std::path::Path>,
    file: &std::path::Path,
    bytes: &[u8],
) -> Result<Created, (bool, std::io::Error)> {
    let temp = write_temp(top, file, bytes).map_err(|e| (false, e))?;
    crate::failpoint::failpoint("put-before-link");
    let linked = link_new(&temp, file);
    let _ = std::fs::remove_file(&temp);
    linked
}

/// Gives the written and fsynced file `from` the name `to` too, unless a
/// file has that name (a hard link fails then: create-if-absent), and
/// fsyncs the directory, so the name survives power loss. `from` is left
/// for the caller to remove. An error says whether the name may be there
/// (`true`: linked, its directory not synced) or surely is not; a file
/// system that cannot link fails with its own error (`Unsupported`,
/// `PermissionDenied`, ...), which a caller may answer another way.
pub(crate) fn link_new(
    from: &std::path::Path,
    to: &std::path::Path,
) -> Result<Created, (bool, std::io::Error)> {
    // Under a test's full disk (`super::disk_full`) a new name fails as it
    // would there.
    #[cfg(any(test, feature = "testing"))]
    if let Some(full) = super::disk_full::new_name_fails(to) {
        return Err((false, full));
    }
    match std::fs::hard_link(from, to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Ok(Created::AlreadyExists)
        }
        Err(e) => return Err((false, e)),
    }
    if let Some(dir) = to.parent() {
        sync_dir(dir).map_err(|e| (true, e))?;
    }
    Ok(Created::Yes)
}

/// Replaces `file` with `bytes` on local disk: written aside, fsynced,
/// renamed onto the name, and the directory fsynced.
pub(crate) fn durable_replace(
    top: Option<&std::path::Path>,
    file: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    let temp = write_temp(top, file, bytes)?;
    if let Err(e) = std::fs::rename(&temp, file) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    if let Some(dir) = file.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Directories [`sync_dir`] fails on, and how: `PermissionDenied`
    /// at the open (a directory this process may not read; tests run as
    /// root, whom permissions do not stop), any other at the fsync.
    pub(crate) static SYNC_FAILS: Mutex<Vec<(PathBuf, std::io::ErrorKind)>> =
        Mutex::new(Vec::new());

    /// A file system that cannot fsync a directory (`EINVAL`) publishes;
    /// one whose fsync fails otherwise reports the name as published but
    /// not durable.
    #[test]
    fn a_directory_fsync_the_file_system_cannot_do_still_publishes() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (einval, eio) = (dir.path().join("einval"), dir.path().join("eio"));
        for (sub, kind) in [
            (&einval, std::io::ErrorKind::InvalidInput),
            (&eio, std::io::ErrorKind::Other),
        ] {
            std::fs::create_dir(sub).expect("a directory");
            SYNC_FAILS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((sub.clone(), kind));
        }
        let from = dir.path().join("from");
        std::fs::write(&from, b"x").expect("a file");
        assert!(matches!(
            link_new(&from, &einval.join("f")),
            Ok(Created::Yes)
        ));
        assert!(matches!(link_new(&from, &eio.join("f")), Err((true, _))));
    }
}
