//! What writes that died leave in a table's store directory, and its
//! removal once nothing can still publish it.
//!
//! A process killed while it writes (`kill -9`, a crash, a power loss)
//! leaves files no log entry names, and nothing reads them:
//!
//! - the parts of a multi-part write that never committed
//!   (`parts/<write id>/NNNNNN.seg`, whole files: each part is published as
//!   any object is), up to the size of the statement;
//! - on local disk, the temporary file of a put cut short
//!   (`.NAME.<pid>-<n>.tmp` beside the object it was to become, in `log/`,
//!   `parts/<write id>/` or the table's directory), complete or part
//!   written. An object never appears part written under its name.
//!
//! On S3 a put is a single request, never a multipart upload, so a killed
//! writer leaves no incomplete upload; its parts are all it leaves there.
//!
//! [`sweep`] removes them. A write in progress looks exactly like one that
//! died, and a process id says nothing about a process on another machine,
//! so age picks the candidates: a file once it was last modified more than
//! the orphan age ago ([`ORPHAN_AGE`], a day, as Paimon's
//! `remove_orphan_files` keeps files by default), a parts directory once its
//! newest part is that old and no log entry (nor an entry set aside in
//! `damaged/`) names its write.
//!
//! Age alone does not decide a deletion: a writer paused for longer (a
//! stopped process, a suspended machine) or a clock that jumped would see
//! its parts go and then commit an entry naming parts that are gone. Each
//! write's parts directory has one fate file ([`path::parts_fate`]),
//! created only if absent ([`claim`]): the commit creates it before it puts
//! the write's log entry, the sweep before it deletes the first part. Who
//! creates it decides: a commit that finds the sweep's refuses (nothing of
//! the write was acknowledged), a sweep that finds a commit's keeps the
//! parts. A commit also checks that every part it wrote is still there
//! after its claim, so a sweep that finished (and removed its fate file)
//! before a paused writer's claim is caught too. The sweep never runs while
//! an entry of the log does not decode: its write id may be gone with the
//! damage, and the parts it names would look like a dead writer's.
//!
//! A write killed between its claim and its entry leaves parts that stay
//! (its fate says commit); only the sweep's own fate files and those of
//! writes whose parts trimming already removed go with the rest.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;

use super::error::LocalStoreError;
use super::path;
use super::root::{PutFailed, Root};
use super::segment::{self, Entry};
use crate::error::Result;
use crate::object_storage::create::Created;
use crate::retry::{Retry, Try};

/// How old a killed writer's leftover must be before [`sweep`] removes it:
/// the age Paimon's orphan file removal keeps files for by default.
pub(crate) const ORPHAN_AGE: Duration = crate::maintenance::orphans::DEFAULT_OLDER_THAN;

/// What a [`sweep`] removed, and what it kept for an entry that does not
/// decode.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Files removed.
    pub(crate) files: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
    /// Entries of the log that do not decode, for which no parts were
    /// removed.
    pub(crate) undecoded: u64,
}

impl Swept {
    fn add(&mut self, (files, bytes): (u64, u64)) {
        self.files += files;
        self.bytes += bytes;
    }
}

/// Who decided what becomes of a multi-part write's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// The write's commit: its entry is in the log, or is being put.
    Commit,
    /// The sweep of killed writers' leftovers: the parts go.
    Sweep,
}

impl Fate {
    fn word(self) -> &'static str {
        match self {
            Fate::Commit => "commit",
            Fate::Sweep => "sweep",
        }
    }

    /// What a fate file's bytes say; anything but the sweep's word keeps
    /// the parts.
    fn read(bytes: &[u8]) -> Fate {
        if bytes.starts_with(Fate::Sweep.word().as_bytes()) {
            Fate::Sweep
        } else {
            Fate::Commit
        }
    }
}

/// How [`claim`] asks again when the store says the fate file exists and a
/// read then does not find it: five tries in all, at once.
const CLAIM_AGAIN: Retry = Retry::immediately(5);

