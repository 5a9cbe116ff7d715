//! Reading a Fluss table's log after the tiered lake snapshot: each bucket
//! from its start offset up to the end fixed at planning (bounded), or on
//! and on (follow).
//!
//! Log tables are read as Arrow batches. Primary-key tables are read as
//! change records, so each row keeps its change type: inserts and
//! update-afters become upserts, deletes become deletes, and update-befores
//! are dropped (the update-after that follows carries the new row).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{cast, take};
use arrow::datatypes::SchemaRef;
use fluss::client::{
    BoundedLogReadRange, FlussConnection, FlussTable, RecordBatchLogReader, EARLIEST_OFFSET,
};
use fluss::metadata::{TableBucket, TableInfo};
use fluss::record::{ChangeType, ScanRecord};
use futures::{Stream, StreamExt};

use super::arrow_bridge::{self, Batch59};
use super::error::FlussStoreError;
use super::probe::{probe_end, Probe};
use super::Target;
use crate::error::{Error, Result};
use crate::store::{ChangeBatch, ChangeStream, RowKind, StoreLog};

/// How long one poll of the cluster waits for data.
const POLL_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a bounded change read waits for records before it probes where
/// the stalled buckets' logs end.
const PROBE_AFTER: Duration = Duration::from_secs(1);

/// One bucket's part of a read: `[start, end)`; `end` is `None` when following.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BucketRange {
    pub(crate) bucket: i32,
    /// An offset, or `fluss::client::EARLIEST_OFFSET`.
    pub(crate) start: i64,
    pub(crate) end: i64,
}

impl BucketRange {
    /// Nothing to read: the bucket has no records, or none after `start`.
    fn is_empty(&self) -> bool {
        self.end <= 0 || (self.start >= 0 && self.start >= self.end)
    }
}

/// The log of one `t$rt` read, fixed at planning.
pub(crate) struct FlussLog {
    pub(crate) target: Arc<Target>,
    pub(crate) connection: Arc<FlussConnection>,
    pub(crate) table_id: i64,
    /// The coordinator's description of the table `table_id`, as planned.
    pub(crate) info: TableInfo,
    pub(crate) ranges: Vec<BucketRange>,
    /// The table's columns as the core gets them
    /// ([`crate::store::table_arrow_schema`]).
    pub(crate) schema: SchemaRef,
}

impl fmt::Debug for FlussLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlussLog")
            .field("table", &self.target.path)
            .field("ranges", &self.ranges)
            .finish_non_exhaustive()
    }
}

type BatchStream = std::pin::Pin<Box<dyn Stream<Item = Result<ChangeBatch>> + Send>>;

