//! Keys → key groups → subtasks.
//!
//! A key's **key group** is `key_hash(key) % max_parallelism`. The hash is
//! fixed forever, because snapshots store state by key group: FNV-1a (64-bit,
//! offset basis 0xcbf29ce484222325, prime 0x100000001b3) over the key's
//! bytes, followed by the 64-bit MurmurHash3 finaliser (`fmix64`) to spread
//! FNV's weak low bits. Never change it: `tests` pin known values.
//!
//! Key groups are assigned to the `P` subtasks of an operator in contiguous
//! ranges, as in Flink: key group `g` goes to subtask `g * P / max_parallelism`,
//! so subtask `i` owns `[ceil(i * max / P), ceil((i + 1) * max / P))`.

use std::ops::Range;

/// The default number of key groups (the most subtasks a keyed operator can
/// ever be scaled to). Fixed for the life of a job.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The numbers of key groups a job may have (job files and savepoint
/// manifests are checked against it).
pub const MAX_PARALLELISM_RANGE: std::ops::RangeInclusive<u32> = 1..=32768;

/// The documented, never-changing hash of a key.
///
/// Every event of a keyed edge is hashed (at the exchange, and again where
/// state is written by key), so the bytes are taken four at a time: the
/// same steps in the same order as byte by byte, with a quarter of the
/// loop's overhead (a 5-byte key: ~85 instructions at the exchange became ~60).
pub fn key_hash(key: &[u8]) -> u64 {
    fmix64(fnv_bytes(FNV_OFFSET_BASIS, key))
}

/// The [`key_hash`] of `parts`' bytes one after another, without joining
/// them: FNV-1a takes a byte at a time, so where a part ends changes nothing.
pub fn key_hash_of_parts(parts: &[&[u8]]) -> u64 {
    fmix64(parts.iter().fold(FNV_OFFSET_BASIS, |hash, part| fnv_bytes(hash, part)))
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a's steps over `bytes`, from `hash`.
#[inline(always)]
fn fnv_bytes(mut hash: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(4);
    for word in &mut words {
        let word = u32::from_le_bytes(word.try_into().expect("4 bytes"));
        for shift in [0, 8, 16, 24] {
            hash = fnv_step(hash, (word >> shift) as u8);
        }
    }
    for &byte in words.remainder() {
        hash = fnv_step(hash, byte);
    }
    hash
}

/// FNV-1a's step for one byte.
#[inline(always)]
fn fnv_step(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The key group of `key` among `max_parallelism` groups.
pub fn key_group_for(key: &[u8], max_parallelism: u32) -> u32 {
    key_group_of_hash(key_hash(key), max_parallelism)
}

/// The key group of a key whose [`key_hash`] is `hash`: the hash modulo
/// `max_parallelism`. Every event's path takes it (routing at the sender,
/// slots at the operator), and a 64-bit division costs tens of cycles, so
/// for a power of two — the default, 128 — it is a mask, which is the same.
#[inline]
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u32 {
    if max_parallelism.is_power_of_two() {
        (hash & u64::from(max_parallelism - 1)) as u32
    } else {
        (hash % u64::from(max_parallelism)) as u32
    }
}

/// The subtask (of `parallelism`) that owns `key_group`: `key_group ×
/// parallelism / max_parallelism`, rounded down — a shift when
/// `max_parallelism` is a power of two (see [`key_group_of_hash`]).
#[inline]
pub fn subtask_for_key_group(key_group: u32, max_parallelism: u32, parallelism: u32) -> u32 {
    let scaled = u64::from(key_group) * u64::from(parallelism);
    if max_parallelism.is_power_of_two() {
        (scaled >> max_parallelism.trailing_zeros()) as u32
    } else {
        (scaled / u64::from(max_parallelism)) as u32
    }
}

/// A contiguous range of key groups.
pub type KeyGroupRange = Range<u32>;

/// The key groups owned by `subtask` of `parallelism`.
pub fn key_group_range(subtask: u32, max_parallelism: u32, parallelism: u32) -> KeyGroupRange {
    let bound = |i: u32| (u64::from(i) * u64::from(max_parallelism)).div_ceil(u64::from(parallelism)) as u32;
    bound(subtask)..bound(subtask + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// These values are part of the savepoint format: if this test fails,
    /// the hash changed and every existing snapshot would be misread.
    #[test]
    fn hash_is_pinned() {
        let pinned: [(&[u8], u64, u32); 5] = [
            (b"", 0xefd0_1f60_ba99_2926, 38),
            (b"a", 0x82a2_a958_a9be_ce5b, 91),
            (b"hello", 0xe9c5_62c0_fdb2_3244, 68),
            (b"42", 0x810b_196a_56ee_3cec, 108),
            (b"sensor-7", 0xec28_9f00_f3c8_fdb1, 49),
        ];
        for (key, hash, group) in pinned {
            assert_eq!(key_hash(key), hash, "hash of {key:?}");
            assert_eq!(key_group_for(key, DEFAULT_MAX_PARALLELISM), group, "key group of {key:?}");
        }
    }

    #[test]
    fn ranges_are_contiguous_and_cover_all_groups() {
        for parallelism in [1, 2, 3, 4, 7, 128] {
            let ranges: Vec<_> = (0..parallelism).map(|s| key_group_range(s, 128, parallelism)).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges.last().unwrap().end, 128);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        }
    }

    proptest! {
        #[test]
        fn the_key_group_is_the_hash_modulo_max_parallelism(hash in any::<u64>(), max in 1u32..=1 << 15) {
            prop_assert_eq!(u64::from(key_group_of_hash(hash, max)), hash % u64::from(max));
            let power = 1 << (max % 16);
            prop_assert_eq!(u64::from(key_group_of_hash(hash, power)), hash % u64::from(power));
            let (group, parallelism) = (key_group_of_hash(hash, power), max % power + 1);
            prop_assert_eq!(
                u64::from(subtask_for_key_group(group, power, parallelism)),
                u64::from(group) * u64::from(parallelism) / u64::from(power)
            );
        }

        /// Four bytes at a time is the byte-by-byte FNV-1a of the format.
        #[test]
        fn the_hash_is_fnv_1a_byte_by_byte_then_fmix(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let bytewise = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3));
            prop_assert_eq!(key_hash(&key), fmix64(bytewise));
        }

        /// A key hashed in parts (a map entry's, to prefetch its lookup)
        /// is placed where the joined key is, wherever the parts split.
        #[test]
        fn a_key_hashed_in_parts_hashes_as_joined(key in proptest::collection::vec(any::<u8>(), 0..40), cut in any::<prop::sample::Index>(), cut2 in any::<prop::sample::Index>()) {
            let (a, b) = (cut.index(key.len() + 1), cut2.index(key.len() + 1));
            let (first, second) = (a.min(b), a.max(b));
            let parts = [&key[..first], &key[first..second], &key[second..]];
            prop_assert_eq!(key_hash_of_parts(&parts), key_hash(&key));
        }

        #[test]
        fn every_key_has_one_group_and_one_owner(key in proptest::collection::vec(any::<u8>(), 0..32),
                                                 max in 1u32..=512, p_seed in any::<u32>()) {
            let parallelism = p_seed % max + 1;
            let group = key_group_for(&key, max);
            prop_assert!(group < max);
            let owner = subtask_for_key_group(group, max, parallelism);
            prop_assert!(owner < parallelism);
            let owners: Vec<u32> = (0..parallelism)
                .filter(|&s| key_group_range(s, max, parallelism).contains(&group))
                .collect();
            prop_assert_eq!(owners, vec![owner]);
        }
    }
}
