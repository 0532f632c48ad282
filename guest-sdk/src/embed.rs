//! Running an operator compiled natively into a host, with no Wasm between.
//!
//! The Weir host runs plugins as WebAssembly components; for the benchmark's
//! baseline it also runs the same plugin crates compiled into itself
//! (`weir bench --native`), so that the difference between the two is what
//! Wasm costs and nothing else: the same operator, the same SDK, the same
//! host state code. [`Embedded`] is the SDK's side of that: it drives an
//! [`Operator`] as the component export does, with the host's state reached
//! through a [`StateHost`] the host implements, instead of WIT imports.
//!
//! Plugin authors do not need this module; it is for hosts.

use crate::runtime::Runtime;
use crate::{Config, Error, Operator};

pub use crate::__private::bindings::weir::operator::timers::TimerChange;
pub use crate::__private::bindings::weir::operator::types::StateError;
/// The WIT `time-domain`, as a [`TimerChange`] carries it.
pub use crate::__private::bindings::weir::operator::types::TimeDomain as WitTimeDomain;
pub use crate::event::BatchView as InputBatch;
pub use crate::runtime::TimerView as TimerBatch;
pub use crate::timer::TimeDomain;
pub use crate::broadcast::RawBroadcastMap;
pub use crate::map_state::RawMapState;
pub use crate::state::{MapPage, RawValueState, SlotValues, StateHost};

/// One output's events: `(name, (data, offsets, timestamps))`, laid out as
/// the WIT `event-batch` (`""` is the main output).
pub type Output = (String, (Vec<u8>, Vec<u32>, Vec<i64>));

/// An operator instance run natively: the component export's calls, as
/// methods.
pub struct Embedded<T> {
    runtime: Runtime<T>,
}

impl<T: Operator> Embedded<T> {
    /// `init`: the operator made from `config` (the host's `weir.` keys
    /// included), its state reached through `host`.
    pub fn new(config: Vec<(String, String)>, host: Box<dyn StateHost>) -> Result<Self, Error> {
        let config = Config::from_pairs(config);
        let operator = T::init(&config)?;
        Ok(Embedded { runtime: Runtime::new(operator, host, config.start, config.resident_bytes()) })
    }

    /// `process`: runs the operator over `batch`; returns what it emitted.
    pub fn process(&mut self, batch: &InputBatch<'_>) -> Result<Vec<Output>, Error> {
        let result = self.runtime.process(batch);
        self.emitted(result)
    }

    /// `on-timer`: runs the operator's `on_timer` for every fired timer.
    pub fn on_timers(&mut self, timers: &TimerBatch<'_>) -> Result<Vec<Output>, Error> {
        let result = self.runtime.on_timers(timers);
        self.emitted(result)
    }

    /// `flush`: writes back the state the instance holds in memory.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.runtime.flush()
    }

    /// The outputs of a call, taken whether it succeeded or not (a failed
    /// call's are discarded with it, as a component's are).
    fn emitted(&mut self, result: Result<(), Error>) -> Result<Vec<Output>, Error> {
        let outputs: Vec<Output> = self.runtime.outputs.drain().collect();
        result.map(|()| outputs)
    }
}

/// The SDK's error for a state function's `error`, worded as a plugin
/// reports it.
pub fn state_error(error: StateError) -> Error {
    crate::export::from_state_error(error)
}
