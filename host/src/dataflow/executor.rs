//! Runs a [`JobGraph`]: loads plugins, opens connectors, instantiates
//! operators, wires channels, chains forward operators into their upstream
//! task, spawns one thread per task and supervises them to the end.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use tracing::{error, info};

use super::CHANNEL_CAPACITY;
use super::channel::{Cancel, ChainedOperator, Envelope, Outputs, Route};
use super::task::{self, TaskContext, TaskError, TaskMetrics};
use super::time::WatermarkGenerator;
use crate::connectors::{self, ConnectorError};
use crate::job::{JobGraph, Node, NodeKind, OperatorNode, Partitioning};
use super::operator::{NATIVE_PREFIX, OperatorLogic, native_operator};
use crate::plugin::{CallError, InputKind, LoadedPlugin, OperatorInstance, PluginEngine, PluginError};
use crate::state::MemoryBackend;

/// How often a running job logs its progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// A job could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("operator `{uid}`: {source}")]
    Plugin {
        uid: String,
        #[source]
        source: PluginError,
    },
    #[error("{node}: {source}")]
    Connector {
        node: String,
        #[source]
        source: ConnectorError,
    },
    #[error("{task} failed: {cause}")]
    TaskFailed { task: String, cause: String },
    #[error("the job was cancelled")]
    Cancelled,
}

/// What a node of the job graph is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Operator,
    Sink,
}

impl Role {
    fn of(node: &Node) -> Self {
        match node.kind {
            NodeKind::Source(_) => Role::Source,
            NodeKind::Operator(_) => Role::Operator,
            NodeKind::Sink(_) => Role::Sink,
        }
    }
}

/// Figures of one finished subtask.
#[derive(Debug, Clone)]
pub struct TaskSummary {
    /// "source `x`", "operator `y`" or "sink `z`".
    pub node: String,
    pub role: Role,
    pub subtask: u32,
    pub records_in: u64,
    pub records_out: u64,
}

/// Figures of a finished job.
#[derive(Debug, Clone)]
pub struct JobSummary {
    pub name: String,
    pub duration: Duration,
    pub tasks: Vec<TaskSummary>,
}

impl JobSummary {
    /// Records produced by all sources.
    pub fn records_read(&self) -> u64 {
        self.tasks.iter().filter(|t| t.role == Role::Source).map(|t| t.records_out).sum()
    }

    /// Records received by all sinks.
    pub fn records_written(&self) -> u64 {
        self.tasks.iter().filter(|t| t.role == Role::Sink).map(|t| t.records_in).sum()
    }
}

/// Records read by the sources and written by the sinks so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub read: u64,
    pub written: u64,
}

/// One subtask (run on its own thread or chained into another).
struct Subtask {
    node: String,
    role: Role,
    subtask: u32,
    label: String,
    metrics: Arc<TaskMetrics>,
}

/// A job whose tasks are running.
pub struct RunningJob {
    name: String,
    cancel: Cancel,
    subtasks: Vec<Subtask>,
    threads: Vec<JoinHandle<()>>,
    done: Receiver<(usize, Result<(), TaskError>)>,
    running: usize,
    started: Instant,
}

/// Runs `graph` to completion (every source exhausted and every record at a
/// sink), or until a subtask fails, which cancels the rest.
pub fn run_job(graph: &JobGraph, engine: &Arc<PluginEngine>) -> Result<JobSummary, RunError> {
    start_job(graph, engine)?.wait()
}

/// Starts `graph`'s tasks and returns without waiting for them. Plugins,
/// connectors and operator instances are all set up before any task starts,
/// so a bad module, path or config fails here and nothing runs.
pub fn start_job(graph: &JobGraph, engine: &Arc<PluginEngine>) -> Result<RunningJob, RunError> {
    let mut builder = Builder::new(graph, engine)?;
    let mut bodies = Vec::new();
    let chained = builder.chained.clone();
    for node in graph.nodes.iter().filter(|n| !chained[n.id.0]) {
        for subtask in 0..node.parallelism {
            let (index, ctx) = builder.context(node, subtask)?;
            bodies.push((index, format!("weir-{}-{subtask}", node.name), builder.body(node, subtask, ctx)?));
        }
    }
    info!(job = %graph.name, tasks = bodies.len(), subtasks = builder.subtasks.len(), "job starting");
    let (done_tx, done) = bounded(bodies.len().max(1));
    let threads = bodies
        .into_iter()
        .map(|(index, name, body)| {
            let done = done_tx.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let _ = done.send((index, body()));
                })
                .expect("spawn a task thread")
        })
        .collect::<Vec<_>>();
    Ok(RunningJob {
        name: graph.name.clone(),
        cancel: builder.cancel,
        running: threads.len(),
        subtasks: builder.subtasks,
        threads,
        done,
        started: Instant::now(),
    })
}

