//! Table maintenance that paimon 0.4 does not do on commit: compacting a
//! table's manifests.
//!
//! Every commit through paimon 0.4 writes a base manifest list naming every
//! manifest of the snapshot before it, so a table committed to often (a
//! lake-stream table tiers every round) makes every scan read one more
//! manifest per commit. [`compact_manifests`] rewrites the live entries of
//! the newest snapshot into as few manifests as Paimon's
//! `manifest.target-file-size` allows, and publishes them as a `COMPACT`
//! snapshot that changes no row: its base manifest list names the new
//! manifests, its delta manifest list is empty. Java Paimon calls this a
//! full compaction of manifests (`CALL sys.compact_manifest`).
//!
//! It follows Paimon's options: it runs on its own once a snapshot names
//! `manifest.merge-min-count` manifests (default 30), never on a table with
//! `write-only` = `true`, and on request whatever the count. The snapshot is
//! published the way paimon publishes its own (the catalog's REST commit, or
//! the file system's create-if-absent), against the snapshot it read: if
//! another commit won, the new files are deleted and it starts again from the
//! newer snapshot. Files the older snapshots name stay: removing them is
//! snapshot expiry's business ([`expire`]). Files a crash left that no
//! snapshot references are removed on request ([`orphans`]).

pub mod expire;
pub mod orphans;
pub mod tags;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use paimon::spec::{
    BinaryRow, CommitKind, CoreOptions, DataType, Datum, FileKind, Manifest, ManifestEntry,
    ManifestFileMeta, ManifestList, Snapshot, EMPTY_SERIALIZED_ROW,
};
use paimon::table::{RenamingSnapshotCommit, SnapshotCommit, Table};

use crate::error::{Error, Result};
use crate::object_storage::create::Created;
use crate::retry::{Retry, Try};
use crate::schema_stamp::Freshness;

mod data;
pub use data::{compact_data_files, DataCompaction};

/// The commit user of maintenance snapshots.
pub const MAINTENANCE_USER: &str = "paimon-lakestream-maintenance";

/// Paimon's option: how many manifests a snapshot may name before they are
/// merged.
const MERGE_MIN_COUNT: &str = "manifest.merge-min-count";
/// Paimon's default for [`MERGE_MIN_COUNT`].
const DEFAULT_MERGE_MIN_COUNT: usize = 30;
/// Paimon's option that turns compaction and expiry off for a table.
const WRITE_ONLY: &str = "write-only";
/// How many times a compaction starts again after losing a race.
const ATTEMPTS: u32 = 5;

/// What a manifest compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestCompaction {
    /// The snapshot it published.
    pub snapshot_id: i64,
    /// How many manifests the snapshot before named.
    pub manifests_before: usize,
    /// How many the new snapshot names.
    pub manifests_after: usize,
    /// How many data files they list.
    pub data_files: usize,
}

/// Whether `table` sets Paimon's `write-only` = `true`: no compaction or
/// expiry after its commits.
pub fn write_only(table: &Table) -> bool {
    table
        .schema()
        .options()
        .get(WRITE_ONLY)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// What [`compact`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compaction {
    /// The data-file compaction, if one was published.
    pub data: Option<DataCompaction>,
    /// The manifest compaction, if one was published.
    pub manifests: Option<ManifestCompaction>,
}

/// Compacts `table`'s small data files (when `data`), then its manifests
/// (when `manifests`): the maintenance after a tiering round, and `CALL
/// sys.compact`. A data compaction leaves delete entries for the files it
/// replaced in the manifests, which every scan then reads and drops: after
/// one, the manifests are compacted whatever their count, as Paimon's full
/// compaction of manifests does once deletes pile up; otherwise when
/// [`When`] says.
pub async fn compact(table: &Table, when: When, data: bool, manifests: bool) -> Result<Compaction> {
    let data = match data {
        true => compact_data_files(table, when).await?,
        false => None,
    };
    let manifests = match (manifests, &data) {
        (false, _) => None,
        (true, Some(_)) => compact_manifests(table, When::Asked).await?,
        (true, None) => compact_manifests(table, When::Needed).await?,
    };
    Ok(Compaction { data, manifests })
}

