//! Typed keyed state over the host's bulk state interface.
//!
//! The host hands out state per *call*, by the slots of the call's distinct
//! keys, and takes checkpoints between calls. The SDK's state types keep
//! what they read in the instance's memory — value state and window
//! accumulators from call to call ([`Resident`]), map state for the current
//! batch — and write changes back in bulk: map state when the batch is
//! done, resident state when the host calls `flush` before a snapshot. So
//! every snapshot sees all of a batch's writes or none.

use std::any::{Any, TypeId};
use std::cell::{OnceCell, RefCell, RefMut};
use std::collections::HashMap;
use std::rc::Rc;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Serialize, de::DeserializeOwned};

use crate::__private::bindings::weir::operator::timers::TimerChange;
use crate::broadcast::{Mirror, RawBroadcastMap};
use crate::map_state::{MapCache, RawMapState};
use crate::timer::PendingTimers;
use crate::value_store::{HeldValue, ValueStore};
use crate::{Context, Error, Ttl};

pub use crate::__private::bindings::weir::operator::state::{MapPage, SlotValues};

impl MapPage {
    /// The first `limit` of `entries`, as a host sends them (for hosts
    /// other than Weir's: the test harness).
    pub(crate) fn first<'e>(mut entries: impl Iterator<Item = (&'e [u8], &'e [u8])>, limit: usize) -> Self {
        let mut page = MapPage { sub_keys: vec![], sub_key_offsets: vec![0], data: vec![], offsets: vec![0], more: false };
        for (sub_key, value) in entries.by_ref().take(limit) {
            page.sub_keys.extend_from_slice(sub_key);
            page.sub_key_offsets.push(page.sub_keys.len() as u32);
            page.data.extend_from_slice(value);
            page.offsets.push(page.data.len() as u32);
        }
        page.more = entries.next().is_some();
        page
    }

    /// Its (sub-key, value) entries, or `None` if its offsets do not
    /// delimit them.
    pub(crate) fn entries(&self) -> Option<Vec<(&[u8], &[u8])>> {
        let n = self.offsets.len().checked_sub(1)?;
        if self.sub_key_offsets.len() != n + 1 {
            return None;
        }
        (0..n)
            .map(|i| {
                let sub_key = self.sub_keys.get(self.sub_key_offsets[i] as usize..self.sub_key_offsets[i + 1] as usize)?;
                Some((sub_key, self.data.get(self.offsets[i] as usize..self.offsets[i + 1] as usize)?))
            })
            .collect()
    }
}

/// Building and reading the host's `slot-values` layout: presence flags, one
/// flat data buffer, and offsets into it (`n + 1` of them).
impl SlotValues {
    pub(crate) fn empty() -> Self {
        SlotValues { present: Vec::new(), data: Vec::new(), offsets: vec![0] }
    }

    /// Empties it, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.present.clear();
        self.data.clear();
        self.offsets.truncate(1);
    }

    /// Appends one value, or its absence.
    pub(crate) fn push(&mut self, value: Option<&[u8]>) {
        self.present.push(value.is_some());
        self.data.extend_from_slice(value.unwrap_or_default());
        self.offsets.push(self.data.len() as u32);
    }

    /// Checks that the host answered a read of `n` entries with `n` values;
    /// `state` names the state read (for the error).
    pub(crate) fn check_answer(&self, n: usize, state: std::fmt::Arguments<'_>) -> Result<(), Error> {
        if self.present.len() != n || self.offsets.len() != n + 1 {
            return Err(Error::State(format!("host sent malformed values for {state}")));
        }
        Ok(())
    }

    /// Value `i`, or `None` where it is absent.
    pub(crate) fn value(&self, i: usize) -> Option<&[u8]> {
        self.present[i].then(|| &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize])
    }
}

