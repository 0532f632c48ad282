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
/// emitted per event — with the state traffic of the SDK's `ValueState`
/// (counts held between calls, read from the backend on a key's first use,
/// written back before every snapshot or past [`HELD_KEYS`] keys) and the
/// same encoding, without the Wasm boundary.
struct NativeCount {
    state: Box<dyn KeyedStateBackend>,
    registry: StateRegistry,
    count: StateId,
    max_parallelism: u32,
    value: Vec<u8>,
    /// Key → (count, changed since written back).
    held: FxHashMap<Vec<u8>, (u64, bool)>,
}

/// Keys whose counts [`NativeCount`] holds before it writes them back and
/// forgets them: the SDK's limit for resident state.
const HELD_KEYS: usize = 1 << 18;

impl NativeCount {
    fn new(state: InitialState) -> Self {
        let mut registry = state.meta.map(|m| m.registry).unwrap_or_default();
        let count = registry.intern("count");
        NativeCount {
            state: state.backend,
            registry,
            count,
            max_parallelism: state.max_parallelism,
            value: Vec::new(),
            held: FxHashMap::default(),
        }
    }

    /// Adds one to `key`'s count and returns it.
    fn increment(&mut self, key: &[u8]) -> Result<u64, CallError> {
        if let Some((count, changed)) = self.held.get_mut(key) {
            *count += 1;
            *changed = true;
            return Ok(*count);
        }
        let stored = self.state.get(self.count, HashedKey::new(key, self.max_parallelism)).map_err(state_failure)?;
        let count = stored.and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0) + 1;
        self.held.insert(key.to_vec(), (count, true));
        Ok(count)
    }

    /// Writes the changed counts to the backend.
    fn write_back(&mut self) -> Result<(), StateError> {
        for (key, (count, changed)) in self.held.iter_mut().filter(|(_, (_, changed))| *changed) {
            self.value.clear();
            write_decimal(*count, &mut self.value);
            self.state.put(self.count, HashedKey::new(key, self.max_parallelism), &self.value)?;
            *changed = false;
        }
        Ok(())
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
        for record in batch.iter() {
            let count = self.increment(record.key)?;
            out.push_with(record.timestamp, |data, offsets| {
                data.extend_from_slice(record.key);
                offsets.push(data.len() as u32);
                write_decimal(count, data);
                offsets.push(data.len() as u32);
            });
        }
        if self.held.len() > HELD_KEYS {
            self.write_back().map_err(state_failure)?;
            self.held.clear();
        }
        Ok(vec![(String::new(), out)])
    }

    fn snapshot(&mut self) -> Result<CapturedState, String> {
        self.write_back().map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group_range;

    fn batch(keys: &[&str]) -> RecordBatch {
        let mut batch = RecordBatch::new();
        for key in keys {
            batch.push(key.as_bytes(), b"", None);
        }
        batch
    }

    /// The native count goes on from the backend's counts, holds its own
    /// between calls, and has written them all back when it snapshots.
    #[test]
    fn native_count_holds_counts_and_writes_them_back_for_a_snapshot() {
        let initial = InitialState { backend: Box::new(MemoryBackend::new()), meta: None, max_parallelism: 128, key_groups: key_group_range(0, 128, 1) };
        let mut op = NativeCount::new(initial);
        let key = |k: &'static str| HashedKey::new(k.as_bytes(), 128);
        op.state.put(op.count, key("a"), b"5").unwrap();

        let out = op.process(0, batch(&["a", "b", "a"]), InputKind::Keyed).unwrap();
        let values: Vec<&[u8]> = out[0].1.iter().map(|r| r.value).collect();
        assert_eq!(values, [&b"6"[..], b"1", b"7"]);
        op.process(0, batch(&["b"]), InputKind::Keyed).unwrap();
        assert_eq!(op.state.get(op.count, key("a")).unwrap(), Some(&b"5"[..]), "held until a snapshot");

        op.snapshot().unwrap();
        assert_eq!(op.state.get(op.count, key("a")).unwrap(), Some(&b"7"[..]));
        assert_eq!(op.state.get(op.count, key("b")).unwrap(), Some(&b"2"[..]));
    }
}