/// Why maintenance runs, which decides how much it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// After a commit ([`after_commit`]): only past Paimon's thresholds
    /// (`compaction.min.file-num`, `manifest.merge-min-count`), and what it
    /// does not do is skipped in silence.
    Needed,
    /// On request (`CALL`): whatever there is to do, and what it does not
    /// do is refused with an error that says why.
    Asked,
}

/// Which step of [`after_commit`] failed, and how.
#[derive(Debug)]
pub struct StepFailed {
    /// What the step was doing, e.g. `compacting its files`.
    pub step: &'static str,
    /// Its error.
    pub error: Error,
}

/// The maintenance after a commit into `table` (a tiering round): what
/// `auto` (the table's `lakestream.maintenance`) lists, nothing on a
/// `write-only` table. Small data files and the manifests are compacted
/// past Paimon's thresholds, then snapshots beyond Paimon's retention
/// options expire. The caller holds the table's commit lock.
pub async fn after_commit(
    table: &Table,
    auto: crate::options::AutoMaintenance,
) -> std::result::Result<Compaction, StepFailed> {
    if write_only(table) {
        return Ok(Compaction::default());
    }
    // The round's `Table` was loaded before the lock was taken: if its
    // table was dropped (and created again) since, the next round, with
    // the table loaded again, maintains it.
    match stale(table).await {
        Ok(false) => {}
        Ok(true) => return Ok(Compaction::default()),
        Err(error) => {
            return Err(StepFailed {
                step: "checking its schema",
                error,
            })
        }
    }
    let compaction = compact(table, When::Needed, auto.compact, auto.compact_manifest)
        .await
        .map_err(|error| StepFailed {
            step: "compacting its files",
            error,
        })?;
    if auto.expire_snapshots {
        expire::expire_snapshots(table, expire::Expiry::default(), When::Needed)
            .await
            .map_err(|error| StepFailed {
                step: "expiring old snapshots",
                error,
            })?;
    }
    Ok(compaction)
}

/// Whether `table` is a handle on a table dropped since it was loaded (and
/// perhaps created again, with other columns, keys or buckets): its schema
/// is not the one its files have now. A compaction through it would read
/// and write the table's files by the old schema. One check of the files
/// ([`crate::schema_stamp`]); a check that fails to read counts as stale.
pub(crate) async fn stale(table: &Table) -> Result<bool> {
    Ok(!matches!(
        crate::schema_stamp::freshness(table).await,
        Ok(Freshness::Current | Freshness::Altered)
    ))
}

/// [`stale`], as a compaction asked for (`When::Asked`) says it.
pub(crate) fn stale_error(table: &Table) -> Error {
    Error::MaintenanceFailed {
        table: table.identifier().full_name(),
        reason: "the table was dropped (or dropped and created again) since it was loaded; \
                 nothing was compacted, run it again"
            .to_string(),
    }
}

/// Compacts the manifests of `table`'s newest snapshot (see the module
/// docs). `None`: nothing to do.
pub async fn compact_manifests(table: &Table, when: When) -> Result<Option<ManifestCompaction>> {
    if stale(table).await? {
        return match when {
            When::Needed => Ok(None),
            When::Asked => Err(stale_error(table)),
        };
    }
    let options = table.schema().options();
    let min_count = match options.get(MERGE_MIN_COUNT) {
        Some(value) => value
            .trim()
            .parse::<usize>()
            .map_err(|_| Error::InvalidOption {
                key: MERGE_MIN_COUNT.to_string(),
                reason: format!(
                    "table '{}' sets it to '{value}', not a whole number",
                    table.identifier().full_name()
                ),
            })?,
        None => DEFAULT_MERGE_MIN_COUNT,
    };
    retrying(table, "manifest compactions", || {
        attempt(table, when, min_count)
    })
    .await
}

