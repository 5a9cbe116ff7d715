//! What goes wrong in the Fluss store, as the crate's errors.

use super::*;

/// What went wrong in the Fluss store, beyond reachability.
#[derive(Debug, thiserror::Error)]
pub enum FlussStoreError {
    /// The Paimon table cannot be served by Fluss as it is.
    #[error("table '{table}' cannot be a lake-stream table on Fluss: {reason}")]
    Unsupported {
        /// The table's full name.
        table: String,
        /// Why, and what to change.
        reason: String,
    },
    /// The Fluss table exists but does not match the Paimon table.
    #[error(
        "the Fluss table '{table}' does not match the Paimon table '{table}': {reason}. Drop the \
         Fluss table (it is recreated from the Paimon table), or change the Paimon table to match"
    )]
    Mismatch {
        /// The table's full name (the same on both sides).
        table: String,
        /// The difference.
        reason: String,
    },
    /// The cluster answered with an error.
    #[error("Fluss at '{servers}' could not {operation} '{table}': {source}")]
    Client {
        /// The bootstrap servers.
        servers: String,
        /// What was asked.
        operation: String,
        /// The table's full name.
        table: String,
        /// fluss-rs's error.
        source: Box<fluss::error::Error>,
    },
    /// Fluss tiers into another Paimon catalog than the one this store serves.
    #[error(
        "the Fluss cluster at '{servers}' tiers into the Paimon catalog {fluss}, but this \
         catalog is {ours}: Fluss would write other tables than the ones read here. Start the \
         Fluss servers with datalake.format: paimon and datalake.paimon.* pointing at this \
         catalog (e.g. datalake.paimon.warehouse), or point the catalog at Fluss's warehouse"
    )]
    OtherLake {
        /// The bootstrap servers.
        servers: String,
        /// What the cluster tiers into.
        fluss: String,
        /// What this catalog is.
        ours: String,
    },
    /// A batch could not cross between the arrow versions.
    #[error(transparent)]
    Bridge(#[from] arrow_bridge::BridgeError),
    /// The Fluss table a statement found is gone: another statement or
    /// process dropped it (and perhaps created it again) since.
    #[error(
        "the Fluss table '{table}' was {change} {when}, by another statement or process: \
         {consequence}"
    )]
    Replaced {
        /// The table's full name.
        table: String,
        /// `dropped`, `dropped and created again`, ...
        change: String,
        /// Since when: `after this read was planned`, `while this write ran`.
        when: String,
        /// What that means for the statement, and what to do.
        consequence: String,
    },
    /// The Paimon table was dropped after the statement was planned.
    #[error(
        "table '{table}' was dropped after this statement was planned, by another statement or \
         process, and its Fluss table with it: nothing was {what}"
    )]
    Dropped {
        /// The table's full name.
        table: String,
        /// `read`, `written`.
        what: String,
    },
    /// A Fluss table of the name exists and was written to, but the Paimon
    /// table was never served by it: it is an earlier table's, left by a
    /// drop that did not remove it.
    #[error(
        "the Fluss table '{table}' at '{servers}' holds rows ({records} change-log records) of \
         an earlier table named '{table}', but the Paimon table '{table}' was never served by \
         it: a drop of the earlier table (by another engine, or through a catalog without the \
         Fluss store) left it behind. Its rows must not show in the new table, so it is not \
         attached. Drop the Fluss table (it is created afresh from the Paimon table), then \
         turn the mode on again"
    )]
    Leftover {
        /// The table's full name.
        table: String,
        /// The bootstrap servers.
        servers: String,
        /// How many change-log records its buckets reach.
        records: i64,
    },
    /// The Fluss table holds rows written after its tiering was stopped,
    /// older than rows Paimon got directly since.
    #[error(
        "cannot turn lake-stream mode of '{table}' on: the Fluss table '{table}' holds {records} \
         change-log records that reached it after the mode was turned off and Fluss's tiering \
         of it stopped (writes planned before that), not in Paimon, and {since}. Tiering them \
         now would commit their older values over the newer ones, key by key. To drop them, \
         drop the Fluss table '{table}' in Fluss (turning the mode on creates it afresh from \
         the Paimon table); to keep them (they win over the newer rows of the same keys), set \
         'table.datalake.enabled' = 'true' on the Fluss table and wait until Fluss's tiering \
         service has tiered them. Then turn the mode on again"
    )]
    Stranded {
        /// The table's full name.
        table: String,
        /// How many change-log records wait.
        records: i64,
        /// What Paimon got since.
        since: String,
    },
    /// A write to a table in lake-stream mode whose Fluss table has its
    /// tiering off: its rows would never reach Paimon.
    #[error(
        "cannot write to '{table}': Fluss's tiering of the Fluss table '{table}' is off \
         ('table.datalake.enabled' is not 'true' on it) while the table is in lake-stream \
         mode, so rows written now would never reach Paimon. Another process is turning the \
         mode off right now, or one stopped midway. Nothing was written. Turn the mode on \
         again (ALTER TABLE ... SET TBLPROPERTIES ('lakestream.enabled' = 'true')) to resume \
         tiering, or off to finish turning it off"
    )]
    TieringOff {
        /// The table's full name.
        table: String,
    },
    /// A drop while a replica of the table is on a tablet server that is down.
    #[error(
        "the Fluss table '{table}' has a replica on a tablet server that is down ({why}), and \
         Fluss 0.9.1 cannot start a tablet server again once a table it held was dropped while \
         it was down. The table '{table}' was not dropped: start the tablet servers again, then \
         run DROP TABLE again"
    )]
    ReplicaDown {
        /// The table's full name.
        table: String,
        /// What shows a replica is down.
        why: String,
    },
    /// Fluss answered that it has no such table, but its coordinator has it.
    #[error(
        "the Fluss cluster at '{servers}' could not {operation} '{table}': a server answered \
         that the table does not exist, but Fluss's coordinator has it, so the answer came \
         from servers whose view of the table is out of date (a tablet server down or \
         restarting, or metadata not yet caught up with a table created again). Try again; \
         if it persists, check the cluster's tablet servers"
    )]
    NotSeen {
        /// The table's full name.
        table: String,
        /// The bootstrap servers.
        servers: String,
        /// What was asked.
        operation: String,
    },
    /// A write failed after some of its rows may have reached Fluss.
    #[error(
        "the write to '{table}' failed after its rows were handed to the Fluss cluster at \
         '{servers}', so its outcome is unknown: Fluss may hold none, some or all of them. \
         Check with SELECT * FROM {table}$rt before writing them again. The failure: {cause}"
    )]
    OutcomeUnknown {
        /// The table's full name.
        table: String,
        /// The bootstrap servers.
        servers: String,
        /// What failed.
        cause: String,
    },
}

impl From<FlussStoreError> for Error {
    fn from(error: FlussStoreError) -> Self {
        crate::store::store_error(IDENTIFIER, error)
    }
}

/// fluss-rs errors without Rust debug noise where it has a plain message.
pub(super) fn describe(error: &fluss::error::Error) -> String {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => api_error.message.clone(),
        fluss::error::Error::RpcError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Whether `error` is a [`FlussStoreError::Replaced`].
pub(super) fn is_replaced(error: &Error) -> bool {
    match error {
        Error::StoreFailed { source, .. } => matches!(
            source.downcast_ref::<FlussStoreError>(),
            Some(FlussStoreError::Replaced { .. })
        ),
        _ => false,
    }
}
