//! A Paimon REST catalog server for the integration tests.
//!
//! It speaks the protocol the `paimon` crate's `RESTCatalog` client uses (`/v1/config`, databases,
//! tables, rename, alter, and the snapshot commit and load routes), keeps the catalog in memory for
//! its lifetime, and lays tables out on local disk under `<warehouse dir>/<db>.db/<table>`. Clients
//! write and read data files there themselves; a commit reaches the server, which publishes it as
//! `snapshot/snapshot-N` (plus the `LATEST` hint) and serves it as the table's latest snapshot.
//! Every schema version is written to `schema/schema-N` too, because readers resolve the schema
//! of old data files from disk.
//!
//! The server runs on a thread and runtime of its own: paimon-datafusion calls the catalog from
//! synchronous DataFusion callbacks and blocks on a thread of its own runtime, which would
//! deadlock a server that shared a current-thread test runtime.
//!
//! It makes and serves tags too (create and get): it keeps them, and writes `tag/tag-<name>`.
//!
//! Routes it does not implement (views, functions, partitions, tokens, ...) answer
//! `501 Not Implemented`, which the client maps to `Error::Unsupported` and treats as "this
//! catalog has none".

use std::collections::{BTreeMap, HashMap};
use std::future::IntoFuture;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use paimon::api::{
    AlterDatabaseRequest, AlterTableRequest, CreateDatabaseRequest, CreateTableRequest,
    CreateTagRequest, ErrorResponse, RenameTableRequest,
};
use paimon::spec::{PartitionStatistics, Schema, SchemaChange, Snapshot, TableSchema};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Mutex};

const WAREHOUSE: &str = "lakestream_it";
const TOKEN: &str = "lakestream-it-token";

/// A Paimon REST catalog server on `127.0.0.1`, stopped when dropped.
pub struct RestCatalogServer {
    address: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RestCatalogServer {
    /// Start a server whose tables live under `warehouse_dir` (created if missing).
    pub async fn start(warehouse_dir: &Path) -> io::Result<RestCatalogServer> {
        std::fs::create_dir_all(warehouse_dir)?;
        let root = warehouse_dir.canonicalize()?;
        if root.to_str().is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("warehouse directory {} is not UTF-8", root.display()),
            ));
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let app = Router::new()
            .fallback(dispatch)
            .with_state(Arc::new(Mutex::new(Catalog::new(root))));

        let (ready_tx, ready_rx) = oneshot::channel::<io::Result<()>>();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("rest-catalog-server".to_string())
            .spawn(move || serve(listener, app, ready_tx, shutdown_rx))?;
        let ready = ready_rx
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the REST catalog server thread exited")));
        let server = RestCatalogServer {
            address,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        };
        ready.map(|()| server)
    }

    /// The base URI clients use, `http://127.0.0.1:<port>`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The warehouse name the server answers to.
    pub fn warehouse(&self) -> &'static str {
        WAREHOUSE
    }

    /// Options for `paimon::CatalogFactory::create` that reach this server.
    pub fn catalog_options(&self) -> HashMap<String, String> {
        HashMap::from([
            ("metastore".to_string(), "rest".to_string()),
            ("uri".to_string(), self.uri()),
            ("warehouse".to_string(), WAREHOUSE.to_string()),
            ("token.provider".to_string(), "bear".to_string()),
            ("token".to_string(), TOKEN.to_string()),
        ])
    }

    /// A `RESTCatalog` client of this server, made by `paimon::CatalogFactory`.
    pub async fn catalog(&self) -> paimon::Result<Arc<dyn paimon::Catalog>> {
        paimon::CatalogFactory::create(paimon::Options::from_map(self.catalog_options())).await
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The server thread: its own runtime, serving until shutdown. Open connections are cut when
/// the runtime goes away, so the thread ends promptly.
fn serve(
    listener: std::net::TcpListener,
    app: Router,
    ready: oneshot::Sender<io::Result<()>>,
    shutdown: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rest-catalog-worker")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        tokio::select! {
            result = axum::serve(listener, app).into_future() => {
                if let Err(error) = result {
                    eprintln!("REST catalog server stopped: {error}");
                }
            }
            _ = shutdown => {}
        }
    });
    runtime.shutdown_background();
}

// ============================================================================
// The catalog state
// ============================================================================

struct Catalog {
    root: PathBuf,
    databases: BTreeMap<String, Database>,
}

