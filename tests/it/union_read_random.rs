//! `t$rt` on primary-key tables against a model, over seeded random mixes
//! of Paimon rows and store inserts, updates and deletes, with store keys
//! that overlap Paimon's and keys that do not, for an integer key, a string
//! key and a two-column key. The union read clears most Paimon rows with
//! cheap tests (a key range, key hashes) before the exact lookup; a mistake
//! there shows as a Paimon row that comes back after the store updated or
//! deleted its key.
//!
//! `LAKESTREAM_UNION_READ_SEED` runs one seed instead of the fixed ones.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};
use paimon_lakestream::LakeStreamContext;

use crate::support::{CatalogKind, TestWarehouse};

/// SplitMix64: a seed replays the same plan.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    /// `k INT`.
    Int,
    /// `k STRING`, unpadded, so string order is not number order.
    Str,
    /// `(a STRING, b INT)`.
    Pair,
}

impl Shape {
    fn ddl(self, table: &str) -> String {
        let (keys, pk) = match self {
            Shape::Int => ("k INT NOT NULL", "k"),
            Shape::Str => ("k STRING NOT NULL", "k"),
            Shape::Pair => ("a STRING NOT NULL, b INT NOT NULL", "a, b"),
        };
        format!(
            "CREATE TABLE {table} ({keys}, v STRING, n BIGINT, PRIMARY KEY ({pk})) \
             WITH ('bucket' = '2')"
        )
    }

    /// Key number `i` as SQL values.
    fn key_values(self, i: u64) -> String {
        match self {
            Shape::Int => format!("{i}"),
            Shape::Str => format!("'k{i}'"),
            Shape::Pair => format!("'g{}', {}", i % 5, i / 5),
        }
    }

    /// A condition that holds for key number `i` only.
    fn key_is(self, i: u64) -> String {
        match self {
            Shape::Int => format!("k = {i}"),
            Shape::Str => format!("k = 'k{i}'"),
            Shape::Pair => format!("(a = 'g{}' AND b = {})", i % 5, i / 5),
        }
    }

    /// Key number `i` as the read renders it.
    fn key_text(self, i: u64) -> String {
        match self {
            Shape::Int => format!("{i}"),
            Shape::Str => format!("k{i}"),
            Shape::Pair => format!("g{}|{}", i % 5, i / 5),
        }
    }

    /// The read's rows rendered as text, one column.
    fn select(self, table: &str) -> String {
        let key = match self {
            Shape::Int => "CAST(k AS VARCHAR)",
            Shape::Str => "k",
            Shape::Pair => "a || '|' || CAST(b AS VARCHAR)",
        };
        format!("SELECT {key} || '|' || v || '|' || CAST(n AS VARCHAR) FROM {table}")
    }
}

