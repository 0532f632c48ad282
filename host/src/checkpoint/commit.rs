//! Making sinks' output visible once its checkpoint is complete.
//!
//! A completed checkpoint's manifest lists what its sinks pre-committed:
//! part files to rename, Kafka epochs to write in a transaction. Committing
//! is idempotent, so it is done again after a crash (recovery commits the
//! restored manifest's output before the job runs). A Kafka commit can fail
//! while the brokers are away: it stays pending, is recorded in every later
//! manifest (`carried`) and retried after every checkpoint, in order.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::connectors::kafka::{KafkaCommit, KafkaCommitter, KafkaSinkSpec};

/// Output a sink pre-committed at a checkpoint's barrier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PendingCommit {
    /// A part file and the name that makes it visible.
    Rename { from: PathBuf, to: PathBuf },
    /// A Kafka sink subtask's epoch, to write in one transaction.
    Kafka(KafkaCommit),
}

impl PendingCommit {
    /// Renames a pending part file; done already (or never written) is
    /// fine, so that committing again after a crash is harmless.
    fn rename(from: &PathBuf, to: &PathBuf) -> std::io::Result<bool> {
        match std::fs::rename(from, to) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && to.exists() => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Commits a part file at once (a sink of a job without checkpoints).
    pub fn commit_file(&self) -> std::io::Result<()> {
        match self {
            PendingCommit::Rename { from, to } => Self::rename(from, to).map(drop),
            PendingCommit::Kafka(_) => Ok(()),
        }
    }

    /// The Kafka epoch at the end of input takes the final checkpoint's id.
    pub fn set_final_checkpoint(&mut self, id: u64) {
        if let PendingCommit::Kafka(commit) = self
            && commit.checkpoint == super::FINAL_CHECKPOINT
        {
            commit.checkpoint = id;
        }
    }
}

/// Commits pre-committed output; keeps what could not be committed yet.
pub struct Committer {
    kafka: KafkaCommitter,
    pending: Vec<PendingCommit>,
}

impl Committer {
    /// A committer for a job with these Kafka sinks (the client settings of
    /// their commits come from the job file).
    pub fn new(kafka_sinks: Vec<KafkaSinkSpec>) -> Self {
        Committer { kafka: KafkaCommitter::new(kafka_sinks), pending: Vec::new() }
    }

    /// What is still to be committed, oldest first.
    pub fn pending(&self) -> &[PendingCommit] {
        &self.pending
    }

    /// Commits what is pending and then `new` (of `checkpoint`), in order;
    /// a Kafka epoch that fails keeps the later epochs of its transactional
    /// id pending too.
    pub fn commit(&mut self, checkpoint: u64, new: impl IntoIterator<Item = PendingCommit>) {
        let all: Vec<PendingCommit> = std::mem::take(&mut self.pending).into_iter().chain(new).collect();
        let mut kafka = Vec::new();
        for commit in all {
            match commit {
                PendingCommit::Rename { from, to } => match PendingCommit::rename(&from, &to) {
                    Ok(true) => info!(checkpoint, file = %to.display(), "output committed"),
                    Ok(false) => {}
                    Err(error) => warn!(checkpoint, file = %from.display(), %error, "cannot commit output file"),
                },
                PendingCommit::Kafka(epoch) => kafka.push(epoch),
            }
        }
        if kafka.is_empty() {
            return;
        }
        for (epoch, error) in self.kafka.commit_all(kafka) {
            if let Some(error) = error {
                warn!(checkpoint = epoch.checkpoint, %error, "kafka output not committed yet; will retry");
            }
            self.pending.push(PendingCommit::Kafka(epoch));
        }
    }

    /// Retries what is pending until it is committed or `patience` has
    /// passed; Err lists what remains.
    pub fn commit_pending_within(&mut self, checkpoint: u64, patience: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            self.commit(checkpoint, []);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_manifests_rename_commits_still_read() {
        let commit: PendingCommit = serde_json::from_str(r#"{"from": "a.pending", "to": "a"}"#).unwrap();
        assert_eq!(commit, PendingCommit::Rename { from: "a.pending".into(), to: "a".into() });
        let kafka = r#"{"sink": "s", "transactional_id": "t-0", "topic": "o", "checkpoint": 3, "wal": "l", "lineage": "x"}"#;
        assert!(matches!(serde_json::from_str::<PendingCommit>(kafka).unwrap(), PendingCommit::Kafka(_)));
    }

    #[test]
    fn a_rename_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("p.pending"), dir.path().join("p"));
        std::fs::write(&from, "x").unwrap();
        let commit = PendingCommit::Rename { from, to: to.clone() };
        let mut committer = Committer::new(Vec::new());
        committer.commit(1, [commit.clone()]);
        committer.commit(1, [commit]);
        assert!(committer.pending().is_empty());
        assert_eq!(std::fs::read_to_string(to).unwrap(), "x");
    }
}
