//! A lease: one holder at a time across processes on an object store,
//! where there is no file lock. The local store's tiering lock on S3 (one
//! tierer per table) and the catalog's schema lock on S3 (one DDL per
//! database) are leases; each names the objects it lives in
//! ([`LeaseObjects`]) and its directory.
//!
//! A lease is an object `<dir>/tier-<generation>` holding its holder and
//! the time it expires. It is taken by creating the next generation with a
//! conditional put (create-if-absent), which exactly one process wins, and
//! only once the newest generation has expired or is gone. The holder
//! renews it every third of its length by creating the next generation
//! itself, and releases it when done by creating the next generation as
//! already expired; a holder that died is waited out until its lease
//! expires. Each generation carries its own expiry, so processes with other
//! lease lengths wait for each other correctly. A live holder renews its
//! lease for as long as it works, so a waiter's wait is bounded
//! ([`Patience`]: twice its TTL, or what each holder it saw had left when
//! first seen, plus its TTL, if longer): past that it gives up with an
//! error naming the lease and its holder ([`WaitedOut`]), having taken
//! nothing.
//!
//! Generations only grow: the newest is never deleted (a release leaves an
//! expired one), so a number is never handed to two holders in turn. Older
//! ones are deleted by whoever takes the lease next, so a create that
//! reaches the store late (a renewal or a take-over stalled in retries, a
//! paused process) can land on a number deleted since; such a generation is
//! below the newest, and its creator, which looks after every create,
//! finds it is not the holder.
//!
//! A lease keeps holders from racing while they keep time; it is not what
//! keeps a row from being tiered twice. A holder can pause past its expiry
//! (a stopped VM) and still act: a tiering commit is fenced instead (it may
//! only create the snapshot after the one its position was read from, see
//! [`super::commit`]), so it fails if the next holder committed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use super::create::Created;
use crate::retry::{Retry, Try};

/// The objects a lease lives in: an object store that creates an object
/// only if its name is free (create-if-absent), and whose errors are
/// `Self::Error`.
#[async_trait::async_trait]
pub(crate) trait LeaseObjects: std::fmt::Debug + Send + Sync + 'static {
    /// What goes wrong.
    type Error: Send + 'static;
    /// The names of the objects under `dir`.
    async fn list(&self, dir: &Path) -> Result<Vec<Path>, Self::Error>;
    /// An object's bytes; `None` when there is none.
    async fn get(&self, path: &Path) -> Result<Option<Bytes>, Self::Error>;
    /// Creates `path` with `bytes` only if no object has that name; bytes
    /// there that equal `bytes` (a put retried after its answer was lost)
    /// count as created.
    async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created, Self::Error>;
    /// Deletes an object; a missing one is not an error.
    async fn delete(&self, path: &Path) -> Result<(), Self::Error>;
    /// The error of a wait for a lease here that ended with the lease still
    /// held by a live process.
    fn waited_out(&self, waited: WaitedOut) -> Self::Error;
}

/// The clock a lease's expiry is set and judged by: this machine's, which
/// may be wrong. Nothing may depend on it for safety: a process whose clock
/// runs far ahead takes leases that have not expired.
fn clock_ms() -> i64 {
    crate::clock::now_ms_signed().saturating_add(clock_skew_ms())
}

/// How far a test puts this process's clock ahead
/// (`LAKESTREAM_TESTING_CLOCK_SKEW_MS`, feature "testing" only).
#[cfg(feature = "testing")]
fn clock_skew_ms() -> i64 {
    std::env::var("LAKESTREAM_TESTING_CLOCK_SKEW_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}

#[cfg(not(feature = "testing"))]
fn clock_skew_ms() -> i64 {
    0
}

/// How often a process waiting for a lease looks again.
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Serialize, Deserialize)]
struct Held {
    holder: String,
    expires_ms: i64,
}

/// A held lease; released when dropped.
#[derive(Debug)]
pub(crate) struct Lease<O: LeaseObjects> {
    objects: Arc<O>,
    /// The generation this process holds now (the renewer moves it on).
    current: Arc<std::sync::Mutex<Path>>,
    /// The lease's directory, and this holder's id.
    dir: Path,
    holder: String,
    renewer: tokio::task::JoinHandle<()>,
}

