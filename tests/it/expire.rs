//! Snapshot expiry (issue 12): `CALL sys.expire_snapshots` and tiering
//! rounds remove the oldest snapshots and exactly the files no retained
//! snapshot or tag names; every retained snapshot reads the same, here and
//! in pypaimon; a crash at any step is finished by the next run; the
//! `local` store never loses its tiered position.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use paimon::catalog::{Catalog as _, Identifier};
use paimon::spec::{IndexManifest, Manifest, ManifestList, Snapshot};
use paimon::table::Table;
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::independent::pypaimon_rows;
use crate::support::sorted_rows as rows;
use crate::support::{child_command, local_store_options};

/// Expire everything the retention arguments allow, whatever its age.
const EXPIRE_ALL: &str = "older_than => '2999-01-01 00:00:00', max_deletes => 1000";

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

    async fn run(&self, sql: &str) {
        Box::pin(rows(&self.ctx, sql)).await;
    }

    async fn rows(&self, sql: &str) -> Vec<String> {
        Box::pin(rows(&self.ctx, sql)).await
    }

    async fn tier(&self, t: &str) {
        self.run(&format!("CALL sys.lakestream_tier('default.{t}')"))
            .await;
    }

    async fn table(&self, t: &str) -> Table {
        self.ctx
            .catalog("paimon")
            .expect("catalog")
            .get_table(&Identifier::new("default", t))
            .await
            .expect("table")
    }

    async fn ids(&self, t: &str) -> Vec<i64> {
        self.table(t)
            .await
            .snapshot_manager()
            .list_all_ids()
            .await
            .expect("snapshot ids")
    }

    /// The rows of `t` at each of its snapshots.
    async fn history(&self, t: &str) -> Vec<(i64, Vec<String>)> {
        let mut out = Vec::new();
        for id in self.ids(t).await {
            out.push((
                id,
                self.rows(&format!("SELECT * FROM {t} VERSION AS OF {id}"))
                    .await,
            ));
        }
        out
    }
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

/// The names of every file `snapshots` reference: manifest lists,
/// manifests, index manifests, data files (and extra files), index files,
/// statistics files.
async fn referenced(table: &Table, snapshots: &[Snapshot]) -> BTreeSet<String> {
    let io = table.file_io();
    let dir = table.snapshot_manager().manifest_dir();
    let mut out = BTreeSet::new();
    for snapshot in snapshots {
        let mut lists = vec![
            snapshot.base_manifest_list().to_string(),
            snapshot.delta_manifest_list().to_string(),
        ];
        lists.extend(snapshot.changelog_manifest_list().map(str::to_string));
        for list in lists {
            for meta in ManifestList::read(io, &format!("{dir}/{list}"))
                .await
                .expect("manifest list")
            {
                for entry in Manifest::read(io, &format!("{dir}/{}", meta.file_name()))
                    .await
                    .expect("manifest")
                {
                    out.insert(entry.file().file_name.clone());
                    out.extend(entry.file().extra_files.iter().cloned());
                }
                out.insert(meta.file_name().to_string());
            }
            out.insert(list);
        }
        if let Some(index) = snapshot.index_manifest() {
            for entry in IndexManifest::read(io, &format!("{dir}/{index}"))
                .await
                .expect("index manifest")
            {
                out.insert(entry.index_file.file_name.clone());
            }
            out.insert(index.to_string());
        }
        out.extend(snapshot.statistics().map(str::to_string));
    }
    out
}

/// Every snapshot `t` has, and every tag's.
async fn live_snapshots(table: &Table) -> Vec<Snapshot> {
    let mut all = table
        .snapshot_manager()
        .list_all()
        .await
        .expect("snapshots");
    all.extend(
        table
            .tag_manager()
            .list_all()
            .await
            .expect("tags")
            .into_iter()
            .map(|t| t.1),
    );
    all
}

/// The names of the table's files other than snapshots, schemas, tags and
/// hints.
fn disk_files(table: &Table) -> BTreeSet<String> {
    let root = PathBuf::from(
        table
            .location()
            .trim_start_matches("file://")
            .trim_start_matches("file:"),
    );
    crate::support::files_where(&root, |path| {
        let relative = path.strip_prefix(&root).unwrap_or(path);
        let top = relative
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        !["snapshot", "schema", "tag", "branch", "consumer"].contains(&top.as_str())
    })
    .into_iter()
    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    .filter(|n| !n.starts_with('.'))
    .collect()
}

