//! Host side of the `state` interface: keyed value state scoped to the keys
//! of the batch being processed.
//!
//! During a `process` call the host knows the distinct keys of the batch
//! (by slot, see [`BatchKeys`]); `get-all`, `get-many` and `set-many`
//! translate slots to keys and go to the operator's [`KeyedStateBackend`];
//! `set-keyed` takes keys, which must be in the subtask's key groups.
//! Outside a call, or for an input that is not keyed, there are no current
//! keys and every access by slot fails — a plugin can never touch another
//! key's state.

use std::cell::OnceCell;
use std::sync::Arc;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use wasmtime::component::{HasData, Resource, ResourceTable};

use super::bindings::InputBatch;
use super::bindings::weir::operator::state::{Host, HostMapState, HostValueState, MapPage, SlotValues, TimeToLive};
use super::bindings::weir::operator::types::StateError;
use crate::dataflow::KeyNumbered;
use crate::prefetch::{Lookahead, PREFETCH_AHEAD};
use crate::state::{
    HashedKey, KeyGroupRange, KeyedStateBackend, MAP_PREFIX, StateError as BackendError, StateId, StateRegistry, expiry_after,
    key_hash, map_entry_hash, map_entry_key, map_entry_key_hashed, now_ms, split_expiry, with_expiry,
};

/// The host's representation of a guest's `value-state` resource.
#[derive(Debug, Clone, Copy)]
pub struct ValueStateHandle(OpenState);

/// The host's representation of a guest's `map-state` resource.
#[derive(Debug, Clone, Copy)]
pub struct MapStateHandle(OpenState);

/// A state as a plugin opened it: which, and how long its values live.
///
/// The values of a state with a time-to-live are stored with the time
/// they expire at ([`crate::state::with_expiry`]): this writes it and
/// takes it off, and leaves out what has expired, so that a plugin never
/// sees a value past its time however late the backend removes it.
#[derive(Debug, Clone, Copy)]
struct OpenState {
    state: StateId,
    ttl: Option<TimeToLive>,
}

impl OpenState {
    /// Appends `key`'s value — absent if it has none or it expired at
    /// `now` — to `values`. Reading restarts its time if the state says
    /// so; an expired value read is removed (Flink's clean-up on read).
    fn read(
        &self,
        backend: &mut dyn KeyedStateBackend,
        key: HashedKey<'_>,
        now: i64,
        values: &mut SlotValues,
        buffer: &mut Vec<u8>,
    ) -> Result<(), BackendError> {
        let stored = backend.get(self.state, key)?;
        let Some(ttl) = self.ttl else {
            push_value(values, stored);
            return Ok(());
        };
        let Some(stored) = stored else {
            push_value(values, None);
            return Ok(());
        };
        let live = live_value(stored, now)?;
        push_value(values, live);
        if live.is_none() {
            backend.delete(self.state, key)?;
        } else if ttl.refresh_on_read {
            let start = values.offsets[values.offsets.len() - 2] as usize;
            backend.put(self.state, key, with_expiry(&values.data[start..], expiry_after(now, ttl.millis), buffer))?;
        }
        Ok(())
    }

    /// Stores `value` under `key` (stamped with its expiry, written at
    /// `now`), or removes the key's value when it is `None`.
    fn write(
        &self,
        backend: &mut dyn KeyedStateBackend,
        key: HashedKey<'_>,
        value: Option<&[u8]>,
        now: i64,
        buffer: &mut Vec<u8>,
    ) -> Result<(), BackendError> {
        match (value, self.ttl) {
            (Some(value), Some(ttl)) => backend.put(self.state, key, with_expiry(value, expiry_after(now, ttl.millis), buffer)),
            (Some(value), None) => backend.put(self.state, key, value),
            (None, _) => backend.delete(self.state, key),
        }
    }
}

/// The plugin's part of a stored value of an expiring state, if it has
/// not expired at `now`.
fn live_value(stored: &[u8], now: i64) -> Result<Option<&[u8]>, BackendError> {
    match split_expiry(stored) {
        Some((value, expires_at)) => Ok((expires_at > now).then_some(value)),
        None => Err(BackendError::Incompatible(format!(
            "a stored value of {} bytes of a state with a time-to-live is too short to hold the time it expires at",
            stored.len()
        ))),
    }
}

/// Checks a time-to-live a plugin asks for.
fn checked_ttl(kind: &str, name: &str, ttl: TimeToLive) -> wasmtime::Result<TimeToLive> {
    if ttl.millis == 0 {
        wasmtime::bail!("{kind} `{}`: a time-to-live of 0 ms would expire every value as it is written; give at least 1", name.escape_debug());
    }
    Ok(ttl)
}


/// The distinct keys of the call being made, in slot order: key `s` is the
/// one state and timer calls address by slot `s`, with its hash.
///
/// For a batch whose keys the key-by exchange numbered, the keys are
/// copied out of the batch only when a state or timer call first asks for
/// one ([`BatchKeys::defer`]), from each slot's first event, which the
/// exchange noted: a call that asks for
/// none — an operator holding its state in the instance, a count started
/// on empty state — costs nothing an event, where copying every key cost
/// ~60 instructions an event for the count at parallelism 1.
#[derive(Default)]
pub struct BatchKeys {
    /// How many distinct keys the call has.
    count: usize,
    /// The keys, stored flat; made when first asked for if `pending`.
    table: OnceCell<KeyTable>,
    /// The call's batch, whose keys `table` is made of when first asked for.
    pending: Option<PendingKeys>,
    /// The job's number of key groups, of which each key's is its hash's
    /// (found again when asked for, not kept per key).
    max_parallelism: u32,
    /// (table hash, slot) of every key, to number them; kept from call to call
    /// to save its allocation.
    numbering: HashTable<(u64, u32)>,
}

impl std::fmt::Debug for BatchKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchKeys").field("count", &self.count).field("taken", &self.table.get().is_some()).finish()
    }
}

/// Keys stored flat: key `s` is `data[offsets[s]..offsets[s + 1]]`.
#[derive(Debug)]
struct KeyTable {
    data: Vec<u8>,
    offsets: Vec<u32>,
    hashes: Vec<u64>,
}

impl KeyTable {
    fn with_capacity(keys: usize) -> Self {
        let mut offsets = Vec::with_capacity(keys + 1);
        offsets.push(0);
        KeyTable { data: Vec::new(), offsets, hashes: Vec::with_capacity(keys) }
    }

