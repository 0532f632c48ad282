//! Typed keyed map state: per key, entries by sub-key.
//!
//! An entry is fetched from the host on its first use in a batch (one call
//! per (key, sub-key), since the SDK cannot know sub-keys in advance), kept
//! for the rest of the batch, and written back with the batch's other
//! changes in one call at its end.
//!
//! A key's whole map is listed from the host a page at a time, with the
//! batch's unsent writes laid over it, and cleared on the host at once
//! (the batch's unsent writes for the key are dropped with it).

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::marker::PhantomData;

use serde::{Serialize, de::DeserializeOwned};
use weir_key_slab::hash::{FastMap, FxHasher};

use crate::state::{MapPage, SlotValues, StateStore};
use crate::{Batch, Context, Decode, Encode, Error, Ttl};

/// One map state as the host exposes it.
pub trait RawMapState {
    fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<SlotValues, Error>;
    fn set_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error>;
    /// Writes entries addressed by key (`keys` delimited by `key_offsets`).
    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error>;
    /// Up to `limit` of the slot's key's entries whose sub-keys sort after
    /// `after`, in byte order.
    fn entries(&self, slot: u32, after: Option<&[u8]>, limit: u32) -> Result<MapPage, Error>;
    /// Removes every entry of the slots' keys.
    fn clear(&self, slots: &[u32]) -> Result<(), Error>;
}

/// A keyed map state: for the current key, values of type `V` (stored as
/// JSON) by sub-key. Use it when a key has many entries of which an event
/// touches few — one accumulator per window, say.
pub struct MapState<V> {
    name: String,
    ttl: Option<Ttl>,
    _type: PhantomData<fn() -> V>,
}

impl<V: Serialize + DeserializeOwned> MapState<V> {
    /// A handle on the map state called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        crate::schema::declare::<V>(&name, crate::schema::Stored::Map);
        Self::undeclared(name)
    }

    /// A handle not declared to `check-state` (see `ValueState::undeclared`).
    pub(crate) fn undeclared(name: String) -> Self {
        MapState { name, ttl: None, _type: PhantomData }
    }

    /// The same state, each entry expiring as `ttl` says (see [`Ttl`]): an
    /// expired entry reads as absent and is left out of a listing.
    pub fn with_ttl(self, ttl: Ttl) -> Self {
        crate::schema::expire(&self.name, crate::schema::Stored::Map, ttl);
        MapState { ttl: Some(ttl), ..self }
    }

    /// The current key's value under `sub_key`.
    pub fn get(&self, ctx: &mut Context<'_>, sub_key: impl Encode) -> Result<Option<V>, Error> {
        self.entry(ctx, sub_key)?.get(ctx)
    }

    /// Fetches the entries `(slot, sub_key)` a batch will use in one host
    /// call (from [`crate::Operator::prepare`]); entries already fetched in
    /// this batch are not fetched again.
    pub fn prefetch<K: Encode>(&self, batch: &mut Batch<'_>, entries: impl IntoIterator<Item = (u32, K)>) -> Result<(), Error> {
        batch.states.map(&self.name, self.ttl).prefetch(entries)
    }

    /// Sets the current key's value under `sub_key`.
    pub fn set(&self, ctx: &mut Context<'_>, sub_key: impl Encode, value: &V) -> Result<(), Error> {
        self.entry(ctx, sub_key)?.set(ctx, value)
    }

    /// Removes the current key's value under `sub_key`.
    pub fn remove(&self, ctx: &mut Context<'_>, sub_key: impl Encode) -> Result<(), Error> {
        let slot = ctx.key_slot()?;
        ctx.states.map(&self.name, self.ttl).write(slot, sub_key, None);
        Ok(())
    }

    /// The current key's entries, in byte order of their encoded sub-keys
    /// (text order for strings; numbers are encoded as decimal text, so
    /// `10` sorts before `9`), sub-keys decoded as `K`. Reads the host's
    /// entries a page at a time, with this call's writes over them.
    pub fn entries<K: Decode>(&self, ctx: &mut Context<'_>) -> Result<Vec<(K, V)>, Error> {
        let slot = ctx.key_slot()?;
        let listed = ctx.states.map(&self.name, self.ttl).list(slot)?;
        let decode = |(sub_key, value): (Vec<u8>, Vec<u8>)| Ok((K::decode(&sub_key)?, decode_value(&self.name, &value)?));
        listed.into_iter().map(decode).collect()
    }

    /// The current key's sub-keys, in the order of [`MapState::entries`].
    pub fn keys<K: Decode>(&self, ctx: &mut Context<'_>) -> Result<Vec<K>, Error> {
        let slot = ctx.key_slot()?;
        let listed = ctx.states.map(&self.name, self.ttl).list(slot)?;
        listed.into_iter().map(|(sub_key, _)| K::decode(&sub_key)).collect()
    }

    /// Whether the current key has no entry (one host call for at most a
    /// few entries, not a listing).
    pub fn is_empty(&self, ctx: &mut Context<'_>) -> Result<bool, Error> {
        let slot = ctx.key_slot()?;
        ctx.states.map(&self.name, self.ttl).is_empty(slot)
    }

    /// Removes every entry of the current key, whatever its sub-key — how
    /// a key's map is dropped when it is done with (in a timer, say), so
    /// that state does not grow with keys never seen again.
    pub fn clear(&self, ctx: &mut Context<'_>) -> Result<(), Error> {
        let slot = ctx.key_slot()?;
        ctx.states.map(&self.name, self.ttl).clear_key(slot)
    }

    /// The current key's entry under `sub_key`, found once for a read and
    /// a write (a fold: read the accumulator, write it back) in this call.
    pub fn entry(&self, ctx: &mut Context<'_>, sub_key: impl Encode) -> Result<MapEntry<'_, V>, Error> {
        let slot = ctx.key_slot()?;
        let index = ctx.states.map(&self.name, self.ttl).locate(slot, sub_key)?;
        Ok(MapEntry { state: self, index })
    }
}

