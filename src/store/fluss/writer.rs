//! Writes: a cached writer per table incarnation, checked against Fluss
//! and Paimon before each write, and what became of rows a failed write sent.

use super::*;
use crate::retry::{Retry, Try};

/// Whether Fluss's key-value store holds each row's key, looked up with
/// the writer's lookupers, a share of the rows each.
pub(super) async fn held_keys(
    target: &Target,
    keys: &Keys,
    batch: &RecordBatch,
) -> Result<Vec<bool>> {
    let projected = batch
        .project(&keys.columns)
        .map_err(|e| Error::Internal(format!("the primary key of '{}': {e}", target.name)))?;
    let projected = Arc::new(arrow_bridge::to_arrow59(&projected).map_err(FlussStoreError::from)?);
    let rows = projected.num_rows();
    let share = rows.div_ceil(keys.lookupers.len().max(1)).max(1);
    let lookups = keys.lookupers.iter().enumerate().map(|(n, lookuper)| {
        let projected = Arc::clone(&projected);
        async move {
            let range = (n * share).min(rows)..((n + 1) * share).min(rows);
            let mut found = Vec::with_capacity(range.len());
            if range.is_empty() {
                return Ok(found);
            }
            let mut lookuper = lookuper.lock().await;
            let mut row =
                ColumnarRow::new(projected, Arc::clone(&keys.row_type), range.start, None)
                    .map_err(|e| target.fluss_error("look up the keys of", e))?;
            for i in range {
                row.set_row_id(i);
                let result = target
                    .bounded("look up a key of", lookuper.lookup(&row))
                    .await?;
                let holds = result
                    .get_single_row()
                    .map_err(|e| target.fluss_error("look up a key of", e))?
                    .is_some();
                found.push(holds);
            }
            Ok::<_, Error>(found)
        }
    });
    let found = futures::future::try_join_all(lookups).await?;
    Ok(found.into_iter().flatten().collect())
}

/// A cached writer of one table, for one incarnation of it.
pub(super) struct Writer {
    pub(super) incarnation: Incarnation,
    pub(super) kind: WriterKind,
    pub(super) row_type: Arc<RowType>,
    /// The Arrow form fluss-rs takes the rows in.
    pub(super) arrow_schema: SchemaRef,
}

pub(super) enum WriterKind {
    Append(AppendWriter),
    Upsert(UpsertWriter, Keys),
}

/// How a DELETE finds out whether Fluss's key-value store holds a key.
pub(super) struct Keys {
    /// The primary key's columns, by position in the Fluss row.
    pub(super) columns: Vec<usize>,
    /// The primary key's columns as a row type: what a lookup takes.
    pub(super) row_type: Arc<RowType>,
    /// Lookups run this many at a time; fluss-rs batches them per server.
    pub(super) lookupers: Vec<Mutex<Lookuper>>,
}

/// Concurrent key lookups of one DELETE.
pub(super) const LOOKUPERS: usize = 16;

/// What a cached writer was made for: the Fluss table (its id, which another
/// process's `DROP`/`CREATE` changes, and its schema) and the Paimon schema
/// its rows come in. A writer serves a write only while Fluss and Paimon
/// still have these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Incarnation {
    pub(super) table_id: i64,
    pub(super) schema_id: i32,
    pub(super) paimon_schema_id: i64,
}

impl Incarnation {
    pub(super) fn of(info: &TableInfo, table: &Table) -> Self {
        Self {
            table_id: info.get_table_id(),
            schema_id: info.get_schema_id(),
            paimon_schema_id: table.schema().id(),
        }
    }
}

/// A write that failed: whether any of its rows may have left this process,
/// and whether Fluss said the table is gone.
pub(super) struct SendFailure {
    pub(super) error: Error,
    pub(super) sent: bool,
    pub(super) gone: bool,
}

impl SendFailure {
    pub(super) fn before_sending(error: Error) -> Self {
        Self {
            error,
            sent: false,
            gone: false,
        }
    }
}

