//! The background tierer: one task per table written in this process,
//! which checks the table every `local.tier-interval` and runs a round
//! when it is due, backing off while rounds fail.
//!
//! Invariants it keeps:
//!
//! - **Due from the files.** Whether a round is due is read from the log's
//!   listing ([`super::table`]'s backlog), never from what this process
//!   wrote: other processes write the same tables.
//! - **One task per table and process** (`Inner::tiering`), ending when the
//!   store is dropped or the table stops being a lake-stream table.
//! - **Failures are seen, not repeated every tick.** A failed round is a
//!   warning, and the wait before the next doubles up to `tier-max-delay`.
//! - Maintenance after a round runs under the table's tiering locks.

use std::sync::{Arc, Weak};
use std::time::Duration;

use paimon::catalog::Identifier;
use paimon::table::Table;

use super::table::TableState;
use super::{Inner, TIERING_LOG};
use crate::error::{Error, Result};
use crate::maintenance;
use crate::options;
use crate::retry::Retry;
use crate::store::TierReport;

/// Checks one table every `interval` while the store lives and the table is
/// a lake-stream table, and tiers it when a round is due (see
/// [`Inner::due`]).
///
/// A round that fails is logged (`log` target [`TIERING_LOG`], a warning
/// naming the table, its location and the error), and the next is tried
/// after a wait that doubles with each failure in a row, up to
/// `tier-max-delay` (see [`Backoff`]): a failure that lasts (a damaged
/// segment, a warehouse that refuses writes) neither goes unseen nor
/// repeats its work every tick. After a failure the next round runs when
/// its wait is over, due or not, and the first that works is logged as
/// information. A round that committed its rows and then failed its
/// maintenance (compaction, expiry) is a warning that says so, and no
/// failure of tiering.
async fn background_tiering(store: Weak<Inner>, identifier: Identifier, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut backoff = Backoff::default();
    loop {
        let now = ticker.tick().await;
        let Some(store) = store.upgrade() else { return };
        if !backoff.due(now) {
            continue;
        }
        let name = identifier.full_name();
        let cap = store.options.tier_max_delay;
        let table = match store.catalog.get_table(&identifier).await {
            Ok(table) if options::is_enabled(table.schema().options()) => table,
            // Dropped or turned off: this tierer's work is over.
            Ok(_) | Err(paimon::Error::TableNotExist { .. }) => break,
            Err(e) => {
                let what = format!("'{name}' (loading the table)");
                backoff.failed(&name, &what, &e.into(), (now, interval, cap));
                continue;
            }
        };
        // A failure leaves everything in place for the next round.
        let round = match backoff.failures {
            0 => match store.due(&table).await {
                Ok(true) => store.tier(&table).await.map(Some),
                Ok(false) => Ok(None),
                Err(e) => Err(e),
            },
            _ => store.tier(&table).await.map(Some),
        };
        let what = format!("'{name}' ({})", table.location());
        match round {
            Ok(Some(report)) => backoff.worked(&what, report.rows),
            Ok(None) => {}
            Err(e @ Error::MaintenanceFailed { .. }) => backoff.maintenance_failed(&what, &e),
            Err(e) => backoff.failed(&name, &what, &e, (now, interval, cap)),
        }
    }
    if let Some(store) = store.upgrade() {
        store
            .tiering
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&identifier);
        // A write made while this tierer was ending (the mode turned on
        // again since it looked) found it still running and started none:
        // one more look, once it is gone, starts the next one.
        if let Ok(table) = store.catalog.get_table(&identifier).await {
            if options::is_enabled(table.schema().options()) {
                store.ensure_tiering(&identifier);
            }
        }
    }
}

/// How a table's background tierer spaces its rounds while they fail: after
/// the `n`th failure in a row it waits `interval * 2^(n-1)`, at most
/// `tier-max-delay` (and never less than `interval`).
#[derive(Debug, Default)]
struct Backoff {
    /// Failures in a row.
    failures: u32,
    /// No round before this.
    until: Option<tokio::time::Instant>,
}

impl Backoff {
    fn due(&self, now: tokio::time::Instant) -> bool {
        self.until.is_none_or(|until| now >= until)
    }

    /// The wait after the `failures`th failure in a row: the pause a
    /// [`Retry`] growing from `interval` to `cap` makes before the next try.
    fn wait(failures: u32, interval: Duration, cap: Duration) -> Duration {
        Retry::growing(u32::MAX, interval, cap).pause_before(failures.saturating_add(1))
    }

    /// Records a failure to tier table `name` (described as `what`) in the
    /// round of the tick at `now`, and logs it.
    fn failed(
        &mut self,
        name: &str,
        what: &str,
        error: &Error,
        (now, interval, cap): (tokio::time::Instant, Duration, Duration),
    ) {
        self.failures = self.failures.saturating_add(1);
        let wait = Self::wait(self.failures, interval, cap);
        self.until = Some(now + wait);
        log::warn!(
            target: TIERING_LOG,
            "background tiering of {what} failed ({} in a row, next try in {}): {error}. Until \
             a round works, the rows waiting in the store are not in '{name}'; `CALL \
             sys.lakestream_tier('{name}')` runs a round and returns its error",
            self.failures,
            humantime(wait),
        );
    }

    /// Records a round that worked, and logs it if rounds failed before.
    fn worked(&mut self, what: &str, rows: u64) {
        if self.failures > 0 {
            log::info!(
                target: TIERING_LOG,
                "background tiering of {what} works again after {}: it tiered {rows} rows",
                rounds(self.failures),
            );
        }
        *self = Self::default();
    }

