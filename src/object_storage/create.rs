//! Create-if-absent on an object store: the one conditional put that makes
//! an object only if its name is free, and the one probe that a store
//! honours it ([`probe_create_if_absent`]). Log segments, part lists and
//! leases (see [`super::lease`]) are made with it; the probe runs before
//! them, and before paimon's create-only files on S3 (`super::commit`), on
//! whatever client makes them ([`Conditional`]).
//!
//! Invariants it keeps:
//!
//! - **A name is taken once.** A create that finds the name taken reads
//!   what is there: its own bytes (a put retried after its answer was lost;
//!   callers' bytes carry an id of their own) count as created, others as
//!   taken. A refusal with nothing under the name (S3 answers a create
//!   racing another with 409 even when the other does not land) is asked
//!   again, a few times, never taken for a taken name.
//! - **Refused, never used unsafely.** A store that ignores the condition,
//!   or does not support it, is found by [`probe_create_if_absent`] before
//!   anything is written: a second create of one object must be refused as
//!   existing (no other answer counts) and leave the first's bytes. A probe
//!   that fails otherwise leaves the question open, for its caller to ask
//!   again.
//! - A create that failed may still have landed (a timeout): its error says
//!   the outcome is not known.

use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};

use crate::retry::{Retry, Try};

/// Whether a create made the object or found its name taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Created {
    Yes,
    AlreadyExists,
}

/// How [`create_if_absent`] asks again when an object store refuses a
/// create as existing but has no object under the name: another client's
/// put of that name still in flight (a server that refuses a create racing
/// an upload, as versitygw does, before the upload shows), so with pauses
/// that give it time to land: eight tries, pausing 10 ms doubling to 500 ms
/// (about 1.1 s in all).
const CREATE_AGAIN: Retry =
    Retry::growing(8, Duration::from_millis(10), Duration::from_millis(500));

/// Why a create failed; the object may have landed all the same.
#[derive(Debug)]
pub(crate) enum CreateFailed {
    /// The put failed (or was refused as existing each time, with nothing
    /// found under the name).
    Write(object_store::Error),
    /// Reading the name back after a refusal failed.
    Read(object_store::Error),
}

impl CreateFailed {
    /// The object store's error, whichever step failed.
    #[cfg(test)]
    pub(crate) fn into_source(self) -> object_store::Error {
        match self {
            CreateFailed::Write(e) | CreateFailed::Read(e) => e,
        }
    }
}

/// Creates `path` with `bytes` if no object has that name (`PutMode::Create`,
/// `If-None-Match: *` on S3).
pub(crate) async fn create_if_absent(
    objects: &dyn ObjectStore,
    path: &Path,
    bytes: Bytes,
) -> Result<Created, CreateFailed> {
    CREATE_AGAIN
        .run(|| {
            let bytes = bytes.clone();
            async move {
                let put = objects
                    .put_opts(
                        path,
                        PutPayload::from(bytes.clone()),
                        PutMode::Create.into(),
                    )
                    .await;
                match put {
                    Ok(_) => Ok(Try::Done(Created::Yes)),
                    Err(object_store::Error::AlreadyExists { .. }) => {
                        match get(objects, path).await {
                            Ok(Some(there)) if there == bytes => Ok(Try::Done(Created::Yes)),
                            Ok(Some(_)) => Ok(Try::Done(Created::AlreadyExists)),
                            Ok(None) => Ok(Try::Again(CreateFailed::Write(
                                object_store::Error::Generic {
                                    store: "local",
                                    source: format!(
                                        "refused {} times as existing, and not found when read",
                                        CREATE_AGAIN.tries
                                    )
                                    .into(),
                                },
                            ))),
                            Err(e) => Err(CreateFailed::Read(e)),
                        }
                    }
                    // A put that failed may still have landed (a timeout).
                    Err(source) => Err(CreateFailed::Write(source)),
                }
            }
        })
        .await
}