    fn push(&mut self, key: &[u8], hash: u64) {
        self.data.extend_from_slice(key);
        self.offsets.push(self.data.len() as u32);
        self.hashes.push(hash);
    }

    fn len(&self) -> usize {
        self.hashes.len()
    }

    fn get(&self, slot: usize, max_parallelism: u32) -> HashedKey<'_> {
        let key = &self.data[self.offsets[slot] as usize..self.offsets[slot + 1] as usize];
        HashedKey::with_hash(key, self.hashes[slot], max_parallelism)
    }
}

/// A numbered batch during its call: where its keys are taken from.
struct PendingKeys {
    batch: Arc<InputBatch>,
    /// Each event's key hash.
    hashes: Vec<u64>,
    /// By slot, the event where the slot first appears.
    firsts: Vec<u32>,
}

impl BatchKeys {
    /// Takes the distinct keys of a call's `keys` (one per event or timer)
    /// as the current keys, numbered in order of first appearance, and
    /// returns each item's slot. `hashes`, if given, are the keys'
    /// [`key_hash`](crate::state::key_hash)es, as the key-by exchange
    /// computed them.
    pub fn number<'k>(&mut self, keys: impl ExactSizeIterator<Item = &'k [u8]>, hashes: Option<&[u64]>, max_parallelism: u32) -> Vec<u32> {
        self.clear();
        self.max_parallelism = max_parallelism;
        let mut numbering = std::mem::take(&mut self.numbering);
        numbering.clear();
        numbering.reserve(keys.len(), |&(hash, _)| hash);
        debug_assert!(hashes.is_none_or(|h| h.len() == keys.len()));
        let mut table = KeyTable::with_capacity(keys.len());
        let slots = keys
            .enumerate()
            .map(|(i, key)| {
                let key = match hashes {
                    Some(hashes) => HashedKey::with_hash(key, hashes[i], max_parallelism),
                    None => HashedKey::new(key, max_parallelism),
                };
                let hash = key.table_hash();
                let same = |&(held, slot): &(u64, u32)| held == hash && table.get(slot as usize, max_parallelism).key == key.key;
                // One probe finds the key or the place for it.
                match numbering.entry(hash, same, |&(held, _)| held) {
                    Entry::Occupied(numbered) => numbered.get().1,
                    Entry::Vacant(place) => {
                        let slot = table.len() as u32;
                        place.insert((hash, slot));
                        table.push(key.key, key.hash);
                        slot
                    }
                }
            })
            .collect();
        self.numbering = numbering;
        self.count = table.len();
        self.table = OnceCell::from(table);
        slots
    }

    /// Takes as the current keys those of `batch`, which the key-by
    /// exchange numbered (`numbered`, without the slots, which the batch
    /// carries), for the length of its call. The keys themselves are taken
    /// from the batch when first asked for.
    pub fn defer(&mut self, batch: Arc<InputBatch>, numbered: KeyNumbered, max_parallelism: u32) {
        self.clear();
        self.max_parallelism = max_parallelism;
        let KeyNumbered { hashes, firsts, .. } = numbered;
        debug_assert_eq!(hashes.len(), batch.key_slots.len());
        self.count = firsts.len();
        self.pending = Some(PendingKeys { batch, hashes, firsts });
    }

    /// The call is over: lets go of its batch. (Its keys, if taken, stay
    /// until the next call; no call reaches them in between.)
    pub fn detach(&mut self) {
        self.pending = None;
    }

    pub fn clear(&mut self) {
        self.count = 0;
        self.table = OnceCell::new();
        self.pending = None;
    }

    pub fn len(&self) -> usize {
        self.count
    }

    /// The key in `slot` (below [`len`](Self::len)).
    pub fn get(&self, slot: usize) -> HashedKey<'_> {
        self.table().get(slot, self.max_parallelism)
    }

    /// The keys, taken from the deferred batch the first time.
    fn table(&self) -> &KeyTable {
        self.table.get_or_init(|| {
            let mut table = KeyTable::with_capacity(self.count);
            if let Some(PendingKeys { batch, hashes, firsts }) = &self.pending {
                let offsets = &batch.events.offsets;
                for &first in firsts {
                    let i = first as usize;
                    table.push(&batch.events.data[offsets[2 * i] as usize..offsets[2 * i + 1] as usize], hashes[i]);
                }
            }
            table
        })
    }
}

/// What the keyed-state host functions see of a plugin instance's store.
pub struct KeyedStateView<'a> {
    pub table: &'a mut ResourceTable,
    pub registry: &'a mut StateRegistry,
    pub backend: &'a mut dyn KeyedStateBackend,
    /// The keys of the current call, or `None` outside a keyed call.
    pub keys: Option<&'a BatchKeys>,
    /// The subtask's key groups, among this many: where writes by key may go.
    pub owned: (&'a KeyGroupRange, u32),
    pub in_call: bool,
    /// The first failure of the backend during the current call. The call
    /// fails because of it whatever the plugin does with the error it got.
    pub failure: &'a mut Option<String>,
    /// Whether the call is `flush`.
    pub flushing: bool,
    /// Counts `set-keyed` calls that store values of a state without a
    /// time-to-live outside `flush`: an instance writing back held state
    /// because it holds more than its bound (the Rust SDK's, about half of
    /// `memory_limit_mb`), to read it again when next used. (Deletes — a
    /// fired window's — and expiring states, written back after every
    /// call, do not count.)
    pub held_write_backs: &'a mut u64,
}

/// Marker for [`HasData`]: the `state` interface is implemented on a
/// [`KeyedStateView`] borrowed from [`PluginState`].
pub struct KeyedStateAccess;

impl HasData for KeyedStateAccess {
    type Data<'a> = KeyedStateView<'a>;
}