/// Opens value states by name: the host's `value-state` resource in Wasm, an
/// in-memory map in the test harness, the host's state code directly when
/// the operator is compiled into the host ([`crate::embed`]).
pub trait StateHost {
    /// Opens value state `name`, whose values expire as `ttl` says if given.
    fn open(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawValueState>;
    fn open_broadcast(&mut self, name: &str) -> Box<dyn RawBroadcastMap>;
    fn update_timers(&mut self, changes: &[TimerChange]) -> Result<(), Error>;
    /// Opens map state `name`, whose entries expire as `ttl` says if given.
    fn open_map(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawMapState>;
}

/// One value state as the host exposes it.
pub trait RawValueState {
    fn get_many(&self, slots: &[u32]) -> Result<SlotValues, Error>;
    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], values: &SlotValues) -> Result<(), Error>;
}

/// A keyed value state holding one `T` per key, stored as JSON.
///
/// Create it in [`crate::Operator::init`] with a name that stays the same
/// across versions of the plugin: snapshots store state by that name. (A
/// handle made again where it is used, in `process`, is the same state —
/// it sees what every other handle of the name holds — but making one
/// costs a lookup each time.) JSON
/// lets a later version add fields (with `#[serde(default)]`) and still read
/// what an earlier one wrote.
///
/// The instance holds the values it has used, typed, between calls (see
/// `value_store.rs`), so reading one is a clone and writing one a move:
/// no host call and no JSON per event. A state with a time-to-live
/// ([`ValueState::with_ttl`]) holds them for one call only: the host
/// judges expiry, so it is asked for each key once a call, and told of
/// each write at the call's end.
pub struct ValueState<T> {
    name: String,
    ttl: Option<Ttl>,
    held: ResidentCell<ValueStore<T>>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Serialize + DeserializeOwned + Clone + 'static> ValueState<T> {
    /// A handle on the value state called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        crate::schema::declare::<T>(&name, crate::schema::Stored::Value);
        Self::undeclared(name)
    }

    /// A handle not declared to `check-state`: one the plugin holds but
    /// never uses (the windows of one kind keep the other kind's too).
    pub(crate) fn undeclared(name: String) -> Self {
        ValueState { name, ttl: None, held: ResidentCell::default(), _type: PhantomData }
    }

    /// The same state, its values expiring as `ttl` says (see [`Ttl`]):
    /// `ValueState::new("seen").with_ttl(Ttl::after(Duration::from_secs(3600)))`.
    pub fn with_ttl(self, ttl: Ttl) -> Self {
        crate::schema::expire(&self.name, crate::schema::Stored::Value, ttl);
        ValueState { ttl: Some(ttl), ..self }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current key's value, if it has one.
    #[inline]
    pub fn get(&self, ctx: &mut Context<'_>) -> Result<Option<T>, Error> {
        self.with_held(ctx, |held| Ok(held.value()?.cloned()))
    }

    /// Sets the current key's value.
    #[inline]
    pub fn set(&self, ctx: &mut Context<'_>, value: &T) -> Result<(), Error> {
        self.with_held(ctx, |held| {
            held.set(Some(value.clone()));
            Ok(())
        })
    }

    /// Removes the current key's value.
    pub fn clear(&self, ctx: &mut Context<'_>) -> Result<(), Error> {
        self.with_held(ctx, |held| {
            held.set(None);
            Ok(())
        })
    }

    /// Replaces the current key's value by `f(old value)` and returns the new one.
    #[inline]
    pub fn update(&self, ctx: &mut Context<'_>, f: impl FnOnce(Option<T>) -> T) -> Result<T, Error> {
        self.with_held(ctx, |held| {
            let value = f(held.take()?);
            held.set(Some(value.clone()));
            Ok(value)
        })
    }

    /// Runs `f` on the current key's held value.
    #[inline]
    fn with_held<R>(&self, ctx: &mut Context<'_>, f: impl FnOnce(&mut HeldValue<T>) -> Result<R, Error>) -> Result<R, Error> {
        let slot = ctx.key_slot()?;
        let name = &self.name;
        let bound = ctx.states.resident_bytes;
        let ttl = self.ttl;
        let create = |host: &mut dyn StateHost, start| ValueStore::new(name, host.open(name, ttl), start, bound, ttl.is_some());
        let mut store = self.held.get(ctx.states, name, create)?;
        f(store.slot(slot, &ctx.keys)?)
    }
}

