//! The names at the top of a checkpoint directory, in one place: the
//! modules that write them take their names from here, and a run that is
//! given a directory without a `LINEAGE` refuses it if it holds anything
//! else ([`written_by_weir`]) — its clean-up deletes what it does not know.
//!
//! ```text
//! CHECKPOINT_DIR/
//!   LINEAGE                    the directory's random id (crate::dirs::lineage)
//!   LOCK                       held by the run that writes here
//!   chk-N/                     checkpoint N: _MANIFEST and its own files
//!   shared/                    state files checkpoints share (incremental)
//!   savepoints/                default home of the job's savepoints
//!   kafka-logs/                Kafka sinks' write-ahead logs
//!   _STARTED_FROM_SAVEPOINT    where the newest run began
//!   job.toml                   a fork's job file
//!   .work/                     the running job's state backends
//!   .rescale/, .rescale-work/  a resume at another parallelism on its way
//! ```

/// The directory's random id.
pub const LINEAGE: &str = "LINEAGE";
/// The lock of the run that writes the directory.
pub const LOCK: &str = "LOCK";
/// What the names of checkpoint directories begin with (`chk-N`).
pub const CHECKPOINT_PREFIX: &str = "chk-";
/// State files that several checkpoints refer to.
pub const SHARED: &str = "shared";
/// Where the job's savepoints go unless told otherwise.
pub const SAVEPOINTS: &str = "savepoints";
/// Kafka sinks' write-ahead logs.
pub const KAFKA_LOGS: &str = "kafka-logs";
/// Where the newest run began, if from a savepoint.
pub const STARTED_FROM_SAVEPOINT: &str = "_STARTED_FROM_SAVEPOINT";
/// A fork's job file.
pub const FORK_JOB_FILE: &str = "job.toml";
/// The running job's state backends' working files.
pub const WORK: &str = ".work";
/// The redistributed copy a resume at another parallelism restores.
pub const RESCALED: &str = ".rescale";
/// The files of [`RESCALED`] on their way.
pub const RESCALE_WORK: &str = ".rescale-work";

/// Whether Weir writes `name` at the top of a checkpoint directory
/// (files on their way, `*.tmpPID`, included).
pub fn written_by_weir(name: &str) -> bool {
    const NAMES: [&str; 10] =
        [LINEAGE, LOCK, SHARED, SAVEPOINTS, KAFKA_LOGS, STARTED_FROM_SAVEPOINT, FORK_JOB_FILE, WORK, RESCALED, RESCALE_WORK];
    NAMES.contains(&name) || name.starts_with(CHECKPOINT_PREFIX) || name.contains(".tmp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weirs_names_are_told_from_a_users_files() {
        for name in ["LINEAGE", "chk-12", "shared", "kafka-logs", ".rescale-work", "LINEAGE.tmp123"] {
            assert!(written_by_weir(name), "{name}");
        }
        for name in ["notes.txt", "input.csv", "chk", "data"] {
            assert!(!written_by_weir(name), "{name}");
        }
    }
}
