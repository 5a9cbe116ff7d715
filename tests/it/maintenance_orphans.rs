//! Orphan file removal (issue 12): `CALL sys.remove_orphan_files` deletes
//! the files a crashed tierer (a write, a compaction, an expiry) or a hand
//! left in the table's directory, once they are older than `older_than`;
//! files younger are kept; referenced files, snapshot files, hints, schemas,
//! tags, branches and files elsewhere are never touched; every snapshot, tag
//! and branch reads the same, here and in pypaimon.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use paimon::catalog::{Catalog as _, Identifier};
use paimon::spec::{IndexManifest, Manifest, ManifestList, Snapshot};
use paimon::table::{BranchManager, Table};
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::independent::pypaimon_rows;
use crate::support::try_sorted_rows as try_rows;
use crate::support::{child_command, files_where, local_store_options};

/// Rows per INSERT.
const ROWS_PER_INSERT: i64 = 5;
/// Removes every orphan, whatever its age.
const FUTURE: &str = "2999-01-01 00:00:00";

struct Fx {
    dir: TempDir,
    ctx: LakeStreamContext,
}

impl Fx {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir_all(dir.path().join("warehouse")).expect("warehouse");
        let ctx = context(dir.path()).await;
        Self { dir, ctx }
    }

    fn warehouse(&self) -> PathBuf {
        self.dir.path().join("warehouse")
    }

    async fn restart(&mut self) {
        self.ctx = context(self.dir.path()).await;
    }

    async fn try_rows(&self, sql: &str) -> Result<Vec<String>, String> {
        Box::pin(try_rows(&self.ctx, sql)).await
    }

    async fn rows(&self, sql: &str) -> Vec<String> {
        self.try_rows(sql).await.unwrap_or_else(|e| panic!("{e}"))
    }

    async fn table(&self) -> Table {
        self.ctx
            .catalog("paimon")
            .expect("catalog")
            .get_table(&Identifier::new("default", "t"))
            .await
            .expect("table")
    }

    fn root(&self) -> PathBuf {
        self.warehouse().join("default.db").join("t")
    }

    /// What each snapshot of `t` reads (or the error), by id.
    async fn history(&self) -> BTreeMap<i64, Result<Vec<String>, String>> {
        let ids = self
            .table()
            .await
            .snapshot_manager()
            .list_all_ids()
            .await
            .expect("snapshot ids");
        let mut out = BTreeMap::new();
        for id in ids {
            let read = self
                .try_rows(&format!("SELECT * FROM t VERSION AS OF {id}"))
                .await
                // The message names a path that differs from run to run.
                .map_err(|_| "unreadable".to_string());
            out.insert(id, read);
        }
        out
    }

    /// What `CALL sys.remove_orphan_files` answers: deleted files and bytes.
    async fn remove(&self, older_than: Option<&str>) -> (u64, u64) {
        let sql = match older_than {
            Some(at) => {
                format!("CALL sys.remove_orphan_files(table => 'default.t', older_than => '{at}')")
            }
            None => "CALL sys.remove_orphan_files(table => 'default.t')".to_string(),
        };
        answer(&self.rows(&sql).await)
    }
}

fn answer(rows: &[String]) -> (u64, u64) {
    let [row] = rows else {
        panic!("one row expected: {rows:?}");
    };
    let fields: Vec<&str> = row.split('|').collect();
    assert_eq!(fields.len(), 3, "{row}");
    assert_eq!(fields[0], "default.t", "{row}");
    (
        fields[1].parse().expect("deleted files"),
        fields[2].parse().expect("deleted bytes"),
    )
}

async fn context(dir: &Path) -> LakeStreamContext {
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog(
        "paimon",
        local_store_options(&dir.join("warehouse"), &dir.join("store"), "off"),
    )
    .await
    .expect("register the catalog");
    ctx
}

fn insert_statement(n: i64) -> String {
    let values: Vec<String> = (0..ROWS_PER_INSERT)
        .map(|r| {
            let p = ["a", "b"][usize::try_from(r % 2).expect("small")];
            format!("({}, 'insert-{n}', '{p}')", n * ROWS_PER_INSERT + r)
        })
        .collect();
    format!("INSERT INTO t VALUES {}", values.join(", "))
}

