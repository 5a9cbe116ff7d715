//! The store conformance suite, for the authors of stores (cargo feature
//! `testing`).
//!
//! A store plugs into lake-stream mode through a
//! [`StoreFactory`]; its reads of `t$rt` hand the union read
//! [`ChangeBatch`](crate::store::ChangeBatch)es, rows with their row kinds
//! (see [`StoreLog`](crate::store::StoreLog)). Whether it keeps the
//! contract (acknowledged writes visible at once, merges by key, deletes,
//! streaming reads, a catalog that works while the store is down) is what
//! the conformance suite checks: the `.slt` files of `sql-tests/conformance/`
//! in this crate's repository, carried inside the crate
//! ([`CONFORMANCE_FILES`]), run through a [`LakeStreamContext`] whose catalog
//! names the store. The memory test store, the `local` store (on disk and on
//! S3) and the Fluss store all run it from here, as object_store's backends
//! run its integration tests.
//!
//! A store author implements [`StoreHarness`] (how to open a context whose
//! catalog names the store, reachable or not, and which optional
//! [`Capability`]s it has) and calls [`conformance`] from a test:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use paimon_lakestream::testing::{
//!     conformance, Capability, StoreCondition, StoreHarness, Warehouse,
//! };
//! use paimon_lakestream::LakeStreamContext;
//!
//! /// `my-store` at an address of a test server.
//! struct MyStoreHarness {
//!     address: String,
//! }
//!
//! #[async_trait]
//! impl StoreHarness for MyStoreHarness {
//!     fn identifier(&self) -> &str {
//!         "my-store"
//!     }
//!
//!     fn capabilities(&self) -> Vec<Capability> {
//!         // Deletes on primary-key tables; tiering is done by a service of
//!         // the store's own, not on request.
//!         vec![Capability::Deletes]
//!     }
//!
//!     async fn open(&self, warehouse: &Warehouse, condition: StoreCondition) -> LakeStreamContext {
//!         let address = match condition {
//!             StoreCondition::Reachable => self.address.clone(),
//!             // Nothing listens there.
//!             StoreCondition::Unreachable | StoreCondition::Slow => "127.0.0.1:1".to_string(),
//!         };
//!         // With the factory of a store that is not built in registered
//!         // (`Warehouse::register_store`), or built in like `local`.
//!         warehouse
//!             .context_with(&[
//!                 ("lakestream.store", "my-store"),
//!                 ("my-store.address", &address),
//!                 ("lakestream.timeout", "5s"),
//!             ])
//!             .await
//!     }
//! }
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn my_store_conforms() {
//!     let harness = MyStoreHarness { address: "127.0.0.1:9123".to_string() };
//!     conformance(Arc::new(harness)).await;
//! }
//! ```
//!
//! Each file runs against a fresh [`Warehouse`] (a filesystem catalog in a
//! temporary directory, unless the harness says otherwise). A failure
//! panics, naming the file, the store and the record that failed.
//!
//! [`run`] runs any `.slt` file (or text) the same way, and completes one
//! ([`Mode::Complete`]): writes its expected results from what the engine
//! returns.

mod database;
pub mod faulty;

use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tempfile::TempDir;

use crate::store::StoreFactory;
use crate::LakeStreamContext;

/// Work held at a named fail point, for race tests.
pub use crate::failpoint::Pause;
/// A full disk under a local warehouse's directory, for fault tests.
pub use crate::object_storage::disk_full::DiskFull;
pub use database::{text_rows, AfterStatements, Database, STATEMENT_TIMEOUT};
pub use sqllogictest;

/// The files of the conformance suite: `(name, text)`, the name relative to
/// `sql-tests/`.
pub const CONFORMANCE_FILES: &[(&str, &str)] = &[
    (
        "conformance/append.slt",
        include_str!("../../sql-tests/conformance/append.slt"),
    ),
    (
        "conformance/primary_key.slt",
        include_str!("../../sql-tests/conformance/primary_key.slt"),
    ),
    (
        "conformance/deletes.slt",
        include_str!("../../sql-tests/conformance/deletes.slt"),
    ),
    (
        "conformance/tiering.slt",
        include_str!("../../sql-tests/conformance/tiering.slt"),
    ),
    (
        "conformance/streaming.slt",
        include_str!("../../sql-tests/conformance/streaming.slt"),
    ),
    (
        "conformance/unreachable.slt",
        include_str!("../../sql-tests/conformance/unreachable.slt"),
    ),
];

/// How the store of a context a harness opens is reached (the
/// pseudo-statement `TEST REOPEN [UNREACHABLE|SLOW]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCondition {
    Reachable,
    /// Calls fail at once, as they do with nothing listening.
    Unreachable,
    /// Calls get no answer; the harness sets a short `lakestream.timeout`.
    /// A harness that cannot make its store silent may treat it as
    /// [`StoreCondition::Unreachable`].
    Slow,
}

