//! A compact set of primary keys (in the row format of the key columns),
//! numbered in the order they were first inserted.
//!
//! The union read of a primary-key table keeps one entry per key the store's
//! log touches, and a large backlog touches millions of keys. A
//! `HashMap<Box<[u8]>, _>` costs a heap allocation, a fat pointer and the
//! map's own entry per key; here the keys' bytes share one buffer, each key
//! costs an 8-byte offset, and the hash table holds 4-byte entry numbers.
//! Per-key data lives beside it in plain vectors indexed by the entry number.

use std::hash::{BuildHasher, RandomState};

use datafusion::error::{DataFusionError, Result as DFResult};
use hashbrown::HashTable;

/// Keys numbered `0..len()` in the order of their first insert.
#[derive(Default)]
pub(crate) struct KeyMap {
    hasher: RandomState,
    /// Entry numbers, found by the hash of their key.
    table: HashTable<u32>,
    /// Every key's bytes, back to back, in entry order.
    bytes: Vec<u8>,
    /// Where each entry's key starts in `bytes`; it ends where the next starts.
    starts: Vec<usize>,
}

impl std::fmt::Debug for KeyMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyMap")
            .field("keys", &self.len())
            .field("key_bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl KeyMap {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The bytes of entry `entry`.
    ///
    /// # Panics
    /// If `entry >= self.len()`: entry numbers only come from this map.
    pub(crate) fn key(&self, entry: usize) -> &[u8] {
        let start = self.starts[entry];
        let end = self
            .starts
            .get(entry + 1)
            .copied()
            .unwrap_or(self.bytes.len());
        &self.bytes[start..end]
    }

    /// The entry of `key`, if it is in the map.
    pub(crate) fn get(&self, key: &[u8]) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |&entry| self.key(entry as usize) == key)
            .map(|&entry| entry as usize)
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// The entry of `key`, and whether it is new. A new key gets the next
    /// entry number. Fails past `u32::MAX` keys.
    pub(crate) fn insert(&mut self, key: &[u8]) -> DFResult<(usize, bool)> {
        if let Some(entry) = self.get(key) {
            return Ok((entry, false));
        }
        let entry = self.starts.len();
        let number = u32::try_from(entry).map_err(|_| {
            DataFusionError::ResourcesExhausted(format!(
                "the union read tracks at most {} distinct keys of the store's log",
                u32::MAX
            ))
        })?;
        self.starts.push(self.bytes.len());
        self.bytes.extend_from_slice(key);
        let hash = self.hasher.hash_one(key);
        let Self {
            hasher,
            table,
            bytes,
            starts,
        } = self;
        // Rehashing reads each entry's key from the shared buffer.
        table.insert_unique(hash, number, |&other| {
            let other = other as usize;
            let start = starts[other];
            let end = starts.get(other + 1).copied().unwrap_or(bytes.len());
            hasher.hash_one(&bytes[start..end])
        });
        Ok((entry, true))
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.starts.capacity() * size_of::<usize>()
            + self.table.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keys_in_first_insert_order() {
        let mut map = KeyMap::new();
        assert!(map.is_empty());
        assert_eq!(map.insert(b"b").unwrap(), (0, true));
        assert_eq!(map.insert(b"").unwrap(), (1, true));
        assert_eq!(map.insert(b"abc").unwrap(), (2, true));
        assert_eq!(map.insert(b"b").unwrap(), (0, false));
        assert_eq!(map.insert(b"").unwrap(), (1, false));
        assert_eq!(map.len(), 3);
        assert_eq!(map.key(0), b"b");
        assert_eq!(map.key(1), b"");
        assert_eq!(map.key(2), b"abc");
        assert_eq!(map.get(b"abc"), Some(2));
        assert!(map.contains(b""));
        assert!(!map.contains(b"ab"));
        assert!(!map.contains(b"abcd"));
    }

    #[test]
    fn keeps_every_key_through_growth() {
        let mut map = KeyMap::new();
        for i in 0..100_000u32 {
            // Keys of different lengths, so a key is never another's prefix by accident.
            let key = format!("{i}:{}", "x".repeat((i % 7) as usize));
            assert_eq!(map.insert(key.as_bytes()).unwrap(), (i as usize, true));
        }
        for i in (0..100_000u32).rev() {
            let key = format!("{i}:{}", "x".repeat((i % 7) as usize));
            assert_eq!(map.get(key.as_bytes()), Some(i as usize));
            assert_eq!(map.key(i as usize), key.as_bytes());
        }
        assert!(!map.contains(b"100000:"));
        // Far below a boxed key per entry: buffer, offset and table slot.
        assert!(map.allocated_bytes() < 100_000 * 48, "{map:?}");
    }
}
