//! Paimon commits to a warehouse on local disk never replace one another.
//!
//! paimon 0.4 publishes a snapshot by checking that its name is free and
//! then renaming a file over it, which on a POSIX file system replaces
//! whatever another commit created in between: that commit's rows vanish,
//! although it was acknowledged. Tables of a local warehouse are opened on a
//! file IO whose renames onto a snapshot or schema name never replace
//! (`src/object_storage/local.rs`); the loser retries on the next id.

use std::collections::BTreeSet;
use std::sync::Arc;

use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::on_request_context as context;
use crate::support::sorted_rows as rows;

const WRITERS: i64 = 4;
const STATEMENTS: i64 = 40;

/// Writers in contexts of their own (as processes are: they share only the
/// files) commit to one plain Paimon table at once; every acknowledged row
/// is there afterwards, and every snapshot id is one commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_all_land() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    ctx.sql("CREATE TABLE w (id BIGINT, v STRING)")
        .await
        .expect("create");
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let ctx = Arc::new(context(&dir).await);
        writers.push(tokio::spawn(write(ctx, w)));
    }
    for writer in writers {
        writer.await.expect("join");
    }
    let held: BTreeSet<i64> = rows(&ctx, "SELECT id FROM w")
        .await
        .iter()
        .map(|id| id.parse().expect("id"))
        .collect();
    let lost: Vec<i64> = (0..WRITERS * STATEMENTS)
        .filter(|id| !held.contains(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged, then lost: ids {lost:?}");
    assert_eq!(held.len() as i64, WRITERS * STATEMENTS, "ids never written");
    assert_eq!(
        rows(&ctx, "SELECT count(*) FROM w$snapshots").await,
        vec![(WRITERS * STATEMENTS).to_string()]
    );
}

async fn write(ctx: Arc<LakeStreamContext>, writer: i64) {
    for s in 0..STATEMENTS {
        let id = writer * STATEMENTS + s;
        ctx.sql(&format!("INSERT INTO w VALUES ({id}, 'w{writer}')"))
            .await
            .expect("plan")
            .collect()
            .await
            .unwrap_or_else(|e| panic!("insert {id}: {e}"));
    }
}