/// An optional part of the store contract. Each is also a label that
/// `onlyif`/`skipif` records of the conformance files name: a store that
/// lacks one runs the records saying how it refuses instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// `DELETE` (and the deletes of `UPDATE`) on primary-key tables
    /// ([`Capabilities::deletes`](crate::store::Capabilities::deletes)).
    Deletes,
    /// Tiering on request, `CALL sys.lakestream_tier`
    /// ([`LakestreamStore::tier`](crate::store::LakestreamStore::tier)).
    /// Stores that a service of their own tiers (Fluss) lack it.
    Tiering,
}

impl Capability {
    /// The label of `onlyif`/`skipif` records.
    pub fn label(self) -> &'static str {
        match self {
            Self::Deletes => "deletes",
            Self::Tiering => "tiering",
        }
    }
}

/// A store the suite runs against: opens contexts on a test [`Warehouse`]
/// whose catalog names the store.
#[async_trait]
pub trait StoreHarness: Send + Sync {
    /// The store's identifier, also an `onlyif`/`skipif` label.
    fn identifier(&self) -> &str;

    /// What the store can do of the optional parts of the contract.
    fn capabilities(&self) -> Vec<Capability>;

    /// A context on `warehouse`, its catalog registered as `paimon` and
    /// naming this store, reached as `condition` says.
    async fn open(&self, warehouse: &Warehouse, condition: StoreCondition) -> LakeStreamContext;

    /// The warehouse a file runs against: by default a fresh filesystem
    /// warehouse ([`Warehouse::filesystem`]); a store that tiers into a
    /// warehouse of its own (a cluster's) answers that one.
    async fn warehouse(&self) -> Warehouse {
        Warehouse::filesystem()
    }

    /// A pseudo-statement `TEST <command>` that only this store knows (a
    /// failure switch): `None` when it does not know it either.
    async fn test_statement(
        &self,
        warehouse: &Warehouse,
        command: &str,
    ) -> Option<Result<(), String>> {
        let _ = (warehouse, command);
        None
    }
}

/// A warehouse for one file: its catalog options, a temporary directory that
/// lives as long as it, the store factories every context of it registers,
/// and anything kept alive with it (a catalog server).
pub struct Warehouse {
    kept: Vec<Arc<dyn Any + Send + Sync>>,
    factories: Vec<Arc<dyn StoreFactory>>,
    options: HashMap<String, String>,
    dir: TempDir,
}

impl std::fmt::Debug for Warehouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warehouse")
            .field("dir", &self.dir.path())
            .field("factories", &self.factories)
            .finish_non_exhaustive()
    }
}

impl Warehouse {
    /// A warehouse reached with the catalog `options`, beside the temporary
    /// directory `dir`.
    pub fn new(dir: TempDir, options: HashMap<String, String>) -> Self {
        Self {
            kept: Vec::new(),
            factories: Vec::new(),
            options,
            dir,
        }
    }

    /// A filesystem catalog on `<dir>/warehouse` of a fresh temporary directory.
    pub fn filesystem() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let warehouse = dir.path().join("warehouse");
        std::fs::create_dir_all(&warehouse).expect("the warehouse directory");
        let options = HashMap::from([(
            "warehouse".to_string(),
            warehouse.to_string_lossy().into_owned(),
        )]);
        Self::new(dir, options)
    }

    /// A warehouse elsewhere (a bucket, a cluster's), reached with
    /// `options`; it is left in place when dropped. The temporary directory
    /// holds what a file puts beside it.
    pub fn with_options(options: HashMap<String, String>) -> Self {
        Self::new(tempfile::tempdir().expect("a temporary directory"), options)
    }

    /// The temporary directory everything of this warehouse lives in
    /// (`${DIR}` in a file; `<dir>` in its results).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<dir>/warehouse` (`${WAREHOUSE}` in a file).
    pub fn warehouse_path(&self) -> PathBuf {
        self.path().join("warehouse")
    }

    /// The catalog options, without lake-stream options.
    pub fn catalog_options(&self) -> HashMap<String, String> {
        self.options.clone()
    }

    /// Registers `factory` in every context of this warehouse, for a store
    /// that is not built in.
    pub fn register_store(&mut self, factory: Arc<dyn StoreFactory>) {
        self.factories.push(factory);
    }

    /// Keeps `value` alive as long as the warehouse.
    pub fn keep<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.kept.push(value);
    }

    /// The first value of type `T` kept with [`Self::keep`].
    pub fn kept<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.kept
            .iter()
            .find_map(|value| Arc::clone(value).downcast::<T>().ok())
    }

    /// A context with this warehouse's catalog registered as `paimon`, plus
    /// `extra` catalog options, and the registered store factories.
    pub async fn context_with(&self, extra: &[(&str, &str)]) -> LakeStreamContext {
        let mut options = self.catalog_options();
        options.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut ctx = LakeStreamContext::new();
        for factory in &self.factories {
            ctx.store_registry().register(Arc::clone(factory));
        }
        ctx.register_catalog("paimon", options)
            .await
            .expect("register the catalog");
        ctx
    }
}

