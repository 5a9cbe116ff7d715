//! The write target of a table that was not lake-stream when the statement
//! was planned. A statement can run long after it was planned (`PREPARE`,
//! then `EXECUTE` after `ALTER TABLE ... ('lakestream.enabled'='true')`), so
//! when it runs the table is read again: still plain, Paimon writes it; now
//! lake-stream, an INSERT goes to the store as if planned now, and any other
//! write is refused. Never straight into Paimon, where the store's newer rows
//! of the same keys would later be tiered over it.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use paimon::catalog::{Catalog, Identifier};
use paimon::table::Table;

use super::StoreWriteTable;
use crate::catalog::LakeStreamCatalog;
use crate::error::Error;
use crate::options;

/// Paimon's own write target, checked against the catalog when it runs.
#[derive(Debug)]
pub(crate) struct PaimonWriteTable {
    /// paimon-datafusion's provider, as planned.
    paimon: Arc<dyn TableProvider>,
    /// The handle the statement was planned with.
    table: Table,
    catalog: Arc<LakeStreamCatalog>,
    identifier: Identifier,
}

impl PaimonWriteTable {
    pub(crate) fn new(
        paimon: Arc<dyn TableProvider>,
        table: Table,
        catalog: Arc<LakeStreamCatalog>,
        identifier: Identifier,
    ) -> Self {
        Self {
            paimon,
            table,
            catalog,
            identifier,
        }
    }

    /// The table as the catalog has it now, if it turned lake-stream since
    /// the statement was planned.
    async fn now_lakestream(&self) -> DFResult<Option<Table>> {
        let now = self
            .catalog
            .get_table(&self.identifier)
            .await
            .map_err(Error::from)?;
        Ok(options::is_enabled(now.schema().options()).then_some(now))
    }

    /// Whether `now` has the columns the statement was planned with.
    fn same_columns(&self, now: &Table) -> bool {
        let planned = self.table.schema().fields();
        let current = now.schema().fields();
        planned.len() == current.len()
            && planned
                .iter()
                .zip(current)
                .all(|(a, b)| crate::exec::sink::same_field(a, b))
    }

    fn turned_on(&self, operation: &str) -> Error {
        Error::WriteNotSupported {
            operation: operation.to_string(),
            table: self.identifier.full_name(),
            reason: "it became a lake-stream table after the statement was planned (a \
                     statement PREPAREd before ALTER TABLE ... SET TBLPROPERTIES \
                     ('lakestream.enabled'='true'), or planned while that ALTER ran), and the \
                     statement would write Paimon directly, under the store's newer rows. \
                     Nothing was written: PREPARE or run it again, and it is routed to the store"
                .to_string(),
        }
    }

    /// Refuses `operation` if the table turned lake-stream since planning.
    async fn check(&self, operation: &str) -> DFResult<()> {
        match self.now_lakestream().await? {
            Some(_) => Err(self.turned_on(operation).into()),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl TableProvider for PaimonWriteTable {
    fn schema(&self) -> SchemaRef {
        self.paimon.schema()
    }

    fn table_type(&self) -> TableType {
        self.paimon.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.paimon.scan(state, projection, filters, limit).await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        self.paimon.supports_filters_pushdown(filters)
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        match self.now_lakestream().await? {
            None => self.paimon.insert_into(state, input, insert_op).await,
            // An INSERT of the same columns is what it would be if planned
            // now: a write to the store, checked there as any other.
            Some(now) if insert_op == InsertOp::Append && self.same_columns(&now) => {
                let target =
                    StoreWriteTable::new(self.catalog.binding().clone(), now, self.schema());
                target.insert_into(state, input, insert_op).await
            }
            Some(_) => Err(self.turned_on(&insert_op.to_string().to_uppercase()).into()),
        }
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check("DELETE").await?;
        self.paimon.delete_from(state, filters).await
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check("UPDATE").await?;
        self.paimon.update(state, assignments, filters).await
    }

    async fn truncate(&self, state: &dyn Session) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check("TRUNCATE").await?;
        self.paimon.truncate(state).await
    }
}
