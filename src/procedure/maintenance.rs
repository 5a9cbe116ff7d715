//! Paimon's maintenance procedures as table functions, on any Paimon table
//! of a lake-stream catalog ([`crate::maintenance`]); `CALL sys.<name>(...)`
//! runs the same function, with Paimon's named arguments
//! (`table => 'db.t'`, `older_than => ...`).
//!
//! - `compact_manifest('db.t')`: the manifests, into as few as Paimon's
//!   options allow.
//! - `compact('db.t')`: small data files, then the manifests.
//! - `expire_snapshots('db.t'[, retain_max, retain_min, older_than,
//!   max_deletes])`: the oldest snapshots beyond the retention; an argument
//!   left out or NULL is the table's option.
//! - `remove_orphan_files('db.t'[, older_than, dry_run])`: the files of the
//!   table's directory that nothing references, once older than
//!   `older_than` (one day ago when left out or NULL).
//! - `create_tag('db.t', 'tag'[, snapshot_id])`: Paimon's tag, acknowledged
//!   only over a snapshot whose files expiry keeps
//!   ([`crate::maintenance::tags`]).
//!
//! On a lake-stream table of the catalog's store each runs under the
//! store's commit lock ([`crate::catalog::LakeStreamCatalog::maintain`]), as
//! the maintenance after a tiering round does. Like the store's procedures,
//! each is a [`ProcedureTable`], which runs it when its plan is executed.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::error::{DataFusionError, Result as DFResult};
use datafusion::logical_expr::Expr;
use paimon::catalog::Identifier;
use paimon::table::Table;

use super::plan::{ProcedureTable, Run};
use super::target::resolve;
use crate::catalog::LakeStreamCatalog;
use crate::error::Result;
use crate::maintenance::expire::{expire_snapshots, Expiry};
use crate::maintenance::orphans::{find_orphan_files, remove_orphan_files};
use crate::maintenance::tags::create_tag;
use crate::maintenance::{compact, compact_manifests, Compaction, When};
use crate::table::LakeStreamSession;

/// A maintenance procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Maintenance {
    /// Paimon's `compact_manifest`.
    CompactManifest,
    /// Paimon's `compact`: data files, then manifests.
    Compact,
    /// Paimon's `expire_snapshots`.
    ExpireSnapshots,
    /// Paimon's `remove_orphan_files`.
    RemoveOrphanFiles,
    /// Paimon's `create_tag`.
    CreateTag,
}

impl Maintenance {
    /// Every maintenance procedure.
    #[cfg(test)]
    pub(crate) const ALL: [Maintenance; 5] = [
        Maintenance::CompactManifest,
        Maintenance::Compact,
        Maintenance::ExpireSnapshots,
        Maintenance::RemoveOrphanFiles,
        Maintenance::CreateTag,
    ];

    /// The name it is registered and called under (Paimon's).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Maintenance::CompactManifest => "compact_manifest",
            Maintenance::Compact => "compact",
            Maintenance::ExpireSnapshots => "expire_snapshots",
            Maintenance::RemoveOrphanFiles => "remove_orphan_files",
            Maintenance::CreateTag => "create_tag",
        }
    }

    /// Its arguments after the table, in order (Paimon's names): `CALL`'s
    /// named arguments become positional ones in this order.
    pub(crate) fn arguments(self) -> &'static [&'static str] {
        match self {
            Maintenance::CompactManifest | Maintenance::Compact => &[],
            Maintenance::ExpireSnapshots => {
                &["retain_max", "retain_min", "older_than", "max_deletes"]
            }
            Maintenance::RemoveOrphanFiles => &["older_than", "dry_run"],
            Maintenance::CreateTag => &["tag", "snapshot_id"],
        }
    }

    /// What the arguments after the table's name are, for error messages.
    fn usage(self) -> &'static str {
        match self {
            Maintenance::CompactManifest => "compact_manifest('db.t')",
            Maintenance::Compact => "compact('db.t')",
            Maintenance::ExpireSnapshots => {
                "then optionally retain_max, retain_min (numbers), older_than (a timestamp such \
                 as '2025-01-01 12:00:00', UTC) and max_deletes (a number), NULL for the table's \
                 option: expire_snapshots('db.t', NULL, 2)"
            }
            Maintenance::RemoveOrphanFiles => {
                "then optionally older_than (a timestamp such as '2025-01-01 12:00:00', UTC; NULL \
                 for one day ago) and dry_run (true or false): remove_orphan_files('db.t', \
                 '2025-01-01 12:00:00')"
            }
            Maintenance::CreateTag => {
                "then the tag's name (a string) and optionally snapshot_id (a number; NULL for \
                 the latest snapshot): create_tag('db.t', 'tag1', 3)"
            }
        }
    }

    /// The columns of its one-row answer.
    fn schema(self) -> SchemaRef {
        let table = Field::new("table", DataType::Utf8, false);
        let count = |name: &str, nullable: bool| Field::new(name, DataType::UInt64, nullable);
        let fields = match self {
            Maintenance::CompactManifest => vec![
                table,
                Field::new("snapshot_id", DataType::Int64, true),
                count("manifests_before", true),
                count("manifests_after", true),
            ],
            Maintenance::Compact => vec![
                table,
                Field::new("snapshot_id", DataType::Int64, true),
                count("files_before", true),
                count("files_after", true),
                Field::new("rows", DataType::Int64, true),
            ],
            Maintenance::ExpireSnapshots => vec![
                table,
                count("expired_snapshots", false),
                Field::new("earliest_snapshot", DataType::Int64, true),
                count("deleted_data_files", false),
                count("deleted_manifests", false),
            ],
            Maintenance::RemoveOrphanFiles => vec![
                table,
                count("deleted_files", false),
                count("deleted_bytes", false),
            ],
            Maintenance::CreateTag => vec![
                table,
                Field::new("tag", DataType::Utf8, false),
                Field::new("snapshot_id", DataType::Int64, false),
            ],
        };
        Arc::new(Schema::new(fields))
    }
}

