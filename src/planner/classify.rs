//! The statement classification: what every kind of statement does to a
//! lake-stream table. One table, [`Kind::ALL`] with [`Kind::class`], says for
//! each kind whether it reads, goes to the store, is checked, is allowed as
//! harmless or is refused, and which layer enforces that. The statement
//! filter decides from it, the planner's and the catalog's refusals take
//! their reasons from it, and docs/concepts/lake-stream.md holds it as a
//! table that a test keeps equal to [`markdown`].
//!
//! A kind this table does not name ([`Kind::Other`]) is refused whenever the
//! statement names a lake-stream table anywhere in its text.

use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, Function, ObjectType, SqliteOnConflict, Statement,
};

/// What happens to a statement on a lake-stream table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handling {
    /// It reads: `t` from Paimon's snapshot, `t$rt` from the store and Paimon.
    Read,
    /// It goes to the store.
    Store,
    /// It runs after a check that may refuse it, as the rule says.
    Checked,
    /// It runs as without this crate: it changes none of the table's rows.
    Allowed,
    /// It is refused, and changes nothing.
    Refused,
}

impl Handling {
    #[cfg(test)]
    fn label(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Store => "to the store",
            Self::Checked => "checked",
            Self::Allowed => "allowed",
            Self::Refused => "refused",
        }
    }
}

/// Which layer enforces a class's rule. The statement filter sees only
/// statements run through `LakeStreamContext` (and the shell); the planner's
/// write routing and the catalog decorator see every path, the
/// `LakeStreamExtension` and the catalog API included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enforcer {
    /// Nothing needs enforcing.
    None,
    /// The statement filter in front of `SQLContext`.
    Filter,
    /// Write routing in DataFusion's planner.
    Planner,
    /// The catalog decorator.
    Catalog,
}

impl Enforcer {
    #[cfg(test)]
    fn label(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Filter => "statement filter",
            Self::Planner => "planner",
            Self::Catalog => "catalog",
        }
    }
}

/// One row of the classification.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Class {
    /// The statements, as the documentation names them (Markdown).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) statements: &'static str,
    pub(crate) handling: Handling,
    pub(crate) enforcer: Enforcer,
    /// What happens and why. For a refusal, the error's reason.
    pub(crate) rule: &'static str,
    /// A statement of the kind on the test table `{t}` (columns `k`, `p`,
    /// `v`, partitioned by `p`), or `None` where it cannot run in a test
    /// warehouse; run statement by statement by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) example: Option<&'static str>,
}

/// Every kind of statement, as far as a lake-stream table is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    /// `EXPLAIN s`, `PREPARE p AS s`: checked as `s`.
    Wrapper,
    Insert,
    InsertOverwrite,
    InsertOverwritePartition,
    Delete,
    Update,
    Truncate,
    Merge,
    CreateTable,
    CreateOrReplaceTable,
    AddColumn,
    ColumnChange,
    RenameTable,
    SetOptions,
    PartitionChange,
    OtherAlter,
    DropTable,
    DropDatabase,
    StoreProcedure,
    Maintenance,
    Rollback,
    Tags,
    Branches,
    Indexes,
    AccessControl,
    OtherProcedure,
    Session,
    Harmless,
    Other,
}

impl Kind {
    /// Every kind, in the documentation's order.
    #[cfg(test)]
    pub(crate) const ALL: [Kind; 30] = [
        Kind::Read,
        Kind::Wrapper,
        Kind::Insert,
        Kind::InsertOverwrite,
        Kind::InsertOverwritePartition,
        Kind::Delete,
        Kind::Update,
        Kind::Truncate,
        Kind::Merge,
        Kind::CreateTable,
        Kind::CreateOrReplaceTable,
        Kind::AddColumn,
        Kind::ColumnChange,
        Kind::RenameTable,
        Kind::SetOptions,
        Kind::PartitionChange,
        Kind::OtherAlter,
        Kind::DropTable,
        Kind::DropDatabase,
        Kind::StoreProcedure,
        Kind::Maintenance,
        Kind::Rollback,
        Kind::Tags,
        Kind::Branches,
        Kind::Indexes,
        Kind::AccessControl,
        Kind::OtherProcedure,
        Kind::Session,
        Kind::Harmless,
        Kind::Other,
    ];

