//! Shared test setup: real warehouses in temporary directories, behind a
//! filesystem catalog or a REST catalog served by [`RestCatalogServer`]; and
//! what the multi-process tests (`crash`, `history`) share: the `local`
//! store's catalog options, reading ids, and running this test binary again
//! as a child process.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::arrow::util::pretty::pretty_format_batches;
use paimon_lakestream::testing::Warehouse;
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::memory_store::MemoryStoreFactory;
use crate::rest_server::RestCatalogServer;

/// The catalog implementations every catalog-level test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    Filesystem,
    Rest,
}

/// A warehouse in a temporary directory, with the catalog in front of it:
/// a [`Warehouse`] whose contexts can all name the memory test store.
pub struct TestWarehouse {
    inner: Warehouse,
    /// The test store every context of this warehouse can name as `memory`.
    pub memory: Arc<MemoryStoreFactory>,
}

impl std::ops::Deref for TestWarehouse {
    type Target = Warehouse;

    fn deref(&self) -> &Warehouse {
        &self.inner
    }
}

impl TestWarehouse {
    pub async fn new(kind: CatalogKind) -> Self {
        match kind {
            CatalogKind::Filesystem => Self::wrap(Warehouse::filesystem()),
            CatalogKind::Rest => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let server = RestCatalogServer::start(&dir.path().join("warehouse"))
                    .await
                    .expect("REST catalog server");
                let mut inner = Warehouse::new(dir, server.catalog_options());
                inner.keep(Arc::new(server));
                Self::wrap(inner)
            }
        }
    }

    fn wrap(mut inner: Warehouse) -> Self {
        let memory = Arc::new(MemoryStoreFactory::default());
        inner
            .register_store(Arc::clone(&memory) as Arc<dyn paimon_lakestream::store::StoreFactory>);
        inner.keep(Arc::clone(&memory));
        Self { inner, memory }
    }

    /// A filesystem catalog over a warehouse someone else owns (a store's
    /// cluster tiers into it); it is left in place when dropped.
    #[cfg_attr(not(feature = "fluss"), allow(dead_code))]
    pub fn existing(warehouse: &Path) -> Self {
        Self::with_options(HashMap::from([(
            "warehouse".to_string(),
            warehouse.to_string_lossy().into_owned(),
        )]))
    }

    /// A warehouse elsewhere (in a bucket of the S3 test server) reached
    /// with `options`; the temporary directory holds what a test puts
    /// beside it.
    pub fn with_options(options: HashMap<String, String>) -> Self {
        Self::wrap(Warehouse::with_options(options))
    }

    /// The [`Warehouse`], for the `.slt` runs.
    pub fn into_inner(self) -> Warehouse {
        self.inner
    }
}

/// Catalog options of a filesystem warehouse whose lake-stream tables use the
/// `local` store at `store`, tiering in the background every `tier_interval`
/// whenever a row waits (`local.tier-target-size` = `1b`: the tests that
/// tier in the background want rounds racing their writes), `off`: only on
/// demand.
pub fn local_store_options(
    warehouse: &Path,
    store: &Path,
    tier_interval: &str,
) -> HashMap<String, String> {
    HashMap::from([
        ("warehouse".to_string(), warehouse.display().to_string()),
        ("lakestream.store".to_string(), "local".to_string()),
        ("local.path".to_string(), store.display().to_string()),
        ("local.tier-interval".to_string(), tier_interval.to_string()),
        ("local.tier-target-size".to_string(), "1b".to_string()),
    ])
}

/// A context on a fresh warehouse in `dir` (`warehouse/`, the `local`
/// store in `store/`), registered as `paimon`, tiering only on request.
pub async fn on_request_context(dir: &TempDir) -> LakeStreamContext {
    let options = local_store_options(
        &dir.path().join("warehouse"),
        &dir.path().join("store"),
        "off",
    );
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog("paimon", options)
        .await
        .expect("register the catalog");
    ctx
}

