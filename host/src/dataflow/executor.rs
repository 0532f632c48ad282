//! Runs a [`JobGraph`]: loads plugins, opens connectors, instantiates
//! operators (on restored state when resuming from a checkpoint), wires
//! channels, chains forward operators into their upstream task, spawns one
//! thread per task and supervises them to the end — coordinating
//! checkpoints meanwhile, and restarting the job from the latest one when a
//! task fails, as the job's restart strategy allows.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, select};
use tracing::{error, info, warn};

use super::CHANNEL_CAPACITY;
use super::alignment::JobAlignment;
use super::figures::{Sampler, node_figures_of_run, records_read, records_written};
use super::channel::{Cancel, ChainedOperator, Outputs, Route};
use super::native::{NATIVE_PREFIX, native_operator};
use super::operator::OperatorLogic;
use super::inbox::{Inbox, InboxSender, inbox};
use super::sink::SinkWriter;
use super::snapshot::TaskCheckpoint;
use super::task::{self, TaskContext, TaskError, TaskMetrics};
use super::time::WatermarkGenerator;
use crate::checkpoint::{
    CheckpointHistory, CheckpointSettings, CheckpointStorage, Committer, Coordinator, LatestCheckpoint, Manifest,
    SavepointOrder,
};
use crate::connectors::{self, ConnectorError, RestoredSplits, Sink, SinkPlace, assign_splits};
use crate::control::{Counters, NodeInfo, SavepointInfo};
use crate::savepoint::{JobDescription, NodeDescription, Savepoint, SavepointError};
use crate::job::{JobGraph, Node, NodeKind, OperatorNode, Partitioning};
use crate::plugin::{
    CallError, InitialState, InputKind, Limits, LoadedPlugin, OperatorInstance, PluginEngine, PluginError, decode_meta,
};
use crate::state::{StateError, key_group_range, open_backend, read_verified, restore_backend};

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
    #[error("checkpoint directory {dir}: {source}")]
    Checkpoints {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot restore {task} from checkpoint {checkpoint}: {source}")]
    Restore {
        task: String,
        checkpoint: u64,
        #[source]
        source: StateError,
    },
    #[error("cannot restore from savepoint: {0}")]
    Savepoint(#[from] SavepointError),
    #[error("{last}\n(gave up after {restarts} restart(s); the job's [restart] table allows {max_attempts})")]
    RestartsExhausted { last: Box<RunError>, restarts: u32, max_attempts: u32 },
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
    /// Its counters from its start. Processor time is its thread's, with
    /// the operators chained into it: `None` for a chained one.
    pub counters: Counters,
}

/// Figures of a finished job.
#[derive(Debug, Clone, Default)]
pub struct JobSummary {
    pub name: String,
    pub duration: Duration,
    pub tasks: Vec<TaskSummary>,
    /// The checkpoint the (last) run resumed from.
    pub restored_from: Option<u64>,
    /// The savepoint it started from, if the last run did.
    pub savepoint: Option<PathBuf>,
    /// Restarts after task failures.
    pub restarts: u32,
    /// Checkpoints completed by the last run, with their figures.
    pub checkpoints: CheckpointHistory,
    /// The checkpoint directory said the job had finished already: nothing ran.
    pub already_finished: bool,
    /// The job was stopped with this savepoint (it did not run to the end).
    pub stopped_with: Option<SavepointInfo>,
}

impl JobSummary {
    /// Records produced by all sources.
    pub fn records_read(&self) -> u64 {
        records_read(&self.tasks)
    }

    /// Records received by all sinks.
    pub fn records_written(&self) -> u64 {
        records_written(&self.tasks)
    }

    /// The figures of each source, operator and sink, with their rates
    /// over the (last) run.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        node_figures_of_run(&self.tasks, self.duration.as_secs_f64())
    }
}

/// Records read by the sources and written by the sinks so far, and the
/// newest checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub read: u64,
    pub written: u64,
    /// The newest checkpoint completed by the current run.
    pub checkpoint: Option<LatestCheckpoint>,
    /// Each source, operator and sink so far.
    pub nodes: Vec<NodeInfo>,
}

/// One subtask (run on its own thread or chained into another).
struct Subtask {
    node: String,
    role: Role,
    subtask: u32,
    label: String,
    metrics: Arc<TaskMetrics>,
}

impl Subtask {
    /// Its figures so far.
    fn summary(&self) -> TaskSummary {
        TaskSummary { node: self.node.clone(), role: self.role, subtask: self.subtask, counters: self.metrics.counters() }
    }
}

