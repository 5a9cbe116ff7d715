//! Which kind of the statement classification ([`crate::classification`])
//! a parsed statement is, and that classification as the Markdown table
//! docs/concepts/lake-stream.md holds ([`markdown`]).

use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, Function, ObjectType, SqliteOnConflict, Statement,
};

use crate::classification::Kind;
use crate::procedure::Procedure;

impl Kind {
    /// The kind of a parsed statement.
    pub(crate) fn of(statement: &Statement) -> Kind {
        match statement {
            Statement::Query(_)
            | Statement::ExplainTable { .. }
            | Statement::ShowFunctions { .. }
            | Statement::ShowVariable { .. }
            | Statement::ShowStatus { .. }
            | Statement::ShowVariables { .. }
            | Statement::ShowCreate { .. }
            | Statement::ShowColumns { .. }
            | Statement::ShowCatalogs { .. }
            | Statement::ShowDatabases { .. }
            | Statement::ShowSchemas { .. }
            | Statement::ShowObjects(_)
            | Statement::ShowTables { .. }
            | Statement::ShowViews { .. } => Kind::Read,
            Statement::Copy { to: true, .. } => Kind::Read,
            Statement::Explain { .. } | Statement::Prepare { .. } => Kind::Wrapper,
            Statement::Insert(insert) => {
                let partitioned = insert.partitioned.as_ref().is_some_and(|p| !p.is_empty());
                if insert.overwrite && partitioned {
                    Kind::InsertOverwritePartition
                } else if insert.overwrite
                    || insert.replace_into
                    || insert.or == Some(SqliteOnConflict::Replace)
                {
                    Kind::InsertOverwrite
                } else {
                    Kind::Insert
                }
            }
            Statement::Delete(_) => Kind::Delete,
            Statement::Update(_) => Kind::Update,
            Statement::Truncate(_) => Kind::Truncate,
            Statement::Merge(_) => Kind::Merge,
            Statement::CreateTable(create) if create.or_replace => Kind::CreateOrReplaceTable,
            Statement::CreateTable(_) => Kind::CreateTable,
            Statement::AlterTable(alter) => alter
                .operations
                .iter()
                .map(Kind::of_alter)
                .max_by_key(|kind| alter_rank(*kind))
                .unwrap_or(Kind::OtherAlter),
            Statement::Drop {
                object_type: ObjectType::Table,
                ..
            } => Kind::DropTable,
            Statement::Drop {
                object_type: ObjectType::Database | ObjectType::Schema,
                ..
            } => Kind::DropDatabase,
            Statement::Drop {
                object_type: ObjectType::View,
                ..
            } => Kind::Harmless,
            Statement::Call(function) => procedure_kind(function),
            Statement::Set(_) | Statement::Reset(_) => Kind::Session,
            Statement::CreateDatabase { .. }
            | Statement::CreateSchema { .. }
            | Statement::Use(_)
            | Statement::CreateView(_)
            | Statement::CreateFunction(_)
            | Statement::DropFunction(_)
            | Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. }
            | Statement::Execute { .. }
            | Statement::Deallocate { .. } => Kind::Harmless,
            _ => Kind::Other,
        }
    }
}

impl Kind {
    /// The kind of one `ALTER TABLE` operation.
    pub(crate) fn of_alter(operation: &AlterTableOperation) -> Kind {
        match operation {
            AlterTableOperation::AddColumn { .. } => Kind::AddColumn,
            AlterTableOperation::DropColumn { .. }
            | AlterTableOperation::RenameColumn { .. }
            | AlterTableOperation::AlterColumn { .. } => Kind::ColumnChange,
            AlterTableOperation::RenameTable { .. } => Kind::RenameTable,
            AlterTableOperation::SetTblProperties { .. } => Kind::SetOptions,
            AlterTableOperation::DropPartitions { .. }
            | AlterTableOperation::AddPartitions { .. }
            | AlterTableOperation::RenamePartitions { .. }
            | AlterTableOperation::AttachPartition { .. }
            | AlterTableOperation::DetachPartition { .. }
            | AlterTableOperation::FreezePartition { .. }
            | AlterTableOperation::UnfreezePartition { .. } => Kind::PartitionChange,
            _ => Kind::OtherAlter,
        }
    }
}

