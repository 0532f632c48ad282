//! The accumulators of tumbling and sliding windows, held in the instance's
//! memory from call to call.
//!
//! Each event of a window workload folds into the accumulator of its (key,
//! window), and a batch touches about as many accumulators as it has
//! events: fetching each from the host and writing it back for every batch
//! was most of a window operator's time. So the windows keep their
//! accumulators here, typed, between calls; one is read from the host only
//! the first time it is used (after a start, a restore, or being
//! forgotten), and changed ones are written back — by key, since the batch
//! that changed them is gone — when the host calls `flush` before a
//! snapshot, or when too many are held ([`crate::state::RESIDENT_LIMIT`]).
//! What reaches the host is exactly what the map state would have held:
//! entry `start` (decimal) of the key, the JSON of `(end, accumulator,
//! fired)`; a savepoint cannot tell the two apart.

use serde::Serialize;

use crate::Encode;
use crate::Error;
use crate::hash::FastMap;
use crate::map_state::RawMapState;
use crate::state::{Resident, SlotValues};

/// One window of a key.
pub(crate) struct HeldWindow<Acc> {
    pub end: i64,
    /// The accumulator and whether the window's result was emitted; `None`
    /// when the window does not exist (yet, or any more).
    pub window: Option<(Acc, bool)>,
    /// Changed since it was read from or written to the host.
    changed: bool,
    /// Whether the host holds an entry for it.
    stored: bool,
}

impl<Acc> HeldWindow<Acc> {
    /// A window as the host holds it (`None`: not at all).
    pub fn loaded(end: i64, stored: Option<(Acc, bool)>) -> Self {
        HeldWindow { end, stored: stored.is_some(), window: stored, changed: false }
    }

    /// Marks the window as changed, to be written back.
    pub fn touch(&mut self) {
        self.changed = true;
    }
}

/// Windows by (start, key), encoded as the start's 8 bytes then the key.
pub(crate) struct WindowStore<Acc> {
    raw: Box<dyn RawMapState>,
    windows: FastMap<Vec<u8>, HeldWindow<Acc>>,
    scratch: Vec<u8>,
}

impl<Acc: Serialize + 'static> WindowStore<Acc> {
    pub fn new(raw: Box<dyn RawMapState>) -> Self {
        WindowStore { raw, windows: FastMap::default(), scratch: Vec::new() }
    }

    fn locate(&mut self, key: &[u8], start: i64) -> &[u8] {
        self.scratch.clear();
        self.scratch.extend_from_slice(&start.to_le_bytes());
        self.scratch.extend_from_slice(key);
        &self.scratch
    }

    pub fn contains(&mut self, key: &[u8], start: i64) -> bool {
        self.locate(key, start);
        self.windows.contains_key(self.scratch.as_slice())
    }

    pub fn get_mut(&mut self, key: &[u8], start: i64) -> Option<&mut HeldWindow<Acc>> {
        self.locate(key, start);
        self.windows.get_mut(self.scratch.as_slice())
    }

    pub fn insert(&mut self, key: &[u8], start: i64, window: HeldWindow<Acc>) {
        let id = self.locate(key, start).to_vec();
        self.windows.insert(id, window);
    }

    /// Removes the window: from memory at once if the host never had it,
    /// else when the host's entry is removed at the next write-back.
    pub fn remove(&mut self, key: &[u8], start: i64) {
        self.locate(key, start);
        let Some(held) = self.windows.get_mut(self.scratch.as_slice()) else { return };
        if held.stored {
            held.window = None;
            held.changed = true;
        } else {
            self.windows.remove(self.scratch.as_slice());
        }
    }
}

