//! Sources and sinks: where a job's events come from and go to.
//!
//! A [`Source`] subtask fills batches until it is exhausted; its position
//! (generator: sequence number; file: byte offset) is what a checkpoint will
//! record so that it can rewind exactly. A [`Sink`] subtask writes batches
//! and is finished once all its inputs have ended.

mod backlog;
mod decimal;
mod file_source;
mod generator;
pub mod kafka;
mod line_sink;
mod pace;
mod part_files;
mod rollbacks;

use std::path::PathBuf;

pub use backlog::{Backlog, PartitionBacklog};
pub use file_source::FileSource;
pub use generator::Generator;
pub use line_sink::{DiscardSink, LineSink};
pub use part_files::{DirectoryLock, PartFileSink, PartInProgress, RollingPolicy, committed_parts, refuse_others_parts_in_progress};

use crate::checkpoint::PendingCommit;
use crate::dataflow::RecordBatch;
use crate::job::{SinkSpec, SourceSpec};

/// A connector failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// The job was cancelled while the connector waited to open.
    #[error("cancelled while opening")]
    Cancelled,
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} holds the committed output of an earlier run ({parts} committed part file(s), such as {example}), \
         and this run starts from the beginning, with no checkpoint to resume from: it would write that output \
         again. Resume the run that wrote it (from its checkpoint directory or a savepoint), or move {path} away \
         to start afresh"
    )]
    CommittedOutput { path: PathBuf, parts: usize, example: String },
    #[error(
        "{path} holds parts in progress of another job ({parts} file(s), such as {example}), written by {owner} \
         — another job, or this job before its checkpoint directory was replaced. That job's checkpoints commit \
         them when it resumes, and this run would delete them: give this job's sink a path of its own; or, if \
         that job will never resume, move those `.part-*.inprogress` files away"
    )]
    OthersPartsInProgress { path: PathBuf, parts: usize, example: String, owner: String },
    #[error(
        "{} is being written by another running job (or another run of this one): two jobs' part files in one \
         directory overwrite each other; give each job's `files` sink a path of its own, or stop the other job",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error(
        "{} is being written by another running job (or another run of this one): two jobs writing one file \
         mix their lines; give each job's `file` sink a path of its own, or stop the other job",
        path.display()
    )]
    FileInUse { path: PathBuf },
    #[error("{path}:{line}: {message}")]
    BadLine { path: PathBuf, line: u64, message: String },
    #[error("{what}: {message}")]
    Kafka { what: String, message: String },
    /// Restored positions that the source as the job file now describes
    /// cannot continue from.
    #[error("{0}")]
    Restore(String),
    #[error("I/O error on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// What a source did when polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// Records were added (possibly none, if it is waiting for more).
    Ready,
    /// The source has no more records, ever.
    Exhausted,
}

/// One subtask of a source.
pub trait Source: Send {
    /// Appends up to `max` records to `batch`.
    fn poll(&mut self, batch: &mut RecordBatch, max: usize) -> Result<Poll, ConnectorError>;
    /// How far each of its splits has been read, as a checkpoint records it.
    fn splits(&self) -> Vec<SourceSplit>;
    /// A source that tracks event time per split (Kafka partitions) says
    /// here what to send downstream after a poll: `Some(signal)` replaces
    /// the job's per-subtask watermark generator. `None`: it does not.
    fn split_watermarks(&mut self) -> Option<Option<crate::dataflow::Signal>> {
        None
    }
    /// The subtask reads again after waiting for watermark alignment; a
    /// source that times its splits' idleness restarts the clocks.
    fn resume(&mut self) {}
    /// Checkpoint `checkpoint`, at whose barrier the source was at
    /// `splits`, is complete.
    fn checkpoint_complete(&mut self, checkpoint: u64, splits: &[SourceSplit]) {
        let _ = (checkpoint, splits);
    }
    /// How much input it has yet to read, where it can tell (see [`Backlog`]).
    fn backlog(&self) -> Option<Backlog> {
        None
    }
}

