//! Entries by key, held in the instance from call to call: the table under
//! the SDK's value store and window store, and under the host's native
//! operators.
//!
//! A keyed count finds one key per event in a table of every key it has
//! seen (100 000 in the reference workload), so the table's memory accesses
//! are most of the cost. A `HashMap<Vec<u8>, u32>` beside a `Vec` of
//! entries costs four scattered reads per key: the control bytes, the
//! bucket, the key's heap bytes, the entry. Here a bucket is 8 bytes (the
//! key's hash and its entry's number) in one array probed linearly, and an
//! entry holds its key — inline up to [`SHORT_KEY`] bytes — beside its
//! value: two reads, the second of which the caller needs anyway.
//!
//! Entries are numbered and keep their number until removed, so a call can
//! remember by key slot (the host numbers a call's distinct keys) which
//! entry each of its keys has, and find it again without hashing.

use std::hash::Hasher;

use crate::hash::{FxHasher, le_word};

/// The longest key kept inline in its entry; longer ones are boxed.
const SHORT_KEY: usize = 15;

/// A key's bytes as an entry holds them.
enum KeyBytes {
    /// Up to [`SHORT_KEY`] bytes, zero-padded, the length in the last byte:
    /// equal keys are equal arrays, compared as two words.
    Short([u8; SHORT_KEY + 1]),
    Long(Box<[u8]>),
}

impl KeyBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Short(bytes) => &bytes[..usize::from(bytes[SHORT_KEY])],
            KeyBytes::Long(bytes) => bytes,
        }
    }
}

/// A key being looked up. A short key becomes its two words (without a
/// copy: see [`le_word`]) and is compared and hashed as those words.
enum Probe<'k> {
    Short([u64; 2]),
    Long(&'k [u8]),
}

impl<'k> Probe<'k> {
    #[inline(always)]
    fn new(key: &'k [u8]) -> Self {
        if key.len() > SHORT_KEY {
            return Probe::Long(key);
        }
        let (low, high) = key.split_at(key.len().min(8));
        Probe::Short([le_word(low), le_word(high) | (key.len() as u64) << 56])
    }

    /// A 32-bit hash of the key.
    #[inline]
    fn hash(&self) -> u32 {
        let mut hasher = FxHasher::default();
        match self {
            Probe::Short([low, high]) => {
                hasher.write_u64(*low);
                hasher.write_u64(*high);
            }
            Probe::Long(bytes) => hasher.write(bytes),
        }
        hasher.finish() as u32
    }

    #[inline]
    fn matches(&self, held: &KeyBytes) -> bool {
        match (self, held) {
            (Probe::Short(words), KeyBytes::Short(bytes)) => {
                let (low, high) = bytes.split_at(8);
                words[0] == u64::from_le_bytes(low.try_into().expect("8 bytes"))
                    && words[1] == u64::from_le_bytes(high.try_into().expect("8 bytes"))
            }
            (Probe::Long(key), KeyBytes::Long(bytes)) => *key == &bytes[..],
            _ => false,
        }
    }

    fn to_key_bytes(&self) -> KeyBytes {
        match self {
            Probe::Short([low, high]) => {
                let mut bytes = [0u8; SHORT_KEY + 1];
                let (first, second) = bytes.split_at_mut(8);
                first.copy_from_slice(&low.to_le_bytes());
                second.copy_from_slice(&high.to_le_bytes());
                KeyBytes::Short(bytes)
            }
            Probe::Long(key) => KeyBytes::Long((*key).into()),
        }
    }
}

/// One bucket of the index: an entry's number plus one (0: empty) and its
/// key's hash.
#[derive(Clone, Copy, Default)]
struct Bucket {
    entry: u32,
    hash: u32,
}

struct Keyed<E> {
    key: KeyBytes,
    hash: u32,
    value: E,
}

