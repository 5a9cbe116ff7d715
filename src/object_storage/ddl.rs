//! The metadata files of a file-system catalog's DDL, written through the
//! warehouse's file IO ([`super::local`], [`super::commit`]) instead of the
//! catalog's own.
//!
//! paimon 0.4's `FileSystemCatalog` writes `schema/schema-N` (`CREATE
//! TABLE`, `ALTER TABLE`) through a file IO it builds itself, which nothing can replace: a plain write in
//! place. On a full disk an `ALTER` failed and left a 0-byte `schema-1`, and
//! from then on every statement on the table failed reading it ("Failed to
//! parse schema file ... EOF"), turning the mode off, `DROP` and a new
//! `CREATE` included; a reader could meet a half-written schema file; and
//! two processes whose lock or lease failed wrote the same schema file, one
//! silently undoing the other's `ALTER`. So the
//! catalog wrapper makes these changes here: the same checks and the same
//! files as paimon's (the code follows `paimon::catalog::filesystem`), each
//! file written through the warehouse's file IO, whose guard layer publishes
//! it whole and creates a schema file only if its name is free. A failed
//! statement changes nothing.

use std::time::Duration;

use bytes::Bytes;
use paimon::catalog::Identifier;
use paimon::io::FileIO;
use paimon::spec::{CoreOptions, Schema, SchemaChange, TableSchema, TableType};
use paimon::table::SchemaManager;
use paimon::{Error, FileSystemCatalog, Result};

use crate::retry::{Retry, Try};

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
    remove_dropped_leftovers(file_io, &table_path).await?;
    let new_directory = !file_io.exists_dir(&table_path).await?;
    file_io.mkdirs(&table_path).await?;
    match publish_schema(file_io, &table_path, &TableSchema::new(0, &creation)).await {
        Ok(Published::Written) => Ok(()),
        // Another process created the table first (its lock or lease did
        // not hold this one off): its table stands.
        Ok(Published::Taken) if ignore_if_exists => Ok(()),
        Ok(Published::Taken) => Err(Error::TableAlreadyExist {
            full_name: identifier.full_name(),
        }),
        Err(e) => {
            if new_directory {
                // Nothing was published: no table there, as before. Only
                // empty directories go (a plain delete of a directory is
                // not recursive): a racing creator's files stay.
                for dir in [format!("{table_path}/schema/"), format!("{table_path}/")] {
                    let _ = file_io.delete_file(&dir).await;
                }
            }
            Err(e)
        }
    }
}

/// A `DROP TABLE` cut short (its process killed while the table's directory
/// was deleted) can leave the dropped table's snapshots under the name with
/// its schema files gone: no table, as the catalog sees it, but a table
/// created there would show the dropped table's rows. A table directory
/// with snapshots and no schema file is such leftovers (a table has its
/// schema before its first snapshot, and no `CREATE` runs beside this one:
/// it holds the schema lock), so it is removed before the new table's
/// schema is published. Other leftovers (data files, manifests no snapshot
/// names) show nothing, and stay.
async fn remove_dropped_leftovers(file_io: &FileIO, table_path: &str) -> Result<()> {
    if file_io
        .exists_dir(&format!("{table_path}/snapshot/"))
        .await?
    {
        file_io.delete_dir(&format!("{table_path}/")).await?;
    }
    Ok(())
}

/// `ALTER TABLE`: the next schema file of an existing table, created only if
/// its name is free. `check` passes the schema the changes are applied to,
/// each time they are: a change never lands on a schema it did not pass.
pub(super) async fn alter_table(
    catalog: &FileSystemCatalog,
    file_io: &FileIO,
    identifier: &Identifier,
    changes: Vec<SchemaChange>,
    ignore_if_not_exists: bool,
    check: &super::SchemaCheck<'_>,
) -> Result<()> {
    SCHEMA_RETRY
        .run(|| async {
            let (table_path, current) = match catalog.fetch_table_schema(identifier).await {
                Ok(found) => found,
                Err(Error::TableNotExist { .. }) if ignore_if_not_exists => {
                    return Ok(Try::Done(()))
                }
                Err(e) => return Err(e),
            };
            reject_immutable_option_changes(current.options(), &changes)?;
            check(&current)?;
            let next = current
                .apply_changes(changes.clone())
                .map_err(|e| fill_table_name(e, identifier))?;
            Ok(match publish_schema(file_io, &table_path, &next).await? {
                Published::Written => Try::Done(()),
                // Another process's ALTER took the name first: apply the
                // changes again to its schema (checked again), as Paimon's
                // schema manager does.
                Published::Taken => Try::Again(Error::DataInvalid {
                    message: format!(
                        "ALTER TABLE {}: other processes changed the table's schema first {} \
                         times in a row; nothing was changed, run the statement again",
                        identifier.full_name(),
                        SCHEMA_RETRY.tries
                    ),
                    source: None,
                }),
            })
        })
        .await
}

/// How an `ALTER TABLE` that lost the race for the next schema file applies
/// its changes to the newest schema again: 16 times at most, with growing
/// pauses and jitter so that racing processes fall apart.
const SCHEMA_RETRY: Retry =
    Retry::growing(16, Duration::from_millis(25), Duration::from_millis(200))
        .with_jitter(Duration::from_millis(50));

/// Whether a schema file was written by this statement.
enum Published {
    /// Written, whole, under its name.
    Written,
    /// Another process's schema file has the name.
    Taken,
}

/// Writes `schema` as its file under `table_path`, only if the name is
/// free: the warehouse's file IO creates schema files only if absent (a
/// hard link on local disk, a conditional put on S3), so a process whose
/// lock or lease failed (a clock far ahead takes a lease that is not
/// expired) never replaces another's schema, it finds it [`Published::Taken`].
/// A write whose answer was lost but whose file landed is told by the
/// file's bytes.
async fn publish_schema(
    file_io: &FileIO,
    table_path: &str,
    schema: &TableSchema,
) -> Result<Published> {
    file_io.mkdirs(&format!("{table_path}/schema")).await?;
    let path = SchemaManager::new(file_io.clone(), table_path.to_string()).schema_path(schema.id());
    let content = Bytes::from(
        serde_json::to_string(schema).map_err(|e| Error::DataInvalid {
            message: format!("Failed to serialize schema: {e}"),
            source: Some(Box::new(e)),
        })?,
    );
    let written = file_io.new_output(&path)?.write(content.clone()).await;
    let Err(failed) = written else {
        return Ok(Published::Written);
    };
    match file_io.new_input(&path)?.read().await {
        Ok(found) if found == content => Ok(Published::Written),
        Ok(_) => Ok(Published::Taken),
        // Not there: the write's own error says why, and nothing changed.
        Err(_) if !file_io.exists(&path).await.unwrap_or(true) => Err(failed),
        Err(read) => Err(Error::DataInvalid {
            message: format!(
                "the outcome of writing '{path}' is unknown: the write failed ({failed}) and \
                 reading the file back failed too ({read}); the change may have been made, \
                 look at the table before running the statement again"
            ),
            source: None,
        }),
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
