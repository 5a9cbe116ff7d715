//! A compact set of primary keys (in the row format of the key columns),
//! numbered in the order they were first inserted.
//!
//! The union read of a primary-key table keeps one entry per key the store's
//! log touches, and a large backlog touches millions of keys. A
//! `HashMap<Box<[u8]>, _>` costs a heap allocation, a fat pointer and the
//! map's own entry per key; here the keys' bytes share one buffer, each key
//! costs an 8-byte offset and its 8-byte hash, and the hash table holds
//! 4-byte entry numbers. Per-key data lives beside it in plain vectors
//! indexed by the entry number.
//!
//! A key is hashed once per call (an insert probes the table once), and
//! never again: the table grows with the kept hashes. The hasher is ahash,
//! as DataFusion's hash tables use, not std's SipHash.

use std::hash::BuildHasher;

use datafusion::common::hash_utils::RandomState;
use datafusion::error::{DataFusionError, Result as DFResult};
use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

/// Keys numbered `0..len()` in the order of their first insert.
pub(crate) struct KeyMap<S = RandomState> {
    hasher: S,
    /// Entry numbers, found by the hash of their key.
    table: HashTable<u32>,
    /// Every key's bytes, back to back, in entry order.
    bytes: Vec<u8>,
    /// Where each entry's key starts in `bytes`; it ends where the next starts.
    starts: Vec<usize>,
    /// Each entry's hash: the table grows without hashing a key again, and
    /// a probe compares bytes only where the hashes agree.
    hashes: Vec<u64>,
}

impl<S> std::fmt::Debug for KeyMap<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyMap")
            .field("keys", &self.starts.len())
            .field("key_bytes", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl Default for KeyMap {
    fn default() -> Self {
        Self::with_hasher(RandomState::default())
    }
}

impl KeyMap {
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

/// The bytes of entry `entry` of a map's `bytes` and `starts`.
///
/// # Panics
/// If `entry >= starts.len()`: entry numbers only come from the map.
fn key_of<'a>(bytes: &'a [u8], starts: &[usize], entry: usize) -> &'a [u8] {
    let start = starts[entry];
    let end = starts.get(entry + 1).copied().unwrap_or(bytes.len());
    &bytes[start..end]
}

impl<S: BuildHasher> KeyMap<S> {
    pub(crate) fn with_hasher(hasher: S) -> Self {
        Self {
            hasher,
            table: HashTable::new(),
            bytes: Vec::new(),
            starts: Vec::new(),
            hashes: Vec::new(),
        }
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
        key_of(&self.bytes, &self.starts, entry)
    }

    /// The entry of `key`, if it is in the map.
    pub(crate) fn get(&self, key: &[u8]) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        self.table
            .find(hash, |&entry| {
                let entry = entry as usize;
                self.hashes[entry] == hash && self.key(entry) == key
            })
            .map(|&entry| entry as usize)
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// The entry of `key`, and whether it is new. A new key gets the next
    /// entry number. Fails past `u32::MAX` keys.
    pub(crate) fn insert(&mut self, key: &[u8]) -> DFResult<(usize, bool)> {
        let hash = self.hasher.hash_one(key);
        let Self {
            table,
            bytes,
            starts,
            hashes,
            ..
        } = self;
        let found = table.entry(
            hash,
            |&entry| {
                let entry = entry as usize;
                hashes[entry] == hash && key_of(bytes, starts, entry) == key
            },
            |&entry| hashes[entry as usize],
        );
        match found {
            Entry::Occupied(entry) => Ok((*entry.get() as usize, false)),
            Entry::Vacant(vacant) => {
                let entry = starts.len();
                let number = u32::try_from(entry).map_err(|_| {
                    DataFusionError::ResourcesExhausted(format!(
                        "the union read tracks at most {} distinct keys of the store's log",
                        u32::MAX
                    ))
                })?;
                vacant.insert(number);
                starts.push(bytes.len());
                bytes.extend_from_slice(key);
                hashes.push(hash);
                Ok((entry, true))
            }
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.starts.capacity() * size_of::<usize>()
            + self.hashes.capacity() * size_of::<u64>()
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
    /// Counts the keys it hashes.
    #[derive(Default, Clone)]
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl BuildHasher for Counting {
        type Hasher = std::hash::DefaultHasher;
        fn build_hasher(&self) -> Self::Hasher {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::hash::DefaultHasher::new()
        }
    }

    #[test]
    fn hashes_each_key_once_per_call_and_never_to_grow() {
        let counting = Counting::default();
        let mut map = KeyMap::with_hasher(counting.clone());
        let hashed = || counting.0.load(std::sync::atomic::Ordering::Relaxed);
        // Past several growths of the table.
        for i in 0..10_000u32 {
            map.insert(&i.to_le_bytes()).unwrap();
        }
        assert_eq!(hashed(), 10_000);
        for i in 0..10_000u32 {
            assert_eq!(map.insert(&i.to_le_bytes()).unwrap(), (i as usize, false));
        }
        assert_eq!(hashed(), 20_000);
        assert_eq!(map.get(&7u32.to_le_bytes()), Some(7));
        assert_eq!(hashed(), 20_001);
    }
}
