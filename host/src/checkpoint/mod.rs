//! Checkpoints: consistent snapshots of a whole running job, drawn by
//! barriers that flow with the records (asynchronous barrier snapshots, as
//! in Flink), and recovery from them.
//!
//! - The [`Coordinator`] (on the job's supervising thread) triggers
//!   checkpoint `n` on an interval by raising [`CheckpointHub::requested`].
//!   Each source subtask, between two polls, records its position and sends
//!   barrier `n` downstream behind the records it has sent.
//! - A subtask with several input channels aligns ([`BarrierAligner`]):
//!   once a channel has delivered barrier `n`, its later messages are held
//!   until every channel has; then the subtask captures its state
//!   synchronously, forwards the barrier and hands the capture to the job's
//!   persister thread, which writes the files and acknowledges.
//! - Sinks pre-commit at the barrier (a transactional sink closes its
//!   pending file) and acknowledge with what to commit.
//! - When every subtask has acknowledged, the coordinator writes the
//!   [`Manifest`] atomically (write, fsync, rename): checkpoint `n` is
//!   complete. Then the sinks' pending output is committed on a thread of
//!   its own ([`CommitQueue`], [`Committer`]: part files renamed, Kafka
//!   epochs written in transactions), and checkpoints
//!   beyond the retention count are deleted ([`CheckpointStorage`]).
//! - Recovery reads the newest checkpoint whose manifest and files all
//!   verify against their checksums, skipping (and logging) corrupt ones.

mod aligner;
mod commit;
mod coordinator;
mod history;
pub mod layout;
mod manifest;
mod savepoint_start;
mod storage;

pub use aligner::{Aligned, BarrierAligner};
pub use coordinator::{
    Ack, CheckpointHub, CheckpointSettings, Coordinator, FINAL_CHECKPOINT, PersistJob, SOURCE_FINISHED, SavepointFailure,
    SavepointOrder,
};
pub use commit::{CommitQueue, Committer, PendingCommit};
pub use history::{CheckpointHistory, KEPT_FIGURES};
pub use manifest::{CheckpointStats, FORMAT_VERSION as MANIFEST_FORMAT, LatestCheckpoint, Manifest, OperatorPlugin, TaskState};
pub use savepoint_start::SavepointStart;
pub use storage::{CheckpointStorage, Recovered, StorageLock};
