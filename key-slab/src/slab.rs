//! Entries by key, held in the instance from call to call: the table under
//! the SDK's value store and window store.
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
    /// This call's key slot → its entry, plus one (0: not found yet).
    call: Vec<u32>,
    /// [`KeySlab::resolve_call`]'s work list, kept to save its allocation.
    lookups: Vec<Lookup>,
}

/// A key of a call being looked up (its slot is its index in the list):
/// its hash, the first bucket of its probe as read in the second pass, and
/// the key — a short key's words, or where a long one is in the call's
/// list of them ([`Lookup::SHORT`] for a short key).
#[derive(Clone, Copy)]
struct Lookup {
    hash: u32,
    long: u32,
    first: Bucket,
    short: [u64; 2],
}

impl Lookup {
    const SHORT: u32 = u32::MAX;

    #[inline]
    fn probe<'k>(&self, long_keys: &[&'k [u8]]) -> Probe<'k> {
        match self.long {
            Lookup::SHORT => Probe::Short(self.short),
            at => Probe::Long(long_keys[at as usize]),
        }
    }
}

/// A call's slot that is neither one of the slots before it nor the next
/// new one: its keys are not numbered in order of first appearance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotOutOfOrder {
    /// The event (or timer) of the call with that slot.
    pub index: usize,
    pub slot: u32,
    /// The slot a new key would have had there.
    pub expected: u32,
}

impl std::fmt::Display for SlotOutOfOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "key slot {} of item {} is out of order (expected at most {}): slots must number a call's keys in order of first appearance",
            self.slot, self.index, self.expected
        )
    }
}

impl std::error::Error for SlotOutOfOrder {}

/// Why [`KeySlab::resolve_call`] refused a call: its slots are out of
/// order, or its caller could not give a key (`E`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError<E> {
    SlotOutOfOrder(SlotOutOfOrder),
    Key(E),
}

