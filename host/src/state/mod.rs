//! Keyed state owned by the host.
//!
//! Every operator subtask has its own [`KeyedStateBackend`] holding the
//! state of the keys whose key groups ([`key_group`]) are assigned to it.
//! Plugins reach it only through the `state` WIT interface, scoped to the
//! keys of the batch they are processing. State is addressed by a
//! [`StateId`], interned from the name the plugin gives it.
//!
//! Two backends implement the trait: [`MemoryBackend`] (hash tables) and
//! [`RocksDbBackend`] (embedded RocksDB, keys prefixed by key group, may
//! exceed memory). Both take snapshots in two steps, as a checkpoint needs:
//! [`KeyedStateBackend::snapshot`] captures the state synchronously — while
//! the task is paused at a barrier — and [`StateSnapshot::persist`] writes it
//! to the checkpoint directory later, on another thread, while processing
//! goes on. The files written are described by a [`BackendHandle`] that a
//! checkpoint manifest records, and [`restore_backend`] rebuilds a backend
//! from one.

mod error;
mod file;
mod hot;
mod key_group;
mod map_index;
mod map_keys;
mod memory;
mod memory_chain;
mod rocksdb;
mod rocksdb_memory;
mod size;
mod timer_key;
mod timers;
mod ttl;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use error::StateError;
pub use file::{FileRef, RecordReader, RecordWriter, header_version, read_verified, strip_header, with_header, write_verified};
pub use key_group::{
    DEFAULT_MAX_PARALLELISM, KeyGroupRange, MAX_PARALLELISM_RANGE, key_group_for, key_group_of_hash, key_group_range,
    key_hash, subtask_for_key_group,
};
pub use map_keys::{map_entry_hash, map_entry_key, map_entry_key_hashed, split_map_entry};
pub use memory::MemoryBackend;
pub use rocksdb::RocksDbBackend;
pub use rocksdb_memory::RocksDbMemory;
pub use size::{StateSize, StateSizeGauge};
pub use ttl::{ExpiringStates, TTL_PREFIX, expired, expiry_after, split_expiry, with_expiry};
pub use timer_key::TimerKey;
pub use timers::{FiredTimer, FiringBudget, FiringCall, TimeDomain, TimerService, now_ms, processing_timers_due_at};

/// A state of one operator, by index into its [`StateRegistry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub u32);

/// The names of an operator's states, interned to [`StateId`]s in order of
/// first use. Snapshots record the names, and a restored registry interns
/// them again in the same order, so ids stay valid across a restore.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StateRegistry {
    names: Vec<String>,
}

/// The names of map states are registered under this prefix, a namespace
/// apart from value states of the same name (which may not begin with it).
pub const MAP_PREFIX: &str = "map:";

/// How many states (value and map, or broadcast maps) an operator may
/// register: the host keeps every name for the operator's life and writes
/// each into every checkpoint, so a plugin naming states by key or by event
/// would fill the host's memory and disk (found by the sandbox audit: one
/// plugin grew a host to 11 GiB in 12 s, aborting every job on it).
pub const MAX_STATES: usize = 4096;

/// The longest state name, in bytes.
pub const MAX_STATE_NAME_BYTES: usize = 1024;

/// A state a plugin may not register.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateNameError {
    #[error(
        "a state name of {bytes} bytes (`{start}…`): names are at most {MAX_STATE_NAME_BYTES} bytes — a state is \
         named once, in code, not by data"
    )]
    TooLong { bytes: usize, start: String },
    #[error(
        "state `{name}` would be its operator's state number {}, past the {MAX_STATES} an operator may have — a state \
         is named once, in code: keep per-key data in the values of one state (a map state for several entries per key)",
        MAX_STATES + 1
    )]
    TooMany { name: String },
    #[error("value state `{name}`: names beginning `{MAP_PREFIX}` or `{TTL_PREFIX}` are the host's; choose another name")]
    Reserved { name: String },
    #[error(
        "{kind} `{name}` is kept {had} a time-to-live (in this job's snapshots, or as this instance first opened it), \
         and a state cannot {change} one: open it {had} one, as before, or give the state {wanted} one a new name"
    )]
    TtlChanged { kind: &'static str, name: String, had: &'static str, change: &'static str, wanted: &'static str },
}

