//! A table's Fluss side as one read or write sees it: its calls, bounded
//! by the request timeout and retried while Fluss says "not yet".

use super::*;
use crate::retry::{Retry, Try};

/// A table's Fluss side as one read or write sees it.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) path: TablePath,
    /// The Paimon table's full name (the Fluss table has the same).
    pub(crate) name: String,
    pub(crate) servers: String,
    pub(crate) request_timeout: Duration,
    pub(crate) primary_key: bool,
    /// Whether a read was planned on the table: a table missing after that
    /// was dropped since, not never attached.
    pub(crate) planned: bool,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// The cluster's admin client, for a call about this table: a cluster
    /// that cannot be reached fails as [`Self::fluss_error`] says.
    pub(crate) async fn admin(
        &self,
        connection: &FlussConnection,
    ) -> Result<Arc<fluss::client::FlussAdmin>> {
        connection
            .admin()
            .await
            .map_err(|e| self.fluss_error("reach", e))
    }

    /// A fluss-rs error as the crate's: a missing table, an unreachable
    /// cluster (named by its bootstrap servers), or a failure. A table
    /// missing under a planned read was dropped after the planning.
    pub(crate) fn fluss_error(&self, operation: &str, error: fluss::error::Error) -> Error {
        if is_gone(&error) {
            return if self.planned {
                self.replaced(
                    "dropped (and perhaps created again)",
                    AFTER_PLANNING,
                    RUN_THE_READ_AGAIN,
                )
            } else {
                Error::StoreTableMissing {
                    store: IDENTIFIER.to_string(),
                    table: self.name.clone(),
                }
            };
        }
        if error.api_error() == Some(FlussError::NetworkException) {
            return self.unavailable(operation, describe(&error));
        }
        match error {
            fluss::error::Error::RpcError { .. }
            | fluss::error::Error::IoUnexpectedError { .. } => {
                self.unavailable(operation, describe(&error))
            }
            source => FlussStoreError::Client {
                servers: self.servers.clone(),
                operation: operation.to_string(),
                table: self.name.clone(),
                source: Box::new(source),
            }
            .into(),
        }
    }

    /// The error of a statement whose Fluss table was dropped (`change`
    /// says how) `when`.
    pub(crate) fn replaced(&self, change: &str, when: &str, consequence: &str) -> Error {
        FlussStoreError::Replaced {
            table: self.name.clone(),
            change: change.to_string(),
            when: when.to_string(),
            consequence: consequence.to_string(),
        }
        .into()
    }

    pub(crate) fn unavailable(&self, operation: &str, reason: impl fmt::Display) -> Error {
        Error::StoreUnavailable {
            store: IDENTIFIER.to_string(),
            reason: format!(
                "the Fluss cluster at bootstrap servers '{}' could not {operation} '{}': {reason}",
                self.servers, self.name
            ),
        }
    }

    /// The error of a call that got no answer within the request timeout.
    pub(super) fn no_answer(&self, operation: &str) -> Error {
        self.unavailable(
            operation,
            format!(
                "no answer within {:?} (fluss.client.request-timeout)",
                self.request_timeout
            ),
        )
    }

    /// Runs a fluss-rs call within the request timeout and hands back
    /// Fluss's own answer, for callers that look into its errors.
    pub(crate) async fn answer<T>(
        &self,
        operation: &str,
        call: impl Future<Output = fluss::error::Result<T>>,
    ) -> Result<fluss::error::Result<T>> {
        tokio::time::timeout(self.request_timeout, call)
            .await
            .map_err(|_| self.no_answer(operation))
    }

    /// Runs a fluss-rs call within the request timeout.
    pub(crate) async fn bounded<T>(
        &self,
        operation: &str,
        call: impl Future<Output = fluss::error::Result<T>>,
    ) -> Result<T> {
        self.answer(operation, call)
            .await?
            .map_err(|e| self.fluss_error(operation, e))
    }

    /// Like [`Self::bounded`], for idempotent calls: retried while the cluster
    /// answers that it is not ready yet (a new table's buckets have no
    /// leader for a moment), within the request timeout.
    pub(crate) async fn retrying<T, F, Fut>(&self, operation: &str, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = fluss::error::Result<T>>,
    {
        self.retrying_when(operation, is_transient, call).await
    }

    /// How a call is tried again while Fluss says "not yet": pauses from
    /// 50 ms doubling to 1 s, no try starting past the request timeout.
    fn not_yet(&self) -> Retry {
        Retry::growing(u32::MAX, Duration::from_millis(50), Duration::from_secs(1))
            .within(self.request_timeout)
    }

    /// Like [`Self::retrying`], retried while `transient` says so.
    pub(crate) async fn retrying_when<T, F, Fut>(
        &self,
        operation: &str,
        transient: impl Fn(&fluss::error::Error) -> bool,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = fluss::error::Result<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        self.not_yet()
            .run(|| {
                let called = tokio::time::timeout_at(deadline, call());
                let transient = &transient;
                async move {
                    match called.await {
                        Ok(Ok(value)) => Ok(Try::Done(value)),
                        Ok(Err(e)) if transient(&e) => {
                            Ok(Try::Again(self.fluss_error(operation, e)))
                        }
                        Ok(Err(e)) => Err(self.fluss_error(operation, e)),
                        Err(_) => Err(self.no_answer(operation)),
                    }
                }
            })
            .await
    }

    /// A handle of the Fluss table `table_id`: the one a read was planned on,
    /// or the one Fluss's coordinator named for a write. The handle comes from
    /// the connection's metadata, which a tablet server may answer from a
    /// view older than the coordinator's; an older id or no table is asked of
    /// the coordinator, and tried again while it still names `table_id`. A
    /// table dropped (or dropped and created again) since is an error that
    /// says so, `when` and with what `consequence`.
    pub(crate) async fn table<'c>(
        &self,
        connection: &'c FlussConnection,
        table_id: i64,
        when: &str,
        consequence: &str,
    ) -> Result<FlussTable<'c>> {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        self.not_yet()
            .run(|| async move {
                let seen = match tokio::time::timeout_at(deadline, connection.get_table(&self.path))
                    .await
                    .map_err(|_| self.no_answer("open"))?
                {
                    Ok(table) if table.get_table_info().get_table_id() == table_id => {
                        return Ok(Try::Done(table))
                    }
                    Ok(table) => Ok(Some(table.get_table_info().get_table_id())),
                    Err(e) if is_gone(&e) => Ok(None),
                    // A tablet server reports a table dropped under it in
                    // other ways too (an unknown error wrapping Fluss's "does
                    // not exist"): the coordinator decides.
                    Err(e) => Err(e),
                };
                // Table ids only grow: a newer one means the table was
                // created again.
                if matches!(seen, Ok(Some(id)) if id > table_id) {
                    return Err(self.replaced("dropped and created again", when, consequence));
                }
                let admin = self.admin(connection).await?;
                let current =
                    match tokio::time::timeout_at(deadline, admin.get_table_info(&self.path))
                        .await
                        .map_err(|_| self.no_answer("describe"))?
                    {
                        Ok(info) => Some(info.get_table_id()),
                        Err(e) if is_gone(&e) => None,
                        Err(e) => return Err(self.fluss_error("describe", e)),
                    };
                match current {
                    None => return Err(self.replaced("dropped", when, consequence)),
                    Some(id) if id != table_id => {
                        return Err(self.replaced("dropped and created again", when, consequence))
                    }
                    Some(_) => {}
                }
                // The coordinator still names the table: an error was about
                // something else, and an older id or no table is metadata
                // that has not caught up yet.
                let seen = seen.map_err(|e| self.fluss_error("open", e))?;
                Ok(Try::Again(self.unavailable(
                    "open",
                    format!(
                        "Fluss's coordinator names table id {table_id}, but the metadata its \
                         tablet servers give still {} after {:?} (fluss.client.request-timeout)",
                        seen.map_or("has no such table".to_string(), |id| format!(
                            "names table id {id}"
                        )),
                        self.request_timeout
                    ),
                )))
            })
            .await
    }

    /// A handle of the Fluss table a read was planned on.
    pub(crate) async fn planned<'c>(
        &self,
        connection: &'c FlussConnection,
        table_id: i64,
    ) -> Result<FlussTable<'c>> {
        self.table(connection, table_id, AFTER_PLANNING, RUN_THE_READ_AGAIN)
            .await
    }
}

