//! Event time: watermarks made by sources and combined by operators.
//!
//! A source subtask (one *partition*) tracks the largest event timestamp it
//! has produced and emits the watermark `max - out_of_orderness - 1`: it
//! promises that no event at or below it follows. If it produces nothing for
//! its idleness timeout it declares itself idle, so that it does not hold
//! back event time downstream, until it produces again.
//!
//! An operator subtask receives watermarks on each of its channels (one per
//! producer feeding it) and its own watermark is the minimum over the
//! channels that are not idle; an ended channel counts as the end of time.
//! The watermark only ever moves forward. When all its channels are idle
//! the subtask tells its consumers it is idle in turn, and with the next
//! watermark that it is not, as Flink passes idleness through operators:
//! otherwise a step between an idle source and a join would hold the join's
//! event time back as if the source were not idle.

use std::time::{Duration, Instant};

use super::RecordBatch;

/// The state of one input channel of a subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelTime {
    At(i64),
    Idle,
    Ended,
}

/// The watermarks of a subtask's input channels.
#[derive(Debug, Clone)]
pub struct InputClock {
    channels: Vec<ChannelTime>,
    current: i64,
}

impl InputClock {
    pub fn new(channels: usize) -> Self {
        InputClock { channels: vec![ChannelTime::At(i64::MIN); channels], current: i64::MIN }
    }

    /// Records a watermark of `channel`; returns the subtask's new watermark
    /// if it advanced.
    pub fn watermark(&mut self, channel: u32, watermark: i64) -> Option<i64> {
        let slot = &mut self.channels[channel as usize];
        // A channel's own watermarks never go back either.
        let previous = match *slot {
            ChannelTime::At(t) => t,
            _ => i64::MIN,
        };
        *slot = ChannelTime::At(watermark.max(previous));
        self.advance()
    }

    pub fn idle(&mut self, channel: u32) -> Option<i64> {
        self.channels[channel as usize] = ChannelTime::Idle;
        self.advance()
    }

    pub fn ended(&mut self, channel: u32) -> Option<i64> {
        self.channels[channel as usize] = ChannelTime::Ended;
        self.advance()
    }

    pub fn current(&self) -> i64 {
        self.current
    }

    /// Whether the subtask is idle: its channels are idle but for those
    /// that ended, so nothing it receives holds back event time.
    pub fn is_idle(&self) -> bool {
        self.channels.contains(&ChannelTime::Idle) && !self.channels.iter().any(|c| matches!(c, ChannelTime::At(_)))
    }

    /// The channels holding back an event time that has not started: those
    /// without a watermark yet, while another channel has one. None once
    /// the subtask's watermark has moved (channels lagging behind it then
    /// are the ordinary working of event time).
    fn silent_channels(&self) -> Vec<u32> {
        let started = |c: &ChannelTime| matches!(c, ChannelTime::At(t) if *t > i64::MIN);
        if self.current > i64::MIN || !self.channels.iter().any(started) {
            return Vec::new();
        }
        (0..self.channels.len() as u32).filter(|&i| self.channels[i as usize] == ChannelTime::At(i64::MIN)).collect()
    }

    fn advance(&mut self) -> Option<i64> {
        let active = self.channels.iter().filter(|c| **c != ChannelTime::Idle);
        let minimum = active
            .map(|c| match c {
                ChannelTime::At(t) => *t,
                _ => i64::MAX,
            })
            .min()?;
        (minimum > self.current).then(|| {
            self.current = minimum;
            minimum
        })
    }
}

/// Notices a subtask whose event time never started because some of its
/// channels sent no watermark while others did — an input whose events
/// have no timestamps, or one that has not produced yet — so that the log
/// can say why its windows and event-time timers do not fire. Flink holds
/// event time back the same way, without a word.
#[derive(Debug, Default)]
pub struct StalledTime {
    since: Option<Instant>,
    said: bool,
}

impl StalledTime {
    /// How long event time may be held back before the log says so.
    pub const PATIENCE: Duration = Duration::from_secs(30);

    /// The channels that have held `clock`'s event time back for
    /// [`Self::PATIENCE`] by `now` — once per subtask.
    pub fn check(&mut self, clock: &InputClock, now: Instant) -> Option<Vec<u32>> {
        if self.said {
            return None;
        }
        let silent = clock.silent_channels();
        if silent.is_empty() {
            self.since = None;
            return None;
        }
        let since = *self.since.get_or_insert(now);
        self.said = now.duration_since(since) >= Self::PATIENCE;
        self.said.then_some(silent)
    }
}

