//! The opendal layer under the file IO of a warehouse's tables
//! ([`super::commit`] on S3, [`super::local`] on local disk): it forwards
//! every operation to the storage service, except that a write of a
//! snapshot or schema file ([`super::create_only`]) is checked by the
//! warehouse's [`Rules`] and made only if the name is free, and writes and
//! renames may be the rules' own.
//!
//! On storage that shows a file while it is written (a file system, see
//! [`Rules::shows_partial_writes`]), a table's metadata files
//! ([`super::published_whole`]: schemas, snapshots, hints, tags,
//! consumers, of every branch) are written aside and published whole
//! ([`Whole`]): a write that fails part way (a full disk) or a process that
//! dies during it leaves at most a temporary that no reader lists, never a
//! short file under the name. paimon writes schemas, tags and consumers in
//! place, and a 0-byte `schema-1` left by a failed `ALTER` made every later
//! statement on the table fail.

use std::future::Future;
use std::sync::Arc;

use opendal::raw::*;
use opendal::*;

use super::{create_only, published_whole};

/// What a warehouse's commits may do that plain storage would do otherwise.
pub(super) trait Rules: std::fmt::Debug + Send + Sync + Unpin + 'static {
    /// Refuses a write of `path`, or lets it through (every write, unless
    /// the rules say otherwise).
    fn check_write(&self, _path: &str) -> Result<()> {
        Ok(())
    }

    /// Whether a reader may see a file of the storage while it is written,
    /// and a failed write may leave it short (a file system): then the
    /// metadata files are written aside and renamed ([`Rules::rename`])
    /// onto their names complete. An object store's put (multipart uploads
    /// included) shows nothing until it is complete, and nothing when it
    /// fails.
    fn shows_partial_writes(&self) -> bool {
        false
    }

    /// Opens the write of `path` (checked, and made create-only when its
    /// name is [`create_only`]) on `inner`; the rules may make it their own.
    fn write(
        &self,
        inner: &Servicer,
        ctx: &OperationContext,
        path: &str,
        args: OpWrite,
    ) -> Result<oio::Writer> {
        inner.write(ctx, path, args)
    }

    /// Renames `from` to `to` on `inner` (never over a snapshot); the
    /// rules may make it their own.
    fn rename(
        &self,
        inner: &Servicer,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> impl Future<Output = Result<RpRename>> + Send {
        async move { inner.rename(ctx, from, to, args).await }
    }
}

/// The layer of [`Rules`] `R`.
#[derive(Debug)]
pub(super) struct Guard<R>(pub(super) Arc<R>);

impl<R: Rules> Layer for Guard<R> {
    fn apply_service(&self, inner: Servicer) -> Servicer {
        Arc::new(Guarded {
            inner,
            rules: Arc::clone(&self.0),
        })
    }
}

#[derive(Debug)]
struct Guarded<R> {
    inner: Servicer,
    rules: Arc<R>,
}

impl<R: Rules> Service for Guarded<R> {
    type Reader = oio::Reader;
    type Writer = oio::Writer;
    type Lister = oio::Lister;
    type Deleter = oio::Deleter;
    type Copier = oio::Copier;

    fn info(&self) -> ServiceInfo {
        self.inner.info()
    }

    fn capability(&self) -> Capability {
        self.inner.capability()
    }

    async fn create_dir(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpCreateDir,
    ) -> Result<RpCreateDir> {
        self.inner.create_dir(ctx, path, args).await
    }

    async fn stat(&self, ctx: &OperationContext, path: &str, args: OpStat) -> Result<RpStat> {
        self.inner.stat(ctx, path, args).await
    }

    fn read(&self, ctx: &OperationContext, path: &str, args: OpRead) -> Result<Self::Reader> {
        self.inner.read(ctx, path, args)
    }

    fn write(&self, ctx: &OperationContext, path: &str, args: OpWrite) -> Result<Self::Writer> {
        self.rules.check_write(path)?;
        let args = if create_only(path) {
            args.with_if_not_exists(true)
        } else {
            args
        };
        if self.rules.shows_partial_writes() && published_whole(path) && !args.append() {
            return Ok(Box::new(Whole {
                inner: Arc::clone(&self.inner),
                rules: Arc::clone(&self.rules),
                ctx: ctx.clone(),
                path: path.to_string(),
                args,
                bytes: Vec::new(),
            }));
        }
        self.rules.write(&self.inner, ctx, path, args)
    }

    fn delete(&self, ctx: &OperationContext) -> Result<Self::Deleter> {
        self.inner.delete(ctx)
    }

    fn list(&self, ctx: &OperationContext, path: &str, args: OpList) -> Result<Self::Lister> {
        self.inner.list(ctx, path, args)
    }

    fn copy(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpCopy,
        opts: OpCopier,
    ) -> Result<Self::Copier> {
        self.inner.copy(ctx, from, to, args, opts)
    }

    async fn rename(
        &self,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> Result<RpRename> {
        self.rules.rename(&self.inner, ctx, from, to, args).await
    }

    async fn presign(
        &self,
        ctx: &OperationContext,
        path: &str,
        args: OpPresign,
    ) -> Result<RpPresign> {
        self.inner.presign(ctx, path, args).await
    }
}

/// The write of a metadata file that is published whole: its bytes (a few
/// kilobytes: a schema, a snapshot, a tag), kept until the close writes
/// them to a temporary beside the file ([`super::temporary_beside`], which
/// orphan removal knows should a crash leave it) and renames that onto the
/// name through the rules: never replacing a [`create_only`] name (a
/// schema, a snapshot: the rename fails when it is taken), replacing the
/// others as paimon's own writes do (a hint, a tag, a consumer). A write
/// that fails, or is dropped unclosed, leaves the name as it was.
struct Whole<R> {
    inner: Servicer,
    rules: Arc<R>,
    ctx: OperationContext,
    path: String,
    args: OpWrite,
    bytes: Vec<u8>,
}

impl<R: Rules> Whole<R> {
    async fn publish(&self, temp: &str) -> Result<()> {
        let mut writer =
            self.inner
                .write(&self.ctx, temp, self.args.clone().with_if_not_exists(true))?;
        oio::Write::write(&mut writer, Buffer::from(self.bytes.clone())).await?;
        oio::Write::close(&mut writer).await?;
        self.rules
            .rename(
                &self.inner,
                &self.ctx,
                temp,
                &self.path,
                OpRename::default(),
            )
            .await?;
        Ok(())
    }
}

impl<R: Rules> oio::Write for Whole<R> {
    async fn write(&mut self, bs: Buffer) -> Result<()> {
        self.bytes.extend_from_slice(&bs.to_bytes());
        Ok(())
    }

    async fn close(&mut self) -> Result<Metadata> {
        let temp = super::temporary_beside(std::path::Path::new(&self.path))
            .to_string_lossy()
            .into_owned();
        if let Err(e) = self.publish(&temp).await {
            // What the failed write left under the temporary name (a
            // published one is gone: renamed).
            if let Ok(mut deleter) = self.inner.delete(&self.ctx) {
                let _ = oio::Delete::delete(&mut deleter, &temp, OpDelete::default()).await;
                let _ = oio::Delete::close(&mut deleter).await;
            }
            return Err(e);
        }
        Ok(Metadata::new(EntryMode::FILE).with_content_length(self.bytes.len() as u64))
    }

    async fn abort(&mut self) -> Result<()> {
        self.bytes.clear();
        Ok(())
    }
}
