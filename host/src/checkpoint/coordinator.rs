//! The checkpoint coordinator of a job and the hub its tasks reach it by.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use tracing::{info, warn};

use super::{CheckpointHistory, CheckpointStats, CheckpointStorage, CommitQueue, Committer, Manifest, OperatorPlugin, PendingCommit, TaskState};
use crate::control::SavepointInfo;
use crate::plugin::now_ms;
use crate::savepoint::{JobDescription, SavepointError, write_savepoint};
use crate::state::SnapshotTarget;

/// The checkpoint id sinks acknowledge their output at the end of input with.
pub const FINAL_CHECKPOINT: u64 = u64::MAX;
/// The checkpoint id an exhausted source (with no operators chained into
/// its task) acknowledges its final position with: it belongs to every
/// later checkpoint, so checkpoints go on while other sources still run.
pub const SOURCE_FINISHED: u64 = u64::MAX - 1;

/// How a job checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointSettings {
    pub dir: PathBuf,
    pub interval: Duration,
    /// How many completed checkpoints to keep.
    pub retain: usize,
    /// A checkpoint not complete after this long is abandoned.
    pub timeout: Duration,
    /// How many checkpoints may fail in a row before the job fails over
    /// (see [`Coordinator::failing`]).
    pub tolerable_failures: u32,
}

/// Work for the persister thread: writing a captured snapshot.
pub type PersistJob = Box<dyn FnOnce() + Send>;

/// A subtask's acknowledgement of a checkpoint.
pub struct Ack {
    pub checkpoint: u64,
    /// The subtask's index in the job.
    pub subtask: usize,
    pub state: Result<TaskState, String>,
    pub alignment: Duration,
    pub sync: Duration,
    /// The newest barrier the subtask had passed when it sent this. A final
    /// state stands for the subtask only in later checkpoints: an operator
    /// acknowledges a barrier once its snapshot is written, which can be
    /// after it has ended.
    pub seen: u64,
}

/// A request for a savepoint: the next checkpoint, rewritten into `dir` in
/// the canonical savepoint format once complete; with `stop`, sources read
/// nothing after its barrier and the job stops once it is written.
pub struct SavepointOrder {
    pub dir: PathBuf,
    pub stop: bool,
    pub reply: Sender<Result<SavepointInfo, SavepointFailure>>,
    pub requested: Instant,
}

/// Why a savepoint was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavepointFailure {
    /// The job is not in a state to take one (restarting, finishing,
    /// already stopping): asking again later may succeed.
    NotNow(String),
    /// Taking it failed.
    Failed(String),
}

impl SavepointOrder {
    /// Answers that taking the savepoint failed, and why.
    pub fn fail(self, reason: impl Into<String>) {
        let _ = self.reply.send(Err(SavepointFailure::Failed(reason.into())));
    }

    /// Answers that the job cannot take a savepoint now, and why.
    pub fn not_now(self, reason: impl Into<String>) {
        let _ = self.reply.send(Err(SavepointFailure::NotNow(reason.into())));
    }
}

/// What tasks share with the coordinator.
pub struct CheckpointHub {
    requested: AtomicU64,
    /// The checkpoint sources stop at (a stop-with-savepoint); 0: none.
    stop_at: AtomicU64,
    /// The newest checkpoint triggered for a savepoint; 0: none.
    savepoint_at: AtomicU64,
    acks: Sender<Ack>,
    /// Jobs for the persister thread; `None` tells it to stop.
    persist: Sender<Option<PersistJob>>,
    storage: CheckpointStorage,
    /// The newest complete checkpoint (0: none yet).
    completed: AtomicU64,
}

impl CheckpointHub {
    /// The newest checkpoint that completed in this run (0: none yet).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// The job's checkpoint directory.
    pub fn dir(&self) -> &Path {
        self.storage.root()
    }

    /// The newest checkpoint the coordinator has triggered (0: none yet).
    pub fn requested(&self) -> u64 {
        self.requested.load(Ordering::Acquire)
    }

    /// The checkpoint after whose barrier sources read nothing more.
    pub fn stop_at(&self) -> Option<u64> {
        Some(self.stop_at.load(Ordering::Acquire)).filter(|&id| id != 0)
    }

