//! The one way a step is tried again: a bounded number of tries, pauses
//! that grow, with jitter so that processes racing for one name fall apart,
//! and optionally a time after which no try starts.
//!
//! Every loop that tries again (a commit that lost a race, a schema file
//! read mid-write, a cluster not ready yet, a lock file replaced under its
//! holder) states its [`Retry`] and runs through [`Retry::run`]; none loops
//! without a bound.

use std::future::Future;
use std::time::Duration;

/// How a step is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    /// Tries in all, the first included (at least one is made).
    pub(crate) tries: u32,
    /// The pause before the second try; each later one doubles it, up to
    /// `max_pause`.
    pub(crate) first_pause: Duration,
    /// The longest pause.
    pub(crate) max_pause: Duration,
    /// Up to this much is added at random to each pause.
    pub(crate) jitter: Duration,
    /// No try starts once this much time has passed since the first, nor
    /// when the pause before it would end past it.
    pub(crate) within: Option<Duration>,
}

/// What one try of a step came to.
#[derive(Debug)]
pub(crate) enum Try<T, E> {
    /// Finished: its answer.
    Done(T),
    /// Worth another try (lost a race, not ready yet): why.
    Again(E),
}

impl Retry {
    /// Tries made at once, with no pause.
    pub(crate) const fn immediately(tries: u32) -> Self {
        Self {
            tries,
            first_pause: Duration::ZERO,
            max_pause: Duration::ZERO,
            jitter: Duration::ZERO,
            within: None,
        }
    }

    /// `tries` tries, pausing `first_pause`, then twice that, and so on up
    /// to `max_pause`.
    pub(crate) const fn growing(tries: u32, first_pause: Duration, max_pause: Duration) -> Self {
        Self {
            tries,
            first_pause,
            max_pause,
            jitter: Duration::ZERO,
            within: None,
        }
    }

    /// This policy with up to `jitter` added at random to each pause.
    pub(crate) const fn with_jitter(self, jitter: Duration) -> Self {
        Self { jitter, ..self }
    }

    /// This policy, starting no try once `within` has passed.
    pub(crate) const fn within(self, within: Duration) -> Self {
        Self {
            within: Some(within),
            ..self
        }
    }

    /// The pause before try `try_number` (2 for the second try), jitter
    /// aside.
    pub(crate) fn pause_before(&self, try_number: u32) -> Duration {
        let doublings = try_number.saturating_sub(2).min(31);
        self.first_pause
            .saturating_mul(1 << doublings)
            .min(self.max_pause.max(self.first_pause))
    }

    fn jittered(&self, pause: Duration) -> Duration {
        if self.jitter.is_zero() {
            return pause;
        }
        let nanos = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let random =
            u64::try_from(uuid::Uuid::new_v4().as_u128() % u128::from(nanos.max(1))).unwrap_or(0);
        pause.saturating_add(Duration::from_nanos(random))
    }

    /// Runs `step` until it is [`Try::Done`], an error, or out of tries
    /// (or time): then the last [`Try::Again`]'s reason, as `Err`.
    pub(crate) async fn run<T, E, F, Fut>(&self, mut step: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Try<T, E>, E>>,
    {
        // The loop of `run_to_end`, not a call of it: a future nested one
        // level deeper costs stack in every poll (a compaction's commit on
        // S3 polls deep enough for that to matter in a debug build).
        let mut tries = Tries::start();
        loop {
            let why = match step().await? {
                Try::Done(answer) => return Ok(answer),
                Try::Again(why) => why,
            };
            match tries.pause(self) {
                Some(pause) if pause.is_zero() => {}
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Err(why),
            }
        }
    }

    /// Like [`Self::run`], for a step whose "again" is not an error of its
    /// own (the buckets still without a leader, who holds a lease): runs
    /// `step` until it is [`Try::Done`] (`Ok(Ok(answer))`), an error
    /// (`Err`), or out of tries or time (`Ok(Err(` the last
    /// [`Try::Again`]'s reason `))`), which the caller turns into what it
    /// means there.
    pub(crate) async fn run_to_end<T, A, E, F, Fut>(&self, mut step: F) -> Result<Result<T, A>, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Try<T, A>, E>>,
    {
        let mut tries = Tries::start();
        loop {
            let why = match step().await? {
                Try::Done(answer) => return Ok(Ok(answer)),
                Try::Again(why) => why,
            };
            match tries.pause(self) {
                Some(pause) if pause.is_zero() => {}
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Ok(Err(why)),
            }
        }
    }
}

/// Where a run of tries is: since when, and which try is next.
struct Tries {
    started: tokio::time::Instant,
    try_number: u32,
}

impl Tries {
    fn start() -> Self {
        Self {
            started: tokio::time::Instant::now(),
            try_number: 1,
        }
    }

