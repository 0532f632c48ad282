//! The transactional file sink: a directory of part files, each made
//! visible only when the checkpoint that covers its records completes.
//!
//! ```text
//! DIR/.part-0.inprogress        being written (records after the last barrier)
//! DIR/.part-0-00000007.pending  closed at barrier 7, waiting for checkpoint 7
//! DIR/part-0-00000007           committed: checkpoint 7 completed
//! DIR/part-0-final              committed at the end of input
//! ```
//!
//! At a barrier the in-progress file is synced and renamed to pending; the
//! coordinator renames pending to committed after writing the checkpoint's
//! manifest (and again on recovery, which is harmless). Opening the sink
//! for a job resuming from checkpoint `k` deletes what no complete
//! checkpoint covers: in-progress and pending files, and parts of
//! checkpoints after `k` (only there if a newer checkpoint was corrupt) —
//! their records will be produced again from `k`. A job starting afresh
//! refuses a directory that holds committed parts: it would produce their
//! records again, and deleting them would lose output that a checkpoint
//! committed (the user decides, by resuming or by moving them away).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::line_sink::format_line;
use super::{ConnectorError, Sink};
use crate::checkpoint::PendingCommit;
use crate::dataflow::RecordBatch;
use crate::job::OutputFormat;

/// Writes part files into a directory, exactly once with checkpoints.
pub struct PartFileSink {
    dir: PathBuf,
    subtask: u32,
    format: OutputFormat,
    current: Option<BufWriter<File>>,
    line: Vec<u8>,
}

impl PartFileSink {
    /// Opens subtask `subtask` (of `parallelism`)'s files in `dir`, cleaning
    /// up to checkpoint `restored` (0: the job starts afresh), which was
    /// taken at `restored_at_ms`.
    pub fn open(
        dir: &Path,
        subtask: u32,
        parallelism: u32,
        format: OutputFormat,
        restored: u64,
        restored_at_ms: i64,
    ) -> Result<Self, ConnectorError> {
        crate::dirs::create(dir).map_err(|source| ConnectorError::Open { path: dir.into(), source })?;
        check_directory(dir, restored, restored_at_ms)?;
        let sink = PartFileSink { dir: dir.into(), subtask, format, current: None, line: Vec::new() };
        sink.clean_up(restored, parallelism)?;
        Ok(sink)
    }

    fn in_progress(&self) -> PathBuf {
        self.dir.join(format!(".part-{}.inprogress", self.subtask))
    }

    fn io_error(&self, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io { what: self.dir.display().to_string(), source }
    }

    /// Removes this subtask's uncommitted files and the parts of
    /// checkpoints after `restored` (with the final part, when restoring:
    /// it is output after `restored` too). Subtask 0 also cleans up after
    /// subtasks beyond `parallelism`, left by a run at a higher parallelism.
    fn clean_up(&self, restored: u64, parallelism: u32) -> Result<(), ConnectorError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| self.io_error(e))?;
        let (mut uncommitted, mut rolled_back) = (Vec::new(), Vec::new());
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((subtask, label)) = parse_part_name(&name) else { continue };
            if subtask != self.subtask && !(self.subtask == 0 && subtask >= parallelism) {
                continue;
            }
            let epoch = match label {
                None => None,
                Some("final") => (restored > 0).then_some(u64::MAX),
                Some(epoch) => epoch.parse::<u64>().ok().filter(|&epoch| epoch > restored),
            };
            match epoch {
                Some(epoch) => rolled_back.push((epoch, entry.path())),
                None if name.starts_with('.') => uncommitted.push(entry.path()),
                None => {}
            }
        }
        // Recorded first: a later restore of a checkpoint taken before now
        // and after `restored` would find their output gone.
        if let Some(&(newest, _)) = rolled_back.iter().max_by_key(|(epoch, _)| *epoch) {
            super::rollbacks::record(&self.dir, self.subtask, restored, newest).map_err(|e| self.io_error(e))?;
        }
        for (_, path) in &rolled_back {
            warn!(file = %path.display(), restored, "removing output of a checkpoint newer than the one restored");
        }
        for path in rolled_back.iter().map(|(_, path)| path).chain(&uncommitted) {
            std::fs::remove_file(path).map_err(|e| self.io_error(e))?;
        }
        Ok(())
    }

    /// Closes the in-progress file as pending under `label`; `None` when
    /// nothing was written since the last one.
    fn close(&mut self, label: &str) -> Result<Option<PendingCommit>, ConnectorError> {
        let Some(mut file) = self.current.take() else { return Ok(None) };
        file.flush().map_err(|e| self.io_error(e))?;
        file.get_ref().sync_all().map_err(|e| self.io_error(e))?;
        let size = file.get_ref().metadata().map_err(|e| self.io_error(e))?.len();
        let pending = self.dir.join(format!(".part-{}-{label}.pending", self.subtask));
        std::fs::rename(self.in_progress(), &pending).map_err(|e| self.io_error(e))?;
        let to = self.dir.join(format!("part-{}-{label}", self.subtask));
        Ok(Some(PendingCommit::Rename { from: pending, to, size: Some(size) }))
    }
}