/// One try of a compaction, from the newest snapshot it read.
pub(crate) enum Attempt<T> {
    /// Nothing to do.
    Nothing,
    /// Published.
    Done(T),
    /// Another commit published the successor first; what it wrote is
    /// deleted.
    Lost,
}

/// Runs `attempt` until it publishes or finds nothing to do, starting
/// again from the newer snapshot each time it loses the race to publish,
/// [`ATTEMPTS`] times at most; `what` names the tries in the error.
pub(crate) async fn retrying<T, F, Fut>(
    table: &Table,
    what: &str,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Attempt<T>>>,
{
    Retry::immediately(ATTEMPTS)
        .run(|| {
            let tried = attempt();
            async move {
                Ok(match tried.await? {
                    Attempt::Nothing => Try::Done(None),
                    Attempt::Done(report) => Try::Done(Some(report)),
                    Attempt::Lost => Try::Again(Error::MaintenanceFailed {
                        table: table.identifier().full_name(),
                        reason: format!(
                            "other commits kept winning: {ATTEMPTS} {what} in a row found a \
                             newer snapshot when they published; run it again when the table \
                             is quieter"
                        ),
                    }),
                })
            }
        })
        .await
}

/// The manifests `latest` names: its base manifest list's, then its delta
/// manifest list's.
pub(crate) async fn manifests_of(
    table: &Table,
    latest: &Snapshot,
) -> Result<Vec<ManifestFileMeta>> {
    let file_io = table.file_io();
    let manifest_dir = table.snapshot_manager().manifest_dir();
    let path = |name: &str| format!("{manifest_dir}/{name}");
    let mut metas = ManifestList::read(file_io, &path(latest.base_manifest_list())).await?;
    metas.extend(ManifestList::read(file_io, &path(latest.delta_manifest_list())).await?);
    Ok(metas)
}

async fn attempt(
    table: &Table,
    when: When,
    min_count: usize,
) -> Result<Attempt<ManifestCompaction>> {
    let snapshots = table.snapshot_manager();
    let Some(latest) = snapshots.get_latest_snapshot().await? else {
        return Ok(Attempt::Nothing);
    };
    let metas = manifests_of(table, &latest).await?;
    let file_io = table.file_io();
    let manifest_dir = snapshots.manifest_dir();
    let path = |name: &str| format!("{manifest_dir}/{name}");
    let deletes = metas.iter().any(|m| m.num_deleted_files() > 0);
    let needed = match when {
        When::Needed => metas.len() >= min_count.max(2),
        When::Asked => metas.len() > 1 || deletes,
    };
    if !needed {
        return Ok(Attempt::Nothing);
    }

    let progress = crate::progress::Progress::start(
        "compacting manifests",
        table.identifier().full_name(),
        "manifests",
    );
    let (live, source_bytes, source_entries) =
        read_live(table, &latest, &metas, Some(&progress)).await?;

    // Grouped by partition, so each manifest's partition range is narrow.
    let mut by_partition: BTreeMap<Vec<u8>, Vec<Live>> = BTreeMap::new();
    for item in live {
        by_partition
            .entry(item.entry.partition().to_vec())
            .or_default()
            .push(item);
    }
    let core = CoreOptions::new(table.schema().options());
    let target = core.manifest_target_size().max(1);
    let average = if source_entries == 0 {
        1
    } else {
        (source_bytes / source_entries as i64).max(1)
    };
    let per_file = usize::try_from((target / average).max(1)).unwrap_or(usize::MAX);
    let compression = core.manifest_compression().to_string();
    let partition_types: Vec<DataType> = table
        .schema()
        .partition_fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();

    let prefix = format!("manifest-{}", uuid::Uuid::new_v4());
    let mut created: Vec<String> = Vec::new();
    let written = async {
        let mut new_metas = Vec::new();
        let mut chunk: Vec<Live> = Vec::new();
        let mut data_files = 0usize;
        let groups: Vec<Vec<Live>> = by_partition.into_values().collect();
        let total = groups.len();
        for (n, group) in groups.into_iter().enumerate() {
            chunk.extend(group);
            let last = n + 1 == total;
            while chunk.len() >= per_file || (last && !chunk.is_empty()) {
                let rest = chunk.split_off(chunk.len().min(per_file));
                let name = format!("{prefix}-{}", new_metas.len());
                created.push(path(&name));
                data_files += chunk.len();
                new_metas.push(
                    write_manifest(
                        table,
                        &path(&name),
                        &name,
                        &chunk,
                        0,
                        &compression,
                        &partition_types,
                    )
                    .await?,
                );
                chunk = rest;
            }
        }
        let unique = uuid::Uuid::new_v4();
        let base = format!("manifest-list-{unique}-0");
        let delta = format!("manifest-list-{unique}-1");
        created.push(path(&base));
        ManifestList::write_with_compression(file_io, &path(&base), &new_metas, &compression)
            .await?;
        created.push(path(&delta));
        ManifestList::write_with_compression(file_io, &path(&delta), &[], &compression).await?;
        Ok::<_, Error>((new_metas.len(), data_files, base, delta))
    }
    .await;
    let (manifests_after, data_files, base, delta) = match written {
        Ok(written) => written,
        Err(e) => {
            delete_all(table, &created).await;
            return Err(e);
        }
    };

    let published = publish_or_discard(
        table,
        &latest,
        latest.schema_id(),
        0,
        (base, delta),
        &created,
        "compact-manifest",
    )
    .await?;
    Ok(published.map_or(Attempt::Lost, |snapshot_id| {
        Attempt::Done(ManifestCompaction {
            snapshot_id,
            manifests_before: metas.len(),
            manifests_after,
            data_files,
        })
    }))
}

/// [`publish`]es, with the failpoints `<failpoints>-before-publish` and
/// `<failpoints>-after-publish`; when another commit won, deletes the files
/// the compaction `created` and answers `None`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn publish_or_discard(
    table: &Table,
    latest: &Snapshot,
    schema_id: i64,
    records: i64,
    (base, delta): (String, String),
    created: &[String],
    failpoints: &str,
) -> Result<Option<i64>> {
    let (snapshot_id, published) =
        publish(table, latest, schema_id, records, base, delta, failpoints).await?;
    if !published {
        delete_all(table, created).await;
        return Ok(None);
    }
    Ok(Some(snapshot_id))
}

