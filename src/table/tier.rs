//! `lakestream_tier('db.t')`: tiers a lake-stream table's store rows into
//! Paimon now. A table function, so it works in any DataFusion session that
//! has the lake-stream catalogs; `CALL sys.lakestream_tier('db.t')` in
//! `LakeStreamContext` runs the same function.
//!
//! `lakestream_set_aside('db.t', position)`: moves a damaged segment of the
//! store's log aside (its rows are lost), so reads and tiering go on; it
//! answers what the segment held. `CALL sys.lakestream_set_aside(...)` too.
//!
//! `compact_manifest('db.t')` and `compact('db.t')`: Paimon's maintenance
//! procedures ([`crate::maintenance`]), on any Paimon table of a lake-stream
//! catalog. `CALL sys.compact_manifest('db.t')` too, as in Paimon
//! (`table => 'db.t'` is taken as well).
//!
//! `expire_snapshots('db.t'[, retain_max, retain_min, older_than,
//! max_deletes])`: expires the table's oldest snapshots
//! ([`crate::maintenance::expire`]); an argument left out or NULL is the
//! table's option. `CALL sys.expire_snapshots('db.t', retain_min => 2)`
//! takes Paimon's named arguments.
//!
//! `remove_orphan_files('db.t'[, older_than, dry_run])`: deletes the files
//! of the table's directory that nothing references, once older than
//! `older_than` (one day ago when left out or NULL;
//! [`crate::maintenance::orphans`]). `CALL sys.remove_orphan_files(table =>
//! 'db.t', older_than => '2025-01-01 12:00:00')` too.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use paimon::catalog::Catalog as _;

use crate::catalog::WhenOff;
use crate::error::Error;
use crate::planner::PlannerState;

/// The name the table function is registered under.
pub(crate) const TIER_FUNCTION: &str = "lakestream_tier";
/// The name of the set-aside function.
pub(crate) const SET_ASIDE_FUNCTION: &str = "lakestream_set_aside";
/// The name of the manifest compaction function (Paimon's procedure name).
pub(crate) const COMPACT_MANIFEST_FUNCTION: &str = "compact_manifest";
/// The name of the data-file compaction function (Paimon's procedure name).
pub(crate) const COMPACT_FUNCTION: &str = "compact";

/// The name of the snapshot expiry function (Paimon's procedure name).
pub(crate) const EXPIRE_SNAPSHOTS_FUNCTION: &str = "expire_snapshots";
/// Its arguments after the table, in order (Paimon's names).
pub(crate) const EXPIRE_SNAPSHOTS_ARGUMENTS: &[&str] =
    &["retain_max", "retain_min", "older_than", "max_deletes"];

/// The `expire_snapshots` table function.
#[derive(Debug)]
pub(crate) struct ExpireSnapshotsFunction {
    state: Arc<PlannerState>,
}

impl ExpireSnapshotsFunction {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for ExpireSnapshotsFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = |what: String| {
            DataFusionError::Plan(format!(
                "{EXPIRE_SNAPSHOTS_FUNCTION}: {what}; it takes the table's name as a string, \
                 then optionally retain_max, retain_min (numbers), older_than (a timestamp \
                 such as '2025-01-01 12:00:00', UTC) and max_deletes (a number), NULL for the \
                 table's option: {EXPIRE_SNAPSHOTS_FUNCTION}('db.t', NULL, 2)"
            ))
        };
        let exprs = args.exprs();
        let Some((
            Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _),
            rest,
        )) = exprs.split_first()
        else {
            return Err(usage("the first argument is not a table name".to_string()));
        };
        if rest.len() > EXPIRE_SNAPSHOTS_ARGUMENTS.len() {
            return Err(usage(format!("{} arguments are too many", exprs.len())));
        }
        let mut expiry = crate::maintenance::expire::Expiry::default();
        for (at, expr) in rest.iter().enumerate() {
            let argument = EXPIRE_SNAPSHOTS_ARGUMENTS[at];
            let Expr::Literal(value, _) = expr else {
                return Err(usage(format!("{argument} is not a literal")));
            };
            if value.is_null() {
                continue;
            }
            let count = || -> DFResult<usize> {
                let n = value.cast_to(&DataType::Int64).ok().and_then(|v| match v {
                    ScalarValue::Int64(Some(n)) => usize::try_from(n).ok(),
                    _ => None,
                });
                n.ok_or_else(|| usage(format!("{argument} = {value} is not a whole number")))
            };
            match argument {
                "retain_max" => expiry.retain_max = Some(count()?),
                "retain_min" => expiry.retain_min = Some(count()?),
                "max_deletes" => expiry.max_deletes = Some(count()?),
                _ => {
                    let ms = timestamp_ms(value)
                        .ok_or_else(|| usage(format!("older_than = {value} is not a timestamp")))?;
                    expiry.older_than_ms = Some(ms);
                }
            }
        }
        let target = resolve(&self.state, &args, EXPIRE_SNAPSHOTS_FUNCTION, name)?;
        Ok(Arc::new(ExpireSnapshotsTable {
            target,
            expiry,
            schema: Arc::new(Schema::new(vec![
                Field::new("table", DataType::Utf8, false),
                Field::new("expired_snapshots", DataType::UInt64, false),
                Field::new("earliest_snapshot", DataType::Int64, true),
                Field::new("deleted_data_files", DataType::UInt64, false),
                Field::new("deleted_manifests", DataType::UInt64, false),
            ])),
        }))
    }
}

