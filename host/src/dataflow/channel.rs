//! Messages between subtasks and the routing of a subtask's outputs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender, TryRecvError};

use super::{BATCH_SIZE, RecordBatch};
use crate::job::Partitioning;
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

/// The job was cancelled (another task failed, or the user stopped it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped;

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
fn send(target: &Sender<Envelope>, mut envelope: Envelope, cancel: &Cancel) -> Result<(), Stopped> {
    loop {
        match target.send_timeout(envelope, POLL_INTERVAL) {
            Ok(()) => return Ok(()),
            Err(SendTimeoutError::Timeout(back)) if !cancel.is_cancelled() => envelope = back,
            Err(_) => return Err(Stopped),
        }
    }
}

/// Receives the next message; before waiting on an empty inbox, flushes the
/// task's partial output batches so that records never sit idle.
pub fn receive(inbox: &Receiver<Envelope>, outputs: &mut Outputs, cancel: &Cancel) -> Result<Envelope, Stopped> {
    match inbox.try_recv() {
        Ok(envelope) => return Ok(envelope),
        Err(TryRecvError::Empty) => outputs.flush(cancel)?,
        Err(TryRecvError::Disconnected) => return Err(Stopped),
    }
    loop {
        match inbox.recv_timeout(POLL_INTERVAL) {
            Ok(envelope) => return Ok(envelope),
            Err(RecvTimeoutError::Timeout) if !cancel.is_cancelled() => {}
            Err(_) => return Err(Stopped),
        }
    }
}

/// One downstream consumer of one output of a subtask.
pub struct Route {
    /// The producer's output feeding it ("" for main).
    output: String,
    /// The consumer's input index.
    input: u32,
    partitioning: Partitioning,
    targets: Vec<Sender<Envelope>>,
    /// Key-by: a batch being filled per target.
    buffers: Vec<RecordBatch>,
    next_target: usize,
    max_parallelism: u32,
}

impl Route {
    pub fn new(
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
        Route { output, input, partitioning, targets, buffers, next_target: 0, max_parallelism }
    }

    fn emit(&mut self, batch: RecordBatch, cancel: &Cancel) -> Result<(), Stopped> {
        match self.partitioning {
            Partitioning::Forward => self.send_batch(0, batch, cancel),
            Partitioning::Rebalance => {
                let target = self.next_target;
                self.next_target = (target + 1) % self.targets.len();
                self.send_batch(target, batch, cancel)
            }
            Partitioning::KeyBy => self.partition(&batch, cancel),
            Partitioning::Broadcast => {
                let last = self.targets.len() - 1;
                for target in 0..last {
                    self.send_batch(target, batch.clone(), cancel)?;
                }
                self.send_batch(last, batch, cancel)
            }
        }
    }

    /// Splits `batch` by key group into the per-target buffers, sending
    /// each buffer as it fills.
    fn partition(&mut self, batch: &RecordBatch, cancel: &Cancel) -> Result<(), Stopped> {
        let parallelism = self.targets.len() as u32;
        for record in batch.iter() {
            let group = key_group_for(record.key, self.max_parallelism);
            let target = subtask_for_key_group(group, self.max_parallelism, parallelism) as usize;
            let buffer = &mut self.buffers[target];
            buffer.push(record.key, record.value, record.timestamp);
            if buffer.len() >= BATCH_SIZE {
                let full = std::mem::replace(buffer, RecordBatch::with_capacity(BATCH_SIZE, 16 * BATCH_SIZE));
                self.send_batch(target, full, cancel)?;
            }
        }
        Ok(())
    }

    fn send_batch(&self, target: usize, batch: RecordBatch, cancel: &Cancel) -> Result<(), Stopped> {
        send(&self.targets[target], Envelope { input: self.input, message: Message::Batch(batch) }, cancel)
    }

    fn flush(&mut self, cancel: &Cancel) -> Result<(), Stopped> {
        for target in 0..self.buffers.len() {
            if !self.buffers[target].is_empty() {
                let batch = std::mem::take(&mut self.buffers[target]);
                self.send_batch(target, batch, cancel)?;
            }
        }
        Ok(())
    }

    fn end(&mut self, cancel: &Cancel) -> Result<(), Stopped> {
        self.flush(cancel)?;
        for target in &self.targets {
            send(target, Envelope { input: self.input, message: Message::End }, cancel)?;
        }
        Ok(())
    }
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
    /// (moved to the last one, copied to the others). Nothing consuming an
    /// output is not an error: the records are dropped.
    pub fn emit(&mut self, output: &str, batch: RecordBatch, cancel: &Cancel) -> Result<(), Stopped> {
        let mut matching: Vec<&mut Route> = self.routes.iter_mut().filter(|r| r.output == output).collect();
        if let Some(last) = matching.pop() {
            for route in matching {
                route.emit(batch.clone(), cancel)?;
            }
            last.emit(batch, cancel)?;
        }
        Ok(())
    }

    pub fn flush(&mut self, cancel: &Cancel) -> Result<(), Stopped> {
        self.routes.iter_mut().try_for_each(|r| r.flush(cancel))
    }

    /// Flushes and tells every consumer this subtask has ended.
    pub fn end(&mut self, cancel: &Cancel) -> Result<(), Stopped> {
        self.routes.iter_mut().try_for_each(|r| r.end(cancel))
    }
}
