//! The timer service of an operator subtask: timers per key, ordered by
//! time, at most one per (key, timestamp, domain).
//!
//! Timers are grouped by timestamp. A window operator registers one timer
//! per key and window, and every key's window ends at the same time (the
//! reference `window` job: 1 000 keys, one end a second), so the keys of a
//! timestamp sit in one hash set (a timestamp of one key — a per-key
//! timeout — holds it alone): registering is a hash lookup, where a
//! sorted set of (timestamp, key) pairs searched through every timer and
//! compared keys whenever timestamps tied. A timestamp's keys are sorted
//! only when it fires, so timers fire — and savepoints list them — in
//! (timestamp, key) order all the same; a checkpoint lists them as they
//! lie ([`TimerService::unordered`]).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use hashbrown::HashSet;
use rustc_hash::FxBuildHasher;

use super::TimerKey;

/// A timestamp's keys, found by hash.
type KeySet = HashSet<TimerKey, FxBuildHasher>;

/// The latest time of the processing-time timers due when the clock reads
/// `now` (ms): those set for a millisecond that has passed. A timer fires
/// strictly after its time, as in Flink: an event processed in the very
/// millisecond a timer was set for may still be added to what the timer
/// will emit — a window of the machine's clock ending after it fires once,
/// where a timer fired in that millisecond let such an event open the
/// window again, to fire a second time with the rest of its events.
pub fn processing_timers_due_at(now: i64) -> i64 {
    now.saturating_sub(1)
}

/// Processing time: milliseconds since the Unix epoch, by the wall clock.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A clock timers follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    EventTime,
    ProcessingTime,
}

/// A timer that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredTimer {
    pub key: TimerKey,
    pub timestamp: i64,
    pub domain: TimeDomain,
}

/// Registered timers of one operator subtask.
#[derive(Debug, Default, Clone)]
pub struct TimerService {
    event_time: Timeline,
    processing_time: Timeline,
}

impl TimerService {
    fn timeline(&mut self, domain: TimeDomain) -> &mut Timeline {
        match domain {
            TimeDomain::EventTime => &mut self.event_time,
            TimeDomain::ProcessingTime => &mut self.processing_time,
        }
    }

    /// Registers a timer; registering an existing one changes nothing.
    /// Returns whether the timer is new.
    pub fn register(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) -> bool {
        self.timeline(domain).register(timestamp, key)
    }

    pub fn delete(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        self.timeline(domain).delete(timestamp, key);
    }

    /// Removes and returns, in (timestamp, key) order, up to `max` timers
    /// of `domain` due at `time` (timestamp ≤ time).
    pub fn pop_due(&mut self, domain: TimeDomain, time: i64, max: usize) -> Vec<FiredTimer> {
        self.timeline(domain).pop_due(domain, time, max)
    }

    /// Every registered timer: event time first, each domain in
    /// (timestamp, key) order.
    pub fn all(&self) -> impl Iterator<Item = (TimeDomain, i64, &[u8])> {
        self.in_both_domains(Timeline::all)
    }

    /// Every timer, in no particular order: what a checkpoint records
    /// (its timers are registered again on restore, in any order), without
    /// sorting every timestamp's keys as [`Self::all`] does.
    pub fn unordered(&self) -> impl Iterator<Item = (TimeDomain, i64, &[u8])> {
        self.in_both_domains(Timeline::unordered)
    }

