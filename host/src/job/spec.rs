//! The job file: TOML, deserialised strictly (unknown fields are errors).
//!
//! ```toml
//! name = "word-count"
//! parallelism = 2            # default for every source and operator
//! max_parallelism = 128      # key groups; fixed for the life of the job
//!
//! [[source]]
//! name = "lines"
//! type = "file"              # or "generator", "kafka" (see connectors::kafka)
//! path = "words.txt"         # relative to the job file
//! format = "text"            # or "json"
//! rate = 1000                # lines per second at most (optional)
//!
//! [[operator]]
//! uid = "count"              # stable identity: state is stored under it
//! plugin = "word_count.wasm" # relative to the job file
//! inputs = ["tokenize"]      # sources, operators, or `uid.side-output`
//! key_by = true              # partition inputs by event key
//! broadcast = ["rules"]      # inputs every subtask receives in full
//! memory_limit_mb = 512
//! call_timeout_ms = 10000     # 0: no deadline (a trusted plugin)
//! timer_limit = 1000000      # pending timers per subtask; 0: no bound
//! config = { lowercase = true }
//!
//! [[sink]]
//! name = "out"
//! type = "stdout"            # "file" or "files" (with `path`), "discard", "kafka"
//! input = "count"
//! format = "kv"              # kv | value | json
//! ```
//!
//! Checkpoints and recovery (all optional):
//!
//! ```toml
//! state_backend = "rocksdb"       # or "memory" (the default)
//! [rocksdb]                       # per operator subtask, in MiB (optional)
//! block_cache_mb = 32
//! write_buffer_mb = 16            # per memtable; two may exist at once
//! hot_entries_mb = 16             # the write-back layer of hot entries
//! checkpoint_dir = "checkpoints"  # enables checkpoints; relative to the job file
//! checkpoint_interval_ms = 1000
//! checkpoints_retained = 3
//! checkpoint_timeout_ms = 120000  # a checkpoint not complete by then is abandoned
//! tolerable_failed_checkpoints = 3 # failed in a row, then the job fails over
//!
//! [restart]
//! strategy = "fixed-delay"        # or "exponential-backoff", "none"
//! max_attempts = 3
//! delay_ms = 1000                 # backoff: the first delay, doubling
//! max_delay_ms = 30000            # backoff: the longest delay
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

pub use crate::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec};
use crate::connectors::kafka::TimestampSource;

/// A whole job file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    pub parallelism: Option<u32>,
    pub max_parallelism: Option<u32>,
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceSpec>,
    #[serde(default, rename = "operator")]
    pub operators: Vec<OperatorSpec>,
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkSpec>,
    #[serde(default)]
    pub state_backend: crate::state::BackendKind,
    /// Memory budgets of each operator subtask's RocksDB.
    pub rocksdb: Option<crate::state::RocksDbMemory>,
    pub checkpoint_dir: Option<PathBuf>,
    pub checkpoint_interval_ms: Option<u64>,
    pub checkpoints_retained: Option<usize>,
    pub checkpoint_timeout_ms: Option<u64>,
    /// Checkpoints that may fail in a row before the job fails over.
    pub tolerable_failed_checkpoints: Option<u32>,
    pub restart: Option<RestartSpec>,
}

/// The `[restart]` table: what to do when a task fails.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RestartTable")]
pub struct RestartSpec {
    pub strategy: RestartStrategy,
    pub max_attempts: u32,
    pub delay_ms: u64,
    pub max_delay_ms: u64,
}

/// The `[restart]` table as written: a setting the strategy does not use
/// is an error, not ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestartTable {
    strategy: RestartStrategy,
    max_attempts: Option<u32>,
    delay_ms: Option<u64>,
    max_delay_ms: Option<u64>,
}

impl TryFrom<RestartTable> for RestartSpec {
    type Error = String;

    fn try_from(table: RestartTable) -> Result<Self, String> {
        let set = [
            ("max_attempts", table.max_attempts.is_some()),
            ("delay_ms", table.delay_ms.is_some()),
            ("max_delay_ms", table.max_delay_ms.is_some()),
        ];
        let used: &[&str] = match table.strategy {
            RestartStrategy::None => &[],
            RestartStrategy::FixedDelay => &["max_attempts", "delay_ms"],
            RestartStrategy::ExponentialBackoff => &["max_attempts", "delay_ms", "max_delay_ms"],
        };
        if let Some((field, _)) = set.iter().find(|(field, set)| *set && !used.contains(field)) {
            return Err(format!(
                "`{field}` does nothing with strategy = \"{}\": remove it, or choose a strategy that uses it",
                table.strategy.word()
            ));
        }
        Ok(RestartSpec {
            strategy: table.strategy,
            max_attempts: table.max_attempts.unwrap_or_else(default_attempts),
            delay_ms: table.delay_ms.unwrap_or_else(default_delay),
            max_delay_ms: table.max_delay_ms.unwrap_or_else(default_max_delay),
        })
    }
}