impl<'a> KeyedStateView<'a> {
    /// The current call's keys. The reference is the view's own (`'a`), so
    /// holding it does not keep `self` borrowed.
    fn current_keys(&self) -> Result<&'a BatchKeys, StateError> {
        match (self.in_call, self.keys) {
            (false, _) => Err(StateError::NoCurrentKeys),
            (true, None) => Err(StateError::NotKeyed),
            (true, Some(keys)) => Ok(keys),
        }
    }

    fn handle(&self, resource: &Resource<ValueStateHandle>) -> OpenState {
        // The table only holds handles this file pushed; a stale handle is a
        // wasmtime invariant violation, not a guest error.
        self.table.get(resource).expect("value-state handle is in the resource table").0
    }

    fn map_handle(&self, resource: &Resource<MapStateHandle>) -> OpenState {
        self.table.get(resource).expect("map-state handle is in the resource table").0
    }

    /// Checks a write by key (`set-keyed`): allowed during any call, with
    /// offsets that delimit the keys and a value for each. Returns how many
    /// entries it has.
    fn check_keyed_write(&self, keys: &[u8], key_offsets: &[u32], values: &SlotValues) -> Result<usize, StateError> {
        if !self.in_call {
            return Err(StateError::NoCurrentKeys);
        }
        let n = key_offsets.len().saturating_sub(1);
        check_entries(n, key_offsets, keys, "key")?;
        check_write(n, values)?;
        Ok(n)
    }

    /// Counts a write by key of `n` `values` of `open` in
    /// [`Self::held_write_backs`] if it stores values outside `flush`.
    fn count_held_write_back(&mut self, open: OpenState, n: usize, values: &SlotValues) {
        if !self.flushing && open.ttl.is_none() && (0..n).any(|i| value_at(values, i).is_some()) {
            *self.held_write_backs += 1;
        }
    }

    /// Entry `i`'s key, whose [`key_hash`] is `hash`, if it is in this
    /// subtask's key groups: a plugin writes by key only the keys the host
    /// handed it.
    fn owned_key<'k>(&self, i: usize, key: &'k [u8], hash: u64) -> Result<HashedKey<'k>, StateError> {
        let (owned, max_parallelism) = self.owned;
        let key = HashedKey::with_hash(key, hash, max_parallelism);
        if owned.contains(&u32::from(key.group)) {
            Ok(key)
        } else {
            Err(StateError::MalformedWrite(format!(
                "entry {i}: its key is in key group {}, which this subtask does not own ({}..{})",
                key.group, owned.start, owned.end
            )))
        }
    }
}

impl Host for KeyedStateView<'_> {}

impl HostValueState for KeyedStateView<'_> {
    fn new(&mut self, name: String) -> wasmtime::Result<Resource<ValueStateHandle>> {
        let state = self.registry.register_value(&name, false)?;
        Ok(self.table.push(ValueStateHandle(OpenState { state, ttl: None }))?)
    }

    fn open_expiring(&mut self, name: String, ttl: TimeToLive) -> wasmtime::Result<Resource<ValueStateHandle>> {
        let ttl = checked_ttl("value state", &name, ttl)?;
        let state = self.registry.register_value(&name, true)?;
        Ok(self.table.push(ValueStateHandle(OpenState { state, ttl: Some(ttl) }))?)
    }

    fn get_all(&mut self, resource: Resource<ValueStateHandle>) -> Result<SlotValues, StateError> {
        let open = self.handle(&resource);
        let keys = self.current_keys()?;
        let (now, mut buffer) = (now_ms(), Vec::new());
        let mut values = empty_values(keys.len());
        for slot in 0..keys.len() {
            let read = open.read(self.backend, keys.get(slot), now, &mut values, &mut buffer);
            record_failure(self.failure, read)?;
        }
        Ok(values)
    }

    fn set_many(
        &mut self,
        resource: Resource<ValueStateHandle>,
        slots: Vec<u32>,
        values: SlotValues,
    ) -> Result<(), StateError> {
        let open = self.handle(&resource);
        let keys = self.current_keys()?;
        check_write(slots.len(), &values)?;
        check_slots(slots.iter().copied(), keys)?;
        let (now, mut buffer) = (now_ms(), Vec::new());
        for (i, &slot) in slots.iter().enumerate() {
            let written = open.write(self.backend, keys.get(slot as usize), value_at(&values, i), now, &mut buffer);
            record_failure(self.failure, written)?;
        }
        Ok(())
    }

    fn get_many(&mut self, resource: Resource<ValueStateHandle>, slots: Vec<u32>) -> Result<SlotValues, StateError> {
        let open = self.handle(&resource);
        let keys = self.current_keys()?;
        check_slots(slots.iter().copied(), keys)?;
        let (now, mut buffer) = (now_ms(), Vec::new());
        let mut values = empty_values(slots.len());
        for (i, &slot) in slots.iter().enumerate() {
            if let Some(&ahead) = slots.get(i + PREFETCH_AHEAD) {
                self.backend.prefetch(open.state, keys.get(ahead as usize).hash);
            }
            let read = open.read(self.backend, keys.get(slot as usize), now, &mut values, &mut buffer);
            record_failure(self.failure, read)?;
        }
        Ok(values)
    }

    fn set_keyed(
        &mut self,
        resource: Resource<ValueStateHandle>,
        keys: Vec<u8>,
        key_offsets: Vec<u32>,
        values: SlotValues,
    ) -> Result<(), StateError> {
        let open = self.handle(&resource);
        let n = self.check_keyed_write(&keys, &key_offsets, &values)?;
        self.count_held_write_back(open, n, &values);
        let key_at = |i: usize| &keys[key_offsets[i] as usize..key_offsets[i + 1] as usize];
        let hash_of = |i: usize| key_hash(key_at(i));
        let (now, mut buffer, mut hashes) = (now_ms(), Vec::new(), Lookahead::new(n, hash_of));
        for i in 0..n {
            let (hash, later) = hashes.next(i, n, hash_of);
            if let Some(later) = later {
                self.backend.prefetch(open.state, later);
            }
            let key = self.owned_key(i, key_at(i), hash)?;
            let written = open.write(self.backend, key, value_at(&values, i), now, &mut buffer);
            record_failure(self.failure, written)?;
        }
        Ok(())
    }

    fn drop(&mut self, resource: Resource<ValueStateHandle>) -> wasmtime::Result<()> {
        self.table.delete(resource)?;
        Ok(())
    }
}