/// A procedure with its arguments.
#[derive(Debug, Clone)]
pub(super) enum Job {
    CompactManifest,
    Compact,
    ExpireSnapshots(Expiry),
    RemoveOrphanFiles {
        older_than_ms: Option<u64>,
        dry_run: bool,
    },
    CreateTag {
        tag: String,
        snapshot_id: Option<i64>,
    },
}

impl Job {
    /// The procedure it runs.
    pub(super) fn procedure(&self) -> Maintenance {
        match self {
            Job::CompactManifest => Maintenance::CompactManifest,
            Job::Compact => Maintenance::Compact,
            Job::ExpireSnapshots(_) => Maintenance::ExpireSnapshots,
            Job::RemoveOrphanFiles { .. } => Maintenance::RemoveOrphanFiles,
            Job::CreateTag { .. } => Maintenance::CreateTag,
        }
    }

    /// Runs it on `table`, answering its row's columns after the table's
    /// name.
    pub(super) async fn run(self, table: &Table) -> Result<Vec<ArrayRef>> {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Ok(match self {
            Job::CompactManifest => {
                let done = compact_manifests(table, When::Asked).await?;
                vec![
                    Arc::new(Int64Array::from(vec![done.as_ref().map(|d| d.snapshot_id)])),
                    Arc::new(UInt64Array::from(vec![done
                        .as_ref()
                        .map(|d| count(d.manifests_before))])),
                    Arc::new(UInt64Array::from(vec![done
                        .as_ref()
                        .map(|d| count(d.manifests_after))])),
                ]
            }
            Job::Compact => {
                // Then the manifests, as Paimon's full compaction leaves them.
                let Compaction {
                    data: done,
                    manifests,
                } = compact(table, When::Asked, true, true).await?;
                let snapshot = manifests
                    .map(|m| m.snapshot_id)
                    .or(done.as_ref().map(|d| d.snapshot_id));
                vec![
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
            Job::ExpireSnapshots(expiry) => {
                let done = expire_snapshots(table, expiry, When::Asked).await?;
                let earliest = match &done {
                    Some(done) => Some(done.earliest),
                    None => table.snapshot_manager().earliest_snapshot_id().await?,
                };
                vec![
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
                ]
            }
            Job::RemoveOrphanFiles {
                older_than_ms,
                dry_run,
            } => {
                let report = if dry_run {
                    find_orphan_files(table, older_than_ms).await?
                } else {
                    remove_orphan_files(table, older_than_ms).await?
                };
                vec![
                    Arc::new(UInt64Array::from(vec![count(report.deleted.len())])),
                    Arc::new(UInt64Array::from(vec![report.deleted_bytes])),
                ]
            }
            Job::CreateTag { tag, snapshot_id } => {
                let created = create_tag(table, &tag, snapshot_id).await?;
                vec![
                    Arc::new(StringArray::from(vec![tag])),
                    Arc::new(Int64Array::from(vec![created.snapshot_id])),
                ]
            }
        })
    }
}

/// A maintenance procedure's table function.
#[derive(Debug)]
pub(super) struct MaintenanceFunction {
    state: Arc<LakeStreamSession>,
    procedure: Maintenance,
}

impl MaintenanceFunction {
    pub(super) fn new(state: Arc<LakeStreamSession>, procedure: Maintenance) -> Self {
        Self { state, procedure }
    }
}

impl TableFunctionImpl for MaintenanceFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DFResult<Arc<dyn TableProvider>> {
        let procedure = self.procedure;
        let function = procedure.name();
        let usage = |what: String| {
            DataFusionError::Plan(format!(
                "{function}: {what}; it takes the table's name as a string, {}",
                procedure.usage()
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
        let names = procedure.arguments();
        if rest.len() > names.len() {
            return Err(usage(format!("{} arguments are too many", exprs.len())));
        }
        let mut values: Vec<Option<&ScalarValue>> = vec![None; names.len()];
        for (at, expr) in rest.iter().enumerate() {
            let Expr::Literal(value, _) = expr else {
                return Err(usage(format!("{} is not a literal", names[at])));
            };
            values[at] = (!value.is_null()).then_some(value);
        }
        let argument = |name: &str| {
            names
                .iter()
                .position(|n| *n == name)
                .and_then(|at| values[at])
        };
        let count = |name: &str| -> DFResult<Option<usize>> {
            argument(name)
                .map(|value| {
                    let n = value.cast_to(&DataType::Int64).ok().and_then(|v| match v {
                        ScalarValue::Int64(Some(n)) => usize::try_from(n).ok(),
                        _ => None,
                    });
                    n.ok_or_else(|| {
                        usage(format!(
                            "{name} = {value} is not a whole number of 0 or more"
                        ))
                    })
                })
                .transpose()
        };
        let older_than = || -> DFResult<Option<u64>> {
            argument("older_than")
                .map(|value| {
                    timestamp_ms(value)
                        .ok_or_else(|| usage(format!("older_than = {value} is not a timestamp")))
                })
                .transpose()
        };
        let job = match procedure {
            Maintenance::CompactManifest => Job::CompactManifest,
            Maintenance::Compact => Job::Compact,
            Maintenance::ExpireSnapshots => Job::ExpireSnapshots(Expiry {
                retain_max: count("retain_max")?,
                retain_min: count("retain_min")?,
                older_than_ms: older_than()?,
                max_deletes: count("max_deletes")?,
            }),
            Maintenance::RemoveOrphanFiles => Job::RemoveOrphanFiles {
                older_than_ms: older_than()?,
                dry_run: match argument("dry_run") {
                    None => false,
                    Some(ScalarValue::Boolean(Some(b))) => *b,
                    Some(ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text)))
                        if text.eq_ignore_ascii_case("true") =>
                    {
                        true
                    }
                    Some(ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text)))
                        if text.eq_ignore_ascii_case("false") =>
                    {
                        false
                    }
                    Some(value) => {
                        return Err(usage(format!("dry_run = {value} is not true or false")))
                    }
                },
            },
            Maintenance::CreateTag => Job::CreateTag {
                tag: match argument("tag") {
                    Some(ScalarValue::Utf8(Some(tag)) | ScalarValue::Utf8View(Some(tag))) => {
                        tag.clone()
                    }
                    Some(value) => return Err(usage(format!("tag = {value} is not a string"))),
                    None => return Err(usage("the tag's name is missing".to_string())),
                },
                snapshot_id: count("snapshot_id")?
                    .map(|n| {
                        i64::try_from(n).map_err(|_| usage(format!("snapshot_id = {n} is too big")))
                    })
                    .transpose()?,
            },
        };
        let target = resolve(&self.state, &args, function, name)?;
        Ok(Arc::new(ProcedureTable::new(
            target,
            job,
            procedure.schema(),
        )))
    }
}

#[async_trait]
impl Run for Job {
    fn procedure(&self) -> &'static str {
        Job::procedure(self).name()
    }

    async fn columns(
        &self,
        catalog: &LakeStreamCatalog,
        identifier: &Identifier,
        name: ArrayRef,
    ) -> DFResult<Vec<ArrayRef>> {
        let job = self.clone();
        let columns = catalog
            .maintain(Job::procedure(self).name(), identifier, |table| {
                Box::pin(job.run(table))
            })
            .await?;
        Ok(std::iter::once(name).chain(columns).collect())
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