/// A part of a source's input that one subtask reads, and how far it has
/// been read: a generator's range of sequence numbers, a file, a Kafka
/// partition. Snapshots record the splits of every subtask; a restore hands
/// them out again over the subtasks it has — the same ones at the same
/// parallelism, spread round-robin at another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceSplit {
    /// Identifies the split within its source (a generator range's first
    /// sequence number, a partition number; 0 for a file).
    pub id: u64,
    /// The next record to read (sequence number, byte offset, offset).
    pub next: u64,
    /// Where the split ends, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    /// A digest of what the source was set to produce, where that decides
    /// the records at each position (a generator's keys, mode, seed); 0:
    /// not recorded (other sources, checkpoints of earlier versions).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shape: u64,
}

fn is_zero(shape: &u64) -> bool {
    *shape == 0
}

impl SourceSplit {
    /// Whether its position lies past its end: no source writes that, so a
    /// snapshot holding one was edited by hand.
    pub fn past_its_end(&self) -> bool {
        self.end.is_some_and(|end| self.next > end)
    }
}

/// The splits a restored source subtask reads, out of how many the source has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredSplits {
    pub splits: Vec<SourceSplit>,
    pub of: usize,
    /// The ids of all the source's splits (any subtask's): a source whose
    /// splits can appear later (new Kafka partitions) starts those afresh.
    pub known: Vec<u64>,
    /// The furthest end of the source's splits, if they all end: a bounded
    /// generator's `events` when the snapshot was taken.
    pub last_end: Option<u64>,
}

/// The restored splits of `subtask` of `parallelism`: split `k` of all the
/// source's splits, in id order, goes to subtask `k mod parallelism`.
pub fn assign_splits(mut all: Vec<SourceSplit>, subtask: u32, parallelism: u32) -> RestoredSplits {
    all.sort_by_key(|split| split.id);
    let of = all.len();
    let known = all.iter().map(|split| split.id).collect();
    let ends: Option<Vec<u64>> = all.iter().map(|split| split.end).collect();
    let last_end = ends.and_then(|ends| ends.into_iter().max());
    let splits =
        all.into_iter().enumerate().filter(|(k, _)| *k as u32 % parallelism == subtask).map(|(_, split)| split).collect();
    RestoredSplits { splits, of, known, last_end }
}

/// One subtask of a sink.
pub trait Sink: Send {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError>;
    /// At checkpoint `checkpoint`'s barrier (a savepoint's, with
    /// `savepoint`): makes what was written so far durable and returns what
    /// must be committed once the checkpoint is complete (nothing, for a
    /// sink that is not transactional).
    fn precommit(&mut self, checkpoint: u64, savepoint: bool) -> Result<Vec<PendingCommit>, ConnectorError> {
        let _ = (checkpoint, savepoint);
        self.flush()?;
        Ok(Vec::new())
    }
    /// Writes out buffered output.
    fn flush(&mut self) -> Result<(), ConnectorError>;
    /// Called once all inputs have ended: flush, close, and return what
    /// must be committed of the output since the last barrier. (Earlier
    /// pre-commits of checkpoints that did not complete are the task's to
    /// carry: see `SinkPrecommits` in `dataflow/snapshot.rs`.)
    fn finish(&mut self) -> Result<Vec<PendingCommit>, ConnectorError> {
        self.flush()?;
        Ok(Vec::new())
    }
    /// The job's cancel flag, for a sink that waits on purpose (a `discard`
    /// sink's `rate`), so that a cancel need not wait for it.
    fn watch_cancel(&mut self, cancel: crate::dataflow::Cancel) {
        let _ = cancel;
    }
}

