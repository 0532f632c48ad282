//! Runs a [`JobGraph`]: loads plugins, opens connectors, wires channels,
//! spawns one thread per subtask and supervises them to the end.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use tracing::{error, info};

use super::CHANNEL_CAPACITY;
use super::channel::{Cancel, Envelope, Outputs, Route};
use super::task::{self, TaskContext, TaskError, TaskMetrics};
use crate::connectors::{self, ConnectorError};
use crate::job::{JobGraph, Node, NodeKind, Partitioning};
use crate::plugin::{InputKind, LoadedPlugin, OperatorInstance, PluginEngine, PluginError};
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
}

/// Figures of one finished subtask.
#[derive(Debug, Clone)]
pub struct TaskSummary {
    /// "source `x`", "operator `y`" or "sink `z`".
    pub node: String,
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
        self.tasks.iter().filter(|t| t.node.starts_with("source")).map(|t| t.records_out).sum()
    }

    /// Records received by all sinks.
    pub fn records_written(&self) -> u64 {
        self.tasks.iter().filter(|t| t.node.starts_with("sink")).map(|t| t.records_in).sum()
    }
}

/// One subtask, before it is started.
struct Subtask {
    node: usize,
    subtask: u32,
    label: String,
    metrics: Arc<TaskMetrics>,
}

/// Runs `graph` to completion (every source exhausted and every record at a
/// sink), or until a subtask fails, which cancels the rest.
pub fn run_job(graph: &JobGraph, engine: &Arc<PluginEngine>) -> Result<JobSummary, RunError> {
    let plugins = load_plugins(graph, engine)?;
    let inboxes = create_inboxes(graph);
    let cancel = Cancel::default();
    let started = Instant::now();
    info!(job = %graph.name, nodes = graph.nodes.len(), "job starting");

    let (done_tx, done_rx) = bounded::<(usize, Result<(), TaskError>)>(1024);
    let mut subtasks = Vec::new();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for node in &graph.nodes {
        for subtask in 0..node.parallelism {
            let index = subtasks.len();
            let metrics = Arc::new(TaskMetrics::default());
            let label = format!("{} (subtask {} of {})", node.describe(), subtask + 1, node.parallelism);
            let ctx = TaskContext { cancel: cancel.clone(), metrics: metrics.clone(), outputs: outputs(graph, node, subtask, &inboxes) };
            let body = task_body(graph, node, subtask, ctx, &inboxes, &plugins, engine)?;
            let done = done_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("weir-{}-{subtask}", node.name))
                .spawn(move || {
                    let _ = done.send((index, body()));
                })
                .expect("spawn a subtask thread");
            threads.push(thread);
            subtasks.push(Subtask { node: node.id.0, subtask, label, metrics });
        }
    }
    drop(done_tx);
    drop(inboxes);

    let failure = supervise(graph, &subtasks, &done_rx, &cancel, started);
    for thread in threads {
        let _ = thread.join();
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    let summary = JobSummary {
        name: graph.name.clone(),
        duration: started.elapsed(),
        tasks: subtasks
            .iter()
            .map(|s| TaskSummary {
                node: graph.nodes[s.node].describe(),
                subtask: s.subtask,
                records_in: s.metrics.records_in.load(Ordering::Relaxed),
                records_out: s.metrics.records_out.load(Ordering::Relaxed),
            })
            .collect(),
    };
    info!(
        job = %graph.name,
        seconds = summary.duration.as_secs_f64(),
        read = summary.records_read(),
        written = summary.records_written(),
        "job finished"
    );
    Ok(summary)
}

/// Waits for every subtask; on the first failure cancels the job. Logs
/// progress while waiting. Returns the first failure.
fn supervise(
    graph: &JobGraph,
    subtasks: &[Subtask],
    done: &Receiver<(usize, Result<(), TaskError>)>,
    cancel: &Cancel,
    started: Instant,
) -> Option<RunError> {
    let mut remaining = subtasks.len();
    let mut failure = None;
    let mut last_report = Instant::now();
    while remaining > 0 {
        match done.recv_timeout(Duration::from_millis(200)) {
            Ok((index, result)) => {
                remaining -= 1;
                let cause = match result {
                    Ok(()) | Err(TaskError::Stopped) => continue,
                    Err(TaskError::Call(e)) => e.to_string(),
                    Err(TaskError::Connector(e)) => e.to_string(),
                };
                error!(task = %subtasks[index].label, %cause, "task failed; cancelling the job");
                cancel.cancel();
                failure.get_or_insert(RunError::TaskFailed { task: subtasks[index].label.clone(), cause });
            }
            Err(_) if last_report.elapsed() >= PROGRESS_INTERVAL => {
                last_report = Instant::now();
                let read: u64 = sum_metric(graph, subtasks, "source", |m| m.records_out.load(Ordering::Relaxed));
                let written: u64 = sum_metric(graph, subtasks, "sink", |m| m.records_in.load(Ordering::Relaxed));
                let seconds = started.elapsed().as_secs_f64();
                info!(job = %graph.name, read, written, events_per_s = (read as f64 / seconds) as u64, "progress");
            }
            Err(_) => {}
        }
    }
    failure
}

