//! A fault-injecting [`ObjectStore`] for tests.
//!
//! [`FaultyStore`] wraps any `Arc<dyn ObjectStore>` and forwards every call to
//! it, except where a [`Rule`] of its [`Faults`] handle says otherwise. The
//! handle is shared (clone it, keep one side in the test) and can be changed
//! while the store is in use:
//!
//! ```
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! # use object_store::memory::InMemory;
//! use paimon_lakestream::testing::faulty::{Fault, FaultyStore, Faults, Op, Rule};
//!
//! let faults = Faults::seeded(7);
//! let store = FaultyStore::new(Arc::new(InMemory::new()), faults.clone());
//! // The next put under `log/` fails and writes nothing.
//! faults.add(Rule::new(Op::Put, Fault::fail()).path_contains("log/").times(1));
//! // Every get takes 20 ms longer.
//! faults.add(Rule::new(Op::Get, Fault::Delay(Duration::from_millis(20))));
//! // A tenth of the lists miss the object put last (seeded: the same calls
//! // in the same order meet the same faults).
//! faults.add(Rule::new(Op::List, Fault::ListMissesLatestPuts(1)).probability(0.1));
//! # let _ = store;
//! ```
//!
//! What can go wrong, per call ([`Fault`]):
//! - it fails without reaching the wrapped store ([`Fault::Fail`]), as a
//!   generic error, a timeout, or "not found";
//! - it is slow: a fixed or a random delay before it is forwarded;
//! - it reaches the wrapped store and then fails anyway
//!   ([`Fault::LandsThenFails`]): a put that times out but lands, a delete
//!   that deletes but reports an error;
//! - a list misses objects that were just created: the newest puts made
//!   through this handle, or objects modified within a time window.
//!
//! Every call is counted per [`Op`] (faulted or not), and the faults that
//! fired are counted too. With [`Faults::seeded`] the probabilistic rules draw
//! from one seeded generator, so a run that makes the same calls in the same
//! order meets the same faults; [`Faults::random_plan`] builds a whole plan of
//! probabilistic faults from a seed.
//!
//! Deletes are forwarded one location at a time (the wrapped store's
//! `delete_stream` is called once per location), so each can fail on its own.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};

/// The name this store gives in its errors.
const STORE: &str = "FaultyStore";

/// How many of the newest puts a handle remembers for
/// [`Fault::ListMissesLatestPuts`].
const REMEMBERED_PUTS: usize = 1024;

/// A kind of call, as rules match them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// `put_opts`, and the `complete` of a multipart upload.
    Put,
    /// `get_opts` (not a head), `get_ranges`.
    Get,
    /// `get_opts` with `head` set: `ObjectStoreExt::head`.
    Head,
    /// `list`, `list_with_offset`, `list_with_delimiter`.
    List,
    /// One location of `delete_stream`: `ObjectStoreExt::delete`.
    Delete,
    /// `copy_opts`.
    Copy,
    /// `rename_opts`.
    Rename,
}

impl Op {
    /// Every kind of call.
    pub const ALL: [Op; 7] = [
        Op::Put,
        Op::Get,
        Op::Head,
        Op::List,
        Op::Delete,
        Op::Copy,
        Op::Rename,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Head => "head",
            Op::List => "list",
            Op::Delete => "delete",
            Op::Copy => "copy",
            Op::Rename => "rename",
        }
    }

    /// Calls that change the store: the ones that can land and then fail.
    fn writes(self) -> bool {
        matches!(self, Op::Put | Op::Delete | Op::Copy | Op::Rename)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error an injected failure returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `object_store::Error::Generic`, as a failed request.
    Generic,
    /// `object_store::Error::Generic` whose source is an `std::io::Error` of
    /// kind `TimedOut`, as a request that did not answer in time.
    Timeout,
    /// `object_store::Error::NotFound`.
    NotFound,
    /// `object_store::Error::AlreadyExists`: how object_store reports S3's
    /// 409 `ConditionalRequestConflict`, a create racing another one on the
    /// same name, which may leave no object there.
    Conflict,
}

impl ErrorKind {
    fn error(self, op: Op, path: &str, landed: bool) -> object_store::Error {
        let outcome = if landed {
            " (the call reached the store and took effect)"
        } else {
            ""
        };
        match self {
            ErrorKind::Generic => object_store::Error::Generic {
                store: STORE,
                source: format!("injected failure: {op} {path}{outcome}").into(),
            },
            ErrorKind::Timeout => object_store::Error::Generic {
                store: STORE,
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("injected timeout: {op} {path}{outcome}"),
                )),
            },
            ErrorKind::NotFound => object_store::Error::NotFound {
                path: path.to_string(),
                source: format!("injected not found: {op} {path}{outcome}").into(),
            },
            ErrorKind::Conflict => object_store::Error::AlreadyExists {
                path: path.to_string(),
                source: format!("injected conflict: {op} {path}{outcome}").into(),
            },
        }
    }
}

