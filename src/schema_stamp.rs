//! Whether a table handle is still the table on disk: the one check that
//! the table cache, maintenance, the local store and the store sink make.
//!
//! A `Table` of a filesystem catalog carries the schema it was loaded
//! with, from the file `schema/schema-<id>`. The handle is still the
//! table's while that file holds that schema, compared whole: a
//! `DROP TABLE` removes the file, and a `CREATE TABLE` of the same name
//! writes a new `schema-0`, whose creation time two tables made in the same
//! millisecond share, so the time alone is not enough. It is the newest
//! schema while `schema-<id+1>` does not exist: an `ALTER TABLE` (an
//! option, a column, the lake-stream mode) writes that file.
//!
//! This crate's catalog publishes schema files whole, but paimon's own
//! catalog and other engines write them in place, so a read can meet one
//! half-written. Such a read is made again on one schedule ([`settled`])
//! before the file is called unreadable.
//!
//! Tables of a REST catalog carry their server's schema, whose times need
//! not be the files': they are [`Freshness::Current`] here, and callers
//! that must know ask the server.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use paimon::io::FileRead;
use paimon::spec::TableSchema;
use paimon::table::Table;

use crate::retry::{Retry, Try};

/// What the files say of a table handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Its schema file holds its schema, and there is no newer one.
    Current,
    /// Its schema file holds its schema, and a newer one exists.
    Altered,
    /// Its schema file is gone or holds another schema: the table was
    /// dropped (and perhaps created again) since the handle was loaded.
    Replaced,
}

/// The schema file a handle was loaded from, as read, once it was seen to
/// hold the handle's schema: later checks compare bytes, not JSON.
#[derive(Debug, Clone)]
pub(crate) struct SchemaStamp {
    bytes: Bytes,
}

/// How a read of a schema file that does not parse is made again: five
/// reads, pausing 20, 40, 80 and 160 ms.
const SETTLE: Retry = Retry::growing(5, Duration::from_millis(20), Duration::from_millis(160));

/// `read`, made again while it fails as a file that does not parse
/// (`DataInvalid`: a schema file read mid-write) on one schedule
/// ([`SETTLE`]), then its last answer.
pub(crate) async fn settled<T, F>(mut read: impl FnMut() -> F) -> paimon::Result<T>
where
    F: Future<Output = paimon::Result<T>>,
{
    SETTLE
        .run(|| {
            let reading = read();
            async move {
                match reading.await {
                    Err(e @ paimon::Error::DataInvalid { .. }) => Ok(Try::Again(e)),
                    answer => answer.map(Try::Done),
                }
            }
        })
        .await
}

fn schema_path(table: &Table, id: i64) -> String {
    format!(
        "{}/schema/schema-{id}",
        table.location().trim_end_matches('/')
    )
}

/// Whether `table`'s files hold a schema after the handle's. One existence
/// check.
pub(crate) async fn has_newer_schema(table: &Table) -> paimon::Result<bool> {
    let next = schema_path(table, table.schema().id() + 1);
    table.file_io().new_input(&next)?.exists().await
}

/// The newest schema file of `table`'s files (`None`: there is none, the
/// table is gone).
pub(crate) async fn latest_schema(table: &Table) -> paimon::Result<Option<Arc<TableSchema>>> {
    let manager =
        paimon::table::SchemaManager::new(table.file_io().clone(), table.location().to_string());
    settled(|| manager.latest()).await
}

/// Whether `file`, the schema a schema file holds, is the one `handle`
/// was loaded from: the same, or the same without trailing columns (a
/// store's own columns that the catalog hides, [`without_trailing_fields`]),
/// which keeps everything else, the highest field id included. A table
/// made again with more columns has a higher field id than its
/// predecessor's handle, so it is not taken for it.
fn holds(file: &TableSchema, handle: &TableSchema) -> bool {
    if file == handle {
        return true;
    }
    let kept = handle.fields().len();
    kept < file.fields().len()
        && file.fields()[..kept] == *handle.fields()
        && without_trailing_fields(file, kept).is_ok_and(|shown| shown == *handle)
}

/// `schema` with its first `kept` columns only, field ids and the highest
/// field id as they are. (`TableSchema` has no constructor that keeps
/// them; its serialized form does.)
pub(crate) fn without_trailing_fields(
    schema: &TableSchema,
    kept: usize,
) -> Result<TableSchema, serde_json::Error> {
    let mut copy = serde_json::to_value(schema)?;
    if let Some(serde_json::Value::Array(fields)) = copy.get_mut("fields") {
        fields.truncate(kept);
    }
    serde_json::from_value(copy)
}

/// What the files say of `table` (see the module docs). One read of its
/// schema file and one existence check, made at once.
pub(crate) async fn freshness(table: &Table) -> paimon::Result<Freshness> {
    if table.rest_env().is_some() {
        return Ok(Freshness::Current);
    }
    let (stamp, newer) = futures::join!(SchemaStamp::of(table), has_newer_schema(table));
    Ok(match (stamp?, newer?) {
        (None, _) => Freshness::Replaced,
        (Some(_), true) => Freshness::Altered,
        (Some(_), false) => Freshness::Current,
    })
}

