//! Typed keyed state over the host's bulk state interface.
//!
//! The host hands out state per *batch*: `get-all` returns the value of
//! every distinct key of the batch, `set-many` writes changed ones back. The
//! [`StateStore`] fetches a state's values on its first use in a batch, keeps
//! them (as encoded bytes, in buffers reused from batch to batch) while the
//! operator processes the batch event by event, and writes the changed slots
//! back when the batch is done. The host takes checkpoints between batches,
//! so every checkpoint sees all of a batch's writes or none.

use std::cell::{Cell, OnceCell, RefCell, RefMut};
use std::rc::Rc;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Serialize, de::DeserializeOwned};

use crate::__private::bindings::weir::operator::timers::TimerChange;
use crate::broadcast::{Mirror, RawBroadcastMap};
use crate::map_state::{MapCache, RawMapState};
use crate::timer::PendingTimers;
use crate::{Context, Error};

pub(crate) use crate::__private::bindings::weir::operator::state::SlotValues;

/// Building and reading the host's `slot-values` layout: presence flags, one
/// flat data buffer, and offsets into it (`n + 1` of them).
impl SlotValues {
    pub(crate) fn empty() -> Self {
        SlotValues { present: Vec::new(), data: Vec::new(), offsets: vec![0] }
    }

    /// Appends one value, or its absence.
    pub(crate) fn push(&mut self, value: Option<&[u8]>) {
        self.present.push(value.is_some());
        self.data.extend_from_slice(value.unwrap_or_default());
        self.offsets.push(self.data.len() as u32);
    }

    /// Value `i`, or `None` where it is absent.
    pub(crate) fn value(&self, i: usize) -> Option<&[u8]> {
        self.present[i].then(|| &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize])
    }
}

/// Opens value states by name: the host's `value-state` resource in Wasm, an
/// in-memory map in the test harness.
pub(crate) trait StateHost {
    fn open(&mut self, name: &str) -> Box<dyn RawValueState>;
    fn open_broadcast(&mut self, name: &str) -> Box<dyn RawBroadcastMap>;
    fn update_timers(&mut self, changes: &[TimerChange]) -> Result<(), Error>;
    fn open_map(&mut self, name: &str) -> Box<dyn RawMapState>;
}

/// One value state as the host exposes it.
pub(crate) trait RawValueState {
    fn get_all(&self) -> Result<SlotValues, Error>;
    fn set_many(&self, slots: &[u32], values: &SlotValues) -> Result<(), Error>;
}

