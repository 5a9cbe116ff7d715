//! Errors of this crate. Each variant is a sentence a user can act on; they
//! become [`DataFusionError`]s once, at the DataFusion boundary.

use datafusion::error::DataFusionError;

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) const TURN_OFF_HINT: &str = "SET TBLPROPERTIES ('lakestream.enabled'='false')";

/// Errors of the lake-stream layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A catalog or table option has a value this crate cannot use.
    #[error("invalid option '{key}': {reason}")]
    InvalidOption {
        /// The option key.
        key: String,
        /// What is wrong and what to do.
        reason: String,
    },

    /// A `lakestream.*` key set through a session, dynamic or hint option.
    #[error(
        "{origin} cannot set '{key}': lake-stream routing follows the table's stored options, \
         never session, dynamic or hint options. Change a table's mode with \
         ALTER TABLE <table> SET TBLPROPERTIES ('lakestream.enabled'='true'|'false')"
    )]
    SessionRouting {
        /// The offending key as written.
        key: String,
        /// Where it was written (`SET`, `a /*+ OPTIONS */ hint`, ...).
        origin: String,
    },

    /// A relation name the store cannot serve.
    #[error(transparent)]
    Name(#[from] NameError),

    /// `ALTER TABLE ... RENAME TO` on a lake-stream table.
    #[error(
        "cannot rename lake-stream table '{table}' while 'lakestream.enabled' is true: renaming \
         breaks the store's mapping to the table. Turn the mode off first with \
         ALTER TABLE {table} {TURN_OFF_HINT}"
    )]
    RenameLakeStreamTable {
        /// The table's full name.
        table: String,
    },

    /// `CREATE OR REPLACE TABLE` over a lake-stream table.
    #[error(
        "cannot replace lake-stream table '{table}' while 'lakestream.enabled' is true: replacing \
         breaks the store's mapping to the table. Turn the mode off first with \
         ALTER TABLE {table} {TURN_OFF_HINT}"
    )]
    ReplaceLakeStreamTable {
        /// The table's full name.
        table: String,
    },

    /// `lakestream.enabled = true` on something that cannot be a lake-stream table.
    #[error(
        "cannot set 'lakestream.enabled'='true' on {kind} '{table}': only a Paimon data table \
         on its main branch can be a lake-stream table"
    )]
    CannotEnable {
        /// The name as given.
        table: String,
        /// `format table`, `system table` or `branch`.
        kind: &'static str,
    },

    /// A lake-stream table whose merge settings the union read does not
    /// reproduce: turning the mode on (or changing the settings) is refused.
    #[error(
        "cannot {action} '{table}': {option} is not supported in lake-stream mode: {reason}. \
         Reads of '{table}$rt' must give the rows Paimon gives once the store's rows are \
         tiered, and with this setting they would not"
    )]
    MergeNotSupported {
        /// What was refused: `set 'lakestream.enabled'='true' on`, `read`, ...
        action: String,
        /// The table's full name.
        table: String,
        /// The option(s), as `'key'='value'`.
        option: String,
        /// Why.
        reason: String,
    },

    /// An option that fixes what a merge means, how rows are bucketed or
    /// how versions are ordered, changed while the mode is on: the store's
    /// rows and Paimon's files were written under the old value.
    #[error(
        "cannot change {option} of lake-stream table '{table}' while 'lakestream.enabled' is \
         true: {reason}. Turn the mode off in a statement of its own (ALTER TABLE ... SET \
         TBLPROPERTIES ('lakestream.enabled'='false'), which tiers the store's rows into \
         Paimon), change the option, then turn the mode on"
    )]
    OptionChangeRefused {
        /// The table's full name.
        table: String,
        /// The option, as `'key'='value'`, or `'key'` (removed).
        option: String,
        /// Why.
        reason: String,
    },

    /// An `ALTER TABLE` that turns the mode on or off found, when the
    /// catalog was about to write the table's schema, a newer schema than
    /// the one its checks and its store-side work were decided on: another
    /// statement changed the table in between.
    #[error(
        "ALTER TABLE '{table}': the table's schema changed while this ALTER ran (another \
         statement changed the table first), and what it checked no longer holds; nothing was \
         changed, run it again"
    )]
    SchemaChangedDuringAlter {
        /// The table's full name.
        table: String,
    },

    /// `t$rt` of a table that does not exist.
    #[error("table '{name}' not found: table '{table}' does not exist")]
    RealtimeOfMissingTable {
        /// The name as written.
        name: String,
        /// The table's full name.
        table: String,
    },

    /// `t$rt` of a table that is not a lake-stream table.
    #[error(
        "table '{name}' not found: '{table}' is not a lake-stream table. Turn the mode on with \
         ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled'='true'), or read '{table}'"
    )]
    NotLakeStream {
        /// The name as written.
        name: String,
        /// The table's full name.
        table: String,
    },

    /// Tiering a table whose mode is off.
    #[error(
        "cannot tier '{table}': it is not a lake-stream table, so its writes go to Paimon, and \
         tiering what its store still holds could commit older rows over newer ones. To tier what \
         waits in its store from before the mode was turned off, name the table to the tiering \
         service before writing to it again: lakestream-cli tier --once --table <db.table>; or \
         turn the mode on again: ALTER TABLE {table} SET TBLPROPERTIES \
         ('lakestream.enabled'='true')"
    )]
    TierNotLakeStream {
        /// The table's full name.
        table: String,
    },

    /// A time-travel clause or option on `t$rt`.
    #[error(
        "'{name}' has no history, so {clause} cannot apply to it; read '{table}' for time travel"
    )]
    RealtimeTimeTravel {
        /// The name as written.
        name: String,
        /// The table's name.
        table: String,
        /// The clause or option.
        clause: String,
    },

    /// A statement that writes or changes a time-travelled table
    /// (`INSERT INTO t VERSION AS OF 1 ...`), any table.
    #[error(
        "{operation} cannot change '{name} {clause}': a time-travel clause reads a snapshot of \
         '{name}' in a query, and a snapshot is never written or changed. Name '{name}' without \
         the clause"
    )]
    TimeTravelTarget {
        /// The statement.
        operation: String,
        /// The table's name, as written.
        name: String,
        /// The clause, as written.
        clause: String,
    },

    /// A write to `t$rt`.
    #[error("'{name}' is read-only: write to '{table}'")]
    RealtimeReadOnly {
        /// The name as written.
        name: String,
        /// The table's name.
        table: String,
    },

    /// A read, write or mode change that needs a store, where none is named.
    #[error(
        "{operation} on lake-stream table '{table}' needs a store, but {scope} names none. Set \
         the catalog option 'lakestream.store' (e.g. 'local'). Writes never fall back to Paimon: \
         that would leave Paimon and the store holding different values for the same keys"
    )]
    NoStore {
        /// What was attempted.
        operation: String,
        /// The table's full name.
        table: String,
        /// `catalog 'paimon'`, or `the external table` in connector mode.
        scope: String,
    },

    /// A write the store cannot take for this table.
    #[error("{operation} on lake-stream table '{table}' is not supported: {reason}")]
    WriteNotSupported {
        /// The statement.
        operation: String,
        /// The table's full name.
        table: String,
        /// Why, and what to do instead.
        reason: String,
    },

    /// `lakestream.store` names no registered factory.
    #[error(
        "no lakestream store '{store}' is registered; registered stores: {}",
        if registered.is_empty() { "none".to_string() } else { registered.join(", ") }
    )]
    UnknownStore {
        /// The identifier asked for.
        store: String,
        /// The identifiers that are registered.
        registered: Vec<String>,
    },

    /// The store could not be created or reached.
    #[error("lakestream store '{store}' is not available: {reason}")]
    StoreUnavailable {
        /// The store's identifier.
        store: String,
        /// What went wrong.
        reason: String,
    },

    /// A store call did not answer in time.
    #[error(
        "lakestream store '{store}' did not answer within {timeout:?} ({operation}); the bound is \
         the catalog option 'lakestream.timeout'"
    )]
    StoreTimeout {
        /// The store's identifier.
        store: String,
        /// What was asked of it.
        operation: String,
        /// The bound.
        timeout: std::time::Duration,
    },

    /// A procedure run (`CALL sys.lakestream_tier`, a maintenance procedure)
    /// did not finish within the catalog's procedure bound and was stopped.
    /// What it committed stays; what it had not committed is dropped whole.
    #[error(
        "{procedure} of '{table}' did not finish within {timeout:?}, the bound set by the \
         catalog option 'lakestream.procedure-timeout', and was stopped{progress}. Each commit \
         it made stays and nothing acknowledged is lost: work cut short before its commit is \
         dropped whole (rows not yet tiered wait in the store). Run it again to go on, or \
         raise the bound or set it to 'off'"
    )]
    ProcedureTimeout {
        /// The procedure's name.
        procedure: String,
        /// The table's full name.
        table: String,
        /// The bound.
        timeout: std::time::Duration,
        /// How far the work had got, as ` (at: tiering db.t: 4 of 9 rows)`,
        /// or empty when it had not reported.
        progress: String,
    },

    /// `CREATE TABLE` made the Paimon table of a lake-stream table, but the
    /// store could not answer whether it attached its table. Of the store
    /// error's kind: trying again may work.
    #[error(
        "'{table}' was created, but lakestream store '{store}' could not attach its store table, \
         which the store may hold: {source}. Reads of '{table}$rt' and writes fail until it is \
         attached: run the same statement as CREATE TABLE IF NOT EXISTS once the store answers \
         (should it keep failing the same way, DROP TABLE removes both halves)"
    )]
    CreatedNotAttached {
        /// The table's full name.
        table: String,
        /// The store's identifier.
        store: String,
        /// Why the attach failed.
        source: Box<Error>,
    },

    /// `CREATE TABLE` created a table that holds snapshots from before the
    /// statement: a `DROP` of an earlier table of the name, cut short, left
    /// them where the catalog does not remove them.
    #[error(
        "'{table}' was created, but it holds snapshots from before this CREATE (the first is \
         snapshot {snapshot}): a DROP TABLE of an earlier '{table}' cut short may have left \
         them, and their rows show as the new table's. Nothing was dropped; look at \
         '{table}$snapshots', and if they are the dropped table's, DROP TABLE '{table}' and \
         create it again"
    )]
    CreatedOverSnapshots {
        /// The table's full name.
        table: String,
        /// The earliest snapshot's id.
        snapshot: i64,
    },

    /// The store has no table for a lake-stream table.
    #[error(
        "lakestream store '{store}' has no table for '{table}'. Turning the mode on attaches it: \
         ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled'='true')"
    )]
    StoreTableMissing {
        /// The store's identifier.
        store: String,
        /// The table's full name.
        table: String,
    },

    /// A drop of a lake-stream table through a catalog that cannot reach the
    /// store serving it: the store's rows would stay behind the drop.
    #[error(
        "{operation} is refused: lake-stream table '{table}' is served by {recorded}, \
         and {reason}. Dropping the table here would leave its rows in that store. Drop it \
         through a catalog with that store ('lakestream.store' and its options, such as \
         'local.path'; in lakestream-cli, --store and --option), which removes the store's \
         side too. If that store is gone for good, turn the mode off first \
         ('lakestream.enabled'='false'), then drop the table"
    )]
    DropUnreachable {
        /// The statement (`DROP TABLE 'db.t'`, `DROP DATABASE 'db' CASCADE`).
        operation: String,
        /// The table's full name.
        table: String,
        /// The store, as the table's recorded binding names it.
        recorded: String,
        /// Why this catalog cannot reach it.
        reason: String,
    },

    /// A lake-stream table recorded with another store than the catalog's.
    #[error(
        "{operation} '{table}' is refused: the table is bound to store '{recorded}' (table \
         option 'lakestream.store-binding', recorded when its mode was turned on), but this \
         catalog's store is '{ours}'. The table's rows are in the store it is bound to, and a \
         second store would take writes that reads of the first never show. Use a catalog \
         with that store ('lakestream.store' and its options, such as 'local.path'), or move \
         the table: turn the mode off (through a catalog with that store, so that its rows \
         are tiered first), then on through this one"
    )]
    StoreBindingMismatch {
        /// What was asked (`reading`, `writing to`, ...).
        operation: String,
        /// The table's full name.
        table: String,
        /// The binding recorded with the table.
        recorded: String,
        /// The binding of the catalog's store.
        ours: String,
    },

    /// A write that failed before any of its rows became visible.
    #[error("nothing was written to '{table}': {reason}")]
    WriteNotApplied {
        /// The table's full name.
        table: String,
        /// Why.
        reason: String,
    },

    /// A write whose outcome is not known: its rows may or may not appear.
    #[error(
        "the outcome of the write to '{table}' is unknown ({reason}): its rows may still appear. \
         Check with SELECT ... FROM {table}$rt before writing them again"
    )]
    WriteOutcomeUnknown {
        /// The table's full name.
        table: String,
        /// Why.
        reason: String,
    },

    /// Turning the mode off while the store holds rows its own tiering
    /// service has not written into Paimon yet.
    #[error(
        "cannot turn lake-stream mode of '{table}' off: store '{store}' holds {pending} of \
         '{table}' not yet tiered into Paimon. With the mode off they would be left behind, or \
         written into Paimon later, over rows written to '{table}' directly. {wait}, then turn \
         the mode off again"
    )]
    UntieredRows {
        /// The store's identifier.
        store: String,
        /// The table's full name.
        table: String,
        /// How many rows (or records) wait, and where.
        pending: String,
        /// How to wait for them.
        wait: String,
    },

    /// On-demand tiering asked of a store whose own service tiers.
    #[error(
        "lakestream store '{store}' has no on-demand tiering: its own tiering service moves rows \
         into Paimon"
    )]
    TieringElsewhere {
        /// The store's identifier.
        store: String,
    },

    /// A store failed. The store says what kind of failure it is
    /// ([`crate::store::store_error_of_kind`]); [`crate::store::store_error`]
    /// makes it [`ErrorKind::Unavailable`].
    #[error("lakestream store '{store}' failed: {source}")]
    StoreFailed {
        /// The store's identifier.
        store: String,
        /// What kind of failure it is, as the store tells.
        kind: ErrorKind,
        /// The store's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A store's own error whose text says all: the table, what happened
    /// and what to do (a damaged segment, a read that fell behind, rows a
    /// store keeps from before the mode was turned off, ...). Shown as the
    /// store wrote it, with no prefix; its kind is the store's. Stores make
    /// it with [`crate::store::store_error_as_written`].
    #[error("{source}")]
    Store {
        /// The store's identifier.
        store: String,
        /// What kind of error it is, as the store tells.
        kind: ErrorKind,
        /// The store's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// `t$rt` with table options.
    #[error(
        "'{name}' takes no table options (WITH (...)): the store has no history, and routing \
         follows the table's stored options"
    )]
    RealtimeOptions {
        /// The name as written.
        name: String,
    },

    /// A statement this crate parses itself, written wrong.
    #[error("{statement}: {reason}")]
    InvalidStatement {
        /// The statement's kind.
        statement: String,
        /// What is wrong and how to write it.
        reason: String,
    },

    /// A `CREATE TABLE` declaring a table Paimon's writer refuses every write
    /// to (an append table with a fixed `bucket` and no `bucket-key`, ...):
    /// refused before anything is created.
    #[error(
        "cannot create table '{table}': Paimon would refuse every write to it as declared: \
         {reason}. Nothing was created"
    )]
    CreateRefused {
        /// The table's full name.
        table: String,
        /// Paimon's reason.
        reason: String,
    },

    /// A tag was asked for over a snapshot that an expiry is deleting (or
    /// deleted while the tag was written): the tag would name deleted files,
    /// so it was removed again.
    #[error(
        "cannot create tag '{tag}' of '{table}': {reason}, so the tag would name deleted \
         files; it was not created. Tag a snapshot that is kept{newer}"
    )]
    TagOverExpiredSnapshot {
        /// The table's full name.
        table: String,
        /// The tag's name.
        tag: String,
        /// Why the snapshot's files are not kept.
        reason: String,
        /// Which snapshots are kept, as ` (N or newer)`, when known.
        newer: String,
    },

    /// Table maintenance (manifest compaction) could not finish; the table is
    /// as it was.
    #[error("maintenance of table '{table}' failed: {reason}")]
    MaintenanceFailed {
        /// The table's full name.
        table: String,
        /// What happened.
        reason: String,
    },

    /// A broken invariant of this crate: a bug, not a user error.
    #[error("internal error in paimon-lakestream: {0}")]
    Internal(String),

    /// An error from the paimon crate.
    #[error(transparent)]
    Paimon(#[from] paimon::Error),

    /// An error from DataFusion.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
}

