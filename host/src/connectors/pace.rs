//! Pacing a source to a rate: to replay a file or a topic as a live stream.

use std::time::{Duration, Instant};

/// At most `rate` records per second, counted from when pacing (re)started:
/// the first at once, the next `1 / rate` seconds later, and so on — a line
/// replayed at 0.25 lines a second shows now, not 4 s from now.
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
        let due = (self.started.elapsed().as_secs_f64() * rate) as u64 + 1;
        due.saturating_sub(self.taken).min(max as u64) as usize
    }

    /// Paces from now on as if starting now. A source that waited (for
    /// watermark alignment) would otherwise read what the rate allowed
    /// during the wait in one burst, and run ahead of its group again.
    pub fn restart(&mut self) {
        self.started = Instant::now();
        self.taken = 0;
    }

    /// `n` records were taken.
    pub fn took(&mut self, n: u64) {
        self.taken += n;
    }
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
}