/// Snapshot expiry as a table: planning a scan of it runs it.
#[derive(Debug)]
struct ExpireSnapshotsTable {
    target: Target,
    expiry: crate::maintenance::expire::Expiry,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for ExpireSnapshotsTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let identifier = self.target.identifier().await;
        let table = self
            .target
            .catalog
            .get_table(&identifier)
            .await
            .map_err(Error::from)?;
        let done =
            crate::maintenance::expire::expire_snapshots(&table, self.expiry.clone()).await?;
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let earliest = match &done {
            Some(done) => Some(done.earliest),
            None => table
                .snapshot_manager()
                .earliest_snapshot_id()
                .await
                .map_err(Error::from)?,
        };
        one_row(
            &self.schema,
            vec![
                Arc::new(StringArray::from(vec![identifier.full_name()])),
                Arc::new(UInt64Array::from(vec![done
                    .as_ref()
                    .map_or(0, |d| count(d.snapshots.len()))])),
                Arc::new(Int64Array::from(vec![earliest])),
                Arc::new(UInt64Array::from(vec![done
                    .as_ref()
                    .map_or(0, |d| count(d.data_files))])),
                Arc::new(UInt64Array::from(vec![done
                    .as_ref()
                    .map_or(0, |d| count(d.manifests))])),
            ],
            projection,
        )
    }
}

/// A timestamp argument (`'2025-01-01 12:00:00'`, read as UTC) in
/// milliseconds since the epoch.
fn timestamp_ms(value: &ScalarValue) -> Option<u64> {
    match value
        .cast_to(&DataType::Timestamp(TimeUnit::Millisecond, None))
        .ok()?
    {
        ScalarValue::TimestampMillisecond(Some(ms), _) => u64::try_from(ms).ok(),
        _ => None,
    }
}

/// The name of the orphan file removal function (Paimon's procedure name).
pub(crate) const REMOVE_ORPHAN_FILES_FUNCTION: &str = "remove_orphan_files";
/// Its arguments after the table, in order (Paimon's names).
pub(crate) const REMOVE_ORPHAN_FILES_ARGUMENTS: &[&str] = &["older_than", "dry_run"];

/// The `remove_orphan_files` table function.
#[derive(Debug)]
pub(crate) struct RemoveOrphanFilesFunction {
    state: Arc<PlannerState>,
}