/// What happens to a call a rule fires on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The call fails without reaching the wrapped store.
    Fail(ErrorKind),
    /// The call waits this long, then goes on (delays of several rules add up).
    Delay(Duration),
    /// The call waits a random time up to this long (drawn from the handle's
    /// generator), then goes on.
    RandomDelay(Duration),
    /// The call reaches the wrapped store and takes effect, then fails: a put
    /// that times out but lands. Only for calls that change the store
    /// (put, delete, copy, rename).
    LandsThenFails(ErrorKind),
    /// A list leaves out the objects of the newest `n` puts (and copies,
    /// renames) made through this handle. Only for lists.
    ListMissesLatestPuts(usize),
    /// A list leaves out objects last modified within this window before the
    /// list. Only for lists.
    ListMissesModifiedWithin(Duration),
    /// A conditional put (create-if-absent) is carried out unconditionally,
    /// replacing what is there, and reported as a success: an S3-compatible
    /// server that ignores `If-None-Match`. Only for puts.
    IgnoresCondition,
    /// A get or head answers without the object's version (no `ETag`, no
    /// version id): a server or gateway that leaves them out. Only for gets
    /// and heads.
    NoVersion,
}

impl Fault {
    /// A failure with a generic error.
    pub fn fail() -> Self {
        Fault::Fail(ErrorKind::Generic)
    }

    /// A call that does not answer in time and does not take effect.
    pub fn timeout() -> Self {
        Fault::Fail(ErrorKind::Timeout)
    }

    /// A call that takes effect and then reports a timeout.
    pub fn lands_then_times_out() -> Self {
        Fault::LandsThenFails(ErrorKind::Timeout)
    }

    fn is_delay(&self) -> bool {
        matches!(self, Fault::Delay(_) | Fault::RandomDelay(_))
    }

    fn fits(&self, op: Op) -> bool {
        match self {
            Fault::Fail(_) | Fault::Delay(_) | Fault::RandomDelay(_) => true,
            Fault::LandsThenFails(_) => op.writes(),
            Fault::ListMissesLatestPuts(_) | Fault::ListMissesModifiedWithin(_) => op == Op::List,
            Fault::IgnoresCondition => op == Op::Put,
            Fault::NoVersion => matches!(op, Op::Get | Op::Head),
        }
    }
}

/// When a fault fires: on which calls, how often, with what probability.
#[derive(Debug, Clone)]
pub struct Rule {
    ops: Vec<Op>,
    fault: Fault,
    path_contains: Option<String>,
    skip: u64,
    times: Option<u64>,
    probability: f64,
}

impl Rule {
    /// `fault` on every call of kind `op`.
    pub fn new(op: Op, fault: Fault) -> Self {
        Self::on(&[op], fault)
    }

    /// `fault` on every call of any of these kinds.
    pub fn on(ops: &[Op], fault: Fault) -> Self {
        Self {
            ops: ops.to_vec(),
            fault,
            path_contains: None,
            skip: 0,
            times: None,
            probability: 1.0,
        }
    }

    /// Only calls whose path (for lists: the prefix) contains `text`.
    pub fn path_contains(mut self, text: impl Into<String>) -> Self {
        self.path_contains = Some(text.into());
        self
    }

    /// Lets the first `n` matching calls through untouched.
    pub fn skip(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    /// Fires at most `n` times, then is spent.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// Fires on a matching call with this probability (drawn from the
    /// handle's seeded generator). Default 1.
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = p.clamp(0.0, 1.0);
        self
    }

    fn matches(&self, op: Op, path: &str) -> bool {
        self.ops.contains(&op)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|text| path.contains(text))
    }
}

/// The identifier [`Faults::add`] returns, for [`Faults::remove`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId(u64);

/// A rule as installed: how many matching calls it has seen and how many
/// times it fired.
#[derive(Debug)]
struct Installed {
    id: RuleId,
    rule: Rule,
    seen: u64,
    fired: u64,
}

/// One call, as [`Faults::calls`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The kind of call.
    pub op: Op,
    /// Its path (for lists, the prefix; empty for the root).
    pub path: String,
    /// The faults that fired on it, if any.
    pub faults: Vec<Fault>,
}

