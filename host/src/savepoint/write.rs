//! Writing a savepoint from a completed checkpoint.

use std::path::{Path, PathBuf};

use tracing::info;

use super::format::{BROADCAST_MAGIC, KEYED_MAGIC, dir_name};
use super::{
    FORMAT_VERSION, JobDefinition, KeyGroupIndex, KeyedFile, MANIFEST_FILE, OperatorSnapshot, SavepointError,
    SavepointManifest, SourceSnapshot, StateDescriptor, StateKind,
};
use crate::checkpoint::{Manifest, OperatorPlugin, TaskState};
use crate::plugin::{InstanceMeta, decode_meta};
use crate::state::{
    BackendConfig, FileRef, RecordWriter, RegisteredName, StateError, TimeDomain, expired, key_group_for, now_ms, read_verified,
    visit_snapshot, write_verified,
};

/// Map states are registered under this prefix in an operator's registry.
pub(super) use crate::state::MAP_PREFIX;

/// What a savepoint records about the job besides its state.
#[derive(Debug, Clone)]
pub struct JobDescription {
    pub name: String,
    pub max_parallelism: u32,
    pub backend: BackendConfig,
    pub definition: Option<JobDefinition>,
    pub nodes: Vec<NodeDescription>,
}

impl JobDescription {
    /// The plugin each operator runs.
    pub fn plugins(&self) -> Vec<OperatorPlugin> {
        let operators = self.nodes.iter().filter_map(|node| match node {
            NodeDescription::Operator { uid, plugin, digest, config_digest, .. } => Some(OperatorPlugin {
                uid: uid.clone(),
                plugin: plugin.clone(),
                sha256: digest.clone(),
                config_sha256: config_digest.clone(),
            }),
            NodeDescription::Source { .. } => None,
        });
        operators.collect()
    }

    /// Checkpoint `manifest`'s sources and operators, at the parallelism
    /// it was taken at, with the plugins that took it (`plugin_of` names
    /// one a checkpoint from before plugins were recorded does not): what
    /// its state is read as, to write it as a savepoint.
    pub fn of_checkpoint(manifest: &Manifest, plugin_of: impl Fn(&str) -> Option<PathBuf>) -> JobDescription {
        let mut nodes: Vec<NodeDescription> = Vec::new();
        for task in &manifest.tasks {
            let parallelism = task.subtask + 1;
            let known = nodes.iter_mut().find(|node| node.name() == task.node);
            // An operator subtask that had ended has no meta; the plugins
            // name every operator.
            let ran = manifest.plugins.iter().find(|p| p.uid == task.node);
            match (known, &task.splits, task.meta.is_some() || ran.is_some()) {
                (Some(node), _, _) => node.at_least(parallelism),
                (None, Some(_), _) => nodes.push(NodeDescription::Source { name: task.node.clone(), parallelism }),
                (None, None, true) => {
                    nodes.push(NodeDescription::Operator {
                        uid: task.node.clone(),
                        plugin: ran.map(|p| p.plugin.clone()).or_else(|| plugin_of(&task.node)).unwrap_or_default(),
                        digest: ran.and_then(|p| p.sha256.clone()),
                        config_digest: ran.and_then(|p| p.config_sha256.clone()),
                        parallelism,
                    });
                }
                // A sink: it keeps no state.
                (None, None, false) => {}
            }
        }
        JobDescription {
            name: manifest.job.clone(),
            max_parallelism: manifest.max_parallelism,
            backend: BackendConfig::new(manifest.backend),
            definition: None,
            nodes,
        }
    }
}

/// A source or operator of the job (sinks keep no state).
#[derive(Debug, Clone)]
pub enum NodeDescription {
    Source { name: String, parallelism: u32 },
    /// `digest`: the plugin file's SHA-256; `config_digest`: its config
    /// table's ([`crate::job::OperatorNode::config_digest`]).
    Operator { uid: String, plugin: PathBuf, digest: Option<String>, config_digest: Option<String>, parallelism: u32 },
}

impl NodeDescription {
    /// A source's name, an operator's uid.
    pub fn name(&self) -> &str {
        match self {
            NodeDescription::Source { name, .. } => name,
            NodeDescription::Operator { uid, .. } => uid,
        }
    }

    /// Raises its parallelism to `subtasks` if lower.
    fn at_least(&mut self, subtasks: u32) {
        let (NodeDescription::Source { parallelism, .. } | NodeDescription::Operator { parallelism, .. }) = self;
        *parallelism = (*parallelism).max(subtasks);
    }
}

