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
use super::{instance_config, native_name};
use crate::job::{JobGraph, NodeKind};
use crate::plugin::{InitialState, LoadedPlugin, OperatorInstance, PluginEngine};
use crate::savepoint::{Savepoint, StateKind};
use crate::state::{BackendConfig, BackendKind, open_backend};

/// Values handed to `check-state` per call.
const CHECK_BATCH: usize = 4096;

/// The operators of `graph` whose plugin is not the one that wrote their
/// state, each with its plugin, loaded. `wrote` gives, for an operator's
/// uid, whether there is state for it and the digest of the plugin that
/// wrote it, if recorded (`Some(None)`: not recorded, so taken for another
/// plugin). Native operators are not plugins and are left out.
pub fn changed_plugins<'a>(
    graph: &JobGraph,
    engine: &PluginEngine,
    wrote: impl Fn(&str) -> Option<Option<&'a str>>,
) -> Result<Vec<(String, LoadedPlugin)>, RunError> {
    let mut changed = Vec::new();
    for node in &graph.nodes {
        let NodeKind::Operator(op) = &node.kind else { continue };
        let Some(wrote) = wrote(&node.name) else { continue };
        if native_name(&op.plugin).is_some() {
            continue;
        }
        let plugin = engine.load(&op.plugin).map_err(|source| RunError::Plugin { uid: node.name.clone(), source })?;
        if wrote != Some(plugin.digest.as_str()) {
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
    let state = InitialState { backend, meta: None, max_parallelism: graph.max_parallelism, key_groups: 0..graph.max_parallelism };
    let config = instance_config(&op.config, &op.limits, node.parallelism, 0, 0, true);
    let mut instance = OperatorInstance::new(plugin, op.limits, state, &config)
        .map_err(|e| Plugin(format!("it fails to start: {e}")))?;
    let mut values: BTreeMap<(String, bool), Vec<Vec<u8>>> = BTreeMap::new();
    savepoint
        .entries(uid, &mut |entry| {
            if !entry.kind.is_timer() {
                values.entry((entry.state, entry.kind == StateKind::Map)).or_default().push(entry.value);
            }
        })
        .map_err(|e| StateCheckError::Savepoint(e.to_string()))?;
    let mut checked = 0;
    for ((name, map), values) in &values {
        for chunk in values.chunks(CHECK_BATCH) {
            let (data, offsets) = flatten(chunk);
            instance
                .check_state(name, *map, &data, &offsets)
                .map_err(|e| Plugin(format!("its check-state call failed: {e}")))?
                .map_err(Plugin)?;
        }
        checked += values.len() as u64;
    }
    Ok(checked)
}

/// Values as one buffer and `len + 1` offsets.
fn flatten(values: &[Vec<u8>]) -> (Vec<u8>, Vec<u32>) {
    let mut data = Vec::new();
    let mut offsets = vec![0];
    for value in values {
        data.extend_from_slice(value);
        offsets.push(data.len() as u32);
    }
    (data, offsets)
}
