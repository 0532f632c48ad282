//! Runs a [`JobGraph`]: starts the tasks [`super::builder`] sets up (the
//! plugins loaded, connectors opened, operators instantiated on restored
//! state when resuming, forward operators chained), one thread per task,
//! and supervises them to the end — coordinating checkpoints meanwhile,
//! and restarting the job from the latest one when a task fails, as the
//! job's restart strategy allows. Where each start restores from, and the
//! checks before it, are [`super::recovery`]'s.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, select};
use tracing::{error, info, warn};

use super::builder::Builder;
use super::channel::Cancel;
use super::recovery::{
    checkpoints_error, latest_checkpoint, lock_sinks, own_checkpoints_from, recovery_committer, refuse_sinks_in_checkpoint_dirs,
    take_checkpoint_dir,
};
use super::rescale::Rescaled;
use super::resume_check::{check_changed_plugins, check_resumable};
use super::state_check::{WrittenBy, changed_plugins};
use super::figures::{Sampler, node_figures_of_run, records_read, records_written, sinks_watermark};
use super::task::{TaskError, TaskMetrics};
use crate::checkpoint::{CheckpointHistory, CheckpointSettings, Coordinator, LatestCheckpoint, Manifest, SavepointOrder};
use crate::connectors::{Backlog, ConnectorError};
use crate::control::{Counters, NodeInfo, SavepointInfo};
use crate::job::{JobGraph, Node, NodeKind};
use crate::plugin::{PluginEngine, PluginError};
use crate::savepoint::{Savepoint, SavepointError};
use crate::state::{StateError, StateSize};

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
    #[error(
        "checkpoint directory {} is in use by another running job (is this job running already?); \
         stop that job first, or give this one a checkpoint_dir of its own",
        dir.display()
    )]
    CheckpointsInUse { dir: PathBuf },
    #[error("cannot resume job `{job}` from checkpoint {checkpoint} in {}: {reason}", dir.display())]
    NotResumable { job: String, checkpoint: u64, dir: PathBuf, reason: String },
    #[error("cannot restore {task} from checkpoint {checkpoint}: {source}")]
    Restore {
        task: String,
        checkpoint: u64,
        #[source]
        source: StateError,
    },
    #[error("cannot restore from savepoint: {0}")]
    Savepoint(#[from] SavepointError),
    #[error("cannot redistribute checkpoint {checkpoint} in {} to the job's new parallelism: {source}", dir.display())]
    Rescale {
        checkpoint: u64,
        dir: PathBuf,
        #[source]
        source: SavepointError,
    },
    #[error(
        "{last} (gave up after {restarts} restart(s): the restart strategy allows {max_attempts} — a [restart] table \
         in the job file sets it; without one, 3 with checkpoints)"
    )]
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
    pub(super) fn of(node: &Node) -> Self {
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
    /// Its watermark (see [`TaskMetrics::watermark`]).
    pub watermark_ms: Option<i64>,
    /// A source subtask's input yet to read, where it can tell.
    pub backlog: Option<Backlog>,
    /// An operator subtask's keyed state, as last measured.
    pub state: Option<StateSize>,
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// How long the current run has been running (none while it waits to
    /// restart): what the counters below count over.
    pub running_for: Duration,
    pub read: u64,
    pub written: u64,
    /// The newest checkpoint completed by the current run.
    pub checkpoint: Option<LatestCheckpoint>,
    /// Checkpoints of the current run that were abandoned or failed.
    pub checkpoints_failed: u64,
    /// Sink epochs of older checkpoints than the newest not committed yet
    /// (see [`crate::checkpoint::Coordinator::epochs_behind`]).
    pub epochs_behind: u64,
    /// Each source, operator and sink so far.
    pub nodes: Vec<NodeInfo>,
    /// Restarts after task failures so far, and why the last one came.
    pub restarts: Restarts,
    /// It failed and waits to restart (its figures are those of no run).
    pub restarting: bool,
}

/// A job's restarts after task failures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Restarts {
    pub count: u32,
    /// The failure that caused the last one.
    pub last_failure: Option<String>,
}

/// One subtask (run on its own thread or chained into another).
pub(super) struct Subtask {
    pub(super) node: String,
    pub(super) role: Role,
    pub(super) subtask: u32,
    pub(super) label: String,
    pub(super) metrics: Arc<TaskMetrics>,
}

