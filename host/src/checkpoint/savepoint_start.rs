//! The record a run started from a savepoint leaves in its checkpoint
//! directory, `_STARTED_FROM_SAVEPOINT`.
//!
//! A run from a savepoint (`weir run --from-savepoint`, an upgrade, a fork)
//! goes back to the savepoint's checkpoint: the `files` sink deletes the
//! parts committed after it, and the plugins may be new. The checkpoints an
//! earlier run left in the directory then no longer match the output or the
//! code. Until the run completes a checkpoint of its own, only the
//! savepoint does — so the run records it, before any sink is opened, and a
//! later `weir run` of the job file restores that savepoint again (with the
//! plugins the run ran) instead of resuming from an earlier run's
//! checkpoint; once the run has checkpoints, it never falls back below
//! them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{CheckpointStorage, OperatorPlugin};

use super::layout::STARTED_FROM_SAVEPOINT as FILE_NAME;

/// Where the newest run in a checkpoint directory began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointStart {
    /// The savepoint's directory, absolute.
    pub savepoint: PathBuf,
    /// The run's checkpoints are numbered from here; those below are an
    /// earlier run's.
    pub first_checkpoint: u64,
    /// The plugin each operator ran, with its digest.
    pub plugins: Vec<OperatorPlugin>,
    /// The plugins the job file named when the run began.
    pub job_file_plugins: Vec<OperatorPlugin>,
}

impl SavepointStart {
    /// Records `self` in `storage`'s directory, durably.
    pub fn write(&self, storage: &CheckpointStorage) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::dirs::write_durably(&storage.root().join(FILE_NAME), &json)
    }

    /// The record in checkpoint directory `dir`, if a run from a savepoint
    /// left one; an error names an unreadable one and says what to do.
    pub fn read(dir: &Path) -> Result<Option<Self>, String> {
        let path = dir.join(FILE_NAME);
        let unreadable = |reason: String| {
            format!(
                "{reason}: it records the savepoint the job's last run began from; restore that savepoint \
                 (`weir run JOB --from-savepoint DIR`), which rewrites the record"
            )
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            // The directory itself, most likely (the record may not be
            // there at all): no savepoint to speak of.
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied && std::fs::read_dir(dir).is_err() => {
                return Err(format!(
                    "cannot read checkpoint directory {}: {error}; let the user who runs weir read it, and run again",
                    dir.display()
                ));
            }
            Err(error) => return Err(unreadable(format!("cannot read {}: {error}", path.display()))),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|error| unreadable(format!("{} is corrupt: {error}", path.display())))
    }

    /// Whether the run has completed a checkpoint of its own in `storage`.
    pub fn has_checkpoints(&self, storage: &CheckpointStorage) -> bool {
        storage.complete_ids().last().is_some_and(|&id| id >= self.first_checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_knows_the_runs_own_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path()).unwrap();
        assert_eq!(SavepointStart::read(dir.path()), Ok(None));
        let plugin =
            OperatorPlugin { uid: "count".into(), plugin: "/p/v2.wasm".into(), sha256: Some("two".into()), config_sha256: None };
        let start = SavepointStart { savepoint: "/sp/1".into(), first_checkpoint: 7, plugins: vec![plugin], job_file_plugins: Vec::new() };
        start.write(&storage).unwrap();
        assert_eq!(SavepointStart::read(dir.path()), Ok(Some(start.clone())));
        for id in [5, 6] {
            std::fs::create_dir(dir.path().join(CheckpointStorage::dir_name(id))).unwrap();
            std::fs::write(dir.path().join(CheckpointStorage::dir_name(id)).join("_MANIFEST"), "").unwrap();
        }
        assert!(!start.has_checkpoints(&storage), "5 and 6 are an earlier run's");
        std::fs::create_dir(dir.path().join(CheckpointStorage::dir_name(7))).unwrap();
        assert!(!start.has_checkpoints(&storage), "7 never completed");
        std::fs::write(dir.path().join(CheckpointStorage::dir_name(7)).join("_MANIFEST"), "").unwrap();
        assert!(start.has_checkpoints(&storage));
        std::fs::write(dir.path().join(FILE_NAME), "{").unwrap();
        assert!(SavepointStart::read(dir.path()).unwrap_err().contains("_STARTED_FROM_SAVEPOINT is corrupt"));
    }
}
