//! The in-memory backend: one hash table per state.
//!
//! Each entry keeps the key and the value in one allocation (`key ++ value`)
//! next to the key's hash: a lookup touches the table and one heap block,
//! compares hashes before bytes, and a put over an existing value rewrites
//! it in place. Callers hash a key once ([`HashedKey`]) for both the read
//! and the write of a batch.

use hashbrown::HashTable;

use super::{HashedKey, KeyedStateBackend, StateId};

#[derive(Debug)]
struct Entry {
    hash: u64,
    key_len: u32,
    /// The key's bytes followed by the value's.
    bytes: Vec<u8>,
}

impl Entry {
    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.key_len as usize..]
    }

    fn matches(&self, key: &HashedKey<'_>) -> bool {
        self.hash == key.hash && self.key() == key.key
    }
}

/// Keyed state in hash tables, one per state id.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    states: Vec<HashTable<Entry>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn table_mut(&mut self, state: StateId) -> &mut HashTable<Entry> {
        let index = state.0 as usize;
        if self.states.len() <= index {
            self.states.resize_with(index + 1, HashTable::new);
        }
        &mut self.states[index]
    }
}

impl KeyedStateBackend for MemoryBackend {
    fn get(&self, state: StateId, key: HashedKey<'_>) -> Option<&[u8]> {
        let table = self.states.get(state.0 as usize)?;
        table.find(key.hash, |e| e.matches(&key)).map(Entry::value)
    }

    fn put(&mut self, state: StateId, key: HashedKey<'_>, value: &[u8]) {
        let table = self.table_mut(state);
        match table.find_mut(key.hash, |e| e.matches(&key)) {
            Some(entry) => {
                entry.bytes.truncate(entry.key_len as usize);
                entry.bytes.extend_from_slice(value);
            }
            None => {
                let mut bytes = Vec::with_capacity(key.key.len() + value.len());
                bytes.extend_from_slice(key.key);
                bytes.extend_from_slice(value);
                let entry = Entry { hash: key.hash, key_len: key.key.len() as u32, bytes };
                table.insert_unique(key.hash, entry, |e| e.hash);
            }
        }
    }

    fn delete(&mut self, state: StateId, key: HashedKey<'_>) {
        if let Some(table) = self.states.get_mut(state.0 as usize)
            && let Ok(entry) = table.find_entry(key.hash, |e| e.matches(&key))
        {
            entry.remove();
        }
    }

    fn len(&self) -> usize {
        self.states.iter().map(HashTable::len).sum()
    }

    fn entries(&self, state: StateId) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self.states.get(state.0 as usize) {
            Some(table) => Box::new(table.iter().map(|e| (e.key(), e.value()))),
            None => Box::new(std::iter::empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_per_state() {
        let mut backend = MemoryBackend::new();
        let (a, b) = (StateId(0), StateId(1));
        let k = HashedKey::new(b"k");
        backend.put(a, k, b"1");
        backend.put(b, k, b"2");
        backend.put(a, k, b"three");
        backend.put(a, HashedKey::new(b"other"), b"x");
        assert_eq!(backend.get(a, k), Some(&b"three"[..]));
        assert_eq!(backend.get(b, k), Some(&b"2"[..]));
        assert_eq!(backend.len(), 3);
        backend.delete(a, k);
        assert_eq!(backend.get(a, k), None);
        assert_eq!(backend.get(a, HashedKey::new(b"other")), Some(&b"x"[..]));
        assert_eq!(backend.get(StateId(7), k), None);
        assert_eq!(backend.entries(b).collect::<Vec<_>>(), vec![(&b"k"[..], &b"2"[..])]);
    }

    #[test]
    fn many_keys_survive_growth() {
        let mut backend = MemoryBackend::new();
        let keys: Vec<String> = (0..10_000).map(|i| format!("key-{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            backend.put(StateId(0), HashedKey::new(key.as_bytes()), i.to_string().as_bytes());
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(backend.get(StateId(0), HashedKey::new(key.as_bytes())), Some(i.to_string().as_bytes()));
        }
    }
}
