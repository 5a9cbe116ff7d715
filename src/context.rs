//! [`LakeStreamContext`]: paimon-datafusion's `SQLContext` with Paimon catalogs
//! in lake-stream mode and the statement filter in front of it.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::Result as DFResult;
use datafusion::prelude::{DataFrame, SessionContext};
use paimon::catalog::Catalog;
use paimon::{CatalogFactory, Options};
use paimon_datafusion::SQLContext;

use crate::catalog::LakeStreamCatalog;
use crate::error::{self, Error};
use crate::options::CatalogStoreOptions;
use crate::planner::statement::StatementFilter;

/// A SQL context over Paimon catalogs in lake-stream mode.
///
/// Everything `SQLContext` offers keeps working; lake-stream tables get the
/// contract's guards on top.
///
/// ```no_run
/// # async fn run() -> datafusion::error::Result<()> {
/// use std::collections::HashMap;
/// use paimon_lakestream::LakeStreamContext;
///
/// let mut ctx = LakeStreamContext::new();
/// let options = HashMap::from([
///     ("warehouse".to_string(), "/tmp/warehouse".to_string()),
///     ("lakestream.store".to_string(), "local".to_string()),
/// ]);
/// ctx.register_catalog("paimon", options).await?;
/// ctx.sql("CREATE TABLE t (id INT, v STRING) WITH ('lakestream.enabled' = 'true')")
///     .await?;
/// ctx.sql("SELECT * FROM t").await?.show().await?;
/// # Ok(())
/// # }
/// ```
pub struct LakeStreamContext {
    sql_context: SQLContext,
    catalogs: HashMap<String, Arc<LakeStreamCatalog>>,
}

impl Default for LakeStreamContext {
    fn default() -> Self {
        Self::new()
    }
}

impl LakeStreamContext {
    /// A context with no catalogs.
    pub fn new() -> Self {
        Self::from_sql_context(SQLContext::new())
    }

    /// Wraps an `SQLContext` built by the caller (custom runtime, memory pool).
    /// Catalogs registered on it before this call are not lake-stream catalogs.
    pub fn from_sql_context(sql_context: SQLContext) -> Self {
        Self {
            sql_context,
            catalogs: HashMap::new(),
        }
    }

    /// Creates a Paimon catalog from its options (`warehouse`, `metastore`,
    /// `uri`, ...) and registers it with its lake-stream options
    /// (`lakestream.store`, `<store>.<key>`).
    ///
    /// The first catalog registered becomes current, with database `default`.
    pub async fn register_catalog(
        &mut self,
        name: &str,
        options: HashMap<String, String>,
    ) -> DFResult<()> {
        let store_options = CatalogStoreOptions::from_catalog_options(&options)?;
        let catalog = CatalogFactory::create(Options::from_map(options))
            .await
            .map_err(Error::from)?;
        self.register_with_store_options(name, catalog, store_options)
            .await
    }

    /// Registers a Paimon catalog the caller built, with the catalog options
    /// that carry its lake-stream settings.
    pub async fn register_paimon_catalog(
        &mut self,
        name: &str,
        catalog: Arc<dyn Catalog>,
        catalog_options: &HashMap<String, String>,
    ) -> DFResult<()> {
        let store_options = CatalogStoreOptions::from_catalog_options(catalog_options)?;
        self.register_with_store_options(name, catalog, store_options)
            .await
    }

    async fn register_with_store_options(
        &mut self,
        name: &str,
        catalog: Arc<dyn Catalog>,
        store_options: CatalogStoreOptions,
    ) -> DFResult<()> {
        let catalog = Arc::new(LakeStreamCatalog::new(catalog, store_options));
        self.sql_context
            .register_catalog(name, Arc::clone(&catalog) as Arc<dyn Catalog>)
            .await?;
        self.catalogs.insert(name.to_string(), catalog);
        Ok(())
    }

    /// The lake-stream catalog registered under `name`.
    pub fn catalog(&self, name: &str) -> Option<&Arc<LakeStreamCatalog>> {
        self.catalogs.get(name)
    }

    /// Plans (and, for DDL, runs) one SQL statement.
    pub async fn sql(&self, sql: &str) -> DFResult<DataFrame> {
        let filter = StatementFilter {
            session: self.sql_context.ctx(),
            catalogs: &self.catalogs,
        };
        filter.check(sql).await?;
        self.sql_context.sql(sql).await.map_err(error::surface)
    }

    /// The DataFusion session underneath.
    pub fn session(&self) -> &SessionContext {
        self.sql_context.ctx()
    }

    /// The paimon-datafusion context underneath.
    pub fn sql_context(&self) -> &SQLContext {
        &self.sql_context
    }
}
