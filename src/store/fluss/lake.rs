//! Which Paimon snapshot a `t$rt` read starts from, and the log offsets
//! that go with it.
//!
//! Fluss reports the lake snapshot its tiering committed last, with the log
//! offset it reached per bucket. Every other commit to the Paimon table (a
//! plain load while the mode was off, a compaction, an expiry) adds no
//! Fluss rows: a snapshot committed after the reported one by anyone but
//! Fluss's tiering holds the same Fluss rows as the reported one, so the
//! read starts from the newest such snapshot with the reported offsets, and
//! sees rows loaded into Paimon directly as `t` does. A snapshot that
//! Fluss's tiering committed after the reported one holds more of the log
//! than the reported offsets say; the read stops below it (the next read
//! sees it, once Fluss reports it).

use std::collections::HashMap;

use fluss::metadata::LakeSnapshotInfo;
use paimon::table::Table;

use super::schema::TIERING_COMMIT_USER;
use super::{Target, IDENTIFIER};
use crate::error::Result;

/// Fluss's log ends before the offsets its lake snapshot says it tiered.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read '{table}' from Fluss ({servers}): the log ends before the offsets that Fluss's \
     lake snapshot {snapshot_id} says it tiered ({buckets}). Fluss lost the end of its log (e.g. a \
     tablet server restarted without it), and rows written after those offsets may be lost. Read \
     `{table}` (the Paimon table) for what was tiered"
)]
pub struct LogBehindLake {
    /// The table's full name.
    pub table: String,
    /// The bootstrap servers.
    pub servers: String,
    /// The lake snapshot Fluss reported.
    pub snapshot_id: i64,
    /// The buckets, their tiered offsets and log ends.
    pub buckets: String,
}

/// The newest Paimon snapshot that holds exactly the Fluss rows of the lake
/// snapshot `tiered` (committed by Fluss's tiering): `tiered`, or a later one
/// committed by others with no tiering commit between them.
pub(crate) async fn read_snapshot(table: &Table, tiered: i64) -> Result<i64> {
    let snapshots = table.snapshot_manager();
    let Some(latest) = snapshots.get_latest_snapshot_id().await? else {
        return Ok(tiered);
    };
    let Some(earliest) = snapshots.earliest_snapshot_id().await? else {
        return Ok(tiered);
    };
    if latest <= tiered {
        return Ok(tiered);
    }
    // When `tiered` itself expired, the walk starts at the oldest snapshot
    // kept: a tiering commit after `tiered` would be the one Fluss reports.
    let first = tiered.max(earliest - 1);
    let mut chosen = (first >= earliest).then_some(first);
    for id in first + 1..=latest {
        let snapshot = snapshots.get_snapshot(id).await?;
        if snapshot.commit_user() == TIERING_COMMIT_USER {
            break;
        }
        chosen = Some(id);
    }
    match chosen {
        Some(id) if id >= earliest => Ok(id),
        _ => Err(crate::store::store_error(
            IDENTIFIER,
            format!(
                "the Paimon snapshot {tiered} that Fluss's lake snapshot names has expired, and \
                 the oldest one kept ({earliest}) was committed by Fluss's tiering after it: \
                 read '{}' again once Fluss reports its newer lake snapshot",
                table.identifier().full_name()
            ),
        )),
    }
}

/// The log offset a lake snapshot says tiering reached, per bucket (of a
/// table without partitions).
pub(crate) fn tiered_offsets(lake: &LakeSnapshotInfo) -> HashMap<i32, i64> {
    lake.bucket_snapshots
        .iter()
        .filter(|b| b.partition_id.is_none())
        .filter_map(|b| b.log_offset.map(|o| (b.bucket_id, o)))
        .collect()
}

/// The buckets whose `tiered` offset is past the log's end in `ends`: each
/// with that offset and the end.
pub(crate) fn past_ends(
    tiered: &HashMap<i32, i64>,
    ends: &HashMap<i32, i64>,
) -> Vec<(i32, i64, i64)> {
    tiered
        .iter()
        .filter_map(|(bucket, offset)| {
            let end = ends.get(bucket).copied().unwrap_or(0);
            (*offset > end).then_some((*bucket, *offset, end))
        })
        .collect()
}

/// Refuses tiered offsets past the end of the log: Fluss's log lost rows
/// that its lake snapshot says it tiered (its tail was lost, e.g. when a
/// tablet server restarted without it), and a read from there would
/// silently miss every row written since.
pub(crate) fn check_offsets(
    target: &Target,
    snapshot_id: i64,
    tiered: &HashMap<i32, i64>,
    ends: &HashMap<i32, i64>,
) -> Result<()> {
    let mut beyond = past_ends(tiered, ends);
    if beyond.is_empty() {
        return Ok(());
    }
    beyond.sort_unstable();
    let buckets: Vec<String> = beyond
        .iter()
        .map(|(bucket, offset, end)| {
            format!("bucket {bucket}: tiered up to offset {offset}, the log ends at {end}")
        })
        .collect();
    // Stored state that does not verify: Fluss lost rows it said it had.
    Err(crate::store::store_error_of_kind(
        IDENTIFIER,
        crate::error::ErrorKind::Corrupt,
        LogBehindLake {
            table: target.name.clone(),
            servers: target.servers.clone(),
            snapshot_id,
            buckets: buckets.join("; "),
        },
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fluss::metadata::TablePath;

    use super::*;

    fn target() -> Target {
        Target {
            path: TablePath::new("db", "t"),
            name: "db.t".to_string(),
            servers: "127.0.0.1:9123".to_string(),
            request_timeout: Duration::from_secs(30),
            primary_key: true,
            planned: true,
        }
    }

    #[test]
    fn tiered_offsets_up_to_the_log_end_are_read() {
        let tiered = HashMap::from([(0, 5), (1, 0)]);
        let ends = HashMap::from([(0, 5), (1, 3)]);
        assert!(check_offsets(&target(), 7, &tiered, &ends).is_ok());
    }

    #[test]
    fn tiered_offsets_past_the_log_end_are_refused() {
        let tiered = HashMap::from([(0, 9), (1, 2), (2, 4)]);
        let ends = HashMap::from([(0, 5), (1, 3)]);
        let error = check_offsets(&target(), 7, &tiered, &ends)
            .expect_err("offsets past the end")
            .to_string();
        assert!(error.contains("'db.t'"), "{error}");
        assert!(error.contains("127.0.0.1:9123"), "{error}");
        assert!(error.contains("lake snapshot 7"), "{error}");
        assert!(
            error.contains("bucket 0: tiered up to offset 9, the log ends at 5"),
            "{error}"
        );
        assert!(
            error.contains("bucket 2: tiered up to offset 4, the log ends at 0"),
            "{error}"
        );
        assert!(!error.contains("bucket 1"), "{error}");
    }
}
