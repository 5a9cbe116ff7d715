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
//! so only age tells them apart: a file is removed once it was last
//! modified more than the orphan age ago ([`ORPHAN_AGE`], a day, as Paimon's
//! `remove_orphan_files` keeps files by default), and a parts directory
//! only once its newest part is that old and no log entry (nor an entry set
//! aside in `damaged/`) names its write. A multi-part write refuses to
//! commit once its last part is half that age ([`COMMIT_WITHIN`]), so the
//! sweep never takes the parts of a write that could still publish them.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path;

use super::error::LocalStoreError;
use super::root::Root;
use super::segment::{self, Entry};
use crate::error::Result;

/// How old a killed writer's leftover must be before [`sweep`] removes it:
/// the age Paimon's orphan file removal keeps files for by default.
pub(crate) const ORPHAN_AGE: Duration = crate::maintenance::orphans::DEFAULT_OLDER_THAN;

/// How long after its last part a multi-part write may still commit: half
/// the orphan age, so a write the sweep could take refuses to commit
/// instead of committing parts that are gone.
pub(crate) const COMMIT_WITHIN: Duration = Duration::from_secs(ORPHAN_AGE.as_secs() / 2);

/// What a [`sweep`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Files removed.
    pub(crate) files: u64,
    /// Their bytes.
    pub(crate) bytes: u64,
}

impl Swept {
    fn add(&mut self, (files, bytes): (u64, u64)) {
        self.files += files;
        self.bytes += bytes;
    }
}

/// Removes what writes that died left in the store table at `table_dir`
/// whose current incarnation is at `incarnation_dir`, last modified before
/// `before` (see the module docs): the parts of writes no log entry names,
/// then, on local disk, the temporary files of puts cut short.
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
        // the listing saw, and keeps them.
        let named = Named::read(root, incarnation_dir).await?;
        for (write, (parts, bytes)) in stale {
            if named.names(&write) {
                continue;
            }
            let count = parts.len() as u64;
            root.delete_all(parts).await?;
            root.delete_dir(&incarnation_dir.clone().join("parts").join(write.as_str()))
                .await;
            swept.add((count, bytes));
        }
    }
    swept.add(root.remove_temporaries(table_dir, before).await?);
    Ok(swept)
}

/// The multi-part writes under `incarnation_dir` whose newest part was last
/// modified before `before`: their parts and bytes, by write id.
async fn stale_writes(
    root: &Root,
    incarnation_dir: &Path,
    before: SystemTime,
) -> Result<BTreeMap<String, (Vec<Path>, u64)>> {
    let prefix = incarnation_dir.clone().join("parts");
    let listed: Vec<object_store::ObjectMeta> = root
        .objects
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(LocalStoreError::from)?;
    let depth = prefix.parts().count();
    // Write id -> (its parts, their bytes, the newest part's time).
    let mut writes: BTreeMap<String, (Vec<Path>, u64, SystemTime)> = BTreeMap::new();
    for meta in listed {
        let Some(write) = meta.location.parts().nth(depth) else {
            continue;
        };
        let modified = SystemTime::from(meta.last_modified);
        let entry = writes
            .entry(write.as_ref().to_string())
            .or_insert_with(|| (Vec::new(), 0, SystemTime::UNIX_EPOCH));
        entry.0.push(meta.location.clone());
        entry.1 = entry.1.saturating_add(meta.size);
        entry.2 = entry.2.max(modified);
    }
    Ok(writes
        .into_iter()
        .filter(|(_, (_, _, newest))| *newest < before)
        .map(|(write, (parts, bytes, _))| (write, (parts, bytes)))
        .collect())
}

/// The writes the log entries of an incarnation name: those of its log,
/// then those set aside in `damaged/` (set aside keeps the entry there
/// before it replaces it in the log, so one of the two readings sees it).
struct Named {
    /// Write ids of the part lists that decode.
    writes: HashSet<String>,
    /// Entries that do not decode: any write whose id is in their bytes
    /// may be theirs.
    undecoded: Vec<bytes::Bytes>,
}

