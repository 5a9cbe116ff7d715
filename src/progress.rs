//! How far the long work running in this process has got (tiering, and the
//! maintenance that follows it or is asked for), for whoever shows progress:
//! the shell's status line.
//!
//! The work opens a [`Progress`] for its table, updates it as it goes, and
//! the entry goes away when the handle is dropped, however the work ends.
//! [`running_work`] shows the board now; [`subscribe`] hears every update.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

/// One piece of running work: what it is, its table, how much it has to do
/// and how much it has done, counted in its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkStatus {
    /// What runs: `tiering`, `compacting`, `compacting manifests`,
    /// `expiring snapshots`, `removing orphan files`.
    pub activity: &'static str,
    /// The table's full name, `db.t`.
    pub table: String,
    /// Done so far.
    pub done: u64,
    /// To do, as first counted (it follows `done` when more turns up).
    pub total: u64,
    /// What is counted: `rows`, `files`, `manifests`, `snapshots`.
    pub unit: &'static str,
}

impl std::fmt::Display for WorkStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {} of {} {}",
            self.activity, self.table, self.done, self.total, self.unit
        )
    }
}

struct Entry {
    activity: &'static str,
    table: String,
    unit: &'static str,
    done: AtomicU64,
    total: AtomicU64,
}

type Board = Mutex<BTreeMap<u64, Arc<Entry>>>;

fn board() -> &'static Board {
    static BOARD: OnceLock<Board> = OnceLock::new();
    BOARD.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// The work running in this process now, oldest first.
pub fn running_work() -> Vec<WorkStatus> {
    board()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .map(|entry| entry.status())
        .collect()
}

type Subscribers = Mutex<BTreeMap<u64, Sender<WorkStatus>>>;

fn subscribers() -> &'static Subscribers {
    static SUBSCRIBERS: OnceLock<Subscribers> = OnceLock::new();
    SUBSCRIBERS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Every update of the board from now on, in the order each piece of work
/// made them, until the [`Subscription`] is dropped.
pub fn subscribe() -> Subscription {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let (sender, updates) = channel();
    subscribers()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, sender);
    Subscription { id, updates }
}

/// The updates since [`subscribe`]: a work's status after each change.
pub struct Subscription {
    id: u64,
    updates: Receiver<WorkStatus>,
}

impl Subscription {
    /// The updates that arrived since the last call, oldest first.
    pub fn take(&self) -> Vec<WorkStatus> {
        self.updates.try_iter().collect()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        subscribers()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl Entry {
    fn status(&self) -> WorkStatus {
        WorkStatus {
            activity: self.activity,
            table: self.table.clone(),
            done: self.done.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            unit: self.unit,
        }
    }

    fn publish(&self) {
        let subscribers = subscribers().lock().unwrap_or_else(|e| e.into_inner());
        if !subscribers.is_empty() {
            let status = self.status();
            for sender in subscribers.values() {
                // A subscription being dropped just stops hearing.
                let _ = sender.send(status.clone());
            }
        }
    }
}

/// A running piece of work's entry on the board; dropping it removes the
/// entry.
pub struct Progress {
    id: u64,
    entry: Arc<Entry>,
}

impl Progress {
    /// Puts `activity` on `table` (its full name), counted in `unit`, on
    /// the board.
    pub fn start(activity: &'static str, table: String, unit: &'static str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            activity,
            table,
            unit,
            done: AtomicU64::new(0),
            total: AtomicU64::new(0),
        });
        board()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::clone(&entry));
        entry.publish();
        Self { id, entry }
    }

    /// How much the work has to do (it may find more as it goes).
    pub fn set_total(&self, total: u64) {
        self.entry.total.store(total, Ordering::Relaxed);
        self.entry.publish();
    }

    /// How much it has done so far.
    pub fn set_done(&self, done: u64) {
        self.entry.done.store(done, Ordering::Relaxed);
        self.entry.total.fetch_max(done, Ordering::Relaxed);
        self.entry.publish();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        board()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(table: &str) -> Option<WorkStatus> {
        running_work().into_iter().find(|s| s.table == table)
    }

    #[test]
    fn a_subscription_hears_every_update_in_order_until_dropped() {
        let updates = subscribe();
        let progress = Progress::start("tiering", "progress_test.sub".to_string(), "rows");
        progress.set_total(10);
        progress.set_done(4);
        progress.set_done(12);
        let heard: Vec<(u64, u64)> = updates
            .take()
            .into_iter()
            .filter(|s| s.table == "progress_test.sub")
            .map(|s| (s.done, s.total))
            .collect();
        assert_eq!(heard, [(0, 0), (0, 10), (4, 10), (12, 12)]);
        let id = updates.id;
        drop(updates);
        let listening = subscribers().lock().unwrap_or_else(|e| e.into_inner());
        assert!(!listening.contains_key(&id));
    }

    #[test]
    fn entries_live_as_long_as_their_handle() {
        let progress = Progress::start("tiering", "progress_test.a".to_string(), "rows");
        progress.set_total(1_000);
        progress.set_done(400);
        let status = of("progress_test.a").expect("on the board");
        assert_eq!((status.done, status.total), (400, 1_000));
        assert_eq!(
            status.to_string(),
            "tiering progress_test.a: 400 of 1000 rows"
        );
        // More rows than first counted (writes went on): the total follows.
        progress.set_done(1_200);
        let status = of("progress_test.a").expect("on the board");
        assert_eq!((status.done, status.total), (1_200, 1_200));
        drop(progress);
        assert_eq!(of("progress_test.a"), None);
    }
}
