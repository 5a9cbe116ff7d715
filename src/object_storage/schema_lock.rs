//! The schema lock of a warehouse's database: what `CREATE`, `ALTER`,
//! `DROP` and `RENAME TABLE`, and `DROP DATABASE`, hold while paimon's
//! catalog writes a table's schema files (see [`super::catalog`]).
//!
//! paimon's file-system catalog writes a table's next schema file after
//! reading the newest one, through its own file IO, which the commit guards
//! do not reach: two processes at once write the same file, and the later
//! one silently undoes the other's change. On local disk the lock is a file
//! lock ([`super::local::with_schema_lock`]); on S3, the database's lease
//! ([`with_schema_lease`]), an object created conditionally, as tierers
//! share a table.
//!
//! Within a process, statements wait their turn on a mutex before the lock,
//! so waiting ties up no thread; a task that holds a lock takes it again at
//! once (a catalog wrapped twice, as an app may register a lake-stream
//! catalog's inner catalog again), rather than wait for itself.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

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

/// Runs `work` holding database `database`'s schema lease in the S3
/// warehouse at `warehouse` (reached with `s3`): an object under
/// `<warehouse>/_lakestream/schema-lock/<database>/` (see
/// [`crate::store::local::schema_lease`]). A process that dies holding it
/// holds it until it expires (30 s), and DDL elsewhere waits that long.
#[cfg(feature = "s3")]
pub(super) async fn with_schema_lease<T>(
    warehouse: &str,
    s3: &super::S3Options,
    database: &str,
    work: impl Future<Output = paimon::Result<T>>,
) -> paimon::Result<T> {
    let key = format!("{}#schema-lock/{database}", warehouse.trim_end_matches('/'));
    let take = async {
        crate::store::local::schema_lease(warehouse, s3, database)
            .await
            .map_err(|e| paimon::Error::UnexpectedError {
                message: format!(
                    "cannot take the schema lease of database '{database}' in '{warehouse}': \
                     {e}; nothing was changed"
                ),
                source: None,
            })
    };
    holding(key, take, work).await
}
