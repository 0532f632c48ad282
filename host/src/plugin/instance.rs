//! One sandboxed instance of a plugin, owned by one operator subtask.

use std::time::Instant;

use wasmtime::{Store, StoreContextMut, Trap, UpdateDeadline};

use super::bindings::{StoredKind, StoredValues};
use super::bindings::{EventBatch, OperatorError, Plugin};
use super::engine::LoadedPlugin;
use super::error::CallError;
use super::host_state::{FLUSH, PluginState};
use super::limits::{Limits, ticks_to_next_check};
use crate::dataflow::{BATCH_SIZE, Cancel, NO_TIMESTAMP, RecordBatch};
use super::snapshot::InstanceMeta;
use crate::state::{
    FiringBudget, KeyGroupRange, KeyedStateBackend, StateSizeGauge, StateSnapshot, TimeDomain, processing_timers_due_at,
};

/// How the batches of an input reach the operator, which decides what
/// state a call may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Partitioned by key: keyed state of the batch's keys is available.
    Keyed,
    /// Delivered to every subtask: broadcast state is writable.
    Broadcast,
    /// Anything else: no keyed state, broadcast state read-only.
    Plain,
}

/// The state an operator subtask starts with: an empty or restored
/// backend and, when restored, the rest of its snapshot.
pub struct InitialState {
    pub backend: Box<dyn KeyedStateBackend>,
    pub meta: Option<InstanceMeta>,
    /// The job's number of key groups.
    pub max_parallelism: u32,
    /// The key groups this subtask owns: the only ones it may write.
    pub key_groups: KeyGroupRange,
}

/// An operator subtask's snapshot, captured at a barrier: its state names,
/// broadcast maps and timers encoded ([`snapshot`]), and its keyed state
/// still to be persisted.
pub struct CapturedState {
    pub meta: Vec<u8>,
    pub keyed: Box<dyn StateSnapshot>,
}

/// The host keys of the first Rust SDK, which refuses others as unknown
/// config ([`OperatorInstance::init_with_host_keys`]).
const FIRST_HOST_KEYS: [&str; 3] = ["weir.attempt", "weir.parallelism", "weir.subtask"];

/// A plugin instance with its own store, limits and keyed state.
pub struct OperatorInstance {
    store: Store<PluginState>,
    bindings: Plugin,
    limits: Limits,
    /// The operator's event-time watermark; it never goes backwards.
    watermark: i64,
}

impl OperatorInstance {
    /// Instantiates `plugin` on `state` and calls its `init` with `config`.
    /// A plugin compiled without deadline checks is refused when `limits`
    /// set a deadline: nothing could interrupt it.
    pub fn new(
        plugin: &LoadedPlugin,
        limits: Limits,
        state: InitialState,
        config: &[(String, String)],
    ) -> Result<Self, CallError> {
        if let (Some(timeout), false) = (limits.call_timeout, plugin.checks_deadlines()) {
            return Err(CallError::Instantiate(format!(
                "{} was compiled without the checks that enforce a call deadline, so its {} ms one could \
                 not be kept; load it with `PluginEngine::load_for` and the operator's limits",
                plugin.path.display(),
                timeout.as_millis()
            )));
        }
        let mut data = PluginState::new(&limits, state.backend, state.key_groups, state.max_parallelism);
        let watermark = state.meta.as_ref().map_or(NO_TIMESTAMP, |meta| meta.watermark);
        if let Some(meta) = state.meta {
            data.registry = meta.registry;
            data.broadcast = meta.broadcast;
            data.timers = meta.timers;
        }
        let (store, bindings) = instantiate(plugin, &limits, data)?;
        let mut instance = OperatorInstance { store, bindings, limits, watermark };
        instance.init_with_host_keys(config)?;
        Ok(instance)
    }

    /// Lets the job's cancel interrupt a call under way (within
    /// [`CHECK_INTERVAL_TICKS`](super::limits::CHECK_INTERVAL_TICKS) ticks,
    /// or at once in a sleep) rather than wait for its deadline; the call
    /// then fails with [`CallError::Cancelled`]. A plugin without a
    /// deadline has no checks, and its calls run to their end.
    pub fn watch_cancel(&mut self, cancel: Cancel) {
        self.store.data_mut().cancel = Some(cancel);
    }

    /// How many times the plugin has written held state back outside
    /// `flush` because it held too much (see
    /// [`KeyedStateView::held_write_backs`](super::state::KeyedStateView::held_write_backs)).
    pub fn held_write_backs(&self) -> u64 {
        self.store.data().held_write_backs
    }