/// The probabilities of [`Faults::random_plan`].
#[derive(Debug, Clone)]
pub struct Chaos {
    /// Of each call failing without effect (a generic error or a timeout).
    pub fail: f64,
    /// Of each call being slow, by a random delay up to `max_delay`.
    pub slow: f64,
    /// The longest delay of a slow call.
    pub max_delay: Duration,
    /// Of each put, delete, copy or rename taking effect and then reporting a timeout.
    pub lands_then_times_out: f64,
    /// Of each list missing the newest object put through the handle.
    pub list_misses_new: f64,
}

impl Default for Chaos {
    fn default() -> Self {
        Self {
            fail: 0.05,
            slow: 0.1,
            max_delay: Duration::from_millis(50),
            lands_then_times_out: 0.02,
            list_misses_new: 0.05,
        }
    }
}

/// SplitMix64: small, seedable, and the same on every platform. Tests that
/// plan their own faults from a seed use it too.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug)]
struct State {
    enabled: bool,
    rules: Vec<Installed>,
    next_id: u64,
    rng: SplitMix64,
    counts: BTreeMap<Op, u64>,
    injected: BTreeMap<Op, u64>,
    recording: bool,
    calls: Vec<Call>,
    latest_puts: VecDeque<String>,
}

/// The switches of one or more [`FaultyStore`]s: rules, counters and the
/// seeded generator. Clones share them.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Faults")
            .field("enabled", &state.enabled)
            .field("rules", &state.rules.len())
            .field("counts", &state.counts)
            .finish()
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::new()
    }
}

/// What one call is to do, decided when it starts.
#[derive(Debug, Default)]
struct Decision {
    delay: Duration,
    fault: Option<Fault>,
}

impl Decision {
    async fn wait(&self) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }
}

impl Faults {
    /// No rules, seed 0.
    pub fn new() -> Self {
        Self::seeded(0)
    }