/// What a job can be told while it runs (by the host's control API).
pub enum JobCommand {
    /// Take a savepoint (and maybe stop).
    Savepoint(SavepointOrder),
    /// Stop every task; the job ends as cancelled.
    Cancel,
    /// Say how many records have been read and written.
    Progress(Sender<Progress>),
}

/// Where a job starts from.
#[derive(Clone, Copy)]
pub enum Restore<'a> {
    Checkpoint(&'a Manifest),
    Savepoint(&'a Savepoint),
}

impl Restore<'_> {
    /// The checkpoint the state was taken at (a savepoint's in the job it
    /// came from), which transactional sinks clean up to.
    fn checkpoint(&self) -> u64 {
        match self {
            Restore::Checkpoint(manifest) => manifest.checkpoint,
            Restore::Savepoint(savepoint) => savepoint.manifest.checkpoint,
        }
    }
}

/// How to run a job beyond its graph.
#[derive(Default)]
pub struct RunOptions {
    /// Start from this savepoint rather than the latest checkpoint.
    pub savepoint: Option<Savepoint>,
    /// Restore even if the savepoint has state for operators the job lacks.
    pub allow_non_restored_state: bool,
    /// Commands from the host while the job runs.
    pub commands: Option<Receiver<JobCommand>>,
    /// Told when the job's tasks are running (each attempt).
    pub started: Option<Sender<()>>,
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
    /// The counters at the last progress report, for recent rates.
    sampler: Sampler,
    coordinator: Coordinator,
    restored_from: Option<u64>,
    commands: Receiver<JobCommand>,
}

/// Runs `graph` to completion (every source exhausted and every record at a
/// sink). With checkpoints, resumes from the latest complete checkpoint in
/// the job's checkpoint directory; a task failure cancels the run and, as
/// the restart strategy allows, starts it again from the latest checkpoint.
pub fn run_job(graph: &JobGraph, engine: &Arc<PluginEngine>) -> Result<JobSummary, RunError> {
    run_job_with(graph, engine, RunOptions::default())
}

/// [`run_job`], from a savepoint if `options` give one (until the job
/// completes a checkpoint of its own), taking commands while it runs.
pub fn run_job_with(graph: &JobGraph, engine: &Arc<PluginEngine>, options: RunOptions) -> Result<JobSummary, RunError> {
    if let Some(savepoint) = &options.savepoint {
        let check = savepoint.check(graph, options.allow_non_restored_state)?;
        info!(job = %graph.name, savepoint = %savepoint.dir.display(), new = ?check.new_nodes, dropped = ?check.dropped, "restoring from savepoint");
    }
    // Checkpoints from before this run (numbered below this) are not ours
    // to recover from when starting from a savepoint.
    let first_own = match &graph.checkpoints {
        Some(settings) => open_storage(settings)?.next_id(),
        None => 0,
    };
    let commands = options.commands.clone().unwrap_or_else(crossbeam_channel::never);
    let mut restarts = 0;
    loop {
        // A first start from a savepoint has no checkpoint of its own yet.
        let latest = match (&options.savepoint, restarts) {
            (Some(_), 0) => None,
            _ => latest_checkpoint(graph)?.filter(|m| options.savepoint.is_none() || m.checkpoint >= first_own),
        };
        let restore = match (&latest, &options.savepoint) {
            (Some(manifest), _) => Some(Restore::Checkpoint(manifest)),
            (None, Some(savepoint)) => Some(Restore::Savepoint(savepoint)),
            (None, None) => None,
        };
        if let Some(manifest) = latest.as_ref().filter(|m| m.finished) {
            info!(job = %graph.name, checkpoint = manifest.checkpoint, "the job had already finished; nothing to do");
            let mut committer = recovery_committer(graph, Some(manifest));
            if let Err(remaining) = committer.commit_pending_within(Duration::from_secs(60)) {
                return Err(RunError::Checkpoints {
                    dir: graph.checkpoints.as_ref().map(|c| c.dir.clone()).unwrap_or_default(),
                    source: std::io::Error::other(format!("the job finished, but {remaining}; run it again later")),
                });
            }
            let name = graph.name.clone();
            return Ok(JobSummary { name, restored_from: Some(manifest.checkpoint), already_finished: true, ..Default::default() });
        }
        let running = start_job_from(graph, engine, restore, restarts)?.with_commands(commands.clone());
        if let Some(started) = &options.started {
            let _ = started.send(());
        }
        let failure = match running.wait() {
            Ok(summary) => {
                let savepoint = match restore {
                    Some(Restore::Savepoint(savepoint)) => Some(savepoint.dir.clone()),
                    _ => None,
                };
                return Ok(JobSummary { restarts, savepoint, ..summary });
            }
            Err(failure @ RunError::TaskFailed { .. }) => failure,
            Err(other) => return Err(other),
        };
        restarts += 1;
        let Some(delay) = graph.restart.delay_before(restarts) else {
            if restarts == 1 {
                return Err(failure);
            }
            let max_attempts = graph.restart.max_attempts;
            return Err(RunError::RestartsExhausted { last: Box::new(failure), restarts: restarts - 1, max_attempts });
        };
        warn!(job = %graph.name, restart = restarts, delay_ms = delay.as_millis() as u64, cause = %failure, "restarting the job");
        std::thread::sleep(delay);
    }
}

