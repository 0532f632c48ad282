//! Sets up a job's tasks before any starts: loads every operator's plugin
//! (so a bad module fails the job up front, with the operator's uid),
//! makes the checkpoint coordinator, loads restored state (several
//! subtasks at a time), opens connectors, instantiates operators, wires
//! the inboxes and chains forward operators and sinks into their
//! upstream's task. [`super::executor`] then runs what it built.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::CHANNEL_CAPACITY;
use super::alignment::JobAlignment;
use super::channel::{Cancel, ChainedOperator, Outputs, Route};
use super::executor::{Restore, Role, RunError, Subtask};
use super::recovery::{open_storage, recovery_committer};
use super::inbox::{Inbox, InboxSender, inbox};
use super::native::{native_name, native_operator};
use super::operator::OperatorLogic;
use super::sink::SinkWriter;
use super::snapshot::TaskCheckpoint;
use super::task::{self, TaskContext, TaskError, TaskMetrics};
use super::time::WatermarkGenerator;
use crate::checkpoint::{CheckpointSettings, Coordinator, Manifest};
use crate::connectors::{self, ConnectorError, RestoredSplits, Sink, SinkPlace, assign_splits};
use crate::job::{Edge, JobGraph, Node, NodeKind, OperatorNode, Partitioning};
use crate::plugin::{CallError, InitialState, InputKind, Limits, LoadedPlugin, OperatorInstance, PluginEngine, decode_meta};
use crate::savepoint::{JobDescription, NodeDescription};
use crate::state::{key_group_range, open_backend, read_verified, restore_backend};

/// The job's sources and operators, for savepoint manifests.
fn describe(graph: &JobGraph, plugins: &[Option<LoadedPlugin>]) -> JobDescription {
    let nodes = graph
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            NodeKind::Source(_) => Some(NodeDescription::Source { name: node.name.clone(), parallelism: node.parallelism }),
            NodeKind::Operator(op) => Some(NodeDescription::Operator {
                uid: node.name.clone(),
                // Absolute: a savepoint is read by hosts started elsewhere (`weir fork DIR`).
                plugin: crate::dirs::absolute(&op.plugin),
                digest: plugins[node.id.0].as_ref().map(|p| p.digest.clone()),
                config_digest: Some(op.config_digest()),
                parallelism: node.parallelism,
            }),
            NodeKind::Sink(_) => None,
        })
        .collect();
    JobDescription {
        name: graph.name.clone(),
        max_parallelism: graph.max_parallelism,
        backend: graph.backend,
        definition: graph.definition.clone(),
        nodes,
    }
}

type InboxEnds = (InboxSender, Inbox);
pub(super) type TaskBody = Box<dyn FnOnce() -> Result<(), TaskError> + Send>;

/// The run error of a connector of `node` that could not open: the job's
/// cancel, if it was cancelled meanwhile.
fn connector_error(node: &Node) -> impl Fn(ConnectorError) -> RunError + '_ {
    move |source| match source {
        ConnectorError::Cancelled => RunError::Cancelled,
        source => RunError::Connector { node: node.describe(), source },
    }
}

/// Sets up a job's tasks.
pub(super) struct Builder<'a> {
    graph: &'a JobGraph,
    plugins: Vec<Option<LoadedPlugin>>,
    /// Whether a node runs chained into its upstream's task.
    pub(super) chained: Vec<bool>,
    inboxes: Vec<Vec<InboxEnds>>,
    pub(super) subtasks: Vec<Subtask>,
    pub(super) cancel: Cancel,
    restore: Option<Restore<'a>>,
    attempt: u32,
    pub(super) coordinator: Coordinator,
    /// Where RocksDB keeps its working files.
    work_dir: PathBuf,
    states: PreloadedStates,
    alignment: JobAlignment,
    /// Whether the run's start from a savepoint is recorded.
    savepoint_start_recorded: std::cell::Cell<bool>,
    /// The lineage of the job's checkpoint directory, if it has one: its
    /// `files` sinks mark their directories with it.
    lineage: Option<String>,
    /// Set when the host cancels the job (see `RunOptions::stop`).
    stop: Cancel,
}