impl StateRegistry {
    /// A registry that already knows `names`, in order.
    pub fn with_names(names: Vec<String>) -> Self {
        StateRegistry { names }
    }

    /// [`StateRegistry::intern`] for the name a plugin gives, registered
    /// as `prefix` + `name`: at most [`MAX_STATE_NAME_BYTES`] long, and a
    /// new one only while the registry holds fewer than [`MAX_STATES`].
    /// The state must not be registered with a time-to-live.
    pub fn register(&mut self, prefix: &str, name: &str) -> Result<StateId, StateNameError> {
        self.register_as(prefix, name, false)
    }

    /// [`StateRegistry::register`] for a state whose values expire,
    /// registered as [`TTL_PREFIX`] + `prefix` + `name`; it must not be
    /// registered without one.
    pub fn register_expiring(&mut self, prefix: &str, name: &str) -> Result<StateId, StateNameError> {
        self.register_as(prefix, name, true)
    }

    fn register_as(&mut self, prefix: &str, name: &str, expiring: bool) -> Result<StateId, StateNameError> {
        let registered = RegisteredName::join(prefix, name, expiring);
        let other = RegisteredName::join(prefix, name, !expiring);
        if let Some(index) = self.names.iter().position(|n| *n == registered) {
            return Ok(StateId(index as u32));
        }
        if self.names.contains(&other) {
            return Err(ttl_changed(prefix, name, expiring));
        }
        if name.len() > MAX_STATE_NAME_BYTES {
            let start: String = name.chars().take(40).collect();
            return Err(StateNameError::TooLong { bytes: name.len(), start: start.escape_debug().to_string() });
        }
        if self.names.len() >= MAX_STATES {
            return Err(StateNameError::TooMany { name: name.escape_debug().to_string() });
        }
        self.names.push(registered);
        Ok(StateId(self.names.len() as u32 - 1))
    }

    /// [`StateRegistry::register`] (or [`StateRegistry::register_expiring`])
    /// for a value state's name, which may not begin with [`MAP_PREFIX`]
    /// or [`TTL_PREFIX`]: it would be the map state, or the expiring state,
    /// of the rest.
    pub fn register_value(&mut self, name: &str, expiring: bool) -> Result<StateId, StateNameError> {
        if name.starts_with(MAP_PREFIX) || name.starts_with(TTL_PREFIX) {
            return Err(StateNameError::Reserved { name: name.escape_debug().to_string() });
        }
        self.register_as("", name, expiring)
    }

    /// The states whose values expire.
    pub fn expiring(&self) -> Vec<StateId> {
        let expiring = self.names.iter().enumerate().filter(|(_, name)| RegisteredName::split(name).expiring);
        expiring.map(|(index, _)| StateId(index as u32)).collect()
    }

    /// The id of state `name`, registering it on first use.
    pub fn intern(&mut self, name: &str) -> StateId {
        let index = match self.names.iter().position(|n| n == name) {
            Some(index) => index,
            None => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
        };
        StateId(index as u32)
    }

    /// The name of `id`.
    pub fn name(&self, id: StateId) -> &str {
        &self.names[id.0 as usize]
    }

    /// All registered names, by id.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// A key with its in-memory hash and its key group, computed once per
/// batch for the reads and writes of that key. (The in-memory hash is not
/// the key-group hash: it may change.) The entries of a map state are
/// stored under a composite key but belong to their primary key's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashedKey<'a> {
    pub key: &'a [u8],
    pub hash: u64,
    pub group: u16,
}

impl<'a> HashedKey<'a> {
    /// `key`, in its key group among `max_parallelism`.
    #[inline]
    pub fn new(key: &'a [u8], max_parallelism: u32) -> Self {
        Self::with_hash(key, key_hash(key), max_parallelism)
    }

    /// `key`, whose [`key_hash`] is `hash`, computed before.
    #[inline]
    pub fn with_hash(key: &'a [u8], hash: u64, max_parallelism: u32) -> Self {
        debug_assert_eq!(hash, key_hash(key));
        HashedKey { key, hash, group: key_group_of_hash(hash, max_parallelism) as u16 }
    }

    /// A storage key derived from a primary key in key group `group`.
    pub fn in_group(key: &'a [u8], group: u16) -> Self {
        HashedKey { key, hash: key_hash(key), group }
    }

