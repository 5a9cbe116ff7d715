//! Shared test setup: real warehouses in temporary directories, behind a
//! filesystem catalog or a REST catalog served by [`RestCatalogServer`].

use std::collections::HashMap;

use std::sync::Arc;

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

/// A warehouse in a temporary directory, with the catalog in front of it.
pub struct TestWarehouse {
    _dir: TempDir,
    /// The test store every context of this warehouse can name as `memory`.
    pub memory: Arc<MemoryStoreFactory>,
    options: HashMap<String, String>,
    _server: Option<RestCatalogServer>,
}

impl TestWarehouse {
    pub async fn new(kind: CatalogKind) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let warehouse = dir.path().join("warehouse");
        let (options, server) = match kind {
            CatalogKind::Filesystem => {
                std::fs::create_dir_all(&warehouse).expect("warehouse directory");
                let options = HashMap::from([(
                    "warehouse".to_string(),
                    warehouse.to_string_lossy().into_owned(),
                )]);
                (options, None)
            }
            CatalogKind::Rest => {
                let server = RestCatalogServer::start(&warehouse)
                    .await
                    .expect("REST catalog server");
                (server.catalog_options(), Some(server))
            }
        };
        Self {
            _dir: dir,
            memory: Arc::new(MemoryStoreFactory::default()),
            options,
            _server: server,
        }
    }

    /// A filesystem catalog over a warehouse someone else owns (a store's
    /// cluster tiers into it); it is left in place when dropped.
    #[cfg_attr(not(feature = "fluss"), allow(dead_code))]
    pub fn existing(warehouse: &std::path::Path) -> Self {
        Self {
            _dir: tempfile::tempdir().expect("temporary directory"),
            memory: Arc::new(MemoryStoreFactory::default()),
            options: HashMap::from([(
                "warehouse".to_string(),
                warehouse.to_string_lossy().into_owned(),
            )]),
            _server: None,
        }
    }

    /// The temporary directory everything of this warehouse lives in.
    pub fn path(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The catalog options, without lake-stream options.
    pub fn catalog_options(&self) -> HashMap<String, String> {
        self.options.clone()
    }

    /// A context with this warehouse's catalog registered as `paimon`, plus `extra` options.
    pub async fn context_with(&self, extra: &[(&str, &str)]) -> LakeStreamContext {
        let mut options = self.catalog_options();
        options.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut ctx = LakeStreamContext::new();
        ctx.store_registry()
            .register(Arc::clone(&self.memory) as Arc<dyn paimon_lakestream::store::StoreFactory>);
        ctx.register_catalog("paimon", options)
            .await
            .expect("register catalog");
        ctx
    }
}
