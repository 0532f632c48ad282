//! The in-memory backend: one hash table per state.
//!
//! Each entry keeps the key and the value together (`key ++ value`) next to
//! the key's hash — in the table's slot when they are short, else in one
//! heap block: a lookup touches the table (and at most one block), compares
//! hashes before bytes, and a put over an existing value rewrites it in
//! place. Callers hash a key once ([`HashedKey`]) for both the read
//! and the write of a batch.
//!
//! A snapshot serialises entries into one buffer while the task waits (a
//! copy, no I/O), and writes it out later. The first serialises every
//! entry, in the canonical keyed-state format:
//!
//! ```text
//! "WEIRKS01"  then per entry: group u16, state u32, key (u32 len + bytes),
//!             value (u32 len + bytes); all little-endian
//! ```
//!
//! and later ones only what changed since the one before, while that is
//! cheaper ([`memory_chain`](super::memory_chain)): each entry remembers
//! whether it was written since, and the backend lists the keys deleted.

use std::ops::Bound;
use std::path::Path;

use hashbrown::HashTable;

use super::file::{FileRef, RecordReader, RecordWriter, read_verified};
use super::map_index::MapIndexes;
use super::map_keys::push_map_prefix;
use super::memory_chain::{CHANGES_MAGIC, Chain};
use super::{BackendKind, Entry, HashedKey, KeyedStateBackend, StateError, StateId, StateSize, StateSnapshot, expired, table_hash};
use crate::prefetch::prefetch;

/// The magic (and version) of a canonical keyed-state file.
pub const ENTRIES_MAGIC: &[u8; 8] = b"WEIRKS01";

#[derive(Debug)]
struct Slot {
    /// The key's [`HashedKey::table_hash`].
    hash: u64,
    group: u16,
    key_len: u32,
    /// The key's bytes followed by the value's.
    bytes: EntryBytes,
    /// Written since the last snapshot.
    changed: bool,
}

impl Slot {
    fn key(&self) -> &[u8] {
        &self.bytes.as_slice()[..self.key_len as usize]
    }

    fn value(&self) -> &[u8] {
        &self.bytes.as_slice()[self.key_len as usize..]
    }

    fn matches(&self, key: &HashedKey<'_>) -> bool {
        self.hash == key.table_hash() && self.key() == key.key
    }

    /// The bytes of its record in a snapshot file: group (2), state (4),
    /// key and value (each a 4-byte length and the bytes).
    fn record_len(&self) -> i64 {
        14 + self.bytes.len() as i64
    }
}

/// The most bytes, key and value together, an entry holds in its slot of
/// the table rather than in a block of its own.
const INLINE_BYTES: usize = 30;

/// An entry's key followed by its value. Short ones — a counter's key and
/// count — sit in the table's slot: a lookup reads one place in memory,
/// not the slot and then a heap block, and an entry costs no allocation.
#[derive(Debug)]
enum EntryBytes {
    Inline { len: u8, bytes: [u8; INLINE_BYTES] },
    Heap(Vec<u8>),
}

impl EntryBytes {
    fn new(key: &[u8], value: &[u8]) -> Self {
        let len = key.len() + value.len();
        if len > INLINE_BYTES {
            return EntryBytes::Heap([key, value].concat());
        }
        let mut bytes = [0; INLINE_BYTES];
        bytes[..key.len()].copy_from_slice(key);
        bytes[key.len()..len].copy_from_slice(value);
        EntryBytes::Inline { len: len as u8, bytes }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            EntryBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            EntryBytes::Heap(bytes) => bytes,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Replaces what follows the first `keep` bytes (the key) by `value`.
    fn set_tail(&mut self, keep: usize, value: &[u8]) {
        let len = keep + value.len();
        match self {
            EntryBytes::Inline { len: held, bytes } if len <= INLINE_BYTES => {
                bytes[keep..len].copy_from_slice(value);
                *held = len as u8;
            }
            EntryBytes::Heap(bytes) => {
                bytes.truncate(keep);
                bytes.extend_from_slice(value);
            }
            EntryBytes::Inline { .. } => *self = EntryBytes::Heap([&self.as_slice()[..keep], value].concat()),
        }
    }

}

/// The bytes of a deleted key's record in a change file: group (2), state
/// (4), key (a 4-byte length and the bytes).
fn deleted_record_len(key: &[u8]) -> i64 {
    10 + key.len() as i64
}

/// Keys deleted since the last snapshot, already in the records a change
/// file lists them by: one buffer, where a list of keys cost an allocation
/// per delete and a free per key at the snapshot (a window operator
/// deletes every window it fires: a million at the end of a run).
#[derive(Debug, Default)]
struct DeletedKeys {
    count: u32,
    records: RecordWriter,
}

impl DeletedKeys {
    fn push(&mut self, group: u16, state: StateId, key: &[u8]) {
        self.count += 1;
        self.records.u16(group);
        self.records.u32(state.0);
        self.records.bytes(key);
    }

