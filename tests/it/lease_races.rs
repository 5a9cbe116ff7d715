//! Replacing a store table on an object store, where the lock across
//! processes is a lease that can run out while a request is on its way (a
//! put stalled in retries, a paused VM): a process that outlived its lease
//! takes nothing from the table the next holder attached and wrote to.
//!
//! Two processes are two store roots over one in-memory bucket, under
//! `s3://` URLs (so tiering takes a lease there, of 3 s); the late one's
//! calls go through a fault-injecting object store. The Paimon table is
//! dropped and created again outside the store, as another engine would.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::Int32Array;
use datafusion::arrow::record_batch::RecordBatch;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use paimon::table::Table;
use paimon_lakestream::store::local::{register_object_store_with_lease, LocalOptions, LocalStore};
use paimon_lakestream::store::{table_arrow_schema, LakestreamStore as _, WriteKind};
use paimon_lakestream::testing::faulty::{Fault, Faults, FaultyStore, Op, Rule, RuleId};
use paimon_lakestream::LakeStreamContext;

use crate::support::{paimon_table, run, CatalogKind, TestWarehouse};

const LEASE: Duration = Duration::from_secs(3);

struct Race {
    _warehouse: TestWarehouse,
    /// A session without a store: drops and creates the Paimon table.
    plain: LakeStreamContext,
    /// The process that outlives its lease.
    late: Arc<LocalStore>,
    faults: Faults,
    /// The process that takes the lease over.
    next: LocalStore,
}

impl Race {
    async fn new(name: &str) -> Race {
        let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
        let catalog = Arc::clone(
            warehouse
                .context_with(&[
                    ("lakestream.store", "local"),
                    ("local.tier-interval", "off"),
                ])
                .await
                .catalog("paimon")
                .expect("catalog")
                .inner(),
        );
        let plain = warehouse.context_with(&[]).await;
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let faults = Faults::seeded(11);
        let id = std::process::id();
        let late_url = format!("s3://{name}-late-{id}/store");
        let next_url = format!("s3://{name}-next-{id}/store");
        register_object_store_with_lease(
            &late_url,
            Arc::new(FaultyStore::new(Arc::clone(&objects), faults.clone())),
            LEASE,
        )
        .expect("register");
        register_object_store_with_lease(&next_url, objects, LEASE).expect("register");
        let open = |url: &str| {
            let options = BTreeMap::from([("path".to_string(), url.to_string())]);
            LocalStore::open(
                LocalOptions::from_options(&options, None).expect("options"),
                Arc::clone(&catalog),
            )
            .expect("open the store")
        };
        let (late, next) = (Arc::new(open(&late_url)), open(&next_url));
        Race {
            _warehouse: warehouse,
            plain,
            late,
            faults,
            next,
        }
    }

    /// Drops the Paimon table `t` (if there) and creates it again: a
    /// Paimon table the store has not seen.
    async fn recreate(&self) -> Table {
        run(&self.plain, "DROP TABLE IF EXISTS t").await;
        // Another first schema's time, which is how the store tells them apart.
        tokio::time::sleep(Duration::from_millis(2)).await;
        run(&self.plain, "CREATE TABLE t (id INT)").await;
        paimon_table(&self.plain, "t").await
    }

    /// A store table of `t` holding one row, attached by the next process.
    async fn attached(&self) -> Table {
        let table = self.recreate().await;
        self.next.attach_table(&table).await.expect("attach");
        self.write(&table, 0).await;
        table
    }

    async fn write(&self, table: &Table, id: i32) {
        let batch = RecordBatch::try_new(
            table_arrow_schema(table).expect("schema"),
            vec![Arc::new(Int32Array::from(vec![id]))],
        )
        .expect("batch");
        self.next
            .write(table, WriteKind::Append, vec![batch])
            .await
            .expect("an acknowledged write");
    }

    /// Holds the late process's next call of kind `op` on a path with
    /// `path` in it for `by` before it reaches the store.
    fn hold(&self, op: Op, path: &str, by: Duration) -> RuleId {
        self.faults
            .add(Rule::new(op, Fault::Delay(by)).path_contains(path).times(1))
    }

    /// The late process's renewals of its lease fail (its first put under
    /// `lease/` takes it): the lease runs out 3 s after it is taken.
    fn renewals_fail(&self) {
        self.faults.add(
            Rule::new(Op::Put, Fault::fail())
                .path_contains("/lease/")
                .skip(1),
        );
    }

    /// Starts the late process's attach of `table`, and returns once the
    /// fault `stalled` holds one of its calls.
    async fn start_late_attach(
        &self,
        table: &Table,
        stalled: RuleId,
    ) -> tokio::task::JoinHandle<paimon_lakestream::error::Result<()>> {
        let (late, table) = (Arc::clone(&self.late), table.clone());
        let attaching = tokio::spawn(async move { late.attach_table(&table).await });
        self.wait_fired(stalled, &attaching).await;
        attaching
    }