/// On disk: exactly the files the live snapshots and tags reference.
async fn exactly_the_referenced_files(table: &Table) {
    let live = live_snapshots(table).await;
    let wanted = referenced(table, &live).await;
    let disk = disk_files(table);
    let missing: Vec<_> = wanted.difference(&disk).collect();
    let extra: Vec<_> = disk.difference(&wanted).collect();
    assert!(
        missing.is_empty(),
        "{}: files a snapshot or tag needs are gone: {missing:?}",
        table.identifier().full_name()
    );
    assert!(
        extra.is_empty(),
        "{}: files no snapshot or tag needs are left: {extra:?}",
        table.identifier().full_name()
    );
}

const TABLES: &[(&str, &str)] = &[
    ("ap", "CREATE TABLE ap (id INT, v STRING) WITH ('lakestream.enabled' = 'true', 'manifest.merge-min-count' = '3')"),
    ("app", "CREATE TABLE app (p STRING, id INT, v STRING) PARTITIONED BY (p) WITH ('lakestream.enabled' = 'true')"),
    ("pk", "CREATE TABLE pk (k INT NOT NULL, v STRING, PRIMARY KEY (k)) WITH ('bucket' = '2', 'lakestream.enabled' = 'true', 'manifest.merge-min-count' = '3')"),
    ("pkp", "CREATE TABLE pkp (p STRING NOT NULL, k INT NOT NULL, v STRING, PRIMARY KEY (p, k)) PARTITIONED BY (p) WITH ('bucket' = '2', 'lakestream.enabled' = 'true')"),
];

async fn rounds(f: &Fx, from: usize, to: usize) {
    for round in from..to {
        let p = ["x", "y", "z"][round % 3];
        f.run(&format!("INSERT INTO ap VALUES ({round}, 'v{round}')"))
            .await;
        f.run(&format!(
            "INSERT INTO app VALUES ('{p}', {round}, 'v{round}')"
        ))
        .await;
        f.run(&format!(
            "INSERT INTO pk VALUES ({}, 'r{round}'), ({round}, 'n{round}')",
            round % 3
        ))
        .await;
        f.run(&format!(
            "INSERT INTO pkp VALUES ('{p}', {}, 'r{round}'), ('w', {round}, 'n{round}')",
            round % 3
        ))
        .await;
        if round % 3 == 2 {
            f.run(&format!("DELETE FROM pk WHERE k = {}", round - 1))
                .await;
            f.run(&format!("DELETE FROM pkp WHERE k = {}", round - 2))
                .await;
        }
        for (t, _) in TABLES {
            f.tier(t).await;
        }
    }
}

