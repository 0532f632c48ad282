//! What an operator subtask runs: a sandboxed Wasm instance, or — as the
//! benchmark baseline for the cost of Wasm — the same logic compiled into
//! the host.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::RecordBatch;
use crate::connectors::write_decimal;
use crate::plugin::{CallError, CapturedState, InitialState, InputKind, OperatorInstance, encode_meta};
use crate::state::{HashedKey, KeyedStateBackend, MemoryBackend, StateError, StateId, StateRegistry, TimerService};

/// The plugin path prefix naming a built-in native operator
/// (`plugin = "native:count"`).
pub const NATIVE_PREFIX: &str = "native:";

/// Emitted batches, grouped by output name ("" for the main output).
pub type Emitted = Vec<(String, RecordBatch)>;

/// One operator subtask's logic.
pub trait OperatorLogic: Send {
    fn process(&mut self, input: u32, batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError>;

    /// Moves the event-time watermark forward, firing the timers it passes.
    fn advance_watermark(&mut self, _watermark: i64) -> Result<Emitted, CallError> {
        Ok(Vec::new())
    }

    /// Fires the processing-time timers due at `now` (ms since the epoch).
    fn fire_processing_timers(&mut self, _now: i64) -> Result<Emitted, CallError> {
        Ok(Vec::new())
    }

    /// When the next processing-time timer is due.
    fn next_processing_timer(&self) -> Option<i64> {
        None
    }

    /// Captures the operator's state for a checkpoint.
    fn snapshot(&mut self) -> Result<CapturedState, String>;
}

impl OperatorLogic for OperatorInstance {
    fn process(&mut self, input: u32, batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError> {
        OperatorInstance::process(self, input, batch, kind)
    }

    fn advance_watermark(&mut self, watermark: i64) -> Result<Emitted, CallError> {
        OperatorInstance::advance_watermark(self, watermark)
    }

    fn fire_processing_timers(&mut self, now: i64) -> Result<Emitted, CallError> {
        OperatorInstance::fire_processing_timers(self, now)
    }

    fn next_processing_timer(&self) -> Option<i64> {
        OperatorInstance::next_processing_timer(self)
    }

    fn snapshot(&mut self) -> Result<CapturedState, String> {
        OperatorInstance::snapshot(self).map_err(|e| e.to_string())
    }
}

/// The built-in operator called `name` on `state`, if there is one.
pub fn native_operator(name: &str, state: InitialState) -> Option<Result<Box<dyn OperatorLogic>, StateError>> {
    match name {
        "count" => Some(Ok(Box::new(NativeCount::new(state)))),
        "window-sum" => Some(NativeWindowSum::restore(state).map(|op| Box::new(op) as Box<dyn OperatorLogic>)),
        _ => None,
    }
}

/// The snapshot of a native operator: its state names and its keyed state.
fn native_snapshot(registry: &StateRegistry, backend: &mut dyn KeyedStateBackend) -> Result<CapturedState, String> {
    let meta = encode_meta(registry, &Default::default(), &TimerService::default());
    Ok(CapturedState { meta, keyed: backend.snapshot().map_err(|e| e.to_string())? })
}

/// The `word-count` plugin's logic, natively: a value state `count` per
/// key, stored as decimal text (the JSON of a number), and `(key, count)`
/// emitted per event — the same state traffic and encoding as the plugin,
/// without the Wasm boundary.
struct NativeCount {
    state: Box<dyn KeyedStateBackend>,
    registry: StateRegistry,
    count: StateId,
    max_parallelism: u32,
    value: Vec<u8>,
}

impl NativeCount {
    fn new(state: InitialState) -> Self {
        let mut registry = state.meta.map(|m| m.registry).unwrap_or_default();
        let count = registry.intern("count");
        NativeCount { state: state.backend, registry, count, max_parallelism: state.max_parallelism, value: Vec::new() }
    }
}

fn state_failure(error: StateError) -> CallError {
    CallError::Operator(format!("the state backend failed: {error}"))
}

impl OperatorLogic for NativeCount {
    fn process(&mut self, _input: u32, batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError> {
        if kind != InputKind::Keyed {
            return Err(CallError::Operator("native count needs a keyed input (key_by = true)".into()));
        }
        let mut out = RecordBatch::with_capacity(batch.len(), batch.byte_len() + 8 * batch.len());
        // As the SDK does: one read per distinct key of the batch, one write back.
        let mut counts: FxHashMap<&[u8], u64> = FxHashMap::default();
        for record in batch.iter() {
            let count = match counts.entry(record.key) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    let key = HashedKey::new(record.key, self.max_parallelism);
                    let stored = self.state.get(self.count, key).map_err(state_failure)?;
                    entry.insert(stored.and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0))
                }
            };
            *count += 1;
            let count = *count;
            out.push_with(record.timestamp, |data, offsets| {
                data.extend_from_slice(record.key);
                offsets.push(data.len() as u32);
                write_decimal(count, data);
                offsets.push(data.len() as u32);
            });
        }
        for (key, count) in counts {
            self.value.clear();
            write_decimal(count, &mut self.value);
            let key = HashedKey::new(key, self.max_parallelism);
            self.state.put(self.count, key, &self.value).map_err(state_failure)?;
        }
        Ok(vec![(String::new(), out)])
    }

