//! What goes wrong in the local store, as the crate's errors: each variant
//! chooses its [`ErrorKind`], and [`From`] makes it a
//! [`Error::StoreFailed`] of that kind.

use datafusion::arrow::error::ArrowError;
use object_store::path::Path;

use super::LOCAL;
use crate::error::{Error, ErrorKind, TURN_OFF_HINT};
use crate::store::ChangeBatchError;

/// What went wrong in the local store, beyond what the crate's own errors
/// say (a missing table, a damaged segment, a write not applied, ...).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalStoreError {
    /// The object store (or local disk through it) failed to list, read or
    /// delete.
    #[error(transparent)]
    Objects(#[from] object_store::Error),

    /// Listing the generations of a table's tiering lease failed.
    #[error("listing the tiering lease: {source}")]
    ListLease {
        /// The object store's error.
        source: object_store::Error,
    },

    /// A wait for a table's tiering lease on an object store ended with the
    /// lease still held by a live process.
    #[error(transparent)]
    LeaseWaitedOut(crate::object_storage::lease::WaitedOut),

    /// The create-if-absent probe of an object store failed with an error
    /// that leaves the question open.
    #[error("checking '{root}': {source}")]
    Probe {
        /// The root's URL, without credentials.
        root: String,
        /// The object store's error.
        source: object_store::Error,
    },

    /// The object store under the root does not create an object only if
    /// it is absent, which every segment and lease needs. A refusal: the
    /// root stays unusable until the user names another.
    #[error(
        "the object store at '{root}' {what}. The local store creates every log segment with a \
         conditional put (create-if-absent, 'If-None-Match: *' on S3), so that two writers \
         never take one position and a tiered position is never handed out again; without it, \
         writers could overwrite acknowledged rows. Use an object store that implements \
         conditional writes (AWS S3, MinIO, versitygw, ...), put 'local.path' on local disk, \
         or use the Fluss store"
    )]
    NoCreateIfAbsent {
        /// The root's URL, without credentials.
        root: String,
        /// What the object store did.
        what: String,
    },

    /// The object store under the root does not replace an object only if
    /// it is still the version read ('If-Match' on S3), which replacing a
    /// table's `table.json` needs. A refusal, as [`Self::NoCreateIfAbsent`].
    #[error(
        "the object store at '{root}' {what}. The local store replaces a table's table.json \
         with a conditional put ('If-Match' on S3), so that a process whose tiering lease ran \
         out while its put was on the way cannot replace a table another process attached \
         since, with the rows acknowledged to it. Use an object store that implements \
         conditional writes (AWS S3, MinIO, versitygw, ...), put 'local.path' on local disk, \
         or use the Fluss store"
    )]
    NoConditionalReplace {
        /// The root's URL, without credentials.
        root: String,
        /// What the object store did.
        what: String,
    },

    /// The store table changed while this process was attaching it (on
    /// an object store, its tiering lease can run out while its put is on
    /// the way): `table.json` was not the version read when the
    /// conditional put that would have replaced it reached the store, so
    /// nothing was replaced.
    #[error(
        "the store table of '{table}' was attached or dropped by another process while this \
         one attached it (on an object store this process's tiering lease can run out while \
         its request is on the way); nothing was replaced, try again"
    )]
    AttachedMeanwhile {
        /// The table's full name.
        table: String,
    },

    /// The store directory of a table holds the store table of a Paimon
    /// table at another location: two catalogs (two warehouses) name one
    /// store directory for tables of one name. Replacing it would delete
    /// the other table's rows that wait to be tiered.
    #[error(
        "the store directory of '{table}' ('{dir}') holds the store table of the Paimon table \
         at '{attached}', not of the one at '{location}': two catalogs name one store \
         directory ('local.path') for tables of one name. Give each catalog its own \
         'local.path'; if the table at '{attached}' is gone for good, delete '{dir}' and try \
         again. Nothing was changed"
    )]
    OtherPaimonTable {
        /// The table's full name.
        table: String,
        /// The table's store directory.
        dir: String,
        /// Where the Paimon table the store table belongs to lives.
        attached: String,
        /// Where the Paimon table being attached lives.
        location: String,
    },

    /// Writing a file on local disk failed.
    #[error("write '{path}': {source}")]
    WriteFile {
        /// The object's path under the root.
        path: Path,
        /// The file system's error.
        source: std::io::Error,
    },

    /// Reading a file on local disk failed.
    #[error("read '{path}': {source}")]
    ReadFile {
        /// The object's path under the root.
        path: Path,
        /// The file system's error.
        source: std::io::Error,
    },

    /// Writing an object failed.
    #[error("write '{path}': {source}")]
    WriteObject {
        /// The object's path under the root.
        path: Path,
        /// The object store's error.
        source: object_store::Error,
    },

    /// Taking a lock file (`tier.lock`, `trim.lock`) failed.
    #[error("locking '{name}': {source}")]
    Lock {
        /// The lock file's name.
        name: String,
        /// The file system's error.
        source: std::io::Error,
    },

    /// File work done on a blocking thread did not finish: the thread
    /// panicked, or the runtime shut down.
    #[error("{what}: {source}")]
    Blocking {
        /// What the thread was doing.
        what: String,
        /// Tokio's error.
        source: tokio::task::JoinError,
    },

    /// A relative `local.path` with no current directory to resolve it in.
    #[error("'{location}' is relative, and the current directory cannot be read: {source}")]
    CurrentDir {
        /// `local.path` as given.
        location: String,
        /// The file system's error.
        source: std::io::Error,
    },

    /// A JSON file of the store (`table.json`, `tiered.json`,
    /// `tiered-proof.json`) that does not parse.
    #[error("'{file}' cannot be read: {source}")]
    Unreadable {
        /// The file, as its full location.
        file: String,
        /// The parser's error.
        source: serde_json::Error,
    },

    /// The store could not encode what it writes: a bug, for what it
    /// encodes is its own.
    #[error("cannot encode {what}: {source}")]
    Encode {
        /// What was encoded (`a log segment`, `table.json`, ...).
        what: &'static str,
        /// The encoder's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A batch of the store's own making does not fit the log's schema.
    #[error("cannot build a batch of the store's log: {source}")]
    Batch {
        /// Arrow's error.
        source: ArrowError,
    },

    /// Rows written under an earlier schema of the table that its current
    /// schema cannot take (a column made NOT NULL, a narrowed type).
    #[error(
        "rows the store holds, written under an earlier schema of the table, do not fit its \
         current schema: {source}"
    )]
    SchemaChanged {
        /// Arrow's error.
        source: ArrowError,
    },

    /// A write waiting in the store holds columns the table no longer has:
    /// dropped or renamed while the mode was off and the rows were not yet
    /// tiered (or while a write planned before ran). Tiering stops there
    /// rather than commit the rows without their values, and the mode is
    /// not turned on over them. The write is sound, so it is never set
    /// aside: processes that read it keep it.
    #[error(
        "the write at position {position} in the store of '{table}' holds {columns}, which \
         the table no longer has (dropped or renamed before its rows were tiered); tiering \
         stops there rather than commit its rows without those values, and tiers nothing \
         after it. Put the columns back (ALTER TABLE ... ADD COLUMN; RENAME COLUMN back needs \
         the mode off first), then tier"
    )]
    ColumnsGone {
        /// The table's full name.
        table: String,
        /// The write's position in the log.
        position: u64,
        /// The columns, quoted and listed.
        columns: String,
    },

    /// A Paimon snapshot committed by the store's tiering whose commit
    /// identifier is no log position.
    #[error("tiering snapshot {snapshot} has identifier {identifier}")]
    TieringIdentifier {
        /// The snapshot's id.
        snapshot: i64,
        /// Its commit identifier.
        identifier: i64,
    },

    /// A log position too large for a commit identifier.
    #[error("position {position} overflows a commit id")]
    PositionOverflow {
        /// The position.
        position: u64,
    },

    /// Log segments that must be there are not.
    #[error("segments of '{table}' after position {position} are missing")]
    SegmentsMissing {
        /// The table's full name.
        table: String,
        /// The position after which they are missing.
        position: u64,
    },

    /// Rows of the log whose row kinds do not read: written by something
    /// other than this store, or by a bug of it.
    #[error("the log of '{table}' holds rows without a valid row kind: {source}")]
    RowKinds {
        /// The table's full name.
        table: String,
        /// What is wrong with them.
        source: ChangeBatchError,
    },

    /// An append table's log holds a row kind other than insert.
    #[error("an append table's log holds a delete")]
    DeleteInAppendLog,

    /// A read could not fix its start: tiering trimmed the log under it
    /// each time.
    #[error("could not fix a read of '{table}': tiering kept trimming under it")]
    TrimmedUnderRead {
        /// The table's full name.
        table: String,
    },

    /// After a tiering commit, Paimon's newest tiering snapshot names
    /// another position than the commit's.
    #[error(
        "tiering '{table}' committed up to position {end}, but Paimon's newest tiering snapshot \
         says {reached}"
    )]
    TieredElsewhere {
        /// The table's full name.
        table: String,
        /// Where the commit ended.
        end: u64,
        /// Where Paimon says tiering reached.
        reached: u64,
    },

    /// A tiering commit fenced out: another commit landed after the
    /// snapshot its position was read from.
    #[error(
        "tiering '{table}' read position {position} at snapshot {base:?}, and snapshot \
         {latest:?} has landed since; the next round tiers these rows"
    )]
    SnapshotLanded {
        /// The table's full name.
        table: String,
        /// The position the round read.
        position: u64,
        /// The snapshot it read it from.
        base: Option<i64>,
        /// The snapshot there now.
        latest: Option<i64>,
    },

    /// The store's table for a name belongs to an earlier Paimon table of
    /// that name, dropped and created again where the store did not see it.
    #[error(
        "lakestream store '{store}' holds the rows of an earlier table named '{table}' (dropped \
         and created again by another process or engine); they are not served and never reach \
         the new table. Turning the mode on attaches a store table for the new one and discards \
         them: ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled'='true')"
    )]
    StoreTableStale {
        /// The store's identifier.
        store: String,
        /// The table's full name.
        table: String,
    },

    /// A Paimon snapshot the store needed to tell how far tiering reached
    /// is gone, and nothing else the store keeps proves it: guessing low
    /// would tier (and show) rows twice, guessing high would lose them. Who
    /// expired it is not known: expiry keeps the snapshots the store's
    /// Paimon consumer names, so it was an expiry that does not honour
    /// consumers, or one that ran while the consumer file was missing.
    #[error(
        "cannot tell how far tiering of '{table}' reached: Paimon snapshot {snapshot}, which \
         the store needs to find its newest tiering commit, has expired although the store's \
         Paimon consumer '{consumer}' asks expiry to keep it (an expiry that does not honour \
         Paimon consumers, or one that ran while the consumer file was missing, removed it), \
         and the store recorded its tiering position only up to position {position}, while \
         its log reaches position {end}; rows between the two may already be in Paimon. Reads \
         of '{table}$rt', writes and tiering of '{table}' are refused so that no row is \
         committed or shown twice. To go on: turn the mode off (ALTER TABLE {table} \
         {TURN_OFF_HINT}), compare what '{table}' holds with the rows written last, discard \
         the store's rows of the table by deleting '{dir}', turn the mode on again and write \
         the missing rows again"
    )]
    TieredPositionUnknown {
        /// The table's full name.
        table: String,
        /// The expired snapshot the search for the position ran into.
        snapshot: i64,
        /// The Paimon consumer through which the store asks expiry to keep
        /// its snapshots.
        consumer: String,
        /// The position the store can prove.
        position: u64,
        /// Where the store's log ends.
        end: u64,
        /// The store's directory of the table.
        dir: String,
    },

    /// Turning the mode on again would tier rows the store kept from before
    /// the mode was turned off over newer rows written to Paimon directly.
    #[error(
        "cannot turn lake-stream mode of '{table}' on: its store still holds {rows} rows \
         of '{table}' from before the mode was turned off, not yet tiered into Paimon, and \
         {since}. Tiering them now would commit the older values over the newer ones, key by \
         key. Choose: to keep them, tier them first (they win over the newer rows of the same \
         keys): {tier_command}; to drop them, delete the store's rows of the table, \
         '{dir}'. Then turn the mode on again"
    )]
    StrandedRows {
        /// The table's full name.
        table: String,
        /// How many rows wait in the store.
        rows: u64,
        /// What Paimon got since (`snapshot 7 was committed by 'u'`).
        since: String,
        /// The command that tiers them.
        tier_command: String,
        /// The store's directory of the table.
        dir: String,
    },

    /// A store file whose bytes do not verify.
    #[error(
        "segment '{file}' of '{table}' is damaged ({reason}); {held}. Reads of '{table}$rt' and \
         tiering stop there rather than skip it. Move it aside, losing its rows, with: \
         CALL sys.lakestream_set_aside('{table}', {position})"
    )]
    SegmentDamaged {
        /// The table's full name.
        table: String,
        /// The damaged file.
        file: String,
        /// Its position in the table's log.
        position: u64,
        /// What does not verify.
        reason: String,
        /// How many rows it held, as far as can be told.
        held: String,
    },

    /// A read that needs log the store has trimmed.
    #[error(
        "a read of '{table}$rt' fell behind: the store's log at position {position} \
         was tiered into Paimon and deleted ('local.log-retention' says how long tiered log \
         stays readable). Start the read again: it begins from what tiering wrote to Paimon"
    )]
    StreamBehind {
        /// The table's full name.
        table: String,
        /// The position the read needed.
        position: u64,
    },

    /// The table went away under a streaming read.
    #[error("'{table}' was dropped during a streaming read of '{table}$rt'")]
    DroppedDuringRead {
        /// The table's full name.
        table: String,
    },

    /// Registering (or moving) the store's Paimon consumer, through which
    /// snapshot expiry keeps the snapshots the store needs, failed.
    #[error(
        "cannot write Paimon consumer '{path}', which tells snapshot expiry which snapshots the \
         store needs to prove how far tiering reached: {source}"
    )]
    Consumer {
        /// The consumer file.
        path: String,
        /// Paimon's error.
        source: paimon::Error,
    },
}

