//! Host side of the `types` interface: data types only, nothing to implement.

use super::bindings::weir::operator::types::Host;
use super::host_state::PluginState;

impl Host for PluginState {}