impl RemoveOrphanFilesFunction {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for RemoveOrphanFilesFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let function = REMOVE_ORPHAN_FILES_FUNCTION;
        let usage = |what: String| {
            DataFusionError::Plan(format!(
                "{function}: {what}; it takes the table's name as a string, then optionally \
                 older_than (a timestamp such as '2025-01-01 12:00:00', UTC; NULL for one day \
                 ago) and dry_run (true or false): {function}('db.t', '2025-01-01 12:00:00')"
            ))
        };
        let exprs = args.exprs();
        let Some((
            Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _),
            rest,
        )) = exprs.split_first()
        else {
            return Err(usage("the first argument is not a table name".to_string()));
        };
        if rest.len() > REMOVE_ORPHAN_FILES_ARGUMENTS.len() {
            return Err(usage(format!("{} arguments are too many", exprs.len())));
        }
        let mut older_than_ms = None;
        let mut dry_run = false;
        for (at, expr) in rest.iter().enumerate() {
            let argument = REMOVE_ORPHAN_FILES_ARGUMENTS[at];
            let Expr::Literal(value, _) = expr else {
                return Err(usage(format!("{argument} is not a literal")));
            };
            if value.is_null() {
                continue;
            }
            if argument == "older_than" {
                older_than_ms =
                    Some(timestamp_ms(value).ok_or_else(|| {
                        usage(format!("older_than = {value} is not a timestamp"))
                    })?);
            } else {
                dry_run = match value {
                    ScalarValue::Boolean(Some(b)) => *b,
                    ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text))
                        if text.eq_ignore_ascii_case("true") =>
                    {
                        true
                    }
                    ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text))
                        if text.eq_ignore_ascii_case("false") =>
                    {
                        false
                    }
                    _ => return Err(usage(format!("dry_run = {value} is not true or false"))),
                };
            }
        }
        let target = resolve(&self.state, &args, function, name)?;
        Ok(Arc::new(RemoveOrphanFilesTable {
            target,
            older_than_ms,
            dry_run,
            schema: Arc::new(Schema::new(vec![
                Field::new("table", DataType::Utf8, false),
                Field::new("deleted_files", DataType::UInt64, false),
                Field::new("deleted_bytes", DataType::UInt64, false),
            ])),
        }))
    }
}

/// Orphan file removal as a table: planning a scan of it runs it.
#[derive(Debug)]
struct RemoveOrphanFilesTable {
    target: Target,
    older_than_ms: Option<u64>,
    dry_run: bool,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for RemoveOrphanFilesTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        use crate::maintenance::orphans::{find_orphan_files, remove_orphan_files};
        let identifier = self.target.identifier().await;
        let table = self
            .target
            .catalog
            .get_table(&identifier)
            .await
            .map_err(Error::from)?;
        let report = if self.dry_run {
            find_orphan_files(&table, self.older_than_ms).await?
        } else {
            remove_orphan_files(&table, self.older_than_ms).await?
        };
        one_row(
            &self.schema,
            vec![
                Arc::new(StringArray::from(vec![identifier.full_name()])),
                Arc::new(UInt64Array::from(vec![
                    u64::try_from(report.deleted.len()).unwrap_or(u64::MAX)
                ])),
                Arc::new(UInt64Array::from(vec![report.deleted_bytes])),
            ],
            projection,
        )
    }
}

/// The `lakestream_tier` table function.
#[derive(Debug)]
pub(crate) struct TierFunction {
    state: Arc<PlannerState>,
}

impl TierFunction {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for TierFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{TIER_FUNCTION} takes one argument, the table's name as a string: \
                 {TIER_FUNCTION}('db.t')"
            ))
        };
        let [Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _)] =
            args.exprs()
        else {
            return Err(usage());
        };
        let target = resolve(&self.state, &args, TIER_FUNCTION, name)?;
        Ok(Arc::new(TierTable {
            target,
            schema: report_schema(),
        }))
    }
}

/// The `lakestream_set_aside` table function.
#[derive(Debug)]
pub(crate) struct SetAsideFunction {
    state: Arc<PlannerState>,
}

impl SetAsideFunction {
    pub(crate) fn new(state: Arc<PlannerState>) -> Self {
        Self { state }
    }
}

impl TableFunctionImpl for SetAsideFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let usage = || {
            DataFusionError::Plan(format!(
                "{SET_ASIDE_FUNCTION} takes the table's name as a string and the damaged \
                 segment's position as a number: {SET_ASIDE_FUNCTION}('db.t', 5)"
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
        let target = resolve(&self.state, &args, SET_ASIDE_FUNCTION, name)?;
        Ok(Arc::new(SetAsideTable {
            target,
            position,
            schema: Arc::new(Schema::new(vec![Field::new(
                "result",
                DataType::Utf8,
                false,
            )])),
        }))
    }
}

/// The maintenance procedures, as table functions: `compact_manifest` and
/// `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Maintenance {
    /// Paimon's `compact_manifest`.
    CompactManifest,
    /// Paimon's `compact`: data files, then manifests.
    Compact,
}

