//! Where a run of a job starts from: the checks that its checkpoint
//! directory (and its sinks' places) may be taken, the newest checkpoint
//! of its own that verifies, the savepoint its last run began from, and
//! committing what a crash left uncommitted before the restore.
//!
//! A run refuses rather than guesses whenever starting would lose
//! committed output or another job's checkpoints: the user decides.

use std::path::Path;
use std::time::Duration;

use tracing::info;

use super::executor::RunError;
use crate::checkpoint::{CheckpointSettings, CheckpointStorage, Committer, Manifest, SavepointStart, StorageLock};
use crate::job::{JobGraph, NodeKind};
use crate::savepoint::Savepoint;

/// Takes the job's checkpoint directory for this run (all its restarts):
/// refuses one it cannot take, locks it, and restores a lost or damaged
/// `LINEAGE`. Returns the number its own checkpoints start from (those
/// below are an earlier run's) and the lock; `(0, None)` without
/// checkpoints.
pub(super) fn take_checkpoint_dir(graph: &JobGraph, from_savepoint: bool) -> Result<(u64, Option<StorageLock>), RunError> {
    Ok(match &graph.checkpoints {
        Some(settings) => {
            refuse_enclosed_checkpoint_dir(graph, settings)?;
            refuse_a_directory_of_other_files(graph, settings)?;
            if from_savepoint {
                refuse_another_jobs_checkpoints(graph, settings)?;
            }
            let storage = open_storage(settings)?;
            let lock = lock_storage(&storage, settings)?;
            let dir_error = |source| RunError::Checkpoints { dir: settings.dir.clone(), source };
            crate::dirs::check_writable(&settings.dir).map_err(|error| {
                dir_error(std::io::Error::new(error.kind(), format!(
                    "cannot write in it ({error}); let the user who runs weir write there, and run the job again"
                )))
            })?;
            storage.restore_lineage().map_err(dir_error)?;
            (storage.next_id(), Some(lock))
        }
        None => (0, None),
    })
}

/// The savepoint the job's newest run started from, if that run completed
/// no checkpoint of its own: a run without `--from-savepoint` restores it
/// again (see [`SavepointStart`]).
pub fn savepoint_to_restore(graph: &JobGraph) -> Result<Option<Savepoint>, RunError> {
    let Some((start, false)) = newest_savepoint_start(graph)? else { return Ok(None) };
    info!(
        job = %graph.name,
        savepoint = %start.savepoint.display(),
        "the job's last run started from this savepoint and completed no checkpoint of its own: restoring it again"
    );
    let savepoint = Savepoint::open(&start.savepoint).map_err(|error| {
        checkpoints_error(graph, format!(
            "the job's last run started from savepoint {} and completed no checkpoint of its own, so only that \
             savepoint matches the output, but it cannot be read ({error}): put it back, or restore another one \
             with `--from-savepoint`",
            start.savepoint.display()
        ))
    })?;
    Ok(Some(savepoint))
}

/// Refuses a checkpoint directory a run of `graph` from a savepoint cannot
/// take: one inside another job's, or one holding another job's
/// checkpoints (see the functions it calls). Checked before a retained
/// checkpoint is written as a savepoint for the run, and again as it starts.
pub fn refuse_taking_checkpoint_dir(graph: &JobGraph) -> Result<(), RunError> {
    let Some(settings) = &graph.checkpoints else { return Ok(()) };
    refuse_enclosed_checkpoint_dir(graph, settings)?;
    refuse_another_jobs_checkpoints(graph, settings)
}

/// A run from a savepoint numbers its checkpoints after those in its
/// directory, and its retention deletes them: a directory holding another
/// job's checkpoints would be taken from that job, which could no longer
/// resume (a run without a savepoint is refused such a directory by
/// [`check_resumable`]).
fn refuse_another_jobs_checkpoints(graph: &JobGraph, settings: &CheckpointSettings) -> Result<(), RunError> {
    let storage = open_storage(settings)?;
    let Some(newest) = storage.complete_ids().pop() else { return Ok(()) };
    // A manifest that cannot be read names no job: the resume's checks say more.
    match storage.manifest(newest) {
        Ok(manifest) if manifest.job != graph.name => Err(checkpoints_error(graph, format!(
            "it holds the checkpoints of job `{}`, which this run of `{}` would take over and delete; give each \
             job a checkpoint_dir of its own (or the job its old name)",
            manifest.job, graph.name
        ))),
        _ => Ok(()),
    }
}

/// A checkpoint directory inside another job's would lose its files to
/// that job's clean-up (or take that job's for its own).
fn refuse_enclosed_checkpoint_dir(graph: &JobGraph, settings: &CheckpointSettings) -> Result<(), RunError> {
    match crate::dirs::enclosing_checkpoint_dir(&settings.dir) {
        Some(outer) => Err(checkpoints_error(graph, format!(
            "it lies inside the checkpoint directory {} of another job, which deletes the files there it does not \
             know: give this job a `checkpoint_dir` outside it",
            outer.display()
        ))),
        None => Ok(()),
    }
}

