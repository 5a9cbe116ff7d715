//! Tags against snapshot expiry: a tag is acknowledged only over a
//! snapshot whose files expiry keeps.
//!
//! A tag is a copy of a snapshot's file in `tag/`; expiry keeps the files
//! of every tag it lists ([`super::expire`]). A tag written after an expiry
//! listed the tags, over a snapshot that expiry removes, would name files
//! it deletes: time travel to it fails, and the tag is listed all the same.
//! Neither side waits for the other; each writes, then reads what the other
//! writes (a fence):
//!
//! - Expiry, once it knows which snapshots go (those before `before`),
//!   writes `tag/expiring-<run>` saying so, and only then lists the tags.
//!   When it has deleted them, it removes its file and every other one whose
//!   snapshots are all gone (a run that crashed left its file: its
//!   snapshots were doomed, and the next run finishes them).
//! - [`create_tag`] writes the tag, and only then reads the `expiring-`
//!   files: if one covers the tagged snapshot, or the snapshot's file is
//!   gone (an expiry finished meanwhile) and no other tag holds it, the tag
//!   is deleted again and the call fails ([`Error::TagOverExpiredSnapshot`]).
//!
//! Either expiry wrote its file before the tag was checked (and the tag is
//! refused), or it listed the tags after the tag was written (and keeps its
//! files). Paimon's and Java Paimon's readers list `tag/` for files named
//! `tag-*` only, so they never see these files; orphan removal never
//! touches `tag/`.

use serde::{Deserialize, Serialize};

use paimon::spec::Snapshot;
use paimon::table::Table;

use crate::error::{Error, Result};

/// The names of expiry's fence files in `tag/`.
const EXPIRING_PREFIX: &str = "expiring-";

/// What an expiry's fence file says.
#[derive(Debug, Serialize, Deserialize)]
struct Expiring {
    /// Every snapshot before this one is being expired.
    before: i64,
}

/// An expiry's fence file, written before it listed the tags.
#[derive(Debug)]
pub(crate) struct Fence {
    path: String,
}

fn tag_dir(table: &Table) -> String {
    table.tag_manager().tag_directory()
}

/// Writes the fence of an expiry that removes the snapshots before
/// `before`. Called before the expiry lists the tags.
pub(crate) async fn announce(table: &Table, before: i64) -> Result<Fence> {
    let dir = tag_dir(table);
    let path = format!("{dir}/{EXPIRING_PREFIX}{}", uuid::Uuid::new_v4());
    let bytes = serde_json::to_vec(&Expiring { before })
        .map_err(|e| Error::Internal(format!("cannot encode an expiry's fence: {e}")))?;
    let file_io = table.file_io();
    let written = async {
        file_io.mkdirs(&format!("{dir}/")).await?;
        file_io
            .new_output(&path)?
            .write(bytes::Bytes::from(bytes))
            .await
    }
    .await;
    if written.is_err() {
        // Nothing is left that would refuse every tag (a fence that cannot
        // be read covers every snapshot).
        let _ = file_io.delete_file(&path).await;
    }
    written.map_err(|e| Error::MaintenanceFailed {
        table: table.identifier().full_name(),
        reason: format!(
            "cannot write '{path}', which tells tags being created that these snapshots go: \
             {e}; nothing was deleted"
        ),
    })?;
    Ok(Fence { path })
}

/// Removes `fence` (an expiry that deleted nothing), best effort: one left
/// behind refuses tags of snapshots before its `before` until an expiry
/// removes it.
pub(crate) async fn withdraw(table: &Table, fence: Fence) {
    let _ = table.file_io().delete_file(&fence.path).await;
}

/// After an expiry: removes `fence` and every fence whose snapshots are
/// all gone now (those before `earliest`, the first snapshot left), left
/// by runs that crashed or ran beside this one.
pub(crate) async fn lift(table: &Table, fence: Fence, earliest: i64) -> Result<()> {
    super::delete(table, &fence.path).await?;
    for (path, expiring) in fences(table).await? {
        if expiring.is_some_and(|e| e.before <= earliest) {
            super::delete(table, &path).await?;
        }
    }
    Ok(())
}