impl<'a> Builder<'a> {
    pub(super) fn new(
        graph: &'a JobGraph,
        engine: &'a Arc<PluginEngine>,
        restore: Option<Restore<'a>>,
        attempt: u32,
        stop: Cancel,
    ) -> Result<Self, RunError> {
        let plugins = load_plugins(graph, engine)?;
        let work_dir = work_dir(graph)?;
        let restored_checkpoint = restore.and_then(|r| r.resumed_checkpoint());
        let savepoint_of = match restore {
            Some(Restore::Savepoint(savepoint)) => Some(savepoint.manifest.checkpoint),
            _ => None,
        };
        let coordinator = coordinator(graph, describe(graph, &plugins), restored_checkpoint, savepoint_of, &work_dir)?
            .numbered_after(restore.map_or(0, |r| r.checkpoint()));
        let lineage = match &graph.checkpoints {
            Some(settings) => Some(
                crate::dirs::lineage(&settings.dir)
                    .map_err(|source| RunError::Checkpoints { dir: settings.dir.clone(), source })?,
            ),
            None => None,
        };
        let states = match restore {
            Some(_) => preload_states(graph, restore, &work_dir),
            None => PreloadedStates::default(),
        };
        let chained: Vec<bool> = graph.nodes.iter().map(|n| is_chainable(graph, n)).collect();
        let inboxes = graph
            .nodes
            .iter()
            .map(|node| {
                if node.inputs.is_empty() || chained[node.id.0] {
                    Vec::new()
                } else {
                    (0..node.parallelism).map(|_| inbox(CHANNEL_CAPACITY)).collect()
                }
            })
            .collect();
        Ok(Builder {
            graph,
            plugins,
            chained,
            inboxes,
            subtasks: Vec::new(),
            cancel: Cancel::default(),
            restore,
            attempt,
            coordinator,
            work_dir,
            states,
            alignment: JobAlignment::of(graph),
            savepoint_start_recorded: std::cell::Cell::new(false),
            lineage,
            stop,
        })
    }

    /// How `subtask` of `node` reaches the coordinator.
    fn task_checkpoint(&self, index: usize, node: &Node, subtask: u32) -> Option<TaskCheckpoint> {
        Some(TaskCheckpoint { hub: self.coordinator.hub(), index, node: node.name.clone(), subtask, seen: Default::default() })
    }

    /// The splits `subtask` of source `node` reads when resuming (`None`:
    /// from the start).
    fn restored_splits(&self, node: &Node, subtask: u32) -> Option<RestoredSplits> {
        match self.restore? {
            Restore::Checkpoint(manifest) => {
                let has_state = manifest.tasks.iter().any(|t| t.node == node.name);
                has_state.then(|| assign_splits(manifest.source_splits(&node.name), subtask, node.parallelism))
            }
            Restore::Savepoint(savepoint) | Restore::Rescaled { state: savepoint, .. } => {
                savepoint.source_splits(&node.name, subtask, node.parallelism)
            }
        }
    }

    /// An operator subtask's state: loaded in advance when restoring, else
    /// empty.
    fn initial_state(&self, node: &Node, subtask: u32) -> Result<InitialState, RunError> {
        let preloaded = self.states.lock().expect("state table lock").remove(&(node.id.0, subtask));
        preloaded.unwrap_or_else(|| load_state(self.graph, self.restore, &self.work_dir, node, subtask))
    }

    /// Registers a subtask and builds its context (with its outputs, which
    /// may instantiate chained operators).
    pub(super) fn context(&mut self, node: &Node, subtask: u32) -> Result<(usize, TaskContext), RunError> {
        let (index, label, metrics) = self.register(node, subtask, TaskMetrics::default());
        let outputs = self.outputs(node, subtask, &metrics)?;
        let checkpoint = self.task_checkpoint(index, node, subtask);
        Ok((index, TaskContext { label, cancel: self.cancel.clone(), metrics, outputs, checkpoint }))
    }

