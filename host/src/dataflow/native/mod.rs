//! Operators compiled into the host: the benchmark's baseline for the cost
//! of Wasm (`weir bench --native`, or `plugin = "native:count"` in a job).
//!
//! Each is an example plugin's own crate — the operator and the Rust SDK
//! under it, the very code its `.wasm` is built from — compiled natively
//! and run on a plugin instance's host state ([`EmbeddedInstance`]). What
//! differs from the plugin is only what Wasm adds, so the two measure what
//! Wasm costs, not two implementations of the logic.

use crate::plugin::{CallError, EmbeddedInstance, InitialState};

use super::OperatorLogic;

/// The plugin path prefix naming a built-in native operator
/// (`plugin = "native:count"`).
pub const NATIVE_PREFIX: &str = "native:";

/// `count` for a plugin path `native:count` (the job file's directory is
/// prefixed to plugin paths, so look at the file name); `None` for a plugin.
pub fn native_name(plugin: &std::path::Path) -> Option<&str> {
    plugin.file_name()?.to_str()?.strip_prefix(NATIVE_PREFIX)
}

/// The built-in operator called `name`, made with `config` (its `weir.`
/// keys included) on `state`, if there is one.
pub fn native_operator(
    name: &str,
    state: InitialState,
    config: &[(String, String)],
) -> Option<Result<Box<dyn OperatorLogic>, CallError>> {
    fn boxed<T: weir_sdk::Operator>(state: InitialState, config: &[(String, String)]) -> Result<Box<dyn OperatorLogic>, CallError> {
        EmbeddedInstance::<T>::new(state, config).map(|op| Box::new(op) as Box<dyn OperatorLogic>)
    }
    match name {
        "count" => Some(boxed::<word_count::WordCount>(state, config)),
        "window-sum" => Some(boxed::<sensor_window::SensorWindow>(state, config)),
        _ => None,
    }
}