/// A sink writing inside a checkpoint directory — the job's own, or any
/// other job's (a fork's sink given one) — would lose its committed output
/// to that directory's clean-up, which deletes the files it does not know.
pub(super) fn refuse_sinks_in_checkpoint_dirs(graph: &JobGraph) -> Result<(), RunError> {
    for (sink, place) in graph.sink_places() {
        if let Some(checkpoints) = crate::dirs::checkpoint_dir_holding(place) {
            return Err(RunError::Checkpoints {
                dir: checkpoints,
                source: std::io::Error::other(format!(
                    "sink `{sink}` would write inside it ({}), and its clean-up deletes the files there it does not \
                     know: give the sink a path outside every checkpoint directory",
                    place.display()
                )),
            });
        }
    }
    Ok(())
}

/// A directory that is not a checkpoint directory yet (it has no
/// `LINEAGE`) but holds files of its own — `checkpoint_dir = "."`, the
/// job's own folder — is refused: the clean-up would delete what it holds
/// under the names it uses (`shared/`).
fn refuse_a_directory_of_other_files(graph: &JobGraph, settings: &CheckpointSettings) -> Result<(), RunError> {
    if crate::dirs::known_lineage(&settings.dir).is_some() {
        return Ok(());
    }
    let entries = std::fs::read_dir(&settings.dir).into_iter().flatten().flatten();
    let mut other = entries
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !crate::checkpoint::layout::written_by_weir(name));
    match other.next() {
        Some(name) => Err(checkpoints_error(graph, format!(
            "it holds files Weir did not write (`{name}`), and a checkpoint directory's clean-up deletes the files \
             it does not know: give the job a `checkpoint_dir` of its own, new or empty"
        ))),
        None => Ok(()),
    }
}

/// An error about the job's checkpoint directory, `message` its cause.
pub(super) fn checkpoints_error(graph: &JobGraph, message: String) -> RunError {
    let dir = graph.checkpoints.as_ref().map(|c| c.dir.clone()).unwrap_or_default();
    RunError::Checkpoints { dir, source: std::io::Error::other(message) }
}

/// The record of the newest run from a savepoint in the job's checkpoint
/// directory, and whether that run has completed a checkpoint.
pub(super) fn newest_savepoint_start(graph: &JobGraph) -> Result<Option<(SavepointStart, bool)>, RunError> {
    let Some(settings) = &graph.checkpoints else { return Ok(None) };
    let unreadable = |reason| checkpoints_error(graph, reason);
    let Some(start) = SavepointStart::read(&settings.dir).map_err(unreadable)? else { return Ok(None) };
    let has_checkpoints = start.has_checkpoints(&open_storage(settings)?);
    Ok(Some((start, has_checkpoints)))
}

/// The first checkpoint a run without a savepoint may resume from: that of
/// the newest run from a savepoint, if there was one. If that run has none
/// yet, only its savepoint matches the output, and the run is refused.
pub(super) fn own_checkpoints_from(graph: &JobGraph) -> Result<u64, RunError> {
    match newest_savepoint_start(graph)? {
        None => Ok(0),
        Some((start, true)) => Ok(start.first_checkpoint),
        Some((start, false)) => Err(checkpoints_error(graph, format!(
            "the job's last run started from savepoint {0} and completed no checkpoint of its own, so the \
             checkpoints before it no longer match the output: restore that savepoint again \
             (`--from-savepoint {0}`) or another one",
            start.savepoint.display()
        ))),
    }
}

/// The newest checkpoint numbered `first` or above that verifies (below
/// `first` are an earlier run's, when this one started from a savepoint).
/// If there are such checkpoints but none verifies, an error: starting
/// over would replace the output they committed, which only the user may
/// decide.
pub(super) fn latest_checkpoint(graph: &JobGraph, first: u64) -> Result<Option<Manifest>, RunError> {
    let Some(settings) = &graph.checkpoints else { return Ok(None) };
    let storage = open_storage(settings)?;
    let recovered = storage.latest_from(first, |sink| graph.files_sink_dir(sink));
    if let Some((id, version)) = recovered.newer {
        return Err(checkpoints_error(graph, format!(
            "checkpoint {id} was written by a newer Weir (checkpoint format {version}; this one reads up to {}): run \
             the job with that Weir — falling back to an older checkpoint would undo the output it committed",
            crate::checkpoint::MANIFEST_FORMAT
        )));
    }
    if let Some((id, denied)) = recovered.unreadable {
        return Err(checkpoints_error(graph, format!(
            "checkpoint {id} cannot be read ({denied}): let the user who runs weir read the checkpoint directory, \
             and run the job again. Nothing was changed — a checkpoint that cannot be read is not skipped as a \
             damaged one would be, whose output an older one undoes"
        )));
    }
    if recovered.manifest.is_none() && !recovered.skipped.is_empty() {
        let ids: Vec<String> = recovered.skipped.iter().map(|(id, _)| id.to_string()).collect();
        let (newest, reason) = &recovered.skipped[0];
        let began = SavepointStart::read(&settings.dir).ok().flatten().map(|start| {
            format!(" (the last run began from {0}: `--from-savepoint {0}`)", start.savepoint.display())
        });
        let message = format!(
            "every checkpoint there is corrupt ({}; checkpoint {newest}: {reason}), and starting from the beginning \
             would replace the output they committed: restore a savepoint{}, or move the directory and the sinks' \
             output away to start afresh{}",
            ids.join(", "),
            began.unwrap_or_default(),
            damaged_lineage_hint(&storage, &settings.dir).unwrap_or_default()
        );
        return Err(checkpoints_error(graph, message));
    }
    Ok(recovered.manifest)
}

