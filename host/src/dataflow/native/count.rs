//! `native:count`: the `word-count` plugin's logic compiled into the host.

use rustc_hash::FxHashMap;

use super::{HELD_BYTES, map_entry_bytes, native_snapshot, state_failure};
use crate::connectors::write_decimal;
use crate::dataflow::{Emitted, OperatorLogic, RecordBatch};
use crate::plugin::{CallError, CapturedState, InitialState, InputKind};
use crate::state::{HashedKey, KeyedStateBackend, StateError, StateId, StateRegistry, TimerService};

/// The `word-count` plugin's logic, natively: a value state `count` per
/// key, stored as decimal text (the JSON of a number), and `(key, count)`
/// emitted per event — with the state traffic of the SDK's `ValueState`
/// (counts held between calls, read from the backend on a key's first use,
/// written back before every snapshot or past [`HELD_BYTES`]) and the
/// same encoding, without the Wasm boundary.
pub(super) struct NativeCount {
    state: Box<dyn KeyedStateBackend>,
    registry: StateRegistry,
    count: StateId,
    max_parallelism: u32,
    value: Vec<u8>,
    /// Key → (count, changed since written back).
    held: FxHashMap<Vec<u8>, (u64, bool)>,
}

impl NativeCount {
    pub(super) fn new(state: InitialState) -> Self {
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
        // (The workload's keys are 8 bytes or fewer.)
        if self.held.len() * map_entry_bytes::<(u64, bool)>(8) > HELD_BYTES {
            self.write_back().map_err(state_failure)?;
            self.held.clear();
        }
        Ok(vec![(String::new(), out)])
    }

    fn snapshot(&mut self) -> Result<CapturedState, String> {
        self.write_back().map_err(|e| e.to_string())?;
        native_snapshot(&self.registry, &TimerService::default(), self.state.as_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MemoryBackend, key_group_range};

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