/// A relation name with `$rt` that the store cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// `$rt` with nothing before it.
    #[error("invalid table name '{name}': the table part before '$rt' is empty")]
    EmptyTable {
        /// The name as written.
        name: String,
    },
    /// `t$branch_b1$rt`.
    #[error(
        "table '{name}' not found: the store serves the main branch's data only. Read \
         '{table}$rt' for the main branch's fresh rows, or '{table}$branch_{branch}' for the \
         branch's snapshots"
    )]
    RealtimeOfBranch {
        /// The name as written.
        name: String,
        /// The table part.
        table: String,
        /// The branch name.
        branch: String,
    },
    /// `t$snapshots$rt`.
    #[error(
        "table '{name}' not found: '$rt' cannot follow a system table. Read '{table}${system}' \
         for Paimon's system table, or '{table}$rt' for the table's fresh rows"
    )]
    RealtimeOfSystemTable {
        /// The name as written.
        name: String,
        /// The table part.
        table: String,
        /// What stood between the table and `$rt`.
        system: String,
    },
    /// `t$rt$snapshots`, `t$rt$branch_b1`.
    #[error(
        "table '{name}' not found: '{table}$rt' has no system tables or branches; the store \
         serves the main branch's data only. Read '{table}${suffix}' instead"
    )]
    SuffixAfterRealtime {
        /// The name as written.
        name: String,
        /// The table part.
        table: String,
        /// The suffix after `$rt`.
        suffix: String,
    },
    /// `t$rt$rt`.
    #[error("table '{name}' not found: '$rt' can be given once; read '{table}$rt'")]
    RealtimeTwice {
        /// The name as written.
        name: String,
        /// The table part.
        table: String,
    },
    /// Text that is not a table name (`t`, `db.t` or `catalog.db.t`).
    #[error(
        "'{name}' is not a table name: {reason}. Write it as in SQL: t, db.t or catalog.db.t, \
         with double quotes around a part that holds dots, spaces or capitals: \
         default.\"MyTable\""
    )]
    InvalidTableName {
        /// The text as given.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// What kind of failure an [`Error`] is. It decides how the error crosses
/// the DataFusion boundary: the first three are the user's to fix by changing
/// the statement, the options or the table (DataFusion plan errors); the
/// others are not (external or internal errors), and never say "during
/// planning".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The statement, a name or an option is written wrong.
    UserInput,
    /// What was asked is not supported for this table, store or mode.
    NotSupported,
    /// The table's state refuses the statement until the user acts (turns
    /// the mode off, tiers first, uses the catalog of the table's store).
    Conflict,
    /// A store, a file system or a service could not do what was asked, or
    /// did not answer; trying again may work, and the message says whether
    /// a write happened.
    Unavailable,
    /// Stored bytes or state do not verify.
    Corrupt,
    /// A broken invariant of this crate: a bug.
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order they are declared.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::UserInput,
        ErrorKind::NotSupported,
        ErrorKind::Conflict,
        ErrorKind::Unavailable,
        ErrorKind::Corrupt,
        ErrorKind::Internal,
    ];

    /// Whether the user fixes the error by changing the statement, the
    /// options or the table: such errors are DataFusion plan errors.
    pub fn is_users_to_fix(self) -> bool {
        matches!(
            self,
            ErrorKind::UserInput | ErrorKind::NotSupported | ErrorKind::Conflict
        )
    }
}

