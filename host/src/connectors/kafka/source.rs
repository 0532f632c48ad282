//! The Kafka source: partitions assigned by Weir, offsets in snapshots.
//!
//! Partitions are not handed out by a consumer group: each subtask reads the
//! partitions Weir assigns it (`assign`, as Flink does), so that a restore
//! puts every partition back at exactly the offset its snapshot recorded,
//! at any parallelism. A partition is a [`SourceSplit`] whose id is the
//! topic's CRC-32 in the upper half and the partition number in the lower,
//! and whose position is the offset of the next record. Offsets go to the
//! consumer group only after a checkpoint completes, for lag monitoring.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, Timestamp};
use rdkafka::metadata::Metadata;
use rdkafka::client::Client;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tracing::{info, warn};

use super::closing::GroupConsumer;
use super::config::{KafkaSourceSpec, StartPosition, TimestampSource};
use super::lag::last_seen_end;
use crate::connectors::pace::Pace;
use crate::connectors::{Backlog, ConnectorError, PartitionBacklog, Poll, RestoredSplits, Source, SourceSplit};
use crate::dataflow::{Cancel, RecordBatch, Signal, SplitClock};

/// How long one poll waits for records when none are buffered.
const POLL_WAIT: Duration = Duration::from_millis(20);

/// The split id of `partition` of `topic`.
pub fn split_id(topic: &str, partition: i32) -> u64 {
    (u64::from(crc32fast::hash(topic.as_bytes())) << 32) | partition as u32 as u64
}

/// The last error librdkafka reported, shared with the consumer's thread.
#[derive(Default)]
pub(super) struct ErrorLog {
    last: Mutex<Option<(KafkaError, String)>>,
}

impl ErrorLog {
    pub(super) fn take(&self) -> Option<(KafkaError, String)> {
        self.last.lock().expect("error log").take()
    }

    /// Records `error`; a fatal one (credentials) is kept over the
    /// transport errors that follow it, so that it is the one reported.
    fn record(&self, error: KafkaError, reason: &str) {
        let mut last = self.last.lock().expect("error log");
        if !last.as_ref().is_some_and(|(kept, _)| is_fatal(kept)) {
            *last = Some((error, reason.to_owned()));
        }
    }
}

/// Receives librdkafka's errors (broker down, authentication failed) so the
/// source can decide when they become the job's failure.
#[derive(Clone, Default)]
pub(super) struct Context {
    pub(super) errors: Arc<ErrorLog>,
}

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        warn!(%error, reason, "kafka client error");
        self.errors.record(error, reason);
    }

    /// Logs as librdkafka's clients do by default — and takes requests
    /// that timed out for an error: a broker that accepts connections but
    /// does not answer (hung, or behind a network that drops packets)
    /// causes no connection errors, only these, and would otherwise never
    /// count as unreachable.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if facility == "REQTMOUT" {
            self.errors.record(KafkaError::Global(RDKafkaErrorCode::RequestTimedOut), message);
        }
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {facility} {message}")
            }
            RDKafkaLogLevel::Warning => warn!(target: "librdkafka", "librdkafka: {facility} {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => info!(target: "librdkafka", "librdkafka: {facility} {message}"),
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {facility} {message}"),
        }
    }
}

impl ConsumerContext for Context {}

/// One assigned partition.
struct Partition {
    topic: String,
    partition: i32,
    next: i64,
    /// Bounded: the offset it stops before.
    end: Option<i64>,
    /// Whether the log said it resumes past the partition's end.
    said_past_end: std::cell::Cell<bool>,
}

impl Partition {
    fn finished(&self) -> bool {
        self.end.is_some_and(|end| self.next >= end)
    }

    fn split(&self) -> SourceSplit {
        SourceSplit {
            id: split_id(&self.topic, self.partition),
            next: self.next as u64,
            end: self.end.map(|e| e as u64),
            shape: 0,
        }
    }
}

/// A subtask of a Kafka source.
pub struct KafkaSource {
    spec: KafkaSourceSpec,
    consumer: GroupConsumer<Context>,
    errors: Arc<ErrorLog>,
    partitions: Vec<Partition>,
    by_name: HashMap<(String, i32), usize>,
    clock: SplitClock,
    /// Since when the brokers have been failing, and the last error.
    failing: Option<(Instant, String)>,
    last_probe: Instant,
    /// This subtask's share of `rate`.
    pace: Pace,
}