/// If every checkpoint in `dir` carries one lineage but its `LINEAGE`
/// file another — a damaged `LINEAGE` looks so, as do checkpoints all
/// copied in from one other directory —, how to tell the run it was the
/// file: the checkpoints are intact, and starting afresh would lose them.
fn damaged_lineage_hint(storage: &CheckpointStorage, dir: &Path) -> Option<String> {
    let theirs = storage.checkpoints_lineage()?;
    let ours = crate::dirs::known_lineage(dir)?;
    (theirs != ours).then(|| {
        format!(
            ". Every checkpoint there carries lineage {theirs}, the LINEAGE file {ours}: if it is the file that was \
             damaged (a bit flipped), not the checkpoints copied in from another job's directory, write {theirs} \
             into {} and run the job again",
            dir.join(crate::checkpoint::layout::LINEAGE).display()
        )
    })
}

/// Commits what a crash left uncommitted of the output of the job's own
/// newest checkpoint (and of older ones it carried), as a resume does
/// first: before the job is started from an older point of its own, whose
/// restore deletes the output it finds uncommitted.
pub fn commit_newest_checkpoint(graph: &JobGraph) -> Result<(), RunError> {
    // A last run begun from a savepoint without a checkpoint since has
    // committed nothing of its own.
    let Ok(floor) = own_checkpoints_from(graph) else { return Ok(()) };
    let Some(manifest) = latest_checkpoint(graph, floor)? else { return Ok(()) };
    let mut committer = recovery_committer(graph, Some(&manifest));
    committer.commit_pending_within(Duration::from_secs(60)).map_err(|remaining| {
        checkpoints_error(graph, format!(
            "the output of its newest checkpoint ({}) is not all committed yet ({remaining}), and starting from an \
             older point would delete it: run the job again once its sinks can commit",
            manifest.checkpoint
        ))
    })
}

/// A committer for the job's sinks that has committed the output of the
/// checkpoint it restores (again: a crash may have come between the
/// checkpoint's completion and its commits); what it could not commit
/// stays pending in it.
pub(super) fn recovery_committer(graph: &JobGraph, restored: Option<&Manifest>) -> Committer {
    let mut committer = Committer::new(graph.kafka_sinks());
    if let Some(manifest) = restored {
        committer.recover(manifest.commits_in(|sink| graph.files_sink_dir(sink)));
    }
    committer
}

/// The job's checkpoint directory.
pub(super) fn open_storage(settings: &CheckpointSettings) -> Result<CheckpointStorage, RunError> {
    CheckpointStorage::open(&settings.dir).map_err(|source| RunError::Checkpoints { dir: settings.dir.clone(), source })
}

/// Takes the output directories of `graph`'s sinks for this run: two jobs
/// writing one would overwrite each other's part files.
pub(super) fn lock_sinks(graph: &JobGraph) -> Result<Vec<crate::connectors::DirectoryLock>, RunError> {
    let sinks = graph.nodes.iter().filter_map(|node| match &node.kind {
        NodeKind::Sink(spec) => Some((node, spec)),
        _ => None,
    });
    let locks = sinks.map(|(node, spec)| {
        crate::connectors::lock_sink(spec).map_err(|source| RunError::Connector { node: node.describe(), source })
    });
    locks.filter_map(Result::transpose).collect()
}

/// Locks the checkpoint directory for this run (all its restarts), and
/// removes what a run killed while rescaling left in it.
fn lock_storage(storage: &CheckpointStorage, settings: &CheckpointSettings) -> Result<StorageLock, RunError> {
    match storage.lock() {
        Ok(Some(lock)) => {
            super::rescale::remove_leftovers(storage.root());
            Ok(lock)
        }
        Ok(None) => Err(RunError::CheckpointsInUse { dir: settings.dir.clone() }),
        Err(source) => Err(RunError::Checkpoints { dir: settings.dir.clone(), source }),
    }
}