async fn run(ctx: &LakeStreamContext, sql: &str) -> Vec<RecordBatch> {
    Box::pin(async { ctx.sql(sql).await?.collect().await })
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn texts(ctx: &LakeStreamContext, sql: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for batch in run(ctx, sql).await {
        let column =
            cast(batch.column(0), &DataType::Utf8).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let column = column.as_string::<i32>();
        for i in 0..column.len() {
            rows.push(column.value(i).to_string());
        }
    }
    rows.sort();
    rows
}

/// The model: key number to (v, n).
type Model = BTreeMap<u64, (String, i64)>;

fn expected(shape: Shape, model: &Model) -> Vec<String> {
    let mut rows: Vec<String> = model
        .iter()
        .map(|(&k, (v, n))| format!("{}|{v}|{n}", shape.key_text(k)))
        .collect();
    rows.sort();
    rows
}

/// Writes `rows` (key number, v, n) to `table` in one statement.
async fn insert(ctx: &LakeStreamContext, shape: Shape, table: &str, rows: &[(u64, String, i64)]) {
    let values: Vec<String> = rows
        .iter()
        .map(|(k, v, n)| format!("({}, '{v}', {n})", shape.key_values(*k)))
        .collect();
    run(
        ctx,
        &format!("INSERT INTO {table} VALUES {}", values.join(", ")),
    )
    .await;
}

/// What a history wrote: the model, and the last version written.
#[derive(Default)]
struct Written {
    model: Model,
    version: i64,
}

impl Written {
    /// Writes a new version of each of `keys` to `table` in one statement,
    /// and to the model.
    async fn upsert(
        &mut self,
        ctx: &LakeStreamContext,
        shape: Shape,
        table: &str,
        rng: &mut Rng,
        keys: Vec<u64>,
    ) {
        let rows: Vec<_> = keys
            .into_iter()
            .map(|k| {
                self.version += 1;
                (k, format!("v{k}-{}", self.version), rng.below(1000) as i64)
            })
            .collect();
        insert(ctx, shape, table, &rows).await;
        for (k, v, n) in rows {
            self.model.insert(k, (v, n));
        }
    }
}

/// Distinct key numbers, `count` of them, from `from..to`.
fn keys(rng: &mut Rng, count: u64, from: u64, to: u64) -> Vec<u64> {
    let mut picked = std::collections::BTreeSet::new();
    for _ in 0..count {
        picked.insert(from + rng.below(to - from));
    }
    picked.into_iter().collect()
}

/// One seeded history on one table, checked against the model after each
/// store statement.
async fn history(ctx: &LakeStreamContext, shape: Shape, seed: u64) {
    let mut rng = Rng(seed);
    let table = format!("t_{}_{seed}", format!("{shape:?}").to_lowercase());
    run(ctx, &shape.ddl(&table)).await;
    let mut written = Written::default();
    // Paimon: keys in 0..200, in one or two commits.
    for _ in 0..1 + rng.below(2) {
        let count = 20 + rng.below(150);
        let picked = keys(&mut rng, count, 0, 200);
        written.upsert(ctx, shape, &table, &mut rng, picked).await;
    }
    run(
        ctx,
        &format!("ALTER TABLE {table} SET TBLPROPERTIES ('lakestream.enabled' = 'true')"),
    )
    .await;
    let count_query = format!("SELECT count(*), sum(n) FROM {table}$rt");
    for step in 0..8 {
        match rng.below(10) {
            // New keys only, past Paimon's.
            0..=2 => {
                let count = 1 + rng.below(40);
                let picked = keys(&mut rng, count, 200, 400);
                written.upsert(ctx, shape, &table, &mut rng, picked).await;
            }
            // Anywhere: updates of Paimon's keys and of the store's, new keys.
            3..=5 => {
                let count = 1 + rng.below(30);
                let picked = keys(&mut rng, count, 0, 400);
                written.upsert(ctx, shape, &table, &mut rng, picked).await;
            }
            // Deletes, of present and absent keys, mostly Paimon's.
            6..=7 => {
                let to = if rng.below(2) == 0 { 200 } else { 400 };
                let count = 1 + rng.below(10);
                let gone = keys(&mut rng, count, 0, to);
                let condition: Vec<String> = gone.iter().map(|&k| shape.key_is(k)).collect();
                run(
                    ctx,
                    &format!("DELETE FROM {table} WHERE {}", condition.join(" OR ")),
                )
                .await;
                for k in gone {
                    written.model.remove(&k);
                }
            }
            // One key, updated: a single candidate among Paimon's rows.
            8 => {
                let picked = vec![rng.below(200)];
                written.upsert(ctx, shape, &table, &mut rng, picked).await;
            }
            // Tiering: Paimon then holds the store's rows so far.
            _ => {
                run(ctx, &format!("CALL sys.lakestream_tier('default.{table}')")).await;
            }
        }
        let context = format!("{shape:?}, seed {seed}, after step {step}");
        assert_eq!(
            texts(ctx, &shape.select(&format!("{table}$rt"))).await,
            expected(shape, &written.model),
            "{context}: t$rt (left), model (right)"
        );
        let counted = run(ctx, &count_query).await;
        let count = counted[0].column(0).as_primitive::<Int64Type>().value(0);
        let sum = counted[0].column(1).as_primitive::<Int64Type>();
        let sum = if sum.is_null(0) { 0 } else { sum.value(0) };
        let model_sum: i64 = written.model.values().map(|(_, n)| n).sum();
        assert_eq!(
            (count, sum),
            (written.model.len() as i64, model_sum),
            "{context}: count(*), sum(n) of t$rt (left), model (right)"
        );
    }
}

async fn check(shape: Shape) {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let path = warehouse.path().join("store");
    let ctx = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", path.to_str().expect("utf-8 path")),
        ])
        .await;
    let seeds: Vec<u64> = match std::env::var("LAKESTREAM_UNION_READ_SEED") {
        Ok(seed) => vec![seed.parse().expect("LAKESTREAM_UNION_READ_SEED: a number")],
        Err(_) => vec![1, 2, 3],
    };
    for seed in seeds {
        history(&ctx, shape, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn union_read_random_int_key() {
    check(Shape::Int).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn union_read_random_string_key() {
    check(Shape::Str).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn union_read_random_two_column_key() {
    check(Shape::Pair).await;
}