/// Decodes a stored value of the state `name` (`kind`: "value state",
/// "map state", "broadcast state"); the error says which state and what a
/// plugin author can do about values an earlier version wrote.
pub(crate) fn decode_stored<V: DeserializeOwned>(kind: &str, name: &str, bytes: &[u8]) -> Result<V, String> {
    serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "{kind} `{name}` holds a value this plugin cannot read ({e}); if an earlier version wrote it, \
             give new fields a #[serde(default)]"
        )
    })
}

/// State an SDK type keeps in the instance's memory from call to call, and
/// writes back to the host in `flush` — which the host calls before every
/// snapshot — or when the instance's resident state grows past
/// [`RESIDENT_BYTES`], after which it keeps only the entries used most
/// recently.
pub(crate) trait Resident {
    /// Writes every changed entry back to the host.
    fn write_back(&mut self) -> Result<(), Error>;
    /// How many entries it holds.
    fn len(&self) -> usize;
    /// About how many bytes of the instance's memory it holds: its tables,
    /// and what its values own beyond their inline size ([`HeapEstimate`]).
    fn bytes(&self) -> usize;
    /// Forgets (after `write_back`) all but the `keep` entries used most
    /// recently: the others are read from the host again when next used.
    fn evict_cold(&mut self, keep: usize);
    /// Forgets what it keeps of forgotten entries (a store that lists them
    /// to know what the host holds), when that alone is too much; between
    /// calls.
    fn forget_listings(&mut self) {}
    /// A call (`process`, `on-timers`) begins: what the previous one's key
    /// slots named is stale.
    fn begin_call(&mut self) {}
    /// The call ends: writes what should not wait for `write_back`.
    fn end_call(&mut self) -> Result<(), Error> {
        Ok(())
    }
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
    ///
    /// Called per event: the check inlines, and making the state and the
    /// errors stay out of line.
    #[inline]
    pub fn get(
        &self,
        states: &mut StateStore,
        name: &str,
        create: impl FnOnce(&mut dyn StateHost, HostStart) -> R,
    ) -> Result<RefMut<'_, R>, Error> {
        let (store, resident) = match self.cell.get() {
            Some(made) => made,
            None => self.make(states, name, create),
        };
        if *store != states.id {
            return Err(state_error("a state handle was used by two operator instances"));
        }
        resident.try_borrow_mut().map_err(|_| state_error("resident state used while it is being written back"))
    }

    #[cold]
    #[inline(never)]
    fn make(
        &self,
        states: &mut StateStore,
        name: &str,
        create: impl FnOnce(&mut dyn StateHost, HostStart) -> R,
    ) -> &(u64, Rc<RefCell<R>>) {
        self.cell.get_or_init(|| (states.id, states.resident(name, create)))
    }
}

/// A state error, built out of line: callers on the per-event path stay small.
#[cold]
#[inline(never)]
fn state_error(message: &'static str) -> Error {
    Error::State(message.into())
}

/// Bytes the [`Resident`] states of an instance may hold together before,
/// at the end of a call, those holding more than their share are written
/// back and their colder half forgotten: a bound on the instance's memory,
/// [`resident_bytes_of`] the memory limit the host passes as
/// `weir.memory-limit-mb` ([`Config::resident_bytes`]). This is the bound
/// when the host does not say: that of its default limit of 512 MiB,
/// 240 MiB — about 1.7 million counts, or 6 million windows of a numeric
/// sum over few keys. (Small in the SDK's own tests, so that they cross it
/// quickly.)
///
/// [`Config::resident_bytes`]: crate::Config::resident_bytes
pub(crate) const RESIDENT_BYTES: usize = if cfg!(test) { 64 << 10 } else { resident_bytes_of(DEFAULT_MEMORY_LIMIT) };

/// The host's default memory limit per instance (`memory_limit_mb`).
const DEFAULT_MEMORY_LIMIT: usize = 512 << 20;

