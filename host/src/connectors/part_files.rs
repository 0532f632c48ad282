//! The transactional file sink: a directory of part files, each made
//! visible only when the checkpoint that covers its records completes.
//!
//! ```text
//! DIR/.part-0-00000007.inprogress  opened after barrier 7, being written
//! DIR/part-0-00000009              committed: rolled at barrier 9, which completed
//! DIR/part-0-final                 committed at the end of input (named
//!                                  after the checkpoint that commits it
//!                                  when the rest of the job runs on)
//! ```
//!
//! At each barrier the open part is synced. By default it is also *rolled*:
//! closed, handed to the checkpoint to be renamed to `part-S-<checkpoint>`
//! once the checkpoint completes, and the next record opens a new part. A
//! sink with a rolling policy (`roll_interval_ms`, `roll_size_mb`, as
//! Flink's `DefaultRollingPolicy`) keeps a part open across barriers until
//! it is old or large enough, so that checkpoints every second do not
//! commit a file each: such a checkpoint records how much of the open part
//! is its own ([`PendingCommit::InProgress`]), and a restore of it commits
//! that much (the rest is produced again). Savepoints and the end of input
//! always roll, so a savepoint's output is committed whole.
//!
//! The coordinator renames after writing the checkpoint's manifest (and
//! again on recovery, which is harmless). Opening the sink for a job
//! resuming from checkpoint `k` deletes what no complete checkpoint covers:
//! parts in progress that `k` did not record, and parts of checkpoints
//! after `k` (only there if a newer checkpoint was corrupt, or the job went
//! back to an older savepoint) — their records will be produced again from
//! `k`. A job starting afresh refuses a directory that holds committed
//! parts: it would produce their records again, and deleting them would
//! lose output that a checkpoint committed (the user decides, by resuming
//! or by moving them away).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
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
    rolling: RollingPolicy,
    current: Option<OpenPart>,
    /// The last barrier passed (at first, the checkpoint restored): names
    /// the next part opened, so no two parts in progress share a name.
    last_barrier: u64,
    line: Vec<u8>,
}

/// The part being written.
struct OpenPart {
    path: PathBuf,
    file: BufWriter<File>,
    opened: Instant,
    written: u64,
    /// The CRC-32 of what was written.
    crc: crc32fast::Hasher,
}

/// When a `files` sink commits its open part (the job file's
/// `roll_interval_ms` and `roll_size_mb`): at the first barrier after the
/// part has been open `interval` or has reached `size` bytes; at every
/// barrier if neither is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollingPolicy {
    pub interval: Option<Duration>,
    pub size: Option<u64>,
}

impl RollingPolicy {
    /// The largest `roll_size_mb`: 1 PiB.
    pub const LARGEST_SIZE_MB: u64 = 1 << 30;

    /// The policy of a sink's settings. One left out takes Flink's
    /// default (60 s, 128 MiB), so that a part rolled by size alone is
    /// still visible within a minute on a slow stream.
    pub fn from_settings(interval_ms: Option<u64>, size_mb: Option<u64>) -> Self {
        if interval_ms.is_none() && size_mb.is_none() {
            return RollingPolicy::default();
        }
        RollingPolicy {
            interval: Some(Duration::from_millis(interval_ms.unwrap_or(60_000))),
            size: Some(size_mb.unwrap_or(128).min(Self::LARGEST_SIZE_MB) << 20),
        }
    }

    fn rolls(&self, part: &OpenPart) -> bool {
        match (self.interval, self.size) {
            (None, None) => true,
            (interval, size) => {
                interval.is_some_and(|i| part.opened.elapsed() >= i) || size.is_some_and(|s| part.written >= s)
            }
        }
    }
}

/// What a `files` sink continues from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Restored<'a> {
    /// The checkpoint restored (0: none, the job starts afresh).
    pub checkpoint: u64,
    /// When it was taken (ms since the epoch).
    pub taken_at_ms: i64,
    /// The job's checkpoints, which the directory's [`OWNER_FILE`]
    /// records (none for a job without checkpoints).
    pub owner: Option<Owner<'a>>,
}

