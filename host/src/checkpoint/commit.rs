//! Making sinks' output visible once its checkpoint is complete.
//!
//! A completed checkpoint's manifest lists what its sinks pre-committed:
//! part files to rename, Kafka epochs to write in a transaction. Committing
//! is idempotent, so it is done again after a crash (recovery commits the
//! restored manifest's output before the job runs). A Kafka commit can fail
//! while the brokers are away: it stays pending, is recorded in every later
//! manifest (`carried`) and retried every second, in order. Commits run on
//! their own thread ([`CommitQueue`]), not the coordinator's.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{debug, error, warn};

use crate::connectors::PartInProgress;
use crate::connectors::kafka::{KafkaCommit, KafkaCommitter, KafkaSinkSpec};

/// Output a sink pre-committed at a checkpoint's barrier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PendingCommit {
    /// A part file and the name that makes it visible; its size when it
    /// was closed (absent from manifests before it was recorded).
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
    },
    /// A Kafka sink subtask's epoch, to write in one transaction.
    Kafka(KafkaCommit),
    /// A part file still being written at the barrier (its sink rolls
    /// parts less often than it checkpoints). Nothing is committed when the
    /// checkpoint completes — a later one commits the whole part — but a
    /// restore of the checkpoint commits its share.
    InProgress(PartInProgress),
}

impl PendingCommit {
    /// Renames a pending part file; done already (or never written) is
    /// fine, so that committing again after a crash is harmless. One whose
    /// size is not what was written is damaged, and not committed.
    fn rename(from: &PathBuf, to: &PathBuf, size: Option<u64>) -> std::io::Result<bool> {
        Self::check_size(from, size)?;
        match std::fs::rename(from, to) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && to.exists() => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Where a part file is now: `from` while pending, `to` once committed.
    pub fn output_file<'a>(from: &'a PathBuf, to: &'a PathBuf) -> &'a PathBuf {
        if from.exists() { from } else { to }
    }

    /// Whether part file `from`, if it is there, has the size it was
    /// written with. Checked on the committed file too (if a consumer has
    /// not moved it away): output of the newest checkpoint cut short or
    /// grown since is damaged, and an older checkpoint computes it again.
    pub fn check_size(from: &PathBuf, size: Option<u64>) -> std::io::Result<()> {
        let found = std::fs::metadata(from).map(|m| m.len());
        match (found, size) {
            (Ok(found), Some(size)) if found != size => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("damaged: {found} bytes, where {size} were written"),
            )),
            _ => Ok(()),
        }
    }

    /// Commits a part file at once (a sink of a job without checkpoints).
    pub fn commit_file(&self) -> std::io::Result<()> {
        match self {
            PendingCommit::Rename { from, to, size } => Self::rename(from, to, *size).map(drop),
            PendingCommit::Kafka(_) | PendingCommit::InProgress { .. } => Ok(()),
        }
    }

    /// Whether it is a part in progress (see [`PendingCommit::InProgress`]).
    pub fn in_progress(&self) -> bool {
        matches!(self, PendingCommit::InProgress { .. })
    }

    /// The Kafka epoch at the end of input takes the final checkpoint's id.
    pub fn set_final_checkpoint(&mut self, id: u64) {
        if let PendingCommit::Kafka(commit) = self
            && commit.checkpoint == super::FINAL_CHECKPOINT
        {
            commit.checkpoint = id;
        }
    }

    /// The last output of a sink whose input ended while the job ran on
    /// becomes checkpoint `id`'s, the first to take it: the Kafka epoch
    /// takes its id, and the last part is named after it (not `final`) —
    /// so that a restore of an earlier checkpoint removes it, as output
    /// produced again, and one of `id` or later keeps it.
    pub fn take_into_checkpoint(&mut self, id: u64) {
        self.set_final_checkpoint(id);
        if let PendingCommit::Rename { to, .. } = self
            && let Some(name) = to.file_name().and_then(|name| name.to_str())
            && let Some(part) = name.strip_suffix("-final")
        {
            *to = to.with_file_name(format!("{part}-{id:08}"));
        }
    }
}

