//! Notices: what a statement did that its user should know of though it
//! succeeded (a mode turned off with rows left in the store, a table moved to
//! another store).
//!
//! A notice belongs to the statement that caused it. The work of a statement
//! runs inside [`collecting`], which returns its notices with its result:
//! [`LakeStreamContext::sql`](crate::LakeStreamContext::sql) does this for
//! each statement, and an app that calls the catalog API
//! ([`LakeStreamCatalog`](crate::LakeStreamCatalog)) directly wraps its call
//! the same way. A notice raised outside any [`collecting`] waits on its
//! catalog for [`LakeStreamCatalog::take_notices`](crate::LakeStreamCatalog::take_notices).

use std::cell::RefCell;
use std::future::Future;

tokio::task_local! {
    static NOTICES: RefCell<Vec<String>>;
}

/// Runs `work`, and returns its output with the notices it raised, in order.
/// Work that `work` spawns onto other tasks is not part of it.
pub async fn collecting<F: Future>(work: F) -> (F::Output, Vec<String>) {
    let (output, notices) = NOTICES
        .scope(RefCell::new(Vec::new()), async move {
            let output = work.await;
            let notices = NOTICES.with(|n| std::mem::take(&mut *n.borrow_mut()));
            (output, notices)
        })
        .await;
    (output, notices)
}

/// Hands `text` to the [`collecting`] running this task; gives it back when
/// there is none.
pub(crate) fn raise(text: String) -> Result<(), String> {
    if NOTICES.try_with(|_| ()).is_err() {
        return Err(text);
    }
    NOTICES.with(|notices| notices.borrow_mut().push(text));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_statement_gets_its_own_notices_only() {
        let (a, b) = tokio::join!(
            collecting(async {
                raise("a1".to_string()).unwrap();
                tokio::task::yield_now().await;
                raise("a2".to_string()).unwrap();
                1
            }),
            collecting(async {
                tokio::task::yield_now().await;
                raise("b1".to_string()).unwrap();
                2
            }),
        );
        assert_eq!(a, (1, vec!["a1".to_string(), "a2".to_string()]));
        assert_eq!(b, (2, vec!["b1".to_string()]));
        assert_eq!(raise("outside".to_string()), Err("outside".to_string()));
    }
}