/// Expiry through SQL on append and primary-key tables, partitioned and
/// not, with deletes between rounds: the oldest snapshots go, the retained
/// ones (and a tag's) read as before here and in pypaimon, exactly the files
/// they need are left, and the tables go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_snapshots_on_request() {
    let f = Fx::new().await;
    for (_, create) in TABLES {
        f.run(create).await;
    }
    rounds(&f, 0, 6).await;
    for (t, _) in TABLES {
        let table = f.table(t).await;
        let before = f.history(t).await;
        assert!(before.len() >= 6, "{t}: {before:?}");
        // A tag on the second snapshot keeps its files.
        let tagged = table
            .snapshot_manager()
            .get_snapshot(before[1].0)
            .await
            .expect("snapshot");
        table
            .tag_manager()
            .create("keep", &tagged)
            .await
            .expect("tag");
        let gone_only: BTreeSet<String> = {
            let all = table.snapshot_manager().list_all().await.expect("all");
            let (old, kept) = all.split_at(all.len() - 3);
            let mut kept = kept.to_vec();
            kept.push(tagged.clone());
            let kept = referenced(&table, &kept).await;
            referenced(&table, old)
                .await
                .difference(&kept)
                .cloned()
                .collect()
        };
        assert!(!gone_only.is_empty(), "{t}: expiry would delete nothing");

        let answer = f
            .rows(&format!(
                "CALL sys.expire_snapshots(table => 'default.{t}', retain_min => 3, {EXPIRE_ALL})"
            ))
            .await;
        let latest = before.last().expect("a snapshot").0;
        let fields: Vec<&str> = answer[0].split('|').collect();
        assert_eq!(
            fields[..3],
            [
                format!("default.{t}").as_str(),
                (before.len() - 3).to_string().as_str(),
                (latest - 2).to_string().as_str()
            ],
            "{t}: {answer:?}"
        );
        assert_eq!(f.ids(t).await, vec![latest - 2, latest - 1, latest], "{t}");
        let hint = std::fs::read_to_string(
            PathBuf::from(
                table
                    .location()
                    .trim_start_matches("file://")
                    .trim_start_matches("file:"),
            )
            .join("snapshot/EARLIEST"),
        )
        .expect("EARLIEST hint");
        assert_eq!(hint.trim(), (latest - 2).to_string(), "{t}");
        for (id, rows) in before.iter().filter(|(id, _)| *id >= latest - 2) {
            assert_eq!(
                &f.rows(&format!("SELECT * FROM {t} VERSION AS OF {id}"))
                    .await,
                rows,
                "{t} at snapshot {id}"
            );
            assert_eq!(
                &pypaimon_rows(&f.warehouse(), &format!("default.{t}"), Some(*id))
                    .unwrap_or_else(|e| panic!("{e}")),
                rows,
                "{t} at snapshot {id}, read by pypaimon"
            );
        }
        let disk = disk_files(&table);
        let left: Vec<_> = gone_only.intersection(&disk).collect();
        assert!(
            left.is_empty(),
            "{t}: files of expired snapshots left: {left:?}"
        );
        let tag_files = referenced(&table, std::slice::from_ref(&tagged)).await;
        let lost: Vec<_> = tag_files.difference(&disk).collect();
        assert!(lost.is_empty(), "{t}: the tag's files are gone: {lost:?}");
        exactly_the_referenced_files(&table).await;
    }
    // The tables go on; a second expiry with the tables' defaults (1 h)
    // expires nothing.
    rounds(&f, 6, 8).await;
    for (t, _) in TABLES {
        let answer = f
            .rows(&format!("CALL sys.expire_snapshots('default.{t}')"))
            .await;
        assert!(
            answer[0].starts_with(&format!("default.{t}|0|")),
            "{answer:?}"
        );
        let table = f.table(t).await;
        exactly_the_referenced_files(&table).await;
        assert_eq!(
            f.rows(&format!("SELECT * FROM {t}")).await,
            pypaimon_rows(&f.warehouse(), &format!("default.{t}"), None)
                .unwrap_or_else(|e| panic!("{e}")),
            "{t}"
        );
    }
}

/// Tiering expires by the table's options (`snapshot.num-retained.max`),
/// never on a `write-only` table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_expires_by_the_tables_options() {
    let f = Fx::new().await;
    f.run(
        "CREATE TABLE e (id INT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'snapshot.num-retained.min' = '2', 'snapshot.num-retained.max' = '3', \
         'compaction.min.file-num' = '100')",
    )
    .await;
    f.run(
        "CREATE TABLE w (id INT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'snapshot.num-retained.min' = '2', 'snapshot.num-retained.max' = '3', \
         'write-only' = 'true')",
    )
    .await;
    for round in 0..6 {
        for t in ["e", "w"] {
            f.run(&format!("INSERT INTO {t} VALUES ({round}, 'v{round}')"))
                .await;
            f.tier(t).await;
        }
    }
    // Six tiering commits (data-file compaction is off for `e`): the newest
    // three.
    assert_eq!(f.ids("e").await, vec![4, 5, 6]);
    assert_eq!(f.ids("w").await, (1..=6).collect::<Vec<_>>());
    exactly_the_referenced_files(&f.table("e").await).await;
    assert_eq!(f.rows("SELECT id FROM e").await.len(), 6);
}