/// The stream `read` builds from what `setup` gives, once `setup` is done;
/// or `setup`'s error as the stream's only item.
fn after_setup<T, S, F>(setup: S, read: F) -> BatchStream
where
    S: std::future::Future<Output = Result<T>> + Send + 'static,
    F: FnOnce(T) -> BatchStream + Send + 'static,
{
    futures::stream::once(async move {
        match setup.await {
            Ok(ready) => read(ready),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    })
    .flatten()
    .boxed()
}

impl FlussLog {
    fn reader(&self, bounded: bool) -> BatchStream {
        let reader = LogReader {
            target: Arc::clone(&self.target),
            connection: Arc::clone(&self.connection),
            table_id: self.table_id,
            info: self.info.clone(),
            schema: Arc::clone(&self.schema),
        };
        let ranges: Vec<BucketRange> = if bounded {
            self.ranges
                .iter()
                .filter(|r| !r.is_empty())
                .copied()
                .collect()
        } else {
            // Following starts where the bounded read ended.
            self.ranges
                .iter()
                .map(|r| BucketRange {
                    bucket: r.bucket,
                    start: r.end,
                    end: i64::MAX,
                })
                .collect()
        };
        if bounded && ranges.is_empty() {
            return futures::stream::empty().boxed();
        }
        if self.target.primary_key {
            reader.changes(ranges, bounded)
        } else if bounded {
            reader.bounded_batches(ranges)
        } else {
            reader.following_batches(ranges)
        }
    }
}

impl StoreLog for FlussLog {
    fn read_bounded(&self) -> Result<ChangeStream> {
        Ok(self.reader(true))
    }

    fn bounded_is_empty(&self) -> bool {
        self.ranges.iter().all(BucketRange::is_empty)
    }

    fn follow(&self) -> Result<ChangeStream> {
        Ok(self.reader(false))
    }
}

/// What a running read needs.
#[derive(Clone)]
struct LogReader {
    target: Arc<Target>,
    connection: Arc<FlussConnection>,
    table_id: i64,
    info: TableInfo,
    schema: SchemaRef,
}

impl LogReader {
    /// Log tables, bounded: fluss-rs's bounded reader over the ranges.
    ///
    /// The reader works on the table as planned, whose buckets' leaders the
    /// planning's calls left in the connection's metadata: its first fetch
    /// goes out at once, alongside the check that the coordinator still names
    /// the planned table (see `overlap`). Fetches name the planned table id,
    /// so they never bring another table's rows.
    fn bounded_batches(self, ranges: Vec<BucketRange>) -> BatchStream {
        let this = self.clone();
        let setup = async move {
            let check = this.target.planned(&this.connection, this.table_id);
            let first = async {
                let table = FlussTable::new(
                    &this.connection,
                    this.connection.get_metadata(),
                    this.info.clone(),
                );
                let scanner = table
                    .new_scan()
                    .create_record_batch_log_scanner()
                    .map_err(|e| this.target.fluss_error("read the log of", e))?;
                let ranges = ranges
                    .iter()
                    .map(|r| BoundedLogReadRange {
                        bucket: TableBucket::new(this.table_id, r.bucket),
                        starting_offset: r.start,
                        stopping_offset: r.end,
                    })
                    .collect();
                let mut reader = this
                    .target
                    .bounded(
                        "read the log of",
                        RecordBatchLogReader::new_from_ranges(scanner, ranges),
                    )
                    .await?;
                let first = reader
                    .next_batch()
                    .await
                    .map_err(|e| this.target.fluss_error("read the log of", e))?;
                Ok((first, reader))
            };
            super::overlap::checked(check, first).await
        };
        after_setup(setup, move |(first, reader)| {
            futures::stream::iter(first.map(Ok))
                .chain(reader.into_stream())
                .map(move |batch| {
                    let batch = batch.map_err(|e| self.target.fluss_error("read the log of", e))?;
                    self.to_change_batch(batch.batch(), None)
                })
                .boxed()
        })
    }

    /// Log tables, following: a batch scanner polled until the stream is dropped.
    fn following_batches(self, ranges: Vec<BucketRange>) -> BatchStream {
        let this = self.clone();
        let setup = async move {
            let table = this.target.planned(&this.connection, this.table_id).await?;
            let scanner = table
                .new_scan()
                .create_record_batch_log_scanner()
                .map_err(|e| this.target.fluss_error("follow the log of", e))?;
            let offsets: HashMap<i32, i64> = ranges.iter().map(|r| (r.bucket, r.start)).collect();
            this.target
                .bounded("follow the log of", scanner.subscribe_buckets(&offsets))
                .await?;
            Ok(scanner)
        };
        after_setup(setup, move |scanner| {
            futures::stream::unfold((scanner, self), |(scanner, this)| async move {
                let polled = scanner.poll(POLL_TIMEOUT).await;
                let batches: Vec<Result<ChangeBatch>> = match polled {
                    Ok(batches) => batches
                        .iter()
                        .map(|b| this.to_change_batch(b.batch(), None))
                        .collect(),
                    Err(e) => {
                        vec![Err(this.target.fluss_error("follow the log of", e))]
                    }
                };
                Some((futures::stream::iter(batches), (scanner, this)))
            })
            .flatten()
            .boxed()
        })
    }

    /// Primary-key tables: change records, bounded or following.
    fn changes(self, ranges: Vec<BucketRange>, bounded: bool) -> BatchStream {
        let this = self.clone();
        let setup = async move {
            let table = this.target.planned(&this.connection, this.table_id).await?;
            let scanner = table
                .new_scan()
                .create_log_scanner()
                .map_err(|e| this.target.fluss_error("read the changes of", e))?;
            let offsets: HashMap<i32, i64> = ranges.iter().map(|r| (r.bucket, r.start)).collect();
            this.target
                .bounded("read the changes of", scanner.subscribe_buckets(&offsets))
                .await?;
            let ends: HashMap<i32, i64> = ranges.iter().map(|r| (r.bucket, r.end)).collect();
            let next: HashMap<i32, i64> = ranges.iter().map(|r| (r.bucket, r.start)).collect();
            Ok((scanner, ends, next))
        };
        after_setup(setup, move |(scanner, ends, next)| {
            let state = ChangeState {
                scanner,
                ends,
                next,
                bounded,
                idle: Duration::ZERO,
                probed: Duration::ZERO,
            };
            futures::stream::unfold((state, self), |(mut state, this)| async move {
                if state.bounded && state.ends.is_empty() {
                    return None;
                }
                let batches = this.poll_changes(&mut state).await;
                Some((futures::stream::iter(batches), (state, this)))
            })
            .flatten()
            .boxed()
        })
    }

    /// One poll of a change scanner, as change batches in offset order per bucket.
    async fn poll_changes(&self, state: &mut ChangeState) -> Vec<Result<ChangeBatch>> {
        let polled = match state.scanner.poll(POLL_TIMEOUT).await {
            Ok(polled) => polled,
            Err(e) => {
                state.ends.clear();
                return vec![Err(self.target.fluss_error("read the changes of", e))];
            }
        };
        if polled.is_empty() && state.bounded {
            state.idle += POLL_TIMEOUT;
            // A bucket whose log ends in batches without records (Fluss
            // writes one when a write changed nothing, e.g. a delete of a key
            // it does not hold) never brings a record at `end - 1`: once the
            // scanner stalls, a probe finds out whether records are still to
            // come or the log holds none before the end.
            if state.idle >= state.probed + PROBE_AFTER {
                let probing = std::time::Instant::now();
                let mut out = Vec::new();
                let pending: Vec<(i32, i64)> = state.ends.iter().map(|(b, e)| (*b, *e)).collect();
                for (bucket, end) in pending {
                    let next = state.next.get(&bucket).copied().unwrap_or(EARLIEST_OFFSET);
                    match probe_end(
                        &self.target,
                        &self.connection,
                        self.table_id,
                        bucket,
                        next,
                        end,
                    )
                    .await
                    {
                        Ok(Probe::Done) => {
                            state.ends.remove(&bucket);
                            if let Err(e) = state.scanner.unsubscribe(bucket).await {
                                out.push(Err(self.target.fluss_error("read the changes of", e)));
                            }
                        }
                        Ok(Probe::Pending | Probe::Unknown) => {}
                        Err(e) => {
                            state.ends.clear();
                            return vec![Err(e)];
                        }
                    }
                }
                // Probes take time too: the request timeout bounds it all.
                state.idle += probing.elapsed();
                state.probed = state.idle;
                if !out.is_empty() || state.ends.is_empty() {
                    state.idle = Duration::ZERO;
                    state.probed = Duration::ZERO;
                    return out;
                }
            }
            // A bounded read that makes no progress for the request timeout
            // fails rather than waiting forever for offsets that never come.
            if state.idle >= self.target.request_timeout {
                let buckets: Vec<String> = state
                    .ends
                    .iter()
                    .map(|(bucket, end)| {
                        let next = state.next.get(bucket).copied().unwrap_or(EARLIEST_OFFSET);
                        format!("bucket {bucket} from offset {next} up to offset {end}")
                    })
                    .collect();
                state.ends.clear();
                return vec![Err(self.target.unavailable(
                    "read the changes of",
                    format!(
                        "no records arrived for {:?} before the end fixed at planning ({}). \
                        Where no record precedes them, batches without records (Fluss logs one \
                        when a write changed nothing, e.g. another client's delete of a key it \
                        does not hold) do not show where the log ends. Once a write that \
                        changes a row reaches the table, run the query again",
                        self.target.request_timeout,
                        buckets.join(", ")
                    ),
                ))];
            }
            return Vec::new();
        }
        state.idle = Duration::ZERO;
        let mut out = Vec::new();
        let mut done = Vec::new();
        for (bucket, records) in polled.into_records_by_buckets() {
            let id = bucket.bucket_id();
            let end = if state.bounded {
                match state.ends.get(&id) {
                    Some(end) => *end,
                    None => continue,
                }
            } else {
                i64::MAX
            };
            let kept: Vec<&ScanRecord> = records.iter().filter(|r| r.offset() < end).collect();
            if let Some(last) = records.iter().map(ScanRecord::offset).max() {
                state.next.insert(id, last + 1);
            }
            if records.iter().any(|r| r.offset() >= end - 1) {
                done.push(id);
            }
            out.extend(self.records_to_batches(&kept));
        }
        for id in done {
            state.ends.remove(&id);
            if let Err(e) = state.scanner.unsubscribe(id).await {
                out.push(Err(self.target.fluss_error("read the changes of", e)));
            }
        }
        out
    }

    /// Change records as change batches: consecutive records of one fetched
    /// batch become one `take` from it.
    fn records_to_batches(&self, records: &[&ScanRecord]) -> Vec<Result<ChangeBatch>> {
        let mut out = Vec::new();
        let mut start = 0;
        while start < records.len() {
            let Some(source) = records[start].row().get_record_batch() else {
                out.push(Err(Error::Internal(
                    "a Fluss change record has no Arrow batch behind it".to_string(),
                )));
                return out;
            };
            let mut end = start;
            while end < records.len()
                && records[end]
                    .row()
                    .get_record_batch()
                    .is_some_and(|b| std::ptr::eq(b, source))
            {
                end += 1;
            }
            let mut rows = Vec::new();
            let mut kinds = Vec::new();
            for record in &records[start..end] {
                let kind = match record.change_type() {
                    ChangeType::AppendOnly | ChangeType::Insert | ChangeType::UpdateAfter => {
                        RowKind::Upsert
                    }
                    ChangeType::Delete => RowKind::Delete,
                    ChangeType::UpdateBefore => continue,
                };
                rows.push(record.row().get_row_id());
                kinds.push(kind);
            }
            if !rows.is_empty() {
                out.push(self.to_change_batch(source, Some((rows, kinds))));
            }
            start = end;
        }
        out
    }

    /// A fluss-rs batch (optionally some of its rows, with their kinds;
    /// otherwise all of its rows, as upserts) as the core's change batch.
    fn to_change_batch(
        &self,
        batch: &Batch59,
        rows: Option<(Vec<usize>, Vec<RowKind>)>,
    ) -> Result<ChangeBatch> {
        let batch = arrow_bridge::from_arrow59(batch)
            .map_err(|e| crate::store::store_error(super::IDENTIFIER, e))?;
        let (batch, kinds) = match rows {
            Some((rows, kinds)) => {
                let indices = rows
                    .iter()
                    .map(|r| u32::try_from(*r).ok())
                    .collect::<UInt32Array>();
                let columns = batch
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &indices, None))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| crate::store::store_error(super::IDENTIFIER, e))?;
                (columns, Some(kinds))
            }
            None => (batch.columns().to_vec(), None),
        };
        let fields = self.schema.fields();
        if batch.len() < fields.len() {
            return Err(Error::Internal(format!(
                "a Fluss batch of '{}' has {} columns, the table has {}",
                self.target.path,
                batch.len(),
                fields.len()
            )));
        }
        let columns: Vec<ArrayRef> = batch
            .iter()
            .zip(fields.iter())
            .map(|(column, field)| {
                if column.data_type() == field.data_type() {
                    Ok(Arc::clone(column))
                } else {
                    cast(column, field.data_type())
                }
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| crate::store::store_error(super::IDENTIFIER, e))?;
        let rows = RecordBatch::try_new(Arc::clone(&self.schema), columns)
            .map_err(|e| crate::store::store_error(super::IDENTIFIER, e))?;
        match kinds {
            Some(kinds) => ChangeBatch::try_new(rows, kinds).map_err(|source| {
                FlussStoreError::ChangeBatch {
                    table: self.target.name.clone(),
                    source,
                }
                .into()
            }),
            None => Ok(ChangeBatch::upserts(rows)),
        }
    }
}

struct ChangeState {
    scanner: fluss::client::LogScanner,
    /// Buckets still to finish, with their end offsets (bounded reads).
    ends: HashMap<i32, i64>,
    /// Per bucket, the first offset whose record has not arrived yet.
    next: HashMap<i32, i64>,
    bounded: bool,
    /// How long the scanner has brought nothing.
    idle: Duration,
    /// `idle` when the stalled buckets were last probed.
    probed: Duration,
}