    fn register(&mut self, node: &Node, subtask: u32, metrics: TaskMetrics) -> (usize, String, Arc<TaskMetrics>) {
        let label = format!("{} (subtask {} of {})", node.describe(), subtask + 1, node.parallelism);
        let metrics = Arc::new(metrics);
        let role = Role::of(node);
        self.subtasks.push(Subtask { node: node.describe(), role, subtask, label: label.clone(), metrics: metrics.clone() });
        (self.subtasks.len() - 1, label, metrics)
    }

    /// The routes from `subtask` of `node` to every consumer of its outputs.
    fn outputs(&mut self, node: &Node, subtask: u32, metrics: &Arc<TaskMetrics>) -> Result<Outputs, RunError> {
        let graph = self.graph;
        let mut routes = Vec::new();
        for (consumer, input, edge) in graph.consumers(node.id) {
            if self.chained[consumer.id.0] {
                let (index, label, metrics) = self.register(consumer, subtask, TaskMetrics::chained_to(metrics));
                let checkpoint = self.task_checkpoint(index, consumer, subtask);
                let output = edge.output.clone();
                routes.push(if matches!(consumer.kind, NodeKind::Sink(_)) {
                    let sink = SinkWriter::new(label, self.open_sink(consumer, subtask)?, metrics, checkpoint);
                    Route::chained_sink(output, input, sink)
                } else {
                    let instance = self.instantiate(consumer, subtask, &label, &metrics)?;
                    let outputs = self.outputs(consumer, subtask, &metrics)?;
                    let kind = input_kind(edge.partitioning);
                    Route::chained(output, input, ChainedOperator { label, instance, kind, outputs, metrics, checkpoint })
                });
                continue;
            }
            let all = &self.inboxes[consumer.id.0];
            let targets = match edge.partitioning {
                Partitioning::Forward => vec![all[subtask as usize].0.clone()],
                _ => all.iter().map(|(tx, _)| tx.clone()).collect(),
            };
            let forward = edge.partitioning == Partitioning::Forward;
            let channel = channel_offset(graph, consumer, input) + if forward { 0 } else { subtask };
            routes.push(Route::channels(
                edge.output.clone(),
                input,
                channel,
                edge.partitioning,
                targets,
                graph.max_parallelism,
                metrics.clone(),
            ));
        }
        Ok(Outputs::new(&node.name, routes))
    }

    /// Creates an operator instance and runs its `init` (or creates the
    /// built-in native operator a `native:` plugin path names); it reports
    /// its state's size to `metrics`.
    fn instantiate(&self, node: &Node, subtask: u32, label: &str, metrics: &TaskMetrics) -> Result<Box<dyn OperatorLogic>, RunError> {
        let mut instance = self.instance(node, subtask, label)?;
        instance.report_state_size(metrics.state_size.clone());
        Ok(instance)
    }

    fn instance(&self, node: &Node, subtask: u32, label: &str) -> Result<Box<dyn OperatorLogic>, RunError> {
        let NodeKind::Operator(OperatorNode { limits, config, plugin, .. }) = &node.kind else {
            unreachable!("only operators are instantiated");
        };
        let failed = |cause: String| RunError::TaskFailed { task: label.to_owned(), cause };
        let mut state = self.initial_state(node, subtask)?;
        let empty = state.backend.is_empty().map_err(|e| failed(format!("its keyed state cannot be read: {e}")))?;
        let config = instance_config(config, limits, node.parallelism, subtask, self.attempt, empty);
        if let Some(name) = native_name(plugin) {
            return match native_operator(name, state, &config) {
                Some(operator) => operator.map_err(|e| failed(e.to_string())),
                None => Err(failed(format!("there is no built-in native operator `{name}`"))),
            };
        }
        let plugin = self.plugins[node.id.0].as_ref().expect("operators have a loaded plugin");
        let mut instance = OperatorInstance::new(plugin, *limits, state, &config).map_err(|error: CallError| failed(error.to_string()))?;
        instance.watch_cancel(self.cancel.clone());
        Ok(Box::new(instance))
    }