/// The child's side: a tierer of `t` that aborts at `LAKESTREAM_FAILPOINT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process: the test that spawns it runs it"]
async fn child_process() {
    let Ok(dir) = std::env::var("ORPHANS_CHILD") else {
        return;
    };
    let ctx = context(Path::new(&dir)).await;
    try_rows(&ctx, "CALL sys.lakestream_tier('default.t')")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    println!("DONE");
}

/// The names of the files `snapshots` reference (manifest lists, manifests,
/// index manifests, data files with their extra files, index and
/// statistics files), read here, apart from the crate's own collection. A
/// file that is missing is named but not read (a crashed expiry's).
async fn referenced(table: &Table, snapshots: &[Snapshot]) -> BTreeSet<String> {
    let io = table.file_io();
    let dir = table.snapshot_manager().manifest_dir();
    let exists = |name: &str| {
        let path = format!("{dir}/{name}");
        async move { io.exists(&path).await.expect("exists") }
    };
    let mut out = BTreeSet::new();
    for snapshot in snapshots {
        let mut lists = vec![
            snapshot.base_manifest_list().to_string(),
            snapshot.delta_manifest_list().to_string(),
        ];
        lists.extend(snapshot.changelog_manifest_list().map(str::to_string));
        for list in lists {
            if exists(&list).await {
                for meta in ManifestList::read(io, &format!("{dir}/{list}"))
                    .await
                    .expect("manifest list")
                {
                    if exists(meta.file_name()).await {
                        for entry in Manifest::read(io, &format!("{dir}/{}", meta.file_name()))
                            .await
                            .expect("manifest")
                        {
                            out.insert(entry.file().file_name.clone());
                            out.insert(entry.file().data_file_index_file_name());
                            out.extend(entry.file().extra_files.iter().cloned());
                        }
                    }
                    out.insert(meta.file_name().to_string());
                }
            }
            out.insert(list);
        }
        if let Some(index) = snapshot.index_manifest() {
            if exists(index).await {
                for entry in IndexManifest::read(io, &format!("{dir}/{index}"))
                    .await
                    .expect("index manifest")
                {
                    out.insert(entry.index_file.file_name.clone());
                }
            }
            out.insert(index.to_string());
        }
        out.extend(snapshot.statistics().map(str::to_string));
    }
    out
}

/// Every snapshot of `t`, every tag's, and every branch's.
async fn live_snapshots(table: &Table) -> Vec<Snapshot> {
    let snapshots = table.snapshot_manager();
    let mut all = snapshots.list_all().await.expect("snapshots");
    all.extend(
        table
            .tag_manager()
            .list_all()
            .await
            .expect("tags")
            .into_iter()
            .map(|t| t.1),
    );
    let branches = BranchManager::new(table.file_io().clone(), table.location().to_string());
    for branch in branches.list_all().await.expect("branches") {
        all.extend(
            snapshots
                .with_branch(&branch)
                .list_all()
                .await
                .expect("branch snapshots"),
        );
    }
    all
}

/// Whether the file at `relative` (in the table's directory) is one orphan
/// removal may delete: in `manifest/`, `index/`, `statistics/`, a bucket
/// directory under partition directories, or a temporary file of
/// `snapshot/`.
fn candidate(relative: &Path) -> bool {
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [dir, _] if ["manifest", "index", "statistics"].contains(&dir.as_str()) => true,
        [dir, name] if dir == "snapshot" => name.contains(".tmp"),
        [dirs @ .., bucket, _] if bucket.starts_with("bucket-") => {
            dirs.iter().all(|d| d.contains('='))
        }
        _ => false,
    }
}

/// The candidates on disk, by name, with their paths.
fn candidates(root: &Path) -> BTreeMap<String, PathBuf> {
    files_where(root, |path| {
        candidate(path.strip_prefix(root).expect("under the table"))
    })
    .into_iter()
    .map(|p| {
        (
            p.file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned(),
            p,
        )
    })
    .collect()
}

/// Every file of the table's directory, by path relative to it.
fn all_files(root: &Path) -> BTreeSet<PathBuf> {
    files_where(root, |_| true)
        .into_iter()
        .map(|p| p.strip_prefix(root).expect("under the table").to_path_buf())
        .collect()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("directory");
    std::fs::write(path, bytes).expect("write");
}

fn age(path: &Path, by: Duration) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(SystemTime::now() - by)
        .expect("set the modification time");
}