impl Error {
    /// The kind of this error. The match names every variant, so a new one
    /// cannot be added without choosing its kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidOption { .. }
            | Error::SessionRouting { .. }
            | Error::Name(_)
            | Error::CannotEnable { .. }
            | Error::RealtimeOfMissingTable { .. }
            | Error::NotLakeStream { .. }
            | Error::RealtimeTimeTravel { .. }
            | Error::TimeTravelTarget { .. }
            | Error::RealtimeReadOnly { .. }
            | Error::NoStore { .. }
            | Error::UnknownStore { .. }
            | Error::RealtimeOptions { .. }
            | Error::InvalidStatement { .. }
            | Error::CreateRefused { .. } => ErrorKind::UserInput,
            Error::RenameLakeStreamTable { .. }
            | Error::ReplaceLakeStreamTable { .. }
            | Error::MergeNotSupported { .. }
            | Error::WriteNotSupported { .. }
            | Error::TieringElsewhere { .. } => ErrorKind::NotSupported,
            Error::OptionChangeRefused { .. }
            | Error::SchemaChangedDuringAlter { .. }
            | Error::CreatedOverSnapshots { .. }
            | Error::TierNotLakeStream { .. }
            | Error::StoreTableMissing { .. }
            | Error::DropUnreachable { .. }
            | Error::StoreBindingMismatch { .. }
            | Error::UntieredRows { .. }
            | Error::TagOverExpiredSnapshot { .. } => ErrorKind::Conflict,
            Error::StoreUnavailable { .. }
            | Error::StoreTimeout { .. }
            | Error::ProcedureTimeout { .. }
            | Error::WriteNotApplied { .. }
            | Error::WriteOutcomeUnknown { .. }
            | Error::MaintenanceFailed { .. } => ErrorKind::Unavailable,
            Error::StoreFailed { kind, .. } | Error::Store { kind, .. } => *kind,
            Error::CreatedNotAttached { source, .. } => source.kind(),
            Error::Internal(_) => ErrorKind::Internal,
            Error::Paimon(e) => paimon_kind(e),
            Error::DataFusion(e) => datafusion_kind(e),
        }
    }

    /// A copy of this error for each writer of a group commit: the typed
    /// errors a writer acts on stay typed, others keep their text and kind.
    pub(crate) fn share(&self, store: &str) -> Error {
        match self {
            Error::StoreTableMissing { store, table } => Error::StoreTableMissing {
                store: store.clone(),
                table: table.clone(),
            },
            Error::WriteNotApplied { table, reason } => Error::WriteNotApplied {
                table: table.clone(),
                reason: reason.clone(),
            },
            Error::WriteOutcomeUnknown { table, reason } => Error::WriteOutcomeUnknown {
                table: table.clone(),
                reason: reason.clone(),
            },
            // Its own text, not the prefix again.
            Error::StoreFailed {
                store,
                kind,
                source,
            } => Error::StoreFailed {
                store: store.clone(),
                kind: *kind,
                source: source.to_string().into(),
            },
            Error::Store {
                store,
                kind,
                source,
            } => Error::Store {
                store: store.clone(),
                kind: *kind,
                source: source.to_string().into(),
            },
            other => Error::StoreFailed {
                store: store.to_string(),
                kind: other.kind(),
                source: other.to_string().into(),
            },
        }
    }
}