/// Values of type `E` by key, numbered.
pub struct KeySlab<E> {
    /// Open addressing with linear probing; a power of two long, at most
    /// half full.
    buckets: Vec<Bucket>,
    /// Entry `n` (`None`: vacant, listed in `vacant`).
    entries: Vec<Option<Keyed<E>>>,
    vacant: Vec<u32>,
    len: usize,
    /// Bytes of the keys too long to be held inline.
    long_key_bytes: usize,
    /// This call's key slot → its entry, plus one (0: not found yet;
    /// [`PENDING`] while [`KeySlab::resolve_call`] runs).
    call: Vec<u32>,
    /// [`KeySlab::resolve_call`]'s work list, kept to save its allocation.
    lookups: Vec<Lookup>,
}

const PENDING: u32 = u32::MAX;

/// A key of a call being looked up: its slot, its hash, the first bucket
/// of its probe as read in the second pass, and the key — a short key's
/// words, or where a long one is in the call's list of them.
#[derive(Clone, Copy)]
struct Lookup {
    slot: u32,
    hash: u32,
    first: Bucket,
    short: [u64; 2],
    long: Option<u32>,
}

impl<E> Default for KeySlab<E> {
    fn default() -> Self {
        KeySlab {
            buckets: Vec::new(),
            entries: Vec::new(),
            vacant: Vec::new(),
            len: 0,
            long_key_bytes: 0,
            call: Vec::new(),
            lookups: Vec::new(),
        }
    }
}

impl<E> KeySlab<E> {
    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// About how many bytes the held keys and their values (inline) take:
    /// an entry and two buckets (the table is at most half full), twice —
    /// the entries and the buckets grow by doubling, so up to half of what
    /// they hold is room — and a long key's bytes.
    pub fn bytes(&self) -> usize {
        2 * self.len * (size_of::<Option<Keyed<E>>>() + 2 * size_of::<Bucket>()) + self.long_key_bytes
    }

    /// The entry of the key in `slot` of this call, if it was looked up
    /// during the call ([`KeySlab::remember`]).
    #[inline]
    pub fn in_call(&self, slot: u32) -> Option<u32> {
        match self.call.get(slot as usize) {
            Some(&entry) if entry != 0 => Some(entry - 1),
            _ => None,
        }
    }

    /// Remembers until [`KeySlab::begin_call`] that `slot` is `entry`.
    #[inline]
    pub fn remember(&mut self, slot: u32, entry: u32) {
        let slot = slot as usize;
        if self.call.len() <= slot {
            self.call.resize(slot + 1, 0);
        }
        self.call[slot] = entry + 1;
    }

    /// Finds the entries of a call's keys — `(slot, key)` in call order,
    /// a slot recurring for each of its events — making those not held
    /// with `value()` (listed in `made` as `(slot, entry)`), and remembers
    /// each by its slot. The first error of `keys` stops it before any
    /// entry is made; [`KeySlab::begin_call`] then forgets the call.
    ///
    /// The call's distinct keys are looked up in passes — every hash, then
    /// every first bucket, then every entry those name — rather than one
    /// key after the other. A table of 100 000 keys is not in the cache;
    /// this way the loads of different keys do not wait for each other but
    /// for memory together.
    pub fn resolve_call<'k, Error>(
        &mut self,
        keys: impl Iterator<Item = Result<(u32, &'k [u8]), Error>>,
        mut value: impl FnMut() -> E,
        made: &mut Vec<(u32, u32)>,
    ) -> Result<(), Error> {
        let mut lookups = std::mem::take(&mut self.lookups);
        lookups.clear();
        // Keys too long to be held inline, which the last pass compares
        // byte by byte (rare: no allocation for a call without them).
        let mut long_keys = Vec::new();
        let found = self.hash_new_keys(keys, &mut lookups, &mut long_keys);
        if found.is_ok() {
            if let Some(mask) = self.buckets.len().checked_sub(1) {
                for lookup in &mut lookups {
                    lookup.first = self.buckets[lookup.hash as usize & mask];
                }
            }
            for lookup in &lookups {
                let probe = match lookup.long {
                    Some(at) => Probe::Long(long_keys[at as usize]),
                    None => Probe::Short(lookup.short),
                };
                let entry = match self.held_in(lookup.first, lookup.hash, &probe) {
                    Some(entry) => entry,
                    None => {
                        let (entry, new) = self.find_or_insert_probe(&probe, lookup.hash, &mut value);
                        if new {
                            made.push((lookup.slot, entry));
                        }
                        entry
                    }
                };
                self.call[lookup.slot as usize] = entry + 1;
            }
        }
        self.lookups = lookups;
        found
    }