struct Database {
    id: String,
    options: HashMap<String, String>,
    created_at: i64,
    updated_at: i64,
    tables: BTreeMap<String, Table>,
}

struct Table {
    id: String,
    path: PathBuf,
    schema: TableSchema,
    latest_snapshot: Option<Snapshot>,
    /// The table's tags by name, with the snapshot each copies (also
    /// written to `tag/tag-<name>`, for readers of the files).
    tags: BTreeMap<String, Snapshot>,
    statistics: TableStatistics,
    created_at: i64,
    updated_at: i64,
}

/// Table totals, accumulated from the partition statistics each commit reports.
#[derive(Default)]
struct TableStatistics {
    file_size_in_bytes: i64,
    file_count: i64,
    last_file_creation_time: i64,
}

impl Catalog {
    fn new(root: PathBuf) -> Self {
        Self {
            root,
            databases: BTreeMap::new(),
        }
    }

    fn database_dir(&self, database: &str) -> PathBuf {
        self.root.join(format!("{database}.db"))
    }

    fn database(&self, name: &str) -> Result<&Database, ApiError> {
        self.databases
            .get(name)
            .ok_or_else(|| ApiError::database_not_found(name))
    }

    fn database_mut(&mut self, name: &str) -> Result<&mut Database, ApiError> {
        self.databases
            .get_mut(name)
            .ok_or_else(|| ApiError::database_not_found(name))
    }

    fn table(&self, database: &str, table: &str) -> Result<&Table, ApiError> {
        self.database(database)?
            .tables
            .get(table)
            .ok_or_else(|| ApiError::table_not_found(database, table))
    }

    fn table_mut(&mut self, database: &str, table: &str) -> Result<&mut Table, ApiError> {
        self.database_mut(database)?
            .tables
            .get_mut(table)
            .ok_or_else(|| ApiError::table_not_found(database, table))
    }
}

// ============================================================================
// Routing
// ============================================================================

type Reply = Result<Value, ApiError>;

async fn dispatch(
    State(catalog): State<Arc<Mutex<Catalog>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut response = match route(&catalog, &method, &uri, &headers, &body).await {
        Ok(value) => (StatusCode::OK, Json(value)).into_response(),
        Err(error) => error.into_response(),
    };
    // No keep-alive: paimon-datafusion calls the catalog from several runtimes, and a pooled
    // connection is driven by the runtime that opened it, which may be the caller's blocked
    // current-thread runtime; a reused connection then hangs until the client's 30 s timeout.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn route(
    catalog: &Mutex<Catalog>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Reply {
    authorize(headers)?;
    let segments = uri
        .path()
        .split('/')
        .skip(1)
        .map(decode_component)
        .collect::<Result<Vec<_>, _>>()?;
    let query = parse_query(uri.query())?;
    let segments = segments.iter().map(String::as_str).collect::<Vec<_>>();
    // One lock per request keeps every route atomic, commits included.
    let mut catalog = catalog.lock().await;
    let catalog = &mut *catalog;
    match (method, segments.as_slice()) {
        (&Method::GET, ["v1", "config"]) => config(&query),
        (&Method::GET, ["v1", "databases"]) => list_databases(catalog, &query),
        (&Method::POST, ["v1", "databases"]) => create_database(catalog, parse(body)?).await,
        (&Method::GET, ["v1", "databases", db]) => get_database(catalog, db),
        (&Method::POST, ["v1", "databases", db]) => alter_database(catalog, db, parse(body)?),
        (&Method::DELETE, ["v1", "databases", db]) => drop_database(catalog, db).await,
        (&Method::GET, ["v1", "databases", db, "tables"]) => list_tables(catalog, db, &query),
        (&Method::POST, ["v1", "databases", db, "tables"]) => {
            create_table(catalog, db, parse(body)?).await
        }
        (&Method::GET, ["v1", "databases", db, "tables", table]) => get_table(catalog, db, table),
        (&Method::POST, ["v1", "databases", db, "tables", table]) => {
            alter_table(catalog, db, table, parse(body)?).await
        }
        (&Method::DELETE, ["v1", "databases", db, "tables", table]) => {
            drop_table(catalog, db, table).await
        }
        (&Method::GET, ["v1", "databases", db, "tables", table, "snapshot"]) => {
            load_snapshot(catalog, db, table)
        }
        (&Method::POST, ["v1", "databases", db, "tables", table, "commit"]) => {
            commit(catalog, db, table, parse(body)?).await
        }
        (&Method::POST, ["v1", "databases", db, "tables", table, "tags"]) => {
            create_tag(catalog, db, table, parse(body)?).await
        }
        (&Method::GET, ["v1", "databases", db, "tables", table, "tags", tag]) => {
            get_tag(catalog, db, table, tag)
        }
        (&Method::POST, ["v1", "tables", "rename"]) => rename_table(catalog, parse(body)?).await,
        _ => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!(
                "{method} {} is not implemented by this test REST catalog",
                uri.path()
            ),
        )),
    }
}

