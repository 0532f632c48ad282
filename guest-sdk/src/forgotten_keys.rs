//! Which keys a value store forgot while the host held their values: a
//! Bloom filter.
//!
//! A store started on empty state (`weir.state = empty`) knows that a key
//! it has not written has no value — until it forgets keys to stay within
//! its bound. Without a record of which, every new key after the first
//! eviction costs a host read (with RocksDB, a database read that finds
//! nothing): a job of many keys each seen once read every one of them. The
//! window store lists forgotten windows exactly (8 bytes each, per key);
//! keys are of any length and may number millions, so here a fixed-size
//! Bloom filter records them instead. It never misses a forgotten key — a
//! key it does not know is absent from the host — and a false "maybe"
//! costs only the read every new key cost before. It cannot forget a key
//! read back, and fills as more are forgotten: at 4 bits per key about 15 %
//! of new keys are read, at 10 bits a few. A key's bits share one cache
//! line (a blocked Bloom filter): a little less exact for its size than
//! bits spread over the whole filter, but one wait on memory per key.

use std::hash::Hasher;

use weir_key_slab::hash::FxHasher;

/// Bits each key sets.
const PROBES: u32 = 4;

/// 512 bits, one cache line: all of a key's bits are in one block, so a
/// lookup or insert in a filter of many megabytes — a store past a bound of
/// hundreds — waits on one load from memory instead of [`PROBES`].
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Block([u64; 8]);

/// Bits a key's position in its block takes.
const BITS_PER_PROBE: u32 = 9;

/// A Bloom filter of keys, its bits allocated on the first insert.
pub(crate) struct ForgottenKeys {
    blocks: Vec<Block>,
    /// How many blocks it takes once in use.
    size: usize,
}

impl ForgottenKeys {
    /// A filter of `bytes` bytes (at least one block), empty.
    pub fn new(bytes: usize) -> Self {
        ForgottenKeys { blocks: Vec::new(), size: (bytes / size_of::<Block>()).max(1) }
    }

    /// Whether no key was recorded.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The memory it takes.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * size_of::<Block>()
    }

    pub fn insert(&mut self, key: &[u8]) {
        if self.blocks.is_empty() {
            self.blocks = vec![Block::default(); self.size];
        }
        let (block, bits) = probes(key, self.size);
        let words = &mut self.blocks[block].0;
        for (word, bit) in bits {
            words[word] |= bit;
        }
    }

    /// Whether `key` may have been recorded (`false`: it was not).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        if self.is_empty() {
            return false;
        }
        let (block, mut bits) = probes(key, self.size);
        let words = &self.blocks[block].0;
        bits.all(|(word, bit)| words[word] & bit != 0)
    }
}

/// The block of `key` in a filter of `blocks` blocks, and its bits there
/// as (word, mask): one 64-bit hash, mixed so that all its bits depend on
/// all of the key, its high bits choosing the block (by multiplication,
/// not division) and its low bits the bits.
fn probes(key: &[u8], blocks: usize) -> (usize, impl Iterator<Item = (usize, u64)> + use<>) {
    let mut hasher = FxHasher::default();
    hasher.write(key);
    let hash = mix(hasher.finish());
    let block = ((u128::from(hash) * blocks as u128) >> 64) as usize;
    let bits = (0..PROBES).map(move |i| {
        let bit = (hash >> (i * BITS_PER_PROBE)) as usize & 511;
        (bit / 64, 1 << (bit % 64))
    });
    (block, bits)
}

/// MurmurHash3's 64-bit finaliser.
fn mix(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

#[cfg(test)]
mod tests {
    use super::ForgottenKeys;

    /// Every recorded key is found; of keys never recorded, few are
    /// thought possible at 8 bits a key.
    #[test]
    fn recorded_keys_are_never_missed_and_others_rarely_suspected() {
        let mut keys = ForgottenKeys::new(8 * 1024);
        assert!(!keys.may_contain(b"a") && keys.is_empty() && keys.bytes() == 0, "nothing allocated yet");
        for k in 0..8 * 1024 {
            keys.insert(format!("k{k}").as_bytes());
        }
        assert!((0..8 * 1024).all(|k| keys.may_contain(format!("k{k}").as_bytes())));
        let suspected = (0..10_000).filter(|k| keys.may_contain(format!("new{k}").as_bytes())).count();
        // About 2.5 %, as a filter with its bits spread would have.
        assert!(suspected < 500, "{suspected} of 10 000 new keys");
        assert_eq!(keys.bytes(), 8 * 1024);
    }
}
