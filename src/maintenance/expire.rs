//! Snapshot expiry, which paimon 0.4 does not do: removes the oldest
//! snapshots beyond Paimon's retention options and every file only they
//! reference.
//!
//! # What expires
//!
//! Paimon's options and defaults, read from the table's options (or given by
//! the caller, as `CALL sys.expire_snapshots` arguments):
//! `snapshot.num-retained.min` (10), `snapshot.num-retained.max` (no
//! limit), `snapshot.time-retained` (1 h) and `snapshot.expire.limit` (10
//! snapshots per run). As in Java Paimon's `ExpireSnapshotsImpl`: snapshots
//! beyond `num-retained.max` expire whatever their age; younger ones expire
//! once older than `time-retained`, oldest first, stopping at the first one
//! that is not; the newest `num-retained.min` (at least the latest) never
//! expire, nor any snapshot a consumer (`ConsumerManager`) will read next or
//! after, and one run expires at most `expire.limit` of them.
//!
//! Expiry knows no store: a store that needs snapshots kept (the `local`
//! store proves how far it tiered by walking its table's snapshots down to
//! the one it recorded) registers a Paimon consumer that reads the oldest
//! of them next, and expiry, ours and Java Paimon's alike, keeps it and
//! every snapshot after it.
//!
//! A tagged snapshot's file expires as in Paimon, but the tag keeps a copy of
//! it: tags (of the table and of every branch) and branch snapshots count as
//! retained, so every file they reference stays and time travel to a tag
//! works.
//!
//! # What is deleted
//!
//! The files of the retained snapshots (from the first one not expired to
//! the latest), of every tag, and of every branch are collected by reading
//! their manifest lists, manifests and index manifests: manifest lists,
//! manifests, index manifests, data files (with their extra files), index
//! files, statistics files. A file the expired snapshots name is deleted
//! only when none of those does. Files no expired snapshot names (an
//! uncommitted write in progress, say) are never touched.
//!
//! # Tags created meanwhile
//!
//! Before it lists the tags, a run writes `tag/expiring-<run>` naming the
//! first snapshot it keeps, and removes it when done; a tag created
//! through this crate ([`super::tags::create_tag`]) reads those files after
//! writing itself and is refused over a snapshot one covers. So a tag is
//! either listed by the run (and keeps its files) or refused.
//!
//! # Order, and crash safety
//!
//! 1. Data files (and index and statistics files).
//! 2. Manifests and index manifests.
//! 3. Manifest lists.
//! 4. The snapshot files, oldest first.
//! 5. The `EARLIEST` hint, naming the first retained snapshot.
//! 6. The run's `tag/expiring-` file, and those of earlier runs whose
//!    snapshots are all gone (a crashed run's stays until then: its
//!    snapshots may have lost files already).
//!
//! Every deleted file is one no retained snapshot, tag or branch names, so a
//! crash at any step leaves every retained snapshot readable, each row once.
//! The order is what makes a second run finish the first one's work: the
//! expired snapshots' manifests are the only record of which data files they
//! name, so data files go first, while the manifests that name them are
//! still there; the manifests go before the manifest lists that name them,
//! and the lists before the snapshot files that name them. A second run
//! finds the same expired snapshots (their files are deleted last), reads
//! what is left of their metadata (a manifest or list a crash already
//! deleted is skipped: what it named was deleted before it) and deletes
//! the rest. Snapshot files go oldest first, so the snapshots left are always
//! one run `[earliest, latest]`, which is what Paimon's readers and the next
//! expiry assume; a crash before the hint is written leaves a hint naming a
//! deleted snapshot, which paimon and Java Paimon detect and look past.
//!
//! A file a retained snapshot names that cannot be read stops the run before
//! anything is deleted: the reference set would be incomplete.
//!
//! The fail points (`crate::failpoint`, for the crash tests) are
//! `expire-before-delete`, `expire-after-data`, `expire-after-manifests`,
//! `expire-after-manifest-lists`, `expire-after-first-snapshot` and
//! `expire-before-hint`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use paimon::spec::{IndexManifest, Manifest, ManifestList, Snapshot};
use paimon::table::{BranchManager, Table};