/// The checkpoints of the job that writes a `files` sink's directory.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The lineage of its checkpoint directory: whose parts are whose.
    pub lineage: &'a str,
    /// The directory, for a refused job's message to name.
    pub checkpoint_dir: &'a Path,
}

impl<'a> Restored<'a> {
    pub fn of(place: &'a super::SinkPlace<'_>) -> Self {
        Restored {
            checkpoint: place.restored,
            taken_at_ms: place.restored_at_ms,
            owner: place.lineage.as_deref().map(|lineage| Owner { lineage, checkpoint_dir: place.checkpoint_dir }),
        }
    }
}

impl PartFileSink {
    /// Opens subtask `subtask` (of `parallelism`)'s files in `dir`, cleaning
    /// up to the checkpoint `restored`.
    pub fn open(
        dir: &Path,
        subtask: u32,
        parallelism: u32,
        format: OutputFormat,
        rolling: RollingPolicy,
        restored: &Restored<'_>,
    ) -> Result<Self, ConnectorError> {
        crate::dirs::create(dir).map_err(|source| ConnectorError::Open { path: dir.into(), source })?;
        check_directory(dir, restored)?;
        let checkpoint = restored.checkpoint;
        let sink =
            PartFileSink { dir: dir.into(), subtask, format, rolling, current: None, last_barrier: checkpoint, line: Vec::new() };
        if subtask == 0 {
            sink.mark_owner(restored)?;
        }
        sink.clean_up(checkpoint, parallelism)?;
        Ok(sink)
    }

    /// Names the job that now writes the directory in [`OWNER_FILE`]: its
    /// checkpoint lineage, or no one for a job without checkpoints (whose
    /// parts in progress nothing commits, so that its own, left by a crash
    /// or a failure, do not stand in its way when it runs again).
    fn mark_owner(&self, restored: &Restored<'_>) -> Result<(), ConnectorError> {
        let owner = self.dir.join(OWNER_FILE);
        let marked = match restored.owner {
            Some(Owner { lineage, checkpoint_dir }) => {
                crate::dirs::write_durably(&owner, format!("{lineage}\n{}\n", checkpoint_dir.display()).as_bytes())
            }
            None => std::fs::remove_file(&owner).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }),
        };
        marked.map_err(|e| self.io_error(e))
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

    /// Syncs the open part and returns what checkpoint `label` commits of
    /// it: the whole part with `roll` (it is closed; the next record opens
    /// another), else the part so far, to commit only if the checkpoint is
    /// restored. Nothing when no part is open.
    fn seal(&mut self, label: &str, roll: bool) -> Result<Option<PendingCommit>, ConnectorError> {
        let Some(part) = self.current.as_mut() else { return Ok(None) };
        let synced = part.file.flush().and_then(|()| part.file.get_ref().sync_all());
        synced.map_err(|source| ConnectorError::Io { what: self.dir.display().to_string(), source })?;
        let to = self.dir.join(format!("part-{}-{label}", self.subtask));
        if !roll {
            let (in_progress, durable, crc32) = (part.path.clone(), part.written, part.crc.clone().finalize());
            return Ok(Some(PendingCommit::InProgress(PartInProgress { in_progress, durable, crc32, to })));
        }
        let part = self.current.take().expect("a part is open");
        Ok(Some(PendingCommit::Rename { from: part.path, to, size: Some(part.written) }))
    }

    fn open_part(&mut self) -> Result<&mut OpenPart, ConnectorError> {
        if self.current.is_none() {
            let path = self.dir.join(format!(".part-{}-{:08}.inprogress", self.subtask, self.last_barrier));
            let file = File::create(&path).map_err(|e| self.io_error(e))?;
            let file = BufWriter::with_capacity(1 << 16, file);
            self.current = Some(OpenPart { path, file, opened: Instant::now(), written: 0, crc: crc32fast::Hasher::new() });
        }
        Ok(self.current.as_mut().expect("opened above"))
    }
}

