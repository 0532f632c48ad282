//! Errors of loading plugins and of calling into them.

use std::path::PathBuf;

/// A plugin file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(
        "cannot read plugin {path}: {source}; check the path (an operator's `plugin` in the job file, or the one \
         given on the command line)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a WebAssembly file (it does not start with the `\\0asm` magic bytes); \
         give the path of a plugin component, e.g. one built with `cargo build --release --target wasm32-wasip2`"
    )]
    NotWasm { path: PathBuf },
    #[error(
        "{path} is a core WebAssembly module, not a component; build the plugin for the \
         `wasm32-wasip2` target (or turn the module into a component with `wasm-tools component new`)"
    )]
    CoreModule { path: PathBuf },
    #[error("{path} is not a valid WebAssembly component: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{path} was built against {found}, but this host implements {expected}; rebuild the plugin \
         with an SDK for {expected}"
    )]
    VersionMismatch { path: PathBuf, found: String, expected: String },
    #[error(
        "{path} is a component but not a Weir operator: {reason}. It exports [{exports}] and imports \
         [{imports}]; a Weir plugin exports `{expected}` (on the Rust SDK, the crate calls \
         `weir_sdk::export_operator!(YourOperator)`; see docs/plugin-guide.md)"
    )]
    WrongWorld { path: PathBuf, reason: String, exports: String, imports: String, expected: String },
    #[error(
        "{path} imports `{import}`, which a Weir host does not give its plugins ({reason}): plugins get the \
         weir:operator interfaces and WASI's command-line world, with no files, network or HTTP — a sandbox. \
         Remove what uses it (a library that makes HTTP requests, say), and rebuild"
    )]
    UnavailableImport { path: PathBuf, import: String, reason: String },
}

/// A call into a plugin instance failed. The task adds the operator's uid.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("the plugin trapped: {trap}{}", printed(stderr))]
    Trap { trap: String, stderr: String },
    #[error(
        "the plugin exceeded its memory cap of {cap_mib} MiB in {call} (it asked for {asked_mib} MiB); raise \
         `memory_limit_mb` for this operator in the job file if it really needs more"
    )]
    MemoryCap { cap_mib: usize, asked_mib: usize, call: &'static str },
    #[error(
        "{call} exceeded its deadline of {timeout_ms} ms and was interrupted (an endless loop, or a sleep?); raise \
         `call_timeout_ms` for this operator in the job file if a batch legitimately takes longer"
    )]
    Deadline { timeout_ms: u128, call: &'static str },
    #[error("the plugin returned an error: {0}")]
    Operator(String),
    /// The job was cancelled while the call ran, and the call interrupted:
    /// the job's stop, not the plugin's failure.
    #[error("the call was interrupted: the job is being cancelled")]
    Cancelled,
    #[error("the plugin returned a malformed batch: {0} — a bug in the plugin or its SDK: tell its author")]
    Malformed(String),
    #[error("cannot instantiate the plugin: {0}")]
    Instantiate(String),
    #[error("the state backend failed: {0}")]
    Backend(String),
    /// The plugin opened a state the host does not register (see
    /// [`crate::state::StateNameError`]).
    #[error("the host refused the plugin's state: {0}")]
    StateRefused(String),
    /// The plugin set a timer past its operator's `timer_limit` (see
    /// [`super::timers::TimerLimitReached`]).
    #[error("the host refused the plugin's timer: {0}")]
    TimerRefused(String),
}

/// What a plugin printed, to follow an error's message.
pub(super) fn printed(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!("; it printed: {stderr}") }
}