    /// Whether checkpoint `id` is taken for a savepoint (sinks then
    /// commit all they have written: a savepoint's output is whole).
    pub fn is_savepoint(&self, id: u64) -> bool {
        self.savepoint_at.load(Ordering::Acquire) == id
    }

    pub fn ack(&self, ack: Ack) {
        let _ = self.acks.send(ack);
    }

    /// Runs `job` on the persister thread, so the task goes on processing.
    pub fn persist(&self, job: PersistJob) {
        let _ = self.persist.send(Some(job));
    }

    /// Where `subtask` of `node` writes its files for `checkpoint`.
    pub fn target(&self, checkpoint: u64, node: &str, subtask: u32) -> SnapshotTarget {
        SnapshotTarget {
            root: self.storage.root().to_path_buf(),
            dir: CheckpointStorage::dir_name(checkpoint),
            name: format!("{node}-{subtask}"),
        }
    }
}

/// A checkpoint waiting for acknowledgements.
struct InFlight {
    id: u64,
    started: Instant,
    states: Vec<Option<TaskState>>,
    missing: usize,
    alignment: Duration,
    sync: Duration,
    savepoint: Option<SavepointOrder>,
    /// The subtasks whose final state it took (see [`Finished`]).
    from_finished: Vec<usize>,
}

impl InFlight {
    fn fill(&mut self, index: usize, state: TaskState) {
        if self.states[index].replace(state).is_none() {
            self.missing -= 1;
        }
    }

    /// Takes `finished`'s final state for its subtask, unless the subtask
    /// passed this checkpoint's barrier before it ended (its own snapshot
    /// stands for it, acknowledged or on its way).
    fn fill_finished(&mut self, finished: &mut Finished) {
        if self.id <= finished.seen || self.states[finished.index].is_some() {
            return;
        }
        // A sink's last output is this checkpoint's to commit.
        for commit in &mut finished.state.commits {
            commit.take_into_checkpoint(self.id);
        }
        self.fill(finished.index, finished.state.clone());
        self.from_finished.push(finished.index);
    }
}

/// A subtask that has finished — its input ended — and what it ended
/// with, which every later checkpoint takes as its state, so that a job
/// goes on checkpointing while other parts of it still run (a bounded
/// branch beside an unbounded one; source subtasks left without a split
/// by a rescale). A source ends at its final positions; a sink with the
/// output it wrote since its last checkpoint, committed by the first
/// checkpoint to complete after; an operator with nothing: no input will
/// ever reach it again, so a restore starts it empty and it ends at once.
struct Finished {
    index: usize,
    state: TaskState,
    /// The newest barrier it passed ([`Ack::seen`]).
    seen: u64,
    /// A source's final positions, which the final manifest leaves out.
    source: bool,
}

/// Triggers checkpoints, collects acknowledgements and completes them.
pub struct Coordinator {
    settings: CheckpointSettings,
    job: JobDescription,
    /// What the job file names, for the manifests (see there).
    job_file_plugins: Vec<OperatorPlugin>,
    /// Where a RocksDB checkpoint is opened to be rewritten as a savepoint.
    work_dir: PathBuf,
    /// Savepoints asked for and not yet started.
    orders: VecDeque<SavepointOrder>,
    /// The savepoint the job stopped with.
    stopped_with: Option<SavepointInfo>,
    /// The checkpoint directory is the coordinator's own (the job file
    /// has none; only savepoints are taken): removed at the end.
    ephemeral: bool,
    storage: CheckpointStorage,
    /// The directory's lineage, which every manifest records.
    lineage: Option<String>,
    hub: Arc<CheckpointHub>,
    persister: Option<std::thread::JoinHandle<()>>,
    acks: Receiver<Ack>,
    subtasks: usize,
    next_id: u64,
    last_trigger: Instant,
    in_flight: Option<InFlight>,
    /// Once a task has finished without saying what it ended with, no
    /// checkpoint can complete: its state is gone.
    stopped: bool,
    /// Subtasks that have finished, with what they ended with.
    finished: Vec<Finished>,
    /// Files of the last completed checkpoint (to tell written from shared).
    previous_files: HashSet<String>,
    completed: CheckpointHistory,
    commits: CommitQueue,
}