/// Commits pre-committed output; keeps what could not be committed yet.
pub struct Committer {
    kafka: KafkaCommitter,
    pending: Vec<PendingCommit>,
    /// Damaged write-ahead logs the log has named.
    told_damaged: std::collections::HashSet<PathBuf>,
}

impl Committer {
    /// A committer for a job with these Kafka sinks (the client settings of
    /// their commits come from the job file).
    pub fn new(kafka_sinks: Vec<KafkaSinkSpec>) -> Self {
        Committer { kafka: KafkaCommitter::new(kafka_sinks), pending: Vec::new(), told_damaged: Default::default() }
    }

    /// How long a job that ends waits for its output to be committed: as
    /// long as its Kafka sinks let their brokers be away (`timeout_ms`), a
    /// minute without them (part files commit at once, or not at all).
    pub fn patience(&self) -> Duration {
        self.kafka.longest_timeout().unwrap_or(Duration::from_secs(60))
    }

    /// What is still to be committed, oldest first.
    pub fn pending(&self) -> &[PendingCommit] {
        &self.pending
    }

    /// Commits the output of a restored checkpoint: what it left to commit,
    /// and the share of each part it found in progress.
    pub fn recover(&mut self, restored: Vec<PendingCommit>) {
        let (in_progress, to_commit): (Vec<_>, Vec<_>) = restored.into_iter().partition(PendingCommit::in_progress);
        self.commit(to_commit);
        for part in in_progress {
            let PendingCommit::InProgress(part) = part else { continue };
            match part.commit() {
                Ok(true) => debug!(file = %part.to.display(), "output in progress at the checkpoint committed"),
                Ok(false) => {}
                Err(error) => error!(
                    file = %part.in_progress.display(),
                    %error,
                    "the part file in progress at the restored checkpoint cannot be committed: its events up to the \
                     checkpoint are not in the output"
                ),
            }
        }
    }

    /// Commits what is pending and then `new`, in order; a Kafka epoch that
    /// fails keeps the later epochs of its transactional id pending too.
    pub fn commit(&mut self, new: impl IntoIterator<Item = PendingCommit>) {
        let all: Vec<PendingCommit> = std::mem::take(&mut self.pending).into_iter().chain(new).collect();
        self.pending = self.commit_now(all);
    }

    /// Commits `all` in order; returns what could not be committed.
    fn commit_now(&mut self, all: Vec<PendingCommit>) -> Vec<PendingCommit> {
        let mut kafka = Vec::new();
        for commit in all {
            match commit {
                PendingCommit::Rename { from, to, size } => match PendingCommit::rename(&from, &to, size) {
                    Ok(true) => debug!(file = %to.display(), "output committed"),
                    Ok(false) => {}
                    // Neither in progress nor committed: committed before and
                    // collected since (a consumer may move committed parts
                    // away), or lost — which, the directory cannot tell.
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => warn!(
                        file = %to.display(),
                        written_as = %from.display(),
                        "an output file of a completed checkpoint is not in the sink's directory, committed or in \
                         progress: if a consumer collected it, all is well; if not, it was deleted, or the directory \
                         moved while the job was down, and its events are not in the output"
                    ),
                    Err(error) if error.kind() == std::io::ErrorKind::InvalidData => error!(
                        file = %from.display(),
                        %error,
                        "an output file of a completed checkpoint is damaged, and was not committed: its events are \
                         not in the output"
                    ),
                    Err(error) => warn!(file = %from.display(), %error, "cannot commit output file"),
                },
                PendingCommit::Kafka(epoch) => kafka.push(epoch),
                // Committed by a later checkpoint, or by a restore of this one.
                PendingCommit::InProgress { .. } => {}
            }
        }
        if kafka.is_empty() {
            return Vec::new();
        }
        let mut failed = Vec::new();
        for (epoch, error) in self.kafka.commit_all(kafka) {
            match error {
                // Said once: retrying every second changes nothing.
                Some(error) if error.damaged_log() => {
                    if self.told_damaged.insert(epoch.wal.clone()) {
                        error!(checkpoint = epoch.checkpoint, file = %epoch.wal.display(), "{error}");
                    }
                }
                Some(error) => warn!(checkpoint = epoch.checkpoint, %error, "kafka output not committed yet; will retry"),
                None => {}
            }
            failed.push(PendingCommit::Kafka(epoch));
        }
        failed
    }

