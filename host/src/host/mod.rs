//! The host: the jobs one `weir` process runs, and what its control API
//! does to them.
//!
//! Each job runs on a thread of its own ([`run_job_with`]) and is driven by
//! [`JobCommand`]s: savepoints, cancellation, progress. Upgrades and forks
//! are made of those: an upgrade checks the new plugin against the running
//! job's state (through a savepoint taken while the job runs on), then
//! stops the job with a savepoint and starts it again from there with the
//! new plugin, under the same name; a fork starts a second job from a
//! savepoint beside the first.

mod fork;
mod fork_file;
mod from_checkpoint;
mod retention;
mod upgrade;

pub use retention::KEPT_HOST_SAVEPOINTS;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded, unbounded};
use tracing::{error, info};

use crate::checkpoint::{SavepointFailure, SavepointOrder};
use crate::control::{
    ControlError, ControlPlane, ForkInfo, ForkRequest, JobInfo, OperatorInfo, SavepointInfo, SavepointRequest,
    UpgradeInfo, UpgradeRequest,
};
use crate::dataflow::{Cancel, JobCommand, JobSummary, Progress, RunError, RunOptions, panic_message, run_job_with};
use crate::dirs::absolute;
use crate::job::{JobGraph, NodeKind};
use crate::plugin::{PluginEngine, now_ms};
use crate::savepoint::{Savepoint, prepare_savepoint_dir};

/// How long a status question may wait for a busy job.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a cancelled job may take to stop before `cancel` says it is
/// stuck (a task in a plugin call without a deadline never returns).
const CANCEL_TIMEOUT: Duration = Duration::from_secs(30);

/// How many cancelled or stopped jobs the host keeps in its table (for
/// `weir jobs` and `/metrics`) beside the running ones: a host that forks
/// and cancels jobs all day would otherwise list every one, each with its
/// metrics series, until it ends. Finished and failed jobs are kept: the
/// host's exit status and report are theirs.
pub const KEPT_ENDED_JOBS: usize = 16;

/// What became of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobStatus {
    Running,
    /// Being stopped and restarted with a new plugin.
    Upgrading,
    Finished,
    Failed(String),
    Cancelled,
    /// Stopped with a savepoint (and not restarted).
    Stopped,
}

impl JobStatus {
    fn word(&self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Upgrading => "upgrading",
            JobStatus::Finished => "finished",
            JobStatus::Failed(_) => "failed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Stopped => "stopped",
        }
    }

    fn is_active(&self) -> bool {
        matches!(self, JobStatus::Running | JobStatus::Upgrading)
    }
}

/// One job of the host (its current incarnation).
struct Job {
    graph: JobGraph,
    status: JobStatus,
    started: Instant,
    /// When its thread ended, for its uptime.
    ended: Option<Instant>,
    commands: Sender<JobCommand>,
    /// Bumped by each incarnation, so a thread that ends late does not
    /// overwrite the status of the one that replaced it.
    generation: u64,
    summary: Option<JobSummary>,
    /// Its figures as `cancel` last saw them: a cancelled run has no summary.
    cancelled_with: Option<JobInfo>,
    /// The figures of its last attempt, if it failed (no summary either).
    failed_with: Option<Progress>,
    /// Cancelled while being upgraded: the upgrade starts no new version.
    cancel_asked: bool,
    /// Set with the cancel command: an attempt still being set up (waiting
    /// for its brokers) reads no commands yet, but gives up on this.
    stop: Cancel,
}

/// The jobs of one host process.
pub struct JobManager {
    engine: Arc<PluginEngine>,
    jobs: Mutex<BTreeMap<String, Job>>,
    /// Signalled whenever a job ends.
    changed: Condvar,
    /// Set by [`JobManager::shut_down`]: no job starts any more.
    shutting_down: AtomicBool,
}

impl JobManager {
    pub fn new(engine: Arc<PluginEngine>) -> Arc<Self> {
        let jobs = Mutex::new(BTreeMap::new());
        Arc::new(JobManager { engine, jobs, changed: Condvar::new(), shutting_down: AtomicBool::new(false) })
    }

