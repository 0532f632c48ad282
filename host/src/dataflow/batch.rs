//! [`RecordBatch`]: events in the same flat layout as the WIT `event-batch`,
//! so that handing a batch to a plugin and taking its output back are moves.

use super::KeyNumbering;

/// The wire value for "no event timestamp".
pub const NO_TIMESTAMP: i64 = i64::MIN;

/// A batch of events: for `n` events, `offsets` has `2n + 1` entries;
/// event `i`'s key is `data[offsets[2i]..offsets[2i+1]]` and its value
/// `data[offsets[2i+1]..offsets[2i+2]]`; `timestamps` has `n` entries.
#[derive(Debug, Clone)]
pub struct RecordBatch {
    pub(crate) data: Vec<u8>,
    pub(crate) offsets: Vec<u32>,
    pub(crate) timestamps: Vec<i64>,
    /// What the key-by exchange that built the batch computed about its
    /// keys, for the keyed operator receiving it.
    keys: KeyColumns,
}

/// A batch's keys as the key-by exchange saw them; each column is valid
/// only if it has one entry per event.
#[derive(Debug, Clone, Default)]
struct KeyColumns {
    /// The [`key_hash`](crate::state::key_hash) of each event's key: the
    /// operator needs them again to find its state, and need not hash
    /// every key twice.
    hashes: Vec<u64>,
    /// Each event's key slot (valid only if the hashes are valid too): see
    /// [`KeyNumbering`].
    slots: Vec<u32>,
    /// The event where each slot first appears, by slot (valid with the
    /// slots): where the operator's host takes a slot's key from.
    firsts: Vec<u32>,
}

impl KeyColumns {
    /// Empties the columns, keeping their allocations.
    fn clear(&mut self) {
        self.hashes.clear();
        self.slots.clear();
        self.firsts.clear();
    }

    /// Adds event `i`'s slot, and notes `i` as the slot's first event if
    /// the slot is new (the next one: slots number keys by first
    /// appearance).
    #[inline]
    fn push_slot(&mut self, i: usize, slot: u32) {
        self.slots.push(slot);
        if slot as usize == self.firsts.len() {
            self.firsts.push(i as u32);
        }
    }
}

/// A batch's keys as the key-by exchange numbered them (see
/// [`RecordBatch::take_key_numbering`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNumbered {
    /// Each event's slot.
    pub slots: Vec<u32>,
    /// Each event's key hash.
    pub hashes: Vec<u64>,
    /// By slot, the event where the slot first appears.
    pub firsts: Vec<u32>,
}

/// Equal events; whether their key hashes and slots came along does not
/// matter.
impl PartialEq for RecordBatch {
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data && self.offsets == other.offsets && self.timestamps == other.timestamps
    }
}

impl Eq for RecordBatch {}

/// One event borrowed from a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub timestamp: Option<i64>,
}

impl Default for RecordBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBatch {
    pub fn new() -> Self {
        RecordBatch { data: Vec::new(), offsets: vec![0], timestamps: Vec::new(), keys: KeyColumns::default() }
    }

    pub fn with_capacity(events: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(2 * events + 1);
        offsets.push(0);
        RecordBatch { data: Vec::with_capacity(bytes), offsets, timestamps: Vec::with_capacity(events), keys: KeyColumns::default() }
    }

    /// Makes room for `events` more events of `bytes` bytes in all.
    pub fn reserve(&mut self, events: usize, bytes: usize) {
        self.data.reserve(bytes);
        self.offsets.reserve(2 * events);
        self.timestamps.reserve(events);
    }

    /// Builds a batch from parts in wire layout, checking them. An empty
    /// `timestamps` means no event has one.
    pub fn from_parts(data: Vec<u8>, mut offsets: Vec<u32>, mut timestamps: Vec<i64>) -> Result<Self, String> {
        if offsets.is_empty() && data.is_empty() {
            offsets.push(0);
        }
        if offsets.first() != Some(&0) {
            return Err(format!("its offsets must begin with 0, not {:?} ({} bytes of data)", offsets.first(), data.len()));
        }
        if offsets.len() % 2 != 1 {
            return Err(format!("{} offsets do not describe whole events (a key and a value each)", offsets.len()));
        }
        // Checked without stopping at the first offset out of order: a
        // loop without an exit, which the compiler vectorizes. Every
        // plugin call's output passes here (16 384 offsets a full batch).
        let increasing = offsets.iter().zip(&offsets[1..]).fold(true, |increasing, (at, next)| increasing & (at <= next));
        let end = *offsets.last().expect("begins with 0") as usize;
        if !increasing || end > data.len() {
            return Err("offsets are not increasing within the data".into());
        }
        if end < data.len() {
            return Err(format!("{} bytes of data after its last event", data.len() - end));
        }
        let events = offsets.len() / 2;
        if timestamps.is_empty() {
            timestamps.resize(events, NO_TIMESTAMP);
        } else if timestamps.len() != events {
            return Err(format!("{events} events but {} timestamps", timestamps.len()));
        }
        Ok(RecordBatch { data, offsets, timestamps, keys: KeyColumns::default() })
    }

