//! The data of a plugin instance's store, with a view per WIT interface,
//! and what the host does around each call of the instance (the batch's key
//! slots, the timers' batch, the call's bounds, the snapshot's capture) —
//! the same for a Wasm instance ([`super::OperatorInstance`]) and an
//! operator compiled into the host ([`super::EmbeddedInstance`]).

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::weir::operator::types::TimeDomain as WitDomain;
use super::bindings::{EventBatch, InputBatch, TimerBatch};
use super::broadcast::{BroadcastMaps, BroadcastView};
use super::clocks::DeadlineClocks;
use super::error::CallError;
use super::instance::{CapturedState, InputKind, now_ms};
use super::limits::{Limits, MemoryLimiter};
use super::snapshot;
use super::state::{BatchKeys, KeyedStateView};
use super::stderr::StderrTail;
use super::timers::TimersView;
use crate::dataflow::{Cancel, KeyNumbered, NO_TIMESTAMP, RecordBatch};
use crate::state::{
    FiredTimer, FiringCall, KeyGroupRange, KeyedStateBackend, StateError, StateRegistry, StateSizeGauge, TimeDomain,
    TimerService,
};

/// How much of a plugin's stderr is kept for error reports (its newest bytes).
const STDERR_CAPACITY: usize = 64 * 1024;

/// An error report shows a plugin's last lines of stderr up to this many
/// characters each.
const MAX_LINE: usize = 300;

/// How often, at most, expired values of states with a time-to-live are
/// swept and the state measured (ms of processing time): before a
/// checkpoint, or after a call when neither happened for this long — so a
/// job without checkpoints, or with rare ones, still frees them (and tells
/// RocksDB's compactions which states expire), and shows its state's size.
const HOUSEKEEPING_INTERVAL_MS: i64 = 1_000;

/// What [`PluginState::call`] says while a component starts: its core
/// modules' start functions.
pub const START_UP: &str = "its start-up code";

/// What [`PluginState::call`] says during `flush`.
pub const FLUSH: &str = "`flush`";

/// Everything the host keeps for one plugin instance.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub stderr: StderrTail,
    pub registry: StateRegistry,
    pub backend: Box<dyn KeyedStateBackend>,
    /// The key groups of this subtask: keys written by key must be in them.
    pub key_groups: KeyGroupRange,
    pub max_parallelism: u32,
    pub broadcast: BroadcastMaps,
    pub timers: TimerService,
    /// The most timers `timers` may hold ([`Limits::max_timers`]).
    pub max_timers: usize,
    /// The timers the current `on-timer` call fires, and what it set.
    pub firing: Option<FiringCall>,
    /// Keys of the batch being processed (valid while `keyed_call`).
    pub keys: BatchKeys,
    pub in_call: bool,
    /// The first state-backend failure of the current call (see
    /// [`KeyedStateView::failure`]).
    pub backend_failure: Option<String>,
    pub keyed_call: bool,
    /// Whether the current call processes a batch from a broadcast input.
    pub broadcast_call: bool,
    /// When the current call must end, if it has a deadline: a sleep in
    /// the plugin that would outlast it fails the call ([`super::clocks`]).
    pub call_deadline: Option<Instant>,
    /// The plugin function being called (`process`, `flush`, …), for
    /// errors that end a call from outside it: the deadline, the cap.
    pub call: &'static str,
    /// The job's cancel flag, when the instance runs in a job: a cancel
    /// interrupts the call under way ([`super::instance`], [`super::clocks`]).
    pub cancel: Option<Cancel>,
    /// Writes by key of held values outside `flush` (see
    /// [`KeyedStateView::held_write_backs`]).
    pub held_write_backs: u64,
    /// When expired values were last swept and the state measured (ms of
    /// processing time).
    last_housekeeping_ms: i64,
    /// Where the state's size goes for the job's figures, if anywhere.
    size_gauge: Option<StateSizeGauge>,
}

impl PluginState {
    pub fn new(limits: &Limits, backend: Box<dyn KeyedStateBackend>, key_groups: KeyGroupRange, max_parallelism: u32) -> Self {
        let stderr = StderrTail::new(STDERR_CAPACITY);
        PluginState {
            wasi: sandboxed_wasi(stderr.clone()),
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(limits.memory_bytes),
            stderr,
            registry: StateRegistry::default(),
            backend,
            key_groups,
            max_parallelism,
            broadcast: BroadcastMaps::default(),
            timers: TimerService::default(),
            max_timers: limits.max_timers,
            firing: None,
            keys: BatchKeys::default(),
            in_call: false,
            backend_failure: None,
            keyed_call: false,
            broadcast_call: false,
            call_deadline: None,
            call: START_UP,
            cancel: None,
            held_write_backs: 0,
            last_housekeeping_ms: now_ms(),
            size_gauge: None,
        }
    }

