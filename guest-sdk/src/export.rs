//! The component export: adapts an [`Operator`] to the generated bindings.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::__private::bindings::exports::weir::operator::operator::{Guest, OperatorError, StateKind, StoredValues};
use crate::__private::bindings::weir::operator::broadcast_state::BroadcastMap as HostBroadcastMap;
use crate::__private::bindings::weir::operator::state::{MapState as HostMapState, TimeToLive, ValueState as HostValueState};
use crate::map_state::RawMapState;
use crate::__private::bindings::weir::operator::types::StateError;
use crate::broadcast::RawBroadcastMap;
use crate::__private::bindings::weir::operator::timers::{TimerChange, update as update_timers};
use crate::__private::bindings::weir::operator::types::{EventBatch, InputBatch, OutputBatch, TimerBatch};
use crate::runtime::TimerView;
use crate::timer::TimeDomain;
use crate::event::BatchView;
use crate::runtime::Runtime;
use crate::state::{MapPage, RawValueState, SlotValues, StateHost};
use crate::context::not_keyed;
use crate::{Config, Error, Operator, Ttl};

/// Implements the exported `operator` interface for `T`; instantiated by
/// [`crate::export_operator!`].
pub struct Adapter<T>(PhantomData<T>);

thread_local! {
    /// The instance's operator, created by `init`. A component instance is
    /// single-threaded, so a thread-local is the instance's global.
    static RUNTIME: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

impl<T: Operator> Guest for Adapter<T> {
    fn init(config: Vec<(String, String)>) -> Result<(), OperatorError> {
        let config = Config::from_pairs(config);
        let operator = T::init(&config).map_err(to_wit_error)?;
        let runtime: Box<dyn Any> = Box::new(Runtime::new(operator, Box::new(HostStates), config.start, config.resident_bytes()));
        RUNTIME.with(|slot| *slot.borrow_mut() = Some(runtime));
        Ok(())
    }

    fn process(batch: InputBatch) -> Result<Vec<OutputBatch>, OperatorError> {
        with_runtime::<T>(|runtime| {
            let view = BatchView {
                input: batch.input,
                data: &batch.events.data,
                offsets: &batch.events.offsets,
                timestamps: &batch.events.timestamps,
                key_slots: &batch.key_slots,
                watermark: batch.watermark,
                processing_time: batch.processing_time,
            };
            runtime.process(&view)
        })
    }

    fn flush() -> Result<(), OperatorError> {
        with_runtime::<T>(|runtime| runtime.flush()).map(|_| ())
    }

    fn check_state(name: String, kind: StateKind, stored: StoredValues) -> Result<(), String> {
        let values = split(&stored.data, &stored.offsets);
        // A value state's entries have no sub-keys: empty ones.
        let sub_keys = split(&stored.sub_keys, &stored.sub_key_offsets).chain(std::iter::repeat(&[][..]));
        let kind = match kind {
            StateKind::ValueState => crate::schema::Stored::Value,
            StateKind::MapState => crate::schema::Stored::Map,
            StateKind::BroadcastMap => crate::schema::Stored::Broadcast,
        };
        // Opened as the plugin will open it, with its time-to-live or
        // without: the host refuses (a trap naming the state) a choice other
        // than the one the state was stored with — here, before an upgrade
        // stops the job, rather than at the restored job's first event.
        match (kind, crate::schema::declared_ttl(&name, kind)) {
            (crate::schema::Stored::Value, Some(ttl)) => drop(HostStates.open(&name, ttl)),
            (crate::schema::Stored::Map, Some(ttl)) => drop(HostStates.open_map(&name, ttl)),
            _ => {}
        }
        crate::schema::check(&name, kind, sub_keys.zip(values))
    }

    fn on_timer(timers: TimerBatch) -> Result<Vec<OutputBatch>, OperatorError> {
        with_runtime::<T>(|runtime| {
            let view = TimerView {
                data: &timers.data,
                offsets: &timers.offsets,
                timestamps: &timers.timestamps,
                domains: timers.domains.iter().map(|d| TimeDomain::from_wit(*d)).collect(),
                key_slots: &timers.key_slots,
                watermark: timers.watermark,
                processing_time: timers.processing_time,
            };
            runtime.on_timers(&view)
        })
    }
}

/// The parts of `data` that `offsets` delimit (an empty one where they do not fit).
fn split<'a>(data: &'a [u8], offsets: &'a [u32]) -> impl Iterator<Item = &'a [u8]> {
    offsets.windows(2).map(|w| data.get(w[0] as usize..w[1] as usize).unwrap_or_default())
}

/// Runs `call` on the instance's runtime and returns what it emitted.
fn with_runtime<T: Operator>(
    call: impl FnOnce(&mut Runtime<T>) -> Result<(), Error>,
) -> Result<Vec<OutputBatch>, OperatorError> {
    RUNTIME.with(|slot| {
        let mut slot = slot.borrow_mut();
        let runtime = slot
            .as_mut()
            .and_then(|runtime| runtime.downcast_mut::<Runtime<T>>())
            .ok_or_else(|| OperatorError::Other("called before init".into()))?;
        call(runtime).map_err(to_wit_error)?;
        Ok(runtime
            .outputs
            .drain()
            .map(|(output, (data, offsets, timestamps))| OutputBatch {
                output,
                events: EventBatch { data, offsets, timestamps },
            })
            .collect())
    })
}

fn to_wit_error(error: Error) -> OperatorError {
    match error {
        Error::InvalidConfig(m) => OperatorError::InvalidConfig(m),
        Error::InvalidInput(m) => OperatorError::InvalidInput(m),
        Error::State(m) => OperatorError::State(m),
        Error::Other(m) => OperatorError::Other(m),
    }
}

/// Opens states through the host's `value-state` resource.
struct HostStates;

impl StateHost for HostStates {
    fn open(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawValueState> {
        Box::new(match ttl {
            Some(ttl) => HostValueState::open_expiring(name, wit_ttl(ttl)),
            None => HostValueState::new(name),
        })
    }

    fn open_broadcast(&mut self, name: &str) -> Box<dyn RawBroadcastMap> {
        Box::new(HostBroadcastMap::new(name))
    }

    fn update_timers(&mut self, changes: &[TimerChange]) -> Result<(), Error> {
        update_timers(changes).map_err(from_state_error)
    }

    fn open_map(&mut self, name: &str, ttl: Option<Ttl>) -> Box<dyn RawMapState> {
        Box::new(match ttl {
            Some(ttl) => HostMapState::open_expiring(name, wit_ttl(ttl)),
            None => HostMapState::new(name),
        })
    }
}

fn wit_ttl(ttl: Ttl) -> TimeToLive {
    TimeToLive { millis: ttl.millis(), refresh_on_read: ttl.refresh_on_read() }
}

impl RawMapState for HostMapState {
    fn get(&self, slot: u32, sub_key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        HostMapState::get(self, slot, sub_key).map_err(from_state_error)
    }

    fn get_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32]) -> Result<SlotValues, Error> {
        HostMapState::get_many(self, slots, sub_keys, offsets).map_err(from_state_error)
    }

    fn set_many(&self, slots: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
        HostMapState::set_many(self, slots, sub_keys, offsets, values).map_err(from_state_error)
    }

    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
        HostMapState::set_keyed(self, keys, key_offsets, sub_keys, offsets, values).map_err(from_state_error)
    }

    fn entries(&self, slot: u32, after: Option<&[u8]>, limit: u32) -> Result<MapPage, Error> {
        HostMapState::entries(self, slot, after, limit).map_err(from_state_error)
    }

    fn clear(&self, slots: &[u32]) -> Result<(), Error> {
        HostMapState::clear(self, slots).map_err(from_state_error)
    }
}