/// What an instance keeps besides its resident state: the plugin's own
/// data and code, a call's batches (up to 4 MiB each way) and a
/// write-back's buffers ([`WRITE_BACK_BYTES`]).
const RESERVED_BYTES: usize = 32 << 20;

/// The bound on resident state under a memory limit of `limit` bytes: half
/// of what [`RESERVED_BYTES`] leaves, or an eighth of a limit too small to
/// leave much. Half, because the estimate of what entries take
/// ([`Resident::bytes`]) is what they may take after their tables last
/// doubled, and while a table doubles its old and new arrays are both
/// there: held state that the estimate puts at the bound may briefly take
/// about 1.4 times it (a million counts: estimated 137 MiB, 60–117 MiB
/// of linear memory, measured). It does not count the allocator's
/// overhead, nor a window deque's room.
pub(crate) const fn resident_bytes_of(limit: usize) -> usize {
    let half_of_the_rest = limit.saturating_sub(RESERVED_BYTES) / 2;
    if half_of_the_rest > limit / 8 { half_of_the_rest } else { limit / 8 }
}

/// Entries to write to the host in one `set-keyed`, column-wise: keys and
/// their values (`None`: delete). A map state's writes add a column of
/// sub-keys beside them.
pub(crate) struct KeyedColumns {
    pub keys: Vec<u8>,
    pub key_offsets: Vec<u32>,
    pub values: SlotValues,
}

impl KeyedColumns {
    pub fn new() -> Self {
        KeyedColumns { keys: Vec::new(), key_offsets: vec![0], values: SlotValues::empty() }
    }

    /// Sets (`Some`) or deletes (`None`) the value of `key`.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.keys.extend_from_slice(key);
        self.key_offsets.push(self.keys.len() as u32);
        self.values.push(value);
    }

    pub fn len(&self) -> usize {
        self.key_offsets.len() - 1
    }

    /// Whether it holds a write-back's worth: [`WRITE_BACK_CHUNK`] entries
    /// or [`WRITE_BACK_BYTES`] of keys and values.
    pub fn is_full(&self) -> bool {
        self.len() >= WRITE_BACK_CHUNK || self.keys.len() + self.values.data.len() >= WRITE_BACK_BYTES
    }

    /// Empties it, keeping its buffers.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.key_offsets.truncate(1);
        self.values.clear();
    }
}

/// Entries a write-back sends to the host in one call, so that its buffers
/// — and the host's copies of them — stay small however much is held.
/// (Small in the SDK's own tests, so that they write in several.)
pub(crate) const WRITE_BACK_CHUNK: usize = if cfg!(test) { 64 } else { 16_384 };

/// Bytes of keys and values a write-back sends in one call at most (about;
/// the last value may pass it): large values — a list of samples per key
/// — would otherwise take a second copy of much of the held state.
pub(crate) const WRITE_BACK_BYTES: usize = if cfg!(test) { 4 << 10 } else { 1 << 20 };

/// What held values own on the heap beyond their inline size, estimated
/// from the size of their JSON when they are written back or sampled
/// ([`HeapEstimate::sample`]): a number's or
/// a small struct's JSON is about its inline size (no more), a string's or
/// a list's about the bytes it owns. Without it, a bound on entries lets
/// accumulators that grow — a list of samples per window — reach the
/// instance's memory limit first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeapEstimate {
    /// The inline size of a value in memory.
    inline: usize,
    per_entry: usize,
    /// How many values were held when some were last sampled.
    sampled_at: usize,
}

/// The JSON sizes of values encoded, summed as they are.
#[derive(Debug, Default)]
pub(crate) struct EncodedSizes {
    count: usize,
    bytes: usize,
}

impl EncodedSizes {
    pub fn add(&mut self, encoded: &[u8]) {
        self.count += 1;
        self.bytes += encoded.len();
    }
}

impl HeapEstimate {
    /// Values measured in a sample.
    const SAMPLE: usize = 16;

    /// An estimate, still zero, for values of `inline` bytes in memory.
    pub fn for_values_of(inline: usize) -> Self {
        HeapEstimate { inline, per_entry: 0, sampled_at: 0 }
    }