/// The newest complete checkpoint of a checkpointing job.
fn latest_checkpoint(graph: &JobGraph) -> Result<Option<Manifest>, RunError> {
    let Some(settings) = &graph.checkpoints else { return Ok(None) };
    Ok(open_storage(settings)?.latest().manifest)
}

/// A committer for the job's sinks that has committed the output of the
/// checkpoint it restores (again: a crash may have come between the
/// checkpoint's completion and its commits); what it could not commit
/// stays pending in it.
fn recovery_committer(graph: &JobGraph, restored: Option<&Manifest>) -> Committer {
    let mut committer = Committer::new(graph.kafka_sinks());
    if let Some(manifest) = restored {
        committer.commit(manifest.commits());
    }
    committer
}

/// Starts `graph`'s tasks afresh and returns without waiting for them.
pub fn start_job(graph: &JobGraph, engine: &Arc<PluginEngine>) -> Result<RunningJob, RunError> {
    start_job_from(graph, engine, None, 0)
}

/// The job's sources and operators, for savepoint manifests.
fn describe(graph: &JobGraph, plugins: &[Option<LoadedPlugin>]) -> JobDescription {
    let nodes = graph
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            NodeKind::Source(_) => Some(NodeDescription::Source { name: node.name.clone(), parallelism: node.parallelism }),
            NodeKind::Operator(op) => Some(NodeDescription::Operator {
                uid: node.name.clone(),
                plugin: op.plugin.clone(),
                digest: plugins[node.id.0].as_ref().map(|p| p.digest.clone()),
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

/// Starts `graph`'s tasks, on the state of `restore` if given, and returns
/// without waiting for them; `attempt` counts restarts after failures.
/// Plugins, connectors and operator instances are all set up before any
/// task starts, so a bad module, path or config fails here and nothing runs.
pub fn start_job_from(
    graph: &JobGraph,
    engine: &Arc<PluginEngine>,
    restore: Option<Restore<'_>>,
    attempt: u32,
) -> Result<RunningJob, RunError> {
    if let (Some(Restore::Checkpoint(manifest)), Some(settings)) = (restore, &graph.checkpoints) {
        info!(job = %graph.name, checkpoint = manifest.checkpoint, dir = %settings.dir.display(), "resuming from checkpoint");
    }
    let mut builder = Builder::new(graph, engine, restore, attempt)?;
    let mut bodies = Vec::new();
    let chained = builder.chained.clone();
    for node in graph.nodes.iter().filter(|n| !chained[n.id.0]) {
        for subtask in 0..node.parallelism {
            let (index, ctx) = builder.context(node, subtask)?;
            let metrics = ctx.metrics.clone();
            bodies.push((index, format!("weir-{}-{subtask}", node.name), metrics, builder.body(node, subtask, ctx)?));
        }
    }
    info!(job = %graph.name, tasks = bodies.len(), subtasks = builder.subtasks.len(), "job starting");
    let (done_tx, done) = bounded(bodies.len().max(1));
    let threads = bodies
        .into_iter()
        .map(|(index, name, metrics, body)| {
            let done = done_tx.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    metrics.cpu.begin();
                    // A panic must still report, or the supervisor would wait forever.
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                        .unwrap_or_else(|panic| Err(TaskError::Panicked(panic_message(&panic))));
                    metrics.cpu.end();
                    let _ = done.send((index, result));
                })
                .expect("spawn a task thread")
        })
        .collect::<Vec<_>>();
    let started = Instant::now();
    Ok(RunningJob {
        name: graph.name.clone(),
        cancel: builder.cancel,
        running: threads.len(),
        subtasks: builder.subtasks,
        threads,
        done,
        started,
        sampler: Sampler::new(started),
        coordinator: builder.coordinator,
        restored_from: restore.map(|r| r.checkpoint()),
        commands: crossbeam_channel::never(),
    })
}

impl RunningJob {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each subtask's figures so far.
    fn task_summaries(&self) -> Vec<TaskSummary> {
        self.subtasks.iter().map(Subtask::summary).collect()
    }

    /// Records read and written so far, the newest checkpoint, each node.
    pub fn progress(&self) -> Progress {
        let tasks = self.task_summaries();
        Progress {
            read: records_read(&tasks),
            written: records_written(&tasks),
            checkpoint: self.coordinator.completed().latest(),
            nodes: self.sampler.nodes(&tasks),
        }
    }

    /// Logs the records read and written so far, the rate over the last
    /// interval, and the node held back most in it.
    fn report_progress(&mut self) {
        let tasks = self.task_summaries();
        let interval = self.sampler.sample(&tasks);
        let (read, written) = (records_read(&tasks), records_written(&tasks));
        let (node, held_ms_per_s) = interval.most_backpressured.unwrap_or_else(|| ("-".into(), 0.0));
        let backpressured_pct = (held_ms_per_s / 10.0).round() as u64;
        let events_per_s = interval.read_per_s as u64;
        match interval.cores_busy.map(|cores| (cores * 100.0).round() / 100.0) {
            Some(cores_busy) => {
                info!(job = %self.name, read, written, events_per_s, most_backpressured = %node, backpressured_pct, cores_busy, "progress")
            }
            None => info!(job = %self.name, read, written, events_per_s, most_backpressured = %node, backpressured_pct, "progress"),
        }
    }

    /// Records read and written so far, for a status command.
    fn answer_progress(&self, reply: Sender<Progress>) {
        let _ = reply.send(self.progress());
    }

    /// Takes commands from `commands` while supervising.
    pub fn with_commands(mut self, commands: Receiver<JobCommand>) -> Self {
        self.commands = commands;
        self
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
        let stopped_with = self.coordinator.stopped_with().cloned();
        if self.cancel.is_cancelled() && stopped_with.is_none() {
            return Err(RunError::Cancelled);
        }
        let mut checkpoints = CheckpointHistory::default();
        if stopped_with.is_none() {
            let coordinator = &mut self.coordinator;
            let dir = coordinator.dir().to_path_buf();
            coordinator.finish().map_err(|source| RunError::Checkpoints { dir, source })?;
            checkpoints = coordinator.completed().clone();
        }
        let summary = JobSummary {
            name: self.name.clone(),
            duration: self.started.elapsed(),
            restored_from: self.restored_from,
            savepoint: None,
            restarts: 0,
            checkpoints,
            already_finished: false,
            stopped_with,
            tasks: self.task_summaries(),
        };
        let (seconds, read, written) = (summary.duration.as_secs_f64(), summary.records_read(), summary.records_written());
        match &summary.stopped_with {
            Some(savepoint) => {
                info!(job = %self.name, seconds, read, written, savepoint = %savepoint.dir.display(), "job stopped with a savepoint")
            }
            None => info!(job = %self.name, seconds, read, written, "job finished"),
        }
        Ok(summary)
    }

    fn on_command(&mut self, command: JobCommand) {
        match command {
            JobCommand::Progress(reply) => self.answer_progress(reply),
            JobCommand::Cancel => {
                info!(job = %self.name, "cancelling the job");
                self.cancel.cancel();
            }
            JobCommand::Savepoint(order) => self.coordinator.request_savepoint(order),
        }
    }

    fn supervise(&mut self) -> Option<RunError> {
        let mut failure = None;
        while self.running > 0 {
            let acks = self.coordinator.acks().clone();
            let commands = self.commands.clone();
            let done = select! {
                recv(self.done) -> done => Some(done.map_err(|_| ())),
                recv(commands) -> command => {
                    match command {
                        Ok(command) => self.on_command(command),
                        // The host is gone: nobody can send commands any more.
                        Err(_) => self.commands = crossbeam_channel::never(),
                    }
                    None
                }
                recv(acks) -> ack => {
                    if let Ok(ack) = ack {
                        self.coordinator.on_ack(ack);
                    }
                    None
                }
                default(Duration::from_millis(20)) => Some(Err(())),
            };
            self.coordinator.tick();
            if self.coordinator.stopped_with().is_some() && !self.cancel.is_cancelled() {
                info!(job = %self.name, "stopped with a savepoint");
                self.cancel.cancel();
            }
            let Some(done) = done else { continue };
            match done {
                Ok((index, result)) => {
                    self.running -= 1;
                    if result.is_ok() {
                        self.coordinator.task_finished(index);
                    }
                    let (task, cause) = match result {
                        Ok(()) | Err(TaskError::Stopped) => continue,
                        Err(TaskError::Operator { label, error }) => (label, error.to_string()),
                        Err(TaskError::Sink { label, error }) => (label, error.to_string()),
                        Err(TaskError::Connector(error)) => (self.subtasks[index].label.clone(), error.to_string()),
                        Err(TaskError::Panicked(message)) => {
                            (self.subtasks[index].label.clone(), format!("Weir panicked (a bug; please report it): {message}"))
                        }
                    };
                    error!(%task, %cause, "task failed; cancelling the job");
                    self.cancel.cancel();
                    failure.get_or_insert(RunError::TaskFailed { task, cause });
                }
                Err(_) if self.sampler.age() >= PROGRESS_INTERVAL => self.report_progress(),
                Err(_) => {}
            }
        }
        failure
    }
}

type InboxEnds = (InboxSender, Inbox);
type TaskBody = Box<dyn FnOnce() -> Result<(), TaskError> + Send>;

/// Sets up a job's tasks.
struct Builder<'a> {
    graph: &'a JobGraph,
    plugins: Vec<Option<LoadedPlugin>>,
    /// Whether a node runs chained into its upstream's task.
    chained: Vec<bool>,
    inboxes: Vec<Vec<InboxEnds>>,
    subtasks: Vec<Subtask>,
    cancel: Cancel,
    restore: Option<Restore<'a>>,
    attempt: u32,
    coordinator: Coordinator,
    /// Where RocksDB keeps its working files.
    work_dir: PathBuf,
    states: PreloadedStates,
    alignment: JobAlignment,
}

