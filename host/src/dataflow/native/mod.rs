//! Operators compiled into the host: the benchmark's baseline for the cost
//! of Wasm (`weir bench --native`, or `plugin = "native:count"` in a job).
//!
//! Each is the logic of one example plugin *with the state traffic of the
//! Rust SDK*: it holds its state in memory between calls, reads from the
//! backend only what it may hold and has not got, writes back what changed
//! before every snapshot, and past the SDK's bound writes back and forgets.
//! What differs from the plugin is only the Wasm boundary — so the two
//! measure what Wasm costs, not two different algorithms.

mod count;
mod window;

use crate::plugin::{CallError, CapturedState, InitialState, encode_meta};
use crate::state::{KeyedStateBackend, StateError, StateRegistry, TimerService};

use super::OperatorLogic;

/// The plugin path prefix naming a built-in native operator
/// (`plugin = "native:count"`).
pub const NATIVE_PREFIX: &str = "native:";

/// Bytes a native operator's held keys or windows may take before it
/// writes them back and forgets the colder ones: the SDK's bound on an
/// instance's resident state (`RESIDENT_BYTES`). (Small in unit tests, so
/// that they cross it quickly.)
const HELD_BYTES: usize = if cfg!(test) { 1 << 20 } else { 32 << 20 };

/// The built-in operator called `name` on `state`, if there is one.
pub fn native_operator(name: &str, state: InitialState) -> Option<Result<Box<dyn OperatorLogic>, StateError>> {
    match name {
        "count" => Some(Ok(Box::new(count::NativeCount::new(state)))),
        "window-sum" => Some(window::NativeWindowSum::restore(state).map(|op| Box::new(op) as Box<dyn OperatorLogic>)),
        _ => None,
    }
}

/// The snapshot of a native operator: its state names, timers and keyed
/// state.
fn native_snapshot(
    registry: &StateRegistry,
    timers: &TimerService,
    backend: &mut dyn KeyedStateBackend,
) -> Result<CapturedState, String> {
    let meta = encode_meta(registry, &Default::default(), timers);
    Ok(CapturedState { meta, keyed: backend.snapshot().map_err(|e| e.to_string())? })
}

fn state_failure(error: StateError) -> CallError {
    CallError::Operator(format!("the state backend failed: {error}"))
}