impl Subtask {
    /// Its figures so far.
    fn summary(&self) -> TaskSummary {
        let metrics = &self.metrics;
        let (counters, watermark_ms, backlog, state) =
            (metrics.counters(), metrics.watermark(), metrics.backlog(), metrics.state_size.get());
        TaskSummary { node: self.node.clone(), role: self.role, subtask: self.subtask, counters, watermark_ms, backlog, state }
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
    /// A checkpoint taken at another parallelism: its sources' splits and
    /// operators' state from `state`, the checkpoint written as a
    /// savepoint (see [`super::rescale`]); the rest from the checkpoint.
    Rescaled { checkpoint: &'a Manifest, state: &'a Savepoint },
}

impl<'a> Restore<'a> {
    /// The checkpoint the state was taken at (a savepoint's in the job it
    /// came from), which transactional sinks clean up to.
    pub(super) fn checkpoint(&self) -> u64 {
        match self {
            Restore::Checkpoint(manifest) | Restore::Rescaled { checkpoint: manifest, .. } => manifest.checkpoint,
            Restore::Savepoint(savepoint) => savepoint.manifest.checkpoint,
        }
    }

    /// When the state was taken: the checkpoint's completion, or the
    /// savepoint's writing (ms since the epoch).
    pub(super) fn taken_at_ms(&self) -> i64 {
        match self {
            Restore::Checkpoint(manifest) | Restore::Rescaled { checkpoint: manifest, .. } => manifest.completed_at_ms,
            Restore::Savepoint(savepoint) => savepoint.manifest.taken_at_ms,
        }
    }

