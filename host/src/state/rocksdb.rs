//! The RocksDB backend: state in an embedded RocksDB, so it may exceed
//! memory (a bounded block cache and write buffers hold the hot part).
//!
//! Key layout: key group (u16, big-endian), state id (u32, big-endian),
//! then the key — so the entries of a range of key groups are one range of
//! the database, to be read or moved together when rescaling.
//!
//! The write-ahead log is off: durability comes from checkpoints, not from
//! the working database, which is thrown away on failure. A snapshot is a
//! RocksDB checkpoint (the memtable flushed, live files hard-linked — cheap,
//! taken while the task waits at the barrier); persisting it copies SST
//! files the checkpoint directory does not have yet to `shared/` and the
//! few small descriptor files to the checkpoint's own directory. SST files
//! never change once written, so later checkpoints reference the shared
//! copies: checkpoints are incremental.
//!
//! In front of the database sits a bounded write-back layer of recently
//! used entries ([`HotEntries`]): a RocksDB update adds a version to the
//! memtable that every later read of the key searches past, so reads and
//! writes of hot keys stay in hash tables, and changed entries reach the
//! database in one write batch when the layer is full, before every
//! snapshot and before iteration — snapshots and iteration see exactly what
//! the operator wrote, and state larger than the layer still lives on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rocksdb::compaction_filter::Decision;
use rocksdb::{BlockBasedOptions, Cache, DB, IteratorMode, Options, WriteBatch, WriteOptions};

use super::file::{FileRef, read_verified, write_verified};
use super::hot::HotEntries;
use super::map_keys::push_map_prefix;
use super::rocksdb_memory::RocksDbMemory;
use super::{
    BackendHandle, BackendKind, Entry, ExpiringStates, HashedKey, KeyedStateBackend, SnapshotTarget, StateError, StateId, StateSize,
    StateSnapshot, expired, now_ms,
};

/// Keyed state in an embedded RocksDB.
pub struct RocksDbBackend {
    db: DB,
    /// Declared after `db`: fields drop in order, so the database is
    /// closed before its directory is removed.
    dir: WorkingDir,
    /// A name unique to this database instance: its SST names are unique
    /// only within it.
    id: String,
    write: WriteOptions,
    hot: HotEntries,
    key: Vec<u8>,
    /// SST files already copied to the checkpoint directory, by name.
    uploaded: Arc<Mutex<HashMap<String, FileRef>>>,
    snapshots: u64,
    /// The states whose expired values compactions remove.
    expiring: Arc<ExpiringStates>,
}

impl RocksDbBackend {
    /// Opens an empty database in a new directory under `work_dir`.
    pub fn open(work_dir: &Path, memory: &RocksDbMemory) -> Result<Self, StateError> {
        let (id, dir) = fresh_dir(work_dir)?;
        Self::open_in(id, dir, memory)
    }

    fn open_in(id: String, dir: PathBuf, memory: &RocksDbMemory) -> Result<Self, StateError> {
        let expiring = Arc::<ExpiringStates>::default();
        let db = DB::open(&options(memory, expiring.clone()), &dir)?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        let uploaded = Arc::default();
        let hot = HotEntries::new(memory.hot_entries_bytes());
        Ok(RocksDbBackend { db, dir: WorkingDir(dir), id, write, hot, key: Vec::new(), uploaded, snapshots: 0, expiring })
    }

    /// Rebuilds a database from a snapshot's files (each verified against
    /// its checksum) in a new directory under `work_dir`.
    pub fn restore(
        work_dir: &Path,
        root: &Path,
        shared: &[FileRef],
        private: &[FileRef],
        memory: &RocksDbMemory,
    ) -> Result<Self, StateError> {
        let (id, dir) = fresh_dir(work_dir)?;
        for file in shared.iter().chain(private) {
            let bytes = read_verified(root, file)?;
            let local = dir.join(file_name(file));
            std::fs::write(&local, bytes).map_err(StateError::io(&local))?;
        }
        let backend = Self::open_in(id, dir, memory)?;
        // The restored SSTs keep their local names, and SSTs never change:
        // while their shared copies are where they were restored from (a
        // resume from the job's own checkpoint directory), the next
        // snapshot refers to them instead of uploading them again — after
        // a restore, a checkpoint stays incremental. This database numbers
        // its new files past them and uploads those under its own id, so
        // nothing collides with what the old one uploaded later.
        let restored = shared.iter().map(|file| (file_name(file).to_owned(), file.clone()));
        backend.uploaded.lock().expect("upload map lock").extend(restored);
        Ok(backend)
    }