/// A run's hold on a `files` sink's directory (a lock on its `.lock` file,
/// released when the run's process ends, however it ends).
#[derive(Debug)]
pub struct DirectoryLock {
    _file: std::fs::File,
}

/// Locks `dir` (creating it) for one run of one job.
pub fn lock_directory(dir: &Path) -> Result<DirectoryLock, ConnectorError> {
    let open = |source| ConnectorError::Open { path: dir.into(), source };
    crate::dirs::create(dir).map_err(open)?;
    match crate::dirs::try_lock_file(&dir.join(LOCK_FILE)).map_err(open)? {
        Some(file) => Ok(DirectoryLock { _file: file }),
        None => Err(ConnectorError::InUse { path: dir.into() }),
    }
}

/// The file a run locks in a `files` sink's directory.
const LOCK_FILE: &str = ".lock";

/// Fails if the output in `dir` cannot be continued from checkpoint
/// `restored` (0: from the beginning), taken at `restored_at_ms`.
pub(super) fn check_directory(dir: &Path, restored: u64, restored_at_ms: i64) -> Result<(), ConnectorError> {
    if !dir.exists() {
        return Ok(());
    }
    match restored {
        0 => refuse_committed_parts(dir),
        _ => super::rollbacks::refuse_output_rolled_back(dir, restored, restored_at_ms),
    }
}

/// The names of the committed parts (of any subtask) in `dir`, sorted;
/// none if it cannot be read.
pub fn committed_parts(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let mut committed: Vec<String> = entries
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| matches!(parse_part_name(name), Some((_, Some(_)))))
        .collect();
    committed.sort();
    committed
}

/// Fails if `dir` holds committed parts (of any subtask), naming one.
fn refuse_committed_parts(dir: &Path) -> Result<(), ConnectorError> {
    std::fs::read_dir(dir).map_err(|source| ConnectorError::Open { path: dir.into(), source })?;
    let committed = committed_parts(dir);
    match committed.last() {
        None => Ok(()),
        Some(example) => Err(ConnectorError::CommittedOutput { path: dir.into(), parts: committed.len(), example: example.clone() }),
    }
}

/// The subtask of a part file's name, and for a committed part its label:
/// `part-S-LABEL` → (S, Some(LABEL)); `.part-S.inprogress` and
/// `.part-S-LABEL.pending` → (S, None).
fn parse_part_name(name: &str) -> Option<(u32, Option<&str>)> {
    if let Some(hidden) = name.strip_prefix(".part-") {
        let end = hidden.find(['.', '-'])?;
        return Some((hidden[..end].parse().ok()?, None));
    }
    let (subtask, label) = name.strip_prefix("part-")?.split_once('-')?;
    Some((subtask.parse().ok()?, Some(label)))
}

