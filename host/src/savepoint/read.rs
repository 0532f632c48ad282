//! Reading a savepoint: checking it against a job, and handing each new
//! subtask the key groups it owns.

use std::path::{Path, PathBuf};

use super::format::{BROADCAST_MAGIC, KEYED_MAGIC};
use super::write::MAP_PREFIX;
use super::{KeyedFile, MANIFEST_FILE, OperatorSnapshot, SavepointError, SavepointManifest, StateKind};
use crate::checkpoint::CheckpointStorage;
use crate::connectors::{RestoredSplits, assign_splits};
use crate::job::{JobGraph, NodeKind};
use crate::plugin::{BroadcastMaps, InitialState, InstanceMeta};
use crate::state::{
    BackendConfig, HashedKey, RecordReader, RegisteredName, StateError, StateId, StateRegistry, TimeDomain, TimerService,
    key_group_range, open_backend, read_verified, split_expiry,
};

/// An opened savepoint: its verified manifest and where it lives.
#[derive(Debug, Clone)]
pub struct Savepoint {
    pub dir: PathBuf,
    pub manifest: SavepointManifest,
}

/// One keyed entry, as `weir savepoint inspect` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointEntry {
    pub key_group: u32,
    pub state: String,
    pub kind: StateKind,
    pub key: Vec<u8>,
    /// The plugin's bytes (a timer's timestamp).
    pub value: Vec<u8>,
    /// When the value expires, for a state with a time-to-live.
    pub expires_at: Option<i64>,
}

/// What a restore will do, once the savepoint fits the job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreCheck {
    /// Operators and sources of the job the savepoint has no state for:
    /// they start empty (from the beginning).
    pub new_nodes: Vec<String>,
    /// State in the savepoint the job has no node for (only allowed with
    /// `--allow-non-restored-state`): dropped.
    pub dropped: Vec<String>,
}