    /// What `list` gives of each domain's timeline, event time first.
    fn in_both_domains<'a, I: Iterator<Item = (i64, &'a [u8])>>(
        &'a self,
        list: impl Fn(&'a Timeline) -> I,
    ) -> impl Iterator<Item = (TimeDomain, i64, &'a [u8])> {
        let event = list(&self.event_time).map(|(t, k)| (TimeDomain::EventTime, t, k));
        let processing = list(&self.processing_time).map(|(t, k)| (TimeDomain::ProcessingTime, t, k));
        event.chain(processing)
    }

    /// When the earliest processing-time timer fires, if any: once the
    /// clock has passed its time (see [`processing_timers_due_at`]).
    pub fn next_processing_fire(&self) -> Option<i64> {
        self.processing_time.due.first_key_value().map(|(t, _)| t.saturating_add(1))
    }

    pub fn len(&self) -> usize {
        self.event_time.len + self.processing_time.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Two services are equal when they hold the same timers, however far
/// their keys are along in firing.
impl PartialEq for TimerService {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.all().eq(other.all())
    }
}

impl Eq for TimerService {}

/// The timers of one domain, by timestamp. No timestamp has an empty set.
#[derive(Debug, Default, Clone)]
struct Timeline {
    due: BTreeMap<i64, Keys>,
    len: usize,
    /// The emptied set of the last timestamp that fired, kept for the next
    /// timestamp to get a second key: it has room for as many keys, so it
    /// need not grow.
    spare: KeySet,
}

impl Timeline {
    fn register(&mut self, timestamp: i64, key: &[u8]) -> bool {
        let added = match self.due.entry(timestamp) {
            Entry::Vacant(vacant) => {
                vacant.insert(Keys::One(key.into()));
                true
            }
            Entry::Occupied(mut keys) => keys.get_mut().insert(key, &mut self.spare),
        };
        self.len += usize::from(added);
        added
    }

    fn delete(&mut self, timestamp: i64, key: &[u8]) {
        let Some(keys) = self.due.get_mut(&timestamp) else { return };
        if keys.remove(key) {
            self.len -= 1;
            if keys.is_empty() {
                self.due.remove(&timestamp);
            }
        }
    }

    /// Up to `max` due timers in (timestamp, key) order, at most one per
    /// key: a key's next timer waits for the next batch, so that what the
    /// plugin does to its key's timers while one fires — deleting the next,
    /// or setting it again — holds for it, as when Flink fires timers one by
    /// one (with both in one batch, the deleted one fired all the same, and
    /// the one set again fired twice).
    fn pop_due(&mut self, domain: TimeDomain, time: i64, max: usize) -> Vec<FiredTimer> {
        let mut fired: Vec<FiredTimer> = Vec::new();
        // The keys fired at the batch's earlier timestamps (a timestamp's
        // own keys are distinct): built only for a batch of several.
        let mut earlier = KeySet::default();
        'timestamps: while fired.len() < max {
            let Some(mut first) = self.due.first_entry() else { break };
            let timestamp = *first.key();
            if timestamp > time {
                break;
            }
            if let Some(previous) = fired.last().map(|t| t.timestamp) {
                earlier.extend(fired.iter().rev().take_while(|t| t.timestamp == previous).map(|t| t.key.clone()));
            }
            let firing = first.get_mut().firing(&mut self.spare);
            while fired.len() < max
                && let Some(key) = firing.last()
            {
                if earlier.contains(key) {
                    break 'timestamps;
                }
                let key = firing.pop().expect("just looked at");
                fired.push(FiredTimer { key, timestamp, domain });
            }
            if firing.is_empty() {
                first.remove();
            }
        }
        self.len -= fired.len();
        fired
    }

    fn all(&self) -> impl Iterator<Item = (i64, &[u8])> {
        self.due.iter().flat_map(|(timestamp, keys)| keys.ascending().into_iter().map(move |key| (*timestamp, key)))
    }

    fn unordered(&self) -> impl Iterator<Item = (i64, &[u8])> {
        self.due.iter().flat_map(|(timestamp, keys)| keys.iter().map(move |key| (*timestamp, key)))
    }
}

/// `keys` sorted by their bytes: by their first eight bytes as a number
/// ([`order_prefix`]), and by bytes only where those tie — without a
/// `memcmp` call per comparison (sorting a window's 1 000 keys that way
/// took ~500 instructions per key). Both firing and snapshots sort a
/// timestamp's keys.
fn in_byte_order<K: AsRef<[u8]>>(keys: impl Iterator<Item = K>) -> Vec<K> {
    let mut by_prefix: Vec<(u64, K)> = keys.map(|key| (order_prefix(key.as_ref()), key)).collect();
    by_prefix.sort_unstable_by(|(a_prefix, a), (b_prefix, b)| a_prefix.cmp(b_prefix).then_with(|| a.as_ref().cmp(b.as_ref())));
    by_prefix.into_iter().map(|(_, key)| key).collect()
}