/// Expiry never makes the `local` store lose its tiered position: tier,
/// expire everything but the latest (a snapshot tiering did not commit),
/// lose the store's marker (as a tierer that died before writing it would),
/// restart, write, tier again: every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_keeps_the_stores_tiered_position() {
    let mut f = Fx::new().await;
    f.run("CREATE TABLE s (id INT, v STRING) WITH ('lakestream.enabled' = 'true')")
        .await;
    for round in 0..4 {
        f.run(&format!("INSERT INTO s VALUES ({round}, 'v{round}')"))
            .await;
        f.tier("s").await;
    }
    // The latest snapshot is not tiering's.
    f.run("CALL sys.compact_manifest('default.s')").await;
    f.run(&format!(
        "CALL sys.expire_snapshots(table => 'default.s', retain_min => 1, {EXPIRE_ALL})"
    ))
    .await;
    let ids = f.ids("s").await;
    assert_eq!(ids, vec![4, 5], "the newest tiering snapshot stays");
    for marker in crate::support::files_where(&f.dir.path().join("store"), |p| {
        p.file_name()
            .is_some_and(|n| n == "tiered.json" || n == "tiered-proof.json")
    }) {
        std::fs::remove_file(marker).expect("remove the marker");
    }
    f.restart().await;
    f.run("INSERT INTO s VALUES (4, 'v4')").await;
    f.tier("s").await;
    f.run(&format!(
        "CALL sys.expire_snapshots(table => 'default.s', retain_min => 1, {EXPIRE_ALL})"
    ))
    .await;
    f.restart().await;
    f.run("INSERT INTO s VALUES (5, 'v5')").await;
    f.tier("s").await;
    let want: Vec<String> = (0..6).map(|i| format!("{i}|v{i}")).collect();
    assert_eq!(f.rows("SELECT * FROM s").await, want);
    assert_eq!(f.rows("SELECT * FROM s$rt").await, want);
    exactly_the_referenced_files(&f.table("s").await).await;
}

/// The child's side of the crash test: runs when `EXPIRE_CHILD` names a
/// warehouse directory, does nothing otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process: the test that spawns it runs it"]
async fn child_process() {
    let Ok(dir) = std::env::var("EXPIRE_CHILD") else {
        return;
    };
    let ctx = context(Path::new(&dir)).await;
    rows(
        &ctx,
        &format!(
            "CALL sys.expire_snapshots(table => 'default.pkp', retain_min => 2, {EXPIRE_ALL})"
        ),
    )
    .await;
    println!("DONE");
}

/// A crash at each step of an expiry: the table reads every row once, the
/// next expiry finishes the work, and exactly the needed files are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_is_finished_by_the_next_expiry() {
    for point in [
        "expire-before-delete",
        "expire-after-data",
        "expire-after-manifests",
        "expire-after-manifest-lists",
        "expire-after-first-snapshot",
        "expire-before-hint",
    ] {
        let mut f = Fx::new().await;
        f.run(TABLES[3].1).await;
        for round in 0..5 {
            f.run(&format!(
                "INSERT INTO pkp VALUES ('x', {}, 'r{round}'), ('w', {round}, 'n{round}')",
                round % 2
            ))
            .await;
            if round == 3 {
                f.run("DELETE FROM pkp WHERE k = 2").await;
            }
            f.tier("pkp").await;
        }
        let want = f.rows("SELECT * FROM pkp").await;
        let latest = *f.ids("pkp").await.last().expect("a snapshot");
        // Expiry keeps the newest tiering commit too, which the
        // compactions after the last round may have put further back.
        let tiered: i64 = f
            .rows("SELECT max(snapshot_id) FROM pkp$snapshots WHERE commit_kind = 'APPEND'")
            .await
            .first()
            .and_then(|id| id.parse().ok())
            .expect("a tiering commit");
        let kept: Vec<i64> = (tiered.min(latest - 1)..=latest).collect();
        let mut child = child_command("expire::child_process");
        child
            .env("EXPIRE_CHILD", f.dir.path())
            .env("LAKESTREAM_FAILPOINT", point)
            .stderr(std::process::Stdio::null());
        let output = child.output().expect("run the child");
        assert!(
            !output.status.success(),
            "{point}: the child did not crash: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        f.restart().await;
        assert_eq!(f.rows("SELECT * FROM pkp").await, want, "{point}");
        f.run(&format!(
            "CALL sys.expire_snapshots(table => 'default.pkp', retain_min => 2, {EXPIRE_ALL})"
        ))
        .await;
        assert_eq!(f.ids("pkp").await, kept, "{point}");
        assert_eq!(f.rows("SELECT * FROM pkp").await, want, "{point}");
        assert_eq!(
            pypaimon_rows(&f.warehouse(), "default.pkp", None).unwrap_or_else(|e| panic!("{e}")),
            want,
            "{point}: pypaimon"
        );
        exactly_the_referenced_files(&f.table("pkp").await).await;
        f.run("INSERT INTO pkp VALUES ('z', 9, 'after')").await;
        f.tier("pkp").await;
        assert_eq!(f.rows("SELECT * FROM pkp").await.len(), want.len() + 1);
    }
}

