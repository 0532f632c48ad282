//! Committing a Kafka sink's checkpoint epochs: one transaction each.
//!
//! librdkafka cannot resume a transaction that another process (the run
//! that crashed) opened, which is how Flink's Kafka sink recovers. So the
//! transaction of an epoch is written when the checkpoint completes, from
//! the epoch's write-ahead log ([`super::wal`]), which the checkpoint made
//! durable at its barrier:
//!
//! 1. A producer with the subtask's stable `transactional.id` initialises
//!    transactions: the broker fences every older producer with that id
//!    (a zombie of a previous run) and aborts its open transaction.
//! 2. The epoch's *commit marker* is read: the offset that the transaction
//!    of each epoch commits, atomically with its records, for the consumer
//!    group `<transactional id>.<lineage>` (on the output topic's partition
//!    0; nobody consumes it; the lineage is a random id of the checkpoint
//!    directory). Offset `n` there means epoch `n` is committed. (The
//!    group, not offset metadata, carries the lineage: not every broker
//!    keeps metadata — tansu does not.)
//! 3. If it is not: begin, send the log's records (each with a
//!    `weir.checkpoint` header naming the epoch), send the marker
//!    (`send_offsets_to_transaction`), commit; then delete the log.
//!
//! Every step may fail or be repeated after a crash: a failed commit stays
//! pending (the coordinator retries it after the next checkpoint, and a
//! restart retries it before the job runs again), and the marker makes a
//! repeat after a commit that did succeed a no-op. So each epoch's records
//! are committed exactly once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use super::closing::GroupConsumer;
use super::config::KafkaSinkSpec;
use super::send::{self, SendError};
use super::wal;
use super::watchdog::{GivenUp, Heartbeat, watched};

/// The record header that names the checkpoint whose transaction wrote it.
pub const CHECKPOINT_HEADER: &str = "weir.checkpoint";
/// The record header that names the attempt to commit it:
/// `<transactional id>/<ns since the epoch>`. An epoch is sent again only if
/// its earlier attempt did not commit, so a reader that cannot trust its
/// broker's isolation keeps, per epoch, the records of the last attempt.
pub const ATTEMPT_HEADER: &str = "weir.attempt";

/// An epoch of a Kafka sink subtask waiting to be committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaCommit {
    /// The sink (its table in the job file has the client properties).
    pub sink: String,
    pub transactional_id: String,
    pub topic: String,
    pub checkpoint: u64,
    /// The epoch's write-ahead log.
    pub wal: PathBuf,
    /// Identifies the checkpoint directory (a random id made with it), so
    /// that the markers of a deleted and recreated one are not taken for
    /// this one's.
    pub lineage: String,
}

impl KafkaCommit {
    /// Reads the epoch's write-ahead log through, if it is still there (a
    /// committed epoch's is deleted): an error says it is cut short or
    /// damaged, so that the epoch can never be committed.
    pub fn check_log(&self) -> std::io::Result<()> {
        if !self.wal.exists() {
            return Ok(());
        }
        let mut log = wal::WalReader::open(&self.wal)?;
        while log.next_record()?.is_some() {}
        Ok(())
    }
}

/// Why an epoch could not be committed (it stays pending).
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the job has no kafka sink `{0}` now; its pending output cannot be committed")]
    UnknownSink(String),
    #[error("kafka sink `{sink}`, transaction `{id}`: {message}")]
    Kafka { sink: String, id: String, message: String },
    #[error("kafka sink `{sink}`: cannot read the write-ahead log: {source}")]
    Log {
        sink: String,
        #[source]
        source: std::io::Error,
    },
    /// Retrying cannot help: only the user can decide to go on without it.
    #[error(
        "kafka sink `{sink}`: the write-ahead log of checkpoint {checkpoint} is {source}. Its records can never be \
         committed, and the writer's later checkpoints wait behind it: move the file away to commit those \
         without its records (which are then lost from the output), or restore a savepoint taken before \
         checkpoint {checkpoint}"
    )]
    Damaged {
        sink: String,
        checkpoint: u64,
        #[source]
        source: std::io::Error,
    },
}

impl CommitError {
    /// Whether it is about a damaged write-ahead log.
    pub fn damaged_log(&self) -> bool {
        matches!(self, CommitError::Damaged { .. })
    }
}

/// A transactional producer and the consumer that reads its markers.
struct Client {
    producer: BaseProducer,
    markers: GroupConsumer<DefaultConsumerContext>,
    lineage: String,
}

/// Commits Kafka epochs; keeps one initialised producer per transactional
/// id between commits.
pub struct KafkaCommitter {
    sinks: Arc<HashMap<String, KafkaSinkSpec>>,
    clients: HashMap<String, Client>,
}

impl KafkaCommitter {
    pub fn new(sinks: impl IntoIterator<Item = KafkaSinkSpec>) -> Self {
        let sinks = Arc::new(sinks.into_iter().map(|s| (s.name.clone(), s)).collect());
        KafkaCommitter { sinks, clients: HashMap::new() }
    }