    /// Reports the size of its keyed state to `gauge` from now on.
    pub fn report_state_size(&mut self, gauge: StateSizeGauge) {
        self.store.data_mut().report_size_to(gauge);
    }

    /// Calls `init`. Plugins built with the Rust SDK before the host added
    /// `weir.state` and `weir.memory-limit-mb` refuse those keys as unknown
    /// config: they get the config with only the host keys they knew, and
    /// read every key they do not hold from the host and bound what they
    /// hold by count, as they always did.
    fn init_with_host_keys(&mut self, config: &[(String, String)]) -> Result<(), CallError> {
        match self.init(config) {
            Err(CallError::Operator(message)) if message.contains("unknown key `weir.") => {
                tracing::debug!(%message, "the plugin predates some of the host's `weir.` keys; initialising it without");
                let known = |key: &str| !key.starts_with("weir.") || FIRST_HOST_KEYS.contains(&key);
                let older: Vec<(String, String)> = config.iter().filter(|(key, _)| known(key)).cloned().collect();
                self.init(&older)
            }
            result => result,
        }
    }

    fn init(&mut self, config: &[(String, String)]) -> Result<(), CallError> {
        arm_deadline(&mut self.store, &self.limits, "`init`");
        let result = self.bindings.weir_operator_operator().call_init(&mut self.store, config);
        self.returned(result).map(|_| ())
    }

    /// Runs `process` on one batch that arrived on `input`. For a keyed
    /// input, the batch's distinct keys become the slots its state calls may
    /// address; for a broadcast input, broadcast state is writable.
    pub fn process(
        &mut self,
        input: u32,
        batch: RecordBatch,
        kind: InputKind,
    ) -> Result<Vec<(String, RecordBatch)>, CallError> {
        let input_batch = self.store.data_mut().input_batch(input, batch, kind, self.watermark);
        self.begin_call("`process`", kind == InputKind::Keyed, kind == InputKind::Broadcast);
        let result = self.bindings.weir_operator_operator().call_process(&mut self.store, &input_batch);
        self.store.data_mut().end_call();
        let outputs = self.returned(result)?;
        Self::collect(outputs)
    }