/// Issue 37, item 6: a table promoted with rows (its store starts at the
/// promoted snapshot), written to (acknowledged), compacted and expired
/// down to one snapshot before its first tiering. The store's consumer
/// keeps the snapshots after the promoted one, so `t$rt`, writes and
/// tiering go on, every acknowledged row once; in a new process too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_before_the_first_tiering_keeps_a_promoted_tables_position() {
    let mut f = Fx::new().await;
    f.run("CREATE TABLE p (id INT, v STRING)").await;
    f.run("INSERT INTO p VALUES (1, 'a')").await;
    f.run("INSERT INTO p VALUES (2, 'b')").await;
    f.run("ALTER TABLE p SET TBLPROPERTIES ('lakestream.enabled' = 'true')")
        .await;
    f.run("INSERT INTO p VALUES (3, 'c')").await;
    f.run("CALL sys.compact('default.p')").await;
    let answer = f
        .rows(&format!(
            "CALL sys.expire_snapshots(table => 'default.p', retain_max => 1, retain_min => 1, \
             {EXPIRE_ALL})"
        ))
        .await;
    let promoted = 2;
    assert!(
        f.ids("p")
            .await
            .first()
            .is_some_and(|id| *id <= promoted + 1),
        "the snapshots after the promoted one stay: {:?} ({answer:?})",
        f.ids("p").await
    );
    let want: Vec<String> = ["1|a", "2|b", "3|c"].map(String::from).to_vec();
    assert_eq!(f.rows("SELECT * FROM p$rt").await, want);
    f.run("INSERT INTO p VALUES (4, 'd')").await;
    f.tier("p").await;
    let want: Vec<String> = ["1|a", "2|b", "3|c", "4|d"].map(String::from).to_vec();
    assert_eq!(f.rows("SELECT * FROM p").await, want);
    assert_eq!(f.rows("SELECT * FROM p$rt").await, want);
    // Tiering moved the consumer: expiry keeps less now, and the position
    // stays proven, in a new process too.
    f.run("CALL sys.compact('default.p')").await;
    f.run(&format!(
        "CALL sys.expire_snapshots(table => 'default.p', retain_max => 1, retain_min => 1, \
         {EXPIRE_ALL})"
    ))
    .await;
    f.restart().await;
    f.run("INSERT INTO p VALUES (5, 'e')").await;
    let mut want = want;
    want.push("5|e".to_string());
    assert_eq!(f.rows("SELECT * FROM p$rt").await, want);
    f.tier("p").await;
    assert_eq!(f.rows("SELECT * FROM p").await, want);
    exactly_the_referenced_files(&f.table("p").await).await;
}

