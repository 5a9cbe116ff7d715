//! A randomized test of lake-stream tables against plain twins (issue 10,
//! "How it is tested"). Seeded write statements (name spelling, statement
//! kind, predicate shape) run on a lake-stream primary-key table and, where it
//! accepts them, on a plain append table holding the same rows; after each,
//! `t$rt` must equal the twin, and Paimon's snapshots of the lake-stream
//! tables must change only through `CALL sys.lakestream_tier`.
//!
//! The twin is an oracle, not a copy of the statement: a subquery over the
//! fixed table `ref` is replaced on the twin side by the literal values it
//! yields (an IN list, `true`/`false`, a constant), so the twin applies SQL's
//! three-valued logic rather than whatever the engine makes of the subquery.
//! Subqueries over the table itself (`t$rt`) read the twin instead. An upsert
//! (`INSERT` on the primary-key table) is mirrored as delete-then-insert of
//! its keys. Statements the twin's engine cannot run as written (correlated
//! subqueries in paimon-datafusion's DELETE/UPDATE) are applied through a
//! SELECT of the rows they select.
//!
//! Seeds: fixed by default (reproducible); `LAKESTREAM_TWIN_SEED=<n>` runs
//! seed `n` only, `LAKESTREAM_TWIN_SEED=random` a seed from the clock (printed),
//! `LAKESTREAM_TWIN_STEPS=<n>` sets the statements per seed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{new_null_array, Array, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use futures::FutureExt;
use paimon_lakestream::LakeStreamContext;

use crate::support::{local_store_options, try_ids, try_run};

/// Seeds the test runs without `LAKESTREAM_TWIN_SEED`.
const DEFAULT_SEEDS: &[u64] = &[1, 2, 3];
/// Statements per seed without `LAKESTREAM_TWIN_STEPS`.
const DEFAULT_STEPS: usize = 40;

/// The rows of `ref`, which no statement changes: the twin's literal
/// rewrites of subqueries over it below are derived from these by hand.
const REF_ROWS: &str = "(1, 'x'), (3, 'y'), (5, 'x'), (8, 'z'), (11, NULL), (NULL, 'n')";

/// Subqueries over `ref` yielding one column, and the values they yield.
const REF_SETS: &[(&str, &[Option<i64>])] = &[
    ("SELECT k FROM ref WHERE tag = 'x'", &[Some(1), Some(5)]),
    (
        "SELECT k FROM ref",
        &[Some(1), Some(3), Some(5), Some(8), Some(11), None],
    ),
    (
        "SELECT k FROM ref WHERE k IS NOT NULL",
        &[Some(1), Some(3), Some(5), Some(8), Some(11)],
    ),
    ("SELECT k FROM ref WHERE tag = 'none'", &[]),
    (
        "SELECT k + 1 FROM ref WHERE k > 2",
        &[Some(4), Some(6), Some(9), Some(12)],
    ),
    ("SELECT k FROM ref WHERE tag IS NULL", &[Some(11)]),
    // The row (NULL, 'n') passes `tag <> 'x'`: a NULL in the set.
    (
        "SELECT k FROM ref WHERE tag <> 'x'",
        &[Some(3), Some(8), None],
    ),
    ("SELECT 6", &[Some(6)]),
];

/// Correlated `EXISTS (SELECT 1 FROM ref r WHERE r.k = t.k <extra>)`: the
/// extra condition and the keys it selects.
const REF_EXISTS: &[(&str, &[i64])] = &[
    ("", &[1, 3, 5, 8, 11]),
    (" AND r.tag = 'x'", &[1, 5]),
    (" AND r.tag IS NULL", &[11]),
    (" AND r.tag = 'none'", &[]),
];

/// Scalar subqueries over `ref` and their values.
const REF_SCALARS: &[(&str, &str)] = &[
    ("(SELECT max(k) FROM ref)", "11"),
    ("(SELECT min(k) FROM ref)", "1"),
    ("(SELECT min(k) FROM ref WHERE tag = 'z')", "8"),
    ("(SELECT k FROM ref WHERE tag = 'none')", "NULL"),
    ("(SELECT avg(k) FROM ref)", "5.6"),
    ("(SELECT count(*) FROM ref)", "6"),
];

/// A lake-stream table and its plain twin.
struct Pair {
    /// The table name as stored.
    stored: &'static str,
    twin: &'static str,
    /// How to read `t$rt`, `t` and `t$snapshots`.
    rt: &'static str,
    lake: &'static str,
    snapshots: &'static str,
    /// The argument of `CALL sys.lakestream_tier`.
    tier: &'static str,
}

const PAIRS: &[Pair] = &[
    Pair {
        stored: "kv",
        twin: "twin",
        rt: "kv$rt",
        lake: "kv",
        snapshots: "paimon.\"default\".\"kv$snapshots\"",
        tier: "default.kv",
    },
    // Created unquoted: SQLContext stores the name as written.
    Pair {
        stored: "Ev",
        twin: "twin_ev",
        rt: "paimon.\"default\".\"Ev$rt\"",
        lake: "paimon.\"default\".\"Ev\"",
        snapshots: "paimon.\"default\".\"Ev$snapshots\"",
        tier: "default.Ev",
    },
];

