//! The schema lock of a warehouse's database: what `CREATE`, `ALTER`,
//! `DROP` and `RENAME TABLE`, and `DROP DATABASE`, hold while the catalog
//! writes a table's schema files (see [`super::catalog`], [`super::ddl`]).
//!
//! A schema change reads the newest schema file and writes the next. The
//! file is created only if its name is free ([`super::ddl`]), so two
//! processes at once cannot both write it: the later one fails instead of
//! undoing the other's change. The lock makes such failures rare, and
//! orders `DROP` and `RENAME` against the rest. On local disk the lock is a file
//! lock ([`with_local_schema_lock`]); on S3, the database's lease
//! ([`with_schema_lease`]), an object created conditionally, as tierers
//! share a table: both taken by the storage layer's one lock
//! ([`super::lock`]). Both live under `<warehouse>/_lakestream/schema-lock/`,
//! outside the database's directory, which `DROP DATABASE` removes while it
//! holds the lock.
//!
//! Within a process, statements wait their turn on a mutex before the lock,
//! so waiting ties up no thread; a task that holds a lock takes it again at
//! once (a catalog wrapped twice, as an app may register a lake-stream
//! catalog's inner catalog again), rather than wait for itself.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use super::create::{CreateFailed, Created, ProbeFailed};
use super::lease::LeaseObjects;
use super::lock::{Across, Dirs, Held, HoldFailed, Mode};

tokio::task_local! {
    /// The locks this task holds, by key.
    static HELD: Vec<String>;
}

/// Runs `work` holding the lock `key`, which `take` takes (and its output
/// holds until dropped).
pub(super) async fn holding<T, G>(
    key: String,
    take: impl Future<Output = paimon::Result<G>>,
    work: impl Future<Output = paimon::Result<T>>,
) -> paimon::Result<T> {
    let mut held = HELD.try_with(Clone::clone).unwrap_or_default();
    if held.contains(&key) {
        return work.await;
    }
    let turn = turn_of(&key);
    let _turn = turn.lock().await;
    let guard = take.await?;
    held.push(key);
    let result = HELD.scope(held, work).await;
    drop(guard);
    result
}

/// This process's turn on the lock `key`.
fn turn_of(key: &str) -> Arc<tokio::sync::Mutex<()>> {
    static TURNS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut turns = TURNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    Arc::clone(turns.entry(key.to_string()).or_default())
}

/// The directory a local location names (`/w`, `file:/w`, `file:///w`;
/// [`super::local_path`]); a location that names none is taken as a path.
fn local_path(location: &str) -> PathBuf {
    super::local_path(location).unwrap_or_else(|| PathBuf::from(location))
}

/// The lock file of database `database`'s schema lock in the local
/// warehouse at `warehouse`:
/// `<warehouse>/_lakestream/schema-lock/<database>.lock`, where the S3
/// lease lives too. Not in the database's directory: `DROP DATABASE`
/// removes that while it holds the lock, and a process that had opened the
/// lock file there (or opened it after a `CREATE DATABASE`) would lock a
/// file other processes no longer lock, and run its DDL beside theirs.
/// paimon and pypaimon list only `*.db` directories as databases, so they
/// never take `_lakestream` for one. The file stays when its database is
/// dropped (it is empty), so a waiter always locks the file others lock.
fn schema_lock_path(warehouse: &str, database: &str) -> PathBuf {
    local_path(warehouse)
        .join("_lakestream")
        .join("schema-lock")
        .join(format!("{database}.lock"))
}

/// The lock file versions before [`schema_lock_path`] locked:
/// `<database>.db/.lakestream-schema.lock`. Locked too, after that one, so
/// DDL from such a version and from this one run one at a time.
fn legacy_lock_path(warehouse: &str, database: &str) -> PathBuf {
    local_path(warehouse)
        .join(format!("{database}.db"))
        .join(".lakestream-schema.lock")
}

