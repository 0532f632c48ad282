//! `native:window-sum`: the `sensor-window` plugin's logic compiled into the
//! host — per key, the sum of its values in 1 s tumbling event-time
//! windows, emitted as `{"start","end","value"}` when the watermark passes a
//! window's end.
//!
//! It works as the SDK's `Windows` does: a key's open windows are held in
//! memory, ordered by start and searched the likely places first
//! ([`position_by_start`]), in the SDK's table ([`KeySlab`]), whose entry
//! for each key of a batch is found once, by the slot the key-by exchange
//! gave the key; opening a window registers an event-time timer
//! at its end with the host's [`TimerService`], and the timer fires it.
//! Windows reach the state backend (`(end, sum, fired)` as JSON under the
//! key and the window's start, as the SDK's map state stores them) before
//! every snapshot or when they take more than [`HELD_BYTES`]; a fired window
//! that was stored is deleted from it. On empty state it lists the windows
//! it forgot while the backend held them, and reads only those back.

use std::collections::VecDeque;

use weir_codec::{parse_f64, write_json, write_window_result};
use weir_key_slab::{KeySlab, SearchHint, position_by_start};

use super::{HELD_BYTES, KeyLookup, native_snapshot, state_failure};
use crate::dataflow::{Emitted, OperatorLogic, RecordBatch};
use crate::plugin::{CallError, CapturedState, InitialState, InputKind};
use crate::state::{HashedKey, KeyedStateBackend, StateError, StateId, StateRegistry, TimeDomain, TimerService};

const WINDOW_MS: i64 = 1000;

pub(super) struct NativeWindowSum {
    state: Box<dyn KeyedStateBackend>,
    registry: StateRegistry,
    sums: StateId,
    timers: TimerService,
    max_parallelism: u32,
    watermark: i64,
    /// Key → its held and forgotten windows.
    held: KeySlab<KeySums>,
    /// How many windows `held` holds.
    held_count: usize,
    /// How many forgotten windows the keys list, or `None` when any window
    /// not held may be in the backend (the state was restored, or too many
    /// were forgotten to list) — as the SDK's window store.
    forgotten: Option<usize>,
    /// Calls so far: when each held window was last used.
    calls: u32,
    /// Reused buffers for backend keys and values.
    stored_key: Vec<u8>,
    value: Vec<u8>,
    keys: KeyLookup,
}

/// One key's windows.
#[derive(Default)]
struct KeySums {
    /// Held, ordered by start.
    windows: VecDeque<HeldSum>,
    /// Starts of those forgotten while the backend held them, sorted.
    forgotten: Vec<i64>,
    /// Where the last search found a window: a key's windows are searched
    /// as the SDK searches them ([`position_by_start`]).
    hint: SearchHint,
}

/// Forgotten windows listed at most before any window not held counts as
/// possibly stored: the SDK's limit.
const FORGOTTEN_LIMIT: usize = HELD_BYTES / 64;

/// One open window of a key.
struct HeldSum {
    start: i64,
    sum: f64,
    /// Changed since it was last written to the backend.
    changed: bool,
    /// The backend holds a version of it (to delete when it fires).
    stored: bool,
    /// The call that last used it.
    used: u32,
}

impl NativeWindowSum {
    pub(super) fn restore(mut state: InitialState) -> Result<Self, StateError> {
        let (mut registry, timers) = state.meta.map(|m| (m.registry, m.timers)).unwrap_or_default();
        let sums = registry.intern("sums");
        let forgotten = state.backend.is_empty()?.then_some(0);
        Ok(NativeWindowSum {
            state: state.backend,
            registry,
            sums,
            timers,
            max_parallelism: state.max_parallelism,
            watermark: i64::MIN,
            held: KeySlab::default(),
            held_count: 0,
            forgotten,
            calls: 0,
            stored_key: Vec::new(),
            value: Vec::new(),
            keys: KeyLookup::default(),
        })
    }

    /// Adds `value` to the window starting at `start` of the key held in
    /// `entry`, opening it (and registering its timer) if it is new.
    fn add(&mut self, entry: u32, start: i64, value: f64) -> Result<(), StateError> {
        let used = self.calls;
        let sums = self.held.get_mut(entry);
        let place = match position_by_start(&sums.windows, start, |w| w.start, &sums.hint) {
            Ok(at) => {
                let window = &mut sums.windows[at];
                window.sum += value;
                window.changed = true;
                window.used = used;
                return Ok(());
            }
            // (Reading the backend below changes no key's held windows.)
            Err(place) => place,
        };
        let stored = if self.may_be_stored(Some(entry), start) {
            // (Rare: a window forgotten while the backend held it.)
            let key = self.held.key(entry).to_vec();
            self.read_stored(Some(entry), &key, start)?
        } else {
            None
        };
        let opened = stored.is_none();
        let mut window = HeldSum { start, sum: stored.unwrap_or(0.0), changed: true, stored: !opened, used };
        window.sum += value;
        self.held.get_mut(entry).windows.insert(place, window);
        self.held_count += 1;
        if opened {
            self.timers.register(TimeDomain::EventTime, start + WINDOW_MS - 1, self.held.key(entry));
        }
        Ok(())
    }