/// Every file the tag `name` of `table` names is on disk: its manifest
/// lists, manifests and data files.
async fn tag_is_whole(table: &Table, name: &str) -> Result<(), String> {
    let Some(snapshot) = table
        .tag_manager()
        .get(name)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Err(format!("tag '{name}' is not listed"));
    };
    let io = table.file_io();
    let dir = table.snapshot_manager().manifest_dir();
    let disk = disk_files(table);
    for list in [
        snapshot.base_manifest_list().to_string(),
        snapshot.delta_manifest_list().to_string(),
    ] {
        let metas = ManifestList::read(io, &format!("{dir}/{list}"))
            .await
            .map_err(|e| format!("tag '{name}': manifest list {list}: {e}"))?;
        for meta in metas {
            let entries = Manifest::read(io, &format!("{dir}/{}", meta.file_name()))
                .await
                .map_err(|e| format!("tag '{name}': manifest {}: {e}", meta.file_name()))?;
            for entry in entries {
                let file = &entry.file().file_name;
                if !disk.contains(file) {
                    return Err(format!("tag '{name}': data file {file} is gone"));
                }
            }
        }
    }
    Ok(())
}

/// A tag asked for over a snapshot that expiry already removed (before
/// the call began: the race above, lost by the tag from the start) is
/// refused with the tag's name and the snapshots a tag can take, through
/// SQL and the catalog API alike; a snapshot never made keeps paimon's
/// "does not exist".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_of_an_expired_snapshot_is_refused_by_name() {
    let f = Fx::new().await;
    f.run("CREATE TABLE e (id INT)").await;
    for id in 0..3 {
        f.run(&format!("INSERT INTO e VALUES ({id})")).await;
    }
    f.run(&format!(
        "CALL sys.expire_snapshots(table => 'default.e', retain_max => 1, retain_min => 1, \
         {EXPIRE_ALL})"
    ))
    .await;
    let latest = *f.ids("e").await.last().expect("a snapshot");
    let ctx = context(f.dir.path()).await;
    let refused = crate::support::try_run(
        &ctx,
        "CALL sys.create_tag(table => 'default.e', tag => 'old', snapshot_id => 1)",
    )
    .await
    .expect_err("snapshot 1 is expired");
    assert!(
        refused.contains("cannot create tag 'old' of 'default.e'")
            && refused.contains("snapshot 1 was expired")
            && refused.contains(&format!("({latest} or newer)")),
        "{refused}"
    );
    let catalog = ctx.catalog("paimon").expect("catalog");
    let id = Identifier::new("default", "e");
    let api = Box::pin(catalog.create_tag(&id, "old_api", Some(1), false))
        .await
        .expect_err("snapshot 1 is expired")
        .to_string();
    assert!(api.contains("cannot create tag 'old_api'"), "{api}");
    let future = crate::support::try_run(
        &ctx,
        "CALL sys.create_tag(table => 'default.e', tag => 'new', snapshot_id => 99)",
    )
    .await
    .expect_err("no snapshot 99");
    assert!(future.contains("99"), "{future}");
    let table = f.table("e").await;
    for tag in ["old", "old_api", "new"] {
        assert!(
            !table.tag_manager().tag_exists(tag).await.expect("tags"),
            "{tag}"
        );
    }
}

