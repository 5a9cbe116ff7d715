//! How far running tierings of this process have got, for whoever shows
//! progress (the shell's status line).
//!
//! A store's tiering opens a [`TierProgress`] for its table, updates it after
//! each commit, and the entry goes away when the handle is dropped, however
//! the tiering ends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// One running tiering: its table, the rows it found waiting, and the rows
/// committed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieringStatus {
    /// The table's full name, `db.t`.
    pub table: String,
    /// Rows committed to Paimon so far.
    pub rows: u64,
    /// Rows waiting in the store when the tiering began.
    pub total: u64,
}

impl std::fmt::Display for TieringStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tiering {}: {} of {} rows",
            self.table, self.rows, self.total
        )
    }
}

struct Entry {
    table: String,
    rows: AtomicU64,
    total: AtomicU64,
}

type Board = Mutex<BTreeMap<u64, Arc<Entry>>>;

fn board() -> &'static Board {
    static BOARD: OnceLock<Board> = OnceLock::new();
    BOARD.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// The tierings running in this process now, oldest first.
pub fn running_tierings() -> Vec<TieringStatus> {
    board()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .map(|entry| TieringStatus {
            table: entry.table.clone(),
            rows: entry.rows.load(Ordering::Relaxed),
            total: entry.total.load(Ordering::Relaxed),
        })
        .collect()
}

/// A running tiering's entry on the board; dropping it removes the entry.
pub struct TierProgress {
    id: u64,
    entry: Arc<Entry>,
}

impl TierProgress {
    /// Puts a tiering of `table` (its full name) on the board.
    pub fn start(table: String) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            table,
            rows: AtomicU64::new(0),
            total: AtomicU64::new(0),
        });
        board()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::clone(&entry));
        Self { id, entry }
    }

    /// How many rows the tiering has to move (it may find more as it goes).
    pub fn set_total(&self, total: u64) {
        self.entry.total.store(total, Ordering::Relaxed);
    }

    /// How many rows it has committed so far.
    pub fn set_rows(&self, rows: u64) {
        self.entry.rows.store(rows, Ordering::Relaxed);
        self.entry.total.fetch_max(rows, Ordering::Relaxed);
    }
}

impl Drop for TierProgress {
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

    fn of(table: &str) -> Option<TieringStatus> {
        running_tierings().into_iter().find(|s| s.table == table)
    }

    #[test]
    fn entries_live_as_long_as_their_handle() {
        let progress = TierProgress::start("progress_test.a".to_string());
        progress.set_total(1_000);
        progress.set_rows(400);
        let status = of("progress_test.a").expect("on the board");
        assert_eq!((status.rows, status.total), (400, 1_000));
        assert_eq!(
            status.to_string(),
            "tiering progress_test.a: 400 of 1000 rows"
        );
        // More rows than first counted (writes went on): the total follows.
        progress.set_rows(1_200);
        let status = of("progress_test.a").expect("on the board");
        assert_eq!((status.rows, status.total), (1_200, 1_200));
        drop(progress);
        assert_eq!(of("progress_test.a"), None);
    }
}