    /// After a try that asked for another: the pause before the next, or
    /// `None` when `policy` allows no more tries (or no more time).
    fn pause(&mut self, policy: &Retry) -> Option<Duration> {
        if self.try_number >= policy.tries.max(1) {
            return None;
        }
        self.try_number += 1;
        let pause = policy.jittered(policy.pause_before(self.try_number));
        if let Some(within) = policy.within {
            if self.started.elapsed().saturating_add(pause) >= within {
                return None;
            }
        }
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// A step that asks again `again` times, then finishes; counts its tries.
    async fn run_counting(policy: Retry, again: u32) -> (Result<u32, String>, u32) {
        let tries = AtomicU32::new(0);
        let answer = policy
            .run(|| async {
                let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(if n > again {
                    Try::Done(n)
                } else {
                    Try::Again(format!("try {n} lost"))
                })
            })
            .await;
        (answer, tries.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn tries_are_bounded_and_the_last_reason_is_kept() {
        assert_eq!(run_counting(Retry::immediately(3), 2).await, (Ok(3), 3));
        assert_eq!(
            run_counting(Retry::immediately(3), 3).await,
            (Err("try 3 lost".to_string()), 3)
        );
        // Zero tries is one try.
        assert_eq!(
            run_counting(Retry::immediately(0), 5).await,
            (Err("try 1 lost".to_string()), 1)
        );
    }

    #[tokio::test]
    async fn an_error_ends_the_tries_at_once() {
        let tries = AtomicU32::new(0);
        let answer: Result<(), &str> = Retry::immediately(5)
            .run(|| async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err("broken")
            })
            .await;
        assert_eq!(answer, Err("broken"));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn pauses_double_up_to_the_longest() {
        let policy = Retry::growing(10, Duration::from_millis(20), Duration::from_millis(100));
        let pauses: Vec<u128> = (2..=6)
            .map(|n| policy.pause_before(n).as_millis())
            .collect();
        assert_eq!(pauses, [20, 40, 80, 100, 100]);
        // Far out, no overflow.
        assert_eq!(policy.pause_before(u32::MAX), Duration::from_millis(100));
        // Jitter stays within its bound.
        let jittered = policy.with_jitter(Duration::from_millis(5));
        for _ in 0..100 {
            let pause = jittered.jittered(Duration::from_millis(20));
            assert!(pause >= Duration::from_millis(20) && pause < Duration::from_millis(25));
        }
    }

    /// A step whose "again" is no error: out of tries hands back its last
    /// reason, apart from an error, which ends the tries at once.
    #[tokio::test]
    async fn running_to_the_end_keeps_again_apart_from_errors() {
        let tries = AtomicU32::new(0);
        let out_of_tries: Result<Result<(), Vec<u32>>, String> = Retry::immediately(3)
            .run_to_end(|| async {
                let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(Try::Again(vec![n]))
            })
            .await;
        assert_eq!(out_of_tries, Ok(Err(vec![3])));
        let done: Result<Result<u32, Vec<u32>>, String> = Retry::immediately(3)
            .run_to_end(|| async { Ok(Try::Done(7)) })
            .await;
        assert_eq!(done, Ok(Ok(7)));
        tries.store(0, Ordering::SeqCst);
        let failed: Result<Result<(), Vec<u32>>, String> = Retry::immediately(3)
            .run_to_end(|| async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err("broken".to_string())
            })
            .await;
        assert_eq!(failed, Err("broken".to_string()));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn no_try_starts_past_the_time_allowed() {
        // Each pause is at least 10 ms, so within 35 ms at most the tries
        // at 0, 10, 20 and 30 ms start: never the 100 tries allowed.
        let policy = Retry::growing(100, Duration::from_millis(10), Duration::from_millis(10))
            .within(Duration::from_millis(35));
        let (answer, tries) = run_counting(policy, 100).await;
        assert!(answer.is_err());
        assert!((1..=4).contains(&tries), "{tries} tries");
    }
}
