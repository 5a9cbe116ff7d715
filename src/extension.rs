//! Lake-stream tables in an app's own DataFusion session.
//!
//! [`LakeStreamExtension::install`] adds the planning hooks to a
//! `SessionContext`: the relation planner that serves `t$rt` (and
//! paimon-datafusion's, for time travel on `t`), write routing, the
//! `lakestream.scan_mode` setting, the procedures' table functions and
//! `CREATE EXTERNAL TABLE ... STORED AS PAIMON`. [`LakeStreamContext`] uses
//! the same hooks and adds the statements DataFusion does not plan (DDL,
//! `ALTER TABLE`, `CALL`).
//!
//! [`LakeStreamContext`]: crate::LakeStreamContext

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use datafusion::error::Result as DFResult;
use datafusion::execution::SessionState;
use datafusion::prelude::SessionContext;
use paimon::catalog::Catalog;
use paimon_datafusion::{BlobReaderRegistry, PaimonCatalogProvider, PaimonRelationPlanner};

use crate::catalog::LakeStreamCatalog;
use crate::error::Error;
use crate::options::CatalogStoreOptions;
use crate::planner::relation::RealtimeRelationPlanner;
use crate::planner::write::WriteRouting;
use crate::store::{builtin_registry, StoreRegistry};
use crate::table::config::LakeStreamConfig;
use crate::table::LakeStreamSession;
use crate::table::{PaimonTableFactory, PAIMON_FORMAT};

/// The lake-stream hooks of one DataFusion session, and its lake-stream catalogs.
#[derive(Debug, Clone)]
pub struct LakeStreamExtension {
    pub(crate) state: Arc<LakeStreamSession>,
    registry: Arc<StoreRegistry>,
}

impl LakeStreamExtension {
    /// Adds lake-stream planning to `ctx`, with the built-in stores.
    ///
    /// ```no_run
    /// # async fn run() -> datafusion::error::Result<()> {
    /// use std::collections::HashMap;
    /// use datafusion::prelude::SessionContext;
    /// use paimon_lakestream::LakeStreamExtension;
    ///
    /// let ctx = SessionContext::new();
    /// let lakestream = LakeStreamExtension::install(&ctx)?;
    /// let options = HashMap::from([
    ///     ("warehouse".to_string(), "/tmp/warehouse".to_string()),
    ///     ("lakestream.store".to_string(), "local".to_string()),
    /// ]);
    /// lakestream.register_catalog(&ctx, "paimon", options).await?;
    /// ctx.sql("SELECT * FROM paimon.default.orders$rt").await?.show().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn install(ctx: &SessionContext) -> DFResult<Self> {
        // Registered first, so it runs after ours: ours sees `t$rt` first.
        ctx.register_relation_planner(Arc::new(PaimonRelationPlanner::new()))?;
        Ok(Self::install_hooks(ctx))
    }

    /// The hooks alone, for a session whose Paimon relation planner is
    /// already there (`SQLContext`'s).
    pub(crate) fn install_hooks(ctx: &SessionContext) -> Self {
        let state = Arc::new(LakeStreamSession::default());
        let registry = Arc::new(builtin_registry());
        // Registration fails only for a planner registered twice; this one is new.
        let _ = ctx
            .register_relation_planner(Arc::new(RealtimeRelationPlanner::new(Arc::clone(&state))));
        ctx.add_analyzer_rule(Arc::new(WriteRouting::new(Arc::clone(&state))));
        crate::procedure::register(ctx, &state);
        let session_state = ctx.state_ref();
        let mut session_state = session_state.write();
        session_state
            .config_mut()
            .options_mut()
            .extensions
            .insert(LakeStreamConfig::default());
        session_state.table_factories_mut().insert(
            PAIMON_FORMAT.to_string(),
            Arc::new(PaimonTableFactory::new(
                Arc::clone(&state),
                Arc::clone(&registry),
            )),
        );
        Self { state, registry }
    }

    /// The registry stores are created through. Register a factory here
    /// before the first use of a catalog that names it.
    pub fn store_registry(&self) -> &Arc<StoreRegistry> {
        &self.registry
    }

    /// The lake-stream catalog registered under `name`.
    pub fn catalog(&self, name: &str) -> Option<Arc<LakeStreamCatalog>> {
        self.state.catalog(name)
    }

    /// Wraps a Paimon catalog in lake-stream mode, with the lake-stream
    /// options among `catalog_options`, and remembers it for planning.
    pub(crate) fn lakestream_catalog(
        &self,
        name: &str,
        catalog: Arc<dyn Catalog>,
        catalog_options: HashMap<String, String>,
    ) -> DFResult<Arc<LakeStreamCatalog>> {
        let store_options = CatalogStoreOptions::from_catalog_options(&catalog_options)?;
        let catalog = Arc::new(LakeStreamCatalog::new(
            name,
            catalog,
            store_options,
            Arc::clone(&self.registry),
            catalog_options,
        ));
        self.state.add_catalog(Arc::clone(&catalog));
        Ok(catalog)
    }

    /// Creates a Paimon catalog from its options (`warehouse`, `metastore`,
    /// `uri`, ..., plus `lakestream.store` and `<store>.<key>`) and registers
    /// it in `ctx` as `name`. Database `default` is created if missing; the
    /// session's current catalog is left as it is.
    pub async fn register_catalog(
        &self,
        ctx: &SessionContext,
        name: &str,
        options: HashMap<String, String>,
    ) -> DFResult<Arc<LakeStreamCatalog>> {
        let paimon = crate::options::create_paimon_catalog(&options).await?;
        match paimon.get_database("default").await {
            Ok(_) => {}
            Err(paimon::Error::DatabaseNotExist { .. }) => paimon
                .create_database("default", true, HashMap::new())
                .await
                .map_err(Error::from)?,
            Err(e) => return Err(Error::from(e).into()),
        }
        let catalog = self.lakestream_catalog(name, paimon, options)?;
        let weak = ctx.state_weak_ref();
        let session: Arc<dyn Fn() -> Option<SessionState> + Send + Sync> =
            Arc::new(move || weak.upgrade().map(|state| state.read().clone()));
        ctx.register_catalog(
            name,
            Arc::new(PaimonCatalogProvider::new(
                Some(name.to_string()),
                Arc::clone(&catalog) as Arc<dyn Catalog>,
                Arc::new(RwLock::new(HashMap::new())),
                BlobReaderRegistry::default(),
                Some(session),
            )),
        );
        Ok(catalog)
    }
}