    fn encode_key(&mut self, state: StateId, key: &HashedKey<'_>) {
        encode_key(&mut self.key, key.group, state, key.key);
    }

    /// Sets (`Some`) or deletes (`None`) an entry in the write-back layer;
    /// writes the layer out when it is full.
    fn write_hot(&mut self, state: StateId, key: &HashedKey<'_>, value: Option<&[u8]>) -> Result<(), StateError> {
        self.hot.write(state, key, value);
        self.make_room()
    }

    /// Writes out and forgets the layer when it is full.
    fn make_room(&mut self) -> Result<(), StateError> {
        if self.hot.is_full() {
            self.write_back()?;
            self.hot.clear();
        }
        Ok(())
    }

    /// Writes the layer's changed entries to the database, in one batch
    /// sorted by database key.
    ///
    /// Sorted, because the memtable is a skip list that remembers where the
    /// last insert went: a key just after it is found from there, while a
    /// key in hash order is searched for from the top, a cache miss at
    /// every level. Sorting costs less than the misses it saves.
    fn write_back(&mut self) -> Result<(), StateError> {
        if !self.hot.has_changes() {
            return Ok(());
        }
        let mut keys = std::mem::take(&mut self.key);
        keys.clear();
        let (mut changes, mut value_bytes) = (Vec::new(), 0);
        for change in self.hot.changes() {
            let start = keys.len();
            encode_key_onto(&mut keys, change.group, change.state, change.key);
            value_bytes += change.value.map_or(0, <[u8]>::len);
            changes.push((start..keys.len(), change.value));
        }
        changes.sort_unstable_by(|(a, _), (b, _)| keys[a.clone()].cmp(&keys[b.clone()]));
        // Room for it all at once (each record adds a tag and two lengths):
        // grown as it fills, the batch was copied again at every doubling.
        let mut batch = WriteBatch::with_capacity_bytes(keys.len() + value_bytes + 12 * changes.len() + 12);
        for (key, value) in &changes {
            match value {
                Some(value) => batch.put(&keys[key.clone()], value),
                None => batch.delete(&keys[key.clone()]),
            }
        }
        drop(changes);
        self.key = keys;
        if !batch.is_empty() {
            self.db.write_opt(batch, &self.write)?;
        }
        self.hot.mark_written();
        Ok(())
    }

    /// Compacts a small database that has become many small files into
    /// few. Each checkpoint flushes what changed into a file; when those
    /// changes are a few keys that overlap no other file (new keys
    /// trickling in), RocksDB moves the file down a level as it is, never
    /// merging it, and every checkpoint after lists one more file — 86 400
    /// a day at one a second. A small database compacts in milliseconds;
    /// a large one is left to RocksDB (its flushes are large too).
    fn compact_small_files(&self) -> Result<(), StateError> {
        let files = self.db.live_files()?;
        let small = files.iter().filter(|file| file.size < SMALL_FILE_BYTES).count();
        let total: usize = files.iter().map(|file| file.size).sum();
        if small > SMALL_FILES_LIMIT && total < COMPACTED_DATABASE_BYTES {
            self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        }
        Ok(())
    }
}

/// A database of more files than this under [`SMALL_FILE_BYTES`], and
/// under [`COMPACTED_DATABASE_BYTES`] in all, is compacted at a checkpoint.
const SMALL_FILES_LIMIT: usize = 64;
const SMALL_FILE_BYTES: usize = 256 << 10;
const COMPACTED_DATABASE_BYTES: usize = 64 << 20;

/// The database key of an entry: key group, state, key.
fn encode_key(buffer: &mut Vec<u8>, group: u16, state: StateId, key: &[u8]) {
    buffer.clear();
    encode_key_onto(buffer, group, state, key);
}

