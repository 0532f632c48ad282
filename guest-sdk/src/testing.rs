//! Run operators natively in unit tests, without Wasm or a host.
//!
//! [`TestHarness`] drives an [`Operator`] exactly as a plugin instance is
//! driven — batches, key slots, state held in the instance and written
//! back when the host would take a snapshot — with keyed state kept in a
//! map you can inspect.
//!
//! ```
//! use weir_sdk::testing::{TestEvent, TestHarness};
//! # use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};
//! # struct Count { n: ValueState<u64> }
//! # impl Operator for Count {
//! #     fn init(_: &Config) -> Result<Self, Error> { Ok(Count { n: ValueState::new("n") }) }
//! #     fn process(&mut self, ctx: &mut Context<'_>, e: &Event<'_>) -> Result<(), Error> {
//! #         let n = self.n.update(ctx, |n| n.unwrap_or(0) + 1)?;
//! #         ctx.emit(e.key(), n);
//! #         Ok(())
//! #     }
//! # }
//! let mut harness = TestHarness::<Count>::new(&[]).unwrap();
//! let out = harness.process([TestEvent::new("a", ""), TestEvent::new("a", "")]).unwrap();
//! assert_eq!(out[1].value_str(), "2");
//! assert_eq!(harness.state::<u64>("n", "a"), Some(2));
//! ```

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

use serde::de::DeserializeOwned;

use crate::broadcast::RawBroadcastMap;
use crate::map_state::RawMapState;
use crate::event::{BatchView, NO_TIMESTAMP};
use crate::__private::bindings::weir::operator::timers::TimerChange;
use crate::runtime::{Runtime, TimerView};
use crate::timer::TimeDomain;
use crate::state::{HostStart, MapPage, RawValueState, SlotValues, StateHost};
use crate::{Config, Encode, Error, Operator, Ttl};

/// An input event for a [`TestHarness`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestEvent {
    key: Vec<u8>,
    value: Vec<u8>,
    timestamp: Option<i64>,
    keyed: bool,
}

impl TestEvent {
    /// A keyed event. The key may be empty: after a `key_by` edge, an event
    /// without a key (a line of a text file) is keyed by the empty key, and
    /// has state like any other.
    pub fn new(key: impl Encode, value: impl Encode) -> Self {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        key.encode(&mut k);
        value.encode(&mut v);
        TestEvent { key: k, value: v, timestamp: None, keyed: true }
    }

    /// An event without a key, on an input that is not keyed.
    pub fn unkeyed(value: impl Encode) -> Self {
        TestEvent { keyed: false, ..TestEvent::new(b"".as_slice(), value) }
    }

    /// The same event with an event timestamp (ms).
    pub fn at(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }
}

/// An event the operator emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    /// The output: empty for the main output, else the side output's name.
    pub output: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub timestamp: Option<i64>,
}

