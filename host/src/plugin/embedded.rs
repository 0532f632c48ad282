//! A plugin's operator compiled into the host: the benchmark's baseline for
//! the cost of Wasm.
//!
//! [`EmbeddedInstance`] runs a Rust SDK operator — the very crate a plugin
//! is built from, compiled natively — with the host state of a plugin
//! instance ([`PluginState`]) and the same host code behind every state,
//! timer and broadcast function: the SDK's calls that would cross the WIT
//! boundary call the interfaces' host implementations directly. So a job
//! run with `native:count` against `word_count.wasm` differs only in what
//! Wasm adds: the compiler (Cranelift against LLVM), the copies of the
//! canonical ABI, the sandbox's checks. Its snapshots are the plugin's.
//!
//! Nothing is sandboxed here: no memory cap, no deadline. It is for code
//! the host ships.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use wasmtime::component::Resource;
use weir_sdk::{Operator, Ttl};
use weir_sdk::embed::{self, Embedded, RawBroadcastMap, RawMapState, RawValueState, StateHost};

use super::bindings::weir::operator::broadcast_state::HostBroadcastMap;
use super::bindings::weir::operator::state::{HostMapState, HostValueState, SlotValues, TimeToLive};
use super::bindings::weir::operator::timers::{Host as _, TimerChange};
use super::bindings::weir::operator::types::{StateError, TimeDomain};
use super::broadcast::BroadcastMapHandle;
use super::error::CallError;
use super::host_state::PluginState;
use super::limits::Limits;
use super::bindings::OperatorError;
use super::instance::{CapturedState, InitialState, InputKind, describe_operator_error};
use super::state::{MapStateHandle, ValueStateHandle};
use crate::dataflow::{BATCH_SIZE, NO_TIMESTAMP, RecordBatch};
use crate::state::{FiringBudget, StateSizeGauge, processing_timers_due_at};
use crate::state::TimeDomain as HostDomain;

/// The host state an embedded operator shares with the SDK's handles on it.
type Shared = Rc<RefCell<PluginState>>;

/// A Rust SDK operator `T` compiled into the host, on a plugin instance's
/// host state.
pub struct EmbeddedInstance<T> {
    state: Shared,
    operator: Embedded<T>,
    /// The operator's event-time watermark; it never goes backwards.
    watermark: i64,
}

// SAFETY: the instance is moved to its task's thread as a whole and used
// there only. The `Rc`s of `state` are held by the instance and by the
// handles the SDK keeps inside `operator` — nowhere else — so no two
// threads ever reach them, and the SDK keeps no thread-local state that a
// call depends on (its schema declarations serve `check-state`, which an
// embedded operator is never asked).
unsafe impl<T> Send for EmbeddedInstance<T> {}

impl<T: Operator> EmbeddedInstance<T> {
    /// The operator made by `T::init` from `config` (with the host's
    /// `weir.` keys), on `state`.
    pub fn new(state: InitialState, config: &[(String, String)]) -> Result<Self, CallError> {
        let mut data = PluginState::new(&UNBOUNDED, state.backend, state.key_groups, state.max_parallelism);
        let watermark = state.meta.as_ref().map_or(NO_TIMESTAMP, |meta| meta.watermark);
        if let Some(meta) = state.meta {
            data.registry = meta.registry;
            data.broadcast = meta.broadcast;
            data.timers = meta.timers;
        }
        let state = Rc::new(RefCell::new(data));
        let operator = Embedded::new(config.to_vec(), Box::new(HostStates(state.clone()))).map_err(operator_error)?;
        Ok(EmbeddedInstance { state, operator, watermark })
    }

    /// Runs the operator on one batch that arrived on `input`.
    pub fn process(&mut self, input: u32, batch: RecordBatch, kind: InputKind) -> Result<Vec<(String, RecordBatch)>, CallError> {
        let batch = {
            let mut state = self.state.borrow_mut();
            let batch = state.input_batch(input, batch, kind, self.watermark);
            state.begin_call(kind == InputKind::Keyed, kind == InputKind::Broadcast);
            batch
        };
        let events = &batch.events;
        let result = self.operator.process(&embed::InputBatch {
            input,
            data: &events.data,
            offsets: &events.offsets,
            timestamps: &events.timestamps,
            key_slots: &batch.key_slots,
            watermark: batch.watermark,
            processing_time: batch.processing_time,
        });
        self.returned(result).and_then(collect)
    }