    fn snapshot(&mut self) -> Result<CapturedState, String> {
        native_snapshot(&self.registry, self.state.as_mut())
    }
}

/// The `sensor-window` plugin's logic, natively: per key, the sum of the
/// values in 1 s tumbling event-time windows, emitted as
/// `{"start","end","value"}` when the watermark passes a window's end.
#[derive(Default)]
struct NativeWindowSum {
    /// (window end, key) → sum: ordered by end, so closing is a range pop.
    open: BTreeMap<(i64, Vec<u8>), f64>,
    watermark: i64,
    max_parallelism: u32,
}

const WINDOW_MS: i64 = 1000;
/// Its snapshot: one entry per open window, keyed `end (8 bytes) ++ key`.
const WINDOWS: StateId = StateId(0);

impl NativeWindowSum {
    fn restore(mut state: InitialState) -> Result<Self, StateError> {
        let mut open = BTreeMap::new();
        state.backend.for_each(&mut |entry| {
            if let (Some((end, key)), Ok(sum)) = (entry.key.split_first_chunk::<8>(), entry.value.as_slice().try_into()) {
                open.insert((i64::from_be_bytes(*end), key.to_vec()), f64::from_le_bytes(sum));
            }
        })?;
        Ok(NativeWindowSum { open, watermark: i64::MIN, max_parallelism: state.max_parallelism })
    }
}

impl OperatorLogic for NativeWindowSum {
    fn process(&mut self, _input: u32, batch: RecordBatch, _kind: InputKind) -> Result<Emitted, CallError> {
        for record in batch.iter() {
            let timestamp = record
                .timestamp
                .ok_or_else(|| CallError::Operator("event-time windows need events with timestamps".into()))?;
            let end = timestamp.div_euclid(WINDOW_MS) * WINDOW_MS + WINDOW_MS;
            if end - 1 <= self.watermark {
                continue; // Late: its window has fired.
            }
            let value: f64 = std::str::from_utf8(record.value).ok().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            *self.open.entry((end, record.key.to_vec())).or_insert(0.0) += value;
        }
        Ok(Vec::new())
    }

    fn advance_watermark(&mut self, watermark: i64) -> Result<Emitted, CallError> {
        self.watermark = self.watermark.max(watermark);
        let mut out = RecordBatch::new();
        while let Some(entry) = self.open.first_entry() {
            let (end, _) = entry.key();
            if end - 1 > self.watermark {
                break;
            }
            let ((end, key), sum) = entry.remove_entry();
            let value = format!(r#"{{"start":{},"end":{end},"value":{sum:?}}}"#, end - WINDOW_MS);
            out.push(&key, value.as_bytes(), Some(end - 1));
        }
        Ok(if out.is_empty() { Vec::new() } else { vec![(String::new(), out)] })
    }

    fn snapshot(&mut self) -> Result<CapturedState, String> {
        let mut backend = MemoryBackend::new();
        let mut stored = Vec::new();
        for ((end, key), sum) in &self.open {
            stored.clear();
            stored.extend_from_slice(&end.to_be_bytes());
            stored.extend_from_slice(key);
            let group = HashedKey::new(key, self.max_parallelism).group;
            let put = backend.put(WINDOWS, HashedKey::in_group(&stored, group), &sum.to_le_bytes());
            put.map_err(|e| e.to_string())?;
        }
        native_snapshot(&StateRegistry::with_names(vec!["windows".into()]), &mut backend)
    }
}