/// Whether a spelling names the lake-stream table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    /// It does: the statement applies, or is refused naming table or clause.
    Yes,
    /// The engines may read it differently (a mixed-case name unquoted):
    /// applied to the table, or refused.
    Maybe,
    /// A table that does not exist: the statement must fail.
    No,
}

impl Names {
    fn and(self, other: Names) -> Names {
        match (self, other) {
            (Names::No, _) | (_, Names::No) => Names::No,
            (Names::Maybe, _) | (_, Names::Maybe) => Names::Maybe,
            _ => Names::Yes,
        }
    }
}

/// splitmix64: small, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A key: 1..=14, a little wider than what the tables hold.
    fn key(&mut self) -> i64 {
        1 + self.below(14) as i64
    }

    fn value(&mut self) -> Option<String> {
        self.pick(&[Some("a"), Some("b"), Some("c"), Some("x"), None])
            .map(str::to_string)
    }
}

type Row = (i64, Option<String>);

fn literal(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("'{s}'"),
        None => "NULL".to_string(),
    }
}

fn values(rows: &[(Option<i64>, Option<String>)]) -> String {
    rows.iter()
        .map(|(k, v)| {
            let k = k.map_or("NULL".to_string(), |k| k.to_string());
            format!("({k}, {})", literal(v))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn show(rows: &[Row]) -> String {
    let cells: Vec<String> = rows
        .iter()
        .map(|(k, v)| format!("{k}:{}", v.as_deref().unwrap_or("NULL")))
        .collect();
    format!("[{}]", cells.join(" "))
}

/// `k [NOT] IN (<values>)` as SQL evaluates it, for a set known in advance.
fn in_list(negated: bool, set: &[Option<i64>]) -> String {
    if set.is_empty() {
        return if negated { "true" } else { "false" }.to_string();
    }
    let items: Vec<String> = set
        .iter()
        .map(|k| k.map_or("NULL".to_string(), |k| k.to_string()))
        .collect();
    let not = if negated { "NOT " } else { "" };
    format!("k {not}IN ({})", items.join(", "))
}

/// How a name of the lake-stream table is spelled in a statement.
struct Spelling {
    name: String,
    /// What a correlated subquery calls the statement's table.
    qualifier: String,
    names: Names,
}

fn spelling(rng: &mut Rng, pair: usize) -> Spelling {
    let tables: &[(&str, Names)] = if pair == 0 {
        &[
            ("kv", Names::Yes),
            ("KV", Names::Yes),
            ("Kv", Names::Yes),
            ("\"kv\"", Names::Yes),
            ("\"KV\"", Names::No),
            ("\"Kv\"", Names::No),
        ]
    } else {
        &[
            ("\"Ev\"", Names::Yes),
            ("Ev", Names::Maybe),
            ("EV", Names::Maybe),
            ("ev", Names::Maybe),
            ("\"EV\"", Names::No),
            ("\"ev\"", Names::No),
        ]
    };
    let prefixes: &[(&str, Names)] = &[
        ("", Names::Yes),
        ("default.", Names::Yes),
        ("\"default\".", Names::Yes),
        ("DEFAULT.", Names::Yes),
        ("\"DEFAULT\".", Names::No),
        ("paimon.default.", Names::Yes),
        ("\"paimon\".\"default\".", Names::Yes),
        ("PAIMON.Default.", Names::Yes),
        ("\"PAIMON\".default.", Names::No),
    ];
    // Mostly names that resolve, so that most statements are compared.
    loop {
        let (table, t) = *rng.pick(tables);
        let (prefix, p) = *rng.pick(prefixes);
        let names = t.and(p);
        if names != Names::Yes && rng.chance(85) {
            continue;
        }
        return Spelling {
            name: format!("{prefix}{table}"),
            qualifier: table.to_string(),
            names,
        };
    }
}

/// What a predicate may refer to, on each side.
struct Scope {
    /// The statement's table, for correlated subqueries (`None`: none).
    kv_qualifier: Option<String>,
    kv_rt: String,
    twin: String,
    /// Whether the twin replaces subqueries over `ref` by their values (SQL's
    /// semantics) or keeps them (the engine's: an INSERT's SELECT runs as a
    /// plain SELECT, whose `NOT IN` DataFusion 54 answers without SQL's NULL
    /// rule on lake-stream and plain tables alike).
    literal_ref: bool,
}

/// A predicate as the lake-stream statement spells it, and as the twin does.
fn predicate(rng: &mut Rng, scope: &Scope, depth: u32) -> (String, String) {
    if depth > 0 && rng.chance(40) {
        let (a, ta) = predicate(rng, scope, depth - 1);
        return match rng.below(3) {
            0 => {
                let (b, tb) = predicate(rng, scope, depth - 1);
                (format!("({a} AND {b})"), format!("({ta} AND {tb})"))
            }
            1 => {
                let (b, tb) = predicate(rng, scope, depth - 1);
                (format!("({a} OR {b})"), format!("({ta} OR {tb})"))
            }
            _ => (format!("NOT ({a})"), format!("NOT ({ta})")),
        };
    }
    let same = |s: String| (s.clone(), s);
    match rng.below(12) {
        0 | 1 => {
            let op = rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
            same(format!("k {op} {}", rng.below(15)))
        }
        2 => {
            let a = rng.below(14);
            let b = a + rng.below(6);
            let not = if rng.chance(30) { "NOT " } else { "" };
            same(format!("k {not}BETWEEN {a} AND {b}"))
        }
        3 => {
            let n = 1 + rng.below(3);
            let mut items: Vec<String> = (0..n).map(|_| rng.key().to_string()).collect();
            if rng.chance(15) {
                items.push("NULL".to_string());
            }
            let not = if rng.chance(35) { "NOT " } else { "" };
            same(format!("k {not}IN ({})", items.join(", ")))
        }
        4 => same(
            rng.pick(&[
                "v IS NULL",
                "v IS NOT NULL",
                "v = 'a'",
                "v <> 'b'",
                "v LIKE 'a%'",
                "v > 'b'",
            ])
            .to_string(),
        ),
        5 => {
            let (sub, set) = *rng.pick(REF_SETS);
            let negated = rng.chance(45);
            let not = if negated { "NOT " } else { "" };
            let kv = format!("k {not}IN ({sub})");
            let twin = if scope.literal_ref {
                in_list(negated, set)
            } else {
                kv.clone()
            };
            (kv, twin)
        }
        6 if scope.kv_qualifier.is_some() => {
            let q = scope.kv_qualifier.as_deref().unwrap_or_default();
            let (extra, keys) = *rng.pick(REF_EXISTS);
            let negated = rng.chance(40);
            let not = if negated { "NOT " } else { "" };
            let set: Vec<Option<i64>> = keys.iter().copied().map(Some).collect();
            (
                format!("{not}EXISTS (SELECT 1 FROM ref r WHERE r.k = {q}.k{extra})"),
                in_list(negated, &set),
            )
        }
        7 => {
            let (cond, holds) = *rng.pick(&[
                ("tag = 'y'", true),
                ("tag = 'none'", false),
                ("k IS NULL", true),
                ("k > 20", false),
            ]);
            let negated = rng.chance(30);
            let not = if negated { "NOT " } else { "" };
            (
                format!("{not}EXISTS (SELECT 1 FROM ref WHERE {cond})"),
                (holds != negated).to_string(),
            )
        }
        8 => {
            let (sub, value) = *rng.pick(REF_SCALARS);
            let op = rng.pick(&["=", "<>", "<", ">="]);
            (format!("k {op} {sub}"), format!("k {op} {value}"))
        }
        9 => {
            let rt = &scope.kv_rt;
            let twin = &scope.twin;
            match (rng.below(4), &scope.kv_qualifier) {
                (0, _) => (
                    format!("k IN (SELECT k FROM {rt} WHERE v IS NULL)"),
                    format!("k IN (SELECT k FROM {twin} WHERE v IS NULL)"),
                ),
                (1, _) => (
                    format!("k NOT IN (SELECT k + 1 FROM {rt})"),
                    format!("k NOT IN (SELECT k + 1 FROM {twin})"),
                ),
                (2, Some(q)) => (
                    format!("EXISTS (SELECT 1 FROM {rt} s WHERE s.k = {q}.k + 1)"),
                    format!("EXISTS (SELECT 1 FROM {twin} s WHERE s.k = {twin}.k + 1)"),
                ),
                _ => (
                    format!("k = (SELECT max(k) FROM {rt})"),
                    format!("k = (SELECT max(k) FROM {twin})"),
                ),
            }
        }
        _ => same(
            rng.pick(&[
                "true",
                "false",
                "k > 100",
                "k > 0",
                "1 = 1",
                "(v IS NULL OR v IS NOT NULL)",
                "(k < 0 AND v IS NULL)",
            ])
            .to_string(),
        ),
    }
}

/// A new value of `v` for UPDATE, as each side spells it.
fn assignment(rng: &mut Rng, scope: &Scope, step: usize) -> (String, String) {
    let same = |s: String| (s.clone(), s);
    let q = scope.kv_qualifier.as_deref().unwrap_or_default();
    match rng.below(10) {
        0 => same(format!("'u{step}'")),
        1 => same("NULL".to_string()),
        2 => same("concat(v, '+')".to_string()),
        3 => same("v || '!'".to_string()),
        4 => same("upper(v)".to_string()),
        5 => same("CAST(k AS STRING)".to_string()),
        6 => same("CASE WHEN k > 6 THEN 'hi' ELSE v END".to_string()),
        7 => ("(SELECT max(tag) FROM ref)".to_string(), "'z'".to_string()),
        8 => (
            format!("(SELECT max(tag) FROM ref r WHERE r.k = {q}.k)"),
            "CASE k WHEN 1 THEN 'x' WHEN 3 THEN 'y' WHEN 5 THEN 'x' WHEN 8 THEN 'z' ELSE NULL END"
                .to_string(),
        ),
        _ => (
            format!("(SELECT max(v) FROM {})", scope.kv_rt),
            format!("(SELECT max(v) FROM {})", scope.twin),
        ),
    }
}

/// What the twin does for a statement the lake-stream table accepted.
enum Twin {
    /// Upsert these rows (the last row of a key wins).
    Rows(Vec<(Option<i64>, Option<String>)>),
    /// Upsert the rows (k, v) this query returns on the twin side.
    Select(String),
    /// Run this; if the engine cannot, delete the keys or replace the rows
    /// `fallback` selects.
    Direct { sql: String, fallback: Fallback },
    /// Nothing: tiering does not change the rows.
    Tier,
}

enum Fallback {
    DeleteKeys(String),
    ReplaceRows(String),
}

struct Step {
    pair: usize,
    names: Names,
    /// The parts of the table's name as spelled, unquoted.
    spelling_parts: Vec<String>,
    sql: String,
    twin: Twin,
}

impl Twin {
    /// A read-only query that needs what the statement needs on the twin
    /// side: if it fails too, the engine is what cannot run the statement.
    fn probe(&self) -> Option<&str> {
        match self {
            Twin::Select(sql) => Some(sql),
            Twin::Direct {
                fallback: Fallback::DeleteKeys(sql) | Fallback::ReplaceRows(sql),
                ..
            } => Some(sql),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Twin::Rows(rows) => format!("upsert {}", values(rows)),
            Twin::Select(sql) => format!("upsert rows of: {sql}"),
            Twin::Direct { sql, .. } => sql.clone(),
            Twin::Tier => "-".to_string(),
        }
    }
}

fn tiering(pair: usize) -> Step {
    Step {
        pair,
        names: Names::Yes,
        spelling_parts: Vec::new(),
        sql: format!("CALL sys.lakestream_tier('{}')", PAIRS[pair].tier),
        twin: Twin::Tier,
    }
}

fn statement(rng: &mut Rng, step: usize) -> Step {
    let pair = if rng.chance(70) { 0 } else { 1 };
    let p = &PAIRS[pair];
    if rng.chance(8) {
        return tiering(pair);
    }
    let spelled = spelling(rng, pair);
    let name = &spelled.name;
    let correlated = Scope {
        kv_qualifier: Some(spelled.qualifier.clone()),
        kv_rt: p.rt.to_string(),
        twin: p.twin.to_string(),
        literal_ref: true,
    };
    let flat = Scope {
        kv_qualifier: None,
        kv_rt: p.rt.to_string(),
        twin: p.twin.to_string(),
        literal_ref: false,
    };
    let twin = p.twin;
    let (sql, twin_plan) = match rng.below(20) {
        // INSERT VALUES: an upsert.
        0..=4 => {
            let n = 1 + rng.below(3);
            let mut rows: Vec<(Option<i64>, Option<String>)> =
                (0..n).map(|_| (Some(rng.key()), rng.value())).collect();
            if rng.chance(10) {
                // The same key twice in one statement: the last one wins.
                let k = rows[0].0;
                rows.push((k, rng.value()));
            }
            let sql = if rng.chance(20) {
                let swapped: Vec<String> = rows
                    .iter()
                    .map(|(k, v)| format!("({}, {})", literal(v), k.unwrap_or_default()))
                    .collect();
                format!("INSERT INTO {name} (v, k) VALUES {}", swapped.join(", "))
            } else {
                format!("INSERT INTO {name} VALUES {}", values(&rows))
            };
            (sql, Twin::Rows(rows))
        }
        // INSERT ... SELECT from `ref` (shifted keys, or NULL keys: refused).
        5 | 6 => {
            let (select, twin_select) = match rng.below(3) {
                0 => {
                    let off = rng.below(4);
                    let s = format!("SELECT k + {off}, tag FROM ref WHERE k IS NOT NULL");
                    (s.clone(), s)
                }
                1 => {
                    let s = "SELECT k, tag FROM ref WHERE tag = 'x'".to_string();
                    (s.clone(), s)
                }
                _ => {
                    let s = "SELECT k, tag FROM ref".to_string();
                    (s.clone(), s)
                }
            };
            (
                format!("INSERT INTO {name} {select}"),
                Twin::Select(twin_select),
            )
        }
        // INSERT ... SELECT from the table itself.
        7 | 8 => {
            let (pred, tpred) = predicate(rng, &flat, 1);
            let rt = p.rt;
            let (expr, key) = *rng.pick(&[("concat(v, '+')", "k"), ("v", "k + 1")]);
            (
                format!("INSERT INTO {name} SELECT {key}, {expr} FROM {rt} WHERE {pred}"),
                Twin::Select(format!(
                    "SELECT {key}, {expr} FROM {twin} WHERE {tpred} AND {key} <= 16"
                )),
            )
        }
        // DELETE
        9..=13 => {
            if rng.chance(10) {
                let sql = format!("DELETE FROM {name}");
                let tsql = format!("DELETE FROM {twin}");
                let fallback = Fallback::DeleteKeys(format!("SELECT k FROM {twin}"));
                (
                    sql,
                    Twin::Direct {
                        sql: tsql,
                        fallback,
                    },
                )
            } else {
                let (pred, tpred) = predicate(rng, &correlated, 2);
                (
                    format!("DELETE FROM {name} WHERE {pred}"),
                    Twin::Direct {
                        sql: format!("DELETE FROM {twin} WHERE {tpred}"),
                        fallback: Fallback::DeleteKeys(format!(
                            "SELECT k FROM {twin} WHERE {tpred}"
                        )),
                    },
                )
            }
        }
        // UPDATE
        14..=17 => {
            let (expr, texpr) = assignment(rng, &correlated, step);
            let (pred, tpred) = predicate(rng, &correlated, 2);
            let (sql, tsql, sel) = if rng.chance(10) {
                (
                    format!("UPDATE {name} SET v = {expr}"),
                    format!("UPDATE {twin} SET v = {texpr}"),
                    format!("SELECT k, {texpr} FROM {twin}"),
                )
            } else {
                (
                    format!("UPDATE {name} SET v = {expr} WHERE {pred}"),
                    format!("UPDATE {twin} SET v = {texpr} WHERE {tpred}"),
                    format!("SELECT k, {texpr} FROM {twin} WHERE {tpred}"),
                )
            };
            (
                sql,
                Twin::Direct {
                    sql: tsql,
                    fallback: Fallback::ReplaceRows(sel),
                },
            )
        }
        // TRUNCATE (refused on lake-stream tables: rarely)
        _ if rng.chance(40) => {
            let table = if rng.chance(50) { "TABLE " } else { "" };
            (
                format!("TRUNCATE {table}{name}"),
                Twin::Direct {
                    sql: format!("DELETE FROM {twin}"),
                    fallback: Fallback::DeleteKeys(format!("SELECT k FROM {twin}")),
                },
            )
        }
        // DELETE of every row, spelled without WHERE or matching all
        _ => {
            let pred = rng.pick(&["", " WHERE true", " WHERE k > 0", " WHERE k = k"]);
            (
                format!("DELETE FROM {name}{pred}"),
                Twin::Direct {
                    sql: format!("DELETE FROM {twin}{pred}"),
                    fallback: Fallback::DeleteKeys(format!("SELECT k FROM {twin}{pred}")),
                },
            )
        }
    };
    Step {
        pair,
        names: spelled.names,
        spelling_parts: spelled
            .name
            .split('.')
            .map(|part| part.trim_matches('"').to_string())
            .collect(),
        sql,
        twin: twin_plan,
    }
}

/// How a statement ended.
enum Outcome {
    Done,
    Refused(String),
    /// A panic or a hang: always a failure.
    Broken(String),
}

async fn attempt(ctx: &LakeStreamContext, sql: &str) -> Outcome {
    let run = AssertUnwindSafe(try_run(ctx, sql)).catch_unwind();
    match tokio::time::timeout(Duration::from_secs(60), run).await {
        Err(_) => Outcome::Broken(format!("{sql}: no answer within 60 s")),
        Ok(Err(panic)) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Broken(format!("{sql}: panicked: {message}"))
        }
        Ok(Ok(Ok(()))) => Outcome::Done,
        Ok(Ok(Err(e))) => Outcome::Refused(e),
    }
}

/// The rows (k, v) a query returns, in its order.
async fn rows(
    ctx: &LakeStreamContext,
    sql: &str,
) -> Result<Vec<(Option<i64>, Option<String>)>, String> {
    let batches = AssertUnwindSafe(async {
        ctx.sql(sql)
            .await
            .map_err(|e| format!("{sql}: {e}"))?
            .collect()
            .await
            .map_err(|e| format!("{sql}: {e}"))
    })
    .catch_unwind()
    .await
    .map_err(|_| format!("{sql}: panicked"))??;
    let mut out = Vec::new();
    for batch in batches {
        let k = cast(batch.column(0), &DataType::Int64).map_err(|e| e.to_string())?;
        // A query of keys only (what a DELETE selects): every v NULL.
        let v = match batch.num_columns() {
            1 => new_null_array(&DataType::Utf8, batch.num_rows()),
            _ => cast(batch.column(1), &DataType::Utf8).map_err(|e| e.to_string())?,
        };
        let k = k.as_any().downcast_ref::<Int64Array>().ok_or("not Int64")?;
        let v = v.as_any().downcast_ref::<StringArray>().ok_or("not Utf8")?;
        for i in 0..batch.num_rows() {
            out.push((
                (!k.is_null(i)).then(|| k.value(i)),
                (!v.is_null(i)).then(|| v.value(i).to_string()),
            ));
        }
    }
    Ok(out)
}

/// The rows of a table, ordered by key; a NULL key is an error.
async fn table(ctx: &LakeStreamContext, name: &str) -> Result<Vec<Row>, String> {
    let sql = format!("SELECT k, v FROM {name} ORDER BY k");
    rows(ctx, &sql)
        .await?
        .into_iter()
        .map(|(k, v)| k.map(|k| (k, v)).ok_or(format!("{sql}: a NULL key")))
        .collect()
}

/// Upserts `rows` into the twin `twin`: deletes their keys, then inserts
/// the last row of each key.
async fn upsert(
    ctx: &LakeStreamContext,
    twin: &str,
    rows: &[(Option<i64>, Option<String>)],
    log: &mut Vec<String>,
) -> Result<(), String> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut last: BTreeMap<Option<i64>, Option<String>> = BTreeMap::new();
    for (k, v) in rows {
        last.insert(*k, v.clone());
    }
    let rows: Vec<_> = last.into_iter().collect();
    let keys: Vec<String> = rows
        .iter()
        .filter_map(|(k, _)| k.map(|k| k.to_string()))
        .collect();
    if !keys.is_empty() {
        let sql = format!("DELETE FROM {twin} WHERE k IN ({})", keys.join(", "));
        log.push(format!("    twin: {sql}"));
        try_run(ctx, &sql)
            .await
            .map_err(|e| format!("{sql}: {e}"))?;
    }
    let sql = format!("INSERT INTO {twin} VALUES {}", values(&rows));
    log.push(format!("    twin: {sql}"));
    try_run(ctx, &sql).await.map_err(|e| format!("{sql}: {e}"))
}

/// Applies `step` to the twin. `Ok(false)`: the twin's engine could not, and
/// the twin was set to the lake-stream table's rows instead.
async fn apply_to_twin(
    ctx: &LakeStreamContext,
    step: &Step,
    log: &mut Vec<String>,
) -> Result<bool, String> {
    let twin = PAIRS[step.pair].twin;
    match &step.twin {
        Twin::Tier => Ok(true),
        Twin::Rows(r) => upsert(ctx, twin, r, log).await.map(|_| true),
        Twin::Select(sql) => {
            let r = rows(ctx, sql).await?;
            upsert(ctx, twin, &r, log).await.map(|_| true)
        }
        Twin::Direct { sql, fallback } => {
            match try_run(ctx, sql).await {
                Ok(()) => {
                    log.push(format!("    twin: {sql}"));
                    return Ok(true);
                }
                Err(e) => log.push(format!("    twin: {sql} -- cannot: {e}")),
            }
            match fallback {
                Fallback::DeleteKeys(select) => match rows(ctx, select).await {
                    Ok(r) => {
                        log.push(format!("    twin: keys of {select}"));
                        let keys: Vec<String> = r
                            .iter()
                            .filter_map(|(k, _)| k.map(|k| k.to_string()))
                            .collect();
                        if keys.is_empty() {
                            return Ok(true);
                        }
                        let sql = format!("DELETE FROM {twin} WHERE k IN ({})", keys.join(", "));
                        log.push(format!("    twin: {sql}"));
                        try_run(ctx, &sql)
                            .await
                            .map(|_| true)
                            .map_err(|e| format!("{sql}: {e}"))
                    }
                    Err(e) => resync(ctx, step, &e, log).await.map(|_| false),
                },
                Fallback::ReplaceRows(select) => match rows(ctx, select).await {
                    Ok(r) => {
                        log.push(format!("    twin: rows of {select}"));
                        upsert(ctx, twin, &r, log).await.map(|_| true)
                    }
                    Err(e) => resync(ctx, step, &e, log).await.map(|_| false),
                },
            }
        }
    }
}

/// The twin's engine cannot run the statement at all: the twin takes the
/// lake-stream table's rows, unchecked.
async fn resync(
    ctx: &LakeStreamContext,
    step: &Step,
    why: &str,
    log: &mut Vec<String>,
) -> Result<(), String> {
    let p = &PAIRS[step.pair];
    log.push(format!(
        "    twin: cannot select either ({why}); not compared, twin reset"
    ));
    println!(
        "twin: not compared (the twin's engine cannot run it): {}: {why}",
        step.sql
    );
    try_run(ctx, &format!("DELETE FROM {}", p.twin)).await?;
    let r: Vec<_> = table(ctx, p.rt)
        .await?
        .into_iter()
        .map(|(k, v)| (Some(k), v))
        .collect();
    upsert(ctx, p.twin, &r, log).await
}

/// Why the twin (`k INT NOT NULL`) refuses to take `rows`, if it does.
fn null_key(rows: &[(Option<i64>, Option<String>)]) -> Option<String> {
    rows.iter()
        .any(|(k, _)| k.is_none())
        .then(|| "a NULL key, which the twin's NOT NULL column refuses".to_string())
}

async fn snapshots(ctx: &LakeStreamContext) -> Result<Vec<Vec<i64>>, String> {
    let mut out = Vec::new();
    for p in PAIRS {
        let sql = format!(
            "SELECT snapshot_id FROM {} ORDER BY snapshot_id",
            p.snapshots
        );
        out.push(try_ids(ctx, &sql).await?);
    }
    Ok(out)
}

#[derive(Default, Debug)]
struct Stats {
    applied: usize,
    refused: usize,
    refused_missing: usize,
    refused_by_engine: usize,
    twin_fallbacks: usize,
    not_compared: usize,
    tierings: usize,
    refusals: BTreeMap<String, usize>,
}

async fn setup(
    ctx: &LakeStreamContext,
    rng: &mut Rng,
    log: &mut Vec<String>,
) -> Result<(), String> {
    let mut run = |sql: String| {
        log.push(sql.clone());
        async move { try_run(ctx, &sql).await.map_err(|e| format!("{sql}: {e}")) }
    };
    let initial = |rng: &mut Rng| -> Vec<(Option<i64>, Option<String>)> {
        let mut keys: Vec<i64> = (0..2 + rng.below(5)).map(|_| rng.key()).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter().map(|k| (Some(k), rng.value())).collect()
    };
    // `kv`: rows in Paimon while plain, then the mode turned on, then rows in the store.
    let plain = initial(rng);
    let stored = initial(rng);
    run("CREATE TABLE kv (k INT NOT NULL, v STRING, PRIMARY KEY (k)) WITH ('bucket' = '1')".into())
        .await?;
    run(format!("INSERT INTO kv VALUES {}", values(&plain))).await?;
    run("ALTER TABLE kv SET TBLPROPERTIES ('lakestream.enabled' = 'true')".into()).await?;
    run(format!("INSERT INTO kv VALUES {}", values(&stored))).await?;
    // `Ev`: created unquoted and lake-stream from the start.
    let ev = initial(rng);
    run(
        "CREATE TABLE Ev (k INT NOT NULL, v STRING, PRIMARY KEY (k)) \
         WITH ('bucket' = '1', 'lakestream.enabled' = 'true')"
            .into(),
    )
    .await?;
    run(format!("INSERT INTO \"Ev\" VALUES {}", values(&ev))).await?;
    run("CREATE TABLE twin (k INT NOT NULL, v STRING)".into()).await?;
    run("CREATE TABLE twin_ev (k INT NOT NULL, v STRING)".into()).await?;
    run("CREATE TABLE ref (k INT, tag STRING)".into()).await?;
    run(format!("INSERT INTO ref VALUES {REF_ROWS}")).await?;
    upsert(ctx, "twin", &plain, log).await?;
    upsert(ctx, "twin", &stored, log).await?;
    upsert(ctx, "twin_ev", &ev, log).await?;
    Ok(())
}

/// One seed's run; a failure says what differed.
async fn scenario(seed: u64, steps: usize, stats: &mut Stats) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let warehouse = dir.path().join("warehouse");
    std::fs::create_dir_all(&warehouse).map_err(|e| e.to_string())?;
    let mut ctx = LakeStreamContext::new();
    ctx.register_catalog(
        "paimon",
        local_store_options(&warehouse, &dir.path().join("store"), "off"),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut rng = Rng(seed);
    let mut log = Vec::new();
    let fail = |log: &[String], what: String| -> String {
        let mut out = format!("seed {seed}: {what}\nhistory:\n");
        for line in log {
            let _ = writeln!(out, "  {line}");
        }
        let _ = writeln!(
            out,
            "rerun: LAKESTREAM_TWIN_SEED={seed} cargo test --test it twin -- --nocapture"
        );
        out
    };
    setup(&ctx, &mut rng, &mut log)
        .await
        .map_err(|e| fail(&log, format!("setup: {e}")))?;
    let mut current = Vec::new();
    for p in PAIRS {
        let rt = table(&ctx, p.rt).await.map_err(|e| fail(&log, e))?;
        let twin = table(&ctx, p.twin).await.map_err(|e| fail(&log, e))?;
        if rt != twin {
            return Err(fail(
                &log,
                format!(
                    "after setup, {} = {} but {} = {}",
                    p.rt,
                    show(&rt),
                    p.twin,
                    show(&twin)
                ),
            ));
        }
        current.push(rt);
    }
    let mut lake_snapshots = snapshots(&ctx).await.map_err(|e| fail(&log, e))?;

    // The generated statements, then a tiering of every table, so that
    // every run compares Paimon's rows with `t$rt` at least once.
    for i in 0..steps + PAIRS.len() {
        let step = match i.checked_sub(steps) {
            None => statement(&mut rng, i),
            Some(pair) => tiering(pair),
        };
        let p = &PAIRS[step.pair];
        let outcome = attempt(&ctx, &step.sql).await;
        let said = match &outcome {
            Outcome::Done => "ok".to_string(),
            Outcome::Refused(e) => format!("refused: {e}"),
            Outcome::Broken(e) => e.clone(),
        };
        log.push(format!("#{i} {} -- {said}", step.sql));
        if let Outcome::Broken(e) = outcome {
            return Err(fail(&log, e));
        }

        // Paimon: only a tiering of this very table writes it.
        let now = snapshots(&ctx).await.map_err(|e| fail(&log, e))?;
        for (j, q) in PAIRS.iter().enumerate() {
            let may_change = matches!(step.twin, Twin::Tier) && j == step.pair;
            if !may_change && now[j] != lake_snapshots[j] {
                return Err(fail(
                    &log,
                    format!(
                        "{} wrote Paimon: snapshots of {} were {:?}, now {:?}",
                        step.sql, q.stored, lake_snapshots[j], now[j]
                    ),
                ));
            }
        }
        lake_snapshots = now;

        match outcome {
            Outcome::Refused(e) => {
                stats.refused += 1;
                let lower = e.to_lowercase();
                // The error names the table, a part of the name as spelled
                // (`Unknown catalog 'PAIMON'`), or the clause refused.
                let explained = lower.contains(&p.stored.to_lowercase())
                    || lower.contains("clause")
                    || step.spelling_parts.iter().any(|part| {
                        let part = part.to_lowercase();
                        lower.contains(&format!("'{part}'")) || lower.contains(&format!("{part}."))
                    });
                if step.names == Names::No {
                    stats.refused_missing += 1;
                } else if !explained {
                    // Refused without naming table or clause: only where
                    // the twin's engine cannot run it either.
                    let probe = match (&step.twin, step.twin.probe()) {
                        (Twin::Rows(r), _) => null_key(r),
                        (Twin::Select(q), _) => match rows(&ctx, q).await {
                            Ok(r) => null_key(&r),
                            Err(e) => Some(e),
                        },
                        (_, Some(q)) => rows(&ctx, q).await.err(),
                        (_, None) => None,
                    };
                    match probe {
                        Some(twin_error) => {
                            stats.refused_by_engine += 1;
                            log.push(format!("    (the twin cannot either: {twin_error})"));
                        }
                        None => {
                            return Err(fail(
                                &log,
                                format!(
                                    "{} refused with an error that names neither the table \
                                     nor a clause, though the twin runs it: {e}",
                                    step.sql
                                ),
                            ))
                        }
                    }
                }
                if step.names != Names::No {
                    let key: String = e.chars().take(160).collect();
                    *stats.refusals.entry(key).or_default() += 1;
                    println!("twin: seed {seed} #{i} refused: {}\n      {e}", step.sql);
                }
            }
            Outcome::Done if step.names == Names::No => {
                return Err(fail(
                    &log,
                    format!("{} names no existing table, but succeeded", step.sql),
                ));
            }
            Outcome::Done => {
                stats.applied += 1;
                let before = log.len();
                match apply_to_twin(&ctx, &step, &mut log).await {
                    Ok(true) => {}
                    Ok(false) => stats.not_compared += 1,
                    Err(e) => {
                        return Err(fail(
                            &log,
                            format!(
                                "{} succeeded, but the twin cannot apply it ({}): {e}",
                                step.sql,
                                step.twin.describe()
                            ),
                        ))
                    }
                }
                if log[before..].iter().any(|l| l.contains("-- cannot")) {
                    stats.twin_fallbacks += 1;
                }
            }
            Outcome::Broken(_) => unreachable!(),
        }

        // Every lake-stream table against its twin; a refused statement
        // changed nothing.
        for (j, q) in PAIRS.iter().enumerate() {
            let rt = table(&ctx, q.rt).await.map_err(|e| fail(&log, e))?;
            let twin = table(&ctx, q.twin).await.map_err(|e| fail(&log, e))?;
            if rt != twin {
                return Err(fail(
                    &log,
                    format!(
                        "after {}:\n  {} = {}\n  {} = {}\n  before: {}",
                        step.sql,
                        q.rt,
                        show(&rt),
                        q.twin,
                        show(&twin),
                        show(&current[j])
                    ),
                ));
            }
            if matches!(step.twin, Twin::Tier) && j == step.pair {
                stats.tierings += 1;
                let lake = table(&ctx, q.lake).await.map_err(|e| fail(&log, e))?;
                if lake != rt {
                    return Err(fail(
                        &log,
                        format!(
                            "after {}: Paimon's {} = {} but {} = {}",
                            step.sql,
                            q.lake,
                            show(&lake),
                            q.rt,
                            show(&rt)
                        ),
                    ));
                }
            }
            current[j] = rt;
        }
    }
    Ok(())
}

/// Deep plans of generated predicates need more stack than a test thread
/// has in a debug build: the run gets a thread and a runtime of its own.
#[test]
fn twin() {
    std::thread::Builder::new()
        .name("twin".to_string())
        .stack_size(64 << 20)
        .spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_stack_size(16 << 20)
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(Box::pin(run_seeds()))
        })
        .expect("thread")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