/// Runs `work` holding database `database`'s schema lock in the local
/// warehouse at `warehouse`, exclusively: every process's `CREATE`,
/// `ALTER`, `DROP` and `RENAME` of a table of the database, and `DROP
/// DATABASE`, through this crate's catalog, one at a time.
///
/// The lock is a file lock on [`schema_lock_path`], then on
/// [`legacy_lock_path`] (when the database's directory exists): processes
/// of this version are ordered by the first, and a process of an older
/// version, which locks only the second, waits for (and is waited for by)
/// every other. Files are locked in that order by everyone, so no two
/// processes wait for each other. A lock file replaced while a process
/// waited on it is locked again by its name ([`super::lock`]).
///
/// Within a process, statements wait their turn on a mutex before the file
/// locks, so waiting ties up no thread.
pub(super) async fn with_local_schema_lock<T>(
    warehouse: &str,
    database: &str,
    work: impl Future<Output = paimon::Result<T>>,
) -> paimon::Result<T> {
    let path = schema_lock_path(warehouse, database);
    let legacy = legacy_lock_path(warehouse, database);
    let key = path.display().to_string();
    let take = async {
        let failed = |reason: String| paimon::Error::UnexpectedError {
            message: format!(
                "cannot take the schema lock of database '{database}' ({}): {reason}; \
                 nothing was changed",
                path.display()
            ),
            source: None,
        };
        let hold = |path: &PathBuf, dirs: Dirs| {
            Across::<Warehouse>::File {
                path: path.clone(),
                mode: Mode::Exclusive,
                dirs,
            }
            .hold()
        };
        let held = hold(&path, Dirs::Make { top: None })
            .await
            .map_err(|e| failed(hold_failed(e)))?;
        let legacy = hold(&legacy, Dirs::Existing)
            .await
            .map_err(|e| failed(hold_failed(e)))?;
        Ok::<_, paimon::Error>((held, legacy))
    };
    holding(key, take, work).await
}

/// Why a lock was not taken, in words.
fn hold_failed(failed: HoldFailed<LeaseFailed>) -> String {
    match failed {
        HoldFailed::File(e) => e.to_string(),
        HoldFailed::Lease(e) => e.to_string(),
    }
}

/// Runs `work` holding database `database`'s schema lease in the S3
/// warehouse at `warehouse` (reached with `s3`): a lease ([`Lease`]) on the
/// objects `<warehouse>/_lakestream/schema-lock/<database>/lease/`. A
/// process that dies holding it holds it until it expires
/// ([`SCHEMA_LEASE_TTL`]), and DDL elsewhere waits that long.
///
/// On a server that ignores conditional writes the lease could be taken by
/// every process at once: `statement` (`CREATE TABLE db.t`, ...) is refused,
/// named, as a commit there is ([`super::commit::refused_without_conditions`]).
#[cfg(feature = "s3")]
pub(super) async fn with_schema_lease<T>(
    warehouse: &str,
    s3: &super::S3Options,
    (statement, database): (&str, &str),
    work: impl Future<Output = paimon::Result<T>>,
) -> paimon::Result<T> {
    let key = format!("{}#schema-lock/{database}", warehouse.trim_end_matches('/'));
    let take = async {
        schema_lease(warehouse, s3, database).await.map_err(|e| {
            // The lease's only refusal: no create-if-absent.
            let message = if matches!(e, LeaseFailed::NoCreateIfAbsent(_)) {
                super::commit::refused_without_conditions(
                    statement,
                    "two processes could change the database's tables at once and one \
                         undo the other",
                )
            } else {
                format!(
                    "cannot take the schema lease of database '{database}' in \
                         '{warehouse}': {e}"
                )
            };
            paimon::Error::UnexpectedError {
                message: format!("{message}; nothing was changed"),
                source: None,
            }
        })
    };
    holding(key, take, work).await
}

/// How long a schema lease lasts unless renewed, which its holder does:
/// long enough to ride out a slow request or two, short enough that DDL
/// waits out a process that died within half a minute.
#[cfg(feature = "s3")]
const SCHEMA_LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// Takes the schema lease of database `database` in the S3 warehouse at
/// `warehouse` (reached with `s3`), waiting while another process holds it.
/// Held until dropped. paimon lists only `*.db` directories as databases,
/// so the lease's objects are never taken for one.
#[cfg(feature = "s3")]
async fn schema_lease(
    warehouse: &str,
    s3: &super::S3Options,
    database: &str,
) -> Result<Held<Warehouse>, LeaseFailed> {
    let objects = Warehouse::open(warehouse, s3)?;
    // A server that ignores the condition would hand the lease to all.
    objects.check_create_if_absent().await?;
    let dir =
        object_store::path::Path::from_iter(["_lakestream", "schema-lock", database, "lease"]);
    Across::Lease {
        objects,
        dir,
        ttl: SCHEMA_LEASE_TTL,
        what: format!("the schema lease of database '{database}'"),
    }
    .hold()
    .await
    .map_err(|failed| match failed {
        HoldFailed::Lease(e) => e,
        // A lease takes no lock file.
        HoldFailed::File(e) => LeaseFailed::Location(e.to_string()),
    })
}

