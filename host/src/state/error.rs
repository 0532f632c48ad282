//! Errors of state backends and snapshot files.

use std::path::PathBuf;

/// A state backend or snapshot file failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("RocksDB: {0}")]
    RocksDb(#[from] ::rocksdb::Error),
    /// A snapshot file does not match the checksum or size its manifest
    /// recorded, or is not in the expected format.
    #[error("{path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{0}")]
    Incompatible(String),
}

impl StateError {
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StateError {
        let path = path.into();
        move |source| StateError::Io { path, source }
    }
}