    /// The longest any of the sinks lets its brokers be unreachable
    /// (`timeout_ms`); `None` without Kafka sinks.
    pub fn longest_timeout(&self) -> Option<Duration> {
        self.sinks.values().map(KafkaSinkSpec::timeout).max()
    }

    /// Commits `commits` (oldest first), the epochs of each transactional id
    /// in order and the transactional ids in parallel. Returns those not
    /// committed: for each id, the epoch that failed (with its error) and
    /// the later ones (without).
    ///
    /// Each id's epochs are committed on a thread that is given up (see
    /// [`super::watchdog`]) when its client has not answered for longer
    /// than the sink's `timeout_ms` and [`STALL_MARGIN`]: its epochs count
    /// as not committed, and the next attempt starts with a new producer.
    pub fn commit_all(&mut self, commits: Vec<KafkaCommit>) -> Vec<(KafkaCommit, Option<CommitError>)> {
        let mut writers: Vec<(String, Vec<KafkaCommit>)> = Vec::new();
        for commit in commits {
            match writers.iter_mut().find(|(id, _)| *id == commit.transactional_id) {
                Some((_, epochs)) => epochs.push(commit),
                None => writers.push((commit.transactional_id.clone(), vec![commit])),
            }
        }
        let running: Vec<_> = writers
            .into_iter()
            .map(|(id, epochs)| {
                let mut client = self.clients.remove(&id);
                let sinks = self.sinks.clone();
                let taken = epochs.clone();
                let work = watched("weir-kafka-commit", move |heartbeat| {
                    let left = commit_in_order(&sinks, &mut client, epochs, heartbeat);
                    (client, left)
                });
                (id, taken, work)
            })
            .collect();
        let mut left = Vec::new();
        for (id, taken, work) in running {
            let stall = self.stall_bound(&taken);
            match work.wait(stall) {
                Ok((client, not_committed)) => {
                    if let Some(client) = client {
                        self.clients.insert(id, client);
                    }
                    left.extend(not_committed);
                }
                Err(GivenUp::Stalled) => left.extend(given_up(taken, stalled_message(stall))),
                Err(GivenUp::Panicked(panic)) => left.extend(given_up(taken, panicked_message(&panic))),
            }
        }
        left
    }

    /// How long a commit thread for `epochs` may go without an answer from
    /// its client before it is given up.
    fn stall_bound(&self, epochs: &[KafkaCommit]) -> Duration {
        let timeout = epochs.iter().filter_map(|e| self.sinks.get(&e.sink)).map(KafkaSinkSpec::timeout).max();
        timeout.unwrap_or_default() + STALL_MARGIN
    }
}

/// What a commit thread may take beyond its sink's `timeout_ms` between
/// two answers of its client (a call returns within the timeout, and a
/// loaded machine may take a moment more).
const STALL_MARGIN: Duration = Duration::from_secs(5);

fn stalled_message(stall: Duration) -> String {
    format!(
        "the kafka client has not answered for {} s (a transactional call waits past its timeout while the \
         transaction coordinator is away); the attempt is given up and retried with a new producer",
        stall.as_secs()
    )
}

fn panicked_message(panic: &str) -> String {
    format!("the commit thread panicked ({panic}); the attempt is retried with a new producer")
}

/// The epochs of a commit thread given up (`message` says why): none counts
/// as committed (those it did commit are found so by the next attempt).
fn given_up(epochs: Vec<KafkaCommit>, message: String) -> Vec<(KafkaCommit, Option<CommitError>)> {
    let mut epochs = epochs.into_iter();
    let first = epochs.next().map(|commit| {
        let error = CommitError::Kafka { sink: commit.sink.clone(), id: commit.transactional_id.clone(), message };
        (commit, Some(error))
    });
    first.into_iter().chain(epochs.map(|commit| (commit, None))).collect()
}

/// Commits one transactional id's epochs in order, up to the first failure.
fn commit_in_order(
    sinks: &HashMap<String, KafkaSinkSpec>,
    client: &mut Option<Client>,
    epochs: Vec<KafkaCommit>,
    heartbeat: &Heartbeat,
) -> Vec<(KafkaCommit, Option<CommitError>)> {
    let mut left = Vec::new();
    for commit in epochs {
        if !left.is_empty() {
            left.push((commit, None));
            continue;
        }
        if let Err(error) = commit_epoch(sinks, client, &commit, heartbeat) {
            // The producer may be in any state: start over with a new one,
            // which aborts whatever this one left open.
            *client = None;
            left.push((commit, Some(error)));
        }
        heartbeat.beat();
    }
    left
}

