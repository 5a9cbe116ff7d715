//! Compaction and expiry keep each key's latest change: updates and
//! deletes committed after a compaction, keys deleted and written again,
//! first-row tables, small buckets of awkward partitions against an
//! uncompacted twin, and handles on dropped tables.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, Int8Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use paimon::spec::VALUE_KIND_FIELD_NAME;
use paimon::table::Table;
use paimon_lakestream::LakeStreamContext;
use tempfile::TempDir;

use crate::support::sorted_rows as rows;
use crate::support::{on_request_context as context, paimon_table as table, run};

/// `(id, v)` rows as a batch of `table`'s schema.
fn batch(table: &Table, rows: &[(i64, &str)]) -> RecordBatch {
    let schema = paimon_lakestream::store::table_arrow_schema(table).expect("schema");
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
    let vs: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1)));
    RecordBatch::try_new(schema, vec![ids, vs]).expect("batch")
}

/// A primary-key table `name` of one bucket (created `with` more options)
/// holding keys 1 to 5 in two files; then another job's writer prepares
/// `rows` (a `_VALUE_KIND` per row when `kinds`), a `CALL sys.compact`
/// publishes, and only then the writer commits, as a writer whose commit
/// lands while a compaction runs does.
async fn write_across_a_compaction(
    ctx: &LakeStreamContext,
    name: &str,
    with: &str,
    rows: &[(i64, &str)],
    kinds: Option<&[i8]>,
) {
    run(
        ctx,
        &format!(
            "CREATE TABLE {name} (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
             WITH ('bucket' = '1'{with})"
        ),
    )
    .await;
    run(
        ctx,
        &format!("INSERT INTO {name} VALUES (1, 'a'), (2, 'a'), (3, 'a'), (4, 'a'), (5, 'a')"),
    )
    .await;
    run(ctx, &format!("INSERT INTO {name} VALUES (1, 'b')")).await;

    let writer_table = table(ctx, name).await;
    let builder = writer_table.new_write_builder();
    let mut write = builder.new_write().expect("write");
    let mut rows = batch(&writer_table, rows);
    if let Some(kinds) = kinds {
        let mut fields: Vec<Field> = rows
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(VALUE_KIND_FIELD_NAME, DataType::Int8, false));
        let mut columns = rows.columns().to_vec();
        columns.push(Arc::new(Int8Array::from(kinds.to_vec())) as ArrayRef);
        rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch");
    }
    write.write_arrow_batch(&rows).await.expect("write rows");
    let messages = write.prepare_commit().await.expect("prepare");

    run(ctx, &format!("CALL sys.compact('default.{name}')")).await;

    builder
        .new_commit()
        .commit(messages)
        .await
        .expect("the writer's commit");
}

/// An update of key 5 prepared before a compaction and committed after it
/// wins: Java Paimon's compaction keeps each row's sequence number, so a
/// write committed after it is newer than every row it rewrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_never_undoes_an_update_committed_after_it() {
    Box::pin(async {
        let dir = TempDir::new().expect("temp dir");
        let ctx = context(&dir).await;
        write_across_a_compaction(&ctx, "kv", "", &[(5, "new")], None).await;
        assert_eq!(
            rows(&ctx, "SELECT * FROM kv").await,
            vec!["1|b", "2|a", "3|a", "4|a", "5|new"]
        );
    })
    .await;
}

/// A delete of key 5 prepared before a compaction and committed after it
/// stays deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_never_resurrects_a_key_deleted_after_it() {
    Box::pin(async {
        let dir = TempDir::new().expect("temp dir");
        let ctx = context(&dir).await;
        write_across_a_compaction(&ctx, "kd", "", &[(5, "a")], Some(&[3])).await;
        assert_eq!(
            rows(&ctx, "SELECT * FROM kd").await,
            vec!["1|b", "2|a", "3|a", "4|a"]
        );
    })
    .await;
}

