//! The timer service of an operator subtask: timers per key, ordered by
//! time, at most one per (key, timestamp, domain).

use std::collections::BTreeSet;

/// A clock timers follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    EventTime,
    ProcessingTime,
}

/// A timer that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredTimer {
    pub key: Vec<u8>,
    pub timestamp: i64,
    pub domain: TimeDomain,
}

/// Registered timers of one operator subtask.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimerService {
    event_time: BTreeSet<(i64, Vec<u8>)>,
    processing_time: BTreeSet<(i64, Vec<u8>)>,
}

impl TimerService {
    fn set(&mut self, domain: TimeDomain) -> &mut BTreeSet<(i64, Vec<u8>)> {
        match domain {
            TimeDomain::EventTime => &mut self.event_time,
            TimeDomain::ProcessingTime => &mut self.processing_time,
        }
    }

    /// Registers a timer; registering an existing one changes nothing.
    pub fn register(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        self.set(domain).insert((timestamp, key.to_vec()));
    }

    pub fn delete(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        self.set(domain).remove(&(timestamp, key.to_vec()));
    }

    /// Removes and returns, in timestamp order, up to `max` timers of
    /// `domain` due at `time` (timestamp ≤ time).
    pub fn pop_due(&mut self, domain: TimeDomain, time: i64, max: usize) -> Vec<FiredTimer> {
        let set = self.set(domain);
        let mut fired = Vec::new();
        while fired.len() < max {
            match set.first() {
                Some((timestamp, _)) if *timestamp <= time => {
                    let (timestamp, key) = set.pop_first().expect("checked non-empty");
                    fired.push(FiredTimer { key, timestamp, domain });
                }
                _ => break,
            }
        }
        fired
    }

    /// Every registered timer: event time first, each domain in time order.
    pub fn all(&self) -> impl Iterator<Item = (TimeDomain, i64, &[u8])> {
        let event = self.event_time.iter().map(|(t, k)| (TimeDomain::EventTime, *t, k.as_slice()));
        let processing = self.processing_time.iter().map(|(t, k)| (TimeDomain::ProcessingTime, *t, k.as_slice()));
        event.chain(processing)
    }

    /// The earliest processing-time timer, if any.
    pub fn next_processing_time(&self) -> Option<i64> {
        self.processing_time.first().map(|(t, _)| *t)
    }

    pub fn len(&self) -> usize {
        self.event_time.len() + self.processing_time.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_order_once_per_key_and_time() {
        let mut timers = TimerService::default();
        timers.register(TimeDomain::EventTime, 20, b"a");
        timers.register(TimeDomain::EventTime, 10, b"b");
        timers.register(TimeDomain::EventTime, 10, b"b");
        timers.register(TimeDomain::EventTime, 30, b"a");
        timers.register(TimeDomain::ProcessingTime, 5, b"a");
        timers.delete(TimeDomain::EventTime, 30, b"a");
        assert_eq!(timers.len(), 3);
        let fired = timers.pop_due(TimeDomain::EventTime, 25, 10);
        let order: Vec<(i64, &[u8])> = fired.iter().map(|t| (t.timestamp, t.key.as_slice())).collect();
        assert_eq!(order, vec![(10, &b"b"[..]), (20, &b"a"[..])]);
        assert!(timers.pop_due(TimeDomain::EventTime, 1000, 10).is_empty());
        assert_eq!(timers.next_processing_time(), Some(5));
    }
}
