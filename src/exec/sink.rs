//! The sink that writes a DML statement's rows to the table's store.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::sink::DataSink;
use datafusion::error::Result as DFResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::TryStreamExt;
use paimon::spec::DataField;
use paimon::table::Table;

use crate::error::Error;
use crate::schema_stamp::{self, Freshness};
use crate::store::{table_arrow_schema, LazyStore, WriteKind};

/// Writes all of a statement's rows to the store as one unit. The statement
/// returns once the store has acknowledged them: durable and visible. Rows
/// stream into stores that take a write a batch at a time
/// ([`crate::store::LakestreamStore::start_write`]), so an `INSERT ... SELECT`
/// of any size runs in bounded memory there.
#[derive(Debug)]
pub(crate) struct StoreSink {
    store: Arc<LazyStore>,
    table: Table,
    kind: WriteKind,
    /// The schema of the rows arriving (the table provider's).
    schema: SchemaRef,
}

impl StoreSink {
    pub(crate) fn new(
        store: Arc<LazyStore>,
        table: Table,
        kind: WriteKind,
        schema: SchemaRef,
    ) -> Self {
        Self {
            store,
            table,
            kind,
            schema,
        }
    }
}

impl DisplayAs for StoreSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StoreSink: store={}, table={}, kind={:?}",
            self.store.identifier(),
            self.table.identifier().full_name(),
            self.kind
        )
    }
}

#[async_trait]
impl DataSink for StoreSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DFResult<u64> {
        let target = table_arrow_schema(&self.table)?;
        let mut rows = data.and_then(move |batch| {
            let converted =
                crate::batch::cast_to(&target, batch.columns().to_vec(), batch.num_rows());
            futures::future::ready(converted.map_err(Into::into))
        });
        let store = self.store.get().await.map_err(Error::into_run_time)?;
        let started = self
            .store
            .bounded("start a write", store.start_write(&self.table, self.kind))
            .await
            .map_err(Error::into_run_time)?;
        let Some(mut write) = started else {
            // The store takes a write whole.
            let batches: Vec<RecordBatch> = rows.try_collect().await?;
            if batches.iter().all(|b| b.num_rows() == 0) {
                return Ok(0);
            }
            let table = self.table.clone();
            let kind = self.kind;
            let written = self
                .store
                .call("write rows", |s| async move {
                    s.write(&table, kind, batches).await
                })
                .await
                .map_err(|e| self.outcome_unknown(e))
                .map_err(Error::into_run_time)?;
            if written > 0 {
                self.check_still_lakestream()
                    .await
                    .map_err(Error::into_run_time)?;
            }
            return Ok(written);
        };
        // Rows go to the store as they arrive; nothing is visible before
        // the commit, so a failure until then writes nothing.
        loop {
            let batch = match rows.try_next().await {
                Ok(Some(batch)) => batch,
                Ok(None) => break,
                Err(e) => {
                    write.abort().await;
                    return Err(e);
                }
            };
            let put = self.store.bounded("write rows", write.put(batch)).await;
            if let Err(e) = put {
                write.abort().await;
                return Err(match e {
                    Error::StoreTimeout { timeout, .. } => Error::WriteNotApplied {
                        table: self.table.identifier().full_name(),
                        reason: format!(
                            "part of it did not reach the store within {timeout:?}, the \
                             bound set by 'lakestream.timeout'"
                        ),
                    },
                    other => other,
                }
                .into_run_time());
            }
        }
        let written = self
            .store
            .bounded("write rows", write.commit())
            .await
            .map_err(|e| self.outcome_unknown(e))
            .map_err(Error::into_run_time)?;
        if written > 0 {
            self.check_still_lakestream()
                .await
                .map_err(Error::into_run_time)?;
        }
        Ok(written)
    }
}

/// What a write found once its rows reached the store (see
/// [`StoreSink::check_still_lakestream`]).
enum Still {
    /// The mode is on, through the same store, with the write's columns.
    Same,
    /// The mode is off, or on through another store; with the write's
    /// columns that changed since it was planned.
    Off(Vec<String>),
    /// The mode is on, but these columns of the write changed.
    Changed(Vec<String>),
}

/// `text` with its first letter upper-case, to begin a sentence.
fn upper_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