    /// Records what the values just encoded (if any) took.
    pub fn measure(&mut self, sizes: EncodedSizes) {
        if sizes.count > 0 {
            self.per_entry = (sizes.bytes / sizes.count).saturating_sub(self.inline);
        }
    }

    /// Heap bytes per held value.
    pub fn per_entry(self) -> usize {
        self.per_entry
    }

    /// Measures up to [`Self::SAMPLE`] of the `held` `values`, encoded with
    /// `encode`, each time a store holds twice as many as at the last
    /// sample — so that values owning much count before the first
    /// write-back. (A value that cannot be encoded fails its write-back,
    /// not this.)
    pub fn sample<V>(
        &mut self,
        held: usize,
        values: impl Iterator<Item = V>,
        mut encode: impl FnMut(V, &mut Vec<u8>) -> Result<(), Error>,
    ) {
        if held < 2 * self.sampled_at.max(32) {
            return;
        }
        let (mut encoded, mut sizes) = (Vec::new(), EncodedSizes::default());
        for value in values.take(Self::SAMPLE) {
            if encode(value, &mut encoded).is_ok() {
                sizes.add(&encoded);
            }
        }
        self.sampled_at = held;
        self.measure(sizes);
    }
}

/// What the host's keyed state held when the instance started (the host's
/// `weir.state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum HostStart {
    /// Nothing: a key or window a store has not written does not exist,
    /// until the store forgets something it wrote.
    Empty,
    /// A restored snapshot, or unknown: what a store does not hold, it
    /// asks the host for.
    #[default]
    Restored,
}

/// Counts a [`Resident`]'s calls, so that each entry can carry the call it
/// was last used in, and the least recently used are evicted first.
///
/// Entries compare by age (calls since their use), which stays right when
/// the count wraps; an entry unused for 2^32 calls may look young, which
/// only delays its eviction.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CallClock {
    now: u32,
}

impl CallClock {
    /// The current call's stamp.
    #[inline]
    pub fn now(self) -> u32 {
        self.now
    }

    /// A call begins.
    pub fn tick(&mut self) {
        self.now = self.now.wrapping_add(1);
    }

    /// Calls since `stamp`.
    #[inline]
    pub fn age(self, stamp: u32) -> u32 {
        self.now.wrapping_sub(stamp)
    }

    /// The age from which entries go so that at most `keep` of those with
    /// `stamps` stay — the youngest; `None` if all may stay.
    pub fn eviction_age(self, stamps: impl Iterator<Item = u32>, keep: usize) -> Option<u32> {
        lowest_ranks_cutoff(stamps.map(|stamp| self.age(stamp)), keep)
    }
}

/// The rank from which entries go so that at most `keep` of those ranked
/// `ranks` stay — those ranked lowest; `None` if all may stay.
pub(crate) fn lowest_ranks_cutoff(ranks: impl Iterator<Item = u32>, keep: usize) -> Option<u32> {
    let mut ranks: Vec<u32> = ranks.collect();
    if ranks.len() <= keep {
        return None;
    }
    // Entries ranked as the first one that may not stay go with it.
    let (_, &mut first_evicted, _) = ranks.select_nth_unstable(keep);
    Some(first_evicted)
}

/// The states of one operator instance: resident states, and map-state
/// caches for the current batch.
pub(crate) struct StateStore {
    /// Distinguishes stores, so that a state handle is never used with two
    /// (several test harnesses in one process).
    id: u64,
    pub(crate) host: Box<dyn StateHost>,
    pub(crate) mirrors: Vec<Mirror>,
    pub(crate) scratch: Vec<u8>,
    pub(crate) timers: PendingTimers,
    pub(crate) maps: Vec<MapCache>,
    residents: Vec<Rc<RefCell<dyn Resident>>>,
    /// The same residents by state name and type: every handle on a state
    /// shares its one resident — a handle made per event, where a
    /// resident of its own would not see what the others hold unwritten
    /// (and count from nothing again).
    residents_by_name: HashMap<String, Vec<(TypeId, Rc<dyn Any>)>>,
    start: HostStart,
    /// Bytes the residents may hold together ([`RESIDENT_BYTES`]).
    resident_bytes: usize,
}

