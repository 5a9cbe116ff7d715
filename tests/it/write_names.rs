//! Write statements on lake-stream tables whose names the statement filter
//! and the executing engine could read differently (issue 10, case 1):
//! mixed-case names created unquoted, non-ASCII names, a catalog registered
//! under a mixed-case name. Whatever the spelling, a write reaches the store
//! or is refused; it never commits a Paimon snapshot.

use std::time::Duration;

use paimon_lakestream::LakeStreamContext;
use proptest::prelude::*;

use crate::support::{ids, try_run, CatalogKind, TestWarehouse};

/// The lake-stream tables of every test here, as stored, with a partition
/// column where they have one.
const TABLES: &[(&str, Option<&str>)] = &[("Ev", None), ("Заказы", None), ("Счёт", Some("p"))];

async fn setup() -> (TestWarehouse, LakeStreamContext) {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let mut ctx = warehouse
        .context_with(&[("lakestream.store", "memory")])
        .await;
    for (table, partition) in TABLES {
        // Created unquoted: SQLContext keeps the name as written.
        let sql = match partition {
            None => format!(
                "CREATE TABLE {table} (id INT NOT NULL, v STRING, PRIMARY KEY (id)) \
                 WITH ('bucket' = '1', 'lakestream.enabled' = 'true')"
            ),
            Some(p) => format!(
                "CREATE TABLE {table} ({p} INT NOT NULL, id INT NOT NULL, v STRING, \
                 PRIMARY KEY ({p}, id)) PARTITIONED BY ({p}) \
                 WITH ('bucket' = '1', 'lakestream.enabled' = 'true')"
            ),
        };
        let result = ctx.execute(&sql).await;
        if let Err(e) = result {
            panic!("{sql}: {e}");
        }
        let insert = match partition {
            None => format!("INSERT INTO \"{table}\" VALUES (1, 'a'), (2, 'b')"),
            Some(_) => format!("INSERT INTO \"{table}\" VALUES (1, 1, 'a'), (1, 2, 'b')"),
        };
        crate::support::run(&ctx, &insert).await;
    }
    let catalog = format!(
        "CREATE CATALOG Raw WITH ('warehouse' = '{}', 'lakestream.store' = 'memory')",
        warehouse.path().join("warehouse").display()
    );
    if let Err(e) = ctx.execute(&catalog).await {
        panic!("{catalog}: {e}");
    }
    (warehouse, ctx)
}

/// How many Paimon snapshots each lake-stream table has.
async fn snapshots(ctx: &LakeStreamContext) -> Vec<i64> {
    let mut out = Vec::new();
    for (table, _) in TABLES {
        let sql = format!("SELECT count(*) FROM paimon.\"default\".\"{table}$snapshots\"");
        out.extend(ids(ctx, &sql).await);
    }
    out
}

/// Spellings of `table`'s name: quoted, unquoted as stored, in other cases,
/// qualified by database and catalog (`Raw` as well as `paimon`).
fn spellings(table: &str) -> Vec<String> {
    let upper = table.to_uppercase();
    let lower = table.to_lowercase();
    let mut bare = vec![
        format!("\"{table}\""),
        table.to_string(),
        upper.clone(),
        lower.clone(),
        format!("\"{upper}\""),
    ];
    let mut out = Vec::new();
    for name in bare.drain(..) {
        out.push(format!("default.{name}"));
        out.push(format!("\"default\".{name}"));
        out.push(format!("paimon.default.{name}"));
        out.push(format!("Raw.default.{name}"));
        out.push(format!("RAW.\"default\".{name}"));
        out.push(format!("\"Raw\".default.{name}"));
        out.push(name);
    }
    out
}

/// Every write statement kind, on the name `name` of a table partitioned by
/// `partition` (or not).
fn writes(name: &str, partition: Option<&str>) -> Vec<String> {
    let row = match partition {
        None => "(3, 'x')",
        Some(_) => "(1, 3, 'x')",
    };
    let mut out = vec![
        format!("INSERT INTO {name} VALUES {row}"),
        format!("INSERT OVERWRITE {name} VALUES {row}"),
        format!("DELETE FROM {name} WHERE id = 1"),
        format!("DELETE FROM {name}"),
        format!("UPDATE {name} SET v = 'u' WHERE id = 2"),
        format!("TRUNCATE TABLE {name}"),
        format!("TRUNCATE {name}"),
        format!(
            "MERGE INTO {name} USING (SELECT 2 AS id) s ON id = s.id \
             WHEN MATCHED THEN UPDATE SET v = 'm'"
        ),
        format!(
            "MERGE INTO {name} t USING (SELECT 1 AS k) s ON t.id = s.k WHEN MATCHED THEN DELETE"
        ),
    ];
    if let Some(p) = partition {
        out.push(format!(
            "INSERT OVERWRITE {name} PARTITION ({p} = 1) VALUES (5, 'o')"
        ));
        out.push(format!(
            "INSERT OVERWRITE {name} PARTITION ({p} = 1) SELECT 5, 'o'"
        ));
    }
    out
}