impl SchemaStamp {
    /// `table`'s schema file, if it holds the handle's schema, whole.
    /// `None`: the file is gone or holds another schema.
    pub(crate) async fn of(table: &Table) -> paimon::Result<Option<Self>> {
        let path = schema_path(table, table.schema().id());
        let input = table.file_io().new_input(&path)?;
        let read = settled(|| async {
            let bytes = match input.read().await {
                Ok(bytes) => bytes,
                Err(_) if !input.exists().await? => return Ok(None),
                Err(e) => return Err(e),
            };
            let schema = serde_json::from_slice::<TableSchema>(&bytes).map_err(|e| {
                paimon::Error::DataInvalid {
                    message: format!("schema file {path} does not parse"),
                    source: Some(Box::new(e)),
                }
            })?;
            Ok(Some((bytes, schema)))
        })
        .await;
        match read {
            Ok(Some((bytes, schema))) if holds(&schema, table.schema()) => Ok(Some(Self { bytes })),
            Ok(_) => Ok(None),
            // Still not parsing after the waits: not the handle's schema.
            Err(paimon::Error::DataInvalid { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What the files say of `table`, loaded with this stamp: its schema
    /// file still starts with the stamp's bytes, and no newer one exists.
    /// Read as many bytes as the stamp has: a schema file is one JSON
    /// object, so a file whose first bytes are the whole object read before
    /// holds that object and nothing else, and a shorter file fails the
    /// read. (A read without a range makes opendal's file-system reader
    /// zero-fill a buffer of its 2 MiB maximum for a file of a few hundred
    /// bytes.)
    pub(crate) async fn check(&self, table: &Table) -> paimon::Result<Freshness> {
        let expected = self.bytes.len() as u64;
        let path = schema_path(table, table.schema().id());
        let this = async {
            let reader = table.file_io().new_input(&path)?.reader().await?;
            reader.read(0..expected).await
        };
        let (this, newer) = futures::join!(this, has_newer_schema(table));
        if this.ok().as_ref() != Some(&self.bytes) {
            return Ok(Freshness::Replaced);
        }
        Ok(if newer? {
            Freshness::Altered
        } else {
            Freshness::Current
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use std::collections::HashMap;

    use paimon::catalog::{Catalog, Identifier};
    use paimon::spec::{DataType, IntType, Schema};
    use paimon::{CatalogFactory, Options};

    use super::*;

    /// A file-system warehouse in `dir` with one table, `db.t (id INT)`,
    /// and a handle on it.
    pub(crate) async fn table_in(dir: &std::path::Path) -> (Arc<dyn Catalog>, Identifier, Table) {
        let options = HashMap::from([("warehouse".to_string(), dir.display().to_string())]);
        let catalog = CatalogFactory::create(Options::from_map(options))
            .await
            .expect("catalog");
        catalog
            .create_database("db", false, HashMap::new())
            .await
            .expect("database");
        let identifier = Identifier::new("db", "t");
        let schema = Schema::builder()
            .column("id", DataType::Int(IntType::new()))
            .build()
            .expect("schema");
        catalog
            .create_table(&identifier, schema, false)
            .await
            .expect("table");
        let table = catalog.get_table(&identifier).await.expect("load");
        (catalog, identifier, table)
    }

    fn schema_file(dir: &std::path::Path, id: i64) -> std::path::PathBuf {
        dir.join("db.db")
            .join("t")
            .join("schema")
            .join(format!("schema-{id}"))
    }

    /// Each way a handle stops being the table's, seen by both the one-look
    /// check and a kept stamp, including a table made again whose schema
    /// differs from the handle's in its time alone: the old checks of
    /// maintenance and the local store compared only the time, and took a
    /// file with another schema of the same time for the handle's.
    #[tokio::test]
    async fn a_handle_is_current_until_its_table_is_altered_or_replaced() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_catalog, _identifier, table) = table_in(dir.path()).await;
        let stamp = SchemaStamp::of(&table)
            .await
            .expect("read")
            .expect("the handle's schema");
        assert_eq!(freshness(&table).await.expect("check"), Freshness::Current);
        assert_eq!(
            stamp.check(&table).await.expect("check"),
            Freshness::Current
        );

        let file = schema_file(dir.path(), 0);
        let original = std::fs::read(&file).expect("schema-0");

        // An ALTER writes the next schema file.
        std::fs::write(schema_file(dir.path(), 1), &original).expect("schema-1");
        assert_eq!(freshness(&table).await.expect("check"), Freshness::Altered);
        assert_eq!(
            stamp.check(&table).await.expect("check"),
            Freshness::Altered
        );
        std::fs::remove_file(schema_file(dir.path(), 1)).expect("remove schema-1");

        // Made again with the same time but another column: not the handle's.
        let mut other: serde_json::Value = serde_json::from_slice(&original).expect("json");
        other["fields"][0]["name"] = serde_json::Value::from("other");
        std::fs::write(&file, serde_json::to_vec(&other).expect("json")).expect("rewrite");
        assert_eq!(freshness(&table).await.expect("check"), Freshness::Replaced);
        assert_eq!(
            stamp.check(&table).await.expect("check"),
            Freshness::Replaced
        );

        // Dropped: the file is gone.
        std::fs::remove_file(&file).expect("drop");
        assert_eq!(freshness(&table).await.expect("check"), Freshness::Replaced);
        assert_eq!(
            stamp.check(&table).await.expect("check"),
            Freshness::Replaced
        );
        assert!(SchemaStamp::of(&table).await.expect("read").is_none());

        // Half-written for good: not the handle's, after the waits.
        std::fs::write(&file, &original[..original.len() / 2]).expect("half");
        assert_eq!(freshness(&table).await.expect("check"), Freshness::Replaced);
        assert_eq!(
            stamp.check(&table).await.expect("check"),
            Freshness::Replaced
        );

        // Whole again: current again.
        std::fs::write(&file, &original).expect("whole");
        assert_eq!(freshness(&table).await.expect("check"), Freshness::Current);
        assert_eq!(
            stamp.check(&table).await.expect("check"),
            Freshness::Current
        );
    }

    /// A handle whose trailing columns the catalog hides (a store's own
    /// columns) is the table's while its file is: it keeps the file's
    /// highest field id. A table made again in the same millisecond with a
    /// column more is not taken for the narrower table's handle.
    #[tokio::test]
    async fn a_handle_with_hidden_trailing_columns_is_checked_like_any() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (catalog, identifier, narrow) = table_in(dir.path()).await;
        let file = schema_file(dir.path(), 0);
        let original = std::fs::read(&file).expect("schema-0");
        let mut wider: serde_json::Value = serde_json::from_slice(&original).expect("json");
        let mut extra = wider["fields"][0].clone();
        extra["id"] = serde_json::Value::from(1);
        extra["name"] = serde_json::Value::from("__offset");
        if let Some(fields) = wider["fields"].as_array_mut() {
            fields.push(extra);
        }
        wider["highestFieldId"] = serde_json::Value::from(1);
        std::fs::write(&file, serde_json::to_vec(&wider).expect("json")).expect("rewrite");

        // The narrower table's handle, its file now a wider table's.
        assert_eq!(
            freshness(&narrow).await.expect("check"),
            Freshness::Replaced
        );
        assert!(SchemaStamp::of(&narrow).await.expect("read").is_none());

        // The wider table's handle, its last column hidden.
        let wide = catalog.get_table(&identifier).await.expect("load");
        assert_eq!(wide.schema().fields().len(), 2);
        let shown = without_trailing_fields(wide.schema(), 1).expect("copy");
        let hidden = wide
            .copy_with_resolved_schema(shown, wide.branch())
            .expect("a handle without the last column");
        assert_eq!(freshness(&hidden).await.expect("check"), Freshness::Current);
        let stamp = SchemaStamp::of(&hidden)
            .await
            .expect("read")
            .expect("the hidden handle's schema file");
        assert_eq!(
            stamp.check(&hidden).await.expect("check"),
            Freshness::Current
        );
        // Its file replaced by the narrower table's again: not the handle's.
        std::fs::write(&file, &original).expect("rewrite");
        assert_eq!(
            freshness(&hidden).await.expect("check"),
            Freshness::Replaced
        );
    }

    /// A read that meets a half-written file is made again; other errors
    /// and answers are returned at once.
    #[tokio::test]
    async fn a_read_that_does_not_parse_is_made_again() {
        let reads = AtomicUsize::new(0);
        let answer = settled(|| async {
            match reads.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(paimon::Error::DataInvalid {
                    message: "mid-write".into(),
                    source: None,
                }),
                n => Ok(n),
            }
        })
        .await
        .expect("settles");
        assert_eq!(answer, 2);

        let reads = AtomicUsize::new(0);
        let never: paimon::Result<()> = settled(|| async {
            reads.fetch_add(1, Ordering::SeqCst);
            Err(paimon::Error::DataInvalid {
                message: "never whole".into(),
                source: None,
            })
        })
        .await;
        assert!(never.is_err());
        assert_eq!(reads.load(Ordering::SeqCst), SETTLE.tries as usize);

        let reads = AtomicUsize::new(0);
        let other: paimon::Result<()> = settled(|| async {
            reads.fetch_add(1, Ordering::SeqCst);
            Err(paimon::Error::Unsupported {
                message: "other".into(),
            })
        })
        .await;
        assert!(matches!(other, Err(paimon::Error::Unsupported { .. })));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }
}