/// The paimon boundary: the `paimon::Catalog` decorator returns our errors as
/// [`paimon::Error`]s that keep them as their source, so the DataFusion
/// boundary ([`surface`]) can recover them.
impl From<Error> for paimon::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Paimon(e) => e,
            other => paimon::Error::DataInvalid {
                message: other.to_string(),
                source: Some(Box::new(other)),
            },
        }
    }
}

/// The DataFusion boundary: plan errors for what the user fixes, external
/// errors for the rest, internal errors for bugs.
impl From<Error> for DataFusionError {
    fn from(error: Error) -> Self {
        match error {
            Error::DataFusion(e) => e,
            Error::Paimon(e) => paimon_datafusion::to_datafusion_error(e),
            Error::Internal(message) => DataFusionError::Internal(message),
            e if e.kind().is_users_to_fix() => DataFusionError::Plan(e.to_string()),
            // A store's bug, as [`surface`] gives it.
            e if e.kind() == ErrorKind::Internal => DataFusionError::Internal(e.to_string()),
            e => DataFusionError::External(Box::new(e)),
        }
    }
}

impl Error {
    /// As a [`DataFusionError`] for an error raised while a statement runs:
    /// never a plan error ("during planning"), whatever its kind.
    pub(crate) fn into_run_time(self) -> DataFusionError {
        match self {
            e @ (Error::DataFusion(_) | Error::Paimon(_)) => e.into(),
            e if e.kind().is_users_to_fix() => DataFusionError::External(Box::new(e)),
            e => e.into(),
        }
    }
}