impl Emitted {
    /// The key as text (lossy).
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    /// The value as text (lossy).
    pub fn value_str(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// Keyed state of a harness: (state name, key) → encoded value.
#[derive(Default, Clone)]
struct TestStates {
    values: HashMap<(String, Vec<u8>), Vec<u8>>,
    /// Distinct keys of the batch being processed, by slot.
    batch_keys: Vec<Vec<u8>>,
    /// Broadcast maps: name → key → encoded value.
    broadcast: HashMap<String, HashMap<Vec<u8>, Vec<u8>>>,
    /// Whether the batch being processed came from a broadcast input.
    broadcast_writable: bool,
    /// Map states: (name, key, sub-key) → encoded value.
    maps: HashMap<(String, Vec<u8>, Vec<u8>), Vec<u8>>,
    /// Registered timers: (timestamp, key), per domain.
    event_timers: BTreeSet<(i64, Vec<u8>)>,
    processing_timers: BTreeSet<(i64, Vec<u8>)>,
    /// Map-state reads from the "host" (`get` and `get-many` calls).
    map_fetches: usize,
    /// When the values of states with a time-to-live expire.
    expiries: HashMap<StoredAt, i64>,
    /// The harness's processing time, which judges expiry.
    now: i64,
}

/// Where a value is stored: (a map state's, state name, key, sub-key —
/// empty for a value state's).
type StoredAt = (bool, String, Vec<u8>, Vec<u8>);

impl TestStates {
    /// Whether the value at `at`, of a state with `ttl`, has expired (and
    /// so is gone: a host would leave it out of a snapshot), as the host
    /// judges by its clock; reading a live one restarts its time if `ttl`
    /// says so.
    fn expired_on_read(&mut self, at: &StoredAt, ttl: Option<Ttl>) -> bool {
        let Some(ttl) = ttl else { return false };
        match self.expiries.get(at) {
            Some(&expires_at) if expires_at <= self.now => {
                self.expiries.remove(at);
                true
            }
            Some(_) if ttl.refresh_on_read() => {
                self.expiries.insert(at.clone(), self.expiry(ttl));
                false
            }
            _ => false,
        }
    }

    /// Whether the value at `at` is live now (for a listing, which does
    /// not restart times).
    fn live(&self, at: &StoredAt) -> bool {
        self.expiries.get(at).is_none_or(|&expires_at| expires_at > self.now)
    }

    /// Notes a write of the value at `at` (`present`: set, else removed).
    fn written(&mut self, at: StoredAt, ttl: Option<Ttl>, present: bool) {
        match ttl {
            Some(ttl) if present => {
                let expires_at = self.expiry(ttl);
                self.expiries.insert(at, expires_at)
            }
            _ => self.expiries.remove(&at),
        };
    }

    fn expiry(&self, ttl: Ttl) -> i64 {
        self.now.saturating_add(i64::try_from(ttl.millis()).unwrap_or(i64::MAX))
    }

    fn timers(&mut self, domain: TimeDomain) -> &mut BTreeSet<(i64, Vec<u8>)> {
        match domain {
            TimeDomain::EventTime => &mut self.event_timers,
            TimeDomain::ProcessingTime => &mut self.processing_timers,
        }
    }
}

/// Runs an [`Operator`] natively, one batch per call.
pub struct TestHarness<T> {
    runtime: Runtime<T>,
    states: Rc<RefCell<TestStates>>,
    /// The event time reached (the SDK's own tests set it back, as a host
    /// that restores no watermark would).
    pub(crate) watermark: i64,
    processing_time: i64,
}

impl<T: Operator> TestHarness<T> {
    /// Initialises the operator with the given config pairs, on empty
    /// state (as a job's first start).
    pub fn new(config: &[(&str, &str)]) -> Result<Self, Error> {
        Self::starting(config, TestStates::default(), HostStart::Empty)
    }

    fn starting(config: &[(&str, &str)], states: TestStates, start: HostStart) -> Result<Self, Error> {
        let config = Config::from_pairs(config.iter().copied());
        let operator = T::init(&config)?;
        let states = Rc::new(RefCell::new(states));
        let host = Box::new(TestHost(states.clone()));
        let runtime = Runtime::new(operator, host, start, config.resident_bytes());
        Ok(TestHarness { runtime, states, watermark: i64::MIN, processing_time: 0 })
    }

    /// Processes `events` as one batch on input 0.
    pub fn process(&mut self, events: impl IntoIterator<Item = TestEvent>) -> Result<Vec<Emitted>, Error> {
        self.process_input(0, events)
    }

    /// Processes `events` as one batch on the given input. The batch is keyed
    /// (as after a `key_by` edge) unless its events are all
    /// [`unkeyed`](TestEvent::unkeyed).
    pub fn process_input(
        &mut self,
        input: u32,
        events: impl IntoIterator<Item = TestEvent>,
    ) -> Result<Vec<Emitted>, Error> {
        let events: Vec<TestEvent> = events.into_iter().collect();
        let keyed = events.iter().any(|e| e.keyed);
        let key_slots = if keyed { self.assign_slots(&events) } else { Vec::new() };
        self.run(input, &events, key_slots, false)
    }

    /// Processes `events` as one batch from a broadcast input: not keyed, and
    /// allowed to write broadcast state.
    pub fn process_broadcast(
        &mut self,
        input: u32,
        events: impl IntoIterator<Item = TestEvent>,
    ) -> Result<Vec<Emitted>, Error> {
        let events: Vec<TestEvent> = events.into_iter().collect();
        self.run(input, &events, Vec::new(), true)
    }

    fn run(&mut self, input: u32, events: &[TestEvent], key_slots: Vec<u32>, broadcast: bool) -> Result<Vec<Emitted>, Error> {
        let (data, offsets, timestamps) = flatten(events);
        self.states.borrow_mut().broadcast_writable = broadcast;
        self.states.borrow_mut().now = self.processing_time;
        let view = BatchView {
            input,
            data: &data,
            offsets: &offsets,
            timestamps: &timestamps,
            key_slots: &key_slots,
            watermark: self.watermark,
            processing_time: self.processing_time,
        };
        let result = self.runtime.process(&view);
        let emitted = collect_emitted(&mut self.runtime);
        result.map(|()| emitted)
    }

    /// Moves the watermark to `watermark` (if that is forward) and fires the
    /// event-time timers it passes, in timestamp order, as the host does.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<Emitted>, Error> {
        if watermark <= self.watermark {
            return Ok(Vec::new());
        }
        self.watermark = watermark;
        self.fire(TimeDomain::EventTime, watermark)
    }

    /// Moves the processing time to `now` and fires the processing-time
    /// timers it has passed: as in the host, a timer fires once the clock
    /// is past its millisecond (a timer for 5 999 fires at 6 000).
    pub fn advance_processing_time(&mut self, now: i64) -> Result<Vec<Emitted>, Error> {
        self.processing_time = self.processing_time.max(now);
        self.fire(TimeDomain::ProcessingTime, now.saturating_sub(1))
    }

    /// Calls the operator's `flush`, as the host does before a snapshot:
    /// state kept in memory between calls is written back.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.runtime.flush()
    }

