//! How much keyed state an operator subtask holds — Flink's state size
//! figures — for `weir jobs JOB`, `GET /jobs` and `/metrics`.
//!
//! The task's thread measures its backend ([`KeyedStateBackend::size`](super::KeyedStateBackend::size))
//! at most once a second, between calls and at checkpoints, and leaves the
//! figure in a [`StateSizeGauge`] the progress reporter reads from another
//! thread: a state growing without bound (keys never seen again, with no
//! time-to-live) shows there before it fills the machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A backend's entries (a value state's value, a map entry, each counted
/// once) and their bytes: as a full snapshot would write them (the memory
/// backend), or RocksDB's estimates of its live keys and data (with the
/// memtables not yet written to files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSize {
    pub entries: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for StateSize {
    fn add_assign(&mut self, other: StateSize) {
        self.entries += other.entries;
        self.bytes += other.bytes;
    }
}

/// The last [`StateSize`] a subtask measured, shared with the reporter;
/// none before the first measurement (a source or sink has none).
#[derive(Debug, Clone, Default)]
pub struct StateSizeGauge(Arc<Gauge>);

#[derive(Debug, Default)]
struct Gauge {
    measured: AtomicBool,
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl StateSizeGauge {
    pub fn set(&self, size: StateSize) {
        self.0.entries.store(size.entries, Ordering::Relaxed);
        self.0.bytes.store(size.bytes, Ordering::Relaxed);
        self.0.measured.store(true, Ordering::Release);
    }

    /// The last size set. (Its two figures may be of two measurements a
    /// second apart, read while one was set: a figure, not a ledger.)
    pub fn get(&self) -> Option<StateSize> {
        if !self.0.measured.load(Ordering::Acquire) {
            return None;
        }
        Some(StateSize { entries: self.0.entries.load(Ordering::Relaxed), bytes: self.0.bytes.load(Ordering::Relaxed) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_has_no_size_until_one_is_set_and_clones_share_it() {
        let gauge = StateSizeGauge::default();
        assert_eq!(gauge.get(), None);
        gauge.clone().set(StateSize { entries: 3, bytes: 120 });
        assert_eq!(gauge.get(), Some(StateSize { entries: 3, bytes: 120 }));
        let mut total = StateSize { entries: 1, bytes: 10 };
        total += gauge.get().unwrap();
        assert_eq!(total, StateSize { entries: 4, bytes: 130 });
    }
}