/// Every fence in the table's `tag/`, with what it says: `None` for one
/// whose content cannot be read (being written right now), which counts as
/// covering every snapshot.
async fn fences(table: &Table) -> Result<Vec<(String, Option<Expiring>)>> {
    let file_io = table.file_io();
    let dir = tag_dir(table);
    let statuses = match file_io.list_status(&dir).await {
        Ok(statuses) => statuses,
        // No `tag/` yet: no tag, no fence.
        Err(_) if !file_io.exists(&dir).await.unwrap_or(true) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for status in statuses {
        if status.is_dir {
            continue;
        }
        let name = status.path.rsplit('/').next().unwrap_or(&status.path);
        if !name.starts_with(EXPIRING_PREFIX) {
            continue;
        }
        let expiring = match file_io.new_input(&status.path)?.read().await {
            Ok(bytes) => serde_json::from_slice(&bytes).ok(),
            // Removed since it was listed: its expiry is done.
            Err(_) if !file_io.exists(&status.path).await.unwrap_or(true) => continue,
            Err(e) => return Err(e.into()),
        };
        out.push((status.path, expiring));
    }
    Ok(out)
}

/// What a tag was created over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTag {
    /// The tagged snapshot.
    pub snapshot_id: i64,
}

/// Creates tag `name` of `table` over snapshot `snapshot_id` (the latest
/// when `None`), as Paimon's `create_tag` does, and checks that expiry
/// keeps its files (see the module docs): if not, the tag is deleted again
/// and the answer is [`Error::TagOverExpiredSnapshot`].
pub async fn create_tag(table: &Table, name: &str, snapshot_id: Option<i64>) -> Result<CreatedTag> {
    create_tag_with_retention(table, name, snapshot_id, None).await
}

/// [`create_tag`], with the tag's retention (`time_retained`, Paimon's
/// duration format) as Paimon's `create_tag_with_retention` takes it: the
/// catalog API's tags are made here too
/// ([`crate::catalog::LakeStreamCatalog`]), as `CALL sys.create_tag`'s are.
///
/// A table of a REST catalog has its tags made by the catalog's server,
/// which keeps and lists them ([`create_on_server`]).
pub async fn create_tag_with_retention(
    table: &Table,
    name: &str,
    snapshot_id: Option<i64>,
    time_retained: Option<&str>,
) -> Result<CreatedTag> {
    if table.rest_env().is_some() {
        return create_on_server(table, name, snapshot_id, time_retained).await;
    }
    let tags = table.tag_manager();
    if tags.tag_exists(name).await? {
        return Err(paimon::Error::TagAlreadyExist {
            tag_name: name.to_string(),
        }
        .into());
    }
    let snapshot = match resolve(table, snapshot_id).await {
        Ok(snapshot) => snapshot,
        Err(Error::Paimon(paimon::Error::SnapshotNotExist { snapshot_id: id })) => {
            return Err(missing(table, name, id).await)
        }
        Err(e) => return Err(e),
    };
    if let Err(e) = tags
        .create_with_retention(name, &snapshot, time_retained)
        .await
    {
        // A tag is created only if its name is free: another call made
        // this one first.
        if tags.tag_exists(name).await.unwrap_or(false) {
            return Err(paimon::Error::TagAlreadyExist {
                tag_name: name.to_string(),
            }
            .into());
        }
        return Err(e.into());
    }
    if let Err(e) = check_kept(table, name, snapshot.id()).await {
        if let Err(removed) = tags.delete(name).await {
            return Err(Error::MaintenanceFailed {
                table: table.identifier().full_name(),
                reason: format!(
                    "{e}; and removing the tag again failed ({removed}): delete '{}' by hand",
                    tags.tag_path(name)
                ),
            });
        }
        return Err(e);
    }
    Ok(CreatedTag {
        snapshot_id: snapshot.id(),
    })
}

/// Asks the REST catalog's server of `table` to make tag `name`, as
/// Paimon's `RESTCatalog::create_tag_with_retention` does, and then which
/// snapshot it tagged.
async fn create_on_server(
    table: &Table,
    name: &str,
    snapshot_id: Option<i64>,
    time_retained: Option<&str>,
) -> Result<CreatedTag> {
    let Some(env) = table.rest_env() else {
        return Err(Error::Internal(format!(
            "table '{}' is not a REST catalog's",
            table.identifier().full_name()
        )));
    };
    let identifier = table.identifier();
    let api = env.api();
    let server_error = |error: paimon::Error| -> Error {
        use paimon::api::RestError;
        match error {
            paimon::Error::RestApi {
                source: RestError::AlreadyExists { .. },
            } => paimon::Error::TagAlreadyExist {
                tag_name: name.to_string(),
            }
            .into(),
            paimon::Error::RestApi {
                source:
                    RestError::NoSuchResource {
                        resource_type: Some(kind),
                        ..
                    },
            } if kind.eq_ignore_ascii_case("snapshot") => match snapshot_id {
                Some(snapshot_id) => paimon::Error::SnapshotNotExist { snapshot_id }.into(),
                None => Error::InvalidStatement {
                    statement: "CALL sys.create_tag".to_string(),
                    reason: format!("table '{}' has no snapshot to tag", identifier.full_name()),
                },
            },
            other => other.into(),
        }
    };
    api.create_tag_with_retention(identifier, name, snapshot_id, time_retained)
        .await
        .map_err(server_error)?;
    let made = api.get_tag(identifier, name).await.map_err(server_error)?;
    Ok(CreatedTag {
        snapshot_id: made.snapshot.id(),
    })
}

