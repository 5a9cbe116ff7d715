//! Fail points, for tests: named points in the code where a test makes this
//! process crash (abort, as `kill -9` would) or stop (wait until told to go
//! on, as a paused process or a lost race would), every time at the same
//! step.
//!
//! Built in only with `cfg(test)` or the cargo feature `testing`: without
//! them [`failpoint`] and [`failpoint_in`] are empty and inlined away, and
//! nothing here reads the environment.
//!
//! Synchronous code reaches a point with [`failpoint`] (a pause blocks its
//! thread); async code with [`failpoint_in`], which also names what the work
//! is on (a table's full name `db.t`, or a file's path), and whose pause
//! waits without blocking a thread. A point is armed in one of three ways,
//! all kept in one registry:
//!
//! - `LAKESTREAM_FAILPOINT=NAME` (in the environment, read once): the
//!   process aborts at point `NAME`.
//! - `LAKESTREAM_PAUSEPOINT=NAME=DIR` (read once): the first to reach `NAME`
//!   creates `DIR/reached` and waits until `DIR/resume` exists; for a test
//!   that drives another process.
//! - [`Pause::new`]`(NAME, SCOPE)` in this process: the first to reach `NAME`
//!   on `SCOPE` (or on a path under it; an empty scope takes anything)
//!   waits until the pause is released or dropped; [`Pause::reached`]
//!   answers what it was on.
//!
//! Only the first arrival at an armed pause waits; later ones pass.
//!
//! The points of async code: `alter-before-write` (an `ALTER TABLE` whose
//! guards and store-side work are done, before the catalog writes the
//! schema; on the table), `create-before-create` (a lake-stream
//! `CREATE TABLE` that found no table, before the catalog creates it) and
//! `create-before-check` (after it created it, before it looks for
//! snapshots; both on the table), `publish-before-link` (a create-only
//! publish of a snapshot, schema or tag through a local warehouse's file
//! IO, just before the file gets its name; on the file). The others: grep
//! for `failpoint(`.

#[cfg(not(any(test, feature = "testing")))]
use std::fmt::Display;

#[cfg(any(test, feature = "testing"))]
pub use armed::Pause;
#[cfg(any(test, feature = "testing"))]
pub(crate) use armed::{failpoint, failpoint_in};

/// A point of synchronous code (see the module docs); without the `testing`
/// feature, nothing.
#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn failpoint(_name: impl Display) {}

/// A point of async code, on `_key` (see the module docs); without the
/// `testing` feature, nothing (a future that is ready at once, not an
/// `async fn`, so that it is inlined away as [`failpoint`] is).
#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn failpoint_in(_name: &str, _key: impl Display) -> std::future::Ready<()> {
    std::future::ready(())
}

#[cfg(any(test, feature = "testing"))]
mod armed {
    use std::fmt::Display;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
    use std::time::Duration;

    use tokio::sync::watch;

    /// How often a pause that another process lets go looks for its
    /// `resume` file.
    const POLL: Duration = Duration::from_millis(10);

    /// How an armed pause is let go.
    #[derive(Debug)]
    enum Release {
        /// By another process (`LAKESTREAM_PAUSEPOINT`): `DIR/reached` is
        /// created on arrival, `DIR/resume` lets it go.
        Files(PathBuf),
        /// By this process's [`Pause`].
        Held {
            /// What the work that arrived is on, once one arrived.
            caught: watch::Sender<Option<String>>,
            released: watch::Sender<bool>,
        },
    }

    /// An armed pause.
    #[derive(Debug)]
    struct Armed {
        id: u64,
        point: String,
        /// What the paused work must be on (or under); empty: anything.
        scope: PathBuf,
        /// Whether one arrived (only the first waits).
        taken: AtomicBool,
        release: Release,
    }

    impl Armed {
        fn new(point: &str, scope: PathBuf, release: Release) -> Self {
            static IDS: AtomicU64 = AtomicU64::new(0);
            Self {
                id: IDS.fetch_add(1, Ordering::Relaxed),
                point: point.to_string(),
                scope,
                taken: AtomicBool::new(false),
                release,
            }
        }