impl KafkaSource {
    /// Opens subtask `subtask` of `parallelism`: from the start position, or
    /// at the `restored` offsets (partitions new since then start afresh).
    pub fn open(
        spec: &KafkaSourceSpec,
        subtask: u32,
        parallelism: u32,
        restored: Option<RestoredSplits>,
        stop: &Cancel,
    ) -> Result<Self, ConnectorError> {
        let context = Context::default();
        let errors = context.errors.clone();
        let consumer: BaseConsumer<Context> = spec
            .client_config()
            .create_with_context(context)
            .map_err(|error| kafka_error(&spec.name, &spec.brokers, error))?;
        let consumer = GroupConsumer::new(consumer, spec.timeout(), format!("kafka source `{}`", spec.name));
        // A metadata request that fails for want of credentials only times
        // out; the error librdkafka reported on the way (delivered when the
        // client is polled) says why.
        let current = list_partitions(&consumer, spec, stop).map_err(|error| {
            let _ = consumer.poll(Duration::from_millis(50));
            match errors.take() {
                Some((cause, _)) if is_fatal(&cause) => kafka_error(&spec.name, &spec.brokers, cause),
                _ => error,
            }
        })?;
        let mut source = KafkaSource {
            spec: spec.clone(),
            consumer,
            errors,
            partitions: Vec::new(),
            by_name: HashMap::new(),
            clock: SplitClock::new(Default::default(), 0),
            failing: None,
            last_probe: Instant::now(),
            pace: Pace::new(spec.rate.map(|rate| rate / f64::from(parallelism))),
        };
        let (restored, fresh) = source.plan(current, subtask, parallelism, restored);
        for split in restored {
            source.add_restored(split)?;
        }
        for (topic, partition) in fresh {
            source.add_fresh(topic, partition)?;
        }
        source.clock = SplitClock::new(spec.watermark_settings(), source.partitions.len());
        source.assign()?;
        let assigned: Vec<String> = source.partitions.iter().map(|p| format!("{}/{}@{}", p.topic, p.partition, p.next)).collect();
        info!(source = %spec.name, subtask, partitions = ?assigned, "kafka source assigned");
        Ok(source)
    }

    /// Which restored splits this subtask resumes, and which partitions
    /// (not in any snapshot) it starts afresh: the k-th of those, in
    /// (topic, partition) order, goes to subtask k mod parallelism.
    fn plan(
        &self,
        current: Vec<(String, i32)>,
        subtask: u32,
        parallelism: u32,
        restored: Option<RestoredSplits>,
    ) -> (Vec<(String, i32, SourceSplit)>, Vec<(String, i32)>) {
        let names: HashMap<u64, (String, i32)> = current.iter().map(|(t, p)| (split_id(t, *p), (t.clone(), *p))).collect();
        let (mine, known) = match restored {
            Some(restored) => (restored.splits, restored.known),
            None => (Vec::new(), Vec::new()),
        };
        let mut resumed = Vec::new();
        for split in mine {
            match names.get(&split.id) {
                Some((topic, partition)) => resumed.push((topic.clone(), *partition, split)),
                None => warn!(
                    source = %self.spec.name,
                    split = split.id,
                    "a partition in the snapshot is not among the topics' partitions now; it is not read"
                ),
            }
        }
        let fresh = current
            .into_iter()
            .filter(|(t, p)| !known.contains(&split_id(t, *p)))
            .enumerate()
            .filter(|(k, _)| *k as u32 % parallelism == subtask)
            .map(|(_, tp)| tp)
            .collect();
        (resumed, fresh)
    }

    fn add_restored(&mut self, (topic, partition, split): (String, i32, SourceSplit)) -> Result<(), ConnectorError> {
        let mut end = split.end.map(|e| e as i64);
        if self.spec.bounded && end.is_none() {
            end = Some(self.watermarks(&topic, partition)?.1);
        }
        self.push(topic, partition, split.next as i64, end);
        Ok(())
    }