    /// Writes the count and the records to a change file, and forgets them.
    fn drain_into(&mut self, writer: &mut RecordWriter) {
        let DeletedKeys { count, records } = std::mem::take(self);
        writer.u32(count);
        writer.append(&records);
    }
}

/// How many bytes of records a whole snapshot and a change file would hold
/// now, kept up to date as entries change: a snapshot chooses between the
/// two (see [`Chain::may_extend`]) before serialising either.
#[derive(Debug, Default, Clone, Copy)]
struct RecordBytes {
    all: i64,
    changed: i64,
}

/// What the backend keeps about entries besides its tables, borrowed to
/// note an entry's removal — by a delete, or by a purge while its table is
/// borrowed.
struct Removals<'a> {
    deleted: &'a mut DeletedKeys,
    chain: &'a Chain,
    record_bytes: &'a mut RecordBytes,
    map_indexes: &'a mut MapIndexes,
}

impl Removals<'_> {
    /// Notes that `slot` was removed from `state`'s table: its map index,
    /// the snapshot sizes, and the next change file's deleted keys.
    fn note(&mut self, state: StateId, slot: &Slot) {
        self.map_indexes.removed(state, slot.key());
        self.record_bytes.all -= slot.record_len();
        if slot.changed {
            self.record_bytes.changed -= slot.record_len();
        }
        if self.chain.started() {
            self.record_bytes.changed += deleted_record_len(slot.key());
            self.deleted.push(slot.group, state, slot.key());
        }
    }
}

/// Tables of fewer entries stay in the processor's caches while in use:
/// a prefetch would only cost its instructions.
const PREFETCH_FROM_ENTRIES: usize = 1 << 16;

/// Starts loading the control bytes and the slot where a lookup of `hash`
/// in `table` begins to probe. `hashbrown` does not say where those are;
/// they follow from any held slot's place: it keeps slot `i` `i + 1` slots
/// below its control bytes, and a probe starts at slot `hash & (buckets -
/// 1)`. Should that layout change, the hint only misses: a prefetch reads
/// nothing and cannot fault, whatever the address.
fn prefetch_probe(table: &HashTable<Slot>, hash: u64) {
    if table.len() < PREFETCH_FROM_ENTRIES {
        return;
    }
    if let Some((control, slot)) = probe_start(table, hash) {
        prefetch(control);
        prefetch(slot);
    }
}

/// Where a probe for `hash` in `table` starts, as [`prefetch_probe`] finds
/// it: the address of its first control byte and of its first slot (none
/// in an empty table).
fn probe_start(table: &HashTable<Slot>, hash: u64) -> Option<(*const u8, *const Slot)> {
    let held = table.iter_buckets().next()?;
    let anchor = std::ptr::from_ref(table.get_bucket(held)?);
    let home = hash as usize & (table.num_buckets() - 1);
    let control = anchor.wrapping_add(held + 1).cast::<u8>().wrapping_add(home);
    Some((control, anchor.wrapping_add(held).wrapping_sub(home)))
}

/// Keyed state in hash tables, one per state id.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    states: Vec<HashTable<Slot>>,
    /// Keys deleted since the last snapshot (once there was one).
    deleted: DeletedKeys,
    chain: Chain,
    record_bytes: RecordBytes,
    /// Sub-keys by key of the map states listed so far.
    map_indexes: MapIndexes,
    /// By state: the bucket of its table a purge of expired values goes on
    /// from ([`MemoryBackend::purge_within`]).
    purge_cursors: Vec<usize>,
}