    /// Moves the watermark forward to `watermark` (never back) and fires the
    /// event-time timers it passes, in timestamp order.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<(String, RecordBatch)>, CallError> {
        if watermark <= self.watermark {
            return Ok(Vec::new());
        }
        self.watermark = watermark;
        self.fire(TimeDomain::EventTime, watermark)
    }

    /// Fires the processing-time timers due at `now`.
    pub fn fire_processing_timers(&mut self, now: i64) -> Result<Vec<(String, RecordBatch)>, CallError> {
        self.fire(TimeDomain::ProcessingTime, processing_timers_due_at(now))
    }

    /// When the next processing-time timer is due.
    pub fn next_processing_timer(&self) -> Option<i64> {
        self.store.data().timers.next_processing_fire()
    }

    /// Calls `on-timer` with the due timers of `domain`, batch by batch,
    /// until none is due (see [`FiringBudget::fire_until_none_due`]).
    fn fire(&mut self, domain: TimeDomain, time: i64) -> Result<Vec<(String, RecordBatch)>, CallError> {
        let fire_call = || {
            let fired = self.store.data_mut().timers.pop_due(domain, time, BATCH_SIZE);
            if fired.is_empty() {
                return Ok(None);
            }
            let batch = self.store.data_mut().timer_batch(&fired, self.watermark);
            self.begin_call("`on-timer`", true, false);
            let result = self.bindings.weir_operator_operator().call_on_timer(&mut self.store, &batch);
            let call = self.store.data_mut().firing.take();
            self.store.data_mut().end_call();
            Ok(Some((Self::collect(self.returned(result)?)?, call)))
        };
        FiringBudget::fire_until_none_due(time, fire_call, CallError::Operator)
    }

    /// Begins a call to the plugin's `call` (for errors that end it).
    fn begin_call(&mut self, call: &'static str, keyed: bool, broadcast: bool) {
        self.store.data_mut().begin_call(keyed, broadcast);
        arm_deadline(&mut self.store, &self.limits, call);
    }

    fn collect(outputs: Vec<super::bindings::weir::operator::types::OutputBatch>) -> Result<Vec<(String, RecordBatch)>, CallError> {
        outputs
            .into_iter()
            .map(|out| {
                let EventBatch { data, offsets, timestamps } = out.events;
                RecordBatch::from_parts(data, offsets, timestamps)
                    .map(|batch| (out.output, batch))
                    .map_err(CallError::Malformed)
            })
            .collect()
    }

    /// Captures the instance's state for a checkpoint (between calls),
    /// after the plugin has written back what it holds in memory.
    pub fn snapshot(&mut self) -> Result<CapturedState, CallError> {
        let started = Instant::now();
        self.flush()?;
        let watermark = self.watermark;
        self.store.data_mut().capture(started, watermark)
    }

    /// Calls the plugin's `flush`: state it keeps between calls goes to
    /// the backend.
    fn flush(&mut self) -> Result<(), CallError> {
        self.begin_call(FLUSH, false, false);
        let result = self.bindings.weir_operator_operator().call_flush(&mut self.store);
        self.store.data_mut().end_call();
        self.returned(result)
    }

    /// Asks the plugin whether it can take over stored values of its state
    /// `name` of `kind` (a map's or broadcast map's `values` carry their
    /// sub-keys or keys). `Ok(Err(why))` is the plugin's answer that it
    /// cannot.
    pub fn check_state(
        &mut self,
        name: &str,
        kind: StoredKind,
        values: &StoredValues,
    ) -> Result<Result<(), String>, CallError> {
        arm_deadline(&mut self.store, &self.limits, "`check-state`");
        let result = self.bindings.weir_operator_operator().call_check_state(&mut self.store, name, kind, values);
        self.returned(result.map(Ok))
    }

    fn returned<T>(&mut self, result: wasmtime::Result<Result<T, OperatorError>>) -> Result<T, CallError> {
        if let Some(failure) = self.store.data_mut().backend_failure.take() {
            return Err(CallError::Backend(failure));
        }
        match result {
            Ok(Ok(value)) => Ok(value),
            // What it printed goes with the error, as with a trap: a
            // Python traceback, a JavaScript `console.error`.
            Ok(Err(error)) => {
                let printed = super::error::printed(&self.store.data().stderr_tail());
                let cap = self.memory_cap_reached().map(|cap| format!(" ({cap})")).unwrap_or_default();
                Err(CallError::Operator(format!("{}{cap}{printed}", describe_operator_error(error))))
            }
            Err(error) => Err(classify(&self.store, &self.limits, error, |trap| CallError::Trap {
                trap,
                stderr: self.store.data().stderr_tail(),
            })),
        }
    }

    /// That the call under way reached the memory cap, if it did: a plugin
    /// failing then (a Python `MemoryError`) most likely failed of it.
    fn memory_cap_reached(&self) -> Option<String> {
        let data = self.store.data();
        let (cap_mib, asked_mib) = data.limiter.refused_mib()?;
        Some(format!(
            "{} reached its memory cap of {cap_mib} MiB, asking for {asked_mib} MiB: raise `memory_limit_mb` for \
             this operator in the job file if it really needs more",
            data.call
        ))
    }
}

/// Instantiates `plugin` on `data` in a store of its own, under `limits`:
/// the memory cap holds, and the deadline runs, from the first instruction
/// of its core modules' start functions.
fn instantiate(plugin: &LoadedPlugin, limits: &Limits, data: PluginState) -> Result<(Store<PluginState>, Plugin), CallError> {
    let mut store = Store::new(plugin.pre.engine(), data);
    store.limiter(|state| &mut state.limiter);
    // What one call may hand the host (a batch's output, 8 192 events
    // of it) is bounded by the instance's memory already; wasmtime's
    // default of 128 MiB would fail a plugin emitting large records.
    store.set_hostcall_fuel(store.hostcall_fuel().max(limits.memory_bytes));
    store.epoch_deadline_callback(at_epoch_check);
    arm_deadline(&mut store, limits, super::host_state::START_UP);
    match plugin.pre.instantiate(&mut store) {
        Ok(bindings) => Ok((store, bindings)),
        Err(error) => Err(classify(&store, limits, error, |message| CallError::Instantiate(with_type_hint(message)))),
    }
}

/// Instantiates `plugin` in a scratch store, calling none of its functions
/// (see [`LoadedPlugin::check_types`]), under `limits`: its start-up code
/// is untrusted too.
pub(super) fn check_instantiates(plugin: &LoadedPlugin, limits: &Limits) -> Result<(), CallError> {
    let data = PluginState::new(limits, Box::new(crate::state::MemoryBackend::new()), 0..1, 1);
    instantiate(plugin, limits, data).map(drop)
}

/// Epoch ticks no call reaches: the deadline of a call without one.
const NEVER: u64 = u64::MAX >> 1;