impl Sink for PartFileSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        if self.current.is_none() {
            let file = File::create(self.in_progress()).map_err(|e| self.io_error(e))?;
            self.current = Some(BufWriter::with_capacity(1 << 16, file));
        }
        self.line.clear();
        for record in batch.iter() {
            format_line(&record, self.format, &mut self.line);
        }
        let file = self.current.as_mut().expect("opened above");
        let result = file.write_all(&self.line);
        result.map_err(|e| self.io_error(e))
    }

    fn precommit(&mut self, checkpoint: u64) -> Result<Vec<PendingCommit>, ConnectorError> {
        Ok(self.close(&format!("{checkpoint:08}"))?.into_iter().collect())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        match self.current.as_mut() {
            Some(file) => file.flush().map_err(|source| ConnectorError::Io { what: self.dir.display().to_string(), source }),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<Vec<PendingCommit>, ConnectorError> {
        let last = self.close("final")?;
        info!(dir = %self.dir.display(), "part files closed");
        Ok(last.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::dir_names;

    fn batch(values: &[&str]) -> RecordBatch {
        let mut batch = RecordBatch::new();
        values.iter().for_each(|v| batch.push(b"k", v.as_bytes(), None));
        batch
    }

    #[test]
    fn output_is_visible_only_once_committed_and_uncommitted_output_is_dropped_on_restore() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = PartFileSink::open(dir.path(), 0, 1, OutputFormat::Value, 0, 0).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let commits = sink.precommit(1).unwrap();
        sink.write(&batch(&["c"])).unwrap();
        sink.flush().unwrap();
        assert_eq!(dir_names(dir.path()), [".part-0-00000001.pending", ".part-0.inprogress"]);
        commits[0].commit_file().unwrap();
        commits[0].commit_file().unwrap(); // Again, as recovery does: harmless.
        assert_eq!(std::fs::read_to_string(dir.path().join("part-0-00000001")).unwrap(), "a\nb\n");
        // Checkpoint 2 was pre-committed but never completed; the job restarts from 1.
        sink.precommit(2).unwrap();
        drop(sink);
        PartFileSink::open(dir.path(), 0, 1, OutputFormat::Value, 1, 0).unwrap();
        assert_eq!(dir_names(dir.path()), ["part-0-00000001"]);
    }

    #[test]
    fn a_fresh_start_refuses_committed_parts_and_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".part-1.inprogress"), "x\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x\n").unwrap();
        PartFileSink::open(dir.path(), 0, 2, OutputFormat::Value, 0, 0).unwrap();
        std::fs::write(dir.path().join("part-1-00000003"), "x\n").unwrap();
        let error = PartFileSink::open(dir.path(), 0, 2, OutputFormat::Value, 0, 0).err().unwrap().to_string();
        assert!(error.contains("1 committed part file(s), such as part-1-00000003") && error.contains("move"), "{error}");
        std::fs::write(dir.path().join("part-0-final"), "x\n").unwrap();
        let error = PartFileSink::open(dir.path(), 1, 2, OutputFormat::Value, 0, 0).err().unwrap().to_string();
        assert!(error.contains("2 committed part file(s)"), "{error}");
        assert_eq!(dir_names(dir.path()), [".part-1.inprogress", "notes.txt", "part-0-final", "part-1-00000003"]);
    }

    #[test]
    fn a_restore_at_lower_parallelism_cleans_up_after_the_subtasks_gone_and_drops_later_final_parts() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["part-0-00000001", "part-0-final", "part-3-00000001", "part-3-00000002", ".part-3.inprogress", ".part-3-00000002.pending", "part-1-00000002"] {
            std::fs::write(dir.path().join(name), "x\n").unwrap();
        }
        PartFileSink::open(dir.path(), 0, 2, OutputFormat::Value, 1, 0).unwrap();
        assert_eq!(dir_names(dir.path()), [".rollbacks-0", "part-0-00000001", "part-1-00000002", "part-3-00000001"]);
        assert_eq!(parse_part_name("part-12-final"), Some((12, Some("final"))));
        assert_eq!(parse_part_name(".part-12-00000003.pending"), Some((12, None)));
        assert_eq!(parse_part_name("notes.txt"), None);
    }
}
