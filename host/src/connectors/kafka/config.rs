//! The `kafka` source and sink tables of a job file, and the librdkafka
//! client configurations made from them.
//!
//! ```toml
//! [[source]]
//! name = "orders"
//! type = "kafka"
//! brokers = "broker-1:9092,broker-2:9092"
//! topics = ["orders"]
//! start = "earliest"             # "latest", or start_timestamp_ms = …
//! bounded = false                # true: stop at the end offsets seen at start
//! rate = 10000                   # records/s at most (replay as a live stream)
//! timestamp = "record"           # event time: "record", "none", or
//! # timestamp_field = "ts"       # a field of the JSON payload (ms)
//! out_of_orderness_ms = 0
//! idle_timeout_ms = 5000         # a partition this quiet stops holding back event time
//! properties = { "security.protocol" = "SASL_SSL" }   # passed to librdkafka
//!
//! [[sink]]
//! name = "counts"
//! type = "kafka"
//! input = "count"
//! brokers = "broker-1:9092"
//! topic = "counts"
//! delivery = "exactly-once"      # or "at-least-once"
//! parallelism = 2                # writers; each has its own transactional id
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use serde::Deserialize;

/// Properties Weir sets itself: a job file that sets them would break the
/// exactly-once contract (or be silently overridden).
const MANAGED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "set `brokers` instead"),
    ("enable.auto.commit", "offsets are committed after each checkpoint"),
    ("enable.auto.offset.store", "offsets are committed after each checkpoint"),
    ("auto.offset.reset", "set `start` instead"),
    ("transactional.id", "set `transactional_id_prefix` instead"),
    ("enable.idempotence", "the sink enables it"),
    ("isolation.level", "the source reads committed records only"),
];

/// How long a broker may stay unreachable before the connector fails the job
/// (which the job's restart strategy may then restart).
const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// A `type = "kafka"` source table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSpec {
    pub name: String,
    /// Bootstrap servers, `host:port` separated by commas.
    pub brokers: String,
    /// The topics to read; their partitions are spread over the subtasks.
    pub topics: Vec<String>,
    /// Consumer group that offsets are committed to after each completed
    /// checkpoint, for monitoring only (default `weir-<source name>`):
    /// positions are restored from snapshots, never from the group.
    pub group_id: Option<String>,
    #[serde(default)]
    pub start: StartPosition,
    /// `start = "timestamp"`: the first record at or after this time (ms).
    pub start_timestamp_ms: Option<i64>,
    /// Stop at the end offsets of the partitions when the job first starts.
    #[serde(default)]
    pub bounded: bool,
    #[serde(default)]
    pub timestamp: TimestampSource,
    /// Event time from this field of a JSON payload (ms since the epoch).
    pub timestamp_field: Option<String>,
    pub parallelism: Option<u32>,
    /// Records per second at most over all subtasks (as fast as possible
    /// if absent): to replay a topic as a live stream.
    pub rate: Option<f64>,
    #[serde(default)]
    pub out_of_orderness_ms: u64,
    pub idle_timeout_ms: Option<u64>,
    pub watermark_alignment: Option<crate::job::AlignmentSpec>,
    /// How long the brokers may be unreachable before the job fails.
    pub timeout_ms: Option<u64>,
    /// librdkafka properties passed through (security, tuning).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// Where a source without a snapshot starts reading each partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartPosition {
    #[default]
    Earliest,
    Latest,
    /// At `start_timestamp_ms`.
    Timestamp,
}

/// Where a Kafka record's event time comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimestampSource {
    /// The record's timestamp (create or log-append time).
    #[default]
    Record,
    /// No event time.
    None,
}

/// A `type = "kafka"` sink table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkSpec {
    pub name: String,
    pub input: String,
    pub brokers: String,
    pub topic: String,
    #[serde(default)]
    pub delivery: Delivery,
    /// Subtasks writing in parallel (default: the job's parallelism).
    pub parallelism: Option<u32>,
    /// Transactional ids are `<prefix>-<subtask>`; default
    /// `weir-<job>-<sink>`. Two jobs must never share one.
    pub transactional_id_prefix: Option<String>,
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// What a Kafka sink guarantees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// One transaction per checkpoint, committed when it completes.
    #[default]
    ExactlyOnce,
    /// Records are sent at once and flushed at each checkpoint; a failure
    /// may send some again.
    AtLeastOnce,
}

impl KafkaSourceSpec {
    pub fn watermark_settings(&self) -> crate::dataflow::WatermarkSettings {
        crate::dataflow::WatermarkSettings::from_ms(self.out_of_orderness_ms, self.idle_timeout_ms)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
    }

    pub fn group_id(&self) -> String {
        self.group_id.clone().unwrap_or_else(|| format!("weir-{}", self.name))
    }

    /// Checks what Weir relies on; the message names the field to fix.
    pub fn validate(&self) -> Result<(), String> {
        let what = format!("kafka source `{}`", self.name);
        check_brokers(&what, &self.brokers)?;
        check_properties(&what, &self.properties)?;
        if self.topics.is_empty() || self.topics.iter().any(|t| t.is_empty()) {
            return Err(format!("{what}: `topics` must list at least one topic name"));
        }
        match (self.start, self.start_timestamp_ms) {
            (StartPosition::Timestamp, None) => {
                Err(format!("{what}: start = \"timestamp\" needs `start_timestamp_ms` (ms since the Unix epoch)"))
            }
            (StartPosition::Earliest | StartPosition::Latest, Some(_)) => {
                Err(format!("{what}: `start_timestamp_ms` is only read with start = \"timestamp\""))
            }
            _ => Ok(()),
        }
    }