    /// The call's input: `batch` as the WIT `input-batch`, on `input`, with
    /// the operator's `watermark`. A keyed batch's distinct keys become the
    /// slots its state calls may address: as the key-by exchange numbered
    /// them — the keys then taken from the batch only when first asked for
    /// ([`BatchKeys::defer`]) — or numbered here.
    pub fn input_batch(&mut self, input: u32, mut batch: RecordBatch, kind: InputKind, watermark: i64) -> Arc<InputBatch> {
        let keyed = kind == InputKind::Keyed;
        let (key_slots, key_count, numbered) = if keyed { self.batch_slots(&mut batch) } else { (Vec::new(), 0, None) };
        let (data, offsets, mut timestamps) = batch.into_parts();
        // The contract lets an empty list say that no event has a
        // timestamp: then eight bytes an event are not copied into the
        // instance, nor read there.
        if timestamps.iter().all(|&t| t == NO_TIMESTAMP) {
            timestamps.clear();
        }
        let input_batch = Arc::new(InputBatch {
            input,
            events: EventBatch { data, offsets, timestamps },
            key_slots,
            key_count,
            watermark,
            processing_time: now_ms(),
        });
        if let Some(numbered) = numbered {
            self.keys.defer(input_batch.clone(), numbered, self.max_parallelism);
        }
        input_batch
    }

    /// The slots of a keyed batch's events, the count of its keys, and the
    /// exchange's numbering if it came numbered.
    fn batch_slots(&mut self, batch: &mut RecordBatch) -> (Vec<u32>, u32, Option<KeyNumbered>) {
        if let Some(mut numbered) = batch.take_key_numbering() {
            // Every slot is below the count of keys, by construction.
            let count = numbered.firsts.len() as u32;
            return (std::mem::take(&mut numbered.slots), count, Some(numbered));
        }
        let (slots, count) = self.assign_slots((0..batch.len()).map(|i| batch.key(i)), batch.key_hashes());
        (slots, count, None)
    }

    /// Numbers distinct keys in order of first appearance and records them
    /// as the call's current keys (`hashes`: their key hashes, if known).
    fn assign_slots<'k>(&mut self, batch_keys: impl ExactSizeIterator<Item = &'k [u8]>, hashes: Option<&[u64]>) -> (Vec<u32>, u32) {
        let key_slots = self.keys.number(batch_keys, hashes, self.max_parallelism);
        (key_slots, self.keys.len() as u32)
    }

    /// The `timer-batch` of `fired` timers, whose keys become the call's;
    /// what the call sets is noted in [`PluginState::firing`].
    pub fn timer_batch(&mut self, fired: &[FiredTimer], watermark: i64) -> TimerBatch {
        let (key_slots, key_count) = self.assign_slots(fired.iter().map(|t| t.key.as_slice()), None);
        self.firing = Some(FiringCall::new(fired, &key_slots));
        let mut data = Vec::new();
        let mut offsets = vec![0u32];
        for timer in fired {
            data.extend_from_slice(&timer.key);
            offsets.push(data.len() as u32);
        }
        let domains = fired
            .iter()
            .map(|t| match t.domain {
                TimeDomain::EventTime => WitDomain::EventTime,
                TimeDomain::ProcessingTime => WitDomain::ProcessingTime,
            })
            .collect();
        TimerBatch {
            data,
            offsets,
            timestamps: fired.iter().map(|t| t.timestamp).collect(),
            domains,
            key_slots,
            key_count,
            watermark,
            processing_time: now_ms(),
        }
    }

    /// A call begins: state functions may now address the call's keys (if
    /// `keyed`), broadcast state is writable (if `broadcast`).
    pub fn begin_call(&mut self, keyed: bool, broadcast: bool) {
        self.in_call = true;
        self.keyed_call = keyed;
        self.broadcast_call = broadcast;
    }

    /// The call has returned: no state function may run until the next.
    /// Expired values are swept, and the state measured, now if they were
    /// not for a while (a failure to sweep is the call's, as any backend
    /// failure during it).
    pub fn end_call(&mut self) {
        self.in_call = false;
        self.keys.detach();
        self.firing = None;
        let now = now_ms();
        if now - self.last_housekeeping_ms >= HOUSEKEEPING_INTERVAL_MS
            && let Err(error) = self.housekeeping(now)
        {
            self.backend_failure.get_or_insert(error.to_string());
        }
    }

    /// Reports the state's size to `gauge` from now on (measured at once).
    pub fn report_size_to(&mut self, gauge: StateSizeGauge) {
        gauge.set(self.backend.size());
        self.size_gauge = Some(gauge);
    }

    /// Captures the instance's state for a checkpoint, once the operator
    /// has written back what it holds (the snapshot began at `started`),
    /// with the instance's `watermark`.
    pub fn capture(&mut self, started: Instant, watermark: i64) -> Result<CapturedState, CallError> {
        let flushed = started.elapsed();
        self.housekeeping(now_ms()).map_err(|e| CallError::Backend(e.to_string()))?;
        let purged = started.elapsed();
        let meta = snapshot::encode(&self.registry, &self.broadcast, &self.timers, watermark);
        let encoded = started.elapsed();
        let keyed = self.backend.snapshot().map_err(|e| CallError::Backend(e.to_string()))?;
        // Where a checkpoint's synchronous part goes: the plugin writing
        // back what it holds, expired values' removal, the timers, the
        // backend's capture.
        debug!(
            flush_ms = flushed.as_secs_f64() * 1e3,
            timers = self.timers.len(),
            purge_ms = (purged - flushed).as_secs_f64() * 1e3,
            timers_ms = (encoded - purged).as_secs_f64() * 1e3,
            backend_ms = (started.elapsed() - encoded).as_secs_f64() * 1e3,
            "operator state captured"
        );
        Ok(CapturedState { meta, keyed })
    }

    /// Removes values expired at `now` of the states with a time-to-live
    /// from the backend — before a checkpoint, so from the snapshot about
    /// to be taken, or after a call ([`HOUSEKEEPING_INTERVAL_MS`]): a
    /// bounded part of them each time (see [`crate::state`]'s `ttl`) — then
    /// measures the state.
    fn housekeeping(&mut self, now: i64) -> Result<(), StateError> {
        self.last_housekeeping_ms = now;
        let expiring = self.registry.expiring();
        if !expiring.is_empty() {
            let purged = self.backend.purge_expired(&expiring, now)?;
            debug!(purged, states = expiring.len(), "expired state values removed");
        }
        if let Some(gauge) = &self.size_gauge {
            gauge.set(self.backend.size());
        }
        Ok(())
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
            flushing: self.call == FLUSH,
            held_write_backs: &mut self.held_write_backs,
        }
    }

    /// The view the `timers` interface is implemented on.
    pub fn timers(&mut self) -> TimersView<'_> {
        TimersView {
            timers: &mut self.timers,
            limit: self.max_timers,
            keys: self.keyed_call.then_some(&self.keys),
            in_call: self.in_call,
            firing: self.firing.as_mut(),
        }
    }

    /// The view `wasi:clocks/monotonic-clock` is implemented on.
    pub fn clocks(&mut self) -> DeadlineClocks<'_> {
        let (deadline, cancel) = (self.call_deadline, self.cancel.clone());
        DeadlineClocks { wasi: wasmtime_wasi::clocks::WasiClocksView::clocks(self), deadline, cancel }
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
        let shortened = lines[lines.len().saturating_sub(5)..].iter().map(|line| match line.char_indices().nth(MAX_LINE) {
            Some((end, _)) => format!("{}…", &line[..end]),
            None => (*line).to_owned(),
        });
        shortened.collect::<Vec<_>>().join(" / ")
    }
}

