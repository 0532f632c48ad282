//! Writing a savepoint from a completed checkpoint.

use std::path::{Path, PathBuf};

use tracing::info;

use super::format::{BROADCAST_MAGIC, KEYED_MAGIC, dir_name};
use super::{
    FORMAT_VERSION, JobDefinition, KeyGroupIndex, KeyedFile, MANIFEST_FILE, OperatorSnapshot, SavepointError,
    SavepointManifest, SourceSnapshot, StateDescriptor, StateKind,
};
use crate::checkpoint::{Manifest, TaskState};
use crate::plugin::{InstanceMeta, decode_meta, now_ms};
use crate::state::{
    BackendKind, FileRef, RecordWriter, StateError, TimeDomain, key_group_for, read_verified, restore_backend,
    write_verified,
};

/// Map states are registered under this prefix in an operator's registry.
pub(super) const MAP_PREFIX: &str = "map:";

/// What a savepoint records about the job besides its state.
#[derive(Debug, Clone)]
pub struct JobDescription {
    pub name: String,
    pub max_parallelism: u32,
    pub backend: BackendKind,
    pub definition: Option<JobDefinition>,
    pub nodes: Vec<NodeDescription>,
}

/// A source or operator of the job (sinks keep no state).
#[derive(Debug, Clone)]
pub enum NodeDescription {
    Source { name: String, parallelism: u32 },
    Operator { uid: String, plugin: PathBuf, digest: Option<String>, parallelism: u32 },
}

/// One keyed entry, as sorted into a savepoint.
type SortedEntry = (u32, u32, Vec<u8>, Vec<u8>);

/// Writes the state of checkpoint `manifest` (in `checkpoint_root`) as a
/// savepoint in `dir`, which must not hold one already. `work_dir` is where
/// a RocksDB checkpoint is opened to be read.
pub fn write_savepoint(
    manifest: &Manifest,
    checkpoint_root: &Path,
    job: &JobDescription,
    dir: &Path,
    work_dir: &Path,
) -> Result<SavepointManifest, SavepointError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SavepointError::Io { path, source }
    };
    if dir.join(MANIFEST_FILE).exists() {
        return Err(SavepointError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a savepoint is there already; choose another directory"),
        });
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let state_error = |source| SavepointError::State { path: dir.to_path_buf(), source };
    let mut operators = Vec::new();
    let mut sources = Vec::new();
    for node in &job.nodes {
        match node {
            NodeDescription::Source { name, parallelism } => sources.push(SourceSnapshot {
                name: name.clone(),
                parallelism: *parallelism,
                splits: manifest.source_splits(name),
            }),
            NodeDescription::Operator { uid, plugin, digest, parallelism } => {
                let tasks: Vec<&TaskState> = (0..*parallelism).filter_map(|s| manifest.task(uid, s)).collect();
                let mut snapshot = OperatorSnapshot {
                    uid: uid.clone(),
                    plugin: plugin.clone(),
                    plugin_sha256: digest.clone(),
                    parallelism: *parallelism,
                    states: Vec::new(),
                    keyed: Vec::new(),
                    broadcast: None,
                };
                for task in tasks {
                    write_subtask(&mut snapshot, task, job, checkpoint_root, dir, work_dir).map_err(state_error)?;
                }
                operators.push(snapshot);
            }
        }
    }
    let savepoint = SavepointManifest {
        format: FORMAT_VERSION,
        job: job.name.clone(),
        checkpoint: manifest.checkpoint,
        taken_at_ms: now_ms(),
        max_parallelism: job.max_parallelism,
        job_file: job.definition.clone(),
        operators,
        sources,
    };
    write_manifest(dir, &savepoint).map_err(io(dir))?;
    info!(job = %job.name, checkpoint = manifest.checkpoint, dir = %dir.display(), "savepoint written");
    Ok(savepoint)
}