/// Partitioned primary-key tables whose partition values need escaping in
/// a path (or are empty), compacted after every tiering round by the
/// small-bucket rule, read as their twin that is never compacted, round
/// after round of inserts, updates and deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_bucket_compactions_of_awkward_partitions_match_an_uncompacted_twin() {
    Box::pin(async {
        let dir = TempDir::new().expect("temp dir");
        let ctx = context(&dir).await;
        for (name, threshold) in [
            ("pc", ""),
            ("po", ", 'compaction.total-size-threshold' = '0'"),
        ] {
            run(
                &ctx,
                &format!(
                    "CREATE TABLE {name} (p STRING NOT NULL, d DATE NOT NULL, id BIGINT NOT NULL, \
                     v STRING, PRIMARY KEY (p, d, id)) PARTITIONED BY (p, d) \
                     WITH ('bucket' = '2', 'lakestream.enabled' = 'true'{threshold})"
                ),
            )
            .await;
        }
        let parts = ["a/b", "c d", "e=f", "%41", "", "é:ü?"];
        for round in 0..4i64 {
            for name in ["pc", "po"] {
                for (n, p) in parts.iter().enumerate() {
                    let n = i64::try_from(n).expect("small");
                    run(
                        &ctx,
                        &format!(
                            "INSERT INTO {name} VALUES ('{p}', DATE '2024-01-0{}', {round}, \
                             'r{round}'), ('{p}', DATE '2024-01-01', {}, 'x{round}')",
                            1 + n % 3,
                            n
                        ),
                    )
                    .await;
                }
                if round == 2 {
                    run(&ctx, &format!("DELETE FROM {name} WHERE id = 1")).await;
                }
                run(&ctx, &format!("CALL sys.lakestream_tier('default.{name}')")).await;
            }
            let expected = rows(&ctx, "SELECT * FROM po").await;
            assert_eq!(
                rows(&ctx, "SELECT * FROM pc").await,
                expected,
                "round {round}"
            );
            for filter in ["p = 'a/b'", "p = ''", "d = DATE '2024-01-02'", "p = 'é:ü?'"] {
                assert_eq!(
                    rows(&ctx, &format!("SELECT * FROM pc WHERE {filter}")).await,
                    rows(&ctx, &format!("SELECT * FROM po WHERE {filter}")).await,
                    "round {round}, {filter}"
                );
            }
        }
        let compacts = rows(
            &ctx,
            "SELECT count(*) FROM pc$snapshots WHERE commit_kind = 'COMPACT'",
        )
        .await;
        assert_ne!(compacts, vec!["0"]);
    })
    .await;
}

/// Maintenance after a tiering round runs with the `Table` the round was
/// given, loaded before the tiering lock was taken; the lock is let go
/// between the round's commit and its maintenance, so the table can be
/// dropped and created again meanwhile, with another primary key. A
/// compaction through the old handle merges the new table's rows by the old
/// key: two rows of the new table with the same `id` become one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_through_a_handle_on_a_dropped_table_loses_no_row() {
    Box::pin(async {
        let dir = TempDir::new().expect("temp dir");
        let ctx = context(&dir).await;
        run(
            &ctx,
            "CREATE TABLE re (id BIGINT NOT NULL, v STRING NOT NULL, PRIMARY KEY (id)) \
             WITH ('bucket' = '1')",
        )
        .await;
        run(&ctx, "INSERT INTO re VALUES (1, 'a')").await;
        let stale = table(&ctx, "re").await;
        run(&ctx, "DROP TABLE re").await;
        run(
            &ctx,
            "CREATE TABLE re (id BIGINT NOT NULL, v STRING NOT NULL, PRIMARY KEY (id, v)) \
             WITH ('bucket' = '1')",
        )
        .await;
        run(&ctx, "INSERT INTO re VALUES (1, 'a')").await;
        run(&ctx, "INSERT INTO re VALUES (1, 'b')").await;
        assert_eq!(rows(&ctx, "SELECT * FROM re").await, vec!["1|a", "1|b"]);
        let done = paimon_lakestream::maintenance::after_commit(
            &stale,
            paimon_lakestream::options::AutoMaintenance::ALL,
        )
        .await;
        assert!(
            done.is_ok(),
            "{:?}",
            done.err().map(|f| f.error.to_string())
        );
        assert_eq!(rows(&ctx, "SELECT * FROM re").await, vec!["1|a", "1|b"]);
    })
    .await;
}