    fn add_fresh(&mut self, topic: String, partition: i32) -> Result<(), ConnectorError> {
        let (low, high) = self.watermarks(&topic, partition)?;
        let start = match self.spec.start {
            StartPosition::Earliest => low,
            StartPosition::Latest => high,
            StartPosition::Timestamp => self.offset_for_time(&topic, partition, high)?,
        };
        self.push(topic, partition, start, self.spec.bounded.then_some(high));
        Ok(())
    }

    fn push(&mut self, topic: String, partition: i32, next: i64, end: Option<i64>) {
        self.by_name.insert((topic.clone(), partition), self.partitions.len());
        self.partitions.push(Partition { topic, partition, next, end, said_past_end: Default::default() });
    }

    fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), ConnectorError> {
        self.consumer
            .fetch_watermarks(topic, partition, self.spec.timeout())
            .map_err(|error| kafka_error(&self.spec.name, &self.spec.brokers, error))
    }

    /// The first offset at or after `start_timestamp_ms`; the end if none.
    fn offset_for_time(&self, topic: &str, partition: i32, high: i64) -> Result<i64, ConnectorError> {
        let mut query = TopicPartitionList::new();
        let at = self.spec.start_timestamp_ms.unwrap_or(0);
        query
            .add_partition_offset(topic, partition, Offset::Offset(at))
            .map_err(|error| kafka_error(&self.spec.name, &self.spec.brokers, error))?;
        let found = self
            .consumer
            .offsets_for_times(query, self.spec.timeout())
            .map_err(|error| kafka_error(&self.spec.name, &self.spec.brokers, error))?;
        Ok(match found.find_partition(topic, partition).map(|e| e.offset()) {
            Some(Offset::Offset(offset)) => offset,
            _ => high,
        })
    }

    /// Assigns the partitions still to be read at their next offsets.
    fn assign(&mut self) -> Result<(), ConnectorError> {
        let mut list = TopicPartitionList::new();
        for (index, p) in self.partitions.iter().enumerate() {
            if p.finished() {
                self.clock.finished(index);
                continue;
            }
            list.add_partition_offset(&p.topic, p.partition, Offset::Offset(p.next))
                .map_err(|error| kafka_error(&self.spec.name, &self.spec.brokers, error))?;
        }
        self.consumer.assign(&list).map_err(|error| kafka_error(&self.spec.name, &self.spec.brokers, error))
    }

    fn exhausted(&self) -> bool {
        self.spec.bounded && self.partitions.iter().all(Partition::finished)
    }

    /// A bounded partition whose last offsets are transaction markers
    /// (never delivered) is finished once the consumer's position passes
    /// its end.
    fn finish_by_position(&mut self) {
        if !self.spec.bounded {
            return;
        }
        let Ok(positions) = self.consumer.position() else { return };
        for (index, p) in self.partitions.iter_mut().enumerate() {
            if p.finished() {
                continue;
            }
            if let Some(Offset::Offset(position)) = positions.find_partition(&p.topic, p.partition).map(|e| e.offset())
                && p.end.is_some_and(|end| position >= end)
            {
                p.next = position;
                self.clock.finished(index);
            }
        }
    }

    /// Whether the brokers this subtask fetches from answer: the leader of
    /// a partition it reads (the connection fetches use — a bootstrap
    /// broker may answer while the leaders' advertised addresses cannot be
    /// reached), or any broker when it reads none.
    fn brokers_answer(&self) -> bool {
        const PROBE: Duration = Duration::from_secs(1);
        match self.partitions.iter().find(|p| !p.finished()) {
            Some(p) => self.consumer.fetch_watermarks(&p.topic, p.partition, PROBE).is_ok(),
            None => self.consumer.fetch_metadata(Some(self.spec.topics[0].as_str()), PROBE).is_ok(),
        }
    }

    /// Decides whether the errors librdkafka reported fail the job: at once
    /// for credentials and configuration, after `timeout_ms` for brokers
    /// that cannot be reached.
    fn check_errors(&mut self, made_progress: bool) -> Result<(), ConnectorError> {
        if made_progress {
            self.failing = None;
        }
        if let Some((error, reason)) = self.errors.take() {
            if is_fatal(&error) {
                return Err(kafka_error(&self.spec.name, &self.spec.brokers, error));
            }
            if self.failing.is_none() {
                self.failing = Some((Instant::now(), format!("{error} ({reason})")));
            }
        }
        let Some((since, last)) = &self.failing else { return Ok(()) };
        // Still failing? A probe, at most once a second, says.
        if self.last_probe.elapsed() >= Duration::from_secs(1) {
            self.last_probe = Instant::now();
            if self.brokers_answer() {
                info!(source = %self.spec.name, "kafka brokers reachable again");
                self.failing = None;
                return Ok(());
            }
        }
        if since.elapsed() > self.spec.timeout() {
            return Err(ConnectorError::Kafka {
                what: format!("kafka source `{}`", self.spec.name),
                message: format!(
                    "the brokers at {} have been unreachable for {} s (last error: {last}); \
                     check that they are up, or raise `timeout_ms`",
                    self.spec.brokers,
                    since.elapsed().as_secs()
                ),
            });
        }
        Ok(())
    }
}

