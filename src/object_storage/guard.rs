//! The opendal layer under the file IO of a warehouse's tables
//! ([`super::commit`] on S3, [`super::local`] on local disk): it forwards
//! every operation to the storage service, except that a write of a
//! snapshot or schema file ([`super::create_only`]) is checked by the
//! warehouse's [`Rules`] and made only if the name is free, and writes and
//! renames may be the rules' own.

use std::future::Future;
use std::sync::Arc;

use opendal::raw::*;
use opendal::*;

use super::create_only;

/// What a warehouse's commits may do that plain storage would do otherwise.
pub(super) trait Rules: std::fmt::Debug + Send + Sync + Unpin + 'static {
    /// Refuses a write of `path`, or lets it through.
    fn check_write(&self, path: &str) -> Result<()>;

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

    /// Renames `from` to `to` on `inner` (never over a snapshot).
    fn rename(
        &self,
        inner: &Servicer,
        ctx: &OperationContext,
        from: &str,
        to: &str,
        args: OpRename,
    ) -> impl Future<Output = Result<RpRename>> + Send;
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