impl RunningJob {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Records read and written so far.
    pub fn progress(&self) -> Progress {
        let sum = |role: Role, value: &dyn Fn(&TaskMetrics) -> u64| {
            self.subtasks.iter().filter(|s| s.role == role).map(|s| value(&s.metrics)).sum()
        };
        Progress {
            read: sum(Role::Source, &|m| m.records_out.load(Ordering::Relaxed)),
            written: sum(Role::Sink, &|m| m.records_in.load(Ordering::Relaxed)),
        }
    }

    /// Asks every task to stop; `wait` then returns [`RunError::Cancelled`].
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Waits for every task; the first failure cancels the others and is
    /// returned. Logs progress while waiting.
    pub fn wait(mut self) -> Result<JobSummary, RunError> {
        let failure = self.supervise();
        for thread in std::mem::take(&mut self.threads) {
            let _ = thread.join();
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        if self.cancel.is_cancelled() {
            return Err(RunError::Cancelled);
        }
        let summary = JobSummary {
            name: self.name.clone(),
            duration: self.started.elapsed(),
            tasks: self
                .subtasks
                .iter()
                .map(|s| TaskSummary {
                    node: s.node.clone(),
                    role: s.role,
                    subtask: s.subtask,
                    records_in: s.metrics.records_in.load(Ordering::Relaxed),
                    records_out: s.metrics.records_out.load(Ordering::Relaxed),
                })
                .collect(),
        };
        info!(
            job = %self.name,
            seconds = summary.duration.as_secs_f64(),
            read = summary.records_read(),
            written = summary.records_written(),
            "job finished"
        );
        Ok(summary)
    }

    fn supervise(&mut self) -> Option<RunError> {
        let mut failure = None;
        let mut last_report = Instant::now();
        while self.running > 0 {
            match self.done.recv_timeout(Duration::from_millis(200)) {
                Ok((index, result)) => {
                    self.running -= 1;
                    let (task, cause) = match result {
                        Ok(()) | Err(TaskError::Stopped) => continue,
                        Err(TaskError::Operator { label, error }) => (label, error.to_string()),
                        Err(TaskError::Connector(error)) => (self.subtasks[index].label.clone(), error.to_string()),
                    };
                    error!(%task, %cause, "task failed; cancelling the job");
                    self.cancel.cancel();
                    failure.get_or_insert(RunError::TaskFailed { task, cause });
                }
                Err(_) if last_report.elapsed() >= PROGRESS_INTERVAL => {
                    last_report = Instant::now();
                    let Progress { read, written } = self.progress();
                    let rate = read as f64 / self.started.elapsed().as_secs_f64();
                    info!(job = %self.name, read, written, events_per_s = rate as u64, "progress");
                }
                Err(_) => {}
            }
        }
        failure
    }
}

type Inbox = (Sender<Envelope>, Receiver<Envelope>);
type TaskBody = Box<dyn FnOnce() -> Result<(), TaskError> + Send>;

/// Sets up a job's tasks.
struct Builder<'a> {
    graph: &'a JobGraph,
    engine: &'a Arc<PluginEngine>,
    plugins: Vec<Option<LoadedPlugin>>,
    /// Whether a node runs chained into its upstream's task.
    chained: Vec<bool>,
    inboxes: Vec<Vec<Inbox>>,
    subtasks: Vec<Subtask>,
    cancel: Cancel,
}

impl<'a> Builder<'a> {
    fn new(graph: &'a JobGraph, engine: &'a Arc<PluginEngine>) -> Result<Self, RunError> {
        let plugins = load_plugins(graph, engine)?;
        let chained: Vec<bool> = graph.nodes.iter().map(|n| is_chainable(graph, n)).collect();
        let inboxes = graph
            .nodes
            .iter()
            .map(|node| {
                if node.inputs.is_empty() || chained[node.id.0] {
                    Vec::new()
                } else {
                    (0..node.parallelism).map(|_| bounded(CHANNEL_CAPACITY)).collect()
                }
            })
            .collect();
        Ok(Builder { graph, engine, plugins, chained, inboxes, subtasks: Vec::new(), cancel: Cancel::default() })
    }

    /// Registers a subtask and builds its context (with its outputs, which
    /// may instantiate chained operators).
    fn context(&mut self, node: &Node, subtask: u32) -> Result<(usize, TaskContext), RunError> {
        let (index, label, metrics) = self.register(node, subtask);
        let outputs = self.outputs(node, subtask)?;
        Ok((index, TaskContext { label, cancel: self.cancel.clone(), metrics, outputs }))
    }

    fn register(&mut self, node: &Node, subtask: u32) -> (usize, String, Arc<TaskMetrics>) {
        let label = format!("{} (subtask {} of {})", node.describe(), subtask + 1, node.parallelism);
        let metrics = Arc::new(TaskMetrics::default());
        let role = Role::of(node);
        self.subtasks.push(Subtask { node: node.describe(), role, subtask, label: label.clone(), metrics: metrics.clone() });
        (self.subtasks.len() - 1, label, metrics)
    }