impl Savepoint {
    /// Opens the savepoint in `dir`, checking its manifest's checksum.
    pub fn open(dir: &Path) -> Result<Savepoint, SavepointError> {
        let path = dir.join(MANIFEST_FILE);
        let not_one = |reason: String| SavepointError::NotASavepoint { path: dir.to_path_buf(), reason };
        let bytes = std::fs::read(&path).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound if !dir.is_dir() => not_one("it does not exist, or is not a directory".into()),
            std::io::ErrorKind::NotFound if CheckpointStorage::is_one_checkpoint(dir) => {
                let parent = dir.parent().unwrap_or(Path::new("."));
                not_one(format!(
                    "it has no {MANIFEST_FILE} file: it is one checkpoint of {0} (`weir checkpoints {0}` lists them). \
                     A job starts from it with `weir run JOB --from-savepoint {1}`, which writes it as a savepoint \
                     first; inspect that one",
                    parent.display(),
                    dir.display()
                ))
            }
            std::io::ErrorKind::NotFound if CheckpointStorage::holds_checkpoints(dir) => {
                not_one(format!(
                    "it has no {MANIFEST_FILE} file: it holds checkpoints (`weir checkpoints {0}` lists them). \
                     A job resumes from its newest complete checkpoint on its own: `weir run` the job file whose \
                     `checkpoint_dir` it is, without --from-savepoint. To start from an older one, name it: \
                     `--from-savepoint {0}/chk-…`, as `weir checkpoints` spells it",
                    dir.display()
                ))
            }
            std::io::ErrorKind::NotFound if super::write::interrupted(dir) => not_one(format!(
                "it has no {MANIFEST_FILE} file: a savepoint is being written there, or was when its host stopped \
                 (its `.writing` mark is there), and it is not whole; if no host is writing it, delete the directory"
            )),
            std::io::ErrorKind::NotFound => not_one(format!("it has no {MANIFEST_FILE} file")),
            _ => not_one(format!("cannot read {}: {error}", path.display())),
        })?;
        let manifest = SavepointManifest::decode(&path, &bytes).map_err(not_one)?;
        Ok(Savepoint { dir: dir.to_path_buf(), manifest })
    }

    /// Checks that every data file is there and matches its checksum.
    pub fn verify(&self) -> Result<(), SavepointError> {
        for file in self.manifest.files() {
            read_verified(&self.dir, file).map_err(|source| self.state_error(source))?;
        }
        Ok(())
    }

    fn state_error(&self, source: StateError) -> SavepointError {
        SavepointError::State { path: self.dir.clone(), source }
    }

    /// Checks that the savepoint can be restored into `graph`: the same
    /// number of key groups, and state only for nodes the job has (unless
    /// `allow_non_restored`).
    pub fn check(&self, graph: &JobGraph, allow_non_restored: bool) -> Result<RestoreCheck, SavepointError> {
        let manifest = &self.manifest;
        if manifest.max_parallelism != graph.max_parallelism {
            return Err(SavepointError::Mismatch(format!(
                "savepoint {} was taken with max_parallelism = {} but the job has {}; the number of key groups \
                 is fixed for the life of a job's state: set max_parallelism = {} in the job file",
                self.dir.display(),
                manifest.max_parallelism,
                graph.max_parallelism,
                manifest.max_parallelism
            )));
        }
        let has = |name: &str, operator: bool| {
            graph.nodes.iter().any(|n| n.name == name && matches!(n.kind, NodeKind::Operator(_)) == operator)
        };
        let mut check = RestoreCheck::default();
        for operator in manifest.operators.iter().filter(|o| !has(&o.uid, true) && !o.keyed.is_empty()) {
            check.dropped.push(format!("operator `{}`", operator.uid));
        }
        for source in manifest.sources.iter().filter(|s| !has(&s.name, false)) {
            check.dropped.push(format!("source `{}`", source.name));
        }
        if !check.dropped.is_empty() && !allow_non_restored {
            return Err(SavepointError::Mismatch(format!(
                "savepoint {} has state for {} which the job does not have (state is matched by operator uid \
                 and source name). Give the operator its old uid, or pass --allow-non-restored-state to drop \
                 that state",
                self.dir.display(),
                check.dropped.join(", ")
            )));
        }
        for node in &graph.nodes {
            let known = match node.kind {
                NodeKind::Operator(_) => manifest.operator(&node.name).is_some(),
                NodeKind::Source(_) => manifest.source(&node.name).is_some(),
                NodeKind::Sink(_) => true,
            };
            if !known {
                check.new_nodes.push(node.describe());
            }
        }
        Ok(check)
    }

    /// The splits subtask `subtask` of `parallelism` of source `name` reads
    /// (`None`: the savepoint has no such source; start from the beginning).
    pub fn source_splits(&self, name: &str, subtask: u32, parallelism: u32) -> Option<RestoredSplits> {
        let source = self.manifest.source(name)?;
        Some(assign_splits(source.splits.clone(), subtask, parallelism))
    }

    /// The state of subtask `subtask` of `parallelism` of operator `uid`:
    /// the entries of the key groups it owns, its timers and the broadcast
    /// maps, in a fresh `backend` (`None` if the savepoint has no state
    /// for that uid).
    pub fn operator_state(
        &self,
        uid: &str,
        subtask: u32,
        parallelism: u32,
        backend: &BackendConfig,
        work_dir: &Path,
    ) -> Result<Option<InitialState>, SavepointError> {
        let Some(operator) = self.manifest.operator(uid) else { return Ok(None) };
        let max_parallelism = self.manifest.max_parallelism;
        let groups = key_group_range(subtask, max_parallelism, parallelism);
        let error = |source| self.state_error(source);
        let (registry, ids) = registry(operator);
        let mut backend = open_backend(backend, work_dir).map_err(error)?;
        let mut timers = TimerService::default();
        for file in operator.keyed.iter().filter(|f| f.first_key_group < groups.end && f.last_key_group >= groups.start) {
            self.read_groups(file, &groups, &mut |group, state, key, value| {
                match (ids.get(state as usize).copied().flatten(), timer_domain(operator, state)) {
                    (Some(id), _) => backend.put(id, HashedKey::in_group(key, group as u16), value),
                    (None, Some(domain)) => {
                        let timestamp = i64::from_le_bytes(value.try_into().map_err(|_| bad_timer(&self.dir))?);
                        timers.register(domain, timestamp, key);
                        Ok(())
                    }
                    (None, None) => Err(unknown_state(&self.dir, state)),
                }
            })
            .map_err(error)?;
        }
        let broadcast = self.broadcast(operator).map_err(error)?;
        Ok(Some(InitialState {
            backend,
            meta: Some(InstanceMeta { registry, broadcast, timers, watermark: operator.watermark.unwrap_or(i64::MIN) }),
            max_parallelism,
            key_groups: groups,
        }))
    }

    /// The names operator `uid`'s value and map states are stored under
    /// (with the time-to-live each was stored with), as a restored
    /// instance's registry holds them: empty if it has none.
    pub fn state_registry(&self, uid: &str) -> StateRegistry {
        self.manifest.operator(uid).map(|operator| registry(operator).0).unwrap_or_default()
    }

    /// Every keyed entry of operator `uid`, in key-group order.
    pub fn entries(&self, uid: &str, f: &mut dyn FnMut(SavepointEntry)) -> Result<(), SavepointError> {
        let Some(operator) = self.manifest.operator(uid) else { return Ok(()) };
        let all = 0..self.manifest.max_parallelism;
        for file in &operator.keyed {
            self.read_groups(file, &all, &mut |key_group, state, key, value| {
                let descriptor = operator.states.get(state as usize).ok_or_else(|| unknown_state(&self.dir, state))?;
                let (value, expires_at) = match descriptor.expires {
                    true => split_expiry(value).map(|(value, at)| (value, Some(at))).ok_or_else(|| no_expiry(&self.dir, descriptor))?,
                    false => (value, None),
                };
                f(SavepointEntry {
                    key_group,
                    state: descriptor.name.clone(),
                    kind: descriptor.kind,
                    key: key.to_vec(),
                    value: value.to_vec(),
                    expires_at,
                });
                Ok(())
            })
            .map_err(|source| self.state_error(source))?;
        }
        Ok(())
    }

    /// Calls `f(group, state, key, value)` for each entry of `file` in the
    /// key groups `groups`, going straight to them by the index.
    fn read_groups(
        &self,
        file: &KeyedFile,
        groups: &std::ops::Range<u32>,
        f: &mut dyn FnMut(u32, u32, &[u8], &[u8]) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let bytes = read_verified(&self.dir, &file.file)?;
        let path = self.dir.join(&file.file.path);
        RecordReader::new(&path, &bytes, KEYED_MAGIC)?;
        for index in file.index.iter().filter(|i| groups.contains(&i.key_group)) {
            let start = usize::try_from(index.offset).ok().filter(|&o| o >= 8 && o <= bytes.len());
            let Some(start) = start else {
                return Err(StateError::Corrupt { path, reason: format!("key group {} is out of the file", index.key_group) });
            };
            let mut reader = RecordReader::resume(&path, &bytes[start..]);
            for _ in 0..index.entries {
                let group = u32::from(reader.u16()?);
                let state = reader.u32()?;
                let key = reader.bytes()?;
                let value = reader.bytes()?;
                if group != index.key_group {
                    return Err(StateError::Corrupt { path, reason: format!("the index of key group {} is wrong", index.key_group) });
                }
                f(group, state, key, value)?;
            }
        }
        Ok(())
    }

    /// Operator `uid`'s broadcast maps (none if it has no state here).
    pub fn broadcast_maps(&self, uid: &str) -> Result<BroadcastMaps, StateError> {
        match self.manifest.operator(uid) {
            Some(operator) => self.broadcast(operator),
            None => Ok(BroadcastMaps::default()),
        }
    }

    fn broadcast(&self, operator: &OperatorSnapshot) -> Result<BroadcastMaps, StateError> {
        let Some(file) = &operator.broadcast else { return Ok(BroadcastMaps::default()) };
        let bytes = read_verified(&self.dir, file)?;
        let path = self.dir.join(&file.path);
        BroadcastMaps::decode(&mut RecordReader::new(&path, &bytes, BROADCAST_MAGIC)?)
    }
}