/// [`encode_key`], appended to what `buffer` holds.
fn encode_key_onto(buffer: &mut Vec<u8>, group: u16, state: StateId, key: &[u8]) {
    buffer.extend_from_slice(&group.to_be_bytes());
    buffer.extend_from_slice(&state.0.to_be_bytes());
    buffer.extend_from_slice(key);
}

/// The directory of a working database, removed when the backend is
/// dropped: the working copy is disposable; checkpoints hold what matters.
struct WorkingDir(PathBuf);

impl Drop for WorkingDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The size at which a database's MANIFEST is rolled (see [`options`]).
const MAX_MANIFEST_BYTES: usize = 64 << 10;

fn options(memory: &RocksDbMemory, expiring: Arc<ExpiringStates>) -> Options {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.set_write_buffer_size(memory.write_buffer_bytes());
    options.set_max_write_buffer_number(2);
    options.set_max_open_files(256);
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // Every checkpoint copies the MANIFEST, which otherwise grows by each
    // flush's edit for as long as the database is open (a day of
    // checkpoints every second would copy ~14 MB each). It is rolled —
    // started again from a snapshot of the live files — once above this
    // size and twice that snapshot (`max_manifest_space_amp_pct`, below;
    // RocksDB's default lets it grow to six times).
    options.set_max_manifest_file_size(MAX_MANIFEST_BYTES);
    // RocksDB's own info log (a few KB per checkpoint) rolls at 1 MiB;
    // the live one and one old one are kept.
    options.set_max_log_file_size(1 << 20);
    options.set_keep_log_file_num(2);
    let mut table = BlockBasedOptions::default();
    if memory.block_cache_mb == 0 {
        table.disable_cache();
    } else {
        table.set_block_cache(&Cache::new_lru_cache(memory.block_cache_bytes()));
    }
    table.set_bloom_filter(10.0, false);
    options.set_block_based_table_factory(&table);
    // The working copy is removed once closed, so closing it need not
    // flush the memtable to a file first (the crate has setters for
    // neither).
    let mut options = options
        .get_options_from_string("avoid_flush_during_shutdown=true;max_manifest_space_amp_pct=100")
        .expect("RocksDB knows these options");
    // Set on the options RocksDB made from the string: those made it from
    // would drop the filter (which the crate keeps alive with the options)
    // while the database still called it.
    options.set_compaction_filter("weir-expired-state", move |_level: u32, key: &[u8], value: &[u8]| {
        if expired_entry(&expiring, key, value) { Decision::Remove } else { Decision::Keep }
    });
    options
}

/// Whether a database entry belongs to an expiring state and has expired.
fn expired_entry(expiring: &ExpiringStates, key: &[u8], value: &[u8]) -> bool {
    let Some(state) = key.get(2..6) else { return false };
    let state = StateId(u32::from_be_bytes(state.try_into().expect("four bytes")));
    expiring.contains(state) && expired(value, now_ms())
}

/// A new, empty directory for a database, and a name for it.
fn fresh_dir(work_dir: &Path) -> Result<(String, PathBuf), StateError> {
    let id = crate::dirs::unique_name();
    let dir = work_dir.join(format!("rocksdb-{id}"));
    std::fs::create_dir_all(&dir).map_err(StateError::io(&dir))?;
    Ok((id, dir))
}

/// The local name of a snapshot file: the last part of its path.
fn file_name(file: &FileRef) -> &str {
    file.path.rsplit('/').next().unwrap_or(&file.path)
}

impl KeyedStateBackend for RocksDbBackend {
    fn get(&mut self, state: StateId, key: HashedKey<'_>) -> Result<Option<&[u8]>, StateError> {
        if self.hot.get(state, &key).is_none() {
            // Room first: writing the layer out uses the key buffer.
            self.make_room()?;
            self.encode_key(state, &key);
            let stored = self.db.get_pinned(&self.key)?;
            self.hot.remember(state, &key, stored.as_deref());
        }
        Ok(self.hot.get(state, &key).flatten())
    }

    fn put(&mut self, state: StateId, key: HashedKey<'_>, value: &[u8]) -> Result<(), StateError> {
        self.write_hot(state, &key, Some(value))
    }