    /// Opens subtask `subtask` of sink `node`.
    fn open_sink(&self, node: &Node, subtask: u32) -> Result<Box<dyn Sink>, RunError> {
        let NodeKind::Sink(spec) = &node.kind else { unreachable!("only sinks are opened as sinks") };
        self.record_savepoint_start()?;
        let hub = self.coordinator.hub();
        let place = self.sink_place(node, subtask, hub.dir());
        let mut sink = connectors::open_sink(spec, &place).map_err(connector_error(node))?;
        sink.watch_cancel(self.cancel.clone());
        Ok(sink)
    }

    fn sink_place<'p>(&'p self, node: &Node, subtask: u32, checkpoint_dir: &'p std::path::Path) -> SinkPlace<'p> {
        SinkPlace {
            job: &self.graph.name,
            subtask,
            parallelism: node.parallelism,
            restored: self.restore.map_or(0, |r| r.checkpoint()),
            restored_at_ms: self.restore.map_or(0, |r| r.taken_at_ms()),
            checkpoint_dir,
            lineage: self.lineage.clone(),
            stop: &self.stop,
        }
    }

    /// Records that the run starts from a savepoint, once: before the first
    /// sink opens (a files sink then deletes what was committed after the
    /// savepoint's checkpoint), and only if no sink refuses the restore.
    fn record_savepoint_start(&self) -> Result<(), RunError> {
        let (Some(Restore::Savepoint(savepoint)), Some(settings)) = (self.restore, &self.graph.checkpoints) else { return Ok(()) };
        if self.savepoint_start_recorded.replace(true) {
            return Ok(());
        }
        let hub = self.coordinator.hub();
        for node in self.graph.nodes.iter() {
            if let NodeKind::Sink(spec) = &node.kind {
                let place = self.sink_place(node, 0, hub.dir());
                connectors::check_sink(spec, &place).map_err(connector_error(node))?;
            }
        }
        let recorded = self.coordinator.record_savepoint_start(&savepoint.dir);
        recorded.map_err(|source| RunError::Checkpoints { dir: settings.dir.clone(), source })
    }

    /// Opens the subtask's connector or instantiates its operator, and
    /// returns the loop to run on its thread.
    pub(super) fn body(&mut self, node: &Node, subtask: u32, ctx: TaskContext) -> Result<TaskBody, RunError> {
        let connector_error = connector_error(node);
        let inbox = || self.inboxes[node.id.0][subtask as usize].1.clone();
        let producers = producers(self.graph, node);
        Ok(match &node.kind {
            NodeKind::Source(spec) => {
                let splits = self.restored_splits(node, subtask);
                let source =
                    connectors::open_source(spec, subtask, node.parallelism, splits, &self.stop).map_err(connector_error)?;
                let watermarks = WatermarkGenerator::new(spec.watermark_settings());
                let aligned = self.alignment.source(node, spec, subtask);
                Box::new(move || task::run_source(ctx, source, watermarks, aligned))
            }
            NodeKind::Sink(_) => {
                let sink = SinkWriter::new(ctx.label.clone(), self.open_sink(node, subtask)?, ctx.metrics.clone(), ctx.checkpoint.clone());
                let inbox = inbox();
                Box::new(move || task::run_sink(ctx, sink, inbox, producers))
            }
            NodeKind::Operator(_) => {
                let instance = self.instantiate(node, subtask, &ctx.label, &ctx.metrics)?;
                let inbox = inbox();
                let kinds = node.inputs.iter().map(|e| input_kind(e.partitioning)).collect();
                let names = node.inputs.iter().map(|e| input_name(self.graph, e)).collect();
                Box::new(move || task::run_operator(ctx, instance, inbox, (kinds, names), producers))
            }
        })
    }
}