    /// Records a round that committed its rows, then failed the
    /// maintenance after the commit, and logs it.
    fn maintenance_failed(&mut self, what: &str, error: &Error) {
        log::warn!(
            target: TIERING_LOG,
            "background tiering of {what}: {error}. The rows it tiered are in the table; the \
             maintenance runs again after the next round that commits, or with `CALL sys.compact`"
        );
        *self = Self::default();
    }
}

/// `n` failed rounds, in words.
fn rounds(n: u32) -> String {
    match n {
        1 => "1 failed round".to_string(),
        n => format!("{n} failed rounds"),
    }
}

/// `duration` as `250ms`, `20s` or `3min`.
fn humantime(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 || !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) {
        format!("{}min", ms / 60_000)
    } else {
        format!("{}s", ms / 1000)
    }
}

impl Inner {
    /// Starts the background tierer of `table` in this process, once.
    pub(super) fn ensure_tiering(self: &Arc<Self>, identifier: &Identifier) {
        let Some(interval) = self.options.tier_interval else {
            return;
        };
        let first = self
            .tiering
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(identifier.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if first {
            let weak = Arc::downgrade(self);
            runtime.spawn(background_tiering(weak, identifier.clone(), interval));
        }
    }

    /// Whether the background tierer should tier `table` now: the rows
    /// Paimon lacks reach `local.tier-target-size` on disk, or the oldest
    /// of them has waited `local.tier-max-delay`. Both come from the
    /// store's files (the log's listing), never from what this process
    /// wrote: other processes write the same tables.
    async fn due(&self, table: &Table) -> Result<bool> {
        let waiting = TableState::of(&self.root, table.identifier())
            .waiting(table)
            .await?;
        Ok(waiting.due(
            self.options.tier_target_size,
            self.options.tier_max_delay,
            crate::clock::now_ms_signed(),
        ))
    }

    /// Tiers `table` (first removing what killed writers left in its store
    /// table once a day old: [`leftovers`]), then, when the round
    /// committed, runs the maintenance
    /// after a commit ([`maintenance::after_commit`]: what the table's
    /// `lakestream.maintenance` lists, past Paimon's thresholds) under the
    /// table's tiering locks, as `CALL`ed maintenance does. A
    /// compaction or expiry that fails leaves the table readable, and says
    /// so after what the tiering did.
    pub(super) async fn tier(&self, table: &Table) -> Result<TierReport> {
        let state = TableState::of(&self.root, table.identifier());
        let report = state
            .tier(
                table,
                &self.options.s3,
                self.options.tier_max_rows,
                // Paimon's writers buffer a few segments' worth at most.
                self.options.segment_size.saturating_mul(2),
                self.options.log_retention,
            )
            .await?;
        if report.commits == 0 {
            return Ok(report);
        }
        let failed = |what: &str, e: Error| {
            maintenance_failed(table.identifier().full_name(), &report, what, e)
        };
        let auto = options::AutoMaintenance::of_table(
            &table.identifier().full_name(),
            table.schema().options(),
        )
        .map_err(|e| failed("reading its maintenance option", e))?;
        state
            // Boxed: maintenance futures are large, and a caller's stack in
            // a debug build is not.
            .with_tiering_lock(Box::pin(async {
                Ok(maintenance::after_commit(table, auto).await)
            }))
            .await
            .map_err(|e| failed("taking the tiering lock for maintenance", e))?
            .map_err(|f| failed(f.step, f.error))?;
        Ok(report)
    }
}

/// The error of a round that committed its rows (`report`), then failed
/// `what` of the maintenance after the commit.
fn maintenance_failed(table: String, report: &TierReport, what: &str, e: Error) -> Error {
    Error::MaintenanceFailed {
        table,
        reason: format!(
            "tiering committed {} rows in {} snapshots up to position {}, then {what} failed \
             (the next round tries again): {e}",
            report.rows, report.commits, report.position
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_rounds_wait_twice_as_long_each_time_up_to_the_cap() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (1..=6)
            .map(|n| Backoff::wait(n, ms(100), ms(1_000)))
            .collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1_000), ms(1_000)]
        );
        // Never shorter than the interval, however small the cap; no
        // overflow after very many failures.
        assert_eq!(Backoff::wait(3, ms(100), ms(0)), ms(100));
        assert_eq!(
            Backoff::wait(u32::MAX, Duration::from_secs(5), Duration::from_secs(180)),
            Duration::from_secs(180)
        );
        assert_eq!(humantime(ms(250)), "250ms");
        assert_eq!(humantime(ms(20_000)), "20s");
        assert_eq!(humantime(ms(180_000)), "3min");
        assert_eq!(humantime(ms(1_500)), "1500ms");
    }

    /// The message of a maintenance failure after a round is one sentence,
    /// with no run of spaces where the source continued a line.
    #[test]
    fn a_maintenance_failure_after_a_round_reads_as_one_sentence() {
        let report = TierReport {
            rows: 3,
            commits: 1,
            position: 7,
        };
        let error = maintenance_failed(
            "db.t".to_string(),
            &report,
            "compacting",
            Error::Internal("disk full".to_string()),
        );
        let text = error.to_string();
        assert!(
            text.contains(
                "tiering committed 3 rows in 1 snapshots up to position 7, then compacting \
                 failed (the next round tries again)"
            ),
            "{text}"
        );
        assert!(!text.contains("  "), "a run of spaces: {text}");
    }
}
