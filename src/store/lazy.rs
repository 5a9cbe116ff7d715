//! A catalog's store, created on first use.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use paimon::catalog::Catalog;
use paimon::table::Table;
use tokio::sync::Mutex;

use super::{Capabilities, LakestreamStore, StoreContext, StoreRegistry};
use crate::error::{Error, Result};
use crate::options::{CatalogStoreOptions, STORE_BINDING};

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
    /// The store `options` name (`lakestream.store`), to be created through
    /// `registry` for the tables of `catalog`, whose options are
    /// `catalog_options`; `None` when they name no store. Every catalog and
    /// external table gets its store here.
    pub(crate) fn for_catalog(
        options: &CatalogStoreOptions,
        registry: Arc<StoreRegistry>,
        catalog_options: HashMap<String, String>,
        catalog: Arc<dyn Catalog>,
    ) -> Option<Arc<Self>> {
        let identifier = options.store()?;
        Some(Arc::new(Self {
            identifier: identifier.to_string(),
            registry,
            context: StoreContext {
                options: options.store_options().clone(),
                catalog_options,
                catalog,
            },
            timeout: options.timeout(),
            store: Mutex::new(None),
        }))
    }

    /// The identifier of the store.
    pub fn identifier(&self) -> &str {
        &self.identifier
    }

    /// What the store can do, from its factory: the store itself is not
    /// created for this. A store no factory is registered for (its creation
    /// fails, naming it) counts as the default.
    pub fn capabilities(&self) -> Capabilities {
        self.registry
            .get(&self.identifier)
            .map(|factory| factory.capabilities())
            .unwrap_or_default()
    }

    /// The store binding a table turned on through this store records in
    /// [`STORE_BINDING`]: `<identifier>:<where its data lives>` (the `local`
    /// store's root URL, Fluss's bootstrap servers), or the identifier alone
    /// for a store whose location this crate does not know. Known without
    /// creating the store.
    pub fn binding(&self) -> Result<String> {
        let factory = self.registry.get(&self.identifier)?;
        Ok(match factory.location(&self.context)? {
            Some(location) => format!("{}:{location}", self.identifier),
            None => self.identifier.clone(),
        })
    }

    /// Whether the store binding `recorded` names this store: the same
    /// identifier, and a location the store's factory counts as its own.
    pub fn is_bound_as(&self, recorded: &str) -> Result<bool> {
        let ours = self.binding()?;
        let (recorded_store, recorded_at) = split_binding(recorded);
        let (our_store, our_at) = split_binding(&ours);
        if recorded_store != our_store {
            return Ok(false);
        }
        let factory = self.registry.get(&self.identifier)?;
        Ok(factory.same_location(recorded_at, our_at))
    }

    /// Refuses `operation` on `table` when the table records a store binding
    /// other than this store's: two stores serving one table would each take
    /// writes the other's reads never show, and tier them separately. A
    /// table without a recorded binding (turned on before bindings were
    /// recorded) is served.
    pub fn check_binding(&self, operation: &str, table: &Table) -> Result<()> {
        let Some(recorded) = table.schema().options().get(STORE_BINDING) else {
            return Ok(());
        };
        let ours = self.binding()?;
        if self.is_bound_as(recorded)? {
            return Ok(());
        }
        Err(Error::StoreBindingMismatch {
            operation: operation.to_string(),
            table: table.identifier().full_name(),
            recorded: recorded.clone(),
            ours,
        })
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
                // A misspelt store option is not an outage.
                e if e.kind().is_users_to_fix() => e,
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

/// A store binding's identifier and location (empty when it names none).
pub(crate) fn split_binding(binding: &str) -> (&str, &str) {
    binding.split_once(':').unwrap_or((binding, ""))
}

#[cfg(test)]
mod tests {
    use super::split_binding;

    #[test]
    fn bindings_split_at_the_first_colon() {
        assert_eq!(split_binding("local:file:///a/"), ("local", "file:///a/"));
        assert_eq!(split_binding("fluss:h1:1,h2:1"), ("fluss", "h1:1,h2:1"));
        assert_eq!(split_binding("memory"), ("memory", ""));
    }
}