/// Publishes a `COMPACT` snapshot of schema `schema_id` with manifest lists
/// `base` and `delta` as the successor of `latest`, the way paimon publishes
/// its own; its id, and `false` when another commit published that
/// successor first. The fail points before and after are
/// `<failpoints>-before-publish` and `<failpoints>-after-publish`.
pub(crate) async fn publish(
    table: &Table,
    latest: &Snapshot,
    schema_id: i64,
    records: i64,
    base: String,
    delta: String,
    failpoints: &str,
) -> Result<(i64, bool)> {
    let snapshot = Snapshot::builder()
        .version(3)
        .uuid(Some(uuid::Uuid::new_v4().to_string()))
        .id(latest.id() + 1)
        .schema_id(schema_id)
        .base_manifest_list(base)
        .delta_manifest_list(delta)
        .commit_user(MAINTENANCE_USER.to_string())
        .commit_identifier(i64::MAX)
        .commit_kind(CommitKind::COMPACT)
        .time_millis(crate::clock::now_ms())
        // As Paimon counts them: the rows of the files it names, changed by
        // `records` (a primary-key rewrite keeps only each key's winner).
        .total_record_count(latest.total_record_count().map(|n| n + records))
        .delta_record_count(Some(records))
        .index_manifest(latest.index_manifest().map(str::to_string))
        .watermark(latest.watermark())
        .statistics(latest.statistics().map(str::to_string))
        .next_row_id(latest.next_row_id())
        .build();
    let snapshots = table.snapshot_manager().with_branch(table.branch());
    let local = match table.rest_env() {
        Some(_) => None,
        None => crate::object_storage::local_path(&snapshots.snapshot_path(snapshot.id())),
    };
    crate::failpoint::failpoint(format_args!("{failpoints}-before-publish"));
    // Once publication starts its outcome may be unknown: on an error the
    // files stay, as paimon's own commit leaves them.
    let created = match local {
        Some(file) => {
            let json = serde_json::to_vec(&snapshot)
                .map_err(|e| Error::Internal(format!("cannot write a snapshot: {e}")))?;
            create_if_absent(file, json).await?
        }
        None => None,
    };
    let published = match created {
        Some(published) => {
            if published {
                // Best effort, as paimon's commit writes it.
                let _ = snapshots.write_latest_hint(snapshot.id()).await;
            }
            published
        }
        None => {
            let publisher: Arc<dyn SnapshotCommit> = match table.rest_env() {
                Some(env) => env.snapshot_commit(),
                None => Arc::new(RenamingSnapshotCommit::new(table.snapshot_manager())),
            };
            publisher
                .commit(latest.uuid(), &snapshot, table.branch(), &[])
                .await?
        }
    };
    crate::failpoint::failpoint(format_args!("{failpoints}-after-publish"));
    Ok((snapshot.id(), published))
}

