//! Merge engines: for every table the mode accepts, `t$rt` before tiering
//! gives the rows Paimon gives in `t` after tiering.
//!
//! `sql-tests/merge_engines.slt` holds the cases by hand (run by `slt::filesystem_local`); the seeded random
//! histories here write upserts, partial rows and deletes in random order,
//! tier at random points (in one commit or one commit per write), and compare
//! `t$rt` before each tiering with `t` after it. A failure prints its seed;
//! `MERGE_ENGINES_SEED=<seed>` replays one, `MERGE_ENGINES_SEEDS=<n>` runs more.

use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use paimon_lakestream::store::{Capabilities, LakestreamStore, StoreContext, StoreFactory};
use paimon_lakestream::LakeStreamContext;

use crate::support::{CatalogKind, TestWarehouse};

/// A small deterministic generator (xorshift64*), so a seed replays exactly.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A table's merge settings and what its writes may hold.
struct Engine {
    name: &'static str,
    options: &'static str,
    deletes: bool,
}

/// `k` is the key; `a` a string, `b` a big integer, `c` a small integer (the
/// sequence field where there is one), `d` a boolean.
const ENGINES: &[Engine] = &[
    Engine {
        name: "deduplicate",
        options: "",
        deletes: true,
    },
    Engine {
        name: "sequence.field",
        options: ", 'sequence.field' = 'c'",
        deletes: false,
    },
    Engine {
        name: "sequence.field descending",
        options: ", 'sequence.field' = 'c', 'sequence.field.sort-order' = 'descending'",
        deletes: false,
    },
    Engine {
        name: "sequence.field on two columns",
        options: ", 'sequence.field' = 'd,c'",
        deletes: false,
    },
    Engine {
        name: "partial-update",
        options: ", 'merge-engine' = 'partial-update'",
        deletes: false,
    },
    Engine {
        name: "partial-update, ignore-delete",
        options: ", 'merge-engine' = 'partial-update', 'partial-update.ignore-delete' = 'true'",
        deletes: false,
    },
    Engine {
        name: "aggregation: listagg, sum, max, bool_or",
        options: ", 'merge-engine' = 'aggregation', 'fields.a.aggregate-function' = 'listagg', \
                  'fields.b.aggregate-function' = 'sum', 'fields.c.aggregate-function' = 'max', \
                  'fields.d.aggregate-function' = 'bool_or'",
        deletes: false,
    },
    Engine {
        name: "aggregation: first/last values, min, bool_and",
        options: ", 'merge-engine' = 'aggregation', 'fields.a.aggregate-function' = 'first_non_null_value', \
                  'fields.b.aggregate-function' = 'last_value', 'fields.c.aggregate-function' = 'min', \
                  'fields.d.aggregate-function' = 'bool_and', \
                  'fields.default-aggregate-function' = 'first_value'",
        deletes: false,
    },
    Engine {
        name: "aggregation: defaults (last_non_null_value)",
        options: ", 'merge-engine' = 'aggregation', 'fields.a.aggregate-function' = 'listagg', \
                  'fields.a.list-agg-delimiter' = ''",
        deletes: false,
    },
];

fn value_row(rng: &mut Rng, keys: u64) -> String {
    let k = rng.below(keys) + 1;
    let a = rng.pick(&["'x'", "'y'", "'zz'", "' '", "''", "NULL", "NULL"]);
    let b = rng.pick(&[
        "1",
        "-7",
        "40",
        "9223372036854775000",
        "-9223372036854775000",
        "NULL",
    ]);
    let c = rng.pick(&["1", "2", "3", "3", "-1", "NULL"]);
    let d = rng.pick(&["true", "false", "NULL"]);
    format!("({k}, {a}, CAST({b} AS BIGINT), {c}, {d})")
}

async fn run(ctx: &LakeStreamContext, sql: &str) -> String {
    let batches = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    pretty_format_batches(&batches).unwrap().to_string()
}

