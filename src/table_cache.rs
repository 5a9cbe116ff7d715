//! Table handles that planning reuses, checked against the files before
//! each use.
//!
//! Loading a table from a filesystem catalog reads the database directory,
//! the table's schema directory and its newest schema file, one after the
//! other: four round trips, which on an object store are most of a small
//! statement's time. A handle loaded before is reused instead when two
//! reads made at once show it is still the table's ([`SchemaStamp`]): its
//! schema file `schema-<id>` holds the very bytes it was loaded from, and
//! no `schema-<id+1>` exists. Another process's `ALTER TABLE` writes the
//! next schema file; its `DROP TABLE` removes the file, and a `CREATE
//! TABLE` after it writes another. Either fails the check, and the table
//! is loaded again.
//!
//! Tables of a REST catalog (whose server is the source of their schema),
//! system tables and branches are never cached.
//!
//! A filesystem catalog's databases are remembered once seen: the check
//! that a database exists (a listing, the first round trip of every
//! statement, made when DataFusion resolves the schema) is not made again.
//! It decides nothing by itself: whatever the statement then does checks the
//! files on its own (a table's handle is checked as above, and a dropped
//! database took its tables' schema files with it; paimon's `CREATE TABLE`
//! checks the database itself). A database this process drops is forgotten.

use std::collections::HashMap;
use std::sync::Mutex;

use paimon::catalog::{Database, Identifier};
use paimon::table::Table;

use crate::schema_stamp::{Freshness, SchemaStamp};

/// Checked table handles of one catalog.
#[derive(Debug, Default)]
pub(crate) struct TableCache {
    tables: Mutex<HashMap<Identifier, Cached>>,
    /// Databases of a filesystem catalog seen to exist.
    databases: Mutex<HashMap<String, Database>>,
}

#[derive(Debug, Clone)]
struct Cached {
    table: Table,
    /// The schema file the handle was loaded from, as read.
    stamp: SchemaStamp,
}

fn cacheable(identifier: &Identifier, table: &Table) -> bool {
    table.rest_env().is_none() && !identifier.object().contains('$')
}

impl TableCache {
    /// The cached handle of `identifier`, if the files show it is current.
    pub(crate) async fn get(&self, identifier: &Identifier) -> Option<Table> {
        let cached = self
            .tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(identifier)
            .cloned()?;
        if let Ok(Freshness::Current) = cached.stamp.check(&cached.table).await {
            return Some(cached.table);
        }
        self.forget(identifier);
        None
    }

    /// Remembers `table`, just loaded as `identifier`, when its schema file
    /// still holds the schema it was loaded with.
    pub(crate) async fn put(&self, identifier: &Identifier, table: &Table) {
        if !cacheable(identifier, table) {
            return;
        }
        let Ok(Some(stamp)) = SchemaStamp::of(table).await else {
            return;
        };
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                identifier.clone(),
                Cached {
                    table: table.clone(),
                    stamp,
                },
            );
    }

    /// Drops the handle of `identifier`, which failed its check.
    fn forget(&self, identifier: &Identifier) {
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(identifier);
    }

    /// The database `name` as seen before, if it was.
    pub(crate) fn database(&self, name: &str) -> Option<Database> {
        self.databases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Remembers that `database` exists (filesystem catalogs only).
    pub(crate) fn saw_database(&self, database: &Database) {
        self.databases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(database.name.clone(), database.clone());
    }

    /// Forgets the database `name` and its tables (this process dropped it).
    pub(crate) fn forget_database(&self, name: &str) {
        self.databases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|identifier, _| identifier.database() != name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema_stamp::tests::table_in;

    /// A remembered handle is reused while its schema file is unchanged,
    /// and dropped once the file is rewritten (same length or shorter) or
    /// the next schema file appears.
    #[tokio::test]
    async fn a_handle_is_reused_until_its_schema_files_change() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (_catalog, identifier, table) = table_in(dir.path()).await;
        let schema_dir = dir.path().join("db.db").join("t").join("schema");
        let file = schema_dir.join("schema-0");
        let original = std::fs::read(&file).expect("schema-0");
        let cache = TableCache::default();
        let check = |label: &'static str, expect: bool| {
            let cache = &cache;
            let identifier = &identifier;
            let table = &table;
            async move {
                cache.put(identifier, table).await;
                assert_eq!(cache.get(identifier).await.is_some(), expect, "{label}");
            }
        };
        check("unchanged", true).await;
        check("unchanged, asked again", true).await;

        // Another creation time, same length.
        let text = String::from_utf8(original.clone()).expect("text");
        let time = table.schema().time_millis().to_string();
        let other = (table.schema().time_millis() + 1).to_string();
        assert_eq!(time.len(), other.len());
        let rewritten = text.replace(&time, &other);
        assert_ne!(rewritten, text);
        cache.put(&identifier, &table).await;
        std::fs::write(&file, &rewritten).expect("rewrite");
        assert!(
            cache.get(&identifier).await.is_none(),
            "same length, other bytes"
        );

        std::fs::write(&file, &original).expect("restore");
        cache.put(&identifier, &table).await;
        std::fs::write(&file, &original[..original.len() - 1]).expect("truncate");
        assert!(cache.get(&identifier).await.is_none(), "shorter");

        std::fs::write(&file, &original).expect("restore");
        check("restored", true).await;
        std::fs::write(schema_dir.join("schema-1"), &original).expect("next schema");
        assert!(cache.get(&identifier).await.is_none(), "next schema file");
    }
}
