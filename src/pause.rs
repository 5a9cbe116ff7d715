//! Pause points, for tests (built with `cfg(test)` or the `testing` feature
//! only): while a [`Pause`] of a point and a table is held, the first
//! statement on that table to reach the point waits there until the pause
//! is released (or dropped), so a test can run another process's statement
//! in between, as a race would.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use paimon::catalog::Identifier;
use tokio::sync::Notify;

/// The pauses held, by id.
static PAUSES: Mutex<Vec<(u64, Arc<State>)>> = Mutex::new(Vec::new());

#[derive(Debug)]
struct State {
    point: String,
    table: String,
    /// Whether a statement reached the point (only the first one waits).
    taken: AtomicBool,
    reached: Notify,
    released: Notify,
}

/// A pause at one point of the statements on one table (see the module
/// docs). The points: `alter-before-write` (an `ALTER TABLE` whose guards
/// and store-side work are done, before the catalog writes the schema),
/// `create-before-create` (a lake-stream `CREATE TABLE` that found no table,
/// before the catalog creates it) and `create-before-check` (after it
/// created it, before it looks for snapshots).
#[derive(Debug)]
pub struct Pause {
    id: u64,
    state: Arc<State>,
}

impl Pause {
    /// Pauses the first statement on `table` (its full name, `db.t`) that
    /// reaches `point`.
    pub fn new(point: &str, table: &str) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(State {
            point: point.to_string(),
            table: table.to_string(),
            taken: AtomicBool::new(false),
            reached: Notify::new(),
            released: Notify::new(),
        });
        PAUSES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, Arc::clone(&state)));
        Self { id, state }
    }

    /// Waits until a statement reached the point (and waits there).
    pub async fn reached(&self) {
        self.state.reached.notified().await;
    }

    /// Lets the waiting statement (or the next to arrive) go on.
    pub fn release(&self) {
        self.state.released.notify_one();
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        PAUSES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _)| *id != self.id);
        self.release();
    }
}

/// Point `point` of a statement on `identifier`: waits there while a
/// [`Pause`] of it holds the statement.
pub(crate) async fn point(point: &str, identifier: &Identifier) {
    let table = identifier.full_name();
    let state = PAUSES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(_, state)| state)
        .find(|s| s.point == point && s.table == table && !s.taken.swap(true, Ordering::SeqCst))
        .cloned();
    if let Some(state) = state {
        state.reached.notify_one();
        state.released.notified().await;
    }
}
