//! A bounded write-back layer of recently used entries, in front of a
//! backend whose updates are expensive (RocksDB).
//!
//! Keyed state is update-heavy: a count reads and rewrites its key for every
//! batch. The layer keeps the entries it has seen — absent ones too — in one
//! hash table per state, found by the key's hash computed once per batch
//! ([`HashedKey`]), and remembers which changed. The owner writes the
//! changed entries out ([`HotEntries::changes`]) when the layer is
//! full, before snapshots and before iteration, and then may forget them.

use hashbrown::HashTable;

use super::{HashedKey, StateId};

/// What an entry costs beyond its key and value, for the memory bound: its
/// table slot (~56 bytes) and the allocator's share of the two heap blocks
/// for key and value.
const ENTRY_OVERHEAD: usize = 128;

/// One known entry: its key, and its value (`None`: known to be absent).
pub struct HotEntry {
    hash: u64,
    pub group: u16,
    pub key: Box<[u8]>,
    pub value: Option<Vec<u8>>,
    changed: bool,
}

impl HotEntry {
    fn matches(&self, key: &HashedKey<'_>) -> bool {
        self.hash == key.table_hash() && *self.key == *key.key
    }
}

/// Entries by state and key, with the memory they take.
pub struct HotEntries {
    states: Vec<HashTable<HotEntry>>,
    bytes: usize,
    limit: usize,
    /// Some entry changed since the last [`HotEntries::mark_written`]: a
    /// write-back before each listing of a map costs nothing when none did.
    dirty: bool,
}

impl HotEntries {
    /// An empty layer that reports itself full past `limit` bytes.
    pub fn new(limit: usize) -> Self {
        HotEntries { states: Vec::new(), bytes: 0, limit, dirty: false }
    }

    /// The bytes past which the layer reports itself full.
    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether the layer holds more than its limit.
    pub fn is_full(&self) -> bool {
        self.bytes > self.limit
    }

    /// The entry of `state` under `key`: `None` if the layer does not know
    /// it, `Some(None)` if it knows there is none.
    pub fn get(&self, state: StateId, key: &HashedKey<'_>) -> Option<Option<&[u8]>> {
        let table = self.states.get(state.0 as usize)?;
        table.find(key.table_hash(), |e| e.matches(key)).map(|e| e.value.as_deref())
    }

    /// Remembers what the backend holds under `key` (unchanged).
    pub fn remember(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<Vec<u8>>) {
        self.insert(state, key, value, false);
    }

    /// Sets (`Some`) or deletes (`None`) the entry under `key`.
    pub fn write(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<&[u8]>) {
        self.dirty = true;
        let table = self.table_mut(state);
        let Some(entry) = table.find_mut(key.table_hash(), |e| e.matches(key)) else {
            self.insert(state, key, value.map(<[u8]>::to_vec), true);
            return;
        };
        let old_len = entry.value.as_ref().map_or(0, Vec::len);
        match (&mut entry.value, value) {
            (Some(stored), Some(value)) => {
                stored.clear();
                stored.extend_from_slice(value);
            }
            (stored, value) => *stored = value.map(<[u8]>::to_vec),
        }
        entry.changed = true;
        self.bytes = (self.bytes + value.map_or(0, <[u8]>::len)).saturating_sub(old_len);
    }

    /// Every changed entry, with its state, in no particular order; once
    /// they are written out, [`HotEntries::mark_written`].
    pub fn changes(&self) -> impl Iterator<Item = (StateId, &HotEntry)> {
        self.states
            .iter()
            .enumerate()
            .flat_map(|(index, table)| table.iter().filter(|e| e.changed).map(move |e| (StateId(index as u32), e)))
    }

    /// Whether an entry changed since the last [`HotEntries::mark_written`].
    pub fn has_changes(&self) -> bool {
        self.dirty
    }

    /// Marks every entry unchanged.
    pub fn mark_written(&mut self) {
        self.dirty = false;
        self.states.iter_mut().flat_map(HashTable::iter_mut).for_each(|e| e.changed = false);
    }

    /// Forgets every entry (once the changed ones are written out).
    pub fn clear(&mut self) {
        self.states.iter_mut().for_each(HashTable::clear);
        self.bytes = 0;
    }

    fn insert(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<Vec<u8>>, changed: bool) {
        self.bytes += ENTRY_OVERHEAD + key.key.len() + value.as_ref().map_or(0, Vec::len);
        let hash = key.table_hash();
        let entry = HotEntry { hash, group: key.group, key: key.key.into(), value, changed };
        self.table_mut(state).insert_unique(hash, entry, |e| e.hash);
    }

    fn table_mut(&mut self, state: StateId) -> &mut HashTable<HotEntry> {
        let index = state.0 as usize;
        if self.states.len() <= index {
            self.states.resize_with(index + 1, HashTable::new);
        }
        &mut self.states[index]
    }
}
