//! Data-file compaction: the small files of a partition's bucket are read
//! and written again as files of Paimon's `target-file-size`, and a
//! `COMPACT` snapshot replaces them.
//!
//! The snapshot's base manifest list names the manifests of the snapshot it
//! read, and its delta manifest deletes the old files and adds the new ones,
//! as Java Paimon's compaction commits do, so readers that skip `COMPACT`
//! snapshots (streaming reads) miss nothing: the rows are the same. It is
//! published as the successor of the snapshot it read, and only then: if
//! another commit won, the files it wrote are deleted and it starts again,
//! so it never deletes a file another commit deleted or replaced, and never
//! misses a file another commit added.
//!
//! A primary-key table's files carry sequence numbers that decide which
//! write of a key wins, and paimon 0.4's writer cannot keep a rewritten
//! row's. So a bucket is rewritten whole: its merged rows (what a read
//! returns: the winning version of each key, deletes applied) become its
//! only files, numbered from 0. The files they replace number their rows
//! apart, so their highest number is at least the merged rows' count less
//! one: every rewritten row is older than anything a writer that read
//! those files commits after the compaction (Java Paimon's writers, a
//! store's tiering service), and such an update or delete still wins.
//! Only fixed-bucket tables without a changelog producer are compacted, and
//! no `first-row` table (paimon 0.4 reads none of its level-0 files). Tables
//! with deletion vectors, row tracking or data evolution, whose files other
//! files refer to, are not.
//!
//! Paimon's options: `compaction.min.file-num` (default 5: a bucket is
//! compacted once it has that many small files; of a primary-key table,
//! `num-sorted-run.compaction-trigger`, as in Java Paimon, where each small
//! file is a sorted run of its own), `compaction.max.file-num`
//! (default 50: at most that many files are rewritten at once),
//! `target-file-size` (a file of at least this size is not small), and, of
//! a primary-key table, `compaction.total-size-threshold` (a bucket whose
//! files together are smaller is compacted once it has two files, as Java
//! Paimon's early full compaction does). Java Paimon leaves that one unset;
//! here it defaults to [`DEFAULT_TOTAL_SIZE_THRESHOLD`]: a tiering round
//! adds a sorted run to every bucket it writes, each run costs every read a
//! file open (and on object storage a request), and rewriting a bucket that
//! small costs about as much as reading it once. `'0'` turns it off.

use std::collections::{BTreeMap, HashMap};

use futures::TryStreamExt;
use paimon::spec::{CoreOptions, DataFileMeta, FileKind, ManifestEntry, ManifestList};
use paimon::table::{DataSplit, Table};

use super::{
    corrupt, delete_all, manifests_of, publish_or_discard, read_live, retrying, write_manifest,
    Attempt, Live, When,
};
use crate::error::{Error, Result};

const MIN_FILE_NUM: &str = "compaction.min.file-num";
/// Of a primary-key table, Paimon's trigger instead of [`MIN_FILE_NUM`]
/// (which Java Paimon reads of append tables only); the same default.
const SORTED_RUN_TRIGGER: &str = "num-sorted-run.compaction-trigger";
const MAX_FILE_NUM: &str = "compaction.max.file-num";
const TOTAL_SIZE_THRESHOLD: &str = "compaction.total-size-threshold";
const DEFAULT_MIN_FILE_NUM: usize = 5;
const DEFAULT_MAX_FILE_NUM: usize = 50;
/// The default of `compaction.total-size-threshold` (see the module docs).
pub const DEFAULT_TOTAL_SIZE_THRESHOLD: u64 = 1 << 20;

/// What a data-file compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataCompaction {
    /// The snapshot it published.
    pub snapshot_id: i64,
    /// How many files it replaced.
    pub files_before: usize,
    /// How many files replaced them.
    pub files_after: usize,
    /// How many rows they hold.
    pub rows: i64,
}