    /// A new instance of the operator on a snapshot of this one's state
    /// (taken after a flush, as the host does): what a restore after a
    /// failure, an upgrade or a rescale starts from.
    pub fn restored(&mut self, config: &[(&str, &str)]) -> Result<TestHarness<T>, Error> {
        self.flush()?;
        let mut restored = TestHarness::starting(config, self.states.borrow().clone(), HostStart::Restored)?;
        restored.watermark = self.watermark;
        restored.processing_time = self.processing_time;
        Ok(restored)
    }

    /// The value of map state `name` for `key` under `sub_key`, as a
    /// snapshot would hold it now (the operator is flushed first), decoded
    /// from JSON.
    pub fn map_state<S: DeserializeOwned>(&mut self, name: &str, key: impl Encode, sub_key: impl Encode) -> Option<S> {
        self.flush().expect("the operator writes back what it holds");
        self.stored_map_state(name, key, sub_key)
    }

    /// [`TestHarness::map_state`] without the flush: what the host holds
    /// while the operator may hold newer values.
    pub(crate) fn stored_map_state<S: DeserializeOwned>(&self, name: &str, key: impl Encode, sub_key: impl Encode) -> Option<S> {
        let (mut k, mut s) = (Vec::new(), Vec::new());
        key.encode(&mut k);
        sub_key.encode(&mut s);
        let states = self.states.borrow();
        let bytes = states.maps.get(&(name.to_owned(), k, s))?;
        Some(serde_json::from_slice(bytes).expect("state written by the SDK is valid JSON"))
    }

    /// How many host calls read map state so far (one per `get`, one per
    /// prefetch): what `Operator::prepare` saves.
    pub fn map_fetches(&self) -> usize {
        self.states.borrow().map_fetches
    }

    /// The timers registered, as (timestamp, key), in order.
    pub fn timers(&self, domain: TimeDomain) -> Vec<(i64, Vec<u8>)> {
        self.states.borrow_mut().timers(domain).iter().cloned().collect()
    }