/// A keyed value state holding one `T` per key, stored as JSON.
///
/// Create it in [`crate::Operator::init`] with a name that stays the same
/// across versions of the plugin: snapshots store state by that name. JSON
/// lets a later version add fields (with `#[serde(default)]`) and still read
/// what an earlier one wrote.
pub struct ValueState<T> {
    name: String,
    /// Where this state's cache was last found: (store id, index). Saves a
    /// search by name on every access.
    hint: Cell<Option<(u64, usize)>>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned> ValueState<T> {
    /// A handle on the value state called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        crate::schema::declare::<T>(&name, false);
        ValueState { name, hint: Cell::new(None), _type: PhantomData }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current key's value, if it has one.
    pub fn get(&self, ctx: &mut Context<'_>) -> Result<Option<T>, Error> {
        let slot = ctx.key_slot()?;
        let cache = ctx.states.loaded(&self.name, &self.hint)?;
        self.decode(cache.value(slot)?)
    }

    fn decode(&self, stored: Option<&[u8]>) -> Result<Option<T>, Error> {
        let Some(bytes) = stored else { return Ok(None) };
        serde_json::from_slice(bytes).map(Some).map_err(|e| {
            Error::State(format!(
                "value state `{}` holds a value this plugin cannot read ({e}); if an earlier \
                 version wrote it, give new fields a #[serde(default)]",
                self.name
            ))
        })
    }

    fn encode(&self, cache: &mut SlotCache, slot: u32, value: &T) -> Result<(), Error> {
        let buffer = cache.begin_write(slot)?;
        serde_json::to_writer(buffer, value).map_err(|e| Error::State(format!("cannot encode value state `{}`: {e}", self.name)))
    }

    /// Sets the current key's value.
    pub fn set(&self, ctx: &mut Context<'_>, value: &T) -> Result<(), Error> {
        let slot = ctx.key_slot()?;
        let cache = ctx.states.loaded(&self.name, &self.hint)?;
        self.encode(cache, slot, value)
    }

    /// Removes the current key's value.
    pub fn clear(&self, ctx: &mut Context<'_>) -> Result<(), Error> {
        let slot = ctx.key_slot()?;
        ctx.states.loaded(&self.name, &self.hint)?.clear(slot)
    }

    /// Replaces the current key's value by `f(old value)` and returns the new one.
    pub fn update(&self, ctx: &mut Context<'_>, f: impl FnOnce(Option<T>) -> T) -> Result<T, Error> {
        let slot = ctx.key_slot()?;
        let cache = ctx.states.loaded(&self.name, &self.hint)?;
        let value = f(self.decode(cache.value(slot)?)?);
        self.encode(cache, slot, &value)?;
        Ok(value)
    }
}

/// State an SDK type keeps in the instance's memory from call to call, and
/// writes back to the host in `flush` — which the host calls before every
/// snapshot — or when it holds more than [`RESIDENT_LIMIT`] entries.
pub(crate) trait Resident {
    /// Writes every changed entry back to the host.
    fn write_back(&mut self) -> Result<(), Error>;
    /// How many entries it holds.
    fn len(&self) -> usize;
    /// Forgets every entry (after `write_back`): they are read from the
    /// host again when next used.
    fn forget(&mut self);
    /// A call (`process`, `on-timers`) begins: what the previous one's key
    /// slots named is stale.
    fn begin_call(&mut self) {}
}

/// Where an SDK type keeps its [`Resident`] state: made on first use and
/// registered with the instance's [`StateStore`], which writes it back.
/// (Shared, so that the hot path reaches it without a search or a
/// downcast.)
pub(crate) struct ResidentCell<R> {
    cell: OnceCell<(u64, Rc<RefCell<R>>)>,
}

impl<R> Default for ResidentCell<R> {
    fn default() -> Self {
        ResidentCell { cell: OnceCell::new() }
    }
}

impl<R: Resident + 'static> ResidentCell<R> {
    /// The state, made by `create` and registered with `states` on first use.
    pub fn get(&self, states: &mut StateStore, create: impl FnOnce(&mut dyn StateHost) -> R) -> Result<RefMut<'_, R>, Error> {
        let (store, resident) = self.cell.get_or_init(|| {
            let resident = Rc::new(RefCell::new(create(states.host.as_mut())));
            states.residents.push(resident.clone());
            (states.id, resident)
        });
        if *store != states.id {
            return Err(Error::State("a state handle was used by two operator instances".into()));
        }
        resident
            .try_borrow_mut()
            .map_err(|_| Error::State("resident state used while it is being written back".into()))
    }
}

/// Entries a [`Resident`] may hold before it is written back and emptied
/// at the end of a call: a bound on the instance's memory.
/// (Small in the SDK's own tests, so that they cross it quickly.)
pub(crate) const RESIDENT_LIMIT: usize = if cfg!(test) { 1 << 10 } else { 1 << 18 };

/// The states of one operator instance and their caches for the current batch.
pub(crate) struct StateStore {
    /// Distinguishes stores, so a [`ValueState`]'s hint is never applied to
    /// another store (several test harnesses in one process).
    id: u64,
    pub(crate) host: Box<dyn StateHost>,
    caches: Vec<SlotCache>,
    pub(crate) mirrors: Vec<Mirror>,
    pub(crate) scratch: Vec<u8>,
    pub(crate) timers: PendingTimers,
    pub(crate) maps: Vec<MapCache>,
    residents: Vec<Rc<RefCell<dyn Resident>>>,
}

impl StateStore {
    pub fn new(host: Box<dyn StateHost>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        StateStore { id, host, caches: Vec::new(), mirrors: Vec::new(), scratch: Vec::new(), timers: PendingTimers::default(), maps: Vec::new(), residents: Vec::new() }
    }

    /// Forgets the previous batch's values; states are fetched again on use.
    pub fn begin_batch(&mut self) {
        for cache in &mut self.caches {
            cache.loaded = false;
        }
        for map in &mut self.maps {
            map.clear();
        }
        for resident in &self.residents {
            resident.borrow_mut().begin_call();
        }
    }

