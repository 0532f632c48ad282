//! A sink subtask's side of the dataflow: writing batches, pre-committing
//! at barriers and committing at the end.
//!
//! A sink runs on its own thread ([`super::task::run_sink`]) when several
//! producers feed it or its edge redistributes records. Fed by a forward
//! edge from a subtask whose only consumer it is, it is chained into that
//! subtask's thread instead, as Flink chains sinks: each batch is written by
//! a function call rather than handed over a channel. A thread parked on an
//! empty inbox has to be woken for every batch, and on these virtual
//! machines a wake-up costs the sender tens of microseconds (the
//! performance log, session 35).

use std::sync::Arc;
use std::time::Duration;

use super::RecordBatch;
use super::snapshot::{SinkPrecommits, TaskCheckpoint};
use super::task::{TaskError, TaskMetrics};
use crate::connectors::{ConnectorError, Sink};

/// One sink subtask, wherever it runs.
pub struct SinkWriter {
    /// Names the subtask in errors.
    label: String,
    sink: Box<dyn Sink>,
    metrics: Arc<TaskMetrics>,
    checkpoint: Option<TaskCheckpoint>,
    precommits: SinkPrecommits,
}

impl SinkWriter {
    pub fn new(label: String, sink: Box<dyn Sink>, metrics: Arc<TaskMetrics>, checkpoint: Option<TaskCheckpoint>) -> Self {
        SinkWriter { label, sink, metrics, checkpoint, precommits: SinkPrecommits::default() }
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), TaskError> {
        self.metrics.count_in(batch.len());
        self.sink.write(batch).map_err(|error| self.failed(error))
    }

    /// Notes the event time its input has reached (it writes records as
    /// they come; the watermark is only shown).
    pub fn watermark(&self, watermark: i64) {
        self.metrics.set_watermark(watermark);
    }

    /// At checkpoint `n`'s barrier (aligned after `alignment`): makes the
    /// output durable and hands what must be committed to the checkpoint.
    pub fn barrier(&mut self, n: u64, alignment: Duration) -> Result<(), TaskError> {
        let savepoint = self.checkpoint.as_ref().is_some_and(|c| c.hub.is_savepoint(n));
        let commits = self.sink.precommit(n, savepoint).map_err(|error| self.failed(error))?;
        if let Some(checkpoint) = &self.checkpoint {
            self.precommits.ack(checkpoint, n, commits, alignment);
        }
        Ok(())
    }

    /// At the end of input: flushes and commits what is left.
    pub fn finish(&mut self) -> Result<(), TaskError> {
        self.metrics.set_watermark(i64::MAX);
        let commits = self.sink.finish().map_err(|error| self.failed(error))?;
        let committed = std::mem::take(&mut self.precommits).finish(self.checkpoint.as_ref(), commits);
        committed.map_err(|source| self.failed(ConnectorError::Io { what: self.label.clone(), source }))
    }

    fn failed(&self, error: ConnectorError) -> TaskError {
        TaskError::Sink { label: self.label.clone(), error }
    }
}
