//! Host side of the `timers` interface: timer changes for the keys of the
//! current call, applied to the subtask's [`TimerService`] — at most
//! [`super::Limits::max_timers`] of them pending, since the host holds
//! them outside the plugin's memory cap.

use wasmtime::component::HasData;

use super::bindings::weir::operator::timers::{Host, TimerChange};
use super::bindings::weir::operator::types::{StateError, TimeDomain as WitDomain};
use super::state::{BatchKeys, check_slots};
use crate::state::{FiringCall, TimeDomain, TimerService};

/// What the timer host functions see of a plugin instance's store.
pub struct TimersView<'a> {
    pub timers: &'a mut TimerService,
    /// The most timers the subtask may have pending.
    pub limit: usize,
    pub keys: Option<&'a BatchKeys>,
    pub in_call: bool,
    /// Set during an `on-timer` call: notes what it sets.
    pub firing: Option<&'a mut FiringCall>,
}

/// Marker for [`HasData`]: `timers` is implemented on a [`TimersView`].
pub struct TimersAccess;

impl HasData for TimersAccess {
    type Data<'a> = TimersView<'a>;
}

pub fn domain(domain: WitDomain) -> TimeDomain {
    match domain {
        WitDomain::EventTime => TimeDomain::EventTime,
        WitDomain::ProcessingTime => TimeDomain::ProcessingTime,
    }
}

/// A timer the host refused: the subtask already had as many pending as
/// its operator's `timer_limit`. It fails the call (the `update` call
/// traps), as reaching the memory cap does.
#[derive(Debug, thiserror::Error)]
#[error(
    "timer at {timestamp} ({domain:?}) for key `{key}` would be its subtask's pending timer number {}, past the \
     operator's `timer_limit` of {limit} — the host holds timers outside the plugin's memory cap and writes them \
     into every checkpoint: set one per key and window end, not one per event, and delete those no longer needed; \
     or raise `timer_limit` for this operator in the job file (0: no bound)",
    limit + 1
)]
pub struct TimerLimitReached {
    pub limit: usize,
    pub timestamp: i64,
    pub domain: TimeDomain,
    /// The key, escaped and shortened for a message.
    pub key: String,
}

impl Host for TimersView<'_> {
    fn update(&mut self, changes: Vec<TimerChange>) -> wasmtime::Result<Result<(), StateError>> {
        let keys = match (self.in_call, self.keys) {
            (false, _) => return Ok(Err(StateError::NoCurrentKeys)),
            (true, None) => return Ok(Err(StateError::TimerNotKeyed)),
            (true, Some(keys)) => keys,
        };
        if let Err(error) = check_slots(changes.iter().map(|c| c.slot), keys) {
            return Ok(Err(error));
        }
        for change in changes {
            let key = keys.get(change.slot as usize).key;
            let (domain, timestamp) = (domain(change.domain), change.timestamp);
            if change.delete {
                self.timers.delete(domain, timestamp, key);
                continue;
            }
            if self.timers.register(domain, timestamp, key) && self.timers.len() > self.limit {
                self.timers.delete(domain, timestamp, key);
                let key = String::from_utf8_lossy(&key[..key.len().min(40)]).escape_debug().to_string();
                return Err(TimerLimitReached { limit: self.limit, timestamp, domain, key }.into());
            }
            if let Some(firing) = self.firing.as_deref_mut() {
                firing.set(change.slot, domain, timestamp);
            }
        }
        Ok(Ok(()))
    }
}