/// An operator's config with the host's `weir.*` keys added (sorted by key).
/// `weir.state` is `empty` when the subtask's keyed state starts with
/// nothing in it — so that an SDK may take what it has not written itself
/// for absent, without asking — and `restored` otherwise;
/// `weir.memory-limit-mb` is the instance's memory limit, which an SDK
/// bounds the state it holds in memory by.
pub fn instance_config(
    config: &[(String, String)],
    limits: &Limits,
    parallelism: u32,
    subtask: u32,
    attempt: u32,
    state_empty: bool,
) -> Vec<(String, String)> {
    let mut config = config.to_vec();
    config.push(("weir.attempt".into(), attempt.to_string()));
    config.push(("weir.memory-limit-mb".into(), (limits.memory_bytes >> 20).to_string()));
    config.push(("weir.parallelism".into(), parallelism.to_string()));
    config.push(("weir.state".into(), if state_empty { "empty" } else { "restored" }.into()));
    config.push(("weir.subtask".into(), subtask.to_string()));
    config.sort();
    config
}

/// An operator subtask's state: restored from the checkpoint or savepoint,
/// or empty.
fn load_state(
    graph: &JobGraph,
    restore: Option<Restore<'_>>,
    work_dir: &std::path::Path,
    node: &Node,
    subtask: u32,
) -> Result<InitialState, RunError> {
    let manifest = match restore {
        Some(Restore::Savepoint(savepoint) | Restore::Rescaled { state: savepoint, .. }) => {
            let state =
                savepoint.operator_state(&node.name, subtask, node.parallelism, &graph.backend, work_dir)?;
            if let Some(state) = state {
                return Ok(state);
            }
            None
        }
        Some(Restore::Checkpoint(manifest)) => Some(manifest),
        None => None,
    };
    let restore_error = |source| RunError::Restore {
        task: format!("{} (subtask {})", node.describe(), subtask + 1),
        checkpoint: manifest.map_or(0, |m| m.checkpoint),
        source,
    };
    let root = graph.checkpoints.as_ref().map(|c| c.dir.clone()).unwrap_or_default();
    let restored = manifest.and_then(|m| m.task(&node.name, subtask));
    let backend = match restored.and_then(|t| t.keyed.as_ref()) {
        Some(handle) => restore_backend(&graph.backend, handle, &root, work_dir),
        None => open_backend(&graph.backend, work_dir),
    }
    .map_err(restore_error)?;
    let meta = match restored.and_then(|t| t.meta.as_ref()) {
        Some(file) => {
            let bytes = read_verified(&root, file).map_err(restore_error)?;
            Some(decode_meta(&root.join(&file.path), &bytes).map_err(restore_error)?)
        }
        None => None,
    };
    let key_groups = key_group_range(subtask, graph.max_parallelism, node.parallelism);
    Ok(InitialState { backend, meta, max_parallelism: graph.max_parallelism, key_groups })
}

/// Loads the restored state of every operator subtask, several at a time
/// (each reads and indexes its own files), before any task starts.
fn preload_states(graph: &JobGraph, restore: Option<Restore<'_>>, work_dir: &std::path::Path) -> PreloadedStates {
    let wanted: Vec<(&Node, u32)> = graph
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Operator(_)))
        .flat_map(|n| (0..n.parallelism).map(move |s| (n, s)))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(wanted.len()).max(1);
    let loaded = std::thread::scope(|scope| {
        let workers: Vec<_> = wanted
            .chunks(wanted.len().div_ceil(threads).max(1))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|&(node, subtask)| ((node.id.0, subtask), load_state(graph, restore, work_dir, node, subtask)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a restore thread panicked")).collect()
    });
    std::sync::Mutex::new(loaded)
}