/// Stray files put by hand: candidates (which orphan removal deletes) and
/// files it must never touch.
struct Strays {
    candidates: Vec<PathBuf>,
    untouchable: Vec<PathBuf>,
}

fn place_strays(root: &Path) -> Strays {
    let bucket = files_where(root, |p| {
        p.parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n.to_string_lossy().starts_with("bucket-"))
    })
    .first()
    .and_then(|p| p.parent().map(Path::to_path_buf))
    .expect("a bucket directory");
    let candidates = vec![
        bucket.join("data-stray-0.parquet"),
        bucket.join("data-stray-1.parquet.index"),
        root.join("manifest/manifest-stray-0"),
        root.join("manifest/manifest-list-stray-0"),
        root.join("index/index-stray-0"),
        root.join("statistics/stat-stray-0"),
        root.join("snapshot/snapshot-99.tmp-stray"),
        root.join("snapshot/.snapshot-99.stray.tmp"),
    ];
    let untouchable = vec![
        root.join("schema/stray"),
        root.join("tag/stray"),
        root.join("snapshot/stray"),
        root.join("README.stray"),
        root.join("other/bucket-0/data-stray-2.parquet"),
        root.join("consumer/stray"),
        root.join("changelog/stray"),
    ];
    for (n, path) in candidates.iter().chain(&untouchable).enumerate() {
        write(path, format!("stray {n}").repeat(n + 1).as_bytes());
    }
    Strays {
        candidates,
        untouchable,
    }
}

fn bytes_of(paths: &[&PathBuf]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).expect("metadata").len())
        .sum()
}