    /// The checkpoint resumed, if it is one: its output is committed again
    /// and the new checkpoints are numbered after it.
    pub(super) fn resumed_checkpoint(&self) -> Option<&'a Manifest> {
        match *self {
            Restore::Checkpoint(manifest) | Restore::Rescaled { checkpoint: manifest, .. } => Some(manifest),
            Restore::Savepoint(_) => None,
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
    /// Given the figures of each attempt that fails, for a failed job's
    /// (which has no summary).
    pub figures_at_failure: Option<Arc<Mutex<Option<Progress>>>>,
    /// Set when the host cancels the job: an attempt still being set up —
    /// waiting for its Kafka brokers — gives up at once, before `commands`
    /// is read.
    pub stop: Cancel,
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
    restarts: Restarts,
    figures_at_failure: Option<Arc<Mutex<Option<Progress>>>>,
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
    super::builder::check_plugins(graph, engine)?;
    refuse_sinks_in_checkpoint_dirs(graph)?;
    // Checkpoints from before this run (numbered below this) are not ours
    // to recover from when starting from a savepoint.
    let (first_own, _lock) = take_checkpoint_dir(graph, options.savepoint.is_some())?;
    let _sink_locks = lock_sinks(graph)?;
    // Without a savepoint: the checkpoints of the newest run, if it began
    // from one (those below are an earlier run's).
    let floor = if options.savepoint.is_some() { 0 } else { own_checkpoints_from(graph)? };
    let commands = options.commands.clone().unwrap_or_else(crossbeam_channel::never);
    let mut restarts = 0;
    // Restarts so far and the last failure, for the host to show.
    let mut history = Restarts::default();
    loop {
        // A first start from a savepoint has no checkpoint of its own yet.
        let latest = match (&options.savepoint, restarts) {
            (Some(_), 0) => None,
            (Some(_), _) => latest_checkpoint(graph, first_own)?,
            (None, _) => latest_checkpoint(graph, floor)?,
        };
        let mut rescaled = None;
        if let (Some(manifest), Some(settings)) = (&latest, &graph.checkpoints) {
            let changes = check_resumable(graph, manifest, options.allow_non_restored_state).map_err(|reason| {
                RunError::NotResumable { job: graph.name.clone(), checkpoint: manifest.checkpoint, dir: settings.dir.clone(), reason }
            })?;
            if !changes.is_empty() {
                rescaled = Some(Rescaled::write(graph, &settings.dir, manifest, &changes)?);
            }
            if restarts == 0 {
                check_resumed_plugins(graph, engine, manifest, settings, rescaled.as_ref())?;
            }
        }
        let restore = match (&latest, &rescaled, &options.savepoint) {
            (Some(checkpoint), Some(rescaled), _) => Some(Restore::Rescaled { checkpoint, state: &rescaled.savepoint }),
            (Some(manifest), None, _) => Some(Restore::Checkpoint(manifest)),
            (None, _, Some(savepoint)) => Some(Restore::Savepoint(savepoint)),
            (None, _, None) => None,
        };
        if let Some(manifest) = latest.as_ref().filter(|m| m.finished) {
            info!(job = %graph.name, checkpoint = manifest.checkpoint, "the job had already finished; nothing to do");
            let mut committer = recovery_committer(graph, Some(manifest));
            if let Err(remaining) = committer.commit_pending_within(Duration::from_secs(60)) {
                return Err(checkpoints_error(graph, format!("the job finished, but {remaining}; run it again later")));
            }
            let name = graph.name.clone();
            return Ok(JobSummary { name, restored_from: Some(manifest.checkpoint), already_finished: true, ..Default::default() });
        }
        let running = match start_job_from(graph, engine, restore, restarts, &options.stop) {
            Ok(running) => running
                .with_commands(commands.clone())
                .with_restarts(history.clone())
                .with_figures_at_failure(options.figures_at_failure.clone()),
            // A restart that cannot start — its connectors' brokers still
            // away, its state not restored (a disk still full) — is a
            // failed attempt like one that fails later, so that the restart
            // strategy, not the first retry, decides.
            Err(failure @ (RunError::Connector { .. } | RunError::Restore { .. } | RunError::Rescale { .. }))
                if restarts > 0 =>
            {
                restarts += 1;
                history = restart_after(graph, &commands, failure, restarts)?;
                continue;
            }
            Err(other) => return Err(other),
        };
        // Its operators have loaded their state: the redistributed copy has served.
        if let Some(rescaled) = &rescaled {
            rescaled.discard();
        }
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
        history = restart_after(graph, &commands, failure, restarts)?;
    }
}

/// Decides by the job's restart strategy whether restart number `restarts`
/// follows `failure`, and waits for it; what the host is told meanwhile.
fn restart_after(graph: &JobGraph, commands: &Receiver<JobCommand>, failure: RunError, restarts: u32) -> Result<Restarts, RunError> {
    let Some(delay) = graph.restart.delay_before(restarts) else {
        if restarts == 1 {
            return Err(failure);
        }
        let max_attempts = graph.restart.max_attempts;
        return Err(RunError::RestartsExhausted { last: Box::new(failure), restarts: restarts - 1, max_attempts });
    };
    warn!(job = %graph.name, restart = restarts, delay_ms = delay.as_millis() as u64, cause = ?failure.to_string(), "restarting the job");
    let history = Restarts { count: restarts, last_failure: Some(failure.to_string()) };
    wait_to_restart(commands, delay, &history)?;
    Ok(history)
}

/// Waits `delay` before a restart, answering what the host asks meanwhile:
/// a cancel ends the job at once, a progress request learns that it is
/// restarting and why, and a savepoint is refused — there is no running
/// job to take it of until the restart.
fn wait_to_restart(commands: &Receiver<JobCommand>, delay: Duration, history: &Restarts) -> Result<(), RunError> {
    let restart_at = Instant::now() + delay;
    loop {
        let left = restart_at.saturating_duration_since(Instant::now());
        match commands.recv_timeout(left) {
            Ok(JobCommand::Cancel) => return Err(RunError::Cancelled),
            Ok(JobCommand::Progress(reply)) => {
                let progress = Progress { restarts: history.clone(), restarting: true, ..Progress::default() };
                let _ = reply.send(progress);
            }
            Ok(JobCommand::Savepoint(order)) => order.not_now(format!(
                "the job failed and restarts in {:.1} s; ask again once it runs (the failure: {})",
                left.as_secs_f64(),
                history.last_failure.as_deref().unwrap_or("unknown")
            )),
            Err(RecvTimeoutError::Timeout) => return Ok(()),
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(left);
                return Ok(());
            }
        }
    }
}

/// The stack of a task thread: operators chained into it call each other
/// (up to a job's most operators), each call into a plugin on it. Only what
/// is used is backed by memory.
const TASK_STACK_BYTES: usize = 16 << 20;

/// Starts `graph`'s tasks afresh and returns without waiting for them.
pub fn start_job(graph: &JobGraph, engine: &Arc<PluginEngine>) -> Result<RunningJob, RunError> {
    start_job_from(graph, engine, None, 0, &Cancel::default())
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
    stop: &Cancel,
) -> Result<RunningJob, RunError> {
    if let (Some(restore), Some(settings)) = (restore, &graph.checkpoints)
        && let Some(manifest) = restore.resumed_checkpoint()
    {
        info!(job = %graph.name, checkpoint = manifest.checkpoint, dir = %settings.dir.display(), "resuming from checkpoint");
    }
    let mut builder = Builder::new(graph, engine, restore, attempt, stop.clone())?;
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
                .stack_size(TASK_STACK_BYTES)
                .spawn(move || {
                    metrics.cpu.begin();
                    // A panic must still report, or the supervisor would wait forever.
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                        .unwrap_or_else(|panic| Err(TaskError::Panicked(panic_message(&panic))));
                    metrics.finish();
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
        restarts: Restarts::default(),
        figures_at_failure: None,
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
            running_for: self.started.elapsed(),
            read: records_read(&tasks),
            written: records_written(&tasks),
            checkpoint: self.coordinator.completed().latest(),
            checkpoints_failed: self.coordinator.completed().failed(),
            epochs_behind: self.coordinator.epochs_behind(),
            nodes: self.sampler.nodes(&tasks),
            restarts: self.restarts.clone(),
            restarting: false,
        }
    }

    /// Logs the records read and written so far, the rate over the last
    /// interval, the node held back most in it, how many cores the job
    /// kept busy and, in event time, how far its sinks' watermark has come.
    fn report_progress(&mut self) {
        let tasks = self.task_summaries();
        let interval = self.sampler.sample(&tasks);
        let (read, written) = (records_read(&tasks), records_written(&tasks));
        let (node, held_ms_per_s) = interval.most_backpressured.unwrap_or_else(|| ("-".into(), 0.0));
        let backpressured_pct = (held_ms_per_s / 10.0).round() as u64;
        let events_per_s = interval.read_per_s as u64;
        let cores_busy = interval.cores_busy.map(|cores| (cores * 100.0).round() / 100.0);
        let watermark_ms = sinks_watermark(&tasks);
        info!(
            job = %self.name,
            read,
            written,
            events_per_s,
            most_backpressured = %node,
            backpressured_pct,
            cores_busy,
            watermark_ms,
            "progress"
        );
    }

    /// Records read and written so far, for a status command.
    fn answer_progress(&self, reply: Sender<Progress>) {
        let _ = reply.send(self.progress());
    }

    /// Reports `restarts` as the job's restarts so far.
    pub fn with_restarts(mut self, restarts: Restarts) -> Self {
        self.restarts = restarts;
        self
    }

    /// Gives its figures to `figures` if it fails.
    pub fn with_figures_at_failure(mut self, figures: Option<Arc<Mutex<Option<Progress>>>>) -> Self {
        self.figures_at_failure = figures;
        self
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
        let stopped_with = self.coordinator.stopped_with().cloned();
        if let Some(failure) = failure {
            // A complete savepoint is a consistent cut whatever failed after
            // it: the stop was answered with it, so the job ends here rather
            // than restart and run on past the savepoint it handed over.
            if let Some(savepoint) = &stopped_with {
                warn!(job = %self.name, savepoint = %savepoint.dir.display(), cause = %failure,
                    "a task failed after the stop's savepoint was complete; the savepoint stands");
            } else {
                if let Some(figures) = &self.figures_at_failure {
                    *figures.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.progress());
                }
                return Err(failure);
            }
        }
        if self.cancel.is_cancelled() && stopped_with.is_none() {
            return Err(RunError::Cancelled);
        }
        if stopped_with.is_none() {
            let coordinator = &mut self.coordinator;
            let dir = coordinator.dir().to_path_buf();
            coordinator.finish().map_err(|source| RunError::Checkpoints { dir, source })?;
        }
        // (A job stopped with a savepoint keeps its figures too.)
        let checkpoints = self.coordinator.completed().clone();
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
            if failure.is_none()
                && let Some(cause) = self.coordinator.failing()
            {
                error!(job = %self.name, %cause, "checkpoints keep failing; failing the job over");
                self.cancel.cancel();
                failure = Some(RunError::TaskFailed { task: "the checkpoints".to_owned(), cause });
            }
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
                    // Debug, escaping newlines: a log event is one line (a plugin's stack has many).
                    error!(%task, cause = ?cause, "task failed; cancelling the job");
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

/// The message a panic carried.
pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => (*message).to_owned(),
        (_, Some(message)) => message.clone(),
        _ => "no message".to_owned(),
    }
}

