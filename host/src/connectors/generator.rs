//! The generator source: deterministic and seekable.
//!
//! Event `i` is a pure function of the configuration and `i`, so the same
//! job always sees the same events, and a generator can resume at any
//! sequence number. With parallelism `P`, the `N` events are split into `P`
//! contiguous ranges, one per subtask (as in the reference workloads).

use std::time::{Duration, Instant};

use super::{ConnectorError, Poll, Source};
use crate::dataflow::RecordBatch;
use crate::job::GeneratorMode;

/// The generator's settings from the job file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorConfig {
    pub events: Option<u64>,
    pub mode: GeneratorMode,
    pub keys: u64,
    pub rate: Option<f64>,
    pub seed: u64,
}

/// One subtask of a generator.
pub struct Generator {
    config: GeneratorConfig,
    /// Next sequence number, and the end of this subtask's range.
    next: u64,
    end: u64,
    started: Instant,
    first: u64,
    /// This subtask's share of the rate, in events per second.
    rate: Option<f64>,
}

/// Words of the `words` mode.
const VOCABULARY: [&str; 32] = [
    "stream", "state", "event", "time", "window", "key", "watermark", "barrier", "checkpoint", "savepoint",
    "operator", "source", "sink", "plugin", "wasm", "component", "batch", "record", "timer", "late", "exactly",
    "once", "snapshot", "restore", "upgrade", "fork", "parallel", "shuffle", "group", "count", "sum", "flink",
];

impl Generator {
    pub fn new(config: GeneratorConfig, subtask: u32, parallelism: u32) -> Self {
        let (start, end) = match config.events {
            Some(total) => split(total, subtask, parallelism),
            // Unbounded: subtask s produces s, s + P, … is harder to rewind
            // per subtask; give each subtask its own disjoint space instead.
            None => (u64::from(subtask) << 48, (u64::from(subtask) + 1) << 48),
        };
        Generator {
            config,
            next: start,
            end,
            started: Instant::now(),
            first: start,
            rate: config.rate.map(|r| r / f64::from(parallelism)),
        }
    }

    /// The next sequence number this subtask will produce.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// How many events may be produced now without exceeding the rate.
    fn allowance(&self, max: usize) -> usize {
        match self.rate {
            None => max,
            Some(rate) => {
                let due = (self.started.elapsed().as_secs_f64() * rate) as u64;
                let produced = self.next - self.first;
                let allowed = due.saturating_sub(produced).min(max as u64) as usize;
                if allowed == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                allowed
            }
        }
    }

    fn push(&self, i: u64, batch: &mut RecordBatch) {
        match self.config.mode {
            GeneratorMode::Sequence => batch.push_with(None, |data, offsets| {
                write_decimal(i % self.config.keys.max(1), data);
                offsets.push(data.len() as u32);
                write_decimal(i, data);
                offsets.push(data.len() as u32);
            }),
            GeneratorMode::Words => {
                let line = words_line(self.config.seed, i);
                batch.push(b"", line.as_bytes(), None);
            }
        }
    }
}

impl Source for Generator {
    fn poll(&mut self, batch: &mut RecordBatch, max: usize) -> Result<Poll, ConnectorError> {
        if self.next >= self.end {
            return Ok(Poll::Exhausted);
        }
        let count = (self.end - self.next).min(self.allowance(max) as u64);
        for i in self.next..self.next + count {
            self.push(i, batch);
        }
        self.next += count;
        Ok(Poll::Ready)
    }
}

/// Subtask `s` of `p` gets the `s`-th of `p` contiguous ranges of `0..total`.
fn split(total: u64, subtask: u32, parallelism: u32) -> (u64, u64) {
    let bound = |s: u32| (u128::from(total) * u128::from(s) / u128::from(parallelism)) as u64;
    (bound(subtask), bound(subtask + 1))
}

/// Line `i` of the `words` mode: 1 to 8 words, chosen by a hash of (seed, i).
pub fn words_line(seed: u64, i: u64) -> String {
    let mut state = splitmix64(seed ^ splitmix64(i));
    let count = 1 + (state % 8) as usize;
    let mut line = String::new();
    for n in 0..count {
        state = splitmix64(state);
        if n > 0 {
            line.push(' ');
        }
        line.push_str(VOCABULARY[(state % VOCABULARY.len() as u64) as usize]);
    }
    line
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Appends `n` in decimal, without `fmt` (hot path of the benchmarks).
pub fn write_decimal(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(events: u64) -> GeneratorConfig {
        GeneratorConfig { events: Some(events), mode: GeneratorMode::Sequence, keys: 3, rate: None, seed: 0 }
    }

    fn drain(generator: &mut Generator) -> Vec<(String, String)> {
        let mut batch = RecordBatch::new();
        while generator.poll(&mut batch, 4).unwrap() == Poll::Ready {}
        batch
            .iter()
            .map(|r| (String::from_utf8(r.key.to_vec()).unwrap(), String::from_utf8(r.value.to_vec()).unwrap()))
            .collect()
    }

    #[test]
    fn sequence_events_are_key_i_mod_keys_and_value_i() {
        let events = drain(&mut Generator::new(config(5), 0, 1));
        let expected: Vec<(String, String)> =
            [("0", "0"), ("1", "1"), ("2", "2"), ("0", "3"), ("1", "4")].map(|(k, v)| (k.into(), v.into())).into();
        assert_eq!(events, expected);
    }

    #[test]
    fn subtasks_split_the_range_without_gaps_or_overlap() {
        let mut all: Vec<String> = (0..3).flat_map(|s| drain(&mut Generator::new(config(10), s, 3))).map(|e| e.1).collect();
        all.sort_by_key(|v| v.parse::<u64>().unwrap());
        assert_eq!(all, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn same_config_same_events() {
        assert_eq!(words_line(7, 123), words_line(7, 123));
        assert_ne!((0..20).map(|i| words_line(7, i)).collect::<Vec<_>>(), (0..20).map(|i| words_line(8, i)).collect::<Vec<_>>());
    }
}