impl Source for KafkaSource {
    fn poll(&mut self, batch: &mut RecordBatch, max: usize) -> Result<Poll, ConnectorError> {
        if self.exhausted() {
            return Ok(Poll::Exhausted);
        }
        let before = batch.len();
        let max = self.pace.allowance(max);
        let mut wait = POLL_WAIT;
        while !batch.is_full(before.saturating_add(max)) {
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => {
                    let timestamp = event_time(&self.spec, message.payload(), message.timestamp());
                    take(&mut self.partitions, &self.by_name, &mut self.clock, &message, timestamp, batch);
                }
                Some(Err(error)) if is_fatal(&error) => {
                    return Err(kafka_error(&self.spec.name, &self.spec.brokers, error));
                }
                Some(Err(error)) => {
                    warn!(source = %self.spec.name, %error, "kafka fetch error");
                    self.errors.record(error, "fetch");
                    break;
                }
            }
            wait = Duration::ZERO;
        }
        self.pace.took((batch.len() - before) as u64);
        if batch.len() == before {
            self.finish_by_position();
        }
        self.check_errors(batch.len() > before)?;
        Ok(if self.exhausted() && batch.len() == before { Poll::Exhausted } else { Poll::Ready })
    }

    fn splits(&self) -> Vec<SourceSplit> {
        self.partitions.iter().map(Partition::split).collect()
    }

    /// Watermarks per partition: the subtask's is the least over the
    /// partitions that are not idle.
    fn split_watermarks(&mut self) -> Option<Option<Signal>> {
        Some(self.clock.signal())
    }

    fn resume(&mut self) {
        self.clock.resume();
        self.pace.restart();
    }

    /// Commits the offsets of a completed checkpoint to the consumer group,
    /// for monitoring (lag); failures only warn.
    fn checkpoint_complete(&mut self, checkpoint: u64, splits: &[SourceSplit]) {
        let mut offsets = TopicPartitionList::new();
        for split in splits {
            let Some(p) = self.partitions.iter().find(|p| split_id(&p.topic, p.partition) == split.id) else { continue };
            let _ = offsets.add_partition_offset(&p.topic, p.partition, Offset::Offset(split.next as i64));
        }
        if offsets.count() == 0 {
            return;
        }
        if let Err(error) = self.consumer.commit(&offsets, CommitMode::Async) {
            warn!(source = %self.spec.name, checkpoint, %error, "cannot commit offsets to the consumer group");
        }
    }

    /// Each partition's lag: from where the subtask stands to the end the
    /// client last saw (for a bounded source, at most its own end).
    fn backlog(&self) -> Option<Backlog> {
        // Past the transaction markers the consumer skipped, which are not
        // records to read (a topic written transactionally ends in one).
        let positions = self.consumer.position().ok();
        let partitions = self
            .partitions
            .iter()
            .map(|p| {
                let position = positions.as_ref().and_then(|list| list.find_partition(&p.topic, p.partition));
                let position = match position.map(|e| e.offset()) {
                    Some(Offset::Offset(offset)) => offset.max(p.next),
                    _ => p.next,
                };
                let seen = last_seen_end(&self.consumer, &p.topic, p.partition);
                say_if_past_end(&self.spec.name, p, position, seen);
                let end = match (seen, p.end) {
                    (Some(seen), Some(bound)) => Some(seen.min(bound)),
                    (seen, bound) => seen.or(bound),
                };
                PartitionBacklog::new(p.topic.clone(), p.partition, position, end)
            })
            .collect();
        Some(Backlog::of_partitions(partitions))
    }
}

