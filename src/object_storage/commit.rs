//! Safe Paimon commits on S3.
//!
//! paimon 0.4 publishes a snapshot by writing it aside and renaming it
//! under its name, after checking that the name is free. S3 cannot rename,
//! so paimon falls back to checking that the snapshot file is absent and
//! then writing it: two commits at once can both find `snapshot-7` absent,
//! and the second write replaces the first, losing its rows without an
//! error.
//!
//! Tables on S3 are therefore opened with a file IO of our own
//! ([`file_io`], through the catalog wrapper of [`super::catalog`]): the same opendal S3 service, under a layer that writes a
//! snapshot file (or a schema file, where a table writes one) only if no
//! object has its name (`If-None-Match: *`). The second of two commits
//! fails its write; paimon's commit then retries on the next snapshot id
//! (its own conflict handling), so both commits land, one after the other,
//! as on a file system. The catalog wrapper writes the schema files of
//! `CREATE TABLE` and `ALTER TABLE` through this file IO too
//! ([`super::ddl`]). Files are written directly, not aside
//! ([`Rules::shows_partial_writes`]): a put, multipart or not, shows
//! nothing until it is complete.
//!
//! Before the first such write to a bucket, the process checks that the
//! server honours the condition (a probe object written twice, beside the
//! table); a server that ignores it gets every commit refused, never made
//! unsafely, and so does a write whose probe got no answer.
//!
//! A commit that must land on exactly the snapshot it was planned against
//! (tiering: the range it commits was read from that snapshot) is made
//! through [`fenced`]: its file IO refuses to create any snapshot of the
//! table but the next one, so if anything else committed in between, the
//! commit fails instead of landing later. This is the fence that makes a
//! second tierer harmless, whatever the clocks and however long a process
//! paused: no lease can stop a paused holder from writing, a conditional
//! write can.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use opendal::raw::*;
use opendal::*;
use paimon::io::{FileIO, FileIOBuilder, FileIOProvider};
use paimon::table::Table;

use super::create::{probe, Conditional, CreateAnswer, ProbeFailed};
use super::guard::{Guard, Rules};
use super::{create_only, S3Options};

/// A snapshot every commit through a fenced table must create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fence {
    /// The table's directory in its bucket, ending in `/`.
    table: String,
    /// The only snapshot id the commit may create.
    next: i64,
}

/// The id of a snapshot file, and the table directory it is under (ending
/// in `/`), when `path` names one of the table's main-branch snapshots.
fn snapshot_file(path: &str) -> Option<(&str, i64)> {
    let (dir, name) = path.trim_start_matches('/').rsplit_once('/')?;
    let id = name.strip_prefix("snapshot-")?.parse::<i64>().ok()?;
    let table = dir.strip_suffix("snapshot")?;
    (table.is_empty() || table.ends_with('/')).then_some((table, id))
}

/// Why the write of `path` (a [`create_only`] name) is refused on a server
/// that ignores `If-None-Match`, naming what it was for: the statement and
/// table a schema file is written for (`schema-0`: `CREATE TABLE`, a later
/// one: `ALTER TABLE`), a tag, or a commit's snapshot.
fn refused_write(path: &str) -> String {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (dir, name) = match parts.as_slice() {
        [.., dir, name] => (*dir, *name),
        _ => ("", path),
    };
    let table = parts
        .iter()
        .position(|part| part.len() > 3 && part.ends_with(".db"))
        .and_then(|at| {
            let table = parts.get(at + 1)?;
            Some(format!("{}.{table}", parts[at].trim_end_matches(".db")))
        })
        .unwrap_or_else(|| format!("the table of '{path}'"));
    let branch = parts
        .windows(2)
        .find(|pair| pair[0] == "branch")
        .and_then(|pair| pair[1].strip_prefix("branch-"));
    let (what, risk) = match (dir, branch) {
        ("schema", Some(branch)) if name == "schema-0" => (
            format!("creating the branch '{branch}' of {table}"),
            "another process's branch of that name could be replaced",
        ),
        ("schema", None) if name == "schema-0" => (
            format!("CREATE TABLE {table}"),
            "another process's table of that name could be replaced",
        ),
        ("schema", _) => (
            format!("ALTER TABLE {table}"),
            "another process's schema change could be replaced and undone",
        ),
        ("tag", _) => (
            format!(
                "creating the tag '{}' of {table}",
                name.strip_prefix("tag-").unwrap_or(name)
            ),
            "another process's tag of that name could be replaced",
        ),
        _ => (
            format!("a commit to {table}"),
            "a commit could replace another's snapshot and lose its rows",
        ),
    };
    refused_without_conditions(&what, risk)
}