    /// The sum the backend holds for `key`'s window at `start` (not held,
    /// and [`may_be_stored`](Self::may_be_stored)); `entry`: the key's, if
    /// held.
    fn read_stored(&mut self, entry: Option<u32>, key: &[u8], start: i64) -> Result<Option<f64>, StateError> {
        let stored_key = window_entry(&mut self.stored_key, key, start, self.max_parallelism);
        let stored = self.state.get(self.sums, stored_key)?;
        let sum = stored.and_then(|v| serde_json::from_slice::<(i64, f64, bool)>(v).ok()).map(|(_, sum, _)| sum);
        self.unlist(entry, start);
        Ok(sum)
    }

    /// Whether the backend may hold the window at `start` of the key held
    /// in `entry` (`None`: a key not held).
    fn may_be_stored(&self, entry: Option<u32>, start: i64) -> bool {
        match self.forgotten {
            None => true,
            Some(0) => false,
            Some(_) => entry.is_some_and(|entry| self.held.get(entry).forgotten.binary_search(&start).is_ok()),
        }
    }

    /// The window at `start` of the key in `entry` was read from the
    /// backend: no longer a forgotten one.
    fn unlist(&mut self, entry: Option<u32>, start: i64) {
        let (Some(count), Some(entry)) = (&mut self.forgotten, entry) else { return };
        let forgotten = &mut self.held.get_mut(entry).forgotten;
        if let Ok(at) = forgotten.binary_search(&start) {
            forgotten.remove(at);
            *count -= 1;
        }
    }

    /// Fires `key`'s window ending at `end`: its sum, and the window gone
    /// from memory and from the backend.
    fn fire(&mut self, key: &[u8], end: i64) -> Result<Option<f64>, StateError> {
        let start = end - WINDOW_MS;
        let entry = self.held.find(key);
        let (sum, stored) = match entry.and_then(|entry| self.take_held(entry, start)) {
            Some(window) => {
                self.held_count -= 1;
                (Some(window.sum), window.stored)
            }
            None if self.may_be_stored(entry, start) => {
                let sum = self.read_stored(entry, key, start)?;
                (sum, sum.is_some())
            }
            None => (None, false),
        };
        if let Some(entry) = entry {
            let sums = self.held.get(entry);
            if sums.windows.is_empty() && sums.forgotten.is_empty() {
                self.held.remove(entry);
            }
        }
        if stored {
            let stored_key = window_entry(&mut self.stored_key, key, start, self.max_parallelism);
            self.state.delete(self.sums, stored_key)?;
        }
        Ok(sum)
    }

    /// Removes the window at `start` of the key in `entry` from memory, if
    /// held.
    fn take_held(&mut self, entry: u32, start: i64) -> Option<HeldSum> {
        let sums = self.held.get_mut(entry);
        let at = position_by_start(&sums.windows, start, |w| w.start, &sums.hint).ok()?;
        sums.windows.remove(at)
    }

    /// Writes the changed windows to the backend.
    fn write_back(&mut self) -> Result<(), StateError> {
        for (key, sums) in self.held.iter() {
            let group = HashedKey::new(key, self.max_parallelism).group;
            for window in sums.windows.iter().filter(|w| w.changed) {
                window_key(&mut self.stored_key, key, window.start);
                self.value.clear();
                let end = window.start + WINDOW_MS;
                write_json(&mut self.value, &(end, window.sum, false)).expect("a tuple of numbers is JSON");
                self.state.put(self.sums, HashedKey::in_group(&self.stored_key, group), &self.value)?;
            }
        }
        // All written: none changed, all stored. (On a failure above every
        // window stays changed, and the next write-back writes it again.)
        for window in self.held.values_mut().flat_map(|sums| sums.windows.iter_mut()).filter(|w| w.changed) {
            window.changed = false;
            window.stored = true;
        }
        Ok(())
    }

    /// About the bytes the keys, their held windows and forgotten listings
    /// take.
    fn held_bytes(&self) -> usize {
        let windows = self.held_count * size_of::<HeldSum>();
        let forgotten = self.forgotten.unwrap_or(0) * size_of::<i64>();
        windows + forgotten + self.held.bytes()
    }

