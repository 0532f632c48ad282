//! Timers as the operator sees them, and the changes a batch makes to them.

use crate::__private::bindings::weir::operator::timers::TimerChange;
use crate::__private::bindings::weir::operator::types::TimeDomain as WitDomain;

/// The clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Event time: fires when the watermark reaches the timer.
    EventTime,
    /// Processing time: fires once the wall clock has passed the timer (in
    /// the millisecond after it).
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
/// in one piece at its end, in the order they were made (the host applies
/// them in that order).
///
/// A timer set again as its key's latest change is not sent twice: a
/// window operator sets its window's timer when the window opens, others
/// may set the same timer for every event of a key. Only the key's latest
/// change is compared, by the key's slot — a few instructions, where a
/// hash map of every change of the call cost ~200 per change. A timer set
/// again after one of another time is sent again, which changes nothing.
#[derive(Debug, Default)]
pub(crate) struct PendingTimers {
    changes: Vec<TimerChange>,
    /// By slot: 1 + the index in `changes` of the slot's latest change, 0
    /// for none.
    latest: Vec<u32>,
}

/// Slots beyond it are not indexed (the host numbers a call's keys from 0,
/// so no call has as many; a larger slot is refused by the host).
const INDEXED_SLOTS: usize = 1 << 20;

impl PendingTimers {
    pub fn change(&mut self, slot: u32, timestamp: i64, domain: TimeDomain, delete: bool) {
        let domain = domain.to_wit();
        let index = slot as usize;
        if index < INDEXED_SLOTS {
            if index >= self.latest.len() {
                self.latest.resize(index + 1, 0);
            }
            if let Some(at) = self.latest[index].checked_sub(1)
                && let Some(latest) = self.changes.get_mut(at as usize)
                && latest.timestamp == timestamp
                && latest.domain == domain
            {
                latest.delete = delete;
                return;
            }
            self.latest[index] = self.changes.len() as u32 + 1;
        }
        self.changes.push(TimerChange { slot, timestamp, domain, delete });
    }

    /// Takes the changes out, leaving none pending.
    pub fn take(&mut self) -> Vec<TimerChange> {
        for change in &self.changes {
            if let Some(latest) = self.latest.get_mut(change.slot as usize) {
                *latest = 0;
            }
        }
        std::mem::take(&mut self.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(changes: &[TimerChange]) -> Vec<(u32, i64, bool)> {
        changes.iter().map(|c| (c.slot, c.timestamp, c.delete)).collect()
    }

    /// What the host applies, in order, ends as the changes made: a timer
    /// set again is sent once, and a deletion after it replaces it.
    #[test]
    fn a_timer_set_again_is_sent_once_with_its_last_change() {
        let mut pending = PendingTimers::default();
        for _ in 0..3 {
            pending.change(0, 999, TimeDomain::EventTime, false);
        }
        pending.change(1, 999, TimeDomain::EventTime, false);
        pending.change(1, 999, TimeDomain::EventTime, true);
        pending.change(0, 999, TimeDomain::ProcessingTime, false);
        assert_eq!(sent(&pending.take()), [(0, 999, false), (1, 999, true), (0, 999, false)]);
        assert!(pending.take().is_empty(), "taken: none pending");
        pending.change(1, 999, TimeDomain::EventTime, false);
        assert_eq!(sent(&pending.take()), [(1, 999, false)], "the next call starts afresh");
    }

    /// Changes of other times in between are sent in order, so the host's
    /// timers end as the operator left them.
    #[test]
    fn changes_keep_their_order() {
        let mut pending = PendingTimers::default();
        pending.change(0, 1, TimeDomain::EventTime, false);
        pending.change(0, 2, TimeDomain::EventTime, false);
        pending.change(0, 1, TimeDomain::EventTime, true);
        pending.change(u32::MAX, 5, TimeDomain::EventTime, false);
        assert_eq!(sent(&pending.take()), [(0, 1, false), (0, 2, false), (0, 1, true), (u32::MAX, 5, false)]);
    }
}