impl StoreSink {
    /// The write was routed to the store when it was planned; the mode may
    /// have gone off since. Turning it off tiers (or stops the store's
    /// tiering) and then tiers or counts again once the option is
    /// committed, so rows that reached the store before the option changed
    /// are in Paimon or named in a notice. Rows that reached it after are
    /// not acknowledged: their outcome is unknown. One look at the schema
    /// files when nothing changed ([`schema_stamp::freshness`]; one request
    /// to the server for a table of a REST catalog).
    async fn check_still_lakestream(&self) -> Result<(), Error> {
        let unknown = |reason: String| Error::WriteOutcomeUnknown {
            table: self.table.identifier().full_name(),
            reason,
        };
        match self.still_lakestream().await {
            Ok(Still::Same) => Ok(()),
            Ok(Still::Off(changed)) => Err(unknown(format!(
                "its lake-stream mode was turned off while the write ran, after its rows \
                 reached the store: they may wait there, not in Paimon, until the mode is \
                 turned on again or they are tiered{}",
                if changed.is_empty() {
                    String::new()
                } else {
                    format!(
                        ". {} changed since it was planned: tiering stops at them if a column \
                         of theirs is gone or a value does not cast to its type now",
                        upper_first(&crate::name::columns_phrase(&changed))
                    )
                }
            ))),
            Ok(Still::Changed(changed)) => Err(unknown(format!(
                "{} of the table changed while the write ran (dropped, renamed, added again \
                 or given another type, with the mode turned off and on again meanwhile), and \
                 its rows reached the store with values for the old one. Tiering takes a \
                 write's values by column name, cast to the column's type now; it stops at a \
                 column that is gone or a value that does not cast, and tiers nothing after \
                 it until a column of that name and a type the values cast to is there again \
                 (ALTER TABLE ... ADD COLUMN; RENAME COLUMN and type changes need the mode off \
                 first)",
                upper_first(&crate::name::columns_phrase(&changed))
            ))),
            Err(e) => Err(unknown(format!(
                "its rows reached the store, but whether its lake-stream mode is still on \
                 could not be read: {e}"
            ))),
        }
    }

    async fn still_lakestream(&self) -> paimon::Result<Still> {
        let table = &self.table;
        let latest = match table.rest_env() {
            // A REST catalog's schemas are its server's: one request for
            // the table as it is now.
            Some(env) => {
                let now = env.get_table(table.identifier()).await?;
                // Dropped and created again since: another table.
                if now.rest_env().map(|e| e.uuid()) != Some(env.uuid()) {
                    return Ok(Still::Off(Vec::new()));
                }
                Arc::new(now.schema().clone())
            }
            None => {
                // Dropped and created again, or altered: the newest schema
                // decides.
                if schema_stamp::freshness(table).await? == Freshness::Current {
                    return Ok(Still::Same);
                }
                let Some(latest) = schema_stamp::latest_schema(table).await? else {
                    return Ok(Still::Off(Vec::new()));
                };
                latest
            }
        };
        // The write's columns, as it had them: the same field (by Paimon's
        // field id), name and type. A column dropped and added again under
        // its name is another field; its values would go to the new one.
        let changed: Vec<String> = table
            .schema()
            .fields()
            .iter()
            .filter(|field| !latest.fields().iter().any(|now| same_field(field, now)))
            .map(|field| field.name().to_string())
            .collect();
        // Still on, and still through the store the write went to (the mode
        // may have gone off and on again through another store since).
        let binding = |options: &std::collections::HashMap<String, String>| {
            options.get(crate::options::STORE_BINDING).cloned()
        };
        if !crate::options::is_enabled(latest.options())
            || binding(latest.options()) != binding(table.schema().options())
        {
            return Ok(Still::Off(changed));
        }
        // Columns change only while the mode is off: it went off and on
        // again while the write ran.
        if !changed.is_empty() {
            return Ok(Still::Changed(changed));
        }
        Ok(Still::Same)
    }

    /// A store may still finish a write it did not answer in time.
    fn outcome_unknown(&self, error: Error) -> Error {
        match error {
            Error::StoreTimeout { timeout, .. } => Error::WriteOutcomeUnknown {
                table: self.table.identifier().full_name(),
                reason: format!(
                    "it did not finish within {timeout:?}, the bound set by \
                     'lakestream.timeout', and goes on in the background"
                ),
            },
            other => other,
        }
    }
}

/// Whether a write planned with column `planned` writes `now`'s column: the
/// same field (by Paimon's field id), name and type (nullability aside). A
/// column dropped and added again under its name is another field.
pub(crate) fn same_field(planned: &DataField, now: &DataField) -> bool {
    planned.id() == now.id()
        && planned.name() == now.name()
        && planned.data_type().equals_ignore_nullable(now.data_type())
}
