//! Incremental snapshots of the in-memory backend: a full snapshot (the
//! base), then files of what changed since the snapshot before.
//!
//! A checkpoint of a large in-memory state used to write all of it every
//! time — at the reference `window` job's P = 2, ~70 MB a second — though
//! most entries had not changed. Now the first snapshot of a backend writes
//! every entry, and each later one only the entries written and the keys
//! deleted since the one before:
//!
//! ```text
//! "WEIRKC01"  then the deleted keys: u32 count, each group u16, state u32,
//!             key (u32 len + bytes); then the written entries, as in an
//!             entries file: group, state, key, value
//! ```
//!
//! Restoring reads the base and applies the change files in order. The
//! files go to `shared/`, since every later checkpoint of the chain refers
//! to them; retention deletes them once no kept checkpoint does. A chain is
//! cut — the next snapshot is full again — when the base and its change
//! files, the next one included, would be more than twice a whole snapshot
//! of the state as it is now (so a restore never reads more than twice the
//! state it restores), when it is [`MAX_CHANGE_FILES`] long, or when a file
//! of it could not be written.
//!
//! The bound is the state's size now, not the base's: a state that grows —
//! windows held while one input's watermark lags behind the others' — adds
//! change files as big as the base or bigger without rewriting what it
//! holds. Measured against the base, such a chain was cut every second or
//! third checkpoint, and each cut wrote the whole, larger state again (at
//! the reference `window` job's P = 2, 2–3 times the bytes that changed).
//!
//! Snapshots are persisted in order, on the checkpoint thread, after they
//! are taken at the barrier. So a snapshot is taken before the files of
//! the one before are known; [`Chain`] records them as they are written,
//! and a change file whose predecessor was not written fails its
//! checkpoint and cuts the chain.

use std::sync::{Arc, Mutex};

use super::file::{FileRef, write_verified};
use super::{BackendHandle, SnapshotTarget, StateError, StateSnapshot};

/// The magic (and version) of a change file.
pub const CHANGES_MAGIC: &[u8; 8] = b"WEIRKC01";

/// The longest chain of change files after a base.
pub const MAX_CHANGE_FILES: usize = 16;

/// The files written so far of one backend's chain.
#[derive(Debug, Default)]
struct ChainFiles {
    /// The base: its sequence number and file.
    base: Option<(u64, FileRef)>,
    /// The change files after the base, in order, with their numbers.
    changes: Vec<(u64, FileRef)>,
    /// A file could not be written: the next snapshot must be full.
    cut: bool,
}

impl ChainFiles {
    fn last(&self) -> Option<u64> {
        self.changes.last().map(|(seq, _)| *seq).or(self.base.as_ref().map(|(seq, _)| *seq))
    }

    fn handle(&self) -> Option<BackendHandle> {
        let (_, entries) = self.base.clone()?;
        Some(BackendHandle::Memory { entries, changes: self.changes.iter().map(|(_, f)| f.clone()).collect() })
    }
}

/// One backend's chain of snapshot files, shared with the snapshots
/// waiting to be written.
#[derive(Debug, Clone)]
pub struct Chain {
    /// Names this backend's files apart from every other's.
    id: String,
    files: Arc<Mutex<ChainFiles>>,
    /// The number of the last snapshot taken (0: none yet).
    taken: u64,
}

impl Default for Chain {
    fn default() -> Self {
        Chain { id: format!("memory-{}", crate::dirs::unique_name()), files: Arc::default(), taken: 0 }
    }
}

impl Chain {
    /// Whether a snapshot has been taken, so that changes since it count.
    pub fn started(&self) -> bool {
        self.taken > 0
    }

    /// Whether the next snapshot may be a change file of about
    /// `change_bytes`, the state now taking about `state_bytes` in a whole
    /// snapshot: the base is written, the chain is not cut and not too
    /// long, and with that file a restore would read at most twice the
    /// state.
    pub fn may_extend(&self, change_bytes: u64, state_bytes: u64) -> bool {
        let files = self.files.lock().expect("chain lock");
        let Some((_, base)) = &files.base else { return false };
        let chained: u64 = base.size + files.changes.iter().map(|(_, f)| f.size).sum::<u64>();
        !files.cut && files.changes.len() < MAX_CHANGE_FILES && chained + change_bytes <= 2 * state_bytes
    }

    /// A snapshot of every entry (serialised in `bytes`, an entries file).
    pub fn full(&mut self, bytes: Vec<u8>) -> Box<dyn StateSnapshot> {
        self.taken += 1;
        Box::new(ChainSnapshot { chain: self.clone(), seq: self.taken, bytes, full: true })
    }

    /// A snapshot of what changed since the last (`bytes`, a change file).
    pub fn changes(&mut self, bytes: Vec<u8>) -> Box<dyn StateSnapshot> {
        self.taken += 1;
        Box::new(ChainSnapshot { chain: self.clone(), seq: self.taken, bytes, full: false })
    }
}

/// A snapshot taken at the barrier, to be written by the checkpoint thread.
struct ChainSnapshot {
    chain: Chain,
    seq: u64,
    bytes: Vec<u8>,
    full: bool,
}

impl StateSnapshot for ChainSnapshot {
    fn persist(self: Box<Self>, target: &SnapshotTarget) -> Result<BackendHandle, StateError> {
        let kind = if self.full { "entries" } else { "changes" };
        let path = format!("shared/{}/{:08}.{kind}", self.chain.id, self.seq);
        let written = write_verified(&target.root, path, &self.bytes);
        let mut files = self.chain.files.lock().expect("chain lock");
        let file = match written {
            Ok(file) => file,
            Err(error) => {
                files.cut = true;
                return Err(error);
            }
        };
        if self.full {
            *files = ChainFiles { base: Some((self.seq, file)), changes: Vec::new(), cut: false };
        } else if files.cut || files.last() != Some(self.seq - 1) {
            files.cut = true;
            return Err(StateError::Incompatible(format!(
                "the in-memory state's snapshot {} was not written, so the changes after it cannot be; \
                 the next checkpoint writes the whole state",
                self.seq - 1
            )));
        } else {
            files.changes.push((self.seq, file));
        }
        Ok(files.handle().expect("the chain has a base"))
    }
}