/// An entry of a [`MapState`] for the current key, found by
/// [`MapState::entry`]; valid until the `process` or `on_timer` call returns.
pub struct MapEntry<'s, V> {
    state: &'s MapState<V>,
    index: usize,
}

/// A stored value of the map state `name`, read as `V`.
pub(crate) fn decode_value<V: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<V, Error> {
    crate::state::decode_stored("map state", name, bytes).map_err(Error::State)
}

impl<V: Serialize + DeserializeOwned> MapEntry<'_, V> {
    /// The entry's value, if it has one.
    pub fn get(&self, ctx: &mut Context<'_>) -> Result<Option<V>, Error> {
        let name = &self.state.name;
        ctx.states.map(name, self.state.ttl).value_at(self.index).map(|bytes| decode_value(name, bytes)).transpose()
    }

    /// Sets the entry's value.
    pub fn set(&self, ctx: &mut Context<'_>, value: &V) -> Result<(), Error> {
        let cache = ctx.states.map(&self.state.name, self.state.ttl);
        let mut encoded = std::mem::take(&mut cache.encoded);
        encoded.clear();
        let result = crate::codec::write_state_json(&mut encoded, value);
        if result.is_ok() {
            cache.write_at(self.index, Some(&encoded));
        }
        cache.encoded = encoded;
        result.map_err(|e| Error::State(format!("cannot encode map state `{}`: {e}", self.state.name)))
    }
}

/// No next entry in a hash chain.
const END: u32 = u32::MAX;

/// How many entries a listing asks the host for at a time.
const LIST_PAGE: u32 = 4096;

/// One (slot, sub-key) entry of a batch; its bytes live in the cache's arenas.
#[derive(Clone, Copy)]
struct Entry {
    slot: u32,
    /// The encoded sub-key: `sub_keys[sub_key.0 .. sub_key.1]`.
    sub_key: (u32, u32),
    /// The value: `values[v.0 .. v.1]`, or none.
    value: Option<(u32, u32)>,
    /// Written in this batch.
    changed: bool,
    /// The next entry whose (slot, sub-key) has the same hash.
    next: u32,
}

/// A map state's entries used in the current batch.
///
/// Sub-keys and values are kept in two byte arenas that are emptied, not
/// freed, between batches, and entries are found through a table from
/// their hash to a chain of entry indexes: a window operator touches an
/// entry per event, and allocating for each was a tenth of its time.
pub(crate) struct MapCache {
    pub name: String,
    raw: Box<dyn RawMapState>,
    entries: Vec<Entry>,
    by_hash: FastMap<u64, u32>,
    sub_keys: Vec<u8>,
    values: Vec<u8>,
    /// Scratch: the sub-key being looked up, and a value being encoded.
    scratch: Vec<u8>,
    pub(crate) encoded: Vec<u8>,
}

fn entry_hash(slot: u32, sub_key: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write_u32(slot);
    hasher.write(sub_key);
    hasher.finish()
}

