//! Messages between subtasks, and the routing of a subtask's outputs: over
//! channels to other threads, or straight into a chained operator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender, TryRecvError};

use super::task::{TaskError, TaskMetrics};
use super::{BATCH_SIZE, RecordBatch};
use crate::job::Partitioning;
use super::operator::OperatorLogic;
use crate::plugin::InputKind;
use crate::state::{key_group_for, subtask_for_key_group};

/// How long a blocked send or receive waits before checking for cancellation.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

pub enum Message {
    Batch(RecordBatch),
    /// The producer has no more records.
    End,
}

/// A message and the input (of the receiving node) it arrived on.
pub struct Envelope {
    pub input: u32,
    pub message: Message,
}

/// Shared by all subtasks of a job: set when the job must stop.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sends, blocking while the receiver is full (backpressure) but giving up
/// when the job is cancelled or the receiver is gone.
fn send(target: &Sender<Envelope>, mut envelope: Envelope, cancel: &Cancel) -> Result<(), TaskError> {
    loop {
        match target.send_timeout(envelope, POLL_INTERVAL) {
            Ok(()) => return Ok(()),
            Err(SendTimeoutError::Timeout(back)) if !cancel.is_cancelled() => envelope = back,
            Err(_) => return Err(TaskError::Stopped),
        }
    }
}

/// Receives the next message; before waiting on an empty inbox, flushes the
/// task's partial output batches so that records never sit idle.
pub fn receive(inbox: &Receiver<Envelope>, outputs: &mut Outputs, cancel: &Cancel) -> Result<Envelope, TaskError> {
    if cancel.is_cancelled() {
        return Err(TaskError::Stopped);
    }
    match inbox.try_recv() {
        Ok(envelope) => return Ok(envelope),
        Err(TryRecvError::Empty) => outputs.flush(cancel)?,
        Err(TryRecvError::Disconnected) => return Err(TaskError::Stopped),
    }
    loop {
        match inbox.recv_timeout(POLL_INTERVAL) {
            Ok(envelope) => return Ok(envelope),
            Err(RecvTimeoutError::Timeout) if !cancel.is_cancelled() => {}
            Err(_) => return Err(TaskError::Stopped),
        }
    }
}

/// An operator subtask run inline by its upstream subtask's thread (a
/// forward edge between operators of equal parallelism): batches are handed
/// over by a function call, with no channel and no copy.
pub struct ChainedOperator {
    pub label: String,
    pub instance: Box<dyn OperatorLogic>,
    pub kind: InputKind,
    pub outputs: Outputs,
    pub metrics: Arc<TaskMetrics>,
}

impl ChainedOperator {
    /// Processes one batch and passes on what the operator emits.
    pub fn process(&mut self, input: u32, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
        self.metrics.count_in(batch.len());
        let emitted = self
            .instance
            .process(input, batch, self.kind)
            .map_err(|error| TaskError::Operator { label: self.label.clone(), error })?;
        for (output, batch) in emitted {
            self.metrics.count_out(batch.len());
            self.outputs.emit(&output, batch, cancel)?;
        }
        Ok(())
    }
}

enum Destination {
    /// Channels to the consumer's subtasks: one for forward, all otherwise.
    Channels { partitioning: Partitioning, targets: Vec<Sender<Envelope>>, buffers: Vec<RecordBatch>, next: usize },
    Chained(Box<ChainedOperator>),
}

/// One consumer of one output of a subtask.
pub struct Route {
    /// The producer's output feeding it ("" for main).
    output: String,
    /// The consumer's input index.
    input: u32,
    destination: Destination,
    max_parallelism: u32,
}

impl Route {
    pub fn channels(
        output: String,
        input: u32,
        partitioning: Partitioning,
        targets: Vec<Sender<Envelope>>,
        max_parallelism: u32,
    ) -> Self {
        let buffers = match partitioning {
            Partitioning::KeyBy => targets.iter().map(|_| RecordBatch::new()).collect(),
            _ => Vec::new(),
        };
        let destination = Destination::Channels { partitioning, targets, buffers, next: 0 };
        Route { output, input, destination, max_parallelism }
    }