    /// No rules; probabilistic rules draw from a generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                enabled: true,
                rules: Vec::new(),
                next_id: 0,
                rng: SplitMix64(seed),
                counts: BTreeMap::new(),
                injected: BTreeMap::new(),
                recording: false,
                calls: Vec::new(),
                latest_puts: VecDeque::new(),
            })),
        }
    }

    /// A plan of probabilistic faults on every kind of call, drawn from `seed`.
    pub fn random_plan(seed: u64, chaos: &Chaos) -> Self {
        let faults = Self::seeded(seed);
        for op in Op::ALL {
            if op.writes() && chaos.lands_then_times_out > 0.0 {
                faults.add(
                    Rule::new(op, Fault::lands_then_times_out())
                        .probability(chaos.lands_then_times_out),
                );
            }
            if chaos.fail > 0.0 {
                faults.add(Rule::new(op, Fault::fail()).probability(chaos.fail / 2.0));
                faults.add(Rule::new(op, Fault::timeout()).probability(chaos.fail / 2.0));
            }
            if chaos.slow > 0.0 && !chaos.max_delay.is_zero() {
                faults.add(
                    Rule::new(op, Fault::RandomDelay(chaos.max_delay)).probability(chaos.slow),
                );
            }
        }
        if chaos.list_misses_new > 0.0 {
            faults.add(
                Rule::new(Op::List, Fault::ListMissesLatestPuts(1))
                    .probability(chaos.list_misses_new),
            );
        }
        faults
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves the state usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs a rule. Rules are tried in the order they were added; the
    /// delays of all that fire add up, and the first other fault that fires
    /// decides the call (later rules are not tried for it).
    ///
    /// # Panics
    /// If the fault cannot happen to one of the rule's kinds of call (a list
    /// miss on a put, a landed get).
    pub fn add(&self, rule: Rule) -> RuleId {
        for op in &rule.ops {
            assert!(
                rule.fault.fits(*op),
                "fault {:?} cannot happen to a {op}",
                rule.fault
            );
        }
        let mut state = self.lock();
        let id = RuleId(state.next_id);
        state.next_id += 1;
        state.rules.push(Installed {
            id,
            rule,
            seen: 0,
            fired: 0,
        });
        id
    }

    /// Removes a rule; false if it was not there.
    pub fn remove(&self, id: RuleId) -> bool {
        let mut state = self.lock();
        let before = state.rules.len();
        state.rules.retain(|r| r.id != id);
        state.rules.len() != before
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// Turns all rules off (`false`) or on again; calls are still counted.
    pub fn set_enabled(&self, enabled: bool) {
        self.lock().enabled = enabled;
    }

    /// How many times the rule fired (0 if it is not installed).
    pub fn fired(&self, id: RuleId) -> u64 {
        self.lock()
            .rules
            .iter()
            .find(|r| r.id == id)
            .map_or(0, |r| r.fired)
    }

    /// How many calls of this kind were made, faulted or not.
    pub fn count(&self, op: Op) -> u64 {
        self.lock().counts.get(&op).copied().unwrap_or(0)
    }

    /// How many calls of any kind were made.
    pub fn total(&self) -> u64 {
        self.lock().counts.values().sum()
    }

    /// How many calls of this kind met a fault (a delay included).
    pub fn injected(&self, op: Op) -> u64 {
        self.lock().injected.get(&op).copied().unwrap_or(0)
    }

    /// Sets every counter to zero and forgets recorded calls.
    pub fn reset_counts(&self) {
        let mut state = self.lock();
        state.counts.clear();
        state.injected.clear();
        state.calls.clear();
    }

    /// Starts (`true`) or stops recording each call for [`Self::calls`].
    pub fn record_calls(&self, on: bool) {
        self.lock().recording = on;
    }

    /// The calls recorded since recording started (or the last reset), in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Decides what a starting call meets, and counts it.
    fn decide(&self, op: Op, path: &str) -> Decision {
        let mut state = self.lock();
        let state = &mut *state;
        *state.counts.entry(op).or_default() += 1;
        let mut decision = Decision::default();
        let mut fired = Vec::new();
        if state.enabled {
            for installed in &mut state.rules {
                if decision.fault.is_some() && !installed.rule.fault.is_delay() {
                    continue;
                }
                if !installed.rule.matches(op, path) {
                    continue;
                }
                installed.seen += 1;
                if installed.seen <= installed.rule.skip {
                    continue;
                }
                if installed
                    .rule
                    .times
                    .is_some_and(|times| installed.fired >= times)
                {
                    continue;
                }
                if installed.rule.probability < 1.0
                    && state.rng.next_f64() >= installed.rule.probability
                {
                    continue;
                }
                installed.fired += 1;
                fired.push(installed.rule.fault.clone());
                match &installed.rule.fault {
                    Fault::Delay(d) => decision.delay += *d,
                    Fault::RandomDelay(max) => {
                        let nanos = max.as_nanos().min(u64::MAX as u128) as u64;
                        if nanos > 0 {
                            decision.delay +=
                                Duration::from_nanos(state.rng.next_u64() % (nanos + 1));
                        }
                    }
                    other => decision.fault = Some(other.clone()),
                }
            }
        }
        if !fired.is_empty() {
            *state.injected.entry(op).or_default() += 1;
        }
        if state.recording {
            state.calls.push(Call {
                op,
                path: path.to_string(),
                faults: fired,
            });
        }
        decision
    }

    /// Notes an object created through the handle, for list misses.
    fn created(&self, path: &Path) {
        let mut state = self.lock();
        state.latest_puts.push_back(path.to_string());
        while state.latest_puts.len() > REMEMBERED_PUTS {
            state.latest_puts.pop_front();
        }
    }

    /// What a list decided to miss leaves out.
    fn hidden(&self, fault: &Option<Fault>) -> Hidden {
        match fault {
            Some(Fault::ListMissesLatestPuts(n)) => {
                let state = self.lock();
                Hidden::Paths(state.latest_puts.iter().rev().take(*n).cloned().collect())
            }
            Some(Fault::ListMissesModifiedWithin(window)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let since = now.saturating_sub(*window).as_millis();
                Hidden::SinceMillis(i64::try_from(since).unwrap_or(i64::MAX))
            }
            _ => Hidden::Nothing,
        }
    }
}

/// The objects a list leaves out.
#[derive(Debug, Clone)]
enum Hidden {
    Nothing,
    Paths(HashSet<String>),
    /// Objects modified at or after this time (milliseconds since the epoch).
    SinceMillis(i64),
}

impl Hidden {
    fn keeps(&self, meta: &ObjectMeta) -> bool {
        match self {
            Hidden::Nothing => true,
            Hidden::Paths(paths) => !paths.contains(meta.location.as_ref()),
            Hidden::SinceMillis(since) => meta.last_modified.timestamp_millis() < *since,
        }
    }
}

/// An [`ObjectStore`] that forwards to another, meeting the faults its
/// [`Faults`] handle sets up.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Faults,
}

impl FaultyStore {
    /// Wraps `inner`; `faults` controls it (keep a clone).
    pub fn new(inner: Arc<dyn ObjectStore>, faults: Faults) -> Self {
        Self { inner, faults }
    }