impl LocalStoreError {
    /// What kind of failure this is. A race with another process that the
    /// next try resolves is [`ErrorKind::Unavailable`], not a conflict:
    /// conflicts are states that stay until the user acts.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            LocalStoreError::Objects(_)
            | LocalStoreError::ListLease { .. }
            | LocalStoreError::LeaseWaitedOut(_)
            | LocalStoreError::Probe { .. }
            | LocalStoreError::WriteFile { .. }
            | LocalStoreError::ReadFile { .. }
            | LocalStoreError::WriteObject { .. }
            | LocalStoreError::Lock { .. }
            | LocalStoreError::CurrentDir { .. }
            | LocalStoreError::TrimmedUnderRead { .. }
            | LocalStoreError::AttachedMeanwhile { .. }
            | LocalStoreError::TieredElsewhere { .. }
            | LocalStoreError::SnapshotLanded { .. }
            | LocalStoreError::Consumer { .. } => ErrorKind::Unavailable,
            LocalStoreError::Blocking { source, .. } if source.is_panic() => ErrorKind::Internal,
            LocalStoreError::Blocking { .. } => ErrorKind::Unavailable,
            LocalStoreError::Unreadable { .. }
            | LocalStoreError::TieringIdentifier { .. }
            | LocalStoreError::PositionOverflow { .. }
            | LocalStoreError::SegmentsMissing { .. }
            | LocalStoreError::RowKinds { .. }
            | LocalStoreError::DeleteInAppendLog => ErrorKind::Corrupt,
            LocalStoreError::ColumnsGone { .. }
            | LocalStoreError::OtherPaimonTable { .. }
            | LocalStoreError::StoreTableStale { .. }
            | LocalStoreError::TieredPositionUnknown { .. }
            | LocalStoreError::StrandedRows { .. } => ErrorKind::Conflict,
            LocalStoreError::StreamBehind { .. } | LocalStoreError::DroppedDuringRead { .. } => {
                ErrorKind::Unavailable
            }
            LocalStoreError::SegmentDamaged { .. } => ErrorKind::Corrupt,
            LocalStoreError::SchemaChanged { .. }
            | LocalStoreError::NoCreateIfAbsent { .. }
            | LocalStoreError::NoConditionalReplace { .. } => ErrorKind::NotSupported,
            LocalStoreError::Encode { .. } | LocalStoreError::Batch { .. } => ErrorKind::Internal,
        }
    }

    /// Whether its text says all a user needs (the table, what happened,
    /// what to do), so it is shown as written
    /// ([`crate::store::store_error_as_written`]); the others are causes,
    /// shown after "lakestream store 'local' failed".
    fn speaks_for_itself(&self) -> bool {
        matches!(
            self,
            LocalStoreError::StoreTableStale { .. }
                | LocalStoreError::OtherPaimonTable { .. }
                | LocalStoreError::TieredPositionUnknown { .. }
                | LocalStoreError::StrandedRows { .. }
                | LocalStoreError::SegmentDamaged { .. }
                | LocalStoreError::StreamBehind { .. }
                | LocalStoreError::DroppedDuringRead { .. }
        )
    }

    /// The local store's error `error` carries, if it is one.
    pub(crate) fn of(error: &Error) -> Option<&LocalStoreError> {
        match error {
            Error::Store { source, .. } | Error::StoreFailed { source, .. } => {
                source.downcast_ref::<LocalStoreError>()
            }
            _ => None,
        }
    }

    /// A failure to encode `what`.
    pub(crate) fn encoding(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> LocalStoreError {
        LocalStoreError::Encode {
            what,
            source: source.into(),
        }
    }
}

impl From<LocalStoreError> for Error {
    fn from(error: LocalStoreError) -> Self {
        if error.speaks_for_itself() {
            crate::store::store_error_as_written(LOCAL, error.kind(), error)
        } else {
            crate::store::store_error_of_kind(LOCAL, error.kind(), error)
        }
    }
}

#[cfg(test)]
mod tests;
