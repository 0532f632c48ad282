//! Fork: a second job from the same snapshot as a running job (a savepoint
//! is taken first) or from a savepoint directory, with other plugins and
//! sinks, running beside the first — with a job file of its own, to resume
//! it after the host has stopped ([`super::fork_file`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fork_file::write_fork_file;
use super::upgrade::with_plugin;
use super::{JobManager, retention};
use crate::checkpoint::{CheckpointStorage, SavepointStart};
use crate::connectors::{committed_parts, refuse_others_parts_in_progress};
use crate::control::{ControlError, ControlPlane, ForkInfo, ForkRequest};
use crate::dirs::{absolute, resolved};
use crate::job::{JobGraph, NodeKind, Overrides, SinkSpec, check_job_name};
use crate::savepoint::Savepoint;

pub(super) fn fork(manager: &Arc<JobManager>, request: ForkRequest) -> Result<ForkInfo, ControlError> {
    check_job_name(&request.name).map_err(ControlError::Rejected)?;
    if manager.lock().get(&request.name).is_some_and(|j| j.status.is_active()) {
        return Err(ControlError::Conflict(format!("a job named `{}` is running already; choose another name", request.name)));
    }
    // (The job the savepoint was taken from for this fork, if it was.)
    let (mut graph, savepoint, taken_from) = match manager.running(&request.from) {
        Ok((base, _, _)) => {
            // Checked before the savepoint is taken: a refused fork leaves none behind.
            let graph = forked_graph(manager, base.clone(), &request)?;
            load_new_plugins(manager, &request)?;
            let dir = manager.default_savepoint_dir(&base, "fork");
            let info = manager.take_savepoint(&request.from, dir, false, "be forked")?;
            retention::mark_taken_by_host(&info.dir, "fork");
            (graph, Savepoint::open(&info.dir).map_err(|e| ControlError::Failed(e.to_string()))?, Some(base))
        }
        Err(ControlError::NoSuchJob(_)) => {
            let savepoint = Savepoint::open(Path::new(&request.from)).map_err(|e| {
                ControlError::Rejected(format!("`{}` is neither a job of this host nor a savepoint: {e}", request.from))
            })?;
            (forked_graph(manager, graph_of(&savepoint)?, &request)?, savepoint, None)
        }
        Err(other) => return Err(other),
    };
    let job_file = write_fork_file(&mut graph, &savepoint.dir)?;
    if let Err(refused) = manager.submit(graph.clone(), Some(savepoint.clone()), false) {
        // What the refused fork made goes: its job file, the directory made
        // for it if nothing else is there, the savepoint taken for it.
        if let Some(file) = &job_file {
            let _ = std::fs::remove_file(file);
            let _ = file.parent().map(std::fs::remove_dir);
        }
        if taken_from.is_some() {
            let _ = std::fs::remove_dir_all(&savepoint.dir);
        }
        return Err(refused);
    }
    if let Some(base) = &taken_from {
        manager.forget_old_savepoints(base, "fork");
    }
    let info = manager.job(&graph.name)?;
    Ok(ForkInfo { job: info, savepoint: savepoint.dir, job_file })
}

/// Compiles the plugins a fork of a running job swaps in, so that one that
/// is not a plugin is refused before a savepoint is taken for the fork.
fn load_new_plugins(manager: &JobManager, request: &ForkRequest) -> Result<(), ControlError> {
    let plugins = request.operators.iter().filter(|(_, plugin)| crate::dataflow::native_name(plugin).is_none());
    for (uid, plugin) in plugins {
        manager.engine.load(&absolute(plugin)).map_err(|e| ControlError::Rejected(format!("operator `{uid}`: {e}")))?;
    }
    Ok(())
}

