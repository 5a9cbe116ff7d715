//! A Paimon catalog whose tables commit safely: every table it returns is
//! reopened on a file IO whose commits never replace a snapshot another
//! commit created ([`super::commit`] on S3, [`super::local`] on local disk).
//! Wrapped once, in [`crate::LakeStreamCatalog::new`], so the lake-stream
//! decorator and the stores it serves see the same tables.
//!
//! Every other trait method is forwarded ([`super::forward`]). Those of a
//! file-system catalog that write schema files (`create_table`,
//! `alter_table`) are made on the same file IO instead ([`super::ddl`]), so
//! that those files too are published whole; the lake-stream catalog makes
//! tags itself, on the tables this catalog returns
//! ([`crate::maintenance::tags`]).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use paimon::catalog::{Catalog, Identifier, LoadedTable};
use paimon::io::FileIO;
use paimon::spec::{Schema, SchemaChange};
use paimon::table::Table;

use super::{is_local, is_s3};

/// Where a catalog's warehouse is, for the file IO its tables get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Warehouse {
    S3,
    Local,
}

impl Warehouse {
    fn of(location: &str) -> Option<Self> {
        if is_s3(location) {
            Some(Self::S3)
        } else if is_local(location) {
            Some(Self::Local)
        } else {
            None
        }
    }
}

/// `inner` with safe commits when its warehouse is on S3 or on local disk
/// (a REST catalog's tables commit through the catalog, and are returned as
/// they are); otherwise `None`: `inner` itself serves.
pub(super) fn guard(
    inner: Arc<dyn Catalog>,
    catalog_options: &HashMap<String, String>,
) -> Option<Arc<SafeCommits>> {
    // A catalog built by the caller may come with lake-stream options only:
    // a file-system catalog names its warehouse itself.
    let warehouse = match catalog_options.get("warehouse") {
        Some(warehouse) => warehouse.clone(),
        None => match inner
            .as_any()
            .and_then(|any| any.downcast_ref::<paimon::FileSystemCatalog>())
        {
            Some(catalog) => catalog.warehouse().to_string(),
            None => return None,
        },
    };
    let warehouse = warehouse.as_str();
    let s3 = super::S3Options::from_options(catalog_options);
    let file_io = match Warehouse::of(warehouse) {
        #[cfg(feature = "s3")]
        Some(Warehouse::S3) => super::commit::file_io(&s3, None),
        Some(Warehouse::Local) => super::local::file_io(),
        _ => return None,
    };
    Some(Arc::new(SafeCommits {
        inner,
        location: warehouse.to_string(),
        warehouse: Warehouse::of(warehouse).unwrap_or(Warehouse::Local),
        // Cannot fail (neither file IO needs configuration); were it to,
        // the tables would fail to open rather than commit unsafely.
        file_io: file_io.map_err(|e| e.to_string()),
        s3,
    }))
}

pub(super) struct SafeCommits {
    inner: Arc<dyn Catalog>,
    /// The warehouse's location, as the catalog has it.
    location: String,
    warehouse: Warehouse,
    /// One file IO for all the catalog's tables (one client per bucket).
    file_io: Result<FileIO, String>,
    /// The catalog's S3 options: its schema lease is reached with them.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    s3: super::S3Options,
}

impl SafeCommits {
    /// Runs `work`, `statement` (`CREATE TABLE db.t`, for its errors),
    /// holding database `database`'s schema lock ([`super::schema_lock`]):
    /// a file lock on local disk, a lease on S3.
    async fn with_schema_lock<T>(
        &self,
        (statement, database): (&str, &str),
        work: impl std::future::Future<Output = paimon::Result<T>>,
    ) -> paimon::Result<T> {
        match self.warehouse {
            Warehouse::Local => {
                let _ = statement;
                super::schema_lock::with_local_schema_lock(&self.location, database, work).await
            }
            #[cfg(feature = "s3")]
            Warehouse::S3 => {
                super::schema_lock::with_schema_lease(
                    &self.location,
                    &self.s3,
                    (statement, database),
                    work,
                )
                .await
            }
            #[cfg(not(feature = "s3"))]
            Warehouse::S3 => work.await,
        }
    }

    /// The wrapped catalog as paimon's file-system catalog, with the file IO
    /// its DDL writes through ([`super::ddl`]); `None` for other catalogs.
    fn filesystem(&self) -> paimon::Result<Option<(&paimon::FileSystemCatalog, &FileIO)>> {
        let Some(catalog) = self
            .inner
            .as_any()
            .and_then(|any| any.downcast_ref::<paimon::FileSystemCatalog>())
        else {
            return Ok(None);
        };
        match &self.file_io {
            Ok(file_io) => Ok(Some((catalog, file_io))),
            Err(message) => Err(paimon::Error::ConfigInvalid {
                message: message.clone(),
            }),
        }
    }

