//! Host side of the `timers` interface: timer changes for the keys of the
//! current call, applied to the subtask's [`TimerService`].

use wasmtime::component::HasData;

use super::bindings::weir::operator::timers::{Host, TimerChange};
use super::bindings::weir::operator::types::{StateError, TimeDomain as WitDomain};
use super::state::{BatchKeys, check_slots};
use crate::state::{FiringCall, TimeDomain, TimerService};

/// What the timer host functions see of a plugin instance's store.
pub struct TimersView<'a> {
    pub timers: &'a mut TimerService,
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

impl Host for TimersView<'_> {
    fn update(&mut self, changes: Vec<TimerChange>) -> Result<(), StateError> {
        let keys = match (self.in_call, self.keys) {
            (false, _) => return Err(StateError::NoCurrentKeys),
            (true, None) => return Err(StateError::TimerNotKeyed),
            (true, Some(keys)) => keys,
        };
        check_slots(changes.iter().map(|c| c.slot), keys)?;
        for change in changes {
            let key = keys.get(change.slot as usize).key;
            if change.delete {
                self.timers.delete(domain(change.domain), change.timestamp, key);
            } else {
                if let Some(firing) = self.firing.as_deref_mut() {
                    firing.set(change.slot, domain(change.domain), change.timestamp);
                }
                self.timers.register(domain(change.domain), change.timestamp, key);
            }
        }
        Ok(())
    }
}
