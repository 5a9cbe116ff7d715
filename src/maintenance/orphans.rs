//! Orphan file removal, which paimon 0.4 does not do: deletes the files a
//! crash left in a table's directory that nothing references.
//!
//! A write, a compaction or an expiry that dies midway leaves files behind:
//! data files written but never committed, manifests and manifest lists of a
//! snapshot never published, index and statistics files, the temporary files
//! of a snapshot being published (`snapshot-N.tmp-*`, `.snapshot-N.*.tmp`)
//! and of other metadata files written aside (`.schema-N.*.tmp`, ...).
//! No snapshot names them, so nothing reads them, and nothing else removes
//! them. [`remove_orphan_files`] does, as Java Paimon's
//! `CALL sys.remove_orphan_files` does.
//!
//! # What is referenced
//!
//! Every snapshot of the table (`snapshot/snapshot-N`), every tag (of the
//! table and of its branches), every branch snapshot and every long-lived
//! changelog (`changelog/changelog-N`): their manifest lists, the manifests
//! and index manifests those name, the data files (with their extra files
//! and file indexes), index files and statistics files, collected as
//! snapshot expiry collects what it keeps ([`super::expire`]). A consumer
//! (`consumer/`) needs the snapshots it reads next or later; expiry never
//! removes those, so they are among the snapshots read. Branches share the
//! table's manifest and data directories.
//!
//! The latest snapshot, the tags and the branches must be complete: a
//! manifest list or manifest of theirs that is missing stops the run before
//! anything is deleted. An older snapshot may miss some: an expiry that
//! crashed deletes the expired snapshots' manifests before their snapshot
//! files, and what those manifests named was deleted before them. A snapshot
//! removed while the run reads (a concurrent expiry) is skipped for the same
//! reason.
//!
//! # What is a candidate
//!
//! Only these files of the table's directory, listed with the table's
//! `FileIO` (so it works on file systems and object stores alike):
//!
//! - files in bucket directories (`[k=v/...]bucket-N/`, under
//!   `data-file.path-directory` when it is a relative path): data files,
//!   changelog files, file indexes, index files kept beside the data;
//! - files in `index/` and `statistics/`;
//! - files in `manifest/`: manifests, index manifests, manifest lists;
//! - temporary files in `snapshot/`: `snapshot-N.tmp-*` (paimon's commit)
//!   and `.NAME.*.tmp` (Java Paimon's and this crate's atomic writes);
//!   temporaries of the latter kind in the other metadata directories too
//!   (`schema/`, `tag/`, `consumer/`, `changelog/`, and those of a branch,
//!   `branch/branch-B/...`): this crate writes every metadata file aside
//!   (`object_storage::guard`).
//!
//! A candidate is deleted when nothing above references it (data, index and
//! statistics files are matched by name, manifests and manifest lists by
//! name in `manifest/`) and it was last modified before `older_than`. Never
//! touched: snapshot files, the `EARLIEST` and `LATEST` hints, the files
//! of `schema/`, `tag/`, `branch/`, `consumer/`, `changelog/` but those
//! temporaries, files elsewhere in the table's directory, and anything
//! outside it (external data paths included).
//!
//! # The age rule
//!
//! A write, compaction or expiry in progress has written files that its
//! snapshot, not yet published, will reference: they look exactly like
//! orphans. Only the age protects them: a file younger than `older_than`
//! (by default one day before now, as in Paimon) is never deleted, so a
//! commit that takes less than that is safe. The directory is listed before
//! the snapshots are read, so a snapshot published meanwhile is read and its
//! files kept. Set `older_than` close to now only when no writer, compaction
//! or expiry can be running on the table.
//!
//! Like Paimon, it never runs on its own (not after a commit, not after a
//! tiering round): it lists the whole table directory, which is slow on an
//! object store, and there is nothing to remove unless something crashed.

use std::collections::BTreeSet;
use std::time::Duration;

use paimon::io::FileStatus;
use paimon::spec::Snapshot;
use paimon::table::Table;

use super::delete;
use super::expire::{collect, tags_and_branches, Files};
use crate::error::{Error, Result};

/// Paimon's default for `older_than`: files modified in the last day stay.
pub const DEFAULT_OLDER_THAN: Duration = Duration::from_secs(24 * 3600);

