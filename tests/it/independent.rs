//! An independent Paimon reader reads every table we write the same way we
//! do: pypaimon (Apache Paimon's Python implementation, pinned in
//! `scripts/pypaimon.sh`, installed from PyPI into a cached virtualenv) reads
//! the tables tiered by the `local` store, at their latest snapshot and at
//! each earlier one, and must return exactly the rows `SELECT * FROM t`
//! (and `... VERSION AS OF <id>`) returns here.
//!
//! Without pypaimon (PyPI unreachable, no Python) these tests fail; they
//! never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use datafusion::arrow::record_batch::RecordBatch;
use paimon_lakestream::testing::text_rows;
use paimon_lakestream::LakeStreamContext;

use crate::support::{ids, run, CatalogKind, TestWarehouse};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pypaimon.sh")
}

/// Runs `scripts/pypaimon.sh <args>`; its standard output, or what went wrong
/// (its standard error included).
fn pypaimon_sh(args: &[&str]) -> Result<String, String> {
    pypaimon_sh_with(args, "{}")
}

/// [`pypaimon_sh`] with catalog options (a JSON object) for the reader.
fn pypaimon_sh_with(args: &[&str], options: &str) -> Result<String, String> {
    let output = Command::new("bash")
        .arg(script())
        .args(args)
        .env("PYPAIMON_OPTIONS", options)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "scripts/pypaimon.sh {} failed ({}):\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        ))
    }
}

/// `scripts/pypaimon.sh setup`, once per process.
fn setup() -> Result<(), String> {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    SETUP
        .get_or_init(|| {
            pypaimon_sh(&["setup"])
                .map(|_| ())
                .map_err(|e| format!("pypaimon could not be installed: {e}"))
        })
        .clone()
}

/// What pypaimon reads of `table` (`db.table`) in the filesystem warehouse at
/// `warehouse`, at `snapshot` (the latest if `None`): one line per row, the
/// values of all the columns of the table's schema joined with `|`, NULL as
/// `NULL`, sorted.
pub(crate) fn pypaimon_rows(
    warehouse: &Path,
    table: &str,
    snapshot: Option<i64>,
) -> Result<Vec<String>, String> {
    setup()?;
    let warehouse = warehouse
        .to_str()
        .ok_or_else(|| format!("warehouse path {} is not UTF-8", warehouse.display()))?;
    let snapshot = snapshot.map(|id| id.to_string());
    let mut args = vec!["read", warehouse, table];
    args.extend(snapshot.as_deref());
    let stdout = pypaimon_sh(&args)?;
    let mut rows: Vec<String> = stdout.lines().map(str::to_string).collect();
    rows.sort();
    Ok(rows)
}

/// What pypaimon reads of `table` (`db.table`, latest snapshot) in the
/// warehouse at `location` (`s3://bucket/path`), reached with the catalog
/// `options` (the `s3.*` ones; given in the environment, not as arguments).
pub(crate) fn pypaimon_rows_at(
    location: &str,
    table: &str,
    options: &std::collections::HashMap<String, String>,
) -> Result<Vec<String>, String> {
    setup()?;
    let options = serde_json::to_string(options).map_err(|e| e.to_string())?;
    let stdout = pypaimon_sh_with(&["read", location, table], &options)?;
    let mut rows: Vec<String> = stdout.lines().map(str::to_string).collect();
    rows.sort();
    Ok(rows)
}

/// The rows of a result rendered the way `scripts/pypaimon_read.py` renders
/// them, sorted.
pub(crate) fn render(batches: &[RecordBatch]) -> Vec<String> {
    render_with(batches, "|")
}

/// The rows of a result, each its values joined by `separator`, sorted;
/// values as `.slt` results show them ([`text_rows`]), but for an empty
/// string, which stays empty (as pypaimon's reader prints it).
pub(crate) fn render_with(batches: &[RecordBatch], separator: &str) -> Vec<String> {
    let mut out: Vec<String> = text_rows(batches)
        .expect("values as text")
        .into_iter()
        .map(|row| row.join(separator))
        .collect();
    out.sort();
    out
}

/// What `sql` returns, rendered. Boxed, like every statement here: planning
/// futures are large in debug builds, and a test body awaiting many of them
/// would otherwise overflow the test thread's stack.
async fn rows(ctx: &LakeStreamContext, sql: &str) -> Vec<String> {
    let batches = Box::pin(async { ctx.sql(sql).await?.collect().await })
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    render(&batches)
}

/// A filesystem warehouse whose lake-stream tables use the `local` store,
/// tiering only on demand.
struct Fixture {
    warehouse: TestWarehouse,
    ctx: LakeStreamContext,
}