/// Sets the deadline of the store's next call. Without one the plugin is
/// normally compiled without the checks ([`load_for`](super::PluginEngine::load_for)); where
/// it was compiled with them (a state check before an upgrade), they never
/// fire.
fn arm_deadline(store: &mut Store<PluginState>, limits: &Limits, call: &'static str) {
    store.data_mut().call = call;
    // A growth refused in an earlier call, which the plugin handled, is not
    // this call's cause.
    store.data_mut().limiter.refused = None;
    let deadline = limits.call_timeout.and_then(|timeout| Instant::now().checked_add(timeout));
    // A sleep in the plugin that would outlast it fails the call then.
    store.data_mut().call_deadline = deadline;
    store.set_epoch_deadline(limits.call_timeout.map_or(NEVER, ticks_to_next_check));
}

/// Runs when a call has used the ticks it was given: ends it if its job is
/// being cancelled or its deadline has passed, else gives it the ticks to
/// the next look.
fn at_epoch_check(store: StoreContextMut<'_, PluginState>) -> wasmtime::Result<UpdateDeadline> {
    let state = store.data();
    if state.cancel.as_ref().is_some_and(Cancel::is_cancelled) {
        return Err(CallCancelled.into());
    }
    let Some(deadline) = state.call_deadline else { return Ok(UpdateDeadline::Continue(NEVER)) };
    match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(UpdateDeadline::Continue(ticks_to_next_check(left))),
        _ => Ok(UpdateDeadline::Interrupt),
    }
}

/// The error that ends a call interrupted by its job's cancel.
#[derive(Debug, thiserror::Error)]
#[error("the job was cancelled during the call")]
pub(super) struct CallCancelled;

/// Turns a wasmtime error into the cause a user can act on: memory cap,
/// deadline, or a trap with what the plugin printed.
fn classify(
    store: &Store<PluginState>,
    limits: &Limits,
    error: wasmtime::Error,
    otherwise: impl FnOnce(String) -> CallError,
) -> CallError {
    if error.downcast_ref::<CallCancelled>().is_some() {
        return CallError::Cancelled;
    }
    if let Some((cap_mib, asked_mib)) = store.data().limiter.refused_mib() {
        return CallError::MemoryCap { cap_mib, asked_mib, call: store.data().call };
    }
    if let (Some(Trap::Interrupt), Some(timeout)) = (error.downcast_ref::<Trap>(), limits.call_timeout) {
        return CallError::Deadline { timeout_ms: timeout.as_millis(), call: store.data().call };
    }
    if let Some(wasmtime_wasi::I32Exit(status)) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        // WASI's exit carries success or failure only: `exit(3)` is 1 here.
        let how = if *status == 0 { "with success" } else { "with a failure status" };
        return otherwise(format!(
            "it exited {how} (std::process::exit, sys.exit or process.exit) — a plugin is not a process to end: \
             return from the call, and report a failure as an error (Err(Error::…) in Rust, an exception in \
             Python or JavaScript), which names its cause"
        ));
    }
    if let Some(refused) = error.downcast_ref::<crate::state::StateNameError>() {
        return CallError::StateRefused(refused.to_string());
    }
    if let Some(refused) = error.downcast_ref::<super::timers::TimerLimitReached>() {
        return CallError::TimerRefused(refused.to_string());
    }
    let message = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => cause_first(&error),
    };
    otherwise(message)
}

/// An error a host function raised in a plugin's call (a resource table
/// full, a handle unknown): its cause, then where in the plugin — not the
/// backtrace first and the cause at its end.
fn cause_first(error: &wasmtime::Error) -> String {
    match error.downcast_ref::<wasmtime::WasmBacktrace>() {
        Some(backtrace) => format!("{}\n{backtrace}", error.root_cause()),
        None => format!("{error:#}"),
    }
}

/// An instantiation error, with what to do when it is about the types of
/// the plugin's exports (wasmtime names the types, not the function).
fn with_type_hint(message: String) -> String {
    if message.contains("type mismatch") || message.contains("failed to convert function") {
        format!(
            "{message} — its exports do not have the types of the {} plugin world: rebuild it against that WIT \
             (the SDKs do); `weir plugin check` says so too",
            super::WIT_PACKAGE
        )
    } else {
        message
    }
}

pub(super) fn describe_operator_error(error: OperatorError) -> String {
    match error {
        OperatorError::InvalidConfig(m) => format!("invalid config: {m}"),
        OperatorError::InvalidInput(m) => format!("invalid input: {m}"),
        OperatorError::State(m) => format!("state: {m}"),
        OperatorError::Other(m) => m,
    }
}

pub use crate::state::now_ms;
