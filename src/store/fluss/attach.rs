//! The table's lifecycle on the Fluss side: attaching (creating the Fluss
//! table and copying Paimon's rows into it), tiering on and off, and what
//! waits untiered.

use super::*;
use crate::retry::{Retry, Try};

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

/// How long a table this process created may wait for Fluss's coordinator
/// to take it in before it is made again: see
/// [`FlussStore::until_created_taken_in`].
pub(super) const TAKE_IN_WAIT: Duration = Duration::from_secs(10);

/// How giving the Paimon table the shape Fluss checks is tried again when
/// its change fails (another process attaching it made the change first):
/// three tries in all, at once, each reading the table again.
const SHAPE_AGAIN: Retry = Retry::immediately(3);

/// How often a wait for the buckets' leaders looks again: pauses from 20 ms
/// doubling to 500 ms, within the wait it is given.
const LEADERS_AGAIN: Retry = Retry::growing(
    u32::MAX,
    Duration::from_millis(20),
    Duration::from_millis(500),
);

impl FlussStore {
    /// Creates the Fluss table of `shape`, with tiering off until the Paimon
    /// table has the shape Fluss checks.
    pub(super) async fn create_fluss_table(
        &self,
        target: &Target,
        shape: &FlussShape,
    ) -> Result<()> {
        let admin = target.admin(&self.connection).await?;
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
        SHAPE_AGAIN
            .run(|| async {
                let paimon = self.catalog.get_table(identifier).await?;
                let changes = schema::paimon_changes(&paimon, &options)?;
                if changes.is_empty() {
                    return Ok(Try::Done(()));
                }
                Ok(
                    match self.catalog.alter_table(identifier, changes, false).await {
                        Ok(()) => Try::Done(()),
                        Err(e) => Try::Again(Error::from(e)),
                    },
                )
            })
            .await?;
        if !enabled {
            self.until_taken_in(target, &info).await?;
            self.set_tiering(target, true).await?;
        }
        Ok(())
    }

    /// Waits until Fluss's coordinator has taken the table in: every
    /// bucket has a leader, which only the coordinator's handling of the
    /// creation assigns. Fluss 0.9's coordinator handles a change of a
    /// table's properties that reaches it first by failing
    /// (`NullPointerException` in `processTableRegistrationChange`) and then
    /// never takes the table in: its buckets stay without a leader, and every
    /// write to it fails. Turning tiering on is such a change.
    async fn until_taken_in(&self, target: &Target, info: &TableInfo) -> Result<()> {
        let leaderless = self
            .leaderless_within(target, info, target.request_timeout)
            .await?;
        if leaderless.is_empty() {
            return Ok(());
        }
        Err(target.unavailable(
            "turn tiering on for",
            format!(
                "buckets {leaderless:?} of the new table still have no leader after {:?} \
                 (fluss.client.request-timeout): Fluss's coordinator has not taken the table in",
                target.request_timeout
            ),
        ))
    }

