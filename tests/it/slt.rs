//! Runs the `.slt` files of `sql-tests/` through [`LakeStreamContext`], so the
//! statement filter and every guard are exercised as a user meets them.
//!
//! The files are found by [`discover`]; each states where it runs in a
//! `# schedule:` header line (`sql-tests/README.md`). There is one test per
//! catalog/store combination (`slt::filesystem_memory`, ...), which runs
//! every file scheduled for it against a fresh warehouse each, and names
//! each file that failed with the combination. `LAKESTREAM_SLT_COMPLETE=1`
//! rewrites the expected results instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paimon_lakestream::testing::{Mode, Script, Warehouse, CONFORMANCE_FILES};
pub use paimon_lakestream::testing::{StoreCondition, StoreHarness};

use crate::memory_store::MemoryHarness;
use crate::support::{CatalogKind, TestWarehouse};

/// The directory of the `.slt` files.
pub fn sql_tests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql-tests")
}

/// The environment variable that turns runs into completions: each file's
/// expected results are rewritten from what the engine returns.
pub const COMPLETE_VARIABLE: &str = "LAKESTREAM_SLT_COMPLETE";

fn completing() -> bool {
    std::env::var(COMPLETE_VARIABLE).is_ok_and(|v| v == "1")
}

/// The store harness a schedule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreName {
    /// The in-memory test store (`tests/it/memory_store.rs`).
    Memory,
    /// The embedded `local` store on disk.
    Local,
    /// The `local` store with the warehouse in a bucket of the S3 test server.
    S3,
    /// A catalog that names no store.
    None,
}

impl StoreName {
    const ALL: [StoreName; 4] = [Self::Memory, Self::Local, Self::S3, Self::None];

    fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Local => "local",
            Self::S3 => "s3",
            Self::None => "none",
        }
    }
}

fn catalog_name(kind: CatalogKind) -> &'static str {
    match kind {
        CatalogKind::Filesystem => "filesystem",
        CatalogKind::Rest => "rest",
    }
}

/// One place a file runs: a catalog kind and a store harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Combination {
    pub catalog: CatalogKind,
    pub store: StoreName,
}

impl std::fmt::Display for Combination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", catalog_name(self.catalog), self.store.name())
    }
}

/// Where a file runs, from its `# schedule:` header line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Run by every store's conformance run (`paimon_lakestream::testing::conformance`), on a
    /// filesystem catalog; only for the files of `sql-tests/conformance/`.
    Conformance,
    /// Run by the test of each combination, the first one also completing it.
    Combinations(Vec<Combination>),
}

/// An `.slt` file found under the root, with its schedule.
#[derive(Debug, Clone)]
pub struct SltFile {
    pub path: PathBuf,
    /// The path below the root, with `/` (`conformance/append.slt`).
    pub name: String,
    pub schedule: Schedule,
}

/// Reads the schedule from the comment lines a file starts with: exactly one
/// `# schedule: <entry> ...`, each entry `conformance` or
/// `<catalog>/<store>`.
pub fn parse_schedule(name: &str, text: &str) -> Result<Schedule, String> {
    let header = text
        .lines()
        .take_while(|line| line.trim().is_empty() || line.trim_start().starts_with('#'));
    let lines: Vec<&str> = header
        .filter_map(|line| {
            line.trim_start()
                .trim_start_matches('#')
                .trim_start()
                .strip_prefix("schedule:")
        })
        .collect();
    let entries = match lines.as_slice() {
        [] => {
            return Err(format!(
                "{name}: no `# schedule:` line in the comment the file starts with"
            ))
        }
        [entries] => entries.split_whitespace().collect::<Vec<_>>(),
        _ => return Err(format!("{name}: more than one `# schedule:` line")),
    };
    let in_conformance = name.starts_with("conformance/");
    if entries == ["conformance"] {
        return if in_conformance {
            Ok(Schedule::Conformance)
        } else {
            Err(format!(
                "{name}: `conformance` is the schedule of the files in sql-tests/conformance/ only"
            ))
        };
    }
    if in_conformance {
        return Err(format!(
            "{name}: a file in sql-tests/conformance/ has the schedule `conformance` and nothing else"
        ));
    }
    if entries.is_empty() {
        return Err(format!("{name}: the schedule names no catalog/store"));
    }
    let mut combinations = Vec::new();
    for entry in entries {
        let (catalog, store) = entry.split_once('/').ok_or_else(|| {
            format!("{name}: schedule entry `{entry}` is not `conformance` or `<catalog>/<store>`")
        })?;
        let catalog = match catalog {
            "filesystem" => CatalogKind::Filesystem,
            "rest" => CatalogKind::Rest,
            _ => {
                return Err(format!(
                    "{name}: unknown catalog `{catalog}` in `{entry}` (known: filesystem, rest)"
                ))
            }
        };
        let store = StoreName::ALL
            .into_iter()
            .find(|s| s.name() == store)
            .ok_or_else(|| {
                format!(
                    "{name}: unknown store `{store}` in `{entry}` (known: memory, local, s3, none)"
                )
            })?;
        if (catalog, store) == (CatalogKind::Rest, StoreName::S3) {
            return Err(format!(
                "{name}: `rest/s3` does not run: the S3 harness runs filesystem catalogs only"
            ));
        }
        let combination = Combination { catalog, store };
        if combinations.contains(&combination) {
            return Err(format!("{name}: `{entry}` is named twice"));
        }
        combinations.push(combination);
    }
    Ok(Schedule::Combinations(combinations))
}