/// The connection's writer client, held open for good unless the write that
/// took it settles (each row it queued acknowledged).
///
/// fluss-rs 1.0 closes its writer client when the last handle to it goes
/// (the store dropped, as at the end of a process). Its sender task then
/// drains what is still queued before it polls any request in flight, and a
/// bucket whose queued batch waits behind a request in flight (as after a
/// tablet server restarted under a write) keeps it in that loop for ever,
/// never yielding: the task cannot be aborted, and the shutdown of its
/// runtime (the process's end) waits for it. A write that did not settle
/// (no answer within `lakestream.timeout`, an error, or the statement
/// cancelled) leaves the client open instead: its sender goes on sending and
/// retrying in the background, never closed, and ends with its runtime.
/// Nothing is said of those rows beyond the write's own error (their
/// outcome is unknown).
pub(super) struct Unsettled(Option<Box<dyn std::any::Any + Send + Sync>>);

impl Unsettled {
    pub(super) fn hold(connection: &FlussConnection) -> Self {
        Self(
            connection
                .get_or_create_writer_client()
                .ok()
                .map(|client| Box::new(client) as Box<dyn std::any::Any + Send + Sync>),
        )
    }

    /// Every row was answered: the client may close when the store goes.
    pub(super) fn settle(mut self) {
        self.0 = None;
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            ::log::debug!(
                target: FLUSS_LOG,
                "a write to Fluss did not settle: its writer client is left open so that \
                 closing it cannot hang this process"
            );
            std::mem::forget(client);
        }
    }
}

/// Since when a write's table may have changed.
pub(super) const WHILE_WRITING: &str = "while this write ran";

/// How a write whose table was dropped or created again before it sent
/// anything is tried again, with a new writer: two tries in all, at once.
const WRITE_AGAIN: Retry = Retry::immediately(2);

/// What a write whose table changed before it sent anything should do.
pub(super) const NOTHING_WRITTEN: &str = "nothing was written. Run the statement again";

/// What a write whose table changed after it sent rows should do.
pub(super) const SENT_TO_DROPPED: &str =
    "the rows it sent went with the dropped table, and none of them is \
     in the table now. Run the statement again to write them to the table as it is now";

/// A batch in the Arrow types fluss-rs takes for the table's columns of
/// `table`. A `BINARY(n)` value (fixed width in Fluss) of another length is
/// refused, naming the column: the cast would fail without saying which.
pub(super) fn conform(batch: &RecordBatch, schema: &SchemaRef, table: &str) -> Result<RecordBatch> {
    for (column, field) in batch.columns().iter().zip(schema.fields()) {
        if let arrow::datatypes::DataType::FixedSizeBinary(width) = field.data_type() {
            if let Some(length) = binary_length_other_than(column, *width) {
                return Err(Error::WriteNotApplied {
                    table: table.to_string(),
                    reason: format!(
                        "column '{}' is BINARY({width}), and a value of it has {length} bytes",
                        field.name()
                    ),
                });
            }
        }
    }
    // Nullability follows the data: fluss-rs checks NOT NULL columns itself.
    let fields: Vec<arrow::datatypes::Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let schema = Arc::new(arrow::datatypes::Schema::new(fields));
    crate::batch::cast_to(&schema, batch.columns().to_vec(), batch.num_rows())
        .map_err(|e| crate::store::store_error(IDENTIFIER, e))
}

/// The length of the first value of `column` (a binary column) that is not
/// `width` bytes long, if any.
fn binary_length_other_than(column: &arrow::array::ArrayRef, width: i32) -> Option<usize> {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;
    let width = usize::try_from(width).ok()?;
    let first = |lengths: &mut dyn Iterator<Item = Option<usize>>| {
        lengths.flatten().find(|&length| length != width)
    };
    match column.data_type() {
        DataType::Binary => {
            first(&mut column.as_binary::<i32>().iter().map(|v| v.map(<[u8]>::len)))
        }
        DataType::LargeBinary => {
            first(&mut column.as_binary::<i64>().iter().map(|v| v.map(<[u8]>::len)))
        }
        DataType::BinaryView => {
            first(&mut column.as_binary_view().iter().map(|v| v.map(<[u8]>::len)))
        }
        _ => None,
    }
}

