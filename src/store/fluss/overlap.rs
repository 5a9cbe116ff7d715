//! Which calls of a `t$rt` read run side by side, and which must wait for
//! another: every round trip to the cluster that does not depend on another
//! one's answer is sent together with it, so a read waits for the longest
//! chain of calls rather than for their sum.
//!
//! - A table this process planned a read on before is planned on that
//!   description: the lake snapshot, the table id Fluss's metadata names and
//!   the latest offsets are asked at once, and the read is planned only when
//!   all three name the described table and the offsets are not below what
//!   the lake snapshot tiered (`FlussStore::plan_known`). Otherwise:
//! - Planning describes the table (its id and columns, from the
//!   coordinator) alongside the lake snapshot. The latest offsets are asked
//!   only after both answered: they must come from a log at least as long as
//!   the one the lake snapshot tiered (or a tiering round that finishes in
//!   between would make its offsets look past the log's end), and from the
//!   table the description names, for the buckets it names. A table dropped
//!   and created again after the description is then caught by the check at
//!   run time (the coordinator names another table id); offsets asked before
//!   the description answered could be the old table's, planned under the
//!   new table's id, and a read of them could mix the two or wait forever.
//! - Running a bounded read sends its first fetch alongside the check that the
//!   coordinator still names the table the read was planned on. No row is
//!   handed on before the check passed, and a failed check is the read's
//!   error, whatever the fetch did meanwhile (a fetch from a dropped table may
//!   never answer).

use std::future::Future;
use std::ops::ControlFlow;

use futures::FutureExt;

use crate::error::Result;

/// Runs `describe` alongside `lake`, then `ends` with the description.
/// `describe`'s error comes first: it says whether the table exists at all,
/// which the other calls' errors do not; and it comes at once, ending the
/// other call.
pub(crate) async fn plan_calls<Info, Lake, Ends, E>(
    describe: impl Future<Output = Result<Info>>,
    lake: impl Future<Output = Result<Lake>>,
    ends: impl FnOnce(&Info) -> E,
) -> Result<(Info, Lake, Ends)>
where
    E: Future<Output = Result<Ends>>,
{
    let describe = describe.fuse();
    let lake = lake.fuse();
    futures::pin_mut!(describe, lake);
    let (info, lake) = futures::select_biased! {
        // A failed description ends the read at once: a cluster that refuses
        // the table need not be waited for on the other call.
        info = describe => {
            let info = info?;
            (info, lake.await?)
        }
        done = lake => {
            let info = describe.await?;
            (info, done?)
        }
    };
    let ends = ends(&info).await?;
    Ok((info, lake, ends))
}