/// How many buckets of its tables a purge of expired values looks at, at
/// most (a few milliseconds): the purge runs on the task's thread while it
/// waits at a barrier, so a large state is swept a part per checkpoint.
const PURGE_BUCKETS: usize = 1 << 19;

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// Removes the expired values of `states` found in at most `budget`
    /// buckets of their tables (shared between them), each state's sweep
    /// going on from where the last one stopped and wrapping around; returns
    /// how many it removed. A removal leaves the other entries in their
    /// buckets; a table that grew since is swept on in its new layout, so
    /// an entry moved behind the cursor waits for the next round.
    fn purge_within(&mut self, states: &[StateId], now: i64, budget: usize) -> u64 {
        let MemoryBackend { states: tables, deleted, chain, record_bytes, map_indexes, purge_cursors } = self;
        let mut removals = Removals { deleted, chain, record_bytes, map_indexes };
        let share = (budget / states.len().max(1)).max(1);
        let mut purged = 0;
        for &state in states {
            let Some(table) = tables.get_mut(state.0 as usize) else { continue };
            if purge_cursors.len() <= state.0 as usize {
                purge_cursors.resize(state.0 as usize + 1, 0);
            }
            let cursor = &mut purge_cursors[state.0 as usize];
            let buckets = table.num_buckets();
            for _ in 0..share.min(buckets) {
                if *cursor >= buckets {
                    *cursor = 0;
                }
                if let Ok(entry) = table.get_bucket_entry(*cursor)
                    && expired(entry.get().value(), now)
                {
                    let (slot, _) = entry.remove();
                    removals.note(state, &slot);
                    purged += 1;
                }
                *cursor += 1;
            }
        }
        purged
    }

    fn removals(&mut self) -> Removals<'_> {
        let MemoryBackend { deleted, chain, record_bytes, map_indexes, .. } = self;
        Removals { deleted, chain, record_bytes, map_indexes }
    }

    fn table_mut(&mut self, state: StateId) -> &mut HashTable<Slot> {
        let index = state.0 as usize;
        if self.states.len() <= index {
            self.states.resize_with(index + 1, HashTable::new);
        }
        &mut self.states[index]
    }
}

impl KeyedStateBackend for MemoryBackend {
    fn get(&mut self, state: StateId, key: HashedKey<'_>) -> Result<Option<&[u8]>, StateError> {
        let Some(table) = self.states.get(state.0 as usize) else { return Ok(None) };
        Ok(table.find(key.table_hash(), |e| e.matches(&key)).map(Slot::value))
    }

    fn prefetch(&self, state: StateId, hash: u64) {
        if let Some(table) = self.states.get(state.0 as usize) {
            prefetch_probe(table, table_hash(hash));
        }
    }

    fn put(&mut self, state: StateId, key: HashedKey<'_>, value: &[u8]) -> Result<(), StateError> {
        let table = self.table_mut(state);
        let hash = key.table_hash();
        let (all, changed) = match table.find_mut(hash, |e| e.matches(&key)) {
            Some(entry) => {
                let old = entry.record_len();
                entry.bytes.set_tail(entry.key_len as usize, value);
                let new = entry.record_len();
                let was_changed = std::mem::replace(&mut entry.changed, true);
                (new - old, if was_changed { new - old } else { new })
            }
            None => {
                let bytes = EntryBytes::new(key.key, value);
                let slot = Slot { hash, group: key.group, key_len: key.key.len() as u32, bytes, changed: true };
                let new = slot.record_len();
                table.insert_unique(hash, slot, |e| e.hash);
                self.map_indexes.inserted(state, key.key);
                (new, new)
            }
        };
        self.record_bytes.all += all;
        self.record_bytes.changed += changed;
        Ok(())
    }