fn generation_of(path: &Path) -> Option<u64> {
    path.filename()?.strip_prefix("tier-")?.parse().ok()
}

fn generation_path(dir: &Path, generation: u64) -> Path {
    dir.clone().join(format!("tier-{generation:020}"))
}

impl<O: LeaseObjects> Lease<O> {
    /// Takes the lease whose generations live in `dir` of `objects` (`what`
    /// names it in an error: `the tiering lease of table 'db.t'`), waiting
    /// while another process holds it. The lease lasts `ttl` unless renewed,
    /// which its holder does until it drops it.
    ///
    /// A holder that died is waited out: its lease expires within its TTL.
    /// A live holder renews its lease for as long as it works, so the wait
    /// is bounded ([`Patience`]): past it, the wait ends with
    /// [`LeaseObjects::waited_out`]'s error, naming `what` and its holder.
    pub(crate) async fn acquire(
        objects: Arc<O>,
        dir: Path,
        ttl: Duration,
        what: &str,
    ) -> Result<Self, O::Error> {
        let root: &O = &objects;
        let holder = uuid::Uuid::new_v4().to_string();
        let patience = std::sync::Mutex::new(Patience::new(ttl));
        let taken = Retry::growing(u32::MAX, POLL, POLL)
            .within(Patience::longest(ttl))
            .run_to_end(|| {
                let (dir, holder, patience) = (&dir, &holder, &patience);
                async move {
                    let seen = look(root, dir).await?;
                    let over = patience
                        .lock()
                        .map_or(true, |mut patience| patience.saw(&seen));
                    Ok(match take(root, dir, holder, ttl, seen).await? {
                        Try::Done(taken) => Try::Done(Ok(taken)),
                        Try::Again(held_by) if over => Try::Done(Err(held_by)),
                        Try::Again(held_by) => Try::Again(held_by),
                    })
                }
            })
            .await?;
        let waited = patience.lock().map_or(Duration::ZERO, |p| p.waited());
        let (next, path, generations) = match taken {
            Ok(Ok(taken)) => taken,
            Ok(Err(held_by)) | Err(held_by) => {
                return Err(root.waited_out(WaitedOut {
                    what: what.to_string(),
                    dir,
                    held_by,
                    patience: waited,
                    ttl,
                }))
            }
        };
        // Older generations are expired or released: clear them away.
        for (_, old) in &generations {
            let _ = root.delete(old).await;
        }
        let current = Arc::new(std::sync::Mutex::new(path));
        let renewer = tokio::spawn(renew(
            Arc::clone(&objects),
            dir.clone(),
            next,
            holder.clone(),
            ttl,
            Arc::clone(&current),
        ));
        Ok(Lease {
            objects: Arc::clone(&objects),
            current,
            dir,
            holder,
            renewer,
        })
    }
}

/// What one look at a lease found.
#[derive(Debug)]
enum Look {
    /// No live holder: the generation to create, and those there now.
    Free {
        next: u64,
        generations: Vec<(u64, Path)>,
    },
    /// Held by `holder` for `left` more, by this process's clock.
    Held { holder: String, left: Duration },
    /// The newest generation went between the listing and its read (a late
    /// create deleted by its creator): look again.
    Moved,
}

/// How the lease in `dir` is now.
async fn look<O: LeaseObjects>(root: &O, dir: &Path) -> Result<Look, O::Error> {
    let generations = list(root, dir).await?;
    let Some((newest, path)) = generations.last() else {
        return Ok(Look::Free {
            next: 0,
            generations,
        });
    };
    let held = match root.get(path).await? {
        None => return Ok(Look::Moved),
        Some(bytes) => serde_json::from_slice::<Held>(&bytes).ok(),
    };
    let now = clock_ms();
    Ok(match held {
        Some(held) if held.expires_ms > now => Look::Held {
            holder: held.holder,
            left: Duration::from_millis(u64::try_from(held.expires_ms - now).unwrap_or(0)),
        },
        _ => Look::Free {
            next: newest + 1,
            generations,
        },
    })
}

/// Who kept a waiter from a lease on its last try: the holder it saw, or
/// `None` when the lease moved under it (another process took it first).
type HeldBy = Option<String>;