    fn fire(&mut self, domain: TimeDomain, time: i64) -> Result<Vec<Emitted>, Error> {
        let mut emitted = Vec::new();
        self.states.borrow_mut().now = self.processing_time;
        loop {
            let due: Vec<(i64, Vec<u8>)> = {
                let mut states = self.states.borrow_mut();
                let timers = states.timers(domain);
                // As the host fires them: in (time, key) order, one timer
                // of a key a call (a call's keys are distinct).
                let mut keys = std::collections::HashSet::new();
                let due: Vec<_> = timers.iter().take_while(|(t, key)| *t <= time && keys.insert(key.clone())).cloned().collect();
                for timer in &due {
                    timers.remove(timer);
                }
                due
            };
            if due.is_empty() {
                return Ok(emitted);
            }
            let events: Vec<TestEvent> = due.iter().map(|(t, key)| TestEvent::new(key.as_slice(), "").at(*t)).collect();
            let key_slots = self.assign_slots(&events);
            let (data, offsets) = keys_flat(&due);
            let timestamps: Vec<i64> = due.iter().map(|(t, _)| *t).collect();
            let view = TimerView {
                data: &data,
                offsets: &offsets,
                timestamps: &timestamps,
                domains: vec![domain; due.len()],
                key_slots: &key_slots,
                watermark: self.watermark,
                processing_time: self.processing_time,
            };
            let result = self.runtime.on_timers(&view);
            emitted.extend(collect_emitted(&mut self.runtime));
            result?;
        }
    }

    /// The value of state `name` for `key`, as a snapshot would hold it now
    /// (the operator is flushed first), decoded from JSON.
    pub fn state<S: DeserializeOwned>(&mut self, name: &str, key: impl Encode) -> Option<S> {
        self.flush().expect("the operator writes back what it holds");
        self.stored_state(name, key)
    }

    /// [`TestHarness::state`] without the flush: what the host holds while
    /// the operator may hold newer values.
    pub(crate) fn stored_state<S: DeserializeOwned>(&self, name: &str, key: impl Encode) -> Option<S> {
        let mut k = Vec::new();
        key.encode(&mut k);
        let states = self.states.borrow();
        let bytes = states.values.get(&(name.to_owned(), k))?;
        Some(serde_json::from_slice(bytes).expect("state written by the SDK is valid JSON"))
    }

    /// Gives each distinct key a slot in order of first appearance, as the
    /// host does.
    fn assign_slots(&self, events: &[TestEvent]) -> Vec<u32> {
        let mut states = self.states.borrow_mut();
        states.batch_keys.clear();
        let mut slots = HashMap::new();
        events
            .iter()
            .map(|event| {
                *slots.entry(event.key.clone()).or_insert_with(|| {
                    states.batch_keys.push(event.key.clone());
                    (states.batch_keys.len() - 1) as u32
                })
            })
            .collect()
    }
}

fn flatten(events: &[TestEvent]) -> (Vec<u8>, Vec<u32>, Vec<i64>) {
    let mut data = Vec::new();
    let mut offsets = vec![0u32];
    for event in events {
        data.extend_from_slice(&event.key);
        offsets.push(data.len() as u32);
        data.extend_from_slice(&event.value);
        offsets.push(data.len() as u32);
    }
    let timestamps = events.iter().map(|e| e.timestamp.unwrap_or(NO_TIMESTAMP)).collect();
    (data, offsets, timestamps)
}

fn keys_flat(timers: &[(i64, Vec<u8>)]) -> (Vec<u8>, Vec<u32>) {
    let mut data = Vec::new();
    let mut offsets = vec![0u32];
    for (_, key) in timers {
        data.extend_from_slice(key);
        offsets.push(data.len() as u32);
    }
    (data, offsets)
}

fn collect_emitted<T>(runtime: &mut Runtime<T>) -> Vec<Emitted> {
    let mut emitted = Vec::new();
    for (output, (data, offsets, timestamps)) in runtime.outputs.drain() {
        for i in 0..offsets.len() / 2 {
            let slice = |j: usize| data[offsets[j] as usize..offsets[j + 1] as usize].to_vec();
            emitted.push(Emitted {
                output: output.clone(),
                key: slice(2 * i),
                value: slice(2 * i + 1),
                timestamp: timestamps.get(i).copied().filter(|t| *t != NO_TIMESTAMP),
            });
        }
    }
    emitted
}

struct TestHost(Rc<RefCell<TestStates>>);