fn authorize(headers: &HeaderMap) -> Result<(), ApiError> {
    let expected = format!("Bearer {TOKEN}");
    match headers.get(header::AUTHORIZATION) {
        Some(value) if value.as_bytes() == expected.as_bytes() => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".to_string(),
        )),
    }
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("malformed request body: {error}")))
}

// ============================================================================
// Config
// ============================================================================

fn config(query: &HashMap<String, String>) -> Reply {
    match query.get("warehouse").map(String::as_str) {
        Some(WAREHOUSE) => Ok(json!({ "defaults": {}, "overrides": {} })),
        Some(other) => Err(ApiError::not_found(
            "WAREHOUSE",
            other,
            format!("warehouse '{other}' does not exist; this server serves '{WAREHOUSE}'"),
        )),
        None => Err(ApiError::bad_request(
            "the 'warehouse' query parameter is required".to_string(),
        )),
    }
}

// ============================================================================
// Databases
// ============================================================================

fn list_databases(catalog: &Catalog, query: &HashMap<String, String>) -> Reply {
    let (names, next) = page(
        catalog.databases.keys(),
        query,
        query.get("databaseNamePattern"),
    )?;
    Ok(json!({ "databases": names, "nextPageToken": next }))
}

async fn create_database(catalog: &mut Catalog, request: CreateDatabaseRequest) -> Reply {
    let name = request.name;
    validate_name("database", &name)?;
    if catalog.databases.contains_key(&name) {
        return Err(ApiError::conflict(
            "DATABASE",
            &name,
            format!("database '{name}' already exists"),
        ));
    }
    tokio::fs::create_dir_all(catalog.database_dir(&name))
        .await
        .map_err(ApiError::io)?;
    let now = now_millis();
    catalog.databases.insert(
        name,
        Database {
            id: new_id(),
            options: request.options,
            created_at: now,
            updated_at: now,
            tables: BTreeMap::new(),
        },
    );
    Ok(json!({}))
}

fn get_database(catalog: &Catalog, name: &str) -> Reply {
    let database = catalog.database(name)?;
    Ok(json!({
        "id": database.id,
        "name": name,
        "location": path_string(&catalog.database_dir(name))?,
        "options": database.options,
        "createdAt": database.created_at,
        "updatedAt": database.updated_at,
    }))
}

fn alter_database(catalog: &mut Catalog, name: &str, request: AlterDatabaseRequest) -> Reply {
    let database = catalog.database_mut(name)?;
    for key in &request.removals {
        database.options.remove(key);
    }
    database.options.extend(request.updates);
    database.updated_at = now_millis();
    Ok(json!({}))
}

/// Drops the database with its tables and their files: the client checks emptiness itself
/// unless the drop cascades.
async fn drop_database(catalog: &mut Catalog, name: &str) -> Reply {
    catalog.database(name)?;
    remove_dir(&catalog.database_dir(name)).await?;
    catalog.databases.remove(name);
    Ok(json!({}))
}

// ============================================================================
// Tables
// ============================================================================

fn list_tables(catalog: &Catalog, db: &str, query: &HashMap<String, String>) -> Reply {
    let database = catalog.database(db)?;
    let (names, next) = page(database.tables.keys(), query, query.get("tableNamePattern"))?;
    Ok(json!({ "tables": names, "nextPageToken": next }))
}

