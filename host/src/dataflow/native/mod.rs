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

use std::convert::Infallible;

use weir_key_slab::KeySlab;

use crate::plugin::{CallError, CapturedState, InitialState, encode_meta};
use crate::state::{KeyedStateBackend, StateError, StateRegistry, TimerService};

use super::{KeyNumbering, OperatorLogic, RecordBatch};

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

/// Finds the keys of a keyed batch in a native operator's table as the
/// SDK does: each distinct key once, by the slot the key-by exchange gave
/// it (numbered here if the batch came without).
#[derive(Debug, Default)]
struct KeyLookup {
    numbering: KeyNumbering,
    /// The (slot, entry) of the keys the last batch added to the table.
    made: Vec<(u32, u32)>,
}

impl KeyLookup {
    /// Each event's slot in `batch`, every slot's key found in `held` —
    /// added with `value()` if not held, and then listed in `made` — and
    /// remembered there for [`KeySlab::in_call`] until the next batch.
    fn resolve<E>(&mut self, held: &mut KeySlab<E>, batch: &mut RecordBatch, value: impl FnMut() -> E) -> Vec<u32> {
        if batch.key_slots().is_none() {
            batch.number_keys(&mut self.numbering);
        }
        let slots = batch.take_key_slots().expect("numbered");
        held.begin_call();
        self.made.clear();
        // The exchange and `number_keys` both number by first appearance.
        held.resolve_call(&slots, |i| Ok::<_, Infallible>(batch.key(i)), value, &mut self.made)
            .expect("the host numbers slots by first appearance");
        slots
    }
}

fn state_failure(error: StateError) -> CallError {
    CallError::Operator(format!("the state backend failed: {error}"))
}