impl StateStore {
    pub fn new(host: Box<dyn StateHost>, start: HostStart, resident_bytes: usize) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        StateStore {
            id,
            host,
            mirrors: Vec::new(),
            scratch: Vec::new(),
            timers: PendingTimers::default(),
            maps: Vec::new(),
            residents: Vec::new(),
            residents_by_name: HashMap::new(),
            start,
            resident_bytes,
        }
    }

    /// The resident of state `name` holding `R`, made by `create` and
    /// registered on first use.
    fn resident<R: Resident + 'static>(
        &mut self,
        name: &str,
        create: impl FnOnce(&mut dyn StateHost, HostStart) -> R,
    ) -> Rc<RefCell<R>> {
        let mut held = self.residents_by_name.get(name).into_iter().flatten();
        if let Some((_, resident)) = held.find(|(kind, _)| *kind == TypeId::of::<R>()) {
            return resident.clone().downcast().expect("found by its type");
        }
        let resident = Rc::new(RefCell::new(create(self.host.as_mut(), self.start)));
        self.residents.push(resident.clone());
        let by_type = self.residents_by_name.entry(name.to_owned()).or_default();
        by_type.push((TypeId::of::<R>(), resident.clone()));
        resident
    }

    /// A call begins: forgets the previous batch's map entries (fetched
    /// again on use) and what resident states knew of its key slots.
    pub fn begin_batch(&mut self) {
        for map in &mut self.maps {
            map.clear();
        }
        for resident in &self.residents {
            resident.borrow_mut().begin_call();
        }
    }

    /// Writes the batch's changed map entries and timer changes back to the
    /// host.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.maps.iter_mut().try_for_each(MapCache::flush)?;
        let changes = self.timers.take();
        if changes.is_empty() { Ok(()) } else { self.host.update_timers(&changes) }
    }

    /// Writes back what every resident state holds (the `flush` export).
    pub fn write_back_residents(&mut self) -> Result<(), Error> {
        self.residents.iter().try_for_each(|resident| resident.borrow_mut().write_back())
    }

    /// The call ends: resident states write what should not wait; if
    /// together they hold more than their bound, those holding more
    /// than an even share write back and forget the colder half of what
    /// they hold.
    pub fn end_call_residents(&mut self) -> Result<(), Error> {
        let mut total = 0;
        for resident in &self.residents {
            let mut resident = resident.borrow_mut();
            resident.end_call()?;
            total += resident.bytes();
        }
        if total <= self.resident_bytes {
            return Ok(());
        }
        let share = self.resident_bytes / self.residents.len();
        for resident in &self.residents {
            let mut resident = resident.borrow_mut();
            if resident.bytes() > share {
                shrink(&mut *resident, share)?;
            }
        }
        Ok(())
    }
}

/// Writes `resident` back and forgets the colder half of what it holds —
/// and what it lists of forgotten entries too if that alone keeps it past
/// `share` bytes.
pub(crate) fn shrink(resident: &mut dyn Resident, share: usize) -> Result<(), Error> {
    resident.write_back()?;
    let keep = resident.len() / 2;
    resident.evict_cold(keep);
    if resident.bytes() > share {
        resident.forget_listings();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::CallClock;

    /// The `keep` entries used last stay, also when the call count wraps.
    #[test]
    fn eviction_keeps_the_youngest_across_the_counts_wrap() {
        let mut clock = CallClock { now: u32::MAX - 2 };
        let mut stamps = Vec::new();
        for _ in 0..6 {
            stamps.push(clock.now());
            clock.tick();
        }
        let cold = clock.eviction_age(stamps.iter().copied(), 2).unwrap();
        let kept: Vec<u32> = stamps.iter().copied().filter(|&stamp| clock.age(stamp) < cold).collect();
        assert_eq!(kept, [1, 2]);
        assert_eq!(clock.eviction_age(stamps.iter().copied(), 6), None, "all may stay");
    }
}