/// A tierer killed at each fail point leaves orphans (data files of a write
/// never committed, manifests and data files of a compaction never
/// published); with hand-placed strays they are kept while younger than
/// `older_than` and deleted once older, exactly those; every snapshot reads
/// the same, here and in pypaimon, and the table goes on. A crashed expiry
/// (whose half-deleted snapshots are still listed) does not stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_crashes_and_strays_are_removed_once_old_enough() {
    for (point, ddl, crash_makes_orphans) in [
        (
            "tier-after-write",
            "CREATE TABLE t (id BIGINT NOT NULL, v STRING, p STRING NOT NULL, \
             PRIMARY KEY (id, p)) PARTITIONED BY (p) \
             WITH ('bucket' = '2', 'lakestream.enabled' = 'true')",
            true,
        ),
        (
            "compact-manifest-before-publish",
            "CREATE TABLE t (id BIGINT NOT NULL, v STRING, p STRING, PRIMARY KEY (id)) \
             WITH ('bucket' = '1', 'lakestream.enabled' = 'true', \
             'manifest.merge-min-count' = '3')",
            true,
        ),
        (
            "compact-data-before-publish",
            "CREATE TABLE t (id BIGINT, v STRING, p STRING) \
             WITH ('lakestream.enabled' = 'true', 'compaction.min.file-num' = '3')",
            true,
        ),
        (
            "expire-after-manifest-lists",
            "CREATE TABLE t (id BIGINT NOT NULL, v STRING, p STRING, PRIMARY KEY (id)) \
             WITH ('bucket' = '1', 'lakestream.enabled' = 'true', \
             'snapshot.num-retained.min' = '1', 'snapshot.num-retained.max' = '2')",
            false,
        ),
    ] {
        let mut f = Fx::new().await;
        f.rows(ddl).await;
        for n in 0..2 {
            f.rows(&insert_statement(n)).await;
            f.rows("CALL sys.lakestream_tier('default.t')").await;
        }
        f.rows(&insert_statement(2)).await;
        let mut child = child_command("maintenance_orphans::child_process");
        child
            .env("ORPHANS_CHILD", f.dir.path())
            .env("LAKESTREAM_FAILPOINT", point)
            .stderr(std::process::Stdio::null());
        let output = child.output().expect("run the child");
        assert!(
            !output.status.success(),
            "{point}: the tierer did not crash: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        f.restart().await;
        let root = f.root();
        let table = f.table().await;
        let live = live_snapshots(&table).await;
        let needed = referenced(&table, &live).await;
        let crash_orphans: Vec<String> = candidates(&root)
            .into_keys()
            .filter(|name| !needed.contains(name))
            .collect();
        assert_eq!(
            !crash_orphans.is_empty(),
            crash_makes_orphans,
            "{point}: orphans of the crash: {crash_orphans:?}"
        );
        let strays = place_strays(&root);
        let history = f.history().await;
        assert!(
            history.values().filter(|r| r.is_ok()).count() >= 2,
            "{point}: {history:?}"
        );
        let latest_rows = f.rows("SELECT * FROM t").await;
        let before = all_files(&root);
        let on_disk = candidates(&root);
        // (A data file's file index is named whether it was written or not.)
        let missing_before: BTreeSet<String> = needed
            .iter()
            .filter(|n| !n.ends_with(".index") && !on_disk.contains_key(*n))
            .cloned()
            .collect();
        let orphans: Vec<&PathBuf> = on_disk
            .iter()
            .filter(|(name, _)| !needed.contains(*name))
            .map(|(_, path)| path)
            .collect();
        assert_eq!(
            orphans.len(),
            crash_orphans.len() + strays.candidates.len(),
            "{point}: {orphans:?}"
        );

        // Younger than a day (the default) or than an older_than in the
        // past: kept.
        assert_eq!(f.remove(None).await, (0, 0), "{point}");
        assert_eq!(
            f.remove(Some("2001-01-01 00:00:00")).await,
            (0, 0),
            "{point}"
        );
        assert_eq!(all_files(&root), before, "{point}");

        // Older than a day: deleted by default; a referenced file as old
        // stays.
        let old = [&strays.candidates[0], &strays.candidates[6]];
        for path in old {
            age(path, Duration::from_secs(2 * 24 * 3600));
        }
        let referenced_file = on_disk
            .iter()
            .find(|(name, _)| needed.contains(*name))
            .map(|(_, path)| path.clone())
            .expect("a referenced file");
        age(&referenced_file, Duration::from_secs(3 * 24 * 3600));
        let expected = (2, bytes_of(&old));
        assert_eq!(f.remove(None).await, expected, "{point}");
        for path in old {
            assert!(!path.exists(), "{point}: {} is left", path.display());
        }
        assert!(referenced_file.exists(), "{point}");
        let orphans: Vec<&PathBuf> = orphans.into_iter().filter(|p| p.exists()).collect();

        // A dry run deletes nothing; an older_than in the future deletes
        // every orphan, through the table function too.
        let dry = f
            .rows(&format!(
                "CALL sys.remove_orphan_files(table => 'default.t', older_than => '{FUTURE}', \
                 dry_run => true)"
            ))
            .await;
        let expected = (orphans.len() as u64, bytes_of(&orphans));
        assert_eq!(answer(&dry), expected, "{point}");
        assert!(orphans.iter().all(|p| p.exists()), "{point}");
        let done = f
            .rows(&format!(
                "SELECT * FROM remove_orphan_files('default.t', '{FUTURE}')"
            ))
            .await;
        assert_eq!(answer(&done), expected, "{point}");

        // Exactly the orphans are gone.
        let after = all_files(&root);
        let gone: BTreeSet<PathBuf> = before.difference(&after).cloned().collect();
        let wanted: BTreeSet<PathBuf> = strays.candidates[..]
            .iter()
            .chain(crash_orphans.iter().map(|n| &on_disk[n]))
            .map(|p| {
                p.strip_prefix(&root)
                    .expect("under the table")
                    .to_path_buf()
            })
            .collect();
        assert_eq!(gone, wanted, "{point}");
        assert!(after.is_subset(&before), "{point}");
        for path in &strays.untouchable {
            assert!(path.exists(), "{point}: {} is gone", path.display());
        }
        let on_disk = candidates(&root);
        let missing_after: BTreeSet<String> = needed
            .iter()
            .filter(|n| !n.ends_with(".index") && !on_disk.contains_key(*n))
            .cloned()
            .collect();
        assert_eq!(
            missing_after, missing_before,
            "{point}: referenced files deleted"
        );
        assert_eq!(
            missing_before.is_empty(),
            point != "expire-after-manifest-lists",
            "{point}: {missing_before:?}"
        );

        // Every snapshot reads the same, here and in pypaimon.
        f.restart().await;
        assert_eq!(f.history().await, history, "{point}");
        assert_eq!(f.rows("SELECT * FROM t").await, latest_rows, "{point}");
        let readable = history
            .iter()
            .filter_map(|(id, rows)| rows.as_ref().ok().map(|r| (*id, r)));
        for (id, rows) in readable {
            assert_eq!(
                &pypaimon_rows(&f.warehouse(), "default.t", Some(id))
                    .unwrap_or_else(|e| panic!("{e}")),
                rows,
                "{point}: snapshot {id}, read by pypaimon"
            );
        }

        // The table goes on; a round leaves no orphan behind.
        f.rows(&insert_statement(3)).await;
        f.rows("CALL sys.lakestream_tier('default.t')").await;
        let rows = f.rows("SELECT id FROM t").await;
        assert_eq!(rows.len() as i64, 4 * ROWS_PER_INSERT, "{point}: {rows:?}");
        assert_eq!(f.remove(Some(FUTURE)).await, (0, 0), "{point}");
        assert_eq!(
            f.rows("SELECT * FROM t").await,
            pypaimon_rows(&f.warehouse(), "default.t", None).unwrap_or_else(|e| panic!("{e}")),
            "{point}"
        );
    }
}