    /// Moves the watermark forward to `watermark` (never back) and fires the
    /// event-time timers it passes.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<(String, RecordBatch)>, CallError> {
        if watermark <= self.watermark {
            return Ok(Vec::new());
        }
        self.watermark = watermark;
        self.fire(HostDomain::EventTime, watermark)
    }

    /// Fires the processing-time timers due at `now`.
    pub fn fire_processing_timers(&mut self, now: i64) -> Result<Vec<(String, RecordBatch)>, CallError> {
        self.fire(HostDomain::ProcessingTime, processing_timers_due_at(now))
    }

    pub fn next_processing_timer(&self) -> Option<i64> {
        self.state.borrow().timers.next_processing_fire()
    }

    /// Runs `on_timer` for the due timers of `domain`, batch by batch, until
    /// none is due (see [`FiringBudget::fire_until_none_due`]).
    fn fire(&mut self, domain: HostDomain, time: i64) -> Result<Vec<(String, RecordBatch)>, CallError> {
        let fire_call = || {
            let timers = {
                let mut state = self.state.borrow_mut();
                let fired = state.timers.pop_due(domain, time, BATCH_SIZE);
                if fired.is_empty() {
                    return Ok(None);
                }
                let timers = state.timer_batch(&fired, self.watermark);
                state.begin_call(true, false);
                timers
            };
            let result = self.operator.on_timers(&embed::TimerBatch {
                data: &timers.data,
                offsets: &timers.offsets,
                timestamps: &timers.timestamps,
                domains: timers.domains.iter().map(|d| guest_domain(*d)).collect(),
                key_slots: &timers.key_slots,
                watermark: timers.watermark,
                processing_time: timers.processing_time,
            });
            let call = self.state.borrow_mut().firing.take();
            Ok(Some((self.returned(result).and_then(collect)?, call)))
        };
        FiringBudget::fire_until_none_due(time, fire_call, CallError::Operator)
    }

    /// Reports the size of its keyed state to `gauge` from now on.
    pub fn report_state_size(&mut self, gauge: StateSizeGauge) {
        self.state.borrow_mut().report_size_to(gauge);
    }

    /// Captures the state for a checkpoint, after the operator has written
    /// back what it holds.
    pub fn snapshot(&mut self) -> Result<CapturedState, CallError> {
        let started = Instant::now();
        self.state.borrow_mut().begin_call(false, false);
        let flushed = self.operator.flush();
        self.returned(flushed)?;
        self.state.borrow_mut().capture(started, self.watermark)
    }

    /// Ends the call; its result, or the backend's failure during it.
    fn returned<R>(&mut self, result: Result<R, weir_sdk::Error>) -> Result<R, CallError> {
        let mut state = self.state.borrow_mut();
        state.end_call();
        if let Some(failure) = state.backend_failure.take() {
            return Err(CallError::Backend(failure));
        }
        result.map_err(operator_error)
    }
}

fn collect(outputs: Vec<embed::Output>) -> Result<Vec<(String, RecordBatch)>, CallError> {
    outputs
        .into_iter()
        .map(|(output, (data, offsets, timestamps))| {
            RecordBatch::from_parts(data, offsets, timestamps).map(|batch| (output, batch)).map_err(CallError::Malformed)
        })
        .collect()
}

/// The operator's error, worded as a plugin's `operator-error` is.
fn operator_error(error: weir_sdk::Error) -> CallError {
    CallError::Operator(describe_operator_error(match error {
        weir_sdk::Error::InvalidConfig(m) => OperatorError::InvalidConfig(m),
        weir_sdk::Error::InvalidInput(m) => OperatorError::InvalidInput(m),
        weir_sdk::Error::State(m) => OperatorError::State(m),
        weir_sdk::Error::Other(m) => OperatorError::Other(m),
    }))
}

/// Native operators are compiled into the host, their state names fixed:
/// the host's limits on names (`StateRegistry::register`) are never hit.
/// A native operator is compiled into the host and trusted: the sandbox's
/// limits do not apply.
const UNBOUNDED: Limits = Limits { memory_bytes: usize::MAX, call_timeout: None, max_timers: usize::MAX };

