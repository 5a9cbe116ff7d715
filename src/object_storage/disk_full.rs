//! A full disk under a local warehouse's file IO, for tests (built with
//! `cfg(test)` or the `testing` feature only): while a [`DiskFull`] is
//! held, every write of a file under its directory through [`super::local`]'s
//! file IO stores the first `room` bytes of the file and then fails, as a
//! write on a full disk does (`ENOSPC`), and so does every new name linked
//! there (a directory with no room for another entry). It sits under the
//! guard layer, as the storage: what the guard makes of a failed write is
//! what is tested.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use opendal::raw::*;
use opendal::*;

use super::guard::Rules;

/// The directories whose disk is full, with the room each file gets.
static FULL: Mutex<Vec<(u64, PathBuf, u64)>> = Mutex::new(Vec::new());

/// A full disk under a directory while it is held (see the module docs).
#[derive(Debug)]
pub struct DiskFull {
    id: u64,
}

impl DiskFull {
    /// Fills the disk under `dir`: each file written under it through a
    /// local warehouse's file IO gets `room` bytes, then the write fails.
    pub fn new(dir: &Path, room: u64) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        FULL.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, dir.to_path_buf(), room));
        Self { id }
    }
}

impl Drop for DiskFull {
    fn drop(&mut self) {
        FULL.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _, _)| *id != self.id);
    }
}

/// The room a file at `path` (relative to the root `/`) gets, if its disk
/// is full.
fn room_for(path: &str) -> Option<u64> {
    let file = super::absolute(path);
    FULL.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, dir, _)| file.starts_with(dir))
        .map(|(_, _, room)| *room)
        .min()
}

/// The error of a new name for a file at `file` (a link), if its disk is
/// full.
pub(super) fn new_name_fails(file: &Path) -> Option<std::io::Error> {
    let full = FULL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(_, dir, _)| file.starts_with(dir));
    // ENOSPC.
    full.then(|| std::io::Error::from_raw_os_error(28))
}

/// The storage's rules: writes under a full disk are cut short.
#[derive(Debug)]
pub(super) struct FullDisks;

impl Rules for FullDisks {
    fn write(
        &self,
        inner: &Servicer,
        ctx: &OperationContext,
        path: &str,
        args: OpWrite,
    ) -> Result<oio::Writer> {
        let writer = inner.write(ctx, path, args)?;
        Ok(match room_for(path) {
            Some(room) => Box::new(Short {
                inner: writer,
                room,
                written: 0,
            }),
            None => writer,
        })
    }
}

/// A write that stores `room` bytes, then fails.
struct Short {
    inner: oio::Writer,
    room: u64,
    written: u64,
}

impl oio::Write for Short {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        let left = self.room.saturating_sub(self.written);
        let len = bs.len() as u64;
        if len <= left {
            self.written += len;
            return oio::Write::write(&mut self.inner, bs).await;
        }
        if left > 0 {
            let fits = bs.slice(0..left as usize);
            oio::Write::write(&mut self.inner, fits).await?;
            self.written += left;
        }
        // What reached the file stays there, as after a real ENOSPC.
        let _ = oio::Write::close(&mut self.inner).await;
        Err(Error::new(
            ErrorKind::Unexpected,
            "No space left on device (os error 28) (a test's full disk)",
        ))
    }

    async fn close(&mut self) -> Result<Metadata> {
        oio::Write::close(&mut self.inner).await
    }

    async fn abort(&mut self) -> Result<()> {
        oio::Write::abort(&mut self.inner).await
    }
}
