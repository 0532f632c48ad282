//! Resuming from a checkpoint at another parallelism.
//!
//! A checkpoint's keyed state is laid out by the subtasks that took it:
//! each operator subtask's key groups in its backend's own files. An
//! operator resumed with more or fewer subtasks (after a crash, `weir run
//! JOB -p 4`) needs it laid out again by key group, which is what a
//! savepoint is. (A source's splits are dealt out again as they are.) So
//! the checkpoint is written as one — by the code that writes `weir
//! savepoint`'s, reading every subtask's state whatever backend wrote it —
//! into `.rescale` in the checkpoint directory, and the job's subtasks
//! take their key groups from that. The
//! rest of the resume is the checkpoint's: its output is committed (again)
//! first, and sinks roll back to it. Operator states are loaded before any
//! task starts, so the copy is removed as soon as the job has started.

use std::path::Path;

use tracing::info;

use super::executor::RunError;
use crate::checkpoint::Manifest;
use crate::job::JobGraph;
use crate::savepoint::{JobDescription, Savepoint, SavepointError, write_savepoint};

/// Where the redistributed copy is written, and its files on the way.
use crate::checkpoint::layout::{RESCALE_WORK as WORK, RESCALED};

/// Removes what a run killed while rescaling left in checkpoint directory
/// `root` (a run that holds its lock).
pub(super) fn remove_leftovers(root: &Path) {
    for leftover in [root.join(RESCALED), root.join(WORK)] {
        if let Err(error) = remove(&leftover) {
            tracing::warn!(dir = %leftover.display(), %error, "cannot remove what an earlier run left while rescaling");
        }
    }
}

/// The checkpoint `manifest` of `graph`'s job, written as a savepoint in
/// its checkpoint directory (removed when dropped).
pub(super) struct Rescaled {
    pub savepoint: Savepoint,
}

impl Rescaled {
    /// Writes the state of `manifest`, in `graph`'s checkpoint directory
    /// `root`, laid out by key group; `changes` name the operators whose
    /// parallelism changed, for the log.
    pub(super) fn write(graph: &JobGraph, root: &Path, manifest: &Manifest, changes: &[String]) -> Result<Rescaled, RunError> {
        let error = |source| RunError::Rescale { checkpoint: manifest.checkpoint, dir: root.to_path_buf(), source };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| error(SavepointError::Io { path, source })
        };
        info!(job = %graph.name, checkpoint = manifest.checkpoint, changed = %changes.join(", "), "redistributing the checkpoint's state by key group");
        let (dir, work) = (root.join(RESCALED), root.join(WORK));
        for stale in [&dir, &work] {
            remove(stale).map_err(io(stale))?;
        }
        crate::dirs::create(&work).map_err(io(&work))?;
        let layout = checkpoint_layout(graph, manifest);
        let written = write_savepoint(manifest, root, &layout, &dir, &work);
        let _ = remove(&work);
        written.map_err(error)?;
        let savepoint = Savepoint::open(&dir).map_err(error)?;
        Ok(Rescaled { savepoint })
    }

    /// Removes the copy, once the job's operators have loaded their state.
    pub(super) fn discard(&self) {
        if let Err(error) = remove(&self.savepoint.dir) {
            tracing::warn!(dir = %self.savepoint.dir.display(), %error, "cannot remove the redistributed copy of a checkpoint");
        }
    }
}

impl Drop for Rescaled {
    fn drop(&mut self) {
        self.discard();
    }
}

/// Removes `dir` and everything in it, if it is there.
fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// The sources and operators of `graph` that `manifest` has tasks of, at
/// the parallelism the checkpoint was taken at, running the plugins that
/// took it: what its state is read as.
fn checkpoint_layout(graph: &JobGraph, manifest: &Manifest) -> JobDescription {
    let mut layout = JobDescription::of_checkpoint(manifest, |uid| graph.operator(uid).map(|op| op.plugin.clone()));
    layout.nodes.retain(|node| graph.nodes.iter().any(|n| n.name == node.name()));
    JobDescription { name: graph.name.clone(), backend: graph.backend, ..layout }
}
