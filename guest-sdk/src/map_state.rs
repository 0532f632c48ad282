//! Typed keyed map state: per key, entries by sub-key.
//!
//! An entry is fetched from the host on its first use in a batch (one call
//! per (key, sub-key), since the SDK cannot know sub-keys in advance), kept
//! for the rest of the batch, and written back with the batch's other
//! changes in one call at its end.

use std::collections::HashMap;
use std::marker::PhantomData;

use serde::{Serialize, de::DeserializeOwned};

use crate::state::{SlotValues, StateStore};
use crate::{Context, Encode, Error};

/// One map state as the host exposes it.
pub(crate) trait RawMapState {
    fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    fn set_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error>;
}

/// A keyed map state: for the current key, values of type `V` (stored as
/// JSON) by sub-key. Use it when a key has many entries of which an event
/// touches few — one accumulator per window, say.
pub struct MapState<V> {
    name: String,
    _type: PhantomData<fn() -> V>,
}

impl<V: Serialize + DeserializeOwned> MapState<V> {
    /// A handle on the map state called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        MapState { name: name.into(), _type: PhantomData }
    }

    /// The current key's value under `sub_key`.
    pub fn get(&self, ctx: &mut Context<'_>, sub_key: impl Encode) -> Result<Option<V>, Error> {
        let slot = ctx.key_slot()?;
        let cache = ctx.states.map(&self.name);
        let bytes = cache.entry(slot, sub_key)?;
        bytes
            .as_deref()
            .map(|b| serde_json::from_slice(b))
            .transpose()
            .map_err(|e| Error::State(format!("map state `{}` holds a value this plugin cannot read ({e})", self.name)))
    }

    /// Sets the current key's value under `sub_key`.
    pub fn set(&self, ctx: &mut Context<'_>, sub_key: impl Encode, value: &V) -> Result<(), Error> {
        let slot = ctx.key_slot()?;
        let encoded = serde_json::to_vec(value)
            .map_err(|e| Error::State(format!("cannot encode map state `{}`: {e}", self.name)))?;
        ctx.states.map(&self.name).write(slot, sub_key, Some(encoded));
        Ok(())
    }

    /// Removes the current key's value under `sub_key`.
    pub fn remove(&self, ctx: &mut Context<'_>, sub_key: impl Encode) -> Result<(), Error> {
        let slot = ctx.key_slot()?;
        ctx.states.map(&self.name).write(slot, sub_key, None);
        Ok(())
    }
}

/// A map state's entries used in the current batch.
pub(crate) struct MapCache {
    pub name: String,
    raw: Box<dyn RawMapState>,
    /// (slot, sub-key) → (value, changed in this batch).
    entries: HashMap<(u32, Vec<u8>), (Option<Vec<u8>>, bool)>,
}

impl MapCache {
    pub fn new(name: &str, raw: Box<dyn RawMapState>) -> Self {
        MapCache { name: name.to_owned(), raw, entries: HashMap::new() }
    }

    fn entry(&mut self, slot: u32, sub_key: impl Encode) -> Result<&Option<Vec<u8>>, Error> {
        let mut key = Vec::new();
        sub_key.encode(&mut key);
        let entry = match self.entries.entry((slot, key)) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let value = self.raw.get(slot, &entry.key().1)?;
                entry.insert((value, false))
            }
        };
        Ok(&entry.0)
    }

    fn write(&mut self, slot: u32, sub_key: impl Encode, value: Option<Vec<u8>>) {
        let mut key = Vec::new();
        sub_key.encode(&mut key);
        self.entries.insert((slot, key), (value, true));
    }

    /// Writes the batch's changes back and forgets its entries.
    pub fn flush(&mut self) -> Result<(), Error> {
        let mut slots = Vec::new();
        let mut sub_keys = Vec::new();
        let mut offsets = vec![0u32];
        let mut values = SlotValues { present: Vec::new(), data: Vec::new(), offsets: vec![0] };
        for ((slot, key), (value, changed)) in self.entries.drain() {
            if !changed {
                continue;
            }
            slots.push(slot);
            sub_keys.extend_from_slice(&key);
            offsets.push(sub_keys.len() as u32);
            values.present.push(value.is_some());
            values.data.extend_from_slice(value.as_deref().unwrap_or_default());
            values.offsets.push(values.data.len() as u32);
        }
        if slots.is_empty() {
            return Ok(());
        }
        self.raw.set_many(&slots, &sub_keys, &offsets, &values)
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl StateStore {
    /// The cache of map state `name`, opened on first use.
    fn map(&mut self, name: &str) -> &mut MapCache {
        let index = match self.maps.iter().position(|m| m.name == name) {
            Some(index) => index,
            None => {
                let raw = self.host.open_map(name);
                self.maps.push(MapCache::new(name, raw));
                self.maps.len() - 1
            }
        };
        &mut self.maps[index]
    }
}
