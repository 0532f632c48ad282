//! The in-memory backend: one hash map per state.

use rustc_hash::FxHashMap;

use super::{KeyedStateBackend, StateId};

/// Keyed state in hash maps, one per state id. Keys and values are owned
/// byte strings; a put over an existing value reuses its buffer.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    states: Vec<FxHashMap<Box<[u8]>, Vec<u8>>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn map_mut(&mut self, state: StateId) -> &mut FxHashMap<Box<[u8]>, Vec<u8>> {
        let index = state.0 as usize;
        if self.states.len() <= index {
            self.states.resize_with(index + 1, FxHashMap::default);
        }
        &mut self.states[index]
    }
}

impl KeyedStateBackend for MemoryBackend {
    fn get(&self, state: StateId, key: &[u8]) -> Option<&[u8]> {
        self.states.get(state.0 as usize)?.get(key).map(Vec::as_slice)
    }

    fn put(&mut self, state: StateId, key: &[u8], value: &[u8]) {
        let map = self.map_mut(state);
        match map.get_mut(key) {
            Some(existing) => {
                existing.clear();
                existing.extend_from_slice(value);
            }
            None => {
                map.insert(key.into(), value.to_vec());
            }
        }
    }

    fn delete(&mut self, state: StateId, key: &[u8]) {
        if let Some(map) = self.states.get_mut(state.0 as usize) {
            map.remove(key);
        }
    }

    fn len(&self) -> usize {
        self.states.iter().map(|m| m.len()).sum()
    }

    fn entries(&self, state: StateId) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self.states.get(state.0 as usize) {
            Some(map) => Box::new(map.iter().map(|(k, v)| (k.as_ref(), v.as_slice()))),
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
        backend.put(a, b"k", b"1");
        backend.put(b, b"k", b"2");
        backend.put(a, b"k", b"3");
        assert_eq!(backend.get(a, b"k"), Some(&b"3"[..]));
        assert_eq!(backend.get(b, b"k"), Some(&b"2"[..]));
        assert_eq!(backend.len(), 2);
        backend.delete(a, b"k");
        assert_eq!(backend.get(a, b"k"), None);
        assert_eq!(backend.get(StateId(7), b"k"), None);
        assert_eq!(backend.entries(b).count(), 1);
    }
}
