//! Paimon commits to a warehouse on local disk never replace one another.
//!
//! paimon 0.4 publishes a snapshot by checking that its name is free and
//! then renaming a file over it, which on a POSIX file system replaces
//! whatever another commit created in between: that commit's rows vanish,
//! although it was acknowledged. Tables of a local warehouse are opened on a
//! file IO whose renames onto a snapshot or schema name never replace
//! (`src/object_storage/local.rs`); the loser retries on the next id.

use std::collections::{BTreeSet, HashMap};
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
    let mut contexts = Vec::new();
    for _ in 0..=WRITERS {
        contexts.push(context(&dir).await);
    }
    concurrent_inserts(contexts).await;
}

/// The same, through catalogs the app built and registered with
/// lake-stream options only (no `warehouse` among them): the catalog names
/// its warehouse itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_all_land_through_a_catalog_built_by_the_app() {
    let dir = TempDir::new().expect("temp dir");
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse).expect("warehouse");
    let mut contexts = Vec::new();
    for _ in 0..=WRITERS {
        let catalog = paimon::CatalogFactory::create(paimon::Options::from_map(HashMap::from([(
            "warehouse".to_string(),
            warehouse.display().to_string(),
        )])))
        .await
        .expect("paimon catalog");
        let mut ctx = LakeStreamContext::new();
        ctx.register_paimon_catalog(
            "paimon",
            catalog,
            HashMap::from([("lakestream.store".to_string(), "local".to_string())]),
        )
        .await
        .expect("register the catalog");
        contexts.push(ctx);
    }
    concurrent_inserts(contexts).await;
}

/// The first context creates the table and checks; each of the others
/// writes [`STATEMENTS`] rows, all at once.
///
/// A statement may fail only as paimon's optimistic commit does when it
/// lost to other commits `commit.max-retries` times in a row ("Commit
/// failed for snapshot ... retries": nothing was published, so its row
/// must not be there); any other error fails the test. Under a loaded
/// machine a writer can lose that often: each attempt takes longer than
/// the others' commits come.
async fn concurrent_inserts(mut contexts: Vec<LakeStreamContext>) {
    let ctx = contexts.remove(0);
    ctx.sql("CREATE TABLE w (id BIGINT, v STRING)")
        .await
        .expect("create");
    let mut writers = Vec::new();
    for (w, writer) in contexts.into_iter().enumerate() {
        let w = i64::try_from(w).expect("writer");
        writers.push(tokio::spawn(write(Arc::new(writer), w)));
    }
    // Every writer ends before anything is checked: a panic here while
    // others still write would delete the warehouse under them, and they
    // would fail finding their table gone.
    let mut acknowledged = BTreeSet::new();
    let mut refused = BTreeSet::new();
    let mut errors = Vec::new();
    for writer in futures::future::join_all(writers).await {
        match writer.expect("join") {
            Ok((ok, failed)) => {
                acknowledged.extend(ok);
                refused.extend(failed);
            }
            Err(error) => errors.push(error),
        }
    }
    assert!(errors.is_empty(), "writers failed: {errors:#?}");
    let held: BTreeSet<i64> = rows(&ctx, "SELECT id FROM w")
        .await
        .iter()
        .map(|id| id.parse().expect("id"))
        .collect();
    let lost: Vec<_> = acknowledged.difference(&held).collect();
    assert!(lost.is_empty(), "acknowledged, then lost: ids {lost:?}");
    let landed: Vec<_> = refused.intersection(&held).collect();
    assert!(landed.is_empty(), "failed, yet there: ids {landed:?}");
    assert_eq!(acknowledged, held, "ids never written");
    assert!(
        refused.len() < acknowledged.len(),
        "most statements must commit: {} of {} failed",
        refused.len(),
        WRITERS * STATEMENTS
    );
    assert_eq!(
        rows(&ctx, "SELECT count(*) FROM w$snapshots").await,
        vec![held.len().to_string()]
    );
}

