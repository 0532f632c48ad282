//! The key of a registered timer, held inline when it is short.
//!
//! A window operator registers a timer per key and window and fires it a
//! window later: the reference `window` job, two million of them over 20
//! million events. Held as a `Vec<u8>`, each key was a heap block
//! allocated when its timer was registered and freed when it fired — a few
//! percent of the operator thread's time in `malloc` and `free` (perf,
//! session 64). A [`TimerKey`] is as large as a `Vec<u8>` (24 bytes) and
//! holds keys of up to [`INLINE`] bytes in place; longer ones take one
//! boxed slice. It hashes, compares and orders as its bytes do, so a set of
//! them is searched with a `&[u8]`.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The longest key held inline: what 24 bytes leave past a length byte
/// and the enum's tag.
pub const INLINE: usize = 22;

/// A timer's key: its bytes, inline if short.
#[derive(Clone)]
pub enum TimerKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl TimerKey {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            TimerKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            TimerKey::Heap(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for TimerKey {
    fn from(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            TimerKey::Inline { len: key.len() as u8, bytes }
        } else {
            TimerKey::Heap(key.into())
        }
    }
}

impl Default for TimerKey {
    fn default() -> Self {
        TimerKey::Inline { len: 0, bytes: [0; INLINE] }
    }
}

impl Deref for TimerKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for TimerKey {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// (With [`Hash`] and [`Eq`] as the bytes', sets of keys are searched by `&[u8]`.)
impl Borrow<[u8]> for TimerKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Hash for TimerKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq for TimerKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for TimerKey {}

impl PartialOrd for TimerKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TimerKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl fmt::Debug for TimerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;

    use proptest::prelude::*;

    use super::*;

    fn hash_of<T: Hash + ?Sized>(value: &T) -> u64 {
        let mut hasher = DefaultHasher::new();
        value.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn a_key_is_as_large_as_a_vec() {
        assert_eq!(std::mem::size_of::<TimerKey>(), std::mem::size_of::<Vec<u8>>());
    }

    #[test]
    fn short_keys_are_held_inline_and_longer_ones_on_the_heap() {
        assert!(matches!(TimerKey::from(&[7u8; INLINE][..]), TimerKey::Inline { .. }));
        assert!(matches!(TimerKey::from(&[7u8; INLINE + 1][..]), TimerKey::Heap(_)));
    }

    proptest! {
        /// Bytes, equality, order and hash are the key's bytes', on both
        /// sides of the inline length.
        #[test]
        fn a_key_is_its_bytes(a in prop::collection::vec(any::<u8>(), 0..40), b in prop::collection::vec(any::<u8>(), 0..40)) {
            let (ka, kb) = (TimerKey::from(&a[..]), TimerKey::from(&b[..]));
            prop_assert_eq!(ka.as_slice(), &a[..]);
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(hash_of(&ka), hash_of(&a[..]));
        }
    }
}