/// Creates `file` holding `bytes` unless it exists, atomically: written
/// aside, then hard-linked under its name, which fails when the name is
/// taken, and the directory fsynced ([`crate::object_storage::durable::link_new`]).
/// paimon 0.4's file-system commit checks that the snapshot file is
/// absent and then renames over it, so a compaction published that way
/// could replace a snapshot another commit created in between (and undo
/// its rows); with this it loses instead. `None`: the file system cannot
/// link, use paimon's commit.
async fn create_if_absent(file: std::path::PathBuf, bytes: Vec<u8>) -> Result<Option<bool>> {
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let temp = crate::object_storage::temporary_beside(&file);
        let written = (|| {
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)?;
            out.write_all(&bytes)?;
            out.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::Internal(format!(
                "cannot write the snapshot file '{}': {e}",
                temp.display()
            )));
        }
        // The one durable create-if-absent on local disk: linked, then the
        // directory fsynced.
        let linked = crate::object_storage::durable::link_new(&temp, &file);
        let _ = std::fs::remove_file(&temp);
        match linked {
            Ok(Created::Yes) => Ok(Some(true)),
            Ok(Created::AlreadyExists) => Ok(Some(false)),
            // A file system without hard links: paimon's commit, as its own
            // commits there.
            Err((false, e)) if e.kind() == std::io::ErrorKind::Unsupported => Ok(None),
            // Anything else publishes nothing: paimon's check-then-rename
            // could replace a snapshot another commit created meanwhile.
            Err((false, e)) => Err(Error::Internal(format!(
                "cannot publish the snapshot file '{}': {e}; nothing was published",
                file.display()
            ))),
            Err((true, e)) => Err(Error::Internal(format!(
                "the snapshot file '{}' was published, but its directory could not be synced \
                 ({e}): it may not survive a power loss",
                file.display()
            ))),
        }
    })
    .await
    .map_err(|e| Error::Internal(format!("publishing a snapshot: {e}")))?
}