async fn create_table(catalog: &mut Catalog, db: &str, request: CreateTableRequest) -> Reply {
    let identifier = request.identifier;
    if identifier.database() != db {
        return Err(ApiError::bad_request(format!(
            "request for database '{db}' names table '{}'",
            identifier.full_name()
        )));
    }
    let name = identifier.object().to_string();
    validate_name("table", &name)?;
    let path = catalog.database_dir(db).join(&name);
    if catalog.database(db)?.tables.contains_key(&name) {
        return Err(ApiError::table_exists(db, &name));
    }
    if tokio::fs::try_exists(&path).await.map_err(ApiError::io)? {
        return Err(ApiError::conflict(
            "TABLE",
            &name,
            format!(
                "table directory {} already exists on disk; refusing to adopt it",
                path.display()
            ),
        ));
    }
    let schema = TableSchema::new(0, &request.schema);
    write_schema_file(&path, &schema).await?;
    let now = now_millis();
    catalog.database_mut(db)?.tables.insert(
        name,
        Table {
            id: new_id(),
            path,
            schema,
            latest_snapshot: None,
            tags: BTreeMap::new(),
            statistics: TableStatistics::default(),
            created_at: now,
            updated_at: now,
        },
    );
    Ok(json!({}))
}

fn get_table(catalog: &Catalog, db: &str, name: &str) -> Reply {
    let table = catalog.table(db, name)?;
    Ok(json!({
        "id": table.id,
        "database": db,
        "name": name,
        "path": path_string(&table.path)?,
        "isExternal": false,
        "schemaId": table.schema.id(),
        "schema": logical_schema(&table.schema)?,
        "createdAt": table.created_at,
        "updatedAt": table.updated_at,
    }))
}

async fn alter_table(
    catalog: &mut Catalog,
    db: &str,
    name: &str,
    request: AlterTableRequest,
) -> Reply {
    let table = catalog.table_mut(db, name)?;
    reject_table_type_change(&table.schema, &request.changes)?;
    let schema = table
        .schema
        .apply_changes(request.changes)
        .map_err(|error| match error {
            paimon::Error::ColumnNotExist { column, .. } => ApiError::not_found(
                "COLUMN",
                &column,
                format!("column '{column}' does not exist in table {db}.{name}"),
            ),
            paimon::Error::ColumnAlreadyExist { column, .. } => ApiError::conflict(
                "COLUMN",
                &column,
                format!("column '{column}' already exists in table {db}.{name}"),
            ),
            other => ApiError::bad_request(other.to_string()),
        })?;
    write_schema_file(&table.path, &schema).await?;
    table.schema = schema;
    table.updated_at = now_millis();
    Ok(json!({}))
}

