//! Key slots numbered where a keyed batch is built.
//!
//! A plugin addresses keyed state by slot: the index of a key among the
//! distinct keys of its batch, in order of first appearance. Numbering
//! them takes a hash-table probe per event, and the operator's thread is
//! the one a keyed job waits on. The key-by exchange already has every
//! event's key hash in hand as it builds the batch for a consumer, on the
//! producer's thread, so it numbers the keys there and the batch carries
//! its slots (see [`RecordBatch::key_slots`]); the operator then only
//! collects each slot's key at its first event.
//!
//! The probe is on every event's path through the exchange, so the table
//! is a small open-addressing one made for it rather than a general hash
//! map: a probe that finds its key is a few instructions, inlined, with no
//! closure and no `memcmp` for short keys (held in the entry as one word);
//! the table is emptied for the next batch by counting a generation, not
//! by clearing it; and it keeps its size from batch to batch, grown to the
//! distinct keys of one rather than reserved for a whole batch of them.
//!
//! A batch of [`BATCH_SIZE`](super::BATCH_SIZE) distinct keys fills a
//! table of 16 384 entries, and its probes land at random in it: beyond
//! the first-level cache, and beyond the second once a consumer's state
//! shares the core. Profiled at parallelism 2, a third of the exchange's
//! time waited on the probe's first load. So an entry holds only what a
//! probe reads (sixteen bytes: a quarter of a megabyte for the table,
//! half what it was), and the exchange, which splits a batch between
//! consumers, knows its keys' hashes a few events ahead and
//! [`prefetch`](KeyNumbering::prefetch)es the entries those probes will
//! start at. (A batch passed on whole, at parallelism 1, is numbered
//! without: its one table stays in the second-level cache, and the
//! prefetches cost ~12 instructions an event for no time measured.)

use super::RecordBatch;
use crate::prefetch::prefetch;

/// A key of this many bytes or fewer is held in its entry as a word.
const INLINE_KEY: usize = 7;

/// The top byte of a longer key's word: a held key's top byte is its
/// length, at most `INLINE_KEY`, so no held key's word has this one.
const LONG_KEY: u64 = 0xff << 56;

/// The generation of entries that hold no key in any batch.
const EMPTY: u32 = 0;

/// The entries a table starts with.
const FIRST_SIZE: usize = 64;

/// A numbered key, in sixteen bytes: four to a cache line. (What a probe
/// that finds its key does not need — the key's hash and first event —
/// is kept apart, in slot order, see [`Numbered`].)
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The key's bytes and length, or for a longer key [`LONG_KEY`] and
    /// the low bytes of its hash.
    word: u64,
    slot: u32,
    /// The batch the entry belongs to: any other than the current one's
    /// is free.
    generation: u32,
}

const FREE: Entry = Entry { word: 0, slot: 0, generation: EMPTY };

/// What the table knows of a slot besides its entry.
#[derive(Debug, Clone, Copy)]
struct Numbered {
    /// To move the entry when the table grows.
    hash: u64,
    /// The event where the key first appears, to compare a longer key's
    /// bytes with.
    first: u32,
}

/// The distinct keys of one batch being built.
#[derive(Debug)]
pub struct KeyNumbering {
    /// A power of two of them (or none yet), at most half in use.
    entries: Vec<Entry>,
    generation: u32,
    /// One per slot numbered in this batch, by slot.
    numbered: Vec<Numbered>,
}

impl Default for KeyNumbering {
    fn default() -> Self {
        KeyNumbering { entries: Vec::new(), generation: EMPTY + 1, numbered: Vec::new() }
    }
}

impl KeyNumbering {
    /// The slot of event `i` of `batch`, whose key hashes to `hash`: the
    /// slot of an earlier event with that key, or the next one. Event 0
    /// starts a new numbering: the keys held point into the batch they
    /// were numbered in, by index, so none may outlive it.
    #[inline(always)]
    pub fn slot(&mut self, batch: &RecordBatch, i: usize, hash: u64) -> u32 {
        if i == 0 {
            self.next_batch();
        }
        if 2 * (self.numbered.len() + 1) > self.entries.len() {
            self.grow();
        }
        let word = key_word(batch, i, hash);
        let mask = self.entries.len() - 1;
        let mut index = home(hash, mask);
        loop {
            let entry = self.entries[index];
            if entry.generation != self.generation {
                let slot = self.numbered.len() as u32;
                self.entries[index] = Entry { word, slot, generation: self.generation };
                self.numbered.push(Numbered { hash, first: i as u32 });
                return slot;
            }
            if entry.word == word && (word & LONG_KEY != LONG_KEY || self.same_key(batch, entry.slot, i)) {
                return entry.slot;
            }
            index = (index + 1) & mask;
        }
    }

    /// Whether event `i`'s key is the key numbered `slot` (a longer key,
    /// whose word is only part of its hash).
    fn same_key(&self, batch: &RecordBatch, slot: u32, i: usize) -> bool {
        batch.key(self.numbered[slot as usize].first as usize) == batch.key(i)
    }

    /// Asks the processor to fetch the entry where the probe for `hash`
    /// will start, so that a [`slot`](KeyNumbering::slot) called a few
    /// events later finds it in cache. Only a hint: a table that grows in
    /// between has moved its entries, and the fetch is wasted.
    #[inline(always)]
    pub fn prefetch(&self, hash: u64) {
        if let Some(entry) = self.entries.get(home(hash, self.entries.len().wrapping_sub(1))) {
            prefetch(entry);
        }
    }

