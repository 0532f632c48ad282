//! The loops of source, operator and sink subtasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::channel::{Cancel, Envelope, Message, Outputs, receive};
use super::{BATCH_SIZE, RecordBatch};
use crate::connectors::{ConnectorError, Poll, Sink, Source};
use super::operator::OperatorLogic;
use crate::plugin::{CallError, InputKind};

/// The longest a source keeps records in partly filled output batches.
const SOURCE_FLUSH_INTERVAL: Duration = Duration::from_millis(20);

/// Why a subtask stopped early.
#[derive(Debug)]
pub enum TaskError {
    /// The job was cancelled; not this task's fault.
    Stopped,
    /// A call into an operator failed; `label` names the operator subtask
    /// (which may be chained into another task).
    Operator { label: String, error: CallError },
    Connector(ConnectorError),
}

impl From<ConnectorError> for TaskError {
    fn from(error: ConnectorError) -> Self {
        TaskError::Connector(error)
    }
}

/// Live counters of one subtask, read by the progress reporter.
#[derive(Debug, Default)]
pub struct TaskMetrics {
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
}

impl TaskMetrics {
    pub fn count_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn count_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What every subtask loop needs.
pub struct TaskContext {
    pub label: String,
    pub cancel: Cancel,
    pub metrics: Arc<TaskMetrics>,
    pub outputs: Outputs,
}

/// Polls the source until it is exhausted, sending batches downstream.
pub fn run_source(mut ctx: TaskContext, mut source: Box<dyn Source>) -> Result<(), TaskError> {
    let mut last_flush = Instant::now();
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(TaskError::Stopped);
        }
        let mut batch = RecordBatch::with_capacity(BATCH_SIZE, 16 * BATCH_SIZE);
        let poll = source.poll(&mut batch, BATCH_SIZE)?;
        if !batch.is_empty() {
            ctx.metrics.count_out(batch.len());
            ctx.outputs.emit("", batch, &ctx.cancel)?;
        }
        if poll == Poll::Exhausted {
            return ctx.outputs.end(&ctx.cancel);
        }
        // A slow source must not leave records in partly filled batches.
        if last_flush.elapsed() >= SOURCE_FLUSH_INTERVAL {
            ctx.outputs.flush(&ctx.cancel)?;
            last_flush = Instant::now();
        }
    }
}

/// Feeds batches to the plugin instance and routes what it emits, until
/// every producer has ended.
pub fn run_operator(
    mut ctx: TaskContext,
    mut instance: Box<dyn OperatorLogic>,
    inbox: Receiver<Envelope>,
    input_kinds: Vec<InputKind>,
    producers: usize,
) -> Result<(), TaskError> {
    let mut ended = 0;
    while ended < producers {
        let envelope = receive(&inbox, &mut ctx.outputs, &ctx.cancel)?;
        match envelope.message {
            Message::Batch(batch) => {
                ctx.metrics.count_in(batch.len());
                let kind = input_kinds.get(envelope.input as usize).copied().unwrap_or(InputKind::Plain);
                let emitted = instance
                    .process(envelope.input, batch, kind)
                    .map_err(|error| TaskError::Operator { label: ctx.label.clone(), error })?;
                for (output, batch) in emitted {
                    ctx.metrics.count_out(batch.len());
                    ctx.outputs.emit(&output, batch, &ctx.cancel)?;
                }
            }
            Message::End => ended += 1,
        }
    }
    ctx.outputs.end(&ctx.cancel)
}

/// Writes batches to the sink until every producer has ended.
pub fn run_sink(
    mut ctx: TaskContext,
    mut sink: Box<dyn Sink>,
    inbox: Receiver<Envelope>,
    producers: usize,
) -> Result<(), TaskError> {
    let mut ended = 0;
    while ended < producers {
        match receive(&inbox, &mut ctx.outputs, &ctx.cancel)?.message {
            Message::Batch(batch) => {
                ctx.metrics.count_in(batch.len());
                sink.write(&batch)?;
            }
            Message::End => ended += 1,
        }
    }
    sink.finish()?;
    Ok(())
}