/// A table cannot turn into another kind of table, as in the filesystem catalog.
fn reject_table_type_change(
    schema: &TableSchema,
    changes: &[SchemaChange],
) -> Result<(), ApiError> {
    let current = schema
        .options()
        .get("type")
        .map(String::as_str)
        .unwrap_or("table");
    for change in changes {
        match change {
            SchemaChange::SetOption { key, value }
                if key == "type" && !value.eq_ignore_ascii_case(current) =>
            {
                return Err(ApiError::bad_request(format!(
                    "changing 'type' from '{current}' to '{value}' is not supported"
                )));
            }
            SchemaChange::RemoveOption { key } if key == "type" => {
                return Err(ApiError::bad_request(
                    "removing 'type' is not supported".to_string(),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

async fn drop_table(catalog: &mut Catalog, db: &str, name: &str) -> Reply {
    let path = catalog.table(db, name)?.path.clone();
    remove_dir(&path).await?;
    catalog.database_mut(db)?.tables.remove(name);
    Ok(json!({}))
}

/// Renames move the table directory, as the filesystem catalog does, so that a new table under
/// the old name never lands on the renamed table's files.
async fn rename_table(catalog: &mut Catalog, request: RenameTableRequest) -> Reply {
    let (from, to) = (request.source, request.destination);
    catalog.table(from.database(), from.object())?;
    validate_name("table", to.object())?;
    if catalog
        .database(to.database())?
        .tables
        .contains_key(to.object())
    {
        return Err(ApiError::table_exists(to.database(), to.object()));
    }
    let new_path = catalog.database_dir(to.database()).join(to.object());
    if tokio::fs::try_exists(&new_path)
        .await
        .map_err(ApiError::io)?
    {
        return Err(ApiError::conflict(
            "TABLE",
            to.object(),
            format!(
                "table directory {} already exists on disk",
                new_path.display()
            ),
        ));
    }
    let mut table = catalog
        .database_mut(from.database())?
        .tables
        .remove(from.object())
        .ok_or_else(|| ApiError::table_not_found(from.database(), from.object()))?;
    if let Err(error) = tokio::fs::rename(&table.path, &new_path).await {
        catalog
            .database_mut(from.database())?
            .tables
            .insert(from.object().to_string(), table);
        return Err(ApiError::io(error));
    }
    table.path = new_path;
    table.updated_at = now_millis();
    catalog
        .database_mut(to.database())?
        .tables
        .insert(to.object().to_string(), table);
    Ok(json!({}))
}

// ============================================================================
// Snapshots
// ============================================================================

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommitRequest {
    table_id: String,
    base_snapshot_uuid: Option<String>,
    snapshot: Snapshot,
    #[serde(default)]
    statistics: Vec<PartitionStatistics>,
}

fn load_snapshot(catalog: &Catalog, db: &str, name: &str) -> Reply {
    let table = catalog.table(db, name)?;
    let snapshot = table.latest_snapshot.as_ref().ok_or_else(|| {
        ApiError::not_found(
            "SNAPSHOT",
            name,
            format!("table {db}.{name} has no snapshot yet"),
        )
    })?;
    Ok(json!({
        "snapshot": {
            "snapshot": snapshot,
            "recordCount": snapshot.total_record_count(),
            "fileSizeInBytes": table.statistics.file_size_in_bytes,
            "fileCount": table.statistics.file_count,
            "lastFileCreationTime": table.statistics.last_file_creation_time,
        }
    }))
}

/// Publishes a snapshot the client prepared, if it follows the latest one: `success: false`
/// sends the client back to rebase on the new latest snapshot and retry.
async fn commit(catalog: &mut Catalog, db: &str, name: &str, request: CommitRequest) -> Reply {
    let table = catalog.table_mut(db, name)?;
    if request.table_id != table.id {
        return Err(ApiError::not_found(
            "TABLE",
            name,
            format!(
                "table {db}.{name} is now table {}, not the table {} the commit was prepared for",
                table.id, request.table_id
            ),
        ));
    }
    let snapshot = request.snapshot;
    if snapshot.schema_id() > table.schema.id() {
        return Err(ApiError::bad_request(format!(
            "snapshot {} of table {db}.{name} uses schema {}, but the latest schema is {}",
            snapshot.id(),
            snapshot.schema_id(),
            table.schema.id()
        )));
    }
    let expected_id = table.latest_snapshot.as_ref().map_or(1, |s| s.id() + 1);
    let base_matches = table.latest_snapshot.as_ref().and_then(Snapshot::uuid)
        == request.base_snapshot_uuid.as_deref()
        || table
            .latest_snapshot
            .as_ref()
            .is_some_and(|s| s.uuid().is_none());
    if snapshot.id() != expected_id || !base_matches {
        return Ok(json!({ "success": false }));
    }

    let snapshot_dir = table.path.join("snapshot");
    tokio::fs::create_dir_all(&snapshot_dir)
        .await
        .map_err(ApiError::io)?;
    let snapshot_file = snapshot_dir.join(format!("snapshot-{}", snapshot.id()));
    if tokio::fs::try_exists(&snapshot_file)
        .await
        .map_err(ApiError::io)?
    {
        return Ok(json!({ "success": false }));
    }
    let content = serde_json::to_vec(&snapshot)
        .map_err(|error| ApiError::internal(format!("cannot serialize snapshot: {error}")))?;
    write_atomically(&snapshot_file, &content).await?;
    write_atomically(
        &snapshot_dir.join("LATEST"),
        snapshot.id().to_string().as_bytes(),
    )
    .await?;

    for statistic in &request.statistics {
        table.statistics.file_size_in_bytes += statistic.file_size_in_bytes;
        table.statistics.file_count += statistic.file_count;
        table.statistics.last_file_creation_time = table
            .statistics
            .last_file_creation_time
            .max(statistic.last_file_creation_time);
    }
    table.latest_snapshot = Some(snapshot);
    table.updated_at = now_millis();
    Ok(json!({ "success": true }))
}

/// Tags the table's latest snapshot, or the one the request names.
async fn create_tag(
    catalog: &mut Catalog,
    db: &str,
    name: &str,
    request: CreateTagRequest,
) -> Reply {
    let table = catalog.table_mut(db, name)?;
    let tag = request.tag_name;
    validate_name("tag", &tag)?;
    if table.tags.contains_key(&tag) {
        return Err(ApiError::conflict(
            "TAG",
            &tag,
            format!("tag '{tag}' of table {db}.{name} already exists"),
        ));
    }
    let snapshot = match request.snapshot_id {
        Some(id) => {
            let file = table.path.join("snapshot").join(format!("snapshot-{id}"));
            match tokio::fs::read(&file).await {
                Ok(content) => serde_json::from_slice::<Snapshot>(&content).map_err(|error| {
                    ApiError::internal(format!("cannot read snapshot {id}: {error}"))
                })?,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    return Err(ApiError::not_found(
                        "SNAPSHOT",
                        &id.to_string(),
                        format!("table {db}.{name} has no snapshot {id}"),
                    ))
                }
                Err(error) => return Err(ApiError::io(error)),
            }
        }
        None => table.latest_snapshot.clone().ok_or_else(|| {
            ApiError::not_found(
                "SNAPSHOT",
                name,
                format!("table {db}.{name} has no snapshot yet"),
            )
        })?,
    };
    let dir = table.path.join("tag");
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(ApiError::io)?;
    let content = serde_json::to_vec(&snapshot)
        .map_err(|error| ApiError::internal(format!("cannot serialize snapshot: {error}")))?;
    write_atomically(&dir.join(format!("tag-{tag}")), &content).await?;
    table.tags.insert(tag, snapshot);
    Ok(json!({}))
}

fn get_tag(catalog: &Catalog, db: &str, name: &str, tag: &str) -> Reply {
    let table = catalog.table(db, name)?;
    let snapshot = table.tags.get(tag).ok_or_else(|| {
        ApiError::not_found("TAG", tag, format!("table {db}.{name} has no tag '{tag}'"))
    })?;
    Ok(json!({
        "tagName": tag,
        "snapshot": snapshot,
        "tagCreateTime": null,
        "tagTimeRetained": null,
    }))
}

// ============================================================================
// Files
// ============================================================================

async fn write_schema_file(table_path: &Path, schema: &TableSchema) -> Result<(), ApiError> {
    let dir = table_path.join("schema");
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(ApiError::io)?;
    let content = serde_json::to_vec(schema)
        .map_err(|error| ApiError::internal(format!("cannot serialize schema: {error}")))?;
    write_atomically(&dir.join(format!("schema-{}", schema.id())), &content).await
}

/// Readers list these directories concurrently: a file appears whole or not at all.
async fn write_atomically(path: &Path, content: &[u8]) -> Result<(), ApiError> {
    let file_name = path
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| ApiError::internal(format!("bad file path {}", path.display())))?;
    let tmp = path.with_file_name(format!(".{file_name}.{}.tmp", new_id()));
    tokio::fs::write(&tmp, content)
        .await
        .map_err(ApiError::io)?;
    tokio::fs::rename(&tmp, path).await.map_err(ApiError::io)
}

async fn remove_dir(path: &Path) -> Result<(), ApiError> {
    match tokio::fs::remove_dir_all(path).await {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(ApiError::io(error)),
        _ => Ok(()),
    }
}

// ============================================================================
// Helpers
// ============================================================================

/// The client rebuilds its table schema from the logical `Schema` and the schema id; the
/// stored `TableSchema` carries the same fields (ids included) plus bookkeeping it ignores.
fn logical_schema(schema: &TableSchema) -> Result<Schema, ApiError> {
    serde_json::to_value(schema)
        .and_then(serde_json::from_value)
        .map_err(|error| ApiError::internal(format!("cannot convert schema: {error}")))
}

/// Names become directory names: keep them inside the warehouse and out of Paimon's
/// `table$system` syntax.
fn validate_name(kind: &str, name: &str) -> Result<(), ApiError> {
    let bad = name.trim().is_empty()
        || name == "."
        || name == ".."
        || name.contains(['/', '\\', '\0', '$']);
    if bad {
        return Err(ApiError::bad_request(format!(
            "invalid {kind} name '{name}'"
        )));
    }
    Ok(())
}

/// One page of `names` (sorted), filtered by an optional SQL LIKE pattern.
fn page<'a>(
    names: impl Iterator<Item = &'a String>,
    query: &HashMap<String, String>,
    pattern: Option<&String>,
) -> Result<(Vec<String>, Option<String>), ApiError> {
    let max_results = match query.get("maxResults") {
        Some(value) => match value.parse::<usize>() {
            Ok(max) if max > 0 => Some(max),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "maxResults must be a positive integer, got '{value}'"
                )))
            }
        },
        None => None,
    };
    let after = query.get("pageToken");
    let mut matching = names
        .filter(|name| after.is_none_or(|token| name.as_str() > token.as_str()))
        .filter(|name| pattern.is_none_or(|pattern| like(pattern, name)))
        .cloned()
        .collect::<Vec<_>>();
    let next = match max_results {
        Some(max) if matching.len() > max => {
            matching.truncate(max);
            matching.last().cloned()
        }
        _ => None,
    };
    Ok((matching, next))
}

