//! The sqllogictest database: each statement of a file goes to
//! [`LakeStreamContext::sql`], and each value comes back as text.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use sqllogictest::{DBOutput, DefaultColumnType};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{StoreCondition, StoreHarness, Warehouse};
use crate::LakeStreamContext;

/// The session a file runs in, for `sqllogictest`'s runner. Pseudo-statements that only tests know:
/// - `TEST REOPEN [UNREACHABLE|SLOW|NOSTORE]`: a new context on the same
///   warehouse, its store reachable, unreachable or silent, or a catalog that
///   names no store;
/// - `TEST AFTER <ms> <statement>`: runs the statement that much later, in
///   the background (for streaming reads); should it fail, the statement
///   running then (or the next one) fails with its error, and so does the
///   run ([`AfterStatements::finish`]), even when it fails after the last
///   record or a record that expects an error took its error;
/// - `TEST <anything else>`: the harness's own
///   ([`StoreHarness::test_statement`]).
///
/// `${WAREHOUSE}` in a statement is [`Warehouse::warehouse_path`], `${DIR}`
/// [`Warehouse::path`]; in results, that directory reads as `<dir>`.
/// Values are text ([`text_rows`]), with `(empty)` for empty strings (a
/// value of no characters would vanish between the spaces of a row); column
/// letters are `I` for integers, `R` for floating point and decimals, `T`
/// for the rest.
pub struct Database {
    ctx: Arc<LakeStreamContext>,
    warehouse: Arc<Warehouse>,
    harness: Option<Arc<dyn StoreHarness>>,
    after: Arc<AfterStatements>,
}

/// The `TEST AFTER` statements of a run, shared by all its connections:
/// those still running, and the error of the first that failed.
#[derive(Debug)]
pub struct AfterStatements {
    failed: watch::Sender<Option<String>>,
    running: std::sync::Mutex<JoinSet<()>>,
}

impl Default for AfterStatements {
    fn default() -> Self {
        Self {
            failed: watch::channel(None).0,
            running: std::sync::Mutex::new(JoinSet::new()),
        }
    }
}

impl AfterStatements {
    /// No statements yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The error of the first statement that failed, if one has.
    pub fn failure(&self) -> Option<String> {
        self.failed.borrow().clone()
    }

    /// The end of a run: waits for the statements still running (each has
    /// [`STATEMENT_TIMEOUT`]); the error of the first that failed, whenever
    /// it failed.
    pub async fn finish(&self) -> Result<(), String> {
        let mut running = std::mem::take(&mut *self.lock());
        while let Some(joined) = running.join_next().await {
            if let Err(e) = joined {
                self.fail(format!("a TEST AFTER statement did not finish: {e}"));
            }
        }
        self.failure().map_or(Ok(()), Err)
    }

    /// The end of a run that failed: the statements still running stop.
    pub fn abort(&self) {
        self.lock().abort_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JoinSet<()>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the first failure: later ones are often its consequences.
    fn fail(&self, error: String) {
        self.failed.send_if_modified(|failed| {
            if failed.is_some() {
                return false;
            }
            *failed = Some(error);
            true
        });
    }

    /// Runs `statement` on `ctx` after `delay`, in the background.
    fn spawn(self: &Arc<Self>, ctx: Arc<LakeStreamContext>, delay: u64, statement: String) {
        let this = Arc::clone(self);
        self.lock().spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let run = async {
                let df = ctx.sql(&statement).await?;
                df.collect().await.map(|_| ())
            };
            let error = match tokio::time::timeout(STATEMENT_TIMEOUT, run).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("did not finish within {STATEMENT_TIMEOUT:?}"),
            };
            this.fail(format!("TEST AFTER {delay} {statement} failed: {error}"));
        });
    }
}

/// No statement of a suite may hang the test run.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

impl Database {
    /// A session on `warehouse` that starts with `ctx`; `TEST REOPEN` opens
    /// the next through `harness` (without one: a catalog naming no store).
    /// Its `TEST AFTER` statements join `after`, which the run finishes
    /// ([`AfterStatements::finish`]) after its last record.
    pub fn new(
        ctx: Arc<LakeStreamContext>,
        warehouse: Arc<Warehouse>,
        harness: Option<Arc<dyn StoreHarness>>,
        after: Arc<AfterStatements>,
    ) -> Self {
        Self {
            ctx,
            warehouse,
            harness,
            after,
        }
    }

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
                self.after.spawn(Arc::clone(&self.ctx), delay, statement);
            }
            _ => {
                let answer = match &self.harness {
                    Some(harness) => harness.test_statement(&self.warehouse, command).await,
                    None => None,
                };
                match answer {
                    Some(result) => result.map_err(DataFusionError::Execution)?,
                    None => return Err(DataFusionError::Plan(format!("unknown TEST {command}"))),
                }
            }
        }
        Ok(())
    }

    /// `${WAREHOUSE}` and `${DIR}` in a statement become this run's paths.
    fn substitute(&self, sql: &str) -> String {
        let warehouse = self.warehouse.warehouse_path();
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
        let rows = text_rows(&batches)?
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|v| match v.as_str() {
                        "" => "(empty)".to_string(),
                        _ => v.replace(&dir, "<dir>"),
                    })
                    .collect()
            })
            .collect();
        Ok(DBOutput::Rows { types, rows })
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for Database {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let mut after_failed = self.after.failed.subscribe();
        let failed = |error: Option<String>| DataFusionError::Execution(error.unwrap_or_default());
        if let Some(error) = self.after.failure() {
            return Err(failed(Some(error)));
        }
        if let Some(command) = sql.trim().strip_prefix("TEST ") {
            self.run_test_statement(command.trim()).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let sql = self.substitute(sql);
        tokio::select! {
            result = tokio::time::timeout(STATEMENT_TIMEOUT, self.query(&sql)) => match result {
                Ok(result) => result,
                Err(_) => Err(DataFusionError::Execution(format!(
                    "statement did not finish within {STATEMENT_TIMEOUT:?}: {sql}"
                ))),
            },
            error = after_failed.wait_for(Option::is_some) => {
                Err(failed(error.ok().and_then(|e| e.clone())))
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

/// The rows of `batches` as text, a row a `Vec`: each value as Arrow's
/// display writes it, `NULL` for nulls. The one way results read as text in
/// this crate's tests: `.slt` results (where an empty value then reads
/// `(empty)`), and the rows compared with another reader's (pypaimon's).
pub fn text_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, ArrowError> {
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
                            formatter.value(row).to_string()
                        }
                    })
                    .collect(),
            );
        }
    }
    Ok(out)
}
