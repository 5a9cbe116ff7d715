//! The store's side of a lake-stream table's life, as the catalog drives
//! it: creating a table and attaching its store table (dropping the Paimon
//! table again only when the store refuses; one that cannot answer leaves
//! it for `CREATE TABLE IF NOT EXISTS` to finish), turning the mode on and off
//! (tiering first, or stopping the store's own tiering), dropping a table
//! with its store's rows, tiering on request and maintenance under the
//! store's commit lock. The guards that decide whether a statement may run
//! at all stay in the decorator ([`super`]).

use std::future::Future;

use super::*;

impl LakeStreamCatalog {
    /// `CREATE TABLE ... WITH ('lakestream.enabled'='true')`: the Paimon table
    /// is created, then the store-side table is attached. If the store
    /// refuses (an error the user fixes), the Paimon table is dropped again.
    /// If it cannot answer (unavailable, timed out, corrupt, a bug), the
    /// store may hold the table, so the Paimon table stays and
    /// [`Error::CreatedNotAttached`] says that `CREATE TABLE IF NOT EXISTS`
    /// ([`Self::finish_existing`]) finishes it.
    pub(super) async fn create_lakestream_table(
        &self,
        identifier: &Identifier,
        creation: Schema,
        ignore_if_exists: bool,
    ) -> Result<()> {
        check_name_can_enable(identifier)?;
        check_type_can_enable(
            identifier,
            creation.options(),
            creation.fields(),
            creation.primary_keys(),
            creation.partition_keys(),
            &self.store,
        )?;
        let store = self
            .store
            .require("'lakestream.enabled'='true'", identifier)?;
        // Created first, so a binding to local disk names the directory as
        // it resolves.
        store.get().await?;
        let binding = store.binding()?;
        if let Some(given) = creation.options().get(options::STORE_BINDING) {
            if !store.is_bound_as(given)? {
                return Err(binding_not_settable());
            }
        }
        let creation = with_option(creation, options::STORE_BINDING, &binding)?;
        match self.get_table_settled(identifier).await {
            Ok(existing) if ignore_if_exists => {
                return self.finish_existing(&existing, store).await;
            }
            Ok(_) => {
                return Err(paimon::Error::TableAlreadyExist {
                    full_name: identifier.full_name(),
                }
                .into())
            }
            Err(paimon::Error::TableNotExist { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        match self.create_fresh(identifier, creation).await {
            Ok(()) => {}
            // Another statement created it since: with IF NOT EXISTS, that
            // table is finished as any existing one. It is never dropped
            // here: its writes may have been acknowledged.
            Err(Error::Paimon(paimon::Error::TableAlreadyExist { .. })) if ignore_if_exists => {
                let existing = self.get_table_settled(identifier).await?;
                return self.finish_existing(&existing, store).await;
            }
            Err(e) => return Err(e),
        }
        // A crash here leaves a lake-stream table its store has no table
        // for; the next `CREATE TABLE IF NOT EXISTS` attaches it.
        crate::failpoint::failpoint("create-before-attach");
        let created = self.get_table_settled(identifier).await?;
        let created_schema = created.schema().id();
        let attached = store
            .call("attach the table", |s| async move {
                s.attach_table(&created).await
            })
            .await;
        match attached {
            Ok(()) => Ok(()),
            Err(e) if e.kind().is_users_to_fix() => {
                // The store said no, so it holds nothing. Best effort: the
                // attach error is the one to report. A table whose schema
                // changed since it was created here is another statement's
                // by now (another process's attach finished it): it stays.
                let unchanged = self
                    .inner
                    .get_table(identifier)
                    .await
                    .is_ok_and(|now| now.schema().id() == created_schema);
                if unchanged {
                    let _ = self.inner.drop_table(identifier, true).await;
                }
                Err(e)
            }
            // No answer: the store may hold the table, and another process's
            // `CREATE TABLE IF NOT EXISTS` may have attached it and had
            // writes acknowledged, which a drop would lose.
            Err(e) => Err(Error::CreatedNotAttached {
                table: identifier.full_name(),
                store: store.identifier().to_string(),
                source: Box::new(e),
            }),
        }
    }

    /// The table, read again for a moment while its schema file does not
    /// parse: paimon's filesystem catalog writes a new table's schema file
    /// in place, so a `CREATE TABLE IF NOT EXISTS` beside another process's
    /// `CREATE` can read it half-written. A file that stays unreadable is
    /// reported as it is.
    async fn get_table_settled(&self, identifier: &Identifier) -> paimon::Result<Table> {
        crate::schema_stamp::settled(|| self.inner.get_table(identifier)).await
    }

    /// `CREATE TABLE IF NOT EXISTS` over an existing table changes nothing,
    /// except that a lake-stream table this store serves is attached again
    /// (attaching is idempotent): a `CREATE` cut short between the Paimon
    /// table and the store's, or whose attach the store did not answer,
    /// leaves a table every read and write of `t$rt` refuses, and the
    /// statement that made it is the one a user or a script runs again. A
    /// plain table, or one bound to another store, is left as it is.
    pub(super) async fn finish_existing(
        &self,
        existing: &Table,
        store: &Arc<LazyStore>,
    ) -> Result<()> {
        let table_options = existing.schema().options();
        if !options::is_enabled(table_options) {
            return Ok(());
        }
        if let Some(recorded) = table_options.get(options::STORE_BINDING) {
            if !store.is_bound_as(recorded)? {
                return Ok(());
            }
        }
        let table = existing.clone();
        store
            .call("attach the table", |s| async move {
                s.attach_table(&table).await
            })
            .await
    }

    /// Creates the Paimon table, which must not exist
    /// ([`paimon::Error::TableAlreadyExist`] if it does: another statement
    /// created it). A drop cut short (a killed process) can leave a dropped
    /// table's snapshots where the catalog puts the new table, which would
    /// bring the dropped table's rows back: a file-system catalog removes
    /// them before it creates the table (`object_storage::ddl`). A table
    /// found created over snapshots older than this statement all the same
    /// is reported, never dropped: once created, the table is others' too
    /// (a `CREATE TABLE IF NOT EXISTS` elsewhere attaches it and writes).
    pub(super) async fn create_fresh(
        &self,
        identifier: &Identifier,
        creation: Schema,
    ) -> Result<()> {
        let started = now_millis();
        crate::failpoint::failpoint_in("create-before-create", identifier).await;
        self.inner.create_table(identifier, creation, false).await?;
        crate::failpoint::failpoint_in("create-before-check", identifier).await;
        let table = self.get_table_settled(identifier).await?;
        let snapshots = table.snapshot_manager();
        let Some(earliest) = snapshots.earliest_snapshot_id().await? else {
            return Ok(());
        };
        let Ok(earliest) = snapshots.get_snapshot(earliest).await else {
            // Expired meanwhile: a table written and maintained since.
            return Ok(());
        };
        if earliest.time_millis() >= started {
            // Written to the table this statement created, by another
            // process that found it and attached it.
            return Ok(());
        }
        Err(Error::CreatedOverSnapshots {
            table: identifier.full_name(),
            snapshot: earliest.id(),
        })
    }

    /// Turning the mode on for an existing table: the store-side table is
    /// attached first, so a store that refuses leaves the option unset. The
    /// table is checked with the options it has after `changes`. Answers the
    /// store binding to record with the table and the table's schema once
    /// attached, checked again (a store's attach may change it, as Fluss's
    /// adds its columns; another process's ALTER may have come in
    /// meanwhile); `None`: no such table.
    ///
    /// A table whose mode is on stays with the store it is bound to; one
    /// whose mode is off moves to this catalog's store.
    pub(super) async fn enable(
        &self,
        identifier: &Identifier,
        changes: &[SchemaChange],
    ) -> Result<Option<(String, TableSchema)>> {
        check_name_can_enable(identifier)?;
        let table = match self.inner.get_table(identifier).await {
            Ok(table) => table,
            // The wrapped catalog reports a missing table its own way.
            Err(paimon::Error::TableNotExist { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let schema = table.schema();
        let options = options_after(schema.options(), changes);
        check_type_can_enable(
            identifier,
            &options,
            schema.fields(),
            schema.primary_keys(),
            schema.partition_keys(),
            &self.store,
        )?;
        check_no_tombstones("set 'lakestream.enabled'='true' on", &table, &options).await?;
        let store = self
            .store
            .require("'lakestream.enabled'='true'", identifier)?;
        store.get().await?;
        if options::is_enabled(schema.options()) {
            store.check_binding("turning the mode on for", &table)?;
        }
        let binding = store.binding()?;
        let moved = match schema.options().get(options::STORE_BINDING) {
            Some(recorded) if !store.is_bound_as(recorded)? => Some(recorded.clone()),
            _ => None,
        };
        store
            .call("attach the table", |s| async move {
                s.attach_table(&table).await
            })
            .await?;
        let attached = self.inner.get_table(identifier).await?.schema().clone();
        check_type_can_enable(
            identifier,
            &options_after(attached.options(), changes),
            attached.fields(),
            attached.primary_keys(),
            attached.partition_keys(),
            &self.store,
        )?;
        if let Some(recorded) = moved {
            self.notice(format!(
                "lake-stream mode of '{}' is on, served by store '{binding}' from now on; it \
                 was bound to '{recorded}'. Rows that may still wait there are not served \
                 here",
                identifier.full_name()
            ));
        }
        Ok(Some((binding, attached)))
    }
}

/// What turning the mode off did before its option was committed (see
/// [`LakeStreamCatalog::after_disable`]).
pub(super) enum Disabled {
    /// Nothing more to do: not lake-stream, or its rows could not be
    /// reached (a notice says so).
    Nothing,
    /// This catalog's store tiered the table.
    Tiered,
    /// The store's own tiering service no longer tiers the table, and it
    /// held nothing Paimon lacks.
    TieringStopped(Box<Table>),
    /// This catalog's store could not tier the table (the error): what
    /// waits in it is counted once the option is committed.
    TierFailed(Error),
}

/// How a `DROP` removes one table.
pub(super) enum DropPlan {
    /// Only the catalog's table: the store holds nothing this catalog can
    /// tell of (a plain table, or one whose mode is off and that this
    /// catalog's store never served).
    Catalog,
    /// The catalog's table and the store's side, through this store.
    WithStore(Arc<LazyStore>),
}

impl LakeStreamCatalog {
    /// How `identifier` is dropped, or why it cannot be. A table whose mode
    /// is on is dropped only through the store serving it, with its rows
    /// there: a catalog that names no store, or another store, refuses, so
    /// no drop ever leaves rows a table created later under the name could
    /// show. A table whose mode is off but that records this catalog's
    /// store drops the store's side too (rows left there when the mode was
    /// turned off without tiering).
    pub(super) async fn drop_plan(
        &self,
        identifier: &Identifier,
        operation: &str,
    ) -> Result<DropPlan> {
        let parsed = identifier.parsed_object_name()?;
        if parsed.branch().is_some() || parsed.system_table().is_some() {
            // Never a lake-stream table of its own.
            return Ok(DropPlan::Catalog);
        }
        let table = match self.inner.get_table(identifier).await {
            Ok(table) => table,
            // The wrapped catalog reports a missing table its own way.
            Err(paimon::Error::TableNotExist { .. }) => return Ok(DropPlan::Catalog),
            Err(e) => return Err(e.into()),
        };
        let table_options = table.schema().options();
        let enabled = options::is_enabled(table_options);
        let recorded = table_options.get(options::STORE_BINDING);
        if !enabled && recorded.is_none() {
            return Ok(DropPlan::Catalog);
        }
        let refuse = |reason: String| Error::DropUnreachable {
            operation: operation.to_string(),
            table: identifier.full_name(),
            recorded: match recorded {
                Some(binding) => format!(
                    "store '{binding}' (table option '{}')",
                    options::STORE_BINDING
                ),
                None => {
                    "the store that turned its mode on (no store binding is recorded)".to_string()
                }
            },
            reason,
        };
        let Ok(store) = self.store.require("dropping", identifier) else {
            if !enabled {
                return Ok(DropPlan::Catalog);
            }
            return Err(refuse(format!("catalog '{}' names no store", self.name)));
        };
        let ours = match recorded {
            Some(recorded) => store.is_bound_as(recorded)?,
            None => true,
        };
        match (ours, enabled) {
            (true, _) => Ok(DropPlan::WithStore(Arc::clone(store))),
            (false, false) => Ok(DropPlan::Catalog),
            (false, true) => Err(refuse(format!(
                "this catalog's store is '{}'",
                store.binding()?
            ))),
        }
    }

    /// Drops `identifier` as `plan` says.
    pub(super) async fn drop_as_planned(
        &self,
        identifier: &Identifier,
        ignore_if_not_exists: bool,
        plan: DropPlan,
    ) -> paimon::Result<()> {
        let DropPlan::WithStore(store) = plan else {
            return self
                .inner
                .drop_table(identifier, ignore_if_not_exists)
                .await;
        };
        // The store's rows go with the table: a table created later under
        // the same name must not find them. The store decides the order.
        let inner = &self.inner;
        store
            .call("drop the table", |s| async move {
                let drop_in_catalog = Box::pin(async move {
                    inner
                        .drop_table(identifier, ignore_if_not_exists)
                        .await
                        .map_err(Error::from)
                });
                s.drop_with_catalog(identifier, drop_in_catalog).await
            })
            .await
            .map_err(paimon::Error::from)
    }

    /// `DROP DATABASE ... CASCADE`: first drops every table of `database`
    /// that has a store side, as `DROP TABLE` does, so the store's rows go
    /// too. Every table is checked before any is dropped: one this catalog
    /// cannot drop with its store's side refuses the whole statement.
    pub(super) async fn drop_tables_of(&self, database: &str) -> Result<()> {
        let names = match self.inner.list_tables(database).await {
            Ok(names) => names,
            // The wrapped catalog reports a missing database its own way.
            Err(paimon::Error::DatabaseNotExist { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let operation = format!("DROP DATABASE '{database}' CASCADE");
        let mut planned = Vec::new();
        for name in names {
            let identifier = Identifier::new(database, name);
            if let DropPlan::WithStore(store) = self.drop_plan(&identifier, &operation).await? {
                planned.push((identifier, store));
            }
        }
        for (identifier, store) in planned {
            self.drop_as_planned(&identifier, true, DropPlan::WithStore(store))
                .await?;
        }
        Ok(())
    }
}

/// `creation` with the option `key` set to `value`. (`Schema` has no
/// setter; its serialized form does.)
pub(super) fn with_option(creation: Schema, key: &str, value: &str) -> Result<Schema> {
    let copy_error = |e: serde_json::Error| Error::Internal(format!("cannot copy a schema: {e}"));
    let mut json = serde_json::to_value(&creation).map_err(copy_error)?;
    match json.get_mut("options") {
        Some(serde_json::Value::Object(options)) => {
            options.insert(
                key.to_string(),
                serde_json::Value::String(value.to_string()),
            );
        }
        _ => return Err(Error::Internal("a schema without options".to_string())),
    }
    serde_json::from_value(json).map_err(copy_error)
}

/// What tiering does with a table whose lake-stream mode is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenOff {
    /// Refuse with [`Error::TierNotLakeStream`]: `lakestream_tier` and
    /// `CALL sys.lakestream_tier`, and the service's round over every
    /// lake-stream table.
    Refuse,
    /// Tier what the store still holds for the table: rows acknowledged
    /// before the mode was turned off that the store could not tier then.
    /// For a table the operator names (`lakestream-cli tier --table`). A store
    /// that holds nothing for the table has nothing to tier.
    Tier,
}

impl LakeStreamCatalog {
    /// Runs `work`, procedure `procedure` on `identifier`, within the
    /// catalog's procedure bound ([`options::PROCEDURE_TIMEOUT`]; none by
    /// default). A procedure's work grows with its table (a tiering round
    /// over a large backlog), so it is bounded as a whole, by this bound,
    /// and not by `lakestream.timeout`, which bounds single store calls.
    /// Stopped, it answers [`Error::ProcedureTimeout`] with how far the work
    /// had got, as it reported on the progress board ([`crate::progress`]).
    /// Stopping drops the work's future: every procedure commits in steps
    /// that each land whole or not at all, and a later run goes on from what
    /// landed.
    pub(crate) async fn bounded_procedure<T>(
        &self,
        procedure: &str,
        identifier: &Identifier,
        work: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(bound) = self.store_options.procedure_timeout() else {
            return work.await;
        };
        let table = identifier.full_name();
        let work = std::pin::pin!(work);
        tokio::select! {
            biased;
            done = work => done,
            () = tokio::time::sleep(bound) => {
                // Read while the work still runs: its entries go with it.
                let at: Vec<String> = crate::progress::running_work()
                    .into_iter()
                    .filter(|status| status.table == table)
                    .map(|status| status.to_string())
                    .collect();
                Err(Error::ProcedureTimeout {
                    procedure: procedure.to_string(),
                    table,
                    timeout: bound,
                    progress: if at.is_empty() {
                        String::new()
                    } else {
                        format!(" (at: {})", at.join("; "))
                    },
                })
            }
        }
    }

    /// The procedure [`Self::tier`] runs as, and is bounded under.
    pub(crate) const TIER_PROCEDURE: &'static str = "lakestream_tier";

    /// Tiers the store's rows of `identifier` into Paimon now, within the
    /// catalog's procedure bound ([`Self::bounded_procedure`]); the store
    /// itself is created within `lakestream.timeout`.
    pub async fn tier(&self, identifier: &Identifier, when_off: WhenOff) -> Result<TierReport> {
        let table = self.get_table(identifier).await?;
        let enabled = options::is_enabled(table.schema().options());
        if !enabled && when_off == WhenOff::Refuse {
            // Tiering rows of a table whose writes now go to Paimon could
            // commit older store rows over newer Paimon ones.
            return Err(Error::TierNotLakeStream {
                table: identifier.full_name(),
            });
        }
        let lazy = self.store.require("tiering", identifier)?;
        let store = lazy.get().await?;
        lazy.check_binding("tiering", &table)?;
        let tiered = self
            .bounded_procedure(Self::TIER_PROCEDURE, identifier, store.tier(&table))
            .await;
        match tiered {
            Err(Error::StoreTableMissing { .. }) if !enabled => Ok(TierReport::default()),
            other => other,
        }
    }
}

impl LakeStreamCatalog {
    /// Runs maintenance `work` (a compaction, an expiry, an orphan file
    /// removal asked for with `CALL`) on the table at `identifier`. On a
    /// lake-stream table of this catalog's store it runs under the store's
    /// commit lock ([`crate::store::LakestreamStore::with_commit_lock`]), with the table
    /// loaded again once the lock is held, so it never races that store's
    /// tiering commits, nor the maintenance that follows them.
    ///
    /// The whole run, the wait for the lock included, is bounded as
    /// procedure `procedure` ([`Self::bounded_procedure`]).
    pub(crate) async fn maintain<T, F>(
        &self,
        procedure: &str,
        identifier: &Identifier,
        work: F,
    ) -> Result<T>
    where
        T: Send,
        F: for<'a> FnOnce(&'a Table) -> BoxFuture<'a, Result<T>> + Send,
    {
        // Boxed: maintenance futures are large.
        self.bounded_procedure(
            procedure,
            identifier,
            Box::pin(self.maintain_now(identifier, work)),
        )
        .await
    }

    async fn maintain_now<T, F>(&self, identifier: &Identifier, work: F) -> Result<T>
    where
        T: Send,
        F: for<'a> FnOnce(&'a Table) -> BoxFuture<'a, Result<T>> + Send,
    {
        let table = self.get_table(identifier).await?;
        let ours = match (
            options::is_enabled(table.schema().options()),
            self.store.require("maintenance", identifier),
        ) {
            (true, Ok(lazy)) => {
                let store = lazy.get().await?;
                // A table another store serves is that store's to lock.
                lazy.check_binding("maintaining", &table)
                    .is_ok()
                    .then_some(store)
            }
            _ => None,
        };
        let Some(store) = ours else {
            return work(&table).await;
        };
        let mut out = None;
        store
            .with_commit_lock(
                identifier,
                Box::pin(async {
                    let table = self.get_table(identifier).await?;
                    out = Some(work(&table).await?);
                    Ok(())
                }),
            )
            .await?;
        out.ok_or_else(|| {
            Error::Internal(format!(
                "lakestream store '{}' ran no maintenance of '{}' under its commit lock",
                store.identifier(),
                identifier.full_name()
            ))
        })
    }

    /// Turning the mode off: the store tiers what Paimon lacks first, where it
    /// can. Off succeeds store or no store: it touches only the catalog;
    /// what could not be tiered is left in the store, and a notice says so,
    /// with how many rows wait (or that the count is unknown, and why) and
    /// the command that tiers them. A store whose own service tiers stops
    /// that service tiering the table, and refuses (the one error) while it
    /// holds rows the service has not tiered yet. Answers the table as it
    /// was when the store stopped its service tiering it, so that the
    /// service can be started again if changing the option fails.
    pub(super) async fn disable(&self, identifier: &Identifier) -> Result<Disabled> {
        let Ok(Some(table)) = self.lakestream_table(identifier).await else {
            return Ok(Disabled::Nothing);
        };
        let name = identifier.full_name();
        let Ok(store) = self.store.require("turning the mode off", identifier) else {
            // Only a catalog that names a store turns the mode on, so the
            // table was written through one; this catalog cannot ask it.
            self.notice(format!(
                "lake-stream mode of '{name}' is off. Catalog '{}' names no store, so it cannot \
                 tell whether rows of '{name}' may still wait in the store the table used, not \
                 yet tiered into Paimon. Before writing to '{name}' again, tier them through \
                 that store: {}, with this catalog's --warehouse and --option flags (the \
                 embedded store is --store local)",
                self.name,
                tier_command(identifier, None)
            ));
            return Ok(Disabled::Nothing);
        };
        // A store that cannot be reached is reported as such, below.
        let mismatch = match store.get().await {
            Ok(_) => store.check_binding("tiering", &table).err(),
            Err(_) => None,
        };
        if let Some(e) = mismatch {
            // Its rows are in another store, which this catalog cannot ask.
            self.notice(format!(
                "lake-stream mode of '{name}' is off, but this catalog could not tier first: \
                 {e}. Rows of '{name}' may still wait in the store it is bound to; before \
                 writing to '{name}' again, tier them through that store: {}",
                tier_command(identifier, None)
            ));
            return Ok(Disabled::Nothing);
        }
        let tiered = store
            .call("tier before turning the mode off", |s| {
                let table = table.clone();
                async move { s.tier(&table).await }
            })
            .await;
        let error = match tiered {
            Ok(_) => return Ok(Disabled::Tiered),
            Err(Error::TieringElsewhere { store: id }) => {
                let stopped = store
                    .call("stop tiering before turning the mode off", |s| {
                        let table = table.clone();
                        async move { s.stop_tiering(&table).await }
                    })
                    .await;
                let notice = match stopped {
                    Ok(()) => {
                        self.notice(format!(
                            "lake-stream mode of '{name}' is off; store '{id}' held no rows of \
                             '{name}' that Paimon lacks, and its tiering service no longer \
                             tiers the table"
                        ));
                        return Ok(Disabled::TieringStopped(Box::new(table)));
                    }
                    Err(e @ Error::UntieredRows { .. }) => return Err(e),
                    Err(Error::StoreTableMissing { .. }) => format!(
                        "lake-stream mode of '{name}' is off; store '{id}' has no table for \
                         '{name}', so no rows of it wait there"
                    ),
                    Err(e) => not_stopped_notice(&name, &id, &e),
                };
                self.notice(notice);
                return Ok(Disabled::Nothing);
            }
            Err(e) if store.capabilities().tiering == Tiering::ByItsService => {
                // Its tiering service may still tier what it holds.
                self.notice(not_stopped_notice(&name, store.identifier(), &e));
                return Ok(Disabled::Nothing);
            }
            Err(e) => e,
        };
        // Counted once the option is committed: writes acknowledged until
        // then wait in the store too.
        Ok(Disabled::TierFailed(error))
    }

    /// Once the option that turns the mode off is committed: rows that
    /// reached the store between [`Self::disable`] and the commit (writes
    /// planned while the mode was on) are counted and named in a notice.
    /// A write checks the option after its rows reached the store, and is
    /// acknowledged only if it was still on: so every acknowledged row is
    /// in Paimon, or in this notice. Writes that find it off fail, their
    /// outcome unknown.
    pub(super) async fn after_disable(&self, identifier: &Identifier, disabled: Disabled) {
        let name = identifier.full_name();
        match disabled {
            Disabled::Nothing => {}
            Disabled::Tiered => {
                // Counted, not tiered: writes now go to Paimon directly, and
                // a tiering commit racing them could replace one of their
                // snapshots (paimon 0.4 publishes a snapshot by check, then
                // rename). The user tiers once writers have stopped.
                let Ok(store) = self.store.require("turning the mode off", identifier) else {
                    return;
                };
                let id = store.identifier().to_string();
                let waiting = self
                    .rows_waiting(
                        identifier,
                        store,
                        "count rows written while the mode went off",
                    )
                    .await;
                let waiting = match waiting {
                    Ok(0) | Err(Error::StoreTableMissing { .. }) => return,
                    Ok(rows) => format!(
                        "{rows} rows written while it was being turned off (writes planned \
                         before the change) wait in store '{id}', not yet in Paimon"
                    ),
                    Err(e) => format!(
                        "rows written while it was being turned off (writes planned before the \
                         change) may wait in store '{id}', not yet in Paimon: counting them \
                         failed ({e})"
                    ),
                };
                self.notice(format!(
                    "lake-stream mode of '{name}' is off, but {waiting}. Stop writers to \
                     '{name}', then tier them before writing to it again: {}, with this \
                     catalog's --warehouse and --option flags",
                    tier_command(identifier, Some(&id))
                ));
            }
            Disabled::TierFailed(error) => {
                let Ok(store) = self.store.require("turning the mode off", identifier) else {
                    return;
                };
                let waiting = match self
                    .rows_waiting(identifier, store, "count rows waiting")
                    .await
                {
                    // No store table: nothing of it waits there.
                    Err(Error::StoreTableMissing { .. }) => return,
                    Ok(rows) => format!("{rows} rows wait in it, not yet in Paimon"),
                    Err(Error::StoreUnavailable { .. } | Error::StoreTimeout { .. }) => {
                        "how many rows wait in it is unknown: the store could not be reached \
                         to count them"
                            .to_string()
                    }
                    Err(e) => {
                        format!("how many rows wait in it is unknown: counting them failed ({e})")
                    }
                };
                self.notice(format!(
                    "lake-stream mode of '{name}' is off, but store '{}' could not tier first \
                     ({error}); {waiting}. Once the store works, and before writing to '{name}' \
                     again, tier them: {}, with this catalog's --warehouse and --option flags",
                    store.identifier(),
                    tier_command(identifier, Some(store.identifier()))
                ));
            }
            Disabled::TieringStopped(table) => {
                let Ok(store) = self.store.require("turning the mode off", identifier) else {
                    return;
                };
                let id = store.identifier().to_string();
                let counted = store
                    .call(
                        "count rows written while the mode went off",
                        |s| async move { s.stop_tiering(table.as_ref()).await },
                    )
                    .await;
                match counted {
                    Ok(()) | Err(Error::StoreTableMissing { .. }) => {}
                    // Its service no longer tiers the table: they wait until
                    // the mode is turned on again.
                    Err(e @ Error::UntieredRows { .. }) => self.notice(format!(
                        "lake-stream mode of '{name}' is off, but rows written while it was \
                         being turned off (writes planned before the change) wait in store \
                         '{id}', not yet in Paimon, and its tiering service no longer tiers \
                         the table: {e}"
                    )),
                    Err(e) => self.notice(format!(
                        "lake-stream mode of '{name}' is off, but whether rows written while it \
                         was being turned off (writes planned before the change) wait in store \
                         '{id}' could not be counted: {e}. Turning the mode on again serves and \
                         tiers whatever waits there"
                    )),
                }
            }
        }
    }

    /// The rows of `identifier` waiting in `store`, counted on the table as
    /// the catalog has it now (after the option's commit); `what` names the
    /// count in the store's errors.
    async fn rows_waiting(
        &self,
        identifier: &Identifier,
        store: &LazyStore,
        what: &str,
    ) -> Result<u64> {
        let table = self.inner.get_table(identifier).await?;
        store
            .call(what, |s| async move { s.pending_rows(&table).await })
            .await
    }
}

/// Milliseconds since the epoch, as Paimon's snapshots record their time.
fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The notice of turning the mode of `name` off when `store`, whose own
/// service tiers, could not be asked to stop it (`error`).
pub(super) fn not_stopped_notice(name: &str, store: &str, error: &Error) -> String {
    format!(
        "lake-stream mode of '{name}' is off, but store '{store}' could not be asked whether \
         rows of '{name}' wait in it, nor to stop its tiering service tiering the table \
         ({error}). If rows wait there, that service may still write them into Paimon, over \
         rows written to '{name}' directly. Before writing to '{name}' again, once the store \
         answers, turn the mode on and off again through this catalog: turning it off then \
         waits for them"
    )
}

/// The `lakestream-cli` command that tiers what waits in the store for
/// `identifier` (whose mode is off), as a shell command line. `store`: the
/// store to name, or `None` for a `<store>` placeholder.
pub(super) fn tier_command(identifier: &Identifier, store: Option<&str>) -> String {
    let table = crate::name::sql_name(&[identifier.database(), identifier.object()]);
    format!(
        "lakestream-cli tier --once --table {} --store {}",
        shell_word(&table),
        // A placeholder stays readable as one: the user replaces it.
        store.map_or_else(|| "<store>".to_string(), shell_word)
    )
}

/// `text` as one word of a POSIX shell command line.
pub(super) fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}