/// The job a savepoint was taken from, as its job file describes it, with
/// the plugins it was running when the savepoint was taken.
fn graph_of(savepoint: &Savepoint) -> Result<JobGraph, ControlError> {
    let Some(definition) = &savepoint.manifest.job_file else {
        return Err(ControlError::Rejected(format!(
            "savepoint {} does not record its job file, so a fork cannot be made from it alone",
            savepoint.dir.display()
        )));
    };
    let base = definition.path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut graph = crate::job::parse(&definition.text, &base, Overrides::default()).map_err(|e| {
        ControlError::Rejected(format!(
            "the job file recorded in savepoint {} is not valid for this Weir: {e}; fork by the running job's name, or \
             run a fixed copy of the job file with `weir run JOB --from-savepoint {0}`",
            savepoint.dir.display()
        ))
    })?;
    graph.definition = Some(definition.clone());
    for operator in &savepoint.manifest.operators {
        if graph.nodes.iter().any(|n| n.name == operator.uid) {
            graph = with_plugin(&graph, &operator.uid, &operator.plugin)?;
        }
    }
    Ok(graph)
}

/// `base` renamed, with the request's plugins and sinks, and a checkpoint
/// directory of its own.
fn forked_graph(manager: &JobManager, base: JobGraph, request: &ForkRequest) -> Result<JobGraph, ControlError> {
    let mut graph = base;
    graph.name = request.name.clone();
    for (uid, plugin) in &request.operators {
        graph = with_plugin(&graph, uid, &absolute(plugin))?;
    }
    for (sink, path) in &request.sinks {
        set_sink_path(&mut graph, sink, path)?;
    }
    for (sink, topic) in &request.topics {
        set_sink_topic(&mut graph, sink, topic)?;
    }
    own_transactional_ids(&mut graph);
    if let (None, Some(dir)) = (&graph.checkpoints, &request.checkpoint_dir) {
        return Err(ControlError::Rejected(format!(
            "the fork would have no checkpoints to keep in {}: its job has none (no `checkpoint_dir` in its job \
             file), and a fork takes its job's settings. Fork without a checkpoint directory, or add \
             `checkpoint_dir` to the job file and run the job with it",
            dir.display()
        )));
    }
    if let Some(settings) = graph.checkpoints.as_mut() {
        settings.dir = match &request.checkpoint_dir {
            Some(dir) => absolute(dir),
            None => settings.dir.with_file_name(&request.name),
        };
    }
    refuse_shared_outputs(manager, &graph)?;
    refuse_used_places(&graph)?;
    Ok(graph)
}

/// A fork is a new job: its checkpoint directory and its sinks' files must
/// not hold another job's (the original's, stopped or in another host, or
/// an earlier fork's of this name). Restored from the savepoint, it would
/// take those checkpoints for its own and rewrite that output as its own.
fn refuse_used_places(graph: &JobGraph) -> Result<(), ControlError> {
    let refuse = |what: String, path: &Path, holds: &str, flag: &str| {
        Err(ControlError::Rejected(format!(
            "{what} of the fork would be {}, which holds {holds} already: a fork is a new job; give it {flag}",
            path.display()
        )))
    };
    if let Some(settings) = &graph.checkpoints
        && (CheckpointStorage::holds_checkpoints(&settings.dir) || SavepointStart::read(&settings.dir).ok().flatten().is_some())
    {
        return refuse("the checkpoint directory".into(), &settings.dir, "checkpoints", "another --name or --checkpoint-dir DIR");
    }
    if let Some(outer) = graph.checkpoints.as_ref().and_then(|settings| crate::dirs::enclosing_checkpoint_dir(&settings.dir)) {
        return Err(ControlError::Rejected(format!(
            "the checkpoint directory of the fork would be inside {}, another job's checkpoint directory, which \
             deletes the files there it does not know: give the fork one outside it (--checkpoint-dir DIR)",
            outer.display()
        )));
    }
    for node in &graph.nodes {
        let flag = format!("another path (--sink {}=PATH)", node.name);
        match &node.kind {
            NodeKind::Sink(SinkSpec::Files { path, .. }) if !committed_parts(path).is_empty() => {
                return refuse(format!("sink `{}`'s directory", node.name), path, "committed output", &flag);
            }
            // The fork's checkpoint directory is new: whatever job wrote
            // the parts in progress there, it is not the fork.
            NodeKind::Sink(SinkSpec::Files { path, .. }) if refuse_others_parts_in_progress(path, None).is_err() => {
                return refuse(format!("sink `{}`'s directory", node.name), path, "another job's parts in progress", &flag);
            }
            NodeKind::Sink(SinkSpec::File { path, .. }) if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) => {
                return refuse(format!("sink `{}`'s file", node.name), path, "output", &flag);
            }
            _ => {}
        }
    }
    Ok(())
}