/// A run's hold on a `files` sink's directory (a lock on its `.lock` file)
/// or a `file` sink's file, released when the run's process ends, however
/// it ends.
#[derive(Debug)]
pub struct DirectoryLock {
    _file: std::fs::File,
}

impl DirectoryLock {
    /// Locks `file` for this run — the output at `output` — or fails with
    /// `in_use` if another run holds it.
    pub(super) fn take(file: &Path, output: &Path, in_use: ConnectorError) -> Result<Self, ConnectorError> {
        let locked = crate::dirs::try_lock_file(file).map_err(|source| ConnectorError::Open { path: output.into(), source })?;
        locked.map(|file| DirectoryLock { _file: file }).ok_or(in_use)
    }
}

/// Locks `dir` (creating it) for one run of one job.
pub fn lock_directory(dir: &Path) -> Result<DirectoryLock, ConnectorError> {
    crate::dirs::create(dir).map_err(|source| ConnectorError::Open { path: dir.into(), source })?;
    DirectoryLock::take(&dir.join(LOCK_FILE), dir, ConnectorError::InUse { path: dir.into() })
}

/// The file a run locks in a `files` sink's directory.
const LOCK_FILE: &str = ".lock";

/// The file in a `files` sink's directory that names the job with
/// checkpoints that writes there: the lineage of its checkpoint
/// directory on the first line, the directory's path on the second (for
/// messages; the first Weir to write the file wrote the lineage alone). A
/// run of another job deletes no part in progress there, since that job's
/// checkpoints may commit them. (A job without checkpoints removes it:
/// nothing commits its parts in progress. Weir before 2026-12-05 wrote
/// none.)
const OWNER_FILE: &str = ".owner";

/// Fails if the output in `dir` cannot be continued from `restored`.
pub(super) fn check_directory(dir: &Path, restored: &Restored<'_>) -> Result<(), ConnectorError> {
    if !dir.exists() {
        return Ok(());
    }
    refuse_others_parts_in_progress(dir, restored.owner.map(|owner| owner.lineage))?;
    match restored.checkpoint {
        0 => refuse_committed_parts(dir),
        checkpoint => super::rollbacks::refuse_output_rolled_back(dir, checkpoint, restored.taken_at_ms),
    }
}

/// Fails if `dir` holds parts in progress written by a job other than the
/// one of checkpoint lineage `ours`: they are the output of that job's
/// checkpoints until it resumes, and this run's clean-up would delete them.
pub fn refuse_others_parts_in_progress(dir: &Path, ours: Option<&str>) -> Result<(), ConnectorError> {
    let Ok(owner) = std::fs::read_to_string(dir.join(OWNER_FILE)) else { return Ok(()) };
    let mut lines = owner.lines().map(str::trim);
    let theirs = lines.next().unwrap_or_default();
    if Some(theirs) == ours {
        return Ok(());
    }
    let in_progress = part_names(dir, false);
    let Some(example) = in_progress.first().cloned() else { return Ok(()) };
    let owner = match lines.next().filter(|dir| !dir.is_empty()) {
        Some(checkpoint_dir) => format!("the job with the checkpoint directory {checkpoint_dir} (LINEAGE {theirs})"),
        None => format!("the job whose checkpoint directory's LINEAGE file reads {theirs}"),
    };
    Err(ConnectorError::OthersPartsInProgress { path: dir.into(), parts: in_progress.len(), example, owner })
}

/// The names of the committed parts (of any subtask) in `dir`, sorted;
/// none if it cannot be read.
pub fn committed_parts(dir: &Path) -> Vec<String> {
    part_names(dir, true)
}