impl HostMapState for KeyedStateView<'_> {
    fn new(&mut self, name: String) -> wasmtime::Result<Resource<MapStateHandle>> {
        let state = self.registry.register(MAP_PREFIX, &name)?;
        Ok(self.table.push(MapStateHandle(OpenState { state, ttl: None }))?)
    }

    fn open_expiring(&mut self, name: String, ttl: TimeToLive) -> wasmtime::Result<Resource<MapStateHandle>> {
        let ttl = checked_ttl("map state", &name, ttl)?;
        let state = self.registry.register_expiring(MAP_PREFIX, &name)?;
        Ok(self.table.push(MapStateHandle(OpenState { state, ttl: Some(ttl) }))?)
    }

    fn get(&mut self, resource: Resource<MapStateHandle>, slot: u32, sub_key: Vec<u8>) -> Result<Option<Vec<u8>>, StateError> {
        let offsets = [0, sub_key.len() as u32];
        let values = HostMapState::get_many(self, resource, vec![slot], sub_key, offsets.to_vec())?;
        Ok(values.present[0].then(|| values.data))
    }

    fn get_many(
        &mut self,
        resource: Resource<MapStateHandle>,
        slots: Vec<u32>,
        sub_keys: Vec<u8>,
        sub_key_offsets: Vec<u32>,
    ) -> Result<SlotValues, StateError> {
        let open = self.map_handle(&resource);
        let keys = self.current_keys()?;
        let entries = EntryKeys::new(keys, &slots, &sub_keys, &sub_key_offsets)?;
        let (now, mut buffer) = (now_ms(), Vec::new());
        let mut values = empty_values(slots.len());
        let (n, mut composite) = (slots.len(), Vec::new());
        let hash_of = |i: usize| entries.composite_hash(i);
        let mut hashes = Lookahead::new(n, hash_of);
        for i in 0..n {
            let (hash, later) = hashes.next(i, n, hash_of);
            if let Some(later) = later {
                self.backend.prefetch(open.state, later);
            }
            let read = open.read(self.backend, entries.composite_hashed(i, hash, &mut composite), now, &mut values, &mut buffer);
            record_failure(self.failure, read)?;
        }
        Ok(values)
    }

    fn set_many(
        &mut self,
        resource: Resource<MapStateHandle>,
        slots: Vec<u32>,
        sub_keys: Vec<u8>,
        sub_key_offsets: Vec<u32>,
        values: SlotValues,
    ) -> Result<(), StateError> {
        let open = self.map_handle(&resource);
        let keys = self.current_keys()?;
        check_write(slots.len(), &values)?;
        let entries = EntryKeys::new(keys, &slots, &sub_keys, &sub_key_offsets)?;
        let (now, mut buffer, mut composite) = (now_ms(), Vec::new(), Vec::new());
        for i in 0..slots.len() {
            let written = open.write(self.backend, entries.composite(i, &mut composite), value_at(&values, i), now, &mut buffer);
            record_failure(self.failure, written)?;
        }
        Ok(())
    }

    fn set_keyed(
        &mut self,
        resource: Resource<MapStateHandle>,
        keys: Vec<u8>,
        key_offsets: Vec<u32>,
        sub_keys: Vec<u8>,
        sub_key_offsets: Vec<u32>,
        values: SlotValues,
    ) -> Result<(), StateError> {
        let open = self.map_handle(&resource);
        let n = self.check_keyed_write(&keys, &key_offsets, &values)?;
        check_entries(n, &sub_key_offsets, &sub_keys, "sub-key")?;
        self.count_held_write_back(open, n, &values);
        let key_at = |i: usize| &keys[key_offsets[i] as usize..key_offsets[i + 1] as usize];
        let sub_key_at = |i: usize| &sub_keys[sub_key_offsets[i] as usize..sub_key_offsets[i + 1] as usize];
        // The key's hash places it in a key group, the entry's in the table.
        let hashes_of = |i: usize| (key_hash(key_at(i)), map_entry_hash(key_at(i), sub_key_at(i)));
        let (now, mut buffer, mut composite) = (now_ms(), Vec::new(), Vec::new());
        let mut hashes = Lookahead::new(n, hashes_of);
        for i in 0..n {
            let ((group_hash, entry_hash), later) = hashes.next(i, n, hashes_of);
            if let Some((_, later)) = later {
                self.backend.prefetch(open.state, later);
            }
            let key = self.owned_key(i, key_at(i), group_hash)?;
            let entry = map_entry_key_hashed(key, sub_key_at(i), entry_hash, &mut composite);
            let written = open.write(self.backend, entry, value_at(&values, i), now, &mut buffer);
            record_failure(self.failure, written)?;
        }
        Ok(())
    }

    fn entries(
        &mut self,
        resource: Resource<MapStateHandle>,
        slot: u32,
        after: Option<Vec<u8>>,
        limit: u32,
    ) -> Result<MapPage, StateError> {
        let open = self.map_handle(&resource);
        let keys = self.current_keys()?;
        check_slots([slot].into_iter(), keys)?;
        let limit = limit.clamp(1, MAX_PAGE_ENTRIES) as usize;
        let listed = list_page(self.backend, open, keys.get(slot as usize), after, limit, now_ms());
        record_failure(self.failure, listed)
    }

    fn clear(&mut self, resource: Resource<MapStateHandle>, slots: Vec<u32>) -> Result<(), StateError> {
        let state = self.map_handle(&resource).state;
        let keys = self.current_keys()?;
        check_slots(slots.iter().copied(), keys)?;
        for &slot in &slots {
            let cleared = clear_map(self.backend, state, keys.get(slot as usize));
            record_failure(self.failure, cleared)?;
        }
        Ok(())
    }

    fn drop(&mut self, resource: Resource<MapStateHandle>) -> wasmtime::Result<()> {
        self.table.delete(resource)?;
        Ok(())
    }
}

/// Up to `limit` of `key`'s live entries of map state `open` whose
/// sub-keys sort after `after`. The entries that expired at `now` are left
/// out — listing on past them, so that a page is short only when no
/// entry follows it — and removed, as a read removes them; with
/// `refresh-on-read`, the listed entries' time starts again, as Flink's
/// iterators restart it.
fn list_page(
    backend: &mut dyn KeyedStateBackend,
    open: OpenState,
    key: HashedKey<'_>,
    after: Option<Vec<u8>>,
    limit: usize,
    now: i64,
) -> Result<MapPage, BackendError> {
    let mut expired = Vec::new();
    let page = live_entries(backend, open, key, after, limit, now, &mut expired)?;
    if let Some(ttl) = open.ttl {
        let mut stored_key = Vec::new();
        for sub_key in &expired {
            backend.delete(open.state, map_entry_key(key, sub_key, &mut stored_key))?;
        }
        if ttl.refresh_on_read {
            let mut buffer = Vec::new();
            for i in 0..page.offsets.len() - 1 {
                let sub_key = &page.sub_keys[page.sub_key_offsets[i] as usize..page.sub_key_offsets[i + 1] as usize];
                let value = &page.data[page.offsets[i] as usize..page.offsets[i + 1] as usize];
                let refreshed = with_expiry(value, expiry_after(now, ttl.millis), &mut buffer);
                backend.put(open.state, map_entry_key(key, sub_key, &mut stored_key), refreshed)?;
            }
        }
    }
    Ok(page)
}

