//! The manifest of a checkpoint: what every subtask snapshotted, where its
//! files are and what they must checksum to. A checkpoint exists once its
//! manifest does; the manifest itself carries a checksum on its first line:
//!
//! ```text
//! weir-checkpoint 1 crc32=1a2b3c4d
//! { ...JSON... }
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::PendingCommit;
use crate::connectors::{PartInProgress, SourceSplit};
use crate::state::{BackendHandle, BackendKind, FileRef, header_version, strip_header, with_header};

/// The version of the manifest format. Version 3 added change files to
/// in-memory state (`changes`): a Weir that reads only version 2 would
/// restore such a checkpoint without its changes, so it must refuse it.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest version this Weir still reads (a version-2 manifest is a
/// version-3 one without change files).
const OLDEST_READABLE: u32 = 2;
const HEADER: &str = "weir-checkpoint";

/// A completed checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub job: String,
    pub checkpoint: u64,
    /// The job had finished: every source exhausted, all output committed.
    pub finished: bool,
    /// When it completed, ms since the Unix epoch.
    pub completed_at_ms: i64,
    pub max_parallelism: u32,
    pub backend: BackendKind,
    pub tasks: Vec<TaskState>,
    /// Output of earlier checkpoints not committed yet (a Kafka broker was
    /// away), oldest first: committed before this checkpoint's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<PendingCommit>,
    pub stats: CheckpointStats,
    /// The plugin each operator ran (an upgrade changes it while the job
    /// runs); absent from older checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<OperatorPlugin>,
    /// The plugin each operator's entry in the job file named when the run
    /// began (an upgrade changes `plugins`, not these): a restart from a
    /// job file that still names them resumes the plugins the run had been
    /// upgraded to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_file_plugins: Vec<OperatorPlugin>,
    /// The lineage of the checkpoint directory it was written in (see
    /// `dirs::lineage`); absent from older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<String>,
}

/// The plugin file an operator ran, and its SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorPlugin {
    pub uid: String,
    pub plugin: std::path::PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The SHA-256 of its `config` table (absent from checkpoints before it
    /// was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
}

/// What one subtask snapshotted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    /// The node's name (an operator's uid).
    pub node: String,
    pub subtask: u32,
    /// A source's splits, each with the next record it will read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<Vec<SourceSplit>>,
    /// An operator's state names, broadcast maps and timers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<FileRef>,
    /// An operator's keyed state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyed: Option<BackendHandle>,
    /// A sink's output to make visible once the checkpoint is complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<PendingCommit>,
}

impl TaskState {
    pub fn new(node: &str, subtask: u32) -> Self {
        TaskState { node: node.to_owned(), subtask, splits: None, meta: None, keyed: None, commits: Vec::new() }
    }

    /// Every checkpoint file this subtask's snapshot refers to.
    pub fn files(&self) -> Vec<&FileRef> {
        let keyed = self.keyed.iter().flat_map(BackendHandle::files);
        self.meta.iter().chain(keyed).collect()
    }
}

/// Figures of one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointStats {
    /// From trigger to the manifest written.
    pub duration_ms: f64,
    /// The longest any subtask held inputs back while aligning.
    pub alignment_ms: f64,
    /// The longest synchronous capture of any subtask.
    pub sync_ms: f64,
    /// The size of every file the checkpoint refers to.
    pub size_bytes: u64,
    /// The size of the files this checkpoint wrote (the rest it shares
    /// with earlier ones).
    pub written_bytes: u64,
}

/// The newest checkpoint a run of a job completed, with its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatestCheckpoint {
    /// Its number.
    pub id: u64,
    /// How many checkpoints the run has completed.
    pub completed: u64,
    #[serde(flatten)]
    pub stats: CheckpointStats,
}

impl Manifest {
    /// Every file the checkpoint refers to.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.tasks.iter().flat_map(TaskState::files)
    }

    /// What the checkpoint's completion commits, oldest first, with each
    /// part file of a `files` sink in the directory `dir_of` gives for that
    /// sink now: the one its job file names, which for a job directory
    /// moved or copied since is not where the part was written. Its copy
    /// then commits its own parts, not the original's.
    pub fn commits_in<'a>(&self, dir_of: impl Fn(&str) -> Option<&'a Path>) -> Vec<PendingCommit> {
        let mut commits = self.carried.clone();
        for task in &self.tasks {
            let dir = dir_of(&task.node);
            for commit in &task.commits {
                commits.push(match (commit, dir) {
                    (PendingCommit::Rename { from, to, size }, Some(dir)) => {
                        PendingCommit::Rename { from: in_dir(dir, from), to: in_dir(dir, to), size: *size }
                    }
                    (PendingCommit::InProgress(part), Some(dir)) => PendingCommit::InProgress(PartInProgress {
                        in_progress: in_dir(dir, &part.in_progress),
                        to: in_dir(dir, &part.to),
                        ..part.clone()
                    }),
                    (commit, _) => commit.clone(),
                });
            }
        }
        commits
    }

    /// Every split of source `node`, over all its subtasks.
    pub fn source_splits(&self, node: &str) -> Vec<SourceSplit> {
        self.tasks.iter().filter(|t| t.node == node).flat_map(|t| t.splits.iter().flatten().copied()).collect()
    }

    /// The snapshot of `subtask` of `node`.
    pub fn task(&self, node: &str, subtask: u32) -> Option<&TaskState> {
        self.tasks.iter().find(|t| t.node == node && t.subtask == subtask)
    }

    /// The manifest as stored: checksum line, then JSON.
    pub fn encode(&self) -> Vec<u8> {
        with_header(HEADER, FORMAT_VERSION, &serde_json::to_vec_pretty(self).expect("a manifest serialises"))
    }

    /// The format version of stored manifest `bytes` if a newer Weir
    /// wrote it: this one cannot read it, nor may it fall back below it.
    pub fn newer_format(bytes: &[u8]) -> Option<u32> {
        header_version(bytes, HEADER).filter(|&version| version > FORMAT_VERSION)
    }

    /// Parses and checks a stored manifest.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest, String> {
        let json = strip_header(bytes, HEADER, FORMAT_VERSION)
            .or_else(|error| strip_header(bytes, HEADER, OLDEST_READABLE).map_err(|_| error))?;
        serde_json::from_slice(json).map_err(|error| format!("{}: {error}", path.display()))
    }
}

/// `path`'s file name in `dir`.
fn in_dir(dir: &Path, path: &Path) -> PathBuf {
    path.file_name().map_or_else(|| path.to_path_buf(), |name| dir.join(name))
}

