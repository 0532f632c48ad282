//! A bounded write-back layer of recently used entries, in front of a
//! backend whose updates are expensive (RocksDB).
//!
//! Keyed state is update-heavy: a count reads and rewrites its key for every
//! batch. The layer keeps the entries it has seen — absent ones too — in one
//! hash table per state, found by the key's hash computed once per batch
//! ([`HashedKey`]), and remembers which changed. The owner writes the
//! changed entries out ([`HotEntries::changes`]) when the layer is
//! full, before snapshots and before iteration, and then may forget them.
//!
//! Keys and values live in one arena of bytes, not in a heap block each:
//! a layer over more keys than it holds fills and is forgotten again and
//! again (a million counts written back at a checkpoint pass through the
//! default 16 MiB layer several times), and two allocations and two frees
//! an entry were a fifth of that work. A value rewritten no longer than
//! it was stays in place; a longer one is appended, and the bytes it
//! leaves count against the bound until the layer is forgotten.

use std::ops::Range;

use hashbrown::HashTable;

use super::{HashedKey, StateId};

/// What an entry costs beyond its key's and value's bytes, for the memory
/// bound: its table slot (56 bytes and a control byte) over the table's
/// load, between 7/16 and 7/8.
const ENTRY_OVERHEAD: usize = 96;

/// Where some bytes are in the layer's arena.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
}

impl Span {
    fn range(self) -> Range<usize> {
        self.start..self.start + self.len
    }
}

/// One known entry: its key, and its value (`None`: known to be absent).
struct HotEntry {
    hash: u64,
    group: u16,
    changed: bool,
    key: Span,
    value: Option<Span>,
}

/// A changed entry, to be written out.
pub struct Change<'a> {
    pub state: StateId,
    pub group: u16,
    pub key: &'a [u8],
    /// `None`: deleted.
    pub value: Option<&'a [u8]>,
}

/// Entries by state and key, with the memory they take.
pub struct HotEntries {
    states: Vec<HashTable<HotEntry>>,
    /// Every entry's key and value bytes.
    arena: Vec<u8>,
    entries: usize,
    limit: usize,
    /// Some entry changed since the last [`HotEntries::mark_written`]: a
    /// write-back before each listing of a map costs nothing when none did.
    dirty: bool,
}

impl HotEntries {
    /// An empty layer that reports itself full past `limit` bytes.
    pub fn new(limit: usize) -> Self {
        HotEntries { states: Vec::new(), arena: Vec::new(), entries: 0, limit, dirty: false }
    }

    /// The bytes past which the layer reports itself full.
    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether the layer holds more than its limit.
    pub fn is_full(&self) -> bool {
        self.arena.len() + self.entries * ENTRY_OVERHEAD > self.limit
    }

    /// The entry of `state` under `key`: `None` if the layer does not know
    /// it, `Some(None)` if it knows there is none.
    pub fn get(&self, state: StateId, key: &HashedKey<'_>) -> Option<Option<&[u8]>> {
        let table = self.states.get(state.0 as usize)?;
        let entry = table.find(key.table_hash(), |e| matches(&self.arena, e, key))?;
        Some(entry.value.map(|value| &self.arena[value.range()]))
    }

    /// Remembers what the backend holds under `key` (unchanged).
    pub fn remember(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<&[u8]>) {
        self.insert(state, key, value, false);
    }

    /// Sets (`Some`) or deletes (`None`) the entry under `key`.
    pub fn write(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<&[u8]>) {
        self.dirty = true;
        let HotEntries { states, arena, .. } = self;
        let Some(entry) = table_mut(states, state).find_mut(key.table_hash(), |e| matches(arena, e, key)) else {
            self.insert(state, key, value, true);
            return;
        };
        entry.value = value.map(|bytes| store(arena, entry.value, bytes));
        entry.changed = true;
    }

