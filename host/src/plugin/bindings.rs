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
});

pub use self::exports::weir::operator::operator::{OperatorError, StateKind as StoredKind, StoredValues};
pub use self::weir::operator::types::{EventBatch, InputBatch, TimerBatch};