    /// The first pass of [`KeySlab::resolve_call`]: a lookup for each key
    /// the call has not looked up yet, marking its slot pending.
    fn hash_new_keys<'k, Error>(
        &mut self,
        keys: impl Iterator<Item = Result<(u32, &'k [u8]), Error>>,
        lookups: &mut Vec<Lookup>,
        long_keys: &mut Vec<&'k [u8]>,
    ) -> Result<(), Error> {
        let expected = keys.size_hint().0;
        if self.call.len() < expected {
            self.call.resize(expected, 0);
        }
        for item in keys {
            let (slot, key) = item?;
            if self.call.len() <= slot as usize {
                self.call.resize(slot as usize + 1, 0);
            }
            let known = &mut self.call[slot as usize];
            if *known != 0 {
                continue;
            }
            *known = PENDING;
            let probe = Probe::new(key);
            let mut lookup = Lookup { slot, hash: probe.hash(), first: Bucket::default(), short: [0; 2], long: None };
            match probe {
                Probe::Short(words) => lookup.short = words,
                Probe::Long(key) => {
                    lookup.long = Some(long_keys.len() as u32);
                    long_keys.push(key);
                }
            }
            lookups.push(lookup);
        }
        Ok(())
    }

    /// The entry `bucket` names if it holds the key `probe`.
    #[inline]
    fn held_in(&self, bucket: Bucket, hash: u32, probe: &Probe<'_>) -> Option<u32> {
        if bucket.entry == 0 || bucket.hash != hash {
            return None;
        }
        let entry = bucket.entry - 1;
        let held = self.entries[entry as usize].as_ref()?;
        probe.matches(&held.key).then_some(entry)
    }

    /// Forgets the slots of the previous call.
    pub fn begin_call(&mut self) {
        self.call.clear();
    }

    /// The entry of `key`, if held.
    pub fn find(&self, key: &[u8]) -> Option<u32> {
        let key = Probe::new(key);
        self.find_bucket(&key, key.hash()).ok().map(|at| self.buckets[at].entry - 1)
    }

    /// The entry of `key`, made with `value()` if not held; `true` if made.
    #[inline]
    pub fn find_or_insert(&mut self, key: &[u8], value: impl FnOnce() -> E) -> (u32, bool) {
        let key = Probe::new(key);
        self.find_or_insert_probe(&key, key.hash(), value)
    }

    /// [`KeySlab::find_or_insert`] for a key already made a probe and hashed.
    #[inline]
    fn find_or_insert_probe(&mut self, key: &Probe<'_>, hash: u32, value: impl FnOnce() -> E) -> (u32, bool) {
        match self.find_bucket(key, hash) {
            Ok(at) => (self.buckets[at].entry - 1, false),
            Err(_) => (self.insert(key.to_key_bytes(), hash, value()), true),
        }
    }