    /// Ends the host's jobs for good (`weir run` got SIGTERM or SIGINT):
    /// running ones are cancelled, and none starts from now on — not a
    /// fork, not a job submitted while it was starting, not the new
    /// version of an upgrade under way (which leaves its job stopped with
    /// its savepoint).
    pub fn shut_down(&self) {
        // Under the table's lock, which `start` checks the flag under: a
        // job is either refused or in the table, and cancelled here.
        let jobs = self.lock();
        self.shutting_down.store(true, Ordering::SeqCst);
        for job in jobs.values().filter(|job| job.status == JobStatus::Running) {
            job.stop.cancel();
            let _ = job.commands.send(JobCommand::Cancel);
        }
    }

    fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Job>> {
        self.jobs.lock().expect("job table lock")
    }

    /// Starts `graph` (from `savepoint`, if given) and waits until its tasks
    /// run — or returns why they could not start. An operator whose plugin
    /// is not the one the savepoint was taken with must be able to read
    /// the savepoint's state (see [`upgrade`]).
    pub fn submit(
        self: &Arc<Self>,
        graph: JobGraph,
        savepoint: Option<Savepoint>,
        allow_non_restored_state: bool,
    ) -> Result<(), ControlError> {
        if let Some(savepoint) = &savepoint {
            upgrade::check_changed_plugins(&self.engine, &graph, savepoint)?;
        }
        self.start(graph, savepoint, allow_non_restored_state, None)
    }

    /// [`JobManager::submit`] without checking plugins against the state.
    /// `upgrade_of`: the generation of the job this one replaces in an
    /// upgrade, which a cancel of that job during the upgrade refuses.
    fn start(
        self: &Arc<Self>,
        graph: JobGraph,
        savepoint: Option<Savepoint>,
        allow_non_restored_state: bool,
        upgrade_of: Option<u64>,
    ) -> Result<(), ControlError> {
        let name = graph.name.clone();
        let (commands, receiver) = unbounded();
        let (started_tx, started) = bounded(1);
        let stop = Cancel::default();
        let generation = {
            let mut jobs = self.lock();
            if self.is_shutting_down() {
                return Err(ControlError::Conflict(format!("the host is shutting down; job `{name}` was not started")));
            }
            let previous = jobs.get(&name);
            if previous.is_some_and(|job| Some(job.generation) == upgrade_of && job.cancel_asked) {
                return Err(ControlError::Conflict(format!("job `{name}` was cancelled during its upgrade")));
            }
            if previous.is_some_and(|job| job.status == JobStatus::Running) {
                return Err(ControlError::Conflict(format!("a job named `{name}` is running already; choose another name")));
            }
            let generation = previous.map_or(0, |job| job.generation + 1);
            let job = Job {
                graph: graph.clone(),
                status: JobStatus::Running,
                started: Instant::now(),
                ended: None,
                commands,
                generation,
                summary: None,
                cancelled_with: None,
                failed_with: None,
                cancel_asked: false,
                stop: stop.clone(),
            };
            jobs.insert(name.clone(), job);
            generation
        };
        if let (Some(savepoint), Some(settings)) = (&savepoint, &graph.checkpoints) {
            retention::note_run_from(&savepoint.dir, &settings.dir);
        }
        let figures_at_failure = Arc::new(Mutex::new(None));
        // Held by the job thread until its end is recorded: a job that fails
        // to start closes the channel only then, so that the status read
        // below is its failure, not what it was before (a refused run taken
        // for one that had finished).
        let started_until_ended = started_tx.clone();
        let options = RunOptions {
            savepoint,
            allow_non_restored_state,
            commands: Some(receiver),
            started: Some(started_tx),
            figures_at_failure: Some(figures_at_failure.clone()),
            stop,
        };
        let manager = self.clone();
        std::thread::Builder::new()
            .name(format!("weir-job-{name}"))
            .spawn(move || {
                // A panic must still end the job, or `wait_all` and the
                // control API would wait on it forever.
                let run = std::panic::AssertUnwindSafe(|| run_job_with(&graph, &manager.engine, options));
                let result = std::panic::catch_unwind(run).unwrap_or_else(|panic| {
                    Err(RunError::TaskFailed { task: format!("job `{}`'s supervisor", graph.name), cause: panic_message(&panic) })
                });
                let figures = figures_at_failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                manager.ended(&graph.name, generation, result, figures);
                drop(started_until_ended);
            })
            .expect("spawn a job thread");
        // The job thread says when its tasks run; if it ends first, it failed to start.
        if started.recv().is_err() {
            let jobs = self.lock();
            if let Some(JobStatus::Failed(reason)) = jobs.get(&name).map(|j| &j.status) {
                return Err(ControlError::Rejected(reason.clone()));
            }
            // It had finished already, by its checkpoints.
            return Ok(());
        }
        info!(job = %name, "job started");
        Ok(())
    }

