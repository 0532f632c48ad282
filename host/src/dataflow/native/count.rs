//! `native:count`: the `word-count` plugin's logic compiled into the host.

use weir_codec::{parse_u64, write_u64};
use weir_key_slab::KeySlab;

use super::{HELD_BYTES, KeyLookup, native_snapshot, state_failure};
use crate::dataflow::{Emitted, OperatorLogic, RecordBatch};
use crate::plugin::{CallError, CapturedState, InitialState, InputKind};
use crate::state::{HashedKey, KeyedStateBackend, StateError, StateId, StateRegistry, TimerService};

/// The `word-count` plugin's logic, natively: a value state `count` per
/// key, stored as decimal text (the JSON of a number), and `(key, count)`
/// emitted per event — with the state traffic of the SDK's `ValueState`
/// and its table: counts held between calls in a [`KeySlab`], a batch's
/// keys found in it once each by the slots the key-by exchange gave them,
/// read from the backend only if it may hold them, written back before
/// every snapshot or past [`HELD_BYTES`]. The same encoding, the same
/// lookups, without the Wasm boundary.
pub(super) struct NativeCount {
    state: Box<dyn KeyedStateBackend>,
    registry: StateRegistry,
    count: StateId,
    max_parallelism: u32,
    value: Vec<u8>,
    held: KeySlab<HeldCount>,
    /// Whether the backend may hold a count the table does not: the job
    /// was restored, or the table forgot keys past its bound. (Until then
    /// a key not held has no count, and is not asked for — as the SDK.)
    may_hold_others: bool,
    keys: KeyLookup,
}

#[derive(Debug, Default, Clone, Copy)]
struct HeldCount {
    count: u64,
    /// Changed since written back.
    changed: bool,
}

impl NativeCount {
    pub(super) fn new(mut state: InitialState) -> Self {
        // (A backend that cannot say is taken to hold counts.)
        let restored = state.meta.is_some() || state.backend.is_empty().map_or(true, |empty| !empty);
        let mut registry = state.meta.map(|m| m.registry).unwrap_or_default();
        let count = registry.intern("count");
        NativeCount {
            state: state.backend,
            registry,
            count,
            max_parallelism: state.max_parallelism,
            value: Vec::new(),
            held: KeySlab::default(),
            may_hold_others: restored,
            keys: KeyLookup::default(),
        }
    }

    /// Reads the stored counts of the keys the last batch added to the
    /// table, if the backend may hold any.
    fn read_added(&mut self) -> Result<(), CallError> {
        if !self.may_hold_others {
            return Ok(());
        }
        for &(_, entry) in &self.keys.made {
            let key = HashedKey::new(self.held.key(entry), self.max_parallelism);
            let stored = self.state.get(self.count, key).map_err(state_failure)?;
            let count = stored.and_then(parse_u64).unwrap_or(0);
            self.held.get_mut(entry).count = count;
        }
        Ok(())
    }

    /// Writes the changed counts to the backend.
    fn write_back(&mut self) -> Result<(), StateError> {
        for (key, held) in self.held.iter().filter(|(_, held)| held.changed) {
            self.value.clear();
            write_u64(held.count, &mut self.value);
            self.state.put(self.count, HashedKey::new(key, self.max_parallelism), &self.value)?;
        }
        self.held.values_mut().for_each(|held| held.changed = false);
        Ok(())
    }
}