/// Files only a tag or a branch references are never orphans: after the
/// snapshots that named them expire, orphan removal with an `older_than` in
/// the future deletes nothing, and the tag and the branch read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_tags_and_branches_are_kept() {
    let f = Fx::new().await;
    f.rows(
        "CREATE TABLE t (id BIGINT NOT NULL, v STRING, p STRING NOT NULL, PRIMARY KEY (id, p)) \
         PARTITIONED BY (p) WITH ('bucket' = '2', 'lakestream.enabled' = 'true', \
         'manifest.merge-min-count' = '3')",
    )
    .await;
    for n in 0..5 {
        f.rows(&insert_statement(n)).await;
        if n == 3 {
            f.rows("DELETE FROM t WHERE id < 3").await;
        }
        f.rows("CALL sys.lakestream_tier('default.t')").await;
    }
    let table = f.table().await;
    let ids = table
        .snapshot_manager()
        .list_all_ids()
        .await
        .expect("snapshot ids");
    assert!(ids.len() >= 4, "{ids:?}");
    let snapshots = table.snapshot_manager();
    let first = snapshots.get_snapshot(ids[0]).await.expect("snapshot");
    let second = snapshots.get_snapshot(ids[1]).await.expect("snapshot");
    let tags = table.tag_manager();
    tags.create("keep", &first).await.expect("tag");
    tags.create("src", &second).await.expect("tag");
    BranchManager::new(table.file_io().clone(), table.location().to_string())
        .create_branch_from_tag("b", "src")
        .await
        .expect("branch");
    tags.delete("src").await.expect("delete the tag");
    let tag_rows = f.rows("SELECT * FROM t VERSION AS OF 'keep'").await;
    let branch_rows = f.rows("SELECT * FROM t$branch_b").await;
    assert_ne!(tag_rows, branch_rows);
    f.rows(&format!(
        "CALL sys.expire_snapshots(table => 'default.t', retain_min => 1, \
         older_than => '{FUTURE}', max_deletes => 1000)"
    ))
    .await;
    let table = f.table().await;
    let left = table
        .snapshot_manager()
        .list_all_ids()
        .await
        .expect("snapshot ids");
    assert!(
        !left.contains(&ids[0]) && !left.contains(&ids[1]),
        "{ids:?} -> {left:?}"
    );
    // The tag's and the branch's files are theirs alone now.
    let latest = table
        .snapshot_manager()
        .get_latest_snapshot()
        .await
        .expect("latest")
        .expect("a snapshot");
    let of_latest = referenced(&table, std::slice::from_ref(&latest)).await;
    for (what, snapshot) in [("the tag", &first), ("the branch", &second)] {
        let own = referenced(&table, std::slice::from_ref(snapshot)).await;
        assert!(
            own.difference(&of_latest).next().is_some(),
            "{what} names no file of its own"
        );
    }

    let before = all_files(&f.root());
    assert_eq!(f.remove(Some(FUTURE)).await, (0, 0));
    assert_eq!(all_files(&f.root()), before);
    assert_eq!(
        f.rows("SELECT * FROM t VERSION AS OF 'keep'").await,
        tag_rows
    );
    assert_eq!(f.rows("SELECT * FROM t$branch_b").await, branch_rows);
    assert_eq!(
        f.rows("SELECT * FROM t").await,
        pypaimon_rows(&f.warehouse(), "default.t", None).unwrap_or_else(|e| panic!("{e}"))
    );
}
