//! A subtask's part in a checkpoint: what it records at a barrier and how
//! it acknowledges.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::operator::OperatorLogic;
use crate::connectors::SourceSplit;
use crate::checkpoint::{Ack, CheckpointHub, FINAL_CHECKPOINT, PendingCommit, SOURCE_FINISHED, TaskState};
use crate::plugin::{CallError, CapturedState};
use crate::state::{SnapshotTarget, write_verified};

/// How one subtask reaches the checkpoint coordinator.
#[derive(Clone)]
pub struct TaskCheckpoint {
    pub hub: Arc<CheckpointHub>,
    /// The subtask's index in the job.
    pub index: usize,
    pub node: String,
    pub subtask: u32,
    /// The newest barrier the subtask has passed (see [`Ack::seen`]).
    pub seen: Arc<AtomicU64>,
}

impl TaskCheckpoint {
    fn ack(&self, checkpoint: u64, state: Result<TaskState, String>, alignment: Duration, sync: Duration) {
        if checkpoint < SOURCE_FINISHED {
            self.seen.fetch_max(checkpoint, Ordering::AcqRel);
        }
        let seen = self.seen.load(Ordering::Acquire);
        self.hub.ack(Ack { checkpoint, subtask: self.index, state, alignment, sync, seen });
    }

    /// A new checkpoint the coordinator asks this source to start, if any.
    pub fn due(&self, last: u64) -> Option<u64> {
        let requested = self.hub.requested();
        (requested > last).then_some(requested)
    }

    /// A source acknowledges with the positions of its splits.
    pub fn ack_splits(&self, checkpoint: u64, splits: Vec<SourceSplit>) {
        let state = TaskState { splits: Some(splits), ..TaskState::new(&self.node, self.subtask) };
        self.ack(checkpoint, Ok(state), Duration::ZERO, Duration::ZERO);
    }

    /// An exhausted source reports its final positions, which every later
    /// checkpoint takes as its state.
    pub fn source_finished(&self, splits: Vec<SourceSplit>) {
        self.ack_splits(SOURCE_FINISHED, splits);
    }

    /// An operator whose input has ended reports that it has: later
    /// checkpoints take it as ended, with no state (no input will reach it
    /// again), and go on while the rest of the job runs.
    pub fn operator_finished(&self) {
        self.ack(FINAL_CHECKPOINT, Ok(TaskState::new(&self.node, self.subtask)), Duration::ZERO, Duration::ZERO);
    }

    /// Whether the job stops at `checkpoint` (a stop-with-savepoint): a
    /// source reads nothing after that barrier.
    pub fn stops_at(&self, checkpoint: u64) -> bool {
        self.hub.stop_at() == Some(checkpoint)
    }

    /// A sink acknowledges with what to commit (`FINAL_CHECKPOINT` at the
    /// end of input).
    pub fn ack_commits(&self, checkpoint: u64, commits: Vec<PendingCommit>, alignment: Duration) {
        let state = TaskState { commits, ..TaskState::new(&self.node, self.subtask) };
        self.ack(checkpoint, Ok(state), alignment, Duration::ZERO);
    }

    /// An operator captures its state now and persists it on the
    /// checkpoint thread, which acknowledges when the files are written.
    ///
    /// If the capture fails the checkpoint is abandoned. A plugin whose
    /// `flush` returned an error (or whose state backend failed) is whole,
    /// and only that checkpoint is lost; one that trapped, ran out of
    /// memory or past its deadline cannot be called again, and the error
    /// is returned for its task to fail with — its next call would fail
    /// with "cannot enter component instance" instead of the cause.
    pub fn snapshot_operator(
        &self,
        checkpoint: u64,
        operator: &mut dyn OperatorLogic,
        alignment: Duration,
    ) -> Result<(), CallError> {
        // Now, not when the snapshot is acknowledged: the operator may end
        // before its files are written.
        self.seen.fetch_max(checkpoint, Ordering::AcqRel);
        let started = Instant::now();
        let captured = match operator.snapshot() {
            Ok(captured) => captured,
            Err(error) => {
                self.ack(checkpoint, Err(error.to_string()), alignment, started.elapsed());
                return match error {
                    CallError::Operator(_) | CallError::Backend(_) => Ok(()),
                    unusable => Err(unusable),
                };
            }
        };
        let sync = started.elapsed();
        let target = self.hub.target(checkpoint, &self.node, self.subtask);
        let this = self.clone();
        self.hub.persist(Box::new(move || {
            let state = persist(captured, &target, TaskState::new(&this.node, this.subtask));
            this.ack(checkpoint, state, alignment, sync);
        }));
        Ok(())
    }
}

fn persist(captured: CapturedState, target: &SnapshotTarget, mut state: TaskState) -> Result<TaskState, String> {
    let meta = write_verified(&target.root, target.private("meta"), &captured.meta).map_err(|e| e.to_string())?;
    state.meta = Some(meta);
    state.keyed = Some(captured.keyed.persist(target).map_err(|e| e.to_string())?);
    Ok(state)
}

/// What a sink subtask pre-committed at the barriers of checkpoints not
/// known to have completed.
///
/// A checkpoint can be abandoned after a sink pre-committed its epoch (it
/// timed out, another subtask could not snapshot). Its output is then handed
/// to the next checkpoint as well — which restores sources past it — or it
/// would never be committed. Only one checkpoint is in flight at a time, so
/// when barrier `n` arrives every earlier checkpoint has completed or been
/// abandoned. Committing is idempotent and in order, so output handed to two
/// checkpoints is committed once.
#[derive(Default)]
pub struct SinkPrecommits {
    unconfirmed: Vec<(u64, Vec<PendingCommit>)>,
}

impl SinkPrecommits {
    /// Acknowledges barrier `n` with `commits` after those of earlier
    /// checkpoints that did not complete.
    pub fn ack(&mut self, checkpoint: &TaskCheckpoint, n: u64, commits: Vec<PendingCommit>, alignment: Duration) {
        checkpoint.ack_commits(n, self.with_unconfirmed(checkpoint, n, commits), alignment);
    }

    /// Commits a sink's output at the end of input: through the coordinator
    /// (which records the end in a last manifest first) when checkpointing,
    /// else at once.
    pub fn finish(mut self, checkpoint: Option<&TaskCheckpoint>, commits: Vec<PendingCommit>) -> std::io::Result<()> {
        match checkpoint {
            Some(checkpoint) => {
                let commits = self.with_unconfirmed(checkpoint, FINAL_CHECKPOINT, commits);
                checkpoint.ack_commits(FINAL_CHECKPOINT, commits, Duration::ZERO);
                Ok(())
            }
            None => commits.iter().try_for_each(PendingCommit::commit_file),
        }
    }

    fn with_unconfirmed(&mut self, checkpoint: &TaskCheckpoint, n: u64, commits: Vec<PendingCommit>) -> Vec<PendingCommit> {
        let completed = checkpoint.hub.completed();
        self.unconfirmed.retain(|(earlier, _)| *earlier > completed);
        // A part in progress at an earlier barrier is in progress at this
        // one too, or committed whole by it.
        for (_, earlier) in &mut self.unconfirmed {
            earlier.retain(|commit| !commit.in_progress());
        }
        self.unconfirmed.push((n, commits));
        self.unconfirmed.iter().flat_map(|(_, commits)| commits.iter().cloned()).collect()
    }
}
