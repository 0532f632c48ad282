//! Starting a job from a retained checkpoint (`weir run JOB
//! --from-savepoint DIR/chk-N`), as Flink's `-s` takes one: to go back to
//! a point the job passed (before a bad deploy, or bad input), or to start
//! another job from it.
//!
//! A checkpoint belongs to the directory that took it: its state is laid
//! out by the subtasks that took it, in backend files it may share with
//! other checkpoints there, and that directory's retention deletes it once
//! newer ones are complete. So it is not restored in place. It is written
//! as a savepoint first — by the code that writes `weir savepoint`'s,
//! reading every subtask's state whatever backend wrote it — into the
//! job's `savepoints/` (`checkpoint-JOB-MS`), and the job restores that, as
//! any savepoint: state matched by uid, at any parallelism, sinks rolled
//! back to the checkpoint. The copy is the host's own (see `retention`):
//! kept while a run started from it has no checkpoint of its own (a
//! restart, or the next `weir run`, restores it again), and the newest
//! [`KEPT_HOST_SAVEPOINTS`](super::KEPT_HOST_SAVEPOINTS) after.
//!
//! While it is read, the checkpoint directory is locked as a running job
//! locks it, so that no host deletes the checkpoint meanwhile; a directory
//! a running job holds is refused (take a savepoint of that job instead).
//! Going back within the job's own directory, the output of its newest
//! checkpoint is committed first if a crash left it pending, as a resume
//! would: the restore deletes what it finds uncommitted, and everything up
//! to the checkpoint restored must stay.

use std::path::Path;

use tracing::info;

use super::JobManager;
use super::retention;
use crate::checkpoint::CheckpointStorage;
use crate::control::ControlError;
use crate::job::JobGraph;
use crate::plugin::now_ms;
use crate::savepoint::{JobDescription, Savepoint, write_savepoint};

/// What the host marks the savepoints it writes of checkpoints with.
const LABEL: &str = "checkpoint";

impl JobManager {
    /// Checkpoint `dir` (`chk-N` in a checkpoint directory), verified and
    /// written as a savepoint for job `graph` to start from (see the
    /// module's docs).
    pub fn savepoint_of_checkpoint(&self, dir: &Path, graph: &JobGraph, allow_non_restored: bool) -> Result<Savepoint, ControlError> {
        let refuse = |reason: String| ControlError::Rejected(format!("cannot start from checkpoint {}: {reason}", dir.display()));
        let (storage, id) = CheckpointStorage::of_checkpoint(dir).ok_or_else(|| refuse("it is not named chk-N".into()))?;
        let root = storage.root();
        let listed = format!("`weir checkpoints {}` lists them", root.display());
        if !storage.ids().contains(&id) {
            return Err(refuse(format!("there is no checkpoint {id} in {} ({listed})", root.display())));
        }
        if !storage.is_complete(id) {
            return Err(refuse(format!("it is not complete (its host stopped while taking it); choose a complete one ({listed})")));
        }
        let _held = match storage.lock() {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                return Err(refuse(format!(
                    "a running job holds its checkpoint directory {}, and may delete the checkpoint meanwhile: take a \
                     savepoint of that job (`weir savepoint JOB`) and start from that, or stop it first",
                    root.display()
                )));
            }
            Err(error) => return Err(refuse(format!("cannot lock {}: {error}", root.display()))),
        };
        if let Some(version) = storage.newer_format(id) {
            return Err(refuse(format!("a newer Weir wrote it (checkpoint format {version}); start it with that Weir")));
        }
        let manifest = storage.verify(id).map_err(|reason| refuse(format!("{reason}; choose another ({listed})")))?;
        if manifest.finished {
            return Err(refuse(format!(
                "it is the job's last, taken as it finished (its sources exhausted): it keeps no state to start \
                 from; choose an earlier one ({listed})"
            )));
        }
        // What would refuse the run, before the state is copied.
        crate::dataflow::check_fits(graph, &manifest, allow_non_restored).map_err(refuse)?;
        crate::dataflow::refuse_taking_checkpoint_dir(graph).map_err(|error| refuse(error.to_string()))?;
        let own = graph.checkpoints.as_ref().is_some_and(|s| crate::dirs::resolved(&s.dir) == crate::dirs::resolved(root));
        if own {
            crate::dataflow::commit_newest_checkpoint(graph).map_err(|error| refuse(error.to_string()))?;
        }
        // The job's own directory is held too (it is `root` when going
        // back), so that what a killed conversion left there can go.
        let _target_held = match &graph.checkpoints {
            Some(settings) if !own => match CheckpointStorage::open(&settings.dir).and_then(|target| target.lock()) {
                Ok(Some(lock)) => Some(lock),
                Ok(None) => return Err(refuse(format!("job `{}` is running already (its checkpoint directory is held)", graph.name))),
                Err(error) => return Err(refuse(format!("cannot lock {}: {error}", settings.dir.display()))),
            },
            _ => None,
        };
        let savepoints = self.default_savepoint_root(graph);
        if graph.checkpoints.is_some() {
            remove_interrupted(&savepoints, &graph.name);
        }
        let taken_at = now_ms();
        let target = savepoints.join(format!("{LABEL}-{}-{taken_at}", graph.name));
        let work = savepoints.join(format!(".{LABEL}-{taken_at}-work"));
        crate::dirs::create(&work).map_err(|error| refuse(format!("cannot create {}: {error}", work.display())))?;
        let layout = JobDescription::of_checkpoint(&manifest, |uid| graph.operator(uid).map(|op| op.plugin.clone()));
        info!(job = %graph.name, checkpoint = id, from = %root.display(), savepoint = %target.display(), "writing the checkpoint as a savepoint to start from");
        let written = write_savepoint(&manifest, root, &layout, &target, &work);
        let _ = std::fs::remove_dir_all(&work);
        written.map_err(|error| refuse(error.to_string()))?;
        retention::mark_taken_by_host(&target, LABEL);
        self.forget_old_savepoints(graph, LABEL);
        Savepoint::open(&target).map_err(|error| refuse(error.to_string()))
    }
}

/// Removes what a host killed while writing a checkpoint of job `job` as a
/// savepoint in `savepoints` left: its work directory, and the savepoint
/// still marked as being written.
fn remove_interrupted(savepoints: &Path, job: &str) {
    let prefix = format!("{LABEL}-{job}-");
    for entry in std::fs::read_dir(savepoints).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let work = name.starts_with(&format!(".{LABEL}-")) && name.ends_with("-work");
        let interrupted = name.starts_with(&prefix) && crate::savepoint::interrupted(&entry.path());
        if work || interrupted {
            info!(dir = %entry.path().display(), "removing what a killed host left while writing a checkpoint as a savepoint");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
