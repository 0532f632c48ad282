//! A fast, non-cryptographic hasher (the rustc "Fx" hash) for the tables of
//! keys and sub-keys in a plugin's instance: [`KeySlab`](crate::KeySlab)
//! and the SDK's maps. They live inside one sandboxed instance:
//! keys chosen to collide could slow only that operator down, so SipHash's
//! resistance to them is not worth a tenth of a window operator's time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// The little-endian word of up to 8 bytes, zero-padded.
///
/// Built from two loads of a fixed size that overlap (the first and the
/// last 4, or 2, bytes), not by copying a slice of variable length into an
/// array — in a Wasm instance that is a `memory.copy`, a call into the
/// runtime — nor byte by byte.
#[inline]
pub fn le_word(bytes: &[u8]) -> u64 {
    debug_assert!(bytes.len() <= 8);
    let n = bytes.len();
    let load = |at: usize, width: usize| -> u64 {
        let part = &bytes[at..at + width];
        match width {
            4 => u64::from(u32::from_le_bytes(part.try_into().expect("4 bytes"))),
            2 => u64::from(u16::from_le_bytes(part.try_into().expect("2 bytes"))),
            _ => u64::from(part[0]),
        }
    };
    // The overlapping bytes are the same in both loads, so or-ing is exact.
    match n {
        4..=8 => load(0, 4) | load(n - 4, 4) << (8 * (n - 4)),
        2..=3 => load(0, 2) | load(n - 2, 2) << (8 * (n - 2)),
        1 => load(0, 1),
        _ => 0,
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.add(le_word(rest));
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    /// Folds the high half into the low one. A product's low bits depend
    /// only on its factors' low bits, and in a 32-bit Wasm instance the
    /// hash table uses only the low 32 bits of a hash (bucket and tag): without
    /// the fold, keys that share their first four bytes (decimal keys
    /// "12345" and "12346") would collide completely.
    #[inline]
    fn finish(&self) -> u64 {
        self.hash ^ (self.hash >> 32)
    }
}

/// A `HashMap` with [`FxHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::{FxHasher, le_word};

    #[test]
    fn le_word_is_the_zero_padded_little_endian_word_of_up_to_8_bytes() {
        let bytes = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
        for n in 0..=8 {
            let expected = bytes[..n].iter().rev().fold(0u64, |word, &byte| (word << 8) | u64::from(byte));
            assert_eq!(le_word(&bytes[..n]), expected, "{n} bytes");
        }
    }

    /// 100 000 decimal keys, as a keyed count has: their hashes' low 32
    /// bits — all that a 32-bit Wasm instance's hash table uses — are
    /// distinct, and no bucket of a table their size gets crowded.
    #[test]
    fn decimal_keys_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<FxHasher>::default();
        let hashes: Vec<u32> = (0..100_000u32).map(|k| build.hash_one(k.to_string().into_bytes()) as u32).collect();
        let distinct: HashSet<u32> = hashes.iter().copied().collect();
        assert!(distinct.len() > 99_900, "{} distinct of 100 000", distinct.len());
        let mut buckets = vec![0u32; 1 << 17];
        for hash in &hashes {
            buckets[(*hash as usize) & ((1 << 17) - 1)] += 1;
        }
        let crowded = buckets.iter().copied().max().unwrap();
        assert!(crowded <= 12, "a bucket holds {crowded} keys");
    }
}