/// Restored operator states by (node, subtask), taken as operators are built.
type PreloadedStates = std::sync::Mutex<std::collections::HashMap<(usize, u32), Result<InitialState, RunError>>>;

/// The job's checkpoint coordinator. A job without a checkpoint directory
/// gets one that takes savepoints only, in a directory of its own.
/// `savepoint_of`: the checkpoint a savepoint restored was taken of.
fn coordinator(
    graph: &JobGraph,
    job: JobDescription,
    restore: Option<&Manifest>,
    savepoint_of: Option<u64>,
    work_dir: &std::path::Path,
) -> Result<Coordinator, RunError> {
    let (settings, ephemeral) = match &graph.checkpoints {
        Some(settings) => (settings.clone(), false),
        None => (savepoints_only(work_dir), true),
    };
    let storage = open_storage(&settings)?;
    if let Some(manifest) = restore {
        warn_of_other_plugins(manifest, &job);
    }
    let subtasks = graph.nodes.iter().map(|n| n.parallelism as usize).sum();
    // A savepoint of this job's checkpoint, which is still here: what that
    // checkpoint left uncommitted (a stop with a savepoint while the
    // brokers were away) is committed, as a resume from it would.
    let taken_from = savepoint_of
        .filter(|_| !ephemeral)
        .and_then(|id| storage.verify(id).ok())
        .filter(|manifest| manifest.job == graph.name);
    let committer = recovery_committer(graph, restore.or(taken_from.as_ref()));
    let coordinator = Coordinator::new(settings, job, storage, subtasks, restore);
    Ok(coordinator.with_work_dir(work_dir, ephemeral).with_committer(committer))
}

/// Warns of each operator whose plugin is not the one that wrote the
/// checkpoint it resumes from. Changing the code on a restart is how a
/// plugin may be upgraded, but it is also what happens when a job upgraded
/// while it ran (`weir upgrade`) is restarted from a job file edited since
/// (an unchanged one resumes the upgrades: `super::upgrades`): the file's
/// code then runs on the upgraded code's state.
fn warn_of_other_plugins(manifest: &Manifest, job: &JobDescription) {
    for now in job.plugins() {
        let Some(then) = manifest.plugins.iter().find(|p| p.uid == now.uid) else { continue };
        if then.sha256.is_some() && then.sha256 != now.sha256 {
            tracing::warn!(
                operator = %now.uid,
                checkpoint = manifest.checkpoint,
                checkpointed_with = %then.plugin.display(),
                resumed_with = %now.plugin.display(),
                "the operator resumes with another plugin than the one that wrote its checkpoint: the one the job file \
                 names now (or the job file's, as the plugin it was upgraded to is gone or changed)"
            );
        }
    }
}

/// Checkpoint settings for a job that checkpoints only for savepoints.
fn savepoints_only(work_dir: &std::path::Path) -> CheckpointSettings {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    CheckpointSettings {
        dir: work_dir.join(format!("savepoint-checkpoints-{}-{n}", std::process::id())),
        interval: Duration::MAX,
        retain: 1,
        timeout: Duration::from_secs(600),
        // Its checkpoints are savepoints, whose failure the request hears of.
        tolerable_failures: u32::MAX,
    }
}

/// Where RocksDB keeps working files: beside the checkpoints (same disk,
/// cleared at start: what a killed run left is garbage), else in the
/// host's own directory under the temporary directory, which all hosts
/// share: what killed hosts left there is removed (hundreds of MB a kill,
/// found by the state-backend audit; see [`crate::dirs::process_dir`]).
fn work_dir(graph: &JobGraph) -> Result<PathBuf, RunError> {
    let Some(settings) = &graph.checkpoints else {
        let base = std::env::temp_dir().join("weir-state");
        let dir = crate::dirs::process_dir(&base).map_err(|source| RunError::Checkpoints { dir: base, source })?;
        return Ok(dir.to_path_buf());
    };
    let dir = settings.dir.join(crate::checkpoint::layout::WORK);
    let _ = std::fs::remove_dir_all(&dir);
    crate::dirs::create(&dir).map_err(|source| RunError::Checkpoints { dir: dir.clone(), source })?;
    Ok(dir)
}