/// Every `.slt` file under `root`, sorted by name, with its schedule; or
/// what is wrong with the schedules, one line per file.
pub fn discover(root: &Path) -> Result<Vec<SltFile>, Vec<String>> {
    let paths = crate::support::files_where(root, |p| p.extension().is_some_and(|e| e == "slt"));
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        let name = path
            .strip_prefix(root)
            .expect("below the root")
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        match parse_schedule(&name, &text) {
            Ok(schedule) => files.push(SltFile {
                path,
                name,
                schedule,
            }),
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    } else {
        Err(problems)
    }
}

/// [`discover`], its problems as one message.
fn discover_all(root: &Path) -> Result<Vec<SltFile>, String> {
    discover(root).map_err(|problems| {
        format!(
            "sql-tests has files without a valid schedule (see sql-tests/README.md):\n{}",
            problems.join("\n")
        )
    })
}

fn discover_or_panic(root: &Path) -> Vec<SltFile> {
    discover_all(root).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs (or completes) the file at `path` against a fresh warehouse of
/// `kind`, whose catalog names the store of `harness` (or no store), with
/// the catalog's label (`filesystem`, `rest`) besides the harness's.
pub async fn run_file_at(
    path: &Path,
    kind: CatalogKind,
    harness: Option<Arc<dyn StoreHarness>>,
    mode: Mode,
) -> Result<(), String> {
    let warehouse: Warehouse = match (kind, &harness) {
        (CatalogKind::Filesystem, Some(harness)) => harness.warehouse().await,
        _ => TestWarehouse::new(kind).await.into_inner(),
    };
    paimon_lakestream::testing::run(
        Script::File(path),
        warehouse,
        harness,
        &[catalog_name(kind)],
        mode,
    )
    .await
}

/// The text of a panic's payload.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".to_string())
}

/// Runs each file with its mode in `combination`, one after the other,
/// whatever the others did; the error names each file that failed (a panic
/// of its run too) and the combination. The one place a file runs.
async fn run_files(
    files: &[(&SltFile, Mode)],
    combination: Combination,
    harness: Option<Arc<dyn StoreHarness>>,
) -> Result<(), String> {
    use futures::FutureExt;
    let mut failures = Vec::new();
    for (file, mode) in files {
        let run = run_file_at(&file.path, combination.catalog, harness.clone(), *mode);
        let outcome = std::panic::AssertUnwindSafe(run)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(panic_text(&*panic)));
        if let Err(e) = outcome {
            failures.push(format!("{} ({combination}):\n{e}", file.name));
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {} file(s) failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    ))
}

/// Runs every file under `root` whose schedule names `combination`, with
/// `harness`; the error names each file that failed and the combination. With
/// `complete`, a file is completed instead by the first combination of its
/// schedule (and left alone by the others).
pub async fn run_scheduled_in(
    root: &Path,
    combination: Combination,
    harness: Option<Arc<dyn StoreHarness>>,
    complete: bool,
) -> Result<(), String> {
    let files = discover_all(root)?;
    let mut scheduled = Vec::new();
    for file in &files {
        let Schedule::Combinations(combinations) = &file.schedule else {
            continue;
        };
        if !combinations.contains(&combination) {
            continue;
        }
        let mode = if !complete {
            Mode::Run
        } else if combinations[0] == combination {
            Mode::Complete
        } else {
            eprintln!(
                "{} ({combination}): left to {}, which completes it",
                file.name, combinations[0]
            );
            continue;
        };
        scheduled.push((file, mode));
    }
    eprintln!("{} file(s) scheduled for {combination}", scheduled.len());
    run_files(&scheduled, combination, harness).await
}

/// [`run_scheduled_in`] for `sql-tests/`, completing with
/// `LAKESTREAM_SLT_COMPLETE=1`; panics with its error.
pub async fn run_scheduled(combination: Combination, harness: Option<Arc<dyn StoreHarness>>) {
    if let Err(e) = run_scheduled_in(&sql_tests(), combination, harness, completing()).await {
        panic!("{e}");
    }
}

