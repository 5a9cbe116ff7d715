//! The write target of a lake-stream table: every DML statement DataFusion
//! plans for it (INSERT, DELETE, UPDATE, TRUNCATE) lands here instead of in
//! paimon-datafusion's Paimon writer, and goes to the store or is refused.
//!
//! DELETE and UPDATE arrive as the rows they change: write routing plans the
//! statement's whole selection (its `WHERE` clause with any subquery, its
//! `LIMIT`) as a query over `t$rt`, and this target writes exactly those rows
//! to the store as deletes or upserts. DataFusion's own `delete_from` and
//! `update` hooks receive only the filters it could push down, so they are
//! never used to change rows here.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use paimon::table::Table;

use crate::classification::Kind;
use crate::error::{Error, Result};
use crate::exec::sink::StoreSink;
use crate::merge::MergeSpec;
use crate::store::{primary_keys, LazyStore, StoreBinding, WriteKind};

/// What the rows a [`StoreWriteTable`] receives are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowChange {
    /// New rows (INSERT): appended, or upserted by primary key.
    Insert,
    /// The current rows a DELETE selected: deleted by primary key.
    Delete,
    /// The new values of the rows an UPDATE selected: upserted by primary key.
    Update,
}

impl RowChange {
    fn operation(self) -> &'static str {
        match self {
            Self::Insert => "INSERT",
            Self::Delete => "DELETE",
            Self::Update => "UPDATE",
        }
    }
}

/// Stands in for a lake-stream table's Paimon provider as the target of DML.
#[derive(Debug)]
pub(crate) struct StoreWriteTable {
    binding: StoreBinding,
    table: Table,
    schema: SchemaRef,
    change: RowChange,
}

impl StoreWriteTable {
    /// `schema` is the schema of the provider it replaces, so planned input fits.
    pub(crate) fn new(binding: StoreBinding, table: Table, schema: SchemaRef) -> Self {
        Self::for_change(binding, table, schema, RowChange::Insert)
    }

    /// A target whose `insert_into` takes the rows a DELETE or UPDATE
    /// selected (see the module documentation).
    pub(crate) fn for_change(
        binding: StoreBinding,
        table: Table,
        schema: SchemaRef,
        change: RowChange,
    ) -> Self {
        Self {
            binding,
            table,
            schema,
            change,
        }
    }

    /// The checks of a DELETE or UPDATE that need no store, made while the
    /// statement is planned: a primary key, no assignment to it, and merge
    /// settings under which the store's deletes and upserts mean what SQL says.
    /// `assigned` names the columns an UPDATE sets.
    pub(crate) fn check_change(&self, assigned: &[String]) -> Result<()> {
        let operation = self.change.operation();
        if self.change == RowChange::Insert {
            return Ok(());
        }
        let keys = primary_keys(&self.table);
        if keys.is_empty() {
            return Err(self.no_primary_key(operation));
        }
        if let Some(column) = assigned.iter().find(|c| keys.contains(*c)) {
            return Err(self.not_supported(
                operation,
                format!(
                    "primary-key column '{column}' cannot be set: the store keys rows by it. \
                     DELETE the row and INSERT it again"
                ),
            ));
        }
        self.check_merge_settings(operation)?;
        self.binding
            .require(operation, self.table.identifier())
            .map(|_| ())
    }

    fn name(&self) -> String {
        self.table.identifier().full_name()
    }

    fn not_supported(&self, operation: &str, reason: impl Into<String>) -> Error {
        Error::WriteNotSupported {
            operation: operation.to_string(),
            table: self.name(),
            reason: reason.into(),
        }
    }

    /// The store, reached now: an unreachable store fails the statement at
    /// planning, before any row moves.
    async fn store(&self, operation: &str) -> Result<Arc<LazyStore>> {
        let store = Arc::clone(self.binding.require(operation, self.table.identifier())?);
        // An unknown or unreachable store says so first.
        store.get().await?;
        store.check_binding(operation, &self.table)?;
        Ok(store)
    }

