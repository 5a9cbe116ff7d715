//! [`LakeStreamContext`]: paimon-datafusion's `SQLContext` with Paimon catalogs
//! in lake-stream mode and the statement filter in front of it.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::Result as DFResult;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::Statement;
use paimon::catalog::Catalog;
use paimon_datafusion::SQLContext;

use crate::catalog::LakeStreamCatalog;
use crate::error::{self, Error};
use crate::extension::LakeStreamExtension;
use crate::planner::parsed::Parsed;
use crate::planner::statement::{Route, StatementFilter};
use crate::store::StoreRegistry;

/// A SQL context over Paimon catalogs in lake-stream mode.
///
/// Everything `SQLContext` offers keeps working; lake-stream tables get the
/// contract on top: `t$rt` reads from the store, writes go to the store, and
/// the catalog guards hold.
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
/// ctx.sql("SELECT * FROM t$rt").await?.show().await?;
/// # Ok(())
/// # }
/// ```
pub struct LakeStreamContext {
    sql_context: SQLContext,
    extension: LakeStreamExtension,
}

impl Default for LakeStreamContext {
    fn default() -> Self {
        Self::new()
    }
}

impl LakeStreamContext {
    /// A context with no catalogs and the built-in stores.
    pub fn new() -> Self {
        Self::from_sql_context(SQLContext::new())
    }

    /// Wraps an `SQLContext` built by the caller (custom runtime, memory pool).
    /// Catalogs registered on it before this call are not lake-stream catalogs.
    pub fn from_sql_context(sql_context: SQLContext) -> Self {
        let extension = LakeStreamExtension::install_hooks(sql_context.ctx());
        Self {
            sql_context,
            extension,
        }
    }

    /// The registry stores are created through. Register a factory here
    /// before the first use of a catalog that names it.
    pub fn store_registry(&self) -> &Arc<StoreRegistry> {
        self.extension.store_registry()
    }

    /// The lake-stream hooks of this context's session.
    pub fn extension(&self) -> &LakeStreamExtension {
        &self.extension
    }

    /// Creates a Paimon catalog from its options (`warehouse`, `metastore`,
    /// `uri`, ...) and registers it with its lake-stream options
    /// (`lakestream.store`, `<store>.<key>`, `lakestream.timeout`).
    ///
    /// The first catalog registered becomes current, with database `default`.
    /// The store is not contacted until a lake-stream table first needs it.
    pub async fn register_catalog(
        &mut self,
        name: &str,
        options: HashMap<String, String>,
    ) -> DFResult<()> {
        let catalog = crate::options::create_paimon_catalog(&options).await?;
        self.register_paimon_catalog(name, catalog, options).await
    }

    /// Registers a Paimon catalog the caller built, with the catalog options
    /// that carry its lake-stream settings.
    pub async fn register_paimon_catalog(
        &mut self,
        name: &str,
        catalog: Arc<dyn Catalog>,
        catalog_options: HashMap<String, String>,
    ) -> DFResult<()> {
        let catalog = self
            .extension
            .lakestream_catalog(name, catalog, catalog_options)?;
        self.sql_context
            .register_catalog(name, catalog as Arc<dyn Catalog>)
            .await
    }

    /// The lake-stream catalog registered under `name`.
    pub fn catalog(&self, name: &str) -> Option<Arc<LakeStreamCatalog>> {
        self.extension.catalog(name)
    }

