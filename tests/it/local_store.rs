//! The embedded `local` store: the conformance suite, and what only a real
//! store on disk has to prove (durability, crashes, processes, tiering).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::util::pretty::pretty_format_batches;
use paimon_lakestream::LakeStreamContext;

use crate::slt::{conformance, StoreCondition, StoreHarness};
use crate::support::TestWarehouse;

/// The `local` store under the test warehouse (`<warehouse>/_lakestream`),
/// background tiering off so that tests decide when rows move.
pub struct LocalHarness;

#[async_trait]
impl StoreHarness for LocalHarness {
    fn identifier(&self) -> &str {
        "local"
    }

    async fn open(
        &self,
        warehouse: &TestWarehouse,
        condition: StoreCondition,
    ) -> LakeStreamContext {
        match condition {
            StoreCondition::Reachable => {
                // Explicit, so it works for REST catalogs too, whose
                // warehouse is a name rather than a directory.
                let path = warehouse.path().join("store");
                warehouse
                    .context_with(&[
                        ("lakestream.store", "local"),
                        ("local.tier-interval", "off"),
                        ("local.path", path.to_str().expect("utf-8 path")),
                    ])
                    .await
            }
            // A store directory that cannot be created: the store cannot open.
            StoreCondition::Unreachable | StoreCondition::Slow => {
                let blocker = warehouse.path().join("not-a-directory");
                std::fs::write(&blocker, b"a file where the store's directory should be")
                    .expect("write blocker");
                let path = blocker.join("store");
                warehouse
                    .context_with(&[
                        ("lakestream.store", "local"),
                        ("local.path", path.to_str().expect("utf-8 path")),
                    ])
                    .await
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_local() {
    conformance(Arc::new(LocalHarness)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering() {
    crate::slt::run_file(
        "tiering.slt",
        crate::support::CatalogKind::Filesystem,
        Some(Arc::new(LocalHarness)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiering_rest() {
    crate::slt::run_file(
        "tiering.slt",
        crate::support::CatalogKind::Rest,
        Some(Arc::new(LocalHarness)),
    )
    .await;
}

/// The store on `memory://`: writes, reads and tiering, with nothing on disk
/// but the Paimon warehouse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_runs_on_memory_urls_too() {
    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    let url = format!("memory://lakestream-{}", std::process::id());
    let ctx = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.path", &url),
            ("local.tier-interval", "off"),
        ])
        .await;
    for sql in [
        "CREATE TABLE m (id INT) WITH ('lakestream.enabled' = 'true')",
        "INSERT INTO m VALUES (1), (2)",
    ] {
        ctx.sql(sql).await.unwrap().collect().await.unwrap();
    }
    let count = |sql: &'static str| {
        let ctx = &ctx;
        async move {
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            pretty_format_batches(&batches).unwrap().to_string()
        }
    };
    assert!(count("SELECT count(*) AS n FROM m$rt")
        .await
        .contains("| 2 |"));
    assert!(count("SELECT count(*) AS n FROM m").await.contains("| 0 |"));
    count("SELECT * FROM lakestream_tier('m')").await;
    assert!(count("SELECT count(*) AS n FROM m").await.contains("| 2 |"));
    assert!(count("SELECT count(*) AS n FROM m$rt")
        .await
        .contains("| 2 |"));
    assert!(!warehouse
        .path()
        .join("warehouse")
        .join("_lakestream")
        .exists());
}

/// A tiering shows how far it has got while it runs (the shell's status
/// line reads this board), and leaves the board when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tiering_reports_its_progress() {
    use paimon_lakestream::store::progress::running_tierings;

    let warehouse = TestWarehouse::new(crate::support::CatalogKind::Filesystem).await;
    // One segment per commit: 12 commits, each its own Paimon snapshot.
    let ctx = Arc::new(
        warehouse
            .context_with(&[
                ("lakestream.store", "local"),
                ("local.tier-interval", "off"),
                ("local.tier-max-rows", "1"),
            ])
            .await,
    );
    ctx.sql("CREATE TABLE progress_board (id INT) WITH ('lakestream.enabled' = 'true')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    for i in 0..12 {
        ctx.sql(&format!("INSERT INTO progress_board VALUES ({i}), ({i})"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
    let tiering = {
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            ctx.sql("SELECT * FROM lakestream_tier('progress_board')")
                .await?
                .collect()
                .await
        })
    };
    let mut seen = Vec::new();
    while !tiering.is_finished() {
        seen.extend(
            running_tierings()
                .into_iter()
                .filter(|s| s.table == "default.progress_board"),
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    tiering.await.expect("join").expect("tiering");
    assert!(!seen.is_empty(), "the tiering never showed on the board");
    // Before it has listed the store, a tiering does not know its total yet.
    assert!(
        seen.iter()
            .all(|s| (s.total == 0 || s.total == 24) && s.rows <= s.total),
        "{seen:?}"
    );
    assert!(seen.iter().any(|s| s.total == 24), "{seen:?}");
    assert!(
        seen.iter().any(|s| s.rows > 0 && s.rows < 24),
        "no status between the first and the last commit: {seen:?}"
    );
    assert!(running_tierings()
        .iter()
        .all(|s| s.table != "default.progress_board"));
}
