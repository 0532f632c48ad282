//! State whose values expire: Flink's state time-to-live.
//!
//! A plugin opens a state with a time-to-live (`open-expiring`); the
//! registry names it apart ([`TTL_PREFIX`]), so a snapshot says which
//! states expire without any other record, and every stored value of such
//! a state ends with the time it expires at — processing time, ms since the
//! epoch, 8 bytes little-endian ([`with_expiry`]). The time is absolute, so
//! it holds across restores and rescales, and the backends can remove
//! expired values without knowing any state's duration:
//!
//! - reads leave out expired values (`plugin::state`), so what a plugin
//!   sees never depends on when clean-up ran;
//! - before each checkpoint, and after a call when none has swept for a
//!   second (a job without checkpoints), the memory backend removes those
//!   it finds in a bounded part of its tables, sweeping on from there the
//!   next time (and so they leave the checkpoints);
//!   RocksDB removes them as it compacts, by a compaction filter that knows
//!   which states expire ([`ExpiringStates`]) — as Flink's RocksDB backend
//!   does;
//! - a savepoint leaves them out.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{MAX_STATES, StateId};

/// The registry names a state with a time-to-live with this prefix before
/// its own (and before [`super::MAP_PREFIX`] for a map state).
pub const TTL_PREFIX: &str = "ttl:";

/// How many bytes the expiry adds to a stored value.
const EXPIRY_BYTES: usize = 8;

/// `value` followed by its expiry, in `buffer`.
pub fn with_expiry<'b>(value: &[u8], expires_at: i64, buffer: &'b mut Vec<u8>) -> &'b [u8] {
    buffer.clear();
    buffer.extend_from_slice(value);
    buffer.extend_from_slice(&expires_at.to_le_bytes());
    buffer
}

/// A stored value of an expiring state split into the plugin's value and
/// the time it expires at; `None` if it is too short to hold one.
pub fn split_expiry(stored: &[u8]) -> Option<(&[u8], i64)> {
    let at = stored.len().checked_sub(EXPIRY_BYTES)?;
    let (value, expiry) = stored.split_at(at);
    Some((value, i64::from_le_bytes(expiry.try_into().ok()?)))
}

/// Whether a stored value of an expiring state has expired at `now`. A
/// value too short to carry an expiry is not ours to judge: it stays (and
/// a read reports it).
pub fn expired(stored: &[u8], now: i64) -> bool {
    split_expiry(stored).is_some_and(|(_, expires_at)| expires_at <= now)
}

/// The time a value written at `now` with a time-to-live of `millis`
/// expires at.
pub fn expiry_after(now: i64, millis: u64) -> i64 {
    now.saturating_add(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// Which states of a backend expire, shared with a compaction filter that
/// runs on RocksDB's threads: a bit per possible state id.
#[derive(Debug)]
pub struct ExpiringStates {
    bits: [AtomicU64; MAX_STATES / 64],
}

impl Default for ExpiringStates {
    fn default() -> Self {
        ExpiringStates { bits: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

impl ExpiringStates {
    /// Notes that `state` expires.
    pub fn insert(&self, state: StateId) {
        if let Some(word) = self.bits.get(state.0 as usize / 64) {
            word.fetch_or(1 << (state.0 % 64), Ordering::Relaxed);
        }
    }

    pub fn contains(&self, state: StateId) -> bool {
        self.bits.get(state.0 as usize / 64).is_some_and(|word| word.load(Ordering::Relaxed) & (1 << (state.0 % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_rides_at_the_end_of_the_value() {
        let mut buffer = Vec::new();
        let stored = with_expiry(b"{\"n\":1}", 1_000, &mut buffer).to_vec();
        assert_eq!(split_expiry(&stored), Some((&b"{\"n\":1}"[..], 1_000)));
        assert!(!expired(&stored, 999) && expired(&stored, 1_000));
        assert_eq!(split_expiry(b"short"), None);
        assert!(!expired(b"short", i64::MAX), "not ours to judge");
        assert_eq!(expiry_after(i64::MAX - 1, u64::MAX), i64::MAX, "saturates");
    }

    #[test]
    fn expiring_states_are_remembered_by_id() {
        let expiring = ExpiringStates::default();
        expiring.insert(StateId(3));
        expiring.insert(StateId(4095));
        expiring.insert(StateId(5000));
        assert!(expiring.contains(StateId(3)) && expiring.contains(StateId(4095)));
        assert!(!expiring.contains(StateId(2)) && !expiring.contains(StateId(5000)));
    }
}