/// The names of the committed parts, or of those not committed (in
/// progress or pending), of any subtask in `dir`, sorted; none if it
/// cannot be read.
fn part_names(dir: &Path, committed: bool) -> Vec<String> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let mut names: Vec<String> = entries
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| matches!(parse_part_name(name), Some((_, label)) if label.is_some() == committed))
        .collect();
    names.sort();
    names
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

/// A part in progress at a checkpoint's barrier, synced: its first
/// `durable` bytes (whose CRC-32 is `crc32`) are the checkpoint's output,
/// committed as `to` if the checkpoint is restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInProgress {
    pub in_progress: PathBuf,
    pub durable: u64,
    pub crc32: u32,
    pub to: PathBuf,
}

impl PartInProgress {
    /// Commits the checkpoint's share of the part as `to`; Ok(false) if
    /// that was done before. The part is where the checkpoint left it, or,
    /// restoring a checkpoint older than the newest (the newer ones
    /// corrupt), committed since under a later label: the share is then
    /// copied from it (the sink deletes the later part when it opens,
    /// recording the rollback). Its later bytes are produced again.
    pub fn commit(&self) -> std::io::Result<bool> {
        if std::fs::metadata(&self.in_progress).is_ok() {
            self.check_share_of(&self.in_progress)?;
            let file = std::fs::OpenOptions::new().write(true).open(&self.in_progress)?;
            file.set_len(self.durable)?;
            file.sync_all()?;
            std::fs::rename(&self.in_progress, &self.to)?;
            return Ok(true);
        }
        if self.to.exists() {
            return Ok(false);
        }
        let committed = self.committed_since()?;
        copy_prefix(&committed, self.durable, &self.to)?;
        Ok(true)
    }

    /// Fails unless the checkpoint's share can be committed: the part is
    /// there and starts with it; or the share was committed already, or
    /// the part was, under a later label. A part whose directory is gone
    /// is not judged: the sink's directory was moved (a job's run finds it
    /// where its job file says; `weir checkpoints` knows only the old
    /// place).
    pub fn check(&self) -> std::io::Result<()> {
        if std::fs::metadata(&self.in_progress).is_ok() {
            return self.check_share_of(&self.in_progress);
        }
        let moved = self.in_progress.parent().is_some_and(|dir| !dir.exists());
        if moved || self.to.exists() {
            return Ok(());
        }
        self.committed_since().map(drop)
    }

    /// Fails unless the first `durable` bytes of `path` are the share.
    fn check_share_of(&self, path: &Path) -> std::io::Result<()> {
        let mut share = std::io::Read::take(File::open(path)?, self.durable);
        let mut crc = crc32fast::Hasher::new();
        let mut buffer = vec![0; 1 << 16];
        let mut read = 0;
        loop {
            let n = std::io::Read::read(&mut share, &mut buffer)?;
            if n == 0 {
                break;
            }
            crc.update(&buffer[..n]);
            read += n as u64;
        }
        match (read, crc.finalize()) {
            (read, _) if read < self.durable => {
                Err(damaged(format!("damaged: {read} bytes, where the checkpoint recorded {}", self.durable)))
            }
            (_, crc) if crc != self.crc32 => {
                Err(damaged(format!("damaged: its first {} bytes are not those the checkpoint recorded", self.durable)))
            }
            _ => Ok(()),
        }
    }

    /// The committed part the part in progress became: among the parts of
    /// `to`'s subtask committed after `to`'s checkpoint, the first whose
    /// start is the checkpoint's share (a part moved away by a consumer is
    /// not taken for another).
    fn committed_since(&self) -> std::io::Result<PathBuf> {
        let missing =
            || std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} is missing", self.in_progress.display()));
        let later = later_parts(&self.to).ok_or_else(missing)?;
        later.into_iter().find(|part| self.check_share_of(part).is_ok()).ok_or_else(missing)
    }
}

