//! The generator source: deterministic and seekable.
//!
//! Event `i` is a pure function of the configuration and `i`, so the same
//! job always sees the same events, and a generator can resume at any
//! sequence number. With parallelism `P`, the `N` events are split into `P`
//! contiguous ranges, one per subtask (as in the reference workloads). Each
//! range is a [`SourceSplit`]; a subtask restored at another parallelism
//! may be given several, which it reads one after the other.

use std::ops::Range;
use std::time::{Duration, Instant};

use super::decimal::DecimalCounter;
use super::{Backlog, ConnectorError, Poll, RestoredSplits, Source, SourceSplit};
use super::pace::Pace;
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
    pub events_per_ms: Option<u64>,
    pub shuffle_ms: u64,
    pub speed: Option<f64>,
}

/// Event time of the first sensor reading: a whole second.
pub const SENSORS_EPOCH_MS: i64 = 1_700_000_000_000;
/// The sensors, read in turn every [`SENSOR_TICK_MS`].
pub const SENSORS: [&str; 3] = ["temp", "pressure", "door"];
pub const SENSOR_TICK_MS: i64 = 10;

/// One subtask of a generator.
pub struct Generator {
    config: GeneratorConfig,
    /// Next sequence number, and the end of the range being read.
    next: u64,
    end: u64,
    /// The id (first sequence number) of the range being read.
    range: u64,
    /// Ranges still to read after this one.
    queued: Vec<SourceSplit>,
    /// The replay clock of `speed`: when it started, and the event time
    /// (from the data's start) it started at — 0 for a fresh subtask, so
    /// that every subtask plays one timeline; where the data left off for a
    /// restored one, which would otherwise sit idle for as long as the job
    /// had run.
    started: Instant,
    origin: i64,
    /// This subtask's share of the rate, in events per second.
    pace: Pace,
}

/// Words of the `words` mode.
const VOCABULARY: [&str; 32] = [
    "stream", "state", "event", "time", "window", "key", "watermark", "barrier", "checkpoint", "savepoint",
    "operator", "source", "sink", "plugin", "wasm", "component", "batch", "record", "timer", "late", "exactly",
    "once", "snapshot", "restore", "upgrade", "fork", "parallel", "shuffle", "group", "count", "sum", "flink",
];

impl GeneratorConfig {
    /// A digest of what decides the event at each sequence number (not how
    /// many there are, nor how fast they come): FNV-1a, stable from build
    /// to build, never 0.
    pub fn shape(&self) -> u64 {
        let described = format!(
            "{:?}|{}|{}|{:?}|{}|{:?}",
            self.mode, self.keys, self.seed, self.events_per_ms, self.shuffle_ms, self.speed
        );
        let hash = described.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
        hash.max(1)
    }
}

impl Generator {
    pub fn new(config: GeneratorConfig, subtask: u32, parallelism: u32) -> Self {
        let (start, end) = match config.events {
            Some(total) => split(total, subtask, parallelism),
            // Unbounded: give each subtask its own disjoint space.
            None => (u64::from(subtask) << 48, (u64::from(subtask) + 1) << 48),
        };
        Generator {
            config,
            next: start,
            end,
            range: start,
            queued: Vec::new(),
            started: Instant::now(),
            origin: 0,
            pace: Pace::new(config.rate.map(|r| r / f64::from(parallelism))),
        }
    }

    /// A subtask that reads the `restored` splits, in order, each from where
    /// it was, at its splits' share of the rate.
    pub fn from_splits(config: GeneratorConfig, restored: RestoredSplits) -> Result<Self, ConnectorError> {
        if let (Some(events), Some(last_end)) = (config.events, restored.last_end)
            && events != last_end
        {
            return Err(bounds_refused(format!("sets `events = {events}`, but the generator restored was started with `events = {last_end}`")));
        }
        for split in &restored.splits {
            check_bounds(config.events, split)?;
            check_shape(&config, split)?;
        }
        let mut generator = Generator::new(config, 0, 1);
        let share = restored.splits.len() as f64 / restored.of.max(1) as f64;
        generator.pace = Pace::new(config.rate.map(|rate| rate * share));
        let mut splits = restored.splits;
        let left = splits.iter().filter(|split| split.end.is_none_or(|end| split.next < end));
        generator.origin = left.map(|split| generator.relative_time(split.next)).min().unwrap_or(0);
        splits.sort_by_key(|split| std::cmp::Reverse(split.id));
        generator.queued = splits;
        generator.end = 0;
        generator.next = 0;
        generator.advance();
        Ok(generator)
    }

