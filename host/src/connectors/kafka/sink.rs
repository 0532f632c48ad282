//! The Kafka sink: exactly-once through per-epoch transactions, or
//! at-least-once by sending at once.
//!
//! Exactly-once: each subtask logs the records of the current checkpoint
//! epoch to a write-ahead log in the checkpoint directory; at the barrier
//! the log is sealed (synced) and handed to the checkpoint as a pending
//! commit, which [`super::commit`] turns into one transaction once the
//! checkpoint is complete.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Message};
use tracing::warn;

use super::commit::KafkaCommit;
use super::config::{Delivery, KafkaSinkSpec};
use super::send::{self, SendError};
use super::source::{Connector, kafka_error, wait_for_metadata};
use super::wal::WalWriter;
use crate::checkpoint::{FINAL_CHECKPOINT, PendingCommit};
use crate::connectors::{ConnectorError, Sink, SinkPlace};
use crate::dataflow::Cancel;
use crate::dataflow::RecordBatch;

/// The directory of write-ahead logs under a checkpoint directory.
pub use crate::checkpoint::layout::KAFKA_LOGS as LOG_DIR;

/// A subtask of a Kafka sink.
pub enum KafkaSink {
    ExactlyOnce(LoggedSink),
    AtLeastOnce(DirectSink),
}

impl KafkaSink {
    /// Opens a subtask of the sink where `place` says.
    pub fn open(spec: &KafkaSinkSpec, place: &SinkPlace<'_>) -> Result<Self, ConnectorError> {
        Ok(match spec.delivery {
            Delivery::ExactlyOnce => {
                check_brokers(spec, place.stop)?;
                KafkaSink::ExactlyOnce(LoggedSink::open(spec, place)?)
            }
            Delivery::AtLeastOnce => KafkaSink::AtLeastOnce(DirectSink::open(spec)?),
        })
    }

    fn inner(&mut self) -> &mut dyn Sink {
        match self {
            KafkaSink::ExactlyOnce(sink) => sink,
            KafkaSink::AtLeastOnce(sink) => sink,
        }
    }
}

impl Sink for KafkaSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        self.inner().write(batch)
    }

    fn precommit(&mut self, checkpoint: u64, savepoint: bool) -> Result<Vec<PendingCommit>, ConnectorError> {
        self.inner().precommit(checkpoint, savepoint)
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.inner().flush()
    }

    fn finish(&mut self) -> Result<Vec<PendingCommit>, ConnectorError> {
        self.inner().finish()
    }
}

/// Fails unless the brokers answer within `timeout_ms`. The exactly-once
/// sink talks to them only when a checkpoint's transaction is committed,
/// and a commit that fails is retried, not fatal (the output is in the
/// log) — so without this, brokers that are wrong or down from the start
/// would leave a job that looks healthy, commits nothing and fills its
/// logs. At each start, so a restart during an outage counts as a failed
/// attempt.
fn check_brokers(spec: &KafkaSinkSpec, stop: &Cancel) -> Result<(), ConnectorError> {
    let producer: BaseProducer =
        spec.client_config(None).create().map_err(|error| kafka_error(&spec.name, &spec.brokers, error))?;
    let connector = Connector { name: &spec.name, brokers: &spec.brokers, timeout: spec.timeout(), stop };
    wait_for_metadata(producer.client(), || producer.poll(Duration::ZERO), &connector, &spec.topic).map(drop)
}

/// Exactly-once: logs each epoch for its transaction.
pub struct LoggedSink {
    spec: KafkaSinkSpec,
    transactional_id: String,
    dir: PathBuf,
    lineage: String,
    log: Option<WalWriter>,
}

impl LoggedSink {
    fn open(spec: &KafkaSinkSpec, place: &SinkPlace<'_>) -> Result<Self, ConnectorError> {
        let dir = place.checkpoint_dir.join(LOG_DIR);
        let io = |source| ConnectorError::Io { what: dir.display().to_string(), source };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let transactional_id = spec.transactional_id(place.job, place.subtask);
        let lineage = crate::dirs::lineage(&dir).map_err(io)?;
        let sink = LoggedSink { spec: spec.clone(), transactional_id, dir: dir.clone(), lineage, log: None };
        sink.drop_logs_after(place).map_err(io)?;
        Ok(sink)
    }

    /// Deletes this subtask's logs of epochs after the restored checkpoint
    /// (they never completed; the run replays their records) and its open
    /// log; subtask 0 does the same for subtasks the sink no longer has.
    /// Logs of completed epochs stay: the committer deletes them.
    fn drop_logs_after(&self, place: &SinkPlace<'_>) -> std::io::Result<()> {
        let prefix = self.spec.transactional_id(place.job, 0);
        let prefix = prefix.strip_suffix('0').unwrap_or(&prefix);
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let Some((writer, epoch)) = parse_log_name(&name) else { continue };
            let gone = place.subtask == 0
                && writer.strip_prefix(prefix).and_then(|k| k.parse::<u32>().ok()).is_some_and(|k| k >= place.parallelism);
            if (writer == self.transactional_id || gone) && epoch.is_none_or(|n| n > place.restored) {
                std::fs::remove_file(self.dir.join(&name))?;
            }
        }
        Ok(())
    }

    fn open_path(&self) -> PathBuf {
        self.dir.join(format!("{}.open", self.transactional_id))
    }

    fn log(&mut self) -> Result<&mut WalWriter, ConnectorError> {
        if self.log.is_none() {
            let path = self.open_path();
            let writer = WalWriter::create(&path).map_err(|source| ConnectorError::Io { what: path.display().to_string(), source })?;
            self.log = Some(writer);
        }
        Ok(self.log.as_mut().expect("just opened"))
    }

    /// Seals the current epoch's log as the one of `checkpoint`.
    fn seal(&mut self, checkpoint: u64) -> Result<Vec<PendingCommit>, ConnectorError> {
        let Some(log) = self.log.take() else { return Ok(Vec::new()) };
        let io = |what: &Path, source| ConnectorError::Io { what: what.display().to_string(), source };
        let sealed = log.seal().map_err(|e| io(&self.open_path(), e))?;
        // FINAL_CHECKPOINT is replaced by the final manifest's id.
        let path = self.dir.join(format!("{}.{checkpoint}.wal", self.transactional_id));
        std::fs::rename(&sealed, &path).map_err(|e| io(&path, e))?;
        Ok(vec![PendingCommit::Kafka(KafkaCommit {
            sink: self.spec.name.clone(),
            transactional_id: self.transactional_id.clone(),
            topic: self.spec.topic.clone(),
            checkpoint,
            wal: path,
            lineage: self.lineage.clone(),
        })])
    }
}