    pub fn chained(output: String, input: u32, operator: ChainedOperator) -> Self {
        Route { output, input, destination: Destination::Chained(Box::new(operator)), max_parallelism: 0 }
    }

    fn emit(&mut self, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
        let input = self.input;
        let max_parallelism = self.max_parallelism;
        match &mut self.destination {
            Destination::Chained(operator) => operator.process(input, batch, cancel),
            Destination::Channels { partitioning, targets, buffers, next } => match partitioning {
                Partitioning::Forward => send_batch(&targets[0], input, batch, cancel),
                Partitioning::Rebalance => {
                    let target = *next;
                    *next = (target + 1) % targets.len();
                    send_batch(&targets[target], input, batch, cancel)
                }
                Partitioning::Broadcast => {
                    let (last, others) = targets.split_last().expect("a route has a target");
                    for target in others {
                        send_batch(target, input, batch.clone(), cancel)?;
                    }
                    send_batch(last, input, batch, cancel)
                }
                Partitioning::KeyBy => partition(&batch, targets, buffers, input, max_parallelism, cancel),
            },
        }
    }

    fn flush(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        match &mut self.destination {
            Destination::Chained(operator) => operator.outputs.flush(cancel),
            Destination::Channels { targets, buffers, .. } => {
                for (target, buffer) in targets.iter().zip(buffers.iter_mut()) {
                    if !buffer.is_empty() {
                        send_batch(target, self.input, std::mem::take(buffer), cancel)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn end(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.flush(cancel)?;
        match &mut self.destination {
            Destination::Chained(operator) => operator.outputs.end(cancel),
            Destination::Channels { targets, .. } => targets
                .iter()
                .try_for_each(|target| send(target, Envelope { input: self.input, message: Message::End }, cancel)),
        }
    }
}

fn send_batch(target: &Sender<Envelope>, input: u32, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
    send(target, Envelope { input, message: Message::Batch(batch) }, cancel)
}

/// Splits `batch` by key group into per-target buffers, sending each buffer
/// as it fills.
fn partition(
    batch: &RecordBatch,
    targets: &[Sender<Envelope>],
    buffers: &mut [RecordBatch],
    input: u32,
    max_parallelism: u32,
    cancel: &Cancel,
) -> Result<(), TaskError> {
    let parallelism = targets.len() as u32;
    for record in batch.iter() {
        let group = key_group_for(record.key, max_parallelism);
        let target = subtask_for_key_group(group, max_parallelism, parallelism) as usize;
        let buffer = &mut buffers[target];
        buffer.push(record.key, record.value, record.timestamp);
        if buffer.len() >= BATCH_SIZE {
            let full = std::mem::replace(buffer, RecordBatch::with_capacity(BATCH_SIZE, 16 * BATCH_SIZE));
            send_batch(&targets[target], input, full, cancel)?;
        }
    }
    Ok(())
}

/// All routes of one subtask.
#[derive(Default)]
pub struct Outputs {
    routes: Vec<Route>,
}

impl Outputs {
    pub fn new(routes: Vec<Route>) -> Self {
        Outputs { routes }
    }

    /// Sends `batch`, emitted on `output`, to every consumer of that output
    /// (moved to the last one, copied to the others). An output nothing
    /// consumes is not an error: its records are dropped.
    pub fn emit(&mut self, output: &str, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
        let mut matching: Vec<&mut Route> = self.routes.iter_mut().filter(|r| r.output == output).collect();
        if let Some(last) = matching.pop() {
            for route in matching {
                route.emit(batch.clone(), cancel)?;
            }
            last.emit(batch, cancel)?;
        }
        Ok(())
    }

    pub fn flush(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.flush(cancel))
    }

    /// Flushes and tells every consumer this subtask has ended.
    pub fn end(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.end(cancel))
    }
}