/// SQL LIKE with `%` and `_`, the syntax of the REST name patterns.
fn like(pattern: &str, text: &str) -> bool {
    let pattern = pattern.chars().collect::<Vec<_>>();
    let text = text.chars().collect::<Vec<_>>();
    // matches[j]: pattern[..i] matches text[..j]
    let mut matches = vec![false; text.len() + 1];
    matches[0] = true;
    for p in pattern {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            next[j] = match p {
                '%' => matches[j] || (j > 0 && next[j - 1]),
                '_' => j > 0 && matches[j - 1],
                c => j > 0 && matches[j - 1] && text[j - 1] == c,
            };
        }
        matches = next;
    }
    matches[text.len()]
}

fn parse_query(query: Option<&str>) -> Result<HashMap<String, String>, ApiError> {
    let mut params = HashMap::new();
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        params.insert(decode_component(key)?, decode_component(value)?);
    }
    Ok(params)
}

/// Decodes one path segment or query component as the client encodes it
/// (`application/x-www-form-urlencoded`: `+` is a space, `%XX` a byte).
fn decode_component(raw: &str) -> Result<String, ApiError> {
    let malformed = || ApiError::bad_request(format!("malformed URL component '{raw}'"));
    let raw = raw.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hex = raw.get(i + 1..i + 3).ok_or_else(malformed)?;
                let hex = std::str::from_utf8(hex).map_err(|_| malformed())?;
                bytes.push(u8::from_str_radix(hex, 16).map_err(|_| malformed())?);
                i += 2;
            }
            byte => bytes.push(byte),
        }
        i += 1;
    }
    String::from_utf8(bytes).map_err(|_| malformed())
}