    /// Moves on to the next queued range once the current one is done.
    fn advance(&mut self) -> bool {
        while self.next >= self.end {
            let Some(split) = self.queued.pop() else { return false };
            self.range = split.id;
            self.next = split.next;
            self.end = split.end.unwrap_or(u64::MAX);
            // Pace from here, as if starting now.
            self.pace.restart();
        }
        true
    }

    /// How many events may be produced now without exceeding the rate or,
    /// with a replay speed, running ahead of the sped-up clock.
    fn allowance(&self, max: usize) -> usize {
        let mut allowed = self.pace.available(max) as u64;
        if let Some(speed) = self.config.speed {
            let now = self.origin + (self.started.elapsed().as_secs_f64() * 1000.0 * speed) as i64;
            let mut n = 0;
            while n < allowed && self.next + n < self.end && self.relative_time(self.next + n) <= now {
                n += 1;
            }
            allowed = n;
        }
        if allowed == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        allowed as usize
    }

    /// Event time of event `i` relative to the start of the data (for pacing).
    fn relative_time(&self, i: u64) -> i64 {
        match self.config.mode {
            GeneratorMode::Sensors => sensor_event(self.config.seed, self.config.shuffle_ms, i, self.config.events).timestamp - SENSORS_EPOCH_MS,
            _ => self.timestamp(i).unwrap_or(0),
        }
    }

    fn timestamp(&self, i: u64) -> Option<i64> {
        self.config.events_per_ms.map(|per_ms| (i / per_ms.max(1)) as i64)
    }

    /// Events `events` of the sequence mode: key `i mod keys`, value `i`,
    /// timestamp `i / events_per_ms`. The benchmarks' sources make 10-20
    /// million of them a second, so the digits and the timestamp are
    /// counted up from event to event rather than divided out of `i`.
    fn push_sequence(&self, events: Range<u64>, batch: &mut RecordBatch) {
        let keys = self.config.keys.max(1);
        let mut key = DecimalCounter::new(events.start % keys);
        let mut value = DecimalCounter::new(events.start);
        let mut time = self.config.events_per_ms.map(|per_ms| EventClock::new(events.start, per_ms.max(1)));
        for _ in events {
            batch.push_with(time.as_ref().map(EventClock::timestamp), |data, offsets| {
                key.write(data);
                offsets.push(data.len() as u32);
                value.write(data);
                offsets.push(data.len() as u32);
            });
            value.increment();
            key.increment();
            if key.value() == keys {
                key = DecimalCounter::new(0);
            }
            if let Some(time) = &mut time {
                time.tick();
            }
        }
    }

    fn push(&self, i: u64, batch: &mut RecordBatch) {
        match self.config.mode {
            GeneratorMode::Sequence => self.push_sequence(i..i + 1, batch),
            GeneratorMode::Words => {
                let line = words_line(self.config.seed, i);
                batch.push(b"", line.as_bytes(), self.timestamp(i));
            }
            GeneratorMode::Logins => {
                let (address, event) = login_event(self.config.seed, self.config.keys, i);
                batch.push(address.as_bytes(), event.as_bytes(), self.timestamp(i));
            }
            GeneratorMode::Sensors => {
                let event = sensor_event(self.config.seed, self.config.shuffle_ms, i, self.config.events);
                batch.push(event.sensor.as_bytes(), event.value.to_string().as_bytes(), Some(event.timestamp));
            }
        }
    }
}

/// A restored range keeps the end it was read with, so a job file that
/// now bounds the generator differently would be silently ignored — an
/// unbounded range would never end, a larger `events` never be reached.
/// Refused instead, saying what to do.
fn check_bounds(events: Option<u64>, split: &SourceSplit) -> Result<(), ConnectorError> {
    let problem = match (events, split.end) {
        (Some(events), None) => format!("sets `events = {events}`, but the generator restored was unbounded"),
        (None, Some(end)) => format!("sets no `events`, but the generator restored reads up to event {end}"),
        (Some(events), Some(end)) if end > events => {
            format!("sets `events = {events}`, but the generator restored reads up to event {end}")
        }
        _ => return Ok(()),
    };
    Err(bounds_refused(problem))
}