impl FlussStore {
    /// The writer of the Fluss table that `table`'s path names now. Fluss's
    /// coordinator is asked which table that is on every write: a writer
    /// cached for an older incarnation (another process dropped and created
    /// the table again) or schema is dropped and a new one made.
    pub(super) async fn writer(&self, table: &Table, target: &Target) -> Result<Arc<Writer>> {
        let current = self.table_info(target).await?;
        self.writer_for(table, target, &current).await
    }

    /// [`Self::writer`], for `current`, the Fluss table as the coordinator
    /// just described it.
    pub(super) async fn writer_for(
        &self,
        table: &Table,
        target: &Target,
        current: &TableInfo,
    ) -> Result<Arc<Writer>> {
        let wanted = Incarnation::of(current, table);
        let mut writers = self.writers.lock().await;
        match writers.get(table.identifier()) {
            Some(writer) if writer.incarnation == wanted => return Ok(Arc::clone(writer)),
            Some(_) => {
                writers.remove(table.identifier());
            }
            None => {}
        }
        let shape = FlussShape::of(table)?;
        let fluss_table = target
            .table(
                &self.connection,
                current.get_table_id(),
                WHILE_WRITING,
                NOTHING_WRITTEN,
            )
            .await?;
        let info = fluss_table.get_table_info();
        if let Some(reason) = shape.mismatch(info) {
            return Err(FlussStoreError::Mismatch {
                table: target.name.clone(),
                reason,
            }
            .into());
        }
        let kind = if target.primary_key {
            let keys = info.get_primary_keys();
            let row_type = info.get_row_type();
            let columns = keys
                .iter()
                .map(|key| row_type.get_field_index(key))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "the Fluss table '{}' names primary key columns {keys:?} it does not have",
                        target.name
                    ))
                })?;
            let key_type = row_type
                .project_with_field_names(keys)
                .map_err(|e| target.fluss_error("write", e))?;
            let lookupers = (0..LOOKUPERS)
                .map(|_| {
                    fluss_table
                        .new_lookup()
                        .and_then(|l| l.create_lookuper())
                        .map(Mutex::new)
                })
                .collect::<fluss::error::Result<Vec<_>>>()
                .map_err(|e| target.fluss_error("write", e))?;
            WriterKind::Upsert(
                fluss_table
                    .new_upsert()
                    .and_then(|u| u.create_writer())
                    .map_err(|e| target.fluss_error("write", e))?,
                Keys {
                    columns,
                    row_type: Arc::new(key_type),
                    lookupers,
                },
            )
        } else {
            WriterKind::Append(
                fluss_table
                    .new_append()
                    .and_then(|a| a.create_writer())
                    .map_err(|e| target.fluss_error("write", e))?,
            )
        };
        let arrow_schema =
            schema::fluss_arrow_schema(&shape).map_err(|reason| FlussStoreError::Unsupported {
                table: target.name.clone(),
                reason,
            })?;
        let writer = Arc::new(Writer {
            incarnation: Incarnation::of(info, table),
            kind,
            row_type: Arc::new(info.get_row_type().clone()),
            arrow_schema,
        });
        writers.insert(table.identifier().clone(), Arc::clone(&writer));
        Ok(writer)
    }

    pub(super) async fn forget_writer(&self, identifier: &Identifier) {
        self.writers.lock().await.remove(identifier);
    }

    /// Forgets `writer` if it is still the one cached for `identifier`.
    pub(super) async fn forget_this_writer(&self, identifier: &Identifier, writer: &Arc<Writer>) {
        let mut writers = self.writers.lock().await;
        if writers
            .get(identifier)
            .is_some_and(|cached| Arc::ptr_eq(cached, writer))
        {
            writers.remove(identifier);
        }
    }

    /// Queues `batches` on `writer` and waits until Fluss acknowledged every
    /// row. Every batch is converted before the first is queued, so a batch
    /// that does not convert sends nothing.
    pub(super) async fn send(
        &self,
        target: &Target,
        writer: &Writer,
        kind: WriteKind,
        batches: &[RecordBatch],
    ) -> std::result::Result<u64, SendFailure> {
        let mut converted = Vec::new();
        let mut held = Vec::new();
        let mut rows = 0u64;
        for batch in batches {
            if batch.num_rows() == 0 {
                continue;
            }
            rows += batch.num_rows() as u64;
            let batch = conform(batch, &writer.arrow_schema, &target.name)
                .map_err(SendFailure::before_sending)?;
            if let (WriterKind::Upsert(_, keys), WriteKind::Delete) = (&writer.kind, kind) {
                held.push(
                    held_keys(target, keys, &batch)
                        .await
                        .map_err(SendFailure::before_sending)?,
                );
            }
            let batch = arrow_bridge::to_arrow59(&batch)
                .map_err(|e| SendFailure::before_sending(FlussStoreError::from(e).into()))?;
            converted.push(batch);
        }
        let mut pending = Vec::new();
        // Until every row queued is answered, the writer client must not close.
        let unsettled = Unsettled::hold(&self.connection);
        // Once a row is queued, fluss-rs may send it at any moment.
        let failed = |pending: &Vec<_>, e: fluss::error::Error| SendFailure {
            gone: is_gone(&e),
            sent: !pending.is_empty(),
            error: target.fluss_error("write", e),
        };
        for (index, batch) in converted.into_iter().enumerate() {
            match (&writer.kind, kind) {
                (WriterKind::Append(append), WriteKind::Append) => {
                    match append.append_arrow_batch(batch) {
                        Ok(queued) => pending.push(queued),
                        Err(e) => return Err(failed(&pending, e)),
                    }
                }
                (WriterKind::Upsert(upsert, _), WriteKind::Upsert | WriteKind::Delete) => {
                    let count = batch.num_rows();
                    let mut row = match ColumnarRow::new(
                        Arc::new(batch),
                        Arc::clone(&writer.row_type),
                        0,
                        None,
                    ) {
                        Ok(row) => row,
                        Err(e) => return Err(failed(&pending, e)),
                    };
                    for i in 0..count {
                        row.set_row_id(i);
                        // A delete of a key Fluss's key-value store does
                        // not hold (it reached Paimon some other way, as a
                        // load while the mode was off, or another writer
                        // deleted it meanwhile) changes nothing: tiering
                        // would never remove it from Paimon, and Fluss logs
                        // a batch without records. Such a key is sent as the
                        // row's upsert, then its delete, in one bucket in
                        // this order. A key it holds is sent as the delete
                        // alone: nothing to interrupt.
                        let unheld = held
                            .get(index)
                            .is_some_and(|held: &Vec<bool>| !held.get(i).copied().unwrap_or(false));
                        if kind == WriteKind::Delete && unheld {
                            match upsert.upsert(&row) {
                                Ok(queued) => pending.push(queued),
                                Err(e) => return Err(failed(&pending, e)),
                            }
                        }
                        let queued = if kind == WriteKind::Delete {
                            upsert.delete(&row)
                        } else {
                            upsert.upsert(&row)
                        };
                        match queued {
                            Ok(queued) => pending.push(queued),
                            Err(e) => return Err(failed(&pending, e)),
                        }
                    }
                }
                _ => {
                    return Err(SendFailure::before_sending(Error::Internal(format!(
                        "{kind:?} does not fit the Fluss table '{}'",
                        target.name
                    ))))
                }
            }
        }
        // Send now rather than when the batch timeout fires; each row's own
        // future then says whether Fluss acknowledged it.
        let sent = |error: Error| SendFailure {
            error,
            sent: true,
            gone: false,
        };
        let acknowledged = async {
            match &writer.kind {
                WriterKind::Append(append) => append.flush().await?,
                WriterKind::Upsert(upsert, _) => upsert.flush().await?,
            }
            futures::future::try_join_all(pending).await
        };
        match target.answer("write", acknowledged).await.map_err(sent)? {
            Ok(_) => {
                unsettled.settle();
                Ok(rows)
            }
            Err(e) => Err(SendFailure {
                gone: is_gone(&e),
                sent: true,
                error: target.fluss_error("write", e),
            }),
        }
    }

    /// Writes `batches` with the writer of the table as it is now. A write
    /// whose table was dropped or created again before it sent anything is
    /// tried once more with a new writer; one that had sent rows is not: its
    /// error says what happened to them.
    pub(super) async fn write_rows(
        &self,
        table: &Table,
        target: &Target,
        kind: WriteKind,
        batches: &[RecordBatch],
    ) -> Result<u64> {
        let written = WRITE_AGAIN
            .run_to_end(|| async {
                // A statement's rows are written only while Fluss tiers the
                // table: a crash while turning the mode off can leave its
                // tiering off, and a write racing a turn-off would strand its
                // rows.
                let writer = match self.table_info(target).await {
                    Ok(current) if !tiering_on(&current) => {
                        return Err(FlussStoreError::TieringOff {
                            table: target.name.clone(),
                        }
                        .into())
                    }
                    Ok(current) => self.writer_for(table, target, &current).await,
                    Err(e) => Err(e),
                };
                let writer = match writer {
                    Ok(writer) => writer,
                    Err(e) if is_replaced(&e) => return Ok(Try::Again(e)),
                    Err(e) => return Err(self.explain_missing(table, target, e, "written").await),
                };
                let failure = match self.send(target, &writer, kind, batches).await {
                    Ok(rows) => return Ok(Try::Done(rows)),
                    Err(failure) => failure,
                };
                // The next write opens the table afresh (the writer may be
                // broken).
                self.forget_this_writer(table.identifier(), &writer).await;
                match failure {
                    SendFailure {
                        error,
                        sent: false,
                        gone: true,
                    } => Ok(Try::Again(error)),
                    SendFailure {
                        error, sent: false, ..
                    } => Err(self.explain_missing(table, target, error, "written").await),
                    SendFailure {
                        error, gone: true, ..
                    } => Err(self.after_sending_to_gone(target, &writer, error).await),
                    SendFailure { error, .. } => Err(FlussStoreError::OutcomeUnknown {
                        table: target.name.clone(),
                        servers: target.servers.clone(),
                        cause: error.to_string(),
                    }
                    .into()),
                }
            })
            .await?;
        match written {
            Ok(rows) => Ok(rows),
            // Replaced again under the second writer: said as any other
            // failure of a write that sent nothing.
            Err(e) => Err(self.explain_missing(table, target, e, "written").await),
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, BinaryArray, FixedSizeBinaryArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn binary_batch(values: Vec<Option<&[u8]>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("b", DataType::Binary, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(BinaryArray::from(values))]).expect("a batch")
    }

    /// A `BINARY(n)` value of another length is refused, naming the column,
    /// before anything is sent; values of the length (and nulls) convert.
    #[test]
    fn a_binary_value_of_another_width_is_refused_by_column() {
        let fixed = Arc::new(Schema::new(vec![Field::new(
            "b",
            DataType::FixedSizeBinary(2),
            true,
        )]));
        let fine = conform(&binary_batch(vec![Some(b"ab"), None]), &fixed, "db.t")
            .expect("values of the width");
        let column = fine
            .column(0)
            .as_any()
            .downcast_ref::<FixedSizeBinaryArray>()
            .expect("fixed width");
        assert_eq!((column.value(0), column.null_count()), (&b"ab"[..], 1));

        let error = conform(&binary_batch(vec![Some(b"ab"), Some(b"a")]), &fixed, "db.t")
            .expect_err("a value one byte short")
            .to_string();
        assert!(error.contains("'db.t'"), "{error}");
        assert!(error.contains("column 'b' is BINARY(2)"), "{error}");
        assert!(error.contains("1 bytes"), "{error}");
        assert!(error.contains("nothing was written"), "{error}");
    }
}