    /// The routes from `subtask` of `node` to every consumer of its outputs.
    fn outputs(&mut self, node: &Node, subtask: u32) -> Result<Outputs, RunError> {
        let graph = self.graph;
        let mut routes = Vec::new();
        for (consumer, input, edge) in graph.consumers(node.id) {
            if self.chained[consumer.id.0] {
                let (_, label, metrics) = self.register(consumer, subtask);
                let instance = self.instantiate(consumer, &label)?;
                let outputs = self.outputs(consumer, subtask)?;
                let kind = input_kind(edge.partitioning);
                let operator = ChainedOperator { label, instance, kind, outputs, metrics };
                routes.push(Route::chained(edge.output.clone(), input, operator));
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
            ));
        }
        Ok(Outputs::new(routes))
    }

    /// Creates an operator instance and runs its `init` (or creates the
    /// built-in native operator a `native:` plugin path names).
    fn instantiate(&self, node: &Node, label: &str) -> Result<Box<dyn OperatorLogic>, RunError> {
        let NodeKind::Operator(OperatorNode { limits, config, plugin, .. }) = &node.kind else {
            unreachable!("only operators are instantiated");
        };
        if let Some(name) = native_name(plugin) {
            return native_operator(name).ok_or_else(|| RunError::TaskFailed {
                task: label.to_owned(),
                cause: format!("there is no built-in native operator `{name}`"),
            });
        }
        let plugin = self.plugins[node.id.0].as_ref().expect("operators have a loaded plugin");
        OperatorInstance::new(self.engine, plugin, *limits, Box::new(MemoryBackend::new()), config)
            .map(|instance| Box::new(instance) as Box<dyn OperatorLogic>)
            .map_err(|error: CallError| RunError::TaskFailed { task: label.to_owned(), cause: error.to_string() })
    }

    /// Opens the subtask's connector or instantiates its operator, and
    /// returns the loop to run on its thread.
    fn body(&mut self, node: &Node, subtask: u32, ctx: TaskContext) -> Result<TaskBody, RunError> {
        let connector_error = |source| RunError::Connector { node: node.describe(), source };
        let inbox = || self.inboxes[node.id.0][subtask as usize].1.clone();
        let producers = producers(self.graph, node);
        Ok(match &node.kind {
            NodeKind::Source(spec) => {
                let source = connectors::open_source(spec, subtask, node.parallelism).map_err(connector_error)?;
                let watermarks = WatermarkGenerator::new(spec.watermark_settings());
                Box::new(move || task::run_source(ctx, source, watermarks))
            }
            NodeKind::Sink(spec) => {
                let sink = connectors::open_sink(spec).map_err(connector_error)?;
                let inbox = inbox();
                Box::new(move || task::run_sink(ctx, sink, inbox, producers))
            }
            NodeKind::Operator(_) => {
                let instance = self.instantiate(node, &ctx.label)?;
                let inbox = inbox();
                let kinds = node.inputs.iter().map(|e| input_kind(e.partitioning)).collect();
                Box::new(move || task::run_operator(ctx, instance, inbox, kinds, producers))
            }
        })
    }
}

/// An operator runs in its upstream's task when its only input is a forward
/// edge from a node whose only consumer it is.
fn is_chainable(graph: &JobGraph, node: &Node) -> bool {
    let [edge] = node.inputs.as_slice() else { return false };
    matches!(node.kind, NodeKind::Operator(_))
        && edge.partitioning == Partitioning::Forward
        && edge.output.is_empty()
        && graph.consumers(edge.from).count() == 1
}

/// Compiles every operator's plugin before anything starts, so a bad module
/// fails the job up front with the operator's uid.
fn load_plugins(graph: &JobGraph, engine: &PluginEngine) -> Result<Vec<Option<LoadedPlugin>>, RunError> {
    graph
        .nodes
        .iter()
        .map(|node| match &node.kind {
            NodeKind::Operator(op) if native_name(&op.plugin).is_some() => Ok(None),
            NodeKind::Operator(op) => engine
                .load(&op.plugin)
                .map(Some)
                .map_err(|source| RunError::Plugin { uid: node.name.clone(), source }),
            _ => Ok(None),
        })
        .collect()
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

fn input_kind(partitioning: Partitioning) -> InputKind {
    match partitioning {
        Partitioning::KeyBy => InputKind::Keyed,
        Partitioning::Broadcast => InputKind::Broadcast,
        Partitioning::Forward | Partitioning::Rebalance => InputKind::Plain,
    }
}

/// `count` for a plugin path `native:count` (the job file's directory is
/// prefixed to plugin paths, so look at the file name).
fn native_name(plugin: &std::path::Path) -> Option<&str> {
    plugin.file_name()?.to_str()?.strip_prefix(NATIVE_PREFIX)
}
