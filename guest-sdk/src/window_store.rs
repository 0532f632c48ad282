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
        for (id, held) in self.windows.iter_mut().filter(|(_, held)| held.changed) {
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
            held.changed = false;
            held.stored = held.window.is_some();
        }
        if key_offsets.len() > 1 {
            self.raw.set_keyed(&keys, &key_offsets, &sub_keys, &sub_key_offsets, &values)?;
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