    /// The hash a subtask's hash tables place the key by: [`Self::hash`]
    /// with its halves swapped.
    ///
    /// A key's group is the low bits of its hash, and a subtask holds only
    /// the keys of its groups, so those bits are alike across its keys —
    /// one of seven constant at parallelism 2, all seven at 128 — while a
    /// hash table picks an entry's bucket by the low bits (hashbrown: its
    /// tag by the top seven). Placed by the raw hash, a subtask's entries
    /// would crowd into a half, or a 128th, of the buckets and probe past
    /// each other; the middle bits are free of the group.
    #[inline]
    pub fn table_hash(&self) -> u64 {
        table_hash(self.hash)
    }
}

/// [`HashedKey::table_hash`] of a key whose hash is `hash`.
#[inline]
pub fn table_hash(hash: u64) -> u64 {
    hash.rotate_left(32)
}

/// A keyed state's name as its operator's registry holds it (and
/// checkpoints record it), in parts: the plugin's name, after
/// [`MAP_PREFIX`] for a map state, and all after [`TTL_PREFIX`] if its
/// values expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisteredName<'a> {
    pub name: &'a str,
    pub map: bool,
    pub expiring: bool,
}

impl<'a> RegisteredName<'a> {
    /// The registered name of `name` under `prefix` (`MAP_PREFIX` or none).
    pub fn join(prefix: &str, name: &str, expiring: bool) -> String {
        let ttl = if expiring { TTL_PREFIX } else { "" };
        format!("{ttl}{prefix}{name}")
    }

    /// The parts of `registered`.
    pub fn split(registered: &'a str) -> Self {
        let (rest, expiring) = match registered.strip_prefix(TTL_PREFIX) {
            Some(rest) => (rest, true),
            None => (registered, false),
        };
        match rest.strip_prefix(MAP_PREFIX) {
            Some(name) => RegisteredName { name, map: true, expiring },
            None => RegisteredName { name: rest, map: false, expiring },
        }
    }
}

/// The refusal to open state `name` (registered under `prefix`) with a
/// time-to-live (`expiring`) or without, when it is registered the other
/// way.
fn ttl_changed(prefix: &str, name: &str, expiring: bool) -> StateNameError {
    let kind = if prefix == MAP_PREFIX { "map state" } else { "value state" };
    let name = name.escape_debug().to_string();
    if expiring {
        StateNameError::TtlChanged { kind, name, had: "without", change: "gain", wanted: "with" }
    } else {
        StateNameError::TtlChanged { kind, name, had: "with", change: "lose", wanted: "without" }
    }
}

/// One stored entry, as snapshots and iteration see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub group: u16,
    pub state: StateId,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// Storage for the keyed state of one operator subtask.
