//! The store's procedures.
//!
//! `lakestream_tier('db.t')`: tiers a lake-stream table's store rows into
//! Paimon now. A table function, so it works in any DataFusion session that
//! has the lake-stream catalogs; `CALL sys.lakestream_tier('db.t')` in
//! `LakeStreamContext` runs the same function.
//!
//! `lakestream_set_aside('db.t', position)`: moves a damaged segment of the
//! store's log aside (its rows are lost), so reads and tiering go on; it
//! answers what the segment held. `CALL sys.lakestream_set_aside(...)` too.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::Expr;
use paimon::catalog::{Catalog as _, Identifier};

use super::plan::{ProcedureTable, Run};
use super::target::resolve;
use crate::catalog::{LakeStreamCatalog, WhenOff};
use crate::error::Error;
use crate::table::LakeStreamSession;

/// The name the tiering procedure is called and registered under.
pub(super) const TIER: &str = LakeStreamCatalog::TIER_PROCEDURE;
/// The name of the set-aside procedure.
pub(super) const SET_ASIDE: &str = "lakestream_set_aside";

/// The `lakestream_tier` table function.
#[derive(Debug)]
pub(super) struct TierFunction {
    state: Arc<LakeStreamSession>,
}

impl TierFunction {
    pub(super) fn new(state: Arc<LakeStreamSession>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for TierFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{TIER} takes one argument, the table's name as a string: \
                 {TIER}('db.t')"
            ))
        };
        let [Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _)] =
            args.exprs()
        else {
            return Err(usage());
        };
        let target = resolve(&self.state, &args, TIER, name)?;
        Ok(Arc::new(ProcedureTable::new(target, Tier, report_schema())))
    }
}

/// The `lakestream_set_aside` table function.
#[derive(Debug)]
pub(super) struct SetAsideFunction {
    state: Arc<LakeStreamSession>,
}

impl SetAsideFunction {
    pub(super) fn new(state: Arc<LakeStreamSession>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for SetAsideFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{SET_ASIDE} takes the table's name as a string and the damaged \
                 segment's position as a number: {SET_ASIDE}('db.t', 5)"
            ))
        };
        let [Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _), Expr::Literal(position, _)] =
            args.exprs()
        else {
            return Err(usage());
        };
        let position = match position {
            ScalarValue::Int64(Some(p)) => u64::try_from(*p).ok(),
            ScalarValue::Int32(Some(p)) => u64::try_from(*p).ok(),
            ScalarValue::UInt64(Some(p)) => Some(*p),
            _ => None,
        }
        .ok_or_else(usage)?;
        let target = resolve(&self.state, &args, SET_ASIDE, name)?;
        Ok(Arc::new(ProcedureTable::new(
            target,
            SetAside(position),
            Arc::new(Schema::new(vec![Field::new(
                "result",
                DataType::Utf8,
                false,
            )])),
        )))
    }
}

/// `lakestream_tier`'s run.
#[derive(Debug)]
struct Tier;

#[async_trait]
impl Run for Tier {
    fn procedure(&self) -> &'static str {
        TIER
    }

    async fn columns(
        &self,
        catalog: &LakeStreamCatalog,
        identifier: &Identifier,
        name: ArrayRef,
    ) -> DFResult<Vec<ArrayRef>> {
        let report = catalog.tier(identifier, WhenOff::Refuse).await?;
        Ok(vec![
            name,
            Arc::new(UInt64Array::from(vec![report.rows])),
            Arc::new(UInt64Array::from(vec![report.commits])),
            Arc::new(UInt64Array::from(vec![report.position])),
        ])
    }
}

/// `lakestream_set_aside`'s run, of the segment at this position.
#[derive(Debug)]
struct SetAside(u64);

#[async_trait]
impl Run for SetAside {
    fn procedure(&self) -> &'static str {
        SET_ASIDE
    }

    async fn columns(
        &self,
        catalog: &LakeStreamCatalog,
        identifier: &Identifier,
        _name: ArrayRef,
    ) -> DFResult<Vec<ArrayRef>> {
        let table = catalog.get_table(identifier).await.map_err(Error::from)?;
        let lazy = catalog
            .binding()
            .require("setting a segment aside", identifier)?;
        let store = lazy.get().await?;
        lazy.check_binding("setting a segment aside of", &table)?;
        let result = catalog
            .bounded_procedure(SET_ASIDE, identifier, store.set_aside(&table, self.0))
            .await?;
        Ok(vec![Arc::new(StringArray::from(vec![result]))])
    }
}

fn report_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table", DataType::Utf8, false),
        Field::new("rows_tiered", DataType::UInt64, false),
        Field::new("commits", DataType::UInt64, false),
        Field::new("position", DataType::UInt64, false),
    ]))
}
