//! The store's root: an object store (local disk, `memory://`, ...) and, for
//! local disk, the directory behind it (for fsync and the tiering lock).
//!
//! Roots are shared per process: every catalog and context that names the
//! same root sees the same caches, writer queues and notifications.
//!
//! New objects are durable and whole before they are acknowledged: on local
//! disk [`Root::put_new`] writes a temporary file, fsyncs it, links it under
//! its name (which fails if the name is taken) and fsyncs the directory, and
//! every directory it creates is fsynced into its parent. Other object
//! stores make a put whole and durable when it returns.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};
use url::Url;

use super::error::LocalStoreError;
use super::LOCAL;
use crate::error::{Error, Result};
use crate::object_storage::create::{CreateFailed, Created, ProbeFailed};
use crate::object_storage::durable::{
    create_dirs_durably, durable_create, durable_replace, remove_temporaries,
};
use crate::object_storage::{self, S3Options};

/// A store root shared by everything in the process that names it.
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) url: String,
    pub(crate) objects: Arc<dyn ObjectStore>,
    /// The directory behind `objects` when it is local disk.
    pub(crate) local_dir: Option<PathBuf>,
    /// This root's number in the process: what its tables' states are
    /// kept by ([`super::table::TableState::of`]).
    pub(crate) id: u64,
    /// Set once this process has seen the object store honour
    /// create-if-absent ([`Root::check_create_if_absent`]).
    create_if_absent: tokio::sync::OnceCell<()>,
    /// Set once this process has seen the object store honour a
    /// conditional replace ([`Root::check_conditional_replace`]).
    conditional_replace: tokio::sync::OnceCell<()>,
    /// How long this process's tiering leases last unless renewed
    /// (`local.lease-ttl`); each lease carries its own expiry, so
    /// processes with other settings wait for it correctly.
    pub(super) lease_ttl: Duration,
}

/// How long a tiering lease lasts unless renewed (`local.lease-ttl`'s
/// default). Long enough that a holder renewing every third of it rides
/// out a slow request or two; short enough that a tierer that died is
/// waited out within half a minute.
pub(super) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// A number no other root of this process has.
fn next_root_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn roots() -> &'static Mutex<HashMap<String, Arc<Root>>> {
    static ROOTS: OnceLock<Mutex<HashMap<String, Arc<Root>>>> = OnceLock::new();
    ROOTS.get_or_init(Default::default)
}

/// Serves the store root at `url` (a URL whose scheme the store does not
/// know, such as `faulty://name`) from `objects` in this process: a way to
/// run the store over a wrapped object store (fault injection, metrics).
/// Catalogs opened afterwards with `local.path = '<url>'` use it.
pub fn register_object_store(url: &str, objects: Arc<dyn ObjectStore>) -> Result<()> {
    register_object_store_with_lease(url, objects, DEFAULT_LEASE_TTL)
}

/// [`register_object_store`], with the length of this root's tiering
/// leases: they are used where `url` is an `s3://` one (an S3 client
/// wrapped, or a stand-in for one); `local.lease-ttl` does not reach a
/// registered root.
pub fn register_object_store_with_lease(
    url: &str,
    objects: Arc<dyn ObjectStore>,
    lease_ttl: Duration,
) -> Result<()> {
    let url = to_url(url)?;
    let root = Arc::new(Root {
        url: url.to_string(),
        objects,
        local_dir: None,
        id: next_root_id(),
        create_if_absent: tokio::sync::OnceCell::new(),
        conditional_replace: tokio::sync::OnceCell::new(),
        lease_ttl,
    });
    roots()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(url.to_string(), root);
    Ok(())
}

/// Whether `replace_if` replaced the object or found another version there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replaced {
    Yes,
    Changed,
}

/// Why `put_new` failed: before anything could land, or after (or while)
/// the object may have landed.
#[derive(Debug)]
pub(crate) enum PutFailed {
    NotApplied(Error),
    Unknown(Error),
}

impl PutFailed {
    /// The error, whichever the outcome.
    pub(crate) fn into_error(self) -> Error {
        match self {
            PutFailed::NotApplied(e) | PutFailed::Unknown(e) => e,
        }
    }
}

