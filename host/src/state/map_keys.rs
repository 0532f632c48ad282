//! How map-state entries are stored: the layout the `state` interface
//! writes them in, and by which a backend lists one key's entries.
//!
//! Entry (key, sub-key) is stored under the key's length (4 bytes,
//! little-endian), the key, then the sub-key, in the key's group: a key's
//! entries share a prefix, and in byte order they sort by sub-key.

use super::HashedKey;
use super::key_group::key_hash_of_parts;

/// The storage key of entry (`key`, `sub_key`), built in `buffer`.
pub fn map_entry_key<'b>(key: HashedKey<'_>, sub_key: &[u8], buffer: &'b mut Vec<u8>) -> HashedKey<'b> {
    map_entry_key_hashed(key, sub_key, map_entry_hash(key.key, sub_key), buffer)
}

/// The hash of entry (`key`, `sub_key`)'s storage key, without building
/// it: a loop over many entries hashes each once, ahead of its turn, to
/// prefetch its lookup.
pub fn map_entry_hash(key: &[u8], sub_key: &[u8]) -> u64 {
    key_hash_of_parts(&[&(key.len() as u32).to_le_bytes(), key, sub_key])
}

/// [`map_entry_key`], whose [`map_entry_hash`] is `hash`.
pub fn map_entry_key_hashed<'b>(key: HashedKey<'_>, sub_key: &[u8], hash: u64, buffer: &'b mut Vec<u8>) -> HashedKey<'b> {
    buffer.clear();
    push_map_prefix(buffer, key.key);
    buffer.extend_from_slice(sub_key);
    debug_assert_eq!(hash, super::key_hash(buffer));
    HashedKey { key: buffer, hash, group: key.group }
}

/// Appends the prefix all of `key`'s entries are stored under.
pub fn push_map_prefix(buffer: &mut Vec<u8>, key: &[u8]) {
    buffer.extend_from_slice(&(key.len() as u32).to_le_bytes());
    buffer.extend_from_slice(key);
}

/// A stored entry's key split into its key's prefix and its sub-key, or
/// `None` if it is not in the layout (a value state's key).
pub fn split_map_entry(stored: &[u8]) -> Option<(&[u8], &[u8])> {
    let length: [u8; 4] = stored.get(..4)?.try_into().ok()?;
    let prefix = 4usize.checked_add(u32::from_le_bytes(length) as usize)?;
    (prefix <= stored.len()).then(|| stored.split_at(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_splits_back_into_its_keys_prefix_and_sub_key() {
        let mut buffer = Vec::new();
        let stored = map_entry_key(HashedKey::new(b"sensor-7", 128), b"1000", &mut buffer).key.to_vec();
        let mut prefix = Vec::new();
        push_map_prefix(&mut prefix, b"sensor-7");
        assert_eq!(split_map_entry(&stored), Some((prefix.as_slice(), &b"1000"[..])));
        assert_eq!(split_map_entry(b"ab"), None, "too short for a length");
        assert_eq!(split_map_entry(&[9, 0, 0, 0, b'x']), None, "a length past the end");
    }

    /// An entry's storage key is hashed as its bytes are, though they are
    /// never joined to hash them.
    #[test]
    fn an_entry_is_stored_under_the_hash_of_its_bytes() {
        let mut buffer = Vec::new();
        for (key, sub_key) in [(&b"sensor-7"[..], &b"1000"[..]), (b"", b""), (b"k", b""), (b"", b"12345")] {
            let stored = map_entry_key(HashedKey::new(key, 128), sub_key, &mut buffer);
            assert_eq!(stored.hash, crate::state::key_hash(stored.key), "{key:?} {sub_key:?}");
            assert_eq!(stored.group, HashedKey::new(key, 128).group, "in its key's group");
        }
    }
}
