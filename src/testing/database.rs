//! The sqllogictest database: each statement of a file goes to
//! [`LakeStreamContext::sql`], and each value comes back as text.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use sqllogictest::{DBOutput, DefaultColumnType};

use super::{StoreCondition, StoreHarness, Warehouse};
use crate::LakeStreamContext;

/// The session a file runs in, for `sqllogictest`'s runner. Pseudo-statements that only tests know:
/// - `TEST REOPEN [UNREACHABLE|SLOW|NOSTORE]`: a new context on the same
///   warehouse, its store reachable, unreachable or silent, or a catalog that
///   names no store;
/// - `TEST AFTER <ms> <statement>`: runs the statement that much later, in
///   the background (for streaming reads); should it fail, the statement
///   running then (or the next one) fails with its error;
/// - `TEST <anything else>`: the harness's own
///   ([`StoreHarness::test_statement`]).
///
/// `${WAREHOUSE}` in a statement is [`Warehouse::warehouse_path`], `${DIR}`
/// [`Warehouse::path`]; in results, that directory reads as `<dir>`.
/// Values are text: `NULL` for nulls, `(empty)` for empty strings; column
/// letters are `I` for integers, `R` for floating point and decimals, `T`
/// for the rest.
pub struct Database {
    ctx: Arc<LakeStreamContext>,
    warehouse: Arc<Warehouse>,
    harness: Option<Arc<dyn StoreHarness>>,
    /// The error of a `TEST AFTER` statement that failed.
    after_failed: Arc<tokio::sync::watch::Sender<Option<String>>>,
}

/// No statement of a suite may hang the test run.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(120);

impl Database {
    /// A session on `warehouse` that starts with `ctx`; `TEST REOPEN` opens
    /// the next through `harness` (without one: a catalog naming no store).
    pub fn new(
        ctx: Arc<LakeStreamContext>,
        warehouse: Arc<Warehouse>,
        harness: Option<Arc<dyn StoreHarness>>,
    ) -> Self {
        Self {
            ctx,
            warehouse,
            harness,
            after_failed: Arc::new(tokio::sync::watch::channel(None).0),
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
        let rows = rows(&batches)?
            .into_iter()
            .map(|row| row.into_iter().map(|v| v.replace(&dir, "<dir>")).collect())
            .collect();
        Ok(DBOutput::Rows { types, rows })
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for Database {
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