/// An operator or a sink runs in its upstream's task when its only input is
/// a forward edge from a node whose only consumer it is.
fn is_chainable(graph: &JobGraph, node: &Node) -> bool {
    let [edge] = node.inputs.as_slice() else { return false };
    matches!(node.kind, NodeKind::Operator(_) | NodeKind::Sink(_))
        && edge.partitioning == Partitioning::Forward
        && edge.output.is_empty()
        && graph.consumers(edge.from).count() == 1
}

/// Fails if an operator's plugin cannot be loaded (missing, not a
/// component, not a Weir operator): checked before a run takes its
/// directories, so that a bad path or module leaves none behind. The
/// compiled plugins stay cached for the run's start.
pub(super) fn check_plugins(graph: &JobGraph, engine: &PluginEngine) -> Result<(), RunError> {
    for node in &graph.nodes {
        if let NodeKind::Operator(op) = &node.kind
            && native_name(&op.plugin).is_none()
        {
            load_plugin(node, op, engine)?;
        }
    }
    Ok(())
}

/// Compiles every operator's plugin before anything starts, so a bad module
/// fails the job up front with the operator's uid.
fn load_plugins(graph: &JobGraph, engine: &PluginEngine) -> Result<Vec<Option<LoadedPlugin>>, RunError> {
    graph
        .nodes
        .iter()
        .map(|node| match &node.kind {
            NodeKind::Operator(op) if native_name(&op.plugin).is_some() => Ok(None),
            NodeKind::Operator(op) => {
                if op.limits.call_timeout.is_none() {
                    tracing::warn!(
                        operator = %node.name,
                        "no call deadline (call_timeout_ms = 0): a call of this plugin that never returns stalls its task"
                    );
                }
                load_plugin(node, op, engine).map(Some)
            }
            _ => Ok(None),
        })
        .collect()
}

/// Compiles operator `node`'s plugin (from the engine's cache if it did before).
fn load_plugin(node: &Node, op: &OperatorNode, engine: &PluginEngine) -> Result<LoadedPlugin, RunError> {
    engine.load_for(&op.plugin, &op.limits).map_err(|source| RunError::Plugin { uid: node.name.clone(), source })
}

/// How many producers (channels) feed each subtask of `node`.
fn producers(graph: &JobGraph, node: &Node) -> usize {
    (0..node.inputs.len()).map(|input| input_channels(graph, node, input)).sum()
}

/// Channels of one input: one for a forward edge, else one per upstream subtask.
fn input_channels(graph: &JobGraph, node: &Node, input: usize) -> usize {
    let edge = &node.inputs[input];
    match edge.partitioning {
        Partitioning::Forward => 1,
        _ => graph.node(edge.from).parallelism as usize,
    }
}

/// The number of the first channel of `input` at a subtask of `node`.
fn channel_offset(graph: &JobGraph, node: &Node, input: u32) -> u32 {
    (0..input as usize).map(|i| input_channels(graph, node, i)).sum::<usize>() as u32
}

/// An operator's input as its job file names it: `node` or `node.side-output`.
fn input_name(graph: &JobGraph, edge: &Edge) -> String {
    let from = &graph.nodes[edge.from.0].name;
    match edge.output.as_str() {
        "" => from.clone(),
        output => format!("{from}.{output}"),
    }
}

fn input_kind(partitioning: Partitioning) -> InputKind {
    match partitioning {
        Partitioning::KeyBy => InputKind::Keyed,
        Partitioning::Broadcast => InputKind::Broadcast,
        Partitioning::Forward | Partitioning::Rebalance => InputKind::Plain,
    }
}