    /// Records how a job's thread ended (with the figures of its last
    /// attempt, if one failed).
    fn ended(&self, name: &str, generation: u64, result: Result<JobSummary, RunError>, figures: Option<Progress>) {
        let mut jobs = self.lock();
        let Some(job) = jobs.get_mut(name).filter(|j| j.generation == generation) else { return };
        job.status = match &result {
            // An upgrade stopped it and starts it again, unless it was cancelled.
            Ok(summary) if summary.stopped_with.is_some() && job.status == JobStatus::Upgrading => match job.cancel_asked {
                true => JobStatus::Cancelled,
                false => JobStatus::Upgrading,
            },
            Ok(summary) if summary.stopped_with.is_some() => JobStatus::Stopped,
            Ok(_) => JobStatus::Finished,
            Err(RunError::Cancelled) => JobStatus::Cancelled,
            Err(error) => {
                error!(job = %name, error = ?error.to_string(), "job failed");
                let way_back = upgrade::way_back(&job.graph, &self.default_savepoint_root(&job.graph));
                JobStatus::Failed(format!("{error}{}", way_back.map(|note| format!("\n({note})")).unwrap_or_default()))
            }
        };
        job.failed_with = figures.filter(|_| matches!(job.status, JobStatus::Failed(_)));
        job.summary = result.ok();
        job.ended = Some(Instant::now());
        forget_old_jobs(&mut jobs);
        drop(jobs);
        self.changed.notify_all();
    }

    /// Waits until no job is running; returns the final status and summary
    /// of each.
    pub fn wait_all(&self) -> Vec<(String, JobStatus, Option<JobSummary>)> {
        let mut jobs = self.lock();
        while jobs.values().any(|j| j.status.is_active()) {
            jobs = self.changed.wait(jobs).expect("job table lock");
        }
        jobs.iter().map(|(name, job)| (name.clone(), job.status.clone(), job.summary.clone())).collect()
    }