impl OperatorLogic for NativeCount {
    fn process(&mut self, _input: u32, mut batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError> {
        if kind != InputKind::Keyed {
            return Err(CallError::Operator("native count needs a keyed input (key_by = true)".into()));
        }
        let slots = self.keys.resolve(&mut self.held, &mut batch, HeldCount::default);
        self.read_added()?;
        let mut out = RecordBatch::with_capacity(batch.len(), batch.byte_len() + 8 * batch.len());
        for (record, &slot) in batch.iter().zip(&slots) {
            let entry = self.held.in_call(slot).expect("every slot of the batch is resolved");
            let held = self.held.get_mut(entry);
            held.count += 1;
            held.changed = true;
            let count = held.count;
            out.push_with(record.timestamp, |data, offsets| {
                data.extend_from_slice(record.key);
                offsets.push(data.len() as u32);
                write_u64(count, data);
                offsets.push(data.len() as u32);
            });
        }
        if self.held.bytes() > HELD_BYTES {
            self.write_back().map_err(state_failure)?;
            self.held = KeySlab::default();
            self.may_hold_others = true;
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
    use crate::dataflow::KeyNumbering;
    use crate::plugin::InstanceMeta;
    use crate::state::{MemoryBackend, key_group_range};

    fn initial(backend: Box<dyn KeyedStateBackend>, meta: Option<InstanceMeta>) -> InitialState {
        InitialState { backend, meta, max_parallelism: 128, key_groups: key_group_range(0, 128, 1) }
    }

    /// A batch of `keys`, numbered as the key-by exchange numbers them.
    fn numbered(keys: &[&str]) -> RecordBatch {
        let mut batch = unnumbered(keys);
        batch.number_keys(&mut KeyNumbering::default());
        batch
    }

    fn unnumbered(keys: &[&str]) -> RecordBatch {
        let mut batch = RecordBatch::new();
        for key in keys {
            batch.push(key.as_bytes(), b"", None);
        }
        batch
    }

    fn counts(out: &Emitted) -> Vec<&[u8]> {
        out[0].1.iter().map(|r| r.value).collect()
    }

    fn stored(op: &mut NativeCount, key: &str) -> Option<Vec<u8>> {
        op.state.get(op.count, HashedKey::new(key.as_bytes(), 128)).unwrap().map(<[u8]>::to_vec)
    }

    /// Counts are held between calls, reach the backend at a snapshot, and
    /// a batch that did not come numbered is counted the same.
    #[test]
    fn native_count_holds_counts_and_writes_them_back_for_a_snapshot() {
        let mut op = NativeCount::new(initial(Box::new(MemoryBackend::new()), None));
        let out = op.process(0, numbered(&["a", "b", "a"]), InputKind::Keyed).unwrap();
        assert_eq!(counts(&out), [&b"1"[..], b"1", b"2"]);
        let out = op.process(0, unnumbered(&["b", "a"]), InputKind::Keyed).unwrap();
        assert_eq!(counts(&out), [&b"2"[..], b"3"]);
        assert_eq!(stored(&mut op, "a"), None, "held until a snapshot");

        op.snapshot().unwrap();
        assert_eq!(stored(&mut op, "a").as_deref(), Some(&b"3"[..]));
        assert_eq!(stored(&mut op, "b").as_deref(), Some(&b"2"[..]));
    }

    /// A restored count goes on from the stored counts.
    #[test]
    fn a_restored_count_continues_the_stored_counts() {
        let mut before = NativeCount::new(initial(Box::new(MemoryBackend::new()), None));
        before.process(0, numbered(&["a", "a", "b"]), InputKind::Keyed).unwrap();
        before.snapshot().unwrap();
        let meta = InstanceMeta { registry: before.registry.clone(), broadcast: Default::default(), timers: Default::default() };
        let mut after = NativeCount::new(initial(before.state, Some(meta)));
        let out = after.process(0, numbered(&["b", "c", "a"]), InputKind::Keyed).unwrap();
        assert_eq!(counts(&out), [&b"2"[..], b"1", b"3"]);
    }

    /// Past the bound the counts are written back and forgotten, and read
    /// again when their keys come back.
    #[test]
    fn counts_beyond_the_bound_are_written_back_and_read_again() {
        let mut op = NativeCount::new(initial(Box::new(MemoryBackend::new()), None));
        let keys: Vec<String> = (0..HELD_BYTES / 32).map(|k| format!("k{k}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        op.process(0, numbered(&keys), InputKind::Keyed).unwrap();
        assert_eq!(op.held.len(), 0, "forgotten past the bound");
        assert_eq!(stored(&mut op, "k7").as_deref(), Some(&b"1"[..]), "written back first");
        let out = op.process(0, numbered(&["k7", "k7"]), InputKind::Keyed).unwrap();
        assert_eq!(counts(&out), [&b"2"[..], b"3"]);
    }

    #[test]
    fn an_unkeyed_input_is_refused() {
        let mut op = NativeCount::new(initial(Box::new(MemoryBackend::new()), None));
        let error = op.process(0, numbered(&["a"]), InputKind::Plain).unwrap_err();
        assert!(error.to_string().contains("key_by = true"), "{error}");
    }
}