fn set_sink_path(graph: &mut JobGraph, sink: &str, new_path: &Path) -> Result<(), ControlError> {
    let node = graph.nodes.iter_mut().find(|n| n.name == sink && matches!(n.kind, NodeKind::Sink(_)));
    match node.map(|n| &mut n.kind) {
        Some(NodeKind::Sink(SinkSpec::File { path, .. } | SinkSpec::Files { path, .. })) => {
            *path = absolute(new_path);
            Ok(())
        }
        Some(NodeKind::Sink(SinkSpec::Kafka(_))) => {
            Err(ControlError::Rejected(format!("sink `{sink}` writes to Kafka: give it another topic with --topic")))
        }
        Some(_) => Err(ControlError::Rejected(format!("sink `{sink}` has no path to change"))),
        None => Err(no_such_sink(graph, sink)),
    }
}

fn set_sink_topic(graph: &mut JobGraph, sink: &str, topic: &str) -> Result<(), ControlError> {
    let node = graph.nodes.iter_mut().find(|n| n.name == sink && matches!(n.kind, NodeKind::Sink(_)));
    match node.map(|n| &mut n.kind) {
        Some(NodeKind::Sink(SinkSpec::Kafka(kafka))) => {
            kafka.topic = topic.to_owned();
            Ok(())
        }
        Some(_) => Err(ControlError::Rejected(format!("sink `{sink}` is not a Kafka sink: give it another path with --sink"))),
        None => Err(no_such_sink(graph, sink)),
    }
}

fn no_such_sink(graph: &JobGraph, sink: &str) -> ControlError {
    let sinks: Vec<String> =
        graph.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Sink(_))).map(|n| format!("`{}`", n.name)).collect();
    ControlError::Rejected(format!("the job has no sink `{sink}`; its sinks are {}", sinks.join(", ")))
}

/// A fork's Kafka sinks must not share transactional ids with the job it
/// forks (they would fence each other): the default ids carry the job's
/// name; an explicit prefix gets the fork's name appended.
fn own_transactional_ids(graph: &mut JobGraph) {
    let fork = graph.name.clone();
    for node in &mut graph.nodes {
        if let NodeKind::Sink(SinkSpec::Kafka(kafka)) = &mut node.kind
            && let Some(prefix) = &mut kafka.transactional_id_prefix
        {
            *prefix = format!("{prefix}-{fork}");
        }
    }
}

/// Where a job writes: its sinks' files and Kafka topics, and its
/// checkpoint directory — each path as the place it names, however spelt.
fn outputs(graph: &JobGraph) -> Vec<(String, PathBuf)> {
    let sinks = graph.nodes.iter().filter_map(|n| match &n.kind {
        NodeKind::Sink(SinkSpec::File { path, .. } | SinkSpec::Files { path, .. }) => {
            Some((format!("sink `{}`", n.name), resolved(path)))
        }
        NodeKind::Sink(SinkSpec::Kafka(kafka)) => {
            Some((format!("sink `{}`", n.name), PathBuf::from(format!("kafka://{}/{}", kafka.brokers, kafka.topic))))
        }
        _ => None,
    });
    let checkpoints = graph.checkpoints.iter().map(|c| ("the checkpoint directory".to_owned(), resolved(&c.dir)));
    sinks.chain(checkpoints).collect()
}

/// Two jobs writing the same files would destroy each other's output.
fn refuse_shared_outputs(manager: &JobManager, graph: &JobGraph) -> Result<(), ControlError> {
    let jobs = manager.lock();
    for (name, job) in jobs.iter().filter(|(_, j)| j.status.is_active()) {
        let theirs = outputs(&job.graph);
        for (what, path) in outputs(graph) {
            if theirs.iter().any(|(_, p)| *p == path) {
                return Err(ControlError::Rejected(format!(
                    "{what} of the fork would write to {}, as job `{name}` does; give it another path \
                     or topic (--sink NAME=PATH, --topic NAME=TOPIC, --checkpoint-dir DIR)",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}