impl<Acc: Serialize + 'static> Resident for WindowStore<Acc> {
    fn write_back(&mut self) -> Result<(), Error> {
        let (mut keys, mut key_offsets) = (Vec::new(), vec![0u32]);
        let (mut sub_keys, mut sub_key_offsets) = (Vec::new(), vec![0u32]);
        let mut values = SlotValues::empty();
        let mut encoded = Vec::new();
        for (id, held) in self.windows.iter().filter(|(_, held)| held.changed) {
            let (start, key) = id.split_at(8);
            keys.extend_from_slice(key);
            key_offsets.push(keys.len() as u32);
            i64::from_le_bytes(start.try_into().expect("8 bytes")).encode(&mut sub_keys);
            sub_key_offsets.push(sub_keys.len() as u32);
            match &held.window {
                Some((acc, fired)) => {
                    encoded.clear();
                    serde_json::to_writer(&mut encoded, &(held.end, acc, fired))
                        .map_err(|e| Error::State(format!("cannot encode a window's accumulator: {e}")))?;
                    values.push(Some(&encoded));
                }
                None => values.push(None),
            }
        }
        if key_offsets.len() > 1 {
            // On failure every window stays changed: the next flush retries.
            self.raw.set_keyed(&keys, &key_offsets, &sub_keys, &sub_key_offsets, &values)?;
        }
        for held in self.windows.values_mut().filter(|held| held.changed) {
            held.stored = held.window.is_some();
            held.changed = false;
        }
        // Removed windows are gone from the host too now.
        self.windows.retain(|_, held| held.window.is_some());
        Ok(())
    }

    fn len(&self) -> usize {
        self.windows.len()
    }

    fn forget(&mut self) {
        self.windows.clear();
    }

    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    /// A host whose first `set-keyed` fails; records what it accepted.
    #[derive(Default)]
    struct Host {
        failures_left: usize,
        written: Vec<(Vec<u8>, Vec<u8>, Option<Vec<u8>>)>,
    }

    struct Map(Rc<RefCell<Host>>);

    impl RawMapState for Map {
        fn get(&self, _: u32, _: &[u8]) -> Result<Option<Vec<u8>>, Error> {
            unreachable!()
        }
        fn get_many(&self, _: &[u32], _: &[u8], _: &[u32]) -> Result<SlotValues, Error> {
            unreachable!()
        }
        fn set_many(&self, _: &[u32], _: &[u8], _: &[u32], _: &SlotValues) -> Result<(), Error> {
            unreachable!()
        }
        fn set_keyed(&self, keys: &[u8], key_offsets: &[u32], sub_keys: &[u8], offsets: &[u32], values: &SlotValues) -> Result<(), Error> {
            let mut host = self.0.borrow_mut();
            if host.failures_left > 0 {
                host.failures_left -= 1;
                return Err(Error::State("host unavailable".into()));
            }
            for i in 0..key_offsets.len() - 1 {
                let key = keys[key_offsets[i] as usize..key_offsets[i + 1] as usize].to_vec();
                let sub_key = sub_keys[offsets[i] as usize..offsets[i + 1] as usize].to_vec();
                host.written.push((key, sub_key, values.value(i).map(<[u8]>::to_vec)));
            }
            Ok(())
        }
    }

    /// A write-back that fails keeps every window changed, so the next one
    /// writes them all; after a success nothing is written again.
    #[test]
    fn a_failed_write_back_is_retried_in_full() {
        let host = Rc::new(RefCell::new(Host { failures_left: 1, ..Host::default() }));
        let mut store = WindowStore::<f64>::new(Box::new(Map(host.clone())));
        for (key, start) in [(&b"a"[..], 0), (b"b", 1000)] {
            let mut held = HeldWindow::loaded(start + 1000, None);
            held.window = Some((2.5, false));
            held.touch();
            store.insert(key, start, held);
        }
        assert!(store.write_back().is_err());
        store.write_back().unwrap();
        let mut written = host.borrow().written.clone();
        written.sort();
        let value = |end: i64| Some(format!("[{end},2.5,false]").into_bytes());
        assert_eq!(written, vec![(b"a".to_vec(), b"0".to_vec(), value(1000)), (b"b".to_vec(), b"1000".to_vec(), value(2000))]);
        store.write_back().unwrap();
        assert_eq!(host.borrow().written.len(), 2, "nothing changed since");
    }
}
