//! The store's root: an object store (local disk, `memory://`, ...) and, for
//! local disk, the directory behind it (for fsync and the tiering lock).
//!
//! Roots are shared per process: every catalog and context that names the
//! same root sees the same caches, writer queues and notifications.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use paimon::catalog::Identifier;
use url::Url;

use super::table::TableState;
use super::LOCAL;
use crate::error::{Error, Result};
use crate::store::store_error;

/// A store root shared by everything in the process that names it.
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) url: String,
    pub(crate) objects: Arc<dyn ObjectStore>,
    /// The directory behind `objects` when it is local disk.
    pub(crate) local_dir: Option<PathBuf>,
    tables: Mutex<HashMap<Identifier, Arc<TableState>>>,
}

impl Root {
    /// The root at `location`: a URL (`file:///...`, `memory://name`) or a path.
    pub(crate) fn open(location: &str) -> Result<Arc<Root>> {
        let url = to_url(location)?;
        static ROOTS: OnceLock<Mutex<HashMap<String, Arc<Root>>>> = OnceLock::new();
        let roots = ROOTS.get_or_init(Default::default);
        let mut roots = roots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(root) = roots.get(url.as_str()) {
            return Ok(Arc::clone(root));
        }
        let (objects, local_dir): (Arc<dyn ObjectStore>, Option<PathBuf>) = match url.scheme() {
            "file" => {
                let dir = url.to_file_path().map_err(|()| Error::InvalidOption {
                    key: "local.path".to_string(),
                    reason: format!("'{url}' is not a local directory"),
                })?;
                std::fs::create_dir_all(&dir).map_err(|e| Error::StoreUnavailable {
                    store: LOCAL.to_string(),
                    reason: format!("cannot create the store directory '{}': {e}", dir.display()),
                })?;
                let objects = LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| store_error(LOCAL, e))?
                    .with_automatic_cleanup(true);
                (Arc::new(objects), Some(dir))
            }
            "memory" => (Arc::new(InMemory::new()), None),
            other => {
                let (objects, prefix) =
                    object_store::parse_url(&url).map_err(|e| Error::InvalidOption {
                        key: "local.path".to_string(),
                        reason: format!("cannot open '{url}' ({other}): {e}"),
                    })?;
                if !prefix.as_ref().is_empty() {
                    let objects = object_store::prefix::PrefixStore::new(objects, prefix);
                    (Arc::new(objects), None)
                } else {
                    (Arc::from(objects), None)
                }
            }
        };
        let root = Arc::new(Root {
            url: url.to_string(),
            objects,
            local_dir,
            tables: Mutex::new(HashMap::new()),
        });
        roots.insert(url.to_string(), Arc::clone(&root));
        Ok(root)
    }

    /// The state of one table under this root, created on first use.
    pub(crate) fn table(self: &Arc<Self>, identifier: &Identifier) -> Arc<TableState> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            tables
                .entry(identifier.clone())
                .or_insert_with(|| Arc::new(TableState::new(Arc::clone(self), identifier))),
        )
    }

    /// Forgets a table's in-process state (after its files are deleted).
    pub(crate) fn forget(&self, identifier: &Identifier) {
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(identifier);
    }

    /// The local file behind an object, when the root is local disk.
    pub(crate) fn local_file(&self, path: &Path) -> Option<PathBuf> {
        let dir = self.local_dir.as_ref()?;
        let mut file = dir.clone();
        for part in path.parts() {
            file.push(part.as_ref());
        }
        Some(file)
    }

    /// Holds the table's tiering lock across processes until dropped. On
    /// local disk it is an OS file lock, so a holder that crashes releases
    /// it; other roots are used by one process, and the caller's in-process
    /// lock is enough.
    pub(crate) async fn lock_tiering(&self, table_dir: &Path) -> Result<Option<std::fs::File>> {
        let Some(file) = self.local_file(&table_dir.clone().join("tier.lock")) else {
            return Ok(None);
        };
        let locked = tokio::task::spawn_blocking(move || {
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&file)?;
            lock.lock()?;
            Ok::<_, std::io::Error>(lock)
        })
        .await
        .map_err(|e| store_error(LOCAL, e))?
        .map_err(|e| store_error(LOCAL, format!("tiering lock: {e}")))?;
        Ok(Some(locked))
    }

    /// Makes a written object durable on local disk: the file and its
    /// directory are fsynced. Object stores without a local directory are
    /// durable once their put returns.
    pub(crate) fn sync(&self, path: &Path) -> Result<()> {
        let Some(file) = self.local_file(path) else {
            return Ok(());
        };
        let sync = |p: &std::path::Path| std::fs::File::open(p).and_then(|f| f.sync_all());
        sync(&file).map_err(|e| store_error(LOCAL, format!("fsync '{}': {e}", file.display())))?;
        if let Some(parent) = file.parent() {
            sync(parent)
                .map_err(|e| store_error(LOCAL, format!("fsync '{}': {e}", parent.display())))?;
        }
        Ok(())
    }
}

fn to_url(location: &str) -> Result<Url> {
    if location.contains("://") {
        return Url::parse(location).map_err(|e| Error::InvalidOption {
            key: "local.path".to_string(),
            reason: format!("'{location}' is not a URL: {e}"),
        });
    }
    let path = std::path::Path::new(location);
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| store_error(LOCAL, e))?
            .join(path)
    };
    Url::from_directory_path(&absolute).map_err(|()| Error::InvalidOption {
        key: "local.path".to_string(),
        reason: format!("'{location}' is not a usable directory path"),
    })
}