impl Root {
    /// The root at `location`: a URL (`file:///...`, `memory://name`,
    /// `s3://bucket/path`, reached with the options `s3`) or a path.
    /// `lease_ttl` is how long its tiering leases last on S3.
    pub(crate) fn open(location: &str, s3: &S3Options, lease_ttl: Duration) -> Result<Arc<Root>> {
        let url = to_url(location)?;
        let mut roots = roots().lock().unwrap_or_else(|e| e.into_inner());
        // One root per location and, on S3, per set of options: two
        // catalogs with other keys, endpoints or lease lengths share
        // nothing (their tiering meets at the lease, as processes do).
        let key = if object_storage::is_s3(url.as_str()) {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            s3.hash(&mut hasher);
            lease_ttl.hash(&mut hasher);
            format!("{url}#{:016x}", hasher.finish())
        } else {
            url.to_string()
        };
        // A root registered under its URL (register_object_store) first.
        if let Some(root) = roots.get(url.as_str()).or_else(|| roots.get(&key)) {
            return Ok(Arc::clone(root));
        }
        let (objects, local_dir): (Arc<dyn ObjectStore>, Option<PathBuf>) = match url.scheme() {
            "file" => {
                let dir = url.to_file_path().map_err(|()| Error::InvalidOption {
                    key: "local.path".to_string(),
                    reason: format!("'{url}' is not a local directory"),
                })?;
                create_dirs_durably(None, &dir).map_err(|e| Error::StoreUnavailable {
                    store: LOCAL.to_string(),
                    reason: format!("cannot create the store directory '{}': {e}", dir.display()),
                })?;
                // Directories stay when their last file goes: a log
                // directory that came and went would need fsyncing each time.
                let objects =
                    LocalFileSystem::new_with_prefix(&dir).map_err(LocalStoreError::from)?;
                (Arc::new(objects), Some(dir))
            }
            "memory" => (Arc::new(InMemory::new()), None),
            "s3" | "s3a" => {
                let invalid = |reason: String| Error::InvalidOption {
                    key: "local.path".to_string(),
                    reason,
                };
                let (bucket, prefix) = object_storage::split(url.as_str()).map_err(invalid)?;
                let objects = s3.object_store(&bucket).map_err(|e| {
                    invalid(format!("cannot reach '{}' on S3: {e}", display_url(&url)))
                })?;
                let prefix = Path::from(prefix.trim_end_matches('/'));
                if prefix.as_ref().is_empty() {
                    (Arc::new(objects), None)
                } else {
                    (
                        Arc::new(object_store::prefix::PrefixStore::new(objects, prefix)),
                        None,
                    )
                }
            }
            other => {
                let (objects, prefix) =
                    object_store::parse_url(&url).map_err(|e| Error::InvalidOption {
                        key: "local.path".to_string(),
                        reason: format!("cannot open '{url}' ({other}): {e}"),
                    })?;
                if !prefix.as_ref().is_empty() {
                    let objects = object_store::prefix::PrefixStore::new(objects, prefix);
                    (Arc::new(objects), None)
                } else {
                    (Arc::from(objects), None)
                }
            }
        };
        let root = Arc::new(Root {
            url: url.to_string(),
            objects,
            local_dir,
            id: next_root_id(),
            create_if_absent: tokio::sync::OnceCell::new(),
            conditional_replace: tokio::sync::OnceCell::new(),
            lease_ttl,
        });
        roots.insert(key, Arc::clone(&root));
        Ok(root)
    }

    /// Checks, once per process, that the object store honours
    /// create-if-absent (a put with `If-None-Match: *` on S3): everything
    /// the store does across processes rests on it (two writers never take
    /// one log position, a deleted position is never taken again). A
    /// server that ignores the condition, or refuses it, is refused here,
    /// before anything is written, never used unsafely. Local disk creates
    /// through hard links and needs no check.
    pub(crate) async fn check_create_if_absent(&self) -> Result<()> {
        if self.local_dir.is_some() {
            return Ok(());
        }
        self.create_if_absent
            .get_or_try_init(|| self.probe_create_if_absent())
            .await
            .map(|_| ())
    }

    async fn probe_create_if_absent(&self) -> Result<()> {
        object_storage::create::probe_create_if_absent(
            self.objects.as_ref(),
            "_probe/create-if-absent-",
        )
        .await
        .map_err(|failed| {
            match failed {
                ProbeFailed::Refused(what) => LocalStoreError::NoCreateIfAbsent {
                    root: self.display(),
                    what,
                },
                ProbeFailed::Failed(source) => LocalStoreError::Probe {
                    root: self.display(),
                    source,
                },
                ProbeFailed::Read(e) => LocalStoreError::from(e),
            }
            .into()
        })
    }