    /// Writes every changed slot and the timer changes back to the host.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.caches.iter_mut().try_for_each(SlotCache::flush)?;
        self.maps.iter_mut().try_for_each(MapCache::flush)?;
        let changes = self.timers.take();
        if changes.is_empty() { Ok(()) } else { self.host.update_timers(&changes) }
    }

    /// Writes back what every resident state holds (the `flush` export).
    pub fn write_back_residents(&mut self) -> Result<(), Error> {
        self.residents.iter().try_for_each(|resident| resident.borrow_mut().write_back())
    }

    /// Writes back and forgets resident states that hold too much.
    pub fn trim_residents(&mut self) -> Result<(), Error> {
        for resident in &self.residents {
            let mut resident = resident.borrow_mut();
            if resident.len() > RESIDENT_LIMIT {
                resident.write_back()?;
                resident.forget();
            }
        }
        Ok(())
    }

    /// The cache of state `name`, fetched from the host if this batch has not
    /// used it yet.
    fn loaded(&mut self, name: &str, hint: &Cell<Option<(u64, usize)>>) -> Result<&mut SlotCache, Error> {
        let index = match hint.get() {
            Some((store, index)) if store == self.id => index,
            _ => {
                let index = match self.caches.iter().position(|cache| cache.name == name) {
                    Some(index) => index,
                    None => {
                        let raw = self.host.open(name);
                        self.caches.push(SlotCache::new(name, raw));
                        self.caches.len() - 1
                    }
                };
                hint.set(Some((self.id, index)));
                index
            }
        };
        let cache = &mut self.caches[index];
        if !cache.loaded {
            cache.load()?;
        }
        Ok(cache)
    }
}

/// One state's values for the slots of the current batch.
struct SlotCache {
    name: String,
    raw: Box<dyn RawValueState>,
    loaded: bool,
    present: Vec<bool>,
    /// Encoded values; buffers are reused across batches to avoid allocating.
    values: Vec<Vec<u8>>,
    dirty: Vec<bool>,
    dirty_slots: Vec<u32>,
}

impl SlotCache {
    fn new(name: &str, raw: Box<dyn RawValueState>) -> Self {
        SlotCache {
            name: name.to_owned(),
            raw,
            loaded: false,
            present: Vec::new(),
            values: Vec::new(),
            dirty: Vec::new(),
            dirty_slots: Vec::new(),
        }
    }

    fn load(&mut self) -> Result<(), Error> {
        let fetched = self.raw.get_all()?;
        let slots = fetched.present.len();
        if fetched.offsets.len() != slots + 1 {
            return Err(Error::State(format!("host sent malformed values for state `{}`", self.name)));
        }
        if self.values.len() < slots {
            self.values.resize_with(slots, Vec::new);
        }
        for (slot, buffer) in self.values.iter_mut().take(slots).enumerate() {
            buffer.clear();
            let (start, end) = (fetched.offsets[slot] as usize, fetched.offsets[slot + 1] as usize);
            buffer.extend_from_slice(&fetched.data[start..end]);
        }
        self.present = fetched.present;
        self.dirty.clear();
        self.dirty.resize(slots, false);
        self.dirty_slots.clear();
        self.loaded = true;
        Ok(())
    }

    fn check(&self, slot: u32) -> Result<usize, Error> {
        let index = slot as usize;
        if index < self.present.len() {
            Ok(index)
        } else {
            Err(Error::State(format!("slot {slot} is outside the current batch")))
        }
    }

    fn value(&self, slot: u32) -> Result<Option<&[u8]>, Error> {
        let index = self.check(slot)?;
        Ok(self.present[index].then(|| self.values[index].as_slice()))
    }

    fn mark_dirty(&mut self, index: usize) {
        if !self.dirty[index] {
            self.dirty[index] = true;
            self.dirty_slots.push(index as u32);
        }
    }

    /// The slot's (emptied) buffer, to encode a new value into.
    fn begin_write(&mut self, slot: u32) -> Result<&mut Vec<u8>, Error> {
        let index = self.check(slot)?;
        self.mark_dirty(index);
        self.present[index] = true;
        let buffer = &mut self.values[index];
        buffer.clear();
        Ok(buffer)
    }

    fn clear(&mut self, slot: u32) -> Result<(), Error> {
        let index = self.check(slot)?;
        self.mark_dirty(index);
        self.present[index] = false;
        self.values[index].clear();
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if !self.loaded || self.dirty_slots.is_empty() {
            return Ok(());
        }
        let mut update = SlotValues::empty();
        for &slot in &self.dirty_slots {
            let index = slot as usize;
            update.push(self.present[index].then_some(self.values[index].as_slice()));
            self.dirty[index] = false;
        }
        self.raw.set_many(&self.dirty_slots, &update)?;
        self.dirty_slots.clear();
        Ok(())
    }
}