/// The Paimon table `default.<name>` of the catalog `paimon`, loaded now.
pub async fn paimon_table(ctx: &LakeStreamContext, name: &str) -> paimon::table::Table {
    use paimon::catalog::Catalog as _;
    ctx.catalog("paimon")
        .expect("catalog")
        .get_table(&paimon::catalog::Identifier::new("default", name))
        .await
        .expect("table")
}

/// Every row `sql` returns, its values joined with `|`, sorted; or the
/// query's error. Boxed: planning futures are large in debug builds, and a
/// test body awaiting many of them would overflow the test thread's stack.
pub async fn try_sorted_rows(ctx: &LakeStreamContext, sql: &str) -> Result<Vec<String>, String> {
    let batches = Box::pin(async { ctx.sql(sql).await?.collect().await })
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let values: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, row).expect("a printable value"))
                .collect();
            out.push(values.join("|"));
        }
    }
    out.sort();
    Ok(out)
}

/// Like [`try_sorted_rows`], panicking on an error.
pub async fn sorted_rows(ctx: &LakeStreamContext, sql: &str) -> Vec<String> {
    try_sorted_rows(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The first column of what a query returns, cast to `BIGINT`, as it comes
/// (duplicates kept), or the query's error.
pub async fn try_ids(ctx: &LakeStreamContext, sql: &str) -> Result<Vec<i64>, String> {
    let batches = ctx
        .sql(sql)
        .await
        .map_err(|e| format!("{sql}: {e}"))?
        .collect()
        .await
        .map_err(|e| format!("{sql}: {e}"))?;
    let mut out = Vec::new();
    for batch in batches {
        let column = cast(batch.column(0), &DataType::Int64).map_err(|e| e.to_string())?;
        let column = column
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or("not Int64")?;
        out.extend(column.iter().flatten());
    }
    Ok(out)
}

/// Like [`try_ids`], panicking on an error.
pub async fn ids(ctx: &LakeStreamContext, sql: &str) -> Vec<i64> {
    try_ids(ctx, sql).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`ids`], sorted.
pub async fn sorted_ids(ctx: &LakeStreamContext, sql: &str) -> Vec<i64> {
    let mut out = ids(ctx, sql).await;
    out.sort_unstable();
    out
}

/// Runs a statement to its end; its error as text.
pub async fn try_run(ctx: &LakeStreamContext, sql: &str) -> Result<(), String> {
    match ctx.sql(sql).await {
        Ok(df) => df.collect().await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The `local` store's log segments under `dir` (a store root), sorted.
pub fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    files_where(dir, |path| {
        path.extension().is_some_and(|e| e == "seg")
            && path.parent().is_some_and(|p| p.ends_with("log"))
    })
}

/// The files under `dir` (recursively) that `keep` keeps, sorted.
pub fn files_where(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if keep(&path) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// What `CALL sys.lakestream_set_aside('<table>', <position>)` answers.
pub async fn set_aside_says(ctx: &LakeStreamContext, table: &str, position: u64) -> String {
    let sql = format!("CALL sys.lakestream_set_aside('{table}', {position})");
    let batches = ctx
        .sql(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pretty_format_batches(&batches).expect("format").to_string()
}

/// Runs a statement to its end, panicking on an error.
pub async fn run(ctx: &LakeStreamContext, sql: &str) {
    try_run(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A command that runs this test binary again with `test` (a full path such
/// as `crash::child_process`) as its only test, output not captured. Its
/// standard output is piped; the caller sets the environment that tells the
/// child its role. Child tests are `#[ignore]`d, so a run of the suite lists
/// them as ignored, never as passed; the child is run with `--ignored`.
pub fn child_command(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    command
}

/// Sends each line `output` gives to `lines`, tagged with `tag`, from a
/// thread of its own, until the output ends (or the receiver is gone).
pub fn forward_lines<T: Clone + Send + 'static>(
    output: impl Read + Send + 'static,
    tag: T,
    lines: Sender<(T, String)>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            if lines.send((tag.clone(), line)).is_err() {
                break;
            }
        }
    })
}