/// A number that orders keys as their bytes do, except between keys whose
/// first eight bytes are the same: those bytes, zero-padded, big-endian.
/// (Where a key is shorter, the padding is below any byte of a longer key
/// that goes on from there — which sorts after it by bytes too — or ties.)
fn order_prefix(key: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    let n = key.len().min(8);
    first[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(first)
}

/// The keys with a timer at one timestamp.
#[derive(Debug, Clone)]
enum Keys {
    /// One key, not firing yet: a timer per key at a time of its own (a
    /// timeout after the key's last event) costs no hash set (a host with
    /// a million such timers peaked at 213 MiB, where it took 320 with a
    /// set for each).
    One(TimerKey),
    /// Not firing yet: in no order.
    Waiting(KeySet),
    /// Firing: sorted in descending order, the next to fire last.
    Firing(Vec<TimerKey>),
}

impl Keys {
    /// Adds `key`; returns whether it was not there. A second key takes
    /// `spare` for the set of them, if it has room.
    fn insert(&mut self, key: &[u8], spare: &mut KeySet) -> bool {
        match self {
            Keys::One(held) if held.as_slice() == key => false,
            Keys::One(held) => {
                let mut set = std::mem::take(spare);
                set.insert(std::mem::take(held));
                set.insert(key.into());
                *self = Keys::Waiting(set);
                true
            }
            Keys::Waiting(set) => {
                // One probe; the key is copied only if it is new.
                let before = set.len();
                set.get_or_insert_with(key, |key| TimerKey::from(key));
                set.len() > before
            }
            Keys::Firing(sorted) => match sorted.binary_search_by(|held| key.cmp(held.as_slice())) {
                Ok(_) => false,
                Err(at) => {
                    sorted.insert(at, key.into());
                    true
                }
            },
        }
    }

    /// Removes `key`; returns whether it was there.
    fn remove(&mut self, key: &[u8]) -> bool {
        match self {
            Keys::One(held) if held.as_slice() == key => {
                *self = Keys::Waiting(KeySet::default());
                true
            }
            Keys::One(_) => false,
            Keys::Waiting(set) => set.remove(key),
            Keys::Firing(sorted) => match sorted.binary_search_by(|held| key.cmp(held.as_slice())) {
                Ok(at) => {
                    sorted.remove(at);
                    true
                }
                Err(_) => false,
            },
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Keys::One(_) => false,
            Keys::Waiting(set) => set.is_empty(),
            Keys::Firing(sorted) => sorted.is_empty(),
        }
    }

    /// The keys sorted for firing (sorting them the first time, and
    /// leaving their emptied set in `spare` if it has none).
    fn firing(&mut self, spare: &mut KeySet) -> &mut Vec<TimerKey> {
        if let Keys::One(key) = self {
            *self = Keys::Firing(vec![std::mem::take(key)]);
        }
        if let Keys::Waiting(set) = self {
            let mut sorted = in_byte_order(set.drain());
            sorted.reverse(); // The next to fire last, where `pop` takes it.
            if spare.capacity() < set.capacity() {
                *spare = std::mem::take(set);
            }
            *self = Keys::Firing(sorted);
        }
        match self {
            Keys::Firing(sorted) => sorted,
            Keys::One(_) | Keys::Waiting(_) => unreachable!("just sorted"),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &[u8]> + '_> {
        match self {
            Keys::One(key) => Box::new(std::iter::once(key.as_slice())),
            Keys::Waiting(set) => Box::new(set.iter().map(TimerKey::as_slice)),
            Keys::Firing(sorted) => Box::new(sorted.iter().map(TimerKey::as_slice)),
        }
    }

    fn ascending(&self) -> Vec<&[u8]> {
        match self {
            Keys::One(key) => vec![key.as_slice()],
            Keys::Waiting(set) => in_byte_order(set.iter().map(TimerKey::as_slice)),
            // Already sorted, in descending order.
            Keys::Firing(sorted) => sorted.iter().rev().map(TimerKey::as_slice).collect(),
        }
    }
}

/// The timers one `on-timer` call fires, by the slot of their key (one per
/// key), and what the call set while they fired: what a [`FiringBudget`]
/// needs.
#[derive(Debug)]
pub struct FiringCall {
    domain: TimeDomain,
    times: Vec<i64>,
    /// Timers set in the domain firing.
    set: u64,
    /// Of those, timers set for no later than their key's timer firing.
    stalled: u64,
}

impl FiringCall {
    /// `fired`, whose keys have the slots `slots`.
    pub fn new(fired: &[FiredTimer], slots: &[u32]) -> Self {
        let mut times = vec![i64::MIN; slots.iter().map(|&s| s as usize + 1).max().unwrap_or(0)];
        for (timer, &slot) in fired.iter().zip(slots) {
            times[slot as usize] = times[slot as usize].max(timer.timestamp);
        }
        let domain = fired.first().map_or(TimeDomain::EventTime, |t| t.domain);
        FiringCall { domain, times, set: 0, stalled: 0 }
    }

    /// The call set a timer for the key of `slot`.
    pub fn set(&mut self, slot: u32, domain: TimeDomain, timestamp: i64) {
        if domain == self.domain {
            self.set += 1;
            if self.times.get(slot as usize).is_some_and(|&firing| timestamp <= firing) {
                self.stalled += 1;
            }
        }
    }
}

/// How many timers the `on-timer` calls of one advance of time (to `time`)
/// may set for times that fire in it without making progress: up to
/// [`FiringBudget::SET_WHILE_FIRING`]. A timer set in `on_timer` for a time
/// already reached fires at once, in the same advance (as in Flink), so a
/// plugin that keeps setting one for the time firing (or earlier) would
/// never let the advance end — its task spinning, its output held in
/// memory until it did. Past the budget, the advance fails.
///
/// A timer set for later than its key's timer firing is progress, and
/// free: a periodic timer (`on_timer` sets the next one an interval on)
/// catching up on a long stretch of time — a restore after downtime, a
/// watermark that jumps — fires once per interval up to `time`, and stops.
/// Not at the end of input, where `time` is the end of time and such a
/// chain would not stop: there every timer set counts.
#[derive(Debug)]
pub struct FiringBudget {
    left: u64,
    /// The advance goes to the end of time (the input ended).
    to_the_end: bool,
}

impl FiringBudget {
    pub const SET_WHILE_FIRING: u64 = 1_000_000;

    pub fn new(time: i64) -> Self {
        FiringBudget { left: Self::SET_WHILE_FIRING, to_the_end: time == i64::MAX }
    }

    /// Takes what `call` set from the budget; the error says what the
    /// plugin does wrong.
    pub fn spend(&mut self, call: &FiringCall) -> Result<(), String> {
        let spent = if self.to_the_end { call.set } else { call.stalled };
        self.left = self.left.checked_sub(spent).ok_or_else(|| {
            let what = if self.to_the_end { "at the end of input, " } else { "" };
            format!(
                "{what}its on_timer keeps setting timers for times already reached: each fires at once, in the same \
                 advance of time, which never ends (over {} set while it fired); set a timer for a time after the one \
                 firing{}",
                Self::SET_WHILE_FIRING,
                if self.to_the_end { ", and stop setting them once the input has ended (the watermark is i64::MAX)" } else { "" }
            )
        })?;
        Ok(())
    }

    /// Fires the timers due at `time` call after call — timers set while
    /// firing may be due too — until `fire_call` finds none due (`None`),
    /// spending what each call set ([`FiringCall`]) from a budget for
    /// `time`. Returns what the calls emitted; `over_budget` makes the
    /// error of a plugin past it.
    pub fn fire_until_none_due<T, E>(
        time: i64,
        mut fire_call: impl FnMut() -> Result<Option<(Vec<T>, Option<FiringCall>)>, E>,
        over_budget: impl Fn(String) -> E,
    ) -> Result<Vec<T>, E> {
        let mut budget = FiringBudget::new(time);
        let mut emitted = Vec::new();
        while let Some((outputs, call)) = fire_call()? {
            emitted.extend(outputs);
            if let Some(call) = call {
                budget.spend(&call).map_err(&over_budget)?;
            }
        }
        Ok(emitted)
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
        assert_eq!(timers.next_processing_fire(), Some(6), "after its millisecond");
        assert!(timers.pop_due(TimeDomain::ProcessingTime, processing_timers_due_at(5), 10).is_empty());
        assert_eq!(timers.pop_due(TimeDomain::ProcessingTime, processing_timers_due_at(6), 10).len(), 1);
    }

    fn fired(times: &[(i64, &str)]) -> Vec<FiredTimer> {
        times.iter().map(|&(timestamp, key)| FiredTimer { key: key.as_bytes().into(), timestamp, domain: TimeDomain::EventTime }).collect()
    }

    /// Timers set for the time firing (or earlier) are taken from the
    /// budget; those set for later are progress, and free — except at the
    /// end of input, where a chain of them would never end.
    #[test]
    fn only_timers_that_make_no_progress_spend_the_budget() {
        let firing = fired(&[(10, "a"), (20, "b")]);
        let mut call = FiringCall::new(&firing, &[0, 1]);
        call.set(0, TimeDomain::EventTime, 11); // a: later, progress
        call.set(1, TimeDomain::EventTime, 20); // b: the time firing again
        call.set(1, TimeDomain::EventTime, 5); // b: earlier
        call.set(0, TimeDomain::ProcessingTime, 1); // another domain: fires in another advance
        let mut budget = FiringBudget { left: 2, to_the_end: false };
        budget.spend(&call).unwrap();
        assert_eq!(budget.left, 0, "the two that make no progress");
        assert!(budget.spend(&call).is_err());

        let mut at_the_end = FiringBudget { left: 3, to_the_end: true };
        at_the_end.spend(&call).unwrap();
        let error = at_the_end.spend(&call).unwrap_err();
        assert_eq!(at_the_end.left, 0);
        assert!(error.contains("at the end of input"), "{error}");
        assert!(!FiringBudget::new(i64::MAX - 1).to_the_end && FiringBudget::new(i64::MAX).to_the_end);
    }

    proptest::proptest! {
        /// A timestamp's keys are listed and fire in the order of their
        /// bytes: short and long, sharing their first eight bytes, and with
        /// zero bytes where a shorter key's padding is.
        #[test]
        fn a_timestamps_keys_fire_in_byte_order(keys in proptest::collection::vec(
            proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::strategy::Just(b'a'), proptest::prelude::any::<u8>()], 0..12),
            0..40,
        )) {
            let mut timers = TimerService::default();
            for key in &keys {
                timers.register(TimeDomain::EventTime, 7, key);
            }
            let mut expected = keys.clone();
            expected.sort();
            expected.dedup();
            let listed: Vec<Vec<u8>> = timers.all().map(|(_, _, key)| key.to_vec()).collect();
            proptest::prop_assert_eq!(&listed, &expected, "a savepoint lists them in that order");
            let mut unordered: Vec<Vec<u8>> = timers.unordered().map(|(_, _, key)| key.to_vec()).collect();
            unordered.sort();
            proptest::prop_assert_eq!(&unordered, &expected, "a checkpoint lists the same timers");
            let fired: Vec<Vec<u8>> = timers.pop_due(TimeDomain::EventTime, 7, usize::MAX).into_iter().map(|t| t.key.to_vec()).collect();
            proptest::prop_assert_eq!(fired, expected);
        }
    }

    fn keys(fired: &[FiredTimer]) -> Vec<(i64, &str)> {
        fired.iter().map(|t| (t.timestamp, std::str::from_utf8(&t.key).unwrap())).collect()
    }

    /// A key fires at most once per batch: its next timer is left for the
    /// next, after the plugin has had its say on it (Flink fires timers one
    /// by one). Other keys' timers in between fire in order up to there.
    #[test]
    fn a_keys_next_timer_waits_for_the_next_batch() {
        let mut timers = TimerService::default();
        for (timestamp, key) in [(500, "a"), (520, "b"), (550, "a"), (560, "c"), (600, "a")] {
            timers.register(TimeDomain::EventTime, timestamp, key.as_bytes());
        }
        assert_eq!(keys(&timers.pop_due(TimeDomain::EventTime, 1000, 10)), vec![(500, "a"), (520, "b")]);
        timers.delete(TimeDomain::EventTime, 550, b"a"); // what on_timer(a@500) did
        assert_eq!(keys(&timers.pop_due(TimeDomain::EventTime, 1000, 10)), vec![(560, "c"), (600, "a")]);
        timers.register(TimeDomain::EventTime, 600, b"a"); // set again while firing: a new timer
        assert_eq!(keys(&timers.pop_due(TimeDomain::EventTime, 1000, 10)), vec![(600, "a")]);
        assert!(timers.is_empty());
    }

    /// Many keys at one timestamp fire in key order, across several pops;
    /// timers registered or deleted at that timestamp while it fires are
    /// fired or skipped in their place, and snapshots list what is left.
    #[test]
    fn keys_sharing_a_timestamp_fire_in_order_across_pops() {
        let mut timers = TimerService::default();
        for key in ["d", "b", "f", "a", "e", "c"] {
            timers.register(TimeDomain::EventTime, 10, key.as_bytes());
        }
        timers.register(TimeDomain::EventTime, 5, b"z");
        timers.register(TimeDomain::EventTime, 20, b"a");
        assert_eq!(keys(&timers.pop_due(TimeDomain::EventTime, 10, 3)), vec![(5, "z"), (10, "a"), (10, "b")]);
        timers.register(TimeDomain::EventTime, 10, b"bb");
        timers.register(TimeDomain::EventTime, 10, b"c");
        timers.delete(TimeDomain::EventTime, 10, b"e");
        assert_eq!(timers.len(), 5);
        let left: Vec<(i64, &[u8])> = timers.all().map(|(_, t, k)| (t, k)).collect();
        assert_eq!(left, vec![(10, &b"bb"[..]), (10, b"c"), (10, b"d"), (10, b"f"), (20, b"a")]);
        let mut unordered: Vec<(i64, &[u8])> = timers.unordered().map(|(_, t, k)| (t, k)).collect();
        unordered.sort();
        assert_eq!(unordered, left, "a checkpoint lists the same timers, a firing timestamp's too");
        assert_eq!(keys(&timers.pop_due(TimeDomain::EventTime, 15, 10)), vec![(10, "bb"), (10, "c"), (10, "d"), (10, "f")]);
        assert_eq!(timers.len(), 1);
        let mut copy = TimerService::default();
        copy.register(TimeDomain::EventTime, 20, b"a");
        assert_eq!(timers, copy, "equal whatever their firing state");
        timers.delete(TimeDomain::EventTime, 20, b"a");
        assert!(timers.is_empty() && timers.pop_due(TimeDomain::EventTime, i64::MAX, 10).is_empty());
    }

    /// A timestamp holds one key without a set until a second comes, and
    /// is gone when its last key is deleted, whichever way it held them.
    #[test]
    fn a_timestamp_of_one_key_takes_a_second_and_loses_both() {
        let mut timers = TimerService::default();
        assert!(timers.register(TimeDomain::EventTime, 10, b"a"));
        assert!(!timers.register(TimeDomain::EventTime, 10, b"a"), "one timer per key and time");
        timers.delete(TimeDomain::EventTime, 10, b"b");
        assert_eq!(timers.len(), 1, "deleting another key's timer changes nothing");
        assert!(timers.register(TimeDomain::EventTime, 10, b"b"));
        assert!(!timers.register(TimeDomain::EventTime, 10, b"b"));
        assert_eq!(timers.all().map(|(_, t, k)| (t, k.to_vec())).collect::<Vec<_>>(), [(10, b"a".to_vec()), (10, b"b".to_vec())]);
        timers.delete(TimeDomain::EventTime, 10, b"a");
        timers.delete(TimeDomain::EventTime, 10, b"b");
        assert!(timers.is_empty() && timers.event_time.due.is_empty());
        assert!(timers.register(TimeDomain::EventTime, 20, b"c"));
        timers.delete(TimeDomain::EventTime, 20, b"c");
        assert!(timers.event_time.due.is_empty());
        assert!(timers.is_empty() && timers.pop_due(TimeDomain::EventTime, i64::MAX, 10).is_empty());
        assert!(timers.register(TimeDomain::EventTime, 30, b"d"));
        assert_eq!(keys(&timers.pop_due(TimeDomain::EventTime, 30, 10)), vec![(30, "d")]);
    }
}