/// How failed jobs are restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartStrategy {
    /// Fail the job at the first task failure.
    None,
    /// Restart after `delay_ms`, up to `max_attempts` times.
    FixedDelay,
    /// Restart after `delay_ms`, doubling each time up to `max_delay_ms`.
    ExponentialBackoff,
}

impl RestartStrategy {
    /// As the job file writes it.
    fn word(self) -> &'static str {
        match self {
            RestartStrategy::None => "none",
            RestartStrategy::FixedDelay => "fixed-delay",
            RestartStrategy::ExponentialBackoff => "exponential-backoff",
        }
    }
}

impl RestartSpec {
    /// `strategy` with the table's default attempts and delays.
    pub fn with_defaults(strategy: RestartStrategy) -> Self {
        RestartSpec {
            strategy,
            max_attempts: default_attempts(),
            delay_ms: default_delay(),
            max_delay_ms: default_max_delay(),
        }
    }
}

fn default_attempts() -> u32 {
    3
}

fn default_delay() -> u64 {
    1000
}

fn default_max_delay() -> u64 {
    30_000
}

/// A `[[source]]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum SourceSpec {
    /// Lines of a file: text (each line a value) or JSON lines.
    File {
        name: String,
        path: PathBuf,
        #[serde(default)]
        format: FileFormat,
        /// Lines per second at most (as fast as possible if absent): to
        /// replay a file as a live stream.
        rate: Option<f64>,
        /// Watermarks lag the newest event timestamp by this much.
        #[serde(default)]
        out_of_orderness_ms: u64,
        /// After this long without records, the source stops holding back
        /// event time downstream until it produces again.
        idle_timeout_ms: Option<u64>,
        watermark_alignment: Option<AlignmentSpec>,
    },
    /// A deterministic, seekable generator: event `i` depends only on the
    /// configuration and `i`.
    Generator {
        name: String,
        /// How many events in all (unbounded if absent).
        events: Option<u64>,
        #[serde(default)]
        mode: GeneratorMode,
        /// Number of distinct keys (`sequence` mode: key = i mod keys;
        /// [`GENERATOR_KEYS`] when absent).
        keys: Option<u64>,
        /// Events per second over all subtasks (as fast as possible if absent).
        rate: Option<f64>,
        #[serde(default)]
        seed: u64,
        parallelism: Option<u32>,
        /// `sequence` mode: event `i` gets timestamp `i / events_per_ms` ms
        /// (no timestamps if absent).
        events_per_ms: Option<u64>,
        /// `sensors` mode: how far (ms) events are shuffled out of
        /// timestamp order.
        #[serde(default)]
        shuffle_ms: u64,
        /// `sensors` mode: replay speed; events are emitted when the wall
        /// clock, sped up this much, reaches their timestamp (as fast as
        /// possible if absent).
        speed: Option<f64>,
        #[serde(default)]
        out_of_orderness_ms: u64,
        idle_timeout_ms: Option<u64>,
        watermark_alignment: Option<AlignmentSpec>,
    },
    /// Partitions of Kafka topics (see `connectors::kafka`).
    Kafka(KafkaSourceSpec),
}

impl SourceSpec {
    /// Numbers the TOML types allow but the source cannot run with (a
    /// rate of 0 would never produce an event).
    pub(crate) fn check_numbers(&self) -> Result<(), String> {
        let name = self.name();
        let positive = |field, value| positive(&format!("source `{name}`"), field, value, "as fast as possible");
        let at_least_one = |field: &str, value: Option<u64>| match value {
            Some(0) => Err(format!("source `{name}`: `{field}` must be at least 1")),
            _ => Ok(()),
        };
        match self {
            SourceSpec::File { rate, .. } => positive("rate", *rate),
            SourceSpec::Generator { keys, rate, events_per_ms, speed, .. } => {
                positive("rate", *rate)?;
                positive("speed", *speed)?;
                at_least_one("keys", *keys)?;
                at_least_one("events_per_ms", *events_per_ms)?;
                self.check_generator_mode()
            }
            SourceSpec::Kafka(_) => Ok(()),
        }
    }