        /// Whether work at `point` on `key` is paused here (path-wise: a
        /// table `db.t` is not under `db.t2`).
        fn matches(&self, point: &str, key: &str) -> bool {
            self.point == point && Path::new(key).starts_with(&self.scope)
        }

        /// Tells the one who waits for it that work on `key` arrived.
        fn arrive(&self, key: &str) {
            eprintln!("lakestream: pause point '{}' reached, waiting", self.point);
            match &self.release {
                Release::Files(dir) => {
                    let _ = std::fs::write(dir.join("reached"), &self.point);
                }
                Release::Held { caught, .. } => {
                    caught.send_replace(Some(key.to_string()));
                }
            }
        }

        /// Waits, blocking this thread, until let go.
        fn wait_blocking(&self) {
            match &self.release {
                Release::Files(dir) => {
                    while !dir.join("resume").exists() {
                        std::thread::sleep(POLL);
                    }
                }
                Release::Held { released, .. } => {
                    let mut released = released.subscribe();
                    // The sender lives in `self`: the wait ends with a value.
                    let _ = futures::executor::block_on(released.wait_for(|r| *r));
                }
            }
        }

        /// Waits until let go.
        async fn wait(&self) {
            match &self.release {
                Release::Files(dir) => {
                    let resume = dir.join("resume");
                    while !tokio::fs::try_exists(&resume).await.unwrap_or(false) {
                        tokio::time::sleep(POLL).await;
                    }
                }
                Release::Held { released, .. } => {
                    let mut released = released.subscribe();
                    // The sender lives in `self`: the wait ends with a value.
                    let _ = released.wait_for(|r| *r).await;
                }
            }
        }
    }

    /// The armed pauses: `LAKESTREAM_PAUSEPOINT`'s, then those held now.
    fn registry() -> MutexGuard<'static, Vec<Arc<Armed>>> {
        static ARMED: OnceLock<Mutex<Vec<Arc<Armed>>>> = OnceLock::new();
        ARMED
            .get_or_init(|| Mutex::new(from_env().into_iter().collect()))
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The pause `LAKESTREAM_PAUSEPOINT=NAME=DIR` arms.
    fn from_env() -> Option<Arc<Armed>> {
        let value = std::env::var("LAKESTREAM_PAUSEPOINT").ok()?;
        let (point, dir) = value.split_once('=')?;
        let release = Release::Files(PathBuf::from(dir));
        Some(Arc::new(Armed::new(point, PathBuf::new(), release)))
    }

    /// Aborts the process if `LAKESTREAM_FAILPOINT` names `point`.
    fn crash_at(point: &str) {
        static POINT: OnceLock<Option<String>> = OnceLock::new();
        let named = POINT.get_or_init(|| std::env::var("LAKESTREAM_FAILPOINT").ok());
        if named.as_deref() == Some(point) {
            eprintln!("lakestream: failpoint '{point}' reached, aborting");
            std::process::abort();
        }
    }

    /// The pause that work at `point` on `key` arrives at, if one is armed
    /// and not taken yet; it is told of the arrival.
    fn arrive(point: &str, key: &str) -> Option<Arc<Armed>> {
        let armed = registry()
            .iter()
            .find(|a| a.matches(point, key) && !a.taken.swap(true, Ordering::SeqCst))
            .cloned()?;
        armed.arrive(key);
        Some(armed)
    }

    /// Point `name` of synchronous code: aborts there, or waits (blocking
    /// the thread) while a pause of it holds the work.
    pub(crate) fn failpoint(name: impl Display) {
        let name = name.to_string();
        crash_at(&name);
        if let Some(armed) = arrive(&name, "") {
            armed.wait_blocking();
        }
    }

    /// Point `name` of async code on `key` (a table's full name, a file's
    /// path): aborts there, or waits while a pause of it holds the work.
    pub(crate) async fn failpoint_in(name: &str, key: impl Display) {
        crash_at(name);
        let key = key.to_string();
        if let Some(armed) = arrive(name, &key) {
            armed.wait().await;
        }
    }

    /// A pause of the first work to reach a point on a scope (see the
    /// module docs), until released or dropped.
    #[derive(Debug)]
    pub struct Pause {
        armed: Arc<Armed>,
    }