/// Paimon's option: where bucket directories are, relative to the table.
const DATA_FILE_PATH_DIRECTORY: &str = "data-file.path-directory";

/// What an orphan file removal did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrphanReport {
    /// The files deleted, by path, in the order they were deleted.
    pub deleted: Vec<String>,
    /// Their bytes.
    pub deleted_bytes: u64,
    /// Unreferenced files kept because they are younger than `older_than`
    /// (or their age is unknown).
    pub kept_young: usize,
}

/// Deletes every file of `table`'s directory that nothing references and
/// that was last modified before `older_than_ms` (milliseconds since the
/// epoch; `None`: one day before now). See the module docs for what is
/// referenced, what is a candidate, and why the age protects writes in
/// progress.
pub async fn remove_orphan_files(
    table: &Table,
    older_than_ms: Option<u64>,
) -> Result<OrphanReport> {
    run(table, older_than_ms, false).await
}

/// What [`remove_orphan_files`] would delete, deleting nothing (Paimon's
/// `dry_run`).
pub async fn find_orphan_files(table: &Table, older_than_ms: Option<u64>) -> Result<OrphanReport> {
    run(table, older_than_ms, true).await
}

/// Where a candidate is, which says what may reference it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    /// A data, index or statistics file: referenced by name.
    ByName,
    /// A file of `manifest/`.
    Manifest,
    /// A temporary file of a metadata directory: never referenced.
    Temporary,
}

async fn run(table: &Table, older_than_ms: Option<u64>, dry: bool) -> Result<OrphanReport> {
    let name = table.identifier().full_name();
    let fail = |reason: String| Error::MaintenanceFailed {
        table: name.clone(),
        reason,
    };
    let options = table.schema().options();
    if let Some(kind) = options.get("type") {
        if !kind.eq_ignore_ascii_case("table") {
            return Err(fail(format!(
                "it is a '{kind}' table, whose files are not Paimon's data files; \
                 orphan files are removed from Paimon tables only"
            )));
        }
    }
    let older_than = older_than_ms.unwrap_or_else(|| {
        crate::clock::now_ms()
            .saturating_sub(u64::try_from(DEFAULT_OLDER_THAN.as_millis()).unwrap_or(u64::MAX))
    });
    // Relative only: an absolute one is outside the table's directory.
    let data_dir = options
        .get(DATA_FILE_PATH_DIRECTORY)
        .filter(|d| !d.starts_with('/') && !d.contains(':'))
        .map(|d| d.trim_matches('/').to_string())
        .filter(|d| !d.is_empty());
    let file_io = table.file_io();
    let location = table.location().trim_end_matches('/').to_string();

    // Listed first: a file written before the listing and committed after
    // the snapshots are read would have to be older than `older_than`.
    let mut candidates: Vec<(Place, String, FileStatus)> = Vec::new();
    for status in file_io.list_status_recursive(&location).await? {
        if status.is_dir {
            continue;
        }
        let Some(relative) = status
            .path
            .strip_prefix(&location)
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            return Err(fail(format!(
                "listing the table's directory '{location}' gave '{}', which is not under it; \
                 nothing was deleted",
                status.path
            )));
        };
        if let Some((place, file)) = place(relative, data_dir.as_deref()) {
            candidates.push((place, file.to_string(), status));
        }
    }

    // What references files: every snapshot, tag, branch and changelog.
    let snapshots = table.snapshot_manager();
    let mut keep = Files::default();
    let ids = snapshots.list_all_ids().await?;
    let latest = match table.rest_env() {
        // The catalog keeps the latest snapshot: it must be one of the
        // files, or the files cannot say what the catalog's snapshots name.
        Some(_) => {
            let latest = snapshots.get_latest_snapshot().await?;
            if let Some(latest) = &latest {
                if !ids.contains(&latest.id()) {
                    return Err(fail(format!(
                        "the catalog's latest snapshot {} is not a file of the table's \
                         directory, so what its snapshots reference cannot be read; nothing \
                         was deleted",
                        latest.id()
                    )));
                }
            }
            latest.map(|s| s.id())
        }
        None => ids.last().copied(),
    };
    for &id in &ids {
        match snapshots.get_snapshot(id).await {
            Ok(snapshot) => collect(table, &snapshot, &mut keep, Some(id) == latest).await?,
            // Expired meanwhile: what only it named is being deleted.
            Err(paimon::Error::SnapshotNotExist { .. }) if Some(id) != latest => {}
            Err(e) => return Err(e.into()),
        }
    }
    for snapshot in tags_and_branches(table).await? {
        collect(table, &snapshot, &mut keep, true).await?;
    }
    for snapshot in changelogs(table).await? {
        collect(table, &snapshot, &mut keep, false).await?;
    }

    let mut report = OrphanReport::default();
    candidates.sort_by(|a, b| (a.0, &a.2.path).cmp(&(b.0, &b.2.path)));
    // Progress is counted in the candidates looked at.
    let progress = crate::progress::Progress::start(
        "removing orphan files",
        table.identifier().full_name(),
        "files",
    );
    progress.set_total(u64::try_from(candidates.len()).unwrap_or(u64::MAX));
    for (looked_at, (place, file, status)) in candidates.into_iter().enumerate() {
        progress.set_done(u64::try_from(looked_at).unwrap_or(u64::MAX));
        let referenced = match place {
            Place::ByName => keep.files.contains(&file),
            Place::Manifest => keep.manifests.contains(&file) || keep.lists.contains(&file),
            Place::Temporary => false,
        };
        if referenced {
            continue;
        }
        // The listing may not say when a file was modified: ask.
        let status = match status.last_modified {
            Some(_) => status,
            None => match file_io.get_status(&status.path).await {
                Ok(found) => found,
                // Gone meanwhile (a crashed run's cleanup finished).
                Err(_) if !file_io.exists(&status.path).await.unwrap_or(true) => continue,
                Err(e) => return Err(e.into()),
            },
        };
        let old = status
            .last_modified
            .and_then(|at| u64::try_from(at.timestamp_millis()).ok())
            .is_some_and(|at| at < older_than);
        if !old {
            report.kept_young += 1;
            continue;
        }
        if !dry {
            delete(table, &status.path).await?;
        }
        report.deleted_bytes = report.deleted_bytes.saturating_add(status.size);
        report.deleted.push(status.path);
    }
    Ok(report)
}