    /// Checks, once per process, that the object store honours a
    /// conditional replace (a put with `If-Match` on S3): a put naming
    /// another version than the one there is refused, one naming it is
    /// let through. Replacing a table's `table.json` needs it
    /// ([`Self::replace_if`]), so it is asked only then, not by every
    /// write. Local disk replaces under a file lock and needs no check.
    pub(crate) async fn check_conditional_replace(&self) -> Result<()> {
        if self.local_dir.is_some() {
            return Ok(());
        }
        self.conditional_replace
            .get_or_try_init(|| self.probe_conditional_replace())
            .await
            .map(|_| ())
    }

    async fn probe_conditional_replace(&self) -> Result<()> {
        let path = Path::from(format!("_probe/replace-if-{}", uuid::Uuid::new_v4()));
        let refused = |what: &str| -> Error {
            LocalStoreError::NoConditionalReplace {
                root: self.display(),
                what: what.to_string(),
            }
            .into()
        };
        let replace = |bytes: &'static [u8], version: UpdateVersion| {
            self.objects.put_opts(
                &path,
                PutPayload::from_static(bytes),
                PutMode::Update(version).into(),
            )
        };
        // An error other than the answers below leaves the question open.
        let failed = |e: object_store::Error| match e {
            object_store::Error::NotImplemented { .. } => {
                refused("does not support a conditional replace ('If-Match')")
            }
            source => LocalStoreError::Probe {
                root: self.display(),
                source,
            }
            .into(),
        };
        let outcome = async {
            self.objects
                .put(&path, PutPayload::from_static(b"first"))
                .await
                .map_err(failed)?;
            let Some((_, version)) = self.get_versioned(&path).await? else {
                return Err(refused("lost an object just put"));
            };
            // Nothing for a replace to name: it could only be refused, or
            // carried out over whatever is there.
            if version.e_tag.is_none() && version.version.is_none() {
                return Err(refused(
                    "answers a read without the object's version (no 'ETag'), which a \
                     conditional replace ('If-Match') names",
                ));
            }
            let stale = UpdateVersion {
                e_tag: Some("\"not-the-version-there\"".to_string()),
                version: None,
            };
            match replace(b"second", stale).await {
                Err(object_store::Error::Precondition { .. }) => {}
                Ok(_) => {
                    return Err(refused(
                        "ignored a conditional replace: a put naming another version \
                         ('If-Match') replaced the object",
                    ))
                }
                Err(e) => return Err(failed(e)),
            }
            match replace(b"third", version).await {
                Ok(_) => {}
                Err(object_store::Error::Precondition { .. }) => {
                    return Err(refused(
                        "refused a conditional replace ('If-Match') naming the version there",
                    ))
                }
                Err(e) => return Err(failed(e)),
            }
            match self.get(&path).await? {
                Some(bytes) if bytes.as_ref() == b"third" => Ok(()),
                _ => Err(refused(
                    "answered a conditional replace ('If-Match') as done but did not replace \
                     the object",
                )),
            }
        }
        .await;
        let _ = self.delete(&path).await;
        outcome
    }

    /// The root's URL, without credentials.
    fn display(&self) -> String {
        Url::parse(&self.url).map_or_else(|_| self.url.clone(), |u| display_url(&u))
    }

    /// The local file behind an object, when the root is local disk.
    pub(crate) fn local_file(&self, path: &Path) -> Option<PathBuf> {
        let dir = self.local_dir.as_ref()?;
        let mut file = dir.clone();
        for part in path.parts() {
            file.push(part.as_ref());
        }
        Some(file)
    }

    /// Creates `path` with `bytes` if no object has that name, durably and
    /// whole: readers never see a part-written object under the name. A
    /// name taken by these very bytes (an object store retried our put after
    /// losing its answer) counts as created: the bytes carry a write id.
    pub(crate) async fn put_new(
        &self,
        path: &Path,
        bytes: Bytes,
    ) -> std::result::Result<Created, PutFailed> {
        match self.local_file(path) {
            Some(file) => {
                let dir = self.local_dir.clone();
                tokio::task::spawn_blocking(move || durable_create(dir.as_deref(), &file, &bytes))
                    .await
                    .map_err(|source| {
                        PutFailed::Unknown(
                            LocalStoreError::Blocking {
                                what: format!("write '{path}'"),
                                source,
                            }
                            .into(),
                        )
                    })?
                    .map_err(|(landed, source)| {
                        let error = LocalStoreError::WriteFile {
                            path: path.clone(),
                            source,
                        }
                        .into();
                        if landed {
                            PutFailed::Unknown(error)
                        } else {
                            PutFailed::NotApplied(error)
                        }
                    })
            }
            None => {
                self.check_create_if_absent()
                    .await
                    .map_err(PutFailed::NotApplied)?;
                object_storage::create::create_if_absent(self.objects.as_ref(), path, bytes)
                    .await
                    .map_err(|failed| {
                        PutFailed::Unknown(match failed {
                            CreateFailed::Write(source) => LocalStoreError::WriteObject {
                                path: path.clone(),
                                source,
                            }
                            .into(),
                            CreateFailed::Read(e) => LocalStoreError::from(e).into(),
                        })
                    })
            }
        }
    }

    /// Writes `path` with `bytes`, replacing what is there, durably and
    /// atomically: a reader sees the old bytes or the new, whole.
    pub(crate) async fn put_replace(&self, path: &Path, bytes: Bytes) -> Result<()> {
        match self.local_file(path) {
            Some(file) => {
                let dir = self.local_dir.clone();
                tokio::task::spawn_blocking(move || durable_replace(dir.as_deref(), &file, &bytes))
                    .await
                    .map_err(|source| LocalStoreError::Blocking {
                        what: format!("write '{path}'"),
                        source,
                    })?
                    .map_err(|source| {
                        LocalStoreError::WriteFile {
                            path: path.clone(),
                            source,
                        }
                        .into()
                    })
            }
            None => self
                .objects
                .put(path, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|source| {
                    LocalStoreError::WriteObject {
                        path: path.clone(),
                        source,
                    }
                    .into()
                }),
        }
    }

    /// Replaces `path` with `bytes` only if it is still the version
    /// `expected` (read with [`Self::get_versioned`]; `None`: still absent),
    /// durably and atomically. On local disk the caller's file lock is
    /// what keeps other writers out, and this is [`Self::put_replace`]. A
    /// put whose answer was lost and that landed anyway counts as done:
    /// the bytes are ours (they carry an id of their own).
    pub(crate) async fn replace_if(
        &self,
        path: &Path,
        bytes: Bytes,
        expected: Option<UpdateVersion>,
    ) -> Result<Replaced> {
        if self.local_file(path).is_some() {
            self.put_replace(path, bytes).await?;
            return Ok(Replaced::Yes);
        }
        let mode = match expected {
            None => PutMode::Create,
            Some(version) => PutMode::Update(version),
        };
        let put = self
            .objects
            .put_opts(path, PutPayload::from(bytes.clone()), mode.into())
            .await;
        match put {
            Ok(_) => Ok(Replaced::Yes),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => match self.get(path).await? {
                Some(there) if there == bytes => Ok(Replaced::Yes),
                _ => Ok(Replaced::Changed),
            },
            Err(source) => Err(LocalStoreError::WriteObject {
                path: path.clone(),
                source,
            }
            .into()),
        }
    }

    /// Reads an object with the version a conditional replace names
    /// ([`Self::replace_if`]); `None` when there is none.
    pub(crate) async fn get_versioned(
        &self,
        path: &Path,
    ) -> Result<Option<(Bytes, UpdateVersion)>> {
        match self.objects.get(path).await {
            Ok(get) => {
                let version = UpdateVersion {
                    e_tag: get.meta.e_tag.clone(),
                    version: get.meta.version.clone(),
                };
                let bytes = get.bytes().await.map_err(LocalStoreError::from)?;
                Ok(Some((bytes, version)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(LocalStoreError::from(e).into()),
        }
    }

    /// Reads an object; `None` when there is none.
    pub(crate) async fn get(&self, path: &Path) -> Result<Option<Bytes>> {
        object_storage::create::get(self.objects.as_ref(), path)
            .await
            .map_err(|e| LocalStoreError::from(e).into())
    }

    /// The first `len` bytes of an object (fewer if it is shorter); `None`
    /// when there is none.
    pub(crate) async fn get_head(&self, path: &Path, len: u64) -> Result<Option<Bytes>> {
        match self.objects.get_range(path, 0..len).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            // Shorter than `len`: read it whole.
            Err(_) => self.get(path).await,
        }
    }

    /// Removes the temporary files that writes which died left under `dir`
    /// on local disk, last modified before `before` (see
    /// [`remove_temporaries`]); what it removed, as (files, bytes). Other
    /// object stores make a put whole without one: nothing to remove.
    pub(crate) async fn remove_temporaries(
        &self,
        dir: &Path,
        before: std::time::SystemTime,
    ) -> Result<(u64, u64)> {
        let Some(local) = self.local_file(dir) else {
            return Ok((0, 0));
        };
        tokio::task::spawn_blocking(move || remove_temporaries(&local, before))
            .await
            .map_err(|source| LocalStoreError::Blocking {
                what: format!("remove the temporary files under '{dir}'"),
                source,
            })?
            .map_err(|source| {
                LocalStoreError::WriteFile {
                    path: dir.clone(),
                    source,
                }
                .into()
            })
    }

    /// Removes an empty directory on local disk (object stores have none);
    /// anything in the way leaves it.
    pub(crate) async fn delete_dir(&self, path: &Path) {
        if let Some(dir) = self.local_file(path) {
            let _ = tokio::fs::remove_dir(dir).await;
        }
    }

    /// Deletes objects, many per request where the store can (S3 deletes
    /// up to 1000 in one); missing ones are not an error.
    pub(crate) async fn delete_all(&self, paths: Vec<Path>) -> Result<()> {
        use futures::StreamExt;
        let mut deleted = self
            .objects
            .delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed());
        while let Some(result) = deleted.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(LocalStoreError::from(e).into()),
            }
        }
        Ok(())
    }

    /// Deletes an object; a missing one is not an error.
    pub(crate) async fn delete(&self, path: &Path) -> Result<()> {
        match self.objects.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(LocalStoreError::from(e).into()),
        }
    }
}