    /// Takes the parts out in wire layout.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u32>, Vec<i64>) {
        (self.data, self.offsets, self.timestamps)
    }

    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Bytes of keys and values held.
    pub fn byte_len(&self) -> usize {
        self.data.len()
    }

    /// Whether the batch is to be sent as it is: it holds `max` records, or
    /// [`BATCH_BYTES`](super::BATCH_BYTES) of keys and values.
    pub fn is_full(&self, max: usize) -> bool {
        self.len() >= max || self.byte_len() >= super::BATCH_BYTES
    }

    /// The batch as batches the next operator can be handed, cut as
    /// sources cut theirs ([`RecordBatch::is_full`] at
    /// [`BATCH_SIZE`](super::BATCH_SIZE)): itself if no cut falls inside
    /// it — a source's batch, whose last record took it to the bound —,
    /// else consecutive batches (a record larger than the bound alone). A
    /// plugin's output is as large as its own memory cap allowed, and the
    /// operator after it may have a smaller one.
    pub fn into_bounded(self) -> Vec<RecordBatch> {
        use super::{BATCH_BYTES, BATCH_SIZE};
        let before_last = self.len().checked_sub(1).map_or(0, |last| self.offsets[2 * last] as usize);
        if self.len() <= BATCH_SIZE && before_last < BATCH_BYTES {
            return vec![self];
        }
        let mut pieces = Vec::new();
        let mut piece = RecordBatch::default();
        for i in 0..self.len() {
            piece.push_from(&self, i);
            if piece.is_full(BATCH_SIZE) {
                pieces.push(std::mem::take(&mut piece));
            }
        }
        if !piece.is_empty() {
            pieces.push(piece);
        }
        pieces
    }

    pub fn push(&mut self, key: &[u8], value: &[u8], timestamp: Option<i64>) {
        self.data.extend_from_slice(key);
        self.offsets.push(self.data.len() as u32);
        self.data.extend_from_slice(value);
        self.offsets.push(self.data.len() as u32);
        self.timestamps.push(timestamp.unwrap_or(NO_TIMESTAMP));
    }

    /// Appends a record whose key and value are written by `write` into the
    /// data buffer (for sources that format numbers without allocating).
    pub fn push_with(&mut self, timestamp: Option<i64>, write: impl FnOnce(&mut Vec<u8>, &mut Vec<u32>)) {
        write(&mut self.data, &mut self.offsets);
        debug_assert_eq!(self.offsets.len() % 2, 1, "push_with must add a key and a value");
        self.timestamps.push(timestamp.unwrap_or(NO_TIMESTAMP));
    }

    /// Appends event `i` of `from`: its key and value, adjacent there, in
    /// one copy (the key-by exchange moves every event this way).
    #[inline]
    pub fn push_from(&mut self, from: &RecordBatch, i: usize) {
        let (start, middle, end) = (from.offsets[2 * i], from.offsets[2 * i + 1], from.offsets[2 * i + 2]);
        let base = self.data.len() as u32;
        copy_bytes(&mut self.data, &from.data, start as usize..end as usize);
        self.offsets.push(base + (middle - start));
        self.offsets.push(base + (end - start));
        self.timestamps.push(from.timestamps[i]);
    }

    /// [`RecordBatch::push_from`], with the [`key_hash`](crate::state::key_hash)
    /// of the event's key. The hashes are kept only while every event of
    /// the batch came with one.
    #[inline]
    pub fn push_from_hashed(&mut self, from: &RecordBatch, i: usize, hash: u64) {
        self.push_from(from, i);
        if self.keys.hashes.len() + 1 == self.len() {
            if self.keys.hashes.capacity() == 0 {
                self.keys.hashes.reserve(self.timestamps.capacity());
            }
            self.keys.hashes.push(hash);
        }
    }

    /// [`RecordBatch::push_from_hashed`], numbering the event's key with
    /// `numbering` — which must have numbered every earlier event of this
    /// batch (its first event starts the numbering afresh). The slots are
    /// kept only while every event came with one.
    #[inline]
    pub fn push_from_numbered(&mut self, from: &RecordBatch, i: usize, hash: u64, numbering: &mut KeyNumbering) {
        self.push_from_hashed(from, i, hash);
        if self.keys.slots.len() + 1 == self.len() && self.keys.hashes.len() == self.len() {
            if self.keys.slots.capacity() == 0 {
                self.keys.slots.reserve(self.timestamps.capacity());
            }
            let slot = numbering.slot(self, self.len() - 1, hash);
            self.keys.push_slot(self.len() - 1, slot);
        }
    }

    /// Computes the [`key_hash`](crate::state::key_hash) of every event's
    /// key and numbers the keys, for a batch the key-by exchange passes on
    /// whole (`numbering` lends its table).
    pub fn number_keys(&mut self, numbering: &mut KeyNumbering) {
        let hashes = (0..self.len()).map(|i| crate::state::key_hash(self.key(i))).collect();
        let mut keys = KeyColumns { hashes, ..KeyColumns::default() };
        keys.slots.reserve(self.len());
        for i in 0..self.len() {
            keys.push_slot(i, numbering.slot(self, i, keys.hashes[i]));
        }
        self.keys = keys;
    }

    /// Each event's key slot, if the batch came with them.
    pub fn key_slots(&self) -> Option<&[u32]> {
        (self.keys.slots.len() == self.len() && self.key_hashes().is_some()).then_some(&self.keys.slots)
    }

    /// Takes the key slots out (see [`RecordBatch::key_slots`]).
    pub fn take_key_slots(&mut self) -> Option<Vec<u32>> {
        self.key_slots()?;
        Some(std::mem::take(&mut self.keys.slots))
    }

    /// Takes the key numbering out, if the batch came with it: each
    /// event's slot and key hash, and each slot's first event.
    pub fn take_key_numbering(&mut self) -> Option<KeyNumbered> {
        self.key_slots()?;
        let KeyColumns { hashes, slots, firsts } = std::mem::take(&mut self.keys);
        Some(KeyNumbered { slots, hashes, firsts })
    }

    /// The key hash of every event, if the batch came with them.
    pub fn key_hashes(&self) -> Option<&[u64]> {
        (self.keys.hashes.len() == self.len()).then_some(&self.keys.hashes)
    }

    /// Appends event `i`'s key to `out` (as [`RecordBatch::push_from`]
    /// copies events).
    #[inline]
    pub fn append_key(&self, i: usize, out: &mut Vec<u8>) {
        copy_bytes(out, &self.data, self.offsets[2 * i] as usize..self.offsets[2 * i + 1] as usize);
    }

    pub fn key(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[2 * i] as usize..self.offsets[2 * i + 1] as usize]
    }

    pub fn get(&self, i: usize) -> Record<'_> {
        let timestamp = self.timestamps[i];
        Record {
            key: self.key(i),
            value: &self.data[self.offsets[2 * i + 1] as usize..self.offsets[2 * i + 2] as usize],
            timestamp: (timestamp != NO_TIMESTAMP).then_some(timestamp),
        }
    }

    /// The latest event timestamp of the batch, if any event has one.
    pub fn max_timestamp(&self) -> Option<i64> {
        self.timestamps.iter().copied().filter(|&t| t != NO_TIMESTAMP).max()
    }

    pub fn iter(&self) -> impl Iterator<Item = Record<'_>> {
        (0..self.len()).map(|i| self.get(i))
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.timestamps.clear();
        self.keys.clear();
    }
}