    /// Refuses a generator setting that its mode does nothing with, so
    /// that a setting in the wrong place is not taken for one that works.
    fn check_generator_mode(&self) -> Result<(), String> {
        let SourceSpec::Generator { name, mode, keys, seed, events_per_ms, shuffle_ms, speed, .. } = self else {
            return Ok(());
        };
        use GeneratorMode::*;
        let unused = match mode {
            Sequence if *seed != 0 => Some("seed"),
            Words | Sensors if keys.is_some() => Some("keys"),
            Sensors if events_per_ms.is_some() => Some("events_per_ms"),
            Sequence | Words | Logins if *shuffle_ms != 0 => Some("shuffle_ms"),
            _ => None,
        };
        if let Some(setting) = unused {
            let mode = format!("{mode:?}").to_lowercase();
            return Err(format!(
                "source `{name}`: `{setting}` does nothing in `{mode}` mode: remove it, or choose a mode that uses it \
                 (see the generator's settings in docs/job-file.md)"
            ));
        }
        if speed.is_some() && !self.has_event_time() {
            return Err(format!(
                "source `{name}` has `speed`, but its events have no event time to replay at that speed: give them \
                 timestamps (`events_per_ms`) or remove `speed` (and pace it with `rate`)"
            ));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        match self {
            SourceSpec::File { name, .. } | SourceSpec::Generator { name, .. } => name,
            SourceSpec::Kafka(spec) => &spec.name,
        }
    }

    /// How the source's subtasks make watermarks.
    pub fn watermark_settings(&self) -> crate::dataflow::WatermarkSettings {
        let (SourceSpec::File { out_of_orderness_ms, idle_timeout_ms, .. }
        | SourceSpec::Generator { out_of_orderness_ms, idle_timeout_ms, .. }
        | SourceSpec::Kafka(KafkaSourceSpec { out_of_orderness_ms, idle_timeout_ms, .. })) = self;
        crate::dataflow::WatermarkSettings::from_ms(*out_of_orderness_ms, *idle_timeout_ms)
    }

    /// Whether the source can give its events a timestamp: what its
    /// table says, not whether each record will have one (a JSON line or
    /// payload may lack its field).
    pub fn has_event_time(&self) -> bool {
        match self {
            SourceSpec::File { format, .. } => *format == FileFormat::Json,
            SourceSpec::Generator { mode, events_per_ms, .. } => *mode == GeneratorMode::Sensors || events_per_ms.is_some(),
            SourceSpec::Kafka(kafka) => kafka.timestamp_field.is_some() || kafka.timestamp != TimestampSource::None,
        }
    }

    /// The source's `watermark_alignment` table, if it has one.
    pub fn watermark_alignment(&self) -> Option<&AlignmentSpec> {
        let (SourceSpec::File { watermark_alignment, .. }
        | SourceSpec::Generator { watermark_alignment, .. }
        | SourceSpec::Kafka(KafkaSourceSpec { watermark_alignment, .. })) = self;
        watermark_alignment.as_ref()
    }
}

/// A source's `watermark_alignment` table: its subtasks (and those of the
/// other sources of its group) wait while they are more than `max_drift_ms`
/// ahead of the slowest in event time (see [`crate::dataflow::AlignedSource`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlignmentSpec {
    pub max_drift_ms: u64,
    /// Sources with the same group align with each other (default: the
    /// source's own name, so that only its subtasks align).
    pub group: Option<String>,
}

impl AlignmentSpec {
    /// The group of a source named `source` with this table.
    pub fn group_of<'a>(&'a self, source: &'a str) -> &'a str {
        self.group.as_deref().unwrap_or(source)
    }
}

/// Fails if a setting `field` of `node` is set to other than a positive,
/// finite number; `left_out` says what leaving it out means.
fn positive(node: &str, field: &str, value: Option<f64>, left_out: &str) -> Result<(), String> {
    match value {
        Some(v) if !(v > 0.0 && v.is_finite()) => {
            Err(format!("{node}: `{field} = {v}` must be a positive number (or left out: {left_out})"))
        }
        _ => Ok(()),
    }
}

/// A `sequence` or `logins` generator's number of keys when its table
/// gives none.
pub const GENERATOR_KEYS: u64 = 100;

/// How a file source reads lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// Each line is the value of an unkeyed event.
    #[default]
    Text,
    /// Each line is `{"key": …, "value": …, "timestamp": ms}` (key and
    /// timestamp optional; strings are taken as UTF-8, other JSON as its text).
    Json,
}