/// Compacts the small data files of `table`'s newest snapshot (see the
/// module docs); `None`: nothing to do, or a table it does not compact.
/// `When::Needed` compacts a bucket from `compaction.min.file-num` small
/// files, `When::Asked` from two. Whether maintenance runs after a commit at
/// all (`write-only`, `lakestream.maintenance`) is [`super::after_commit`]'s
/// to decide.
pub async fn compact_data_files(table: &Table, when: When) -> Result<Option<DataCompaction>> {
    if super::stale(table).await? {
        return match when {
            When::Needed => Ok(None),
            When::Asked => Err(super::stale_error(table)),
        };
    }
    let options = table.schema().options();
    let core = CoreOptions::new(options);
    let keyed = !table.schema().primary_keys().is_empty();
    if core.deletion_vectors_enabled()
        || core.row_tracking_enabled()
        || core.data_evolution_enabled()
    {
        return Ok(None);
    }
    // A primary-key table: fixed buckets only (a dynamic bucket's hash
    // index would need rewriting too), and no changelog files (a rewrite
    // would log every row again).
    if keyed && (core.bucket() <= 0 || !core.changelog_producer().eq_ignore_ascii_case("none")) {
        return Ok(None);
    }
    // Nor a `first-row` table: paimon 0.4's scan of one skips level-0 files
    // (the only ones its writer, and this compaction, write).
    if keyed && matches!(core.merge_engine(), Ok(paimon::spec::MergeEngine::FirstRow)) {
        return Ok(None);
    }
    let count = |key: &str, default: usize| -> Result<usize> {
        match options.get(key) {
            None => Ok(default),
            Some(value) => value
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| Error::InvalidOption {
                    key: key.to_string(),
                    reason: format!(
                        "table '{}' sets it to '{value}', not a positive whole number",
                        table.identifier().full_name()
                    ),
                }),
        }
    };
    let min_files = match when {
        When::Needed if keyed => count(SORTED_RUN_TRIGGER, DEFAULT_MIN_FILE_NUM)?.max(2),
        When::Needed => count(MIN_FILE_NUM, DEFAULT_MIN_FILE_NUM)?.max(2),
        When::Asked => 2,
    };
    let max_files = count(MAX_FILE_NUM, DEFAULT_MAX_FILE_NUM)?.max(2);
    // Of a primary-key table only: an append table's small files are
    // merged toward the target size whatever the bucket's size.
    let small_bucket = match (keyed, options.get(TOTAL_SIZE_THRESHOLD)) {
        (false, _) => 0,
        (true, None) => DEFAULT_TOTAL_SIZE_THRESHOLD,
        (true, Some(value)) => {
            crate::options::parse_size(value).map_err(|reason| Error::InvalidOption {
                key: TOTAL_SIZE_THRESHOLD.to_string(),
                reason: format!(
                    "table '{}' sets it: {reason}",
                    table.identifier().full_name()
                ),
            })?
        }
    };
    let rule = Trigger {
        min_files,
        max_files,
        small_bucket: i64::try_from(small_bucket).unwrap_or(i64::MAX),
    };
    retrying(table, "data-file compactions", || {
        attempt(table, when, rule, keyed)
    })
    .await
}

/// When a bucket is compacted, and how much of it.
#[derive(Debug, Clone, Copy)]
struct Trigger {
    /// A bucket with this many small files is compacted.
    min_files: usize,
    /// At most this many of an append bucket's files after a commit.
    max_files: usize,
    /// A primary-key bucket whose files together are smaller than this is
    /// compacted from two files.
    small_bucket: i64,
}

impl Trigger {
    /// Whether a bucket whose files are `files` (of which `small` are
    /// small) is compacted.
    fn fires(&self, files: &[Live], small: usize) -> bool {
        if small >= self.min_files {
            return true;
        }
        let total: i64 = files.iter().map(|l| l.entry.file().file_size).sum();
        files.len() >= 2 && total < self.small_bucket
    }
}

