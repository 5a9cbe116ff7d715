//! Runs the `.slt` files of `sql-tests/` through [`LakeStreamContext`], so the
//! statement filter and every guard are exercised as a user meets them.
//!
//! Each file runs against a fresh warehouse, once per catalog implementation
//! where the file is about catalog behaviour.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use paimon_lakestream::LakeStreamContext;
use sqllogictest::{DBOutput, DefaultColumnType};

use crate::support::{CatalogKind, TestWarehouse};

struct LakeStreamDb {
    ctx: Arc<LakeStreamContext>,
}

#[async_trait]
impl sqllogictest::AsyncDB for LakeStreamDb {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let df = self.ctx.sql(sql).await?;
        let schema = Arc::clone(df.schema().inner());
        let batches = df.collect().await?;
        let types = schema
            .fields()
            .iter()
            .map(|f| column_type(f.data_type()))
            .collect();
        Ok(DBOutput::Rows {
            types,
            rows: rows(&batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "paimon-lakestream"
    }

    async fn sleep(dur: std::time::Duration) {
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

/// Runs `sql-tests/<file>` against a fresh warehouse of `kind`.
pub async fn run_file(file: &str, kind: CatalogKind, extra_options: &[(&str, &str)]) {
    let warehouse = TestWarehouse::new(kind).await;
    let ctx = Arc::new(warehouse.context_with(extra_options).await);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("sql-tests")
        .join(file);
    let mut runner = sqllogictest::Runner::new(move || {
        let ctx = Arc::clone(&ctx);
        async move { Ok::<_, DataFusionError>(LakeStreamDb { ctx }) }
    });
    runner.add_label(match kind {
        CatalogKind::Filesystem => "filesystem",
        CatalogKind::Rest => "rest",
    });
    if let Err(e) = runner.run_file_async(&path).await {
        panic!("{file} ({kind:?}):\n{e}");
    }
    drop(warehouse);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_filesystem() {
    run_file(
        "guards.slt",
        CatalogKind::Filesystem,
        &[("lakestream.store", "local")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_rest() {
    run_file(
        "guards.slt",
        CatalogKind::Rest,
        &[("lakestream.store", "local")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_filesystem() {
    run_file(
        "names.slt",
        CatalogKind::Filesystem,
        &[("lakestream.store", "local")],
    )
    .await;
}
