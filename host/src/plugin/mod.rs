//! Plugins: WebAssembly components implementing the `weir:operator` world.
//!
//! - [`PluginEngine`] owns the wasmtime engine (component model, epoch
//!   interruption, no async machinery) — and a second one without epoch
//!   checks, for operators without a call deadline — links the host's
//!   implementation of the WIT imports, and compiles each plugin file once
//!   ([`LoadedPlugin`]).
//! - [`OperatorInstance`] is one sandboxed instance of a plugin, owned by one
//!   operator subtask: its own store, memory cap, call deadline and keyed
//!   state backend.
//! - [`EmbeddedInstance`] runs a Rust SDK operator compiled into the host
//!   on the same host state code, without Wasm: the benchmark's baseline.
//! - `bindings` holds the single `bindgen!`; `types`, `state`, `broadcast`
//!   and `timers` implement one WIT interface each; `host_state` is the store's data with a view per
//!   interface.

mod bindings;
mod broadcast;
mod cache;
mod clocks;
mod embedded;
mod engine;
mod error;
mod host_state;
mod inspect;
mod instance;
mod limits;
mod snapshot;
mod state;
mod stderr;
mod timers;
mod types;

pub use broadcast::BroadcastMaps;
pub use embedded::EmbeddedInstance;
pub use engine::{LoadedPlugin, PluginEngine, sha256_hex};
pub use error::{CallError, PluginError};
pub use inspect::{Inspection, Item, OPERATOR_EXPORT, WIT_PACKAGE};
pub use bindings::{StoredKind, StoredValues};
pub use instance::{CapturedState, InitialState, InputKind, OperatorInstance, now_ms};
pub use snapshot::{InstanceMeta, decode as decode_meta, encode as encode_meta};
pub use limits::{EPOCH_TICK, Limits};