/// One try to take the lease as `seen`: the generation taken, its path,
/// and the older ones; or who has it.
async fn take<O: LeaseObjects>(
    root: &O,
    dir: &Path,
    holder: &str,
    ttl: Duration,
    seen: Look,
) -> Result<Try<(u64, Path, Vec<(u64, Path)>), HeldBy>, O::Error> {
    let (next, generations) = match seen {
        Look::Held { holder, .. } => return Ok(Try::Again(Some(holder))),
        Look::Moved => return Ok(Try::Again(None)),
        Look::Free { next, generations } => (next, generations),
    };
    let path = generation_path(dir, next);
    match create(root, &path, holder, ttl).await? {
        Created::AlreadyExists => return Ok(Try::Again(None)),
        Created::Yes => {}
    }
    // Taken over meanwhile, this create having reached the store late: a
    // lower number, not the lease.
    match overtaken(root, dir, next).await {
        Ok(false) => Ok(Try::Done((next, path, generations))),
        Ok(true) => {
            let _ = root.delete(&path).await;
            Ok(Try::Again(None))
        }
        // Not known: given back, so that no one waits it out.
        Err(e) => {
            release(root, dir, &path, holder).await;
            Err(e)
        }
    }
}

/// How long a waiter with leases of `ttl` waits. Each holder it sees is
/// given the time its lease had left when first seen (a holder with a
/// longer lease that died, or that took the lease while this one waited,
/// is waited out too), and `ttl` again as a margin for clocks that
/// disagree and requests that are slow; at least `ttl` and the margin in
/// all. A holder that died cannot renew, so only a live one, or live ones
/// taking the lease in turn, keep a waiter past its patience.
struct Patience {
    ttl: Duration,
    started: std::time::Instant,
    /// Until when the waiter waits, as far as it has seen.
    until: std::time::Instant,
    /// The holders seen, each given its time once.
    seen: std::collections::HashSet<String>,
}

impl Patience {
    fn new(ttl: Duration) -> Self {
        let started = std::time::Instant::now();
        Self {
            ttl,
            started,
            until: started + ttl.saturating_add(ttl),
            seen: Default::default(),
        }
    }

    /// The longest any wait lasts, whoever is seen: one [`LONGEST_LEFT`]
    /// and the waiter's own patience.
    fn longest(ttl: Duration) -> Duration {
        LONGEST_LEFT.saturating_add(ttl).saturating_add(ttl)
    }

    /// After a look that found `seen`: whether the waiter has waited long
    /// enough, having given a holder it had not seen before its time.
    fn saw(&mut self, seen: &Look) -> bool {
        let now = std::time::Instant::now();
        if let Look::Held { holder, left } = seen {
            if self.seen.insert(holder.clone()) {
                let deadline = now + (*left).min(LONGEST_LEFT).saturating_add(self.ttl);
                self.until = self.until.max(deadline);
            }
        }
        now >= self.until
    }

    fn waited(&self) -> Duration {
        self.started.elapsed()
    }
}

/// The most a lease's expiry counts for in [`Patience`]: one that claims
/// more (written by a clock far ahead, or damaged) is waited for no longer.
const LONGEST_LEFT: Duration = Duration::from_secs(3600);

/// A wait for a lease that ended with the lease still held: its holder is
/// alive and renews it (a long tiering, `DROP` or maintenance of the table,
/// a long DDL).
#[derive(Debug, thiserror::Error)]
#[error(
    "gave up waiting for {what} (objects '{dir}') after {patience:.1?}: {}. A lease whose \
     holder died expires within its TTL (this process's is {ttl:?}) and is taken then; this \
     one is renewed, so its holder is alive and still working. Nothing was done under this lease: try again once it \
     is done",
    match held_by {
        Some(holder) => format!("process {holder} holds it"),
        None => "other processes took it first".to_string(),
    }
)]
pub(crate) struct WaitedOut {
    /// The lease: `the tiering lease of table 'db.t'`.
    pub(crate) what: String,
    /// Where its generations live.
    pub(crate) dir: Path,
    /// Who held it at the last look, if known.
    pub(crate) held_by: HeldBy,
    /// How long the waiter waited ([`Patience`]).
    pub(crate) patience: Duration,
    /// The waiter's lease length.
    pub(crate) ttl: Duration,
}