impl StateHost for TestHost {
    fn open(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawValueState> {
        Box::new(TestValueState { name: name.to_owned(), ttl, states: self.0.clone() })
    }

    fn open_broadcast(&mut self, name: &str) -> Box<dyn RawBroadcastMap> {
        Box::new(TestBroadcastMap { name: name.to_owned(), states: self.0.clone() })
    }

    fn open_map(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawMapState> {
        Box::new(TestMapState { name: name.to_owned(), ttl, states: self.0.clone() })
    }

    fn update_timers(&mut self, changes: &[TimerChange]) -> Result<(), Error> {
        let mut states = self.0.borrow_mut();
        for change in changes {
            let key = states.batch_keys[change.slot as usize].clone();
            let timers = states.timers(TimeDomain::from_wit(change.domain));
            if change.delete {
                timers.remove(&(change.timestamp, key));
            } else {
                timers.insert((change.timestamp, key));
            }
        }
        Ok(())
    }
}

struct TestMapState {
    name: String,
    ttl: Option<Ttl>,
    states: Rc<RefCell<TestStates>>,
}

impl TestMapState {
    fn entry_key(&self, states: &TestStates, slot: u32, sub_key: &[u8]) -> (String, Vec<u8>, Vec<u8>) {
        (self.name.clone(), states.batch_keys[slot as usize].clone(), sub_key.to_vec())
    }
}

impl TestMapState {
    fn lookup(&self, slot: u32, sub_key: &[u8]) -> Option<Vec<u8>> {
        let mut states = self.states.borrow_mut();
        let entry = self.entry_key(&states, slot, sub_key);
        if states.expired_on_read(&map_stored_at(&entry), self.ttl) {
            states.maps.remove(&entry);
        }
        states.maps.get(&entry).cloned()
    }

    /// Sets a map entry, or removes it when `value` is `None`.
    fn write_entry(&self, states: &mut TestStates, entry: (String, Vec<u8>, Vec<u8>), value: Option<&[u8]>) {
        states.written(map_stored_at(&entry), self.ttl, value.is_some());
        match value {
            Some(value) => states.maps.insert(entry, value.to_vec()),
            None => states.maps.remove(&entry),
        };
    }
}

fn map_stored_at((name, key, sub_key): &(String, Vec<u8>, Vec<u8>)) -> StoredAt {
    (true, name.clone(), key.clone(), sub_key.clone())
}

impl RawMapState for TestMapState {
    fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.states.borrow_mut().map_fetches += 1;
        Ok(self.lookup(slot, sub_key))
    }

    fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<SlotValues, Error> {
        let mut values = SlotValues::empty();
        for (i, &slot) in slots.iter().enumerate() {
            values.push(self.lookup(slot, &sub_keys[offsets[i] as usize..offsets[i + 1] as usize]).as_deref());
        }
        self.states.borrow_mut().map_fetches += 1;
        Ok(values)
    }

    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
        let mut states = self.states.borrow_mut();
        for i in 0..key_offsets.len() - 1 {
            let key = keys[key_offsets[i] as usize..key_offsets[i + 1] as usize].to_vec();
            let entry = (self.name.clone(), key, sub_keys[offsets[i] as usize..offsets[i + 1] as usize].to_vec());
            self.write_entry(&mut states, entry, values.value(i));
        }
        Ok(())
    }

    fn set_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
        let mut states = self.states.borrow_mut();
        for (i, &slot) in slots.iter().enumerate() {
            let sub_key = &sub_keys[offsets[i] as usize..offsets[i + 1] as usize];
            let entry = self.entry_key(&states, slot, sub_key);
            self.write_entry(&mut states, entry, values.value(i));
        }
        Ok(())
    }

    fn entries(&self, slot: u32, after: Option<&[u8]>, limit: u32) -> Result<MapPage, Error> {
        let states = self.states.borrow();
        let key = &states.batch_keys[slot as usize];
        let mut listed: Vec<_> = states
            .maps
            .iter()
            .filter(|((name, k, sub_key), _)| *name == self.name && k == key && after.is_none_or(|a| sub_key.as_slice() > a))
            .filter(|(entry, _)| states.live(&map_stored_at(entry)))
            .map(|((_, _, sub_key), value)| (sub_key.as_slice(), value.as_slice()))
            .collect();
        listed.sort();
        Ok(MapPage::first(listed.into_iter(), limit as usize))
    }

    fn clear(&self, slots: &[u32]) -> Result<(), Error> {
        let mut states = self.states.borrow_mut();
        let keys: Vec<Vec<u8>> = slots.iter().map(|&slot| states.batch_keys[slot as usize].clone()).collect();
        states.maps.retain(|(name, key, _), _| *name != self.name || !keys.contains(key));
        Ok(())
    }
}

