//! A plugin's check of the state it is to take over.
//!
//! An operator restored with another plugin than the one that wrote its
//! state — an upgrade, a savepoint restored with new code, a checkpoint
//! resumed with a job file naming another plugin — runs only if the new
//! plugin can read every stored value: each is offered to a fresh instance's
//! `check-state` export before anything starts, so that a plugin that cannot
//! is refused with the value and the reason, instead of failing at the first
//! event of a key that holds one (and never for keys that go quiet).

use std::collections::BTreeMap;

use super::executor::RunError;
use crate::checkpoint::Manifest;
use super::{instance_config, native_name};
use crate::job::{JobGraph, NodeKind};
use crate::plugin::{InitialState, InstanceMeta, LoadedPlugin, OperatorInstance, PluginEngine, StoredKind, StoredValues};
use crate::savepoint::{Savepoint, StateKind};
use crate::state::{BackendConfig, BackendKind, open_backend, split_map_entry};

/// Values handed to `check-state` per call, at most; fewer once they hold
/// [`BATCH_BYTES`](super::BATCH_BYTES) between them, as input batches: a
/// plugin holds a call's values in its memory, and 4 096 values of 100 KB
/// failed a rebuilt plugin's check under the memory cap its job ran in
/// (found by the state-backend audit).
const CHECK_BATCH: usize = 4096;

/// What wrote an operator's state, as far as recorded: the plugin file's
/// digest and its config table's
/// ([`OperatorNode::config_digest`](crate::job::OperatorNode::config_digest)).
#[derive(Debug, Clone, Copy, Default)]
pub struct WrittenBy<'a> {
    /// Not recorded: taken for another plugin.
    pub plugin: Option<&'a str>,
    /// Not recorded: taken for the same config.
    pub config: Option<&'a str>,
}

impl<'a> WrittenBy<'a> {
    /// What wrote operator `uid`'s state in `savepoint`, if it has any.
    pub fn of_savepoint(savepoint: &'a Savepoint, uid: &str) -> Option<Self> {
        let operator = savepoint.manifest.operator(uid)?;
        Some(WrittenBy { plugin: operator.plugin_sha256.as_deref(), config: operator.config_sha256.as_deref() })
    }

    /// What wrote operator `uid`'s state in checkpoint `manifest` — if the
    /// checkpoint records its plugin's digest (one that does not is taken
    /// as it is).
    pub fn of_checkpoint(manifest: &'a Manifest, uid: &str) -> Option<Self> {
        let ran = manifest.plugins.iter().find(|p| p.uid == uid)?;
        Some(WrittenBy { plugin: Some(ran.sha256.as_deref()?), config: ran.config_sha256.as_deref() })
    }

    /// Whether the plugin file was the one with `digest`.
    pub fn same_plugin(&self, digest: &str) -> bool {
        self.plugin == Some(digest)
    }
}

/// The operators of `graph` whose state was written by another plugin, or
/// by the same one configured otherwise, each with its plugin, loaded — to
/// be checked against that state. `wrote` gives, for an operator's uid,
/// what wrote its state (`None`: there is none). Native operators are not
/// plugins and are left out.
pub fn changed_plugins<'a>(
    graph: &JobGraph,
    engine: &PluginEngine,
    wrote: impl Fn(&str) -> Option<WrittenBy<'a>>,
) -> Result<Vec<(String, LoadedPlugin)>, RunError> {
    let mut changed = Vec::new();
    for node in &graph.nodes {
        let NodeKind::Operator(op) = &node.kind else { continue };
        let Some(wrote) = wrote(&node.name) else { continue };
        if native_name(&op.plugin).is_some() {
            continue;
        }
        let plugin = engine.load(&op.plugin).map_err(|source| RunError::Plugin { uid: node.name.clone(), source })?;
        let other_config = wrote.config.is_some_and(|config| config != op.config_digest());
        if !wrote.same_plugin(&plugin.digest) || other_config {
            changed.push((node.name.clone(), plugin));
        }
    }
    Ok(changed)
}

/// Why a plugin's check of a savepoint's state did not pass: the two
/// call for different fixes.
pub enum StateCheckError {
    /// The savepoint could not be read (a corrupt or missing file).
    Savepoint(String),
    /// The plugin refused the state, or could not check it.
    Plugin(String),
}