pub trait KeyedStateBackend: Send {
    /// The value of `state` for `key`; the slice lives until the next call.
    fn get(&mut self, state: StateId, key: HashedKey<'_>) -> Result<Option<&[u8]>, StateError>;
    /// Sets the value of `state` for `key`.
    fn put(&mut self, state: StateId, key: HashedKey<'_>, value: &[u8]) -> Result<(), StateError>;
    /// Removes the value of `state` for `key`.
    fn delete(&mut self, state: StateId, key: HashedKey<'_>) -> Result<(), StateError>;
    /// Starts loading, without waiting, what a lookup in `state` of a key
    /// whose [`HashedKey::hash`] is `hash` reads first: a caller about to
    /// look up many keys hints a few ([`PREFETCH_AHEAD`]) ahead, so that
    /// their cache misses overlap. Only a hint; by default nothing.
    ///
    /// [`PREFETCH_AHEAD`]: crate::prefetch::PREFETCH_AHEAD
    fn prefetch(&self, _state: StateId, _hash: u64) {}
    /// One key's entries of map state `state` (stored as
    /// [`map_keys`] lays them out), in byte order of their sub-keys: those
    /// whose sub-key sorts after `after` (all when `None`), at most
    /// `limit`, each passed to `f(sub_key, value)`. Returns whether more
    /// follow.
    fn map_entries(
        &mut self,
        state: StateId,
        key: HashedKey<'_>,
        after: Option<&[u8]>,
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<bool, StateError>;
    /// Removes entries of the expiring `states` ([`ttl`]) that expired at
    /// `now` — those in a bounded part of its storage, going on from there
    /// the next time, or has them removed in the background; returns how
    /// many it removed at once.
    fn purge_expired(&mut self, states: &[StateId], now: i64) -> Result<u64, StateError>;
    /// Every entry, in no particular order.
    fn for_each(&mut self, f: &mut dyn FnMut(&Entry)) -> Result<(), StateError>;
    /// Whether no entry is stored (a subtask that starts with nothing
    /// restored). Cheap: it stops at the first entry.
    fn is_empty(&mut self) -> Result<bool, StateError>;
    /// How much it holds ([`StateSize`]): cheap, an estimate where the
    /// backend keeps no exact count.
    fn size(&self) -> StateSize;
    /// Captures the current state for a checkpoint. Cheap enough to run
    /// while the task waits; the expensive part is [`StateSnapshot::persist`].
    fn snapshot(&mut self) -> Result<Box<dyn StateSnapshot>, StateError>;
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
}

/// A captured state, not yet written.
pub trait StateSnapshot: Send {
    /// Writes the snapshot's files under `target` and describes them.
    fn persist(self: Box<Self>, target: &SnapshotTarget) -> Result<BackendHandle, StateError>;
}

/// Where a subtask's snapshot files go: `root` is the checkpoint directory,
/// `dir` the checkpoint's own subdirectory (relative to `root`), `name` the
/// subtask's file prefix. Files that several checkpoints may share go to
/// `root/shared/`.
#[derive(Debug, Clone)]
pub struct SnapshotTarget {
    pub root: std::path::PathBuf,
    pub dir: String,
    pub name: String,
}

impl SnapshotTarget {
    /// The path (relative to `root`) of a private file of this snapshot.
    pub fn private(&self, suffix: &str) -> String {
        format!("{}/{}.{suffix}", self.dir, self.name)
    }
}

/// The state backends a job can choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Memory,
    Rocksdb,
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendKind::Memory => "memory",
            BackendKind::Rocksdb => "rocksdb",
        })
    }
}

/// A job's backend and its settings: what every subtask's backend is
/// opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackendConfig {
    pub kind: BackendKind,
    /// Memory budgets of each subtask's database (RocksDB only).
    pub rocksdb: RocksDbMemory,
}

impl BackendConfig {
    /// `kind` with its default settings.
    pub fn new(kind: BackendKind) -> Self {
        BackendConfig { kind, rocksdb: RocksDbMemory::default() }
    }
}

/// The files of one backend snapshot, as a checkpoint manifest records them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum BackendHandle {
    /// One file in the canonical keyed-state format ([`file`]), then the
    /// changes after it, in order ([`memory_chain`]).
    Memory {
        entries: FileRef,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        changes: Vec<FileRef>,
    },
    /// A RocksDB checkpoint: SST files (shared between checkpoints, never
    /// rewritten) and the small files describing the database.
    Rocksdb { shared: Vec<FileRef>, private: Vec<FileRef> },
}

impl BackendHandle {
    /// Every file the handle refers to.
    pub fn files(&self) -> Vec<&FileRef> {
        match self {
            BackendHandle::Memory { entries, changes } => std::iter::once(entries).chain(changes).collect(),
            BackendHandle::Rocksdb { shared, private } => shared.iter().chain(private).collect(),
        }
    }
}

/// Creates an empty backend as `config` says; RocksDB keeps its files in a
/// fresh directory under `work_dir`.
pub fn open_backend(config: &BackendConfig, work_dir: &Path) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    Ok(match config.kind {
        BackendKind::Memory => Box::new(MemoryBackend::new()),
        BackendKind::Rocksdb => Box::new(RocksDbBackend::open(work_dir, &config.rocksdb)?),
    })
}

/// Rebuilds a backend of `kind` from a snapshot whose files are under
/// `root`. A snapshot of the other backend is read entry by entry.
/// Calls `f(group, state, key, value)` for every entry of a snapshot,
/// whichever backend wrote it (to rewrite it as a savepoint).
pub fn visit_snapshot(
    config: &BackendConfig,
    handle: &BackendHandle,
    root: &Path,
    work_dir: &Path,
    f: &mut dyn FnMut(u16, StateId, &[u8], &[u8]),
) -> Result<(), StateError> {
    match handle {
        BackendHandle::Memory { entries, changes } if changes.is_empty() => {
            memory::visit_entries(root, entries, &mut |group, state, key, value| {
                f(group, state, key, value);
                Ok(())
            })
        }
        BackendHandle::Memory { .. } | BackendHandle::Rocksdb { .. } => {
            restore_backend(config, handle, root, work_dir)?.for_each(&mut |e| f(e.group, e.state, &e.key, &e.value))
        }
    }
}