struct TestBroadcastMap {
    name: String,
    states: Rc<RefCell<TestStates>>,
}

impl TestBroadcastMap {
    fn write(&self, change: impl FnOnce(&mut HashMap<Vec<u8>, Vec<u8>>)) -> Result<(), Error> {
        let mut states = self.states.borrow_mut();
        if !states.broadcast_writable {
            return Err(Error::State(
                "broadcast state can only be changed while processing an event from a broadcast input".into(),
            ));
        }
        change(states.broadcast.entry(self.name.clone()).or_default());
        Ok(())
    }
}

impl RawBroadcastMap for TestBroadcastMap {
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let states = self.states.borrow();
        states.broadcast.get(&self.name).map(|m| m.clone().into_iter().collect()).unwrap_or_default()
    }

    fn set(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.write(|map| {
            map.insert(key.to_vec(), value.to_vec());
        })
    }

    fn remove(&self, key: &[u8]) -> Result<(), Error> {
        self.write(|map| {
            map.remove(key);
        })
    }
}

struct TestValueState {
    name: String,
    ttl: Option<Ttl>,
    states: Rc<RefCell<TestStates>>,
}

impl RawValueState for TestValueState {
    fn get_many(&self, slots: &[u32]) -> Result<SlotValues, Error> {
        let mut states = self.states.borrow_mut();
        let mut values = SlotValues::empty();
        for &slot in slots {
            let key = states.batch_keys.get(slot as usize).ok_or_else(|| Error::State(format!("slot {slot} is outside the current batch")))?;
            let entry = (self.name.clone(), key.clone());
            if states.expired_on_read(&(false, entry.0.clone(), entry.1.clone(), Vec::new()), self.ttl) {
                states.values.remove(&entry);
            }
            values.push(states.values.get(&entry).map(Vec::as_slice));
        }
        Ok(values)
    }

    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
        let mut states = self.states.borrow_mut();
        for i in 0..key_offsets.len() - 1 {
            let key = keys[key_offsets[i] as usize..key_offsets[i + 1] as usize].to_vec();
            let entry = (self.name.clone(), key);
            states.written((false, entry.0.clone(), entry.1.clone(), Vec::new()), self.ttl, values.value(i).is_some());
            match values.value(i) {
                Some(value) => states.values.insert(entry, value.to_vec()),
                None => states.values.remove(&entry),
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Context, Event};

    struct Quiet;

    impl Operator for Quiet {
        fn init(_: &Config) -> Result<Self, Error> {
            Ok(Quiet)
        }
        fn process(&mut self, _: &mut Context<'_>, _: &Event<'_>) -> Result<(), Error> {
            Ok(())
        }
    }

    /// Timers fire as the host fires them: one of a key a call, so a timer
    /// that deletes its key's next one keeps it from firing.
    #[test]
    fn a_keys_timers_fire_one_call_at_a_time() {
        struct Chain;
        impl Operator for Chain {
            fn init(_: &Config) -> Result<Self, Error> {
                Ok(Chain)
            }
            fn process(&mut self, ctx: &mut Context<'_>, _: &Event<'_>) -> Result<(), Error> {
                ctx.register_timer(TimeDomain::EventTime, 10)?;
                ctx.register_timer(TimeDomain::EventTime, 20)
            }
            fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &crate::Timer<'_>) -> Result<(), Error> {
                ctx.emit(timer.key(), timer.timestamp());
                if timer.timestamp() == 10 {
                    ctx.delete_timer(TimeDomain::EventTime, 20)?;
                }
                Ok(())
            }
        }
        let mut harness = TestHarness::<Chain>::new(&[]).unwrap();
        harness.process([TestEvent::new("a", "x")]).unwrap();
        let fired = harness.advance_watermark(30).unwrap();
        let times: Vec<&[u8]> = fired.iter().map(|e| e.value.as_slice()).collect();
        assert_eq!(times, [b"10".as_slice()], "the deleted timer does not fire");
    }

