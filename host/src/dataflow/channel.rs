//! Messages between subtasks, and the routing of a subtask's outputs: over
//! channels to other threads, or straight into a chained operator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, TryRecvError};
use tracing::warn;

use super::inbox::{Inbox, InboxSender, POLL_INTERVAL};
use super::sink::SinkWriter;
use super::snapshot::TaskCheckpoint;
use super::task::{TaskError, TaskMetrics};
use super::{BATCH_SIZE, KeyNumbering, RecordBatch};
use crate::job::Partitioning;
use super::operator::{Emitted, OperatorLogic};
use crate::plugin::{CallError, InputKind};
use crate::prefetch::PREFETCH_AHEAD;
use crate::state::{key_group_of_hash, key_hash, subtask_for_key_group};

pub enum Message {
    Batch(RecordBatch),
    /// No record with a timestamp at or below this will follow on the channel.
    Watermark(i64),
    /// The producer has nothing to send for now: leave the channel out of
    /// the minimum watermark until it sends again.
    Idle,
    /// The producer has no more records.
    End,
    /// Checkpoint barrier `n`: what came before belongs to checkpoint `n`.
    Barrier(u64),
}

/// A message, the input (of the receiving node) it arrived on, and the
/// channel: which producer sent it, numbered per receiving subtask.
pub struct Envelope {
    pub input: u32,
    pub channel: u32,
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

/// Receives the next message; before waiting on an empty inbox, flushes the
/// task's partial output batches so that records never sit idle. Returns
/// `None` once `wake_at` (ms since the epoch) has come without a message.
/// The wait on an empty inbox is counted as idle time in `metrics`.
pub fn receive(
    inbox: &Inbox,
    outputs: &mut Outputs,
    cancel: &Cancel,
    wake_at: Option<i64>,
    metrics: &TaskMetrics,
) -> Result<Option<Envelope>, TaskError> {
    if cancel.is_cancelled() {
        return Err(TaskError::Stopped);
    }
    match inbox.try_recv() {
        Ok(envelope) => return Ok(Some(envelope)),
        Err(TryRecvError::Empty) => outputs.flush(cancel)?,
        Err(TryRecvError::Disconnected) => return Err(TaskError::Stopped),
    }
    wait_for_message(inbox, cancel, wake_at, metrics)
}

/// Waits on an empty inbox for a message, until `wake_at` or cancellation,
/// counted as idle as it goes (a long wait shows while it lasts).
fn wait_for_message(
    inbox: &Inbox,
    cancel: &Cancel,
    wake_at: Option<i64>,
    metrics: &TaskMetrics,
) -> Result<Option<Envelope>, TaskError> {
    loop {
        let wait = match wake_at {
            Some(at) => {
                // Saturating: a timer may be set for any time, i64::MIN too.
                let left = at.saturating_sub(crate::plugin::now_ms());
                if left <= 0 {
                    return Ok(None);
                }
                POLL_INTERVAL.min(Duration::from_millis(left as u64))
            }
            None => POLL_INTERVAL,
        };
        let waited = Instant::now();
        let received = inbox.recv_timeout(wait);
        metrics.count_idle(waited.elapsed());
        match received {
            Ok(envelope) => return Ok(Some(envelope)),
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
    pub checkpoint: Option<TaskCheckpoint>,
}

impl ChainedOperator {
    /// Snapshots the operator at barrier `n` (its one input is aligned by
    /// construction), then passes the barrier on.
    fn barrier(&mut self, n: u64, cancel: &Cancel) -> Result<(), TaskError> {
        if let Some(checkpoint) = &self.checkpoint {
            let snapshot = checkpoint.snapshot_operator(n, self.instance.as_mut(), std::time::Duration::ZERO);
            snapshot.map_err(|error| TaskError::operator(&self.label, error))?;
        }
        self.outputs.barrier(n, cancel)
    }

    /// Processes one batch and passes on what the operator emits.
    pub fn process(&mut self, input: u32, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
        self.metrics.count_in(batch.len());
        let emitted = self.instance.process(input, batch, self.kind);
        self.pass_on(emitted, cancel)
    }

    /// Advances the operator's watermark (firing its timers), then forwards it.
    pub fn watermark(&mut self, watermark: i64, cancel: &Cancel) -> Result<(), TaskError> {
        self.metrics.set_watermark(watermark);
        let emitted = self.instance.advance_watermark(watermark);
        self.pass_on(emitted, cancel)?;
        self.outputs.watermark(watermark, cancel)
    }

    /// Its one input is idle, so it is: passes on what it holds and says so.
    /// (Its input's next watermark, which it forwards, says it is not.)
    fn idle(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.outputs.flush(cancel)?;
        self.outputs.idle(cancel)
    }

    /// Fires the processing-time timers due at `now`, here and further down
    /// the chain.
    fn tick(&mut self, now: i64, cancel: &Cancel) -> Result<(), TaskError> {
        if self.instance.next_processing_timer().is_some_and(|due| due <= now) {
            let emitted = self.instance.fire_processing_timers(now);
            self.pass_on(emitted, cancel)?;
        }
        self.outputs.tick(now, cancel)
    }

    fn pass_on(&mut self, emitted: Result<Emitted, CallError>, cancel: &Cancel) -> Result<(), TaskError> {
        let emitted = emitted.map_err(|error| TaskError::operator(&self.label, error))?;
        for (output, batch) in emitted {
            self.metrics.count_out(batch.len());
            self.outputs.emit(&output, batch, cancel)?;
        }
        Ok(())
    }
}

enum Destination {
    /// Channels to the consumer's subtasks: one for forward, all otherwise.
    /// `metrics` are the sending subtask's, where the time it is held back
    /// by full channels is counted.
    Channels {
        partitioning: Partitioning,
        targets: Vec<InboxSender>,
        buffers: Vec<Gathered>,
        routing: Routing,
        next: usize,
        metrics: Arc<TaskMetrics>,
    },
    Chained(Box<ChainedOperator>),
    /// A sink subtask run inline (see [`super::sink`]).
    ChainedSink(Box<SinkWriter>),
}

/// One consumer of one output of a subtask.
pub struct Route {
    /// The producer's output feeding it ("" for main).
    output: String,
    /// The consumer's input index.
    input: u32,
    /// This producer's channel number at the consumer.
    channel: u32,
    destination: Destination,
    max_parallelism: u32,
}

impl Route {
    pub fn channels(
        output: String,
        input: u32,
        channel: u32,
        partitioning: Partitioning,
        targets: Vec<InboxSender>,
        max_parallelism: u32,
        metrics: Arc<TaskMetrics>,
    ) -> Self {
        let buffers = match partitioning {
            Partitioning::KeyBy => targets.iter().map(|_| Gathered::default()).collect(),
            _ => Vec::new(),
        };
        let destination = Destination::Channels { partitioning, targets, buffers, routing: Routing::default(), next: 0, metrics };
        Route { output, input, channel, destination, max_parallelism }
    }

    pub fn chained(output: String, input: u32, operator: ChainedOperator) -> Self {
        Route { output, input, channel: 0, destination: Destination::Chained(Box::new(operator)), max_parallelism: 0 }
    }

    pub fn chained_sink(output: String, input: u32, sink: SinkWriter) -> Self {
        Route { output, input, channel: 0, destination: Destination::ChainedSink(Box::new(sink)), max_parallelism: 0 }
    }

    fn envelope(&self, message: Message) -> Envelope {
        Envelope { input: self.input, channel: self.channel, message }
    }

    /// Sends a control message (watermark, idle, end) to every target, after
    /// the records buffered before it: it never overtakes them.
    fn signal(&mut self, message: impl Fn() -> Message, cancel: &Cancel) -> Result<(), TaskError> {
        self.flush(cancel)?;
        let Destination::Channels { targets, metrics, .. } = &self.destination else { return Ok(()) };
        targets.iter().try_for_each(|target| target.send(self.envelope(message()), cancel, metrics))
    }

    fn emit(&mut self, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
        let (input, channel) = (self.input, self.channel);
        let max_parallelism = self.max_parallelism;
        match &mut self.destination {
            Destination::Chained(operator) => operator.process(input, batch, cancel),
            Destination::ChainedSink(sink) => sink.write(&batch),
            Destination::Channels { partitioning, targets, buffers, routing, next, metrics } => {
                let send_batch = |target: &InboxSender, batch| {
                    target.send(Envelope { input, channel, message: Message::Batch(batch) }, cancel, metrics)
                };
                match partitioning {
                    Partitioning::Forward => send_batch(&targets[0], batch),
                    Partitioning::Rebalance => {
                        let target = *next;
                        *next = (target + 1) % targets.len();
                        send_batch(&targets[target], batch)
                    }
                    Partitioning::Broadcast => {
                        let (last, others) = targets.split_last().expect("a route has a target");
                        for target in others {
                            send_batch(target, batch.clone())?;
                        }
                        send_batch(last, batch)
                    }
                    // One consumer, nothing buffered and a batch worth sending
                    // alone (a bounded one: `Outputs::emit`): it goes on
                    // whole, its keys hashed and numbered, instead of event
                    // by event into the buffer (smaller batches are still
                    // gathered there).
                    Partitioning::KeyBy if targets.len() == 1 && buffers[0].batch.is_empty() && batch.len() >= BATCH_SIZE / 2 => {
                        let mut batch = batch;
                        batch.number_keys(&mut buffers[0].numbering);
                        send_batch(&targets[0], batch)
                    }
                    Partitioning::KeyBy => partition(&batch, targets, buffers, routing, max_parallelism, send_batch),
                }
            }
        }
    }

    fn flush(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        let (input, channel) = (self.input, self.channel);
        match &mut self.destination {
            Destination::Chained(operator) => operator.outputs.flush(cancel),
            Destination::ChainedSink(_) => Ok(()),
            Destination::Channels { targets, buffers, metrics, .. } => {
                for (target, buffer) in targets.iter().zip(buffers.iter_mut()) {
                    if !buffer.batch.is_empty() {
                        let message = Message::Batch(buffer.take());
                        target.send(Envelope { input, channel, message }, cancel, metrics)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn watermark(&mut self, watermark: i64, cancel: &Cancel) -> Result<(), TaskError> {
        match &mut self.destination {
            Destination::Chained(operator) => operator.watermark(watermark, cancel),
            Destination::ChainedSink(sink) => {
                sink.watermark(watermark);
                Ok(())
            }
            Destination::Channels { .. } => self.signal(|| Message::Watermark(watermark), cancel),
        }
    }

    fn idle(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        match &mut self.destination {
            // A chained operator has this one input: it is idle too.
            Destination::Chained(operator) => operator.idle(cancel),
            Destination::ChainedSink(_) => Ok(()),
            Destination::Channels { .. } => self.signal(|| Message::Idle, cancel),
        }
    }

    fn barrier(&mut self, n: u64, cancel: &Cancel) -> Result<(), TaskError> {
        match &mut self.destination {
            Destination::Chained(operator) => operator.barrier(n, cancel),
            // Its one input is aligned by construction.
            Destination::ChainedSink(sink) => sink.barrier(n, Duration::ZERO),
            Destination::Channels { .. } => self.signal(|| Message::Barrier(n), cancel),
        }
    }

    fn end(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        match &mut self.destination {
            Destination::Chained(operator) => {
                // End of input is the end of time: fire every event-time timer.
                operator.watermark(i64::MAX, cancel)?;
                operator.outputs.end(cancel)?;
                if let Some(checkpoint) = &operator.checkpoint {
                    checkpoint.operator_finished();
                }
                Ok(())
            }
            Destination::ChainedSink(sink) => sink.finish(),
            Destination::Channels { .. } => self.signal(|| Message::End, cancel),
        }
    }
}

/// The events a key-by edge gathers for one consumer, their keys numbered
/// as they come (see [`KeyNumbering`]).
#[derive(Default)]
struct Gathered {
    batch: RecordBatch,
    numbering: KeyNumbering,
}

impl Gathered {
    /// The batch gathered, to send; the next starts empty.
    fn take(&mut self) -> RecordBatch {
        std::mem::take(&mut self.batch)
    }
}

/// Splits `batch` by key group into per-target buffers, sending each buffer
/// as it fills: first every event's target ([`Routing`]), then each
/// target's events in turn.
fn partition(
    batch: &RecordBatch,
    targets: &[InboxSender],
    buffers: &mut [Gathered],
    routing: &mut Routing,
    max_parallelism: u32,
    send_batch: impl Fn(&InboxSender, RecordBatch) -> Result<(), TaskError>,
) -> Result<(), TaskError> {
    routing.route(batch, targets.len(), max_parallelism);
    for (target, (sender, buffer)) in targets.iter().zip(buffers.iter_mut()).enumerate() {
        let events = routing.events_of(target);
        for (n, &i) in events.iter().enumerate() {
            // The numbering entry a few events on is fetched early (see
            // `KeyNumbering::prefetch`).
            if let Some(&ahead) = events.get(n + PREFETCH_AHEAD) {
                buffer.numbering.prefetch(routing.hashes[ahead as usize]);
            }
            if buffer.batch.is_empty() {
                // Room for a whole batch at once, not grown event by event. (A
                // buffer gets it when its first event comes, not when it is
                // sent or flushed: a quiet stream holds no empty buffers.)
                buffer.batch.reserve(BATCH_SIZE, 16 * BATCH_SIZE);
            }
            let i = i as usize;
            buffer.batch.push_from_numbered(batch, i, routing.hashes[i], &mut buffer.numbering);
            if buffer.batch.is_full(BATCH_SIZE) {
                send_batch(sender, buffer.take())?;
            }
        }
    }
    Ok(())
}

/// Where the events of one batch go, found before any is copied.
///
/// Copying events into their consumers' buffers in the batch's order
/// switches consumer at random from one event to the next, and with it
/// the buffer written and the numbering table probed: at parallelism 2,
/// two of each, more than the first- and second-level caches hold beside
/// the consumers' state when the threads share cores. Sorted by consumer
/// first (a counting sort of the indices, which keeps each consumer's
/// events in order), the copy fills one buffer from one table at a time;
/// it cut the sources' processor time at parallelism 2 by a quarter.
#[derive(Debug, Default)]
struct Routing {
    /// Each event's key hash.
    hashes: Vec<u64>,
    /// Each event's target, found once for the count and the placing.
    targets: Vec<u32>,
    /// The events' indices, grouped by target, each group in order.
    order: Vec<u32>,
    /// Where each target's group starts in `order`, and where the last ends.
    bounds: Vec<u32>,
    /// Where each target's next event goes in `order`, while placing them.
    places: Vec<u32>,
}

impl Routing {
    /// Hashes the keys of `batch` and groups its events by which of
    /// `parallelism` targets owns their key group.
    fn route(&mut self, batch: &RecordBatch, parallelism: usize, max_parallelism: u32) {
        let target_of = |hash: u64| {
            let group = key_group_of_hash(hash, max_parallelism);
            subtask_for_key_group(group, max_parallelism, parallelism as u32)
        };
        self.hashes.clear();
        self.hashes.extend((0..batch.len()).map(|i| key_hash(batch.key(i))));
        self.targets.clear();
        self.targets.extend(self.hashes.iter().map(|&hash| target_of(hash)));
        self.bounds.clear();
        self.bounds.resize(parallelism + 1, 0);
        for &target in &self.targets {
            self.bounds[target as usize + 1] += 1;
        }
        for target in 1..=parallelism {
            self.bounds[target] += self.bounds[target - 1];
        }
        self.order.clear();
        self.order.resize(batch.len(), 0);
        self.places.clear();
        self.places.extend_from_slice(&self.bounds[..parallelism]);
        for (i, &target) in self.targets.iter().enumerate() {
            let place = &mut self.places[target as usize];
            self.order[*place as usize] = i as u32;
            *place += 1;
        }
    }

    /// The events of the batch routed last that go to `target`, in order.
    fn events_of(&self, target: usize) -> &[u32] {
        &self.order[self.bounds[target] as usize..self.bounds[target + 1] as usize]
    }
}

/// How many outputs nothing reads a subtask names in the log.
const NAMED_UNREAD: usize = 10;

/// All routes of one subtask.
#[derive(Default)]
pub struct Outputs {
    /// The node whose outputs these are (its name or uid), for messages.
    node: String,
    routes: Vec<Route>,
    /// Outputs it emitted to that nothing reads, said once each.
    unread: Vec<String>,
    /// Whether it said that there are more than [`NAMED_UNREAD`].
    more_unread_said: bool,
}

/// The longest output name a log line shows whole.
const SHOWN_NAME_CHARS: usize = 100;

/// `name` as a log line shows it: whole up to [`SHOWN_NAME_CHARS`], else
/// its start and its length.
fn shortened(name: &str) -> String {
    match name.char_indices().nth(SHOWN_NAME_CHARS) {
        Some((end, _)) => format!("{}… ({} bytes)", &name[..end], name.len()),
        None => name.to_owned(),
    }
}

impl Outputs {
    pub fn new(node: &str, routes: Vec<Route>) -> Self {
        Outputs { node: node.to_owned(), routes, unread: Vec::new(), more_unread_said: false }
    }

    /// Sends `batch`, emitted on `output`, to every consumer of that output
    /// (moved to the last one, copied to the others). An output nothing
    /// consumes is not an error — a plugin may write to side outputs a job
    /// does not want — but its records are dropped, and the first time the
    /// log says so: a sink reading a misspelt output name waits in silence.
    ///
    /// A plugin's output batch is as large as its own memory cap allowed:
    /// it goes on cut into batches the next plugin can hold, as sources'
    /// are ([`RecordBatch::into_bounded`]), on every kind of edge.
    pub fn emit(&mut self, output: &str, batch: RecordBatch, cancel: &Cancel) -> Result<(), TaskError> {
        let mut matching: Vec<&mut Route> = self.routes.iter_mut().filter(|r| r.output == output).collect();
        let Some(last) = matching.pop() else {
            self.dropped(output);
            return Ok(());
        };
        for piece in batch.into_bounded() {
            for route in &mut matching {
                route.emit(piece.clone(), cancel)?;
            }
            last.emit(piece, cancel)?;
        }
        Ok(())
    }

    /// Says, once per output, that what it emits to `output` is dropped —
    /// for the first [`NAMED_UNREAD`] such outputs, then once that there
    /// are more: a plugin emitting to an output per category would flood
    /// the log.
    fn dropped(&mut self, output: &str) {
        if self.more_unread_said || self.unread.iter().any(|o| o == output) {
            return;
        }
        if self.unread.len() == NAMED_UNREAD {
            self.more_unread_said = true;
            warn!(node = %self.node, named = NAMED_UNREAD, "more outputs nothing reads; their records are dropped too, and they are not named");
            return;
        }
        self.unread.push(output.to_owned());
        // A plugin names its outputs: a name of megabytes is logged short.
        let output = shortened(output);
        let input = if output.is_empty() { self.node.clone() } else { format!("{}.{output}", self.node) };
        warn!(
            node = %self.node,
            %output,
            "records emitted to an output nothing reads are dropped; to keep them, give a sink or an operator `input = {input:?}`"
        );
    }

    pub fn flush(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.flush(cancel))
    }

    /// Flushes and tells every consumer this subtask has ended.
    pub fn end(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.end(cancel))
    }

    /// Sends a watermark to every consumer, behind the records before it.
    pub fn watermark(&mut self, watermark: i64, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.watermark(watermark, cancel))
    }

    /// Sends checkpoint barrier `n` to every consumer, behind the records
    /// before it (snapshotting chained operators on the way).
    pub fn barrier(&mut self, n: u64, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.barrier(n, cancel))
    }

    /// Tells every consumer this subtask is idle.
    pub fn idle(&mut self, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|r| r.idle(cancel))
    }

    /// Fires due processing-time timers of operators chained behind this task.
    pub fn tick(&mut self, now: i64, cancel: &Cancel) -> Result<(), TaskError> {
        self.routes.iter_mut().try_for_each(|route| match &mut route.destination {
            Destination::Chained(operator) => operator.tick(now, cancel),
            Destination::ChainedSink(_) | Destination::Channels { .. } => Ok(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin names its outputs: an output of megabytes nothing reads
    /// wrote 168 MB of log (the sandbox audit).
    #[test]
    fn a_long_output_name_is_logged_short() {
        assert_eq!(shortened("late"), "late");
        let long = "é".repeat(5000);
        let shown = shortened(&long);
        assert!(shown.starts_with(&"é".repeat(100)) && shown.ends_with("… (10000 bytes)"), "{shown}");
    }

    /// The slots a batch's keys get when numbered on their own.
    fn own_slots(batch: &RecordBatch) -> Vec<u32> {
        let mut copy = RecordBatch::new();
        batch.iter().for_each(|record| copy.push(record.key, record.value, record.timestamp));
        copy.number_keys(&mut KeyNumbering::default());
        copy.key_slots().expect("numbered").to_vec()
    }

    fn keyed_batch(events: usize, keys: usize, first: usize) -> RecordBatch {
        let mut batch = RecordBatch::new();
        for i in first..first + events {
            batch.push(format!("key-{}", i % keys).as_bytes(), b"v", None);
        }
        batch
    }

    /// A wait for a timer set for a time long past — i64::MIN — ends at
    /// once; it overflowed into a wait for ever (and held back every other
    /// processing-time timer of the operator).
    #[test]
    fn a_wait_for_a_time_long_past_ends_at_once() {
        let (_sender, inbox) = crate::dataflow::inbox::unbounded_inbox();
        let metrics = TaskMetrics::default();
        // Cut short, so that a wait that would not end fails the test.
        let cancel = Cancel::default();
        let cancel_later = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            cancel_later.cancel();
        });
        for at in [i64::MIN, i64::MIN + 1, 0] {
            let waited = wait_for_message(&inbox, &cancel, Some(at), &metrics);
            assert!(matches!(waited, Ok(None)), "the wait for {at} did not end by itself");
        }
    }

    /// Whatever way a batch reaches a single consumer — passed on whole or
    /// gathered event by event, in any order — its slots are its own keys'
    /// numbering, not left over from the batch before it.
    #[test]
    fn a_single_consumer_gets_each_batch_numbered_afresh() {
        let (sender, receiver) = crate::dataflow::inbox::unbounded_inbox();
        let route = Route::channels(String::new(), 0, 0, Partitioning::KeyBy, vec![sender], 128, Arc::default());
        let mut outputs = Outputs::new("test", vec![route]);
        let cancel = Cancel::default();
        let sent = [keyed_batch(BATCH_SIZE, 1000, 0), keyed_batch(10, 7, 3), keyed_batch(BATCH_SIZE, 300, 5), keyed_batch(3, 2, 0)];
        for batch in &sent {
            outputs.emit("", batch.clone(), &cancel).unwrap();
            outputs.flush(&cancel).unwrap();
        }
        for expected in &sent {
            let Message::Batch(got) = receiver.try_recv().expect("a batch per batch sent").message else {
                panic!("only batches were sent")
            };
            assert_eq!(got.iter().collect::<Vec<_>>(), expected.iter().collect::<Vec<_>>());
            assert_eq!(got.key_slots(), Some(&own_slots(expected)[..]), "batch of {} events", expected.len());
        }
    }

    /// Routing groups a batch's events by the target owning their key
    /// group: every event once, in order within its group, and targets
    /// that own none of them get an empty group.
    #[test]
    fn routing_groups_events_by_target_in_order() {
        let max_parallelism = 128;
        let batch = keyed_batch(1_000, 37, 0);
        let mut routing = Routing::default();
        for parallelism in [1, 2, 3, 4, 200] {
            routing.route(&batch, parallelism, max_parallelism);
            let owner = |i: usize| {
                let group = key_group_of_hash(key_hash(batch.key(i)), max_parallelism);
                subtask_for_key_group(group, max_parallelism, parallelism as u32) as usize
            };
            for target in 0..parallelism {
                let expected: Vec<u32> = (0..batch.len()).filter(|&i| owner(i) == target).map(|i| i as u32).collect();
                assert_eq!(routing.events_of(target), expected, "target {target} of {parallelism}");
            }
        }
        routing.route(&RecordBatch::new(), 2, max_parallelism);
        assert!(routing.events_of(0).is_empty() && routing.events_of(1).is_empty());
    }

    /// Split between consumers, each event reaches the one owning its key
    /// group, in order, and each batch a consumer gets is numbered as its
    /// own — for batches shorter and longer than the exchange's lookahead,
    /// and longer than a batch.
    #[test]
    fn a_key_by_exchange_routes_each_event_to_its_key_groups_owner() {
        let (max_parallelism, consumers) = (128, 3);
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..consumers).map(|_| crate::dataflow::inbox::unbounded_inbox()).unzip();
        let route = Route::channels(String::new(), 0, 0, Partitioning::KeyBy, senders, max_parallelism, Arc::default());
        let mut outputs = Outputs::new("test", vec![route]);
        let cancel = Cancel::default();
        let sent = [keyed_batch(3, 2, 0), keyed_batch(PREFETCH_AHEAD + 1, 5, 1), keyed_batch(2 * BATCH_SIZE + 5, 5000, 7)];
        for batch in &sent {
            outputs.emit("", batch.clone(), &cancel).unwrap();
        }
        outputs.flush(&cancel).unwrap();
        for (consumer, receiver) in receivers.iter().enumerate() {
            let owner = |key: &[u8]| subtask_for_key_group(key_group_of_hash(key_hash(key), max_parallelism), max_parallelism, consumers);
            let expected: Vec<_> = sent.iter().flat_map(|b| b.iter()).filter(|r| owner(r.key) == consumer as u32).collect();
            let mut got = Vec::new();
            while let Ok(envelope) = receiver.try_recv() {
                let Message::Batch(batch) = envelope.message else { panic!("only batches were sent") };
                assert_eq!(batch.key_slots(), Some(&own_slots(&batch)[..]), "consumer {consumer}");
                assert_eq!(batch.key_hashes().unwrap(), batch.iter().map(|r| key_hash(r.key)).collect::<Vec<_>>());
                got.extend(batch.iter().map(|r| (r.key.to_vec(), r.value.to_vec())));
            }
            assert!(!expected.is_empty());
            assert_eq!(got, expected.iter().map(|r| (r.key.to_vec(), r.value.to_vec())).collect::<Vec<_>>(), "consumer {consumer}");
        }
    }
}
