//! Pacing a source to a rate: to replay a file or a topic as a live stream.

use std::time::{Duration, Instant};

/// At most `rate` records per second, counted from when pacing (re)started:
/// the first at once, the next `1 / rate` seconds later, and so on — a line
/// replayed at 0.25 lines a second shows now, not 4 s from now.
///
/// A source that took less than the rate allowed (it had caught up with a
/// topic, or was held back) saves up at most a second's worth, as Flink's
/// rate limiter (Guava's) does: otherwise a topic that had been quiet for a
/// minute would have its next minute of records read in one burst.
#[derive(Debug)]
pub(crate) struct Pace {
    rate: Option<f64>,
    started: Instant,
    taken: u64,
}

impl Pace {
    /// No faster than `rate` records per second (as fast as possible if `None`).
    pub fn new(rate: Option<f64>) -> Self {
        Pace { rate, started: Instant::now(), taken: 0 }
    }

    /// How many records (at most `max`) may be taken now without exceeding
    /// the rate; when none may, it sleeps a millisecond so that a paced
    /// source does not spin.
    pub fn allowance(&self, max: usize) -> usize {
        let allowed = self.available(max);
        if allowed == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        allowed
    }

    /// [`Pace::allowance`] without the sleep.
    pub fn available(&self, max: usize) -> usize {
        let Some(rate) = self.rate else { return max };
        self.due(rate).saturating_sub(self.taken).min(burst(rate)).min(max as u64) as usize
    }

    /// Records the rate has allowed since pacing started.
    fn due(&self, rate: f64) -> u64 {
        (self.started.elapsed().as_secs_f64() * rate) as u64 + 1
    }

    /// Paces from now on as if starting now. A source that waited (for
    /// watermark alignment) would otherwise read what the rate allowed
    /// during the wait in one burst, and run ahead of its group again.
    pub fn restart(&mut self) {
        self.started = Instant::now();
        self.taken = 0;
    }

    /// `n` records were taken; what the rate allowed beyond a second's
    /// worth and was not taken is forgone.
    pub fn took(&mut self, n: u64) {
        self.taken += n;
        if let Some(rate) = self.rate {
            self.taken = self.taken.max(self.due(rate).saturating_sub(burst(rate)));
        }
    }
}

/// The most records a source paced at `rate` may save up: a second's worth
/// (at least one).
fn burst(rate: f64) -> u64 {
    (rate.ceil() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_pace_does_not_make_up_for_the_time_before() {
        let mut pace = Pace::new(Some(1000.0));
        std::thread::sleep(Duration::from_millis(50));
        assert!(pace.available(usize::MAX) >= 50, "50 ms at 1 000/s");
        pace.took(10);
        pace.restart();
        assert!(pace.available(usize::MAX) < 10, "nothing owed from before the restart");
        let slow = Pace::new(Some(0.25));
        assert_eq!(slow.available(usize::MAX), 1, "the first record at once, not after 4 s");
        assert_eq!(Pace::new(None).available(7), 7, "unpaced: as many as asked");
    }

    /// Paced at 1 000/s and idle for 10 s (a topic that was quiet), a
    /// source may take a second's worth at once, not ten.
    #[test]
    fn a_pause_saves_up_at_most_a_seconds_worth() {
        let mut pace = Pace::new(Some(1000.0));
        pace.started = Instant::now().checked_sub(Duration::from_secs(10)).expect("up for 10 s");
        assert_eq!(pace.available(usize::MAX), 1000, "a second's worth");
        pace.took(0);
        assert_eq!(pace.available(usize::MAX), 1000, "polling with nothing to read does not save up more");
        pace.took(1000);
        assert!(pace.available(usize::MAX) < 10, "the rest of the ten seconds is forgone");
    }
}
