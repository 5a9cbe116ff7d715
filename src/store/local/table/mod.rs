//! One table in the `local` store: its incarnations, its log of segments,
//! group commit, planning reads, and tiering into Paimon exactly once.
//!
//! Everything a process keeps here is a cache of what is on disk, checked
//! before it decides anything:
//!
//! - **Incarnations.** `table.json` names the store table's incarnation (a
//!   random id made when the table is attached) and the Paimon table's own
//!   (the creation time of its first schema). Segments live under
//!   `i-<incarnation>/`, so a table dropped and created again, by any
//!   process, starts an empty log, and a process whose cache names another
//!   incarnation drops that cache. A store table whose Paimon table was
//!   dropped and created again elsewhere is refused until attached again.
//! - **Positions.** Positions are segment sequence numbers within an
//!   incarnation. A segment is created with create-if-absent and reaches its
//!   name whole. Tiering commits the rows of segments `[P, E)` as one Paimon
//!   snapshot of the incarnation's commit user with commit identifier `E`;
//!   the newest such snapshot says where the store's rows start.
//! - **Never below the tiered position.** A writer numbers its segment from
//!   the tiered position it reads from Paimon just before the put, whatever
//!   it cached. Tiering deletes a segment only `local.log-retention` after it
//!   passed it, so while a write is younger than that, a number below the
//!   tiered position is still taken and the put moves past it. A write that
//!   took longer checks again and reports its outcome as unknown if tiering
//!   passed it meanwhile.
//! - **Damage.** Bytes that do not verify are an error naming the file; reads
//!   and tiering stop there until an operator sets the segment aside.
//!
//! The table's state is split by concern, each file owning what it keeps:
//!
//! - [`segments`]: the segment cache of an incarnation (rows and blocks).
//! - [`incarnation`]: which incarnation `table.json` names, checked against
//!   the Paimon table, and the Paimon consumer that pins its snapshots.
//! - [`attach`]: attaching and dropping the store table.
//! - [`commit`]: group commit and the parts writer.
//! - [`read`]: scanning the log, planning reads and following it.
//! - [`tiered`]: proving how far tiering reached.
//! - [`tier`]: tiering rounds and trimming.
//! - [`backlog`]: what waits to be tiered, leftovers, and set-aside.
//!
//! The tiering lock (`tiering`, this process's half of the tiering locks)
//! stays on [`TableState`]: attaching, dropping, tiering and setting aside
//! all take it, with the root's lock across processes, in that order.

mod attach;
mod backlog;
mod commit;
mod incarnation;
mod read;
mod segments;
mod tier;
mod tiered;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use datafusion::arrow::datatypes::Schema;
use object_store::path::Path;
use paimon::catalog::Identifier;

use self::commit::GroupCommit;
pub(crate) use self::commit::{with_row_kind, PartsWriter};
use self::incarnation::{Incarnations, TableMeta};
use super::error::LocalStoreError;
use super::root::Root;
use super::{path, LOCAL};
use crate::error::{Error, Result};

/// The commit user of the snapshots the `local` store's tiering commits; an
/// incarnation's own user is this followed by `-<incarnation>`.
pub const TIER_USER: &str = "lakestream-local-tiering";

/// The process-wide state of one table of one store root.
pub(crate) struct TableState {
    root: Arc<Root>,
    dir: Path,
    identifier: Identifier,
    /// Writes waiting in this process, and the leader's turn ([`commit`]).
    commits: GroupCommit,
    /// This process's half of the table's tiering locks.
    tiering: tokio::sync::Mutex<()>,
    /// The incarnation this process last saw ([`incarnation`]).
    incarnations: Incarnations,
}

impl std::fmt::Debug for TableState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableState")
            .field("table", &self.identifier)
            .finish_non_exhaustive()
    }
}

/// A number unique across processes and time: the clock in nanoseconds,
/// the process id and a counter.
fn unique() -> u128 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = u128::from(COUNTER.fetch_add(1, Ordering::Relaxed));
    (nanos << 48) ^ (u128::from(std::process::id()) << 16) ^ n
}

impl TableState {
    /// The state of table `identifier` under `root`: one per root and
    /// table in a process, made on first use and kept for good (as roots
    /// are), so every store of the process that serves the table from that
    /// root shares its locks, its group commit and its caches.
    pub(crate) fn of(root: &Arc<Root>, identifier: &Identifier) -> Arc<TableState> {
        type States = Mutex<HashMap<(u64, Identifier), Arc<TableState>>>;
        static STATES: OnceLock<States> = OnceLock::new();
        let mut states = STATES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            states
                .entry((root.id, identifier.clone()))
                .or_insert_with(|| Arc::new(TableState::new(Arc::clone(root), identifier))),
        )
    }

    fn new(root: Arc<Root>, identifier: &Identifier) -> Self {
        Self {
            dir: path::table_dir(&Default::default(), identifier),
            root,
            identifier: identifier.clone(),
            commits: GroupCommit::default(),
            tiering: tokio::sync::Mutex::new(()),
            incarnations: Incarnations::default(),
        }
    }

    fn name(&self) -> String {
        self.identifier.full_name()
    }

    fn missing(&self) -> Error {
        Error::StoreTableMissing {
            store: LOCAL.to_string(),
            table: self.name(),
        }
    }

    fn file(&self, location: &Path) -> String {
        format!("{}{location}", self.root.url)
    }

    async fn read_meta(&self) -> Result<Option<TableMeta>> {
        self.read_json(&path::table_meta(&self.dir)).await
    }

    /// A JSON object of the store (`table.json`, `tiered.json`); `None`
    /// when there is none.
    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        location: &Path,
    ) -> Result<Option<T>> {
        let bytes = self.root.get(location).await?;
        self.parse_json(location, bytes)
    }

    /// [`Self::read_json`] of `bytes`, read from `location` already.
    fn parse_json<T: serde::de::DeserializeOwned>(
        &self,
        location: &Path,
        bytes: Option<Bytes>,
    ) -> Result<Option<T>> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|source| {
            LocalStoreError::Unreadable {
                file: self.file(location),
                source,
            }
            .into()
        })
    }
}

/// The names of the columns of `schema` (the log's), for [`missing_columns`].
fn column_names(schema: &Schema) -> HashSet<&str> {
    schema.fields().iter().map(|f| f.name().as_str()).collect()
}

/// The columns of a log entry (`columns`, as written) that are not `known`.
fn missing_columns(known: &HashSet<&str>, columns: &[String]) -> Vec<String> {
    columns
        .iter()
        .filter(|c| !known.contains(c.as_str()))
        .cloned()
        .collect()
}