/// What a generator produces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GeneratorMode {
    /// key = i mod keys, value = i, both as decimal text.
    #[default]
    Sequence,
    /// Unkeyed lines of words drawn from a fixed vocabulary.
    Words,
    /// The classic sensor demo: sensors `temp`, `pressure` (a sine wave with
    /// a period of exactly 1 s, aligned to whole seconds) and `door` (1 open,
    /// 0 closed), each read every 10 ms of event time.
    Sensors,
    /// Session events for the fraud-detection demo: key = one of `keys`
    /// source addresses, value = `login`, `auth-ok`, `auth-fail`, `access`
    /// or `logout` — mostly in valid session order, with invalid
    /// transitions and second logins mixed in. Address `a` gets events
    /// `a, a + keys, a + 2 keys …`: give the source `parallelism = 1` so
    /// that each address's events stay in order.
    Logins,
}

/// An `[[operator]]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSpec {
    pub uid: String,
    pub plugin: PathBuf,
    pub inputs: Vec<String>,
    /// Inputs delivered to every subtask; their input indices follow those
    /// of `inputs`. Only batches from these may write broadcast state.
    #[serde(default)]
    pub broadcast: Vec<String>,
    #[serde(default)]
    pub key_by: bool,
    pub parallelism: Option<u32>,
    #[serde(default)]
    pub config: BTreeMap<String, toml::Value>,
    pub memory_limit_mb: Option<u64>,
    pub call_timeout_ms: Option<u64>,
    pub timer_limit: Option<u64>,
}

/// A `[[sink]]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkSpec {
    /// Prints events on standard output.
    Stdout {
        name: String,
        input: String,
        #[serde(default)]
        format: OutputFormat,
    },
    /// Writes events to a file, one per line.
    File {
        name: String,
        input: String,
        path: PathBuf,
        #[serde(default)]
        format: OutputFormat,
    },
    /// Writes part files into the directory `path`, each made visible
    /// when the checkpoint covering its events completes: exactly once.
    /// A part is committed at every checkpoint, or, with a rolling policy,
    /// at the first checkpoint after it has been open `roll_interval_ms`
    /// or grown to `roll_size_mb`.
    Files {
        name: String,
        input: String,
        path: PathBuf,
        #[serde(default)]
        format: OutputFormat,
        roll_interval_ms: Option<u64>,
        roll_size_mb: Option<u64>,
    },
    /// Counts events and drops them (benchmarks), optionally no faster
    /// than `rate` events per second (to test backpressure).
    Discard { name: String, input: String, rate: Option<f64> },
    /// A Kafka topic; exactly once by default (see `connectors::kafka`).
    Kafka(KafkaSinkSpec),
}

impl SinkSpec {
    pub fn name(&self) -> &str {
        match self {
            SinkSpec::Stdout { name, .. }
            | SinkSpec::File { name, .. }
            | SinkSpec::Files { name, .. }
            | SinkSpec::Discard { name, .. } => name,
            SinkSpec::Kafka(spec) => &spec.name,
        }
    }

    /// Numbers the TOML types allow but the sink cannot run with.
    pub(crate) fn check_numbers(&self) -> Result<(), String> {
        if let SinkSpec::Discard { name, rate, .. } = self {
            positive(&format!("sink `{name}`"), "rate", *rate, "no limit")?;
        }
        let SinkSpec::Files { name, roll_interval_ms, roll_size_mb, .. } = self else { return Ok(()) };
        for (field, value) in [("roll_interval_ms", roll_interval_ms), ("roll_size_mb", roll_size_mb)] {
            if *value == Some(0) {
                return Err(format!(
                    "sink `{name}`: `{field}` must be at least 1 (leave both rolling settings out to commit a part at \
                     every checkpoint)"
                ));
            }
        }
        if roll_size_mb.is_some_and(|mb| mb > crate::connectors::RollingPolicy::LARGEST_SIZE_MB) {
            return Err(format!(
                "sink `{name}`: `roll_size_mb` may be at most {} (1 PiB)",
                crate::connectors::RollingPolicy::LARGEST_SIZE_MB
            ));
        }
        Ok(())
    }

    pub fn input(&self) -> &str {
        match self {
            SinkSpec::Stdout { input, .. }
            | SinkSpec::File { input, .. }
            | SinkSpec::Files { input, .. }
            | SinkSpec::Discard { input, .. } => input,
            SinkSpec::Kafka(spec) => &spec.input,
        }
    }
}

/// How a sink writes an event as a line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// `key<TAB>value`
    #[default]
    Kv,
    /// The value only.
    Value,
    /// `{"key": "…", "value": "…", "timestamp": ms}`
    Json,
}