/// The lease's generations, oldest first.
async fn list<O: LeaseObjects>(root: &O, dir: &Path) -> Result<Vec<(u64, Path)>, O::Error> {
    let mut generations: Vec<(u64, Path)> = root
        .list(dir)
        .await?
        .into_iter()
        .filter_map(|location| generation_of(&location).map(|g| (g, location)))
        .collect();
    generations.sort_by_key(|(g, _)| *g);
    Ok(generations)
}

/// Whether another process took the lease over with a later generation
/// than `generation`, just created, before this create reached the store.
/// (A listing that misses `generation` itself, on a store whose listings
/// lag, is not a take-over: the newest is never deleted for it.)
async fn overtaken<O: LeaseObjects>(
    root: &O,
    dir: &Path,
    generation: u64,
) -> Result<bool, O::Error> {
    Ok(list(root, dir)
        .await?
        .last()
        .is_some_and(|(newest, _)| *newest > generation))
}

/// Gives the generation at `path` back: creates the next one, already
/// expired, then deletes `path`, so the newest is never deleted and
/// numbers only grow. Taken over already (the next exists), `path` is no
/// longer the newest either, and goes too.
async fn release<O: LeaseObjects>(root: &O, dir: &Path, path: &Path, holder: &str) {
    let Some(generation) = generation_of(path) else {
        return;
    };
    let released = generation_path(dir, generation + 1);
    if create_expiring(root, &released, holder, 0).await.is_ok() {
        let _ = root.delete(path).await;
    }
}

async fn create<O: LeaseObjects>(
    root: &O,
    path: &Path,
    holder: &str,
    ttl: Duration,
) -> Result<Created, O::Error> {
    let expires_ms = clock_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
    create_expiring(root, path, holder, expires_ms).await
}

async fn create_expiring<O: LeaseObjects>(
    root: &O,
    path: &Path,
    holder: &str,
    expires_ms: i64,
) -> Result<Created, O::Error> {
    let held = serde_json::json!({ "holder": holder, "expires_ms": expires_ms });
    root.create(path, Bytes::from(held.to_string())).await
}

/// Renews the lease every third of its life by creating the next
/// generation, until the lease is dropped or another process took it over.
async fn renew<O: LeaseObjects>(
    root: Arc<O>,
    dir: Path,
    mut generation: u64,
    holder: String,
    ttl: Duration,
    current: Arc<std::sync::Mutex<Path>>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let next = generation_path(&dir, generation + 1);
        match create(&*root, &next, &holder, ttl).await {
            Ok(Created::Yes) => {
                // Taken over while this renewal was on its way: the number
                // was free again, but it is not the lease. (Not known for
                // now: the next turn looks again.)
                if let Ok(true) = overtaken(&*root, &dir, generation + 1).await {
                    let _ = root.delete(&next).await;
                    return;
                }
                let old = std::mem::replace(
                    &mut *current.lock().unwrap_or_else(|e| e.into_inner()),
                    next,
                );
                let _ = root.delete(&old).await;
                generation += 1;
            }
            // Taken over (this process paused past the expiry): its
            // commits are fenced; renewing could only confuse the holder.
            Ok(Created::AlreadyExists) => return,
            // The store did not answer: try again at the next turn, while
            // the lease still lasts.
            Err(_) => {}
        }
    }
}

impl<O: LeaseObjects> Drop for Lease<O> {
    fn drop(&mut self) {
        self.renewer.abort();
        let path = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let root = Arc::clone(&self.objects);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (dir, holder) = (self.dir.clone(), self.holder.clone());
        // Released before the holder goes on (a process that exits right
        // after, as `lakestream-cli tier --once` does, must not leave its
        // lease for the next one to wait out); where this thread cannot
        // block, in the background. A lease not released expires anyway.
        // Released by the next generation, already expired: the newest is
        // never deleted, so numbers only grow.
        let release = async move { release(&*root, &dir, &path, &holder).await };
        if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| runtime.block_on(release));
        } else {
            runtime.spawn(release);
        }
    }
}