/// The files of `sql-tests/conformance/` are the ones the crate carries
/// (`paimon_lakestream::testing::CONFORMANCE_FILES`; cargo rebuilds it when
/// their text changes). With `LAKESTREAM_SLT_COMPLETE=1`, the memory store
/// completes them (the records for capabilities it lacks stay as they are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_files() {
    let on_disk: Vec<SltFile> = discover_or_panic(&sql_tests())
        .into_iter()
        .filter(|f| f.schedule == Schedule::Conformance)
        .collect();
    let names: Vec<&str> = on_disk.iter().map(|f| f.name.as_str()).collect();
    let mut carried: Vec<&str> = CONFORMANCE_FILES.iter().map(|(name, _)| *name).collect();
    carried.sort_unstable();
    assert_eq!(
        names, carried,
        "add each file of sql-tests/conformance/ to CONFORMANCE_FILES (src/testing/mod.rs)"
    );
    if !completing() {
        return;
    }
    let combination = Combination {
        catalog: CatalogKind::Filesystem,
        store: StoreName::Memory,
    };
    let files: Vec<(&SltFile, Mode)> = on_disk.iter().map(|f| (f, Mode::Complete)).collect();
    if let Err(e) = run_files(&files, combination, memory()).await {
        panic!("{e}");
    }
}

fn memory() -> Option<Arc<dyn StoreHarness>> {
    Some(Arc::new(MemoryHarness::default()))
}

fn local() -> Option<Arc<dyn StoreHarness>> {
    Some(Arc::new(crate::local_store::LocalHarness))
}