impl MapCache {
    pub fn new(name: &str, raw: Box<dyn RawMapState>) -> Self {
        MapCache {
            name: name.to_owned(),
            raw,
            entries: Vec::new(),
            by_hash: FastMap::default(),
            sub_keys: Vec::new(),
            values: Vec::new(),
            scratch: Vec::new(),
            encoded: Vec::new(),
        }
    }

    fn bytes(arena: &[u8], (start, end): (u32, u32)) -> &[u8] {
        &arena[start as usize..end as usize]
    }

    /// Encodes `sub_key` into `self.scratch` and finds the entry (slot,
    /// sub-key): its index if the batch has it, and its hash.
    fn find(&mut self, slot: u32, sub_key: impl Encode) -> (Option<usize>, u64) {
        self.scratch.clear();
        sub_key.encode(&mut self.scratch);
        self.find_hashed(slot, entry_hash(slot, &self.scratch))
    }

    fn find_hashed(&self, slot: u32, hash: u64) -> (Option<usize>, u64) {
        let mut next = self.by_hash.get(&hash).copied().unwrap_or(END);
        while next != END {
            let entry = &self.entries[next as usize];
            if entry.slot == slot && Self::bytes(&self.sub_keys, entry.sub_key) == self.scratch.as_slice() {
                return (Some(next as usize), hash);
            }
            next = entry.next;
        }
        (None, hash)
    }

    /// Adds the entry (slot, `self.scratch`) with `value`; returns its index.
    fn insert(&mut self, slot: u32, hash: u64, value: Option<&[u8]>) -> usize {
        let start = self.sub_keys.len() as u32;
        self.sub_keys.extend_from_slice(&self.scratch);
        let index = self.entries.len() as u32;
        let next = self.by_hash.insert(hash, index).unwrap_or(END);
        let value = value.map(|bytes| self.store(bytes));
        self.entries.push(Entry { slot, sub_key: (start, self.sub_keys.len() as u32), value, changed: false, next });
        index as usize
    }

    /// Appends `bytes` to the value arena.
    fn store(&mut self, bytes: &[u8]) -> (u32, u32) {
        let start = self.values.len() as u32;
        self.values.extend_from_slice(bytes);
        (start, self.values.len() as u32)
    }

    /// The index of entry (slot, sub-key), fetched from the host if the
    /// batch has not used it yet.
    fn locate(&mut self, slot: u32, sub_key: impl Encode) -> Result<usize, Error> {
        Ok(match self.find(slot, sub_key) {
            (Some(index), _) => index,
            (None, hash) => {
                let value = self.raw.get(slot, &self.scratch)?;
                self.insert(slot, hash, value.as_deref())
            }
        })
    }

    fn value_at(&self, index: usize) -> Option<&[u8]> {
        self.entries[index].value.map(|range| Self::bytes(&self.values, range))
    }

    fn write_at(&mut self, index: usize, value: Option<&[u8]>) {
        let value = value.map(|bytes| self.store(bytes));
        let entry = &mut self.entries[index];
        entry.value = value;
        entry.changed = true;
    }

    fn prefetch<K: Encode>(&mut self, entries: impl IntoIterator<Item = (u32, K)>) -> Result<(), Error> {
        let mut wanted = Vec::new();
        let mut sub_keys = Vec::new();
        let mut offsets = vec![0u32];
        let mut slots = Vec::new();
        for (slot, sub_key) in entries {
            let (None, hash) = self.find(slot, sub_key) else { continue };
            // Inserted absent; the fetched value replaces that below.
            wanted.push(self.insert(slot, hash, None));
            slots.push(slot);
            sub_keys.extend_from_slice(&self.scratch);
            offsets.push(sub_keys.len() as u32);
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let values = self.raw.get_many(&slots, &sub_keys, &offsets)?;
        values.check_answer(wanted.len(), format_args!("map state `{}`", self.name))?;
        for (i, index) in wanted.into_iter().enumerate() {
            self.entries[index].value = values.value(i).map(|bytes| self.store(bytes));
        }
        Ok(())
    }

    fn write(&mut self, slot: u32, sub_key: impl Encode, value: Option<&[u8]>) {
        let index = match self.find(slot, sub_key) {
            (Some(index), _) => index,
            (None, hash) => self.insert(slot, hash, None),
        };
        self.write_at(index, value);
    }

    /// A page's entries, or an error naming the state if it is malformed.
    fn entries_of<'p>(&self, page: &'p MapPage) -> Result<Vec<(&'p [u8], &'p [u8])>, Error> {
        page.entries().ok_or_else(|| Error::State(format!("host sent a malformed page of map state `{}`", self.name)))
    }