/// Warns, once, of a partition read from past its end (`seen`, the high
/// watermark): the topic was recreated or truncated since the offset was
/// checkpointed, and records written there below it are never read. Some
/// brokers answer such a fetch with "offset out of range" (which fails the
/// job, saying so); others answer with nothing.
fn say_if_past_end(source: &str, partition: &Partition, position: i64, seen: Option<i64>) {
    let Some(end) = seen.filter(|&end| position > end) else { return };
    if !partition.said_past_end.replace(true) {
        warn!(
            source = %source, topic = %partition.topic, partition = partition.partition, offset = position, end,
            "reading from past the end of the partition: it was recreated or truncated since this offset was \
             checkpointed, and records written there below the offset are not read. To read the topic again from \
             its start, start the job afresh with `start = \"earliest\"`"
        );
    }
}

/// Takes one record into `batch`, unless its partition has passed its end.
fn take(
    partitions: &mut [Partition],
    by_name: &HashMap<(String, i32), usize>,
    clock: &mut SplitClock,
    message: &rdkafka::message::BorrowedMessage<'_>,
    timestamp: Option<i64>,
    batch: &mut RecordBatch,
) {
    let Some(&index) = by_name.get(&(message.topic().to_owned(), message.partition())) else { return };
    let partition = &mut partitions[index];
    if partition.finished() || message.offset() < partition.next {
        return;
    }
    partition.next = message.offset() + 1;
    clock.record(index, timestamp);
    batch.push(message.key().unwrap_or_default(), message.payload().unwrap_or_default(), timestamp);
    if partition.finished() {
        clock.finished(index);
    }
}

/// A record's event time, as the source's table says to take it.
/// A record without one (or whose payload lacks the field) has none.
fn event_time(spec: &KafkaSourceSpec, payload: Option<&[u8]>, timestamp: Timestamp) -> Option<i64> {
    if let Some(field) = &spec.timestamp_field {
        let value: serde_json::Value = serde_json::from_slice(payload?).ok()?;
        return value.get(field)?.as_i64();
    }
    match (spec.timestamp, timestamp) {
        (TimestampSource::None, _) | (_, Timestamp::NotAvailable) => None,
        (TimestampSource::Record, timestamp) => timestamp.to_millis(),
    }
}

/// How long one metadata request waits before the client's events are
/// served (and its errors logged) and the request is made again.
const METADATA_ATTEMPT: Duration = Duration::from_secs(1);

/// The metadata of `topic`, asked for until `timeout_ms` has passed. Asked
/// once for the whole timeout, the wait was silent: the client reports
/// that it cannot connect only when it is polled.
fn topic_metadata(
    consumer: &BaseConsumer<Context>,
    spec: &KafkaSourceSpec,
    topic: &str,
    stop: &Cancel,
) -> Result<Metadata, ConnectorError> {
    let connector = Connector { name: &spec.name, brokers: &spec.brokers, timeout: spec.timeout(), stop };
    wait_for_metadata(consumer.client(), || drop(consumer.poll(Duration::ZERO)), &connector, topic)
}

/// A Kafka connector's name, brokers and `timeout_ms`, for waiting on the
/// brokers and saying what failed; the wait ends when `stop` is set (the
/// job was cancelled meanwhile).
pub(super) struct Connector<'a> {
    pub name: &'a str,
    pub brokers: &'a str,
    pub timeout: Duration,
    pub stop: &'a Cancel,
}

