//! Connector mode: `CREATE EXTERNAL TABLE t STORED AS PAIMON LOCATION '...'`
//! opens a Paimon table by path, in any DataFusion session, without
//! registering a catalog.
//!
//! `t` reads as Paimon does. A lake-stream table opened this way names no
//! store, so its writes are refused like those of a catalog without a store,
//! unless the statement's `OPTIONS` name one (`'lakestream.store' 'local'`,
//! plus that store's `<store>.<key>` options). `t$rt` then works too.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{Session, TableProviderFactory};
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::CreateExternalTable;
use paimon::catalog::Identifier;
use paimon::{CatalogFactory, Options};
use paimon_datafusion::PaimonTableProvider;

use super::session::{ExternalTable, LakeStreamSession};
use crate::error::Error;
use crate::options::{self, CatalogStoreOptions};
use crate::store::{LazyStore, StoreBinding, StoreRegistry};

/// The `STORED AS` name this factory is registered under.
pub(crate) const PAIMON_FORMAT: &str = "PAIMON";

/// Opens Paimon tables by path for `CREATE EXTERNAL TABLE ... STORED AS PAIMON`.
#[derive(Debug)]
pub(crate) struct PaimonTableFactory {
    state: Arc<LakeStreamSession>,
    registry: Arc<StoreRegistry>,
}

impl PaimonTableFactory {
    pub(crate) fn new(state: Arc<LakeStreamSession>, registry: Arc<StoreRegistry>) -> Self {
        Self { state, registry }
    }
}

/// `<warehouse>/<db>.db/<table>` split into its warehouse and identifier.
fn locate(location: &str) -> DFResult<(String, Identifier)> {
    let trimmed = location.trim_end_matches('/');
    let path = Path::new(trimmed);
    let table = path.file_name().and_then(|n| n.to_str());
    let database = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".db"));
    let warehouse = path.parent().and_then(Path::parent).and_then(Path::to_str);
    match (warehouse, database, table) {
        (Some(warehouse), Some(database), Some(table)) if !warehouse.is_empty() => {
            Ok((warehouse.to_string(), Identifier::new(database, table)))
        }
        _ => Err(DataFusionError::Plan(format!(
            "LOCATION '{location}' is not a Paimon table directory: expected \
             <warehouse>/<database>.db/<table>"
        ))),
    }
}

#[async_trait]
impl TableProviderFactory for PaimonTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> DFResult<Arc<dyn TableProvider>> {
        if !cmd.schema.fields().is_empty() {
            return Err(DataFusionError::Plan(format!(
                "CREATE EXTERNAL TABLE {} STORED AS PAIMON takes its columns from the Paimon \
                 table: leave the column list out",
                cmd.name
            )));
        }
        let defaults = &state.config_options().catalog;
        let catalog_name = cmd.name.catalog().unwrap_or(&defaults.default_catalog);
        if self.state.catalog(catalog_name).is_some() {
            return Err(DataFusionError::Plan(format!(
                "CREATE EXTERNAL TABLE {}: '{catalog_name}' is a Paimon catalog, which holds its \
                 own tables only. Name the external table in a DataFusion catalog, e.g. \
                 datafusion.public.{}",
                cmd.name,
                cmd.name.table()
            )));
        }
        crate::object_storage::refuse_credentials_in_url("LOCATION", &cmd.location)?;
        let (warehouse, identifier) = locate(&cmd.location)?;
        let mut catalog_options: HashMap<String, String> = cmd.options.clone();
        catalog_options.insert("warehouse".to_string(), warehouse.clone());
        // Paimon's file IO gets the warehouse and the storage options
        // (`s3.*`, ...), not the lake-stream ones; on S3 its commits go
        // through conditional writes, as a catalog's tables' do.
        let paimon_options: HashMap<String, String> = catalog_options
            .iter()
            .filter(|(key, _)| {
                key.as_str() == "warehouse" || crate::object_storage::is_storage_key(key)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let catalog = CatalogFactory::create(Options::from_map(paimon_options))
            .await
            .map_err(Error::from)?;
        let catalog = crate::object_storage::guard_catalog(catalog, &catalog_options).catalog;
        let table = catalog.get_table(&identifier).await.map_err(|e| match e {
            paimon::Error::TableNotExist { .. } | paimon::Error::DatabaseNotExist { .. } => {
                DataFusionError::Plan(format!("LOCATION '{}' holds no Paimon table", cmd.location))
            }
            other => Error::from(other).into(),
        })?;
        let store_options = CatalogStoreOptions::from_catalog_options(&cmd.options)?;
        let store = LazyStore::for_catalog(
            &store_options,
            Arc::clone(&self.registry),
            catalog_options,
            Arc::clone(&catalog),
        );
        let binding = StoreBinding::new(store, format!("the external table '{}'", cmd.name));
        if options::is_enabled(table.schema().options()) {
            self.state.add_external(
                &cmd.name,
                state.config_options(),
                ExternalTable {
                    table: table.clone(),
                    binding,
                },
            );
        }
        Ok(Arc::new(PaimonTableProvider::try_new(table)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_into_warehouse_and_identifier() {
        let (warehouse, identifier) = locate("/w/h/db.db/t/").unwrap();
        assert_eq!(warehouse, "/w/h");
        assert_eq!(identifier, Identifier::new("db", "t"));
        assert!(locate("/w/h/db/t").is_err());
        assert!(locate("t").is_err());
        assert!(locate("db.db/t").is_err());
    }
}