#[cfg(test)]
impl<O: LeaseObjects> Lease<O> {
    /// This holder's id.
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// Whether this holder still renews its lease (it stops once it finds
    /// the lease taken over).
    pub(crate) fn renewing(&self) -> bool {
        !self.renewer.is_finished()
    }
}

/// The holders of the lease's generations in `dir` there now, oldest first.
#[cfg(test)]
pub(crate) async fn holders<O: LeaseObjects>(
    objects: &O,
    dir: &Path,
) -> Result<Vec<(Path, String)>, O::Error> {
    let mut holders = Vec::new();
    for (_, generation) in list(objects, dir).await? {
        // Deleted since the list: an older one a renewal replaced.
        let Some(bytes) = objects.get(&generation).await? else {
            continue;
        };
        if let Ok(there) = serde_json::from_slice::<Held>(&bytes) {
            holders.push((generation, there.holder));
        }
    }
    Ok(holders)
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::ObjectStore;

    use super::*;

    /// Objects in memory, for leases within one process.
    #[derive(Debug)]
    struct Memory(InMemory);

    /// What goes wrong with leases in [`Memory`].
    #[derive(Debug, thiserror::Error)]
    enum MemoryError {
        #[error(transparent)]
        Objects(#[from] object_store::Error),
        #[error(transparent)]
        WaitedOut(WaitedOut),
    }

    #[async_trait::async_trait]
    impl LeaseObjects for Memory {
        type Error = MemoryError;

        async fn list(&self, dir: &Path) -> Result<Vec<Path>, Self::Error> {
            use futures::TryStreamExt;
            Ok(self
                .0
                .list(Some(dir))
                .map_ok(|m| m.location)
                .try_collect()
                .await?)
        }

        async fn get(&self, path: &Path) -> Result<Option<Bytes>, Self::Error> {
            Ok(super::super::create::get(&self.0, path).await?)
        }

        async fn create(&self, path: &Path, bytes: Bytes) -> Result<Created, Self::Error> {
            super::super::create::create_if_absent(&self.0, path, bytes)
                .await
                .map_err(|e| e.into_source().into())
        }

        async fn delete(&self, path: &Path) -> Result<(), Self::Error> {
            match object_store::ObjectStoreExt::delete(&self.0, path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }

        fn waited_out(&self, waited: WaitedOut) -> Self::Error {
            MemoryError::WaitedOut(waited)
        }
    }

    /// How long a test lets a waiter run before it calls the wait endless.
    const ENDLESS: Duration = Duration::from_secs(60);

    /// A live holder keeps renewing its lease: a waiter does not wait for
    /// ever, it gives up once it has waited out the lease's TTL and a
    /// margin, with an error that names the lease, where it lives and its
    /// holder.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_gives_up_on_a_live_holder_naming_what_it_waited_for() {
        let objects = Arc::new(Memory(InMemory::new()));
        let dir = Path::from("db-d/t-t/lease");
        let ttl = Duration::from_secs(1);
        let what = "the tiering lease of table 'd.t'";
        let live = Lease::acquire(Arc::clone(&objects), dir.clone(), ttl, what)
            .await
            .expect("the first lease");
        let waiter = Lease::acquire(Arc::clone(&objects), dir.clone(), ttl, what);
        let waited = tokio::time::timeout(ENDLESS, waiter)
            .await
            .expect("the waiter never gave up on a lease its live holder kept renewing");
        let Err(MemoryError::WaitedOut(out)) = waited else {
            panic!("waited out, not {waited:?}");
        };
        assert_eq!(out.held_by.as_deref(), Some(live.holder()));
        assert!(live.renewing(), "the holder kept its lease");
        let message = out.to_string();
        for part in [what, "db-d/t-t/lease", live.holder(), "gave up waiting"] {
            assert!(message.contains(part), "{part:?} missing from: {message}");
        }
        // At least the lease's TTL and a margin: a dead holder's would
        // have expired by then.
        assert!(out.patience >= 2 * ttl, "{out:?}");
    }

    /// A holder that died with a lease longer than the waiter's (another
    /// process's `local.lease-ttl`) is waited out all the same: its expiry,
    /// not the waiter's TTL, says how long.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_holders_longer_lease_is_waited_out() {
        let objects = Arc::new(Memory(InMemory::new()));
        let dir = Path::from("d/lease");
        // Left by a process that died: nothing renews or releases it.
        let expires_ms = clock_ms() + 2_500;
        create_expiring(&*objects, &generation_path(&dir, 0), "dead", expires_ms)
            .await
            .expect("the dead holder's generation");
        let ttl = Duration::from_secs(1);
        let waiter = Lease::acquire(Arc::clone(&objects), dir.clone(), ttl, "the lease");
        let taken = tokio::time::timeout(ENDLESS, waiter)
            .await
            .expect("the waiter never ended")
            .expect("the dead holder's lease, once expired");
        assert_newest_holder(&objects, &dir, &taken).await;
    }

    /// `lease` holds the newest generation in `dir`.
    async fn assert_newest_holder(objects: &Memory, dir: &Path, lease: &Lease<Memory>) {
        let there = holders(objects, dir).await.expect("holders");
        assert_eq!(
            there.last().map(|(_, h)| h.as_str()),
            Some(lease.holder()),
            "{there:?}"
        );
    }

    /// A holder seen only after the wait began, with a lease longer than
    /// the waiter's (a process with a longer `local.lease-ttl` that took
    /// it meanwhile and died), is waited out too: the waiter does not give
    /// up at the patience its first look gave it, saying a dead holder is
    /// alive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_seen_later_with_a_longer_lease_is_waited_out() {
        let objects = Arc::new(Memory(InMemory::new()));
        let dir = Path::from("d/lease");
        let soon = clock_ms() + 300;
        create_expiring(&*objects, &generation_path(&dir, 0), "brief", soon)
            .await
            .expect("the first holder's generation");
        let ttl = Duration::from_secs(1);
        let waiter = {
            let (objects, dir) = (Arc::clone(&objects), dir.clone());
            tokio::spawn(async move { Lease::acquire(objects, dir, ttl, "the lease").await })
        };
        // Taken over before the first holder's lease ran out, by a holder
        // whose lease outlasts the waiter's first patience (2 s), and who
        // then dies: nothing renews or releases it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let long = clock_ms() + 4_000;
        create_expiring(&*objects, &generation_path(&dir, 1), "dead", long)
            .await
            .expect("the dead holder's generation");
        let taken = tokio::time::timeout(ENDLESS, waiter)
            .await
            .expect("the waiter never ended")
            .expect("join")
            .expect("the dead holder's lease, once expired");
        assert_newest_holder(&objects, &dir, &taken).await;
    }

    /// One holder at a time: a second process waits until the first
    /// releases the lease, and releasing leaves the newest generation
    /// there, expired, so numbers only grow.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_holder_waits_for_the_first_to_release() {
        let objects = Arc::new(Memory(InMemory::new()));
        let dir = Path::from("d/lease");
        let ttl = Duration::from_secs(30);
        let first = Lease::acquire(Arc::clone(&objects), dir.clone(), ttl, "the lease")
            .await
            .expect("the first lease");
        let second = {
            let (objects, dir) = (Arc::clone(&objects), dir.clone());
            tokio::spawn(async move { Lease::acquire(objects, dir, ttl, "the lease").await })
        };
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!second.is_finished(), "taken while held");
        drop(first);
        let second = second.await.expect("join").expect("the second lease");
        let there = holders(&*objects, &dir).await.expect("holders");
        assert_eq!(
            there.last().map(|(_, h)| h.as_str()),
            Some(second.holder()),
            "{there:?}"
        );
        let newest = there.last().and_then(|(p, _)| generation_of(p));
        drop(second);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = list(&*objects, &dir).await.expect("list");
        assert!(
            after.last().map(|(g, _)| *g) > newest,
            "a release leaves a newer generation: {after:?}"
        );
    }

    #[test]
    fn generations_are_named_in_order() {
        let dir = Path::from("t/lease");
        let path = generation_path(&dir, 42);
        assert_eq!(path.as_ref(), "t/lease/tier-00000000000000000042");
        assert_eq!(generation_of(&path), Some(42));
        assert_eq!(generation_of(&Path::from("t/lease/other")), None);
        assert!(generation_path(&dir, 9).as_ref() < generation_path(&dir, 10).as_ref());
    }
}