impl Coordinator {
    /// A coordinator for a job of `subtasks` subtasks, numbering
    /// checkpoints past every one in the directory.
    pub fn new(
        settings: CheckpointSettings,
        job: JobDescription,
        storage: CheckpointStorage,
        subtasks: usize,
        restored: Option<&Manifest>,
    ) -> Self {
        let (acks_tx, acks) = unbounded();
        let (persist_tx, persist_rx) = unbounded::<Option<PersistJob>>();
        let persister = std::thread::Builder::new()
            .name("weir-checkpoint-io".into())
            .spawn(move || persist_rx.iter().map_while(|job| job).for_each(|job| job()))
            .expect("spawn the checkpoint persister");
        let hub = Arc::new(CheckpointHub {
            requested: AtomicU64::new(0),
            stop_at: AtomicU64::new(0),
            savepoint_at: AtomicU64::new(0),
            acks: acks_tx,
            persist: persist_tx,
            storage: storage.clone(),
            completed: AtomicU64::new(0),
        });
        let previous_files = restored.map(|m| m.files().map(|f| f.path.clone()).collect()).unwrap_or_default();
        Coordinator {
            next_id: storage.next_id(),
            settings,
            job_file_plugins: job.definition.as_ref().map(crate::job::named_plugins).unwrap_or_default(),
            job,
            work_dir: std::env::temp_dir(),
            orders: VecDeque::new(),
            stopped_with: None,
            ephemeral: false,
            lineage: storage.lineage().ok(),
            storage,
            hub,
            persister: Some(persister),
            acks,
            subtasks,
            last_trigger: Instant::now(),
            in_flight: None,
            stopped: false,
            finished: Vec::new(),
            previous_files,
            completed: CheckpointHistory::default(),
            commits: CommitQueue::start(Committer::new(Vec::new())),
        }
    }

    /// Commits sinks' output with `committer` (which knows the job's Kafka
    /// sinks and may hold output not committed yet), on a thread of its own.
    pub fn with_committer(mut self, committer: Committer) -> Self {
        self.commits = CommitQueue::start(committer);
        self
    }

    /// Numbers the checkpoints after `checkpoint`, the one the job restores
    /// from, if the directory's own numbers are lower: a job restored from
    /// a savepoint may have no checkpoints of its own, and a files sink
    /// names its committed parts by checkpoint — taking a number again
    /// would overwrite them.
    pub fn numbered_after(mut self, checkpoint: u64) -> Self {
        self.next_id = self.next_id.max(checkpoint + 1);
        self
    }

    /// Records in the checkpoint directory that the run starts from the
    /// savepoint in `dir` (see [`SavepointStart`]): from now on the
    /// directory's earlier checkpoints are not the job's to resume.
    pub fn record_savepoint_start(&self, dir: &Path) -> std::io::Result<()> {
        let start = super::SavepointStart {
            savepoint: crate::dirs::absolute(dir),
            first_checkpoint: self.next_id,
            plugins: self.job.plugins(),
            job_file_plugins: self.job_file_plugins.clone(),
        };
        start.write(&self.storage)
    }

    /// Rewrites savepoints from `work_dir`; with `ephemeral`, the checkpoint
    /// directory is removed when the coordinator is dropped.
    pub fn with_work_dir(mut self, work_dir: &Path, ephemeral: bool) -> Self {
        self.work_dir = work_dir.to_path_buf();
        self.ephemeral = ephemeral;
        self
    }

    /// Takes a savepoint at the next checkpoint (right away, unless one is
    /// in flight); the order's reply says when it is written.
    pub fn request_savepoint(&mut self, order: SavepointOrder) {
        if self.stopped {
            return order.not_now("the job is finishing: some of its tasks have ended, so no savepoint can complete");
        }
        if order.stop && (self.orders.iter().any(|o| o.stop) || self.stopped_with.is_some()) {
            return order.not_now("the job is already stopping with a savepoint");
        }
        self.orders.push_back(order);
    }

    /// The savepoint the job has stopped with: the supervisor cancels the
    /// tasks, which have nothing more to do.
    pub fn stopped_with(&self) -> Option<&SavepointInfo> {
        self.stopped_with.as_ref()
    }

    pub fn hub(&self) -> Arc<CheckpointHub> {
        self.hub.clone()
    }