/// The kind of a paimon error: what names a missing or existing object, or
/// a bad option, is the user's; the rest is the file system's or the catalog's.
fn paimon_kind(error: &paimon::Error) -> ErrorKind {
    use paimon::Error as P;
    match error {
        P::DatabaseAlreadyExist { .. }
        | P::DatabaseNotExist { .. }
        | P::DatabaseNotEmpty { .. }
        | P::TableAlreadyExist { .. }
        | P::TableNotExist { .. }
        | P::SnapshotNotExist { .. }
        | P::TagAlreadyExist { .. }
        | P::TagNotExist { .. }
        | P::ViewAlreadyExist { .. }
        | P::ViewNotExist { .. }
        | P::FunctionNotExist { .. }
        | P::FunctionAlreadyExist { .. }
        | P::ColumnAlreadyExist { .. }
        | P::ColumnNotExist { .. }
        | P::IdentifierInvalid { .. }
        | P::ConfigInvalid { .. } => ErrorKind::UserInput,
        P::Unsupported { .. } | P::IoUnsupported { .. } => ErrorKind::NotSupported,
        P::DataInvalid { source, .. } => source
            .as_deref()
            .and_then(wrapped_kind)
            .unwrap_or(ErrorKind::Corrupt),
        P::FileIndexFormatInvalid { .. } | P::ParquetDataUnexpected { .. } => ErrorKind::Corrupt,
        _ => ErrorKind::Unavailable,
    }
}

