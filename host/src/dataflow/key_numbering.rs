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

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use super::RecordBatch;

/// The distinct keys of one batch being built: (hash, slot, the event
/// where the key first appears).
#[derive(Debug, Default)]
pub struct KeyNumbering {
    table: HashTable<(u64, u32, u32)>,
}

impl KeyNumbering {
    /// The number of distinct keys so far.
    fn len(&self) -> u32 {
        self.table.len() as u32
    }

    /// The slot of event `i` of `batch`, whose key hashes to `hash`: the
    /// slot of an earlier event with that key, or the next one. Event 0
    /// starts a new numbering: the keys held point into the batch they
    /// were numbered in, by index, so none may outlive it. The table keeps
    /// its allocation from batch to batch, grown to the distinct keys of
    /// one rather than reserved for a whole batch of them: half of a key-by
    /// exchange's 1000 keys in a table sized for 8192 spread over 16 times
    /// the cache lines.
    #[inline]
    pub fn slot(&mut self, batch: &RecordBatch, i: usize, hash: u64) -> u32 {
        if i == 0 {
            self.table.clear();
        }
        let key = batch.key(i);
        let next = self.len();
        let same = |&(held, _, first): &(u64, u32, u32)| held == hash && batch.key(first as usize) == key;
        match self.table.entry(hash, same, |&(hash, ..)| hash) {
            Entry::Occupied(numbered) => numbered.get().1,
            Entry::Vacant(place) => {
                place.insert((hash, next, i as u32));
                next
            }
        }
    }
}