    /// The consumer's configuration: assigned partitions, no automatic
    /// commits, committed records only.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = base_config(&self.brokers, &self.properties, self.timeout());
        config
            .set("group.id", self.group_id())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            // An offset to resume from that retention deleted is an error,
            // not a silent jump.
            .set("auto.offset.reset", "error")
            .set("isolation.level", "read_committed");
        config
    }
}

impl KafkaSinkSpec {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
    }

    /// The transactional id of `subtask` of the sink of `job`.
    pub fn transactional_id(&self, job: &str, subtask: u32) -> String {
        let prefix = self.transactional_id_prefix.clone().unwrap_or_else(|| format!("weir-{job}-{}", self.name));
        format!("{prefix}-{subtask}")
    }

    pub fn validate(&self) -> Result<(), String> {
        let what = format!("kafka sink `{}`", self.name);
        check_brokers(&what, &self.brokers)?;
        check_properties(&what, &self.properties)?;
        if self.topic.is_empty() {
            return Err(format!("{what}: `topic` must name the topic to write to"));
        }
        Ok(())
    }

    /// A producer's configuration; idempotent always, transactional with
    /// `transactional_id`.
    pub fn client_config(&self, transactional_id: Option<&str>) -> ClientConfig {
        let mut config = base_config(&self.brokers, &self.properties, self.timeout());
        config.set("enable.idempotence", "true").set("message.timeout.ms", self.timeout().as_millis().to_string());
        if let Some(id) = transactional_id {
            config
                .set("transactional.id", id)
                .set("transaction.timeout.ms", self.timeout().max(Duration::from_secs(60)).as_millis().to_string());
        }
        config
    }

    /// A consumer that reads the sink's commit markers in `group` (see
    /// `commit.rs`).
    pub fn marker_config(&self, group: &str) -> ClientConfig {
        let mut config = base_config(&self.brokers, &self.properties, self.timeout());
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        config
    }
}

fn base_config(brokers: &str, properties: &BTreeMap<String, String>, timeout: Duration) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    config
        .set("bootstrap.servers", brokers)
        .set("socket.timeout.ms", timeout.min(Duration::from_secs(30)).as_millis().to_string())
        .set("reconnect.backoff.ms", "100")
        .set("reconnect.backoff.max.ms", "5000")
        .set("log_level", "3");
    config
}

fn check_brokers(what: &str, brokers: &str) -> Result<(), String> {
    let valid = |b: &str| b.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if brokers.split(',').map(str::trim).all(valid) {
        return Ok(());
    }
    Err(format!("{what}: brokers = {brokers:?} must list `host:port` addresses separated by commas"))
}

fn check_properties(what: &str, properties: &BTreeMap<String, String>) -> Result<(), String> {
    for key in properties.keys() {
        if let Some((_, why)) = MANAGED_PROPERTIES.iter().find(|(managed, _)| managed == key) {
            return Err(format!("{what}: property `{key}` is managed by Weir ({why}); remove it from `properties`"));
        }
    }
    // librdkafka checks names and values; do it now, with the table's name.
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    config
        .create::<rdkafka::consumer::BaseConsumer>()
        .map(drop)
        .map_err(|error| format!("{what}: invalid `properties`: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(toml_text: &str) -> Result<KafkaSourceSpec, String> {
        let spec: KafkaSourceSpec = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        spec.validate().map(|()| spec)
    }

    #[test]
    fn a_valid_source_table_and_its_defaults() {
        let spec = source("name = \"in\"\nbrokers = \"127.0.0.1:9092\"\ntopics = [\"a\", \"b\"]").unwrap();
        assert_eq!(spec.start, StartPosition::Earliest);
        assert_eq!(spec.group_id(), "weir-in");
        assert_eq!(spec.timeout(), Duration::from_secs(60));
    }

    #[test]
    fn bad_tables_name_the_field_to_fix() {
        let base = "name = \"in\"\ntopics = [\"a\"]\n";
        let error = source(&format!("{base}brokers = \"nowhere\"")).unwrap_err();
        assert!(error.contains("host:port"), "{error}");
        let error = source(&format!("{base}brokers = \"h:1\"\nstart = \"timestamp\"")).unwrap_err();
        assert!(error.contains("start_timestamp_ms"), "{error}");
        let error =
            source(&format!("{base}brokers = \"h:1\"\nproperties = {{ \"enable.auto.commit\" = \"true\" }}")).unwrap_err();
        assert!(error.contains("managed by Weir"), "{error}");
        let error = source(&format!("{base}brokers = \"h:1\"\nproperties = {{ \"no.such.thing\" = \"1\" }}")).unwrap_err();
        assert!(error.contains("invalid `properties`") && error.contains("no.such.thing"), "{error}");
    }

    #[test]
    fn transactional_ids_are_stable_per_job_sink_and_subtask() {
        let spec: KafkaSinkSpec =
            toml::from_str("name = \"out\"\ninput = \"x\"\nbrokers = \"h:1\"\ntopic = \"t\"").unwrap();
        assert_eq!(spec.transactional_id("job", 3), "weir-job-out-3");
        assert_eq!(spec.delivery, Delivery::ExactlyOnce);
    }
}