fn sum_metric(graph: &JobGraph, subtasks: &[Subtask], kind: &str, value: impl Fn(&TaskMetrics) -> u64) -> u64 {
    subtasks.iter().filter(|s| graph.nodes[s.node].describe().starts_with(kind)).map(|s| value(&s.metrics)).sum()
}

/// Compiles every operator's plugin before anything starts, so a bad module
/// fails the job up front with the operator's uid.
fn load_plugins(graph: &JobGraph, engine: &PluginEngine) -> Result<Vec<Option<LoadedPlugin>>, RunError> {
    graph
        .nodes
        .iter()
        .map(|node| match &node.kind {
            NodeKind::Operator(op) => engine
                .load(&op.plugin)
                .map(Some)
                .map_err(|source| RunError::Plugin { uid: node.name.clone(), source }),
            _ => Ok(None),
        })
        .collect()
}

type Inbox = (Sender<Envelope>, Receiver<Envelope>);

/// One bounded inbox per subtask of every node that has inputs.
fn create_inboxes(graph: &JobGraph) -> Vec<Vec<Inbox>> {
    graph
        .nodes
        .iter()
        .map(|node| {
            if node.inputs.is_empty() {
                Vec::new()
            } else {
                (0..node.parallelism).map(|_| bounded(CHANNEL_CAPACITY)).collect()
            }
        })
        .collect()
}

/// The routes from `subtask` of `node` to every consumer of its outputs.
fn outputs(graph: &JobGraph, node: &Node, subtask: u32, inboxes: &[Vec<Inbox>]) -> Outputs {
    let routes = graph
        .consumers(node.id)
        .map(|(consumer, input, edge)| {
            let all = &inboxes[consumer.id.0];
            let targets = match edge.partitioning {
                Partitioning::Forward => vec![all[subtask as usize].0.clone()],
                Partitioning::Rebalance | Partitioning::KeyBy | Partitioning::Broadcast => {
                    all.iter().map(|(tx, _)| tx.clone()).collect()
                }
            };
            Route::new(edge.output.clone(), input, edge.partitioning, targets, graph.max_parallelism)
        })
        .collect();
    Outputs::new(routes)
}

/// How many producers will send an end marker to each subtask of `node`.
fn producers(graph: &JobGraph, node: &Node) -> usize {
    node.inputs
        .iter()
        .map(|edge| match edge.partitioning {
            Partitioning::Forward => 1,
            _ => graph.node(edge.from).parallelism as usize,
        })
        .sum()
}

type TaskBody = Box<dyn FnOnce() -> Result<(), TaskError> + Send>;

/// Opens the subtask's connector (here, so that a bad path fails the job
/// before it starts) and returns the loop to run on its thread.
fn task_body(
    graph: &JobGraph,
    node: &Node,
    subtask: u32,
    ctx: TaskContext,
    inboxes: &[Vec<Inbox>],
    plugins: &[Option<LoadedPlugin>],
    engine: &Arc<PluginEngine>,
) -> Result<TaskBody, RunError> {
    let connector_error = |source| RunError::Connector { node: node.describe(), source };
    let inbox = || inboxes[node.id.0][subtask as usize].1.clone();
    Ok(match &node.kind {
        NodeKind::Source(spec) => {
            let source = connectors::open_source(spec, subtask, node.parallelism).map_err(connector_error)?;
            Box::new(move || task::run_source(ctx, source))
        }
        NodeKind::Sink(spec) => {
            let sink = connectors::open_sink(spec).map_err(connector_error)?;
            let (inbox, producers) = (inbox(), producers(graph, node));
            Box::new(move || task::run_sink(ctx, sink, inbox, producers))
        }
        NodeKind::Operator(op) => {
            let plugin = plugins[node.id.0].clone().expect("operators have a loaded plugin");
            let (inbox, producers) = (inbox(), producers(graph, node));
            let input_kinds = node.inputs.iter().map(|e| input_kind(e.partitioning)).collect();
            let (engine, limits, config) = (engine.clone(), op.limits, op.config.clone());
            Box::new(move || {
                let instance = OperatorInstance::new(&engine, &plugin, limits, Box::new(MemoryBackend::new()), &config)?;
                task::run_operator(ctx, instance, inbox, input_kinds, producers)
            })
        }
    })
}

fn input_kind(partitioning: Partitioning) -> InputKind {
    match partitioning {
        Partitioning::KeyBy => InputKind::Keyed,
        Partitioning::Broadcast => InputKind::Broadcast,
        Partitioning::Forward | Partitioning::Rebalance => InputKind::Plain,
    }
}
