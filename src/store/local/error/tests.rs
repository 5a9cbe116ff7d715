//! Each local store error's kind, source and text.

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
            LocalStoreError::OtherPaimonTable {
                table: table(),
                dir: "file:///s/db-db/t-t".to_string(),
                attached: "/w1/db.db/t".to_string(),
                location: "/w2/db.db/t".to_string(),
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
        (
            LocalStoreError::StoreTableStale {
                store: LOCAL.to_string(),
                table: "db.t".to_string(),
            },
            ErrorKind::Conflict,
        ),
        (
            LocalStoreError::TieredPositionUnknown {
                table: "db.t".to_string(),
                snapshot: 3,
                consumer: "c".to_string(),
                position: 1,
                end: 9,
                dir: "d".to_string(),
            },
            ErrorKind::Conflict,
        ),
        (
            LocalStoreError::StrandedRows {
                table: "db.t".to_string(),
                rows: 1,
                since: "snapshot 2".to_string(),
                tier_command: "tier".to_string(),
                dir: "d".to_string(),
            },
            ErrorKind::Conflict,
        ),
        (
            LocalStoreError::SegmentDamaged {
                table: "db.t".to_string(),
                file: "f".to_string(),
                position: 1,
                reason: "crc".to_string(),
                held: "it held 1 rows".to_string(),
            },
            ErrorKind::Corrupt,
        ),
        (
            LocalStoreError::StreamBehind {
                table: "db.t".to_string(),
                position: 4,
            },
            ErrorKind::Unavailable,
        ),
        (
            LocalStoreError::DroppedDuringRead {
                table: "db.t".to_string(),
            },
            ErrorKind::Unavailable,
        ),
    ];
    for (error, kind) in cases {
        assert_eq!(error.kind(), kind, "{error}");
        // A refusal or state whose text says all is shown as written;
        // a cause, after what failed.
        let text = if error.speaks_for_itself() {
            error.to_string()
        } else {
            format!("lakestream store 'local' failed: {error}")
        };
        let has_source = std::error::Error::source(&error).is_some();
        let ours = Error::from(error);
        assert_eq!(ours.kind(), kind, "{ours}");
        assert_eq!(ours.to_string(), text);
        let (Error::StoreFailed { source, .. } | Error::Store { source, .. }) = &ours else {
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
