//! Timers as the operator sees them, and the changes a batch makes to them.

use std::collections::hash_map::Entry;

use weir_key_slab::hash::FastMap;

use crate::__private::bindings::weir::operator::timers::TimerChange;
use crate::__private::bindings::weir::operator::types::TimeDomain as WitDomain;

/// The clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Event time: fires when the watermark reaches the timer.
    EventTime,
    /// Processing time: fires when the wall clock reaches the timer.
    ProcessingTime,
}

impl TimeDomain {
    pub(crate) fn to_wit(self) -> WitDomain {
        match self {
            TimeDomain::EventTime => WitDomain::EventTime,
            TimeDomain::ProcessingTime => WitDomain::ProcessingTime,
        }
    }

    pub(crate) fn from_wit(domain: WitDomain) -> Self {
        match domain {
            WitDomain::EventTime => TimeDomain::EventTime,
            WitDomain::ProcessingTime => TimeDomain::ProcessingTime,
        }
    }
}

/// A timer that fired, for the key it was registered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) timestamp: i64,
    pub(crate) domain: TimeDomain,
}

impl<'a> Timer<'a> {
    /// The key the timer belongs to (its keyed state is the context's).
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// When it was set to fire (ms).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    pub fn domain(&self) -> TimeDomain {
        self.domain
    }
}

/// Timer registrations and deletions of the current call, sent to the host
/// in one piece at its end. The same timer set again within a call is sent
/// once (a window operator sets its window's timer for every event).
#[derive(Debug, Default)]
pub(crate) struct PendingTimers {
    changes: Vec<TimerChange>,
    index: FastMap<(u32, i64, bool), usize>,
}

impl PendingTimers {
    pub fn change(&mut self, slot: u32, timestamp: i64, domain: TimeDomain, delete: bool) {
        let id = (slot, timestamp, domain == TimeDomain::EventTime);
        // One probe of the index, not a lookup and then an insert.
        match self.index.entry(id) {
            Entry::Occupied(at) => self.changes[*at.get()].delete = delete,
            Entry::Vacant(at) => {
                at.insert(self.changes.len());
                self.changes.push(TimerChange { slot, timestamp, domain: domain.to_wit(), delete });
            }
        }
    }

    /// Takes the changes out, leaving none pending.
    pub fn take(&mut self) -> Vec<TimerChange> {
        self.index.clear();
        std::mem::take(&mut self.changes)
    }
}
