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
use paimon::catalog::Identifier;
use url::Url;

use super::error::LocalStoreError;
use super::lease::Lease;
use super::table::TableState;
use super::LOCAL;
use crate::error::{Error, Result};
use crate::object_storage::{self, S3Options};

/// A store root shared by everything in the process that names it.
#[derive(Debug)]
pub(crate) struct Root {
    pub(crate) url: String,
    pub(crate) objects: Arc<dyn ObjectStore>,
    /// The directory behind `objects` when it is local disk.
    pub(crate) local_dir: Option<PathBuf>,
    tables: Mutex<HashMap<Identifier, Arc<TableState>>>,
    /// Set once this process has seen the object store honour
    /// create-if-absent ([`Root::check_create_if_absent`]).
    create_if_absent: tokio::sync::OnceCell<()>,
    /// Set once this process has seen the object store honour a
    /// conditional replace ([`Root::check_conditional_replace`]).
    conditional_replace: tokio::sync::OnceCell<()>,
    /// How long this process's tiering leases last unless renewed
    /// (`local.lease-ttl`); each lease carries its own expiry, so
    /// processes with other settings wait for it correctly.
    lease_ttl: Duration,
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
    register_object_store_with_lease(url, objects, super::DEFAULT_LEASE_TTL)
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
        tables: Mutex::new(HashMap::new()),
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

/// A table's tiering lock across processes, held until dropped.
#[derive(Debug)]
pub(crate) enum TierLock {
    /// Local disk: an OS file lock.
    File { _file: std::fs::File },
    /// S3: a lease held through conditional puts.
    Lease { _lease: Lease },
    /// A root one process uses: its in-process lock is all there is.
    InProcess,
}

/// A held lock file and the files read under it (`None`: absent).
pub(crate) type LockedReads = (std::fs::File, Vec<Option<Bytes>>);

/// Whether `put_new` created the object or found its name taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Created {
    Yes,
    AlreadyExists,
}

/// Whether `replace_if` replaced the object or found another version there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replaced {
    Yes,
    Changed,
}

