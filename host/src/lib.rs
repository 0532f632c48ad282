//! # Weir — a stream-processing host for WebAssembly operators
//!
//! A job (a TOML file, see [`job`]) is a graph of sources, operators and
//! sinks. Operators are WebAssembly components implementing the
//! `weir:operator` WIT world ([`plugin`]); the host runs each as sandboxed
//! instances, one per parallel subtask ([`dataflow`]), owns their keyed state
//! ([`state`]), takes consistent snapshots of a running job and recovers
//! from them ([`checkpoint`]), and connects it to the outside world
//! ([`connectors`]).
//!
//! Because the host owns all state, a plugin is only code: it can be swapped,
//! forked or rescaled without the plugin's cooperation.

pub mod checkpoint;
pub mod connectors;
pub mod control;
pub mod dataflow;
pub mod dirs;
pub mod host;
pub mod job;
pub mod plugin;
pub(crate) mod prefetch;
pub mod savepoint;
pub mod state;

pub use dataflow::{JobSummary, RunError, run_job};
pub use job::{JobError, JobGraph, Overrides};
pub use plugin::{PluginEngine, PluginError};
