//! The data of a plugin instance's store, with a view per WIT interface.

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::broadcast::{BroadcastMaps, BroadcastView};
use super::limits::MemoryLimiter;
use super::state::{BatchKeys, KeyedStateView};
use super::timers::TimersView;
use crate::state::{KeyGroupRange, KeyedStateBackend, StateRegistry, TimerService};

/// How much of a plugin's stderr is kept for error reports.
const STDERR_CAPACITY: usize = 64 * 1024;

/// Everything the host keeps for one plugin instance.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub stderr: MemoryOutputPipe,
    pub registry: StateRegistry,
    pub backend: Box<dyn KeyedStateBackend>,
    /// The key groups of this subtask: keys written by key must be in them.
    pub key_groups: KeyGroupRange,
    pub max_parallelism: u32,
    pub broadcast: BroadcastMaps,
    pub timers: TimerService,
    /// Keys of the batch being processed (valid while `keyed_call`).
    pub keys: BatchKeys,
    pub in_call: bool,
    /// The first state-backend failure of the current call (see
    /// [`KeyedStateView::failure`]).
    pub backend_failure: Option<String>,
    pub keyed_call: bool,
    /// Whether the current call processes a batch from a broadcast input.
    pub broadcast_call: bool,
}

impl PluginState {
    pub fn new(memory_cap: usize, backend: Box<dyn KeyedStateBackend>, key_groups: KeyGroupRange, max_parallelism: u32) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        PluginState {
            wasi: sandboxed_wasi(stderr.clone()),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_cap),
            stderr,
            registry: StateRegistry::default(),
            backend,
            key_groups,
            max_parallelism,
            broadcast: BroadcastMaps::default(),
            timers: TimerService::default(),
            keys: BatchKeys::default(),
            in_call: false,
            backend_failure: None,
            keyed_call: false,
            broadcast_call: false,
        }
    }

    /// The view the `state` interface is implemented on.
    pub fn keyed_state(&mut self) -> KeyedStateView<'_> {
        KeyedStateView {
            table: &mut self.table,
            registry: &mut self.registry,
            backend: self.backend.as_mut(),
            keys: self.keyed_call.then_some(&self.keys),
            owned: (&self.key_groups, self.max_parallelism),
            in_call: self.in_call,
            failure: &mut self.backend_failure,
        }
    }

    /// The view the `timers` interface is implemented on.
    pub fn timers(&mut self) -> TimersView<'_> {
        TimersView { timers: &mut self.timers, keys: self.keyed_call.then_some(&self.keys), in_call: self.in_call }
    }

    /// The view the `broadcast-state` interface is implemented on.
    pub fn broadcast_state(&mut self) -> BroadcastView<'_> {
        BroadcastView { table: &mut self.table, maps: &mut self.broadcast, writable: self.in_call && self.broadcast_call }
    }

    /// The last lines the plugin wrote to stderr (a panic message, usually).
    pub fn stderr_tail(&self) -> String {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
            .collect();
        lines[lines.len().saturating_sub(5)..].join(" / ")
    }
}

/// WASI deny-by-default: no preopened directories, no environment, no
/// arguments, no stdin, no network; stdout is discarded and stderr kept
/// (bounded) for error reports.
fn sandboxed_wasi(stderr: MemoryOutputPipe) -> WasiCtx {
    WasiCtxBuilder::new()
        .stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}