impl Named {
    async fn read(root: &Root, incarnation_dir: &Path) -> Result<Self> {
        let mut named = Named {
            writes: HashSet::new(),
            undecoded: Vec::new(),
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
                    Err(_) => named.undecoded.push(bytes),
                }
            }
        }
        Ok(named)
    }

    /// Whether an entry names, or may name, the write `write`.
    fn names(&self, write: &str) -> bool {
        if self.writes.contains(write) {
            return true;
        }
        // The id as the part list spells it, and as its header holds it.
        let binary = u128::from_str_radix(write, 16).ok().map(u128::to_le_bytes);
        self.undecoded.iter().any(|bytes| {
            contains(bytes, write.as_bytes()) || binary.is_some_and(|id| contains(bytes, &id))
        })
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::super::segment::{Part, PartList};
    use super::*;
    use bytes::Bytes;
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

    /// On an object store (no temporary files there): the parts of a write
    /// that no entry of the log, nor one set aside, names go once old
    /// enough; named ones stay, and so do those an entry that does not
    /// decode may name; young ones stay.
    #[tokio::test]
    async fn only_old_parts_no_entry_names_go() {
        let root = Root::open(
            "memory://leftovers-sweep",
            &Default::default(),
            Duration::from_secs(30),
        )
        .expect("root");
        let table = Path::from("db-d/t-t");
        let incarnation = table.clone().join("i-x");
        // 1: named by the log; 2: by an entry set aside; 3: by none; 4: by
        // an entry whose bytes no longer verify.
        for id in 1..=4 {
            root.objects
                .put(
                    &incarnation
                        .clone()
                        .join("parts")
                        .join(name(id).as_str())
                        .join("000000.seg"),
                    Bytes::from_static(b"x").into(),
                )
                .await
                .expect("put");
        }
        let mut damaged = part_list(4).to_vec();
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        for (dir, at, bytes) in [
            ("log", "00000000000000000001.seg", part_list(1)),
            ("damaged", "00000000000000000002.seg", part_list(2)),
            ("log", "00000000000000000003.seg", Bytes::from(damaged)),
        ] {
            root.objects
                .put(&incarnation.clone().join(dir).join(at), bytes.into())
                .await
                .expect("put");
        }
        let parts_left = || async {
            let listed: Vec<Path> = root
                .objects
                .list(Some(&incarnation.clone().join("parts")))
                .map_ok(|m| m.location)
                .try_collect()
                .await
                .expect("list");
            listed
                .iter()
                .filter_map(|p| p.parts().nth(4).map(|w| w.as_ref().to_string()))
                .collect::<Vec<_>>()
        };
        let hour = Duration::from_secs(3600);
        let young = sweep(&root, &table, &incarnation, SystemTime::now() - hour)
            .await
            .expect("sweep");
        assert_eq!(young, Swept::default());
        assert_eq!(parts_left().await.len(), 4);
        let old = sweep(&root, &table, &incarnation, SystemTime::now() + hour)
            .await
            .expect("sweep");
        assert_eq!(old, Swept { files: 1, bytes: 1 });
        assert_eq!(parts_left().await, [name(1), name(2), name(4)]);
    }

    #[test]
    fn an_undecoded_entry_keeps_every_write_it_may_name() {
        let id: u128 = 0x18ee_ec2e_fffd_74c5_0000_55a9_0038;
        let (other, name) = (name(id + 1), name(id));
        let spelled = Named {
            writes: HashSet::new(),
            undecoded: vec![Bytes::from(format!("..{name}.."))],
        };
        assert!(spelled.names(&name));
        assert!(!spelled.names(&other));
        let mut header = b"LSPARTS1".to_vec();
        header.extend_from_slice(&id.to_le_bytes());
        let binary = Named {
            writes: HashSet::new(),
            undecoded: vec![Bytes::from(header)],
        };
        assert!(binary.names(&name));
        assert!(!binary.names(&other));
        assert!(COMMIT_WITHIN < ORPHAN_AGE);
    }
}