    fn delete(&mut self, state: StateId, key: HashedKey<'_>) -> Result<(), StateError> {
        if let Some(table) = self.states.get_mut(state.0 as usize)
            && let Ok(entry) = table.find_entry(key.table_hash(), |e| e.matches(&key))
        {
            let (slot, _) = entry.remove();
            self.removals().note(state, &slot);
        }
        Ok(())
    }

    fn purge_expired(&mut self, states: &[StateId], now: i64) -> Result<u64, StateError> {
        Ok(self.purge_within(states, now, PURGE_BUCKETS))
    }

    fn map_entries(
        &mut self,
        state: StateId,
        key: HashedKey<'_>,
        after: Option<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<bool, StateError> {
        let Some(table) = self.states.get(state.0 as usize) else { return Ok(false) };
        let mut stored = Vec::new();
        push_map_prefix(&mut stored, key.key);
        let prefix = stored.len();
        let Some(sub_keys) = self.map_indexes.sub_keys(state, &stored, table.iter().map(Slot::key)) else {
            return Ok(false);
        };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        for (listed, sub_key) in sub_keys.range::<[u8], _>((start, Bound::Unbounded)).enumerate() {
            if listed == limit {
                return Ok(true);
            }
            stored.truncate(prefix);
            stored.extend_from_slice(sub_key);
            let entry = HashedKey::in_group(&stored, key.group);
            // Every put and delete keeps the index, so the entry is there.
            let slot = table.find(entry.table_hash(), |e| e.matches(&entry));
            debug_assert!(slot.is_some(), "an indexed entry is in its table");
            if let Some(slot) = slot {
                f(sub_key, slot.value());
            }
        }
        Ok(false)
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&Entry)) -> Result<(), StateError> {
        for (index, table) in self.states.iter().enumerate() {
            for slot in table.iter() {
                let state = StateId(index as u32);
                f(&Entry { group: slot.group, state, key: slot.key().to_vec(), value: slot.value().to_vec() });
            }
        }
        Ok(())
    }

    fn is_empty(&mut self) -> Result<bool, StateError> {
        Ok(self.len() == 0)
    }

    /// Exact: the entries, and the bytes a full snapshot writes for them.
    fn size(&self) -> StateSize {
        StateSize { entries: self.len() as u64, bytes: self.record_bytes.all.max(0) as u64 }
    }

    fn snapshot(&mut self) -> Result<Box<dyn StateSnapshot>, StateError> {
        let RecordBytes { all, changed } = self.record_bytes;
        // Whichever is written, nothing has changed since it.
        self.record_bytes.changed = 0;
        let extend = self.chain.may_extend(changed as u64, all as u64);
        let mut writer = RecordWriter::new(if extend { CHANGES_MAGIC } else { ENTRIES_MAGIC });
        if extend {
            self.deleted.drain_into(&mut writer);
        } else {
            self.deleted = DeletedKeys::default();
        }
        for (index, table) in self.states.iter_mut().enumerate() {
            for slot in table.iter_mut().filter(|slot| slot.changed || !extend) {
                writer.u16(slot.group);
                writer.u32(index as u32);
                writer.bytes(slot.key());
                writer.bytes(slot.value());
                slot.changed = false;
            }
        }
        let bytes = writer.into_bytes();
        Ok(if extend { self.chain.changes(bytes) } else { self.chain.full(bytes) })
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Memory
    }
}