fn path_string(path: &Path) -> Result<String, ApiError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| ApiError::internal(format!("path {} is not UTF-8", path.display())))
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// Ids unique across servers in this process and across processes in time.
fn new_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!(
        "{:08x}-{nanos:x}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ============================================================================
// Errors
// ============================================================================

/// An error answered in the REST catalog's `ErrorResponse` shape; the client maps 404 and 409
/// with their resource type to `DatabaseNotExist`, `TableAlreadyExist`, `ColumnNotExist`, ...
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    resource_type: Option<String>,
    resource_name: Option<String>,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: String) -> Self {
        Self {
            status,
            resource_type: None,
            resource_name: None,
            message,
        }
    }

    fn about(
        status: StatusCode,
        resource_type: &str,
        resource_name: &str,
        message: String,
    ) -> Self {
        Self {
            status,
            resource_type: Some(resource_type.to_string()),
            resource_name: Some(resource_name.to_string()),
            message,
        }
    }

    fn bad_request(message: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn internal(message: String) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn io(error: io::Error) -> Self {
        Self::internal(format!("file system error: {error}"))
    }

    fn not_found(resource_type: &str, resource_name: &str, message: String) -> Self {
        Self::about(StatusCode::NOT_FOUND, resource_type, resource_name, message)
    }

    fn conflict(resource_type: &str, resource_name: &str, message: String) -> Self {
        Self::about(StatusCode::CONFLICT, resource_type, resource_name, message)
    }

    fn database_not_found(name: &str) -> Self {
        Self::not_found(
            "DATABASE",
            name,
            format!("database '{name}' does not exist"),
        )
    }

    fn table_not_found(db: &str, name: &str) -> Self {
        Self::not_found("TABLE", name, format!("table {db}.{name} does not exist"))
    }

    fn table_exists(db: &str, name: &str) -> Self {
        Self::conflict("TABLE", name, format!("table {db}.{name} already exists"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorResponse::new(
            self.resource_type,
            self.resource_name,
            Some(self.message),
            Some(i32::from(self.status.as_u16())),
        );
        (self.status, Json(body)).into_response()
    }
}
