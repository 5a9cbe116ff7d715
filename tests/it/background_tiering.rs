//! The background tierer's failures reach the user: a round that fails is
//! logged (a warning naming the table, its location and the error), later
//! rounds wait longer and longer (up to `local.tier-max-delay`), and the
//! first round that works again is logged too.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use log::{Level, LevelFilter, Log, Metadata, Record};
use paimon_lakestream::store::local::TIERING_LOG;

use crate::support::{run, segments, set_aside_says, sorted_ids, CatalogKind, TestWarehouse};

/// Every record logged in this test process (tests share the logger: each
/// picks out its own by its warehouse's path).
static RECORDS: Mutex<Vec<(Instant, Level, String, String)>> = Mutex::new(Vec::new());

struct Capture;

impl Log for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Info && metadata.target() == TIERING_LOG
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            RECORDS.lock().unwrap_or_else(|e| e.into_inner()).push((
                Instant::now(),
                record.level(),
                record.target().to_string(),
                record.args().to_string(),
            ));
        }
    }

    fn flush(&self) {}
}

fn capture() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        static LOGGER: Capture = Capture;
        // Tests that run alone in a process of their own may have one.
        let _ = log::set_logger(&LOGGER);
        log::set_max_level(LevelFilter::Info);
    });
}

/// The tiering reports mentioning `marker`, in order, with when each came.
fn reports(marker: &str) -> Vec<(Instant, Level, String)> {
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, _, target, text)| target == TIERING_LOG && text.contains(marker))
        .map(|(at, level, _, text)| (*at, *level, text.clone()))
        .collect()
}

/// Waits (up to a minute) until `enough` holds for the reports of `marker`.
async fn wait_for(
    marker: &str,
    what: &str,
    enough: impl Fn(&[(Instant, Level, String)]) -> bool,
) -> Vec<(Instant, Level, String)> {
    for _ in 0..600 {
        let seen = reports(marker);
        if enough(&seen) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {what} within a minute; reports: {:#?}", reports(marker));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_background_round_is_logged_backed_off_and_its_recovery_too() {
    capture();
    let warehouse = TestWarehouse::new(CatalogKind::Filesystem).await;
    let marker = warehouse.path().to_str().expect("utf-8 path").to_string();
    let store = warehouse.path().join("store");
    std::fs::create_dir_all(&store).expect("store directory");
    // A second "process": the same directory under another name shares no
    // cache with the first (see durability.rs).
    let alias = warehouse.path().join("store-alias");
    std::os::unix::fs::symlink(&store, &alias).expect("symlink");

    let a = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "off"),
            ("local.path", store.to_str().expect("utf-8 path")),
        ])
        .await;
    run(
        &a,
        "CREATE TABLE t (id INT) WITH ('lakestream.enabled' = 'true')",
    )
    .await;
    for id in 1..=3 {
        run(&a, &format!("INSERT INTO t VALUES ({id})")).await;
    }
    let files = segments(&store);
    assert_eq!(files.len(), 3, "{files:?}");
    let mut bytes = std::fs::read(&files[1]).expect("read segment");
    bytes[20] ^= 0x10;
    std::fs::write(&files[1], &bytes).expect("damage segment");

    // B tiers in the background, as soon as anything waits, every 100 ms.
    let b = warehouse
        .context_with(&[
            ("lakestream.store", "local"),
            ("local.tier-interval", "100ms"),
            ("local.tier-target-size", "1"),
            ("local.tier-max-delay", "800ms"),
            ("local.path", alias.to_str().expect("utf-8 path")),
        ])
        .await;
    run(&b, "INSERT INTO t VALUES (4)").await;

    let seen = wait_for(&marker, "four failed rounds", |seen| seen.len() >= 4).await;
    let damaged = files[1].file_name().unwrap().to_string_lossy().into_owned();
    for (n, (_, level, text)) in seen.iter().take(4).enumerate() {
        assert_eq!(*level, Level::Warn, "{text}");
        assert!(text.contains("background tiering of 'default.t'"), "{text}");
        assert!(
            text.contains(&damaged) && text.contains("damaged"),
            "{text}"
        );
        assert!(
            text.contains("CALL sys.lakestream_tier('default.t')"),
            "{text}"
        );
        assert!(text.contains(&format!("{} in a row", n + 1)), "{text}");
        // 100 ms, doubled after each failure, up to tier-max-delay.
        let wait = ["100ms", "200ms", "400ms", "800ms"][n];
        assert!(text.contains(&format!("next try in {wait}")), "{text}");
    }
    // The rounds really wait: 100, 200 and 400 ms between the first four
    // (less the first round's own time); every 100 ms they would take 300.
    let span = seen[3].0.duration_since(seen[0].0);
    assert!(span >= Duration::from_millis(550), "{span:?}");
    assert_eq!(sorted_ids(&b, "SELECT id FROM t").await, Vec::<i64>::new());

    // The operator's way out; the next round works, and says so.
    let said = set_aside_says(&b, "default.t", 1).await;
    assert!(said.contains("held 1 rows"), "{said}");
    let seen = wait_for(&marker, "a report of the recovery", |seen| {
        seen.iter().any(|(_, level, _)| *level == Level::Info)
    })
    .await;
    let (_, _, recovered) = seen
        .iter()
        .find(|(_, level, _)| *level == Level::Info)
        .expect("an info report");
    assert!(
        recovered.contains("background tiering of 'default.t'")
            && recovered.contains("works again after")
            && recovered.contains("tiered 3 rows"),
        "{recovered}"
    );
    assert_eq!(sorted_ids(&a, "SELECT id FROM t").await, vec![1, 3, 4]);
}
