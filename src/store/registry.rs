//! The registry of store factories, keyed by identifier.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::StoreFactory;
use crate::error::{Error, Result};

/// Store factories by identifier. A context owns one; stores are created
/// through it, so a test store is found exactly as a real one is.
#[derive(Debug, Default)]
pub struct StoreRegistry {
    factories: RwLock<BTreeMap<String, Arc<dyn StoreFactory>>>,
}

impl StoreRegistry {
    /// A registry with no factories.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `factory` under its identifier, replacing one registered before.
    pub fn register(&self, factory: Arc<dyn StoreFactory>) {
        let mut factories = self.factories.write().unwrap_or_else(|e| e.into_inner());
        factories.insert(factory.identifier().to_string(), factory);
    }

    /// The factory registered as `identifier`; the error lists the registered ones.
    pub fn get(&self, identifier: &str) -> Result<Arc<dyn StoreFactory>> {
        let factories = self.factories.read().unwrap_or_else(|e| e.into_inner());
        factories
            .get(identifier)
            .cloned()
            .ok_or_else(|| Error::UnknownStore {
                store: identifier.to_string(),
                registered: factories.keys().cloned().collect(),
            })
    }
}