    /// Waits until the current incarnation of `name` has ended, for at most
    /// `timeout` if given: `false` if it still runs then.
    fn wait_ended(&self, name: &str, generation: u64, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        let mut jobs = self.lock();
        loop {
            match jobs.get(name) {
                Some(job) if job.generation == generation && job.summary.is_none() && job.status.is_active() => {
                    jobs = match deadline {
                        None => self.changed.wait(jobs).expect("job table lock"),
                        Some(deadline) => {
                            let left = deadline.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                return false;
                            }
                            self.changed.wait_timeout(jobs, left).expect("job table lock").0
                        }
                    };
                }
                _ => return true,
            }
        }
    }

    /// The running job `name`: its graph, command channel and generation.
    fn running(&self, name: &str) -> Result<(JobGraph, Sender<JobCommand>, u64), ControlError> {
        self.active(name, false)
    }

    /// Job `name` if it is running (or, with `upgrading`, being upgraded).
    fn active(&self, name: &str, upgrading: bool) -> Result<(JobGraph, Sender<JobCommand>, u64), ControlError> {
        let jobs = self.lock();
        let job = jobs.get(name).ok_or_else(|| ControlError::NoSuchJob(name.to_owned()))?;
        if job.status != JobStatus::Running && !(upgrading && job.status == JobStatus::Upgrading) {
            return Err(ControlError::Conflict(format!("job `{name}` is {}, not running", job.status.word())));
        }
        Ok((job.graph.clone(), job.commands.clone(), job.generation))
    }

    /// Whether incarnation `generation` of job `name` was cancelled while
    /// it was being upgraded.
    fn cancelled_during_upgrade(&self, name: &str, generation: u64) -> bool {
        self.lock().get(name).is_some_and(|job| job.generation == generation && job.cancel_asked)
    }

    /// An upgrade given up before it stopped the job: the job runs on —
    /// unless another request's savepoint stopped it meanwhile (which
    /// [`JobManager::ended`] took for the upgrade's own stop).
    fn abandon_upgrade(&self, name: &str) {
        let mut jobs = self.lock();
        let Some(job) = jobs.get_mut(name).filter(|j| j.status == JobStatus::Upgrading) else { return };
        job.status = match &job.summary {
            Some(summary) if job.ended.is_some() && summary.stopped_with.is_some() => JobStatus::Stopped,
            Some(_) if job.ended.is_some() => JobStatus::Finished,
            _ => JobStatus::Running,
        };
        drop(jobs);
        self.changed.notify_all();
    }

    /// Asks job `name` (running, or being upgraded) for a savepoint in
    /// `dir` and waits until it is written. `purpose` (such as "be
    /// upgraded") is what a refusal says the job cannot do now.
    fn take_savepoint(&self, name: &str, dir: PathBuf, stop: bool, purpose: &str) -> Result<SavepointInfo, ControlError> {
        let (graph, commands, _) = self.active(name, true)?;
        let checkpoints = graph.checkpoints.as_ref().map(|c| c.dir.as_path());
        let made = !dir.exists();
        prepare_savepoint_dir(&dir, checkpoints).map_err(|error| ControlError::Rejected(error.to_string()))?;
        // A directory made for a savepoint that was not taken goes again
        // (a failed one has removed what it wrote, see `write_savepoint`).
        let unmake = |error: ControlError| {
            if made {
                let _ = std::fs::remove_dir(&dir);
            }
            error
        };
        let (reply, answer) = bounded(1);
        let order = SavepointOrder { dir: dir.clone(), stop, reply, requested: Instant::now() };
        commands
            .send(JobCommand::Savepoint(order))
            .map_err(|_| unmake(ControlError::Conflict(format!("job `{name}` has ended"))))?;
        let answered = match answer.recv() {
            Ok(Ok(info)) => Ok(info),
            Ok(Err(SavepointFailure::NotNow(reason))) => Err(ControlError::Conflict(format!("job `{name}` cannot {purpose} now: {reason}"))),
            Ok(Err(SavepointFailure::Failed(reason))) => Err(ControlError::Failed(format!("savepoint of job `{name}` failed: {reason}"))),
            Err(_) => Err(ControlError::Conflict(format!("job `{name}` ended before its savepoint was written"))),
        };
        answered.map_err(unmake)
    }

    /// Where a savepoint goes when the request names no directory: under
    /// the job's checkpoint directory, else `savepoints/` in the working
    /// directory.
    fn default_savepoint_dir(&self, graph: &JobGraph, label: &str) -> PathBuf {
        self.default_savepoint_root(graph).join(format!("{label}-{}-{}", graph.name, unique_ms()))
    }

    /// The directory of [`JobManager::default_savepoint_dir`]s.
    fn default_savepoint_root(&self, graph: &JobGraph) -> PathBuf {
        absolute(&match &graph.checkpoints {
            Some(settings) => settings.dir.join(crate::checkpoint::layout::SAVEPOINTS),
            None => PathBuf::from("savepoints"),
        })
    }

    /// What the table knows of a job (figures of its end, if it ended), and
    /// the channel to ask a running one for its progress — to use after the
    /// table's lock is released, so that a busy job holds up no one else.
    fn snapshot(name: &str, job: &Job) -> (JobInfo, Option<Sender<JobCommand>>) {
        let uptime_s = job.ended.unwrap_or_else(Instant::now).duration_since(job.started).as_secs_f64();
        if let Some(last) = job.cancelled_with.as_ref().filter(|_| job.status == JobStatus::Cancelled) {
            // Its uptime is that of its last run, as cancel saw it.
            return (JobInfo { status: job.status.word().to_owned(), ..last.clone() }, None);
        }
        let (read, written) = job.summary.as_ref().map_or((0, 0), |s| (s.records_read(), s.records_written()));
        let info = JobInfo {
            name: name.to_owned(),
            status: job.status.word().to_owned(),
            uptime_s,
            read,
            written,
            operators: operators(&job.graph),
            checkpoint: job.summary.as_ref().and_then(|s| s.checkpoints.latest()),
            checkpoints_failed: job.summary.as_ref().map_or(0, |s| s.checkpoints.failed()),
            epochs_behind: 0,
            nodes: job.summary.as_ref().map(JobSummary::nodes).unwrap_or_default(),
            error: match &job.status {
                JobStatus::Failed(reason) => Some(reason.clone()),
                _ => None,
            },
            restarts: job.summary.as_ref().map_or(0, |s| s.restarts),
            last_failure: None,
        };
        let info = match &job.failed_with {
            Some(figures) => with_figures(info, figures.clone()),
            None => info,
        };
        (info, job.status.is_active().then(|| job.commands.clone()))
    }
}