/// Decides the fate of the parts of write `write` under `incarnation_dir`
/// as `fate`, unless it was decided already: `None` when this call decided
/// it, else what was decided (by another call, or an earlier one cut
/// short). Each claim's bytes are its own, so a put retried after its
/// answer was lost is told from another's.
pub(crate) async fn claim(
    root: &Root,
    incarnation_dir: &Path,
    write: &str,
    fate: Fate,
) -> std::result::Result<Option<Fate>, PutFailed> {
    let location = path::parts_fate(incarnation_dir, write);
    let bytes = Bytes::from(format!("{} {}\n", fate.word(), uuid::Uuid::new_v4()));
    let claimed = CLAIM_AGAIN
        .run_to_end(|| async {
            match root.put_new(&location, bytes.clone()).await? {
                Created::Yes => Ok(Try::Done(None)),
                Created::AlreadyExists => match root.get(&location).await {
                    Ok(Some(there)) => Ok(Try::Done(Some(Fate::read(&there)))),
                    // Another's a moment ago (`put_new` read it), gone now:
                    // removed since (by a sweep that finished, an abort, a
                    // trim). That decides nothing, least of all that the
                    // sweep may delete the parts of a commit that claimed
                    // them: ask again.
                    Ok(None) => Ok(Try::Again(())),
                    Err(e) => Err(PutFailed::Unknown(e)),
                },
            }
        })
        .await?;
    claimed.map_err(|()| {
        PutFailed::Unknown(
            LocalStoreError::WriteObject {
                path: location.clone(),
                source: object_store::Error::Generic {
                    store: "local",
                    source: format!(
                        "refused {} times as existing, and not found when read",
                        CLAIM_AGAIN.tries
                    )
                    .into(),
                },
            }
            .into(),
        )
    })
}

/// Removes what writes that died left in the store table at `table_dir`
/// whose current incarnation is at `incarnation_dir`, last modified before
/// `before` (see the module docs): the parts of writes no log entry names
/// and no commit claimed, then, on local disk, the temporary files of puts
/// cut short.
pub(crate) async fn sweep(
    root: &Root,
    table_dir: &Path,
    incarnation_dir: &Path,
    before: SystemTime,
) -> Result<Swept> {
    let mut swept = Swept::default();
    let stale = stale_writes(root, incarnation_dir, before).await?;
    if !stale.is_empty() {
        // Read after the parts were listed: an entry put since names parts
        // the listing saw, and keeps them (its commit's claim keeps them
        // too, whenever it came).
        let named = Named::read(root, incarnation_dir).await?;
        swept.undecoded = named.undecoded;
        if named.undecoded == 0 {
            for (write, stale) in stale {
                if named.writes.contains(&write) {
                    continue;
                }
                if stale.parts.is_empty() {
                    // Only a fate file: of parts trimming or a sweep removed.
                    if let Some(fate) = &stale.fate {
                        root.delete(fate).await?;
                        swept.add((1, 0));
                    }
                } else {
                    match claim(root, incarnation_dir, &write, Fate::Sweep)
                        .await
                        .map_err(PutFailed::into_error)?
                    {
                        None | Some(Fate::Sweep) => {}
                        // Committed, or committing: the entry names them.
                        Some(Fate::Commit) => continue,
                    }
                    let count = stale.parts.len() as u64;
                    root.delete_all(stale.parts).await?;
                    // Last: until the parts are gone, a commit finds it.
                    root.delete(&path::parts_fate(incarnation_dir, &write))
                        .await?;
                    swept.add((count, stale.bytes));
                }
                root.delete_dir(&path::parts_dir(incarnation_dir, &write))
                    .await;
            }
        }
    }
    swept.add(root.remove_temporaries(table_dir, before).await?);
    Ok(swept)
}

/// A multi-part write's files under `parts/<write id>/`.
#[derive(Debug, Default)]
struct StaleWrite {
    /// Its parts.
    parts: Vec<Path>,
    /// Their bytes.
    bytes: u64,
    /// Its fate file, if it has one.
    fate: Option<Path>,
}

