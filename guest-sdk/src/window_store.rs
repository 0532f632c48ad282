//! The accumulators of tumbling and sliding windows, held in the instance's
//! memory from call to call.
//!
//! Each event of a window workload folds into the accumulator of its (key,
//! window), and a batch touches about as many accumulators as it has
//! events: fetching each from the host and writing it back for every batch
//! was most of a window operator's time. So the windows keep their
//! accumulators here, typed, between calls; one is read from the host only
//! the first time it is used (after a start, a restore, or being
//! forgotten), and changed ones are written back — by key, since the batch
//! that changed them is gone — when the host calls `flush` before a
//! snapshot, or when the instance holds too much
//! ([`crate::state::RESIDENT_BYTES`]);
//! then the windows used least recently are forgotten, so that a window an
//! input left behind (one running far ahead in event time opens thousands)
//! leaves memory before the ones being filled. A fired window the host
//! holds is deleted there when its call ends, and leaves memory with it.
//!
//! On empty state (`weir.state = empty`) the store knows what the host
//! holds that it does not: exactly the windows it forgot, whose starts it
//! keeps per key (8 bytes each, against a held window's ~40). Only those are
//! ever asked for — not every new window, which after a first eviction
//! would otherwise cost a host read each (with RocksDB, a database read).
//! What reaches the host is exactly what the map state would have held:
//! entry `start` (decimal) of the key, the JSON of `(end, accumulator,
//! fired)`; a savepoint cannot tell the two apart.
//!
//! Finding a window is on every event's path, so it hashes no bytes there:
//! a key's windows sit together, sorted by start, in a slab; the key's bytes
//! are hashed once per call to find its slab entry, which is then remembered
//! by the key's slot in the call (the host numbers a call's distinct keys).

use std::collections::VecDeque;

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_key_slab::{KeySlab, SearchHint, position_by_start};

use crate::Encode;
use crate::Error;
use crate::map_state::{RawMapState, decode_value};
use crate::state::{CallClock, EncodedSizes, HeapEstimate, HostStart, KeyedColumns, Resident};

/// One window of a key.
pub(crate) struct HeldWindow<Acc> {
    pub end: i64,
    /// The accumulator and whether the window's result was emitted; `None`
    /// when the window does not exist (yet, or any more).
    pub window: Option<(Acc, bool)>,
    /// Changed since it was read from or written to the host.
    changed: bool,
    /// Whether the host holds an entry for it.
    stored: bool,
    /// The call it was last used in ([`CallClock`]).
    used: u32,
}

impl<Acc> HeldWindow<Acc> {
    /// A window as the host holds it (`None`: not at all).
    pub fn loaded(end: i64, stored: Option<(Acc, bool)>) -> Self {
        HeldWindow { end, stored: stored.is_some(), window: stored, changed: false, used: 0 }
    }

    /// Marks the window as changed, to be written back.
    pub fn touch(&mut self) {
        self.changed = true;
    }
}

/// Where a key's windows are in the store (valid until the call ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyIndex(u32);

/// The windows of one key, sorted by start. A deque: windows mostly open
/// at the back and fire at the front, but when one input runs far ahead
/// in event time a key has hundreds open and others open near the front.
struct KeyWindows<Acc> {
    windows: VecDeque<(i64, HeldWindow<Acc>)>,
    /// Starts of this key's windows that were forgotten while the host
    /// held them, sorted (tracked only while the store knows what the host
    /// holds, see [`WindowStore::forgotten`]).
    forgotten: Vec<i64>,
    /// Where the last search found a window (see [`position_by_start`]).
    hint: SearchHint,
}

impl<Acc> KeyWindows<Acc> {
    fn new() -> Self {
        KeyWindows { windows: VecDeque::new(), forgotten: Vec::new(), hint: SearchHint::default() }
    }