use crate::error::{Error, Result};
use crate::failpoint::failpoint;

/// Paimon's option: the fewest snapshots kept.
pub const NUM_RETAINED_MIN: &str = "snapshot.num-retained.min";
/// Paimon's option: the most snapshots kept.
pub const NUM_RETAINED_MAX: &str = "snapshot.num-retained.max";
/// Paimon's option: how long a snapshot is kept.
pub const TIME_RETAINED: &str = "snapshot.time-retained";
/// Paimon's option: how many snapshots one run expires at most.
pub const EXPIRE_LIMIT: &str = "snapshot.expire.limit";

const DEFAULT_NUM_RETAINED_MIN: usize = 10;
const DEFAULT_NUM_RETAINED_MAX: usize = i32::MAX as usize;
const DEFAULT_TIME_RETAINED: Duration = Duration::from_secs(3600);
const DEFAULT_EXPIRE_LIMIT: usize = 10;

/// Directories of a table that hold no data, index or statistics file.
pub(crate) const METADATA_DIRS: &[&str] = &[
    "snapshot",
    "schema",
    "tag",
    "branch",
    "consumer",
    "changelog",
    "manifest",
];

/// What a caller sets instead of the table's options: Paimon's procedure
/// arguments. `None`: the table's option, or Paimon's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expiry {
    /// `retain_max`: the most snapshots kept.
    pub retain_max: Option<usize>,
    /// `retain_min`: the fewest snapshots kept (at least 1).
    pub retain_min: Option<usize>,
    /// `older_than`: snapshots committed before this (milliseconds since the
    /// epoch) may expire; instead of now minus `snapshot.time-retained`.
    pub older_than_ms: Option<u64>,
    /// `max_deletes`: how many snapshots this run expires at most.
    pub max_deletes: Option<usize>,
}

/// What an expiry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// The snapshots expired, oldest first.
    pub snapshots: Vec<i64>,
    /// The earliest snapshot left.
    pub earliest: i64,
    /// Data files (with extra files), index and statistics files deleted.
    pub data_files: usize,
    /// Manifests, index manifests and manifest lists deleted.
    pub manifests: usize,
}