    /// Every changed entry, in no particular order; once they are written
    /// out, [`HotEntries::mark_written`].
    pub fn changes(&self) -> impl Iterator<Item = Change<'_>> {
        let arena = &self.arena;
        self.states.iter().enumerate().flat_map(move |(index, table)| {
            table.iter().filter(|e| e.changed).map(move |e| Change {
                state: StateId(index as u32),
                group: e.group,
                key: &arena[e.key.range()],
                value: e.value.map(|value| &arena[value.range()]),
            })
        })
    }

    /// Whether an entry changed since the last [`HotEntries::mark_written`].
    pub fn has_changes(&self) -> bool {
        self.dirty
    }

    /// Marks every entry unchanged.
    pub fn mark_written(&mut self) {
        self.dirty = false;
        self.states.iter_mut().flat_map(HashTable::iter_mut).for_each(|e| e.changed = false);
    }

    /// Forgets every entry (once the changed ones are written out).
    pub fn clear(&mut self) {
        self.states.iter_mut().for_each(HashTable::clear);
        self.arena.clear();
        self.entries = 0;
    }

    fn insert(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<&[u8]>, changed: bool) {
        let HotEntries { states, arena, .. } = self;
        let hash = key.table_hash();
        let key_span = append(arena, key.key);
        let value = value.map(|bytes| append(arena, bytes));
        let entry = HotEntry { hash, group: key.group, changed, key: key_span, value };
        table_mut(states, state).insert_unique(hash, entry, |e| e.hash);
        self.entries += 1;
    }
}

fn matches(arena: &[u8], entry: &HotEntry, key: &HashedKey<'_>) -> bool {
    entry.hash == key.table_hash() && arena[entry.key.range()] == *key.key
}

fn table_mut(states: &mut Vec<HashTable<HotEntry>>, state: StateId) -> &mut HashTable<HotEntry> {
    let index = state.0 as usize;
    if states.len() <= index {
        states.resize_with(index + 1, HashTable::new);
    }
    &mut states[index]
}

/// Appends `bytes` to the arena.
fn append(arena: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let start = arena.len();
    arena.extend_from_slice(bytes);
    Span { start, len: bytes.len() }
}

/// Stores a value's new `bytes` where its `old` ones were if they fit
/// (a count's value keeps its length), else at the arena's end.
fn store(arena: &mut Vec<u8>, old: Option<Span>, bytes: &[u8]) -> Span {
    match old {
        Some(old) if bytes.len() <= old.len => {
            arena[old.start..old.start + bytes.len()].copy_from_slice(bytes);
            Span { start: old.start, len: bytes.len() }
        }
        _ => append(arena, bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(bytes: &[u8]) -> HashedKey<'_> {
        HashedKey::new(bytes, 128)
    }

    /// Values rewritten shorter, longer and deleted read back as written,
    /// each key's apart from the others', and only changed entries are
    /// listed to be written out.
    #[test]
    fn entries_read_back_as_last_written() {
        let mut hot = HotEntries::new(1 << 20);
        let (a, b, c) = (key(b"a"), key(b"bb"), key(b"ccc"));
        hot.write(StateId(0), &a, Some(b"12345"));
        hot.remember(StateId(0), &b, Some(b"stored"));
        hot.remember(StateId(1), &c, None);
        hot.write(StateId(0), &a, Some(b"9"));
        assert_eq!(hot.get(StateId(0), &a), Some(Some(&b"9"[..])), "shorter, in place");
        hot.write(StateId(0), &a, Some(b"a longer value"));
        assert_eq!(hot.get(StateId(0), &a), Some(Some(&b"a longer value"[..])), "longer, appended");
        assert_eq!(hot.get(StateId(0), &b), Some(Some(&b"stored"[..])), "its neighbour untouched");
        assert_eq!(hot.get(StateId(1), &c), Some(None), "known absent");
        assert_eq!(hot.get(StateId(1), &a), None, "another state's key is unknown");
        hot.write(StateId(0), &b, None);
        let mut changes: Vec<_> = hot.changes().map(|c| (c.state.0, c.key.to_vec(), c.value.map(<[u8]>::to_vec))).collect();
        changes.sort();
        assert_eq!(changes, [(0, b"a".to_vec(), Some(b"a longer value".to_vec())), (0, b"bb".to_vec(), None)]);
        hot.mark_written();
        assert_eq!(hot.changes().count(), 0);
        hot.clear();
        assert_eq!(hot.get(StateId(0), &a), None, "forgotten");
    }

    /// The bound's overhead counts a slot of this size.
    #[test]
    fn an_entry_takes_a_slot_of_56_bytes() {
        assert!(std::mem::size_of::<HotEntry>() <= 56, "{} bytes", std::mem::size_of::<HotEntry>());
    }

    /// The bound counts the bytes values leave behind when they grow, so
    /// a layer rewriting the same key longer and longer fills too.
    #[test]
    fn values_that_grow_fill_the_layer() {
        let mut hot = HotEntries::new(1000);
        let k = key(b"k");
        let mut value = Vec::new();
        while !hot.is_full() {
            value.push(b'x');
            hot.write(StateId(0), &k, Some(&value));
        }
        assert!(value.len() < 100, "full after {} rewrites of one key", value.len());
        hot.clear();
        assert!(!hot.is_full());
    }
}