/// Why a schema lease could not be taken.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
#[derive(Debug, thiserror::Error)]
enum LeaseFailed {
    /// The warehouse's location cannot be reached.
    #[error("{0}")]
    Location(String),
    /// The server does not honour create-if-absent: what it did.
    #[error("the object store {0}")]
    NoCreateIfAbsent(String),
    /// The object store failed.
    #[error(transparent)]
    Objects(#[from] object_store::Error),
    /// A live process kept the lease past the wait's bound.
    #[error(transparent)]
    WaitedOut(super::lease::WaitedOut),
}

/// The objects of an S3 warehouse, where its databases' schema leases live
/// (without the `s3` feature, the lock's lease type, never opened).
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
#[derive(Debug)]
struct Warehouse {
    objects: Arc<dyn object_store::ObjectStore>,
    /// Set once this process saw the store honour create-if-absent.
    create_if_absent: tokio::sync::OnceCell<()>,
}

#[cfg_attr(not(feature = "s3"), allow(dead_code))]
impl Warehouse {
    /// The objects of the warehouse at `warehouse`, reached with `s3`: one
    /// per warehouse and options in the process, so the store is probed
    /// once.
    fn open(warehouse: &str, s3: &super::S3Options) -> Result<Arc<Warehouse>, LeaseFailed> {
        use std::hash::{Hash, Hasher};
        static WAREHOUSES: OnceLock<Mutex<HashMap<String, Arc<Warehouse>>>> = OnceLock::new();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        s3.hash(&mut hasher);
        let key = format!(
            "{}#{:016x}",
            warehouse.trim_end_matches('/'),
            hasher.finish()
        );
        let mut warehouses = WAREHOUSES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(found) = warehouses.get(&key) {
            return Ok(Arc::clone(found));
        }
        let (bucket, prefix) = super::split(warehouse).map_err(LeaseFailed::Location)?;
        let bucket_objects = s3
            .object_store(&bucket)
            .map_err(|e| LeaseFailed::Location(format!("cannot reach '{warehouse}' on S3: {e}")))?;
        let prefix = object_store::path::Path::from(prefix.trim_end_matches('/'));
        let objects: Arc<dyn object_store::ObjectStore> = if prefix.as_ref().is_empty() {
            Arc::new(bucket_objects)
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(
                bucket_objects,
                prefix,
            ))
        };
        let opened = Arc::new(Warehouse {
            objects,
            create_if_absent: tokio::sync::OnceCell::new(),
        });
        warehouses.insert(key, Arc::clone(&opened));
        Ok(opened)
    }

    /// Checks, once per process, that the store honours create-if-absent.
    async fn check_create_if_absent(&self) -> Result<(), LeaseFailed> {
        self.create_if_absent
            .get_or_try_init(|| async {
                super::create::probe_create_if_absent(
                    self.objects.as_ref(),
                    "_probe/create-if-absent-",
                )
                .await
                .map_err(|failed| match failed {
                    ProbeFailed::Refused(what) => LeaseFailed::NoCreateIfAbsent(what),
                    ProbeFailed::Failed(e) | ProbeFailed::Read(e) => LeaseFailed::Objects(e),
                })
            })
            .await
            .map(|_| ())
    }
}

#[async_trait::async_trait]
impl LeaseObjects for Warehouse {
    type Error = LeaseFailed;

    async fn list(
        &self,
        dir: &object_store::path::Path,
    ) -> Result<Vec<object_store::path::Path>, LeaseFailed> {
        use futures::TryStreamExt;
        Ok(self
            .objects
            .list(Some(dir))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?)
    }

    async fn get(
        &self,
        path: &object_store::path::Path,
    ) -> Result<Option<bytes::Bytes>, LeaseFailed> {
        Ok(super::create::get(self.objects.as_ref(), path).await?)
    }

    async fn create(
        &self,
        path: &object_store::path::Path,
        bytes: bytes::Bytes,
    ) -> Result<Created, LeaseFailed> {
        self.check_create_if_absent().await?;
        super::create::create_if_absent(self.objects.as_ref(), path, bytes)
            .await
            .map_err(|failed| match failed {
                CreateFailed::Write(e) | CreateFailed::Read(e) => LeaseFailed::Objects(e),
            })
    }

