//! What goes wrong in the local store, as the crate's errors: each variant
//! chooses its [`ErrorKind`], and [`From`] makes it a
//! [`Error::StoreFailed`] of that kind.

use datafusion::arrow::error::ArrowError;
use object_store::path::Path;

use super::LOCAL;
use crate::error::{Error, ErrorKind};
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
            LocalStoreError::ColumnsGone { .. } => ErrorKind::Conflict,
            LocalStoreError::SchemaChanged { .. }
            | LocalStoreError::NoCreateIfAbsent { .. }
            | LocalStoreError::NoConditionalReplace { .. } => ErrorKind::NotSupported,
            LocalStoreError::Encode { .. } | LocalStoreError::Batch { .. } => ErrorKind::Internal,
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
        crate::store::store_error_of_kind(LOCAL, error.kind(), error)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::error::DataFusionError;

    use super::*;

    fn objects() -> object_store::Error {
        object_store::Error::Generic {
            store: "test",
            source: "connection reset".into(),
        }
    }

    fn json() -> serde_json::Error {
        serde_json::from_slice::<serde_json::Value>(b"{").unwrap_err()
    }

    fn arrow() -> ArrowError {
        ArrowError::SchemaError("column 'v' is not nullable".to_string())
    }

    async fn join_error(panic: bool) -> tokio::task::JoinError {
        let task = tokio::spawn(async move {
            if panic {
                panic!("a blocking write panicked");
            }
            std::future::pending::<()>().await
        });
        if !panic {
            task.abort();
        }
        task.await.unwrap_err()
    }

    #[tokio::test]
    async fn each_variant_has_its_kind_and_keeps_its_source() {
        let table = || "db.t".to_string();
        let cases = [
            (LocalStoreError::Objects(objects()), ErrorKind::Unavailable),
            (
                LocalStoreError::ListLease { source: objects() },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::Probe {
                    root: "s3://b/".to_string(),
                    source: objects(),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::NoCreateIfAbsent {
                    root: "s3://b/".to_string(),
                    what: "ignored a create-if-absent".to_string(),
                },
                ErrorKind::NotSupported,
            ),
            (
                LocalStoreError::WriteFile {
                    path: Path::from("t/log/1.seg"),
                    source: std::io::Error::other("disk full"),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::ReadFile {
                    path: Path::from("t/table.json"),
                    source: std::io::Error::other("i/o error"),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::WriteObject {
                    path: Path::from("t/log/1.seg"),
                    source: objects(),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::Lock {
                    name: "tier.lock".to_string(),
                    source: std::io::Error::other("denied"),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::Blocking {
                    what: "locking 'tier.lock'".to_string(),
                    source: join_error(false).await,
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::Blocking {
                    what: "locking 'tier.lock'".to_string(),
                    source: join_error(true).await,
                },
                ErrorKind::Internal,
            ),
            (
                LocalStoreError::CurrentDir {
                    location: "lake".to_string(),
                    source: std::io::Error::other("gone"),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::TrimmedUnderRead { table: table() },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::TieredElsewhere {
                    table: table(),
                    end: 3,
                    reached: 5,
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::SnapshotLanded {
                    table: table(),
                    position: 3,
                    base: Some(1),
                    latest: Some(2),
                },
                ErrorKind::Unavailable,
            ),
            (
                LocalStoreError::ColumnsGone {
                    table: table(),
                    position: 4,
                    columns: "column 'c'".to_string(),
                },
                ErrorKind::Conflict,
            ),
            (
                LocalStoreError::Unreadable {
                    file: "file:///w/_lakestream/db/t/table.json".to_string(),
                    source: json(),
                },
                ErrorKind::Corrupt,
            ),
            (
                LocalStoreError::TieringIdentifier {
                    snapshot: 4,
                    identifier: -1,
                },
                ErrorKind::Corrupt,
            ),
            (
                LocalStoreError::PositionOverflow { position: u64::MAX },
                ErrorKind::Corrupt,
            ),
            (
                LocalStoreError::SegmentsMissing {
                    table: table(),
                    position: 7,
                },
                ErrorKind::Corrupt,
            ),
            (
                LocalStoreError::RowKinds {
                    table: table(),
                    source: ChangeBatchError::UnknownKind { row: 2, code: 1 },
                },
                ErrorKind::Corrupt,
            ),
            (LocalStoreError::DeleteInAppendLog, ErrorKind::Corrupt),
            (
                LocalStoreError::SchemaChanged { source: arrow() },
                ErrorKind::NotSupported,
            ),
            (
                LocalStoreError::encoding("table.json", json()),
                ErrorKind::Internal,
            ),
            (
                LocalStoreError::Batch { source: arrow() },
                ErrorKind::Internal,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
            let text = format!("lakestream store 'local' failed: {error}");
            let has_source = std::error::Error::source(&error).is_some();
            let ours = Error::from(error);
            assert_eq!(ours.kind(), kind, "{ours}");
            assert_eq!(ours.to_string(), text);
            let Error::StoreFailed { source, .. } = &ours else {
                panic!("not a store error: {ours:?}");
            };
            let local = source
                .downcast_ref::<LocalStoreError>()
                .expect("the local store's error is the source");
            assert_eq!(
                std::error::Error::source(local).is_some(),
                has_source,
                "{ours}"
            );
        }
    }

    #[test]
    fn messages_keep_their_words() {
        let unreadable = LocalStoreError::Unreadable {
            file: "file:///w/t/tiered.json".to_string(),
            source: json(),
        };
        assert!(unreadable
            .to_string()
            .starts_with("'file:///w/t/tiered.json' cannot be read: "));
        let write = LocalStoreError::WriteFile {
            path: Path::from("db/t/log/00001.seg"),
            source: std::io::Error::other("disk full"),
        };
        assert_eq!(write.to_string(), "write 'db/t/log/00001.seg': disk full");
        assert_eq!(
            LocalStoreError::SegmentsMissing {
                table: "db.t".to_string(),
                position: 7
            }
            .to_string(),
            "segments of 'db.t' after position 7 are missing"
        );
    }

    #[test]
    fn a_damaged_meta_file_is_not_an_outage_nor_a_plan_error() {
        let damaged: Error = LocalStoreError::Unreadable {
            file: "table.json".to_string(),
            source: json(),
        }
        .into();
        assert_eq!(damaged.kind(), ErrorKind::Corrupt);
        let text = DataFusionError::from(damaged).to_string();
        assert!(!text.contains("during planning"), "{text}");
    }
}