    /// DELETE and UPDATE change rows by key: only primary-key tables, and only
    /// stores that take deletes.
    async fn keyed_store(&self, operation: &str) -> Result<Arc<LazyStore>> {
        if primary_keys(&self.table).is_empty() {
            return Err(self.no_primary_key(operation));
        }
        let store = self.store(operation).await?;
        if !store.capabilities().deletes {
            return Err(self.not_supported(
                operation,
                format!("store '{}' does not take deletes", store.identifier()),
            ));
        }
        Ok(store)
    }

    fn unplanned_selection(&self, operation: &str) -> Error {
        self.not_supported(
            operation,
            "its WHERE clause was not planned as a query over the table's rows, and the \
             filters pushed down alone could change more rows than it selects",
        )
    }

    fn no_primary_key(&self, operation: &str) -> Error {
        self.not_supported(
            operation,
            "the table has no primary key, so its store keeps an append-only log. Give the \
             table a primary key, or turn the mode off to change Paimon directly",
        )
    }

    /// Refuses `operation` (DELETE or UPDATE) where the table's merge settings
    /// would make Paimon refuse, ignore or reinterpret the rows it writes.
    fn check_merge_settings(&self, operation: &str) -> Result<()> {
        let schema = self.table.schema();
        let spec = MergeSpec::of(schema.options(), schema.fields(), schema.primary_keys())
            .map_err(|unsupported| Error::MergeNotSupported {
                action: operation.to_string(),
                table: self.name(),
                option: unsupported.option,
                reason: unsupported.reason,
            })?;
        let refusal = match operation {
            "DELETE" => spec.delete_refusal(),
            _ => spec.update_refusal(),
        };
        match refusal {
            Some(reason) => Err(self.not_supported(operation, reason)),
            None => Ok(()),
        }
    }

    fn sink(
        &self,
        store: Arc<LazyStore>,
        kind: WriteKind,
        input: Arc<dyn ExecutionPlan>,
    ) -> Arc<dyn ExecutionPlan> {
        let sink = StoreSink::new(store, self.table.clone(), kind, Arc::clone(&self.schema));
        Arc::new(DataSinkExec::new(input, Arc::new(sink), None))
    }
}

#[async_trait]
impl TableProvider for StoreWriteTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        // Only DML targets are swapped for this provider; reading `t` stays Paimon's.
        let provider = paimon_datafusion::PaimonTableProvider::try_new(self.table.clone())?;
        provider.scan(state, projection, filters, None).await
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(self
                .not_supported(
                    &insert_op.to_string().to_uppercase(),
                    Kind::InsertOverwrite.class().rule,
                )
                .into());
        }
        let (store, kind) = match self.change {
            RowChange::Insert => {
                let store = self.store("INSERT").await?;
                let kind = if primary_keys(&self.table).is_empty() {
                    WriteKind::Append
                } else {
                    WriteKind::Upsert
                };
                (store, kind)
            }
            RowChange::Delete => (self.keyed_store("DELETE").await?, WriteKind::Delete),
            RowChange::Update => (self.keyed_store("UPDATE").await?, WriteKind::Upsert),
        };
        Ok(self.sink(store, kind, input))
    }

    /// Reached only if write routing did not plan the DELETE's selection:
    /// `filters` may be a part of its `WHERE` clause, so nothing is deleted.
    async fn delete_from(
        &self,
        _state: &dyn Session,
        _filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self.unplanned_selection("DELETE").into())
    }

    /// Like [`Self::delete_from`].
    async fn update(
        &self,
        _state: &dyn Session,
        _assignments: Vec<(String, Expr)>,
        _filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self.unplanned_selection("UPDATE").into())
    }

    async fn truncate(&self, _state: &dyn Session) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self
            .not_supported("TRUNCATE", Kind::Truncate.class().rule)
            .into())
    }
}
