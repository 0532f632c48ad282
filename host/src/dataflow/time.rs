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
//! The watermark only ever moves forward.

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

/// Watermark settings of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatermarkSettings {
    pub out_of_orderness: Duration,
    pub idle_timeout: Option<Duration>,
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

    /// Looks at a batch just produced (possibly empty) and says what to send.
    pub fn observe(&mut self, batch: &RecordBatch) -> Option<Signal> {
        let now = Instant::now();
        if !batch.is_empty() {
            self.last_record = now;
            let newest = batch.iter().filter_map(|r| r.timestamp).max();
            self.max_timestamp = self.max_timestamp.max(newest);
        }
        if let Some(max) = self.max_timestamp {
            let bound = self.settings.out_of_orderness.as_millis() as i64;
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

#[cfg(test)]
mod tests {
    use super::*;

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