/// `url` without user, password, query or fragment: what may print.
pub(crate) fn display_url(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

pub(crate) fn to_url(location: &str) -> Result<Url> {
    if location.contains("://") {
        return Url::parse(location).map_err(|e| Error::InvalidOption {
            key: "local.path".to_string(),
            reason: format!("'{location}' is not a URL: {e}"),
        });
    }
    let path = std::path::Path::new(location);
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| LocalStoreError::CurrentDir {
                location: location.to_string(),
                source,
            })?
            .join(path)
    };
    Url::from_directory_path(&absolute).map_err(|()| Error::InvalidOption {
        key: "local.path".to_string(),
        reason: format!("'{location}' is not a usable directory path"),
    })
}

/// Roots for the store's unit tests.
#[cfg(test)]
pub(crate) mod test_roots {
    use super::*;
    use crate::testing::faulty::{Faults, FaultyStore};

    /// A root in `dir` on local disk.
    pub(crate) fn in_dir(dir: &std::path::Path) -> Arc<Root> {
        Root::open(
            &dir.display().to_string(),
            &S3Options::default(),
            Duration::from_secs(30),
        )
        .expect("a root on local disk")
    }

    /// A root at `url` (`faulty://<name>`, a name no other test uses) on
    /// objects in memory whose faults the test adds to the returned
    /// [`Faults`].
    pub(crate) fn faulty(url: &str) -> (Arc<Root>, Faults) {
        let faults = Faults::new();
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        register_object_store(url, Arc::new(FaultyStore::new(inner, faults.clone())))
            .expect("register the faulty store");
        let root = Root::open(url, &S3Options::default(), Duration::from_secs(30))
            .expect("a root on the faulty store");
        (root, faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A create refused as existing (S3's 409 on a create racing another)
    /// while nothing is under the name is asked again, not taken for a
    /// taken name: a log position skipped so would stop tiering for good.
    #[tokio::test]
    async fn a_create_refused_but_not_there_is_made() {
        use crate::testing::faulty::{ErrorKind, Fault, Op, Rule};
        let (root, faults) = test_roots::faulty("faulty://root-create-conflict");
        let at = Path::from("db/t/log/00000000000000000000.seg");
        faults.add(
            Rule::new(Op::Put, Fault::Fail(ErrorKind::Conflict))
                .path_contains("/log/")
                .times(2),
        );
        let created = root.put_new(&at, Bytes::from_static(b"rows")).await;
        assert!(matches!(created, Ok(Created::Yes)), "{created:?}");
        assert_eq!(
            root.get(&at).await.expect("a read"),
            Some(Bytes::from_static(b"rows"))
        );
        // Taken for real: said so.
        let again = root.put_new(&at, Bytes::from_static(b"other")).await;
        assert!(matches!(again, Ok(Created::AlreadyExists)), "{again:?}");
    }
}