    /// The slot's entries: the host's, with the batch's unsent writes over
    /// them, sorted by sub-key.
    fn list(&mut self, slot: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
        // The host's come sorted; the batch's writes, if any, are merged in.
        let mut listed = Vec::new();
        loop {
            let after = listed.last().map(|(sub_key, _): &(Vec<u8>, Vec<u8>)| sub_key.as_slice());
            let page = self.raw.entries(slot, after, LIST_PAGE)?;
            let entries = self.entries_of(&page)?;
            let empty = entries.is_empty();
            listed.extend(entries.into_iter().map(|(sub_key, value)| (sub_key.to_vec(), value.to_vec())));
            if !page.more || empty {
                break;
            }
        }
        let mut written = self.entries.iter().filter(|e| e.slot == slot && e.changed).peekable();
        if written.peek().is_none() {
            return Ok(listed);
        }
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = listed.into_iter().collect();
        for entry in written {
            let sub_key = Self::bytes(&self.sub_keys, entry.sub_key).to_vec();
            match entry.value {
                Some(range) => merged.insert(sub_key, Self::bytes(&self.values, range).to_vec()),
                None => merged.remove(&sub_key),
            };
        }
        Ok(merged.into_iter().collect())
    }

    /// Whether the slot has no entry: none written in this batch, and none
    /// on the host but those removed in it — asked for one more than the
    /// batch removed, of which at least one would then remain.
    fn is_empty(&mut self, slot: u32) -> Result<bool, Error> {
        let mut removed = Vec::new();
        for entry in self.entries.iter().filter(|e| e.slot == slot && e.changed) {
            if entry.value.is_some() {
                return Ok(false);
            }
            removed.push(Self::bytes(&self.sub_keys, entry.sub_key));
        }
        let page = self.raw.entries(slot, None, removed.len() as u32 + 1)?;
        let entries = self.entries_of(&page)?;
        if !entries.iter().all(|(sub_key, _)| removed.contains(sub_key)) {
            return Ok(false);
        }
        if !page.more {
            return Ok(true);
        }
        // The host sent fewer than asked (it bounds a page): list them all.
        Ok(self.list(slot)?.is_empty())
    }

    /// Clears the slot's map on the host; the batch's entries of the slot
    /// are absent from then on, and its unsent writes to them dropped.
    fn clear_key(&mut self, slot: u32) -> Result<(), Error> {
        self.raw.clear(&[slot])?;
        for entry in self.entries.iter_mut().filter(|e| e.slot == slot) {
            entry.value = None;
            entry.changed = false;
        }
        Ok(())
    }

    /// Writes the batch's changes back and forgets its entries.
    pub fn flush(&mut self) -> Result<(), Error> {
        let mut slots = Vec::new();
        let mut sub_keys = Vec::new();
        let mut offsets = vec![0u32];
        let mut values = SlotValues::empty();
        for entry in self.entries.iter().filter(|e| e.changed) {
            slots.push(entry.slot);
            sub_keys.extend_from_slice(Self::bytes(&self.sub_keys, entry.sub_key));
            offsets.push(sub_keys.len() as u32);
            values.push(entry.value.map(|range| Self::bytes(&self.values, range)));
        }
        self.clear();
        if slots.is_empty() {
            return Ok(());
        }
        self.raw.set_many(&slots, &sub_keys, &offsets, &values)
    }

    /// Forgets the batch's entries, keeping the memory for the next batch.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_hash.clear();
        self.sub_keys.clear();
        self.values.clear();
    }
}