/// Drops all but the [`KEPT_ENDED_JOBS`] most recently ended of the
/// cancelled and stopped jobs.
fn forget_old_jobs(jobs: &mut BTreeMap<String, Job>) {
    let mut forgettable: Vec<(Instant, String)> = jobs
        .iter()
        .filter(|(_, job)| matches!(job.status, JobStatus::Cancelled | JobStatus::Stopped))
        .filter_map(|(name, job)| Some((job.ended?, name.clone())))
        .collect();
    forgettable.sort();
    let excess = forgettable.len().saturating_sub(KEPT_ENDED_JOBS);
    for (_, name) in forgettable.into_iter().take(excess) {
        let status = jobs.remove(&name).map(|job| job.status.word());
        info!(job = %name, status, kept = KEPT_ENDED_JOBS, "the host no longer lists this ended job: it keeps the newest cancelled or stopped ones");
    }
}

/// `info` with the running job's current progress, if it answers in time.
fn with_progress((info, commands): (JobInfo, Option<Sender<JobCommand>>)) -> JobInfo {
    let progress = commands.and_then(|commands| {
        let (reply, answer) = bounded(1);
        commands.send(JobCommand::Progress(reply)).ok()?;
        answer.recv_timeout(STATUS_TIMEOUT).ok()
    });
    match progress {
        Some(progress) => with_figures(info, progress),
        None => info,
    }
}

/// `info` with the figures of a run, current or failed.
fn with_figures(info: JobInfo, progress: Progress) -> JobInfo {
    JobInfo {
        status: if progress.restarting { "restarting".to_owned() } else { info.status },
        // The current run's, as its counters are: a restart starts both
        // afresh, so that read / uptime is the run's rate.
        uptime_s: progress.running_for.as_secs_f64(),
        read: progress.read,
        written: progress.written,
        checkpoint: progress.checkpoint.or(info.checkpoint),
        checkpoints_failed: progress.checkpoints_failed,
        epochs_behind: progress.epochs_behind,
        nodes: progress.nodes,
        restarts: progress.restarts.count,
        last_failure: progress.restarts.last_failure,
        ..info
    }
}