const NATIVE_NAMES: &str = "a native operator opens its states within the host's limits, each with one time-to-live";

fn host_ttl(ttl: Ttl) -> TimeToLive {
    TimeToLive { millis: ttl.millis(), refresh_on_read: ttl.refresh_on_read() }
}

/// The SDK's way into the host state: each function the host's interface
/// implementation, called directly.
struct HostStates(Shared);

impl StateHost for HostStates {
    fn open(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawValueState> {
        let mut state = self.0.borrow_mut();
        let resource = match ttl {
            Some(ttl) => HostValueState::open_expiring(&mut state.keyed_state(), name.to_owned(), host_ttl(ttl)),
            None => HostValueState::new(&mut state.keyed_state(), name.to_owned()),
        };
        let resource = resource.expect(NATIVE_NAMES);
        Box::new(Handle { state: self.0.clone(), rep: resource.rep(), kind: HandleKind::Value })
    }

    fn open_broadcast(&mut self, name: &str) -> Box<dyn RawBroadcastMap> {
        let resource = HostBroadcastMap::new(&mut self.0.borrow_mut().broadcast_state(), name.to_owned())
            .expect(NATIVE_NAMES);
        Box::new(Handle { state: self.0.clone(), rep: resource.rep(), kind: HandleKind::Broadcast })
    }

    fn update_timers(&mut self, changes: &[embed::TimerChange]) -> Result<(), weir_sdk::Error> {
        let changes = changes
            .iter()
            .map(|c| TimerChange { slot: c.slot, timestamp: c.timestamp, domain: host_domain(c.domain), delete: c.delete })
            .collect();
        let applied = self.0.borrow_mut().timers().update(changes).expect("a native operator's timers are not bounded");
        applied.map_err(guest_error)
    }

    fn open_map(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawMapState> {
        let mut state = self.0.borrow_mut();
        let resource = match ttl {
            Some(ttl) => HostMapState::open_expiring(&mut state.keyed_state(), name.to_owned(), host_ttl(ttl)),
            None => HostMapState::new(&mut state.keyed_state(), name.to_owned()),
        };
        let resource = resource.expect(NATIVE_NAMES);
        Box::new(Handle { state: self.0.clone(), rep: resource.rep(), kind: HandleKind::Map })
    }
}

/// A state resource the SDK holds: its handle in the instance's resource
/// table, dropped from it with the handle, as a component's are.
struct Handle {
    state: Shared,
    rep: u32,
    kind: HandleKind,
}

enum HandleKind {
    Value,
    Map,
    Broadcast,
}

impl Handle {
    fn value(&self) -> Resource<ValueStateHandle> {
        Resource::new_borrow(self.rep)
    }

    fn map(&self) -> Resource<MapStateHandle> {
        Resource::new_borrow(self.rep)
    }

    fn broadcast(&self) -> Resource<BroadcastMapHandle> {
        Resource::new_borrow(self.rep)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // (Not while a call of the instance has the state borrowed: then the
        // entry stays, as a component's leaked handle would.)
        let Ok(mut state) = self.state.try_borrow_mut() else { return };
        let _ = match self.kind {
            HandleKind::Value => HostValueState::drop(&mut state.keyed_state(), Resource::new_own(self.rep)),
            HandleKind::Map => HostMapState::drop(&mut state.keyed_state(), Resource::new_own(self.rep)),
            HandleKind::Broadcast => HostBroadcastMap::drop(&mut state.broadcast_state(), Resource::new_own(self.rep)),
        };
    }
}

impl RawValueState for Handle {
    fn get_many(&self, slots: &[u32]) -> Result<embed::SlotValues, weir_sdk::Error> {
        let values = HostValueState::get_many(&mut self.state.borrow_mut().keyed_state(), self.value(), slots.to_vec());
        values.map(guest_values).map_err(guest_error)
    }

    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], values: &embed::SlotValues) -> Result<(), weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        HostValueState::set_keyed(&mut state.keyed_state(), self.value(), keys.to_vec(), key_offsets.to_vec(), host_values(values))
            .map_err(guest_error)
    }
}

impl RawMapState for Handle {
    fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, weir_sdk::Error> {
        HostMapState::get(&mut self.state.borrow_mut().keyed_state(), self.map(), slot, sub_key.to_vec()).map_err(guest_error)
    }

    fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<embed::SlotValues, weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        HostMapState::get_many(&mut state.keyed_state(), self.map(), slots.to_vec(), sub_keys.to_vec(), offsets.to_vec())
            .map(guest_values)
            .map_err(guest_error)
    }

    fn set_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32], values: &embed::SlotValues) -> Result<(), weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        let values = host_values(values);
        HostMapState::set_many(&mut state.keyed_state(), self.map(), slots.to_vec(), sub_keys.to_vec(), offsets.to_vec(), values)
            .map_err(guest_error)
    }

    fn set_keyed(
        &self,
        keys: &[u8],
        key_offsets: &[u32],
        sub_keys: &[u8],
        offsets: &[u32],
        values: &embed::SlotValues,
    ) -> Result<(), weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        let (keys, key_offsets, sub_keys, offsets) = (keys.to_vec(), key_offsets.to_vec(), sub_keys.to_vec(), offsets.to_vec());
        HostMapState::set_keyed(&mut state.keyed_state(), self.map(), keys, key_offsets, sub_keys, offsets, host_values(values))
            .map_err(guest_error)
    }

    fn entries(&self, slot: u32, after: Option<&[u8]>, limit: u32) -> Result<embed::MapPage, weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        let page = HostMapState::entries(&mut state.keyed_state(), self.map(), slot, after.map(<[u8]>::to_vec), limit);
        page.map(|p| embed::MapPage { sub_keys: p.sub_keys, sub_key_offsets: p.sub_key_offsets, data: p.data, offsets: p.offsets, more: p.more })
            .map_err(guest_error)
    }

    fn clear(&self, slots: &[u32]) -> Result<(), weir_sdk::Error> {
        HostMapState::clear(&mut self.state.borrow_mut().keyed_state(), self.map(), slots.to_vec()).map_err(guest_error)
    }
}

impl RawBroadcastMap for Handle {
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        HostBroadcastMap::entries(&mut self.state.borrow_mut().broadcast_state(), self.broadcast())
    }

    fn set(&self, key: &[u8], value: &[u8]) -> Result<(), weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        HostBroadcastMap::set(&mut state.broadcast_state(), self.broadcast(), key.to_vec(), value.to_vec()).map_err(guest_error)
    }

    fn remove(&self, key: &[u8]) -> Result<(), weir_sdk::Error> {
        let mut state = self.state.borrow_mut();
        HostBroadcastMap::remove(&mut state.broadcast_state(), self.broadcast(), key.to_vec()).map_err(guest_error)
    }
}

// The two sides' bindings of the same WIT types: the host's (wasmtime's
// `bindgen!`) and the SDK's (wit-bindgen's).

fn guest_values(values: SlotValues) -> embed::SlotValues {
    embed::SlotValues { present: values.present, data: values.data, offsets: values.offsets }
}

fn host_values(values: &embed::SlotValues) -> SlotValues {
    SlotValues { present: values.present.clone(), data: values.data.clone(), offsets: values.offsets.clone() }
}

fn guest_error(error: StateError) -> weir_sdk::Error {
    embed::state_error(match error {
        StateError::NoCurrentKeys => embed::StateError::NoCurrentKeys,
        StateError::SlotOutOfRange(slot) => embed::StateError::SlotOutOfRange(slot),
        StateError::NotKeyed => embed::StateError::NotKeyed,
        StateError::MalformedWrite(m) => embed::StateError::MalformedWrite(m),
        StateError::NotBroadcastInput => embed::StateError::NotBroadcastInput,
        StateError::TimerNotKeyed => embed::StateError::TimerNotKeyed,
    })
}

fn host_domain(domain: embed::WitTimeDomain) -> TimeDomain {
    match domain {
        embed::WitTimeDomain::EventTime => TimeDomain::EventTime,
        embed::WitTimeDomain::ProcessingTime => TimeDomain::ProcessingTime,
    }
}

fn guest_domain(domain: TimeDomain) -> embed::TimeDomain {
    match domain {
        TimeDomain::EventTime => embed::TimeDomain::EventTime,
        TimeDomain::ProcessingTime => embed::TimeDomain::ProcessingTime,
    }
}