/// A subtask's keyed entries, gathered for sorting: keys and values are
/// copied into one buffer, so a million entries are not a million
/// allocations.
#[derive(Default)]
struct Entries {
    bytes: Vec<u8>,
    /// (key group, descriptor id, key, value), the last two as ranges of `bytes`.
    index: Vec<(u32, u32, std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl Entries {
    fn push(&mut self, group: u32, state: u32, key: &[u8], value: &[u8]) {
        let key_start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        let value_start = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.index.push((group, state, key_start..value_start, value_start..self.bytes.len()));
    }

    /// Sorts by (key group, state, key, value): the savepoint's order.
    fn sort(&mut self) {
        let bytes = &self.bytes;
        self.index.sort_unstable_by(|a, b| {
            (a.0, a.1, &bytes[a.2.clone()], &bytes[a.3.clone()]).cmp(&(b.0, b.1, &bytes[b.2.clone()], &bytes[b.3.clone()]))
        });
    }
}

/// Makes `dir` ready to take a savepoint, or says why it cannot: it is
/// named, new or empty (a savepoint's files among others' would be hard
/// to tell apart, or to delete), can be created, and is not the job's
/// checkpoint directory `checkpoints` nor inside one of its checkpoints
/// (its `savepoints/` are fine). Checked before a savepoint is triggered,
/// so that a bad directory is refused at once, before sources stop.
pub fn prepare_savepoint_dir(dir: &Path, checkpoints: Option<&Path>) -> Result<(), SavepointError> {
    let refuse = |reason: String| SavepointError::Refused { path: dir.to_path_buf(), reason };
    if dir.as_os_str().is_empty() {
        return Err(refuse("no directory named; name one, or leave it out for the default".into()));
    }
    if dir.join(MANIFEST_FILE).exists() {
        return Err(refuse("a savepoint is there already; choose another directory".into()));
    }
    if let Some(checkpoints) = checkpoints.map(crate::dirs::resolved) {
        let place = crate::dirs::resolved(dir);
        let among_checkpoints = place.strip_prefix(&checkpoints).is_ok_and(|rest| !rest.starts_with(crate::checkpoint::layout::SAVEPOINTS));
        if among_checkpoints {
            return Err(refuse(format!(
                "that is among the job's checkpoints in {}; choose a directory outside it (or its savepoints/)",
                checkpoints.display()
            )));
        }
    }
    if interrupted(dir) {
        return Err(refuse(
            "a savepoint is being written there, or was when its host stopped (its `.writing` mark is there): \
             choose another directory, or, if no host is writing it, delete it to use it again"
                .into(),
        ));
    }
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(refuse("it holds other files, and a savepoint needs a directory of its own; choose a new or empty one".into()));
    }
    crate::dirs::create(dir).map_err(|source| SavepointError::Io { path: dir.to_path_buf(), source })
}

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
    prepare_savepoint_dir(dir, None)?;
    // Claimed, so that of two savepoints asked into one directory at once
    // one is refused, and a failure can remove what it wrote.
    let claim = dir.join(CLAIM_FILE);
    std::fs::File::options().write(true).create_new(true).open(&claim).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => SavepointError::Refused {
            path: dir.to_path_buf(),
            reason: "another savepoint is being written there; choose another directory".into(),
        },
        _ => SavepointError::Io { path: claim.clone(), source },
    })?;
    let written = write_files(manifest, checkpoint_root, job, dir, work_dir);
    match &written {
        Ok(_) => {
            let _ = std::fs::remove_file(&claim);
        }
        // Nothing but this savepoint's files is in the directory (it was
        // new or empty, and claimed): they go, so that a retry may use it.
        Err(_) => remove_contents(dir),
    }
    written
}

/// The file a savepoint being written claims its directory with.
const CLAIM_FILE: &str = ".writing";

/// Whether `dir` holds a savepoint being written, or one that was when its
/// host stopped (killed): its claim is there.
pub fn interrupted(dir: &Path) -> bool {
    dir.join(CLAIM_FILE).exists()
}

/// Removes everything in `dir`, leaving it empty.
fn remove_contents(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        if let Err(error) = removed {
            tracing::warn!(path = %path.display(), %error, "cannot remove a file of a failed savepoint");
        }
    }
}