/// The kind of a DataFusion error.
fn datafusion_kind(error: &DataFusionError) -> ErrorKind {
    match error {
        DataFusionError::Plan(_)
        | DataFusionError::SQL(..)
        | DataFusionError::SchemaError(..)
        | DataFusionError::Configuration(_) => ErrorKind::UserInput,
        DataFusionError::NotImplemented(_) => ErrorKind::NotSupported,
        DataFusionError::Internal(_) => ErrorKind::Internal,
        DataFusionError::Context(_, inner) => datafusion_kind(inner),
        DataFusionError::External(inner) => {
            wrapped_kind(inner.as_ref()).unwrap_or(ErrorKind::Unavailable)
        }
        _ => ErrorKind::Unavailable,
    }
}

/// The kind of an error of ours, paimon's or DataFusion's carried as a source.
fn wrapped_kind(error: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<ErrorKind> {
    if let Some(ours) = error.downcast_ref::<Error>() {
        Some(ours.kind())
    } else if let Some(paimon) = error.downcast_ref::<paimon::Error>() {
        Some(paimon_kind(paimon))
    } else {
        error.downcast_ref::<DataFusionError>().map(datafusion_kind)
    }
}

/// The DataFusion boundary: an error of ours that travelled through paimon or
/// DataFusion (as an `External` source) comes back as the plan error it is.
pub fn surface(error: DataFusionError) -> DataFusionError {
    let direct = matches!(&error, DataFusionError::External(e) if e.is::<Error>());
    match find_ours(&error) {
        Some(ours) if ours.kind().is_users_to_fix() => DataFusionError::Plan(ours.to_string()),
        Some(ours) if ours.kind() == ErrorKind::Internal => {
            DataFusionError::Internal(ours.to_string())
        }
        // Wrapped in paimon's "data invalid": our text alone, no dump.
        Some(ours) if !direct => DataFusionError::Execution(ours.to_string()),
        _ => error,
    }
}

fn find_ours<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours);
        }
        if let Some(DataFusionError::External(inner)) = e.downcast_ref::<DataFusionError>() {
            current = Some(inner.as_ref());
            continue;
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_error_inside_paimon_inside_datafusion_surfaces_as_plan_error() {
        let ours = Error::RenameLakeStreamTable {
            table: "db.t".to_string(),
        };
        let text = ours.to_string();
        let wrapped = paimon_datafusion::to_datafusion_error(paimon::Error::from(ours));
        assert!(matches!(wrapped, DataFusionError::External(_)));
        match surface(wrapped) {
            DataFusionError::Plan(message) => assert_eq!(message, text),
            other => panic!("expected a plan error, got {other:?}"),
        }
    }

    #[test]
    fn what_the_user_cannot_fix_never_says_during_planning() {
        let timeout = Error::StoreTimeout {
            store: "local".to_string(),
            operation: "write rows".to_string(),
            timeout: std::time::Duration::from_millis(1),
        };
        assert_eq!(timeout.kind(), ErrorKind::Unavailable);
        let text = DataFusionError::from(timeout).to_string();
        assert!(!text.contains("during planning"), "{text}");
        let refused = Error::RealtimeReadOnly {
            name: "t$rt".to_string(),
            table: "t".to_string(),
        };
        assert!(matches!(
            DataFusionError::from(refused),
            DataFusionError::Plan(_)
        ));
        let bug = Error::Internal("x".to_string());
        assert!(matches!(
            DataFusionError::from(bug),
            DataFusionError::Internal(_)
        ));
    }

    #[test]
    fn an_error_raised_while_running_never_says_during_planning() {
        let missing = Error::StoreTableMissing {
            store: "memory".to_string(),
            table: "db.t".to_string(),
        };
        let text = missing.to_string();
        let error = missing.into_run_time();
        assert!(!error.to_string().contains("during planning"), "{error}");
        assert!(error.to_string().ends_with(&text), "{error}");
    }

    #[test]
    fn an_error_of_ours_keeps_its_kind_through_paimon_and_datafusion() {
        let ours = Error::UntieredRows {
            store: "memory".to_string(),
            table: "db.t".to_string(),
            pending: "1 row".to_string(),
            wait: "tier".to_string(),
        };
        let through_paimon = Error::Paimon(paimon::Error::from(ours));
        assert_eq!(through_paimon.kind(), ErrorKind::Conflict);
        let damaged = paimon::Error::from(Error::Store {
            store: "memory".to_string(),
            kind: ErrorKind::Corrupt,
            source: "segment 'f' of 'db.t' is damaged".into(),
        });
        let through_datafusion = paimon_datafusion::to_datafusion_error(damaged);
        assert_eq!(
            Error::DataFusion(through_datafusion).kind(),
            ErrorKind::Corrupt
        );
    }

    #[test]
    fn a_store_error_through_paimon_surfaces_as_its_own_text() {
        let timeout = Error::StoreTimeout {
            store: "memory".to_string(),
            operation: "attach the table".to_string(),
            timeout: std::time::Duration::from_millis(300),
        };
        let text = timeout.to_string();
        let wrapped = paimon_datafusion::to_datafusion_error(paimon::Error::from(timeout));
        match surface(wrapped) {
            DataFusionError::Execution(message) => assert_eq!(message, text),
            other => panic!("expected our text alone, got {other}"),
        }
    }

    #[test]
    fn other_errors_pass_unchanged() {
        let e = surface(DataFusionError::Execution("boom".to_string()));
        assert!(matches!(e, DataFusionError::Execution(m) if m == "boom"));
    }
}