pub fn restore_backend(
    config: &BackendConfig,
    handle: &BackendHandle,
    root: &Path,
    work_dir: &Path,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    match (config.kind, handle) {
        (BackendKind::Rocksdb, BackendHandle::Rocksdb { shared, private }) => {
            Ok(Box::new(RocksDbBackend::restore(work_dir, root, shared, private, &config.rocksdb)?))
        }
        (_, BackendHandle::Memory { entries, changes }) => {
            let mut backend = open_backend(config, work_dir)?;
            memory::read_entries(root, entries, &mut |entry| {
                backend.put(entry.state, HashedKey::in_group(&entry.key, entry.group), &entry.value)
            })?;
            for file in changes {
                memory::apply_changes(root, file, backend.as_mut())?;
            }
            Ok(backend)
        }
        (BackendKind::Memory, BackendHandle::Rocksdb { shared, private }) => {
            // The job's backend changed since (as a savepoint switches
            // backends both ways, so does a resume): the entries are read
            // out of a scratch copy of the database, removed after.
            let mut scratch = RocksDbBackend::restore(work_dir, root, shared, private, &config.rocksdb)?;
            let mut backend = open_backend(config, work_dir)?;
            let mut failed = None;
            scratch.for_each(&mut |entry| {
                if failed.is_none() {
                    failed = backend.put(entry.state, HashedKey::in_group(&entry.key, entry.group), &entry.value).err();
                }
            })?;
            failed.map_or(Ok(backend), Err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value state named `map:w` was the map state `w` (found by the
    /// sandbox audit: a savepoint listed its entries as the map's, and
    /// every upgrade was refused for a malformed map key).
    #[test]
    fn value_and_map_states_of_a_name_stay_apart() {
        let mut registry = StateRegistry::default();
        let map = registry.register(MAP_PREFIX, "w").unwrap();
        let value = registry.register_value("w", false).unwrap();
        assert_ne!(map, value);
        assert_eq!(registry.register(MAP_PREFIX, "w").unwrap(), map, "registered once");
        assert!(matches!(registry.register_value("map:w", false), Err(StateNameError::Reserved { .. })));
        assert!(matches!(registry.register_value("ttl:w", true), Err(StateNameError::Reserved { .. })));
        assert_eq!(registry.names(), ["map:w", "w"]);
    }

    /// A state keeps the choice it was first registered with — in this
    /// instance or in the snapshot it restored — so that no value is read
    /// in the other format; the refusal says which way it is kept.
    #[test]
    fn a_state_cannot_gain_or_lose_a_time_to_live() {
        let mut registry = StateRegistry::default();
        let seen = registry.register_value("seen", true).unwrap();
        let carts = registry.register(MAP_PREFIX, "carts").unwrap();
        assert_eq!(registry.register_value("seen", true).unwrap(), seen);
        assert_eq!(registry.names(), ["ttl:seen", "map:carts"]);
        assert_eq!(registry.expiring(), [seen]);
        assert_eq!(RegisteredName::split("ttl:map:w"), RegisteredName { name: "w", map: true, expiring: true });
        assert_eq!(RegisteredName::split(&RegisteredName::join(MAP_PREFIX, "w", false)), RegisteredName { name: "w", map: true, expiring: false });

        let restored = StateRegistry::with_names(registry.names().to_vec());
        for mut registry in [registry, restored] {
            let lose = registry.register_value("seen", false).unwrap_err().to_string();
            assert!(lose.contains("value state `seen` is kept with a time-to-live") && lose.contains("cannot lose one"), "{lose}");
            let gain = registry.register_expiring(MAP_PREFIX, "carts").unwrap_err().to_string();
            assert!(gain.contains("map state `carts` is kept without a time-to-live") && gain.contains("cannot gain one"), "{gain}");
            assert_eq!(registry.register(MAP_PREFIX, "carts").unwrap(), carts);
        }
    }

    /// The keys of one key group — all a subtask holds at parallelism 128
    /// — share the low bits of their hash, but not of their table hash:
    /// they spread over a table's buckets (and its tags), not into one in
    /// 128.
    #[test]
    fn a_key_groups_keys_spread_over_the_buckets_of_a_table() {
        let owned: Vec<String> = (0..100_000).map(|i| format!("key-{i}")).collect();
        let group: Vec<HashedKey<'_>> =
            owned.iter().map(|k| HashedKey::new(k.as_bytes(), 128)).filter(|k| k.group == 5).collect();
        assert!(group.len() > 500, "{} keys in group 5", group.len());
        let distinct = |bits: &dyn Fn(&HashedKey<'_>) -> u64| {
            group.iter().map(bits).collect::<std::collections::HashSet<_>>().len()
        };
        assert_eq!(distinct(&|k| k.hash & 127), 1, "the raw hash's low bits are the group");
        assert!(distinct(&|k| k.table_hash() & 127) > 120, "the bucket bits of a table of 128 buckets");
        assert!(distinct(&|k| k.table_hash() >> 57) > 120, "hashbrown's tag: the top seven bits");
    }
    /// Every backend lists one key's map entries in sub-key order, a page
    /// at a time, and keeps doing so as entries come and go — the memory
    /// backend's index is built on the first listing and kept from then on.
    #[test]
    fn backends_list_one_keys_map_entries_in_pages_as_they_change() {
        let work = tempfile::tempdir().unwrap();
        let memory = BackendConfig::new(BackendKind::Memory);
        let rocksdb = BackendConfig::new(BackendKind::Rocksdb);
        for config in [memory, rocksdb] {
            let mut backend = open_backend(&config, work.path()).unwrap();
            let map = StateId(1);
            let mut stored = Vec::new();
            let mut put = |backend: &mut Box<dyn KeyedStateBackend>, key: &str, sub_key: &str| {
                let entry = map_entry_key(HashedKey::new(key.as_bytes(), 128), sub_key.as_bytes(), &mut stored);
                backend.put(map, entry, format!("{key}/{sub_key}").as_bytes()).unwrap();
            };
            for i in (0..50).rev() {
                put(&mut backend, "ann", &format!("{i:02}"));
                put(&mut backend, "an", &format!("n{i:02}"));
            }
            backend.put(StateId(0), HashedKey::new(b"ann", 128), b"a value state").unwrap();
            assert_eq!(listing(&mut backend, map, "ann", 20), (0..50).map(|i| format!("{i:02}")).collect::<Vec<_>>());

            put(&mut backend, "ann", "50");
            let mut deleted = Vec::new();
            backend.delete(map, map_entry_key(HashedKey::new(b"ann", 128), b"07", &mut deleted)).unwrap();
            let listed = listing(&mut backend, map, "ann", 20);
            assert_eq!(listed.len(), 50, "{:?}: one added, one deleted", config.kind);
            assert!(!listed.contains(&"07".to_owned()) && listed.last() == Some(&"50".to_owned()));
            assert_eq!(listing(&mut backend, map, "nobody", 20), Vec::<String>::new());
            assert_eq!(listing(&mut backend, StateId(0), "ann", 20), Vec::<String>::new(), "another state's");
        }
    }

    /// A key's sub-keys, listed `page` at a time; checks the values.
    fn listing(backend: &mut Box<dyn KeyedStateBackend>, state: StateId, key: &str, page: usize) -> Vec<String> {
        let mut listed: Vec<String> = Vec::new();
        loop {
            let after = listed.last().cloned();
            let mut values = Vec::new();
            let more = backend
                .map_entries(state, HashedKey::new(key.as_bytes(), 128), after.as_deref().map(str::as_bytes), page, &mut |sub_key, value| {
                    let sub_key = String::from_utf8(sub_key.to_vec()).unwrap();
                    values.push((sub_key.clone(), String::from_utf8(value.to_vec()).unwrap()));
                    listed.push(sub_key);
                })
                .unwrap();
            assert!(values.len() <= page);
            assert!(values.iter().all(|(sub_key, value)| *value == format!("{key}/{sub_key}")), "{values:?}");
            if !more {
                return listed;
            }
        }
    }
}
