//! Runs the `.slt` files of `sql-tests/` through [`LakeStreamContext`], so the
//! statement filter and every guard are exercised as a user meets them.
//!
//! Each file runs against a fresh warehouse, once per catalog implementation
//! where the file is about catalog behaviour.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use paimon_lakestream::LakeStreamContext;
use sqllogictest::{DBOutput, DefaultColumnType};

use crate::support::{CatalogKind, TestWarehouse};

/// How a store under test is reached, for the pseudo-statement `TEST REOPEN ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCondition {
    Reachable,
    Unreachable,
    /// Answers nothing; the catalog's `lakestream.timeout` is short.
    Slow,
}

/// A store the suites run against: opens contexts on a test warehouse whose
/// catalog names this store.
#[async_trait]
pub trait StoreHarness: Send + Sync {
    /// The store's identifier, also an `onlyif`/`skipif` label in `.slt` files.
    fn identifier(&self) -> &str;

    async fn open(&self, warehouse: &TestWarehouse, condition: StoreCondition)
        -> LakeStreamContext;

    /// The warehouse a file runs against: a fresh one, unless the store
    /// tiers into a warehouse of its own (Fluss's cluster).
    async fn warehouse(&self, kind: CatalogKind) -> TestWarehouse {
        TestWarehouse::new(kind).await
    }
}

/// The in-memory test store.
pub struct MemoryHarness;

#[async_trait]
impl StoreHarness for MemoryHarness {
    fn identifier(&self) -> &str {
        crate::memory_store::IDENTIFIER
    }

    async fn open(
        &self,
        warehouse: &TestWarehouse,
        condition: StoreCondition,
    ) -> LakeStreamContext {
        let switches = &warehouse.memory.switches;
        switches
            .unreachable
            .store(condition == StoreCondition::Unreachable, Ordering::SeqCst);
        switches
            .slow
            .store(condition == StoreCondition::Slow, Ordering::SeqCst);
        let mut options = vec![("lakestream.store", "memory")];
        if condition == StoreCondition::Slow {
            options.push(("lakestream.timeout", "300ms"));
        }
        warehouse.context_with(&options).await
    }
}

/// The session a file runs in. Pseudo-statements that only tests know:
/// - `TEST REOPEN [UNREACHABLE|SLOW|NOSTORE]`: a new context on the same
///   warehouse, its store reachable, unreachable or silent, or a catalog that
///   names no store;
/// - `TEST AFTER <ms> <statement>`: runs the statement that much later, in
///   the background (for streaming reads); should it fail, the statement
///   running then (or the next one) fails with its error;
/// - `TEST SWITCH table_missing = on|off`: the memory store's switch.
struct LakeStreamDb {
    ctx: Arc<LakeStreamContext>,
    warehouse: Arc<TestWarehouse>,
    harness: Option<Arc<dyn StoreHarness>>,
    /// The error of a `TEST AFTER` statement that failed.
    after_failed: Arc<tokio::sync::watch::Sender<Option<String>>>,
}

/// No statement of a suite may hang the test run.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

