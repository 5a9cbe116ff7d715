//! What goes wrong in the Fluss store, as the crate's errors.

use super::*;
use crate::error::ErrorKind;

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
    /// Rows read from the Fluss table that do not make a change batch: a bug.
    #[error(
        "the changes read from the Fluss table '{table}' do not make a change batch: {source}"
    )]
    ChangeBatch {
        /// The table's full name.
        table: String,
        /// What is wrong with them.
        source: crate::store::ChangeBatchError,
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

impl FlussStoreError {
    /// What kind of failure this is. A race with another statement that
    /// trying again resolves is not a conflict: conflicts are states that
    /// stay until the user acts.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FlussStoreError::Unsupported { .. } => ErrorKind::NotSupported,
            // The cluster's lake is set in the catalog's or the cluster's
            // options: the user's to correct.
            FlussStoreError::OtherLake { .. } => ErrorKind::UserInput,
            // Two tables that disagree, or rows that must not be tiered
            // or written, until the user drops, tiers or turns the mode.
            FlussStoreError::Mismatch { .. }
            | FlussStoreError::Replaced { .. }
            | FlussStoreError::Dropped { .. }
            | FlussStoreError::Leftover { .. }
            | FlussStoreError::Stranded { .. }
            | FlussStoreError::TieringOff { .. } => ErrorKind::Conflict,
            FlussStoreError::Client { .. }
            | FlussStoreError::ReplicaDown { .. }
            | FlussStoreError::NotSeen { .. }
            | FlussStoreError::OutcomeUnknown { .. } => ErrorKind::Unavailable,
            // Both arrow versions speak the one C Data Interface.
            FlussStoreError::Bridge(_) => ErrorKind::Internal,
            // The store pairs each row with its change type itself.
            FlussStoreError::ChangeBatch { .. } => ErrorKind::Internal,
        }
    }
}

impl From<FlussStoreError> for Error {
    fn from(error: FlussStoreError) -> Self {
        crate::store::store_error_of_kind(IDENTIFIER, error.kind(), error)
    }
}

/// fluss-rs errors without Rust debug noise where it has a plain message.
pub(super) fn describe(error: &fluss::error::Error) -> String {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => api_error.message.clone(),
        // fluss-rs prints a failed connection as "connection error" alone,
        // without what failed (refused, timed out).
        fluss::error::Error::RpcError {
            source: fluss::rpc::RpcError::ConnectionError(detail),
            ..
        } => format!("connection error: {detail}"),
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

#[cfg(test)]
mod tests {
    use datafusion::error::DataFusionError;

    use super::*;

    fn mismatch() -> FlussStoreError {
        FlussStoreError::Mismatch {
            table: "db.t".to_string(),
            reason: "its primary key is (id), the Paimon table's (k)".to_string(),
        }
    }

    #[test]
    fn a_fluss_error_the_user_fixes_is_a_plan_error_when_planned() {
        let text = Error::from(mismatch()).to_string();
        let error = Error::from(mismatch());
        assert_eq!(error.kind(), ErrorKind::Conflict);
        match DataFusionError::from(error) {
            DataFusionError::Plan(message) => assert_eq!(message, text),
            other => panic!("expected a plan error, got {other:?}"),
        }
        let unsupported = Error::from(FlussStoreError::Unsupported {
            table: "db.t".to_string(),
            reason: "it has no primary key".to_string(),
        });
        assert_eq!(unsupported.kind(), ErrorKind::NotSupported);
        assert!(matches!(
            DataFusionError::from(unsupported),
            DataFusionError::Plan(_)
        ));
    }

    #[test]
    fn a_fluss_error_raised_while_running_never_says_during_planning() {
        let replaced = FlussStoreError::Replaced {
            table: "db.t".to_string(),
            change: "dropped".to_string(),
            when: "after this read was planned".to_string(),
            consequence: "read it again".to_string(),
        };
        let error = Error::from(replaced);
        assert!(is_replaced(&error));
        assert_eq!(error.kind(), ErrorKind::Conflict);
        let text = error.to_string();
        let running = error.into_run_time();
        assert!(
            !running.to_string().contains("during planning"),
            "{running}"
        );
        assert!(running.to_string().ends_with(&text), "{running}");
    }

    #[test]
    fn each_variant_has_its_kind() {
        let table = || "db.t".to_string();
        let servers = || "127.0.0.1:9123".to_string();
        let cases = [
            (mismatch(), ErrorKind::Conflict),
            (
                FlussStoreError::OtherLake {
                    servers: servers(),
                    fluss: "of no Paimon lake".to_string(),
                    ours: "filesystem '/w'".to_string(),
                },
                ErrorKind::UserInput,
            ),
            (
                FlussStoreError::Dropped {
                    table: table(),
                    what: "read".to_string(),
                },
                ErrorKind::Conflict,
            ),
            (
                FlussStoreError::Leftover {
                    table: table(),
                    servers: servers(),
                    records: 3,
                },
                ErrorKind::Conflict,
            ),
            (
                FlussStoreError::Stranded {
                    table: table(),
                    records: 3,
                    since: "snapshot 2".to_string(),
                },
                ErrorKind::Conflict,
            ),
            (
                FlussStoreError::TieringOff { table: table() },
                ErrorKind::Conflict,
            ),
            (
                FlussStoreError::ReplicaDown {
                    table: table(),
                    why: "server 1 is down".to_string(),
                },
                ErrorKind::Unavailable,
            ),
            (
                FlussStoreError::NotSeen {
                    table: table(),
                    servers: servers(),
                    operation: "read".to_string(),
                },
                ErrorKind::Unavailable,
            ),
            (
                FlussStoreError::OutcomeUnknown {
                    table: table(),
                    servers: servers(),
                    cause: "timed out".to_string(),
                },
                ErrorKind::Unavailable,
            ),
            (
                FlussStoreError::Client {
                    servers: servers(),
                    operation: "read".to_string(),
                    table: table(),
                    source: Box::new(fluss::error::Error::UnexpectedError {
                        message: "boom".to_string(),
                        source: None,
                    }),
                },
                ErrorKind::Unavailable,
            ),
            (
                FlussStoreError::ChangeBatch {
                    table: table(),
                    source: crate::store::ChangeBatchError::LengthMismatch { rows: 2, kinds: 1 },
                },
                ErrorKind::Internal,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
            let error = Error::from(error);
            assert_eq!(error.kind(), kind, "{error}");
            assert!(!is_replaced(&error));
        }
    }
}