/// Creates subtask `subtask` of `parallelism` for a source: from the start,
/// or reading the `restored` splits from where they were.
pub fn open_source(
    spec: &SourceSpec,
    subtask: u32,
    parallelism: u32,
    restored: Option<RestoredSplits>,
    stop: &crate::dataflow::Cancel,
) -> Result<Box<dyn Source>, ConnectorError> {
    Ok(match spec {
        SourceSpec::File { path, format, rate, .. } => {
            let offset = match restored.as_ref().map(|r| r.splits.as_slice()) {
                None => Some(0),
                Some([]) => None,
                Some(splits) => Some(splits[0].next),
            };
            Box::new(FileSource::open(path, *format, offset)?.with_rate(*rate))
        }
        SourceSpec::Generator { events, mode, keys, rate, seed, events_per_ms, shuffle_ms, speed, .. } => {
            let config = generator::GeneratorConfig {
                events: *events,
                mode: *mode,
                keys: keys.unwrap_or(crate::job::GENERATOR_KEYS),
                rate: *rate,
                seed: *seed,
                events_per_ms: *events_per_ms,
                shuffle_ms: *shuffle_ms,
                speed: *speed,
            };
            match restored {
                Some(restored) => Box::new(Generator::from_splits(config, restored)?),
                None => Box::new(Generator::new(config, subtask, parallelism)),
            }
        }
        SourceSpec::Kafka(spec) => Box::new(kafka::KafkaSource::open(spec, subtask, parallelism, restored, stop)?),
    })
}

/// Where a sink subtask runs: what its connector may need to know.
pub struct SinkPlace<'a> {
    pub job: &'a str,
    pub subtask: u32,
    pub parallelism: u32,
    /// The checkpoint the job resumes from (0 for a fresh start), which a
    /// transactional sink cleans up to.
    pub restored: u64,
    /// When that checkpoint was taken (ms since the epoch; 0 for a fresh start).
    pub restored_at_ms: i64,
    /// The job's checkpoint directory (transactional sinks keep their
    /// pre-committed output there).
    pub checkpoint_dir: &'a std::path::Path,
    /// The lineage of the job's checkpoint directory (none without
    /// checkpoints): which job's output a `files` sink's directory holds.
    pub lineage: Option<String>,
    /// Set when the job is cancelled while it is set up.
    pub stop: &'a crate::dataflow::Cancel,
}

/// Fails if a sink, opened at `place`, would refuse to open: what it
/// checks before it changes anything (a `files` sink's committed output).
pub fn check_sink(spec: &SinkSpec, place: &SinkPlace<'_>) -> Result<(), ConnectorError> {
    match spec {
        SinkSpec::Files { path, .. } => {
            part_files::check_directory(path, &part_files::Restored::of(place))
        }
        _ => Ok(()),
    }
}

/// Takes sink `spec`'s output directory for this run, if it writes one
/// (`files`): held until dropped, refused while another run holds it.
pub fn lock_sink(spec: &SinkSpec) -> Result<Option<DirectoryLock>, ConnectorError> {
    match spec {
        SinkSpec::Files { path, .. } => part_files::lock_directory(path).map(Some),
        SinkSpec::File { path, .. } => line_sink::lock_file(path).map(Some),
        _ => Ok(None),
    }
}

/// Creates a subtask of a sink.
pub fn open_sink(spec: &SinkSpec, place: &SinkPlace<'_>) -> Result<Box<dyn Sink>, ConnectorError> {
    let SinkPlace { subtask, parallelism, .. } = *place;
    Ok(match spec {
        SinkSpec::Stdout { format, .. } => Box::new(LineSink::stdout(*format)),
        SinkSpec::File { path, format, .. } => Box::new(LineSink::file(path, *format, place.restored > 0)?),
        SinkSpec::Files { path, format, roll_interval_ms, roll_size_mb, .. } => {
            let rolling = RollingPolicy::from_settings(*roll_interval_ms, *roll_size_mb);
            let restored = part_files::Restored::of(place);
            Box::new(PartFileSink::open(path, subtask, parallelism, *format, rolling, &restored)?)
        }
        SinkSpec::Discard { rate, .. } => Box::new(DiscardSink::new(*rate)),
        SinkSpec::Kafka(spec) => Box::new(kafka::KafkaSink::open(spec, place)?),
    })
}

/// The names of the files in `dir`, sorted (for tests of sinks).
#[cfg(test)]
pub(crate) fn dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}