/// The registry a restored instance starts with (value and map states, in
/// descriptor order), and each descriptor's id in it (`None` for timers).
fn registry(operator: &OperatorSnapshot) -> (StateRegistry, Vec<Option<StateId>>) {
    let mut registry = StateRegistry::default();
    let ids = operator
        .states
        .iter()
        .map(|state| match state.kind {
            StateKind::Value | StateKind::Map => {
                let prefix = if state.kind == StateKind::Map { MAP_PREFIX } else { "" };
                Some(registry.intern(&RegisteredName::join(prefix, &state.name, state.expires)))
            }
            StateKind::EventTimer | StateKind::ProcessingTimer => None,
        })
        .collect();
    (registry, ids)
}

fn timer_domain(operator: &OperatorSnapshot, state: u32) -> Option<TimeDomain> {
    match operator.states.get(state as usize)?.kind {
        StateKind::EventTimer => Some(TimeDomain::EventTime),
        StateKind::ProcessingTimer => Some(TimeDomain::ProcessingTime),
        _ => None,
    }
}

fn unknown_state(dir: &Path, state: u32) -> StateError {
    StateError::Corrupt { path: dir.join(MANIFEST_FILE), reason: format!("an entry refers to state {state}, which has no descriptor") }
}

fn no_expiry(dir: &Path, state: &super::format::StateDescriptor) -> StateError {
    let reason = format!("a value of state `{}`, which expires, is too short to hold the time it expires at", state.name);
    StateError::Corrupt { path: dir.to_path_buf(), reason }
}

fn bad_timer(dir: &Path) -> StateError {
    StateError::Corrupt { path: dir.to_path_buf(), reason: "a timer's timestamp is not 8 bytes".into() }
}
