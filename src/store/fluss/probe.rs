//! Where a bucket's log ends, for a bounded change read whose scanner stalls.
//!
//! A bounded read of a primary-key table's changes ends a bucket when a
//! record at or past `end - 1` arrives. Fluss writes a batch without records
//! when a write changed nothing (a delete of a key its key-value store does
//! not hold, from any client): such a batch takes an offset but carries no
//! record, so a log that ends in one never brings that record. fluss-rs's
//! change scanner does not say how far it has read (its Arrow-batch scanner
//! would, but refuses primary-key tables), so a probe finds out: a second
//! change scanner over the same bucket. It never ends a bucket early:
//!
//! - a record in `[next, end)` means records are still to come (the read's
//!   scanner brings them);
//! - a record at or past `end`, with none in `[next, end)` before it, shows
//!   that the rest of the range holds none (a bucket's records arrive in
//!   order);
//! - a record before `next` (a *sentinel*, found by starting the probe a
//!   little before `next`) shows that a fetch answered after the read was
//!   planned has arrived. Fluss answers a fetch with every batch from its
//!   offset up to the log's end at that moment (which is at or past `end`),
//!   up to `client.scanner.log.fetch.max-bytes-for-bucket` or the end of a
//!   log segment; once that answer is read, and the next answer (which Fluss
//!   gives at once when the log has more before its end) brought nothing
//!   within a settling time, and the bucket's leader says its log reaches
//!   `end` (a leader just elected may not yet have every record before it),
//!   no record lies in `[next, end)`. The read's own scanner has found none
//!   for a second by then as well. This rests on timing as well as on
//!   records: docs/fluss.md says so.
//!
//! Anything else is [`Probe::Unknown`]: the read keeps waiting. That is the
//! case of a log with no record at all before its tail of batches without
//! records (no sentinel): the read fails after the request timeout, and
//! reads succeed again once any write that changes a row reaches the table.
//! This store's own writes never log a batch without records (see
//! `FlussStore::send`).

use std::time::Duration;

use fluss::client::{FlussConnection, EARLIEST_OFFSET};
use fluss::rpc::message::OffsetSpec;

use super::{Coordinated, Target};
use crate::error::Result;

/// How long one poll of a probe waits.
const PROBE_POLL: Duration = Duration::from_millis(300);
/// How long one probe from one offset may take.
const PROBE_TIME: Duration = Duration::from_secs(3);
/// How long a probe waits for more after the answer with its sentinel.
const SETTLE: Duration = Duration::from_secs(2);

/// What a probe found out about `[next, end)` of a bucket's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// No record lies in `[next, end)`: the bucket is read.
    Done,
    /// A record lies in `[next, end)`: the change scanner will bring it.
    Pending,
    /// Nothing sure.
    Unknown,
}

/// Where to start probing for `next`: just before it (the record the read
/// saw last, or the last one tiering took), then further back, so that a
/// record before `next` shows the probe's fetch was answered.
fn probe_starts(next: i64) -> Vec<i64> {
    if next <= 0 {
        // Nothing before `next`: no sentinel; the position alone may tell.
        return vec![if next < 0 { EARLIEST_OFFSET } else { 0 }];
    }
    let mut starts: Vec<i64> = [1, 16, 1024]
        .iter()
        .map(|back| (next - back).max(0))
        .collect();
    starts.dedup();
    starts
}

/// Probes `[next, end)` of `bucket` of the Fluss table `table_id`.
pub(crate) async fn probe_end(
    target: &Target,
    connection: &FlussConnection,
    table_id: i64,
    bucket: i32,
    next: i64,
    end: i64,
) -> Result<Probe> {
    if next >= end {
        return Ok(Probe::Done);
    }
    for from in probe_starts(next) {
        match probe_from(target, connection, table_id, bucket, from, next, end).await? {
            Probe::Unknown => continue,
            sure => return Ok(sure),
        }
    }
    Ok(Probe::Unknown)
}

/// One probe, its scanner subscribed at `from`.
async fn probe_from(
    target: &Target,
    connection: &FlussConnection,
    table_id: i64,
    bucket: i32,
    from: i64,
    next: i64,
    end: i64,
) -> Result<Probe> {
    let table = target.planned(connection, table_id).await?;
    let scanner = table
        .new_scan()
        .create_log_scanner()
        .map_err(|e| target.fluss_error("probe the log of", e))?;
    target
        .bounded("probe the log of", scanner.subscribe(bucket, from))
        .await?;
    let deadline = tokio::time::Instant::now() + PROBE_TIME;
    // Since when the probe has brought nothing after its last sentinel.
    let mut quiet_since: Option<tokio::time::Instant> = None;
    loop {
        // A probe that fails (e.g. `from` is no longer in the log) is not
        // sure of anything; the read goes on.
        let Ok(polled) = scanner.poll(PROBE_POLL).await else {
            return Ok(Probe::Unknown);
        };
        if polled.is_empty() {
            // Every record of the answer that brought the sentinel is read.
            // The probe waits a little longer for the next answer, which
            // Fluss gives at once while the log has more before its end (an
            // answer stops at the end of a log segment).
            if quiet_since.is_some_and(|since| since.elapsed() >= SETTLE) {
                // The answer came from the bucket's leader as it is now. One
                // just elected may not have every record before `end` yet
                // (its high watermark is behind), and answers only up to
                // what it has: then nothing is sure.
                return Ok(if leader_has(connection, target, bucket, end).await {
                    Probe::Done
                } else {
                    Probe::Unknown
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Probe::Unknown);
            }
            continue;
        }
        for (_, records) in polled
            .into_records_by_buckets()
            .into_iter()
            .filter(|(b, _)| b.bucket_id() == bucket)
        {
            for offset in records.iter().map(|r| r.offset()) {
                if offset >= end {
                    return Ok(Probe::Done);
                }
                if next < 0 || offset >= next {
                    return Ok(Probe::Pending);
                }
                quiet_since = Some(tokio::time::Instant::now());
            }
        }
    }
}

/// Whether the bucket's log, as its leader serves it now, reaches `end`
/// (its latest offset, the high watermark, is at or past it).
async fn leader_has(connection: &FlussConnection, target: &Target, bucket: i32, end: i64) -> bool {
    let Ok(admin) = connection.admin().await else {
        return false;
    };
    let latest = target
        .bounded(
            "find the latest offsets of",
            admin.list_offsets(&target.path, &[bucket], OffsetSpec::Latest),
        )
        .await;
    matches!(latest, Ok(offsets) if offsets.get(&bucket).is_some_and(|latest| *latest >= end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_start_before_next() {
        assert_eq!(probe_starts(EARLIEST_OFFSET), vec![EARLIEST_OFFSET]);
        assert_eq!(probe_starts(0), vec![0]);
        assert_eq!(probe_starts(1), vec![0]);
        assert_eq!(probe_starts(10), vec![9, 0]);
        assert_eq!(probe_starts(2000), vec![1999, 1984, 976]);
    }
}
