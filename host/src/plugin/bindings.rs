//! The one `bindgen!` of the host: Rust types and traits for the
//! `weir:operator/plugin` world in `wit/`.

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
    with: {
        "weir:operator/state.value-state": super::state::ValueStateHandle,
        "weir:operator/state.map-state": super::state::MapStateHandle,
        "weir:operator/broadcast-state.broadcast-map": super::broadcast::BroadcastMapHandle,
    },
    // A state's constructor (or `open-expiring`) traps on a name the host refuses (see
    // `crate::state::StateRegistry::register`): the WIT gives it no error.
    // A timer past the operator's `timer_limit` traps likewise
    // (`super::timers::TimerLimitReached`): no `state-error` says so.
    imports: {
        "weir:operator/timers.update": trappable,
        "weir:operator/state.[constructor]value-state": trappable,
        "weir:operator/state.[constructor]map-state": trappable,
        "weir:operator/state.[static]value-state.open-expiring": trappable,
        "weir:operator/state.[static]map-state.open-expiring": trappable,
        "weir:operator/broadcast-state.[constructor]broadcast-map": trappable,
    },
});

pub use self::exports::weir::operator::operator::{OperatorError, StateKind as StoredKind, StoredValues};
pub use self::weir::operator::types::{EventBatch, InputBatch, TimerBatch};
