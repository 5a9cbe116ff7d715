//! A catalog's store, created on first use.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::{LakestreamStore, StoreContext, StoreRegistry};
use crate::error::{Error, Result};

/// The store a catalog names, created the first time it is needed.
///
/// Creation that fails is not remembered, so the next use tries again; the
/// catalog itself (listing, reading `t`, turning the mode off) never waits for
/// the store. Every call through [`Self::call`] is bounded by the timeout.
#[derive(Debug)]
pub struct LazyStore {
    identifier: String,
    registry: Arc<StoreRegistry>,
    context: StoreContext,
    timeout: Duration,
    store: Mutex<Option<Arc<dyn LakestreamStore>>>,
}

impl LazyStore {
    /// A store named `identifier`, to be created through `registry`.
    pub fn new(
        identifier: String,
        registry: Arc<StoreRegistry>,
        context: StoreContext,
        timeout: Duration,
    ) -> Self {
        Self {
            identifier,
            registry,
            context,
            timeout,
            store: Mutex::new(None),
        }
    }

    /// The identifier of the store.
    pub fn identifier(&self) -> &str {
        &self.identifier
    }

    /// The columns the store's tiering adds to Paimon tables, from its
    /// factory: the store itself is not created for this.
    pub fn hidden_columns(&self) -> Vec<String> {
        self.registry
            .get(&self.identifier)
            .map(|factory| {
                factory
                    .hidden_columns()
                    .iter()
                    .map(|c| c.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the store's tiering writes its change log as it is, from its
    /// factory (see [`super::StoreFactory::tiers_its_log`]).
    pub fn tiers_its_log(&self) -> bool {
        self.registry
            .get(&self.identifier)
            .map_or(true, |factory| factory.tiers_its_log())
    }

    /// The bound on each store call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The store, created now if this is its first use or the last try failed.
    pub async fn get(&self) -> Result<Arc<dyn LakestreamStore>> {
        let mut slot = self.store.lock().await;
        if let Some(store) = slot.as_ref() {
            return Ok(Arc::clone(store));
        }
        let factory = self.registry.get(&self.identifier)?;
        let store = self
            .bounded("create the store", factory.create(self.context.clone()))
            .await
            .map_err(|e| match e {
                e @ (Error::StoreTimeout { .. } | Error::StoreUnavailable { .. }) => e,
                other => Error::StoreUnavailable {
                    store: self.identifier.clone(),
                    reason: other.to_string(),
                },
            })?;
        *slot = Some(Arc::clone(&store));
        Ok(store)
    }

    /// Runs `f` against the store, within the timeout.
    pub async fn call<'a, T, F, Fut>(&'a self, operation: &str, f: F) -> Result<T>
    where
        F: FnOnce(Arc<dyn LakestreamStore>) -> Fut,
        Fut: Future<Output = Result<T>> + 'a,
    {
        let store = self.get().await?;
        self.bounded(operation, f(store)).await
    }

    pub(crate) async fn bounded<T>(
        &self,
        operation: &str,
        f: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(result) => result,
            Err(_) => Err(Error::StoreTimeout {
                store: self.identifier.clone(),
                operation: operation.to_string(),
                timeout: self.timeout,
            }),
        }
    }
}