/// [`list_page`]'s page, the sub-keys of the expired entries it passed
/// going to `expired`.
fn live_entries(
    backend: &mut dyn KeyedStateBackend,
    open: OpenState,
    key: HashedKey<'_>,
    mut after: Option<Vec<u8>>,
    limit: usize,
    now: i64,
    expired: &mut Vec<Vec<u8>>,
) -> Result<MapPage, BackendError> {
    let mut page = MapPage { sub_keys: Vec::new(), sub_key_offsets: vec![0], data: Vec::new(), offsets: vec![0], more: false };
    let mut listed = 0;
    loop {
        let mut last_seen = Vec::new();
        let mut unreadable = None;
        let more = backend.map_entries(open.state, key, after.as_deref(), limit - listed, &mut |sub_key, stored| {
            let value = match open.ttl {
                None => stored,
                Some(_) => {
                    last_seen.clear();
                    last_seen.extend_from_slice(sub_key);
                    match live_value(stored, now) {
                        Ok(Some(value)) => value,
                        Ok(None) => {
                            expired.push(sub_key.to_vec());
                            return;
                        }
                        Err(error) => {
                            unreadable.get_or_insert(error);
                            return;
                        }
                    }
                }
            };
            page.sub_keys.extend_from_slice(sub_key);
            page.sub_key_offsets.push(page.sub_keys.len() as u32);
            page.data.extend_from_slice(value);
            page.offsets.push(page.data.len() as u32);
            listed += 1;
        })?;
        if let Some(error) = unreadable {
            return Err(error);
        }
        if !more || listed == limit {
            page.more = more;
            return Ok(page);
        }
        after = Some(last_seen);
    }
}

/// The most entries a page of `map-state.entries` holds, whatever the
/// plugin asks: the host builds the page in its own memory, outside the
/// plugin's cap, so a plugin cannot have it copy a key's whole map at once.
const MAX_PAGE_ENTRIES: u32 = 4096;

/// How many entries [`clear_map`] lists at a time.
const CLEAR_PAGE: usize = MAX_PAGE_ENTRIES as usize;

/// Deletes every entry of `key` in map state `state`, a page at a time.
fn clear_map(backend: &mut dyn KeyedStateBackend, state: StateId, key: HashedKey<'_>) -> Result<(), BackendError> {
    let mut sub_keys: Vec<Vec<u8>> = Vec::new();
    let mut stored = Vec::new();
    loop {
        let after = sub_keys.pop();
        sub_keys.clear();
        let more = backend.map_entries(state, key, after.as_deref(), CLEAR_PAGE, &mut |sub_key, _| sub_keys.push(sub_key.to_vec()))?;
        for sub_key in &sub_keys {
            backend.delete(state, map_entry_key(key, sub_key, &mut stored))?;
        }
        if !more {
            return Ok(());
        }
    }
}

/// Checks that `offsets` delimit `n` entries of `data`.
fn check_entries(n: usize, offsets: &[u32], data: &[u8], what: &str) -> Result<(), StateError> {
    if offsets.len() != n + 1 || offsets.first() != Some(&0) || !offsets_fit(offsets, data) {
        return Err(StateError::MalformedWrite(format!("{what} offsets do not fit the {what}s")));
    }
    Ok(())
}

/// The (key, sub-key) entries of a map-state call, checked.
struct EntryKeys<'a> {
    keys: &'a BatchKeys,
    slots: &'a [u32],
    sub_keys: &'a [u8],
    offsets: &'a [u32],
}

impl<'a> EntryKeys<'a> {
    fn new(keys: &'a BatchKeys, slots: &'a [u32], sub_keys: &'a [u8], offsets: &'a [u32]) -> Result<Self, StateError> {
        check_entries(slots.len(), offsets, sub_keys, "sub-key")?;
        check_slots(slots.iter().copied(), keys)?;
        Ok(EntryKeys { keys, slots, sub_keys, offsets })
    }