impl Sink for LoggedSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        let path = self.open_path();
        self.log()?.append(batch).map_err(|source| ConnectorError::Io { what: path.display().to_string(), source })
    }

    fn precommit(&mut self, checkpoint: u64, _savepoint: bool) -> Result<Vec<PendingCommit>, ConnectorError> {
        self.seal(checkpoint)
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn finish(&mut self) -> Result<Vec<PendingCommit>, ConnectorError> {
        self.seal(FINAL_CHECKPOINT)
    }
}

/// A log file's writer (transactional id) and epoch: `<id>.<epoch>.wal`,
/// or `<id>.open` (no epoch yet).
fn parse_log_name(name: &str) -> Option<(&str, Option<u64>)> {
    if let Some(writer) = name.strip_suffix(".open") {
        return Some((writer, None));
    }
    let (writer, epoch) = name.strip_suffix(".wal")?.rsplit_once('.')?;
    Some((writer, Some(epoch.parse().ok()?)))
}

/// Delivery failures, reported on the producer's polling thread.
#[derive(Clone, Default)]
struct DeliveryLog {
    failures: Arc<Mutex<Option<String>>>,
}

impl ClientContext for DeliveryLog {}

impl ProducerContext for DeliveryLog {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            let text = format!("record for {}/{} not delivered: {error}", message.topic(), message.partition());
            *self.failures.lock().expect("delivery log") = Some(text);
        }
    }
}

/// At-least-once: sends at once, waits for every delivery at checkpoints.
pub struct DirectSink {
    spec: KafkaSinkSpec,
    producer: BaseProducer<DeliveryLog>,
    failures: DeliveryLog,
}

impl DirectSink {
    fn open(spec: &KafkaSinkSpec) -> Result<Self, ConnectorError> {
        let failures = DeliveryLog::default();
        let producer = spec
            .client_config(None)
            .create_with_context(failures.clone())
            .map_err(|error| kafka_error(&spec.name, &spec.brokers, error))?;
        Ok(DirectSink { spec: spec.clone(), producer, failures })
    }

    fn check(&self) -> Result<(), ConnectorError> {
        match self.failures.failures.lock().expect("delivery log").take() {
            Some(message) => Err(ConnectorError::Kafka { what: format!("kafka sink `{}`", self.spec.name), message }),
            None => Ok(()),
        }
    }
}

impl Sink for DirectSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ConnectorError> {
        for record in batch.iter() {
            let out = send::record(&self.spec.topic, record.key, record.value, record.timestamp);
            send::send(&self.producer, out, || self.check()).map_err(|error| match error {
                SendError::Kafka(error) => kafka_error(&self.spec.name, &self.spec.brokers, error),
                SendError::GaveUp(error) => error,
            })?;
        }
        self.producer.poll(Duration::ZERO);
        self.check()
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if let Err(error) = self.producer.flush(self.spec.timeout()) {
            warn!(sink = %self.spec.name, %error, "kafka flush failed");
            return Err(kafka_error(&self.spec.name, &self.spec.brokers, error));
        }
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::dir_names;

    #[test]
    fn a_restore_drops_the_logs_of_epochs_that_never_completed_also_of_subtasks_gone() {
        let spec: KafkaSinkSpec = toml::from_str("name = \"out\"\ninput = \"x\"\nbrokers = \"h:1\"\ntopic = \"t\"").unwrap();
        let root = tempfile::tempdir().unwrap();
        let logs = root.path().join(LOG_DIR);
        std::fs::create_dir_all(&logs).unwrap();
        for name in ["weir-j-out-0.3.wal", "weir-j-out-0.5.wal", "weir-j-out-0.open", "weir-j-out-2.3.wal", "weir-j-out-2.5.wal", "weir-j-out-1.5.wal"] {
            std::fs::write(logs.join(name), "x").unwrap();
        }
        let stop = Cancel::default();
        let place = |subtask| SinkPlace { job: "j", subtask, parallelism: 2, restored: 4, restored_at_ms: 0, checkpoint_dir: root.path(), lineage: None, stop: &stop };
        LoggedSink::open(&spec, &place(1)).unwrap();
        assert!(!dir_names(&logs).contains(&"weir-j-out-1.5.wal".to_owned()), "subtask 1 drops its own");
        LoggedSink::open(&spec, &place(0)).unwrap();
        assert_eq!(dir_names(&logs), ["LINEAGE", "weir-j-out-0.3.wal", "weir-j-out-2.3.wal"], "epoch 3 completed: the committer's");
    }

    #[test]
    fn log_names_parse() {
        assert_eq!(parse_log_name("a.b-0.12.wal"), Some(("a.b-0", Some(12))));
        assert_eq!(parse_log_name("a-0.open"), Some(("a-0", None)));
        assert_eq!(parse_log_name("LINEAGE"), None);
    }
}