impl Maintenance {
    /// Every maintenance procedure.
    pub(crate) const ALL: [Maintenance; 2] = [Maintenance::CompactManifest, Maintenance::Compact];

    /// The name it is registered and called under.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Maintenance::CompactManifest => COMPACT_MANIFEST_FUNCTION,
            Maintenance::Compact => COMPACT_FUNCTION,
        }
    }

    fn schema(self) -> SchemaRef {
        let mut fields = vec![
            Field::new("table", DataType::Utf8, false),
            Field::new("snapshot_id", DataType::Int64, true),
        ];
        match self {
            Maintenance::CompactManifest => fields.extend([
                Field::new("manifests_before", DataType::UInt64, true),
                Field::new("manifests_after", DataType::UInt64, true),
            ]),
            Maintenance::Compact => fields.extend([
                Field::new("files_before", DataType::UInt64, true),
                Field::new("files_after", DataType::UInt64, true),
                Field::new("rows", DataType::Int64, true),
            ]),
        }
        Arc::new(Schema::new(fields))
    }
}

/// A maintenance procedure's table function.
#[derive(Debug)]
pub(crate) struct MaintenanceFunction {
    state: Arc<PlannerState>,
    procedure: Maintenance,
}

impl MaintenanceFunction {
    pub(crate) fn new(state: Arc<PlannerState>, procedure: Maintenance) -> Self {
        Self { state, procedure }
    }
}

impl TableFunctionImpl for MaintenanceFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let function = self.procedure.name();
        let usage = || {
            DataFusionError::Plan(format!(
                "{function} takes one argument, the table's name as a string: {function}('db.t')"
            ))
        };
        let [Expr::Literal(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)), _)] =
            args.exprs()
        else {
            return Err(usage());
        };
        let target = resolve(&self.state, &args, function, name)?;
        Ok(Arc::new(MaintenanceTable {
            target,
            procedure: self.procedure,
            schema: self.procedure.schema(),
        }))
    }
}

/// A maintenance procedure as a table: planning a scan of it runs it.
#[derive(Debug)]
struct MaintenanceTable {
    target: Target,
    procedure: Maintenance,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for MaintenanceTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        use crate::maintenance::{compact_data_files, compact_manifests, When};
        let identifier = self.target.identifier().await;
        let table = self
            .target
            .catalog
            .get_table(&identifier)
            .await
            .map_err(Error::from)?;
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let name: ArrayRef = Arc::new(StringArray::from(vec![identifier.full_name()]));
        let columns: Vec<ArrayRef> = match self.procedure {
            Maintenance::CompactManifest => {
                let done = compact_manifests(&table, When::Asked).await?;
                vec![
                    name,
                    Arc::new(Int64Array::from(vec![done.as_ref().map(|d| d.snapshot_id)])),
                    Arc::new(UInt64Array::from(vec![done
                        .as_ref()
                        .map(|d| count(d.manifests_before))])),
                    Arc::new(UInt64Array::from(vec![done
                        .as_ref()
                        .map(|d| count(d.manifests_after))])),
                ]
            }
            Maintenance::Compact => {
                let done = compact_data_files(&table, When::Asked).await?;
                // Then the manifests, as Paimon's full compaction leaves them.
                let table = self
                    .target
                    .catalog
                    .get_table(&identifier)
                    .await
                    .map_err(Error::from)?;
                let manifests = compact_manifests(&table, When::Needed).await?;
                let snapshot = manifests
                    .map(|m| m.snapshot_id)
                    .or(done.as_ref().map(|d| d.snapshot_id));
                vec![
                    name,
                    Arc::new(Int64Array::from(vec![snapshot])),
                    Arc::new(UInt64Array::from(vec![done
                        .as_ref()
                        .map(|d| count(d.files_before))])),
                    Arc::new(UInt64Array::from(vec![done
                        .as_ref()
                        .map(|d| count(d.files_after))])),
                    Arc::new(Int64Array::from(vec![done.as_ref().map(|d| d.rows)])),
                ]
            }
        };
        one_row(&self.schema, columns, projection)
    }
}