/// `CALL sys.compact` on a `first-row` table, whose level-0 files paimon
/// 0.4's scan skips: it failed saying the table's manifests "do not add
/// up" (as if the table were damaged); it leaves the table as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacting_a_first_row_table_is_not_called_damage() {
    Box::pin(async {
        let dir = TempDir::new().expect("temp dir");
        let ctx = context(&dir).await;
        run(
            &ctx,
            "CREATE TABLE fr (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
             WITH ('bucket' = '1', 'merge-engine' = 'first-row')",
        )
        .await;
        run(&ctx, "INSERT INTO fr VALUES (1, 'a'), (2, 'a')").await;
        run(&ctx, "INSERT INTO fr VALUES (1, 'b')").await;
        let before = rows(&ctx, "SELECT * FROM fr").await;
        run(&ctx, "CALL sys.compact('default.fr')").await;
        assert_eq!(rows(&ctx, "SELECT * FROM fr").await, before);
    })
    .await;
}

/// One key updated, deleted and inserted again across tiering rounds (and
/// within one), its bucket compacted whole after every round by the
/// small-bucket rule: each round reads as the twin never compacted, through
/// Paimon and through `$rt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_and_written_again_across_compacted_rounds() {
    Box::pin(async {
        let dir = TempDir::new().expect("temp dir");
        let ctx = context(&dir).await;
        for (name, threshold) in [
            ("kc", ""),
            ("ko", ", 'compaction.total-size-threshold' = '0'"),
        ] {
            run(
                &ctx,
                &format!(
                    "CREATE TABLE {name} (id BIGINT NOT NULL, v STRING, PRIMARY KEY (id)) \
                     WITH ('bucket' = '1', 'lakestream.enabled' = 'true'{threshold})"
                ),
            )
            .await;
        }
        for round in 0..6i64 {
            for name in ["kc", "ko"] {
                run(
                    &ctx,
                    &format!(
                        "INSERT INTO {name} VALUES (1, 'r{round}'), ({}, 'x')",
                        round + 10
                    ),
                )
                .await;
                match round % 3 {
                    0 => run(&ctx, &format!("DELETE FROM {name} WHERE id = 1")).await,
                    1 => {}
                    _ => {
                        run(&ctx, &format!("DELETE FROM {name} WHERE id = 1")).await;
                        run(
                            &ctx,
                            &format!("INSERT INTO {name} VALUES (1, 'again{round}')"),
                        )
                        .await;
                    }
                }
                run(&ctx, &format!("CALL sys.lakestream_tier('default.{name}')")).await;
            }
            let expected = rows(&ctx, "SELECT * FROM ko").await;
            let key = match round % 3 {
                0 => None,
                1 => Some(format!("1|r{round}")),
                _ => Some(format!("1|again{round}")),
            };
            assert_eq!(
                expected.iter().find(|r| r.starts_with("1|")).cloned(),
                key,
                "round {round}"
            );
            assert_eq!(
                rows(&ctx, "SELECT * FROM kc").await,
                expected,
                "round {round}"
            );
            assert_eq!(
                rows(&ctx, "SELECT * FROM kc$rt").await,
                expected,
                "round {round}"
            );
        }
        assert_ne!(
            rows(
                &ctx,
                "SELECT count(*) FROM kc$snapshots WHERE commit_kind = 'COMPACT'"
            )
            .await,
            vec!["0"]
        );
    })
    .await;
}