/// The multi-part writes under `incarnation_dir` whose files were all last
/// modified before `before`, by write id.
async fn stale_writes(
    root: &Root,
    incarnation_dir: &Path,
    before: SystemTime,
) -> Result<BTreeMap<String, StaleWrite>> {
    let prefix = incarnation_dir.clone().join("parts");
    let listed: Vec<object_store::ObjectMeta> = root
        .objects
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(LocalStoreError::from)?;
    let depth = prefix.parts().count();
    // Write id -> (its files, the newest file's time).
    let mut writes: BTreeMap<String, (StaleWrite, SystemTime)> = BTreeMap::new();
    for meta in listed {
        let Some(write) = meta.location.parts().nth(depth) else {
            continue;
        };
        let modified = SystemTime::from(meta.last_modified);
        let (files, newest) = writes
            .entry(write.as_ref().to_string())
            .or_insert_with(|| (StaleWrite::default(), SystemTime::UNIX_EPOCH));
        *newest = (*newest).max(modified);
        if meta.location.filename() == Some(path::FATE) {
            files.fate = Some(meta.location);
        } else {
            files.parts.push(meta.location);
            files.bytes = files.bytes.saturating_add(meta.size);
        }
    }
    Ok(writes
        .into_iter()
        .filter(|(_, (_, newest))| *newest < before)
        .map(|(write, (files, _))| (write, files))
        .collect())
}

/// The writes the log entries of an incarnation name: those of its log,
/// then those set aside in `damaged/` (set aside keeps the entry there
/// before it replaces it in the log, so one of the two readings sees it).
struct Named {
    /// Write ids of the part lists that decode.
    writes: HashSet<String>,
    /// Entries of the log that do not decode: any write may be theirs.
    undecoded: u64,
}

impl Named {
    async fn read(root: &Root, incarnation_dir: &Path) -> Result<Self> {
        let mut named = Named {
            writes: HashSet::new(),
            undecoded: 0,
        };
        for dir in ["log", "damaged"] {
            let prefix = incarnation_dir.clone().join(dir);
            let listed: Vec<Path> = root
                .objects
                .list(Some(&prefix))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await
                .map_err(LocalStoreError::from)?;
            for location in listed {
                let Some(head) = root.get_head(&location, 8).await? else {
                    // Trimmed since the listing, with its parts.
                    continue;
                };
                if segment::is_segment(&head) {
                    // Rows: names no parts.
                    continue;
                }
                let Some(bytes) = root.get(&location).await? else {
                    continue;
                };
                match segment::decode_entry(&bytes) {
                    Ok(Entry::Parts(list)) => {
                        named.writes.insert(list.write_id);
                    }
                    Ok(Entry::Rows(_)) => {}
                    // One set aside stops nothing: its rows were given up
                    // when it was, and the parts of a write that claimed
                    // them stay by their fate file.
                    Err(_) if dir == "log" => named.undecoded += 1,
                    Err(_) => {}
                }
            }
        }
        Ok(named)
    }
}

#[cfg(test)]
mod tests {
    use super::super::root::test_roots;
    use super::super::segment::{Part, PartList};
    use super::*;
    use object_store::ObjectStoreExt;

    fn name(id: u128) -> String {
        format!("{id:032x}")
    }

    fn part_list(id: u128) -> Bytes {
        let list = PartList {
            write_id: name(id),
            columns: vec!["id".to_string()],
            parts: vec![Part { rows: 1, length: 1 }],
        };
        Bytes::from(segment::encode_parts(&list, id).expect("encode"))
    }

    /// The part list of write `id` with everything after its magic
    /// zeroed: its write id is gone with the damage.
    fn without_id(id: u128) -> Bytes {
        let mut damaged = part_list(id).to_vec();
        for byte in &mut damaged[8..] {
            *byte = 0;
        }
        Bytes::from(damaged)
    }

    struct Incarnation {
        root: std::sync::Arc<Root>,
        table: Path,
        dir: Path,
    }

    impl Incarnation {
        fn new(url: &str) -> Self {
            let root = Root::open(url, &Default::default(), Duration::from_secs(30)).expect("root");
            Self::on(root)
        }

        fn on(root: std::sync::Arc<Root>) -> Self {
            let table = Path::from("db-d/t-t");
            let dir = table.clone().join("i-x");
            Self { root, table, dir }
        }

        async fn put(&self, path: Path, bytes: Bytes) {
            self.root
                .objects
                .put(&path, bytes.into())
                .await
                .expect("put");
        }

        async fn put_part(&self, id: u128) {
            self.put(
                path::part(&self.dir, &name(id), 0),
                Bytes::from_static(b"x"),
            )
            .await;
        }

