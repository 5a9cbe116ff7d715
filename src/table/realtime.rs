//! The table provider behind `t$rt`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DFResult;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::ExecutionPlan;
use paimon::table::Table;
use paimon_datafusion::PaimonTableProvider;

use super::config::LakeStreamConfig;
use crate::error::Error;
use crate::exec::merge::Merger;
use crate::exec::realtime::{ReadLayout, RealtimeScanExec, DEFAULT_MEMORY_BUDGET};
use crate::merge::MergeSpec;
use crate::store::{primary_keys, ScanMode, StoreBinding};

/// `t$rt`: the Paimon snapshot the store has tiered plus the store's newer rows.
#[derive(Debug)]
pub(crate) struct RealtimeTable {
    binding: StoreBinding,
    table: Table,
    schema: SchemaRef,
    /// The read's mode when it is not the session's: reads inside a write
    /// statement are bounded, whatever `lakestream.scan_mode` says.
    mode: Option<ScanMode>,
}

impl RealtimeTable {
    pub(crate) fn try_new(binding: StoreBinding, table: Table) -> DFResult<Self> {
        // The same schema `t` has, so `t` and `t$rt` can be compared and joined.
        let schema = PaimonTableProvider::try_new(table.clone())?.schema();
        Ok(Self {
            binding,
            table,
            schema,
            mode: None,
        })
    }

    /// The same read, bounded whatever the session's scan mode: a write
    /// statement reads the rows there are when it runs, and ends.
    pub(crate) fn bounded(&self) -> Self {
        Self {
            binding: self.binding.clone(),
            table: self.table.clone(),
            schema: Arc::clone(&self.schema),
            mode: Some(ScanMode::Batch),
        }
    }

    /// Whether this read is bounded whatever the session's scan mode.
    pub(crate) fn is_bounded(&self) -> bool {
        self.mode == Some(ScanMode::Batch)
    }

    /// Plans the read, asking the store to fix its end now.
    pub(crate) async fn plan_read(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
        mode: ScanMode,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let identifier = self.table.identifier().clone();
        let store = self.binding.require("reading", &identifier)?;
        store.get().await?;
        store.check_binding("reading", &self.table)?;
        let table = self.table.clone();
        let read = store
            .call("plan a read", |s| async move { s.plan_read(&table).await })
            .await?;

        let pinned = match read.snapshot_id {
            // Pinned, not time-travelled: the read keeps the table's
            // current schema, so rows from older schemas line up.
            Some(snapshot_id) => {
                let snapshot = self
                    .table
                    .snapshot_manager()
                    .get_snapshot(snapshot_id)
                    .await
                    .map_err(Error::from)?;
                Some(PaimonTableProvider::try_new(
                    self.table.copy_with_pinned_snapshot(&snapshot),
                )?)
            }
            None => None,
        };
        if mode == ScanMode::Batch && read.log.bounded_is_empty() {
            // Nothing newer than the snapshot: `t$rt` is the snapshot's read.
            return match pinned {
                Some(provider) => provider.scan(state, projection, filters, limit).await,
                None => {
                    let schema = match projection {
                        Some(p) => Arc::new(self.schema.project(p)?),
                        None => Arc::clone(&self.schema),
                    };
                    Ok(Arc::new(EmptyExec::new(schema)))
                }
            };
        }
        let layout = self.layout(projection)?;
        let (paimon, lookup) = match pinned {
            Some(provider) => {
                // Filters on either column kind are safe on the Paimon half:
                // it drops the keys the store touched, and their merged rows
                // come from the store's partition.
                let paimon = provider
                    .scan(state, Some(&layout.columns), filters, None)
                    .await?;
                // Where an older version takes part in the merge, the store's
                // partition reads Paimon's rows of the keys it touched. Only
                // key filters apply there: a value filter could drop the
                // older version of a row whose merged value passes it.
                let lookup = if layout.merger.newest_wins() {
                    None
                } else {
                    let keys = primary_keys(&self.table);
                    let key_filters: Vec<Expr> = filters
                        .iter()
                        .filter(|f| f.column_refs().iter().all(|c| keys.contains(&c.name)))
                        .cloned()
                        .collect();
                    Some(
                        provider
                            .scan(state, Some(&layout.columns), &key_filters, None)
                            .await?,
                    )
                };
                (Some(paimon), lookup)
            }
            None => (None, None),
        };
        let target_partitions = state.config_options().execution.target_partitions;
        let memory_budget = state
            .config_options()
            .extensions
            .get::<LakeStreamConfig>()
            .map_or(
                DEFAULT_MEMORY_BUDGET,
                LakeStreamConfig::union_read_memory_budget,
            );
        Ok(Arc::new(RealtimeScanExec::new(
            paimon,
            lookup,
            read.log,
            mode,
            layout,
            target_partitions,
            memory_budget,
        )))
    }

    /// How versions of a key merge, from the table's options. A table whose
    /// merge settings the union read does not reproduce cannot be read.
    fn merge_spec(&self) -> DFResult<MergeSpec> {
        let schema = self.table.schema();
        MergeSpec::of(schema.options(), schema.fields(), schema.primary_keys()).map_err(
            |unsupported| {
                Error::MergeNotSupported {
                    action: "read".to_string(),
                    table: format!("{}$rt", self.table.identifier().full_name()),
                    option: unsupported.option,
                    reason: format!(
                        "{}. Turn the mode off, or change the option",
                        unsupported.reason
                    ),
                }
                .into()
            },
        )
    }

    /// Which columns each half reads: the projection, plus the primary key
    /// and the sequence fields for the merge.
    fn layout(&self, projection: Option<&Vec<usize>>) -> DFResult<ReadLayout> {
        let spec = self.merge_spec()?;
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let projection = projection.cloned().unwrap_or_else(|| all.clone());
        let key_indices = primary_keys(&self.table)
            .iter()
            .chain(spec.sequence_fields.iter())
            .map(|key| self.schema.index_of(key))
            .collect::<Result<Vec<_>, _>>()?;
        let mut columns: Vec<usize> = projection
            .iter()
            .chain(key_indices.iter())
            .copied()
            .collect();
        columns.sort_unstable();
        columns.dedup();
        let position = |index: &usize| columns.iter().position(|c| c == index);
        let keys = key_indices
            .iter()
            .take(primary_keys(&self.table).len())
            .filter_map(position)
            .collect();
        let output = projection.iter().filter_map(position).collect();
        let schema = Arc::new(self.schema.project(&columns)?);
        let output_schema = Arc::new(Schema::new(
            projection
                .iter()
                .map(|&i| self.schema.field(i).clone())
                .collect::<Vec<_>>(),
        ));
        let merger = Arc::new(Merger::new(&spec, Arc::clone(&schema))?);
        Ok(ReadLayout {
            columns,
            schema,
            keys,
            output,
            output_schema,
            merger,
        })
    }
}

#[async_trait]
impl TableProvider for RealtimeTable {
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
        limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let mode = self.mode.unwrap_or_else(|| {
            state
                .config_options()
                .extensions
                .get::<LakeStreamConfig>()
                .map(|config| config.scan_mode)
                .unwrap_or_default()
        });
        self.plan_read(state, projection, filters, limit, mode)
            .await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        // Applied to the Paimon half only; DataFusion filters the merged rows again.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }
}