/// A restored range is read on from its position: with other keys, another
/// mode or seed, the events from there on would not be those the restored
/// state counted the ones before from. Refused (ranges recorded before
/// their shape was are taken as they come).
fn check_shape(config: &GeneratorConfig, split: &SourceSplit) -> Result<(), ConnectorError> {
    if split.shape == 0 || split.shape == config.shape() {
        return Ok(());
    }
    Err(ConnectorError::Restore(
        "the job file's generator makes other events than the generator restored (its `keys`, `mode`, `seed`, \
         `events_per_ms`, `shuffle_ms` or `speed` changed), and the restored state counted the events before from \
         the old ones: set them back, or start the job afresh (without the savepoint or the old checkpoints)"
            .into(),
    ))
}

fn bounds_refused(problem: String) -> ConnectorError {
    ConnectorError::Restore(format!(
        "the job file {problem}, and a restored generator keeps the bounds it started with: set `events` back, \
         or start the job afresh (without the savepoint or the old checkpoints)"
    ))
}

impl Source for Generator {
    /// The range being read (with the next sequence number) and those queued.
    fn splits(&self) -> Vec<SourceSplit> {
        // An unbounded generator's ranges are spaces of 2^48 numbers: endless.
        let end = self.config.events.map(|_| self.end);
        let current = SourceSplit { id: self.range, next: self.next, end, shape: self.config.shape() };
        // A bounded range read to its end stays while nothing follows it
        // here: the range that ends at `events` is read last, so the
        // source's snapshot always holds that end (`RestoredSplits::last_end`).
        let done_last = end.is_some() && self.end > self.range && self.queued.is_empty();
        let current = (self.next < self.end || done_last).then_some(current);
        current.into_iter().chain(self.queued.iter().rev().copied()).collect()
    }

    fn poll(&mut self, batch: &mut RecordBatch, max: usize) -> Result<Poll, ConnectorError> {
        if !self.advance() {
            return Ok(Poll::Exhausted);
        }
        let count = (self.end - self.next).min(self.allowance(max) as u64);
        let events = self.next..self.next + count;
        match self.config.mode {
            GeneratorMode::Sequence => self.push_sequence(events, batch),
            _ => events.for_each(|i| self.push(i, batch)),
        }
        self.next += count;
        self.pace.took(count);
        Ok(Poll::Ready)
    }

    fn resume(&mut self) {
        self.pace.restart();
    }

    /// A bounded generator's events still to produce; an unbounded one has
    /// no end to be behind.
    fn backlog(&self) -> Option<Backlog> {
        self.config.events?;
        let current = self.end.saturating_sub(self.next);
        let queued: u64 = self.queued.iter().map(|split| split.end.unwrap_or(split.next).saturating_sub(split.next)).sum();
        Some(Backlog::records(current + queued))
    }
}

/// Event `i`'s timestamp, `i / per_ms`, kept as a quotient and remainder
/// that one event moves on by one.
struct EventClock {
    timestamp: i64,
    within: u64,
    per_ms: u64,
}

impl EventClock {
    fn new(i: u64, per_ms: u64) -> Self {
        EventClock { timestamp: (i / per_ms) as i64, within: i % per_ms, per_ms }
    }

    fn timestamp(&self) -> i64 {
        self.timestamp
    }

    fn tick(&mut self) {
        self.within += 1;
        if self.within == self.per_ms {
            self.within = 0;
            self.timestamp += 1;
        }
    }
}

/// A reading of the sensors mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SensorEvent {
    pub sensor: &'static str,
    pub timestamp: i64,
    pub value: f64,
}

/// Reading `n` in time order: sensor `n mod 3`, at tick `n / 3`.
fn sensor_reading(seed: u64, n: u64) -> SensorEvent {
    let tick = (n / SENSORS.len() as u64) as i64;
    let timestamp = SENSORS_EPOCH_MS + tick * SENSOR_TICK_MS;
    let sensor = SENSORS[(n % SENSORS.len() as u64) as usize];
    let value = match sensor {
        // Period exactly 1 s, aligned to whole seconds: every 1 s window of
        // event time sums to 0.
        "pressure" => (std::f64::consts::TAU * (timestamp.rem_euclid(1000) as f64) / 1000.0).sin(),
        "temp" => 20.0 + (splitmix64(seed ^ n) % 100) as f64 / 100.0,
        _ => ((timestamp / 5000) % 2) as f64,
    };
    SensorEvent { sensor, timestamp, value }
}