    fn delete(&mut self, state: StateId, key: HashedKey<'_>) -> Result<(), StateError> {
        self.write_hot(state, &key, None)
    }

    /// Compactions remove the expired entries: RocksDB compacts as the
    /// database grows, and this backend before a snapshot when small files
    /// pile up; until then reads leave them out.
    fn purge_expired(&mut self, states: &[StateId], _now: i64) -> Result<u64, StateError> {
        states.iter().for_each(|&state| self.expiring.insert(state));
        Ok(0)
    }

    fn for_each(&mut self, f: &mut dyn FnMut(&Entry)) -> Result<(), StateError> {
        self.write_back()?;
        for item in self.db.iterator(IteratorMode::Start) {
            let (key, value) = item?;
            if key.len() < 6 {
                continue;
            }
            let group = u16::from_be_bytes([key[0], key[1]]);
            let state = StateId(u32::from_be_bytes([key[2], key[3], key[4], key[5]]));
            f(&Entry { group, state, key: key[6..].to_vec(), value: value.to_vec() });
        }
        Ok(())
    }

    fn map_entries(
        &mut self,
        state: StateId,
        key: HashedKey<'_>,
        after: Option<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<bool, StateError> {
        self.write_back()?;
        let mut prefix = Vec::new();
        encode_key(&mut prefix, key.group, state, &[]);
        push_map_prefix(&mut prefix, key.key);
        let mut start = prefix.clone();
        start.extend_from_slice(after.unwrap_or_default());
        let mut entries = self.db.raw_iterator();
        entries.seek(&start);
        if after.is_some() && entries.key() == Some(start.as_slice()) {
            entries.next();
        }
        let mut listed = 0;
        while let (Some(stored), Some(value)) = (entries.key(), entries.value()) {
            let Some(sub_key) = stored.strip_prefix(prefix.as_slice()) else { break };
            if listed == limit {
                return Ok(true);
            }
            f(sub_key, value);
            listed += 1;
            entries.next();
        }
        entries.status()?;
        Ok(false)
    }

    fn is_empty(&mut self) -> Result<bool, StateError> {
        self.write_back()?;
        for item in self.db.iterator(IteratorMode::Start) {
            // (Shorter keys are not entries, as in `for_each`.)
            if item?.0.len() >= 6 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// RocksDB's estimates: of its keys, and of its files' live data and
    /// its memtables' bytes (entries held in the host's write-back layer
    /// count once written back, within a batch).
    fn size(&self) -> StateSize {
        let estimate = |property: &str| self.db.property_int_value(property).ok().flatten().unwrap_or(0);
        let bytes = estimate("rocksdb.estimate-live-data-size") + estimate("rocksdb.cur-size-all-mem-tables");
        StateSize { entries: estimate("rocksdb.estimate-num-keys"), bytes }
    }

    fn snapshot(&mut self) -> Result<Box<dyn StateSnapshot>, StateError> {
        self.write_back()?;
        self.compact_small_files()?;
        self.snapshots += 1;
        let local = self.dir.0.with_extension(format!("checkpoint-{}", self.snapshots));
        let _ = std::fs::remove_dir_all(&local);
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(&local)?;
        Ok(Box::new(RocksDbSnapshot { local, id: self.id.clone(), uploaded: self.uploaded.clone() }))
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Rocksdb
    }
}

/// A RocksDB checkpoint on local disk, waiting to be copied out.
struct RocksDbSnapshot {
    local: PathBuf,
    id: String,
    uploaded: Arc<Mutex<HashMap<String, FileRef>>>,
}

impl StateSnapshot for RocksDbSnapshot {
    fn persist(self: Box<Self>, target: &SnapshotTarget) -> Result<BackendHandle, StateError> {
        let (mut shared, mut private) = (Vec::new(), Vec::new());
        let entries = std::fs::read_dir(&self.local).map_err(StateError::io(&self.local))?;
        let mut names: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(StateError::io(&self.local))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        for name in names {
            let path = self.local.join(&name);
            if name.ends_with(".sst") {
                shared.push(self.upload_shared(target, &name, &path)?);
            } else {
                let bytes = std::fs::read(&path).map_err(StateError::io(&path))?;
                private.push(write_verified(&target.root, format!("{}/{name}", target.private("rocksdb")), &bytes)?);
            }
        }
        let _ = std::fs::remove_dir_all(&self.local);
        Ok(BackendHandle::Rocksdb { shared, private })
    }
}

impl RocksDbSnapshot {
    /// The shared copy of SST `name`: the one uploaded before if it is
    /// still there, else a new one.
    fn upload_shared(&self, target: &SnapshotTarget, name: &str, path: &Path) -> Result<FileRef, StateError> {
        let known = self.uploaded.lock().expect("upload map lock").get(name).cloned();
        if let Some(file) = known
            && target.root.join(&file.path).metadata().is_ok_and(|m| m.len() == file.size)
        {
            return Ok(file);
        }
        let bytes = std::fs::read(path).map_err(StateError::io(path))?;
        let file = write_verified(&target.root, format!("shared/{}/{name}", self.id), &bytes)?;
        self.uploaded.lock().expect("upload map lock").insert(name.to_owned(), file.clone());
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BackendConfig, with_expiry};

    fn put_range(backend: &mut dyn KeyedStateBackend, range: std::ops::Range<u32>) {
        for i in range {
            let key = format!("key-{i}");
            backend.put(StateId(0), HashedKey::new(key.as_bytes(), 128), &i.to_le_bytes()).unwrap();
        }
    }

    fn entries(backend: &mut RocksDbBackend) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        backend.for_each(&mut |e| all.push((e.key.clone(), e.value.clone()))).unwrap();
        all.sort();
        all
    }

    /// Compactions drop the expired values of the states a purge named,
    /// and only those: live ones, and another state's values that happen
    /// to end in a past time, stay.
    #[test]
    fn compactions_remove_expired_values_of_expiring_states() {
        let work = tempfile::tempdir().unwrap();
        let mut backend = RocksDbBackend::open(work.path(), &RocksDbMemory::default()).unwrap();
        let now = now_ms();
        let mut stored = Vec::new();
        for i in 0..100 {
            let key = format!("key-{i}");
            let expires_at = if i % 2 == 0 { now - 1 } else { now + 60_000 };
            for state in [StateId(0), StateId(1)] {
                backend.put(state, HashedKey::new(key.as_bytes(), 128), with_expiry(b"v", expires_at, &mut stored)).unwrap();
            }
        }
        assert_eq!(backend.purge_expired(&[StateId(1)], now).unwrap(), 0, "left to compactions");
        backend.write_back().unwrap();
        backend.db.compact_range::<&[u8], &[u8]>(None, None);
        let mut left = [0; 2];
        backend.for_each(&mut |e| left[e.state.0 as usize] += 1).unwrap();
        assert_eq!(left, [100, 50]);
    }

    /// The options RocksDB recorded for a working database.
    fn recorded_options(backend: &RocksDbBackend) -> String {
        let options_file = std::fs::read_dir(&backend.dir.0)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.file_name().unwrap().to_string_lossy().starts_with("OPTIONS-"))
            .expect("RocksDB writes an OPTIONS file");
        std::fs::read_to_string(options_file).unwrap()
    }

    /// The options RocksDB recorded for a working database: no flush when
    /// it closes (its directory goes right after), and the table settings
    /// (the bloom filter, the block cache) and the memtable size still in
    /// place: options rebuilt from a string keep what was set before.
    #[test]
    fn a_working_database_skips_the_shutdown_flush_and_keeps_its_table_options() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let backend = RocksDbBackend::open(&work, &RocksDbMemory::default()).unwrap();
        let recorded = recorded_options(&backend);
        assert!(recorded.contains("avoid_flush_during_shutdown=true"), "{recorded}");
        assert!(recorded.contains("filter_policy=bloomfilter"), "{recorded}");
        assert!(recorded.contains(&format!("write_buffer_size={}", 16 << 20)), "{recorded}");
        assert!(recorded.contains("no_block_cache=false"), "{recorded}");
        assert_eq!(backend.hot.limit(), 16 << 20);
        let working = backend.dir.0.clone();
        drop(backend);
        assert!(!working.exists(), "the working copy is removed when the backend is dropped");
    }