/// Commits `commit`'s epoch unless it already is; Ok(true) if this call
/// committed it.
fn commit_epoch(
    sinks: &HashMap<String, KafkaSinkSpec>,
    client: &mut Option<Client>,
    commit: &KafkaCommit,
    heartbeat: &Heartbeat,
) -> Result<bool, CommitError> {
    if !commit.wal.exists() {
        return Ok(false); // Committed, and its log deleted.
    }
    let spec = sinks.get(&commit.sink).ok_or_else(|| CommitError::UnknownSink(commit.sink.clone()))?;
    let failed = |message: String| CommitError::Kafka {
        sink: commit.sink.clone(),
        id: commit.transactional_id.clone(),
        message,
    };
    let timeout = spec.timeout();
    let client = connect(spec, client, commit)?;
    heartbeat.beat();
    let committed = committed_marker(client, commit, timeout).map_err(&failed)?;
    heartbeat.beat();
    if committed {
        remove_log(&commit.wal);
        return Ok(false);
    }
    let log_error = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::InvalidData => CommitError::Damaged { sink: commit.sink.clone(), checkpoint: commit.checkpoint, source },
        _ => CommitError::Log { sink: commit.sink.clone(), source },
    };
    let mut log = wal::WalReader::open(&commit.wal).map_err(log_error)?;
    let producer = &client.producer;
    producer.begin_transaction().map_err(|e| failed(format!("cannot begin a transaction: {e}")))?;
    let epoch = commit.checkpoint.to_string();
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let attempt = format!("{}/{}", commit.transactional_id, since_epoch.as_nanos());
    // A log that turns out corrupt fails the attempt, whose transaction the
    // next attempt's producer aborts.
    while let Some(record) = log.next_record().map_err(log_error)? {
        let headers = OwnedHeaders::new()
            .insert(Header { key: CHECKPOINT_HEADER, value: Some(epoch.as_bytes()) })
            .insert(Header { key: ATTEMPT_HEADER, value: Some(attempt.as_bytes()) });
        let out = send::record(&commit.topic, &record.key, &record.value, record.timestamp).headers(headers);
        let started = Instant::now();
        let patience = || match started.elapsed() > timeout {
            true => Err(format!("the producer's queue stayed full for {} s", timeout.as_secs())),
            false => Ok(()),
        };
        send::send(producer, out, patience).map_err(|error| match error {
            SendError::Kafka(error) => failed(format!("cannot send: {error}")),
            SendError::GaveUp(message) => failed(message),
        })?;
        heartbeat.beat();
    }
    let marker = marker(commit).map_err(&failed)?;
    let group = client.markers.group_metadata().ok_or_else(|| failed("no consumer group metadata".into()))?;
    producer
        .send_offsets_to_transaction(&marker, &group, timeout)
        .map_err(|e| failed(format!("cannot add the commit marker to the transaction: {e}")))?;
    heartbeat.beat();
    producer.commit_transaction(timeout).map_err(|e| failed(format!("cannot commit the transaction: {e}")))?;
    remove_log(&commit.wal);
    debug!(sink = %commit.sink, transaction = %commit.transactional_id, checkpoint = commit.checkpoint,
          records = log.records(), "kafka transaction committed");
    Ok(true)
}

/// The client of `commit`'s transactional id, made (and its transactions
/// initialised) if there is none yet.
fn connect<'a>(spec: &KafkaSinkSpec, slot: &'a mut Option<Client>, commit: &KafkaCommit) -> Result<&'a Client, CommitError> {
    let id = commit.transactional_id.as_str();
    if slot.as_ref().is_some_and(|c| c.lineage != commit.lineage) {
        *slot = None;
    }
    if slot.is_none() {
        let failed = |message: String| CommitError::Kafka { sink: spec.name.clone(), id: id.to_owned(), message };
        let producer: BaseProducer =
            spec.client_config(Some(id)).create().map_err(|e| failed(format!("cannot create a producer: {e}")))?;
        // Fences older producers with this id and aborts what they left open.
        producer.init_transactions(spec.timeout()).map_err(|e| failed(format!("cannot initialise transactions: {e}")))?;
        let group = format!("{id}.{}", commit.lineage);
        let markers: BaseConsumer =
            spec.marker_config(&group).create().map_err(|e| failed(format!("cannot create a consumer: {e}")))?;
        let markers = GroupConsumer::new(markers, spec.timeout(), format!("kafka sink `{}`'s commit markers", spec.name));
        *slot = Some(Client { producer, markers, lineage: commit.lineage.clone() });
    }
    Ok(slot.as_ref().expect("just connected"))
}

/// The marker a transaction commits for its epoch.
fn marker(commit: &KafkaCommit) -> Result<TopicPartitionList, String> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&commit.topic, 0, Offset::Offset(commit.checkpoint as i64)).map_err(|e| e.to_string())?;
    Ok(list)
}

/// Whether the marker shows the epoch (or a later one) committed.
fn committed_marker(client: &Client, commit: &KafkaCommit, timeout: Duration) -> Result<bool, String> {
    let mut query = TopicPartitionList::new();
    query.add_partition(&commit.topic, 0);
    let found = client.markers.committed_offsets(query, timeout).map_err(|e| format!("cannot read the commit marker: {e}"))?;
    let Some(element) = found.find_partition(&commit.topic, 0) else { return Ok(false) };
    Ok(match element.offset() {
        Offset::Offset(done) => done as u64 >= commit.checkpoint,
        _ => false,
    })
}

fn remove_log(path: &Path) {
    if let Err(error) = std::fs::remove_file(path)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        warn!(file = %path.display(), %error, "cannot delete a committed write-ahead log");
    }
}