    #[test]
    fn a_malformed_timer_batch_is_an_error_not_a_panic() {
        let mut harness = TestHarness::<Quiet>::new(&[]).unwrap();
        let view = |offsets, key_slots| TimerView {
            data: b"ab",
            offsets,
            timestamps: &[1, 2],
            domains: vec![TimeDomain::EventTime; 2],
            key_slots,
            watermark: 0,
            processing_time: 0,
        };
        assert!(harness.runtime.on_timers(&view(&[0, 1, 2], &[0, 1])).is_ok());
        let malformed: [(&[u32], &[u32]); 3] = [(&[0, 1, 9], &[0, 1]), (&[0, 1], &[0, 1]), (&[0, 1, 2], &[0])];
        for (offsets, slots) in malformed {
            let error = harness.runtime.on_timers(&view(offsets, slots)).unwrap_err();
            assert!(matches!(error, Error::InvalidInput(_)), "{offsets:?} {slots:?}: {error:?}");
        }
    }

    struct Alarm;

    impl Operator for Alarm {
        fn init(_: &Config) -> Result<Self, Error> {
            Ok(Alarm)
        }
        fn process(&mut self, ctx: &mut Context<'_>, _: &Event<'_>) -> Result<(), Error> {
            ctx.register_timer(TimeDomain::EventTime, 10)
        }
    }

    /// Counts events per key.
    struct Counting(crate::ValueState<u64>);

    impl Operator for Counting {
        fn init(_: &Config) -> Result<Self, Error> {
            Ok(Counting(crate::ValueState::new("count")))
        }
        fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
            let count = self.0.update(ctx, |count| count.unwrap_or(0) + 1)?;
            ctx.emit(event.key(), count);
            Ok(())
        }
    }

    /// As in the host, the empty key is a key like any other: lines of a
    /// text file behind a `key_by` edge are counted under it.
    #[test]
    fn the_empty_key_has_state_like_any_other() {
        let mut harness = TestHarness::<Counting>::new(&[]).unwrap();
        harness.process([TestEvent::new("", "x"), TestEvent::new("a", "y")]).unwrap();
        let emitted = harness.process([TestEvent::new("", "z")]).unwrap();
        assert_eq!(emitted.iter().map(|e| (e.key_str(), e.value_str())).collect::<Vec<_>>(), [(String::new(), "2".to_owned())]);
    }

    #[test]
    fn a_timer_on_an_unkeyed_input_says_it_is_the_timer() {
        let mut harness = TestHarness::<Alarm>::new(&[]).unwrap();
        let error = harness.process([TestEvent::unkeyed("x")]).unwrap_err().to_string();
        assert!(error.contains("a timer used on an event without a key: either the operator's inputs are not keyed (set `key_by = true`"), "{error}");
        let error = harness.process_broadcast(1, [TestEvent::unkeyed("x")]).unwrap_err().to_string();
        assert!(error.contains("or the event came from a broadcast input"), "{error}");
    }

    /// A handle made where it is used — in `process`, not kept from `init`
    /// — is the same state as every other handle of its name: it sees what
    /// they wrote, however much of it the instance still holds unwritten.
    #[test]
    fn handles_made_per_event_share_their_state() {
        struct PerEvent;
        impl Operator for PerEvent {
            fn init(_: &Config) -> Result<Self, Error> {
                Ok(PerEvent)
            }
            fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
                let count = crate::ValueState::<u64>::new("count").update(ctx, |count| count.unwrap_or(0) + 1)?;
                let seen = crate::MapState::<u64>::new("seen");
                let times = seen.get(ctx, "times")?.unwrap_or(0) + 1;
                crate::MapState::<u64>::new("seen").set(ctx, "times", &times)?;
                ctx.emit(event.key(), format!("{count} {times}"));
                Ok(())
            }
        }
        let mut harness = TestHarness::<PerEvent>::new(&[]).unwrap();
        let first = harness.process([TestEvent::new("a", ""), TestEvent::new("a", "")]).unwrap();
        let second = harness.process([TestEvent::new("a", "")]).unwrap();
        let counts: Vec<String> = first.iter().chain(&second).map(Emitted::value_str).collect();
        assert_eq!(counts, ["1 1", "2 2", "3 3"]);
        harness.flush().unwrap();
        assert_eq!(harness.state::<u64>("count", "a"), Some(3));
    }
}