/// The one refusal of a write on an S3 server that ignores conditional
/// writes: `what` (the statement and its table, a tag, a commit) is
/// refused, because otherwise `risk`. The refused commits, tags and schema
/// files ([`refused_write`]) and the DDL whose database lease the server
/// cannot keep ([`super::schema_lock`]) all say it so.
pub(super) fn refused_without_conditions(what: &str, risk: &str) -> String {
    format!(
        "{what} is refused: the S3 server ignores conditional writes ('If-None-Match: *' on \
         PutObject), so {risk}. Use a server that implements conditional writes (AWS S3, \
         MinIO, versitygw, ...), or a REST catalog, whose server commits snapshots"
    )
}

/// The [`Rules`] of S3 tables' file IO ([`file_io`], [`fenced`]).
#[derive(Debug)]
struct CreateOnce {
    fence: Option<Fence>,
    probe: Arc<Probe>,
}

/// Whether the server behind one bucket honours `If-None-Match: *`, as
/// this process found out (once per endpoint and bucket).
#[derive(Debug, Default)]
struct Probe {
    checked: tokio::sync::OnceCell<()>,
    /// The server replaced an object a conditional write should have left.
    ignores_condition: AtomicBool,
    /// Why the last probe got no answer, while none has: create-only
    /// writes are refused until one does.
    unanswered: Mutex<Option<String>>,
}

/// The probe of `bucket` at the endpoint of `s3`, shared by every file IO
/// of the process.
fn probe_of(s3: &S3Options, bucket: &str) -> Arc<Probe> {
    static PROBES: OnceLock<Mutex<HashMap<String, Arc<Probe>>>> = OnceLock::new();
    let key = format!("{}|{bucket}", s3.endpoint.as_deref().unwrap_or("aws"));
    let mut probes = PROBES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    Arc::clone(probes.entry(key).or_default())
}

impl Probe {
    /// Probes the server through `operator` (the client commits write
    /// with) with the one probe ([`super::create::probe`]):
    /// an object beside `key` created twice, the second time to be refused
    /// as existing, the first's bytes to stay. A server that fails it
    /// ignores the condition. Errors (a request that timed out, no write
    /// permission: the commit would fail anyway) leave the answer open: the
    /// create-only write that asked is refused (see [`Self::refuses`]), and
    /// the next one asks again; an answer is asked once.
    async fn check(&self, operator: &Operator, key: &str) {
        let _ = self
            .checked
            .get_or_try_init(|| async {
                let dir = key.rsplit_once('/').map_or("", |(dir, _)| dir);
                let table = dir.rsplit_once('/').map_or("", |(table, _)| table);
                let prefix = if table.is_empty() {
                    ".lakestream-probe-".to_string()
                } else {
                    format!("{table}/.lakestream-probe-")
                };
                let answer = match probe(&Operated(operator), &prefix).await {
                    Ok(()) => Ok(()),
                    Err(ProbeFailed::Refused(_)) => {
                        self.ignores_condition.store(true, Ordering::SeqCst);
                        Ok(())
                    }
                    Err(ProbeFailed::Failed(e) | ProbeFailed::Read(e)) => Err(e.to_string()),
                };
                let mut unanswered = self.unanswered.lock().unwrap_or_else(|e| e.into_inner());
                *unanswered = answer.as_ref().err().cloned();
                answer
            })
            .await;
    }

    /// Why a create-only write of `path` is refused: the server ignores
    /// conditional writes, or its probe got no answer (it could, so the
    /// write would not be known to be made safely).
    fn refuses(&self, path: &str) -> Option<Error> {
        if self.ignores_condition.load(Ordering::SeqCst) {
            return Some(Error::new(ErrorKind::Unsupported, refused_write(path)));
        }
        if self.checked.initialized() {
            return None;
        }
        let unanswered = self.unanswered.lock().unwrap_or_else(|e| e.into_inner());
        let why = unanswered.as_deref().unwrap_or("it was not asked");
        Some(
            Error::new(
                ErrorKind::Unexpected,
                format!(
                    "'{path}' was not written: cannot tell whether the S3 server honours \
                     conditional writes ('If-None-Match: *' on PutObject), which keeps it from \
                     replacing another process's file; the probe that asks it got no answer \
                     ({why}). The next such write asks again"
                ),
            )
            .set_temporary(),
        )
    }
}

