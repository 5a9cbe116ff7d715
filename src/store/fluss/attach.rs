//! The table's lifecycle on the Fluss side: attaching (creating the Fluss
//! table and copying Paimon's rows into it), tiering on and off, and what
//! waits untiered.

use super::*;

/// The change-log records of a table Fluss's tiering has not committed.
pub(super) struct Untiered {
    /// The Paimon snapshot of the newest lake snapshot, if any.
    pub(super) snapshot_id: Option<i64>,
    /// `(bucket, from, to)`, `to` exclusive, for buckets with records waiting.
    pub(super) waiting: Vec<(i32, i64, i64)>,
}

impl Untiered {
    pub(super) fn records(&self) -> i64 {
        self.waiting.iter().map(|(_, from, to)| to - from).sum()
    }
}

impl FlussStore {
    /// Creates the Fluss table of `shape`, with tiering off until the Paimon
    /// table has the shape Fluss checks.
    pub(super) async fn create_fluss_table(
        &self,
        target: &Target,
        shape: &FlussShape,
    ) -> Result<()> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        target
            .bounded(
                "create the database of",
                admin.create_database(target.path.database(), None, true),
            )
            .await?;
        let schema = shape
            .fluss_schema()
            .map_err(|e| target.fluss_error("create", e))?;
        let descriptor = TableDescriptor::builder()
            .schema(schema)
            .distributed_by(shape.bucket_count, shape.bucket_keys.clone())
            .properties(
                self.options
                    .table_properties
                    .clone()
                    .into_iter()
                    .collect::<HashMap<_, _>>(),
            )
            .property(DATALAKE_ENABLED, "false")
            .comment(shape.comment.as_str())
            .build()
            .map_err(|e| target.fluss_error("create", e))?;
        target
            .bounded(
                "create",
                admin.create_table(&target.path, &descriptor, false),
            )
            .await
    }

    /// The rest of attaching, once the Fluss table exists: the Paimon
    /// table's shape, then tiering on.
    pub(super) async fn finish_attach(
        &self,
        target: &Target,
        identifier: &Identifier,
    ) -> Result<()> {
        let info = self.table_info(target).await?;
        let enabled = tiering_on(&info);
        let options = schema::expected_paimon_options(&info, enabled);
        // Another process attaching the same table at once (a `CREATE TABLE
        // IF NOT EXISTS` beside this `CREATE`) may make the same changes
        // first: a change that fails is done when the table, read again,
        // needs none.
        let mut attempts = 0;
        loop {
            let paimon = self.catalog.get_table(identifier).await?;
            let changes = schema::paimon_changes(&paimon, &options)?;
            if changes.is_empty() {
                break;
            }
            match self.catalog.alter_table(identifier, changes, false).await {
                Ok(()) => break,
                Err(e) if attempts >= 2 => return Err(e.into()),
                Err(_) => attempts += 1,
            }
        }
        if !enabled {
            self.until_taken_in(target, &info).await?;
            self.set_tiering(target, true).await?;
        }
        Ok(())
    }

    /// Waits until Fluss's coordinator has taken a new table in: every
    /// bucket has a leader, which only the coordinator's handling of the
    /// creation assigns. Fluss 0.9's coordinator handles a change of a
    /// table's properties that reaches it first by failing
    /// (`NullPointerException` in `processTableRegistrationChange`) and then
    /// never takes the table in: its buckets stay without a leader, and every
    /// write to it fails. Turning tiering on is such a change.
    async fn until_taken_in(&self, target: &Target, info: &TableInfo) -> Result<()> {
        let deadline = tokio::time::Instant::now() + target.request_timeout;
        let mut pause = Duration::from_millis(20);
        loop {
            let leaderless: Vec<i32> = self
                .bucket_leaders(target, info)
                .await?
                .into_iter()
                .filter(|(_, leader)| leader.is_none())
                .map(|(bucket, _)| bucket)
                .collect();
            if leaderless.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(target.unavailable(
                    "turn tiering on for",
                    format!(
                        "buckets {leaderless:?} of the new table still have no leader after \
                         {:?} (fluss.client.request-timeout): Fluss's coordinator has not \
                         taken the table in",
                        target.request_timeout
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Turns Fluss's tiering of the table on or off.
    pub(super) async fn set_tiering(&self, target: &Target, on: bool) -> Result<()> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        let changes = AlterTableChanges {
            config_changes: vec![AlterConfig::new(
                DATALAKE_ENABLED,
                Some(on.to_string()),
                AlterConfigOpType::Set,
            )],
            ..Default::default()
        };
        let operation = if on {
            "turn tiering on for"
        } else {
            "turn tiering off for"
        };
        target
            .bounded(operation, admin.alter_table(&target.path, false, changes))
            .await
    }

    /// The latest offset of every bucket of the table.
    pub(super) async fn latest_offsets(
        &self,
        target: &Target,
        info: &TableInfo,
    ) -> Result<HashMap<i32, i64>> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
        target
            .retrying("find the latest offsets of", || {
                admin.list_offsets(&target.path, &buckets, OffsetSpec::Latest)
            })
            .await
    }

    /// The change-log records of the table that Fluss's tiering has not
    /// committed into Paimon: per bucket, from the offset its newest lake
    /// snapshot reached (the log's start without one) to the latest offset,
    /// as `(bucket, from, to)` with `to` exclusive, buckets with none left out.
    pub(super) async fn untiered(&self, target: &Target, info: &TableInfo) -> Result<Untiered> {
        let admin = self
            .connection
            .admin()
            .await
            .map_err(|e| target.fluss_error("reach", e))?;
        let latest = self.latest_offsets(target, info).await?;
        let (snapshot_id, tiered): (Option<i64>, HashMap<i32, i64>) = match target
            .answer(
                "find the tiered snapshot of",
                admin.get_lake_snapshot(&target.path, None, None),
            )
            .await?
        {
            Ok(lake) => (
                Some(lake.snapshot_id),
                lake.bucket_snapshots
                    .iter()
                    .filter(|b| b.partition_id.is_none())
                    .filter_map(|b| b.log_offset.map(|o| (b.bucket_id, o)))
                    .collect(),
            ),
            Err(e) if e.api_error() == Some(FlussError::LakeSnapshotNotExist) => {
                (None, HashMap::new())
            }
            Err(e) => return Err(target.fluss_error("find the tiered snapshot of", e)),
        };
        let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
        let earliest = if buckets.iter().all(|b| tiered.contains_key(b)) {
            HashMap::new()
        } else {
            target
                .retrying("find the earliest offsets of", || {
                    admin.list_offsets(&target.path, &buckets, OffsetSpec::Earliest)
                })
                .await?
        };
        let mut waiting = Vec::new();
        for bucket in buckets {
            let to = latest.get(&bucket).copied().unwrap_or(0);
            let from = tiered
                .get(&bucket)
                .or_else(|| earliest.get(&bucket))
                .copied()
                .unwrap_or(0)
                .max(0);
            if to > from {
                waiting.push((bucket, from, to));
            }
        }
        Ok(Untiered {
            snapshot_id,
            waiting,
        })
    }

    /// Refuses turning the mode on again over rows the Fluss table got after
    /// its tiering was stopped (writes planned before the mode was turned
    /// off) when, on a primary-key table, Paimon got rows from elsewhere
    /// since its last tiering: tiering the older rows would commit them
    /// over the newer ones, key by key. Append tables only gain rows.
    pub(super) async fn check_no_stranded(
        &self,
        table: &Table,
        target: &Target,
        info: &TableInfo,
    ) -> Result<()> {
        if tiering_on(info) || !target.primary_key {
            return Ok(());
        }
        let untiered = self.untiered(target, info).await?;
        if untiered.waiting.is_empty() {
            return Ok(());
        }
        let Some(since) = self.direct_write_since(table, untiered.snapshot_id).await? else {
            return Ok(());
        };
        Err(FlussStoreError::Stranded {
            table: target.name.clone(),
            records: untiered.records(),
            since,
        }
        .into())
    }

    /// What says Paimon got rows other than from Fluss's tiering after
    /// snapshot `tiered` (the newest Fluss tiered; `None`: none): a newer
    /// snapshot another user committed, or snapshots expired so that this
    /// cannot be told. `None`: nothing.
    pub(super) async fn direct_write_since(
        &self,
        table: &Table,
        tiered: Option<i64>,
    ) -> Result<Option<String>> {
        let snapshots = table.snapshot_manager();
        let Some(latest) = snapshots.get_latest_snapshot().await? else {
            return Ok(None);
        };
        let after = tiered.unwrap_or(0);
        let earliest = snapshots
            .earliest_snapshot_id()
            .await?
            .unwrap_or(latest.id());
        if earliest > after + 1 {
            return Ok(Some(format!(
                "Paimon's snapshots up to {} have expired, so whether Paimon got rows from \
                 elsewhere since cannot be told",
                earliest - 1
            )));
        }
        let mut snapshot = latest;
        while snapshot.id() > after {
            // A compaction rewrites files and changes no row.
            let compaction = matches!(snapshot.commit_kind(), paimon::spec::CommitKind::COMPACT);
            if snapshot.commit_user() != TIERING_COMMIT_USER && !compaction {
                return Ok(Some(format!(
                    "Paimon snapshot {} was committed since by '{}', not by Fluss's tiering",
                    snapshot.id(),
                    snapshot.commit_user()
                )));
            }
            if snapshot.id() - 1 <= after {
                break;
            }
            snapshot = snapshots.get_snapshot(snapshot.id() - 1).await?;
        }
        Ok(None)
    }

    /// The Paimon snapshot to read when Fluss has tiered nothing readable
    /// yet: the newest one its tiering did not commit (the table as it was
    /// promoted), or none.
    pub(super) async fn base_snapshot(&self, table: &Table) -> Result<Option<i64>> {
        let snapshots = table.snapshot_manager();
        let Some(mut snapshot) = snapshots.get_latest_snapshot().await? else {
            return Ok(None);
        };
        while snapshot.commit_user() == TIERING_COMMIT_USER {
            let previous = snapshot.id() - 1;
            match snapshots.earliest_snapshot_id().await? {
                Some(earliest) if previous >= earliest => {
                    snapshot = snapshots.get_snapshot(previous).await?;
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(snapshot.id()))
    }

    /// Upserts the Paimon table's rows into a new Fluss primary-key table.
    /// Fluss keeps a table's current rows by key and derives its changes
    /// from them: a key it does not hold cannot be deleted or updated, and
    /// its tiering would never remove it from Paimon. A table promoted in
    /// place therefore starts with Paimon's rows in Fluss too.
    pub(super) async fn load_paimon_rows(&self, table: &Table, target: &Target) -> Result<()> {
        if table
            .snapshot_manager()
            .get_latest_snapshot_id()
            .await?
            .is_none()
        {
            return Ok(());
        }
        let columns: Vec<String> = schema::user_fields(table)
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        let provider = paimon_datafusion::PaimonTableProvider::try_new(table.clone())?;
        let session = datafusion::prelude::SessionContext::new();
        let frame = session
            .read_table(Arc::new(provider))?
            .select_columns(&columns.iter().map(String::as_str).collect::<Vec<_>>())?;
        let mut rows = frame.execute_stream().await?;
        let writer = self.writer(table, target).await?;
        while let Some(batch) = futures::StreamExt::next(&mut rows).await {
            self.send(target, &writer, WriteKind::Upsert, &[batch?])
                .await
                .map_err(|failure| failure.error)?;
        }
        Ok(())
    }
}