/// Issue 37, item 7: `CALL sys.create_tag` (or the catalog API's
/// `create_tag`, every other round) over the oldest snapshot racing
/// `CALL sys.expire_snapshots` that expires it, round after round, from two
/// contexts (two catalogs, as two processes would be): every tag the call
/// acknowledged names files that are all there, and reads as its snapshot
/// did; a refused one is refused with the error that says why, and is not
/// listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_created_during_expiry_is_whole_or_refused() {
    let f = Fx::new().await;
    f.run("CREATE TABLE g (id INT, v STRING)").await;
    let (mut acknowledged, mut refused) = (0, 0);
    for round in 0..40usize {
        for n in 0..2 {
            let id = round * 2 + n;
            f.run(&format!("INSERT INTO g VALUES ({id}, 'v{id}')"))
                .await;
        }
        let oldest = f.ids("g").await[0];
        let rows_then = f
            .rows(&format!("SELECT * FROM g VERSION AS OF {oldest}"))
            .await;
        let tag = format!("t{round}");
        let tag_name = tag.clone();
        let expirer = context(f.dir.path()).await;
        let tagger = context(f.dir.path()).await;
        let expire = tokio::spawn(async move {
            crate::support::try_run(
                &expirer,
                &format!(
                    "CALL sys.expire_snapshots(table => 'default.g', retain_max => 1, \
                     retain_min => 1, {EXPIRE_ALL})"
                ),
            )
            .await
        });
        let delay = std::time::Duration::from_millis((round % 8) as u64 * 3);
        let sql = format!(
            "CALL sys.create_tag(table => 'default.g', tag => '{tag}', snapshot_id => {oldest})"
        );
        // Odd rounds make the tag through the catalog API, as an app
        // embedding the catalog would.
        let through_api = round % 2 == 1;
        let create = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if !through_api {
                return crate::support::try_run(&tagger, &sql).await;
            }
            let catalog = tagger.catalog("paimon").expect("catalog");
            let id = Identifier::new("default", "g");
            Box::pin(catalog.create_tag(&id, &tag_name, Some(oldest), false))
                .await
                .map_err(|e| e.to_string())
        });
        let expired = expire.await.expect("expiry task");
        let created = create.await.expect("tag task");
        expired.unwrap_or_else(|e| panic!("round {round}: expiry: {e}"));
        let table = f.table("g").await;
        match created {
            Ok(()) => {
                acknowledged += 1;
                tag_is_whole(&table, &tag)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: acknowledged, but {e}"));
                assert_eq!(
                    f.rows(&format!("SELECT * FROM g VERSION AS OF '{tag}'"))
                        .await,
                    rows_then,
                    "round {round}: the tag of snapshot {oldest}"
                );
            }
            Err(e) => {
                refused += 1;
                assert!(
                    e.contains(&format!("cannot create tag '{tag}'")),
                    "round {round}: {e}"
                );
                let listed = table.tag_manager().tag_exists(&tag).await.expect("tags");
                assert!(!listed, "round {round}: a refused tag is listed: {e}");
            }
        }
    }
    assert!(
        acknowledged > 0,
        "no tag was acknowledged ({refused} refused)"
    );
    // No fence is left behind: tags of kept snapshots are taken.
    let latest = *f.ids("g").await.last().expect("a snapshot");
    f.run(&format!(
        "CALL sys.create_tag(table => 'default.g', tag => 'last', snapshot_id => {latest})"
    ))
    .await;
    let fences = crate::support::files_where(&f.warehouse(), |p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("expiring-"))
    });
    assert!(fences.is_empty(), "{fences:?}");
}

/// Two contexts (as two processes would) create one tag at once, over
/// different snapshots, round after round: at most one is told the tag was
/// made, and the tag names that one's snapshot. (A tag file is created only
/// if its name is free; before, both could pass the check for the name and
/// write it, the later replacing the acknowledged one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_of_one_tag_acknowledge_one() {
    let f = Fx::new().await;
    f.run("CREATE TABLE r (id INT)").await;
    for id in 0..2 {
        f.run(&format!("INSERT INTO r VALUES ({id})")).await;
    }
    let ids = f.ids("r").await;
    let (first, second) = (ids[0], ids[1]);
    let mut doubly = 0;
    for round in 0..30usize {
        let tag = format!("r{round}");
        let mut tasks = Vec::new();
        for snapshot in [first, second] {
            let ctx = context(f.dir.path()).await;
            let sql = format!(
                "CALL sys.create_tag(table => 'default.r', tag => '{tag}', snapshot_id => \
                 {snapshot})"
            );
            tasks.push(tokio::spawn(async move {
                (snapshot, crate::support::try_run(&ctx, &sql).await)
            }));
        }
        let mut acknowledged = Vec::new();
        for task in tasks {
            let (snapshot, outcome) = task.await.expect("tag task");
            match outcome {
                Ok(()) => acknowledged.push(snapshot),
                Err(e) => assert!(e.contains("already exist"), "round {round}: {e}"),
            }
        }
        if acknowledged.len() > 1 {
            doubly += 1;
            continue;
        }
        assert_eq!(acknowledged.len(), 1, "round {round}: neither was made");
        let tagged = f
            .table("r")
            .await
            .tag_manager()
            .get(&tag)
            .await
            .expect("the tag")
            .expect("the tag exists");
        assert_eq!(
            tagged.id(),
            acknowledged[0],
            "round {round}: the tag is another call's"
        );
    }
    assert_eq!(
        doubly, 0,
        "rounds where both calls were told the tag was made"
    );
}
