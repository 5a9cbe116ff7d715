//! The write target of a lake-stream table: every DML statement DataFusion
//! plans for it (INSERT, DELETE, UPDATE, TRUNCATE) lands here instead of in
//! paimon-datafusion's Paimon writer, and goes to the store or is refused.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{cast, col, Expr};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use paimon::table::Table;

use crate::error::{Error, Result};
use crate::exec::sink::StoreSink;
use crate::merge::MergeSpec;
use crate::store::{primary_keys, LazyStore, ScanMode, StoreBinding, WriteKind};
use crate::table::RealtimeTable;

/// Stands in for a lake-stream table's Paimon provider as the target of DML.
#[derive(Debug)]
pub(crate) struct StoreWriteTable {
    binding: StoreBinding,
    table: Table,
    schema: SchemaRef,
}

impl StoreWriteTable {
    /// `schema` is the schema of the provider it replaces, so planned input fits.
    pub(crate) fn new(binding: StoreBinding, table: Table, schema: SchemaRef) -> Self {
        Self {
            binding,
            table,
            schema,
        }
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
            return Err(self.not_supported(
                operation,
                "the table has no primary key, so its store keeps an append-only log. Give the \
                 table a primary key, or turn the mode off to change Paimon directly",
            ));
        }
        let store = self.store(operation).await?;
        if !store.get().await?.supports_deletes() {
            return Err(self.not_supported(
                operation,
                format!("store '{}' does not take deletes", store.identifier()),
            ));
        }
        Ok(store)
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

    /// The table's current rows (`t$rt`, bounded) that match `filters`.
    async fn matching_rows(
        &self,
        state: &dyn Session,
        filters: &[Expr],
    ) -> DFResult<(Arc<dyn ExecutionPlan>, DFSchema)> {
        let realtime = RealtimeTable::try_new(self.binding.clone(), self.table.clone())?;
        let scan = realtime
            .plan_read(state, None, filters, None, ScanMode::Batch)
            .await?;
        let df_schema = DFSchema::try_from(Arc::clone(&self.schema))?;
        let plan = match conjunction(filters.iter().map(unqualified)) {
            Some(predicate) => {
                let predicate = state.create_physical_expr(predicate, &df_schema)?;
                Arc::new(FilterExec::try_new(predicate, scan)?) as Arc<dyn ExecutionPlan>
            }
            None => scan,
        };
        Ok((plan, df_schema))
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

/// DML filters name the target table; the scan here is unqualified.
fn unqualified(expr: &Expr) -> Expr {
    expr.clone()
        .transform(|e| match e {
            Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
                Column::new_unqualified(c.name),
            ))),
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
        .unwrap_or_else(|_| expr.clone())
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
                    "the store keeps the table's newest changes and cannot replace its history. \
                     Delete rows with DELETE (primary-key tables), or turn the mode off first",
                )
                .into());
        }
        let store = self.store("INSERT").await?;
        let kind = if primary_keys(&self.table).is_empty() {
            WriteKind::Append
        } else {
            WriteKind::Upsert
        };
        Ok(self.sink(store, kind, input))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check_merge_settings("DELETE")?;
        let store = self.keyed_store("DELETE").await?;
        let (rows, _) = self.matching_rows(state, &filters).await?;
        Ok(self.sink(store, WriteKind::Delete, rows))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let keys = primary_keys(&self.table);
        if let Some((column, _)) = assignments.iter().find(|(c, _)| keys.contains(c)) {
            return Err(self
                .not_supported(
                    "UPDATE",
                    format!(
                        "primary-key column '{column}' cannot be set: the store keys rows by it. \
                         DELETE the row and INSERT it again"
                    ),
                )
                .into());
        }
        self.check_merge_settings("UPDATE")?;
        let store = self.keyed_store("UPDATE").await?;
        let (rows, df_schema) = self.matching_rows(state, &filters).await?;
        let projections = self
            .schema
            .fields()
            .iter()
            .map(|field| {
                let value = assignments
                    .iter()
                    .find(|(c, _)| c == field.name())
                    .map(|(_, e)| cast(unqualified(e), field.data_type().clone()))
                    .unwrap_or_else(|| col(Column::new_unqualified(field.name())));
                Ok((
                    state.create_physical_expr(value, &df_schema)?,
                    field.name().clone(),
                ))
            })
            .collect::<DFResult<Vec<_>>>()?;
        let updated = Arc::new(ProjectionExec::try_new(projections, rows)?);
        Ok(self.sink(store, WriteKind::Upsert, updated))
    }

    async fn truncate(&self, _state: &dyn Session) -> DFResult<Arc<dyn ExecutionPlan>> {
        Err(self
            .not_supported(
                "TRUNCATE",
                "it would have to empty Paimon and the store at once. Use DELETE FROM (primary-key \
                 tables), or turn the mode off first",
            )
            .into())
    }
}