impl Fixture {
    async fn new() -> Self {
        let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
        let store = warehouse.path().join("store");
        let ctx = warehouse
            .context_with(&[
                ("lakestream.store", "local"),
                ("local.tier-interval", "off"),
                ("local.path", store.to_str().expect("utf-8 path")),
            ])
            .await;
        Self { warehouse, ctx }
    }

    fn warehouse_dir(&self) -> PathBuf {
        PathBuf::from(
            self.warehouse
                .catalog_options()
                .remove("warehouse")
                .expect("a filesystem warehouse"),
        )
    }

    async fn run(&self, sql: &str) {
        Box::pin(run(&self.ctx, sql)).await;
    }

    async fn ids(&self, sql: &str) -> Vec<i64> {
        Box::pin(ids(&self.ctx, sql)).await
    }

    async fn tier(&self, table: &str) {
        self.run(&format!("CALL sys.lakestream_tier('default.{table}')"))
            .await;
    }

    /// pypaimon reads `table` at `snapshot` (the latest if `None`) exactly as
    /// `SELECT * FROM table [VERSION AS OF snapshot]` reads it here; the rows
    /// pypaimon read.
    async fn same_rows(&self, table: &str, snapshot: Option<i64>) -> Vec<String> {
        let sql = match snapshot {
            Some(id) => format!("SELECT * FROM {table} VERSION AS OF {id}"),
            None => format!("SELECT * FROM {table}"),
        };
        let ours = rows(&self.ctx, &sql).await;
        let theirs = pypaimon_rows(&self.warehouse_dir(), &format!("default.{table}"), snapshot)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            theirs,
            ours,
            "pypaimon (left) and `{sql}` (right) read different rows of {}",
            self.warehouse_dir()
                .join(format!("default.db/{table}"))
                .display()
        );
        theirs
    }

    /// [`Self::same_rows`] at every snapshot `table` has; how many there were.
    async fn same_rows_at_every_snapshot(&self, table: &str) -> usize {
        let snapshots = self
            .ids(&format!(
                "SELECT snapshot_id FROM {table}$snapshots ORDER BY snapshot_id"
            ))
            .await;
        for &id in &snapshots {
            self.same_rows(table, Some(id)).await;
        }
        snapshots.len()
    }
}