    /// The handle that controls this store.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// A list of `prefix` as the rules decide: failed, late, or missing objects.
    /// `list` starts the wrapped store's listing: only once a delay has
    /// passed, so a late list sees what the store holds then (a store may
    /// take its listing as soon as it is asked, as `InMemory` does).
    fn faulty_list(
        &self,
        prefix: Option<&Path>,
        list: impl FnOnce() -> BoxStream<'static, object_store::Result<ObjectMeta>> + Send + 'static,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let path = prefix.map(|p| p.to_string()).unwrap_or_default();
        let decision = self.faults.decide(Op::List, &path);
        let hidden = self.faults.hidden(&decision.fault);
        stream::once(async move {
            decision.wait().await;
            match decision.fault {
                Some(Fault::Fail(kind)) => {
                    stream::iter([Err(kind.error(Op::List, &path, false))]).boxed()
                }
                _ => list()
                    .try_filter(move |meta| futures::future::ready(hidden.keeps(meta)))
                    .boxed(),
            }
        })
        .flatten()
        .boxed()
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let decision = self.faults.decide(Op::Put, location.as_ref());
        decision.wait().await;
        match decision.fault {
            Some(Fault::Fail(kind)) => Err(kind.error(Op::Put, location.as_ref(), false)),
            Some(Fault::LandsThenFails(kind)) => {
                self.inner.put_opts(location, payload, opts).await?;
                self.faults.created(location);
                Err(kind.error(Op::Put, location.as_ref(), true))
            }
            Some(Fault::IgnoresCondition) => {
                let opts = PutOptions {
                    mode: PutMode::Overwrite,
                    ..opts
                };
                let result = self.inner.put_opts(location, payload, opts).await?;
                self.faults.created(location);
                Ok(result)
            }
            _ => {
                let result = self.inner.put_opts(location, payload, opts).await?;
                self.faults.created(location);
                Ok(result)
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultyUpload {
            inner: upload,
            location: location.clone(),
            faults: self.faults.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        let decision = self.faults.decide(op, location.as_ref());
        decision.wait().await;
        match decision.fault {
            Some(Fault::Fail(kind)) => Err(kind.error(op, location.as_ref(), false)),
            Some(Fault::NoVersion) => {
                let mut result = self.inner.get_opts(location, options).await?;
                result.meta.e_tag = None;
                result.meta.version = None;
                Ok(result)
            }
            _ => self.inner.get_opts(location, options).await,
        }
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let decision = self.faults.decide(Op::Get, location.as_ref());
        decision.wait().await;
        if let Some(Fault::Fail(kind)) = decision.fault {
            return Err(kind.error(Op::Get, location.as_ref(), false));
        }
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = Arc::clone(&self.inner);
        let faults = self.faults.clone();
        locations
            .then(move |location| {
                let inner = Arc::clone(&inner);
                let faults = faults.clone();
                async move {
                    let location = location?;
                    let decision = faults.decide(Op::Delete, location.as_ref());
                    decision.wait().await;
                    let landed = match decision.fault {
                        Some(Fault::Fail(kind)) => {
                            return Err(kind.error(Op::Delete, location.as_ref(), false));
                        }
                        Some(Fault::LandsThenFails(kind)) => Some(kind),
                        _ => None,
                    };
                    let mut deleted =
                        inner.delete_stream(stream::iter([Ok(location.clone())]).boxed());
                    while let Some(result) = deleted.next().await {
                        result?;
                    }
                    match landed {
                        Some(kind) => Err(kind.error(Op::Delete, location.as_ref(), true)),
                        None => Ok(location),
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (inner, owned) = (Arc::clone(&self.inner), prefix.cloned());
        self.faulty_list(prefix, move || inner.list(owned.as_ref()))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let (inner, owned, offset) = (Arc::clone(&self.inner), prefix.cloned(), offset.clone());
        self.faulty_list(prefix, move || {
            inner.list_with_offset(owned.as_ref(), &offset)
        })
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let path = prefix.map(|p| p.to_string()).unwrap_or_default();
        let decision = self.faults.decide(Op::List, &path);
        let hidden = self.faults.hidden(&decision.fault);
        decision.wait().await;
        if let Some(Fault::Fail(kind)) = decision.fault {
            return Err(kind.error(Op::List, &path, false));
        }
        let mut result = self.inner.list_with_delimiter(prefix).await?;
        result.objects.retain(|meta| hidden.keeps(meta));
        Ok(result)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let decision = self.faults.decide(Op::Copy, to.as_ref());
        decision.wait().await;
        match decision.fault {
            Some(Fault::Fail(kind)) => Err(kind.error(Op::Copy, to.as_ref(), false)),
            Some(Fault::LandsThenFails(kind)) => {
                self.inner.copy_opts(from, to, options).await?;
                self.faults.created(to);
                Err(kind.error(Op::Copy, to.as_ref(), true))
            }
            _ => {
                self.inner.copy_opts(from, to, options).await?;
                self.faults.created(to);
                Ok(())
            }
        }
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let decision = self.faults.decide(Op::Rename, to.as_ref());
        decision.wait().await;
        match decision.fault {
            Some(Fault::Fail(kind)) => Err(kind.error(Op::Rename, to.as_ref(), false)),
            Some(Fault::LandsThenFails(kind)) => {
                self.inner.rename_opts(from, to, options).await?;
                self.faults.created(to);
                Err(kind.error(Op::Rename, to.as_ref(), true))
            }
            _ => {
                self.inner.rename_opts(from, to, options).await?;
                self.faults.created(to);
                Ok(())
            }
        }
    }
}

/// A multipart upload whose `complete` is a put to the rules.
#[derive(Debug)]
struct FaultyUpload {
    inner: Box<dyn MultipartUpload>,
    location: Path,
    faults: Faults,
}

#[async_trait]
impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let decision = self.faults.decide(Op::Put, self.location.as_ref());
        decision.wait().await;
        match decision.fault {
            Some(Fault::Fail(kind)) => Err(kind.error(Op::Put, self.location.as_ref(), false)),
            Some(Fault::LandsThenFails(kind)) => {
                self.inner.complete().await?;
                self.faults.created(&self.location);
                Err(kind.error(Op::Put, self.location.as_ref(), true))
            }
            _ => {
                let result = self.inner.complete().await?;
                self.faults.created(&self.location);
                Ok(result)
            }
        }
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    use super::*;

    fn store(faults: &Faults) -> FaultyStore {
        FaultyStore::new(Arc::new(InMemory::new()), faults.clone())
    }

    fn path(text: &str) -> Path {
        Path::from(text)
    }

    async fn put(store: &FaultyStore, at: &str) -> object_store::Result<PutResult> {
        store
            .put(&path(at), PutPayload::from_static(b"bytes"))
            .await
    }

    async fn listed(store: &FaultyStore, prefix: &str) -> object_store::Result<Vec<String>> {
        let prefix = path(prefix);
        let mut names: Vec<String> = store
            .list(Some(&prefix))
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await?;
        names.sort();
        Ok(names)
    }

    fn is_timeout(error: &object_store::Error) -> bool {
        match error {
            object_store::Error::Generic { source, .. } => source
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
            _ => false,
        }
    }

    #[tokio::test]
    async fn without_rules_every_call_is_forwarded_and_counted() {
        let faults = Faults::new();
        let store = store(&faults);
        put(&store, "a/1").await.unwrap();
        put(&store, "a/2").await.unwrap();
        let got = store
            .get(&path("a/1"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(got.as_ref(), b"bytes");
        assert_eq!(store.head(&path("a/2")).await.unwrap().size, 5);
        let ranges = store.get_ranges(&path("a/1"), &[0..2, 3..5]).await.unwrap();
        assert_eq!(
            ranges,
            vec![Bytes::from_static(b"by"), Bytes::from_static(b"es")]
        );
        assert_eq!(listed(&store, "a").await.unwrap(), ["a/1", "a/2"]);
        let offset: Vec<ObjectMeta> = store
            .list_with_offset(Some(&path("a")), &path("a/1"))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(offset.len(), 1);
        let delimited = store.list_with_delimiter(None).await.unwrap();
        assert_eq!(delimited.common_prefixes, vec![path("a")]);
        store.copy(&path("a/1"), &path("b/1")).await.unwrap();
        store.rename(&path("b/1"), &path("c/1")).await.unwrap();
        store.delete(&path("a/2")).await.unwrap();
        let mut upload = store.put_multipart(&path("m/1")).await.unwrap();
        upload
            .put_part(PutPayload::from_static(b"part"))
            .await
            .unwrap();
        upload.complete().await.unwrap();
        assert_eq!(listed(&store, "").await.unwrap(), ["a/1", "c/1", "m/1"]);
        // The same conditional put semantics as the wrapped store.
        let again = store
            .put_opts(
                &path("a/1"),
                PutPayload::from_static(b"x"),
                PutMode::Create.into(),
            )
            .await;
        assert!(matches!(
            again,
            Err(object_store::Error::AlreadyExists { .. })
        ));

        assert_eq!(faults.count(Op::Put), 4);
        assert_eq!(faults.count(Op::Get), 2);
        assert_eq!(faults.count(Op::Head), 1);
        assert_eq!(faults.count(Op::List), 4);
        assert_eq!(faults.count(Op::Copy), 1);
        assert_eq!(faults.count(Op::Rename), 1);
        assert_eq!(faults.count(Op::Delete), 1);
        assert_eq!(faults.total(), 14);
        assert_eq!(
            Op::ALL.iter().map(|op| faults.injected(*op)).sum::<u64>(),
            0
        );
        assert_eq!(store.to_string(), "FaultyStore(InMemory)");
    }

    #[tokio::test]
    async fn a_failed_put_writes_nothing_and_a_spent_rule_stops() {
        let faults = Faults::new();
        let store = store(&faults);
        let rule = faults.add(Rule::new(Op::Put, Fault::fail()).times(1));
        let err = put(&store, "log/1").await.unwrap_err();
        assert!(
            err.to_string().contains("injected failure: put log/1"),
            "{err}"
        );
        assert!(matches!(
            store.head(&path("log/1")).await,
            Err(object_store::Error::NotFound { .. })
        ));
        put(&store, "log/1").await.unwrap();
        assert!(store.head(&path("log/1")).await.is_ok());
        assert_eq!(faults.fired(rule), 1);
        assert_eq!(faults.injected(Op::Put), 1);
        assert_eq!(faults.count(Op::Put), 2);
    }

    #[tokio::test]
    async fn a_put_that_times_out_but_lands() {
        let faults = Faults::new();
        let store = store(&faults);
        faults.add(Rule::new(Op::Put, Fault::lands_then_times_out()).times(1));
        let err = put(&store, "log/7").await.unwrap_err();
        assert!(is_timeout(&err), "{err}");
        assert!(err.to_string().contains("took effect"), "{err}");
        // It landed: a create-if-absent retry finds it there.
        let retry = store
            .put_opts(
                &path("log/7"),
                PutPayload::from_static(b"again"),
                PutMode::Create.into(),
            )
            .await;
        assert!(matches!(
            retry,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        let got = store
            .get(&path("log/7"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(got.as_ref(), b"bytes");
    }

    #[tokio::test]
    async fn a_multipart_upload_completes_through_the_put_rules() {
        let faults = Faults::new();
        let store = store(&faults);
        faults.add(Rule::new(Op::Put, Fault::fail()).times(1));
        let mut upload = store.put_multipart(&path("m/1")).await.unwrap();
        upload
            .put_part(PutPayload::from_static(b"part"))
            .await
            .unwrap();
        assert!(upload.complete().await.is_err());
        upload.abort().await.unwrap();
        assert!(store.head(&path("m/1")).await.is_err());

        faults.add(Rule::new(Op::Put, Fault::lands_then_times_out()).times(1));
        let mut upload = store.put_multipart(&path("m/2")).await.unwrap();
        upload
            .put_part(PutPayload::from_static(b"part"))
            .await
            .unwrap();
        assert!(is_timeout(&upload.complete().await.unwrap_err()));
        assert!(store.head(&path("m/2")).await.is_ok());
    }

    #[tokio::test]
    async fn failed_gets_heads_lists_deletes_copies_and_renames() {
        let faults = Faults::new();
        let store = store(&faults);
        put(&store, "d/1").await.unwrap();
        put(&store, "d/2").await.unwrap();

        faults.add(Rule::new(Op::Get, Fault::Fail(ErrorKind::NotFound)).times(2));
        assert!(matches!(
            store.get(&path("d/1")).await,
            Err(object_store::Error::NotFound { .. })
        ));
        assert!(store.get_ranges(&path("d/1"), &[0..1, 2..3]).await.is_err());
        assert!(store.get(&path("d/1")).await.is_ok());

        faults.add(Rule::new(Op::Head, Fault::timeout()).times(1));
        assert!(is_timeout(&store.head(&path("d/1")).await.unwrap_err()));
        assert!(store.head(&path("d/1")).await.is_ok());

        faults.add(Rule::new(Op::List, Fault::fail()).times(2));
        assert!(listed(&store, "d").await.is_err());
        assert!(store.list_with_delimiter(None).await.is_err());
        assert_eq!(listed(&store, "d").await.unwrap(), ["d/1", "d/2"]);

        faults.add(Rule::new(Op::Delete, Fault::fail()).times(1));
        assert!(store.delete(&path("d/1")).await.is_err());
        assert!(
            store.head(&path("d/1")).await.is_ok(),
            "a failed delete deletes nothing"
        );
        faults.add(Rule::new(Op::Delete, Fault::lands_then_times_out()).times(1));
        assert!(is_timeout(&store.delete(&path("d/1")).await.unwrap_err()));
        assert!(store.head(&path("d/1")).await.is_err(), "the delete landed");

        faults.add(Rule::on(&[Op::Copy, Op::Rename], Fault::fail()).times(2));
        assert!(store.copy(&path("d/2"), &path("e/2")).await.is_err());
        assert!(store.rename(&path("d/2"), &path("e/2")).await.is_err());
        assert_eq!(listed(&store, "").await.unwrap(), ["d/2"]);
    }

    #[tokio::test]
    async fn a_delete_stream_fails_per_location() {
        let faults = Faults::new();
        let store = store(&faults);
        for name in ["x/1", "x/2", "x/3"] {
            put(&store, name).await.unwrap();
        }
        faults.add(Rule::new(Op::Delete, Fault::fail()).path_contains("x/2"));
        let results: Vec<object_store::Result<Path>> = store
            .delete_stream(stream::iter(["x/1", "x/2", "x/3"].map(|p| Ok(path(p)))).boxed())
            .collect()
            .await;
        assert!(results[0].is_ok() && results[1].is_err() && results[2].is_ok());
        assert_eq!(listed(&store, "x").await.unwrap(), ["x/2"]);
    }

    #[tokio::test]
    async fn a_list_misses_a_newly_created_object() {
        let faults = Faults::new();
        let store = store(&faults);
        put(&store, "seg/1").await.unwrap();
        put(&store, "seg/2").await.unwrap();
        faults.add(Rule::new(Op::List, Fault::ListMissesLatestPuts(1)).times(2));
        assert_eq!(listed(&store, "seg").await.unwrap(), ["seg/1"]);
        let delimited = store.list_with_delimiter(Some(&path("seg"))).await.unwrap();
        assert_eq!(delimited.objects.len(), 1);
        // Spent: the object shows again.
        assert_eq!(listed(&store, "seg").await.unwrap(), ["seg/1", "seg/2"]);

        // By age: objects modified within the window are not listed.
        let rule = faults.add(Rule::new(
            Op::List,
            Fault::ListMissesModifiedWithin(Duration::from_secs(3600)),
        ));
        assert!(listed(&store, "seg").await.unwrap().is_empty());
        faults.remove(rule);
        assert_eq!(listed(&store, "seg").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn slow_calls_wait_then_go_on() {
        let faults = Faults::new();
        let store = store(&faults);
        faults.add(Rule::on(
            &[Op::Put, Op::List],
            Fault::Delay(Duration::from_millis(60)),
        ));
        let start = Instant::now();
        put(&store, "s/1").await.unwrap();
        assert_eq!(listed(&store, "s").await.unwrap(), ["s/1"]);
        assert!(start.elapsed() >= Duration::from_millis(120));
        assert_eq!(faults.injected(Op::Put), 1);
        // Switched off: counted, not delayed.
        faults.set_enabled(false);
        let start = Instant::now();
        put(&store, "s/2").await.unwrap();
        assert!(start.elapsed() < Duration::from_millis(60));
        assert_eq!(faults.count(Op::Put), 2);
        assert_eq!(faults.injected(Op::Put), 1);
    }

    #[tokio::test]
    async fn skip_path_and_call_records() {
        let faults = Faults::new();
        let store = store(&faults);
        faults.record_calls(true);
        faults.add(
            Rule::new(Op::Put, Fault::fail())
                .path_contains("log/")
                .skip(1),
        );
        put(&store, "meta/1").await.unwrap();
        put(&store, "log/1").await.unwrap();
        assert!(put(&store, "log/2").await.is_err());
        let calls = faults.calls();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[2].path, "log/2");
        assert_eq!(calls[2].faults, vec![Fault::fail()]);
        assert!(calls[0].faults.is_empty() && calls[1].faults.is_empty());
        faults.reset_counts();
        assert_eq!(faults.total(), 0);
        assert!(faults.calls().is_empty());
    }

    #[test]
    #[should_panic(expected = "cannot happen to a get")]
    fn a_fault_that_cannot_happen_is_refused() {
        Faults::new().add(Rule::new(Op::Get, Fault::lands_then_times_out()));
    }

    /// Runs a fixed sequence of calls and returns which of them failed.
    async fn outcomes(faults: Faults) -> Vec<bool> {
        let store = store(&faults);
        let mut out = Vec::new();
        for i in 0..200 {
            let name = format!("r/{i}");
            out.push(put(&store, &name).await.is_err());
            out.push(store.get(&path(&name)).await.is_err());
            out.push(listed(&store, "r").await.is_err());
        }
        out
    }

    #[tokio::test]
    async fn a_seeded_plan_is_deterministic() {
        let chaos = Chaos {
            max_delay: Duration::from_millis(1),
            ..Chaos::default()
        };
        let first = outcomes(Faults::random_plan(42, &chaos)).await;
        let again = outcomes(Faults::random_plan(42, &chaos)).await;
        let other = outcomes(Faults::random_plan(43, &chaos)).await;
        assert_eq!(first, again);
        assert_ne!(first, other);
        let failed = first.iter().filter(|f| **f).count();
        assert!(failed > 0 && failed < first.len() / 2, "{failed} failed");
    }
}