/// How many bytes [`copy_bytes`] moves as one fixed-size block.
const BLOCK: usize = 16;

/// Appends `from[range]` to `to`. An event's key and value are mostly a few
/// bytes, for which `extend_from_slice` calls `memmove` with a length known
/// only at run time; when `from` has [`BLOCK`] bytes from the start of the
/// range, a copy of that many (a fixed size: one vector load and store),
/// cut back to the range's length, is cheaper.
#[inline]
fn copy_bytes(to: &mut Vec<u8>, from: &[u8], range: std::ops::Range<usize>) {
    let len = range.len();
    match from.get(range.start..range.start + BLOCK) {
        Some(block) if len <= BLOCK => {
            let end = to.len() + len;
            to.extend_from_slice(<&[u8; BLOCK]>::try_from(block).expect("a block"));
            to.truncate(end);
        }
        _ => to.extend_from_slice(&from[range]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_full_at_its_records_or_its_bytes() {
        let mut batch = RecordBatch::default();
        batch.push(b"k", &vec![b'x'; crate::dataflow::BATCH_BYTES - 2], None);
        assert!(!batch.is_full(2), "one record short of both");
        batch.push(b"", b"x", None);
        assert!(batch.is_full(3), "4 MiB of keys and values");
        let mut small = RecordBatch::default();
        small.push(b"k", b"v", None);
        assert!(small.is_full(1) && !small.is_full(2));
    }

    #[test]
    fn a_large_batch_is_cut_into_bounded_ones_in_order() {
        let mut large = RecordBatch::default();
        let value = vec![b'x'; 1 << 20];
        for i in 0..10u8 {
            large.push(&[i], &value, Some(i64::from(i)));
        }
        let pieces = large.into_bounded();
        assert_eq!(pieces.iter().map(RecordBatch::len).collect::<Vec<_>>(), [4, 4, 2], "4 MiB each at most");
        let keys: Vec<u8> = pieces.iter().flat_map(|p| p.iter().map(|r| r.key[0]).collect::<Vec<_>>()).collect();
        assert_eq!(keys, (0..10).collect::<Vec<u8>>());
        assert_eq!(pieces[2].iter().map(|r| r.timestamp).collect::<Vec<_>>(), [Some(8), Some(9)]);
        let mut many = RecordBatch::default();
        for _ in 0..crate::dataflow::BATCH_SIZE + 1 {
            many.push(b"k", b"v", None);
        }
        assert_eq!(many.into_bounded().len(), 2, "and at BATCH_SIZE records");
        let mut cut_by_a_source = RecordBatch::default();
        for _ in 0..4 {
            cut_by_a_source.push(b"k", &value, None);
        }
        assert_eq!(cut_by_a_source.into_bounded().len(), 1, "a batch whose last record took it past the bound stays whole");
    }

    #[test]
    fn push_and_read_back() {
        let mut batch = RecordBatch::new();
        batch.push(b"k1", b"v1", Some(5));
        batch.push(b"", b"v2", None);
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.get(0), Record { key: b"k1", value: b"v1", timestamp: Some(5) });
        assert_eq!(batch.get(1), Record { key: b"", value: b"v2", timestamp: None });
        let (data, offsets, timestamps) = batch.clone().into_parts();
        assert_eq!(RecordBatch::from_parts(data, offsets, timestamps).unwrap(), batch);
    }

    #[test]
    fn an_event_pushed_from_another_batch_is_the_same_event() {
        let mut from = RecordBatch::new();
        from.push(b"k1", b"value one", Some(5));
        from.push(b"", b"v2", None);
        from.push(b"key3", b"", Some(-1));
        let mut to = RecordBatch::new();
        to.push(b"x", b"y", None);
        for i in [2, 0, 1] {
            to.push_from(&from, i);
        }
        let events: Vec<Record<'_>> = to.iter().collect();
        assert_eq!(events[1..], [from.get(2), from.get(0), from.get(1)]);
        let (data, offsets, timestamps) = to.clone().into_parts();
        assert_eq!(RecordBatch::from_parts(data, offsets, timestamps).unwrap(), to);
    }

    /// Events shorter and longer than the block copied at once, with more
    /// or fewer bytes after them in their batch than the block needs.
    #[test]
    fn events_of_every_length_are_copied_whole() {
        for len in 0..=2 * BLOCK + 1 {
            for after in [0, 1, BLOCK - 1, BLOCK] {
                let bytes: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
                let (key, value) = bytes.split_at(len / 3);
                let mut from = RecordBatch::new();
                from.push(key, value, Some(len as i64));
                from.push(b"", &vec![0xff; after], None);
                let mut to = RecordBatch::new();
                to.push(b"before", b"", None);
                to.push_from(&from, 0);
                to.push(b"after", b"", None);
                assert_eq!(to.get(1), from.get(0), "{len} bytes, {after} after");
                assert_eq!(to.get(2).key, b"after");
            }
        }
    }

    #[test]
    fn key_hashes_come_along_only_when_every_event_has_one() {
        let mut from = RecordBatch::new();
        from.push(b"a", b"1", None);
        from.push(b"b", b"2", None);
        let mut hashed = RecordBatch::new();
        hashed.push_from_hashed(&from, 0, 7);
        hashed.push_from_hashed(&from, 1, 9);
        assert_eq!(hashed.key_hashes(), Some(&[7, 9][..]));
        assert_eq!(hashed, from, "hashes do not change what the batch holds");
        hashed.push(b"c", b"3", None);
        assert_eq!(hashed.key_hashes(), None, "an event without a hash");
        hashed.push_from_hashed(&from, 0, 7);
        assert_eq!(hashed.key_hashes(), None);
        let mut unhashed = RecordBatch::new();
        unhashed.push_from(&from, 0);
        unhashed.push_from_hashed(&from, 1, 9);
        assert_eq!(unhashed.key_hashes(), None);
        hashed.clear();
        hashed.push_from_hashed(&from, 1, 9);
        assert_eq!(hashed.key_hashes(), Some(&[9][..]));
        from.number_keys(&mut KeyNumbering::default());
        assert_eq!(from.key_hashes(), Some(&[crate::state::key_hash(b"a"), crate::state::key_hash(b"b")][..]));
    }

    /// Keys numbered as a batch is built, or all at once, get the slots of
    /// their first appearance, and only while every event is numbered.
    #[test]
    fn keys_are_numbered_by_first_appearance() {
        let mut from = RecordBatch::new();
        for key in ["b", "a", "b", "c", "a", "", "b"] {
            from.push(key.as_bytes(), b"v", None);
        }
        let expected = [0, 1, 0, 2, 1, 3, 0].as_slice();
        let mut numbering = KeyNumbering::default();
        let mut built = RecordBatch::new();
        for i in 0..from.len() {
            built.push_from_numbered(&from, i, crate::state::key_hash(from.key(i)), &mut numbering);
        }
        assert_eq!(built.key_slots(), Some(expected));
        assert_eq!(built, from, "slots do not change what the batch holds");

        let mut whole = from.clone();
        whole.number_keys(&mut numbering);
        assert_eq!(whole.key_slots(), Some(expected));
        assert_eq!(whole.take_key_slots(), Some(expected.to_vec()));
        assert_eq!(whole.key_slots(), None, "taken");

        // Each slot's first event comes along, built either way.
        let firsts = vec![0, 1, 3, 5];
        let hashes: Vec<u64> = (0..from.len()).map(|i| crate::state::key_hash(from.key(i))).collect();
        let numbered = KeyNumbered { slots: expected.to_vec(), hashes, firsts };
        let mut whole = from.clone();
        whole.number_keys(&mut numbering);
        assert_eq!(whole.take_key_numbering(), Some(numbered.clone()));
        assert_eq!(whole.take_key_numbering(), None, "taken");
        assert_eq!(built.clone().take_key_numbering(), Some(numbered));

        built.push(b"d", b"v", None);
        assert_eq!(built.key_slots(), None, "an event without a slot");
        let mut unhashed = RecordBatch::new();
        unhashed.push_from(&from, 0);
        unhashed.push_from_numbered(&from, 1, crate::state::key_hash(b"a"), &mut numbering);
        assert_eq!(unhashed.key_slots(), None);
        built.clear();
        assert_eq!(built.key_slots(), Some(&[][..]));
    }

    #[test]
    fn from_parts_rejects_inconsistent_layouts() {
        assert!(RecordBatch::from_parts(vec![1, 2], vec![0, 1], vec![]).is_err());
        assert!(RecordBatch::from_parts(vec![1, 2], vec![0, 3, 3], vec![]).is_err());
        // Offsets that go back within the data.
        assert!(RecordBatch::from_parts(vec![1, 2], vec![0, 2, 1], vec![]).is_err());
        assert!(RecordBatch::from_parts(vec![1, 2, 3], vec![0, 2, 1, 2, 3], vec![]).is_err());
        assert!(RecordBatch::from_parts(vec![1, 2], vec![0, 1, 2], vec![1, 2]).is_err());
        let ok = RecordBatch::from_parts(vec![1, 2], vec![0, 1, 2], vec![]).unwrap();
        assert_eq!(ok.get(0).timestamp, None);
        assert!(RecordBatch::from_parts(vec![], vec![], vec![]).unwrap().is_empty());
        // Data no event covers, and offsets not from 0, say so.
        let trailing = RecordBatch::from_parts(vec![1, 2, 3, 4, 5], vec![0, 1, 2], vec![]).unwrap_err();
        assert!(trailing.contains("3 bytes of data after its last event"), "{trailing}");
        assert!(RecordBatch::from_parts(vec![1], vec![], vec![]).unwrap_err().contains("must begin with 0"));
        let shifted = RecordBatch::from_parts(vec![1, 2, 3], vec![1, 2, 3], vec![]).unwrap_err();
        assert!(shifted.contains("must begin with 0, not Some(1)"), "{shifted}");
    }
}
