//! What the host keeps of the savepoints it takes for upgrades and forks.
//!
//! Each upgrade and each fork of a running job takes a savepoint into the
//! job's default savepoint directory (`savepoints/` in its checkpoint
//! directory): a full copy of its state. A job upgraded or forked all day
//! would fill the disk with them, so after each one the host deletes all
//! but the newest [`KEPT_HOST_SAVEPOINTS`] of that kind for that job — but
//! never one that a job of this host started from and has not completed a
//! checkpoint of its own since (it is that job's only way back), and never
//! a savepoint the user asked for (`weir savepoint`, `--savepoint-dir`).

use std::path::{Path, PathBuf};

use tracing::info;

use super::JobManager;
use crate::checkpoint::{CheckpointStorage, SavepointStart};
use crate::job::JobGraph;
use crate::savepoint::MANIFEST_FILE;

/// How many of the savepoints it took for a job's upgrades (and, apart,
/// for its forks) the host keeps.
pub const KEPT_HOST_SAVEPOINTS: usize = 5;

impl JobManager {
    /// Deletes all but the newest [`KEPT_HOST_SAVEPOINTS`] savepoints the
    /// host took for `label` (`upgrade`, `fork`) of job `graph`, but those
    /// still needed (see the module's docs).
    pub(super) fn forget_old_savepoints(&self, graph: &JobGraph, label: &str) {
        let root = self.default_savepoint_root(graph);
        let prefix = format!("{label}-{}-", graph.name);
        let mut taken: Vec<(u64, PathBuf)> = std::fs::read_dir(&root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let taken_at: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
                Some((taken_at, entry.path()))
            })
            .filter(|(_, dir)| dir.join(MANIFEST_FILE).is_file())
            .collect();
        taken.sort();
        let excess = taken.len().saturating_sub(KEPT_HOST_SAVEPOINTS);
        let needed = self.savepoints_needed();
        for (_, dir) in taken.into_iter().take(excess).filter(|(_, dir)| !needed.iter().any(|n| n == dir)) {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => info!(job = %graph.name, savepoint = %dir.display(), kept = KEPT_HOST_SAVEPOINTS, "deleted an old {label} savepoint"),
                Err(error) => tracing::warn!(savepoint = %dir.display(), %error, "cannot delete an old {label} savepoint"),
            }
        }
    }

    /// The savepoints that running jobs of this host started from and have
    /// no checkpoint of their own since.
    fn savepoints_needed(&self) -> Vec<PathBuf> {
        let dirs: Vec<PathBuf> = self
            .lock()
            .values()
            .filter(|job| job.status.is_active())
            .filter_map(|job| Some(job.graph.checkpoints.as_ref()?.dir.clone()))
            .collect();
        dirs.iter().filter_map(|dir| started_from_without_checkpoints(dir)).collect()
    }
}

/// The savepoint the newest run in checkpoint directory `dir` began from,
/// if it has completed no checkpoint since.
fn started_from_without_checkpoints(dir: &Path) -> Option<PathBuf> {
    let start = SavepointStart::read(dir).ok()??;
    let storage = CheckpointStorage::open(dir).ok()?;
    (!start.has_checkpoints(&storage)).then_some(start.savepoint)
}