/// The operators of a job, for [`JobInfo`].
fn operators(graph: &JobGraph) -> Vec<OperatorInfo> {
    graph
        .nodes
        .iter()
        .filter_map(|node| match &node.kind {
            NodeKind::Operator(op) => {
                Some(OperatorInfo { uid: node.name.clone(), plugin: op.plugin.clone(), parallelism: node.parallelism })
            }
            _ => None,
        })
        .collect()
}

impl ControlPlane for Arc<JobManager> {
    fn jobs(&self) -> Vec<JobInfo> {
        let snapshots: Vec<_> = self.lock().iter().map(|(name, job)| JobManager::snapshot(name, job)).collect();
        snapshots.into_iter().map(with_progress).collect()
    }

    fn job(&self, name: &str) -> Result<JobInfo, ControlError> {
        let snapshot = {
            let jobs = self.lock();
            let job = jobs.get(name).ok_or_else(|| ControlError::NoSuchJob(name.to_owned()))?;
            JobManager::snapshot(name, job)
        };
        Ok(with_progress(snapshot))
    }

    fn savepoint(&self, name: &str, request: SavepointRequest) -> Result<SavepointInfo, ControlError> {
        let (graph, _, generation) = self.running(name)?;
        let dir = match request.dir {
            Some(dir) => absolute(&dir),
            None => self.default_savepoint_dir(&graph, "savepoint"),
        };
        let info = self.take_savepoint(name, dir, request.stop, "take a savepoint")?;
        if request.stop {
            self.wait_ended(name, generation, None);
        }
        Ok(info)
    }

    /// Cancels job `name`, running or being upgraded: an upgrade under
    /// way then starts no new version (see [`JobManager::start`]).
    fn cancel(&self, name: &str) -> Result<JobInfo, ControlError> {
        let (_, commands, generation) = self.active(name, true)?;
        let last = self.job(name)?;
        if let Some(job) = self.lock().get_mut(name).filter(|j| j.generation == generation) {
            job.cancel_asked = true;
            job.stop.cancel();
            // Stopped by its upgrade already, the new version not started yet.
            if job.status == JobStatus::Upgrading && job.ended.is_some() {
                job.status = JobStatus::Cancelled;
            }
        }
        let _ = commands.send(JobCommand::Cancel);
        if !self.wait_ended(name, generation, Some(CANCEL_TIMEOUT)) {
            return Err(ControlError::Failed(format!(
                "job `{name}` was asked to stop but still runs after {} s: a task is stuck, in a plugin call \
                 without a deadline (call_timeout_ms = 0) or a sink slow to take its input; it ends once that \
                 returns, or stop the `weir run` process to end it now",
                CANCEL_TIMEOUT.as_secs()
            )));
        }
        // Its figures as they were when it was cancelled (a cancelled run has no summary).
        if let Some(job) = self.lock().get_mut(name).filter(|j| j.generation == generation) {
            job.cancelled_with = Some(last.clone());
        }
        Ok(JobInfo { status: self.job(name)?.status, ..last })
    }

    fn upgrade(&self, name: &str, request: UpgradeRequest) -> Result<UpgradeInfo, ControlError> {
        upgrade::upgrade(self, name, request)
    }

    fn fork(&self, request: ForkRequest) -> Result<ForkInfo, ControlError> {
        fork::fork(self, request)
    }
}

/// The time in ms since the epoch, but later than any this process gave
/// before: savepoints asked for at once (in one millisecond) get
/// directories of their own by default, not a refusal for one "there
/// already".
fn unique_ms() -> i64 {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = now_ms();
    let previous = LAST.fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| Some(now.max(last + 1)));
    now.max(previous.unwrap_or(0) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Savepoints asked for in one millisecond get directories of their own.
    #[test]
    fn default_savepoint_times_never_repeat() {
        let times: Vec<i64> = (0..1000).map(|_| unique_ms()).collect();
        assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "each later than the one before");
        assert!(times[0] >= now_ms() - 60_000, "milliseconds since the epoch");
    }
}