    /// Past [`HELD_BYTES`]: writes back and keeps the more recently used
    /// half of the windows, as the SDK does.
    fn evict_cold(&mut self) -> Result<(), StateError> {
        if self.held_bytes() <= HELD_BYTES {
            return Ok(());
        }
        self.write_back()?;
        let mut used: Vec<u32> = self.held.iter().flat_map(|(_, sums)| &sums.windows).map(|w| w.used).collect();
        let keep = self.held_count / 2;
        let (newer, &mut oldest_kept, _) = used.select_nth_unstable_by(keep, |a, b| b.cmp(a));
        // Keep exactly `keep`: those used after `oldest_kept`, and as many
        // used then as there is room for.
        let mut room = keep - newer.iter().filter(|&&u| u > oldest_kept).count();
        let listing = self.forgotten.is_some();
        for KeySums { windows, forgotten, .. } in self.held.values_mut() {
            let before = forgotten.len();
            windows.retain(|w| {
                let tied = w.used == oldest_kept && room > 0;
                room -= usize::from(tied);
                let keep = w.used > oldest_kept || tied;
                if !keep && w.stored && listing {
                    forgotten.push(w.start);
                }
                keep
            });
            if forgotten.len() > before {
                forgotten.sort_unstable();
                forgotten.dedup();
            }
        }
        self.held.retain(|sums| !sums.windows.is_empty() || !sums.forgotten.is_empty());
        self.held_count = self.held.iter().map(|(_, sums)| sums.windows.len()).sum();
        let forgotten: usize = self.held.iter().map(|(_, sums)| sums.forgotten.len()).sum();
        self.forgotten = self.forgotten.map(|_| forgotten);
        if forgotten > FORGOTTEN_LIMIT {
            self.forgotten = None;
            self.held.values_mut().for_each(|sums| sums.forgotten = Vec::new());
        }
        Ok(())
    }
}

/// The backend key of `key`'s window starting at `start`, built in `out`.
fn window_key(out: &mut Vec<u8>, key: &[u8], start: i64) {
    out.clear();
    out.extend_from_slice(key);
    out.extend_from_slice(&start.to_be_bytes());
}

/// [`window_key`] in `key`'s key group: the entry the backend stores the
/// window under.
fn window_entry<'b>(out: &'b mut Vec<u8>, key: &[u8], start: i64, max_parallelism: u32) -> HashedKey<'b> {
    let group = HashedKey::new(key, max_parallelism).group;
    window_key(out, key, start);
    HashedKey::in_group(out, group)
}

impl OperatorLogic for NativeWindowSum {
    fn process(&mut self, _input: u32, mut batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError> {
        if kind != InputKind::Keyed {
            return Err(CallError::Operator("native window-sum needs a keyed input (key_by = true)".into()));
        }
        self.calls = self.calls.wrapping_add(1);
        // Keys not held start with no windows: each is read when first used.
        let slots = self.keys.resolve(&mut self.held, &mut batch, KeySums::default);
        for (record, &slot) in batch.iter().zip(&slots) {
            let timestamp = record
                .timestamp
                .ok_or_else(|| CallError::Operator("event-time windows need events with timestamps".into()))?;
            let start = timestamp.div_euclid(WINDOW_MS) * WINDOW_MS;
            if start + WINDOW_MS - 1 <= self.watermark {
                continue; // Late: its window has fired.
            }
            let value = parse_f64(record.value).unwrap_or(0.0);
            let entry = self.held.in_call(slot).expect("every slot of the batch is resolved");
            self.add(entry, start, value).map_err(state_failure)?;
        }
        self.evict_cold().map_err(state_failure)?;
        Ok(Vec::new())
    }

    fn advance_watermark(&mut self, watermark: i64) -> Result<Emitted, CallError> {
        if watermark <= self.watermark {
            return Ok(Vec::new());
        }
        self.watermark = watermark;
        let mut out = RecordBatch::new();
        let mut value = Vec::new();
        for timer in self.timers.pop_due(TimeDomain::EventTime, watermark, usize::MAX) {
            let end = timer.timestamp + 1;
            if let Some(sum) = self.fire(&timer.key, end).map_err(state_failure)? {
                value.clear();
                write_result(&mut value, end, sum);
                out.push(&timer.key, &value, Some(timer.timestamp));
            }
        }
        Ok(if out.is_empty() { Vec::new() } else { vec![(String::new(), out)] })
    }

    fn snapshot(&mut self) -> Result<CapturedState, String> {
        self.write_back().map_err(|e| e.to_string())?;
        native_snapshot(&self.registry, &self.timers, self.state.as_mut())
    }
}

/// A window's result as the plugin emits it, written by the code the SDK
/// writes it with.
fn write_result(out: &mut Vec<u8>, end: i64, sum: f64) {
    write_window_result(out, end - WINDOW_MS, end, &sum).expect("a number is JSON");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryBackend, key_group_range};