/// [`write_savepoint`] into its claimed directory.
fn write_files(
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
            NodeDescription::Operator { uid, plugin, digest, config_digest, parallelism } => {
                let tasks: Vec<&TaskState> = (0..*parallelism).filter_map(|s| manifest.task(uid, s)).collect();
                let mut snapshot = OperatorSnapshot {
                    uid: uid.clone(),
                    plugin: plugin.clone(),
                    plugin_sha256: digest.clone(),
                    config_sha256: config_digest.clone(),
                    parallelism: *parallelism,
                    states: Vec::new(),
                    keyed: Vec::new(),
                    broadcast: None,
                    watermark: None,
                };
                let metas: Vec<InstanceMeta> =
                    tasks.iter().map(|task| read_meta(task, checkpoint_root)).collect::<Result<_, _>>().map_err(state_error)?;
                // (Subtasks that had ended keep no meta, nor a watermark.)
                let running = tasks.iter().zip(&metas).filter(|(task, _)| task.meta.is_some());
                snapshot.watermark = running.map(|(_, meta)| meta.watermark).min().filter(|&w| w > i64::MIN);
                let ids: Vec<StateIds> = metas.iter().map(|meta| StateIds::new(&mut snapshot.states, meta)).collect();
                // Subtasks are read and sorted in parallel, then written in order.
                let gathered: Vec<Result<Entries, StateError>> = std::thread::scope(|scope| {
                    let threads: Vec<_> = tasks
                        .iter()
                        .zip(metas.iter().zip(&ids))
                        .map(|(task, (meta, ids))| scope.spawn(|| gather(task, meta, ids, job, checkpoint_root, work_dir)))
                        .collect();
                    threads.into_iter().map(|t| t.join().expect("a savepoint thread panicked")).collect()
                });
                for (meta, entries) in metas.iter().zip(gathered) {
                    write_subtask(&mut snapshot, meta, &entries.map_err(state_error)?, dir).map_err(state_error)?;
                }
                operators.push(snapshot);
            }
        }
    }
    let savepoint = SavepointManifest {
        format: FORMAT_VERSION,
        job: job.name.clone(),
        checkpoint: manifest.checkpoint,
        // The state is the checkpoint's: a savepoint written later of a
        // retained one is as old as that (the files sink judges restores
        // after a rollback by it).
        taken_at_ms: manifest.completed_at_ms,
        max_parallelism: job.max_parallelism,
        job_file: job.definition.clone(),
        operators,
        sources,
    };
    crate::dirs::write_durably(&dir.join(MANIFEST_FILE), &savepoint.encode()).map_err(io(dir))?;
    info!(job = %job.name, checkpoint = manifest.checkpoint, dir = %dir.display(), "savepoint written");
    Ok(savepoint)
}


/// A subtask's non-keyed state: its state names, broadcast maps, timers.
fn read_meta(task: &TaskState, checkpoint_root: &Path) -> Result<InstanceMeta, StateError> {
    match &task.meta {
        Some(file) => decode_meta(&checkpoint_root.join(&file.path), &read_verified(checkpoint_root, file)?),
        None => Ok(InstanceMeta::default()),
    }
}

/// The operator's descriptor ids of a subtask's states (by the subtask's
/// own ids) and of its timers.
struct StateIds {
    states: Vec<u32>,
    /// By the subtask's own ids: whether the state's values expire.
    expiring: Vec<bool>,
    event_timers: u32,
    processing_timers: u32,
}

impl StateIds {
    /// Adds the descriptors `meta`'s states and timers need.
    fn new(descriptors: &mut Vec<StateDescriptor>, meta: &InstanceMeta) -> Self {
        let states = meta.registry.names().iter().map(|name| descriptor(descriptors, name)).collect();
        let expiring = meta.registry.names().iter().map(|name| RegisteredName::split(name).expiring).collect();
        let mut timers = |domain, kind| match meta.timers.all().any(|(d, _, _)| d == domain) {
            true => timer_descriptor(descriptors, kind),
            false => u32::MAX,
        };
        let event_timers = timers(TimeDomain::EventTime, StateKind::EventTimer);
        let processing_timers = timers(TimeDomain::ProcessingTime, StateKind::ProcessingTimer);
        StateIds { states, expiring, event_timers, processing_timers }
    }
}