fn damaged(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// The committed parts of `to`'s subtask with labels after `to`'s, lowest
/// first (the final part last).
fn later_parts(to: &Path) -> Option<Vec<PathBuf>> {
    let dir = to.parent()?;
    let (subtask, label) = parse_part_name(to.file_name()?.to_str()?)?;
    let after: u64 = label?.parse().ok()?;
    let order = |label: &str| if label == "final" { Some(u64::MAX) } else { label.parse::<u64>().ok() };
    let entries = std::fs::read_dir(dir).ok()?.flatten();
    let mut later: Vec<(u64, PathBuf)> = entries
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (of, label) = parse_part_name(&name)?;
            let rank = order(label?).filter(|&rank| of == subtask && rank > after)?;
            Some((rank, entry.path()))
        })
        .collect();
    later.sort();
    Some(later.into_iter().map(|(_, path)| path).collect())
}

/// Writes the first `length` bytes of `from` to `to`, whole or not at all.
fn copy_prefix(from: &Path, length: u64, to: &Path) -> std::io::Result<()> {
    let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = to.with_file_name(format!(".{name}.recovering"));
    let mut source = std::io::Read::take(File::open(from)?, length);
    let mut copy = File::create(&temporary)?;
    std::io::copy(&mut source, &mut copy)?;
    copy.sync_all()?;
    std::fs::rename(temporary, to)
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
        self.line.clear();
        for record in batch.iter() {
            format_line(&record, self.format, &mut self.line);
        }
        let line = std::mem::take(&mut self.line);
        let part = self.open_part()?;
        let result = part.file.write_all(&line);
        part.written += line.len() as u64;
        part.crc.update(&line);
        self.line = line;
        result.map_err(|e| self.io_error(e))
    }

    fn precommit(&mut self, checkpoint: u64, savepoint: bool) -> Result<Vec<PendingCommit>, ConnectorError> {
        self.last_barrier = checkpoint;
        let roll = savepoint || self.current.as_ref().is_some_and(|part| self.rolling.rolls(part));
        Ok(self.seal(&format!("{checkpoint:08}"), roll)?.into_iter().collect())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        match self.current.as_mut() {
            Some(part) => part.file.flush().map_err(|source| ConnectorError::Io { what: self.dir.display().to_string(), source }),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<Vec<PendingCommit>, ConnectorError> {
        let last = self.seal("final", true)?;
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

    fn open(dir: &Path, subtask: u32, parallelism: u32, rolling: RollingPolicy, restored: u64) -> Result<PartFileSink, ConnectorError> {
        PartFileSink::open(dir, subtask, parallelism, OutputFormat::Value, rolling, &Restored { checkpoint: restored, ..Restored::default() })
    }

    /// Rolls only when asked to by size: a part stays open across barriers.
    fn by_size(bytes: u64) -> RollingPolicy {
        RollingPolicy { interval: None, size: Some(bytes) }
    }

    /// What a restore of a checkpoint that pre-committed `commits` does.
    fn recover(commits: &[PendingCommit]) {
        let mut committer = crate::checkpoint::Committer::new(Vec::new());
        committer.recover(commits.to_vec());
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn output_is_visible_only_once_committed_and_uncommitted_output_is_dropped_on_restore() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = open(dir.path(), 0, 1, RollingPolicy::default(), 0).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let commits = sink.precommit(1, false).unwrap();
        sink.write(&batch(&["c"])).unwrap();
        sink.flush().unwrap();
        assert_eq!(dir_names(dir.path()), [".part-0-00000000.inprogress", ".part-0-00000001.inprogress"]);
        commits[0].commit_file().unwrap();
        commits[0].commit_file().unwrap(); // Again, as recovery does: harmless.
        assert_eq!(read(dir.path(), "part-0-00000001"), "a\nb\n");
        // Checkpoint 2 was pre-committed but never completed; the job restarts from 1.
        sink.precommit(2, false).unwrap();
        drop(sink);
        open(dir.path(), 0, 1, RollingPolicy::default(), 1).unwrap();
        assert_eq!(dir_names(dir.path()), ["part-0-00000001"]);
    }

    #[test]
    fn a_rolling_part_spans_checkpoints_and_a_restore_commits_what_its_checkpoint_covered() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = open(dir.path(), 0, 1, by_size(8), 0).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let first = sink.precommit(1, false).unwrap();
        let PendingCommit::InProgress(part) = &first[0] else { panic!("in progress: {first:?}") };
        assert_eq!(part.durable, 4);
        first[0].commit_file().unwrap(); // Checkpoint 1 completes: nothing to see yet.
        assert!(committed_parts(dir.path()).is_empty());
        sink.write(&batch(&["c"])).unwrap();
        let second = sink.precommit(2, false).unwrap();
        sink.write(&batch(&["d", "e"])).unwrap(); // Past 8 bytes: the next barrier rolls.
        sink.flush().unwrap();
        drop(sink); // Killed before barrier 3.
        // Restored from checkpoint 2: "a b c" are its output, "d e" come again.
        recover(&second);
        open(dir.path(), 0, 1, by_size(8), 2).unwrap();
        assert_eq!(dir_names(dir.path()), ["part-0-00000002"]);
        assert_eq!(read(dir.path(), "part-0-00000002"), "a\nb\nc\n");
        recover(&second); // Again, after a crash during the restore: harmless.
        assert_eq!(read(dir.path(), "part-0-00000002"), "a\nb\nc\n");
        // The part grows past its size and rolls at the next barrier, whole.
        let mut sink = open(dir.path(), 0, 1, by_size(8), 2).unwrap();
        sink.write(&batch(&["d", "e", "f", "g"])).unwrap();
        let third = sink.precommit(3, false).unwrap();
        assert!(matches!(&third[0], PendingCommit::Rename { size: Some(8), .. }), "{third:?}");
        third[0].commit_file().unwrap();
        assert_eq!(read(dir.path(), "part-0-00000003"), "d\ne\nf\ng\n");
    }

    #[test]
    fn savepoints_and_the_end_of_input_commit_a_rolling_part_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = open(dir.path(), 0, 1, by_size(1 << 20), 0).unwrap();
        sink.write(&batch(&["a"])).unwrap();
        assert!(sink.precommit(1, false).unwrap()[0].in_progress());
        let savepoint = sink.precommit(2, true).unwrap();
        assert!(matches!(&savepoint[0], PendingCommit::Rename { size: Some(2), .. }), "{savepoint:?}");
        sink.write(&batch(&["b"])).unwrap();
        let last = sink.finish().unwrap();
        savepoint.iter().chain(&last).for_each(|commit| commit.commit_file().unwrap());
        assert_eq!(committed_parts(dir.path()), ["part-0-00000002", "part-0-final"]);
        let interval = RollingPolicy { interval: Some(Duration::ZERO), size: None };
        let other = tempfile::tempdir().unwrap();
        let mut sink = open(other.path(), 0, 1, interval, 0).unwrap();
        sink.write(&batch(&["a"])).unwrap();
        assert!(matches!(&sink.precommit(1, false).unwrap()[0], PendingCommit::Rename { .. }), "rolled by age");
    }

    #[test]
    fn restoring_an_older_checkpoint_takes_its_share_of_a_part_committed_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = open(dir.path(), 0, 1, by_size(6), 0).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let first = sink.precommit(1, false).unwrap();
        sink.write(&batch(&["c"])).unwrap();
        sink.precommit(2, false).unwrap()[0].commit_file().unwrap(); // Rolled and committed.
        sink.write(&batch(&["d"])).unwrap();
        sink.precommit(3, false).unwrap();
        drop(sink);
        assert_eq!(committed_parts(dir.path()), ["part-0-00000002"]);
        // Checkpoints 2 and 3 turn out corrupt: the job goes back to 1.
        recover(&first);
        open(dir.path(), 0, 1, by_size(6), 1).unwrap();
        assert_eq!(dir_names(dir.path()), [".rollbacks-0", "part-0-00000001"]);
        assert_eq!(read(dir.path(), "part-0-00000001"), "a\nb\n");
    }

    #[test]
    fn a_part_in_progress_cut_short_changed_or_missing_is_damaged_and_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = open(dir.path(), 0, 1, by_size(100), 0).unwrap();
        sink.write(&batch(&["abc"])).unwrap();
        let first = sink.precommit(1, false).unwrap();
        drop(sink);
        let PendingCommit::InProgress(part) = &first[0] else { panic!("{first:?}") };
        std::fs::write(&part.in_progress, "ab").unwrap();
        for error in [part.check().unwrap_err(), part.commit().unwrap_err()] {
            assert!(error.to_string().contains("damaged: 2 bytes, where the checkpoint recorded 4"), "{error}");
        }
        std::fs::write(&part.in_progress, "abd\n").unwrap();
        for error in [part.check().unwrap_err(), part.commit().unwrap_err()] {
            assert!(error.to_string().contains("its first 4 bytes are not those the checkpoint recorded"), "{error}");
        }
        assert!(!part.to.exists());
        std::fs::remove_file(&part.in_progress).unwrap();
        assert_eq!(part.check().unwrap_err().kind(), std::io::ErrorKind::NotFound, "so the checkpoint is not resumed");
        assert_eq!(part.commit().unwrap_err().kind(), std::io::ErrorKind::NotFound);
        // The whole directory moved: where it is now, only the job file says.
        let moved = PartInProgress { in_progress: dir.path().join("gone/.part-0-00000000.inprogress"), ..part.clone() };
        moved.check().unwrap();
    }

    /// A consumer moved the part the checkpoint's share went into away: a
    /// later part, which starts otherwise, is not taken for it.
    #[test]
    fn a_later_part_that_is_not_the_one_in_progress_is_not_copied_from() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = open(dir.path(), 0, 1, by_size(6), 0).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let first = sink.precommit(1, false).unwrap();
        sink.write(&batch(&["c"])).unwrap();
        sink.precommit(2, false).unwrap()[0].commit_file().unwrap();
        sink.write(&batch(&["d", "e", "f"])).unwrap();
        sink.precommit(3, false).unwrap()[0].commit_file().unwrap();
        drop(sink);
        std::fs::rename(dir.path().join("part-0-00000002"), dir.path().join("collected")).unwrap();
        let PendingCommit::InProgress(part) = &first[0] else { panic!("{first:?}") };
        assert_eq!(part.check().unwrap_err().kind(), std::io::ErrorKind::NotFound);
        assert!(part.commit().is_err() && !part.to.exists(), "part-0-00000003 holds other events");
        std::fs::rename(dir.path().join("collected"), dir.path().join("part-0-00000002")).unwrap();
        part.check().unwrap();
        assert!(part.commit().unwrap());
        assert_eq!(read(dir.path(), "part-0-00000001"), "a\nb\n");
    }

    #[test]
    fn parts_in_progress_of_another_jobs_checkpoints_are_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ours = |lineage| Restored { owner: Some(Owner { lineage, checkpoint_dir: Path::new("/ck/theirs") }), ..Restored::default() };
        let mut theirs = PartFileSink::open(dir.path(), 0, 1, OutputFormat::Value, by_size(1 << 20), &ours("theirs")).unwrap();
        theirs.write(&batch(&["a"])).unwrap();
        theirs.precommit(1, false).unwrap();
        drop(theirs);
        let left = dir_names(dir.path());
        assert_eq!(left, [".owner", ".part-0-00000000.inprogress"]);
        for (who, restored) in [("another job", ours("mine")), ("a job without checkpoints", Restored::default())] {
            let error = PartFileSink::open(dir.path(), 0, 1, OutputFormat::Value, by_size(1 << 20), &restored).err();
            let error = error.unwrap_or_else(|| panic!("{who} is refused")).to_string();
            let named = error.contains("by the job with the checkpoint directory /ck/theirs (LINEAGE theirs)");
            assert!(error.contains("holds parts in progress of another job") && named, "{error}");
            assert_eq!(dir_names(dir.path()), left, "{who} deleted nothing");
        }
        assert!(PartFileSink::open(dir.path(), 0, 1, OutputFormat::Value, by_size(1 << 20), &ours("theirs")).is_ok(), "their own");
        assert_eq!(dir_names(dir.path()), [".owner"], "their own cleaned up");
        std::fs::write(dir.path().join(".part-0-00000000.inprogress"), "x\n").unwrap();
        // An older Weir's mark names the lineage alone.
        std::fs::write(dir.path().join(".owner"), "theirs").unwrap();
        let error = PartFileSink::open(dir.path(), 0, 1, OutputFormat::Value, by_size(1 << 20), &ours("mine")).err();
        assert!(error.unwrap().to_string().contains("whose checkpoint directory's LINEAGE file reads theirs"));
        std::fs::remove_file(dir.path().join(".owner")).unwrap();
        assert!(open(dir.path(), 0, 1, RollingPolicy::default(), 0).is_ok(), "a directory no one marked (an older Weir's) as before");
        // A job without checkpoints takes over a directory whose owner left
        // no part in progress, and its own, left by a failure, stand in no
        // one's way when it runs again.
        std::fs::write(dir.path().join(".owner"), "theirs").unwrap();
        let mut unchecked = open(dir.path(), 0, 1, RollingPolicy::default(), 0).unwrap();
        unchecked.write(&batch(&["b"])).unwrap();
        drop(unchecked);
        assert_eq!(dir_names(dir.path()), [".part-0-00000000.inprogress"], "unmarked");
        assert!(open(dir.path(), 0, 1, RollingPolicy::default(), 0).is_ok(), "its own part in progress");
    }

    #[test]
    fn a_fresh_start_refuses_committed_parts_and_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".part-1.inprogress"), "x\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x\n").unwrap();
        open(dir.path(), 0, 2, RollingPolicy::default(), 0).unwrap();
        std::fs::write(dir.path().join("part-1-00000003"), "x\n").unwrap();
        let error = open(dir.path(), 0, 2, RollingPolicy::default(), 0).err().unwrap().to_string();
        assert!(error.contains("1 committed part file(s), such as part-1-00000003") && error.contains("move"), "{error}");
        std::fs::write(dir.path().join("part-0-final"), "x\n").unwrap();
        let error = open(dir.path(), 1, 2, RollingPolicy::default(), 0).err().unwrap().to_string();
        assert!(error.contains("2 committed part file(s)"), "{error}");
        assert_eq!(dir_names(dir.path()), [".part-1.inprogress", "notes.txt", "part-0-final", "part-1-00000003"]);
    }

    #[test]
    fn a_restore_at_lower_parallelism_cleans_up_after_the_subtasks_gone_and_drops_later_final_parts() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["part-0-00000001", "part-0-final", "part-3-00000001", "part-3-00000002", ".part-3.inprogress", ".part-3-00000002.pending", ".part-3-00000001.inprogress", "part-1-00000002"] {
            std::fs::write(dir.path().join(name), "x\n").unwrap();
        }
        open(dir.path(), 0, 2, RollingPolicy::default(), 1).unwrap();
        assert_eq!(dir_names(dir.path()), [".rollbacks-0", "part-0-00000001", "part-1-00000002", "part-3-00000001"]);
        assert_eq!(parse_part_name("part-12-final"), Some((12, Some("final"))));
        assert_eq!(parse_part_name(".part-12-00000003.pending"), Some((12, None)));
        assert_eq!(parse_part_name(".part-12-00000003.inprogress"), Some((12, None)));
        assert_eq!(parse_part_name("notes.txt"), None);
    }
}