/// One random history on one engine: every tiering must leave `t` with the
/// rows `t$rt` had before it, and `t$rt` unchanged.
async fn history(engine: &Engine, seed: u64) {
    let mut rng = Rng::new(seed);
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let path = warehouse.path().join("store");
    // One commit per write, or one for all: Paimon merges inside a commit
    // (its write buffer) and across commits (its read), and both must agree.
    let max_rows = if rng.chance(50) { "1" } else { "1000000" };
    let ctx = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.tier-max-rows", max_rows),
            ("local.path", path.to_str().expect("utf-8 path")),
        ])
        .await;
    let keys = 2 + rng.below(4);
    let mut log = vec![format!(
        "CREATE TABLE t (k INT NOT NULL, a STRING, b BIGINT, c INT, d BOOLEAN, \
         PRIMARY KEY (k)) WITH ('bucket' = '1'{})",
        engine.options
    )];
    // Rows in Paimon before the mode is on: the table is promoted in place.
    for _ in 0..rng.below(3) {
        let rows: Vec<String> = (0..1 + rng.below(3))
            .map(|_| value_row(&mut rng, keys))
            .collect();
        log.push(format!("INSERT INTO t VALUES {}", rows.join(", ")));
    }
    log.push("ALTER TABLE t SET TBLPROPERTIES ('lakestream.enabled' = 'true')".to_string());
    for sql in &log {
        run(&ctx, sql).await;
    }
    let context = |log: &[String]| format!("seed {seed}, {}:\n{}", engine.name, log.join(";\n"));
    for _ in 0..6 {
        for _ in 0..1 + rng.below(4) {
            let sql = if engine.deletes && rng.chance(25) {
                format!("DELETE FROM t WHERE k = {}", rng.below(keys) + 1)
            } else {
                let rows: Vec<String> = (0..1 + rng.below(3))
                    .map(|_| value_row(&mut rng, keys))
                    .collect();
                format!("INSERT INTO t VALUES {}", rows.join(", "))
            };
            run(&ctx, &sql).await;
            log.push(sql);
        }
        if rng.chance(40) {
            continue;
        }
        let realtime = run(&ctx, "SELECT * FROM t$rt ORDER BY k").await;
        run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
        log.push("CALL sys.lakestream_tier('default.t')".to_string());
        let tiered = run(&ctx, "SELECT * FROM t ORDER BY k").await;
        assert_eq!(
            realtime,
            tiered,
            "t$rt before tiering (left) and t after (right) differ; {}",
            context(&log)
        );
        let after = run(&ctx, "SELECT * FROM t$rt ORDER BY k").await;
        assert_eq!(
            after,
            tiered,
            "t$rt after tiering differs; {}",
            context(&log)
        );
        // A projection and a filter on a value column see merged rows too.
        let projected = run(
            &ctx,
            "SELECT a, k FROM t$rt WHERE b > 0 OR c IS NULL ORDER BY k",
        )
        .await;
        let expected = run(
            &ctx,
            "SELECT a, k FROM t WHERE b > 0 OR c IS NULL ORDER BY k",
        )
        .await;
        assert_eq!(
            projected,
            expected,
            "a filtered read differs; {}",
            context(&log)
        );
    }
    // The last writes, never tiered yet.
    let realtime = run(&ctx, "SELECT * FROM t$rt ORDER BY k").await;
    let filtered = run(
        &ctx,
        "SELECT a, k FROM t$rt WHERE b > 0 OR c IS NULL ORDER BY k",
    )
    .await;
    run(&ctx, "CALL sys.lakestream_tier('default.t')").await;
    let tiered = run(&ctx, "SELECT * FROM t ORDER BY k").await;
    assert_eq!(realtime, tiered, "final tiering differs; {}", context(&log));
    let expected = run(
        &ctx,
        "SELECT a, k FROM t WHERE b > 0 OR c IS NULL ORDER BY k",
    )
    .await;
    assert_eq!(
        filtered,
        expected,
        "final filtered read differs; {}",
        context(&log)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_histories_read_the_same_before_and_after_tiering() {
    let seeds: Vec<u64> = match std::env::var("MERGE_ENGINES_SEED") {
        Ok(seed) => vec![seed.parse().expect("MERGE_ENGINES_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("MERGE_ENGINES_SEEDS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(2);
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            (0..n).map(|i| base.wrapping_add(i * 7919)).collect()
        }
    };
    for &seed in &seeds {
        for engine in ENGINES {
            println!("merge engines: seed {seed}, {}", engine.name);
            history(engine, seed).await;
        }
    }
}

/// A store whose tiering is its own service (as Fluss's is): it does not
/// write the store's rows into Paimon as they were written.
#[derive(Debug)]
struct OwnTiering(Arc<crate::memory_store::MemoryStoreFactory>);

#[async_trait::async_trait]
impl StoreFactory for OwnTiering {
    fn identifier(&self) -> &str {
        "own-tiering"
    }

    async fn create(
        &self,
        context: StoreContext,
    ) -> paimon_lakestream::Result<Arc<dyn LakestreamStore>> {
        self.0.create(context).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default().with_tiers_its_log(false)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_its_own_tiering_takes_plain_deduplicate_tables_only() {
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let mut options = warehouse.catalog_options();
    options.insert("lakestream.store".to_string(), "own-tiering".to_string());
    let mut ctx = LakeStreamContext::new();
    ctx.store_registry()
        .register(Arc::new(OwnTiering(Arc::clone(&warehouse.memory))));
    ctx.register_catalog("paimon", options)
        .await
        .expect("register catalog");
    run(
        &ctx,
        "CREATE TABLE plain (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'merge-engine' = 'deduplicate', 'lakestream.enabled' = 'true')",
    )
    .await;
    for (options, option) in [
        (
            "'merge-engine' = 'partial-update'",
            "'merge-engine'='partial-update'",
        ),
        ("'sequence.field' = 'v'", "'sequence.field'='v'"),
        ("'ignore-delete' = 'true'", "'ignore-delete'='true'"),
    ] {
        let sql = format!(
            "CREATE TABLE t (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
             WITH ('bucket' = '1', {options}, 'lakestream.enabled' = 'true')"
        );
        let error = match ctx.sql(&sql).await {
            Ok(df) => df.collect().await.map(|_| ()).expect_err(&sql),
            Err(e) => e,
        }
        .to_string();
        assert!(
            error.contains(&format!(
                "cannot set 'lakestream.enabled'='true' on 'default.t': {option} is not supported"
            )) && error.contains("tiers with its own service"),
            "{sql}: {error}"
        );
    }
}