/// Offers every stored value of operator `uid`'s value and map states in
/// `savepoint` to a fresh instance of `plugin`; returns how many it read.
pub fn check_state(
    graph: &JobGraph,
    uid: &str,
    plugin: &LoadedPlugin,
    savepoint: &Savepoint,
) -> Result<u64, StateCheckError> {
    use StateCheckError::Plugin;
    if savepoint.manifest.operator(uid).is_none() {
        return Ok(0);
    }
    let node = graph.nodes.iter().find(|n| n.name == uid).expect("the uid was checked");
    let NodeKind::Operator(op) = &node.kind else { unreachable!("the uid is an operator's") };
    let backend =
        open_backend(&BackendConfig::new(BackendKind::Memory), &std::env::temp_dir()).map_err(|e| Plugin(e.to_string()))?;
    // The stored states' names, as the restored instances will have them:
    // a plugin opening one with another time-to-live choice than it was
    // stored with is refused here (`check-state` opens the states it is
    // asked about), not at the restored job's first event.
    let meta = InstanceMeta { registry: savepoint.state_registry(uid), ..InstanceMeta::default() };
    let state =
        InitialState { backend, meta: Some(meta), max_parallelism: graph.max_parallelism, key_groups: 0..graph.max_parallelism };
    let config = instance_config(&op.config, &op.limits, node.parallelism, 0, 0, true);
    let instance = OperatorInstance::new(plugin, op.limits, state, &config)
        .map_err(|e| Plugin(format!("it fails to start: {e}")))?;
    // Offered as read, a batch per state at a time: an operator's state
    // may be far larger than the host's memory.
    // Per state: its values yet to offer, and their bytes.
    let mut pending: BTreeMap<(String, bool), (Vec<(Vec<u8>, Vec<u8>)>, usize)> = BTreeMap::new();
    let mut offering = Offering { instance, offered: BTreeMap::new(), checked: 0 };
    let mut failed = None;
    savepoint
        .entries(uid, &mut |entry| {
            if failed.is_some() || entry.kind.is_timer() {
                return;
            }
            let map = entry.kind == StateKind::Map;
            let Some(sub_key) = sub_key_of(&entry) else {
                let damaged = format!("an entry of map state `{}` has a malformed key", entry.state);
                failed = Some(StateCheckError::Savepoint(damaged));
                return;
            };
            let state = (entry.state, map);
            let (batch, bytes) = pending.entry(state.clone()).or_default();
            *bytes += sub_key.len() + entry.value.len();
            batch.push((sub_key, entry.value));
            if batch.len() == CHECK_BATCH || *bytes >= super::BATCH_BYTES {
                failed = offering.offer(&state.0, keyed_kind(map), batch).err();
                *bytes = 0;
            }
        })
        .map_err(|e| StateCheckError::Savepoint(e.to_string()))?;
    if let Some(failed) = failed {
        return Err(failed);
    }
    for ((name, map), (batch, _)) in &mut pending {
        if !batch.is_empty() {
            offering.offer(name, keyed_kind(*map), batch)?;
        }
    }
    // Broadcast maps are small (every subtask holds them whole): at once.
    let broadcast = savepoint.broadcast_maps(uid).map_err(|e| StateCheckError::Savepoint(e.to_string()))?;
    for (name, entries) in broadcast.registry.names().iter().zip(&broadcast.maps) {
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = entries.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if !batch.is_empty() {
            offering.offer(name, StoredKind::BroadcastMap, &mut batch)?;
        }
    }
    Ok(offering.checked)
}

/// A fresh instance being offered stored values, and how many it was
/// offered of each state.
struct Offering {
    instance: OperatorInstance,
    /// By state name and kind: to say which values a refused call had.
    offered: BTreeMap<(String, u8), u64>,
    checked: u64,
}

impl Offering {
    /// Offers `batch` of state `name` (and empties it): `Err` if the
    /// plugin refuses it, or cannot be asked.
    fn offer(&mut self, name: &str, kind: StoredKind, batch: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), StateCheckError> {
        let answer = self.instance.check_state(name, kind, &stored_values(batch, kind));
        let before = self.offered.entry((name.to_owned(), kind as u8)).or_default();
        let range = format!("stored values {} to {} of `{name}`", *before, *before + batch.len() as u64 - 1);
        let first_call = *before == 0;
        *before += batch.len() as u64;
        self.checked += batch.len() as u64;
        batch.clear();
        let answer = answer.map_err(|e| StateCheckError::Plugin(format!("its check-state call failed: {e}")))?;
        // The plugin numbers the values of one call: after the first, say which.
        answer.map_err(|reason| match first_call {
            true => StateCheckError::Plugin(reason),
            false => StateCheckError::Plugin(format!("{reason} (numbered within the call that offered {range})")),
        })
    }
}

/// A stored entry's sub-key: a map entry's own (`None` if its key is
/// malformed), empty for a value state's.
fn sub_key_of(entry: &crate::savepoint::SavepointEntry) -> Option<Vec<u8>> {
    match entry.kind == StateKind::Map {
        true => split_map_entry(&entry.key).map(|(_, sub_key)| sub_key.to_vec()),
        false => Some(Vec::new()),
    }
}

fn keyed_kind(map: bool) -> StoredKind {
    if map { StoredKind::MapState } else { StoredKind::ValueState }
}

/// (sub-key or key, value) pairs as `check-state` takes them: each part in
/// one buffer with `len + 1` offsets (no sub-keys for a value state).
fn stored_values(entries: &[(Vec<u8>, Vec<u8>)], kind: StoredKind) -> StoredValues {
    let (data, offsets) = flatten(entries.iter().map(|(_, value)| value));
    let (sub_keys, sub_key_offsets) = match kind {
        StoredKind::ValueState => (Vec::new(), Vec::new()),
        StoredKind::MapState | StoredKind::BroadcastMap => flatten(entries.iter().map(|(sub_key, _)| sub_key)),
    };
    StoredValues { data, offsets, sub_keys, sub_key_offsets }
}

/// Byte strings as one buffer and `len + 1` offsets.
fn flatten<'a>(parts: impl Iterator<Item = &'a Vec<u8>>) -> (Vec<u8>, Vec<u32>) {
    let mut data = Vec::new();
    let mut offsets = vec![0];
    for part in parts {
        data.extend_from_slice(part);
        offsets.push(data.len() as u32);
    }
    (data, offsets)
}