/// Where `relative` (a path under the table's directory) is, if it is a
/// candidate: its place and its file name.
fn place<'a>(relative: &'a str, data_dir: Option<&str>) -> Option<(Place, &'a str)> {
    let parts: Vec<&str> = relative.split('/').collect();
    let (&file, dirs) = parts.split_last()?;
    if file.is_empty() || dirs.iter().any(|d| d.is_empty() || *d == "." || *d == "..") {
        return None;
    }
    match dirs {
        ["manifest"] => return Some((Place::Manifest, file)),
        ["index" | "statistics"] => return Some((Place::ByName, file)),
        ["snapshot"] => return is_temporary(file).then_some((Place::Temporary, file)),
        ["schema" | "tag" | "consumer" | "changelog"]
        | ["branch", _, "snapshot" | "schema" | "tag" | "consumer" | "changelog"] => {
            return is_written_aside(file).then_some((Place::Temporary, file))
        }
        _ => {}
    }
    // `[data-dir/][k=v/...]bucket-N/file`.
    let mut dirs = dirs;
    if let Some(data_dir) = data_dir {
        let prefix: Vec<&str> = data_dir.split('/').collect();
        if dirs.len() > prefix.len() && dirs.iter().zip(&prefix).all(|(a, b)| a == b) {
            dirs = &dirs[prefix.len()..];
        }
    }
    let (bucket, partitions) = dirs.split_last()?;
    let is_bucket = bucket.strip_prefix("bucket-").is_some_and(|n| {
        n == "postpone" || (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    (is_bucket && partitions.iter().all(|p| p.contains('='))).then_some((Place::ByName, file))
}

/// Whether `name`, in `snapshot/`, is a temporary file: `snapshot-N.tmp-*`
/// (paimon's commit) or `.NAME.*.tmp` (an atomic write). Never a snapshot
/// file or a hint.
fn is_temporary(name: &str) -> bool {
    let paimon = name
        .split_once(".tmp-")
        .is_some_and(|(target, _)| target.starts_with("snapshot-"));
    paimon || is_written_aside(name)
}

/// Whether `name` is the temporary of an atomic write (`.NAME.*.tmp`:
/// `object_storage::temporary_beside`, Java Paimon's). No metadata file's
/// name starts with a dot.
fn is_written_aside(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > ".tmp".len() + 1
}

/// The table's long-lived changelogs (`changelog/changelog-N`, Java
/// Paimon's `changelog.num-retained` and friends), read as snapshots: they
/// reference manifest lists too. One that cannot be read stops the run.
async fn changelogs(table: &Table) -> Result<Vec<Snapshot>> {
    let file_io = table.file_io();
    let dir = format!("{}/changelog", table.location().trim_end_matches('/'));
    if !file_io.exists_dir(&dir).await.unwrap_or(false) {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    let mut names = BTreeSet::new();
    for status in file_io.list_status(&dir).await? {
        let name = status.path.rsplit('/').next().unwrap_or_default();
        if !status.is_dir
            && name
                .strip_prefix("changelog-")
                .is_some_and(|n| n.parse::<i64>().is_ok())
        {
            names.insert(status.path.clone());
        }
    }
    for path in names {
        let bytes = match file_io.new_input(&path)?.read().await {
            Ok(bytes) => bytes,
            // Expired meanwhile.
            Err(_) if !file_io.exists(&path).await.unwrap_or(true) => continue,
            Err(e) => return Err(e.into()),
        };
        let snapshot: Snapshot =
            serde_json::from_slice(&bytes).map_err(|e| Error::MaintenanceFailed {
                table: table.identifier().full_name(),
                reason: format!(
                    "the changelog '{path}' cannot be read ({e}), so what it references is \
                     unknown; nothing was deleted"
                ),
            })?;
        found.push(snapshot);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_where_paimon_writes() {
        let cases = [
            ("bucket-0/data-1.parquet", Some(Place::ByName)),
            ("p=1/q=a/bucket-3/data-1.parquet", Some(Place::ByName)),
            ("p=1/bucket-postpone/data-1.parquet", Some(Place::ByName)),
            ("index/index-1", Some(Place::ByName)),
            ("statistics/stat-1", Some(Place::ByName)),
            ("manifest/manifest-1", Some(Place::Manifest)),
            ("manifest/manifest-list-1-0", Some(Place::Manifest)),
            ("snapshot/snapshot-3.tmp-0f1e", Some(Place::Temporary)),
            ("snapshot/.snapshot-3.0f1e.tmp", Some(Place::Temporary)),
            ("snapshot/.LATEST.0f1e.tmp", Some(Place::Temporary)),
            ("schema/.schema-1.0f1e.tmp", Some(Place::Temporary)),
            ("tag/.tag-a.0f1e.tmp", Some(Place::Temporary)),
            ("consumer/.consumer-c.0f1e.tmp", Some(Place::Temporary)),
            ("changelog/.LATEST.0f1e.tmp", Some(Place::Temporary)),
            (
                "branch/branch-b/schema/.schema-0.0f1e.tmp",
                Some(Place::Temporary),
            ),
            (
                "branch/branch-b/snapshot/.snapshot-1.0f1e.tmp",
                Some(Place::Temporary),
            ),
            ("schema/schema-1.tmp-0f1e", None),
            ("tag/tag-a", None),
            ("snapshot/snapshot-3", None),
            ("snapshot/EARLIEST", None),
            ("snapshot/LATEST", None),
            ("schema/schema-0", None),
            ("tag/tag-a", None),
            ("branch/branch-b/snapshot/snapshot-1.tmp-1", None),
            ("branch/branch-b/schema/schema-0", None),
            ("consumer/consumer-c", None),
            ("changelog/changelog-1", None),
            ("README", None),
            ("other/bucket-0/data-1.parquet", None),
            ("p=1/bucket-x/data-1.parquet", None),
            ("manifest/sub/manifest-1", None),
        ];
        for (path, expected) in cases {
            assert_eq!(place(path, None).map(|p| p.0), expected, "{path}");
        }
        assert_eq!(
            place("data/p=1/bucket-0/data-1.parquet", Some("data")).map(|p| p.0),
            Some(Place::ByName)
        );
        assert_eq!(place("data/p=1/bucket-0/data-1.parquet", None), None);
    }
}
