//! Whether a job may resume from a checkpoint in its directory.
//!
//! A checkpoint holds each subtask's own state — an operator subtask's key
//! groups, a source subtask's splits — as they were at the parallelism it
//! was taken at. So the job must still be the one that took it: the same
//! name, the same key groups (`max_parallelism`), and every node with state
//! still there under its name or uid. Its parallelism may have changed
//! (`weir run JOB -p 4` after a crash): a source's splits are dealt out
//! again to any number of subtasks, and an operator's keyed state is
//! redistributed by key group on the way in ([`super::rescale`]), as Flink
//! restores a retained checkpoint at another parallelism. Its plugins may
//! have changed too, if the new ones can read the state their predecessors
//! wrote ([`check_changed_plugins`]).

use super::{StateCheckError, WrittenBy, check_state};
use crate::checkpoint::Manifest;
use crate::job::{JobGraph, NodeKind};
use crate::plugin::LoadedPlugin;
use crate::savepoint::Savepoint;

/// `Err` with the reason if `graph` cannot resume from `manifest`; state
/// of nodes the job no longer has is dropped only if `allow_non_restored`.
/// `Ok` lists the operators with state whose parallelism changed ("operator
/// `count` from parallelism 2 to 3"), whose state must be redistributed.
pub(super) fn check_resumable(graph: &JobGraph, manifest: &Manifest, allow_non_restored: bool) -> Result<Vec<String>, String> {
    if manifest.job != graph.name {
        return Err(format!(
            "it is job `{}`'s, not `{}`'s; give each job a checkpoint_dir of its own (or the job its old name)",
            manifest.job, graph.name
        ));
    }
    // A job that had finished restores nothing (it says so and stops).
    if manifest.finished {
        return Ok(Vec::new());
    }
    check_fits(graph, manifest, allow_non_restored)
}

/// [`check_resumable`] but for the job's name: whether `graph` can take
/// the state of `manifest` — also another job's, started from one of its
/// retained checkpoints.
pub fn check_fits(graph: &JobGraph, manifest: &Manifest, allow_non_restored: bool) -> Result<Vec<String>, String> {
    if manifest.max_parallelism != graph.max_parallelism {
        return Err(format!(
            "it was taken with max_parallelism = {} and the job now has {}: the number of key groups is fixed \
             for the life of a job's state; set max_parallelism = {} again",
            manifest.max_parallelism, graph.max_parallelism, manifest.max_parallelism
        ));
    }
    let mut changed = Vec::new();
    let mut dropped = Vec::new();
    for (name, subtasks) in stateful_nodes(manifest) {
        let node = graph.nodes.iter().find(|n| n.name == name && !matches!(n.kind, NodeKind::Sink(_)));
        match node {
            None => dropped.push(format!("`{name}`")),
            Some(node) if node.parallelism != subtasks && matches!(node.kind, NodeKind::Operator(_)) => {
                changed.push(format!("{} from parallelism {subtasks} to {}", node.describe(), node.parallelism))
            }
            Some(_) => {}
        }
    }
    if !dropped.is_empty() && !allow_non_restored {
        return Err(format!(
            "it has state for {}, which the job no longer has (state is matched by operator uid and source name); \
             give the node its old name, or pass --allow-non-restored-state to drop that state",
            dropped.join(", ")
        ));
    }
    Ok(changed)
}

/// The sources and operators with state in `manifest`, each with its
/// number of subtasks (every subtask has a task in the manifest, with
/// state or without), in order of first appearance.
fn stateful_nodes(manifest: &Manifest) -> Vec<(&str, u32)> {
    let mut nodes: Vec<(&str, u32, bool)> = Vec::new();
    for task in &manifest.tasks {
        let has_state = task.splits.is_some() || task.keyed.is_some() || task.meta.is_some();
        match nodes.iter_mut().find(|(name, ..)| *name == task.node) {
            Some((_, subtasks, stateful)) => {
                *subtasks = (*subtasks).max(task.subtask + 1);
                *stateful |= has_state;
            }
            None => nodes.push((&task.node, task.subtask + 1, has_state)),
        }
    }
    nodes.into_iter().filter(|(_, _, stateful)| *stateful).map(|(name, subtasks, _)| (name, subtasks)).collect()
}

/// Checks each of `changed` (see [`changed_plugins`](super::changed_plugins))
/// against its state in `state`, the checkpoint `manifest` laid out as a
/// savepoint.
pub(super) fn check_changed_plugins(
    graph: &JobGraph,
    manifest: &Manifest,
    changed: &[(String, LoadedPlugin)],
    state: &Savepoint,
) -> Result<(), String> {
    for (uid, plugin) in changed {
        let same_plugin = WrittenBy::of_checkpoint(manifest, uid).is_some_and(|wrote| wrote.same_plugin(&plugin.digest));
        let wrote = manifest.plugins.iter().find(|p| &p.uid == uid).map(|p| p.plugin.display().to_string()).unwrap_or_default();
        let checked = check_state(graph, uid, plugin, state).map_err(|(StateCheckError::Savepoint(reason) | StateCheckError::Plugin(reason))| {
            match same_plugin {
                true => format!(
                    "operator `{uid}` resumes with another `config` than the one its state was written with, and its \
                     plugin {} cannot take the state over so: {reason}. Put back the config it was written with, \
                     or restore a savepoint",
                    plugin.path.display()
                ),
                false => format!(
                    "operator `{uid}` resumes with plugin {}, not {wrote} that wrote its state, and the new plugin \
                     cannot read it: {reason}. Name a plugin in the job file that can (the one that wrote it), or \
                     restore a savepoint",
                    plugin.path.display()
                ),
            }
        })?;
        tracing::info!(operator = %uid, plugin = %plugin.path.display(), values = checked, "the operator's plugin, new or configured anew, reads the checkpoint's state");
    }
    Ok(())
}