/// Since when a planned read's table may have changed.
pub(super) const AFTER_PLANNING: &str = "after this read was planned";

/// What a read whose table changed after planning should do.
pub(super) const RUN_THE_READ_AGAIN: &str =
    "the rows the read planned went with the dropped table. Run the query again to read the \
     table as it is now";

/// Whether a fluss-rs error says the table (or its database) does not exist.
pub(super) fn is_gone(error: &fluss::error::Error) -> bool {
    matches!(
        error.api_error(),
        Some(FlussError::TableNotExist | FlussError::DatabaseNotExist)
    )
}

/// Whether a fluss-rs error says "not yet" rather than "no".
pub(super) fn is_transient(error: &fluss::error::Error) -> bool {
    match error {
        fluss::error::Error::FlussAPIError { api_error } => {
            api_error.is_retriable()
                && FlussError::for_code(api_error.code) != FlussError::NetworkException
        }
        // fluss-rs reports a bucket whose leader is not elected yet this way.
        fluss::error::Error::UnexpectedError { message, .. } => message.contains("No leader"),
        _ => false,
    }
}

/// [`is_transient`], and a connection error the first `limit` times:
/// fluss-rs refreshes metadata from a tablet server it picks at random, one
/// that may have gone down, and leaves that one out of its next pick.
pub(super) fn or_connection_errors(limit: u32) -> impl Fn(&fluss::error::Error) -> bool {
    let seen = std::sync::atomic::AtomicU32::new(0);
    move |error| match error {
        fluss::error::Error::RpcError { .. } => {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < limit
        }
        other => is_transient(other),
    }
}