/// Event `i` of the sensors mode in emission order: readings are shuffled
/// within blocks spanning `shuffle_ms` of event time, so no event is more
/// than `shuffle_ms` out of order. With `total` events, the last block is cut
/// short so that exactly readings `0..total` are produced.
pub fn sensor_event(seed: u64, shuffle_ms: u64, i: u64, total: Option<u64>) -> SensorEvent {
    let block = (SENSORS.len() as u64 * shuffle_ms / SENSOR_TICK_MS as u64).max(1);
    let start = i / block * block;
    let end = total.map_or(start + block, |total| (start + block).min(total.max(i + 1)));
    let mut order: Vec<u64> = (start..end).collect();
    order.sort_by_key(|&n| splitmix64(seed ^ n.wrapping_mul(0x9e37_79b9)));
    sensor_reading(seed, order[(i - start) as usize])
}

/// Subtask `s` of `p` gets the `s`-th of `p` contiguous ranges of `0..total`.
fn split(total: u64, subtask: u32, parallelism: u32) -> (u64, u64) {
    let bound = |s: u32| (u128::from(total) * u128::from(s) / u128::from(parallelism)) as u64;
    (bound(subtask), bound(subtask + 1))
}

/// Event `i` of the `logins` mode: address `i mod keys` takes its
/// `i / keys`-th step through a session (login, auth-ok, access, access,
/// logout); a hash of (seed, i) makes 4% of events an invalid one and 5%
/// of those in an open session a second login.
pub fn login_event(seed: u64, keys: u64, i: u64) -> (String, &'static str) {
    const SESSION: [&str; 5] = ["login", "auth-ok", "access", "access", "logout"];
    const INVALID: [&str; 4] = ["access", "logout", "auth-ok", "auth-fail"];
    let keys = keys.max(1);
    let address = i % keys;
    let step = ((i / keys) % SESSION.len() as u64) as usize;
    let dice = splitmix64(seed ^ splitmix64(i));
    let event = match dice % 100 {
        0..=3 => INVALID[(dice >> 32) as usize % INVALID.len()],
        4..=8 if step >= 2 => "login",
        _ => SESSION[step],
    };
    (format!("10.{}.{}.{}", address >> 16 & 255, address >> 8 & 255, address & 255), event)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(events: u64) -> GeneratorConfig {
        GeneratorConfig {
            events: Some(events),
            mode: GeneratorMode::Sequence,
            keys: 3,
            rate: None,
            seed: 0,
            events_per_ms: None,
            shuffle_ms: 0,
            speed: None,
        }
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

    /// Keys, values and timestamps counted up across batches, from ranges
    /// that start anywhere, past powers of ten and the wrap of the key.
    #[test]
    fn sequence_events_counted_up_are_those_of_their_number() {
        let config = GeneratorConfig { keys: 7, events_per_ms: Some(3), ..config(2_100) };
        for (subtask, parallelism) in [(0, 1), (1, 3), (2, 3)] {
            for max in [1, 4, 1000] {
                let mut generator = Generator::new(config, subtask, parallelism);
                let (start, _) = split(2_100, subtask, parallelism);
                let mut batch = RecordBatch::new();
                while generator.poll(&mut batch, max).unwrap() == Poll::Ready {}
                for (n, event) in batch.iter().enumerate() {
                    let i = start + n as u64;
                    assert_eq!(event.key, (i % 7).to_string().as_bytes(), "event {i}");
                    assert_eq!(event.value, i.to_string().as_bytes(), "event {i}");
                    assert_eq!(event.timestamp, Some((i / 3) as i64), "event {i}");
                }
                assert_eq!(batch.len() as u64, split(2_100, subtask, parallelism).1 - start);
            }
        }
    }

    #[test]
    fn subtasks_split_the_range_without_gaps_or_overlap() {
        let mut all: Vec<String> = (0..3).flat_map(|s| drain(&mut Generator::new(config(10), s, 3))).map(|e| e.1).collect();
        all.sort_by_key(|v| v.parse::<u64>().unwrap());
        assert_eq!(all, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn restored_splits_are_read_from_where_they_were_at_any_parallelism() {
        let mut first: Vec<Generator> = (0..2).map(|s| Generator::new(config(20), s, 2)).collect();
        let mut seen: Vec<String> = Vec::new();
        for generator in &mut first {
            let mut batch = RecordBatch::new();
            generator.poll(&mut batch, 3).unwrap();
            seen.extend(batch.iter().map(|r| String::from_utf8(r.value.to_vec()).unwrap()));
        }
        let splits: Vec<SourceSplit> = first.iter().flat_map(|g| g.splits()).collect();
        assert_eq!(splits.len(), 2);
        for parallelism in [1, 3] {
            let mut all = seen.clone();
            for subtask in 0..parallelism {
                let mine = super::super::assign_splits(splits.clone(), subtask, parallelism);
                all.extend(drain(&mut Generator::from_splits(config(20), mine).unwrap()).into_iter().map(|e| e.1));
            }
            all.sort_by_key(|v| v.parse::<u64>().unwrap());
            assert_eq!(all, (0..20).map(|i| i.to_string()).collect::<Vec<_>>(), "at parallelism {parallelism}");
        }
    }

    /// A replayed generator restored halfway resumes its clock where the
    /// data left off: it produces at once, not after as long again.
    #[test]
    fn a_restored_replay_resumes_its_clock_where_it_left_off() {
        let replay = GeneratorConfig { mode: GeneratorMode::Sensors, speed: Some(1.0), ..config(600_000) };
        let fresh = Generator::new(replay, 0, 1);
        let mut batch = RecordBatch::new();
        let first = fresh.allowance(100);
        assert!((1..100).contains(&first), "the first readings are due at once, the next 10 ms later: {first}");
        let halfway = SourceSplit { id: 0, next: 300_000, end: Some(600_000), shape: replay.shape() };
        let restored = RestoredSplits { splits: vec![halfway], of: 1, known: vec![0], last_end: Some(600_000) };
        let mut restored = Generator::from_splits(replay, restored).unwrap();
        assert!(restored.allowance(100) >= 1, "1000 s of event time in, the next reading is due now");
        restored.poll(&mut batch, 100).unwrap();
        assert!(!batch.is_empty(), "produced at once");
    }

    #[test]
    fn a_bounded_generators_backlog_is_what_is_left_of_its_ranges() {
        let mut generator = Generator::new(config(20), 1, 2);
        assert_eq!(generator.backlog(), Some(Backlog::records(10)));
        generator.poll(&mut RecordBatch::new(), 3).unwrap();
        assert_eq!(generator.backlog(), Some(Backlog::records(7)));
        let both = super::super::assign_splits(Generator::new(config(20), 0, 1).splits(), 0, 1);
        let restored = RestoredSplits {
            splits: vec![both.splits[0], SourceSplit { id: 30, next: 35, end: Some(40), shape: 0 }],
            last_end: Some(40),
            ..both
        };
        let mut restored = Generator::from_splits(config(40), restored).unwrap();
        assert_eq!(restored.backlog(), Some(Backlog::records(25)), "its queued ranges count too");
        drain(&mut restored);
        assert_eq!(restored.backlog(), Some(Backlog::records(0)));
        assert_eq!(Generator::new(GeneratorConfig { events: None, ..config(1) }, 0, 1).backlog(), None, "no end, no backlog");
    }

    /// Restored ranges read on only with the events they were read with.
    #[test]
    fn restored_splits_of_another_generator_are_refused() {
        let mut generator = Generator::new(config(20), 0, 1);
        generator.poll(&mut RecordBatch::new(), 5).unwrap();
        let restored = super::super::assign_splits(generator.splits(), 0, 1);
        assert!(Generator::from_splits(GeneratorConfig { rate: Some(5.0), ..config(20) }, restored.clone()).is_ok(), "only paced otherwise");
        let error = Generator::from_splits(GeneratorConfig { keys: 7, ..config(20) }, restored.clone()).err().unwrap().to_string();
        assert!(error.contains("makes other events than the generator restored"), "{error}");
        let unrecorded = RestoredSplits { splits: restored.splits.iter().map(|s| SourceSplit { shape: 0, ..*s }).collect(), ..restored };
        assert!(Generator::from_splits(GeneratorConfig { keys: 7, ..config(20) }, unrecorded).is_ok(), "recorded before shapes were");
    }

    #[test]
    fn restored_splits_bounded_otherwise_than_the_job_file_are_refused() {
        let restore = |events, end| {
            let restored = super::super::assign_splits(vec![SourceSplit { id: 0, next: 5, end, shape: 0 }], 0, 1);
            Generator::from_splits(GeneratorConfig { events, ..config(0) }, restored).err().map(|e| e.to_string())
        };
        assert_eq!(restore(Some(20), Some(20)), None);
        let grown = restore(Some(30), Some(20)).expect("a limit beyond the generator's events");
        assert!(grown.contains("sets `events = 30`, but the generator restored was started with `events = 20`"), "{grown}");
        assert_eq!(restore(None, None), None);
        let unbounded = restore(Some(20), None).expect("an unbounded range under a limit");
        assert!(unbounded.contains("sets `events = 20`, but the generator restored was unbounded"), "{unbounded}");
        assert!(unbounded.contains("set `events` back, or start the job afresh"), "{unbounded}");
        let bounded = restore(None, Some(20)).expect("a bounded range without a limit");
        assert!(bounded.contains("sets no `events`"), "{bounded}");
        let beyond = restore(Some(10), Some(20)).expect("a range beyond the new limit");
        assert!(beyond.contains("started with `events = 20`"), "{beyond}");
        // The range that ends at `events` stays in the snapshot once read to
        // its end, so a limit raised after it is refused too.
        let mut last = Generator::new(config(20), 1, 2);
        drain(&mut last);
        assert_eq!(last.splits(), [SourceSplit { id: 10, next: 20, end: Some(20), shape: config(20).shape() }]);
        let mut first = Generator::new(config(20), 0, 2);
        drain(&mut first);
        assert_eq!(first.splits(), [SourceSplit { id: 0, next: 10, end: Some(10), shape: config(20).shape() }]);
        let both = super::super::assign_splits([first.splits(), last.splits()].concat(), 0, 1);
        assert_eq!(both.last_end, Some(20));
        assert!(Generator::from_splits(config(20), both.clone()).is_ok());
        assert!(Generator::from_splits(config(30), both).is_err(), "a limit raised after the source ended");
        assert_eq!(Generator::new(config(1), 0, 2).splits(), [], "an empty range is none");
    }

    #[test]
    fn sensor_events_are_shuffled_within_the_bound_and_cover_every_reading() {
        let events: Vec<SensorEvent> = (0..3000).map(|i| sensor_event(1, 100, i, Some(3000))).collect();
        let mut newest = i64::MIN;
        for event in &events {
            assert!(event.timestamp > newest.saturating_sub(100), "{event:?} is more than 100 ms behind {newest}");
            newest = newest.max(event.timestamp);
        }
        assert!(events.windows(2).any(|w| w[1].timestamp < w[0].timestamp), "some are out of order");
        let mut times: Vec<(i64, &str)> = events.iter().map(|e| (e.timestamp, e.sensor)).collect();
        times.sort();
        times.dedup();
        assert_eq!(times.len(), 3000, "every reading exactly once");
        let pressure_sum: f64 = events
            .iter()
            .filter(|e| e.sensor == "pressure" && e.timestamp < SENSORS_EPOCH_MS + 1000)
            .map(|e| e.value)
            .sum();
        assert!(pressure_sum.abs() < 1e-9, "a second of pressure sums to 0: {pressure_sum}");
        let mut cut: Vec<i64> = (0..1000).map(|i| sensor_event(1, 300, i, Some(1000)).timestamp).collect();
        cut.sort();
        assert_eq!(cut.last(), Some(&(SENSORS_EPOCH_MS + 333 * SENSOR_TICK_MS)), "a short last block stays within the total");
    }

    #[test]
    fn login_events_follow_sessions_per_address_with_some_invalid_ones() {
        let events: Vec<(String, &str)> = (0..10_000).map(|i| login_event(3, 10, i)).collect();
        assert_eq!(events[0].0, "10.0.0.0");
        assert_eq!(events[13].0, "10.0.0.3");
        let valid = events.iter().enumerate().filter(|(i, (_, e))| *e == ["login", "auth-ok", "access", "access", "logout"][i / 10 % 5]).count();
        assert!((8_500..9_800).contains(&valid), "mostly valid: {valid}");
        assert_eq!(login_event(3, 10, 77), login_event(3, 10, 77));
    }

    #[test]
    fn same_config_same_events() {
        assert_eq!(words_line(7, 123), words_line(7, 123));
        assert_ne!((0..20).map(|i| words_line(7, i)).collect::<Vec<_>>(), (0..20).map(|i| words_line(8, i)).collect::<Vec<_>>());
    }
}
