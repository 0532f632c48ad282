//! The in-memory backend: one hash table per state.
//!
//! Each entry keeps the key and the value in one allocation (`key ++ value`)
//! next to the key's hash: a lookup touches the table and one heap block,
//! compares hashes before bytes, and a put over an existing value rewrites
//! it in place. Callers hash a key once ([`HashedKey`]) for both the read
//! and the write of a batch.
//!
//! A snapshot serialises every entry into one buffer in the canonical
//! keyed-state format while the task waits (a copy, no I/O), and writes it
//! out later:
//!
//! ```text
//! "WEIRKS01"  then per entry: group u16, state u32, key (u32 len + bytes),
//!             value (u32 len + bytes); all little-endian
//! ```

use std::path::Path;

use hashbrown::HashTable;

use super::file::{FileRef, RecordReader, RecordWriter, read_verified, write_verified};
use super::{BackendHandle, BackendKind, Entry, HashedKey, KeyedStateBackend, SnapshotTarget, StateError, StateId, StateSnapshot};

/// The magic (and version) of a canonical keyed-state file.
pub const ENTRIES_MAGIC: &[u8; 8] = b"WEIRKS01";

#[derive(Debug)]
struct Slot {
    hash: u64,
    group: u16,
    key_len: u32,
    /// The key's bytes followed by the value's.
    bytes: Vec<u8>,
}

impl Slot {
    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.key_len as usize..]
    }

    fn matches(&self, key: &HashedKey<'_>) -> bool {
        self.hash == key.hash && self.key() == key.key
    }
}

/// Keyed state in hash tables, one per state id.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    states: Vec<HashTable<Slot>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
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
        Ok(table.find(key.hash, |e| e.matches(&key)).map(Slot::value))
    }

    fn put(&mut self, state: StateId, key: HashedKey<'_>, value: &[u8]) -> Result<(), StateError> {
        let table = self.table_mut(state);
        match table.find_mut(key.hash, |e| e.matches(&key)) {
            Some(entry) => {
                entry.bytes.truncate(entry.key_len as usize);
                entry.bytes.extend_from_slice(value);
            }
            None => {
                let mut bytes = Vec::with_capacity(key.key.len() + value.len());
                bytes.extend_from_slice(key.key);
                bytes.extend_from_slice(value);
                let slot = Slot { hash: key.hash, group: key.group, key_len: key.key.len() as u32, bytes };
                table.insert_unique(key.hash, slot, |e| e.hash);
            }
        }
        Ok(())
    }

    fn delete(&mut self, state: StateId, key: HashedKey<'_>) -> Result<(), StateError> {
        if let Some(table) = self.states.get_mut(state.0 as usize)
            && let Ok(entry) = table.find_entry(key.hash, |e| e.matches(&key))
        {
            entry.remove();
        }
        Ok(())
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

    fn snapshot(&mut self) -> Result<Box<dyn StateSnapshot>, StateError> {
        let mut writer = RecordWriter::new(ENTRIES_MAGIC);
        for (index, table) in self.states.iter().enumerate() {
            for slot in table.iter() {
                writer.u16(slot.group);
                writer.u32(index as u32);
                writer.bytes(slot.key());
                writer.bytes(slot.value());
            }
        }
        Ok(Box::new(EntriesSnapshot(writer.into_bytes())))
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

/// Entries serialised at the barrier, waiting to be written.
struct EntriesSnapshot(Vec<u8>);

impl StateSnapshot for EntriesSnapshot {
    fn persist(self: Box<Self>, target: &SnapshotTarget) -> Result<BackendHandle, StateError> {
        let entries = write_verified(&target.root, target.private("entries"), &self.0)?;
        Ok(BackendHandle::Memory { entries })
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
    while !reader.is_empty() {
        let group = reader.u16()?;
        let state = StateId(reader.u32()?);
        let key = reader.bytes()?;
        let value = reader.bytes()?;
        f(group, state, key, value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut restored = super::super::restore_backend(BackendKind::Memory, &handle, dir.path(), dir.path()).unwrap();
        for i in 0..1000u32 {
            let key = format!("key-{i}");
            let value = restored.get(StateId(i % 3), HashedKey::new(key.as_bytes(), 128)).unwrap();
            assert_eq!(value, Some(&i.to_le_bytes()[..]));
        }
        let BackendHandle::Memory { entries } = &handle else { panic!("memory handle") };
        let path = dir.path().join(&entries.path);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let error = super::super::restore_backend(BackendKind::Memory, &handle, dir.path(), dir.path()).err().unwrap();
        assert!(error.to_string().contains("checksum"), "{error}");
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