/// Reads one subtask's keyed entries from the checkpoint, and its timers
/// as entries of their key's group, under the operator's descriptor ids,
/// sorted.
fn gather(
    task: &TaskState,
    meta: &InstanceMeta,
    ids: &StateIds,
    job: &JobDescription,
    checkpoint_root: &Path,
    work_dir: &Path,
) -> Result<Entries, StateError> {
    let mut entries = Entries::default();
    if let Some(handle) = &task.keyed {
        let mut unknown = None;
        let now = now_ms();
        visit_snapshot(&job.backend, handle, checkpoint_root, work_dir, &mut |group, state, key, value| {
            match ids.states.get(state.0 as usize) {
                Some(_) if ids.expiring[state.0 as usize] && expired(value, now) => {}
                Some(&id) => entries.push(u32::from(group), id, key, value),
                None => unknown = Some(state.0),
            }
        })?;
        if let Some(state) = unknown {
            let path = task.meta.as_ref().map_or_else(|| checkpoint_root.to_path_buf(), |meta| checkpoint_root.join(&meta.path));
            let reason = format!("operator `{}` subtask {} has entries of state {state}, which it names no state for", task.node, task.subtask);
            return Err(StateError::Corrupt { path, reason });
        }
    }
    for (domain, timestamp, key) in meta.timers.all() {
        let id = match domain {
            TimeDomain::EventTime => ids.event_timers,
            TimeDomain::ProcessingTime => ids.processing_timers,
        };
        entries.push(key_group_for(key, job.max_parallelism), id, key, &timestamp.to_le_bytes());
    }
    entries.sort();
    Ok(entries)
}

/// Adds one operator subtask's broadcast maps (the first that has any) and
/// keyed entries to `snapshot`.
fn write_subtask(snapshot: &mut OperatorSnapshot, meta: &InstanceMeta, entries: &Entries, dir: &Path) -> Result<(), StateError> {
    if snapshot.broadcast.is_none() && !meta.broadcast.registry.names().is_empty() {
        snapshot.broadcast = Some(write_broadcast(meta, dir, &snapshot.uid)?);
    }
    if !entries.index.is_empty() {
        snapshot.keyed.push(write_keyed(entries, dir, &snapshot.uid)?);
    }
    Ok(())
}

/// The id of the value or map state `name` (as registered), adding it.
fn descriptor(states: &mut Vec<StateDescriptor>, registered: &str) -> u32 {
    let RegisteredName { name, map, expiring } = RegisteredName::split(registered);
    find_or_add(states, name, if map { StateKind::Map } else { StateKind::Value }, expiring)
}

fn timer_descriptor(states: &mut Vec<StateDescriptor>, kind: StateKind) -> u32 {
    let name = if kind == StateKind::EventTimer { "event-time timers" } else { "processing-time timers" };
    find_or_add(states, name, kind, false)
}

fn find_or_add(states: &mut Vec<StateDescriptor>, name: &str, kind: StateKind, expires: bool) -> u32 {
    if let Some(existing) = states.iter().find(|s| s.name == name && s.kind == kind && s.expires == expires) {
        return existing.id;
    }
    let id = states.len() as u32;
    states.push(StateDescriptor { id, name: name.to_owned(), kind, expires });
    id
}

/// Writes sorted entries with their key-group index.
fn write_keyed(entries: &Entries, dir: &Path, uid: &str) -> Result<KeyedFile, StateError> {
    let mut out = RecordWriter::new(KEYED_MAGIC);
    let mut index: Vec<KeyGroupIndex> = Vec::new();
    for (group, state, key, value) in &entries.index {
        match index.last_mut() {
            Some(last) if last.key_group == *group => last.entries += 1,
            _ => index.push(KeyGroupIndex { key_group: *group, offset: out.len() as u64, entries: 1 }),
        }
        out.u16(*group as u16);
        out.u32(*state);
        out.bytes(&entries.bytes[key.clone()]);
        out.bytes(&entries.bytes[value.clone()]);
    }
    let all = &entries.index;
    let (first, last) = (all[0].0, all[all.len() - 1].0);
    let path = format!("{}/keyed-{first:05}-{last:05}.wsk", dir_name(uid));
    let file: FileRef = write_verified(dir, path, &out.into_bytes())?;
    Ok(KeyedFile { file, first_key_group: first, last_key_group: last, entries: all.len() as u64, index })
}

/// Writes an operator's broadcast maps (the same in every subtask).
fn write_broadcast(meta: &InstanceMeta, dir: &Path, uid: &str) -> Result<FileRef, StateError> {
    let mut out = RecordWriter::new(BROADCAST_MAGIC);
    meta.broadcast.encode(&mut out);
    write_verified(dir, format!("{}/broadcast.wsb", dir_name(uid)), &out.into_bytes())
}