    async fn delete(&self, path: &object_store::path::Path) -> Result<(), LeaseFailed> {
        use object_store::ObjectStoreExt;
        match self.objects.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn waited_out(&self, waited: super::lease::WaitedOut) -> LeaseFailed {
        LeaseFailed::WaitedOut(waited)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::object_storage::lock::lock_file;

    /// Another process's lock of `path`: the lock file alone, without this
    /// process's turn, in a thread of its own; whether it got one.
    fn lock_elsewhere(path: PathBuf, dirs: Dirs) -> std::thread::JoinHandle<bool> {
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let held = lock_file(&path, Mode::Exclusive, &dirs).await;
                held.expect("lock").is_some()
            })
        })
    }

    /// `DROP DATABASE` removes the database's directory while it holds the
    /// schema lock; another process's DDL, after a `CREATE DATABASE` of the
    /// name, must still wait for it: the lock file is not in that directory.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_the_database_keeps_its_schema_lock() {
        let dir = tempfile::tempdir().expect("temp dir");
        let database = dir.path().join("d.db");
        std::fs::create_dir_all(&database).expect("dir");
        let warehouse = dir.path().display().to_string();
        let (dropped, on_drop) = tokio::sync::oneshot::channel();
        let (release, on_release) = tokio::sync::oneshot::channel::<()>();
        let drop_database = {
            let database = database.clone();
            let warehouse = warehouse.clone();
            tokio::spawn(async move {
                with_local_schema_lock(&warehouse, "d", async move {
                    std::fs::remove_dir_all(&database).expect("drop");
                    std::fs::create_dir_all(&database).expect("create again");
                    let _ = dropped.send(());
                    let _ = on_release.await;
                    Ok(())
                })
                .await
            })
        };
        on_drop.await.expect("dropped");
        // Another process: the file lock alone, without this process's turn.
        let path = schema_lock_path(&warehouse, "d");
        let other = lock_elsewhere(path, Dirs::Make { top: None });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !other.is_finished(),
            "another process took the schema lock while DROP DATABASE held it"
        );
        let _ = release.send(());
        drop_database.await.expect("join").expect("drop database");
        assert!(
            other.join().expect("other"),
            "the other process got no lock"
        );
    }

    /// A process of a version that locks only the file in the database's
    /// directory holds up this version's DDL on the database, and the
    /// other way round, so the two never write a schema at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ddl_waits_for_an_older_version_holding_its_lock_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("d.db")).expect("dir");
        let warehouse = dir.path().display().to_string();
        let legacy = legacy_lock_path(&warehouse, "d");
        let older = lock_file(&legacy, Mode::Exclusive, &Dirs::Existing)
            .await
            .expect("lock")
            .expect("a lock file");
        let ddl = {
            let warehouse = warehouse.clone();
            tokio::spawn(
                async move { with_local_schema_lock(&warehouse, "d", async { Ok(()) }).await },
            )
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !ddl.is_finished(),
            "DDL ran while an older version held the database's lock file"
        );
        drop(older);
        ddl.await.expect("join").expect("ddl");
        // And the other way round: the older version waits for this one.
        let (locked, on_locked) = tokio::sync::oneshot::channel();
        let (release, on_release) = tokio::sync::oneshot::channel::<()>();
        let ddl = tokio::spawn(async move {
            with_local_schema_lock(&warehouse, "d", async move {
                let _ = locked.send(());
                let _ = on_release.await;
                Ok(())
            })
            .await
        });
        on_locked.await.expect("locked");
        let older = lock_elsewhere(legacy, Dirs::Existing);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !older.is_finished(),
            "an older version took its lock file while this version's DDL ran"
        );
        let _ = release.send(());
        ddl.await.expect("join").expect("ddl");
        assert!(
            older.join().expect("older"),
            "the older version got no lock"
        );
    }

    /// A database without a directory still takes the lock (a `CREATE
    /// DATABASE` may make it meanwhile), and leaves that directory alone.
    #[tokio::test]
    async fn a_database_without_a_directory_is_locked_without_making_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let warehouse = dir.path().display().to_string();
        with_local_schema_lock(&warehouse, "none", async { Ok(()) })
            .await
            .expect("ddl");
        assert!(schema_lock_path(&warehouse, "none").exists());
        assert!(!dir.path().join("none.db").exists());
    }
}