    /// Entry `i`'s storage key (see [`map_entry_key`]).
    fn composite<'b>(&self, i: usize, buffer: &'b mut Vec<u8>) -> HashedKey<'b> {
        self.composite_hashed(i, self.composite_hash(i), buffer)
    }

    /// The hash of entry `i`'s storage key ([`map_entry_hash`]).
    fn composite_hash(&self, i: usize) -> u64 {
        map_entry_hash(self.keys.get(self.slots[i] as usize).key, self.sub_key(i))
    }

    /// Entry `i`'s storage key, whose hash [`Self::composite_hash`] gave.
    fn composite_hashed<'b>(&self, i: usize, hash: u64, buffer: &'b mut Vec<u8>) -> HashedKey<'b> {
        map_entry_key_hashed(self.keys.get(self.slots[i] as usize), self.sub_key(i), hash, buffer)
    }

    fn sub_key(&self, i: usize) -> &[u8] {
        &self.sub_keys[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// Room for `n` values.
fn empty_values(n: usize) -> SlotValues {
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0);
    SlotValues { present: Vec::with_capacity(n), data: Vec::new(), offsets }
}

/// Appends one value (or its absence).
fn push_value(values: &mut SlotValues, value: Option<&[u8]>) {
    values.present.push(value.is_some());
    values.data.extend_from_slice(value.unwrap_or_default());
    values.offsets.push(values.data.len() as u32);
}

/// Checks that a write's offsets and data fit together.
fn check_write(n: usize, values: &SlotValues) -> Result<(), StateError> {
    if values.present.len() != n || values.offsets.len() != n + 1 {
        return Err(StateError::MalformedWrite(format!(
            "{n} slots need {n} presence flags and {} offsets, got {} and {}",
            n + 1,
            values.present.len(),
            values.offsets.len()
        )));
    }
    if !offsets_fit(&values.offsets, &values.data) {
        return Err(StateError::MalformedWrite("offsets are not increasing within the data".into()));
    }
    Ok(())
}

/// Whether `offsets` never decrease and stay within `data`.
fn offsets_fit(offsets: &[u32], data: &[u8]) -> bool {
    offsets.windows(2).all(|w| w[0] <= w[1]) && offsets.last().is_none_or(|&end| end as usize <= data.len())
}

/// Checks that every slot is one of the current call's keys.
pub(super) fn check_slots(mut slots: impl Iterator<Item = u32>, keys: &BatchKeys) -> Result<(), StateError> {
    match slots.find(|&slot| slot as usize >= keys.len()) {
        Some(slot) => Err(StateError::SlotOutOfRange(slot)),
        None => Ok(()),
    }
}

/// Entry `i` of `values`: its bytes, or `None` where it is absent.
fn value_at(values: &SlotValues, i: usize) -> Option<&[u8]> {
    values.present[i].then(|| &values.data[values.offsets[i] as usize..values.offsets[i + 1] as usize])
}

/// Passes a backend result on; a failure is kept for the call to fail with,
/// and the plugin sees a state error.
fn record_failure<T>(failure: &mut Option<String>, result: Result<T, BackendError>) -> Result<T, StateError> {
    result.map_err(|error| {
        let message = error.to_string();
        let seen = format!("the state backend failed: {message}");
        failure.get_or_insert(message);
        StateError::MalformedWrite(seen)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::RecordBatch;
    use crate::plugin::bindings::EventBatch;
    use crate::state::{Entry, HashedKey, MemoryBackend, key_group_range};

    /// What a [`KeyedStateView`] borrows, for a test's calls.
    struct Fixture {
        table: ResourceTable,
        registry: StateRegistry,
        backend: MemoryBackend,
        failure: Option<String>,
        held_write_backs: u64,
        owned: KeyGroupRange,
    }

    impl Fixture {
        /// An empty memory backend of a subtask owning `owned`, among 128 key groups.
        fn new(owned: KeyGroupRange) -> Self {
            let (table, registry, backend) = (ResourceTable::new(), StateRegistry::default(), MemoryBackend::new());
            Fixture { table, registry, backend, failure: None, held_write_backs: 0, owned }
        }

        /// The view of a call whose keys are `keys`.
        fn view<'a>(&'a mut self, keys: Option<&'a BatchKeys>) -> KeyedStateView<'a> {
            KeyedStateView {
                table: &mut self.table,
                registry: &mut self.registry,
                backend: &mut self.backend,
                keys,
                owned: (&self.owned, 128),
                in_call: true,
                failure: &mut self.failure,
                flushing: false,
                held_write_backs: &mut self.held_write_backs,
            }
        }

        /// Makes the stored values `which` picks expire at `expires_at`.
        fn expire_at(&mut self, expires_at: i64, which: impl Fn(&Entry) -> bool) {
            let mut stored = Vec::new();
            self.backend.for_each(&mut |e| stored.push(e.clone())).unwrap();
            let mut aged = Vec::new();
            for entry in stored.iter().filter(|e| which(e)) {
                let (plugins, _) = split_expiry(&entry.value).unwrap();
                let key = HashedKey::in_group(&entry.key, entry.group);
                self.backend.put(entry.state, key, with_expiry(plugins, expires_at, &mut aged)).unwrap();
            }
        }
    }

    fn one_value(value: &[u8]) -> SlotValues {
        SlotValues { present: vec![true], data: value.to_vec(), offsets: vec![0, value.len() as u32] }
    }

    /// A backend failure fails the call with the backend's own error (the
    /// plugin, which only sees a state error, is not blamed for it).
    #[test]
    fn a_backend_failure_is_kept_for_the_call_in_the_backends_words() {
        let mut failure = None;
        let failed: Result<(), BackendError> = Err(crate::state::StateError::io("/state/000042.log")(
            std::io::Error::from_raw_os_error(28),
        ));
        let seen = record_failure(&mut failure, failed).unwrap_err();
        assert!(matches!(&seen, StateError::MalformedWrite(m) if m.starts_with("the state backend failed: I/O error on /state/000042.log")), "{seen:?}");
        let kept = failure.clone().unwrap();
        assert!(kept.starts_with("I/O error on /state/000042.log") && kept.contains("No space left"), "{kept}");
        let later: Result<(), BackendError> = Err(crate::state::StateError::Incompatible("later".into()));
        let _ = record_failure(&mut failure, later);
        assert_eq!(failure.as_deref(), Some(kept.as_str()), "the first failure is the one kept");
        assert!(crate::plugin::CallError::Backend(kept).to_string().starts_with("the state backend failed: I/O error"));
    }

    /// `set-keyed` writes where a slot-addressed write of the same key and
    /// sub-key would, and refuses keys of another subtask's key groups.
    #[test]
    fn writes_by_key_land_under_the_entry_key_and_stay_in_the_subtasks_key_groups() {
        let owned = key_group_range(0, 128, 2);
        let mut fixture = Fixture::new(owned.clone());
        let key_in = |inside: bool| {
            (0..).map(|i| format!("key-{i}")).find(|k| owned.contains(&u32::from(HashedKey::new(k.as_bytes(), 128).group)) == inside).unwrap()
        };
        let (mine, theirs) = (key_in(true), key_in(false));
        let mut view = fixture.view(None);
        let map = HostMapState::new(&mut view, "w".into()).unwrap();
        let write = |view: &mut KeyedStateView<'_>, key: &str| {
            let handle = Resource::new_borrow(map.rep());
            HostMapState::set_keyed(view, handle, key.as_bytes().to_vec(), vec![0, key.len() as u32], b"7".to_vec(), vec![0, 1], one_value(b"42"))
        };
        write(&mut view, &mine).unwrap();
        let refused = write(&mut view, &theirs).unwrap_err();
        assert!(matches!(&refused, StateError::MalformedWrite(m) if m.contains("does not own")), "{refused:?}");
        let state = view.map_handle(&map).state;
        let mut composite = Vec::new();
        let entry = map_entry_key(HashedKey::new(mine.as_bytes(), 128), b"7", &mut composite);
        assert_eq!(fixture.backend.get(state, entry).unwrap(), Some(&b"42"[..]));
        let mut entries = 0;
        fixture.backend.for_each(&mut |_| entries += 1).unwrap();
        assert_eq!(entries, 1, "the refused write left nothing");
    }

    /// Value state held by an instance: `set-keyed` writes by key within
    /// the subtask's key groups, `get-many` reads only the slots asked for.
    #[test]
    fn a_calls_keys_are_numbered_by_first_appearance_each_call_afresh() {
        let mut keys = BatchKeys::default();
        let call = |keys: &mut BatchKeys, items: &[&str]| keys.number(items.iter().map(|k| k.as_bytes()), None, 128);
        assert_eq!(call(&mut keys, &["b", "a", "b", "c", "a"]), vec![0, 1, 0, 2, 1]);
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.get(1).key, b"a");
        assert_eq!(keys.get(2).group, HashedKey::new(b"c", 128).group);
        let many: Vec<String> = (0..5000).map(|i| (i % 1000).to_string()).collect();
        let slots = keys.number(many.iter().map(|k| k.as_bytes()), None, 128);
        assert_eq!(keys.len(), 1000);
        assert_eq!(slots[..1000], (0..1000).collect::<Vec<u32>>()[..]);
        assert_eq!(slots[1000..2000], slots[..1000]);
        // With the hashes the exchange computed, the same slots and groups.
        let hashes: Vec<u64> = many.iter().map(|k| crate::state::key_hash(k.as_bytes())).collect();
        assert_eq!(keys.number(many.iter().map(|k| k.as_bytes()), Some(&hashes), 128), slots);
        assert_eq!(keys.get(7).group, HashedKey::new(b"7", 128).group);
        assert_eq!(call(&mut keys, &["a"]), vec![0]);
        assert_eq!((keys.len(), keys.get(0).key), (1, b"a".as_slice()));
        // Slots the exchange numbered: the same keys, taken without hashing
        // from the batch of the call when first asked for.
        let mut batch = RecordBatch::new();
        many.iter().for_each(|key| batch.push(key.as_bytes(), b"v", None));
        let (data, offsets, timestamps) = batch.into_parts();
        let events = EventBatch { data, offsets, timestamps };
        let numbered = KeyNumbered { slots: Vec::new(), hashes: hashes.clone(), firsts: (0..1000).collect() };
        let input = InputBatch { input: 0, events, key_slots: slots, key_count: 1000, watermark: 0, processing_time: 0 };
        keys.defer(Arc::new(input), numbered, 128);
        assert_eq!(keys.len(), 1000);
        assert_eq!((keys.get(7).key, keys.get(7).group), (b"7".as_slice(), HashedKey::new(b"7", 128).group));
        assert_eq!(keys.get(999).key, b"999");
        keys.detach();
        assert_eq!(keys.get(7).key, b"7", "taken: kept for the rest of the call");
    }

    #[test]
    fn value_state_is_written_by_key_and_read_by_chosen_slots() {
        let owned = key_group_range(1, 128, 2);
        let mut fixture = Fixture::new(owned.clone());
        let key_in = |inside: bool, skip: usize| {
            (0..)
                .map(|i| format!("key-{i}"))
                .filter(|k| owned.contains(&u32::from(HashedKey::new(k.as_bytes(), 128).group)) == inside)
                .nth(skip)
                .unwrap()
        };
        let (first, second, theirs) = (key_in(true, 0), key_in(true, 1), key_in(false, 0));
        let mut keys = BatchKeys::default();
        keys.number([&first, &second].map(|key| key.as_bytes()).into_iter(), None, 128);
        let mut view = fixture.view(Some(&keys));
        let state = HostValueState::new(&mut view, "count".into()).unwrap();
        let handle = || Resource::<ValueStateHandle>::new_borrow(state.rep());
        let by_key = |key: &str| (key.as_bytes().to_vec(), vec![0, key.len() as u32]);

        let (bytes, offsets) = by_key(&second);
        HostValueState::set_keyed(&mut view, handle(), bytes, offsets, one_value(b"7")).unwrap();
        let (bytes, offsets) = by_key(&theirs);
        let refused = HostValueState::set_keyed(&mut view, handle(), bytes, offsets, one_value(b"9")).unwrap_err();
        assert!(matches!(&refused, StateError::MalformedWrite(m) if m.contains("does not own")), "{refused:?}");

        let read = HostValueState::get_many(&mut view, handle(), vec![1, 0]).unwrap();
        assert_eq!(read.present, [true, false]);
        assert_eq!(&read.data[read.offsets[0] as usize..read.offsets[1] as usize], b"7");
        let outside = HostValueState::get_many(&mut view, handle(), vec![2]).unwrap_err();
        assert!(matches!(outside, StateError::SlotOutOfRange(2)), "{outside:?}");

        let (bytes, offsets) = by_key(&second);
        let removal = SlotValues { present: vec![false], data: Vec::new(), offsets: vec![0, 0] };
        HostValueState::set_keyed(&mut view, handle(), bytes, offsets, removal).unwrap();
        assert_eq!(HostValueState::get_many(&mut view, handle(), vec![1]).unwrap().present, [false]);
    }
    /// The values of a state with a time-to-live carry the time they expire
    /// at: past it a value reads as absent and a listing leaves it out —
    /// filling its pages with the live entries after it — and either
    /// removes it. The state cannot be opened without its time-to-live.
    #[test]
    fn expired_values_read_as_absent_are_left_out_of_listings_and_removed() {
        let mut fixture = Fixture::new(key_group_range(0, 128, 1));
        let mut keys = BatchKeys::default();
        keys.number([b"k".as_slice()].into_iter(), None, 128);
        let ttl = TimeToLive { millis: 60_000, refresh_on_read: false };
        let mut view = fixture.view(Some(&keys));
        let value = HostValueState::open_expiring(&mut view, "seen".into(), ttl).unwrap();
        HostValueState::set_many(&mut view, Resource::new_borrow(value.rep()), vec![0], one_value(b"1")).unwrap();
        let map = HostMapState::open_expiring(&mut view, "m".into(), ttl).unwrap();
        let handle = || Resource::<MapStateHandle>::new_borrow(map.rep());
        let (mut sub_keys, mut offsets) = (Vec::new(), vec![0]);
        for i in 0..10 {
            sub_keys.push(b'0' + i);
            offsets.push(sub_keys.len() as u32);
        }
        let values = SlotValues { present: vec![true; 10], data: b"abcdefghij".to_vec(), offsets: (0..=10).collect() };
        HostMapState::set_many(&mut view, handle(), vec![0; 10], sub_keys, offsets, values).unwrap();
        let refused = HostValueState::new(&mut view, "seen".into()).unwrap_err().to_string();
        assert!(refused.contains("cannot lose one"), "{refused}");
        let zero = HostMapState::open_expiring(&mut view, "z".into(), TimeToLive { millis: 0, refresh_on_read: false });
        assert!(zero.unwrap_err().to_string().contains("a time-to-live of 0 ms"));

        // The value and the odd entries' time passes.
        let now = now_ms();
        fixture.expire_at(now - 1, |e| e.state == StateId(0) || e.key.last().is_some_and(|b| b % 2 == 1));

        let mut view = fixture.view(Some(&keys));
        let read = HostValueState::get_all(&mut view, Resource::new_borrow(value.rep())).unwrap();
        assert_eq!(read.present, [false], "expired");
        assert!(fixture.backend.get(StateId(0), HashedKey::new(b"k", 128)).unwrap().is_none(), "removed as it was read");
        let mut view = fixture.view(Some(&keys));
        let mut listed = Vec::new();
        let mut after = None;
        loop {
            let page = HostMapState::entries(&mut view, handle(), 0, after, 2).unwrap();
            listed.push((page.sub_keys.clone(), page.data.clone(), page.more));
            if !page.more {
                break;
            }
            after = Some(page.sub_keys[page.sub_keys.len() - 1..].to_vec());
        }
        let pages = [(&b"02"[..], &b"ac"[..], true), (b"46", b"eg", true), (b"8", b"i", false)];
        assert_eq!(listed, pages.map(|(k, v, more)| (k.to_vec(), v.to_vec(), more)), "live entries, pages filled past expired ones");
        assert_eq!(fixture.backend.len(), 5, "the five entries listed past were removed");
        let expiring = fixture.registry.expiring();
        assert_eq!(fixture.backend.purge_expired(&expiring, now).unwrap(), 0, "nothing left to purge");
    }

    /// With `refresh-on-read`, listing a key's map restarts its entries'
    /// time, as reading each would (Flink's iterators do the same).
    #[test]
    fn listing_a_map_that_refreshes_on_read_restarts_its_entries_time() {
        let mut fixture = Fixture::new(key_group_range(0, 128, 1));
        let mut keys = BatchKeys::default();
        keys.number([b"k".as_slice()].into_iter(), None, 128);
        let ttl = TimeToLive { millis: 60_000, refresh_on_read: true };
        let mut view = fixture.view(Some(&keys));
        let map = HostMapState::open_expiring(&mut view, "m".into(), ttl).unwrap();
        let handle = || Resource::<MapStateHandle>::new_borrow(map.rep());
        let values = SlotValues { present: vec![true; 2], data: b"ab".to_vec(), offsets: vec![0, 1, 2] };
        HostMapState::set_many(&mut view, handle(), vec![0; 2], b"12".to_vec(), vec![0, 1, 2], values).unwrap();
        // Both entries' time nearly passes.
        let soon = now_ms() + 5;
        fixture.expire_at(soon, |_| true);
        let mut view = fixture.view(Some(&keys));
        let page = HostMapState::entries(&mut view, handle(), 0, None, 10).unwrap();
        assert_eq!((page.sub_keys.as_slice(), page.data.as_slice()), (&b"12"[..], &b"ab"[..]));
        let mut expiries = Vec::new();
        fixture.backend.for_each(&mut |e| expiries.push(split_expiry(&e.value).unwrap().1)).unwrap();
        assert_eq!(expiries.len(), 2);
        assert!(expiries.iter().all(|&at| at > soon + 50_000), "restarted by the listing: {expiries:?}");
    }

    /// A page holds at most 4 096 entries whatever the plugin asks, with
    /// `more` set; `clear` removes a key's map of several pages, and only
    /// that key's.
    #[test]
    fn map_entries_come_in_bounded_pages_and_clear_removes_a_keys_every_entry() {
        let mut fixture = Fixture::new(key_group_range(0, 128, 1));
        let mut keys = BatchKeys::default();
        keys.number([b"big".as_slice(), b"small"].into_iter(), None, 128);
        let mut view = fixture.view(Some(&keys));
        let map = HostMapState::new(&mut view, "m".into()).unwrap();
        let handle = || Resource::<MapStateHandle>::new_borrow(map.rep());
        let (n, mut sub_keys, mut offsets) = (10_000u32, Vec::new(), vec![0]);
        for i in 0..n {
            sub_keys.extend_from_slice(format!("{i:05}").as_bytes());
            offsets.push(sub_keys.len() as u32);
        }
        let mut slots = vec![0; n as usize];
        slots.push(1);
        sub_keys.extend_from_slice(b"x");
        offsets.push(sub_keys.len() as u32);
        let values = SlotValues { present: vec![true; n as usize + 1], data: Vec::new(), offsets: vec![0; n as usize + 2] };
        HostMapState::set_many(&mut view, handle(), slots, sub_keys, offsets, values).unwrap();

        let page = HostMapState::entries(&mut view, handle(), 0, None, u32::MAX).unwrap();
        assert_eq!((page.offsets.len() - 1, page.more), (4096, true), "at most 4096 entries a page");
        let last = page.sub_keys[page.sub_key_offsets[4095] as usize..].to_vec();
        assert_eq!(last, b"04095");
        let next = HostMapState::entries(&mut view, handle(), 0, Some(last), 0).unwrap();
        assert_eq!((next.offsets.len() - 1, next.more, next.sub_keys.as_slice()), (1, true, b"04096".as_slice()), "at least one");
        let outside = HostMapState::entries(&mut view, handle(), 2, None, 10).unwrap_err();
        assert!(matches!(outside, StateError::SlotOutOfRange(2)), "{outside:?}");

        HostMapState::clear(&mut view, handle(), vec![0]).unwrap();
        let page = HostMapState::entries(&mut view, handle(), 0, None, 10).unwrap();
        assert_eq!((page.offsets.len() - 1, page.more), (0, false), "the key's map is gone");
        let other = HostMapState::entries(&mut view, handle(), 1, None, 10).unwrap();
        assert_eq!(other.sub_keys, b"x", "another key's map is kept");
    }
}
