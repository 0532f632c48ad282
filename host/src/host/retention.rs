//! What the host keeps of the savepoints it takes for upgrades and forks.
//!
//! Each upgrade and each fork of a running job takes a savepoint into the
//! job's default savepoint directory (`savepoints/` in its checkpoint
//! directory): a full copy of its state. A job upgraded or forked all day
//! would fill the disk with them, so after each one the host deletes all
//! but the newest [`KEPT_HOST_SAVEPOINTS`] of that kind for that job — but
//! never one that a run started from and has not completed a checkpoint of
//! its own since (it is that run's only way back, also after its host is
//! gone: a fork resumes from its own job file), and never a savepoint the
//! user asked for (`weir savepoint`, `--savepoint-dir`).
//!
//! The host tells its own savepoints by a file it writes into them,
//! `_TAKEN_BY_HOST`: the kind on its first line, then the checkpoint
//! directory of every run started from it, one a line.

use std::path::{Path, PathBuf};

use tracing::info;

use super::JobManager;
use crate::checkpoint::{CheckpointStorage, SavepointStart};
use crate::job::JobGraph;
use crate::savepoint::MANIFEST_FILE;

/// How many of the savepoints it took for a job's upgrades (and, apart,
/// for its forks) the host keeps.
pub const KEPT_HOST_SAVEPOINTS: usize = 5;

/// The file that marks a savepoint the host took for an upgrade or fork.
const MARKER: &str = "_TAKEN_BY_HOST";

/// Marks savepoint `dir` as taken by the host for `label` (`upgrade`,
/// `fork`): one [`JobManager::forget_old_savepoints`] may delete.
pub(super) fn mark_taken_by_host(dir: &Path, label: &str) {
    if let Err(error) = crate::dirs::write_durably(&dir.join(MARKER), format!("{label}\n").as_bytes()) {
        tracing::warn!(savepoint = %dir.display(), %error, "cannot mark the savepoint as the host's; it will be kept");
    }
}

/// Notes in savepoint `dir`, if the host took it, that a run with
/// checkpoint directory `checkpoints` starts from it.
pub(super) fn note_run_from(dir: &Path, checkpoints: &Path) {
    // Read, appended to and written back: two forks started at once from
    // one savepoint would each write back the list with only their line.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _editing = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let marker = dir.join(MARKER);
    let Ok(mut text) = std::fs::read_to_string(&marker) else { return };
    text.push_str(&format!("{}\n", checkpoints.display()));
    if let Err(error) = crate::dirs::write_durably(&marker, text.as_bytes()) {
        tracing::warn!(savepoint = %dir.display(), %error, "cannot note a run started from the savepoint");
    }
}

impl JobManager {
    /// Deletes all but the newest [`KEPT_HOST_SAVEPOINTS`] savepoints the
    /// host took for `label` (`upgrade`, `fork`) of job `graph`, but those
    /// still needed (see the module's docs).
    pub(super) fn forget_old_savepoints(&self, graph: &JobGraph, label: &str) {
        let root = self.default_savepoint_root(graph);
        let prefix = format!("{label}-{}-", graph.name);
        let mut taken: Vec<(u64, PathBuf, String)> = std::fs::read_dir(&root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let taken_at: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
                let marker = std::fs::read_to_string(entry.path().join(MARKER)).ok()?;
                Some((taken_at, entry.path(), marker))
            })
            .filter(|(_, dir, marker)| marker.lines().next() == Some(label) && dir.join(MANIFEST_FILE).is_file())
            .collect();
        taken.sort();
        let excess = taken.len().saturating_sub(KEPT_HOST_SAVEPOINTS);
        for (_, dir, marker) in taken.into_iter().take(excess) {
            let mut runs = marker.lines().skip(1).map(Path::new);
            if runs.any(|run| started_from_without_checkpoints(run).is_some_and(|from| from == dir)) {
                continue;
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => info!(job = %graph.name, savepoint = %dir.display(), kept = KEPT_HOST_SAVEPOINTS, "deleted an old {label} savepoint"),
                Err(error) => tracing::warn!(savepoint = %dir.display(), %error, "cannot delete an old {label} savepoint"),
            }
        }
    }
}

/// The savepoint the newest run in checkpoint directory `dir` began from,
/// if it has completed no checkpoint since.
fn started_from_without_checkpoints(dir: &Path) -> Option<PathBuf> {
    let start = SavepointStart::read(dir).ok()??;
    let storage = CheckpointStorage::open(dir).ok()?;
    (!start.has_checkpoints(&storage)).then_some(start.savepoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_started_at_once_from_one_savepoint_are_all_noted() {
        let savepoint = tempfile::tempdir().unwrap();
        mark_taken_by_host(savepoint.path(), "fork");
        std::thread::scope(|scope| {
            for run in 0..24 {
                let dir = savepoint.path();
                scope.spawn(move || note_run_from(dir, Path::new(&format!("/checkpoints/fork-{run}"))));
            }
        });
        let text = std::fs::read_to_string(savepoint.path().join(MARKER)).unwrap();
        assert_eq!(text.lines().next(), Some("fork"));
        for run in 0..24 {
            assert!(text.lines().any(|line| line == format!("/checkpoints/fork-{run}")), "run {run} noted: {text}");
        }
    }
}