    /// Acknowledgements to pass to [`Coordinator::on_ack`].
    pub fn acks(&self) -> &Receiver<Ack> {
        &self.acks
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &std::path::Path {
        self.storage.root()
    }

    /// Why the job must fail over, if more checkpoints than its
    /// `tolerable_failed_checkpoints` failed in a row: a state backend that
    /// failed once may fail every snapshot after (RocksDB after a disk was
    /// full), and a job that runs on without checkpoints has nothing to
    /// recover from but an ever older one. The restart starts its tasks
    /// afresh from the newest checkpoint.
    pub fn failing(&self) -> Option<String> {
        let in_a_row = self.completed.failed_in_a_row();
        (in_a_row > u64::from(self.settings.tolerable_failures)).then(|| {
            let failed = match in_a_row {
                1 => "a checkpoint failed".to_owned(),
                n => format!("{n} checkpoints failed in a row"),
            };
            format!(
                "{failed}, more than tolerable_failed_checkpoints = {} allows; the last: {}",
                self.settings.tolerable_failures,
                self.completed.last_failure().unwrap_or("unknown")
            )
        })
    }

    /// Sink epochs of checkpoints older than the newest completed one that
    /// are not committed yet: a Kafka sink's brokers away, or its
    /// write-ahead log damaged (the log says which) — output held back.
    /// An epoch waits for its commit thread only moments after its
    /// checkpoint completes, so those of the newest are not counted.
    pub fn epochs_behind(&self) -> u64 {
        let Some(newest) = self.completed.latest().map(|c| c.id) else { return 0 };
        let behind = |commit: &PendingCommit| matches!(commit, PendingCommit::Kafka(epoch) if epoch.checkpoint < newest);
        self.commits.count_outstanding(behind) as u64
    }

    /// The checkpoints completed so far (and how many failed).
    pub fn completed(&self) -> &CheckpointHistory {
        &self.completed
    }

    /// Triggers the next checkpoint when it is due; abandons one that has
    /// taken too long.
    pub fn tick(&mut self) {
        if let Some(flight) = &self.in_flight
            && flight.started.elapsed() > self.settings.timeout
        {
            warn!(checkpoint = flight.id, missing = flight.missing, "checkpoint timed out; abandoning it");
            let reason = format!("it timed out after {} ms", self.settings.timeout.as_millis());
            self.abandon(&reason, SavepointOrder::fail);
        }
        let due = self.last_trigger.elapsed() >= self.settings.interval || !self.orders.is_empty();
        if self.stopped || self.in_flight.is_some() || !due || self.stopped_with.is_some() {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.last_trigger = Instant::now();
        let mut flight = InFlight {
            id,
            started: Instant::now(),
            states: vec![None; self.subtasks],
            missing: self.subtasks,
            alignment: Duration::ZERO,
            sync: Duration::ZERO,
            savepoint: self.orders.pop_front(),
            from_finished: Vec::new(),
        };
        if flight.savepoint.is_some() {
            // Before the barrier is requested, so every sink sees it.
            self.hub.savepoint_at.store(id, Ordering::Release);
        }
        if flight.savepoint.as_ref().is_some_and(|o| o.stop) {
            // Before the barrier is requested, so every source sees both.
            self.hub.stop_at.store(id, Ordering::Release);
        }
        for finished in &mut self.finished {
            flight.fill_finished(finished);
        }
        self.in_flight = Some(flight);
        self.hub.requested.store(id, Ordering::Release);
    }

    /// The task of subtask `index` (and of the subtasks chained into it)
    /// has finished. Unless it said what it ended with, checkpoints can no
    /// longer complete (except one it has already acknowledged).
    pub fn task_finished(&mut self, index: usize) {
        // Its subtasks acknowledged before the task ended: take that first.
        while let Ok(ack) = self.acks.try_recv() {
            self.on_ack(ack);
        }
        if !self.finished.iter().any(|f| f.index == index) {
            self.stopped = true;
            for order in self.orders.drain(..) {
                order.not_now("the job finished before the savepoint could be taken");
            }
            if self.in_flight.as_ref().is_some_and(|f| f.savepoint.is_some() && f.states[index].is_none()) {
                self.abandon("the job finished before the savepoint was complete", SavepointOrder::not_now);
            }
        }
    }

    /// Gives up the checkpoint in flight; a savepoint waiting on it is
    /// answered by `answer` (failed, or not possible now) and stopped
    /// sources go on.
    fn abandon(&mut self, reason: &str, answer: fn(SavepointOrder, String)) {
        let Some(flight) = self.in_flight.take() else { return };
        self.completed.record_failure(reason);
        if let Some(order) = flight.savepoint {
            self.hub.stop_at.store(0, Ordering::Release);
            answer(order, format!("checkpoint {} for the savepoint failed: {reason}", flight.id));
        }
    }

    pub fn on_ack(&mut self, ack: Ack) {
        if ack.checkpoint == FINAL_CHECKPOINT || ack.checkpoint == SOURCE_FINISHED {
            let Ok(state) = ack.state else { return };
            let mut finished = Finished { index: ack.subtask, state, seen: ack.seen, source: ack.checkpoint == SOURCE_FINISHED };
            if let Some(flight) = self.in_flight.as_mut() {
                flight.fill_finished(&mut finished);
            }
            self.finished.push(finished);
            self.complete_if_done();
            return;
        }
        let Some(flight) = self.in_flight.as_mut().filter(|f| f.id == ack.checkpoint) else { return };
        match ack.state {
            Err(reason) => {
                warn!(checkpoint = flight.id, %reason, "a subtask could not snapshot; abandoning the checkpoint");
                self.abandon(&format!("a subtask could not snapshot: {reason}"), SavepointOrder::fail);
            }
            Ok(state) => {
                flight.fill(ack.subtask, state);
                flight.alignment = flight.alignment.max(ack.alignment);
                flight.sync = flight.sync.max(ack.sync);
                self.complete_if_done();
            }
        }
    }

    fn complete_if_done(&mut self) {
        if self.in_flight.as_ref().is_some_and(|f| f.missing == 0) {
            let flight = self.in_flight.take().expect("in flight");
            self.complete(flight);
        }
    }

    fn complete(&mut self, mut flight: InFlight) {
        let order = flight.savepoint.take();
        let mut tasks: Vec<TaskState> = flight.states.into_iter().flatten().collect();
        tasks.sort_by(|a, b| (&a.node, a.subtask).cmp(&(&b.node, b.subtask)));
        let mut manifest = self.manifest(flight.id, false, tasks);
        manifest.carried = self.commits.outstanding();
        let files: HashSet<String> = manifest.files().map(|f| f.path.clone()).collect();
        manifest.stats = CheckpointStats {
            duration_ms: ms(flight.started.elapsed()),
            alignment_ms: ms(flight.alignment),
            sync_ms: ms(flight.sync),
            size_bytes: manifest.files().map(|f| f.size).sum(),
            written_bytes: manifest.files().filter(|f| !self.previous_files.contains(&f.path)).map(|f| f.size).sum(),
        };
        if let Err(error) = self.storage.write_manifest(&manifest) {
            warn!(checkpoint = flight.id, %error, "cannot write the checkpoint manifest; the checkpoint failed");
            self.completed.record_failure(&format!("its manifest could not be written: {error}"));
            if let Some(order) = order {
                self.hub.stop_at.store(0, Ordering::Release);
                order.fail(format!("cannot write the manifest of checkpoint {}: {error}", flight.id));
            }
            return;
        }
        let stats = &manifest.stats;
        info!(
            checkpoint = flight.id,
            duration_ms = stats.duration_ms,
            size_bytes = stats.size_bytes,
            written_bytes = stats.written_bytes,
            alignment_ms = stats.alignment_ms,
            sync_ms = stats.sync_ms,
            "checkpoint complete"
        );
        self.hub.completed.store(flight.id, Ordering::Release);
        self.commits.push(manifest.tasks.iter().flat_map(|t| t.commits.iter().cloned()));
        // Finished sinks' last output is committed with this checkpoint:
        // later ones need not hand it over again.
        for finished in self.finished.iter_mut().filter(|f| flight.from_finished.contains(&f.index)) {
            finished.state.commits.clear();
        }
        if let Some(order) = order {
            self.savepoint(&manifest, order);
        }
        self.storage.retain(flight.id, self.settings.retain);
        self.previous_files = files;
        self.completed.record(flight.id, manifest.stats);
    }

    /// Rewrites the checkpoint just completed as the savepoint `order` asked
    /// for (before retention may delete it).
    fn savepoint(&mut self, manifest: &Manifest, order: SavepointOrder) {
        match write_savepoint(manifest, self.storage.root(), &self.job, &order.dir, &self.work_dir) {
            Ok(savepoint) => {
                let mut info = SavepointInfo {
                    job: self.job.name.clone(),
                    dir: order.dir.clone(),
                    checkpoint: manifest.checkpoint,
                    size_bytes: savepoint.files().map(|f| f.size).sum(),
                    entries: savepoint.operators.iter().flat_map(|o| &o.keyed).map(|k| k.entries).sum(),
                    duration_ms: ms(order.requested.elapsed()),
                    uncommitted: 0,
                };
                if order.stop {
                    // The job ends here: its output up to the savepoint
                    // should be committed first (the savepoint holds state,
                    // not output; only the checkpoint directory does).
                    if let Err(remaining) = self.commits.wait_until_done() {
                        warn!(checkpoint = manifest.checkpoint, remaining, "stopped with a savepoint, but not all output before it is committed: it is committed when the job resumes from its checkpoints, or from this savepoint with its checkpoint directory in place");
                        info.uncommitted = self.commits.outstanding().len();
                    }
                    self.stopped_with = Some(info.clone());
                }
                let _ = order.reply.send(Ok(info));
            }
            Err(error) => {
                self.hub.stop_at.store(0, Ordering::Release);
                warn!(checkpoint = manifest.checkpoint, %error, "cannot write the savepoint");
                match error {
                    // The directory was free when the savepoint was asked
                    // for; another request took it meanwhile.
                    SavepointError::Refused { .. } => order.not_now(error.to_string()),
                    _ => order.fail(error.to_string()),
                }
            }
        }
    }

    fn manifest(&self, checkpoint: u64, finished: bool, tasks: Vec<TaskState>) -> Manifest {
        Manifest {
            format: super::manifest::FORMAT_VERSION,
            job: self.job.name.clone(),
            checkpoint,
            finished,
            completed_at_ms: now_ms(),
            max_parallelism: self.job.max_parallelism,
            backend: self.job.backend.kind,
            tasks,
            carried: Vec::new(),
            stats: CheckpointStats::default(),
            plugins: self.job.plugins(),
            job_file_plugins: self.job_file_plugins.clone(),
            lineage: self.lineage.clone(),
        }
    }

    /// The job has finished: records that in a last manifest, then commits
    /// the sinks' final output — so a restart after this point finds the
    /// job done rather than replaying into committed output.
    pub fn finish(&mut self) -> std::io::Result<()> {
        while let Ok(ack) = self.acks.try_recv() {
            self.on_ack(ack);
        }
        let id = self.next_id.max(self.storage.next_id());
        let mut finals: Vec<TaskState> = self.finished.iter().filter(|f| !f.source).map(|f| f.state.clone()).collect();
        for commit in finals.iter_mut().flat_map(|t| &mut t.commits) {
            commit.set_final_checkpoint(id);
        }
        let mut manifest = self.manifest(id, true, finals);
        manifest.carried = self.commits.outstanding();
        self.storage.write_manifest(&manifest)?;
        self.commits.push(manifest.tasks.iter().flat_map(|t| t.commits.iter().cloned()));
        if let Err(remaining) = self.commits.wait_until_done() {
            warn!(checkpoint = id, remaining, "job finished, but not all its output is committed: run the job again to commit it");
        }
        self.storage.retain(id, self.settings.retain);
        info!(checkpoint = id, "job finished; final output committed");
        Ok(())
    }
}

impl Drop for Coordinator {
    /// Waits for the snapshots queued so far to be written, so that a
    /// restarted job never races a previous run's writes into the
    /// checkpoint directory.
    fn drop(&mut self) {
        let _ = self.hub.persist.send(None);
        if let Some(persister) = self.persister.take() {
            let _ = persister.join();
        }
        if self.ephemeral {
            let _ = std::fs::remove_dir_all(self.storage.root());
        }
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