    /// Returns once the fault `rule` has held one of `late`'s calls.
    async fn wait_fired<T: std::fmt::Debug>(
        &self,
        rule: RuleId,
        late: &tokio::task::JoinHandle<T>,
    ) {
        while self.faults.fired(rule) == 0 {
            assert!(!late.is_finished(), "the late call ended first");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The next process takes the table over (waiting the late one's lease
    /// out) and is acknowledged rows 1 to 3, while `late` is still held.
    async fn next_takes_over(&self, table: &Table, late: &tokio::task::JoinHandle<impl Sized>) {
        self.next
            .attach_table(table)
            .await
            .expect("attach once the lease ran out");
        for id in 1..=3 {
            self.write(table, id).await;
        }
        assert!(
            !late.is_finished(),
            "the late call was still on its way while the rows were acknowledged"
        );
    }

    async fn assert_rows_kept(&self, table: &Table) {
        for (who, store) in [("next", &self.next), ("late", &*self.late)] {
            assert_eq!(
                store.pending_rows(table).await.expect("pending rows"),
                3,
                "{who}: the acknowledged rows are there"
            );
        }
    }
}

/// The late process's put of `table.json` reaches the store after the next
/// process replaced the table itself: it must not land over that table.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_put_of_table_json_does_not_land() {
    let race = Race::new("put").await;
    race.attached().await;
    let table = race.recreate().await;
    let stalled = race.hold(Op::Put, "table.json", Duration::from_secs(8));
    race.renewals_fail();
    let late = race.start_late_attach(&table, stalled).await;
    race.next_takes_over(&table, &late).await;
    // The late replacement finds the table attached to the same Paimon
    // table, and leaves it be.
    late.await
        .expect("the late replacement")
        .expect("attached meanwhile to the same table: done");
    race.assert_rows_kept(&table).await;
}

/// The late process replaced the table, but its deletion of the replaced
/// files lists the store only after the Paimon table was dropped and
/// created again, and the next process attached and wrote to that one: it
/// deletes the incarnation it replaced, nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_deletion_takes_only_the_replaced_files() {
    let race = Race::new("delete").await;
    race.attached().await;
    let second = race.recreate().await;
    // Once the late process's put of `table.json` is on its way (held
    // for half a second), its next list, the deletion's, is made to reach
    // the store 8 s late.
    let put = race.hold(Op::Put, "table.json", Duration::from_millis(500));
    race.renewals_fail();
    let late = race.start_late_attach(&second, put).await;
    let stalled = race.hold(Op::List, "", Duration::from_secs(8));
    race.wait_fired(stalled, &late).await;
    let third = race.recreate().await;
    race.next_takes_over(&third, &late).await;
    late.await
        .expect("the late replacement")
        .expect("its own replacement went through");
    race.assert_rows_kept(&third).await;
}

/// The late process's attach waits for the lease while the Paimon table is
/// dropped and created again and the next process attaches the new one and
/// writes to it: the late process's handle is on a dropped table, and it
/// replaces nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attach_that_waited_for_the_lease_checks_its_table_again() {
    let race = Race::new("stale").await;
    race.attached().await;
    let second = race.recreate().await;
    // The late process's look at the lease reaches the store 6 s late.
    let stalled = race.hold(Op::List, "/lease", Duration::from_secs(6));
    let late = race.start_late_attach(&second, stalled).await;
    let third = race.recreate().await;
    race.next_takes_over(&third, &late).await;
    let error = late
        .await
        .expect("the late replacement")
        .expect_err("a handle on a dropped table is refused");
    assert!(error.to_string().contains("dropped"), "{error}");
    race.assert_rows_kept(&third).await;
}

/// An object store that answers reads without a version (no `ETag`) gives
/// a replacement nothing to name: replacing `table.json` is refused with
/// the reason, before anything is written, and the table attached before
/// keeps its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_without_versions_refuses_to_replace() {
    let race = Race::new("unversioned").await;
    let first = race.attached().await;
    race.faults
        .add(Rule::on(&[Op::Get, Op::Head], Fault::NoVersion));
    let second = race.recreate().await;
    let error = race
        .late
        .attach_table(&second)
        .await
        .expect_err("no version to name");
    let message = error.to_string();
    assert!(
        message.contains("without the object's version") && message.contains("If-Match"),
        "{message}"
    );
    assert_eq!(
        race.next.pending_rows(&first).await.expect("pending rows"),
        1,
        "the attached table keeps its row"
    );
}