async fn attempt(
    table: &Table,
    when: When,
    rule: Trigger,
    keyed: bool,
) -> Result<Attempt<DataCompaction>> {
    let Trigger {
        min_files,
        max_files,
        ..
    } = rule;
    let snapshots = table.snapshot_manager();
    let Some(latest) = snapshots.get_latest_snapshot().await? else {
        return Ok(Attempt::Nothing);
    };
    let metas = manifests_of(table, &latest).await?;
    let file_io = table.file_io();
    let manifest_dir = snapshots.manifest_dir();
    let path = |name: &str| format!("{manifest_dir}/{name}");
    let (live, _, _) = read_live(table, &latest, &metas, None).await?;
    // The files are read and written again through `table`'s schema: one
    // loaded before an `ALTER TABLE` would drop the columns that files of a
    // newer schema hold.
    let newest = live
        .iter()
        .map(|l| l.entry.file().schema_id)
        .chain([latest.schema_id()])
        .max()
        .unwrap_or_default();
    if newest > table.schema().id() {
        // After a tiering round the next round, with the table loaded
        // again, compacts; on request the caller is told.
        if when == When::Needed {
            return Ok(Attempt::Nothing);
        }
        return Err(Error::MaintenanceFailed {
            table: table.identifier().full_name(),
            reason: format!(
                "its schema changed since it was loaded (its files are of schema {newest}, the \
                 table was loaded with schema {}); nothing was compacted, run it again",
                table.schema().id()
            ),
        });
    }

    // The small files of each partition's bucket, in commit order; of a
    // primary-key table, every file of a bucket with enough small ones: its
    // rewrite is the bucket's merged rows, which replace all of its files
    // (a rewrite of some would give older rows newer sequence numbers).
    let target = CoreOptions::new(table.schema().options()).target_file_size();
    let mut groups: BTreeMap<(Vec<u8>, i32), Vec<Live>> = BTreeMap::new();
    for item in live {
        if keyed || item.entry.file().file_size < target {
            groups
                .entry((item.entry.partition().to_vec(), item.bucket))
                .or_default()
                .push(item);
        }
    }
    groups.retain(|_, files| {
        let small = files
            .iter()
            .filter(|l| l.entry.file().file_size < target)
            .count();
        match when {
            When::Needed => rule.fires(files, small),
            When::Asked => small >= min_files,
        }
    });
    if groups.is_empty() {
        return Ok(Attempt::Nothing);
    }
    // After a commit, `compaction.max.file-num` bounds the work; asked for,
    // every small file is compacted (the writer rolls its output at the
    // target size), as Java Paimon's full compaction does.
    if !keyed && when == When::Needed {
        for files in groups.values_mut() {
            files.truncate(max_files);
        }
    }
    let progress =
        crate::progress::Progress::start("compacting", table.identifier().full_name(), "files");
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    progress.set_total(count(groups.values().map(Vec::len).sum()));
    let mut compacted = 0usize;

    // Where each bucket's files are, as a scan of the same snapshot says
    // (found by file name: partitions are compared as the manifests hold
    // them, never re-encoded).
    let pinned = table.copy_with_pinned_snapshot(&latest);
    let plan = pinned.new_read_builder().new_scan().plan().await?;
    let mut located: HashMap<&str, &DataSplit> = HashMap::new();
    for split in plan.splits() {
        for file in split.data_files() {
            located.insert(file.file_name.as_str(), split);
        }
    }
    let read = pinned.new_read_builder().new_read()?;
    let mut new_files: Vec<String> = Vec::new();
    let mut added: BTreeMap<(Vec<u8>, i32), Vec<DataFileMeta>> = BTreeMap::new();
    let mut old_rows = 0i64;
    let mut new_rows = 0i64;
    for ((partition, bucket), files) in &groups {
        let found = files
            .first()
            .and_then(|l| located.get(l.entry.file().file_name.as_str()));
        let Some(split) = found else {
            delete_all(table, &new_files).await;
            return Err(corrupt(
                table,
                format!(
                    "a scan of snapshot {} does not list a file its manifests list in bucket \
                     {bucket}",
                    latest.id()
                ),
            ));
        };
        let data_files: Vec<DataFileMeta> = files.iter().map(|l| l.entry.file().clone()).collect();
        if !keyed {
            old_rows += data_files.iter().map(|f| f.row_count).sum::<i64>();
        }
        let group = DataSplit::builder()
            .with_snapshot(latest.id())
            .with_partition(split.partition().clone())
            .with_bucket(*bucket)
            .with_bucket_path(split.bucket_path().to_string())
            .with_total_buckets(split.total_buckets())
            .with_data_files(data_files)
            // A primary-key bucket's files are merged as a read merges them.
            .with_raw_convertible(!keyed)
            .build()?;
        // Each bucket on a writer of its own: what it writes is that bucket's.
        // A primary-key bucket's rows are numbered from 0 (an overwrite
        // writer restores no sequence numbers), below every row of the files
        // they replace, so below every row a writer that read those files
        // commits after this compaction: that write stays the newer one, as
        // Java Paimon's compaction, which keeps each row's number, has it.
        let builder = table.new_write_builder();
        let builder = if keyed {
            builder.with_overwrite()
        } else {
            builder
        };
        let mut write = builder.new_write()?;
        let written = async {
            let mut stream = read.to_arrow(std::slice::from_ref(&group))?;
            let mut read_rows = 0i64;
            while let Some(batch) = stream.try_next().await? {
                if batch.num_rows() > 0 {
                    read_rows += i64::try_from(batch.num_rows()).unwrap_or(i64::MAX);
                    write.write_arrow_batch(&batch).await?;
                }
            }
            Ok::<_, Error>((read_rows, write.prepare_commit().await?))
        }
        .await;
        let messages = match written {
            Ok((read_rows, messages)) => {
                if keyed {
                    old_rows += read_rows;
                }
                messages
            }
            Err(e) => {
                delete_all(table, &new_files).await;
                return Err(e);
            }
        };
        let dir = split.bucket_path().trim_end_matches('/').to_string();
        let mut wrong_bucket = None;
        for message in messages {
            for file in message.new_files {
                new_files.push(format!("{dir}/{}", file.file_name));
                new_rows += file.row_count;
                if message.bucket != *bucket {
                    wrong_bucket = Some(message.bucket);
                }
                added
                    .entry((partition.clone(), *bucket))
                    .or_default()
                    .push(file);
            }
        }
        if let Some(other) = wrong_bucket {
            delete_all(table, &new_files).await;
            return Err(Error::Internal(format!(
                "compacting bucket {bucket} of '{}' wrote into bucket {other}",
                table.identifier().full_name()
            )));
        }
        compacted += files.len();
        progress.set_done(count(compacted));
    }
    if new_rows != old_rows {
        delete_all(table, &new_files).await;
        return Err(Error::Internal(format!(
            "compacting '{}' read {old_rows} rows but wrote {new_rows}",
            table.identifier().full_name()
        )));
    }

    // The rows the replaced files hold (of a primary-key bucket, every
    // version of a key and its deletes: more than the merged rows).
    let replaced_rows: i64 = groups
        .values()
        .flatten()
        .map(|l| l.entry.file().row_count)
        .sum();
    // One delta manifest: the old files deleted, the new ones added.
    let mut entries: Vec<Live> = Vec::new();
    let mut files_before = 0;
    for files in groups.values() {
        for old in files {
            entries.push(Live {
                entry: old.entry.clone().with_kind(FileKind::Delete),
                bucket: old.bucket,
            });
            files_before += 1;
        }
    }
    let deleted = entries.len();
    let mut files_after = 0;
    for ((partition, bucket), files) in added {
        let total_buckets = groups
            .get(&(partition.clone(), bucket))
            .and_then(|g| g.first())
            .map_or(-1, |l| l.entry.total_buckets());
        for mut file in files {
            // Paimon's FileSource: 1, written by a compaction.
            file.file_source = Some(1);
            entries.push(Live {
                entry: ManifestEntry::new(
                    FileKind::Add,
                    partition.clone(),
                    bucket,
                    total_buckets,
                    file,
                    2,
                ),
                bucket,
            });
            files_after += 1;
        }
    }
    let core = CoreOptions::new(table.schema().options());
    let compression = core.manifest_compression().to_string();
    let partition_types: Vec<_> = table
        .schema()
        .partition_fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    let mut created = new_files.clone();
    let written = async {
        let manifest = format!("manifest-{}-0", uuid::Uuid::new_v4());
        created.push(path(&manifest));
        let delta_meta = write_manifest(
            table,
            &path(&manifest),
            &manifest,
            &entries,
            deleted,
            &compression,
            &partition_types,
        )
        .await?;
        let unique = uuid::Uuid::new_v4();
        let base = format!("manifest-list-{unique}-0");
        let delta = format!("manifest-list-{unique}-1");
        created.push(path(&base));
        ManifestList::write_with_compression(file_io, &path(&base), &metas, &compression).await?;
        created.push(path(&delta));
        ManifestList::write_with_compression(file_io, &path(&delta), &[delta_meta], &compression)
            .await?;
        Ok::<_, Error>((base, delta))
    }
    .await;
    let (base, delta) = match written {
        Ok(names) => names,
        Err(e) => {
            delete_all(table, &created).await;
            return Err(e);
        }
    };
    let published = publish_or_discard(
        table,
        &latest,
        // The new files' schema, as Paimon's commits name the table's.
        latest.schema_id().max(table.schema().id()),
        new_rows - replaced_rows,
        (base, delta),
        &created,
        "compact-data",
    )
    .await?;
    Ok(published.map_or(Attempt::Lost, |snapshot_id| {
        Attempt::Done(DataCompaction {
            snapshot_id,
            files_before,
            files_after,
            rows: new_rows,
        })
    }))
}