    /// The job file's budgets reach the database: the memtable's size, no
    /// block cache at 0, and the write-back layer's bound; a restored
    /// database gets them too.
    #[test]
    fn memory_budgets_reach_the_database_and_its_write_back_layer() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let memory = RocksDbMemory { block_cache_mb: 0, write_buffer_mb: 2, hot_entries_mb: 1 };
        let mut backend = RocksDbBackend::open(&work, &memory).unwrap();
        let recorded = recorded_options(&backend);
        assert!(recorded.contains(&format!("write_buffer_size={}", 2 << 20)), "{recorded}");
        assert!(recorded.contains("no_block_cache=true"), "{recorded}");
        assert_eq!(backend.hot.limit(), 1 << 20);
        put_range(&mut backend, 0..100);
        let target = SnapshotTarget { root: dir.path().into(), dir: "chk-1".into(), name: "op-0".into() };
        let BackendHandle::Rocksdb { shared, private } = backend.snapshot().unwrap().persist(&target).unwrap() else {
            panic!("a rocksdb handle")
        };
        let restored = RocksDbBackend::restore(&work, dir.path(), &shared, &private, &memory).unwrap();
        assert!(recorded_options(&restored).contains(&format!("write_buffer_size={}", 2 << 20)));
        assert_eq!(restored.hot.limit(), 1 << 20);
    }


    /// The write-back layer is invisible: reads see the latest write or
    /// delete whether the entry is still in the layer or was written out
    /// (a 2 KiB layer spills many times here), and so do iteration and
    /// snapshots.
    /// RocksDB's estimates: near the entries written, and bytes for them.
    #[test]
    fn its_size_is_rocksdbs_estimate() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = RocksDbBackend::open(&dir.path().join("work"), &RocksDbMemory::default()).unwrap();
        for i in 0u32..5_000 {
            backend.put(StateId(1), HashedKey::new(&i.to_le_bytes(), 128), &[7; 100]).unwrap();
        }
        backend.write_back().unwrap();
        let size = backend.size();
        assert!((4_000..=6_000).contains(&size.entries), "{size:?}");
        assert!(size.bytes >= 5_000 * 100, "{size:?}");
    }

    #[test]
    fn hot_entries_are_read_back_iterated_and_snapshotted_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = RocksDbBackend::open(&dir.path().join("work"), &RocksDbMemory::default()).unwrap();
        backend.hot = HotEntries::new(2048);
        let mut model = std::collections::BTreeMap::new();
        for round in 0u32..5 {
            for i in 0u32..400 {
                let key = format!("key-{}", (i * 7 + round) % 300);
                let hashed = HashedKey::new(key.as_bytes(), 128);
                let expected = model.get(key.as_bytes()).cloned();
                assert_eq!(backend.get(StateId(1), hashed).unwrap().map(<[u8]>::to_vec), expected, "{key}");
                if (i + round) % 5 == 0 {
                    backend.delete(StateId(1), hashed).unwrap();
                    model.remove(key.as_bytes());
                } else {
                    let value = (round * 1000 + i).to_le_bytes();
                    backend.put(StateId(1), hashed, &value).unwrap();
                    model.insert(key.into_bytes(), value.to_vec());
                }
            }
        }
        let expected: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
        assert_eq!(entries(&mut backend), expected);
        let target = SnapshotTarget { root: dir.path().into(), dir: "chk-1".into(), name: "op-0".into() };
        let handle = backend.snapshot().unwrap().persist(&target).unwrap();
        let mut restored = super::super::restore_backend(&BackendConfig::new(BackendKind::Rocksdb), &handle, dir.path(), &dir.path().join("work")).unwrap();
        let mut all = Vec::new();
        restored.for_each(&mut |e| all.push((e.key.clone(), e.value.clone()))).unwrap();
        all.sort();
        assert_eq!(all, expected);
    }

    /// What a checkpoint copies besides new SST files (the MANIFEST, the
    /// OPTIONS) stays bounded however many checkpoints the database has
    /// taken: the MANIFEST grew by every flush's edit until the process
    /// ended.
    #[test]
    fn what_each_checkpoint_copies_does_not_grow_with_the_checkpoints_taken() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = RocksDbBackend::open(&dir.path().join("work"), &RocksDbMemory::default()).unwrap();
        let mut private_bytes = Vec::new();
        for checkpoint in 0..1200u32 {
            // Keys across the whole key space, as a keyed operator's are:
            // each flush overlaps the files before it and is compacted.
            for i in 0..50 {
                let key = format!("key-{}", (checkpoint * 37 + i * 101) % 5000);
                backend.put(StateId(0), HashedKey::new(key.as_bytes(), 128), &checkpoint.to_le_bytes()).unwrap();
            }
            let target = SnapshotTarget { root: dir.path().into(), dir: format!("chk-{checkpoint}"), name: "op-0".into() };
            let BackendHandle::Rocksdb { private, .. } = backend.snapshot().unwrap().persist(&target).unwrap() else {
                panic!("a RocksDB snapshot")
            };
            private_bytes.push(private.iter().map(|file| file.size).sum::<u64>());
            std::fs::remove_dir_all(dir.path().join(format!("chk-{checkpoint}"))).unwrap();
        }
        let most = *private_bytes.iter().max().unwrap();
        assert!(most < MAX_MANIFEST_BYTES as u64 + (32 << 10), "a checkpoint copied {most} bytes besides its SSTs");
        let mut restored = super::super::restore_backend(&BackendConfig::new(BackendKind::Rocksdb), &{
            let target = SnapshotTarget { root: dir.path().into(), dir: "chk-last".into(), name: "op-0".into() };
            backend.snapshot().unwrap().persist(&target).unwrap()
        }, dir.path(), &dir.path().join("work")).unwrap();
        let mut count = 0;
        restored.for_each(&mut |_| count += 1).unwrap();
        assert_eq!(count, 5000, "the rolled MANIFEST still names every file");
    }

    /// New keys trickling in, a few a checkpoint, do not leave a file per
    /// checkpoint behind: RocksDB moved each down as it was, never merged.
    #[test]
    fn a_trickle_of_new_keys_does_not_leave_a_file_per_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = RocksDbBackend::open(&dir.path().join("work"), &RocksDbMemory::default()).unwrap();
        let mut most_files = 0;
        for checkpoint in 0..400u32 {
            put_range(&mut backend, checkpoint..checkpoint + 1);
            let target = SnapshotTarget { root: dir.path().into(), dir: format!("chk-{checkpoint}"), name: "op-0".into() };
            let BackendHandle::Rocksdb { shared, .. } = backend.snapshot().unwrap().persist(&target).unwrap() else {
                panic!("a RocksDB snapshot")
            };
            most_files = most_files.max(shared.len());
        }
        assert!(most_files <= SMALL_FILES_LIMIT + 1, "a checkpoint listed {most_files} files");
        assert_eq!(entries(&mut backend).len(), 400);
    }

    /// A fresh database is empty; one written to — also while the write
    /// sits in the write-back layer — or restored from a snapshot of one is
    /// not.
    #[test]
    fn a_database_is_empty_until_written_to_or_restored() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let mut backend = RocksDbBackend::open(&work, &RocksDbMemory::default()).unwrap();
        assert!(backend.is_empty().unwrap());
        put_range(&mut backend, 0..1);
        assert!(!backend.is_empty().unwrap());
        let target = SnapshotTarget { root: dir.path().into(), dir: "chk-1".into(), name: "op-0".into() };
        let handle = backend.snapshot().unwrap().persist(&target).unwrap();
        let mut restored = super::super::restore_backend(&BackendConfig::new(BackendKind::Rocksdb), &handle, dir.path(), &work).unwrap();
        assert!(!restored.is_empty().unwrap());
        backend.delete(StateId(0), HashedKey::new(b"key-0", 128)).unwrap();
        assert!(backend.is_empty().unwrap(), "deleted again");
    }

    #[test]
    fn incremental_snapshots_share_unchanged_files_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let mut backend = RocksDbBackend::open(&work, &RocksDbMemory::default()).unwrap();
        put_range(&mut backend, 0..5000);
        let target = |n: u32| SnapshotTarget { root: dir.path().into(), dir: format!("chk-{n}"), name: "op-0".into() };
        let first = backend.snapshot().unwrap().persist(&target(1)).unwrap();
        put_range(&mut backend, 5000..6000);
        let second = backend.snapshot().unwrap().persist(&target(2)).unwrap();
        let (BackendHandle::Rocksdb { shared: a, .. }, BackendHandle::Rocksdb { shared: b, .. }) = (&first, &second)
        else {
            panic!("rocksdb handles")
        };
        assert!(!a.is_empty());
        assert!(a.iter().all(|f| b.contains(f)), "the second checkpoint references the first's files: {a:?} {b:?}");
        assert_eq!(b.len(), a.len() + 1, "one new SST for the new keys");
        let mut restored = super::super::restore_backend(&BackendConfig::new(BackendKind::Rocksdb), &second, dir.path(), &work).unwrap();
        for i in [0u32, 4999, 5000, 5999] {
            let key = format!("key-{i}");
            let value = restored.get(StateId(0), HashedKey::new(key.as_bytes(), 128)).unwrap();
            assert_eq!(value, Some(&i.to_le_bytes()[..]));
        }
        let mut count = 0;
        restored.for_each(&mut |_| count += 1).unwrap();
        assert_eq!(count, 6000);
    }

    /// A RocksDB checkpoint restores into the memory backend (the job
    /// file's backend changed), as savepoints switch both ways: a resume
    /// was refused at the same parallelism and failed on a confusing
    /// message at another (found by the state-backend audit). The scratch
    /// database it is read from is removed.
    #[test]
    fn a_rocksdb_checkpoint_restores_into_the_memory_backend() {
        let dir = tempfile::tempdir().unwrap();
        let mut backend = RocksDbBackend::open(&dir.path().join("work"), &RocksDbMemory::default()).unwrap();
        put_range(&mut backend, 0..3000);
        let target = SnapshotTarget { root: dir.path().into(), dir: "chk-1".into(), name: "op-0".into() };
        let handle = backend.snapshot().unwrap().persist(&target).unwrap();
        let scratch = dir.path().join("scratch");
        let config = BackendConfig::new(BackendKind::Memory);
        let mut restored = super::super::restore_backend(&config, &handle, dir.path(), &scratch).unwrap();
        let mut count = 0;
        restored.for_each(&mut |_| count += 1).unwrap();
        assert_eq!(count, 3000);
        let value = restored.get(StateId(0), HashedKey::new(b"key-2999", 128)).unwrap();
        assert_eq!(value, Some(&2999u32.to_le_bytes()[..]));
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0, "the scratch database is gone");
    }

    /// The first checkpoint after a restore from the checkpoint directory
    /// refers to the restored files' shared copies: it uploaded the whole
    /// state again (the state-backend audit: 802 MB after a kill, and
    /// `shared/` twice the state until the old checkpoints retired).
    #[test]
    fn a_restored_database_checkpoints_incrementally() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let mut backend = RocksDbBackend::open(&work, &RocksDbMemory::default()).unwrap();
        put_range(&mut backend, 0..5000);
        let target = |n: u32| SnapshotTarget { root: dir.path().into(), dir: format!("chk-{n}"), name: "op-0".into() };
        let before = backend.snapshot().unwrap().persist(&target(1)).unwrap();
        let config = BackendConfig::new(BackendKind::Rocksdb);
        let mut restored = super::super::restore_backend(&config, &before, dir.path(), &work).unwrap();
        put_range(restored.as_mut(), 5000..6000);
        let after = restored.snapshot().unwrap().persist(&target(2)).unwrap();
        let (BackendHandle::Rocksdb { shared: a, .. }, BackendHandle::Rocksdb { shared: b, .. }) = (&before, &after) else {
            panic!("rocksdb handles")
        };
        assert!(!a.is_empty() && a.iter().all(|f| b.contains(f)), "the restored files are referred to: {a:?} {b:?}");
        assert_eq!(b.len(), a.len() + 1, "one new SST, uploaded under the new database's id");
        let mut again = super::super::restore_backend(&config, &after, dir.path(), &work).unwrap();
        let mut count = 0;
        again.for_each(&mut |_| count += 1).unwrap();
        assert_eq!(count, 6000);
    }
}
