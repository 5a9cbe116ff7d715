//! Whose tables these are: that the cluster tiers into this very catalog,
//! and that a Fluss table belongs to this Paimon table and not to an earlier
//! one of its name; what a missing table means.

use super::*;

/// Where a Paimon catalog keeps its tables: what Fluss's `datalake.paimon.*`
/// server options and this crate's catalog options both describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LakeCatalog {
    pub(super) metastore: String,
    pub(super) warehouse: Option<String>,
    pub(super) uri: Option<String>,
}

impl LakeCatalog {
    pub(super) fn of_catalog(options: &HashMap<String, String>) -> Self {
        Self::new(
            options.get("metastore").map(String::as_str),
            options.get("warehouse").map(String::as_str),
            options.get("uri").map(String::as_str),
        )
    }

    pub(super) fn new(metastore: Option<&str>, warehouse: Option<&str>, uri: Option<&str>) -> Self {
        let metastore = metastore
            .unwrap_or("filesystem")
            .trim()
            .to_ascii_lowercase();
        let warehouse = warehouse.map(|w| {
            if metastore == "filesystem" {
                local_path(w)
            } else {
                w.trim().to_string()
            }
        });
        Self {
            metastore,
            warehouse,
            uri: uri.map(|u| u.trim().trim_end_matches('/').to_string()),
        }
    }

    pub(super) fn same_as(&self, other: &Self) -> bool {
        self.metastore == other.metastore
            && self.warehouse == other.warehouse
            && (self.metastore == "filesystem" || self.uri == other.uri)
    }
}

impl fmt::Display for LakeCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(metastore '{}'", self.metastore)?;
        if let Some(warehouse) = &self.warehouse {
            write!(f, ", warehouse '{warehouse}'")?;
        }
        if let Some(uri) = &self.uri {
            write!(f, ", uri '{uri}'")?;
        }
        write!(f, ")")
    }
}

/// A filesystem warehouse as a comparable path: no `file:` scheme, no
/// trailing slash, symbolic links resolved where the path exists.
pub(super) fn local_path(warehouse: &str) -> String {
    let trimmed = warehouse.trim();
    let path = crate::object_storage::without_file_scheme(trimmed).unwrap_or(trimmed);
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_string())
}