/// Reads an object; `None` when there is none.
pub(crate) async fn get(
    objects: &dyn ObjectStore,
    path: &Path,
) -> Result<Option<Bytes>, object_store::Error> {
    match objects.get(path).await {
        Ok(get) => get.bytes().await.map(Some),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a create-if-absent answered.
#[derive(Debug)]
pub(crate) enum CreateAnswer<E> {
    /// The object was created.
    Created,
    /// Refused: an object has the name, the store says (its error).
    Exists(E),
    /// The store does not support the condition.
    NotSupported,
    /// Another error, which leaves the outcome open.
    Failed(E),
}

/// An object store as [`probe_create_if_absent`] asks it, through the
/// client its writes use: an object_store client, or paimon's opendal
/// operator (`super::commit`).
#[async_trait::async_trait]
pub(crate) trait Conditional: Send + Sync {
    /// What goes wrong.
    type Error: Send;
    /// Creates `path` with `bytes` only if no object has that name.
    async fn create_new(&self, path: &str, bytes: &'static [u8]) -> CreateAnswer<Self::Error>;
    /// An object's bytes; `None` when there is none.
    async fn read(&self, path: &str) -> Result<Option<Bytes>, Self::Error>;
    /// Deletes an object, as far as it can.
    async fn remove(&self, path: &str);
}

/// An object_store client as the probe asks it.
struct Stored<'a>(&'a dyn ObjectStore);

#[async_trait::async_trait]
impl Conditional for Stored<'_> {
    type Error = object_store::Error;

    async fn create_new(&self, path: &str, bytes: &'static [u8]) -> CreateAnswer<Self::Error> {
        let put = self
            .0
            .put_opts(
                &Path::from(path),
                PutPayload::from_static(bytes),
                PutMode::Create.into(),
            )
            .await;
        match put {
            Ok(_) => CreateAnswer::Created,
            Err(e @ object_store::Error::AlreadyExists { .. }) => CreateAnswer::Exists(e),
            Err(object_store::Error::NotImplemented { .. }) => CreateAnswer::NotSupported,
            Err(e) => CreateAnswer::Failed(e),
        }
    }

    async fn read(&self, path: &str) -> Result<Option<Bytes>, Self::Error> {
        get(self.0, &Path::from(path)).await
    }

    async fn remove(&self, path: &str) {
        let _ = self.0.delete(&Path::from(path)).await;
    }
}

/// Why a store did not pass [`probe_create_if_absent`].
#[derive(Debug)]
pub(crate) enum ProbeFailed<E = object_store::Error> {
    /// The store does not honour create-if-absent: what it did.
    Refused(String),
    /// A create failed with an error that leaves the question open.
    Failed(E),
    /// Reading the probe object back failed.
    Read(E),
}

/// Checks that `objects` honours create-if-absent: a second create of one
/// object is refused as existing, and leaves the first's bytes. Writes and
/// then deletes the object `<prefix><uuid>` (`_probe/create-if-absent-` at
/// a store root; beside a table, so that users who may write only there
/// are asked nothing more).
pub(crate) async fn probe_create_if_absent(
    objects: &dyn ObjectStore,
    prefix: &str,
) -> Result<(), ProbeFailed> {
    probe(&Stored(objects), prefix).await
}

/// [`probe_create_if_absent`] through any client ([`Conditional`]).
pub(crate) async fn probe<C: Conditional>(
    objects: &C,
    prefix: &str,
) -> Result<(), ProbeFailed<C::Error>> {
    let path = format!("{prefix}{}", uuid::Uuid::new_v4());
    let unsupported = || ProbeFailed::Refused("does not support create-if-absent".to_string());
    let outcome = async {
        match objects.create_new(&path, b"first").await {
            CreateAnswer::Created => {}
            CreateAnswer::NotSupported => return Err(unsupported()),
            // Nothing was there (a fresh name): a refusal, or any other
            // error, leaves the question open.
            CreateAnswer::Exists(e) | CreateAnswer::Failed(e) => {
                return Err(ProbeFailed::Failed(e))
            }
        }
        match objects.create_new(&path, b"second").await {
            CreateAnswer::Exists(_) => {}
            CreateAnswer::Created => {
                return Err(ProbeFailed::Refused(
                    "ignored a create-if-absent: a second create of one object replaced the \
                     first"
                        .to_string(),
                ))
            }
            CreateAnswer::NotSupported => return Err(unsupported()),
            CreateAnswer::Failed(e) => return Err(ProbeFailed::Failed(e)),
        }
        match objects.read(&path).await.map_err(ProbeFailed::Read)? {
            Some(bytes) if bytes.as_ref() == b"first" => Ok(()),
            _ => Err(ProbeFailed::Refused(
                "answered a create-if-absent as refused but replaced the object".to_string(),
            )),
        }
    }
    .await;
    objects.remove(&path).await;
    outcome
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    /// A create refused as existing while nothing is under the name
    /// (another client's put of it still in flight, on a loaded server) is
    /// asked again, with pauses, more than the five times at once it used
    /// to be: the schema lease's takes failed so under load.
    #[tokio::test]
    async fn a_create_refused_while_nothing_is_there_is_asked_again() {
        use crate::testing::faulty::{ErrorKind, Fault, Faults, FaultyStore, Op, Rule};
        let faults = Faults::new();
        let objects = FaultyStore::new(std::sync::Arc::new(InMemory::new()), faults.clone());
        faults.add(Rule::new(Op::Put, Fault::Fail(ErrorKind::Conflict)).times(6));
        let path = Path::from("d/lease/tier-00000000000000000001");
        let created = create_if_absent(&objects, &path, Bytes::from_static(b"x")).await;
        assert!(matches!(created, Ok(Created::Yes)), "{created:?}");
        assert_eq!(
            get(&objects, &path).await.expect("a read"),
            Some(Bytes::from_static(b"x"))
        );
    }

    /// A name taken by the very bytes being created (a put retried after its
    /// answer was lost) counts as created; by other bytes, as taken.
    #[tokio::test]
    async fn a_name_taken_by_the_same_bytes_counts_as_created() {
        let objects = InMemory::new();
        let path = Path::from("a/b");
        let bytes = Bytes::from_static(b"mine");
        let first = create_if_absent(&objects, &path, bytes.clone()).await;
        assert!(matches!(first, Ok(Created::Yes)), "{first:?}");
        let again = create_if_absent(&objects, &path, bytes).await;
        assert!(matches!(again, Ok(Created::Yes)), "{again:?}");
        let other = create_if_absent(&objects, &path, Bytes::from_static(b"other")).await;
        assert!(matches!(other, Ok(Created::AlreadyExists)), "{other:?}");
    }

    /// An object store that honours create-if-absent passes the probe, and
    /// the probe leaves nothing behind.
    #[tokio::test]
    async fn a_store_that_honours_the_condition_passes_the_probe() {
        use futures::TryStreamExt;
        let objects = InMemory::new();
        let probed = probe_create_if_absent(&objects, "_probe/x-").await;
        assert!(probed.is_ok(), "{probed:?}");
        let left: Vec<_> = objects.list(None).try_collect().await.expect("list");
        assert!(left.is_empty(), "{left:?}");
    }
}