    /// `ALTER TABLE` under the database's schema lock, with `check` run on
    /// the schema the changes are applied to, each time they are (see
    /// [`super::GuardedCatalog::alter_table_checked`]). A catalog other
    /// than a file-system one applies them itself, after `check` on the
    /// schema it answers under the lock (which only this crate's processes
    /// take).
    pub(super) async fn alter_table_checked(
        &self,
        identifier: &Identifier,
        changes: Vec<SchemaChange>,
        ignore_if_not_exists: bool,
        check: &super::SchemaCheck<'_>,
    ) -> paimon::Result<()> {
        let alter = async {
            match self.filesystem()? {
                Some((catalog, file_io)) => {
                    super::ddl::alter_table(
                        catalog,
                        file_io,
                        identifier,
                        changes,
                        ignore_if_not_exists,
                        check,
                    )
                    .await
                }
                None => {
                    match self.inner.get_table(identifier).await {
                        Ok(table) => check(table.schema())?,
                        // The catalog reports a missing table its own way.
                        Err(paimon::Error::TableNotExist { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    self.inner
                        .alter_table(identifier, changes, ignore_if_not_exists)
                        .await
                }
            }
        };
        let statement = format!("ALTER TABLE {}", identifier.full_name());
        self.with_schema_lock((&statement, identifier.database()), alter)
            .await
    }

    /// `table` on the catalog's file IO, when it lives where the warehouse
    /// does and commits through its files.
    fn guard(&self, table: Table) -> paimon::Result<Table> {
        if table.rest_env().is_some() || Warehouse::of(table.location()) != Some(self.warehouse) {
            return Ok(table);
        }
        match &self.file_io {
            Ok(file_io) => super::reopen(&table, file_io.clone()),
            Err(message) => Err(paimon::Error::ConfigInvalid {
                message: message.clone(),
            }),
        }
    }
}

#[async_trait]
impl super::forward::Decorator for SafeCommits {
    fn wrapped(&self) -> &dyn Catalog {
        self.inner.as_ref()
    }

    async fn drop_database(
        &self,
        name: &str,
        ignore_if_not_exists: bool,
        cascade: bool,
    ) -> paimon::Result<()> {
        self.with_schema_lock(
            (&format!("DROP DATABASE {name}"), name),
            self.inner
                .drop_database(name, ignore_if_not_exists, cascade),
        )
        .await
    }

    async fn get_table(&self, identifier: &Identifier) -> paimon::Result<Table> {
        self.guard(self.inner.get_table(identifier).await?)
    }

    async fn load_table(&self, identifier: &Identifier) -> paimon::Result<LoadedTable> {
        match self.inner.load_table(identifier).await? {
            LoadedTable::Paimon(table) => Ok(LoadedTable::Paimon(Box::new(self.guard(*table)?))),
            other => Ok(other),
        }
    }

    async fn create_table(
        &self,
        identifier: &Identifier,
        creation: Schema,
        ignore_if_exists: bool,
    ) -> paimon::Result<()> {
        let create = async {
            match self.filesystem()? {
                Some((catalog, file_io)) if super::ddl::creates(&creation)? => {
                    super::ddl::create_table(
                        catalog,
                        file_io,
                        identifier,
                        creation,
                        ignore_if_exists,
                    )
                    .await
                }
                _ => {
                    self.inner
                        .create_table(identifier, creation, ignore_if_exists)
                        .await
                }
            }
        };
        let statement = format!("CREATE TABLE {}", identifier.full_name());
        self.with_schema_lock((&statement, identifier.database()), create)
            .await
    }

    async fn drop_table(
        &self,
        identifier: &Identifier,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        self.with_schema_lock(
            (
                &format!("DROP TABLE {}", identifier.full_name()),
                identifier.database(),
            ),
            self.inner.drop_table(identifier, ignore_if_not_exists),
        )
        .await
    }

    async fn rename_table(
        &self,
        from: &Identifier,
        to: &Identifier,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        // Both databases' locks, in one order for every process.
        let (first, second) = if from.database() <= to.database() {
            (from.database(), to.database())
        } else {
            (to.database(), from.database())
        };
        let rename = self.inner.rename_table(from, to, ignore_if_not_exists);
        let statement = format!(
            "ALTER TABLE {} RENAME TO {}",
            from.full_name(),
            to.full_name()
        );
        if first == second {
            return self.with_schema_lock((&statement, first), rename).await;
        }
        self.with_schema_lock(
            (&statement, first),
            self.with_schema_lock((&statement, second), rename),
        )
        .await
    }

    async fn alter_table(
        &self,
        identifier: &Identifier,
        changes: Vec<SchemaChange>,
        ignore_if_not_exists: bool,
    ) -> paimon::Result<()> {
        self.alter_table_checked(identifier, changes, ignore_if_not_exists, &|_| Ok(()))
            .await
    }
}

super::forward::impl_catalog!(SafeCommits);