/// Setting a segment aside as a table: planning a scan of it does it.
#[derive(Debug)]
struct SetAsideTable {
    target: Target,
    position: u64,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for SetAsideTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let identifier = self.target.identifier().await;
        let catalog = &self.target.catalog;
        let table = catalog.get_table(&identifier).await.map_err(Error::from)?;
        let store = catalog
            .binding()
            .require("setting a segment aside", &identifier)?;
        store.get().await?;
        store.check_binding("setting a segment aside of", &table)?;
        let position = self.position;
        let result = store
            .call("set a segment aside", |s| async move {
                s.set_aside(&table, position).await
            })
            .await?;
        one_row(
            &self.schema,
            vec![Arc::new(StringArray::from(vec![result]))],
            projection,
        )
    }
}

/// The lake-stream table a procedure's name argument names.
fn resolve(
    state: &PlannerState,
    args: &TableFunctionArgs,
    function: &str,
    name: &str,
) -> DFResult<Target> {
    let config = args.session().config_options();
    let lookup = |parts: &[String]| -> DFResult<_> {
        let reference = match parts {
            [catalog, schema, table] => {
                TableReference::full(catalog.as_str(), schema.as_str(), table.as_str())
            }
            [schema, table] => TableReference::partial(schema.as_str(), table.as_str()),
            [table] => TableReference::bare(table.as_str()),
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "{function}: '{name}' is not a table name"
                )))
            }
        };
        Ok(state.resolve(&reference, config))
    };
    // The name is parsed as SQL parses names: quoted parts keep their case
    // and dots, unquoted ones are lower-cased.
    let parts = crate::name::parse_table_name(name).map_err(Error::from)?;
    let (catalog, identifier) = lookup(&parts)?.ok_or_else(|| {
        DataFusionError::Plan(format!(
            "{function}: '{name}' is not a table of a lake-stream catalog"
        ))
    })?;
    // SQLContext keeps an unquoted name's case (`CREATE TABLE Ev` makes
    // `Ev`): that spelling is the second choice.
    let kept = crate::name::parse_table_name_keeping_case(name).map_err(Error::from)?;
    let as_written = match lookup(&kept)? {
        Some((other, written)) if kept != parts && Arc::ptr_eq(&other, &catalog) => Some(written),
        _ => None,
    };
    Ok(Target {
        catalog,
        identifier,
        as_written,
    })
}

/// The lake-stream table a procedure names: the name as SQL reads it, or,
/// when no table has that name, as it was written.
#[derive(Debug)]
struct Target {
    catalog: Arc<crate::catalog::LakeStreamCatalog>,
    identifier: paimon::catalog::Identifier,
    as_written: Option<paimon::catalog::Identifier>,
}

impl Target {
    async fn identifier(&self) -> paimon::catalog::Identifier {
        if let Some(written) = &self.as_written {
            let missing = matches!(
                self.catalog.get_table(&self.identifier).await,
                Err(paimon::Error::TableNotExist { .. })
            );
            if missing && self.catalog.get_table(written).await.is_ok() {
                return written.clone();
            }
        }
        self.identifier.clone()
    }
}

/// A procedure's answer: one row, as a plan.
fn one_row(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    projection: Option<&Vec<usize>>,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    let batch = RecordBatch::try_new(Arc::clone(schema), columns)?;
    Ok(MemorySourceConfig::try_new_exec(
        &[vec![batch]],
        Arc::clone(schema),
        projection.cloned(),
    )?)
}

fn report_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table", DataType::Utf8, false),
        Field::new("rows_tiered", DataType::UInt64, false),
        Field::new("commits", DataType::UInt64, false),
        Field::new("position", DataType::UInt64, false),
    ]))
}

/// Tiering as a table: planning a scan of it runs the tiering.
#[derive(Debug)]
struct TierTable {
    target: Target,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for TierTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let identifier = self.target.identifier().await;
        let report = self
            .target
            .catalog
            .tier(&identifier, WhenOff::Refuse)
            .await?;
        one_row(
            &self.schema,
            vec![
                Arc::new(StringArray::from(vec![identifier.full_name()])),
                Arc::new(UInt64Array::from(vec![report.rows])),
                Arc::new(UInt64Array::from(vec![report.commits])),
                Arc::new(UInt64Array::from(vec![report.position])),
            ],
            projection,
        )
    }
}