    /// Like [`Self::sql`], plus the statements that change the context
    /// itself: `CREATE CATALOG name WITH ('metastore' = ..., 'warehouse' =
    /// ..., 'lakestream.store' = ..., ...)` registers a catalog with the
    /// options `register_catalog` takes; `SHOW CATALOGS` lists the session's
    /// catalogs and the store each names (no other option, as some hold secrets).
    pub async fn execute(&mut self, sql: &str) -> DFResult<DataFrame> {
        let parsed = Parsed::new(sql, self.session());
        if let Some(create) = parsed.create_catalog()? {
            let exists = self.session().catalog(&create.name).is_some();
            if exists && !create.if_not_exists {
                return Err(Error::InvalidStatement {
                    statement: "CREATE CATALOG".to_string(),
                    reason: format!("catalog '{}' already exists", create.name),
                }
                .into());
            }
            if !exists {
                self.register_catalog(&create.name, create.options).await?;
            }
            return self.single_column("result", vec!["OK".to_string()]);
        }
        if parsed.is_show_catalogs() {
            return self.show_catalogs();
        }
        self.run(parsed).await
    }

    fn show_catalogs(&self) -> DFResult<DataFrame> {
        let mut names = self.session().catalog_names();
        names.sort();
        let stores: Vec<Option<String>> = names
            .iter()
            .map(|name| {
                self.catalog(name)
                    .map(|c| c.store_options().store().unwrap_or("none").to_string())
            })
            .collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new("catalog_name", DataType::Utf8, false),
            Field::new("lakestream_store", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(names)),
                Arc::new(StringArray::from(stores)),
            ],
        )?;
        self.session().read_batch(batch)
    }

    fn single_column(&self, name: &str, values: Vec<String>) -> DFResult<DataFrame> {
        let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(values))])?;
        self.session().read_batch(batch)
    }

    /// Plans (and, for DDL, runs) one SQL statement. `CREATE CATALOG` and
    /// `SHOW CATALOGS` need [`Self::execute`].
    pub async fn sql(&self, sql: &str) -> DFResult<DataFrame> {
        let parsed = Parsed::new(sql, self.session());
        if parsed.create_catalog()?.is_some() || parsed.is_show_catalogs() {
            return Err(Error::InvalidStatement {
                statement: "CREATE CATALOG / SHOW CATALOGS".to_string(),
                reason: "these change or list the context itself: run them with \
                         LakeStreamContext::execute, as lakestream-cli does"
                    .to_string(),
            }
            .into());
        }
        self.run(parsed).await
    }

    /// Checks and runs one statement, parsed once: `SQLContext` gets its
    /// text, DataFusion's planner the tree.
    async fn run(&self, mut parsed: Parsed<'_>) -> DFResult<DataFrame> {
        let state = &self.extension.state;
        let filter = StatementFilter {
            session: self.sql_context.ctx(),
            state,
        };
        let checked = filter.check(&parsed).await?;
        let sql = parsed.sql();
        let session = self.sql_context.ctx();
        // Boxed: the statement's future is large, and stacks are not.
        let (result, notices) = crate::notice::collecting(Box::pin(async {
            match checked.route {
                Route::SqlContext => self.sql_context.sql(sql).await,
                Route::SqlContextText(text) => self.sql_context.sql(&text).await,
                Route::DataFusion => match parsed.take_statement_for_datafusion() {
                    Some(statement) => plan_tree(session, statement).await,
                    // The session's dialect reads the text otherwise.
                    None => session.sql(sql).await,
                },
                Route::Rewritten(statement) => plan_tree(session, *statement).await,
                Route::DataFusionText => session.sql(sql).await,
            }
        }))
        .await;
        let result = result.map_err(error::surface)?;
        if checked.reset_all {
            state.clear_dynamic_options();
        }
        if let Some((key, value)) = checked.dynamic_option {
            state.set_dynamic_option(&key, value);
        }
        if notices.is_empty() {
            return Ok(result);
        }
        let schema = Arc::new(Schema::new(vec![Field::new(
            "notice",
            DataType::Utf8,
            false,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(notices))])?;
        self.sql_context.ctx().read_batch(batch)
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

/// Plans and runs a parsed statement in DataFusion's planner.
async fn plan_tree(session: &SessionContext, statement: Statement) -> DFResult<DataFrame> {
    let plan = session
        .state()
        .statement_to_plan(DFStatement::Statement(Box::new(statement)))
        .await?;
    session.execute_logical_plan(plan).await
}
