//! Pacing a source to a rate: to replay a file or a topic as a live stream.

use std::time::{Duration, Instant};

/// At most `rate` records per second, counted from when pacing started.
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
        let Some(rate) = self.rate else { return max };
        let due = (self.started.elapsed().as_secs_f64() * rate) as u64;
        let allowed = due.saturating_sub(self.taken).min(max as u64) as usize;
        if allowed == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        allowed
    }

    /// `n` records were taken.
    pub fn took(&mut self, n: u64) {
        self.taken += n;
    }
}
