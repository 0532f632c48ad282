//! Sub-keys by key for the map states a plugin lists
//! (`map-state.entries`), kept by the in-memory backend, whose hash tables
//! hold no order and cannot find one key's entries without a full scan.
//!
//! A state's index is built from its table on its first listing and kept
//! up to date by every put and delete from then on, so a state never
//! listed — a window operator's — costs nothing, and one that is listed
//! pays a sorted set insert per new entry.

use std::collections::{BTreeSet, HashMap};

use super::StateId;
use super::map_keys::split_map_entry;

/// For each listed map state: by key prefix (see [`super::map_keys`]),
/// the sub-keys stored, sorted.
#[derive(Debug, Default)]
pub struct MapIndexes {
    states: HashMap<StateId, HashMap<Vec<u8>, BTreeSet<Vec<u8>>>>,
}

impl MapIndexes {
    /// Notes that `stored` (an entry's storage key) was added to `state`.
    pub fn inserted(&mut self, state: StateId, stored: &[u8]) {
        if let Some(index) = self.states.get_mut(&state) {
            add(index, stored);
        }
    }

    /// Notes that `stored` was removed from `state`.
    pub fn removed(&mut self, state: StateId, stored: &[u8]) {
        let Some(index) = self.states.get_mut(&state) else { return };
        let Some((prefix, sub_key)) = split_map_entry(stored) else { return };
        if let Some(sub_keys) = index.get_mut(prefix) {
            sub_keys.remove(sub_key);
            if sub_keys.is_empty() {
                index.remove(prefix);
            }
        }
    }

    /// The sorted sub-keys of the key whose prefix is `prefix`, building
    /// `state`'s index from `stored` (every storage key it holds) first if
    /// it has none.
    pub fn sub_keys<'i, 'k>(
        &'i mut self,
        state: StateId,
        prefix: &[u8],
        stored: impl Iterator<Item = &'k [u8]>,
    ) -> Option<&'i BTreeSet<Vec<u8>>> {
        let index = self.states.entry(state).or_insert_with(|| {
            let mut index = HashMap::new();
            stored.for_each(|key| add(&mut index, key));
            index
        });
        index.get(prefix)
    }
}

fn add(index: &mut HashMap<Vec<u8>, BTreeSet<Vec<u8>>>, stored: &[u8]) {
    if let Some((prefix, sub_key)) = split_map_entry(stored) {
        index.entry(prefix.to_vec()).or_default().insert(sub_key.to_vec());
    }
}