/// The live entries of `latest` (whose manifests are `metas`), in commit
/// order: an entry deleting a file takes out the entry that added it. Also
/// the manifests' bytes and entries, to size new ones.
pub(crate) async fn read_live(
    table: &Table,
    latest: &Snapshot,
    metas: &[ManifestFileMeta],
    progress: Option<&crate::progress::Progress>,
) -> Result<(Vec<Live>, i64, usize)> {
    let file_io = table.file_io();
    let manifest_dir = table.snapshot_manager().manifest_dir();
    let path = |name: &str| format!("{manifest_dir}/{name}");
    let mut live: Vec<Option<Live>> = Vec::new();
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut source_bytes = 0i64;
    let mut source_entries = 0usize;
    if let Some(progress) = progress {
        progress.set_total(u64::try_from(metas.len()).unwrap_or(u64::MAX));
    }
    for (done, meta) in metas.iter().enumerate() {
        if let Some(progress) = progress {
            progress.set_done(u64::try_from(done).unwrap_or(u64::MAX));
        }
        source_bytes += meta.file_size();
        let mut heads = Vec::new();
        let mut cache = Default::default();
        let entries = Manifest::read_filtered(
            file_io,
            &path(meta.file_name()),
            &mut cache,
            &mut |kind, _partition: &[u8], bucket, _total| {
                heads.push((kind, bucket));
                true
            },
        )
        .await?;
        if heads.len() != entries.len() {
            return Err(corrupt(
                table,
                format!(
                    "manifest '{}' read as {} entries but listed {}",
                    meta.file_name(),
                    entries.len(),
                    heads.len()
                ),
            ));
        }
        source_entries += entries.len();
        for ((kind, bucket), entry) in heads.into_iter().zip(entries) {
            let key = Key::of(&entry, bucket);
            match kind {
                FileKind::Add => {
                    index.insert(key, live.len());
                    live.push(Some(Live { entry, bucket }));
                }
                FileKind::Delete => match index.remove(&key) {
                    Some(at) => live[at] = None,
                    None => {
                        return Err(corrupt(
                            table,
                            format!(
                                "manifest '{}' deletes data file '{}', which no manifest of \
                                 snapshot {} adds",
                                meta.file_name(),
                                entry.file().file_name,
                                latest.id()
                            ),
                        ))
                    }
                },
            }
        }
    }
    Ok((
        live.into_iter().flatten().collect(),
        source_bytes,
        source_entries,
    ))
}

/// A live entry and its bucket (which paimon 0.4 does not hand out).
pub(crate) struct Live {
    pub(crate) entry: ManifestEntry,
    pub(crate) bucket: i32,
}

/// What names one data file in a table's manifests: Paimon's
/// `FileEntry.Identifier`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    partition: Vec<u8>,
    bucket: i32,
    level: i32,
    file_name: String,
    extra_files: Vec<String>,
    embedded_index: Option<Vec<u8>>,
    external_path: Option<String>,
}

impl Key {
    fn of(entry: &ManifestEntry, bucket: i32) -> Self {
        let file = entry.file();
        Self {
            partition: entry.partition().to_vec(),
            bucket,
            level: file.level,
            file_name: file.file_name.clone(),
            extra_files: file.extra_files.clone(),
            embedded_index: file.embedded_index.clone(),
            external_path: file.external_path.clone(),
        }
    }
}