/// WASI deny-by-default: no preopened directories, no environment, no
/// arguments, no stdin, no network; stdout is discarded and stderr kept
/// (bounded) for error reports.
fn sandboxed_wasi(stderr: StderrTail) -> WasiCtx {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{HashedKey, MemoryBackend, key_group_range, with_expiry};

    /// The states' entries: (expired, live) at `now`.
    fn entries(state: &mut PluginState, now: i64) -> (usize, usize) {
        let mut counts = (0, 0);
        state.backend.for_each(&mut |e| if crate::state::expired(&e.value, now) { counts.0 += 1 } else { counts.1 += 1 }).unwrap();
        counts
    }

    /// A job without checkpoints still frees expired values, and shows
    /// its state's size: a call that ends a second or more after the last
    /// sweep sweeps them and measures, and one that ends sooner does not
    /// (the sweep costs milliseconds).
    #[test]
    fn calls_sweep_expired_values_and_measure_the_state_once_a_second_without_checkpoints() {
        let backend = Box::new(MemoryBackend::new());
        let mut state = PluginState::new(&Limits::default(), backend, key_group_range(0, 128, 1), 128);
        let seen = state.registry.register_value("seen", true).unwrap();
        let plain = state.registry.register_value("plain", false).unwrap();
        let now = now_ms();
        let mut buffer = Vec::new();
        for i in 0..100u32 {
            let key = i.to_le_bytes();
            let expires_at = if i % 4 == 0 { now + 60_000 } else { now - 1 };
            state.backend.put(seen, HashedKey::new(&key, 128), with_expiry(b"1", expires_at, &mut buffer)).unwrap();
            // Not an expiring state's: kept whatever its last bytes say.
            state.backend.put(plain, HashedKey::new(&key, 128), with_expiry(b"1", now - 1, &mut buffer)).unwrap();
        }
        let gauge = StateSizeGauge::default();
        state.report_size_to(gauge.clone());
        assert_eq!(gauge.get().map(|size| size.entries), Some(200), "measured when the gauge is given");
        state.begin_call(true, false);
        state.end_call();
        assert_eq!(entries(&mut state, now), (175, 25), "swept less than a second after the last sweep");
        state.last_housekeeping_ms = now - HOUSEKEEPING_INTERVAL_MS;
        state.begin_call(true, false);
        state.end_call();
        assert_eq!(entries(&mut state, now), (100, 25), "the expiring state's 75 expired values swept; the other state's kept");
        assert!(state.backend_failure.is_none());
        assert_eq!(gauge.get(), Some(state.backend.size()), "measured after the sweep");
        assert_eq!(gauge.get().map(|size| size.entries), Some(125));
        assert!(state.last_housekeeping_ms >= now, "the next sweep a second after this one");
    }
}