impl<'a> Builder<'a> {
    fn new(
        graph: &'a JobGraph,
        engine: &'a Arc<PluginEngine>,
        restore: Option<Restore<'a>>,
        attempt: u32,
    ) -> Result<Self, RunError> {
        let plugins = load_plugins(graph, engine)?;
        let work_dir = work_dir(graph)?;
        let restored_checkpoint = match restore {
            Some(Restore::Checkpoint(manifest)) => Some(manifest),
            _ => None,
        };
        let coordinator = coordinator(graph, describe(graph, &plugins), restored_checkpoint, &work_dir)?;
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
        })
    }

    /// How `subtask` of `node` reaches the coordinator.
    fn task_checkpoint(&self, index: usize, node: &Node, subtask: u32) -> Option<TaskCheckpoint> {
        Some(TaskCheckpoint { hub: self.coordinator.hub(), index, node: node.name.clone(), subtask })
    }

    /// The splits `subtask` of source `node` reads when resuming (`None`:
    /// from the start).
    fn restored_splits(&self, node: &Node, subtask: u32) -> Option<RestoredSplits> {
        match self.restore? {
            Restore::Checkpoint(manifest) => {
                let has_state = manifest.tasks.iter().any(|t| t.node == node.name);
                has_state.then(|| assign_splits(manifest.source_splits(&node.name), subtask, node.parallelism))
            }
            Restore::Savepoint(savepoint) => savepoint.source_splits(&node.name, subtask, node.parallelism),
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
    fn context(&mut self, node: &Node, subtask: u32) -> Result<(usize, TaskContext), RunError> {
        let (index, label, metrics) = self.register(node, subtask);
        let outputs = self.outputs(node, subtask, &metrics)?;
        let checkpoint = self.task_checkpoint(index, node, subtask);
        Ok((index, TaskContext { label, cancel: self.cancel.clone(), metrics, outputs, checkpoint }))
    }

    fn register(&mut self, node: &Node, subtask: u32) -> (usize, String, Arc<TaskMetrics>) {
        let label = format!("{} (subtask {} of {})", node.describe(), subtask + 1, node.parallelism);
        let metrics = Arc::new(TaskMetrics::default());
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
                let (index, label, metrics) = self.register(consumer, subtask);
                let checkpoint = self.task_checkpoint(index, consumer, subtask);
                let output = edge.output.clone();
                routes.push(if matches!(consumer.kind, NodeKind::Sink(_)) {
                    let sink = SinkWriter::new(label, self.open_sink(consumer, subtask)?, metrics, checkpoint);
                    Route::chained_sink(output, input, sink)
                } else {
                    let instance = self.instantiate(consumer, subtask, &label)?;
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
        Ok(Outputs::new(routes))
    }

    /// Creates an operator instance and runs its `init` (or creates the
    /// built-in native operator a `native:` plugin path names).
    fn instantiate(&self, node: &Node, subtask: u32, label: &str) -> Result<Box<dyn OperatorLogic>, RunError> {
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
        OperatorInstance::new(plugin, *limits, state, &config)
            .map(|instance| Box::new(instance) as Box<dyn OperatorLogic>)
            .map_err(|error: CallError| failed(error.to_string()))
    }

    /// Opens subtask `subtask` of sink `node`.
    fn open_sink(&self, node: &Node, subtask: u32) -> Result<Box<dyn Sink>, RunError> {
        let NodeKind::Sink(spec) = &node.kind else { unreachable!("only sinks are opened as sinks") };
        let hub = self.coordinator.hub();
        let place = SinkPlace {
            job: &self.graph.name,
            subtask,
            parallelism: node.parallelism,
            restored: self.restore.map_or(0, |r| r.checkpoint()),
            checkpoint_dir: hub.dir(),
        };
        connectors::open_sink(spec, &place).map_err(|source| RunError::Connector { node: node.describe(), source })
    }

    /// Opens the subtask's connector or instantiates its operator, and
    /// returns the loop to run on its thread.
    fn body(&mut self, node: &Node, subtask: u32, ctx: TaskContext) -> Result<TaskBody, RunError> {
        let connector_error = |source| RunError::Connector { node: node.describe(), source };
        let inbox = || self.inboxes[node.id.0][subtask as usize].1.clone();
        let producers = producers(self.graph, node);
        Ok(match &node.kind {
            NodeKind::Source(spec) => {
                let splits = self.restored_splits(node, subtask);
                let source = connectors::open_source(spec, subtask, node.parallelism, splits).map_err(connector_error)?;
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
                let instance = self.instantiate(node, subtask, &ctx.label)?;
                let inbox = inbox();
                let kinds = node.inputs.iter().map(|e| input_kind(e.partitioning)).collect();
                Box::new(move || task::run_operator(ctx, instance, inbox, kinds, producers))
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
        Some(Restore::Savepoint(savepoint)) => {
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

/// The message a panic carried.
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => (*message).to_owned(),
        (_, Some(message)) => message.clone(),
        _ => "no message".to_owned(),
    }
}

/// The job's checkpoint directory.
fn open_storage(settings: &CheckpointSettings) -> Result<CheckpointStorage, RunError> {
    CheckpointStorage::open(&settings.dir).map_err(|source| RunError::Checkpoints { dir: settings.dir.clone(), source })
}

/// The job's checkpoint coordinator. A job without a checkpoint directory
/// gets one that takes savepoints only, in a directory of its own.
fn coordinator(
    graph: &JobGraph,
    job: JobDescription,
    restore: Option<&Manifest>,
    work_dir: &std::path::Path,
) -> Result<Coordinator, RunError> {
    let (settings, ephemeral) = match &graph.checkpoints {
        Some(settings) => (settings.clone(), false),
        None => (savepoints_only(work_dir), true),
    };
    let storage = open_storage(&settings)?;
    let subtasks = graph.nodes.iter().map(|n| n.parallelism as usize).sum();
    let committer = recovery_committer(graph, restore);
    let coordinator = Coordinator::new(settings, job, storage, subtasks, restore);
    Ok(coordinator.with_work_dir(work_dir, ephemeral).with_committer(committer))
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
    }
}

/// Where RocksDB keeps working files: beside the checkpoints (same disk,
/// cleared at start: what a killed run left is garbage), else in the
/// temporary directory.
fn work_dir(graph: &JobGraph) -> Result<PathBuf, RunError> {
    let Some(settings) = &graph.checkpoints else {
        let dir = std::env::temp_dir().join("weir-state");
        std::fs::create_dir_all(&dir).map_err(|source| RunError::Checkpoints { dir: dir.clone(), source })?;
        return Ok(dir);
    };
    let dir = settings.dir.join(".work");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|source| RunError::Checkpoints { dir: dir.clone(), source })?;
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
                engine
                    .load_for(&op.plugin, &op.limits)
                    .map(Some)
                    .map_err(|source| RunError::Plugin { uid: node.name.clone(), source })
            }
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