    impl Pause {
        /// Pauses the first work to reach `point` on `scope`: a table's full
        /// name (`db.t`), a directory (work on a file under it), or empty
        /// (any work).
        pub fn new(point: &str, scope: impl AsRef<Path>) -> Self {
            let release = Release::Held {
                caught: watch::Sender::new(None),
                released: watch::Sender::new(false),
            };
            let armed = Arc::new(Armed::new(point, scope.as_ref().to_path_buf(), release));
            registry().push(Arc::clone(&armed));
            Self { armed }
        }

        /// Waits until work reached the point (and waits there); answers
        /// what it is on: the table, or the file.
        pub async fn reached(&self) -> String {
            let Release::Held { caught, .. } = &self.armed.release else {
                return String::new();
            };
            let mut caught = caught.subscribe();
            // The sender lives in `self`: the wait ends with a value.
            let key = match caught.wait_for(Option::is_some).await {
                Ok(key) => key.clone().unwrap_or_default(),
                Err(_) => String::new(),
            };
            key
        }

        /// Lets the waiting work (or the next to arrive) go on.
        pub fn release(&self) {
            if let Release::Held { released, .. } = &self.armed.release {
                released.send_replace(true);
            }
        }
    }

    impl Drop for Pause {
        fn drop(&mut self) {
            registry().retain(|armed| armed.id != self.armed.id);
            self.release();
        }
    }

    #[cfg(test)]
    mod tests {
        use futures::FutureExt;

        use super::*;

        /// A pause holds the first work on its scope (or under it) at its
        /// point, none other, until released; later arrivals pass.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_pause_holds_the_first_arrival_on_its_scope() {
            let pause = Pause::new("test-point-scope", "/w/db.db/t");
            // Another point, another table, a sibling whose name starts
            // alike: none is held (each is done at its first poll).
            for (point, key) in [
                ("test-point-other", "/w/db.db/t/snapshot-1"),
                ("test-point-scope", "/w/db.db/t2/snapshot-1"),
                ("test-point-scope", "/w/db.db"),
            ] {
                let passed = failpoint_in(point, key).now_or_never().is_some();
                assert!(passed, "{point} on {key} was held");
            }
            let held = tokio::spawn(failpoint_in("test-point-scope", "/w/db.db/t/snapshot-1"));
            assert_eq!(pause.reached().await, "/w/db.db/t/snapshot-1");
            // Only the first waits.
            let passed = failpoint_in("test-point-scope", "/w/db.db/t/snapshot-2")
                .now_or_never()
                .is_some();
            assert!(passed, "a second arrival was held");
            assert!(!held.is_finished(), "the held work went on unreleased");
            pause.release();
            held.await.expect("the held work");
        }

        /// A synchronous point waits too (blocking its thread), and dropping
        /// the pause lets it go.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_synchronous_point_waits_until_the_pause_is_dropped() {
            let pause = Pause::new("test-point-sync", "");
            let held = tokio::task::spawn_blocking(|| failpoint("test-point-sync"));
            assert_eq!(pause.reached().await, "");
            assert!(!held.is_finished(), "the held work went on unreleased");
            drop(pause);
            held.await.expect("the held work");
            // Unarmed now: nothing waits.
            failpoint("test-point-sync");
        }

        /// `LAKESTREAM_PAUSEPOINT`'s pause: `reached` on arrival, held until
        /// `resume` exists.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_pause_of_another_process_waits_for_its_resume_file() {
            let dir = tempfile::tempdir().expect("temporary directory");
            let armed = Arc::new(Armed::new(
                "test-point-files",
                PathBuf::new(),
                Release::Files(dir.path().to_path_buf()),
            ));
            registry().push(Arc::clone(&armed));
            let held = tokio::spawn(failpoint_in("test-point-files", "db.t"));
            while !dir.path().join("reached").exists() {
                tokio::time::sleep(POLL).await;
            }
            assert!(!held.is_finished(), "the held work went on unresumed");
            std::fs::write(dir.path().join("resume"), "").expect("resume");
            held.await.expect("the held work");
            registry().retain(|a| a.id != armed.id);
        }
    }
}