/// An `ALTER TABLE` with several operations is as strict as its strictest:
/// the filter's refusals first, then the catalog's, then what is checked.
fn alter_rank(kind: Kind) -> u8 {
    match kind {
        Kind::OtherAlter => 6,
        Kind::PartitionChange => 5,
        Kind::ColumnChange => 4,
        Kind::RenameTable => 3,
        Kind::SetOptions => 2,
        Kind::AddColumn => 1,
        _ => 0,
    }
}

/// Paimon's procedures of each class, by their name without `sys.`; this
/// crate's own are in [`crate::procedure`].
const ROLLBACK_PROCEDURES: &[&str] = &["rollback_to", "rollback_to_timestamp"];
const TAG_PROCEDURES: &[&str] = &[
    "create_tag",
    "create_tag_from_timestamp",
    "delete_tag",
    "rename_tag",
];
const BRANCH_PROCEDURES: &[&str] = &["rename_branch"];
const INDEX_PROCEDURES: &[&str] = &[
    "create_global_index",
    "drop_global_index",
    "create_lumina_index",
];
const ACCESS_PROCEDURES: &[&str] = &[
    "grant_permission",
    "revoke_permission",
    "list_permissions",
    "create_policy",
    "drop_policy",
    "list_policies",
];

/// The kind of `CALL [catalog.][sys.]procedure(...)`.
fn procedure_kind(function: &Function) -> Kind {
    let Some(name) = function
        .name
        .0
        .last()
        .and_then(|part| part.as_ident())
        .map(|ident| ident.value.as_str())
    else {
        return Kind::OtherProcedure;
    };
    let is = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(name));
    let ours = Procedure::named(name);
    // Tags first: `create_tag` runs as a maintenance procedure (checked
    // against expiry), but is a tag procedure.
    if ours.is_some_and(Procedure::is_store) {
        Kind::StoreProcedure
    } else if is(TAG_PROCEDURES) {
        Kind::Tags
    } else if ours.is_some() {
        Kind::Maintenance
    } else if is(ROLLBACK_PROCEDURES) {
        Kind::Rollback
    } else if is(BRANCH_PROCEDURES) {
        Kind::Branches
    } else if is(INDEX_PROCEDURES) {
        Kind::Indexes
    } else if is(ACCESS_PROCEDURES) {
        Kind::AccessControl
    } else {
        Kind::OtherProcedure
    }
}