impl RawBroadcastMap for HostBroadcastMap {
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        HostBroadcastMap::entries(self)
    }

    fn set(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        HostBroadcastMap::set(self, key, value).map_err(from_state_error)
    }

    fn remove(&self, key: &[u8]) -> Result<(), Error> {
        HostBroadcastMap::remove(self, key).map_err(from_state_error)
    }
}

impl RawValueState for HostValueState {
    fn get_many(&self, slots: &[u32]) -> Result<SlotValues, Error> {
        HostValueState::get_many(self, slots).map_err(from_state_error)
    }

    fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
        HostValueState::set_keyed(self, keys, key_offsets, values).map_err(from_state_error)
    }
}

pub(crate) fn from_state_error(error: StateError) -> Error {
    Error::State(match error {
        StateError::NotKeyed => return not_keyed("keyed state"),
        StateError::TimerNotKeyed => return not_keyed("a timer"),
        StateError::NoCurrentKeys => "state used outside of process".into(),
        StateError::SlotOutOfRange(slot) => format!("slot {slot} is outside the current batch"),
        StateError::MalformedWrite(m) => format!("malformed state write: {m}"),
        StateError::NotBroadcastInput => "broadcast state can only be changed while processing an event from a \
                                          broadcast input (listed under `broadcast` in the job file)"
            .into(),
    })
}