/// How many times `put_new` asks again when an object store refuses a
/// create as existing but has no object under the name.
const CREATE_ATTEMPTS: usize = 5;

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
            tables: Mutex::new(HashMap::new()),
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
        let path = Path::from(format!("_probe/create-if-absent-{}", uuid::Uuid::new_v4()));
        let refused = |what: String| -> Error {
            LocalStoreError::NoCreateIfAbsent {
                root: self.display(),
                what,
            }
            .into()
        };
        let create = |bytes: &'static [u8]| {
            self.objects.put_opts(
                &path,
                PutPayload::from_static(bytes),
                PutMode::Create.into(),
            )
        };
        // An error other than the answers below leaves the question open.
        let failed = |e: object_store::Error| match e {
            object_store::Error::NotImplemented { .. } => {
                refused("does not support create-if-absent".to_string())
            }
            source => LocalStoreError::Probe {
                root: self.display(),
                source,
            }
            .into(),
        };
        let outcome = async {
            create(b"first").await.map_err(failed)?;
            match create(b"second").await {
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Ok(_) => {
                    return Err(refused(
                        "ignored a create-if-absent: a second create of one object replaced \
                         the first"
                            .to_string(),
                    ))
                }
                Err(e) => return Err(failed(e)),
            }
            match self.get(&path).await? {
                Some(bytes) if bytes.as_ref() == b"first" => Ok(()),
                _ => Err(refused(
                    "answered a create-if-absent as refused but replaced the object".to_string(),
                )),
            }
        }
        .await;
        let _ = self.delete(&path).await;
        outcome
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

    /// The state of one table under this root, created on first use.
    pub(crate) fn table(self: &Arc<Self>, identifier: &Identifier) -> Arc<TableState> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            tables
                .entry(identifier.clone())
                .or_insert_with(|| Arc::new(TableState::new(Arc::clone(self), identifier))),
        )
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

    /// Holds the table's tiering lock across processes until dropped. On
    /// local disk it is an OS file lock, so a holder that crashes releases
    /// it; on S3 a lease ([`Lease`]), which a holder that crashes holds
    /// until it expires; other roots (`memory://`, registered ones) are used
    /// by one process, and the caller's in-process lock is enough.
    pub(crate) async fn lock_tiering(self: &Arc<Self>, table_dir: &Path) -> Result<TierLock> {
        if object_storage::is_s3(&self.url) {
            return Ok(TierLock::Lease {
                _lease: Lease::acquire(self, table_dir, self.lease_ttl).await?,
            });
        }
        Ok(
            match self
                .lock_file(table_dir, "tier.lock", false, Vec::new())
                .await?
            {
                Some((file, _)) => TierLock::File { _file: file },
                None => TierLock::InProcess,
            },
        )
    }

    /// Holds the table's trim lock until dropped: shared by writes between
    /// reading the tiered position and creating their segment, exclusive
    /// while tiering deletes segments, so a segment number is never taken
    /// again after its segment was deleted. On local disk only; elsewhere
    /// the log retention keeps deleted numbers out of a write's reach.
    pub(crate) async fn lock_trim(
        &self,
        table_dir: &Path,
        shared: bool,
    ) -> Result<Option<std::fs::File>> {
        Ok(self
            .lock_file(table_dir, "trim.lock", shared, Vec::new())
            .await?
            .map(|(lock, _)| lock))
    }

    /// [`Self::lock_trim`], shared, and then the objects `paths` read
    /// under it (each `None` when absent), in the same trip to the
    /// blocking pool: a write's checks cost one hop, not one per file.
    /// `None` off local disk.
    pub(crate) async fn lock_trim_reading(
        &self,
        table_dir: &Path,
        paths: Vec<Path>,
    ) -> Result<Option<LockedReads>> {
        self.lock_file(table_dir, "trim.lock", true, paths).await
    }

    async fn lock_file(
        &self,
        table_dir: &Path,
        name: &str,
        shared: bool,
        paths: Vec<Path>,
    ) -> Result<Option<LockedReads>> {
        let Some(file) = self.local_file(&table_dir.clone().join(name)) else {
            return Ok(None);
        };
        let Some(files) = paths
            .iter()
            .map(|path| self.local_file(path))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let top = self.local_dir.clone();
        let locked = tokio::task::spawn_blocking(move || {
            if let Some(parent) = file.parent() {
                create_dirs_durably(top.as_deref(), parent)?;
            }
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&file)?;
            if shared {
                lock.lock_shared()?;
            } else {
                lock.lock()?;
            }
            // Read only once the lock is held, and in this thread.
            let read = files.iter().map(|file| match std::fs::read(file) {
                Ok(bytes) => Ok(Some(Bytes::from(bytes))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            });
            Ok::<_, std::io::Error>((lock, read.collect::<Vec<_>>()))
        })
        .await
        .map_err(|source| LocalStoreError::Blocking {
            what: format!("locking '{name}'"),
            source,
        })?
        .map_err(|source| LocalStoreError::Lock {
            name: name.to_string(),
            source,
        })?;
        let (lock, read) = locked;
        let read = read
            .into_iter()
            .zip(paths)
            .map(|(read, path)| read.map_err(|source| LocalStoreError::ReadFile { path, source }))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Some((lock, read)))
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
                // Refused as existing, yet nothing there: S3 answers a
                // create racing another on the same name with 409
                // (`ConditionalRequestConflict`, which object_store reports
                // as existing) even when the other does not land. Taking
                // the name as taken would skip it for good (a log position
                // nobody writes stops tiering there): ask again.
                for _ in 0..CREATE_ATTEMPTS {
                    let put = self
                        .objects
                        .put_opts(
                            path,
                            PutPayload::from(bytes.clone()),
                            PutMode::Create.into(),
                        )
                        .await;
                    match put {
                        Ok(_) => return Ok(Created::Yes),
                        Err(object_store::Error::AlreadyExists { .. }) => {
                            match self.get(path).await {
                                Ok(Some(there)) if there == bytes => return Ok(Created::Yes),
                                Ok(Some(_)) => return Ok(Created::AlreadyExists),
                                Ok(None) => continue,
                                Err(e) => return Err(PutFailed::Unknown(e)),
                            }
                        }
                        // A put that failed may still have landed (a timeout).
                        Err(source) => {
                            return Err(PutFailed::Unknown(
                                LocalStoreError::WriteObject {
                                    path: path.clone(),
                                    source,
                                }
                                .into(),
                            ))
                        }
                    }
                }
                Err(PutFailed::Unknown(
                    LocalStoreError::WriteObject {
                        path: path.clone(),
                        source: object_store::Error::Generic {
                            store: "local",
                            source: format!(
                                "refused {CREATE_ATTEMPTS} times as existing, and not found when \
                                 read"
                            )
                            .into(),
                        },
                    }
                    .into(),
                ))
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
        match self.objects.get(path).await {
            Ok(get) => get
                .bytes()
                .await
                .map(Some)
                .map_err(|e| LocalStoreError::from(e).into()),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(LocalStoreError::from(e).into()),
        }
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

/// Creates the directories up to `dir` that are missing, fsyncing each new
/// one into its parent, so their entries survive power loss. `top` (the
/// store's root) is where the walk stops.
fn create_dirs_durably(
    top: Option<&std::path::Path>,
    dir: &std::path::Path,
) -> std::io::Result<()> {
    // Directories this process made durable (or found and fsynced into
    // their parents): another process may have created one and not yet
    // fsynced it, so an existing directory is synced once too.
    static DURABLE: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    let durable = DURABLE.get_or_init(Default::default);
    if durable
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(dir)
        && dir.is_dir()
    {
        return Ok(());
    }
    if !dir.is_dir() {
        if let Some(parent) = dir.parent() {
            if top.is_none_or(|top| parent.starts_with(top)) {
                create_dirs_durably(top, parent)?;
            }
        }
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    durable
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(dir.to_path_buf());
    Ok(())
}

fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// A fresh name for the temporary file a write of the file `name` goes
/// to before it is linked or renamed to `name`: `.NAME.<pid>-<n>.tmp`.
fn temporary_name(name: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".{name}.{}-{n}.tmp", std::process::id())
}