/// Watermark settings of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatermarkSettings {
    pub out_of_orderness: Duration,
    pub idle_timeout: Option<Duration>,
}

impl WatermarkSettings {
    /// The settings of a job file's `out_of_orderness_ms` and `idle_timeout_ms`.
    pub fn from_ms(out_of_orderness_ms: u64, idle_timeout_ms: Option<u64>) -> Self {
        WatermarkSettings {
            out_of_orderness: Duration::from_millis(out_of_orderness_ms),
            idle_timeout: idle_timeout_ms.map(Duration::from_millis),
        }
    }

    /// How far (ms) the watermark trails the newest timestamp: a bound
    /// beyond 64-bit time (`out_of_orderness_ms` of 2^63 or more) holds it
    /// back for good instead of wrapping round into the future.
    fn bound_ms(&self) -> i64 {
        i64::try_from(self.out_of_orderness.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Makes the watermarks of one source subtask.
#[derive(Debug)]
pub struct WatermarkGenerator {
    settings: WatermarkSettings,
    max_timestamp: Option<i64>,
    emitted: i64,
    last_record: Instant,
    idle: bool,
}

/// What a source should send after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Watermark(i64),
    Idle,
}

impl WatermarkGenerator {
    pub fn new(settings: WatermarkSettings) -> Self {
        WatermarkGenerator { settings, max_timestamp: None, emitted: i64::MIN, last_record: Instant::now(), idle: false }
    }

    /// The subtask reads again after waiting (for watermark alignment):
    /// the wait is not a quiet spell, so idleness is timed from now.
    pub fn resume(&mut self) {
        self.last_record = Instant::now();
    }

    /// Looks at a batch just produced (possibly empty) and says what to send.
    pub fn observe(&mut self, batch: &RecordBatch) -> Option<Signal> {
        let now = Instant::now();
        if !batch.is_empty() {
            self.last_record = now;
            self.max_timestamp = self.max_timestamp.max(batch.max_timestamp());
        }
        if let Some(max) = self.max_timestamp {
            let bound = self.settings.bound_ms();
            let watermark = max.saturating_sub(bound).saturating_sub(1);
            if watermark > self.emitted || (self.idle && !batch.is_empty()) {
                self.emitted = self.emitted.max(watermark);
                self.idle = false;
                return Some(Signal::Watermark(self.emitted));
            }
        }
        let timeout = self.settings.idle_timeout?;
        if !self.idle && now.duration_since(self.last_record) >= timeout {
            self.idle = true;
            return Some(Signal::Idle);
        }
        None
    }
}

/// Watermarks of a source subtask that reads several splits at their own
/// pace (Kafka partitions): each split lags its own newest timestamp, the
/// subtask's watermark is the least over the splits that are neither idle
/// nor finished, and the subtask is idle when all its splits are.
#[derive(Debug)]
pub struct SplitClock {
    settings: WatermarkSettings,
    splits: Vec<SplitTime>,
    clock: InputClock,
    /// Downstream was told the subtask is idle.
    idle: bool,
    /// The last watermark sent downstream.
    emitted: i64,
}

#[derive(Debug, Clone, Copy)]
struct SplitTime {
    newest: Option<i64>,
    last_record: Instant,
    idle: bool,
    finished: bool,
}

impl SplitClock {
    pub fn new(settings: WatermarkSettings, splits: usize) -> Self {
        let split = SplitTime { newest: None, last_record: Instant::now(), idle: false, finished: false };
        SplitClock { settings, splits: vec![split; splits], clock: InputClock::new(splits), idle: false, emitted: i64::MIN }
    }

    /// Split `index` produced a record (with its event time, if any).
    pub fn record(&mut self, index: usize, timestamp: Option<i64>) {
        let split = &mut self.splits[index];
        split.last_record = Instant::now();
        split.newest = split.newest.max(timestamp);
    }

    /// The subtask reads again after waiting (for watermark alignment):
    /// the wait is no split's quiet spell, so idleness is timed from now —
    /// else every split but the first to deliver would look idle at once,
    /// and its records could arrive behind the watermark.
    pub fn resume(&mut self) {
        let now = Instant::now();
        self.splits.iter_mut().for_each(|split| split.last_record = now);
    }

    /// Split `index` has no more records, ever.
    pub fn finished(&mut self, index: usize) {
        self.splits[index].finished = true;
        self.clock.ended(index as u32);
    }

    /// What to send downstream now, after the records seen so far.
    pub fn signal(&mut self) -> Option<Signal> {
        let bound = self.settings.bound_ms();
        let now = Instant::now();
        for (index, split) in self.splits.iter_mut().enumerate().filter(|(_, s)| !s.finished) {
            let quiet = self.settings.idle_timeout.is_some_and(|t| now.duration_since(split.last_record) >= t);
            if quiet && !split.idle {
                split.idle = true;
                self.clock.idle(index as u32);
            } else if !quiet && let Some(newest) = split.newest {
                split.idle = false;
                self.clock.watermark(index as u32, newest.saturating_sub(bound).saturating_sub(1));
            }
        }
        // No splits at all (more subtasks than partitions) is idle at once.
        let all_idle = self.splits.iter().all(|s| s.idle || s.finished)
            && (self.settings.idle_timeout.is_some() || self.splits.is_empty());
        match (all_idle, self.idle) {
            (true, false) => {
                self.idle = true;
                Some(Signal::Idle)
            }
            (true, true) => None,
            (false, was_idle) => {
                self.idle = false;
                // All ended is the end of time, which the end of input says.
                let current = self.clock.current();
                let due = current < i64::MAX && (current > self.emitted || (was_idle && current > i64::MIN));
                due.then(|| {
                    self.emitted = current;
                    Signal::Watermark(current)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_time_held_back_by_a_silent_channel_is_told_once_after_the_patience() {
        let mut clock = InputClock::new(3);
        let mut stalled = StalledTime::default();
        let start = Instant::now();
        assert_eq!(stalled.check(&clock, start), None, "no channel has a watermark: no event time at all");
        clock.watermark(0, 100);
        clock.ended(1);
        assert_eq!(stalled.check(&clock, start), None, "held back, but not for long yet");
        assert_eq!(stalled.check(&clock, start + StalledTime::PATIENCE / 2), None);
        assert_eq!(stalled.check(&clock, start + StalledTime::PATIENCE), Some(vec![2]), "channel 2 holds it back");
        assert_eq!(stalled.check(&clock, start + StalledTime::PATIENCE * 2), None, "said once");

        let mut stalled = StalledTime::default();
        let mut clock = InputClock::new(2);
        clock.watermark(0, 100);
        assert_eq!(stalled.check(&clock, start), None);
        clock.watermark(1, 50);
        assert_eq!(stalled.check(&clock, start + StalledTime::PATIENCE), None, "event time runs: nothing to say");
    }

    #[test]
    fn the_minimum_of_active_channels_and_never_backwards() {
        let mut clock = InputClock::new(3);
        assert_eq!(clock.watermark(0, 10), None, "channels 1 and 2 hold it back");
        assert_eq!(clock.watermark(1, 20), None);
        assert_eq!(clock.idle(2), Some(10), "an idle channel no longer holds it back");
        assert_eq!(clock.watermark(0, 5), None, "a channel's watermark does not go back");
        assert_eq!(clock.watermark(2, 7), None, "a channel that sends again is active again, behind the current");
        assert_eq!(clock.current(), 10);
        assert_eq!(clock.ended(0), None);
        assert_eq!(clock.watermark(2, 30), Some(20));
        assert_eq!(clock.ended(1), Some(30));
        assert_eq!(clock.ended(2), Some(i64::MAX), "all ended: the end of time");
    }

    #[test]
    fn a_subtask_is_idle_while_every_channel_not_ended_is() {
        let mut clock = InputClock::new(3);
        clock.idle(0);
        clock.idle(1);
        assert!(!clock.is_idle(), "channel 2 has not been heard from: it holds event time back");
        clock.idle(2);
        assert!(clock.is_idle());
        clock.watermark(1, 5);
        assert!(!clock.is_idle(), "a channel that sends a watermark is active again");
        clock.ended(1);
        assert!(clock.is_idle(), "the others idle, the ended one holds nothing back");
        let mut ended = InputClock::new(1);
        ended.ended(0);
        assert!(!ended.is_idle(), "ended, not idle");
    }

    #[test]
    fn sources_lag_their_newest_timestamp_by_the_bound() {
        let mut generator = WatermarkGenerator::new(WatermarkSettings {
            out_of_orderness: Duration::from_millis(100),
            idle_timeout: None,
        });
        let mut batch = RecordBatch::new();
        batch.push(b"k", b"v", Some(1000));
        batch.push(b"k", b"v", Some(900));
        assert_eq!(generator.observe(&batch), Some(Signal::Watermark(899)));
        assert_eq!(generator.observe(&batch), None, "no progress, nothing to send");
        assert_eq!(generator.observe(&RecordBatch::new()), None);
    }

    #[test]
    fn a_bound_beyond_64_bit_time_holds_the_watermark_back_instead_of_wrapping() {
        let settings = WatermarkSettings::from_ms(1 << 63, None);
        let mut generator = WatermarkGenerator::new(settings);
        let mut batch = RecordBatch::new();
        batch.push(b"k", b"v", Some(1000));
        // 2^63 ms taken as a signed number is the earliest time: the
        // watermark would have wrapped round to the latest, judging every
        // event late; held back by the longest bound there is, none is.
        let far_back = Some(Signal::Watermark(1000 - i64::MAX - 1));
        assert_eq!(generator.observe(&batch), far_back);
        let mut clock = SplitClock::new(settings, 1);
        clock.record(0, Some(1000));
        assert_eq!(clock.signal(), far_back);
    }

    #[test]
    fn a_subtask_of_splits_follows_its_slowest_active_split() {
        let settings = WatermarkSettings { out_of_orderness: Duration::from_millis(10), idle_timeout: None };
        let mut clock = SplitClock::new(settings, 2);
        clock.record(0, Some(1000));
        assert_eq!(clock.signal(), None, "split 1 has no event time yet: it holds the subtask back");
        clock.record(1, Some(500));
        assert_eq!(clock.signal(), Some(Signal::Watermark(489)), "the slower split decides");
        clock.record(1, Some(2000));
        assert_eq!(clock.signal(), Some(Signal::Watermark(989)));
        clock.finished(0);
        assert_eq!(clock.signal(), Some(Signal::Watermark(1989)), "a finished split no longer holds it back");
    }

    /// Idle after 30 ms, no out-of-orderness.
    const QUIET_30_MS: WatermarkSettings =
        WatermarkSettings { out_of_orderness: Duration::ZERO, idle_timeout: Some(Duration::from_millis(30)) };

    /// Two splits that have each read once, then 40 ms of quiet.
    fn two_splits_after_a_quiet_spell() -> SplitClock {
        let mut clock = SplitClock::new(QUIET_30_MS, 2);
        clock.record(0, Some(100));
        clock.record(1, Some(50));
        assert_eq!(clock.signal(), Some(Signal::Watermark(49)));
        std::thread::sleep(Duration::from_millis(40));
        clock
    }

    #[test]
    fn quiet_splits_go_idle_and_a_subtask_without_splits_is_idle_at_once() {
        let mut clock = two_splits_after_a_quiet_spell();
        clock.record(0, Some(200));
        assert_eq!(clock.signal(), Some(Signal::Watermark(199)), "split 1 went quiet: it is idle");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(clock.signal(), Some(Signal::Idle), "both quiet: the subtask is idle");
        assert_eq!(clock.signal(), None, "said once");
        clock.record(1, Some(300));
        assert_eq!(clock.signal(), Some(Signal::Watermark(299)), "split 1 is back; split 0 is still idle");

        let mut empty = SplitClock::new(WatermarkSettings::default(), 0);
        assert_eq!(empty.signal(), Some(Signal::Idle));
    }

    #[test]
    fn a_wait_for_alignment_is_not_a_quiet_spell() {
        let mut clock = two_splits_after_a_quiet_spell();
        clock.resume();
        clock.record(0, Some(200));
        assert_eq!(clock.signal(), None, "split 1 still holds the watermark back");

        let mut generator = WatermarkGenerator::new(QUIET_30_MS);
        std::thread::sleep(Duration::from_millis(40));
        generator.resume();
        assert_eq!(generator.observe(&RecordBatch::new()), None, "not idle straight after a wait");
    }

    #[test]
    fn a_quiet_source_goes_idle_and_comes_back() {
        let mut generator = WatermarkGenerator::new(WatermarkSettings {
            out_of_orderness: Duration::ZERO,
            idle_timeout: Some(Duration::ZERO),
        });
        assert_eq!(generator.observe(&RecordBatch::new()), Some(Signal::Idle));
        assert_eq!(generator.observe(&RecordBatch::new()), None);
        let mut batch = RecordBatch::new();
        batch.push(b"k", b"v", Some(50));
        assert_eq!(generator.observe(&batch), Some(Signal::Watermark(49)));
    }
}
