//! A store that keeps everything in memory, for routing tests. It is found
//! through the same registry as a real store, and has switches for the
//! failures the contract talks about: unreachable, slow, table missing, an
//! attach that fails with an error of a given kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use futures::StreamExt;
use paimon::catalog::Identifier;
use paimon::table::Table;
use paimon_lakestream::store::{
    store_error_of_kind, table_arrow_schema, Capabilities, ChangeBatch, ChangeStream,
    LakestreamStore, StoreContext, StoreFactory, StoreLog, StoreRead, WriteKind,
};
use paimon_lakestream::testing::{
    conformance, Capability, StoreCondition, StoreHarness, Warehouse,
};
use paimon_lakestream::{Error, ErrorKind, LakeStreamContext, Result};
use tokio::sync::Notify;

use crate::support::{CatalogKind, TestWarehouse};

pub const IDENTIFIER: &str = "memory";

/// The memory store for the `.slt` suites: each file gets a fresh
/// filesystem warehouse whose contexts can name it; `TEST SWITCH
/// table_missing = on|off` flips its switch. It tiers nothing on request;
/// with `no_deletes` it also says it takes no deletes, so the conformance
/// suite's records for stores without them run too.
#[derive(Debug, Default)]
pub struct MemoryHarness {
    pub no_deletes: bool,
}

impl MemoryHarness {
    fn factory(warehouse: &Warehouse) -> Arc<MemoryStoreFactory> {
        warehouse
            .kept::<MemoryStoreFactory>()
            .expect("a warehouse of TestWarehouse, with the memory store")
    }
}

#[async_trait]
impl StoreHarness for MemoryHarness {
    fn identifier(&self) -> &str {
        IDENTIFIER
    }

    fn capabilities(&self) -> Vec<Capability> {
        if self.no_deletes {
            Vec::new()
        } else {
            vec![Capability::Deletes]
        }
    }

    async fn warehouse(&self) -> Warehouse {
        let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
        warehouse
            .memory
            .switches
            .no_deletes
            .store(self.no_deletes, Ordering::SeqCst);
        warehouse.into_inner()
    }

    async fn open(&self, warehouse: &Warehouse, condition: StoreCondition) -> LakeStreamContext {
        let switches = &Self::factory(warehouse).switches;
        switches
            .unreachable
            .store(condition == StoreCondition::Unreachable, Ordering::SeqCst);
        switches
            .slow
            .store(condition == StoreCondition::Slow, Ordering::SeqCst);
        let mut options = vec![("lakestream.store", IDENTIFIER)];
        if condition == StoreCondition::Slow {
            options.push(("lakestream.timeout", "300ms"));
        }
        warehouse.context_with(&options).await
    }

    async fn test_statement(
        &self,
        warehouse: &Warehouse,
        command: &str,
    ) -> Option<std::result::Result<(), String>> {
        let words: Vec<&str> = command.split_whitespace().collect();
        let ["SWITCH", "table_missing", "=", value] = words.as_slice() else {
            return None;
        };
        Self::factory(warehouse)
            .switches
            .table_missing
            .store(*value == "on", Ordering::SeqCst);
        Some(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    conformance(Arc::new(MemoryHarness::default())).await;
}

/// A store without deletes: the suite's `skipif deletes` records check
/// that DELETE and UPDATE are refused, naming the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory_without_deletes() {
    conformance(Arc::new(MemoryHarness { no_deletes: true })).await;
}

/// Failure switches, shared by the factory and every store it made.
#[derive(Debug, Default)]
pub struct Switches {
    pub unreachable: AtomicBool,
    pub slow: AtomicBool,
    pub table_missing: AtomicBool,
    /// The store says it takes no deletes.
    pub no_deletes: AtomicBool,
    /// Attaching a table fails with an error of this kind, attaching nothing.
    pub attach_fails: Mutex<Option<ErrorKind>>,
}

#[derive(Debug, Default)]
struct TableLog {
    base_snapshot: Option<i64>,
    batches: Vec<ChangeBatch>,
}

/// The store's data: it outlives store instances, as a server's would.
#[derive(Debug, Default)]
struct Data {
    tables: Mutex<HashMap<Identifier, TableLog>>,
    written: Notify,
}

#[derive(Debug, Default)]
pub struct MemoryStoreFactory {
    pub switches: Arc<Switches>,
    data: Arc<Data>,
    /// How many stores were created (successfully).
    pub created: AtomicUsize,
    /// The options the last creation got.
    pub last_options: Mutex<Option<std::collections::BTreeMap<String, String>>>,
}

#[async_trait]
impl StoreFactory for MemoryStoreFactory {
    fn identifier(&self) -> &str {
        IDENTIFIER
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default().with_deletes(!self.switches.no_deletes.load(Ordering::SeqCst))
    }

    async fn create(&self, context: StoreContext) -> Result<Arc<dyn LakestreamStore>> {
        if self.switches.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if self.switches.unreachable.load(Ordering::SeqCst) {
            return Err(Error::StoreUnavailable {
                store: IDENTIFIER.to_string(),
                reason: "connection refused (test switch)".to_string(),
            });
        }
        *self.last_options.lock().unwrap() = Some(context.options.clone());
        self.created.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(MemoryStore {
            switches: Arc::clone(&self.switches),
            data: Arc::clone(&self.data),
        }))
    }
}