/// The metadata of `topic` through `client`, asked for until the
/// connector's timeout has passed while the brokers cannot be reached;
/// `serve` serves the client's events between attempts, so that its
/// connection errors are logged.
pub(super) fn wait_for_metadata<C: ClientContext>(
    client: &Client<C>,
    serve: impl Fn(),
    connector: &Connector<'_>,
    topic: &str,
) -> Result<Metadata, ConnectorError> {
    let deadline = Instant::now() + connector.timeout;
    let mut first = true;
    loop {
        if connector.stop.is_cancelled() {
            return Err(ConnectorError::Cancelled);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match client.fetch_metadata(Some(topic), left.min(METADATA_ATTEMPT)) {
            Ok(metadata) => return Ok(metadata),
            Err(error) if !left.is_zero() && error.rdkafka_error_code().is_some_and(brokers_unreachable) => {
                if std::mem::take(&mut first) {
                    let timeout_ms = connector.timeout.as_millis() as u64;
                    info!(connector = %connector.name, brokers = %connector.brokers, timeout_ms, "waiting for the kafka brokers");
                }
                serve();
            }
            Err(error) => return Err(kafka_error(connector.name, connector.brokers, error)),
        }
    }
}

/// Every partition of the source's topics, in (topic, partition) order.
fn list_partitions(
    consumer: &BaseConsumer<Context>,
    spec: &KafkaSourceSpec,
    stop: &Cancel,
) -> Result<Vec<(String, i32)>, ConnectorError> {
    let mut all = Vec::new();
    for topic in &spec.topics {
        let metadata = topic_metadata(consumer, spec, topic, stop)?;
        let found = metadata.topics().iter().find(|t| t.name() == topic);
        let missing = || ConnectorError::Kafka {
            what: format!("kafka source `{}`", spec.name),
            message: format!("topic `{topic}` does not exist on the brokers at {}; create it, or fix `topics`", spec.brokers),
        };
        let found = found.ok_or_else(missing)?;
        if found.error().is_some() || found.partitions().is_empty() {
            return Err(missing());
        }
        let mut partitions: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
        partitions.sort_unstable();
        all.extend(partitions.into_iter().map(|p| (topic.clone(), p)));
    }
    all.sort();
    let mut ids: Vec<u64> = all.iter().map(|(t, p)| split_id(t, *p)).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(ConnectorError::Kafka {
            what: format!("kafka source `{}`", spec.name),
            message: "two of its topics have names with the same CRC-32; read them with two sources".into(),
        });
    }
    Ok(all)
}

/// Errors that retrying cannot fix.
pub(super) fn is_fatal(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::SecurityDisabled
                | RDKafkaErrorCode::OffsetOutOfRange
                | RDKafkaErrorCode::Fatal
        )
    )
}

/// Errors that say the brokers cannot be reached (yet): waited out up to
/// `timeout_ms`, then reported with a hint.
fn brokers_unreachable(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::Resolve
    )
}

/// A librdkafka error as a connector error that says what to check.
pub(super) fn kafka_error(name: &str, brokers: &str, error: KafkaError) -> ConnectorError {
    let hint = match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => {
            "authentication failed: check the sasl.* and ssl.* entries of `properties`"
        }
        Some(
            RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed,
        ) => "the credentials lack a permission (ACL) this connector needs",
        Some(RDKafkaErrorCode::OffsetOutOfRange) => {
            "an offset to resume from is no longer on the broker (deleted by retention, or the topic recreated or \
             truncated?)"
        }
        Some(code) if brokers_unreachable(code) => "cannot reach the brokers: check `brokers` and that the cluster is up",
        _ => "",
    };
    let message = if hint.is_empty() {
        format!("{error} (brokers {brokers})")
    } else {
        format!("{hint} (brokers {brokers}): {error}")
    };
    ConnectorError::Kafka { what: format!("kafka connector `{name}`"), message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> KafkaSourceSpec {
        toml::from_str(&format!("name = \"in\"\nbrokers = \"h:1\"\ntopics = [\"t\"]\n{extra}")).unwrap()
    }

    #[test]
    fn event_time_comes_from_the_record_or_a_payload_field() {
        let created = Timestamp::CreateTime(1_700_000_000_000);
        assert_eq!(event_time(&spec(""), Some(b"x"), created), Some(1_700_000_000_000));
        assert_eq!(event_time(&spec(""), Some(b"x"), Timestamp::LogAppendTime(5)), Some(5));
        assert_eq!(event_time(&spec("timestamp = \"none\""), Some(b"x"), created), None);
        let by_field = spec("timestamp_field = \"ts\"");
        assert_eq!(event_time(&by_field, Some(br#"{"ts": 42, "v": 1}"#), created), Some(42));
        assert_eq!(event_time(&by_field, Some(br#"{"v": 1}"#), created), None, "no field, no event time");
        assert_eq!(event_time(&by_field, Some(b"not json"), created), None);
    }

    #[test]
    fn split_ids_keep_topic_and_partition_apart() {
        assert_ne!(split_id("a", 1), split_id("b", 1));
        assert_eq!(split_id("a", 7) & 0xffff_ffff, 7);
    }
}
