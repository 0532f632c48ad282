//! The dataflow runtime: a job graph run as threads joined by bounded
//! channels.
//!
//! Every node of the [`JobGraph`](crate::job::JobGraph) runs as
//! `parallelism` subtasks, each on its own thread — but for operators and
//! sinks fed by a forward edge from a node they alone consume, which are
//! chained into their upstream's thread. A subtask's inbox is a bounded
//! channel of [`RecordBatch`]es, so a slow consumer blocks its producers:
//! backpressure is the channels filling up, and memory stays bounded by
//! their capacity. Producers held back wake when the inbox has drained to
//! half, not at every batch taken (see `inbox`). Edges are forward (subtask i → i), rebalance
//! (whole batches round-robin) or key-by (each record to the subtask owning
//! its key group, re-batched per target — its keys hashed and numbered on
//! the way, see [`KeyNumbering`] — and flushed when a batch is full or the
//! producer is about to wait for input).
//!
//! Batches end with an end-of-stream marker per producer; a subtask finishes
//! once every producer feeding it has ended. A failing subtask cancels the
//! whole job, and the error names the node and its uid.
//!
//! Checkpoint barriers travel in the same channels as records (see
//! [`crate::checkpoint`]): a source sends barrier `n` when the coordinator
//! asks, every subtask aligns its inputs on it, snapshots and passes it on.

mod alignment;
mod batch;
mod builder;
mod channel;
mod cpu;
mod executor;
mod figures;
mod inbox;
mod key_numbering;
mod native;
mod operator;
mod recovery;
mod rescale;
mod resume_check;
mod sink;
mod snapshot;
mod state_check;
mod task;
mod time;
mod upgrades;

pub use alignment::{AlignedSource, AlignmentGroup, Gate};
pub use channel::{Cancel, Envelope, Message};
pub use cpu::{MachineTime, machine_time, process_time};
pub use time::{InputClock, Signal, SplitClock, WatermarkSettings};
pub use batch::{KeyNumbered, NO_TIMESTAMP, Record, RecordBatch};
pub use key_numbering::KeyNumbering;
pub use native::{NATIVE_PREFIX, native_name, native_operator};
pub use operator::{Emitted, OperatorLogic};
pub use builder::instance_config;
pub use state_check::{StateCheckError, WrittenBy, changed_plugins, check_state};
pub use upgrades::{CarriedUpgrade, carry_upgrades};
pub use resume_check::check_fits;
pub use executor::{
    JobCommand, JobSummary, Progress, Restarts, Restore, Role, RunError, RunOptions, RunningJob, TaskSummary, panic_message,
    run_job, run_job_with, start_job,
};
pub use recovery::{commit_newest_checkpoint, refuse_taking_checkpoint_dir, savepoint_to_restore};

/// Records per batch: sources fill batches of this size and key-by edges
/// flush per-target batches when they reach it. A plugin call's fixed costs
/// (the call, the keys' lookup, write-back) are per batch, and a key seen
/// several times in a batch is looked up once: 8192 ran `bench` count and
/// window 5–15 % faster than 4096 (docs/performance-log.md, session 16).
pub const BATCH_SIZE: usize = 8192;
/// Bytes of keys and values per batch, at which sources and key-by edges
/// cut a batch before [`BATCH_SIZE`] records: a plugin is handed its input
/// batch whole, in its own memory, and 8 192 records of 2 MiB each failed a
/// word count under its 256 MiB cap (found by the sandbox audit), while
/// lines of 62 MiB overflowed a batch's 32-bit offsets. One record larger
/// than this still goes, alone in its batch.
pub const BATCH_BYTES: usize = 4 << 20;
/// Batches a subtask's inbox holds before its producers block.
pub const CHANNEL_CAPACITY: usize = 8;