/// The classification as the Markdown table in docs/concepts/lake-stream.md.
#[cfg(test)]
pub(crate) fn markdown() -> String {
    let mut out = String::from("| statement | on a lake-stream table | enforced by | rule |\n");
    out.push_str("|---|---|---|---|\n");
    for kind in Kind::ALL {
        let class = kind.class();
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            class.statements,
            class.handling.label(),
            class.enforcer.label(),
            class.rule
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classification::Handling;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn kind(sql: &str) -> Kind {
        let statements = Parser::parse_sql(&GenericDialect {}, sql).expect(sql);
        Kind::of(&statements[0])
    }

    #[test]
    fn every_kind_is_listed_once() {
        for kind in Kind::ALL {
            assert_eq!(Kind::ALL.iter().filter(|k| **k == kind).count(), 1);
        }
    }

    /// Each example is a statement of its own kind.
    #[test]
    fn examples_are_of_their_kind() {
        for kind in Kind::ALL {
            if let Some(example) = kind.class().example {
                let sql = example.replace("{t}", "t");
                assert_eq!(self::kind(&sql), kind, "{sql}");
            }
        }
    }

    #[test]
    fn statements_are_classified() {
        assert_eq!(kind("REPLACE INTO t VALUES (1)"), Kind::InsertOverwrite);
        assert_eq!(
            kind("INSERT OR REPLACE INTO t VALUES (1)"),
            Kind::InsertOverwrite
        );
        assert_eq!(kind("DROP SCHEMA d CASCADE"), Kind::DropDatabase);
        assert_eq!(
            kind("CALL paimon.sys.LAKESTREAM_TIER('t')"),
            Kind::StoreProcedure
        );
        assert_eq!(
            kind("CALL sys.delete_tag(table => 't', tag => 'x')"),
            Kind::Tags
        );
        assert_eq!(kind("COMMENT ON TABLE t IS 'x'"), Kind::Other);
        assert_eq!(kind("MSCK REPAIR TABLE t"), Kind::Other);
        assert_eq!(
            kind("ALTER TABLE t ADD COLUMN w INT, DROP PARTITION (p = 1)"),
            Kind::PartitionChange
        );
        assert_eq!(
            kind("ALTER TABLE t SET TBLPROPERTIES ('a' = 'b'), RENAME COLUMN v TO w"),
            Kind::ColumnChange
        );
        assert_eq!(kind("COPY t TO '/tmp/x.parquet'"), Kind::Read);
    }

    /// docs/concepts/lake-stream.md holds [`markdown`] between its markers.
    #[test]
    fn the_documentation_holds_this_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/concepts/lake-stream.md");
        let docs = std::fs::read_to_string(path).expect("docs/concepts/lake-stream.md");
        let begin = "<!-- statement-classes: begin (generated by src/planner/classify.rs) -->\n";
        let end = "<!-- statement-classes: end -->";
        let start = docs.find(begin).expect("begin marker") + begin.len();
        let stop = docs.find(end).expect("end marker");
        let table = markdown();
        assert!(
            docs[start..stop] == table,
            "docs/concepts/lake-stream.md's statement table differs from the code's; \
             put this between its markers:\n{table}"
        );
    }

    /// The Paimon snapshots of table `default.t` in `warehouse`.
    fn snapshots(warehouse: &std::path::Path) -> Vec<String> {
        let dir = warehouse.join("default.db").join("t").join("snapshot");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("snapshot-"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    async fn rows(ctx: &crate::LakeStreamContext, sql: &str) -> Result<String, String> {
        let frame = ctx.sql(sql).await.map_err(|e| e.to_string())?;
        let batches = frame.collect().await.map_err(|e| e.to_string())?;
        pretty_format_batches(&batches)
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    /// Each class's example, run on a lake-stream table of its own, does
    /// what its row says: refused statements fail and change nothing, the
    /// others run; and nothing but tiering adds a Paimon snapshot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_class_does_what_its_row_says() {
        for kind in Kind::ALL {
            let class = kind.class();
            let Some(example) = class.example else {
                continue;
            };
            let sql = example.replace("{t}", "t");
            let dir = tempfile::tempdir().expect("temporary directory");
            let warehouse = dir.path().join("warehouse");
            std::fs::create_dir_all(&warehouse).expect("warehouse");
            let options = std::collections::HashMap::from([
                ("warehouse".to_string(), warehouse.display().to_string()),
                ("lakestream.store".to_string(), "local".to_string()),
                (
                    "local.path".to_string(),
                    dir.path().join("store").display().to_string(),
                ),
                ("local.tier-interval".to_string(), "off".to_string()),
            ]);
            let mut ctx = crate::LakeStreamContext::new();
            ctx.register_catalog("paimon", options)
                .await
                .expect("catalog");
            for setup in [
                "CREATE TABLE t (k INT NOT NULL, p INT NOT NULL, v STRING, PRIMARY KEY (k, p)) \
                 PARTITIONED BY (p) WITH ('bucket' = '1')",
                "INSERT INTO t VALUES (1, 1, 'a'), (2, 1, 'b')",
                "ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')",
                "INSERT INTO t VALUES (3, 2, 'c')",
            ] {
                rows(&ctx, setup).await.expect(setup);
            }
            let read = "SELECT k, p, v FROM t$rt ORDER BY k";
            let before = rows(&ctx, read).await.expect("t$rt");
            let earlier = snapshots(&warehouse);
            let outcome = rows(&ctx, &sql).await;
            match class.handling {
                Handling::Refused => {
                    let error = outcome.expect_err(&sql);
                    assert!(
                        error.contains("default.t") && error.contains("lake-stream"),
                        "{kind:?}: {sql}: the error names neither the table nor the mode: {error}"
                    );
                    assert_eq!(
                        rows(&ctx, read).await.as_ref(),
                        Ok(&before),
                        "{kind:?}: {sql}"
                    );
                }
                _ => {
                    if let Err(error) = outcome {
                        panic!("{kind:?}: {sql} failed: {error}");
                    }
                }
            }
            let after = snapshots(&warehouse);
            if kind == Kind::StoreProcedure {
                assert_eq!(after.len(), earlier.len() + 1, "{kind:?}: {sql}");
            } else if kind != Kind::DropTable {
                assert_eq!(after, earlier, "{kind:?}: {sql} changed Paimon's snapshots");
            }
        }
    }
}