impl MemoryBackend {
    /// How many (state, key) entries are stored.
    pub fn len(&self) -> usize {
        self.states.iter().map(HashTable::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads a canonical keyed-state file (checksum first), entry by entry.
pub fn read_entries(
    root: &Path,
    file: &FileRef,
    f: &mut dyn FnMut(Entry) -> Result<(), StateError>,
) -> Result<(), StateError> {
    visit_entries(root, file, &mut |group, state, key, value| {
        f(Entry { group, state, key: key.to_vec(), value: value.to_vec() })
    })
}

/// Calls `f(group, state, key, value)` for each entry of a canonical
/// keyed-state file, without copying.
pub fn visit_entries(
    root: &Path,
    file: &FileRef,
    f: &mut dyn FnMut(u16, StateId, &[u8], &[u8]) -> Result<(), StateError>,
) -> Result<(), StateError> {
    let bytes = read_verified(root, file)?;
    let path = root.join(&file.path);
    let mut reader = RecordReader::new(&path, &bytes, ENTRIES_MAGIC)?;
    visit_records(&mut reader, f)
}

/// Calls `f(group, state, key, value)` for each entry record from
/// `reader` to its end (an entries file's body, a change file's tail).
fn visit_records(
    reader: &mut RecordReader<'_>,
    f: &mut dyn FnMut(u16, StateId, &[u8], &[u8]) -> Result<(), StateError>,
) -> Result<(), StateError> {
    while !reader.is_empty() {
        let group = reader.u16()?;
        let state = StateId(reader.u32()?);
        let key = reader.bytes()?;
        let value = reader.bytes()?;
        f(group, state, key, value)?;
    }
    Ok(())
}

/// Applies a change file (checksum first) to `backend`: its deleted keys,
/// then its written entries.
pub fn apply_changes(root: &Path, file: &FileRef, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
    let bytes = read_verified(root, file)?;
    let path = root.join(&file.path);
    let mut reader = RecordReader::new(&path, &bytes, CHANGES_MAGIC)?;
    for _ in 0..reader.u32()? {
        let group = reader.u16()?;
        let state = StateId(reader.u32()?);
        backend.delete(state, HashedKey::in_group(reader.bytes()?, group))?;
    }
    visit_records(&mut reader, &mut |group, state, key, value| backend.put(state, HashedKey::in_group(key, group), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BackendConfig, BackendHandle, SnapshotTarget, restore_backend, with_expiry};

    /// A prefetch finds the slot where a lookup starts: for every entry
    /// that sits there (most, in a table at most seven-eighths full), the
    /// slot the lookup finds. Should `hashbrown` lay its table out
    /// otherwise, prefetches would load the wrong lines, for nothing.
    #[test]
    fn a_prefetch_loads_the_slot_where_the_lookup_starts() {
        let mut backend = MemoryBackend::new();
        let keys: Vec<[u8; 8]> = (0u64..100_000).map(|i| i.to_le_bytes()).collect();
        for key in &keys {
            backend.put(StateId(0), HashedKey::new(key, 128), b"1").unwrap();
        }
        let table = &backend.states[0];
        let mut at_home = 0;
        for key in &keys {
            let key = HashedKey::new(key, 128);
            let (_, start) = probe_start(table, key.table_hash()).unwrap();
            let found = table.find_bucket_index(key.table_hash(), |e| e.matches(&key)).unwrap();
            if std::ptr::eq(start, table.get_bucket(found).unwrap()) {
                at_home += 1;
            }
        }
        assert!(at_home > keys.len() / 2, "{at_home} of {} found where their probe starts", keys.len());
    }

    /// The size is exact: every entry, and the bytes a full snapshot
    /// writes for them (what its file holds but its header and checksum).
    #[test]
    fn its_size_is_its_entries_and_the_bytes_a_full_snapshot_writes() {
        let mut backend = MemoryBackend::new();
        assert_eq!(backend.size(), StateSize::default());
        for i in 0u32..1000 {
            backend.put(StateId(i % 3), HashedKey::new(&i.to_le_bytes(), 128), &vec![7; (i % 50) as usize]).unwrap();
        }
        backend.put(StateId(0), HashedKey::new(&0u32.to_le_bytes(), 128), b"overwritten").unwrap();
        for i in 0u32..100 {
            backend.delete(StateId(i % 3), HashedKey::new(&i.to_le_bytes(), 128)).unwrap();
        }
        let size = backend.size();
        assert_eq!(size.entries, 900);
        let dir = tempfile::tempdir().unwrap();
        let target = SnapshotTarget { root: dir.path().into(), dir: "chk-1".into(), name: "op-0".into() };
        let BackendHandle::Memory { entries, .. } = backend.snapshot().unwrap().persist(&target).unwrap() else { unreachable!() };
        let written = entries.size;
        assert!(written >= size.bytes && written - size.bytes < 64, "{written} bytes written for {size:?}");
    }

    #[test]
    fn put_get_delete_per_state() {
        let mut backend = MemoryBackend::new();
        let (a, b) = (StateId(0), StateId(1));
        let k = HashedKey::new(b"k", 128);
        assert!(KeyedStateBackend::is_empty(&mut backend).unwrap());
        backend.put(a, k, b"1").unwrap();
        assert!(!KeyedStateBackend::is_empty(&mut backend).unwrap());
        backend.put(b, k, b"2").unwrap();
        backend.put(a, k, b"three").unwrap();
        backend.put(a, HashedKey::new(b"other", 128), b"x").unwrap();
        assert_eq!(backend.get(a, k).unwrap(), Some(&b"three"[..]));
        assert_eq!(backend.get(b, k).unwrap(), Some(&b"2"[..]));
        assert_eq!(backend.len(), 3);
        backend.delete(a, k).unwrap();
        assert_eq!(backend.get(a, k).unwrap(), None);
        assert_eq!(backend.get(a, HashedKey::new(b"other", 128)).unwrap(), Some(&b"x"[..]));
        assert_eq!(backend.get(StateId(7), k).unwrap(), None);
    }

    #[test]
    fn snapshot_restores_every_entry_and_detects_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = MemoryBackend::new();
        for i in 0..1000u32 {
            let key = format!("key-{i}");
            backend.put(StateId(i % 3), HashedKey::new(key.as_bytes(), 128), &i.to_le_bytes()).unwrap();
        }
        let target = SnapshotTarget { root: dir.path().to_path_buf(), dir: "chk-1".into(), name: "op-0".into() };
        let handle = backend.snapshot().unwrap().persist(&target).unwrap();
        let mut restored = restore_backend(&BackendConfig::new(BackendKind::Memory), &handle, dir.path(), dir.path()).unwrap();
        for i in 0..1000u32 {
            let key = format!("key-{i}");
            let value = restored.get(StateId(i % 3), HashedKey::new(key.as_bytes(), 128)).unwrap();
            assert_eq!(value, Some(&i.to_le_bytes()[..]));
        }
        let BackendHandle::Memory { entries, .. } = &handle else { panic!("memory handle") };
        let path = dir.path().join(&entries.path);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let error = restore_backend(&BackendConfig::new(BackendKind::Memory), &handle, dir.path(), dir.path()).err().unwrap();
        assert!(error.to_string().contains("checksum"), "{error}");
    }

    fn put(backend: &mut MemoryBackend, state: u32, key: &str, value: &str) {
        backend.put(StateId(state), HashedKey::new(key.as_bytes(), 128), value.as_bytes()).unwrap();
    }

    fn delete(backend: &mut MemoryBackend, state: u32, key: &str) {
        backend.delete(StateId(state), HashedKey::new(key.as_bytes(), 128)).unwrap();
    }

    /// Every (state, key, value), sorted.
    fn contents(backend: &mut dyn KeyedStateBackend) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        backend.for_each(&mut |e| all.push((e.state.0, e.key.clone(), e.value.clone()))).unwrap();
        all.sort();
        all
    }

    fn target(dir: &Path, checkpoint: u32) -> SnapshotTarget {
        SnapshotTarget { root: dir.to_path_buf(), dir: format!("chk-{checkpoint}"), name: "op-0".into() }
    }

    fn changes(handle: &BackendHandle) -> &[FileRef] {
        let BackendHandle::Memory { changes, .. } = handle else { panic!("memory handle") };
        changes
    }

    /// After a full snapshot, each one writes only what changed — written
    /// entries and deleted keys, a key deleted and written again included —
    /// and restoring the base and its changes gives the state at each.
    #[test]
    fn later_snapshots_write_only_changes_and_restore_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = MemoryBackend::new();
        for i in 0..1000 {
            put(&mut backend, i % 2, &format!("key-{i}"), &format!("value-{i}"));
        }
        let first = backend.snapshot().unwrap().persist(&target(dir.path(), 1)).unwrap();
        assert!(changes(&first).is_empty(), "the first snapshot is whole");
        put(&mut backend, 0, "key-0", "new");
        delete(&mut backend, 1, "key-1");
        delete(&mut backend, 0, "key-2");
        put(&mut backend, 0, "key-2", "again");
        put(&mut backend, 1, "fresh", "1");
        delete(&mut backend, 1, "fresh");
        let second = backend.snapshot().unwrap().persist(&target(dir.path(), 2)).unwrap();
        assert_eq!(changes(&second).len(), 1);
        assert!(changes(&second)[0].size < first.files()[0].size / 10, "a few changes, a small file");
        let expected = contents(&mut backend);
        let mut restored = restore_backend(&BackendConfig::new(BackendKind::Memory), &second, dir.path(), dir.path()).unwrap();
        assert_eq!(contents(restored.as_mut()), expected);
        put(&mut backend, 1, "key-1", "back");
        let third = backend.snapshot().unwrap().persist(&target(dir.path(), 3)).unwrap();
        assert_eq!((third.files()[0], changes(&third).len()), (first.files()[0], 2), "one base, two change files");
        let mut restored = restore_backend(&BackendConfig::new(BackendKind::Memory), &third, dir.path(), dir.path()).unwrap();
        assert_eq!(contents(restored.as_mut()), contents(&mut backend));
        let mut visited = Vec::new();
        crate::state::visit_snapshot(&BackendConfig::new(BackendKind::Memory), &third, dir.path(), dir.path(), &mut |_, state, key, value| {
            visited.push((state.0, key.to_vec(), value.to_vec()))
        })
        .unwrap();
        visited.sort();
        assert_eq!(visited, contents(&mut backend), "a savepoint sees the same");
    }

    /// A state that grows keeps its chain: each change file holds only the
    /// new entries, though they soon outweigh the base. A state rewritten
    /// over and over starts again with a whole snapshot once a restore
    /// would read more than twice it; so does a chain one of whose files
    /// was not written.
    #[test]
    fn a_chain_starts_again_when_a_restore_would_read_twice_the_state_or_a_file_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = MemoryBackend::new();
        put(&mut backend, 0, "small", "1");
        let base = backend.snapshot().unwrap().persist(&target(dir.path(), 1)).unwrap();
        for round in 0..4 {
            for i in 0..100 {
                put(&mut backend, 0, &format!("key-{round}-{i}"), "a longer value than the base's");
            }
            let grown = backend.snapshot().unwrap().persist(&target(dir.path(), 2 + round)).unwrap();
            assert_eq!((grown.files()[0], changes(&grown).len()), (base.files()[0], round as usize + 1), "round {round}");
            assert!(changes(&grown)[round as usize].size > 10 * base.files()[0].size, "only the new entries");
            let mut restored = restore_backend(&BackendConfig::new(BackendKind::Memory), &grown, dir.path(), dir.path()).unwrap();
            assert_eq!(contents(restored.as_mut()), contents(&mut backend));
        }

        let rewrite = |backend: &mut MemoryBackend, value: &str| {
            for round in 0..4 {
                (0..100).for_each(|i| put(backend, 0, &format!("key-{round}-{i}"), value));
            }
        };
        rewrite(&mut backend, "one rewrite of every value");
        let whole = backend.snapshot().unwrap().persist(&target(dir.path(), 6)).unwrap();
        assert!(changes(&whole).is_empty(), "the chain and a change of everything would be over twice the state");
        rewrite(&mut backend, "two rewrites of every value");
        let once = backend.snapshot().unwrap().persist(&target(dir.path(), 7)).unwrap();
        assert_eq!(changes(&once).len(), 1, "base and one change of everything: twice the state");
        rewrite(&mut backend, "three rewrites of every value");
        let again = backend.snapshot().unwrap().persist(&target(dir.path(), 8)).unwrap();
        assert!(changes(&again).is_empty(), "a second change of everything: whole again");

        // A snapshot taken but never written: the next change file has no
        // predecessor, so its checkpoint fails and the chain starts again.
        put(&mut backend, 0, "lost", "1");
        let _never_written = backend.snapshot().unwrap();
        put(&mut backend, 0, "after", "2");
        let error = backend.snapshot().unwrap().persist(&target(dir.path(), 10)).err().unwrap();
        assert!(error.to_string().contains("next checkpoint writes the whole state"), "{error}");
        let again = backend.snapshot().unwrap().persist(&target(dir.path(), 11)).unwrap();
        assert!(changes(&again).is_empty());
        let mut restored = restore_backend(&BackendConfig::new(BackendKind::Memory), &again, dir.path(), dir.path()).unwrap();
        assert_eq!(contents(restored.as_mut()), contents(&mut backend), "nothing lost with the unwritten snapshot");
    }

