//! Typed keyed map state: per key, entries by sub-key.
//!
//! An entry is fetched from the host on its first use in a batch (one call
//! per (key, sub-key), since the SDK cannot know sub-keys in advance), kept
//! for the rest of the batch, and written back with the batch's other
//! changes in one call at its end.

use std::marker::PhantomData;

use serde::{Serialize, de::DeserializeOwned};

use crate::hash::FastMap;
use crate::state::{SlotValues, StateStore};
use crate::{Batch, Context, Encode, Error};

/// One map state as the host exposes it.
pub(crate) trait RawMapState {
    fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<SlotValues, Error>;
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
        let name = name.into();
        crate::schema::declare::<V>(&name, true);
        MapState { name, _type: PhantomData }
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

    /// Fetches the entries `(slot, sub_key)` a batch will use in one host
    /// call (from [`crate::Operator::prepare`]); entries already fetched in
    /// this batch are not fetched again.
    pub fn prefetch<K: Encode>(&self, batch: &mut Batch<'_>, entries: impl IntoIterator<Item = (u32, K)>) -> Result<(), Error> {
        batch.states.map(&self.name).prefetch(entries)
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
    /// Entry key (slot, 4 bytes little-endian, then the encoded sub-key) →
    /// (value, changed in this batch). One flat key, so that a lookup
    /// borrows a reused buffer instead of allocating.
    entries: FastMap<Vec<u8>, (Option<Vec<u8>>, bool)>,
    scratch: Vec<u8>,
}

/// The cache key of `(slot, sub_key)`, written into `buffer`.
fn entry_key(buffer: &mut Vec<u8>, slot: u32, sub_key: impl Encode) {
    buffer.clear();
    buffer.extend_from_slice(&slot.to_le_bytes());
    sub_key.encode(buffer);
}

/// The slot and sub-key of a cache key.
fn split_key(key: &[u8]) -> (u32, &[u8]) {
    let (slot, sub_key) = key.split_at(4);
    (u32::from_le_bytes(slot.try_into().expect("4 bytes")), sub_key)
}

impl MapCache {
    pub fn new(name: &str, raw: Box<dyn RawMapState>) -> Self {
        MapCache { name: name.to_owned(), raw, entries: FastMap::default(), scratch: Vec::new() }
    }

    fn entry(&mut self, slot: u32, sub_key: impl Encode) -> Result<&Option<Vec<u8>>, Error> {
        entry_key(&mut self.scratch, slot, sub_key);
        if !self.entries.contains_key(self.scratch.as_slice()) {
            let value = self.raw.get(slot, &self.scratch[4..])?;
            self.entries.insert(self.scratch.clone(), (value, false));
        }
        Ok(&self.entries[self.scratch.as_slice()].0)
    }

    fn prefetch<K: Encode>(&mut self, entries: impl IntoIterator<Item = (u32, K)>) -> Result<(), Error> {
        let mut wanted: Vec<Vec<u8>> = Vec::new();
        let mut sub_keys = Vec::new();
        let mut offsets = vec![0u32];
        let mut slots = Vec::new();
        for (slot, sub_key) in entries {
            entry_key(&mut self.scratch, slot, sub_key);
            if self.entries.contains_key(self.scratch.as_slice()) {
                continue;
            }
            // A placeholder marks it wanted; the fetched value replaces it.
            self.entries.insert(self.scratch.clone(), (None, false));
            slots.push(slot);
            sub_keys.extend_from_slice(&self.scratch[4..]);
            offsets.push(sub_keys.len() as u32);
            wanted.push(self.scratch.clone());
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let values = self.raw.get_many(&slots, &sub_keys, &offsets)?;
        for (i, key) in wanted.into_iter().enumerate() {
            self.entries.insert(key, (values.value(i).map(<[u8]>::to_vec), false));
        }
        Ok(())
    }

    fn write(&mut self, slot: u32, sub_key: impl Encode, value: Option<Vec<u8>>) {
        entry_key(&mut self.scratch, slot, sub_key);
        match self.entries.get_mut(self.scratch.as_slice()) {
            Some(entry) => *entry = (value, true),
            None => {
                self.entries.insert(self.scratch.clone(), (value, true));
            }
        }
    }

    /// Writes the batch's changes back and forgets its entries.
    pub fn flush(&mut self) -> Result<(), Error> {
        let mut slots = Vec::new();
        let mut sub_keys = Vec::new();
        let mut offsets = vec![0u32];
        let mut values = SlotValues::empty();
        for (key, (value, changed)) in self.entries.drain() {
            if !changed {
                continue;
            }
            let (slot, sub_key) = split_key(&key);
            slots.push(slot);
            sub_keys.extend_from_slice(sub_key);
            offsets.push(sub_keys.len() as u32);
            values.push(value.as_deref());
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
    pub(crate) fn map(&mut self, name: &str) -> &mut MapCache {
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
