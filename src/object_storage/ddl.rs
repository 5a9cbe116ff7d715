//! The metadata files of a file-system catalog's DDL, written through the
//! warehouse's file IO ([`super::local`], [`super::commit`]) instead of the
//! catalog's own.
//!
//! paimon 0.4's `FileSystemCatalog` writes `schema/schema-N` (`CREATE
//! TABLE`, `ALTER TABLE`) and tags (`create_tag` of the catalog API) through
//! a file IO it builds itself, which nothing can replace: a plain write in
//! place. On a full disk an `ALTER` failed and left a 0-byte `schema-1`, and
//! from then on every statement on the table failed reading it ("Failed to
//! parse schema file ... EOF"), turning the mode off, `DROP` and a new
//! `CREATE` included; a reader could meet a half-written schema file. So the
//! catalog wrapper makes these changes here: the same checks and the same
//! files as paimon's (the code follows `paimon::catalog::filesystem`), each
//! file written through the warehouse's file IO, whose guard layer publishes
//! it whole and creates a schema file only if its name is free. A failed
//! statement changes nothing.

use bytes::Bytes;
use paimon::catalog::Identifier;
use paimon::io::FileIO;
use paimon::spec::{CoreOptions, Schema, SchemaChange, Snapshot, TableSchema, TableType};
use paimon::table::{SchemaManager, Table};
use paimon::{Error, FileSystemCatalog, Result};

/// paimon's `TABLE_TYPE_OPTION` (crate-private there).
const TABLE_TYPE: &str = "type";
/// paimon's `INDEX_FILE_IN_DATA_FILE_DIR_OPTION` (crate-private there).
const INDEX_FILE_IN_DATA_FILE_DIR: &str = "index-file-in-data-file-dir";

/// Whether this module makes a `CREATE TABLE` of `creation`: an object
/// table's schema is normalised by paimon's catalog, which alone can (it is
/// left to the catalog, writing in place).
pub(super) fn creates(creation: &Schema) -> Result<bool> {
    Ok(CoreOptions::new(creation.options()).table_type()? != TableType::ObjectTable)
}

/// `CREATE TABLE`: `schema/schema-0` of a new table (see [`creates`]).
pub(super) async fn create_table(
    catalog: &FileSystemCatalog,
    file_io: &FileIO,
    identifier: &Identifier,
    creation: Schema,
    ignore_if_exists: bool,
) -> Result<()> {
    // Checks the names, then whether the table exists.
    match catalog.fetch_table_schema(identifier).await {
        Ok(_) if ignore_if_exists => return Ok(()),
        Ok(_) => {
            return Err(Error::TableAlreadyExist {
                full_name: identifier.full_name(),
            })
        }
        Err(Error::TableNotExist { .. }) => {}
        Err(e) => return Err(e),
    }
    let database = format!("{}/{}.db", catalog.warehouse(), identifier.database());
    if !file_io.exists_dir(&database).await? {
        return Err(Error::DatabaseNotExist {
            database: identifier.database().to_string(),
        });
    }
    let table_path = format!("{database}/{}", identifier.object());
    let new_directory = !file_io.exists_dir(&table_path).await?;
    file_io.mkdirs(&table_path).await?;
    let written = write_schema(file_io, &table_path, &TableSchema::new(0, &creation)).await;
    if written.is_err() && new_directory {
        // Nothing was published: no table there, as before.
        let _ = file_io.delete_dir(&table_path).await;
    }
    written
}

/// `ALTER TABLE`: the next schema file of an existing table, created only if
/// its name is free.
pub(super) async fn alter_table(
    catalog: &FileSystemCatalog,
    file_io: &FileIO,
    identifier: &Identifier,
    changes: Vec<SchemaChange>,
    ignore_if_not_exists: bool,
) -> Result<()> {
    let (table_path, current) = match catalog.fetch_table_schema(identifier).await {
        Ok(found) => found,
        Err(Error::TableNotExist { .. }) if ignore_if_not_exists => return Ok(()),
        Err(e) => return Err(e),
    };
    reject_immutable_option_changes(current.options(), &changes)?;
    let next = current
        .apply_changes(changes)
        .map_err(|e| fill_table_name(e, identifier))?;
    write_schema(file_io, &table_path, &next).await
}