impl LakeStreamDb {
    async fn run_test_statement(&mut self, command: &str) -> Result<(), DataFusionError> {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["REOPEN", rest @ ..] => {
                let condition = match rest {
                    [] => Some(StoreCondition::Reachable),
                    ["UNREACHABLE"] => Some(StoreCondition::Unreachable),
                    ["SLOW"] => Some(StoreCondition::Slow),
                    ["NOSTORE"] => None,
                    _ => return Err(DataFusionError::Plan(format!("bad TEST {command}"))),
                };
                let ctx = match (&self.harness, condition) {
                    (Some(harness), Some(condition)) => {
                        harness.open(&self.warehouse, condition).await
                    }
                    _ => self.warehouse.context_with(&[]).await,
                };
                self.ctx = Arc::new(ctx);
            }
            ["AFTER", millis, ..] => {
                let delay: u64 = millis
                    .parse()
                    .map_err(|_| DataFusionError::Plan(format!("bad TEST {command}")))?;
                let statement = command
                    .splitn(3, char::is_whitespace)
                    .nth(2)
                    .unwrap_or_default()
                    .to_string();
                let ctx = Arc::clone(&self.ctx);
                let failed = Arc::clone(&self.after_failed);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    let result = match ctx.sql(&statement).await {
                        Ok(df) => df.collect().await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = result {
                        failed.send_replace(Some(format!(
                            "TEST AFTER {delay} {statement} failed: {e}"
                        )));
                    }
                });
            }
            ["SWITCH", "table_missing", "=", value] => {
                self.warehouse
                    .memory
                    .switches
                    .table_missing
                    .store(*value == "on", Ordering::SeqCst);
            }
            _ => return Err(DataFusionError::Plan(format!("unknown TEST {command}"))),
        }
        Ok(())
    }

    /// `${WAREHOUSE}` and `${DIR}` in a statement become this run's paths.
    fn substitute(&self, sql: &str) -> String {
        let warehouse = self.warehouse.path().join("warehouse");
        sql.replace("${WAREHOUSE}", &warehouse.display().to_string())
            .replace("${DIR}", &self.warehouse.path().display().to_string())
    }

    async fn query(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.ctx.sql(sql).await?;
        let schema = Arc::clone(df.schema().inner());
        let batches = df.collect().await?;
        let types = schema
            .fields()
            .iter()
            .map(|f| column_type(f.data_type()))
            .collect();
        // The run's temporary directory reads as `<dir>`, so results can name paths.
        let dir = self.warehouse.path().display().to_string();
        let rows = rows(&batches)?
            .into_iter()
            .map(|row| row.into_iter().map(|v| v.replace(&dir, "<dir>")).collect())
            .collect();
        Ok(DBOutput::Rows { types, rows })
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for LakeStreamDb {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        if let Some(command) = sql.trim().strip_prefix("TEST ") {
            self.run_test_statement(command.trim()).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let sql = self.substitute(sql);
        let mut after_failed = self.after_failed.subscribe();
        let failed =
            |error: &Option<String>| DataFusionError::Execution(error.clone().unwrap_or_default());
        if after_failed.borrow().is_some() {
            return Err(failed(&after_failed.borrow()));
        }
        tokio::select! {
            result = tokio::time::timeout(STATEMENT_TIMEOUT, self.query(&sql)) => match result {
                Ok(result) => result,
                Err(_) => Err(DataFusionError::Execution(format!(
                    "statement did not finish within {STATEMENT_TIMEOUT:?}: {sql}"
                ))),
            },
            error = after_failed.wait_for(Option::is_some) => {
                Err(failed(&error.map(|e| e.clone()).unwrap_or_default()))
            }
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "paimon-lakestream"
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await;
    }
}

fn column_type(data_type: &DataType) -> DefaultColumnType {
    if data_type.is_integer() {
        DefaultColumnType::Integer
    } else if data_type.is_floating() || matches!(data_type, DataType::Decimal128(..)) {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

fn rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            out.push(
                formatters
                    .iter()
                    .zip(batch.columns())
                    .map(|(formatter, column)| {
                        if column.is_null(row) {
                            "NULL".to_string()
                        } else {
                            let text = formatter.value(row).to_string();
                            if text.is_empty() {
                                "(empty)".to_string()
                            } else {
                                text
                            }
                        }
                    })
                    .collect(),
            );
        }
    }
    Ok(out)
}

/// Runs `sql-tests/<file>` against a fresh warehouse of `kind`, whose catalog
/// names the store of `harness` (or no store).
pub async fn run_file(file: &str, kind: CatalogKind, harness: Option<Arc<dyn StoreHarness>>) {
    let warehouse = Arc::new(match &harness {
        Some(harness) => harness.warehouse(kind).await,
        None => TestWarehouse::new(kind).await,
    });
    let ctx = Arc::new(match &harness {
        Some(harness) => harness.open(&warehouse, StoreCondition::Reachable).await,
        None => warehouse.context_with(&[]).await,
    });
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("sql-tests")
        .join(file);
    let labels = [
        match kind {
            CatalogKind::Filesystem => "filesystem".to_string(),
            CatalogKind::Rest => "rest".to_string(),
        },
        harness
            .as_ref()
            .map_or("no-store".to_string(), |h| h.identifier().to_string()),
    ];
    let db_warehouse = Arc::clone(&warehouse);
    let db_harness = harness.clone();
    let mut runner = sqllogictest::Runner::new(move || {
        let db = LakeStreamDb {
            ctx: Arc::clone(&ctx),
            warehouse: Arc::clone(&db_warehouse),
            harness: db_harness.clone(),
            after_failed: Arc::new(tokio::sync::watch::channel(None).0),
        };
        async move { Ok::<_, DataFusionError>(db) }
    });
    for label in &labels {
        runner.add_label(label);
    }
    if let Err(e) = runner.run_file_async(&path).await {
        panic!("{file} ({}):\n{e}", labels.join(", "));
    }
}

fn memory() -> Option<Arc<dyn StoreHarness>> {
    Some(Arc::new(MemoryHarness))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_filesystem() {
    run_file("guards.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_rest() {
    run_file("guards.slt", CatalogKind::Rest, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names() {
    run_file("names.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes() {
    run_file("writes.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_store() {
    run_file("no_store.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector() {
    run_file(
        "connector.slt",
        CatalogKind::Filesystem,
        Some(Arc::new(crate::local_store::LocalHarness)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle() {
    run_file("lifecycle.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drops_filesystem() {
    run_file("drops.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drops_rest() {
    run_file("drops.slt", CatalogKind::Rest, memory()).await;
}

/// The store conformance suite: every store runs these files.
pub async fn conformance(harness: Arc<dyn StoreHarness>) {
    for file in [
        "conformance/append.slt",
        "conformance/primary_key.slt",
        "conformance/streaming.slt",
        "conformance/unreachable.slt",
    ] {
        run_file(file, CatalogKind::Filesystem, Some(Arc::clone(&harness))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    conformance(Arc::new(MemoryHarness)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subqueries() {
    run_file("subqueries.slt", CatalogKind::Filesystem, memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions() {
    run_file("partitions.slt", CatalogKind::Filesystem, memory()).await;
}

/// On the local store: the memory test store does not widen the rows it
/// holds to columns added later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_guard() {
    run_file(
        "options_guard.slt",
        CatalogKind::Filesystem,
        Some(Arc::new(crate::local_store::LocalHarness)),
    )
    .await;
}

/// On the local store: tiering through the procedures commits real snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedures() {
    run_file(
        "procedures.slt",
        CatalogKind::Filesystem,
        Some(Arc::new(crate::local_store::LocalHarness)),
    )
    .await;
}

/// Maintenance after tiering rounds and on request, on both catalogs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_filesystem() {
    run_file(
        "maintenance.slt",
        CatalogKind::Filesystem,
        Some(Arc::new(crate::local_store::LocalHarness)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_rest() {
    run_file(
        "maintenance.slt",
        CatalogKind::Rest,
        Some(Arc::new(crate::local_store::LocalHarness)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements() {
    run_file("statements.slt", CatalogKind::Filesystem, memory()).await;
}
