//! Savepoints: self-contained, backend-independent snapshots of a job that
//! outlive it — to upgrade its code, fork it, rescale it or go back in time.
//!
//! A savepoint is made from a completed checkpoint ([`write_savepoint`]):
//! every operator subtask's state is read back from the checkpoint, whatever
//! backend wrote it, and rewritten in one canonical format — entries sorted
//! by key group, with an index from key group to file offset, so that a
//! restore at any parallelism reads exactly the key groups each new subtask
//! owns ([`Savepoint::operator_state`]). Timers are stored as keyed entries
//! too (they belong to keys), and broadcast state once per operator. The
//! manifest names every operator by uid, with its plugin's digest and its
//! state descriptors, the sources' split positions, and the job file the
//! savepoint came from. Nothing refers to the checkpoint directory: a
//! savepoint can be copied, archived and restored anywhere.
//!
//! The format is specified in `docs/savepoints.md`.

mod format;
mod read;
mod write;

use std::path::PathBuf;

pub use format::{
    FORMAT_VERSION, JobDefinition, KeyGroupIndex, KeyedFile, MANIFEST_FILE, OperatorSnapshot, SavepointManifest,
    SourceSnapshot, StateDescriptor, StateKind,
};
pub use read::{RestoreCheck, Savepoint, SavepointEntry};
pub use write::{JobDescription, NodeDescription, interrupted, prepare_savepoint_dir, write_savepoint};

/// A savepoint cannot be written, read or used.
#[derive(Debug, thiserror::Error)]
pub enum SavepointError {
    #[error("{path} is not a Weir savepoint: {reason}")]
    NotASavepoint { path: PathBuf, reason: String },
    #[error("savepoint {path}: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: crate::state::StateError,
    },
    /// The savepoint does not fit the job it is restored into.
    #[error("{0}")]
    Mismatch(String),
    /// The directory cannot take this savepoint: it is not new or empty,
    /// or another savepoint is being written there.
    #[error("cannot write savepoint {path}: {reason}")]
    Refused { path: PathBuf, reason: String },
    #[error("cannot write savepoint {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
