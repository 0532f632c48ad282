//! Whether a job may resume from a checkpoint in its directory.
//!
//! A checkpoint holds each subtask's own state — an operator subtask's key
//! groups, a source subtask's splits — as they were at the parallelism it
//! was taken at, and resuming hands it back subtask by subtask. So the job
//! must still be the one that took it: the same name, the same key groups
//! (`max_parallelism`), the same parallelism for every source and operator
//! with state, and every such node still there under its name or uid.
//! Restored into a changed job, state would reach subtasks that do not own
//! its keys, and counts would start again or repeat without a word. A
//! savepoint redistributes state by key group: it is the way to make these
//! changes, as in Flink.

use crate::checkpoint::Manifest;
use crate::job::{JobGraph, NodeKind};

/// What to do instead, said after every refusal.
const HOW_TO_CHANGE: &str = "to change the job, resume it unchanged, stop it with a savepoint (`weir savepoint JOB --stop`), \
     and start the changed job from that (`weir run JOB_FILE --from-savepoint DIR`), which redistributes state by key group";

/// `Err` with the reason if `graph` cannot resume from `manifest`; state
/// of nodes the job no longer has is dropped only if `allow_non_restored`.
pub(super) fn check_resumable(graph: &JobGraph, manifest: &Manifest, allow_non_restored: bool) -> Result<(), String> {
    if manifest.job != graph.name {
        return Err(format!(
            "it is job `{}`'s, not `{}`'s; give each job a checkpoint_dir of its own (or the job its old name)",
            manifest.job, graph.name
        ));
    }
    // A job that had finished restores nothing (it says so and stops).
    if manifest.finished {
        return Ok(());
    }
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
            Some(node) if node.parallelism != subtasks => {
                changed.push(format!("{} from parallelism {subtasks} to {}", node.describe(), node.parallelism))
            }
            Some(_) => {}
        }
    }
    if !changed.is_empty() {
        return Err(format!("the job changed {}; a checkpoint restores subtask by subtask. {HOW_TO_CHANGE}", changed.join(", ")));
    }
    if !dropped.is_empty() && !allow_non_restored {
        return Err(format!(
            "it has state for {}, which the job no longer has (state is matched by operator uid and source name); \
             give the node its old name, or pass --allow-non-restored-state to drop that state",
            dropped.join(", ")
        ));
    }
    Ok(())
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