/// Runs `work` alongside `check`, and hands back `work`'s result only once
/// `check` passed. `check`'s error wins over `work`'s, and ends `work` where
/// it is.
pub(crate) async fn checked<C, T>(
    check: impl Future<Output = Result<C>>,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let check = async {
        match check.await {
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    };
    match unless(check, work).await {
        ControlFlow::Continue(done) => done,
        ControlFlow::Break(e) => Err(e),
    }
}

/// Runs `work` alongside `check`, and hands back `work`'s output only once
/// `check` let it go on: a `check` that breaks decides, at once, and ends
/// `work` where it is.
pub(crate) async fn unless<B, T>(
    check: impl Future<Output = ControlFlow<B>>,
    work: impl Future<Output = T>,
) -> ControlFlow<B, T> {
    let check = check.fuse();
    let work = work.fuse();
    futures::pin_mut!(check, work);
    futures::select_biased! {
        checked = check => {
            checked?;
            ControlFlow::Continue(work.await)
        }
        done = work => {
            check.await?;
            ControlFlow::Continue(done)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::error::Error;

    fn failure(what: &str) -> Error {
        Error::Internal(what.to_string())
    }

    /// A record of what the calls did, in order.
    #[derive(Clone, Default)]
    struct Events(Arc<Mutex<Vec<&'static str>>>);

    impl Events {
        fn push(&self, event: &'static str) {
            self.0.lock().expect("events").push(event);
        }

        fn list(&self) -> Vec<&'static str> {
            self.0.lock().expect("events").clone()
        }
    }

    #[tokio::test]
    async fn the_description_and_the_lake_snapshot_are_asked_together() {
        // Each of the two answers only once the other was asked: run one
        // after the other, they never answer.
        let (lake_asked, lake_seen) = tokio::sync::oneshot::channel::<()>();
        let (info_asked, info_seen) = tokio::sync::oneshot::channel::<()>();
        let describe = async move {
            let _ = info_asked.send(());
            lake_seen.await.map_err(|_| failure("lake never asked"))?;
            Ok("info")
        };
        let lake = async move {
            let _ = lake_asked.send(());
            info_seen.await.map_err(|_| failure("info never asked"))?;
            Ok("lake")
        };
        let planned = tokio::time::timeout(
            Duration::from_secs(5),
            plan_calls(describe, lake, |_| async { Ok("ends") }),
        )
        .await
        .expect("the calls wait for each other: they were not sent together")
        .expect("planned");
        assert_eq!(planned, ("info", "lake", "ends"));
    }

    #[tokio::test]
    async fn the_offsets_are_asked_only_after_the_lake_snapshot_answered() {
        let events = Events::default();
        let (e1, e2, e3) = (events.clone(), events.clone(), events.clone());
        let describe = async move {
            e1.push("describe");
            Ok(())
        };
        let lake = async move {
            e2.push("lake asked");
            // The lake snapshot answers late: everything else may run first.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            e2.push("lake answered");
            Ok(())
        };
        let ends = move |_: &()| async move {
            e3.push("ends asked");
            Ok(())
        };
        plan_calls(describe, lake, ends).await.expect("planned");
        let list = events.list();
        let answered = list.iter().position(|e| *e == "lake answered");
        let asked = list.iter().position(|e| *e == "ends asked");
        assert!(
            matches!((answered, asked), (Some(a), Some(b)) if a < b),
            "{list:?}"
        );
    }

    /// The offsets are asked of the table the description named, for its
    /// buckets: never before the description answered, even when the lake
    /// snapshot answers first.
    #[tokio::test]
    async fn the_offsets_are_asked_only_after_the_description_answered() {
        let events = Events::default();
        let (e1, e2, e3) = (events.clone(), events.clone(), events.clone());
        let describe = async move {
            e1.push("describe asked");
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            e1.push("describe answered");
            Ok(4)
        };
        let lake = async move {
            e2.push("lake answered");
            Ok(())
        };
        let ends = move |buckets: &i32| {
            let buckets = *buckets;
            async move {
                e3.push("ends asked");
                Ok(buckets)
            }
        };
        let (_, _, asked_for) = plan_calls(describe, lake, ends).await.expect("planned");
        assert_eq!(
            asked_for, 4,
            "the offsets are asked for the described buckets"
        );
        let list = events.list();
        let answered = list.iter().position(|e| *e == "describe answered");
        let asked = list.iter().position(|e| *e == "ends asked");
        assert!(
            matches!((answered, asked), (Some(a), Some(b)) if a < b),
            "{list:?}"
        );
    }

    #[tokio::test]
    async fn the_description_s_error_comes_first() {
        let describe = async {
            tokio::task::yield_now().await;
            Err::<(), _>(failure("no such table"))
        };
        let lake = async { Err::<(), _>(failure("lake failed")) };
        let error = plan_calls(describe, lake, |_| async { Ok(()) })
            .await
            .expect_err("fails");
        assert!(error.to_string().contains("no such table"), "{error}");
        // Without an error of its own, the chain's error is the answer.
        let error = plan_calls(async { Ok(()) }, async { Ok(()) }, |_| async {
            Err::<(), _>(failure("no offsets"))
        })
        .await
        .expect_err("fails");
        assert!(error.to_string().contains("no offsets"), "{error}");
    }

    #[tokio::test]
    async fn a_failed_description_does_not_wait_for_the_other_calls() {
        let describe = async { Err::<(), _>(failure("no such table")) };
        let error = tokio::time::timeout(
            Duration::from_secs(5),
            plan_calls(
                describe,
                futures::future::pending::<Result<()>>(),
                |_| async { Ok(()) },
            ),
        )
        .await
        .expect("waited for the lake snapshot after the description failed")
        .expect_err("fails");
        assert!(error.to_string().contains("no such table"), "{error}");
    }

    #[tokio::test]
    async fn the_first_fetch_is_sent_before_the_check_answers() {
        // The check answers only once the work started.
        let (started, seen) = tokio::sync::oneshot::channel::<()>();
        let check = async move { seen.await.map_err(|_| failure("work never started")) };
        let work = async move {
            let _ = started.send(());
            Ok(7)
        };
        let done = tokio::time::timeout(Duration::from_secs(5), checked(check, work))
            .await
            .expect("the work waited for the check")
            .expect("checked");
        assert_eq!(done, 7);
    }

    #[tokio::test]
    async fn nothing_is_handed_on_before_the_check_passed() {
        let events = Events::default();
        let (e1, e2) = (events.clone(), events.clone());
        let check = async move {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            e1.push("checked");
            Ok(())
        };
        let work = async move {
            e2.push("fetched");
            Ok(())
        };
        checked(check, work).await.expect("checked");
        events.push("handed on");
        assert_eq!(events.list(), vec!["fetched", "checked", "handed on"]);
    }

    #[tokio::test]
    async fn a_failed_check_is_the_error_even_if_the_work_never_ends() {
        let check = async {
            tokio::task::yield_now().await;
            Err::<(), _>(failure("dropped and created again"))
        };
        let error = tokio::time::timeout(
            Duration::from_secs(5),
            checked(check, futures::future::pending::<Result<()>>()),
        )
        .await
        .expect("waited for work that never ends")
        .expect_err("the check failed");
        assert!(error.to_string().contains("created again"), "{error}");
        // The work failing first does not hide the check's error.
        let check = async {
            tokio::task::yield_now().await;
            Err::<(), _>(failure("dropped and created again"))
        };
        let error = checked(check, async { Err::<(), _>(failure("fetch failed")) })
            .await
            .expect_err("both failed");
        assert!(error.to_string().contains("created again"), "{error}");
    }
}