impl StateStore {
    /// The cache of map state `name`, opened on first use (with `ttl`:
    /// the first opening's holds for every handle on the name).
    pub(crate) fn map(&mut self, name: &str, ttl: Option<Ttl>) -> &mut MapCache {
        let index = match self.maps.iter().position(|m| m.name == name) {
            Some(index) => index,
            None => {
                let raw = self.host.open_map(name, ttl);
                self.maps.push(MapCache::new(name, raw));
                self.maps.len() - 1
            }
        };
        &mut self.maps[index]
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use super::*;

    /// The host's side: entries by (slot, sub-key), and the calls made.
    #[derive(Default)]
    struct Host {
        entries: BTreeMap<(u32, Vec<u8>), Vec<u8>>,
        gets: usize,
        get_manys: usize,
        written: usize,
    }

    #[derive(Clone, Default)]
    struct FakeMap(Rc<RefCell<Host>>);

    impl RawMapState for FakeMap {
        fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
            let mut host = self.0.borrow_mut();
            host.gets += 1;
            Ok(host.entries.get(&(slot, sub_key.to_vec())).cloned())
        }
        fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<SlotValues, Error> {
            let mut host = self.0.borrow_mut();
            host.get_manys += 1;
            let mut values = SlotValues::empty();
            for (i, slot) in slots.iter().enumerate() {
                let sub_key = &sub_keys[offsets[i] as usize..offsets[i + 1] as usize];
                values.push(host.entries.get(&(*slot, sub_key.to_vec())).map(Vec::as_slice));
            }
            Ok(values)
        }
        fn set_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
            let mut host = self.0.borrow_mut();
            for (i, slot) in slots.iter().enumerate() {
                let key = (*slot, sub_keys[offsets[i] as usize..offsets[i + 1] as usize].to_vec());
                host.written += 1;
                match values.value(i) {
                    Some(value) => host.entries.insert(key, value.to_vec()),
                    None => host.entries.remove(&key),
                };
            }
            Ok(())
        }
        fn set_keyed(&self, _: &[u8], _: &[u32], _: &[u8], _: &[u32], _: &SlotValues) -> Result<(), Error> {
            unreachable!("map state writes back by slot")
        }
        fn entries(&self, slot: u32, after: Option<&[u8]>, limit: u32) -> Result<MapPage, Error> {
            let host = self.0.borrow();
            let listed = host.entries.range((slot, after.unwrap_or_default().to_vec())..).filter(|((s, sub_key), _)| {
                *s == slot && after.is_none_or(|after| sub_key.as_slice() > after)
            });
            Ok(MapPage::first(listed.map(|((_, k), v)| (k.as_slice(), v.as_slice())), limit as usize))
        }
        fn clear(&self, slots: &[u32]) -> Result<(), Error> {
            self.0.borrow_mut().entries.retain(|(slot, _), _| !slots.contains(slot));
            Ok(())
        }
    }

    fn value(cache: &mut MapCache, slot: u32, sub_key: &str) -> Option<String> {
        let index = cache.locate(slot, sub_key).unwrap();
        cache.value_at(index).map(|v| String::from_utf8(v.to_vec()).unwrap())
    }

    #[test]
    fn a_batch_reads_its_own_writes_and_writes_back_only_what_changed() {
        let host = FakeMap::default();
        let mut cache = MapCache::new("m", Box::new(host.clone()));
        for slot in 0..300 {
            for sub_key in ["1000", "2000", "30000000"] {
                cache.write(slot, sub_key, Some(format!("{slot}@{sub_key}").as_bytes()));
            }
        }
        cache.write(7, "2000", Some(b"again"));
        cache.write(8, "1000", None);
        assert_eq!(value(&mut cache, 7, "2000").as_deref(), Some("again"));
        assert_eq!(value(&mut cache, 8, "1000"), None);
        assert_eq!(value(&mut cache, 299, "30000000").as_deref(), Some("299@30000000"));
        assert_eq!(host.0.borrow().gets, 0, "written entries are not fetched");
        cache.flush().unwrap();
        assert_eq!(host.0.borrow().written, 900, "each changed entry once");
        assert_eq!(host.0.borrow().entries.len(), 899);

        // The next batch: nothing cached, nothing rewritten that is only read.
        assert_eq!(value(&mut cache, 7, "2000").as_deref(), Some("again"));
        assert_eq!(value(&mut cache, 8, "1000"), None);
        assert_eq!(host.0.borrow().gets, 2);
        cache.flush().unwrap();
        assert_eq!(host.0.borrow().written, 900);
    }

    #[test]
    fn prefetch_fetches_each_missing_entry_once_in_one_call() {
        let host = FakeMap::default();
        host.0.borrow_mut().entries.insert((1, b"10".to_vec()), b"ten".to_vec());
        let mut cache = MapCache::new("m", Box::new(host.clone()));
        cache.write(2, "20", Some(b"new"));
        cache.prefetch([(1, "10"), (1, "10"), (2, "20"), (3, "30")]).unwrap();
        assert_eq!(host.0.borrow().get_manys, 1);
        assert_eq!(value(&mut cache, 1, "10").as_deref(), Some("ten"));
        assert_eq!(value(&mut cache, 2, "20").as_deref(), Some("new"), "a write is not overwritten by a fetch");
        assert_eq!(value(&mut cache, 3, "30"), None);
        assert_eq!(host.0.borrow().gets, 0, "all prefetched");
    }

    fn listed(cache: &mut MapCache, slot: u32) -> Vec<(String, String)> {
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
        cache.list(slot).unwrap().into_iter().map(|(k, v)| (text(k), text(v))).collect()
    }

    #[test]
    fn a_listing_pages_through_the_host_and_lays_the_batchs_writes_over_it() {
        let host = FakeMap::default();
        for i in 0..10_000 {
            host.0.borrow_mut().entries.insert((1, format!("{i:05}").into_bytes()), b"stored".to_vec());
        }
        host.0.borrow_mut().entries.insert((2, b"other".to_vec()), b"key".to_vec());
        let mut cache = MapCache::new("m", Box::new(host.clone()));
        cache.write(1, "00003", Some(b"changed"));
        cache.write(1, "00004", None);
        cache.write(1, "zz", Some(b"new"));
        cache.write(2, "00005", Some(b"another key's"));
        let listed = listed(&mut cache, 1);
        assert_eq!(listed.len(), 10_000, "every stored entry (three pages), less one removed, plus one new");
        assert_eq!(listed[3], ("00003".into(), "changed".into()));
        assert_eq!(listed[4], ("00005".into(), "stored".into()), "the removed one is left out");
        assert_eq!(listed.last(), Some(&("zz".into(), "new".into())));
        assert!(listed.windows(2).all(|w| w[0].0 < w[1].0), "in sub-key order");
    }

    #[test]
    fn a_key_is_empty_when_the_batch_removed_all_it_held_and_wrote_nothing() {
        let host = FakeMap::default();
        for sub_key in ["a", "b"] {
            host.0.borrow_mut().entries.insert((1, sub_key.as_bytes().to_vec()), b"stored".to_vec());
        }
        let mut cache = MapCache::new("m", Box::new(host.clone()));
        assert!(cache.is_empty(2).unwrap(), "nothing stored");
        assert!(!cache.is_empty(1).unwrap());
        cache.write(1, "a", None);
        assert!(!cache.is_empty(1).unwrap(), "b is left");
        cache.write(1, "b", None);
        assert!(cache.is_empty(1).unwrap(), "both removed in the batch");
        cache.write(2, "c", Some(b"new"));
        assert!(!cache.is_empty(2).unwrap(), "written in the batch");
    }

    #[test]
    fn clearing_a_key_drops_its_stored_entries_and_its_unsent_writes_only() {
        let host = FakeMap::default();
        host.0.borrow_mut().entries.insert((1, b"a".to_vec()), b"stored".to_vec());
        host.0.borrow_mut().entries.insert((2, b"a".to_vec()), b"kept".to_vec());
        let mut cache = MapCache::new("m", Box::new(host.clone()));
        cache.write(1, "b", Some(b"unsent"));
        cache.write(2, "b", Some(b"sent later"));
        assert_eq!(value(&mut cache, 1, "a").as_deref(), Some("stored"));
        cache.clear_key(1).unwrap();
        assert_eq!(listed(&mut cache, 1), vec![]);
        assert_eq!(value(&mut cache, 1, "a"), None, "a cached entry is gone too");
        cache.write(1, "c", Some(b"after"));
        cache.flush().unwrap();
        let stored: Vec<_> = host.0.borrow().entries.keys().cloned().collect();
        assert_eq!(stored, [(1, b"c".to_vec()), (2, b"a".to_vec()), (2, b"b".to_vec())]);
    }

    #[test]
    fn entries_with_the_same_hash_are_told_apart() {
        let mut cache = MapCache::new("m", Box::new(FakeMap::default()));
        for (slot, sub_key, value) in [(1, "a", "first"), (1, "b", "second"), (2, "a", "third")] {
            cache.scratch = sub_key.as_bytes().to_vec();
            let (None, _) = cache.find_hashed(slot, 42) else { panic!("not there yet") };
            cache.insert(slot, 42, Some(value.as_bytes()));
        }
        for (slot, sub_key, value) in [(1, "a", "first"), (1, "b", "second"), (2, "a", "third")] {
            cache.scratch = sub_key.as_bytes().to_vec();
            let (Some(index), _) = cache.find_hashed(slot, 42) else { panic!("{slot}/{sub_key} is there") };
            let found = cache.entries[index].value.map(|range| MapCache::bytes(&cache.values, range));
            assert_eq!(found, Some(value.as_bytes()));
        }
    }
}