/// Refuses to resume an operator with another plugin than the one that
/// wrote its state in checkpoint `manifest` (a job file edited across a
/// restart, an upgraded plugin gone) unless the plugin can read that state:
/// the checkpoint is laid out by key group, as for a rescale, and every
/// value offered to the plugin's `check-state`.
fn check_resumed_plugins(
    graph: &JobGraph,
    engine: &PluginEngine,
    manifest: &Manifest,
    settings: &CheckpointSettings,
    rescaled: Option<&Rescaled>,
) -> Result<(), RunError> {
    if manifest.finished {
        return Ok(());
    }
    let changed = changed_plugins(graph, engine, |uid| WrittenBy::of_checkpoint(manifest, uid))?;
    if changed.is_empty() {
        return Ok(());
    }
    let copy;
    let state = match rescaled {
        Some(rescaled) => &rescaled.savepoint,
        None => {
            let why: Vec<String> = changed.iter().map(|(uid, _)| format!("operator `{uid}`'s new plugin or config to check")).collect();
            copy = Rescaled::write(graph, &settings.dir, manifest, &why)?;
            &copy.savepoint
        }
    };
    check_changed_plugins(graph, manifest, &changed, state).map_err(|reason| RunError::NotResumable {
        job: graph.name.clone(),
        checkpoint: manifest.checkpoint,
        dir: settings.dir.clone(),
        reason,
    })
}