/// Expires `table`'s oldest snapshots beyond its retention options (see the
/// module docs). `None`: none was due. A table that keeps its changelog
/// apart from its snapshots (`decoupled_changelog`) is left to Java
/// Paimon's expiry: `When::Asked` says so in an error, `When::Needed` (after
/// a commit) leaves it.
pub async fn expire_snapshots(
    table: &Table,
    request: Expiry,
    when: super::When,
) -> Result<Option<ExpireReport>> {
    let name = table.identifier().full_name();
    let fail = |reason: String| Error::MaintenanceFailed {
        table: name.clone(),
        reason,
    };
    let options = table.schema().options();
    let number = |key: &str, default: usize| -> Result<usize> {
        match options.get(key) {
            Some(value) => value
                .trim()
                .parse::<usize>()
                .map_err(|_| Error::InvalidOption {
                    key: key.to_string(),
                    reason: format!(
                        "table '{}' sets it to '{value}', not a whole number",
                        table.identifier().full_name()
                    ),
                }),
            None => Ok(default),
        }
    };
    let retain_min = match request.retain_min {
        Some(n) => n,
        None => number(NUM_RETAINED_MIN, DEFAULT_NUM_RETAINED_MIN)?,
    };
    let retain_max = match request.retain_max {
        Some(n) => n,
        None => number(NUM_RETAINED_MAX, DEFAULT_NUM_RETAINED_MAX)?,
    };
    let limit = match request.max_deletes {
        Some(n) => n,
        None => number(EXPIRE_LIMIT, DEFAULT_EXPIRE_LIMIT)?,
    };
    if let Some(option) = decoupled_changelog(table) {
        if when == super::When::Needed {
            return Ok(None);
        }
        return Err(fail(format!(
            "it keeps its changelog apart from its snapshots ('{option}' is set, and a \
             changelog producer writes changelog files), which this crate's expiry does not \
             do: it would delete the changelog with the snapshots. Expire its snapshots with \
             Java Paimon (Flink or Spark), or remove the option; nothing was deleted"
        )));
    }
    if retain_min < 1 {
        return Err(fail(format!(
            "{NUM_RETAINED_MIN} (retain_min) must be at least 1, not {retain_min}"
        )));
    }
    if retain_max < retain_min {
        return Err(fail(format!(
            "{NUM_RETAINED_MAX} (retain_max, {retain_max}) must not be below \
             {NUM_RETAINED_MIN} (retain_min, {retain_min})"
        )));
    }
    let older_than = match request.older_than_ms {
        Some(ms) => ms,
        None => {
            let retained = match options.get(TIME_RETAINED) {
                Some(value) => crate::options::parse_duration(value).map_err(|reason| {
                    Error::InvalidOption {
                        key: TIME_RETAINED.to_string(),
                        reason,
                    }
                })?,
                None => DEFAULT_TIME_RETAINED,
            };
            crate::clock::now_ms()
                .saturating_sub(u64::try_from(retained.as_millis()).unwrap_or(u64::MAX))
        }
    };

    let snapshots = table.snapshot_manager();
    let file_io = table.file_io();
    let Some(latest) = snapshots.get_latest_snapshot_id().await? else {
        return Ok(None);
    };
    let Some(earliest) = snapshots.earliest_snapshot_id().await? else {
        return Ok(None);
    };
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let min = earliest.max(latest.saturating_sub(count(retain_max)) + 1);
    let mut end = latest.saturating_sub(count(retain_min)) + 1;
    if let Some(next) = table
        .consumer_manager()
        .list_all()
        .await?
        .into_iter()
        .map(|(_, next)| next)
        .min()
    {
        end = end.min(next);
    }
    end = end.min(earliest.saturating_add(count(limit))).min(latest);
    // Java's early exit for `snapshot.time-retained`.
    let mut cache: HashMap<i64, Snapshot> = HashMap::new();
    let mut id = min;
    while id < end {
        match snapshots.get_snapshot(id).await {
            Ok(snapshot) => {
                let young = snapshot.time_millis() >= older_than;
                cache.insert(id, snapshot);
                if young {
                    end = id;
                    break;
                }
            }
            Err(paimon::Error::SnapshotNotExist { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        id += 1;
    }
    if end <= earliest {
        // Nothing to expire: make sure the hint names the earliest snapshot
        // (a run that crashed before writing it is finished here).
        let hint = format!("{}/EARLIEST", snapshots.snapshot_dir());
        let current = match file_io.new_input(&hint)?.read().await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).trim().parse::<i64>().ok(),
            Err(_) => None,
        };
        if current != Some(earliest) {
            snapshots.write_earliest_hint(earliest).await?;
        }
        return Ok(None);
    }
    // The first snapshot to expire: the one after the newest missing below
    // `end` (snapshots are deleted oldest first).
    let mut begin = earliest;
    let mut id = end - 1;
    while id >= earliest {
        if let std::collections::hash_map::Entry::Vacant(slot) = cache.entry(id) {
            match snapshots.get_snapshot(id).await {
                Ok(snapshot) => {
                    slot.insert(snapshot);
                }
                Err(paimon::Error::SnapshotNotExist { .. }) => {
                    begin = id + 1;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        id -= 1;
    }
    if end <= begin {
        return Ok(None);
    }
    let expired: Vec<Snapshot> = (begin..end)
        .map(|id| {
            cache
                .remove(&id)
                .ok_or_else(|| fail(format!("snapshot {id} vanished while it was being expired")))
        })
        .collect::<Result<_>>()?;

    // Tags being created learn that these snapshots go before the tags are
    // listed ([`super::tags`]): a tag is either listed here or refused.
    let fence = super::tags::announce(table, end).await?;
    let collected = async {
        // Everything the retained snapshots, the tags and the branches name.
        let mut retained: Vec<Snapshot> = Vec::new();
        for id in end..=latest {
            match snapshots.get_snapshot(id).await {
                Ok(snapshot) => retained.push(snapshot),
                Err(paimon::Error::SnapshotNotExist { .. }) => {
                    return Err(fail(format!(
                        "snapshot {id}, which is kept, is missing (another expiry ran at the \
                         same time?); nothing was deleted"
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        retained.extend(tags_and_branches(table).await?);
        let mut keep = Files::default();
        for snapshot in &retained {
            collect(table, snapshot, &mut keep, true).await?;
        }
        let mut named = Files::default();
        for snapshot in &expired {
            collect(table, snapshot, &mut named, false).await?;
        }
        Ok::<_, Error>((keep, named))
    }
    .await;
    let (keep, named) = match collected {
        Ok(collected) => collected,
        Err(e) => {
            super::tags::withdraw(table, fence).await;
            return Err(e);
        }
    };

    // Where the data, index and statistics files are: listed once.
    let location = table.location().trim_end_matches('/').to_string();
    let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
    for status in file_io.list_status_recursive(&location).await? {
        if status.is_dir {
            continue;
        }
        let relative = status
            .path
            .strip_prefix(&location)
            .unwrap_or(&status.path)
            .trim_start_matches('/');
        let top = relative.split('/').next().unwrap_or_default();
        if METADATA_DIRS.contains(&top) {
            continue;
        }
        let base = status.path.rsplit('/').next().unwrap_or(&status.path);
        by_name
            .entry(base.to_string())
            .or_default()
            .push(status.path.clone());
    }

    let manifest_dir = snapshots.manifest_dir();
    let mut report = ExpireReport {
        snapshots: expired.iter().map(Snapshot::id).collect(),
        earliest: end,
        ..ExpireReport::default()
    };
    // Progress is counted in files: the data files, manifests, manifest
    // lists and snapshot files that go.
    let progress = crate::progress::Progress::start(
        "expiring snapshots",
        table.identifier().full_name(),
        "files",
    );
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let data_paths = named
        .files
        .difference(&keep.files)
        .map(|file| by_name.get(file).map_or(0, Vec::len))
        .sum::<usize>();
    progress.set_total(count(
        data_paths
            + named.external.difference(&keep.external).count()
            + named.manifests.difference(&keep.manifests).count()
            + named.lists.difference(&keep.lists).count()
            + expired.len(),
    ));
    let mut deleted = 0usize;
    let mut one_more = || {
        deleted += 1;
        progress.set_done(count(deleted));
    };
    failpoint("expire-before-delete");
    for file in named.files.difference(&keep.files) {
        for path in by_name.get(file).into_iter().flatten() {
            super::delete(table, path).await?;
            report.data_files += 1;
            one_more();
        }
    }
    for path in named.external.difference(&keep.external) {
        super::delete(table, path).await?;
        report.data_files += 1;
        one_more();
    }
    failpoint("expire-after-data");
    for name in named.manifests.difference(&keep.manifests) {
        super::delete(table, &format!("{manifest_dir}/{name}")).await?;
        report.manifests += 1;
        one_more();
    }
    failpoint("expire-after-manifests");
    for name in named.lists.difference(&keep.lists) {
        super::delete(table, &format!("{manifest_dir}/{name}")).await?;
        report.manifests += 1;
        one_more();
    }
    failpoint("expire-after-manifest-lists");
    for (n, snapshot) in expired.iter().enumerate() {
        super::delete(table, &snapshots.snapshot_path(snapshot.id())).await?;
        one_more();
        if n == 0 {
            failpoint("expire-after-first-snapshot");
        }
    }
    failpoint("expire-before-hint");
    snapshots.write_earliest_hint(end).await?;
    super::tags::lift(table, fence, end).await?;
    Ok(Some(report))
}

/// The option by which `table` keeps its changelog longer than its
/// snapshots (Java Paimon's `changelog.num-retained.*` and
/// `changelog.time-retained`, which move an expired snapshot's changelog to
/// `changelog/`), when it writes changelog files at all; `None` otherwise.
/// Expiry deletes an expired snapshot's changelog with it, as Java Paimon
/// does without those options, so it refuses such a table.
fn decoupled_changelog(table: &Table) -> Option<&'static str> {
    let options = table.schema().options();
    let core = paimon::spec::CoreOptions::new(options);
    if core.changelog_producer().eq_ignore_ascii_case("none") {
        return None;
    }
    [
        "changelog.num-retained.min",
        "changelog.num-retained.max",
        "changelog.time-retained",
    ]
    .into_iter()
    .find(|key| options.contains_key(*key))
}

/// The snapshots of every tag of the table, of every branch, and of every
/// branch's tags: what expiry keeps whatever its options, and what orphan
/// file removal counts as referenced. (Branches share the table's manifest
/// and data directories.)
pub(crate) async fn tags_and_branches(table: &Table) -> Result<Vec<Snapshot>> {
    let snapshots = table.snapshot_manager();
    let mut found: Vec<Snapshot> = super::tags::list_tags(&table.tag_manager())
        .await?
        .into_iter()
        .map(|t| t.1)
        .collect();
    let branches = BranchManager::new(table.file_io().clone(), table.location().to_string());
    for branch in branches.list_all().await? {
        found.extend(snapshots.with_branch(&branch).list_all().await?);
        found.extend(
            super::tags::list_tags(&table.tag_manager().with_branch(&branch))
                .await?
                .into_iter()
                .map(|t| t.1),
        );
    }
    Ok(found)
}

/// File names a set of snapshots references.
#[derive(Default)]
pub(crate) struct Files {
    /// Manifest lists (in the manifest directory).
    pub(crate) lists: BTreeSet<String>,
    /// Manifests and index manifests (in the manifest directory).
    pub(crate) manifests: BTreeSet<String>,
    /// Data files, their extra files, index files and statistics files, by
    /// name (found by listing the table's directories).
    pub(crate) files: BTreeSet<String>,
    /// Files by full path (`_EXTERNAL_PATH`).
    pub(crate) external: BTreeSet<String>,
    /// Manifests already read.
    read: HashSet<String>,
}

/// Adds what `snapshot` references to `files`. `strict`: a file that cannot
/// be found is an error (a retained snapshot); otherwise it is skipped (an
/// expired snapshot a crashed run half deleted).
pub(crate) async fn collect(
    table: &Table,
    snapshot: &Snapshot,
    files: &mut Files,
    strict: bool,
) -> Result<()> {
    let file_io = table.file_io();
    let manifest_dir = table.snapshot_manager().manifest_dir();
    let path = |name: &str| format!("{manifest_dir}/{name}");
    let missing = |what: &str, name: &str| Error::MaintenanceFailed {
        table: table.identifier().full_name(),
        reason: format!(
            "{what} '{name}' of snapshot {}, which is kept, is missing; nothing was deleted",
            snapshot.id()
        ),
    };
    let present = |name: String| {
        let full = path(&name);
        async move { Ok::<_, Error>(file_io.exists(&full).await?) }
    };
    let mut lists = vec![
        snapshot.base_manifest_list().to_string(),
        snapshot.delta_manifest_list().to_string(),
    ];
    lists.extend(snapshot.changelog_manifest_list().map(str::to_string));
    for list in lists {
        if list.is_empty() || !files.lists.insert(list.clone()) {
            continue;
        }
        if !present(list.clone()).await? {
            if strict {
                return Err(missing("manifest list", &list));
            }
            continue;
        }
        for meta in ManifestList::read(file_io, &path(&list)).await? {
            let name = meta.file_name().to_string();
            files.manifests.insert(name.clone());
            if !files.read.insert(name.clone()) {
                continue;
            }
            if !present(name.clone()).await? {
                if strict {
                    return Err(missing("manifest", &name));
                }
                continue;
            }
            for entry in Manifest::read(file_io, &path(&name)).await? {
                let file = entry.file();
                files.files.insert(file.file_name.clone());
                files.files.insert(file.data_file_index_file_name());
                files.files.extend(file.extra_files.iter().cloned());
                files.external.extend(file.external_path.clone());
            }
        }
    }
    if let Some(index) = snapshot.index_manifest() {
        files.manifests.insert(index.to_string());
        if files.read.insert(index.to_string()) {
            if present(index.to_string()).await? {
                for entry in IndexManifest::read(file_io, &path(index)).await? {
                    files.files.insert(entry.index_file.file_name.clone());
                    files
                        .external
                        .extend(entry.index_file.external_path.clone());
                }
            } else if strict {
                return Err(missing("index manifest", index));
            }
        }
    }
    if let Some(statistics) = snapshot.statistics() {
        files.files.insert(statistics.to_string());
    }
    Ok(())
}