    /// Where `key` is in `buckets` (`Err`: the empty bucket ending its
    /// probe, or 0 when there are no buckets).
    #[inline]
    fn find_bucket(&self, key: &Probe<'_>, hash: u32) -> Result<usize, usize> {
        if self.buckets.is_empty() {
            return Err(0);
        }
        let mask = self.buckets.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            let bucket = self.buckets[at];
            if bucket.entry == 0 {
                return Err(at);
            }
            if self.held_in(bucket, hash, key).is_some() {
                return Ok(at);
            }
            at = (at + 1) & mask;
        }
    }

    fn insert(&mut self, key: KeyBytes, hash: u32, value: E) -> u32 {
        if 2 * (self.len + 1) > self.buckets.len() {
            self.grow();
        }
        if let KeyBytes::Long(bytes) = &key {
            self.long_key_bytes += bytes.len();
        }
        let held = Some(Keyed { key, hash, value });
        let entry = match self.vacant.pop() {
            Some(entry) => {
                self.entries[entry as usize] = held;
                entry
            }
            None => {
                self.entries.push(held);
                (self.entries.len() - 1) as u32
            }
        };
        self.place(Bucket { entry: entry + 1, hash });
        self.len += 1;
        entry
    }

    /// Puts `bucket` in the first empty bucket of its probe.
    fn place(&mut self, bucket: Bucket) {
        let mask = self.buckets.len() - 1;
        let mut at = bucket.hash as usize & mask;
        while self.buckets[at].entry != 0 {
            at = (at + 1) & mask;
        }
        self.buckets[at] = bucket;
    }

    fn grow(&mut self) {
        let size = (2 * self.buckets.len()).max(64);
        let old = std::mem::replace(&mut self.buckets, vec![Bucket::default(); size]);
        for bucket in old.into_iter().filter(|b| b.entry != 0) {
            self.place(bucket);
        }
    }

    /// Removes `entry` (held) and frees its number for reuse.
    pub fn remove(&mut self, entry: u32) {
        let Some(held) = self.entries.get_mut(entry as usize).and_then(Option::take) else { return };
        let Ok(mut hole) = self.find_bucket_of(entry, held.hash) else {
            // Every held entry has a bucket; without one there is nothing
            // to unlink (and the number is not reused).
            debug_assert!(false, "held entry {entry} has no bucket");
            return;
        };
        self.vacant.push(entry);
        self.len -= 1;
        if let KeyBytes::Long(bytes) = &held.key {
            self.long_key_bytes -= bytes.len();
        }
        // Backward-shift deletion: pull later buckets of the probe into the
        // hole unless that would put them before their home bucket.
        let mask = self.buckets.len() - 1;
        self.buckets[hole] = Bucket::default();
        let mut at = hole;
        loop {
            at = (at + 1) & mask;
            let bucket = self.buckets[at];
            if bucket.entry == 0 {
                return;
            }
            let home = bucket.hash as usize & mask;
            // The bucket may move to `hole` if its home is not cyclically
            // within (hole, at].
            let stays = if hole <= at { hole < home && home <= at } else { hole < home || home <= at };
            if !stays {
                self.buckets[hole] = bucket;
                self.buckets[at] = Bucket::default();
                hole = at;
            }
        }
    }

    fn find_bucket_of(&self, entry: u32, hash: u32) -> Result<usize, ()> {
        let mask = self.buckets.len().checked_sub(1).ok_or(())?;
        let mut at = hash as usize & mask;
        loop {
            match self.buckets[at].entry {
                0 => return Err(()),
                found if found == entry + 1 => return Ok(at),
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// Removes every entry for which `keep` says false.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut E) -> bool) {
        for entry in 0..self.entries.len() {
            if let Some(held) = &mut self.entries[entry]
                && !keep(&mut held.value)
            {
                self.remove(entry as u32);
            }
        }
    }

    /// The value of `entry`. Panics if it is vacant: numbers come from
    /// this slab and stay valid until removed.
    #[inline]
    pub fn get(&self, entry: u32) -> &E {
        &self.entries[entry as usize].as_ref().expect("a held entry").value
    }

    /// The key of `entry` (panics if it is vacant, as [`KeySlab::get`]).
    pub fn key(&self, entry: u32) -> &[u8] {
        self.entries[entry as usize].as_ref().expect("a held entry").key.as_slice()
    }

    #[inline]
    pub fn get_mut(&mut self, entry: u32) -> &mut E {
        &mut self.entries[entry as usize].as_mut().expect("a held entry").value
    }

    /// Every (key, value) held.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &E)> {
        self.entries.iter().flatten().map(|held| (held.key.as_slice(), &held.value))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut E> {
        self.entries.iter_mut().flatten().map(|held| &mut held.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's keys as `resolve_call` takes them, none failing.
    fn ok<'c, 'k>(call: &'c [(u32, &'k [u8])]) -> impl Iterator<Item = Result<(u32, &'k [u8]), &'static str>> + 'c
    where
        'k: 'c,
    {
        call.iter().copied().map(Ok)
    }

    fn keys(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| if i % 7 == 0 { format!("a long key of more than fifteen bytes {i}") } else { i.to_string() }.into_bytes()).collect()
    }

    #[test]
    fn finds_every_key_it_was_given_and_no_other() {
        let mut slab = KeySlab::default();
        let keys = keys(10_000);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(slab.find_or_insert(key, || i), (i as u32, true));
        }
        assert_eq!(slab.len(), keys.len());
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(slab.find_or_insert(key, || usize::MAX), (i as u32, false));
            assert_eq!(*slab.get(i as u32), i);
        }
        assert_eq!(slab.find(b"10000"), None);
        assert_eq!(slab.find(b""), None);
        // Keys that differ only in trailing zero bytes or length are distinct.
        let (a, _) = slab.find_or_insert(b"1\0", || 1);
        let (b, _) = slab.find_or_insert(b"1\0\0", || 2);
        assert_ne!(a, b);
        assert_ne!(slab.find(b"1"), Some(a));
    }

    #[test]
    fn removing_keys_keeps_the_others_findable_and_reuses_numbers() {
        let mut slab = KeySlab::default();
        let keys = keys(5_000);
        for (i, key) in keys.iter().enumerate() {
            slab.find_or_insert(key, || i);
        }
        slab.retain(|value| *value % 3 != 0);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(slab.find(key), (i % 3 != 0).then_some(i as u32), "key {i}");
        }
        assert_eq!(slab.len(), keys.len() - keys.len().div_ceil(3));
        let (reused, made) = slab.find_or_insert(b"new", || 0);
        assert!(made);
        assert_eq!(reused % 3, 0, "a freed number is reused");
        let held: Vec<(Vec<u8>, usize)> = slab.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
        assert_eq!(held.len(), slab.len());
        assert!(held.contains(&(b"new".to_vec(), 0)));
        assert!(held.contains(&(keys[1].clone(), 1)));
    }

    #[test]
    fn a_call_finds_its_keys_at_once_and_makes_those_not_held() {
        let mut slab = KeySlab::default();
        let keys = keys(3_000);
        let (first, _) = slab.find_or_insert(&keys[5], || 5);
        // Slots by first appearance; every key twice.
        let call: Vec<(u32, &[u8])> =
            (0..2).flat_map(|_| keys.iter().enumerate().map(|(i, key)| (i as u32, key.as_slice()))).collect();
        let mut made = Vec::new();
        let mut next = 100;
        slab.resolve_call(ok(&call), || { next += 1; next }, &mut made).unwrap();
        assert_eq!(made.len(), keys.len() - 1, "each key not held is made once");
        assert!(!made.iter().any(|&(slot, _)| slot == 5));
        assert_eq!(slab.in_call(5), Some(first));
        for (i, key) in keys.iter().enumerate() {
            let entry = slab.in_call(i as u32).expect("every slot resolved");
            assert_eq!(slab.find(key), Some(entry));
        }
        assert_eq!(*slab.get(first), 5);
        // The next call finds them all held.
        slab.begin_call();
        made.clear();
        slab.resolve_call(ok(&call), || unreachable!(), &mut made).unwrap();
        assert!(made.is_empty());
        assert_eq!(slab.in_call(5), Some(first));
        // An error in the keys makes nothing.
        slab.begin_call();
        let failing = [Ok((0, b"fresh".as_slice())), Err("malformed")];
        assert_eq!(slab.resolve_call(failing.into_iter(), || 0, &mut made), Err("malformed"));
        assert!(made.is_empty());
        assert_eq!(slab.find(b"fresh"), None);
    }

    #[test]
    fn a_call_remembers_its_slots_until_the_next() {
        let mut slab = KeySlab::default();
        let (entry, _) = slab.find_or_insert(b"k", || ());
        assert_eq!(slab.in_call(3), None);
        slab.remember(3, entry);
        assert_eq!(slab.in_call(3), Some(entry));
        assert_eq!(slab.in_call(2), None);
        slab.begin_call();
        assert_eq!(slab.in_call(3), None);
    }
}