    /// Drops the mark of a forgotten window (it is held again, or known
    /// absent); whether there was one.
    fn unforget(&mut self, start: i64) -> bool {
        match self.forgotten.binary_search(&start) {
            Ok(at) => {
                self.forgotten.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// Where the window starting at `start` is (`Err`: where it would go),
    /// the likely places first ([`position_by_start`]).
    #[inline]
    fn position(&self, start: i64) -> Result<usize, usize> {
        position_by_start(&self.windows, start, |(s, _)| *s, &self.hint)
    }
}

/// Every held window, by key then start.
pub(crate) struct WindowStore<Acc> {
    /// The map state's name, for errors.
    name: String,
    raw: Box<dyn RawMapState>,
    keys: KeySlab<KeyWindows<Acc>>,
    /// How many windows are held.
    held: usize,
    clock: CallClock,
    /// Windows the host holds that this call removed: deleted from the
    /// host when it ends, so that they leave memory at once instead of
    /// lying in their key's deque until a write-back — where a key's
    /// removed windows in front of its live ones would slow every search.
    removed: Vec<(KeyIndex, i64)>,
    /// How many windows the keys' `forgotten` lists name, or `None` when
    /// the store does not know what the host holds (the instance restored,
    /// or too many were forgotten to list): then any window not held may be
    /// there. With `Some`, the host holds exactly the held windows it was
    /// given and the forgotten ones; a window neither held nor forgotten
    /// does not exist, and is not asked for.
    forgotten: Option<usize>,
    /// What the accumulators own on the heap.
    heap: HeapEstimate,
}

/// Forgotten windows listed at most (8 bytes each: an eighth of the
/// instance's bound on resident state) before the store stops listing them
/// and asks the host for every window it does not hold.
const FORGOTTEN_LIMIT: usize = crate::state::RESIDENT_BYTES / 64;

impl<Acc: Serialize + DeserializeOwned + 'static> WindowStore<Acc> {
    pub fn new(name: &str, raw: Box<dyn RawMapState>, start: HostStart) -> Self {
        WindowStore {
            name: name.to_owned(),
            raw,
            keys: KeySlab::default(),
            held: 0,
            clock: CallClock::default(),
            removed: Vec::new(),
            forgotten: (start == HostStart::Empty).then_some(0),
            heap: HeapEstimate::for_values_of(size_of::<(i64, Acc, bool)>()),
        }
    }

    /// Whether every window the host has for this store is held here (the
    /// instance started on empty state and forgot none the host has): then
    /// a window not held does not exist, and need not be asked for.
    pub fn holds_all(&self) -> bool {
        self.forgotten == Some(0)
    }

    /// Whether the host may hold `key`'s window at `start`, which is not
    /// held here.
    pub fn may_be_stored(&self, key: KeyIndex, start: i64) -> bool {
        match self.forgotten {
            None => true,
            Some(0) => false,
            Some(_) => self.keys.get(key.0).forgotten.binary_search(&start).is_ok(),
        }
    }

    /// Holds the window `(slot, key, start, end)` as absent if it is not
    /// held, and lists it in `wanted` for [`WindowStore::fetch`] if the host
    /// may have it: at once, so that it is asked for once.
    pub fn want(&mut self, (slot, key, start, end): (u32, KeyIndex, i64, i64), wanted: &mut Vec<(u32, KeyIndex, i64)>) {
        if !self.contains(key, start) {
            if self.may_be_stored(key, start) {
                wanted.push((slot, key, start));
            }
            self.insert(key, start, HeldWindow::loaded(end, None));
        }
    }

    /// Holds a window just read from the host (`loaded`), which is no
    /// longer a forgotten one.
    pub fn insert_loaded(&mut self, key: KeyIndex, start: i64, window: HeldWindow<Acc>) {
        self.remembered(key, start);
        self.insert(key, start, window);
    }

    /// [`insert_loaded`](Self::insert_loaded) for a window not held, at
    /// the `place` [`find_mut`](Self::find_mut) gave.
    pub fn insert_loaded_at(&mut self, key: KeyIndex, place: usize, start: i64, window: HeldWindow<Acc>) {
        self.remembered(key, start);
        self.insert_new(key, place, start, window);
    }

    /// `key`'s window at `start` is held again (or known absent): no
    /// longer listed as forgotten.
    #[inline]
    fn remembered(&mut self, key: KeyIndex, start: i64) {
        if self.forgotten.is_some_and(|count| count > 0) {
            self.unforget(key, start);
        }
    }

    /// [`remembered`](Self::remembered) when some windows are listed as
    /// forgotten (rare: out of line).
    #[inline(never)]
    fn unforget(&mut self, key: KeyIndex, start: i64) {
        if let Some(count) = &mut self.forgotten
            && self.keys.get_mut(key.0).unforget(start)
        {
            *count -= 1;
        }
    }

    /// Reads from the host, in one call, the windows `(slot, key, start)`
    /// that were just inserted as absent (not held before): those the host
    /// has replace them. On failure they are dropped again, so that no
    /// later call takes them for absent.
    pub fn fetch(&mut self, wanted: &[(u32, KeyIndex, i64)]) -> Result<(), Error> {
        if wanted.is_empty() {
            return Ok(());
        }
        let fetched = self.read_from_host(wanted);
        if fetched.is_ok() {
            for &(_, key, start) in wanted {
                self.remembered(key, start);
            }
        } else {
            // Still the absent placeholders (nothing is replaced unless all
            // was read): never stored, so removing drops them from memory.
            for &(_, key, start) in wanted {
                self.remove(key, start);
            }
        }
        fetched
    }

    fn read_from_host(&mut self, wanted: &[(u32, KeyIndex, i64)]) -> Result<(), Error> {
        let (mut slots, mut sub_keys, mut offsets) = (Vec::with_capacity(wanted.len()), Vec::new(), vec![0u32]);
        for &(slot, _, start) in wanted {
            slots.push(slot);
            start.encode(&mut sub_keys);
            offsets.push(sub_keys.len() as u32);
        }
        let values = self.raw.get_many(&slots, &sub_keys, &offsets)?;
        values.check_answer(wanted.len(), format_args!("map state `{}`", self.name))?;
        let mut stored = Vec::new();
        for (i, &(_, key, start)) in wanted.iter().enumerate() {
            if let Some(bytes) = values.value(i) {
                stored.push((key, start, decode_value::<(i64, Acc, bool)>(&self.name, bytes)?));
            }
        }
        // (`fetch` unlists every wanted window as forgotten once all is read.)
        for (key, start, (end, acc, fired)) in stored {
            self.insert(key, start, HeldWindow::loaded(end, Some((acc, fired))));
        }
        Ok(())
    }

    /// The entry of `key` — whose slot in this call is `slot` — made if it
    /// has none.
    #[inline(always)]
    pub fn key(&mut self, slot: u32, key: &[u8]) -> KeyIndex {
        match self.keys.in_call(slot) {
            Some(entry) => KeyIndex(entry),
            None => self.find_key(slot, key),
        }
    }

    /// [`WindowStore::key`] the first time in a call: a lookup by the
    /// key's bytes. Kept out of line so that the check above, which every
    /// other event of the key takes, inlines into the caller without
    /// the lookup's size.
    #[inline(never)]
    fn find_key(&mut self, slot: u32, key: &[u8]) -> KeyIndex {
        let (entry, _) = self.keys.find_or_insert(key, KeyWindows::new);
        self.keys.remember(slot, entry);
        KeyIndex(entry)
    }

    /// (On every event's path: left out of line it was a call of ~85
    /// instructions, a third of them its prologue and the epoch check.)
    #[inline(always)]
    pub fn get_mut(&mut self, key: KeyIndex, start: i64) -> Option<&mut HeldWindow<Acc>> {
        let windows = self.keys.get_mut(key.0);
        let at = windows.position(start).ok()?;
        let held = &mut windows.windows[at].1;
        held.used = self.clock.now();
        Some(held)
    }

    /// [`get_mut`](Self::get_mut), or where the window would go, for
    /// [`insert_loaded_at`](Self::insert_loaded_at): an opened window is
    /// not searched for twice.
    #[inline(always)]
    pub fn find_mut(&mut self, key: KeyIndex, start: i64) -> Result<&mut HeldWindow<Acc>, usize> {
        let windows = self.keys.get_mut(key.0);
        let at = windows.position(start)?;
        let held = &mut windows.windows[at].1;
        held.used = self.clock.now();
        Ok(held)
    }

    #[inline]
    pub fn contains(&self, key: KeyIndex, start: i64) -> bool {
        self.get(key, start).is_some()
    }

    /// The window, without counting it as used.
    fn get(&self, key: KeyIndex, start: i64) -> Option<&HeldWindow<Acc>> {
        let windows = self.keys.get(key.0);
        windows.position(start).ok().map(|at| &windows.windows[at].1)
    }

    pub fn insert(&mut self, key: KeyIndex, start: i64, window: HeldWindow<Acc>) {
        match self.keys.get(key.0).position(start) {
            Ok(at) => {
                let held = &mut self.keys.get_mut(key.0).windows[at].1;
                *held = window;
                held.used = self.clock.now();
            }
            Err(place) => self.insert_new(key, place, start, window),
        }
    }

    /// Holds a window not held, at `place` in its key's deque (where
    /// [`find_mut`](Self::find_mut) said it would go).
    fn insert_new(&mut self, key: KeyIndex, place: usize, start: i64, mut window: HeldWindow<Acc>) {
        window.used = self.clock.now();
        let windows = &mut self.keys.get_mut(key.0).windows;
        // (`VecDeque::insert` at the back, where windows nearly always
        // open, still calls out to move no elements.)
        if place == windows.len() {
            windows.push_back((start, window));
        } else {
            windows.insert(place, (start, window));
        }
        self.held += 1;
    }

    /// Removes the window: from memory at once if the host never had it,
    /// else when the host's entry is removed at the end of the call.
    pub fn remove(&mut self, key: KeyIndex, start: i64) {
        if let Ok(at) = self.keys.get(key.0).position(start) {
            self.remove_at(key, start, at);
        }
    }

    /// [`remove`](Self::remove) for the window at `at` in its key's deque;
    /// its accumulator, if it had one.
    fn remove_at(&mut self, key: KeyIndex, start: i64, at: usize) -> Option<(Acc, bool)> {
        let windows = self.keys.get_mut(key.0);
        let held = &mut windows.windows[at].1;
        if held.stored {
            held.changed = true;
            self.removed.push((key, start));
            return held.window.take();
        }
        // The oldest fires first: as at the back in `insert`.
        let removed = if at == 0 { windows.windows.pop_front() } else { windows.windows.remove(at) };
        self.held -= 1;
        removed.and_then(|(_, held)| held.window)
    }

    /// Fires `key`'s window at `start` for good: if it exists, has not
    /// fired and `fires` says it is the one, removes it (as
    /// [`remove`](Self::remove)) and returns its accumulator. Read with
    /// `load` first if it is not held. One search, where reading the window
    /// and then removing it searched three times.
    pub fn fire(
        &mut self,
        key: KeyIndex,
        start: i64,
        fires: impl FnOnce(&HeldWindow<Acc>) -> bool,
        load: impl FnOnce(&Self) -> Result<HeldWindow<Acc>, Error>,
    ) -> Result<Option<Acc>, Error> {
        let at = match self.keys.get(key.0).position(start) {
            Ok(at) => at,
            Err(place) => {
                // (Rare: a window evicted, or the instance restored. Loading
                // changes nothing here, so `place` stays where it goes.)
                let window = load(self)?;
                self.insert_loaded_at(key, place, start, window);
                place
            }
        };
        let held = &mut self.keys.get_mut(key.0).windows[at].1;
        if !fires(held) || !held.window.as_ref().is_some_and(|(_, fired)| !fired) {
            held.used = self.clock.now();
            return Ok(None);
        }
        Ok(self.remove_at(key, start, at).map(|(acc, _)| acc))
    }

    /// Forgets the slots of the previous call; drops the entries of keys
    /// left without windows (between calls, so that no slot names them).
    fn begin_call(&mut self) {
        // (Empty unless the last call failed: its removals stay changed.)
        self.removed.clear();
        self.keys.begin_call();
        self.clock.tick();
        let listed = self.held + self.forgotten.unwrap_or(0);
        if self.keys.len() > 2 * listed + 1024 {
            self.drop_empty_keys();
        }
    }
}

impl<Acc: Serialize> WindowStore<Acc> {
    /// Encodes a window as the host holds it: `(end, accumulator, fired)`.
    fn encode(end: i64, (acc, fired): &(Acc, bool), out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.clear();
        crate::codec::write_state_json(out, &(end, acc, fired))
    }

    /// Measures what accumulators own, when it is time to sample them.
    fn sample_heap(&mut self) {
        let windows = self.keys.iter().flat_map(|(_, key)| key.windows.iter());
        let values = windows.filter_map(|(_, held)| Some((held.end, held.window.as_ref()?)));
        self.heap.sample(self.held, values, |(end, window), out| {
            Self::encode(end, window, out).map_err(|e| Error::State(e.to_string()))
        });
    }
}

impl<Acc> WindowStore<Acc> {
    /// Stops listing forgotten windows (too many to hold even their
    /// starts): from now on any window not held is asked for.
    fn forget_what_was_forgotten(&mut self) {
        self.forgotten = None;
        for key in self.keys.values_mut() {
            key.forgotten = Vec::new();
        }
    }

    /// Drops the entries of keys without windows; between calls, as no
    /// slot may name them after.
    fn drop_empty_keys(&mut self) {
        self.keys.retain(|key| !key.windows.is_empty() || !key.forgotten.is_empty());
        self.keys.begin_call();
    }
}

/// Windows to write to the host in one `set-keyed`: the keys and values,
/// and beside them the windows' starts as sub-keys.
struct KeyedWrites {
    entries: KeyedColumns,
    sub_keys: Vec<u8>,
    sub_key_offsets: Vec<u32>,
}

impl KeyedWrites {
    fn new() -> Self {
        KeyedWrites { entries: KeyedColumns::new(), sub_keys: Vec::new(), sub_key_offsets: vec![0] }
    }

    /// Sets (`Some`) or deletes (`None`) the window `start` of `key`.
    fn push(&mut self, key: &[u8], start: i64, value: Option<&[u8]>) {
        self.entries.push(key, value);
        start.encode(&mut self.sub_keys);
        self.sub_key_offsets.push(self.sub_keys.len() as u32);
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Sends what was pushed, if anything, and empties it.
    fn send(&mut self, raw: &dyn RawMapState) -> Result<(), Error> {
        if self.len() > 0 {
            let KeyedColumns { keys, key_offsets, values } = &self.entries;
            raw.set_keyed(keys, key_offsets, &self.sub_keys, &self.sub_key_offsets, values)?;
            self.entries.clear();
            self.sub_keys.clear();
            self.sub_key_offsets.truncate(1);
        }
        Ok(())
    }
}

impl<Acc: Serialize + DeserializeOwned + 'static> Resident for WindowStore<Acc> {
    fn write_back(&mut self) -> Result<(), Error> {
        let mut writes = KeyedWrites::new();
        let mut encoded = Vec::new();
        let mut sizes = EncodedSizes::default();
        for (key, entry) in self.keys.iter() {
            for (start, held) in entry.windows.iter().filter(|(_, held)| held.changed) {
                match &held.window {
                    Some(window) => {
                        Self::encode(held.end, window, &mut encoded).map_err(|error| {
                            Error::State(format!("cannot store window [{start}, {}) of `{}`: {error}", held.end, self.name))
                        })?;
                        writes.push(key, *start, Some(&encoded));
                        sizes.add(&encoded);
                    }
                    None => writes.push(key, *start, None),
                }
                if writes.entries.is_full() {
                    writes.send(self.raw.as_ref())?;
                }
            }
        }
        // On failure every window stays changed: the next flush writes
        // them all again.
        writes.send(self.raw.as_ref())?;
        self.removed.clear();
        let mut held = 0;
        for entry in self.keys.values_mut() {
            for (_, window) in &mut entry.windows {
                window.stored = window.window.is_some();
                window.changed = false;
            }
            // Removed windows are gone from the host too now.
            entry.windows.retain(|(_, window)| window.window.is_some());
            held += entry.windows.len();
        }
        self.held = held;
        self.heap.measure(sizes);
        Ok(())
    }

    fn len(&self) -> usize {
        self.held
    }

    fn bytes(&self) -> usize {
        let window = size_of::<(i64, HeldWindow<Acc>)>() + self.heap.per_entry();
        self.keys.bytes() + self.held * window + self.forgotten.unwrap_or(0) * size_of::<i64>()
    }

    fn begin_call(&mut self) {
        WindowStore::begin_call(self);
    }

    /// Deletes the windows the call removed from the host, and drops them
    /// (on failure they stay, changed, for the next write-back); measures
    /// what accumulators own if it is time to.
    fn end_call(&mut self) -> Result<(), Error> {
        self.sample_heap();
        if self.removed.is_empty() {
            return Ok(());
        }
        let mut removed = std::mem::take(&mut self.removed);
        // Those folded into again since are written back as windows.
        removed.retain(|&(key, start)| self.get(key, start).is_some_and(|held| held.window.is_none()));
        let mut writes = KeyedWrites::new();
        for &(key, start) in &removed {
            writes.push(self.keys.key(key.0), start, None);
        }
        writes.send(self.raw.as_ref())?;
        for (key, start) in removed {
            let windows = self.keys.get_mut(key.0);
            if let Ok(at) = windows.position(start) {
                windows.windows.remove(at);
                self.held -= 1;
            }
        }
        Ok(())
    }

    fn evict_cold(&mut self, keep: usize) {
        let stamps = self.keys.iter().flat_map(|(_, key)| key.windows.iter().map(|(_, held)| held.used));
        let Some(cold) = self.clock.eviction_age(stamps, keep) else { return };
        let clock = self.clock;
        let listing = self.forgotten.is_some();
        let (mut held, mut forgotten) = (0, 0);
        for key in self.keys.values_mut() {
            let KeyWindows { windows, forgotten: list, .. } = key;
            let before = list.len();
            windows.retain(|(start, window)| {
                let keep = window.changed || clock.age(window.used) < cold;
                if !keep && window.stored && listing {
                    list.push(*start);
                }
                keep
            });
            if list.len() > before {
                list.sort_unstable();
                list.dedup();
            }
            held += windows.len();
            forgotten += list.len();
        }
        self.held = held;
        self.forgotten = self.forgotten.map(|_| forgotten);
        if forgotten > FORGOTTEN_LIMIT {
            self.forget_what_was_forgotten();
        }
    }

    /// Stops listing forgotten windows, and drops the keys held only for
    /// them: with many keys of a window or two each, those keys would keep
    /// the store past its bound however few windows it held.
    fn forget_listings(&mut self) {
        self.forget_what_was_forgotten();
        self.drop_empty_keys();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::state::SlotValues;

    /// A host whose first calls fail (and the write numbered `failing_write`,
    /// from 0); records what it accepted, and answers reads from `stored` by
    /// (slot, sub-key).
    #[derive(Default)]
    struct Host {
        failures_left: usize,
        failing_write: Option<usize>,
        writes: usize,
        written: Vec<(Vec<u8>, Vec<u8>, Option<Vec<u8>>)>,
        stored: std::collections::HashMap<(u32, Vec<u8>), Vec<u8>>,
    }

    struct Map(Rc<RefCell<Host>>);

    impl RawMapState for Map {
        fn get(&self, _: u32, _: &[u8]) -> Result<Option<Vec<u8>>, Error> {
            unreachable!()
        }
        fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<SlotValues, Error> {
            let mut host = self.0.borrow_mut();
            if host.failures_left > 0 {
                host.failures_left -= 1;
                return Err(Error::State("host unavailable".into()));
            }
            let mut values = SlotValues::empty();
            for (i, slot) in slots.iter().enumerate() {
                let sub_key = &sub_keys[offsets[i] as usize..offsets[i + 1] as usize];
                values.push(host.stored.get(&(*slot, sub_key.to_vec())).map(Vec::as_slice));
            }
            Ok(values)
        }
        fn set_many(&self, _: &[u32], _: &[u8], _: &[u32], _: &SlotValues) -> Result<(), Error> {
            unreachable!()
        }
        fn entries(&self, _: u32, _: Option<&[u8]>, _: u32) -> Result<crate::state::MapPage, Error> {
            unreachable!("windows are found by their sub-keys")
        }
        fn clear(&self, _: &[u32]) -> Result<(), Error> {
            unreachable!("windows are removed one by one")
        }
        fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
            let mut host = self.0.borrow_mut();
            host.writes += 1;
            if host.failures_left > 0 || host.failing_write == Some(host.writes - 1) {
                host.failures_left = host.failures_left.saturating_sub(1);
                return Err(Error::State("host unavailable".into()));
            }
            for i in 0..key_offsets.len() - 1 {
                let key = keys[key_offsets[i] as usize..key_offsets[i + 1] as usize].to_vec();
                let sub_key = sub_keys[offsets[i] as usize..offsets[i + 1] as usize].to_vec();
                host.written.push((key, sub_key, values.value(i).map(<[u8]>::to_vec)));
            }
            Ok(())
        }
    }

    fn window(acc: f64) -> HeldWindow<f64> {
        let mut held = HeldWindow::loaded(1000, None);
        held.window = Some((acc, false));
        held.touch();
        held
    }

    fn store() -> WindowStore<f64> {
        store_on(&Rc::default(), HostStart::Restored)
    }

    fn store_on(host: &Rc<RefCell<Host>>, start: HostStart) -> WindowStore<f64> {
        WindowStore::new("w", Box::new(Map(host.clone())), start)
    }

    /// Slots name keys only within a call: the next call may give the same
    /// slot to another key, and finds that key's windows.
    #[test]
    fn slots_are_remembered_only_for_the_call() {
        let mut store = store();
        let a = store.key(0, b"a");
        store.insert(a, 0, window(1.0));
        let b = store.key(1, b"b");
        store.insert(b, 0, window(2.0));
        store.begin_call();
        let b_now = store.key(0, b"b");
        assert_eq!(b_now, b);
        assert_eq!(store.get_mut(b_now, 0).and_then(|w| w.window).map(|(acc, _)| acc), Some(2.0));
        assert_eq!(store.key(1, b"a"), a);
    }

    /// Keys whose windows are all gone leave the store between calls, and
    /// their entries are reused without carrying windows over.
    #[test]
    fn keys_without_windows_are_dropped_and_their_entries_reused() {
        let mut store = store();
        for round in 0..3 {
            for k in 0..2000u32 {
                let key = store.key(k, format!("{round}-{k}").as_bytes());
                assert!(!store.contains(key, 0), "a reused entry starts empty");
                store.insert(key, 0, window(1.0));
                store.remove(key, 0);
            }
            store.begin_call();
        }
        assert_eq!(store.len(), 0);
        assert!(store.keys.len() <= 2000, "dropped keys: {} left", store.keys.len());
        assert!(store.keys.len() <= 4000, "entries reused: {}", store.keys.len());
        let kept = store.key(0, b"kept");
        store.insert(kept, 5, window(3.0));
        store.begin_call();
        let kept = store.key(7, b"kept");
        assert!(store.contains(kept, 5));
    }

    /// Many windows of one key (an input far ahead in event time) are found
    /// wherever they open: front, back or middle.
    #[test]
    fn a_key_finds_each_of_many_windows() {
        let mut store = store();
        let key = store.key(0, b"k");
        let starts: Vec<i64> = (0..300).map(|i| (i * 7919 % 300) * 1000).collect();
        for &start in &starts {
            store.insert(key, start, window(start as f64));
        }
        for &start in &starts {
            assert_eq!(store.get_mut(key, start).and_then(|w| w.window).map(|(acc, _)| acc), Some(start as f64));
        }
        assert!(!store.contains(key, 500));
        assert_eq!(store.len(), 300);
    }

    /// Past the limit the windows used least recently are forgotten — also
    /// among one key's windows — and a window not yet written back never is.
    #[test]
    fn eviction_keeps_the_windows_used_most_recently() {
        let mut store = store();
        let key = store.key(0, b"k");
        for start in 0..10 {
            store.begin_call();
            store.insert(key, start * 1000, window(1.0));
        }
        store.begin_call();
        assert!(store.get_mut(key, 0).is_some(), "the oldest window is used again");
        store.write_back().unwrap();
        // As if the window starting at 1000 had changed since, unused.
        store.keys.get_mut(key.0).windows[1].1.touch();
        store.evict_cold(3);
        let held: Vec<i64> = (0..10).map(|s| s * 1000).filter(|&start| store.contains(key, start)).collect();
        assert_eq!(held, [0, 1000, 8000, 9000], "the three youngest, and the one not written back");
        assert_eq!(store.len(), 4);
    }

    /// On empty state the store asks the host only for windows it forgot
    /// while the host held them: a new window is known absent, a forgotten
    /// one is read back (once), and then none is left to ask for.
    #[test]
    fn on_empty_state_only_forgotten_windows_are_asked_for() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = store_on(&host, HostStart::Empty);
        let key = store.key(0, b"a");
        store.insert(key, 0, window(1.0));
        store.insert(key, 1000, HeldWindow::loaded(2000, None)); // absent: not written back
        assert!(store.holds_all());
        store.write_back().unwrap();
        store.begin_call();
        let key = store.key(0, b"a");
        store.insert(key, 5000, window(2.0));
        store.write_back().unwrap();
        store.evict_cold(1);
        assert!(!store.holds_all(), "the host has a window no longer held");
        assert!(store.may_be_stored(key, 0), "forgotten after being written back");
        assert!(!store.may_be_stored(key, 1000), "never stored");
        assert!(!store.may_be_stored(key, 9000), "new");

        host.borrow_mut().stored.insert((0, b"0".to_vec()), b"[1000,1.0,false]".to_vec());
        let mut wanted = Vec::new();
        for start in [0, 1000, 9000] {
            store.want((0, key, start, start + 1000), &mut wanted);
        }
        assert_eq!(wanted, [(0, key, 0)], "only the forgotten window is read");
        store.fetch(&wanted).unwrap();
        assert_eq!(store.get_mut(key, 0).and_then(|w| w.window).map(|(acc, _)| acc), Some(1.0));
        assert!(store.holds_all(), "nothing forgotten any more");
    }

    /// Past the limit of listed forgotten windows, the store stops listing
    /// them and asks for every window it does not hold.
    #[test]
    fn too_many_forgotten_windows_stop_being_listed() {
        let mut store = store_on(&Rc::default(), HostStart::Empty);
        let key = store.key(0, b"a");
        for start in 0..=FORGOTTEN_LIMIT as i64 {
            store.insert(key, start, window(1.0));
        }
        store.write_back().unwrap();
        store.begin_call();
        store.evict_cold(0);
        assert_eq!(store.forgotten, None);
        assert!(store.may_be_stored(key, -1), "anything may be stored now");
    }

    /// Past its bound a store keeps half its windows; when many keys hold
    /// a window each, it also drops the keys it would keep only to list
    /// their forgotten windows — else they alone would hold it past the
    /// bound, and every call would evict again.
    #[test]
    fn shrinking_halves_the_windows_and_drops_keys_kept_for_listings() {
        let mut store = store_on(&Rc::default(), HostStart::Empty);
        let keys = crate::state::RESIDENT_BYTES / 16;
        for k in 0..keys {
            store.begin_call();
            let key = store.key(0, format!("k{k}").as_bytes());
            store.insert(key, 0, window(1.0));
        }
        let before = store.bytes();
        assert!(before > crate::state::RESIDENT_BYTES);
        crate::state::shrink(&mut store, crate::state::RESIDENT_BYTES).unwrap();
        assert_eq!(store.len(), keys / 2, "the more recent half");
        assert_eq!(store.keys.len(), keys / 2, "no key without a window");
        assert_eq!(store.forgotten, None, "stopped listing");
        assert!(store.bytes() <= before / 2, "{} of {before} bytes", store.bytes());
    }

    /// Accumulators count with what they own: a store of large ones is
    /// past its bound with far fewer windows.
    #[test]
    fn bytes_count_what_accumulators_own() {
        let mut small = store_on(&Rc::default(), HostStart::Restored);
        let mut large: WindowStore<Vec<f64>> = WindowStore::new("w", Box::new(Map(Rc::default())), HostStart::Restored);
        let windows = 2000;
        for start in 0..windows {
            let key = small.key(0, b"k");
            small.insert(key, start, window(1.0));
            let key = large.key(0, b"k");
            large.insert(key, start, HeldWindow { window: Some((vec![0.5; 100], false)), ..HeldWindow::loaded(start + 1, None) });
        }
        large.end_call().unwrap();
        assert!(large.bytes() > 10 * small.bytes(), "sampled before any write-back: {} vs {}", large.bytes(), small.bytes());
    }

    /// A window the host holds that a call removes is deleted from the
    /// host when the call ends, and leaves memory then; if the delete
    /// fails it stays, removed, and the next write-back deletes it.
    #[test]
    fn removed_windows_are_deleted_from_the_host_when_the_call_ends() {
        let host = Rc::new(RefCell::new(Host::default()));
        let mut store = store_on(&host, HostStart::Restored);
        let key = store.key(0, b"a");
        store.insert(key, 0, window(1.0));
        store.insert(key, 1000, window(2.0));
        store.write_back().unwrap();
        host.borrow_mut().written.clear();
        let deleted = |start: &str| (b"a".to_vec(), start.as_bytes().to_vec(), None);

        store.begin_call();
        let key = store.key(0, b"a");
        store.remove(key, 0);
        store.end_call().unwrap();
        assert_eq!(host.borrow().written, vec![deleted("0")]);
        assert!(!store.contains(key, 0));
        assert_eq!(store.len(), 1);

        store.begin_call();
        let key = store.key(0, b"a");
        store.remove(key, 1000);
        host.borrow_mut().failures_left = 1;
        assert!(store.end_call().is_err());
        assert!(store.contains(key, 1000), "held as removed until the host knows");
        store.write_back().unwrap();
        assert_eq!(host.borrow().written, vec![deleted("0"), deleted("1000")]);
        assert_eq!(store.len(), 0);
    }

    /// Windows fetched for a batch hold what the host has (and absent ones
    /// as absent); a failed fetch leaves none of them held, so the next
    /// call asks again instead of taking them for absent.
    #[test]
    fn fetched_windows_hold_the_host_values_and_a_failed_fetch_holds_none() {
        let host = Rc::new(RefCell::new(Host { failures_left: 1, ..Host::default() }));
        host.borrow_mut().stored.insert((0, b"1000".to_vec()), b"[2000,4.5,true]".to_vec());
        let mut store = store_on(&host, HostStart::Restored);
        let key = store.key(0, b"a");
        let wanted = [(0, key, 1000), (0, key, 2000)];
        for &(_, key, start) in &wanted {
            store.insert(key, start, HeldWindow::loaded(start + 1000, None));
        }
        assert!(store.fetch(&wanted).is_err());
        assert_eq!(store.len(), 0, "nothing held after a failed fetch");
        for &(_, key, start) in &wanted {
            store.insert(key, start, HeldWindow::loaded(start + 1000, None));
        }
        store.fetch(&wanted).unwrap();
        let held = store.get_mut(key, 1000).unwrap();
        assert_eq!((held.end, held.window), (2000, Some((4.5, true))));
        assert_eq!(store.get_mut(key, 2000).unwrap().window, None);
        store.write_back().unwrap();
        assert!(host.borrow().written.is_empty(), "fetched windows are unchanged");
    }

    /// A write-back that fails keeps every window changed, so the next one
    /// writes them all; after a success nothing is written again.
    #[test]
    fn a_failed_write_back_is_retried_in_full() {
        let host = Rc::new(RefCell::new(Host { failures_left: 1, ..Host::default() }));
        let mut store = store_on(&host, HostStart::Restored);
        for (slot, (key, start)) in [(&b"a"[..], 0), (b"b", 1000)].into_iter().enumerate() {
            let mut held = HeldWindow::loaded(start + 1000, None);
            held.window = Some((2.5, false));
            held.touch();
            let key = store.key(slot as u32, key);
            store.insert(key, start, held);
        }
        assert!(store.write_back().is_err());
        store.write_back().unwrap();
        let mut written = host.borrow().written.clone();
        written.sort();
        let value = |end: i64| Some(format!("[{end},2.5,false]").into_bytes());
        assert_eq!(written, vec![(b"a".to_vec(), b"0".to_vec(), value(1000)), (b"b".to_vec(), b"1000".to_vec(), value(2000))]);
        store.write_back().unwrap();
        assert_eq!(host.borrow().written.len(), 2, "nothing changed since");
    }

    /// Many changed windows go to the host in several calls; when one
    /// fails, they all stay changed, and the next write-back sends them all.
    #[test]
    fn a_large_write_back_is_sent_in_chunks() {
        let host = Rc::new(RefCell::new(Host { failing_write: Some(1), ..Host::default() }));
        let mut store = store_on(&host, HostStart::Restored);
        let windows = 2 * crate::state::WRITE_BACK_CHUNK + 10;
        let key = store.key(0, b"a");
        for start in 0..windows as i64 {
            store.insert(key, start, window(1.0));
        }
        assert!(store.write_back().is_err(), "the second chunk fails");
        assert_eq!(host.borrow().written.len(), crate::state::WRITE_BACK_CHUNK, "the first was written");
        host.borrow_mut().written.clear();
        store.write_back().unwrap();
        assert_eq!(host.borrow().writes, 2 + 3, "three chunks");
        let mut starts: Vec<Vec<u8>> = host.borrow().written.iter().map(|(_, start, _)| start.clone()).collect();
        starts.sort();
        starts.dedup();
        assert_eq!(starts.len(), windows, "every window, once");
    }
}