/// What [`run`] runs.
#[derive(Debug, Clone, Copy)]
pub enum Script<'a> {
    /// An `.slt` file.
    File(&'a Path),
    /// The text of one, named for messages.
    Text { name: &'a str, text: &'a str },
}

/// Run a file, or rewrite its expected results from what the engine returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Run,
    /// Only for [`Script::File`]: rows, column letters and error messages
    /// that do not match are rewritten in place.
    Complete,
}

/// The labels a run with `harness` has: its identifier (`no-store` without
/// one) and its capabilities'.
pub fn labels(harness: Option<&dyn StoreHarness>) -> Vec<String> {
    match harness {
        None => vec!["no-store".to_string()],
        Some(harness) => std::iter::once(harness.identifier().to_string())
            .chain(harness.capabilities().iter().map(|c| c.label().to_string()))
            .collect(),
    }
}

/// Runs (or completes) `script` against `warehouse`, its first context
/// opened by `harness` (or naming no store), with [`labels`] of the harness
/// plus `extra_labels`. Column letters are checked strictly: `query IT` must
/// match an integer and a text column (`R`: floating point and decimals).
/// The error is sqllogictest's report of the record that failed, or the
/// error of a `TEST AFTER` statement that failed (those still running at
/// the end are waited for).
pub async fn run(
    script: Script<'_>,
    warehouse: Warehouse,
    harness: Option<Arc<dyn StoreHarness>>,
    extra_labels: &[&str],
    mode: Mode,
) -> Result<(), String> {
    let warehouse = Arc::new(warehouse);
    let ctx = Arc::new(match &harness {
        Some(harness) => harness.open(&warehouse, StoreCondition::Reachable).await,
        None => warehouse.context_with(&[]).await,
    });
    let mut all_labels = labels(harness.as_deref());
    all_labels.extend(extra_labels.iter().map(|l| l.to_string()));
    let after = Arc::new(AfterStatements::new());
    let connections_after = Arc::clone(&after);
    let mut runner = sqllogictest::Runner::new(move || {
        let db = Database::new(
            Arc::clone(&ctx),
            Arc::clone(&warehouse),
            harness.clone(),
            Arc::clone(&connections_after),
        );
        async move { Ok::<_, datafusion::error::DataFusionError>(db) }
    });
    for label in &all_labels {
        runner.add_label(label);
    }
    runner.with_column_validator(sqllogictest::strict_column_validator);
    let report = |e: sqllogictest::TestError| e.display(false).to_string();
    let outcome = match (script, mode) {
        (Script::File(path), Mode::Run) => runner.run_file_async(path).await.map_err(report),
        (Script::Text { name, text }, Mode::Run) => runner
            .run_script_with_name_async(text, Arc::from(name))
            .await
            .map_err(report),
        (Script::File(path), Mode::Complete) => runner
            .update_test_file(
                path,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::strict_column_validator,
            )
            .await
            .map_err(|e| e.to_string()),
        (Script::Text { name, .. }, Mode::Complete) => {
            return Err(format!("{name}: only files can be completed"))
        }
    };
    // A `TEST AFTER` statement that failed fails the run, even after the
    // last record, or where a record expecting an error took its error.
    match outcome {
        Ok(()) => after.finish().await,
        Err(report) => {
            after.abort();
            match after.failure() {
                Some(failure) if !report.contains(&failure) => {
                    Err(format!("{report}\n\nAlso: {failure}"))
                }
                _ => Err(report),
            }
        }
    }
}

/// The store conformance suite: runs every file of [`CONFORMANCE_FILES`]
/// against `harness`, each on a fresh [`StoreHarness::warehouse`]. Panics,
/// naming each file that failed and the store.
pub async fn conformance(harness: Arc<dyn StoreHarness>) {
    let mut failures = Vec::new();
    for (name, text) in CONFORMANCE_FILES {
        let warehouse = harness.warehouse().await;
        let script = Script::Text { name, text };
        let outcome = run(
            script,
            warehouse,
            Some(Arc::clone(&harness)),
            &["filesystem"],
            Mode::Run,
        )
        .await;
        if let Err(e) = outcome {
            failures.push(format!(
                "{name} (conformance, store '{}'):\n{e}",
                harness.identifier()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} conformance file(s) failed:\n\n{}",
        failures.len(),
        CONFORMANCE_FILES.len(),
        failures.join("\n\n")
    );
}
