//! Kafka: a source whose snapshot state is its partitions' offsets, and a
//! sink that commits one transaction per checkpoint.
//!
//! - [`config`]: the job-file tables and the librdkafka settings made from
//!   them (what Weir manages itself is refused in `properties`).
//! - [`source`]: partitions assigned by Weir (no consumer-group
//!   rebalancing), restored at their recorded offsets at any parallelism;
//!   watermarks per partition; offsets committed to the group after each
//!   completed checkpoint, for monitoring only; its backlog per partition
//!   from the ends its client last fetched ([`lag`]).
//! - [`sink`] and [`commit`]: each epoch between barriers is logged locally,
//!   made durable by the checkpoint, and written to Kafka in one
//!   transaction once the checkpoint completes — idempotently, thanks to a
//!   commit marker that the transaction commits with its records.
//! - [`wal`]: the format of an epoch's log.
//! - [`closing`]: a consumer whose close on drop (leaving its group) cannot
//!   hold a task's thread while the brokers are away.
//! - [`watchdog`]: commits run on threads that are given up when a client
//!   call waits past its timeout, so that they cannot hold a job's end.

mod closing;
mod commit;
mod config;
mod lag;
mod send;
mod sink;
mod source;
mod wal;
mod watchdog;

pub use commit::{ATTEMPT_HEADER, CHECKPOINT_HEADER, CommitError, KafkaCommit, KafkaCommitter};
pub use config::{Delivery, KafkaSinkSpec, KafkaSourceSpec, StartPosition, TimestampSource};
pub use sink::{KafkaSink, LOG_DIR};
pub use source::{KafkaSource, split_id};