    /// Retries what is pending until it is committed or `patience` has
    /// passed; Err lists what remains.
    pub fn commit_pending_within(&mut self, patience: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            self.commit([]);
            if self.pending.is_empty() {
                return Ok(());
            }
            if started.elapsed() >= patience {
                return Err(format!("{} sink epoch(s) could not be committed", self.pending.len()));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// Commits on a thread of its own, in the order checkpoints completed, so
/// that a slow or unreachable broker holds up neither the next checkpoints
/// nor the control API. What it has not committed yet is *outstanding*:
/// the coordinator records it in every manifest it writes meanwhile.
pub struct CommitQueue {
    shared: Arc<Shared>,
    /// See [`Committer::patience`].
    patience: Duration,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    /// Handed over and not committed yet, oldest first.
    outstanding: Mutex<Vec<PendingCommit>>,
    wake: Condvar,
    stop: AtomicBool,
}

/// How long the commit thread waits before retrying what failed.
const RETRY_INTERVAL: Duration = Duration::from_secs(1);

impl CommitQueue {
    /// Starts the commit thread with `committer`, whose pending commits
    /// (left by recovery) come first.
    pub fn start(mut committer: Committer) -> Self {
        let patience = committer.patience();
        let shared = Arc::new(Shared {
            outstanding: Mutex::new(std::mem::take(&mut committer.pending)),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("weir-commit".into())
            .spawn(move || commit_loop(&state, committer))
            .expect("spawn the commit thread");
        shared.wake.notify_one();
        CommitQueue { shared, patience, thread: Some(thread) }
    }

    /// What is handed over and not committed yet, oldest first.
    pub fn outstanding(&self) -> Vec<PendingCommit> {
        self.shared.outstanding.lock().expect("commit queue").clone()
    }

    /// How many of the outstanding commits `which` picks (without copying
    /// them, as a progress request asks).
    pub fn count_outstanding(&self, which: impl Fn(&PendingCommit) -> bool) -> usize {
        self.shared.outstanding.lock().expect("commit queue").iter().filter(|commit| which(commit)).count()
    }

    /// Hands over the commits of a completed checkpoint.
    pub fn push(&self, commits: impl IntoIterator<Item = PendingCommit>) {
        // A part in progress has nothing to commit now, and must not be
        // carried into later manifests as outstanding: restored from one of
        // those, it would be committed cut at this checkpoint's length.
        let commits = commits.into_iter().filter(|commit| !commit.in_progress());
        self.shared.outstanding.lock().expect("commit queue").extend(commits);
        self.shared.wake.notify_one();
    }

    /// Waits until everything handed over is committed, or the
    /// committer's patience has passed; Err says how much remains.
    pub fn wait_until_done(&self) -> Result<(), String> {
        let patience = self.patience;
        let started = Instant::now();
        loop {
            let remaining = self.shared.outstanding.lock().expect("commit queue").len();
            if remaining == 0 {
                return Ok(());
            }
            if started.elapsed() >= patience {
                return Err(format!("{remaining} sink epoch(s) could not be committed"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for CommitQueue {
    /// Lets the thread make one last attempt at what is outstanding (the
    /// manifests record what it leaves), then stops it.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn commit_loop(shared: &Shared, mut committer: Committer) {
    let mut retry_after: Option<Instant> = None;
    loop {
        // Once stopping, one last round takes everything outstanding.
        let (work, last_round) = {
            let mut outstanding = shared.outstanding.lock().expect("commit queue");
            loop {
                let stopping = shared.stop.load(Ordering::Acquire);
                let due = retry_after.is_none_or(|at| Instant::now() >= at);
                if !outstanding.is_empty() && (due || stopping) {
                    break (outstanding.clone(), stopping);
                }
                if stopping {
                    return;
                }
                let wait = retry_after.map_or(RETRY_INTERVAL, |at| at.saturating_duration_since(Instant::now()));
                outstanding = shared.wake.wait_timeout(outstanding, wait).expect("commit queue").0;
            }
        };
        let taken = work.len();
        let failed = committer.commit_now(work);
        retry_after = (!failed.is_empty()).then(|| Instant::now() + RETRY_INTERVAL);
        let mut outstanding = shared.outstanding.lock().expect("commit queue");
        // Only appended to meanwhile: what was taken is still the prefix.
        let newer = outstanding.split_off(taken);
        *outstanding = failed;
        outstanding.extend(newer);
        if last_round {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that ended mid-run commits its last part as the checkpoint's
    /// that took it, which a restore of an earlier checkpoint removes.
    #[test]
    fn a_last_part_taken_into_a_checkpoint_is_named_after_it() {
        let mut last = PendingCommit::Rename { from: "out/.part-2-00000004.inprogress".into(), to: "out/part-2-final".into(), size: None };
        last.take_into_checkpoint(7);
        assert_eq!(last, PendingCommit::Rename { from: "out/.part-2-00000004.inprogress".into(), to: "out/part-2-00000007".into(), size: None });
        last.take_into_checkpoint(8);
        assert!(matches!(&last, PendingCommit::Rename { to, .. } if to == std::path::Path::new("out/part-2-00000007")), "named once");
    }

    #[test]
    fn old_manifests_rename_commits_still_read() {
        let commit: PendingCommit = serde_json::from_str(r#"{"from": "a.pending", "to": "a"}"#).unwrap();
        assert_eq!(commit, PendingCommit::Rename { from: "a.pending".into(), to: "a".into(), size: None });
        let kafka = r#"{"sink": "s", "transactional_id": "t-0", "topic": "o", "checkpoint": 3, "wal": "l", "lineage": "x"}"#;
        assert!(matches!(serde_json::from_str::<PendingCommit>(kafka).unwrap(), PendingCommit::Kafka(_)));
    }

    #[test]
    fn the_queue_commits_in_the_background_and_drains_before_it_stops() {
        let dir = tempfile::tempdir().unwrap();
        let commits: Vec<PendingCommit> = (0..3)
            .map(|i| {
                let from = dir.path().join(format!("p{i}.pending"));
                std::fs::write(&from, "x").unwrap();
                PendingCommit::Rename { from, to: dir.path().join(format!("p{i}")), size: Some(1) }
            })
            .collect();
        let queue = CommitQueue::start(Committer::new(Vec::new()));
        queue.push(commits[..2].to_vec());
        queue.wait_until_done().unwrap();
        assert!(dir.path().join("p1").exists());
        queue.push(commits[2..].to_vec());
        drop(queue);
        assert!(dir.path().join("p2").exists(), "dropping the queue commits what is outstanding first");
    }

    #[test]
    fn a_rename_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("p.pending"), dir.path().join("p"));
        std::fs::write(&from, "x").unwrap();
        let commit = PendingCommit::Rename { from, to: to.clone(), size: Some(1) };
        let mut committer = Committer::new(Vec::new());
        committer.commit([commit.clone()]);
        committer.commit([commit]);
        assert!(committer.pending().is_empty());
        assert_eq!(std::fs::read_to_string(to).unwrap(), "x");
    }

    #[test]
    fn a_part_file_of_another_size_than_written_is_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("p.pending"), dir.path().join("p"));
        std::fs::write(&from, "line 1\nli").unwrap();
        let error = PendingCommit::Rename { from: from.clone(), to: to.clone(), size: Some(14) }.commit_file().unwrap_err();
        assert!(error.to_string().contains("damaged: 9 bytes, where 14 were written"), "{error}");
        assert!(from.exists() && !to.exists());
    }
}