/// Writes the manifest atomically: to a temporary name, synced, renamed.
fn write_manifest(dir: &Path, savepoint: &SavepointManifest) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&savepoint.encode())?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(MANIFEST_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Adds one operator subtask's checkpointed state to `snapshot`.
fn write_subtask(
    snapshot: &mut OperatorSnapshot,
    task: &TaskState,
    job: &JobDescription,
    checkpoint_root: &Path,
    dir: &Path,
    work_dir: &Path,
) -> Result<(), StateError> {
    let meta = match &task.meta {
        Some(file) => decode_meta(&checkpoint_root.join(&file.path), &read_verified(checkpoint_root, file)?)?,
        None => InstanceMeta::default(),
    };
    let mut ids: Vec<u32> = Vec::new();
    for name in meta.registry.names() {
        ids.push(descriptor(&mut snapshot.states, name));
    }
    let mut entries: Vec<SortedEntry> = Vec::new();
    if let Some(handle) = &task.keyed {
        let mut backend = restore_backend(job.backend, handle, checkpoint_root, work_dir)?;
        backend.for_each(&mut |entry| {
            entries.push((u32::from(entry.group), ids[entry.state.0 as usize], entry.key.clone(), entry.value.clone()));
        })?;
    }
    for (domain, timestamp, key) in meta.timers.all() {
        let kind = match domain {
            TimeDomain::EventTime => StateKind::EventTimer,
            TimeDomain::ProcessingTime => StateKind::ProcessingTimer,
        };
        let id = timer_descriptor(&mut snapshot.states, kind);
        let group = key_group_for(key, job.max_parallelism);
        entries.push((group, id, key.to_vec(), timestamp.to_le_bytes().to_vec()));
    }
    if snapshot.broadcast.is_none() && !meta.broadcast.registry.names().is_empty() {
        snapshot.broadcast = Some(write_broadcast(&meta, dir, &snapshot.uid)?);
    }
    if !entries.is_empty() {
        entries.sort_unstable();
        snapshot.keyed.push(write_keyed(&entries, dir, &snapshot.uid)?);
    }
    Ok(())
}

/// The id of the value or map state `name` (as registered), adding it.
fn descriptor(states: &mut Vec<StateDescriptor>, registered: &str) -> u32 {
    let (name, kind) = match registered.strip_prefix(MAP_PREFIX) {
        Some(name) => (name, StateKind::Map),
        None => (registered, StateKind::Value),
    };
    find_or_add(states, name, kind)
}

fn timer_descriptor(states: &mut Vec<StateDescriptor>, kind: StateKind) -> u32 {
    let name = if kind == StateKind::EventTimer { "event-time timers" } else { "processing-time timers" };
    find_or_add(states, name, kind)
}

fn find_or_add(states: &mut Vec<StateDescriptor>, name: &str, kind: StateKind) -> u32 {
    if let Some(existing) = states.iter().find(|s| s.name == name && s.kind == kind) {
        return existing.id;
    }
    let id = states.len() as u32;
    states.push(StateDescriptor { id, name: name.to_owned(), kind });
    id
}

/// Writes sorted entries with their key-group index.
fn write_keyed(entries: &[SortedEntry], dir: &Path, uid: &str) -> Result<KeyedFile, StateError> {
    let mut out = RecordWriter::new(KEYED_MAGIC);
    let mut index: Vec<KeyGroupIndex> = Vec::new();
    for (group, state, key, value) in entries {
        match index.last_mut() {
            Some(last) if last.key_group == *group => last.entries += 1,
            _ => index.push(KeyGroupIndex { key_group: *group, offset: out.len() as u64, entries: 1 }),
        }
        out.u16(*group as u16);
        out.u32(*state);
        out.bytes(key);
        out.bytes(value);
    }
    let (first, last) = (entries[0].0, entries[entries.len() - 1].0);
    let path = format!("{}/keyed-{first:05}-{last:05}.wsk", dir_name(uid));
    let file: FileRef = write_verified(dir, path, &out.into_bytes())?;
    Ok(KeyedFile { file, first_key_group: first, last_key_group: last, entries: entries.len() as u64, index })
}

/// Writes an operator's broadcast maps (the same in every subtask).
fn write_broadcast(meta: &InstanceMeta, dir: &Path, uid: &str) -> Result<FileRef, StateError> {
    let mut out = RecordWriter::new(BROADCAST_MAGIC);
    let names = meta.broadcast.registry.names();
    out.u32(names.len() as u32);
    for (index, name) in names.iter().enumerate() {
        out.bytes(name.as_bytes());
        let map = meta.broadcast.maps.get(index);
        out.u32(map.map_or(0, |m| m.len() as u32));
        for (key, value) in map.into_iter().flatten() {
            out.bytes(key);
            out.bytes(value);
        }
    }
    write_verified(dir, format!("{}/broadcast.wsb", dir_name(uid)), &out.into_bytes())
}