/// Writes `entries` as the manifest `name` (`deleted` of them delete a file,
/// the others add one), and describes it the way paimon's commit does.
pub(crate) async fn write_manifest(
    table: &Table,
    path: &str,
    name: &str,
    entries: &[Live],
    deleted: usize,
    compression: &str,
    partition_types: &[DataType],
) -> Result<ManifestFileMeta> {
    let file_io = table.file_io();
    let plain: Vec<ManifestEntry> = entries.iter().map(|l| l.entry.clone()).collect();
    Manifest::write_with_compression(file_io, path, &plain, compression).await?;
    let size = file_io.get_status(path).await?.size;
    let mut schema_id = 0i64;
    let (mut min_bucket, mut max_bucket) = (i32::MAX, i32::MIN);
    let (mut min_level, mut max_level) = (i32::MAX, i32::MIN);
    let mut row_ids: Option<(i64, i64)> = None;
    let mut all_row_ids = true;
    for Live { entry, bucket } in entries {
        let file = entry.file();
        schema_id = schema_id.max(file.schema_id);
        min_bucket = min_bucket.min(*bucket);
        max_bucket = max_bucket.max(*bucket);
        min_level = min_level.min(file.level);
        max_level = max_level.max(file.level);
        match file.row_id_range() {
            Some((start, end)) => {
                row_ids = Some(row_ids.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
            }
            None => all_row_ids = false,
        }
    }
    let some = |v: i32, empty: i32| (v != empty).then_some(v);
    let row_ids = if all_row_ids { row_ids } else { None };
    Ok(ManifestFileMeta::new(
        name.to_string(),
        i64::try_from(size).unwrap_or(i64::MAX),
        i64::try_from(entries.len() - deleted.min(entries.len())).unwrap_or(i64::MAX),
        i64::try_from(deleted).unwrap_or(i64::MAX),
        partition_stats(entries, partition_types)?,
        schema_id,
    )
    .with_bucket_level_stats(
        some(min_bucket, i32::MAX),
        some(max_bucket, i32::MIN),
        some(min_level, i32::MAX),
        some(max_level, i32::MIN),
    )
    .with_row_id_stats(row_ids.map(|r| r.0), row_ids.map(|r| r.1)))
}

/// The minimum and maximum of each partition field over `entries`, and how
/// many entries have it null: what a manifest's partition stats say.
///
/// paimon 0.4 does not export its stats type; `T` is it, inferred from
/// [`ManifestFileMeta::new`], and built from its serialized form.
fn partition_stats<T: serde::de::DeserializeOwned>(
    entries: &[Live],
    types: &[DataType],
) -> Result<T> {
    let stats = |min: Vec<u8>, max: Vec<u8>, nulls: Vec<Option<i64>>| {
        serde_json::from_value(serde_json::json!({
            "_MIN_VALUES": min,
            "_MAX_VALUES": max,
            "_NULL_COUNTS": nulls,
        }))
        .map_err(|e| Error::Internal(format!("cannot build a manifest's partition stats: {e}")))
    };
    if types.is_empty() || entries.is_empty() {
        return stats(
            EMPTY_SERIALIZED_ROW.clone(),
            EMPTY_SERIALIZED_ROW.clone(),
            Vec::new(),
        );
    }
    let mut mins: Vec<Option<Datum>> = vec![None; types.len()];
    let mut maxs: Vec<Option<Datum>> = vec![None; types.len()];
    let mut nulls = vec![0i64; types.len()];
    for Live { entry, .. } in entries {
        let bytes = entry.partition();
        if bytes.is_empty() {
            continue;
        }
        let row = BinaryRow::from_serialized_bytes(bytes)?;
        for (i, data_type) in types.iter().enumerate() {
            match row.get_datum(i, data_type)? {
                Some(datum) => {
                    if mins[i].as_ref().is_none_or(|m| datum < *m) {
                        mins[i] = Some(datum.clone());
                    }
                    if maxs[i].as_ref().is_none_or(|m| datum > *m) {
                        maxs[i] = Some(datum);
                    }
                }
                None => nulls[i] += 1,
            }
        }
    }
    let row = |values: &[Option<Datum>]| {
        let fields: Vec<(Option<&Datum>, &DataType)> = values
            .iter()
            .map(Option::as_ref)
            .zip(types.iter())
            .collect();
        BinaryRow::from_datums(&fields).to_serialized_bytes()
    };
    stats(
        row(&mins),
        row(&maxs),
        nulls.into_iter().map(Some).collect(),
    )
}

pub(crate) fn corrupt(table: &Table, reason: String) -> Error {
    Error::MaintenanceFailed {
        table: table.identifier().full_name(),
        reason: format!("its manifests do not add up, so they were left as they are: {reason}"),
    }
}

/// Deletes `path`; one already gone is fine (a crashed run deleted it).
pub(crate) async fn delete(table: &Table, path: &str) -> Result<()> {
    let file_io = table.file_io();
    match file_io.delete_file(path).await {
        Ok(()) => Ok(()),
        Err(e) => {
            if file_io.exists(path).await.unwrap_or(true) {
                Err(Error::MaintenanceFailed {
                    table: table.identifier().full_name(),
                    reason: format!("cannot delete '{path}': {e}"),
                })
            } else {
                Ok(())
            }
        }
    }
}

pub(crate) async fn delete_all(table: &Table, paths: &[String]) {
    for path in paths {
        let _ = table.file_io().delete_file(path).await;
    }
}