async fn run_seeds() {
    let seeds: Vec<u64> = match std::env::var("LAKESTREAM_TWIN_SEED") {
        Ok(s) if s == "random" => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or_default();
            vec![nanos % 1_000_000_007]
        }
        Ok(s) => vec![s
            .parse()
            .expect("LAKESTREAM_TWIN_SEED: a number or 'random'")],
        Err(_) => DEFAULT_SEEDS.to_vec(),
    };
    let steps = std::env::var("LAKESTREAM_TWIN_STEPS")
        .ok()
        .map(|s| s.parse().expect("LAKESTREAM_TWIN_STEPS: a number"))
        .unwrap_or(DEFAULT_STEPS);
    for seed in seeds {
        let started = Instant::now();
        let mut stats = Stats::default();
        if let Err(failure) = Box::pin(scenario(seed, steps, &mut stats)).await {
            panic!("{failure}");
        }
        println!(
            "twin: seed {seed}: {steps} statements in {:.1} s: {} applied and compared \
             ({} through the twin's fallback, {} not compared), {} refused \
             ({} naming no table, {} the engine cannot run), {} tierings",
            started.elapsed().as_secs_f64(),
            stats.applied,
            stats.twin_fallbacks,
            stats.not_compared,
            stats.refused,
            stats.refused_missing,
            stats.refused_by_engine,
            stats.tierings,
        );
        for (message, n) in &stats.refusals {
            println!("twin:   refused {n}x: {message}");
        }
    }
}