    /// Values that grow past what a slot holds, and shrink back, keep
    /// their key and read back whole.
    #[test]
    fn entries_move_between_the_slot_and_the_heap_as_they_grow() {
        let key = b"key";
        let mut bytes = EntryBytes::new(key, b"short");
        for value in [&[7u8; INLINE_BYTES - 3][..], &[8; INLINE_BYTES - 2], b"", &[9; 100], b"tiny"] {
            bytes.set_tail(key.len(), value);
            assert_eq!(bytes.as_slice(), [&key[..], value].concat(), "{} value bytes", value.len());
        }
        assert!(matches!(bytes, EntryBytes::Heap(_)), "once on the heap, an entry stays there");
        assert!(matches!(EntryBytes::new(&[1; INLINE_BYTES], b""), EntryBytes::Inline { .. }));
        assert!(matches!(EntryBytes::new(&[1; INLINE_BYTES], b"x"), EntryBytes::Heap(_)));
    }

    /// A purge looks at a bounded number of buckets and goes on from there
    /// the next time, wrapping around — also after the table grew in
    /// between — until every expired value is gone and every live one
    /// stays; the change file after it records the removals.
    #[test]
    fn purges_sweep_a_bounded_part_of_a_table_each_and_go_on_from_there() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = MemoryBackend::new();
        let (expiring, other) = (StateId(1), StateId(0));
        let mut stored = Vec::new();
        let mut put = |backend: &mut MemoryBackend, state: StateId, i: u32, expires_at: i64| {
            let key = format!("key-{i}");
            backend.put(state, HashedKey::new(key.as_bytes(), 128), with_expiry(b"v", expires_at, &mut stored)).unwrap();
        };
        for i in 0..10_000 {
            put(&mut backend, expiring, i, if i % 2 == 0 { 100 } else { 10_000 });
            put(&mut backend, other, i, 100);
        }
        backend.snapshot().unwrap().persist(&target(dir.path(), 1)).unwrap();
        let (budget, mut purged, mut rounds) = (1_000, 0, 0);
        while purged < 5_000 {
            let now = backend.purge_within(&[expiring], 500, budget);
            assert!(now <= budget as u64);
            purged += now;
            rounds += 1;
            if rounds == 3 {
                // The table grows between purges: the sweep goes on in its new layout.
                (10_000..30_000).for_each(|i| put(&mut backend, expiring, i, 10_000));
            }
            assert!(rounds < 200, "every expired value is reached");
        }
        assert_eq!(purged, 5_000);
        let left = contents(&mut backend);
        assert_eq!(left.iter().filter(|(state, ..)| *state == 1).count(), 25_000, "every live value stays");
        assert_eq!(left.iter().filter(|(state, ..)| *state == 0).count(), 10_000, "a state not named is not purged");
        let handle = backend.snapshot().unwrap().persist(&target(dir.path(), 2)).unwrap();
        assert_eq!(changes(&handle).len(), 1, "the removals went into a change file");
        let mut restored = restore_backend(&BackendConfig::new(BackendKind::Memory), &handle, dir.path(), dir.path()).unwrap();
        assert_eq!(contents(restored.as_mut()), left);
    }

    #[test]
    fn many_keys_survive_growth() {
        let mut backend = MemoryBackend::new();
        let keys: Vec<String> = (0..10_000).map(|i| format!("key-{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            backend.put(StateId(0), HashedKey::new(key.as_bytes(), 128), i.to_string().as_bytes()).unwrap();
        }
        for (i, key) in keys.iter().enumerate() {
            let value = backend.get(StateId(0), HashedKey::new(key.as_bytes(), 128)).unwrap();
            assert_eq!(value, Some(i.to_string().as_bytes()));
        }
    }
}