/// Writes `schema` as its file under `table_path`.
async fn write_schema(file_io: &FileIO, table_path: &str, schema: &TableSchema) -> Result<()> {
    file_io.mkdirs(&format!("{table_path}/schema")).await?;
    let path = SchemaManager::new(file_io.clone(), table_path.to_string()).schema_path(schema.id());
    let content = serde_json::to_string(schema).map_err(|e| Error::DataInvalid {
        message: format!("Failed to serialize schema: {e}"),
        source: Some(Box::new(e)),
    })?;
    file_io.new_output(&path)?.write(Bytes::from(content)).await
}

/// The catalog API's `create_tag`, on `table` opened on the warehouse's
/// file IO (`CALL sys.create_tag` writes through the table it loads from
/// the catalog, which is on it already).
pub(super) async fn create_tag(
    table: &Table,
    tag_name: &str,
    snapshot_id: Option<i64>,
    time_retained: Option<&str>,
    ignore_if_exists: bool,
) -> Result<()> {
    let manager = table.tag_manager();
    if manager.tag_exists(tag_name).await? {
        return if ignore_if_exists {
            Ok(())
        } else {
            Err(Error::TagAlreadyExist {
                tag_name: tag_name.to_string(),
            })
        };
    }
    let snapshot = tag_snapshot(table, snapshot_id).await?;
    manager
        .create_with_retention(tag_name, &snapshot, time_retained)
        .await
}

/// The snapshot a new tag names: the latest, or `snapshot_id`, which may
/// have expired and live on in another tag.
async fn tag_snapshot(table: &Table, snapshot_id: Option<i64>) -> Result<Snapshot> {
    let snapshots = table.snapshot_manager();
    let Some(snapshot_id) = snapshot_id else {
        return snapshots
            .get_latest_snapshot()
            .await?
            .ok_or_else(|| Error::DataInvalid {
                message: "Cannot create tag because latest snapshot does not exist".to_string(),
                source: None,
            });
    };
    match snapshots.get_snapshot(snapshot_id).await {
        Ok(snapshot) => Ok(snapshot),
        Err(Error::SnapshotNotExist { .. }) => table
            .tag_manager()
            .list_all()
            .await?
            .into_iter()
            .map(|(_, snapshot)| snapshot)
            .find(|snapshot| snapshot.id() == snapshot_id)
            .ok_or(Error::SnapshotNotExist { snapshot_id }),
        Err(e) => Err(e),
    }
}

/// paimon's refusal to change the options that choose where a table's
/// files are (its type, `index-file-in-data-file-dir`,
/// `data-file.path-directory`): files already written would be lost.
fn reject_immutable_option_changes(
    current: &std::collections::HashMap<String, String>,
    changes: &[SchemaChange],
) -> Result<()> {
    let current_type = current
        .get(TABLE_TYPE)
        .map(String::as_str)
        .unwrap_or_else(|| TableType::default().as_str());
    let placing =
        |key: &str| key == INDEX_FILE_IN_DATA_FILE_DIR || key == "data-file.path-directory";
    for change in changes {
        let refused = match change {
            SchemaChange::SetOption { key, value }
                if key == TABLE_TYPE && !value.eq_ignore_ascii_case(current_type) =>
            {
                format!(
                    "changing '{TABLE_TYPE}' from '{current_type}' to '{value}' is not supported"
                )
            }
            SchemaChange::RemoveOption { key } if key == TABLE_TYPE => {
                format!("removing '{TABLE_TYPE}' is not supported")
            }
            SchemaChange::SetOption { key, value }
                if placing(key) && current.get(key.as_str()) != Some(value) =>
            {
                format!(
                    "changing '{key}' after the table exists is not supported: it selects the \
                     directory files are written to, so the files already written would no \
                     longer be found"
                )
            }
            SchemaChange::RemoveOption { key } if placing(key) && current.contains_key(key) => {
                format!(
                    "removing '{key}' is not supported: it selects the directory files are \
                     written to, so the files already written would no longer be found"
                )
            }
            _ => continue,
        };
        return Err(Error::Unsupported { message: refused });
    }
    Ok(())
}

/// The table's name in the column errors of `TableSchema::apply_changes`.
fn fill_table_name(error: Error, identifier: &Identifier) -> Error {
    match error {
        Error::ColumnNotExist { column, .. } => Error::ColumnNotExist {
            full_name: identifier.full_name(),
            column,
        },
        Error::ColumnAlreadyExist { column, .. } => Error::ColumnAlreadyExist {
            full_name: identifier.full_name(),
            column,
        },
        other => other,
    }
}