/// The snapshot a tag of `snapshot_id` copies: the snapshot, or (expired)
/// another tag's copy of it, as Paimon resolves it.
async fn resolve(table: &Table, snapshot_id: Option<i64>) -> Result<Snapshot> {
    let snapshots = table.snapshot_manager();
    let Some(id) = snapshot_id else {
        return snapshots
            .get_latest_snapshot()
            .await?
            .ok_or_else(|| Error::InvalidStatement {
                statement: "CALL sys.create_tag".to_string(),
                reason: format!(
                    "table '{}' has no snapshot to tag",
                    table.identifier().full_name()
                ),
            });
    };
    match snapshots.get_snapshot(id).await {
        Ok(snapshot) => Ok(snapshot),
        Err(paimon::Error::SnapshotNotExist { .. }) => {
            match list_tags(&table.tag_manager())
                .await?
                .into_iter()
                .map(|(_, snapshot)| snapshot)
                .find(|snapshot| snapshot.id() == id)
            {
                Some(snapshot) => Ok(snapshot),
                None => Err(paimon::Error::SnapshotNotExist { snapshot_id: id }.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The refusal of tag `name` over snapshot `id`, which is neither a
/// snapshot nor held by a tag: expired (older than the earliest snapshot
/// left), the refusal names the tag and the snapshots a tag can take;
/// never made (newer than the latest), it is paimon's own "does not exist".
async fn missing(table: &Table, name: &str, id: i64) -> Error {
    let not_exist = || paimon::Error::SnapshotNotExist { snapshot_id: id }.into();
    match table.snapshot_manager().earliest_snapshot_id().await {
        Ok(Some(earliest)) if id < earliest => Error::TagOverExpiredSnapshot {
            table: table.identifier().full_name(),
            tag: name.to_string(),
            reason: format!("snapshot {id} was expired"),
            newer: format!(" ({earliest} or newer)"),
        },
        Ok(_) => not_exist(),
        Err(e) => e.into(),
    }
}

/// Whether expiry keeps the files of snapshot `id`, which tag `name` was
/// just written over: no expiry's fence covers it, and it is still a
/// snapshot (or another tag holds it).
async fn check_kept(table: &Table, name: &str, id: i64) -> Result<()> {
    let refused = |reason: String, newer: Option<i64>| Error::TagOverExpiredSnapshot {
        table: table.identifier().full_name(),
        tag: name.to_string(),
        reason,
        newer: newer.map_or_else(String::new, |n| format!(" ({n} or newer)")),
    };
    for (path, expiring) in fences(table).await? {
        match expiring {
            Some(Expiring { before }) if before > id => {
                return Err(refused(
                    format!(
                        "snapshot {id} is being expired (an expiry running now removes the \
                         snapshots before {before})"
                    ),
                    Some(before),
                ))
            }
            Some(_) => {}
            None => {
                return Err(refused(
                    format!(
                        "an expiry is starting and which snapshots it removes cannot be read \
                         yet from '{path}' (if no expiry runs, the file is damaged: delete it)"
                    ),
                    None,
                ))
            }
        }
    }
    match table.snapshot_manager().get_snapshot(id).await {
        Ok(_) => return Ok(()),
        Err(paimon::Error::SnapshotNotExist { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let held = list_tags(&table.tag_manager())
        .await?
        .into_iter()
        .any(|(tag, snapshot)| tag != name && snapshot.id() == id);
    if held {
        return Ok(());
    }
    let earliest = table.snapshot_manager().earliest_snapshot_id().await?;
    Err(refused(
        format!("snapshot {id} expired while the tag was being written"),
        earliest,
    ))
}

/// Every tag `tags` lists, with its snapshot; one deleted between the
/// listing and its read (a tag refused by [`create_tag`], or
/// deleted) is left out, where paimon's `list_all` fails.
pub(crate) async fn list_tags(tags: &paimon::table::TagManager) -> Result<Vec<(String, Snapshot)>> {
    let mut out = Vec::new();
    for name in tags.list_all_names().await? {
        if let Some(snapshot) = tags.get(&name).await? {
            out.push((name, snapshot));
        }
    }
    Ok(out)
}
