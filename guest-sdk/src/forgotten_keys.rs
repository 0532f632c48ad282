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
//! of new keys are read, at 10 bits about 1 %.

use std::hash::Hasher;

use weir_key_slab::hash::FxHasher;

/// Bits each key sets.
const PROBES: u64 = 4;

/// A Bloom filter of keys, its bits allocated on the first insert.
pub(crate) struct ForgottenKeys {
    bits: Vec<u64>,
    /// How many 64-bit words it takes once in use.
    words: usize,
}

impl ForgottenKeys {
    /// A filter of `bytes` bytes (at least one word), empty.
    pub fn new(bytes: usize) -> Self {
        ForgottenKeys { bits: Vec::new(), words: (bytes / 8).max(1) }
    }

    /// Whether no key was recorded.
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// The memory it takes.
    pub fn bytes(&self) -> usize {
        self.bits.len() * size_of::<u64>()
    }

    pub fn insert(&mut self, key: &[u8]) {
        if self.bits.is_empty() {
            self.bits = vec![0; self.words];
        }
        for bit in probes(key, self.words) {
            self.bits[bit / 64] |= 1 << (bit % 64);
        }
    }

    /// Whether `key` may have been recorded (`false`: it was not).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        !self.is_empty() && probes(key, self.words).all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

/// The bits of `key` in a filter of `words` words: double hashing of one
/// 64-bit hash, mixed so that its low bits depend on all of the key.
fn probes(key: &[u8], words: usize) -> impl Iterator<Item = usize> + use<> {
    let mut hasher = FxHasher::default();
    hasher.write(key);
    let hash = mix(hasher.finish());
    let (first, step) = (hash, hash.rotate_left(32) | 1);
    let bits = (words * 64) as u64;
    (0..PROBES).map(move |i| (first.wrapping_add(i.wrapping_mul(step)) % bits) as usize)
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
        assert!(suspected < 1_000, "{suspected} of 10 000 new keys");
        assert_eq!(keys.bytes(), 8 * 1024);
    }
}
