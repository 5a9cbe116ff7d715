//! The lake-stream state of one DataFusion session: its lake-stream
//! catalogs, the lake-stream tables it opened by path, and the Paimon
//! dynamic options it set.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use datafusion::common::config::ConfigOptions;
use datafusion::common::TableReference;
use paimon::catalog::Identifier;

use crate::catalog::LakeStreamCatalog;
use crate::store::StoreBinding;

/// A lake-stream table opened by path (connector mode), with the store its
/// `CREATE EXTERNAL TABLE ... OPTIONS` named, if any.
#[derive(Debug, Clone)]
pub(crate) struct ExternalTable {
    pub(crate) table: paimon::table::Table,
    pub(crate) binding: StoreBinding,
}

/// What the lake-stream hooks of one session share (the relation planner,
/// write routing, the table factory, the procedures and the statement
/// filter): its lake-stream catalogs, the tables opened by path, and the
/// Paimon dynamic options set with `SET 'paimon.<key>'` (mirrored here,
/// because `t$rt` must refuse time travel set that way).
#[derive(Debug, Default)]
pub(crate) struct LakeStreamSession {
    catalogs: RwLock<HashMap<String, Arc<LakeStreamCatalog>>>,
    dynamic_options: RwLock<HashMap<String, String>>,
    /// Lake-stream tables opened by path, by their full name in the session.
    external: RwLock<HashMap<String, ExternalTable>>,
}

impl LakeStreamSession {
    pub(crate) fn add_catalog(&self, catalog: Arc<LakeStreamCatalog>) {
        self.catalogs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(catalog.name().to_string(), catalog);
    }

    pub(crate) fn catalog(&self, name: &str) -> Option<Arc<LakeStreamCatalog>> {
        self.catalogs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Resolves a (normalized) table reference against the session defaults
    /// to one of this session's lake-stream catalogs.
    pub(crate) fn resolve(
        &self,
        reference: &TableReference,
        config: &ConfigOptions,
    ) -> Option<(Arc<LakeStreamCatalog>, Identifier)> {
        let defaults = &config.catalog;
        let catalog = reference.catalog().unwrap_or(&defaults.default_catalog);
        let schema = reference.schema().unwrap_or(&defaults.default_schema);
        let catalog = self.catalog(catalog)?;
        Some((catalog, Identifier::new(schema, reference.table())))
    }

    pub(crate) fn add_external(
        &self,
        name: &TableReference,
        config: &ConfigOptions,
        table: ExternalTable,
    ) {
        let name = full_name(name, config);
        self.external
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, table);
    }

    /// The lake-stream table opened by path under `name`, if any.
    pub(crate) fn external(
        &self,
        name: &TableReference,
        config: &ConfigOptions,
    ) -> Option<ExternalTable> {
        self.external
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&full_name(name, config))
            .cloned()
    }

    pub(crate) fn set_dynamic_option(&self, key: &str, value: Option<String>) {
        let mut options = self
            .dynamic_options
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match value {
            Some(value) => options.insert(key.to_string(), value),
            None => options.remove(key),
        };
    }

    pub(crate) fn clear_dynamic_options(&self) {
        self.dynamic_options
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Runs `read` on the mirrored Paimon dynamic options.
    pub(crate) fn with_dynamic_options<T>(
        &self,
        read: impl FnOnce(&HashMap<String, String>) -> T,
    ) -> T {
        read(
            &self
                .dynamic_options
                .read()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }
}

/// `name` with the session's default catalog and schema where it names none.
pub(crate) fn full_name(name: &TableReference, config: &ConfigOptions) -> String {
    let defaults = &config.catalog;
    format!(
        "{}.{}.{}",
        name.catalog().unwrap_or(&defaults.default_catalog),
        name.schema().unwrap_or(&defaults.default_schema),
        name.table()
    )
}