#[derive(Debug)]
struct MemoryStore {
    switches: Arc<Switches>,
    data: Arc<Data>,
}

impl MemoryStore {
    async fn check(&self) -> Result<()> {
        if self.switches.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if self.switches.unreachable.load(Ordering::SeqCst) {
            return Err(Error::StoreUnavailable {
                store: IDENTIFIER.to_string(),
                reason: "connection refused (test switch)".to_string(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl LakestreamStore for MemoryStore {
    fn identifier(&self) -> &str {
        IDENTIFIER
    }

    async fn attach_table(&self, table: &Table) -> Result<()> {
        self.check().await?;
        if let Some(kind) = *self.switches.attach_fails.lock().unwrap() {
            return Err(store_error_of_kind(
                IDENTIFIER,
                kind,
                format!("cannot attach the table ({kind:?}, test switch)"),
            ));
        }
        let base = table
            .snapshot_manager()
            .get_latest_snapshot_id()
            .await
            .map_err(Error::from)?;
        let mut tables = self.data.tables.lock().unwrap();
        tables
            .entry(table.identifier().clone())
            .or_insert_with(|| TableLog {
                base_snapshot: base,
                batches: Vec::new(),
            });
        Ok(())
    }

    async fn drop_table(&self, identifier: &Identifier) -> Result<()> {
        self.check().await?;
        self.data.tables.lock().unwrap().remove(identifier);
        Ok(())
    }

    async fn plan_read(&self, table: &Table) -> Result<StoreRead> {
        self.check().await?;
        let missing = || Error::StoreTableMissing {
            store: IDENTIFIER.to_string(),
            table: table.identifier().full_name(),
        };
        if self.switches.table_missing.load(Ordering::SeqCst) {
            return Err(missing());
        }
        let tables = self.data.tables.lock().unwrap();
        let log = tables.get(table.identifier()).ok_or_else(missing)?;
        Ok(StoreRead {
            snapshot_id: log.base_snapshot,
            log: Arc::new(MemoryLog {
                data: Arc::clone(&self.data),
                table: table.clone(),
                end: log.batches.len(),
            }),
        })
    }

    async fn write(
        &self,
        table: &Table,
        kind: WriteKind,
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        self.check().await?;
        let schema = table_arrow_schema(table)?;
        let mut rows = 0;
        let mut log_batches = Vec::new();
        for batch in batches {
            rows += batch.num_rows() as u64;
            let batch = RecordBatch::try_new(Arc::clone(&schema), batch.columns().to_vec())
                .map_err(|e| Error::Internal(e.to_string()))?;
            log_batches.push(ChangeBatch::of_kind(batch, kind.row_kind()));
        }
        {
            let mut tables = self.data.tables.lock().unwrap();
            let log =
                tables
                    .get_mut(table.identifier())
                    .ok_or_else(|| Error::StoreTableMissing {
                        store: IDENTIFIER.to_string(),
                        table: table.identifier().full_name(),
                    })?;
            log.batches.extend(log_batches);
        }
        self.data.written.notify_waiters();
        Ok(rows)
    }
}

#[derive(Debug)]
struct MemoryLog {
    data: Arc<Data>,
    table: Table,
    end: usize,
}

impl MemoryLog {
    fn batches(&self, from: usize, to: Option<usize>) -> Vec<ChangeBatch> {
        let tables = self.data.tables.lock().unwrap();
        tables
            .get(self.table.identifier())
            .map(|log| {
                let to = to.unwrap_or(log.batches.len()).min(log.batches.len());
                log.batches
                    .get(from.min(to)..to)
                    .unwrap_or_default()
                    .to_vec()
            })
            .unwrap_or_default()
    }
}

impl StoreLog for MemoryLog {
    fn bounded_is_empty(&self) -> bool {
        self.batches(0, Some(self.end))
            .iter()
            .all(|b| b.num_rows() == 0)
    }

    fn read_bounded(&self) -> Result<ChangeStream> {
        let batches = self.batches(0, Some(self.end));
        Ok(futures::stream::iter(batches.into_iter().map(Ok)).boxed())
    }

    fn follow(&self) -> Result<ChangeStream> {
        let log = MemoryLog {
            data: Arc::clone(&self.data),
            table: self.table.clone(),
            end: self.end,
        };
        let stream = futures::stream::unfold(log, |mut log| async move {
            loop {
                let data = Arc::clone(&log.data);
                let notified = data.written.notified();
                tokio::pin!(notified);
                // Registered before looking, so a write in between still wakes us.
                notified.as_mut().enable();
                let batches = log.batches(log.end, None);
                if !batches.is_empty() {
                    log.end += batches.len();
                    return Some((futures::stream::iter(batches.into_iter().map(Ok)), log));
                }
                notified.await;
            }
        });
        Ok(stream.flatten().boxed())
    }
}