    /// Waits until the coordinator has taken in the table this process has
    /// just created, creating it again when it has not after a while.
    ///
    /// Fluss 0.9.1's coordinator learns of a new table from a ZooKeeper
    /// watch, and now and then misses one (apache/fluss#2710 is such a race,
    /// fixed after 0.9.1): the table never gets a bucket leader, and every
    /// write to it fails. A CI run failed so on a table made again right
    /// after its drop: the coordinator's log shows the table's assignment
    /// registered, and the table never taken in. Such a table has taken no
    /// write: the store writes only to a table whose tiering is on, which
    /// an attach turns on only once every bucket's leader answered (a
    /// coordinator taking the table in between the last look and the drop,
    /// and another process attaching and writing in those milliseconds, is
    /// the one way around that). So the missed table is dropped and made
    /// again (the coordinator logs an error for the drop of a table it
    /// never knew, and goes on). A table taken in gets its leaders within a second:
    /// [`TAKE_IN_WAIT`] is far above that, and each table made again waits
    /// twice as long. If the table is still not taken in when the request
    /// timeout ends, it is dropped too, so that a later attempt does not
    /// meet it. Left open: a coordinator so slow that it takes the first
    /// table in only after the wait. That table is dropped and made again at
    /// once, and 0.9.1's coordinator, finishing the old table's deletion
    /// after the new table's creation, forgets the new table's name
    /// (`CoordinatorContext.removeTable`); a test that forced this on every
    /// table saw writes time out after some rounds.
    pub(super) async fn until_created_taken_in(
        &self,
        target: &Target,
        shape: &FlussShape,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + target.request_timeout;
        let (mut made_again, mut wait) = (false, TAKE_IN_WAIT);
        let taken = Retry::immediately(u32::MAX)
            // A table is made again only with a second left to wait for it.
            .within(
                target
                    .request_timeout
                    .saturating_sub(Duration::from_secs(1)),
            )
            .run_to_end(|| {
                let made_again = std::mem::replace(&mut made_again, true);
                // Each table made again is given twice as long as the one
                // before.
                let doubled = wait.saturating_mul(2);
                let wait = std::mem::replace(&mut wait, doubled);
                async move {
                    if made_again {
                        if let Err(e) = self.create_fluss_table(target, shape).await {
                            // Another process attaching the table may have
                            // made it in between: its table is waited for
                            // like ours.
                            if self.table_info(target).await.is_err() {
                                return Err(e);
                            }
                        }
                    }
                    let info = self.table_info(target).await?;
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    let waited = wait.min(left);
                    let leaderless = self.leaderless_within(target, &info, waited).await?;
                    if leaderless.is_empty() {
                        return Ok(Try::Done(()));
                    }
                    ::log::warn!(
                        target: FLUSS_LOG,
                        "Fluss's coordinator has not taken in the new table '{}' (buckets \
                         {leaderless:?} have no leader after {waited:?}); it holds no rows: \
                         dropping it, to create it again while \
                         fluss.client.request-timeout allows",
                        target.name,
                    );
                    // Dropped each time, so that a table not taken in is
                    // never left for a later attempt to meet.
                    let admin = target.admin(&self.connection).await?;
                    target
                        .bounded("drop", admin.drop_table(&target.path, true))
                        .await?;
                    Ok(Try::Again(()))
                }
            })
            .await?;
        taken.map_err(|()| {
            target.unavailable(
                "create",
                format!(
                    "Fluss's coordinator took no table made for it within {:?} \
                     (fluss.client.request-timeout): its buckets got no leader",
                    target.request_timeout
                ),
            )
        })
    }

    /// The buckets of the table `info` describes (by its path: the table
    /// now at the path, should it have been made again) that still have no
    /// leader after waiting up to `wait` for them all to get one.
    ///
    /// A leader counts once it answers for the bucket: a tablet server that
    /// still maps the path to a table dropped a moment ago answers metadata
    /// with the new table's id and the old table's leaders, which serve no
    /// bucket of the new table.
    pub(super) async fn leaderless_within(
        &self,
        target: &Target,
        info: &TableInfo,
        wait: Duration,
    ) -> Result<Vec<i32>> {
        let waited = LEADERS_AGAIN
            .within(wait)
            .run_to_end(|| async {
                let leaderless: Vec<i32> = self
                    .bucket_leaders(target, info)
                    .await?
                    .into_iter()
                    .filter(|(_, leader)| leader.is_none())
                    .map(|(bucket, _)| bucket)
                    .collect();
                Ok::<_, Error>(if !leaderless.is_empty() {
                    Try::Again(leaderless)
                } else if !self.leaders_answer(target, info).await {
                    Try::Again((0..info.get_num_buckets()).collect())
                } else {
                    Try::Done(())
                })
            })
            .await?;
        Ok(waited.err().unwrap_or_default())
    }

    /// Whether the leader of every bucket of the table at the target's path
    /// answers for it (its latest offset).
    async fn leaders_answer(&self, target: &Target, info: &TableInfo) -> bool {
        let Ok(admin) = self.connection.admin().await else {
            return false;
        };
        let buckets: Vec<i32> = (0..info.get_num_buckets()).collect();
        matches!(
            target
                .answer(
                    "find the latest offsets of",
                    admin.list_offsets(&target.path, &buckets, OffsetSpec::Latest),
                )
                .await,
            Ok(Ok(offsets)) if buckets.iter().all(|b| offsets.contains_key(b))
        )
    }

    /// Turns Fluss's tiering of the table on or off.
    pub(super) async fn set_tiering(&self, target: &Target, on: bool) -> Result<()> {
        let admin = target.admin(&self.connection).await?;
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
        let admin = target.admin(&self.connection).await?;
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
        let admin = target.admin(&self.connection).await?;
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