async fn run_combination(catalog: CatalogKind, store: StoreName) {
    let harness = match store {
        StoreName::Memory => memory(),
        StoreName::Local => local(),
        StoreName::None => None,
        StoreName::S3 => unreachable!("s3::sql_suites_on_s3 runs the S3 harness"),
    };
    run_scheduled(Combination { catalog, store }, harness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_memory() {
    run_combination(CatalogKind::Filesystem, StoreName::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_memory() {
    run_combination(CatalogKind::Rest, StoreName::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_local() {
    run_combination(CatalogKind::Filesystem, StoreName::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_local() {
    run_combination(CatalogKind::Rest, StoreName::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_none() {
    run_combination(CatalogKind::Filesystem, StoreName::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_none() {
    run_combination(CatalogKind::Rest, StoreName::None).await;
}

/// Every file of `sql-tests/` states a valid schedule.
#[test]
fn every_file_has_a_valid_schedule() {
    let files = discover_or_panic(&sql_tests());
    assert!(files.len() >= 19, "{files:?}");
    assert!(files
        .iter()
        .any(|f| f.name == "conformance/append.slt" && f.schedule == Schedule::Conformance));
}

/// A file without a schedule, or naming a catalog or store that does not
/// exist, fails discovery, and with it every run over its directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_without_a_valid_schedule_fail() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let good = "# schedule: filesystem/memory\n\nquery I\nSELECT 1\n----\n1\n";
    let bad = [
        (
            "unscheduled.slt",
            "# No schedule here.\n\nquery I\nSELECT 1\n----\n1\n",
        ),
        (
            "late.slt",
            "query I\nSELECT 1\n----\n1\n\n# schedule: filesystem/memory\n",
        ),
        ("catalog.slt", "# schedule: hive/memory\n"),
        ("store.slt", "# schedule: filesystem/redis\n"),
        ("rest_s3.slt", "# schedule: rest/s3\n"),
        ("empty.slt", "# schedule:\n"),
        (
            "twice.slt",
            "# schedule: filesystem/memory filesystem/memory\n",
        ),
        ("conformance_here.slt", "# schedule: conformance\n"),
        ("conformance/mixed.slt", "# schedule: filesystem/local\n"),
    ];
    std::fs::create_dir(dir.path().join("conformance")).expect("mkdir");
    std::fs::write(dir.path().join("good.slt"), good).expect("write");
    for (name, text) in bad {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let problems = discover(dir.path()).expect_err("the bad files are refused");
    assert_eq!(problems.len(), bad.len(), "{problems:#?}");
    for (name, _) in bad {
        assert!(
            problems.iter().any(|p| p.starts_with(&format!("{name}: "))),
            "{name} is not named: {problems:#?}"
        );
    }
    assert!(problems
        .iter()
        .any(|p| p.contains("unknown catalog `hive`")));
    assert!(problems.iter().any(|p| p.contains("unknown store `redis`")));
    // A run over the directory fails too, naming them.
    let combination = Combination {
        catalog: CatalogKind::Filesystem,
        store: StoreName::Memory,
    };
    let message = run_scheduled_in(dir.path(), combination, memory(), false)
        .await
        .expect_err("the run fails");
    assert!(
        message.contains("unscheduled.slt: no `# schedule:` line"),
        "{message}"
    );
}

/// A failure names the file and the combination, and column letters are
/// checked: `query T` on an integer column fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_names_the_file_and_the_combination() {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(
        dir.path().join("letters.slt"),
        "# schedule: filesystem/memory\n\nquery T\nSELECT 1\n----\n1\n",
    )
    .expect("write");
    let combination = Combination {
        catalog: CatalogKind::Filesystem,
        store: StoreName::Memory,
    };
    let message = run_scheduled_in(dir.path(), combination, memory(), false)
        .await
        .expect_err("wrong column letters fail");
    assert!(
        message.contains("letters.slt (filesystem/memory)"),
        "{message}"
    );
    assert!(message.contains("query columns mismatch"), "{message}");
}

/// Completion rewrites a wrong expected result (and wrong column letters)
/// from what the engine returns; the completed file then passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_writes_the_right_results() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("scratch.slt");
    std::fs::write(
        &path,
        "# schedule: filesystem/memory\n\n\
         statement ok\nCREATE TABLE c (id INT, v STRING)\n\n\
         statement ok\nINSERT INTO c VALUES (1, 'one'), (2, 'two')\n\n\
         # A wrong row and wrong letters.\n\
         query T rowsort\nSELECT id, v FROM c\n----\n1 one\n3 three\n\n\
         statement error no such table\nSELECT * FROM nowhere\n",
    )
    .expect("write");
    run_file_at(&path, CatalogKind::Filesystem, memory(), Mode::Run)
        .await
        .expect_err("the scratch file is wrong");
    run_file_at(&path, CatalogKind::Filesystem, memory(), Mode::Complete)
        .await
        .expect("completes");
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(
        text.contains("query IT rowsort\nSELECT id, v FROM c\n----\n1 one\n2 two\n"),
        "{text}"
    );
    assert!(
        text.starts_with("# schedule: filesystem/memory\n"),
        "{text}"
    );
    assert!(
        text.contains("# A wrong row and wrong letters.\n"),
        "{text}"
    );
    assert!(
        !text.contains("no such table"),
        "the real error replaces it: {text}"
    );
    run_file_at(&path, CatalogKind::Filesystem, memory(), Mode::Run)
        .await
        .expect("the completed file passes");
}

/// Runs the slt `text` against the memory store on a fresh filesystem warehouse.
async fn run_text(text: &str) -> Result<(), String> {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem)
        .await
        .into_inner();
    paimon_lakestream::testing::run(
        Script::Text {
            name: "scratch.slt",
            text,
        },
        warehouse,
        memory(),
        &[],
        Mode::Run,
    )
    .await
}

/// A `TEST AFTER` statement that fails after the last record fails the
/// file with its error: the run waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_after_statement_failing_after_the_last_record_fails_the_file() {
    let error = run_text(
        "statement ok\nCREATE TABLE t (id INT)\n\n\
         statement ok\nTEST AFTER 200 INSERT INTO nowhere VALUES (1)\n",
    )
    .await
    .expect_err("the statement after the last record failed");
    assert!(
        error.contains("TEST AFTER 200 INSERT INTO nowhere VALUES (1) failed")
            && error.contains("nowhere"),
        "{error}"
    );
    // One that succeeds leaves the file passing.
    run_text(
        "statement ok\nCREATE TABLE t (id INT)\n\n\
         statement ok\nTEST AFTER 200 INSERT INTO t VALUES (1)\n",
    )
    .await
    .expect("the file passes");
}

/// A `TEST AFTER` statement that fails while a streaming read waits fails
/// that read at once (not after the statement timeout), and the file, even
/// where the record expects an error and so took the failure as its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_after_statement_failing_during_a_record_fails_the_file_at_once() {
    let started = std::time::Instant::now();
    let error = run_text(
        "statement ok\nCREATE TABLE s (id INT) WITH ('lakestream.enabled' = 'true')\n\n\
         statement ok\nSET lakestream.scan_mode = 'streaming'\n\n\
         statement ok\nTEST AFTER 200 INSERT INTO nowhere VALUES (1)\n\n\
         # Waits for a row that never comes; fails with the error above.\n\
         statement error\nSELECT * FROM s$rt LIMIT 1\n",
    )
    .await
    .expect_err("the failed statement fails the file");
    assert!(
        error.contains("TEST AFTER 200 INSERT INTO nowhere VALUES (1) failed"),
        "{error}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