/// An opendal operator as the probe asks it.
struct Operated<'a>(&'a Operator);

#[async_trait::async_trait]
impl Conditional for Operated<'_> {
    type Error = Error;

    async fn create_new(&self, path: &str, bytes: &'static [u8]) -> CreateAnswer<Error> {
        match self
            .0
            .write_with(path, bytes.to_vec())
            .if_not_exists(true)
            .await
        {
            Ok(_) => CreateAnswer::Created,
            Err(e) if e.kind() == ErrorKind::ConditionNotMatch => CreateAnswer::Exists(e),
            Err(e) if e.kind() == ErrorKind::Unsupported => CreateAnswer::NotSupported,
            Err(e) => CreateAnswer::Failed(e),
        }
    }

    async fn read(&self, path: &str) -> Result<Option<bytes::Bytes>> {
        match self.0.read(path).await {
            Ok(buffer) => Ok(Some(buffer.to_bytes())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn remove(&self, path: &str) {
        let _ = self.0.delete(path).await;
    }
}

impl Rules for CreateOnce {
    fn check_write(&self, path: &str) -> Result<()> {
        if create_only(path) {
            if let Some(refused) = self.probe.refuses(path) {
                return Err(refused);
            }
        }
        if let (Some(fence), Some((table, id))) = (&self.fence, snapshot_file(path)) {
            if table == fence.table && id != fence.next {
                return Err(Error::new(
                    ErrorKind::ConditionNotMatch,
                    format!(
                        "this commit was planned against snapshot {} and may only create \
                         snapshot {}, not {id}: another commit landed in between",
                        fence.next - 1,
                        fence.next
                    ),
                ));
            }
        }
        Ok(())
    }

    async fn rename(
        &self,
        _inner: &Servicer,
        _ctx: &OperationContext,
        _from: &str,
        _to: &str,
        _args: OpRename,
    ) -> Result<RpRename> {
        // A rename could replace a snapshot: S3 has none, and neither does
        // this file IO, so paimon takes its create path.
        Err(Error::new(
            ErrorKind::Unsupported,
            "rename is not atomic on S3; commits create their files conditionally",
        ))
    }
}

/// Paimon's file IO for S3 tables: one operator per bucket, under
/// [`CreateOnce`].
struct Provider {
    s3: S3Options,
    fence: Option<Fence>,
    operators: Mutex<HashMap<String, (Operator, Arc<Probe>)>>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3CommitFileIO")
            .field("s3", &self.s3)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl FileIOProvider for Provider {
    async fn create(&self, path: &str) -> paimon::Result<(Operator, String)> {
        let (bucket, key) =
            super::split(path).map_err(|message| paimon::Error::ConfigInvalid { message })?;
        let (operator, probe) = {
            let mut operators = self.operators.lock().unwrap_or_else(|e| e.into_inner());
            match operators.get(&bucket) {
                Some(found) => found.clone(),
                None => {
                    let probe = probe_of(&self.s3, &bucket);
                    let operator = self
                        .s3
                        .operator(&bucket)
                        .map_err(|message| paimon::Error::ConfigInvalid { message })?
                        .layer(Guard(Arc::new(CreateOnce {
                            fence: self.fence.clone(),
                            probe: Arc::clone(&probe),
                        })));
                    operators.insert(bucket, (operator.clone(), Arc::clone(&probe)));
                    (operator, probe)
                }
            }
        };
        if create_only(&key) {
            probe.check(&operator, &key).await;
        }
        Ok((operator, key))
    }
}

pub(super) fn file_io(s3: &S3Options, fence: Option<Fence>) -> paimon::Result<FileIO> {
    FileIOBuilder::new("s3")
        .with_provider(Arc::new(Provider {
            s3: s3.clone(),
            fence,
            operators: Mutex::new(HashMap::new()),
        }))
        .build()
}

/// `table` on a file IO that lets a commit create snapshot `next` of it and
/// no other, for a commit planned against snapshot `next - 1` (see the
/// module docs). Tables off S3 are returned as they are.
pub(super) fn fenced(table: &Table, s3: &S3Options, next: i64) -> paimon::Result<Table> {
    if !super::is_s3(table.location()) || table.rest_env().is_some() {
        return Ok(table.clone());
    }
    let (_, key) = super::split(table.location())
        .map_err(|message| paimon::Error::ConfigInvalid { message })?;
    let mut dir = key.trim_start_matches('/').to_string();
    if !dir.ends_with('/') {
        dir.push('/');
    }
    let fence = Fence { table: dir, next };
    super::reopen(table, file_io(s3, Some(fence))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that ignores `If-None-Match`: writes replace what is there
    /// (under the guard, as its storage).
    #[derive(Debug)]
    struct IgnoresCondition;

    impl Rules for IgnoresCondition {
        fn write(
            &self,
            inner: &Servicer,
            ctx: &OperationContext,
            path: &str,
            args: OpWrite,
        ) -> Result<oio::Writer> {
            inner.write(ctx, path, args.with_if_not_exists(false))
        }
    }

    fn memory() -> Operator {
        Operator::new(services::Memory::default()).expect("memory operator")
    }

    #[tokio::test]
    async fn a_server_that_ignores_the_condition_gets_every_commit_refused() {
        let snapshot = "w/db.db/t/snapshot/snapshot-1";
        // A server that honours it: commits create, and never replace.
        let probe = Arc::new(Probe::default());
        let honest = memory().layer(Guard(Arc::new(CreateOnce {
            fence: None,
            probe: Arc::clone(&probe),
        })));
        probe.check(&honest, snapshot).await;
        assert!(!probe.ignores_condition.load(Ordering::SeqCst));
        honest
            .write(snapshot, b"one".to_vec())
            .await
            .expect("created");
        let again = honest.write(snapshot, b"two".to_vec()).await;
        assert_eq!(
            again.expect_err("not replaced").kind(),
            ErrorKind::ConditionNotMatch
        );
        assert_eq!(honest.read(snapshot).await.expect("read").to_vec(), b"one");
        let left: Vec<_> = honest.list_with("w/").recursive(true).await.expect("list");
        assert_eq!(left.len(), 1, "the probe object is gone: {left:?}");
        // A server that ignores it: commits are refused, other writes go on.
        let probe = Arc::new(Probe::default());
        let dishonest = memory()
            .layer(Guard(Arc::new(IgnoresCondition)))
            .layer(Guard(Arc::new(CreateOnce {
                fence: None,
                probe: Arc::clone(&probe),
            })));
        probe.check(&dishonest, snapshot).await;
        assert!(probe.ignores_condition.load(Ordering::SeqCst));
        let refused = dishonest.write(snapshot, b"one".to_vec()).await;
        let error = refused.expect_err("refused");
        assert_eq!(error.kind(), ErrorKind::Unsupported);
        assert!(
            error.to_string().contains("ignores conditional writes"),
            "{error}"
        );
        dishonest
            .write("w/db.db/t/bucket-0/data.parquet", b"rows".to_vec())
            .await
            .expect("data files are written");
        // Each refusal names what was refused: the statement and table a
        // schema file is for, the tag, or the commit.
        for (path, names) in [
            (
                "w/db.db/t/snapshot/snapshot-2",
                "a commit to db.t is refused",
            ),
            ("w/db.db/t/schema/schema-0", "CREATE TABLE db.t is refused"),
            ("w/db.db/t/schema/schema-4", "ALTER TABLE db.t is refused"),
            (
                "w/db.db/t/tag/tag-nightly",
                "creating the tag 'nightly' of db.t is refused",
            ),
            (
                "w/db.db/t/branch/branch-b/schema/schema-0",
                "creating the branch 'b' of db.t is refused",
            ),
        ] {
            let error = dishonest.write(path, b"{}".to_vec()).await.expect_err(path);
            assert_eq!(error.kind(), ErrorKind::Unsupported);
            let message = error.to_string();
            assert!(message.contains(names), "{path}: {message}");
            assert!(
                message.contains("ignores conditional writes"),
                "{path}: {message}"
            );
            // Only a commit's refusal speaks of commits and rows.
            assert_eq!(
                message.contains("a commit"),
                path.contains("/snapshot/"),
                "{path}: {message}"
            );
        }
    }

    /// Fails the second probe write it sees, once, with an error that is
    /// not "exists" (a request that timed out).
    #[derive(Debug, Default)]
    struct FailsSecondProbeWrite(std::sync::atomic::AtomicUsize);

    impl Rules for FailsSecondProbeWrite {
        fn check_write(&self, path: &str) -> Result<()> {
            if path.contains(".lakestream-probe-") && self.0.fetch_add(1, Ordering::SeqCst) == 1 {
                return Err(Error::new(ErrorKind::Unexpected, "timed out"));
            }
            Ok(())
        }
    }

    /// Only a refusal as existing counts as honouring the condition, a
    /// probe that got no answer lets no create-only write through, and it
    /// is asked again: a server that ignores the
    /// condition, whose second probe write timed out, is found out at the
    /// next commit. (This probe used to take any error of the second write
    /// for a refusal, and to ask once whatever happened: such a server
    /// passed, and its commits replaced each other.)
    #[tokio::test]
    async fn a_probe_that_failed_is_asked_again_and_an_error_is_no_refusal() {
        let snapshot = "w/db.db/t/snapshot/snapshot-1";
        let probe = Arc::new(Probe::default());
        let dishonest = memory()
            .layer(Guard(Arc::new(IgnoresCondition)))
            .layer(Guard(Arc::new(FailsSecondProbeWrite::default())))
            .layer(Guard(Arc::new(CreateOnce {
                fence: None,
                probe: Arc::clone(&probe),
            })));
        probe.check(&dishonest, snapshot).await;
        assert!(!probe.ignores_condition.load(Ordering::SeqCst));
        // Unanswered, the probe lets no create-only write through: this
        // server would let the second of two commits replace the first.
        for _ in 0..2 {
            let refused = dishonest
                .write(snapshot, b"one".to_vec())
                .await
                .expect_err("a commit while the probe is unanswered");
            let message = refused.to_string();
            assert!(message.contains("got no answer"), "{message}");
            assert!(message.contains("timed out"), "{message}");
        }
        let nothing = dishonest.read(snapshot).await;
        assert_eq!(
            nothing
                .map(|b| b.to_vec())
                .expect_err("nothing written")
                .kind(),
            ErrorKind::NotFound
        );
        probe.check(&dishonest, snapshot).await;
        assert!(
            probe.ignores_condition.load(Ordering::SeqCst),
            "a server that ignores the condition passed the probe"
        );
        let refused = dishonest.write(snapshot, b"one".to_vec()).await;
        assert_eq!(refused.expect_err("refused").kind(), ErrorKind::Unsupported);
    }

    #[tokio::test]
    async fn a_fenced_commit_creates_only_the_next_snapshot() {
        let probe = Arc::new(Probe::default());
        let fenced = memory().layer(Guard(Arc::new(CreateOnce {
            fence: Some(Fence {
                table: "w/db.db/t/".to_string(),
                next: 3,
            }),
            probe: Arc::clone(&probe),
        })));
        probe.check(&fenced, "w/db.db/t/snapshot/snapshot-3").await;
        let error = fenced
            .write("w/db.db/t/snapshot/snapshot-4", b"x".to_vec())
            .await
            .expect_err("not the next snapshot");
        assert_eq!(error.kind(), ErrorKind::ConditionNotMatch);
        fenced
            .write("w/db.db/t/snapshot/snapshot-3", b"x".to_vec())
            .await
            .expect("the next snapshot");
        // Another table's snapshots are not fenced.
        fenced
            .write("w/db.db/u/snapshot/snapshot-9", b"x".to_vec())
            .await
            .expect("another table");
    }

    #[test]
    fn snapshot_and_schema_files_are_recognised() {
        assert_eq!(
            snapshot_file("w/db.db/t/snapshot/snapshot-12"),
            Some(("w/db.db/t/", 12))
        );
        assert_eq!(snapshot_file("snapshot/snapshot-1"), Some(("", 1)));
        assert_eq!(snapshot_file("w/t/snapshot/LATEST"), None);
        assert_eq!(snapshot_file("w/t/snapshot/snapshot-1.tmp-x"), None);
        assert_eq!(snapshot_file("w/t/mysnapshot/snapshot-1"), None);
        assert!(create_only("w/t/snapshot/snapshot-3"));
        assert!(create_only("w/t/branch/branch-b/snapshot/snapshot-3"));
        assert!(create_only("w/t/schema/schema-0"));
        assert!(!create_only("w/t/snapshot/LATEST"));
        assert!(!create_only("w/t/snapshot/EARLIEST"));
        assert!(!create_only("w/t/snapshot/snapshot-3.tmp-abc"));
        assert!(!create_only("w/t/bucket-0/data-1.parquet"));
        assert!(create_only("w/t/tag/tag-v1"));
        assert!(create_only("w/t/branch/branch-b/tag/tag-v1"));
        assert!(!create_only("w/t/tag/expiring-1234"));
        assert!(!create_only("w/t/mytag/tag-v1"));
        assert!(super::super::published_whole("w/t/tag/expiring-1234"));
        assert!(super::super::published_whole("w/t/tag/tag-v1"));
    }
}
