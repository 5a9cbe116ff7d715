//! The statement classification: what every kind of statement does to a
//! lake-stream table. One table, [`Kind::ALL`] with [`Kind::class`], says for
//! each kind whether it reads, goes to the store, is checked, is allowed as
//! harmless or is refused, and which layer enforces that. The statement
//! filter decides from it, the refusals of the write target and the
//! statement filter take their reasons from it, and
//! docs/concepts/lake-stream.md holds it as a table that a test keeps equal
//! to its Markdown form (the planner's `classify`, which also tells a
//! parsed statement's kind).
//!
//! A kind this table does not name ([`Kind::Other`]) is refused whenever the
//! statement names a lake-stream table anywhere in its text.

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
    pub(crate) fn label(self) -> &'static str {
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
    pub(crate) fn label(self) -> &'static str {
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
}