/// Whether `file_name` is one of [`temporary_name`]'s names.
fn is_temporary(file_name: &str) -> bool {
    let Some(rest) = file_name
        .strip_prefix('.')
        .and_then(|rest| rest.strip_suffix(".tmp"))
    else {
        return false;
    };
    let Some((name, suffix)) = rest.rsplit_once('.') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    !name.is_empty()
        && suffix
            .split_once('-')
            .is_some_and(|(pid, n)| digits(pid) && digits(n))
}

/// Removes the temporary files ([`temporary_name`]) under `dir` last
/// modified before `before`, its subdirectories included (symbolic links
/// are not followed); what it removed, as (files, bytes).
///
/// A temporary file is its write's alone until the write links or renames
/// it; one left behind is a write that died (a process killed) before.
/// Removing one a live write still holds fails that write before anything
/// of it is published (its link or rename finds no file), never a write
/// that was acknowledged, so the age is a courtesy to writes that are slow,
/// not what keeps data safe.
fn remove_temporaries(
    dir: &std::path::Path,
    before: std::time::SystemTime,
) -> std::io::Result<(u64, u64)> {
    let mut removed = (0, 0);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            let (files, bytes) = remove_temporaries(&entry.path(), before)?;
            removed = (removed.0 + files, removed.1 + bytes);
            continue;
        }
        if !kind.is_file() || !is_temporary(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.modified()? >= before {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed = (removed.0 + 1, removed.1 + meta.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Writes `bytes` to a fresh temporary file beside `file` and fsyncs it.
fn write_temp(
    top: Option<&std::path::Path>,
    file: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let dir = file
        .parent()
        .ok_or_else(|| std::io::Error::other("an object path has no directory"))?;
    create_dirs_durably(top, dir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(temporary_name(&name));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    out.write_all(bytes)?;
    out.sync_all()?;
    Ok(temp)
}

/// Create-if-absent on local disk. An error says whether the object may
/// have landed under its name (`true`) or surely did not.
fn durable_create(
    top: Option<&std::path::Path>,
    file: &std::path::Path,
    bytes: &[u8],
) -> std::result::Result<Created, (bool, std::io::Error)> {
    let temp = write_temp(top, file, bytes).map_err(|e| (false, e))?;
    super::failpoint("put-before-link");
    // A hard link fails when the name is taken: create-if-absent.
    let linked = std::fs::hard_link(&temp, file);
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Ok(Created::AlreadyExists)
        }
        Err(e) => return Err((false, e)),
    }
    if let Some(dir) = file.parent() {
        sync_dir(dir).map_err(|e| (true, e))?;
    }
    Ok(Created::Yes)
}

fn durable_replace(
    top: Option<&std::path::Path>,
    file: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    let temp = write_temp(top, file, bytes)?;
    if let Err(e) = std::fs::rename(&temp, file) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    if let Some(dir) = file.parent() {
        sync_dir(dir)?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A create refused as existing (S3's 409 on a create racing another)
    /// while nothing is under the name is asked again, not taken for a
    /// taken name: a log position skipped so would stop tiering for good.
    #[tokio::test]
    async fn a_create_refused_but_not_there_is_made() {
        use crate::testing::faulty::{ErrorKind, Fault, Faults, FaultyStore, Op, Rule};
        let url = "faulty://root-create-conflict";
        let faults = Faults::new();
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        register_object_store(url, Arc::new(FaultyStore::new(inner, faults.clone())))
            .expect("register");
        let root = Root::open(url, &S3Options::default(), Duration::from_secs(60)).expect("a root");
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

    /// A write's checks read their files while it holds the trim lock, in
    /// the lock's own trip: an exclusive holder (a trim, a drop) cannot run
    /// between the lock and the reads.
    #[tokio::test]
    async fn files_are_read_under_a_held_trim_lock() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = Root::open(
            &dir.path().display().to_string(),
            &S3Options::default(),
            Duration::from_secs(60),
        )
        .expect("a local root");
        let table = Path::from("db/t");
        let there = table.clone().join("table.json");
        let absent = table.clone().join("tiered.json");
        root.put_replace(&there, Bytes::from_static(b"{}"))
            .await
            .expect("a put");
        let (lock, read) = root
            .lock_trim_reading(&table, vec![there, absent])
            .await
            .expect("the lock and the reads")
            .expect("a local root locks");
        assert_eq!(read, vec![Some(Bytes::from_static(b"{}")), None]);
        // Held shared: an exclusive lock must wait until it goes.
        let file = dir.path().join("db/t/trim.lock");
        let exclusive = std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .expect("the lock file");
        assert!(
            exclusive.try_lock().is_err(),
            "a trim got in under a write's lock"
        );
        drop(lock);
        assert!(exclusive.try_lock().is_ok());
    }
}