impl FlussStore {
    /// Checks, once per store, that the cluster tiers into Paimon and into
    /// this very catalog: otherwise the snapshot ids Fluss reports belong to
    /// other tables. A cluster that does not describe its configuration (no
    /// permission) is taken at its word.
    pub(super) async fn check_lake(&self, target: &Target) -> Result<()> {
        self.lake_checked
            .get_or_try_init(|| async {
                let admin = target.admin(&self.connection).await?;
                let configs = match target
                    .answer("describe the cluster for", admin.describe_cluster_configs())
                    .await?
                {
                    Ok(configs) => configs,
                    Err(e) if e.api_error().is_some() => return Ok(()),
                    Err(e) => return Err(target.fluss_error("describe the cluster for", e)),
                };
                let config = |key: &str| {
                    configs
                        .iter()
                        .find(|c| c.config_key == key)
                        .and_then(|c| c.config_value.clone())
                };
                let servers = self.options.bootstrap().to_string();
                match config("datalake.format") {
                    Some(format) if format.eq_ignore_ascii_case("paimon") => {}
                    other => {
                        return Err(FlussStoreError::OtherLake {
                            servers,
                            fluss: format!(
                                "of no Paimon lake (datalake.format is {})",
                                other.map_or("unset".to_string(), |f| format!("'{f}'"))
                            ),
                            ours: self.lake.to_string(),
                        }
                        .into())
                    }
                }
                let fluss = LakeCatalog::new(
                    config("datalake.paimon.metastore").as_deref(),
                    config("datalake.paimon.warehouse").as_deref(),
                    config("datalake.paimon.uri").as_deref(),
                );
                if !fluss.same_as(&self.lake) {
                    return Err(FlussStoreError::OtherLake {
                        servers,
                        fluss: fluss.to_string(),
                        ours: self.lake.to_string(),
                    }
                    .into());
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Refuses an existing Fluss table that was written to when the Paimon
    /// table was never served by Fluss (it lacks the system columns Fluss's
    /// tiering adds, which stay once added): the Fluss table belongs to an
    /// earlier table of the name. An empty one (made by hand, say) is fine.
    pub(super) async fn check_not_leftover(
        &self,
        table: &Table,
        target: &Target,
        info: &TableInfo,
    ) -> Result<()> {
        if schema::user_fields(table).len() < table.schema().fields().len() {
            return Ok(());
        }
        let latest = self.latest_offsets(target, info).await?;
        let records: i64 = latest.values().map(|o| (*o).max(0)).sum();
        if records == 0 {
            return Ok(());
        }
        // `table` is as the statement read it: another process's attach
        // (a `CREATE TABLE IF NOT EXISTS` beside this `CREATE`) may have
        // served it from Fluss since, and written.
        let now = self.catalog.get_table(table.identifier()).await?;
        if schema::user_fields(&now).len() < now.schema().fields().len() {
            return Ok(());
        }
        Err(FlussStoreError::Leftover {
            table: target.name.clone(),
            servers: target.servers.clone(),
            records,
        }
        .into())
    }

    /// A missing Fluss table as the truth: if the Paimon table was dropped
    /// too, the statement's table is gone; if it is still there, turning the
    /// mode on attaches a Fluss table, as [`Error::StoreTableMissing`] advises.
    pub(super) async fn explain_missing(
        &self,
        table: &Table,
        target: &Target,
        error: Error,
        what: &str,
    ) -> Error {
        if !matches!(error, Error::StoreTableMissing { .. }) {
            return self.diagnose(target, error, what).await;
        }
        match self.catalog.get_table(table.identifier()).await {
            Err(paimon::Error::TableNotExist { .. }) => FlussStoreError::Dropped {
                table: target.name.clone(),
                what: what.to_string(),
            }
            .into(),
            _ => self.confirm_missing(target, error, what).await,
        }
    }

    /// A failure to reach or use the table, with its likely cause when
    /// Fluss's coordinator lists no tablet server: then no bucket has a
    /// leader, and Fluss's own answers (unknown tables, missing metadata,
    /// refused connections) do not say so.
    pub(super) async fn diagnose(&self, target: &Target, error: Error, what: &str) -> Error {
        let relevant = match &error {
            Error::StoreUnavailable { .. } => true,
            Error::StoreFailed { source, .. } => matches!(
                source.downcast_ref::<FlussStoreError>(),
                Some(FlussStoreError::Client { .. } | FlussStoreError::NotSeen { .. })
            ),
            _ => false,
        };
        if !relevant {
            return error;
        }
        let Ok(admin) = self.connection.admin().await else {
            return error;
        };
        let nodes =
            match tokio::time::timeout(target.request_timeout, admin.get_server_nodes()).await {
                Ok(Ok(nodes)) => nodes,
                _ => return error,
            };
        if nodes
            .iter()
            .any(|node| matches!(node.server_type(), ServerType::TabletServer))
        {
            return error;
        }
        Error::StoreUnavailable {
            store: IDENTIFIER.to_string(),
            reason: format!(
                "the Fluss cluster at bootstrap servers '{}' has no tablet server running (its \
                 coordinator lists none), so '{}' cannot be {what}: start the cluster's tablet \
                 servers. What failed: {error}",
                target.servers, target.name
            ),
        }
    }

    /// A [`Error::StoreTableMissing`] some server gave, checked with Fluss's
    /// coordinator, which alone decides: a tablet server that is down,
    /// restarting or behind on metadata answers "no such table" too.
    pub(super) async fn confirm_missing(&self, target: &Target, error: Error, what: &str) -> Error {
        let operation = match what {
            "read" => "read",
            "written" => "write to",
            other => other,
        };
        let admin = match target.admin(&self.connection).await {
            Ok(admin) => admin,
            Err(e) => return e,
        };
        match target
            .answer("check whether it has", admin.table_exists(&target.path))
            .await
        {
            Ok(Ok(false)) => error,
            Ok(Ok(true)) => FlussStoreError::NotSeen {
                table: target.name.clone(),
                servers: target.servers.clone(),
                operation: operation.to_string(),
            }
            .into(),
            Ok(Err(e)) => target.unavailable(
                operation,
                format!(
                    "a server answered that the table does not exist, and Fluss's \
                     coordinator could not be asked whether it does: {}",
                    describe(&e)
                ),
            ),
            Err(e) => target.unavailable(
                operation,
                format!(
                    "a server answered that the table does not exist, and Fluss's \
                     coordinator could not be asked whether it does: {e}"
                ),
            ),
        }
    }

    /// The error of a write that had sent rows when Fluss said the table is
    /// gone: rows sent to a dropped table are in no table that exists, which
    /// the coordinator confirms; if it still has the writer's table, the
    /// outcome is unknown.
    pub(super) async fn after_sending_to_gone(
        &self,
        target: &Target,
        writer: &Writer,
        error: Error,
    ) -> Error {
        let change = match self.table_info(target).await {
            Err(Error::StoreTableMissing { .. }) => "dropped",
            Ok(info) if info.get_table_id() != writer.incarnation.table_id => {
                "dropped and created again"
            }
            _ => {
                return FlussStoreError::OutcomeUnknown {
                    table: target.name.clone(),
                    servers: target.servers.clone(),
                    cause: error.to_string(),
                }
                .into()
            }
        };
        target.replaced(change, WHILE_WRITING, SENT_TO_DROPPED)
    }
}