    /// Frees every entry at once: the next generation.
    fn next_batch(&mut self) {
        self.numbered.clear();
        self.generation = self.generation.wrapping_add(1);
        if self.generation == EMPTY {
            // Wrapped around: entries of generation 1 would look current.
            self.entries.fill(FREE);
            self.generation = EMPTY + 1;
        }
    }

    /// Doubles the table, moving the current batch's keys.
    #[cold]
    fn grow(&mut self) {
        let size = (2 * self.entries.len()).max(FIRST_SIZE);
        let old = std::mem::replace(&mut self.entries, vec![FREE; size]);
        let mask = size - 1;
        for entry in old.into_iter().filter(|e| e.generation == self.generation) {
            let mut index = home(self.numbered[entry.slot as usize].hash, mask);
            while self.entries[index].generation == self.generation {
                index = (index + 1) & mask;
            }
            self.entries[index] = entry;
        }
    }
}

/// Where a hash's probe starts. The exchange routes keys by the low bits
/// of their hash (the key group), so all keys of one consumer share some
/// of those: the table uses high ones.
#[inline]
fn home(hash: u64, mask: usize) -> usize {
    (hash >> 32) as usize & mask
}


/// Event `i`'s key as a word — its bytes, then its length in the top byte
/// — if it has at most [`INLINE_KEY`] bytes; else [`LONG_KEY`] and the low
/// bytes of `hash`, its key's hash. The bytes are read as one load where
/// the batch has eight from the key's start (its value follows it), not
/// copied one by one.
#[inline(always)]
fn key_word(batch: &RecordBatch, i: usize, hash: u64) -> u64 {
    let (start, end) = (batch.offsets[2 * i] as usize, batch.offsets[2 * i + 1] as usize);
    let len = end - start;
    if len > INLINE_KEY {
        return LONG_KEY | hash;
    }
    let bytes = match batch.data.get(start..start + 8) {
        Some(eight) => u64::from_le_bytes(eight.try_into().expect("eight bytes")),
        None => batch.data[start..end].iter().rev().fold(0, |word, &byte| word << 8 | u64::from(byte)),
    };
    bytes & ((1 << (8 * len)) - 1) | (len as u64) << 56
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// Slots by first appearance, the obvious way.
    fn reference_slots(keys: &[Vec<u8>]) -> Vec<u32> {
        let mut seen: HashMap<&[u8], u32> = HashMap::new();
        keys.iter().map(|key| {
            let next = seen.len() as u32;
            *seen.entry(key).or_insert(next)
        }).collect()
    }

    fn batch_of(keys: &[Vec<u8>], value: &[u8]) -> RecordBatch {
        let mut batch = RecordBatch::new();
        keys.iter().for_each(|key| batch.push(key, value, None));
        batch
    }

    #[test]
    fn key_words_tell_short_keys_apart_by_bytes_and_length() {
        let keys: [&[u8]; 7] = [b"", b"\0", b"\0\0", b"a", b"a\0", b"abcdefg", b"abcdefh"];
        // A value after each key, and none after the last: both ways of reading.
        for value in [&b"12345678"[..], b""] {
            let batch = batch_of(&keys.map(<[u8]>::to_vec), value);
            let words: Vec<u64> = (0..keys.len()).map(|i| key_word(&batch, i, u64::MAX)).collect();
            for (i, a) in words.iter().enumerate() {
                assert_ne!(a & LONG_KEY, LONG_KEY);
                for b in &words[i + 1..] {
                    assert_ne!(a, b);
                }
            }
            assert_eq!(words, (0..keys.len()).map(|i| key_word(&batch_of(&[keys[i].to_vec()], b""), 0, u64::MAX)).collect::<Vec<_>>());
        }
        assert_eq!(key_word(&batch_of(&[b"abcdefgh".to_vec()], b""), 0, 0x1234), LONG_KEY | 0x1234);
    }

    #[test]
    fn a_new_generation_after_wrapping_around_frees_every_entry() {
        let mut numbering = KeyNumbering { generation: EMPTY, ..KeyNumbering::default() };
        let batch = batch_of(&[b"a".to_vec(), b"b".to_vec()], b"v");
        assert_eq!((numbering.slot(&batch, 0, 1), numbering.slot(&batch, 1, 2)), (0, 1));
        assert_eq!(numbering.generation, 1, "the entries are of generation 1");
        numbering.generation = u32::MAX;
        let next = batch_of(&[b"b".to_vec()], b"v");
        assert_eq!(numbering.slot(&next, 0, 2), 0, "wrapped around to generation 1, whose old entries were freed");
    }

    proptest! {
        /// Batch after batch through one numbering, with keys short and
        /// long, and hashes that collide (a few distinct values), or do not.
        #[test]
        fn slots_are_those_of_first_appearance(
            batches in prop::collection::vec(
                prop::collection::vec(prop::collection::vec(0u8..3, 0..12), 1..300), 1..5),
            collide in any::<bool>(),
        ) {
            let mut numbering = KeyNumbering::default();
            for keys in &batches {
                let batch = batch_of(keys, b"");
                let hash = |key: &[u8]| if collide { key.len() as u64 % 3 } else { crate::state::key_hash(key) };
                let slots: Vec<u32> = (0..keys.len()).map(|i| numbering.slot(&batch, i, hash(&keys[i]))).collect();
                prop_assert_eq!(slots, reference_slots(keys));
            }
        }
    }
}