async fn run_write(ctx: &LakeStreamContext, sql: &str) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(30), try_run(ctx, sql)).await {
        Ok(result) => result,
        Err(_) => Err(format!("{sql}: timed out")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_name_writes_paimon() {
    let (_warehouse, ctx) = setup().await;
    let before = snapshots(&ctx).await;
    for (table, partition) in TABLES {
        for name in spellings(table) {
            for sql in writes(&name, *partition) {
                let _ = run_write(&ctx, &sql).await;
                assert_eq!(snapshots(&ctx).await, before, "{sql} wrote Paimon");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_the_issue_reported() {
    let (_warehouse, ctx) = setup().await;
    for sql in [
        "TRUNCATE TABLE Ev",
        "TRUNCATE TABLE Заказы",
        "INSERT OVERWRITE Счёт PARTITION (p = 1) VALUES (9, 'o')",
        "MERGE INTO Счёт USING (SELECT 1 AS id) s ON Счёт.id = s.id WHEN MATCHED THEN DELETE",
        "MERGE INTO Raw.default.Ev USING (SELECT 1 AS id) s ON Ev.id = s.id WHEN MATCHED THEN DELETE",
        "DELETE FROM Raw.default.Ev WHERE id = 1",
        "TRUNCATE TABLE Raw.default.\"Ev\"",
    ] {
        let err = run_write(&ctx, sql).await.expect_err(sql);
        assert!(err.contains("lake-stream table"), "{sql}: {err}");
    }
    let err = run_write(&ctx, "TRUNCATE TABLE Ev").await.unwrap_err();
    assert!(
        err.contains("Quote the name as it is stored: default.\"Ev\""),
        "{err}"
    );
    let err = run_write(&ctx, "DELETE FROM Raw.default.Ev WHERE id = 1")
        .await
        .unwrap_err();
    assert!(err.contains("\"Raw\".default.\"Ev\""), "{err}");
    assert_eq!(snapshots(&ctx).await, vec![0, 0, 0]);
    // What routes to the store does so: a non-ASCII name reads the same in
    // both engines, and its DELETE and UPDATE change the store's rows.
    run_write(&ctx, "DELETE FROM Заказы WHERE id = 1")
        .await
        .unwrap();
    run_write(&ctx, "UPDATE Счёт SET v = 'u' WHERE id = 2")
        .await
        .unwrap();
    assert_eq!(ids(&ctx, "SELECT id FROM Заказы$rt").await, vec![2]);
    assert_eq!(
        ids(&ctx, "SELECT count(*) FROM Счёт$rt WHERE v = 'u'").await,
        vec![1]
    );
    assert_eq!(snapshots(&ctx).await, vec![0, 0, 0]);
}

/// A name part: one of the tables or catalogs, spelled quoted or not, in
/// some mix of cases.
fn name_part(stored: &'static str) -> impl Strategy<Value = String> {
    (any::<bool>(), proptest::collection::vec(any::<bool>(), 8)).prop_map(move |(quoted, flips)| {
        let spelled: String = stored
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if flips.get(i).copied().unwrap_or(false) {
                    if c.is_lowercase() {
                        c.to_uppercase().collect::<String>()
                    } else {
                        c.to_lowercase().collect::<String>()
                    }
                } else {
                    c.to_string()
                }
            })
            .collect();
        if quoted {
            format!("\"{spelled}\"")
        } else {
            spelled
        }
    })
}

fn name() -> impl Strategy<Value = (String, Option<&'static str>)> {
    let table = prop_oneof![
        (name_part("Ev"), Just(None)),
        (name_part("Заказы"), Just(None)),
        (name_part("Счёт"), Just(Some("p"))),
    ];
    let catalog = prop_oneof![name_part("paimon"), name_part("Raw")];
    (0..3usize, catalog, name_part("default"), table).prop_map(
        |(qualify, catalog, database, (table, partition))| {
            let name = match qualify {
                0 => table,
                1 => format!("{database}.{table}"),
                _ => format!("{catalog}.{database}.{table}"),
            };
            (name, partition)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Generated spellings of every write statement: Paimon's snapshots of
    /// the lake-stream tables never change.
    #[test]
    fn generated_names_never_write_paimon(
        names in proptest::collection::vec((name(), 0..11usize), 1..12)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (_warehouse, ctx) = setup().await;
            for ((name, partition), kind) in &names {
                let statements = writes(name, *partition);
                let sql = &statements[kind % statements.len()];
                let _ = run_write(&ctx, sql).await;
                assert_eq!(snapshots(&ctx).await, vec![0, 0, 0], "{sql} wrote Paimon");
            }
        });
    }
}

/// A lake-stream `Ev` and a plain `ev`: `INSERT INTO Ev` reads as `ev` in
/// DataFusion's planner and as `Ev` as written. Like DELETE and TRUNCATE of
/// the same spelling, it is refused with the quoted name to use, and writes
/// neither table (issue 37, item 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_checks_both_readings_of_its_name() {
    let (_warehouse, ctx) = setup().await;
    crate::support::run(&ctx, "CREATE TABLE \"ev\" (id INT NOT NULL, v STRING)").await;
    for sql in [
        "INSERT INTO Ev VALUES (3, 'x')",
        "INSERT INTO default.Ev SELECT 3, 'x'",
        "DELETE FROM Ev WHERE id = 1",
        "TRUNCATE TABLE Ev",
    ] {
        let err = run_write(&ctx, sql).await.expect_err(sql);
        assert!(
            err.contains("Quote the name as it is stored: default.\"Ev\""),
            "{sql}: {err}"
        );
    }
    assert_eq!(ids(&ctx, "SELECT count(*) FROM \"ev\"").await, vec![0]);
    assert_eq!(ids(&ctx, "SELECT count(*) FROM \"Ev$rt\"").await, vec![2]);
    // Spelled as stored, each reaches its own table.
    run_write(&ctx, "INSERT INTO \"Ev\" VALUES (3, 'x')")
        .await
        .unwrap();
    run_write(&ctx, "INSERT INTO ev VALUES (4, 'y')")
        .await
        .unwrap();
    assert_eq!(ids(&ctx, "SELECT id FROM \"ev\"").await, vec![4]);
    assert_eq!(ids(&ctx, "SELECT count(*) FROM \"Ev$rt\"").await, vec![3]);
    assert_eq!(snapshots(&ctx).await, vec![0, 0, 0]);
}