        async fn put_entry(&self, dir: &str, at: u64, bytes: Bytes) {
            let at = format!("{at:020}.seg");
            self.put(self.dir.clone().join(dir).join(at.as_str()), bytes)
                .await;
        }

        /// The names of the files under `parts/`, as `<write>/<file>`.
        async fn parts_left(&self) -> Vec<String> {
            let listed: Vec<Path> = self
                .root
                .objects
                .list(Some(&self.dir.clone().join("parts")))
                .map_ok(|m| m.location)
                .try_collect()
                .await
                .expect("list");
            let mut left: Vec<String> = listed
                .iter()
                .map(|p| {
                    let parts: Vec<_> = p.parts().map(|p| p.as_ref().to_string()).collect();
                    parts[4..].join("/")
                })
                .collect();
            left.sort();
            left
        }

        async fn sweep(&self, before: SystemTime) -> Swept {
            sweep(&self.root, &self.table, &self.dir, before)
                .await
                .expect("sweep")
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    /// On an object store (no temporary files there): the parts of a write
    /// that no entry of the log, nor one set aside, names go once old
    /// enough; named ones stay; young ones stay.
    #[tokio::test]
    async fn only_old_parts_no_entry_names_go() {
        let t = Incarnation::new("memory://leftovers-sweep");
        // 1: named by the log; 2: by an entry set aside; 3: by none.
        for id in 1..=3 {
            t.put_part(id).await;
        }
        t.put_entry("log", 1, part_list(1)).await;
        t.put_entry("damaged", 2, part_list(2)).await;
        let young = t.sweep(SystemTime::now() - HOUR).await;
        assert_eq!(young, Swept::default());
        assert_eq!(t.parts_left().await.len(), 3);
        let old = t.sweep(SystemTime::now() + HOUR).await;
        assert_eq!(
            old,
            Swept {
                files: 1,
                bytes: 1,
                undecoded: 0
            }
        );
        assert_eq!(
            t.parts_left().await,
            [
                format!("{}/000000.seg", name(1)),
                format!("{}/000000.seg", name(2))
            ]
        );
    }

    /// An entry that does not decode may name any write (its id may be
    /// what the damage took): while one is in the log, no parts go.
    #[tokio::test]
    async fn an_undecoded_entry_keeps_every_part() {
        let t = Incarnation::new("memory://leftovers-undecoded");
        t.put_part(3).await;
        // An entry of write 4 whose id is gone with the damage.
        t.put_entry("log", 1, without_id(4)).await;
        let swept = t.sweep(SystemTime::now() + HOUR).await;
        assert_eq!(swept.files, 0);
        assert_eq!(swept.undecoded, 1);
        assert_eq!(t.parts_left().await, [format!("{}/000000.seg", name(3))]);
    }

    /// An entry set aside (kept in `damaged/`, an empty segment in its
    /// place in the log) no longer stops the sweep: a killed writer's parts
    /// go again, and those of the write set aside stay by its commit's
    /// claim.
    #[tokio::test]
    async fn an_undecoded_entry_set_aside_stops_the_sweep_no_longer() {
        let t = Incarnation::new("memory://leftovers-set-aside");
        t.put_part(3).await;
        t.put_part(4).await;
        let claimed = claim(&t.root, &t.dir, &name(4), Fate::Commit).await;
        assert!(matches!(claimed, Ok(None)));
        t.put_entry("damaged", 1, without_id(4)).await;
        let swept = t.sweep(SystemTime::now() + HOUR).await;
        assert_eq!(swept.undecoded, 0, "{swept:?}");
        assert_eq!(
            t.parts_left().await,
            [
                format!("{}/000000.seg", name(4)),
                format!("{}/fate", name(4))
            ]
        );
    }

    /// The store says a commit's fate file exists, and a read then misses
    /// it (S3 answers a create racing another with 409, which object_store
    /// reports as existing; a read may lag): the sweep must not take that
    /// for its own decision, and keeps the parts, as it does when the read
    /// finds the commit's claim. Otherwise the commit, which claimed them,
    /// would put an entry naming parts that are gone.
    #[tokio::test]
    async fn a_claim_the_store_has_but_a_read_misses_keeps_the_parts() {
        use crate::testing::faulty::{ErrorKind, Fault, Op, Rule};
        let (root, faults) = test_roots::faulty("faulty://leftovers-missed-claim");
        let t = Incarnation::on(root);
        t.put_part(8).await;
        // The write's commit claimed its parts; its entry comes next.
        let claimed = claim(&t.root, &t.dir, &name(8), Fate::Commit).await;
        assert!(matches!(claimed, Ok(None)));
        // The sweep's create of the fate file is refused as existing, and
        // its reads of it miss it.
        faults.add(
            Rule::new(Op::Get, Fault::Fail(ErrorKind::NotFound))
                .path_contains("/fate")
                .times(2),
        );
        let swept = t.sweep(SystemTime::now() + HOUR).await;
        assert_eq!(
            t.parts_left().await,
            [
                format!("{}/000000.seg", name(8)),
                format!("{}/fate", name(8))
            ],
            "the sweep took the parts of a write its commit claimed: {swept:?}"
        );
    }

    /// A fate file the store keeps calling existing while every read
    /// misses it: the claim asks again a bounded number of times, then
    /// fails as unknown (the sweep keeps the parts), never decides.
    #[tokio::test]
    async fn a_claim_the_store_keeps_refusing_and_missing_ends_unknown() {
        use crate::testing::faulty::{ErrorKind, Fault, Op, Rule};
        let (root, faults) = test_roots::faulty("faulty://leftovers-always-missed-claim");
        let t = Incarnation::on(root);
        let claimed = claim(&t.root, &t.dir, &name(9), Fate::Commit).await;
        assert!(matches!(claimed, Ok(None)));
        // Each try's create reads the fate file (and finds another's
        // bytes: refused as existing); the claim's own read then misses it.
        // Rule `k` misses the claim's read of try `k + 1`.
        let missed: Vec<_> = (0..5)
            .map(|k| {
                faults.add(
                    Rule::new(Op::Get, Fault::Fail(ErrorKind::NotFound))
                        .path_contains("/fate")
                        .skip(k + 1)
                        .times(1),
                )
            })
            .collect();
        let again = claim(&t.root, &t.dir, &name(9), Fate::Sweep).await;
        let Err(PutFailed::Unknown(e)) = again else {
            panic!("a claim that never saw the fate file decided: {again:?}");
        };
        assert!(
            e.to_string()
                .contains("refused 5 times as existing, and not found when read"),
            "{e}"
        );
        let fired: Vec<u64> = missed.iter().map(|&rule| faults.fired(rule)).collect();
        assert_eq!(fired, [1; 5], "the claim's reads that missed");
    }

    /// A commit's claim keeps the parts of a write whose entry is not in
    /// the log yet, however old they look; a sweep's claim makes the
    /// commit's fail, and a sweep that finished leaves no fate file.
    #[tokio::test]
    async fn the_first_claim_decides_the_parts_fate() {
        let t = Incarnation::new("memory://leftovers-claims");
        t.put_part(5).await;
        t.put_part(6).await;
        let claimed = claim(&t.root, &t.dir, &name(5), Fate::Commit).await;
        assert!(matches!(claimed, Ok(None)));
        let swept = t.sweep(SystemTime::now() + HOUR).await;
        assert_eq!(swept.files, 1, "{swept:?}");
        assert_eq!(
            t.parts_left().await,
            [
                format!("{}/000000.seg", name(5)),
                format!("{}/fate", name(5))
            ]
        );
        // The sweep took write 6 and removed its own fate file: a late
        // commit claims, then finds its part gone (`PartsWriter::commit`).
        let late = claim(&t.root, &t.dir, &name(6), Fate::Commit).await;
        assert!(matches!(late, Ok(None)));
        // A fate file whose parts are gone goes with the next sweep.
        let swept = t.sweep(SystemTime::now() + HOUR).await;
        assert_eq!(swept.files, 1, "{swept:?}");
        assert_eq!(
            t.parts_left().await,
            [
                format!("{}/000000.seg", name(5)),
                format!("{}/fate", name(5))
            ]
        );
        // ... and a sweep claiming first wins over a commit.
        t.put_part(7).await;
        let first = claim(&t.root, &t.dir, &name(7), Fate::Sweep).await;
        assert!(matches!(first, Ok(None)));
        let second = claim(&t.root, &t.dir, &name(7), Fate::Commit).await;
        assert!(matches!(second, Ok(Some(Fate::Sweep))));
    }
}