    fn initial(backend: Box<dyn KeyedStateBackend>, meta: Option<crate::plugin::InstanceMeta>) -> InitialState {
        InitialState { backend, meta, max_parallelism: 128, key_groups: key_group_range(0, 128, 1) }
    }

    fn batch(events: &[(&str, &str, i64)]) -> RecordBatch {
        let mut batch = RecordBatch::new();
        for (key, value, at) in events {
            batch.push(key.as_bytes(), value.as_bytes(), Some(*at));
        }
        batch
    }

    fn fired(out: Emitted) -> Vec<(String, String)> {
        out.iter()
            .flat_map(|(_, batch)| batch.iter().map(|r| (String::from_utf8_lossy(r.key).into_owned(), String::from_utf8_lossy(r.value).into_owned())))
            .collect()
    }

    /// Windows fire by timer when the watermark passes their end, and
    /// reach the backend only at a snapshot.
    #[test]
    fn windows_fire_on_their_timers_and_are_stored_for_snapshots() {
        let mut op = NativeWindowSum::restore(initial(Box::new(MemoryBackend::new()), None)).unwrap();
        op.process(0, batch(&[("a", "1", 100), ("b", "2", 700), ("a", "4", 1100)]), InputKind::Keyed).unwrap();
        assert_eq!(op.timers.len(), 3, "a timer per opened window");
        assert!(op.state.is_empty().unwrap(), "held in memory between calls");
        op.snapshot().unwrap();
        assert!(!op.state.is_empty().unwrap(), "written back for the snapshot");
        let out = fired(op.advance_watermark(999).unwrap());
        assert_eq!(out, [
            ("a".to_owned(), r#"{"start":0,"end":1000,"value":1.0}"#.to_owned()),
            ("b".to_owned(), r#"{"start":0,"end":1000,"value":2.0}"#.to_owned())
        ]);
        let out = fired(op.advance_watermark(1999).unwrap());
        assert_eq!(out, [("a".to_owned(), r#"{"start":1000,"end":2000,"value":4.0}"#.to_owned())]);
        assert!(op.state.is_empty().unwrap(), "fired windows are deleted from the backend");
    }

    /// Past the bound, windows are written back and the colder half
    /// forgotten; they are read back when used or fired.
    #[test]
    fn windows_beyond_the_bound_are_written_back_and_read_again() {
        let mut op = NativeWindowSum::restore(initial(Box::new(MemoryBackend::new()), None)).unwrap();
        // Past the bound: a window and its key take more than 64 bytes.
        let keys: Vec<String> = (0..HELD_BYTES / 64).map(|k| format!("k{k}")).collect();
        let batch_of = |value: &str| {
            let mut batch = RecordBatch::new();
            keys.iter().for_each(|key| batch.push(key.as_bytes(), value.as_bytes(), Some(100)));
            batch
        };
        op.process(0, batch_of("1"), InputKind::Keyed).unwrap();
        assert_eq!(op.held_count, keys.len() / 2, "kept the more recent half");
        assert_eq!(op.forgotten, Some(keys.len() - keys.len() / 2), "lists what it forgot");
        assert!(!op.may_be_stored(op.held.find(b"k0"), 1000), "a new window is known absent");
        op.process(0, batch_of("2"), InputKind::Keyed).unwrap();
        let out = fired(op.advance_watermark(999).unwrap());
        assert_eq!(op.forgotten, Some(0), "all read back");
        assert_eq!(out.len(), keys.len());
        assert!(out.iter().all(|(_, v)| v == r#"{"start":0,"end":1000,"value":3.0}"#), "every window has both events");
        assert!(op.state.is_empty().unwrap(), "fired windows are deleted from the backend");
    }

    /// A restored operator goes on from the stored windows and timers.
    #[test]
    fn a_restored_window_sum_continues_the_stored_windows() {
        let mut before = NativeWindowSum::restore(initial(Box::new(MemoryBackend::new()), None)).unwrap();
        before.process(0, batch(&[("a", "1", 100)]), InputKind::Keyed).unwrap();
        before.snapshot().unwrap();
        let meta = crate::plugin::InstanceMeta { registry: before.registry.clone(), broadcast: Default::default(), timers: before.timers.clone() };
        let mut after = NativeWindowSum::restore(initial(before.state, Some(meta))).unwrap();
        after.process(0, batch(&[("a", "2.5", 200)]), InputKind::Keyed).unwrap();
        let out = fired(after.advance_watermark(999).unwrap());
        assert_eq!(out, [("a".to_owned(), r#"{"start":0,"end":1000,"value":3.5}"#.to_owned())]);
    }
}