/// The ids `writer` wrote: acknowledged, and refused by paimon's commit
/// retry limit; or the first other error, which ends the writer.
async fn write(ctx: Arc<LakeStreamContext>, writer: i64) -> Result<(Vec<i64>, Vec<i64>), String> {
    let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
    for s in 0..STATEMENTS {
        let id = writer * STATEMENTS + s;
        let planned = ctx
            .sql(&format!("INSERT INTO w VALUES ({id}, 'w{writer}')"))
            .await
            .map_err(|e| format!("plan {id}: {e}"))?;
        let result = planned.collect().await;
        match result {
            Ok(_) => acknowledged.push(id),
            Err(e)
                if e.to_string().contains("Commit failed for snapshot")
                    && !e.to_string().contains("outcome may be unknown") =>
            {
                refused.push(id)
            }
            Err(e) => return Err(format!("insert {id}: {e}")),
        }
    }
    Ok((acknowledged, refused))
}

/// `ALTER TABLE`s from contexts of their own (as processes) at once: each
/// one that returned is in the table's schema afterwards. paimon's catalog
/// reads the newest schema file and writes the next one in place, so
/// without the catalog's schema lock two at once write the same file and
/// the later one silently undoes the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_alters_all_land() {
    let dir = TempDir::new().expect("temp dir");
    let ctx = context(&dir).await;
    ctx.sql("CREATE TABLE a (id BIGINT)").await.expect("create");
    let mut alters = Vec::new();
    for w in 0..WRITERS {
        let ctx = context(&dir).await;
        alters.push(tokio::spawn(async move {
            for s in 0..10 {
                let sql = format!("ALTER TABLE a SET TBLPROPERTIES ('k{w}_{s}' = 'v')");
                ctx.sql(&sql)
                    .await
                    .map(|_| ())
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }));
    }
    for alter in alters {
        alter.await.expect("join");
    }
    let table = crate::support::paimon_table(&ctx, "a").await;
    let options = table.schema().options();
    let lost: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..10).map(move |s| format!("k{w}_{s}")))
        .filter(|key| !options.contains_key(key))
        .collect();
    assert!(
        lost.is_empty(),
        "ALTERs that returned, then undone: {lost:?}"
    );
    assert_eq!(table.schema().id(), WRITERS * 10, "one schema per ALTER");
}

/// A catalog registered again under another name, its lake-stream
/// catalog's inner catalog or the lake-stream catalog itself (so wrapped
/// twice), takes each schema lock once: its DDL never waits for itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_registered_twice_runs_its_ddl() {
    use paimon::catalog::Catalog;

    let dir = TempDir::new().expect("temp dir");
    let mut ctx = context(&dir).await;
    let lakestream = ctx.catalog("paimon").expect("catalog");
    let inner: Arc<dyn Catalog> = Arc::clone(lakestream.inner());
    let outer: Arc<dyn Catalog> = lakestream;
    let options = HashMap::from([("lakestream.store".to_string(), "local".to_string())]);
    ctx.register_paimon_catalog("again", inner, options.clone())
        .await
        .expect("register the inner catalog");
    ctx.register_paimon_catalog("twice", outer, options)
        .await
        .expect("register the catalog");
    for sql in [
        "CREATE TABLE again.default.r (id BIGINT)",
        "ALTER TABLE again.default.r SET TBLPROPERTIES ('a' = 'b')",
        "CREATE TABLE twice.default.s (id BIGINT)",
        "ALTER TABLE twice.default.s SET TBLPROPERTIES ('a' = 'b')",
        "DROP TABLE twice.default.s",
        "DROP TABLE again.default.r",
    ] {
        tokio::time::timeout(std::time::Duration::from_secs(30), ctx.sql(sql))
            .await
            .unwrap_or_else(|_| panic!("{sql}: still waiting after 30 s"))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}