/// The first pass of [`KeySlab::resolve_call`]: a lookup for each of the
/// call's distinct keys, in slot order. Slots by first appearance make a
/// key new exactly when its slot is the next one, so nothing is read for
/// the events of keys already seen but their slot.
#[inline(never)]
fn hash_distinct_keys<'k, E>(
    slots: &[u32],
    mut key_of: impl FnMut(usize) -> Result<&'k [u8], E>,
    lookups: &mut Vec<Lookup>,
    long_keys: &mut Vec<&'k [u8]>,
) -> Result<(), ResolveError<E>> {
    let mut next = 0u32;
    for (index, &slot) in slots.iter().enumerate() {
        if slot < next {
            continue;
        }
        if slot > next {
            return Err(ResolveError::SlotOutOfOrder(SlotOutOfOrder { index, slot, expected: next }));
        }
        next += 1;
        let probe = Probe::new(key_of(index).map_err(ResolveError::Key)?);
        let mut lookup = Lookup { hash: probe.hash(), long: Lookup::SHORT, first: Bucket::default(), short: [0; 2] };
        match probe {
            Probe::Short(words) => lookup.short = words,
            Probe::Long(key) => {
                lookup.long = long_keys.len() as u32;
                long_keys.push(key);
            }
        }
        lookups.push(lookup);
    }
    Ok(())
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

    /// Finds the entries of a call's keys, making those not held with
    /// `value()` (listed in `made` as `(slot, entry)`), and remembers each
    /// by its slot (forgetting any slot remembered before). Event `i` of
    /// the call has the slot `slots[i]`, slots numbered in order of first
    /// appearance (as the host numbers them), and the key `key_of(i)`,
    /// asked once per slot. A slot out of that order, or the first error of
    /// `key_of`, stops it before any entry is made; [`KeySlab::begin_call`]
    /// then forgets the call.
    ///
    /// The call's distinct keys are looked up in passes — every hash, then
    /// every first bucket, then every entry those name — rather than one
    /// key after the other. A table of 100 000 keys is not in the cache;
    /// this way the loads of different keys do not wait for each other but
    /// for memory together. Each pass is a function of its own, which
    /// names it in profiles of the plugins' compiled code.
    pub fn resolve_call<'k, KeyError>(
        &mut self,
        slots: &[u32],
        key_of: impl FnMut(usize) -> Result<&'k [u8], KeyError>,
        mut value: impl FnMut() -> E,
        made: &mut Vec<(u32, u32)>,
    ) -> Result<(), ResolveError<KeyError>> {
        let mut lookups = std::mem::take(&mut self.lookups);
        lookups.clear();
        // Keys too long to be held inline, which the last pass compares
        // byte by byte (rare: no allocation for a call without them).
        let mut long_keys = Vec::new();
        let hashed = hash_distinct_keys(slots, key_of, &mut lookups, &mut long_keys);
        if hashed.is_ok() {
            self.call.clear();
            self.read_first_buckets(&mut lookups);
            self.enter_lookups(&lookups, &long_keys, &mut value, made);
        }
        self.lookups = lookups;
        hashed
    }

    /// The second pass of [`KeySlab::resolve_call`]: each key's first
    /// bucket.
    #[inline(never)]
    fn read_first_buckets(&self, lookups: &mut [Lookup]) {
        if let Some(mask) = self.buckets.len().checked_sub(1) {
            for lookup in lookups {
                lookup.first = self.buckets[lookup.hash as usize & mask];
            }
        }
    }

    /// The third pass of [`KeySlab::resolve_call`]: each key's entry,
    /// found or made, remembered by its slot (its lookup's index: the
    /// entries are pushed onto the emptied `call` in slot order).
    #[inline(never)]
    fn enter_lookups(&mut self, lookups: &[Lookup], long_keys: &[&[u8]], value: &mut impl FnMut() -> E, made: &mut Vec<(u32, u32)>) {
        for (slot, lookup) in lookups.iter().enumerate() {
            let probe = lookup.probe(long_keys);
            let entry = match self.held_in(lookup.first, lookup.hash, &probe) {
                Some(entry) => entry,
                None => self.walk_or_insert(slot as u32, &probe, lookup.hash, value, made),
            };
            self.call.push(entry + 1);
        }
    }

    /// The entry of a key not in its first bucket: further along its
    /// probe, or made (and listed in `made`).
    #[inline(never)]
    fn walk_or_insert(&mut self, slot: u32, probe: &Probe<'_>, hash: u32, value: &mut impl FnMut() -> E, made: &mut Vec<(u32, u32)>) -> u32 {
        let (entry, new) = self.find_or_insert_probe(probe, hash, value);
        if new {
            made.push((slot, entry));
        }
        entry
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

    /// Resolves a call of `(slot, key)` events in `slab`, every key readable.
    fn resolve<E>(
        slab: &mut KeySlab<E>,
        call: &[(u32, &[u8])],
        value: impl FnMut() -> E,
        made: &mut Vec<(u32, u32)>,
    ) -> Result<(), ResolveError<&'static str>> {
        let slots: Vec<u32> = call.iter().map(|&(slot, _)| slot).collect();
        slab.resolve_call(&slots, |i| Ok(call[i].1), value, made)
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
        resolve(&mut slab, &call, || { next += 1; next }, &mut made).unwrap();
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
        resolve(&mut slab, &call, || unreachable!(), &mut made).unwrap();
        assert!(made.is_empty());
        assert_eq!(slab.in_call(5), Some(first));
        // An error in the keys makes nothing.
        slab.begin_call();
        let failing = |i| if i == 0 { Ok(b"fresh".as_slice()) } else { Err("malformed") };
        assert_eq!(slab.resolve_call(&[0, 1], failing, || 0, &mut made), Err(ResolveError::Key("malformed")));
        assert!(made.is_empty());
        assert_eq!(slab.find(b"fresh"), None);
    }

    #[test]
    fn a_call_with_slots_out_of_first_appearance_order_is_refused_and_makes_nothing() {
        let mut slab: KeySlab<u32> = KeySlab::default();
        let mut made = Vec::new();
        let call: [(u32, &[u8]); 3] = [(0, b"a"), (0, b"a"), (2, b"c")];
        let refused = resolve(&mut slab, &call, || 0, &mut made);
        assert_eq!(refused, Err(ResolveError::SlotOutOfOrder(SlotOutOfOrder { index: 2, slot: 2, expected: 1 })));
        assert!(made.is_empty());
        assert!(slab.is_empty());
        let message = SlotOutOfOrder { index: 2, slot: 2, expected: 1 }.to_string();
        assert!(message.contains("order of first appearance"), "{message}");
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