    /// The classification of this kind.
    pub(crate) fn class(self) -> Class {
        use Enforcer as E;
        use Handling as H;
        let (statements, handling, enforcer, rule, example) = match self {
            Kind::Read => (
                "`SELECT`, `DESCRIBE`, `SHOW`, `COPY (...) TO`",
                H::Read,
                E::None,
                "`t` reads Paimon's tiered snapshot, `t$rt` the store's rows over it",
                Some("SELECT * FROM {t}$rt"),
            ),
            Kind::Wrapper => (
                "`EXPLAIN s`, `PREPARE p AS s`",
                H::Checked,
                E::Filter,
                "checked as `s` is; `EXPLAIN ANALYZE` runs `s`, routed as `s` is",
                Some("EXPLAIN DELETE FROM {t} WHERE k = 1"),
            ),
            Kind::Insert => (
                "`INSERT INTO t`",
                H::Store,
                E::Planner,
                "appended, or upserted by primary key. `INSERT INTO t$branch_b` writes the \
                 branch through Paimon: a branch is never lake-stream",
                Some("INSERT INTO {t} VALUES (7, 1, 'g')"),
            ),
            Kind::InsertOverwrite => (
                "`INSERT OVERWRITE t`, `REPLACE INTO t`",
                H::Refused,
                E::Planner,
                "the store keeps the table's newest changes and cannot replace its history. \
                 Delete rows with DELETE (primary-key tables), or turn the mode off first",
                Some("INSERT OVERWRITE {t} VALUES (7, 1, 'g')"),
            ),
            Kind::InsertOverwritePartition => (
                "`INSERT OVERWRITE t PARTITION (...)`",
                H::Refused,
                E::Filter,
                "the store keeps the table's newest changes and cannot replace its history. \
                 Turn the mode off first",
                Some("INSERT OVERWRITE {t} PARTITION (p = 1) VALUES (7, 'g')"),
            ),
            Kind::Delete => (
                "`DELETE FROM t WHERE ...`",
                H::Store,
                E::Planner,
                "primary-key tables: the rows the whole `WHERE` clause selects from `t$rt`, \
                 subqueries included, are deleted in the store",
                Some("DELETE FROM {t} WHERE k IN (SELECT 1)"),
            ),
            Kind::Update => (
                "`UPDATE t SET ... WHERE ...`",
                H::Store,
                E::Planner,
                "primary-key tables: the rows the whole `WHERE` clause selects are upserted \
                 in the store with their new values",
                Some("UPDATE {t} SET v = 'x' WHERE k IN (SELECT 1)"),
            ),
            Kind::Truncate => (
                "`TRUNCATE TABLE t`",
                H::Refused,
                E::Planner,
                "it would have to empty Paimon and the store at once. Use DELETE FROM \
                 (primary-key tables), or turn the mode off first",
                Some("TRUNCATE TABLE {t}"),
            ),
            Kind::Merge => (
                "`MERGE INTO t`",
                H::Refused,
                E::Filter,
                "use INSERT, which upserts by primary key, and DELETE",
                Some(
                    "MERGE INTO {t} USING (SELECT 1 AS k) s ON {t}.k = s.k \
                     WHEN MATCHED THEN DELETE",
                ),
            ),
            Kind::CreateTable => (
                "`CREATE TABLE t ... WITH ('lakestream.enabled' = 'true')`",
                H::Checked,
                E::Catalog,
                "its options are checked as `ALTER TABLE ... SET TBLPROPERTIES` checks them, \
                 and it records its store in `lakestream.store-binding`",
                Some(
                    "CREATE TABLE {t}_new (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
                     WITH ('bucket' = '1', 'lakestream.enabled' = 'true')",
                ),
            ),
            Kind::CreateOrReplaceTable => (
                "`CREATE OR REPLACE TABLE t`",
                H::Refused,
                E::Filter,
                "it would replace the table while the store keeps its rows. Drop the table \
                 first",
                Some("CREATE OR REPLACE TABLE {t} (k INT)"),
            ),
            Kind::AddColumn => (
                "`ALTER TABLE t ADD COLUMN`",
                H::Checked,
                E::Catalog,
                "rows the store holds read the new column as NULL. Refused on a store whose \
                 tiering keeps columns of its own after the table's (Fluss): its tables keep \
                 the columns they had when the mode was turned on. Create a table with the \
                 columns wanted and copy the rows",
                Some("ALTER TABLE {t} ADD COLUMN w INT"),
            ),
            Kind::ColumnChange => (
                "`ALTER TABLE t DROP COLUMN`, `RENAME COLUMN`, `ALTER COLUMN`",
                H::Refused,
                E::Catalog,
                "the store keeps rows by column name. Refused whenever the table is \
                 lake-stream before or after the statement: turn the mode off in a statement \
                 of its own, change the columns, then turn it on",
                Some("ALTER TABLE {t} RENAME COLUMN v TO w"),
            ),
            Kind::RenameTable => (
                "`ALTER TABLE t RENAME TO u`",
                H::Refused,
                E::Catalog,
                "it would break the store's mapping to the table. Turn the mode off first",
                Some("ALTER TABLE {t} RENAME TO {t}_renamed"),
            ),
            Kind::SetOptions => (
                "`ALTER TABLE t SET TBLPROPERTIES (...)`",
                H::Checked,
                E::Catalog,
                "`lakestream.enabled` turns the mode on or off. Options that change what a \
                 merge means (`merge-engine`, `ignore-delete`, `sequence.*`, `bucket`, \
                 `fields.*`, see Merge engines) are refused, naming the option",
                Some("ALTER TABLE {t} SET TBLPROPERTIES ('snapshot.num-retained.max' = '50')"),
            ),
            Kind::PartitionChange => (
                "`ALTER TABLE t DROP PARTITION`, `ADD PARTITION` and the other partition \
                 operations",
                H::Refused,
                E::Filter,
                "it changes Paimon's partitions directly, while the store keeps newer rows \
                 of them, so the change would be half applied. Delete the partition's rows \
                 with DELETE (primary-key tables), or turn the mode off first",
                Some("ALTER TABLE {t} DROP PARTITION (p = 1)"),
            ),
            Kind::OtherAlter => (
                "any other `ALTER TABLE` operation",
                H::Refused,
                E::Filter,
                "this crate does not know what it would do to the store's rows. Turn the \
                 mode off first",
                Some("ALTER TABLE {t} DROP PRIMARY KEY"),
            ),
            Kind::DropTable => (
                "`DROP TABLE t`",
                H::Checked,
                E::Catalog,
                "through a catalog with the table's store, the store's rows go with the \
                 table. Refused through a catalog that names no store or another one",
                Some("DROP TABLE {t}"),
            ),
            Kind::DropDatabase => (
                "`DROP DATABASE d CASCADE`, `DROP SCHEMA d CASCADE`",
                H::Checked,
                E::Catalog,
                "as `DROP TABLE` for each of its lake-stream tables, all checked before any \
                 is dropped",
                None,
            ),
            Kind::StoreProcedure => (
                "`CALL sys.lakestream_tier`, `CALL sys.lakestream_set_aside`",
                H::Store,
                E::None,
                "the store tiers its rows into Paimon, or sets a damaged write aside",
                Some("CALL sys.lakestream_tier('default.{t}')"),
            ),
            Kind::Maintenance => (
                "`CALL sys.compact_manifest`, `CALL sys.compact`, `CALL sys.expire_snapshots`, \
                 `CALL sys.remove_orphan_files`",
                H::Allowed,
                E::None,
                "rewrites the newest snapshot's manifests, or an append table's small data \
                 files, into fewer, as a `COMPACT` snapshot that changes no row; expires the \
                 oldest snapshots beyond Paimon's `snapshot.*` retention options, never the \
                 latest, a tagged one's files, or one a Paimon consumer (such as the store's) \
                 reads next or later; deletes \
                 files no snapshot, tag or branch references once older than `older_than`, a \
                 day by default (any Paimon table of the catalog; see docs/maintenance.md)",
                Some("CALL sys.compact_manifest('default.{t}')"),
            ),
            Kind::Rollback => (
                "`CALL sys.rollback_to`, `CALL sys.rollback_to_timestamp`",
                H::Refused,
                E::Filter,
                "it would remove snapshots that tiering committed while the store keeps the \
                 rows written after them, so t$rt would show a history that never existed. \
                 Turn the mode off first",
                Some("CALL sys.rollback_to(table => 'default.{t}', snapshot_id => 1)"),
            ),
            Kind::Tags => (
                "`CALL sys.create_tag`, `create_tag_from_timestamp`, `delete_tag`, \
                 `rename_tag`",
                H::Allowed,
                E::None,
                "a tag names one of Paimon's snapshots and changes no rows; `create_tag` is \
                 refused over a snapshot an expiry is removing",
                Some(
                    "CALL sys.create_tag(table => 'default.{t}', tag => 'tag1', snapshot_id => 1)",
                ),
            ),
            Kind::Branches => (
                "`CALL sys.rename_branch`",
                H::Allowed,
                E::None,
                "a branch is never lake-stream, although it copies the table's options",
                None,
            ),
            Kind::Indexes => (
                "`CALL sys.create_global_index`, `drop_global_index`, `create_lumina_index`",
                H::Refused,
                E::Filter,
                "an index would cover Paimon's tiered rows only, not the store's, and its \
                 commit is a snapshot outside tiering. Turn the mode off first",
                Some("CALL sys.create_global_index(table => 'default.{t}', index_column => 'v')"),
            ),
            Kind::AccessControl => (
                "`CALL sys.grant_permission`, `revoke_permission`, `list_permissions`, \
                 `create_policy`, `drop_policy`, `list_policies`",
                H::Allowed,
                E::None,
                "access control (REST catalogs) changes no rows",
                None,
            ),
            Kind::OtherProcedure => (
                "any other `CALL` naming a lake-stream table",
                H::Refused,
                E::Filter,
                "this crate does not know what the procedure would do to the store's rows. \
                 Turn the mode off first",
                Some("CALL sys.migrate_table(source_type => 'hive', table => 'default.{t}')"),
            ),
            Kind::Session => (
                "`SET`, `RESET`",
                H::Checked,
                E::Filter,
                "a session option never routes a table: `lakestream.*` and \
                 `paimon.lakestream.*` keys are refused, except the read settings",
                Some("SET datafusion.execution.batch_size = 1024"),
            ),
            Kind::Harmless => (
                "`CREATE DATABASE`, `USE`, `CREATE VIEW`, `DROP VIEW`, `CREATE FUNCTION`, \
                 `CREATE EXTERNAL TABLE`, transactions",
                H::Allowed,
                E::None,
                "they change no table's rows. An external table over a lake-stream table \
                 reads and writes as the table does",
                Some("CREATE TEMPORARY VIEW {t}_view AS SELECT * FROM {t}"),
            ),
            Kind::Other => (
                "any other statement that names a lake-stream table (`ANALYZE`, \
                 `MSCK REPAIR`, `COMMENT ON`, `RENAME TABLE`, ...)",
                H::Refused,
                E::Filter,
                "this crate does not know what it would do to the store's rows",
                Some("ANALYZE TABLE {t} COMPUTE STATISTICS"),
            ),
        };
        Class {
            statements,
            handling,
            enforcer,
            rule,
            example,
        }
    }

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

/// The procedures of each class, by their name without `sys.`.
const STORE_PROCEDURES: &[&str] = &[
    crate::table::TIER_FUNCTION,
    crate::table::SET_ASIDE_FUNCTION,
];
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
    // Tags first: `create_tag` runs as a maintenance procedure (checked
    // against expiry), but is a tag procedure.
    if is(STORE_PROCEDURES) {
        Kind::StoreProcedure
    } else if is(TAG_PROCEDURES) {
        Kind::Tags
    } else if crate::table::Maintenance::named(name).is_some() {
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