fn lines(rows: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypaimon_reads_an_append_table() {
    let f = Fixture::new().await;
    f.run(
        "CREATE TABLE a (id INT, name STRING, score DOUBLE, ok BOOLEAN, big BIGINT) \
         WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO a VALUES (1, 'one', 1.5, true, 10), (2, NULL, NULL, false, NULL)")
        .await;
    f.tier("a").await;
    assert_eq!(
        f.same_rows("a", None).await,
        lines(&["1|one|1.5|true|10", "2|NULL|NULL|false|NULL"])
    );

    f.run("INSERT INTO a VALUES (3, 'three', -2.25, NULL, 30), (1, 'one', 1.5, true, 10)")
        .await;
    f.run("INSERT INTO a VALUES (4, '', 0.0, true, -4)").await;
    f.tier("a").await;
    assert_eq!(f.same_rows("a", None).await.len(), 5);
    assert!(f.same_rows_at_every_snapshot("a").await >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypaimon_reads_a_primary_key_table_after_updates_and_deletes() {
    let f = Fixture::new().await;
    f.run(
        "CREATE TABLE kv (k INT NOT NULL, v STRING, n BIGINT, PRIMARY KEY (k)) \
         WITH ('bucket' = '2', 'lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO kv VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3), (4, 'd', 4)")
        .await;
    f.tier("kv").await;
    assert_eq!(
        f.same_rows("kv", None).await,
        lines(&["1|a|1", "2|b|2", "3|c|3", "4|d|4"])
    );

    // Round 2: updates, a delete, an upsert by INSERT, a new key.
    f.run("UPDATE kv SET v = 'B', n = 20 WHERE k = 2").await;
    f.run("DELETE FROM kv WHERE k = 3").await;
    f.run("INSERT INTO kv VALUES (4, NULL, 40), (5, 'e', 5)")
        .await;
    f.tier("kv").await;
    assert_eq!(
        f.same_rows("kv", None).await,
        lines(&["1|a|1", "2|B|20", "4|NULL|40", "5|e|5"])
    );

    // Round 3: a deleted key comes back, several writes to one key before
    // tiering, a delete of a key written in this very round.
    f.run("INSERT INTO kv VALUES (3, 'c again', 33)").await;
    f.run("UPDATE kv SET n = n + 100 WHERE k >= 4").await;
    f.run("UPDATE kv SET v = 'e2' WHERE k = 5").await;
    f.run("INSERT INTO kv VALUES (6, 'f', 6)").await;
    f.run("DELETE FROM kv WHERE k = 6 OR k = 1").await;
    f.tier("kv").await;
    assert_eq!(
        f.same_rows("kv", None).await,
        lines(&["2|B|20", "3|c again|33", "4|NULL|140", "5|e2|105"])
    );

    // Round 4: everything deleted.
    f.run("DELETE FROM kv").await;
    f.tier("kv").await;
    assert_eq!(f.same_rows("kv", None).await, Vec::<String>::new());

    assert!(f.same_rows_at_every_snapshot("kv").await >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypaimon_reads_a_partitioned_primary_key_table() {
    let f = Fixture::new().await;
    f.run(
        "CREATE TABLE pt (p STRING NOT NULL, k INT NOT NULL, v STRING, PRIMARY KEY (p, k)) \
         PARTITIONED BY (p) WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO pt VALUES ('x', 1, 'x1'), ('x', 2, 'x2'), ('y', 1, 'y1'), ('z', 1, 'z1')")
        .await;
    f.tier("pt").await;
    assert_eq!(
        f.same_rows("pt", None).await,
        lines(&["x|1|x1", "x|2|x2", "y|1|y1", "z|1|z1"])
    );

    f.run("UPDATE pt SET v = 'X2' WHERE p = 'x' AND k = 2")
        .await;
    f.run("DELETE FROM pt WHERE p = 'y'").await;
    f.run("INSERT INTO pt VALUES ('z', 1, NULL), ('w', 7, 'w7')")
        .await;
    f.tier("pt").await;
    assert_eq!(
        f.same_rows("pt", None).await,
        lines(&["w|7|w7", "x|1|x1", "x|2|X2", "z|1|NULL"])
    );

    f.run("DELETE FROM pt WHERE k = 1").await;
    f.run("INSERT INTO pt VALUES ('y', 2, 'y2')").await;
    f.tier("pt").await;
    assert_eq!(
        f.same_rows("pt", None).await,
        lines(&["w|7|w7", "x|2|X2", "y|2|y2"])
    );

    assert!(f.same_rows_at_every_snapshot("pt").await >= 3);
}

/// Time travel: one earlier snapshot, read by id, gives the rows it had then
/// (here, not the latest ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypaimon_reads_an_earlier_snapshot_by_id() {
    let f = Fixture::new().await;
    f.run(
        "CREATE TABLE tt (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO tt VALUES (1, 'first'), (2, 'first')")
        .await;
    f.tier("tt").await;
    let first = f.ids("SELECT max(snapshot_id) FROM tt$snapshots").await;
    let first = *first.first().expect("a snapshot after the first tiering");
    f.run("UPDATE tt SET v = 'second' WHERE k = 1").await;
    f.run("DELETE FROM tt WHERE k = 2").await;
    f.tier("tt").await;

    assert_eq!(f.same_rows("tt", None).await, lines(&["1|second"]));
    assert_eq!(
        f.same_rows("tt", Some(first)).await,
        lines(&["1|first", "2|first"])
    );

    // A snapshot that does not exist is an error, not the latest rows.
    let missing = pypaimon_rows(&f.warehouse_dir(), "default.tt", Some(first + 1000))
        .expect_err("a snapshot that does not exist");
    assert!(missing.contains("has no snapshot"), "{missing}");
}

/// The merge engines tiering supports (partial-update, aggregation), and a
/// primary-key table with dynamic buckets (no 'bucket' option): pypaimon
/// merges their files as we do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypaimon_reads_merge_engines_and_dynamic_buckets() {
    let f = Fixture::new().await;
    f.run(
        "CREATE TABLE pu (k INT NOT NULL, a STRING, b STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'merge-engine' = 'partial-update', 'lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO pu VALUES (1, 'a1', NULL), (2, NULL, 'b2')")
        .await;
    f.tier("pu").await;
    f.run("INSERT INTO pu VALUES (1, NULL, 'b1'), (2, 'a2', NULL), (3, 'a3', NULL)")
        .await;
    f.tier("pu").await;
    assert_eq!(
        f.same_rows("pu", None).await,
        lines(&["1|a1|b1", "2|a2|b2", "3|a3|NULL"])
    );

    f.run(
        "CREATE TABLE agg (k INT NOT NULL, total BIGINT, top INT, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'merge-engine' = 'aggregation', \
         'fields.total.aggregate-function' = 'sum', 'fields.top.aggregate-function' = 'max', \
         'lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO agg VALUES (1, 10, 3), (2, 1, NULL)")
        .await;
    f.tier("agg").await;
    f.run("INSERT INTO agg VALUES (1, 5, 7), (2, 2, 9)").await;
    f.run("INSERT INTO agg VALUES (1, NULL, 4)").await;
    f.tier("agg").await;
    assert_eq!(f.same_rows("agg", None).await, lines(&["1|15|7", "2|3|9"]));

    f.run(
        "CREATE TABLE dyn (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    f.run("INSERT INTO dyn VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        .await;
    f.tier("dyn").await;
    f.run("UPDATE dyn SET v = 'B' WHERE k = 2").await;
    f.run("DELETE FROM dyn WHERE k = 3").await;
    f.run("INSERT INTO dyn VALUES (4, 'd')").await;
    f.tier("dyn").await;
    assert_eq!(
        f.same_rows("dyn", None).await,
        lines(&["1|a", "2|B", "4|d"])
    );

    for table in ["pu", "agg", "dyn"] {
        assert!(f.same_rows_at_every_snapshot(table).await >= 2, "{table}");
    }
}

/// Compaction (issue 12): tables whose manifests or data files tiering
/// compacted (a `COMPACT` snapshot), or `CALL sys.compact_manifest` and
/// `CALL sys.compact` compacted, read the same in pypaimon at every
/// snapshot, before and after each compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pypaimon_reads_tables_whose_manifests_were_compacted() {
    let f = Fixture::new().await;
    f.run(
        "CREATE TABLE cl (id INT, v STRING) WITH ('lakestream.enabled' = 'true', \
         'manifest.merge-min-count' = '3', 'compaction.min.file-num' = '3')",
    )
    .await;
    f.run(
        "CREATE TABLE ck (p STRING NOT NULL, k INT NOT NULL, v STRING, PRIMARY KEY (p, k)) \
         PARTITIONED BY (p) WITH ('bucket' = '2', 'lakestream.enabled' = 'true', \
         'manifest.merge-min-count' = '3')",
    )
    .await;
    for round in 0..7 {
        f.run(&format!("INSERT INTO cl VALUES ({round}, 'v{round}')"))
            .await;
        let p = ["x", "y", "z"][round % 3];
        f.run(&format!(
            "INSERT INTO ck VALUES ('{p}', {}, 'r{round}'), ('w', {round}, NULL)",
            round % 4
        ))
        .await;
        if round == 4 {
            f.run("DELETE FROM ck WHERE k = 1").await;
        }
        f.tier("cl").await;
        f.tier("ck").await;
    }
    f.run("CALL sys.compact_manifest('default.ck')").await;
    // A primary-key table's buckets rewritten as their merged rows, then
    // written over.
    f.run("CALL sys.compact('default.ck')").await;
    f.run("INSERT INTO ck VALUES ('x', 0, 'later'), ('w', 2, NULL)")
        .await;
    f.run("DELETE FROM ck WHERE k = 3").await;
    f.tier("ck").await;
    f.run("INSERT INTO cl VALUES (100, 'x')").await;
    f.run("INSERT INTO cl VALUES (101, NULL)").await;
    f.run("CALL sys.compact('default.cl')").await;
    let files = f.ids("SELECT count(*) FROM cl$files").await;
    assert_eq!(files, vec![1], "cl: data files after CALL sys.compact");
    for table in ["cl", "ck"] {
        let compactions = f
            .ids(&format!(
                "SELECT count(*) FROM {table}$snapshots WHERE commit_kind = 'COMPACT'"
            ))
            .await;
        assert!(compactions[0] >= 2, "{table}: {compactions:?} compactions");
        f.same_rows(table, None).await;
        assert!(f.same_rows_at_every_snapshot(table).await >= 9);
    }
}

/// Our side of the comparison renders values as the slt runner does
/// (`paimon_lakestream::testing::text_rows`), as pypaimon's reader prints
/// them: `NULL` for null, floats and booleans as Arrow displays them; an empty
/// string stays empty (the slt runner alone writes it `(empty)`).
#[test]
fn our_rows_render_as_the_slt_runner_renders_them() {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int32Array, StringArray};

    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int32Array::from(vec![2, 1]))),
        ("s", Arc::new(StringArray::from(vec![None, Some("")]))),
        ("f", Arc::new(Float64Array::from(vec![0.0, 1.5]))),
        ("b", Arc::new(BooleanArray::from(vec![None, Some(true)]))),
    ];
    let batch = RecordBatch::try_from_iter(columns).expect("a batch");
    assert_eq!(
        render(std::slice::from_ref(&batch)),
        lines(&["1||1.5|true", "2|NULL|0.0|NULL"])
    );
    let mut slt: Vec<String> = text_rows(std::slice::from_ref(&batch))
        .expect("values as text")
        .into_iter()
        .map(|row| row.join("|"))
        .collect();
    slt.sort();
    assert_eq!(slt, render(&[batch]));
}
