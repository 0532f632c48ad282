//! The loops of source, operator and sink subtasks.

use std::sync::{Arc, Mutex, OnceLock};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::cpu::ThreadCpu;
use super::channel::{Cancel, Envelope, Message, Outputs, receive};
use super::inbox::Inbox;
use super::sink::SinkWriter;
use super::snapshot::TaskCheckpoint;
use crate::checkpoint::{Aligned, BarrierAligner};
use super::operator::Emitted;
use super::alignment::{AlignedSource, Gate};
use super::time::{InputClock, Signal, StalledTime, WatermarkGenerator};
use super::{BATCH_SIZE, RecordBatch};
use crate::connectors::{Backlog, ConnectorError, Poll, Source, SourceSplit};
use crate::control::Counters;
use super::operator::OperatorLogic;
use crate::plugin::{CallError, InputKind, now_ms};
use crate::state::StateSizeGauge;

/// The longest a source keeps records in partly filled output batches.
const SOURCE_FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// How often a source held back by watermark alignment looks again.
const ALIGNMENT_WAIT: Duration = Duration::from_millis(1);

/// Why a subtask stopped early.
#[derive(Debug)]
pub enum TaskError {
    /// The job was cancelled; not this task's fault.
    Stopped,
    /// A call into an operator failed; `label` names the operator subtask
    /// (which may be chained into another task).
    Operator { label: String, error: CallError },
    /// A sink failed; `label` names the sink subtask (which may be chained
    /// into another task).
    Sink { label: String, error: ConnectorError },
    Connector(ConnectorError),
    /// The task's thread panicked: a bug in Weir, not in the job.
    Panicked(String),
}

impl TaskError {
    /// A failed call into operator subtask `label`; one the job's cancel
    /// interrupted is the job's stop, not the operator's failure.
    pub fn operator(label: &str, error: CallError) -> Self {
        match error {
            CallError::Cancelled => TaskError::Stopped,
            error => TaskError::Operator { label: label.to_owned(), error },
        }
    }
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
    /// Time spent waiting to send into full channels (backpressure), ns.
    pub backpressured_ns: AtomicU64,
    /// Time spent with nothing to do, ns: an empty inbox, or a source with
    /// nothing to read yet (its rate, its broker, its alignment group).
    pub idle_ns: AtomicU64,
    /// The processor time of the task's thread (for a subtask chained
    /// into another's task, none: its time is that task's).
    pub cpu: ThreadCpu,
    /// For a subtask chained into another's task, that task's figures: it
    /// waits for input when that thread does.
    head: Option<Arc<TaskMetrics>>,
    /// When its thread ended: a finished subtask is idle from then on.
    ended: OnceLock<Instant>,
    /// Where its event time stands (see [`TaskMetrics::watermark`]).
    watermark: WatermarkGauge,
    /// A source's input yet to read, as it last said (see [`Backlog`]).
    backlog: Mutex<Option<Backlog>>,
    /// An operator's keyed state, as its instance last measured it.
    pub state_size: StateSizeGauge,
}

/// A subtask's latest watermark, for the progress reporter: `i64::MIN`
/// until it has one.
#[derive(Debug)]
struct WatermarkGauge(AtomicI64);

impl Default for WatermarkGauge {
    fn default() -> Self {
        WatermarkGauge(AtomicI64::new(i64::MIN))
    }
}

impl TaskMetrics {
    /// The figures of a subtask run by the thread of the task `upstream`
    /// belongs to.
    pub fn chained_to(upstream: &Arc<TaskMetrics>) -> Self {
        let head = upstream.head.clone().unwrap_or_else(|| upstream.clone());
        TaskMetrics { head: Some(head), ..TaskMetrics::default() }
    }

    /// Notes, on the task's thread as it ends, its final processor time
    /// and when it ended.
    pub fn finish(&self) {
        self.cpu.end();
        let _ = self.ended.set(Instant::now());
    }

    /// Time with nothing to do so far, ms: waits for input or a source's
    /// pace, and all the time since the thread ended.
    fn idle_ms(&self) -> f64 {
        if let Some(head) = &self.head {
            return head.idle_ms();
        }
        let since_end = self.ended.get().map_or(Duration::ZERO, Instant::elapsed);
        (self.idle_ns.load(Ordering::Relaxed) as f64 / 1e6) + since_end.as_secs_f64() * 1e3
    }

    pub fn count_backpressure(&self, waited: Duration) {
        self.backpressured_ns.fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn count_idle(&self, waited: Duration) {
        self.idle_ns.fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn count_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn count_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Notes the subtask's new watermark: the one a source sent, or the
    /// one an operator or sink has from its inputs (their lowest).
    pub fn set_watermark(&self, watermark: i64) {
        self.watermark.0.store(watermark, Ordering::Relaxed);
    }

    /// The subtask's event time so far, Flink's `currentInputWatermark`
    /// (`i64::MAX` once its input has ended); `None` before its first
    /// watermark — as long as that lasts, its event-time windows and
    /// timers cannot fire.
    pub fn watermark(&self) -> Option<i64> {
        Some(self.watermark.0.load(Ordering::Relaxed)).filter(|&w| w != i64::MIN)
    }

    /// Notes a source subtask's backlog.
    pub fn set_backlog(&self, backlog: Option<Backlog>) {
        *self.backlog.lock().expect("backlog") = backlog;
    }

    /// A source subtask's backlog, as it last noted it.
    pub fn backlog(&self) -> Option<Backlog> {
        self.backlog.lock().expect("backlog").clone()
    }

    /// What it has counted so far.
    pub fn counters(&self) -> Counters {
        Counters {
            records_in: self.records_in.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
            backpressured_ms: self.backpressured_ns.load(Ordering::Relaxed) as f64 / 1e6,
            idle_ms: self.idle_ms(),
            cpu_ms: self.cpu.time().map(|t| t.as_secs_f64() * 1e3),
        }
    }
}

/// What every subtask loop needs.
pub struct TaskContext {
    pub label: String,
    pub cancel: Cancel,
    pub metrics: Arc<TaskMetrics>,
    pub outputs: Outputs,
    /// Set when the job takes checkpoints.
    pub checkpoint: Option<TaskCheckpoint>,
}

impl TaskContext {
    /// The next message: one held back by alignment first, else from the
    /// inbox (`None` when `wake_at` came first).
    fn next(
        &mut self,
        aligner: &mut BarrierAligner,
        inbox: &Inbox,
        wake_at: Option<i64>,
    ) -> Result<Option<Envelope>, TaskError> {
        match aligner.replayed() {
            Some(envelope) => Ok(Some(envelope)),
            None => receive(inbox, &mut self.outputs, &self.cancel, wake_at, &self.metrics),
        }
    }
}

/// Polls the source until it is exhausted, sending batches downstream,
/// each followed by a watermark when event time has advanced. A source in
/// an alignment group does not poll while it is too far ahead of the group
/// (see [`super::alignment`]), but still sends barriers.
pub fn run_source(
    mut ctx: TaskContext,
    mut source: Box<dyn Source>,
    mut watermarks: WatermarkGenerator,
    mut alignment: Option<AlignedSource>,
) -> Result<(), TaskError> {
    let mut last_flush = Instant::now();
    let mut last_barrier = 0;
    // Positions at barriers whose checkpoints have not completed yet.
    let mut in_flight: Vec<(u64, Vec<SourceSplit>)> = Vec::new();
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(TaskError::Stopped);
        }
        if let Some(checkpoint) = &ctx.checkpoint {
            notify_completed(source.as_mut(), &mut in_flight, checkpoint.hub.completed());
        }
        if let Some(checkpoint) = &ctx.checkpoint
            && let Some(n) = checkpoint.due(last_barrier)
        {
            last_barrier = n;
            let splits = source.splits();
            ctx.outputs.barrier(n, &ctx.cancel)?;
            in_flight.push((n, splits.clone()));
            checkpoint.ack_splits(n, splits);
            hold_if_stopping(&mut ctx, n)?;
        }
        match alignment.as_mut().map_or(Gate::Read, AlignedSource::gate) {
            Gate::Read => {}
            Gate::Wait { first } => {
                if first {
                    tracing::debug!(task = %ctx.label, "waits: more than max_drift_ms ahead of its alignment group");
                }
                // What was read before the wait must not sit in partial batches.
                if first || last_flush.elapsed() >= SOURCE_FLUSH_INTERVAL {
                    flush_partial(&mut ctx, &mut last_flush)?;
                }
                let waited = Instant::now();
                std::thread::sleep(ALIGNMENT_WAIT);
                ctx.metrics.count_idle(waited.elapsed());
                continue;
            }
            Gate::ReadAgain => {
                tracing::debug!(task = %ctx.label, "reads again: its alignment group caught up");
                source.resume();
                watermarks.resume();
            }
        }
        let mut batch = RecordBatch::with_capacity(BATCH_SIZE, 16 * BATCH_SIZE);
        let polled = Instant::now();
        let poll = source.poll(&mut batch, BATCH_SIZE)?;
        if batch.is_empty() && poll == Poll::Ready {
            // Nothing to read yet: the poll waited on the rate or the broker.
            ctx.metrics.count_idle(polled.elapsed());
        }
        let signal = source.split_watermarks().unwrap_or_else(|| watermarks.observe(&batch));
        if !batch.is_empty() {
            ctx.metrics.count_out(batch.len());
            ctx.outputs.emit("", batch, &ctx.cancel)?;
        }
        match signal {
            Some(Signal::Watermark(watermark)) => {
                ctx.metrics.set_watermark(watermark);
                ctx.outputs.watermark(watermark, &ctx.cancel)?
            }
            Some(Signal::Idle) => ctx.outputs.idle(&ctx.cancel)?,
            None => {}
        }
        if let (Some(aligned), Some(signal)) = (&alignment, signal) {
            aligned.sent(signal);
        }
        if poll == Poll::Exhausted {
            if let Some(checkpoint) = &ctx.checkpoint {
                checkpoint.source_finished(source.splits());
            }
            ctx.metrics.set_watermark(i64::MAX);
            ctx.metrics.set_backlog(source.backlog());
            return ctx.outputs.end(&ctx.cancel);
        }
        // A slow source must not leave records in partly filled batches.
        if last_flush.elapsed() >= SOURCE_FLUSH_INTERVAL {
            flush_partial(&mut ctx, &mut last_flush)?;
            ctx.metrics.set_backlog(source.backlog());
        }
    }
}

/// Fires the due processing-time timers of operators chained behind a
/// source and sends its partly filled batches on; `last_flush` records when.
fn flush_partial(ctx: &mut TaskContext, last_flush: &mut Instant) -> Result<(), TaskError> {
    ctx.outputs.tick(now_ms(), &ctx.cancel)?;
    ctx.outputs.flush(&ctx.cancel)?;
    *last_flush = Instant::now();
    Ok(())
}

/// Tells the source about the checkpoints among `in_flight` that have
/// completed (up to `completed`), newest last, and forgets them.
fn notify_completed(source: &mut dyn Source, in_flight: &mut Vec<(u64, Vec<SourceSplit>)>, completed: u64) {
    let done = in_flight.iter().take_while(|(n, _)| *n <= completed).count();
    if done > 0 {
        let (n, splits) = &in_flight[done - 1];
        source.checkpoint_complete(*n, splits);
        in_flight.drain(..done);
    }
}

/// Feeds batches to the plugin instance and routes what it emits; moves
/// its watermark as its input channels' watermarks move (firing event-time
/// timers before forwarding it) and fires processing-time timers as they
/// fall due, until every producer has ended. `inputs`: the kind and name
/// of each input, in the order of the job file's `inputs`.
pub fn run_operator(
    mut ctx: TaskContext,
    mut instance: Box<dyn OperatorLogic>,
    inbox: Inbox,
    (input_kinds, input_names): (Vec<InputKind>, Vec<String>),
    producers: usize,
) -> Result<(), TaskError> {
    let mut clock = InputClock::new(producers);
    let mut aligner = BarrierAligner::new(producers);
    let mut ended = 0;
    let mut stalled = StalledTime::default();
    let mut overflow = HeldStateOverflow::default();
    // The input each channel delivered batches of, to name it in the log.
    let mut input_of: Vec<Option<u32>> = vec![None; producers];
    // Whether the consumers were told this subtask is idle.
    let mut told_idle = false;
    while ended < producers {
        let Some(envelope) = ctx.next(&mut aligner, &inbox, instance.next_processing_timer())? else {
            let emitted = instance.fire_processing_timers(now_ms());
            pass_on(&mut ctx, emitted)?;
            continue;
        };
        let envelope = match aligner.accept(envelope) {
            None => continue,
            Some(Aligned::Message(envelope)) => envelope,
            Some(Aligned::Barrier { checkpoint: n, alignment }) => {
                if let Some(checkpoint) = &ctx.checkpoint {
                    let snapshot = checkpoint.snapshot_operator(n, instance.as_mut(), alignment);
                    snapshot.map_err(|error| TaskError::operator(&ctx.label, error))?;
                }
                ctx.outputs.barrier(n, &ctx.cancel)?;
                hold_if_stopping(&mut ctx, n)?;
                continue;
            }
        };
        let advanced = match envelope.message {
            Message::Batch(batch) => {
                ctx.metrics.count_in(batch.len());
                input_of[envelope.channel as usize] = Some(envelope.input);
                let kind = input_kinds.get(envelope.input as usize).copied().unwrap_or(InputKind::Plain);
                let emitted = instance.process(envelope.input, batch, kind);
                pass_on(&mut ctx, emitted)?;
                overflow.check(&ctx.label, instance.as_ref());
                None
            }
            // Barriers never come here: the aligner has taken them.
            other => {
                let advanced = observe_time(&mut clock, envelope.channel, &other, &mut ended);
                if advanced.is_none() && let Some(channels) = stalled.check(&clock, Instant::now()) {
                    say_event_time_is_held_back(&ctx.label, &channels, &input_of, &input_names);
                }
                advanced
            }
        };
        if let Some(watermark) = advanced {
            ctx.metrics.set_watermark(watermark);
            let emitted = instance.advance_watermark(watermark);
            pass_on(&mut ctx, emitted)?;
            if watermark < i64::MAX {
                ctx.outputs.watermark(watermark, &ctx.cancel)?;
            }
        }
        if clock.is_idle() != told_idle {
            told_idle = !told_idle;
            let current = clock.current();
            if told_idle {
                ctx.outputs.idle(&ctx.cancel)?;
            } else if advanced.is_none() && current < i64::MAX {
                // Active again below its watermark: the watermark says so.
                ctx.outputs.watermark(current, &ctx.cancel)?;
            }
        }
        // Its own timers too, not only when its inbox runs dry: a busy
        // operator's inbox may never be empty.
        let now = now_ms();
        if instance.next_processing_timer().is_some_and(|due| due <= now) {
            let emitted = instance.fire_processing_timers(now);
            pass_on(&mut ctx, emitted)?;
        }
        ctx.outputs.tick(now, &ctx.cancel)?;
    }
    ctx.outputs.end(&ctx.cancel)?;
    if let Some(checkpoint) = &ctx.checkpoint {
        checkpoint.operator_finished();
    }
    Ok(())
}

/// Logs that event time has not started at operator subtask `label`,
/// held back by `channels` (see [`StalledTime`]), and what to do: a
/// channel that delivered events but no watermark carries events without
/// timestamps; one that delivered nothing has not produced yet.
fn say_event_time_is_held_back(label: &str, channels: &[u32], input_of: &[Option<u32>], names: &[String]) {
    let named = |c: &u32| input_of[*c as usize].and_then(|input| names.get(input as usize)).map(|name| format!("`{name}`"));
    let mut untimed: Vec<String> = channels.iter().filter_map(named).collect();
    untimed.sort();
    untimed.dedup();
    let waited_s = StalledTime::PATIENCE.as_secs();
    if !untimed.is_empty() {
        tracing::warn!(
            task = %label, held_back_by = %untimed.join(", "), waited_s,
            "event time has not started: these inputs deliver events without timestamps, so they make no watermarks \
             and hold event time back until they end; windows and event-time timers cannot fire till then. Give \
             their events timestamps (a Kafka source's `timestamp`, a generator's `events_per_ms`, `timestamp` in a \
             json file's lines), or their source `idle_timeout_ms` so that they stop holding it back"
        );
    }
    if channels.iter().any(|c| named(c).is_none()) {
        tracing::warn!(
            task = %label, waited_s,
            "event time has not started: an input has produced nothing yet and holds it back; give its source \
             `idle_timeout_ms` if it may stay quiet"
        );
    }
}

/// Routes what an operator call emitted, or fails with the operator's label.
fn pass_on(ctx: &mut TaskContext, emitted: Result<Emitted, CallError>) -> Result<(), TaskError> {
    let emitted = emitted.map_err(|error| TaskError::operator(&ctx.label, error))?;
    for (output, batch) in emitted {
        ctx.metrics.count_out(batch.len());
        ctx.outputs.emit(&output, batch, &ctx.cancel)?;
    }
    Ok(())
}

/// Writes batches to the sink until every producer has ended.
pub fn run_sink(mut ctx: TaskContext, mut sink: SinkWriter, inbox: Inbox, producers: usize) -> Result<(), TaskError> {
    let mut clock = InputClock::new(producers);
    let mut aligner = BarrierAligner::new(producers);
    let mut ended = 0;
    while ended < producers {
        let Some(envelope) = ctx.next(&mut aligner, &inbox, None)? else { continue };
        let advanced = match aligner.accept(envelope) {
            Some(Aligned::Message(envelope)) => match envelope.message {
                Message::Batch(batch) => {
                    sink.write(&batch)?;
                    None
                }
                other => observe_time(&mut clock, envelope.channel, &other, &mut ended),
            },
            Some(Aligned::Barrier { checkpoint: n, alignment }) => {
                sink.barrier(n, alignment)?;
                None
            }
            None => None,
        };
        if let Some(watermark) = advanced {
            sink.watermark(watermark);
        }
    }
    sink.finish()
}

/// Moves `clock` by a watermark, idleness or end of input `channel`
/// (counting ends in `ended`); the subtask's new watermark, if it moved.
fn observe_time(clock: &mut InputClock, channel: u32, message: &Message, ended: &mut usize) -> Option<i64> {
    match message {
        Message::Watermark(watermark) => clock.watermark(channel, *watermark),
        Message::Idle => clock.idle(channel),
        Message::End => {
            *ended += 1;
            clock.ended(channel)
        }
        Message::Batch(_) | Message::Barrier(_) => None,
    }
}

/// Says once, for an operator subtask, that its plugin holds more keyed
/// state than it keeps in the instance: it writes keys back between
/// checkpoints and reads them again when next used. Over keys it touches
/// in turn (a count over a million keys), nearly every batch then reads
/// and writes every key through the host: several times slower than with
/// room for them all (docs/benchmarks.md, "A million keys").
#[derive(Default)]
struct HeldStateOverflow {
    said: bool,
}

impl HeldStateOverflow {
    /// Write-backs a subtask may make before it is told: the first can
    /// come from a brief peak of keys.
    const PATIENCE: u64 = 10;

    fn check(&mut self, label: &str, instance: &dyn OperatorLogic) {
        if self.said || instance.held_write_backs() < Self::PATIENCE {
            return;
        }
        self.said = true;
        tracing::warn!(
            task = %label,
            write_backs = instance.held_write_backs(),
            "the plugin holds more keyed state than it keeps in its instance (the Rust SDK keeps up to about half \
             of the operator's memory_limit_mb), so it writes keys back and reads them again as it goes, which \
             is several times slower over many keys; give the operator a larger memory_limit_mb (at most 4096)"
        );
    }
}

/// A task that has sent on barrier `n` of a stop with a savepoint idles,
/// so that nothing follows the barrier, until the job is cancelled (once
/// the savepoint is complete) — or until the stop is called off because the
/// savepoint failed, when it returns and the task goes on, as in Flink.
///
/// A source reads nothing more; an operator (and those chained to either)
/// fires no more processing-time timers. What a timer emitted after the
/// barrier would reach the sinks although the savepoint holds the timer
/// still to fire: a job restored from it would emit it again, and a `file`
/// or `stdout` sink, which cannot take output back, would show it twice.
fn hold_if_stopping(ctx: &mut TaskContext, n: u64) -> Result<(), TaskError> {
    let Some(checkpoint) = &ctx.checkpoint else { return Ok(()) };
    if !checkpoint.stops_at(n) {
        return Ok(());
    }
    ctx.outputs.flush(&ctx.cancel)?;
    while checkpoint.stops_at(n) {
        if ctx.cancel.is_cancelled() {
            return Err(TaskError::Stopped);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    tracing::info!(task = %ctx.label, checkpoint = n, "goes on: the stop with a savepoint failed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subtask chained into another's thread waits when that thread
    /// does; a task whose thread ended is idle from then on (not "busy"
    /// because it no longer counts anything).
    #[test]
    fn chained_and_finished_subtasks_count_as_idle() {
        let head = Arc::new(TaskMetrics::default());
        let chained = Arc::new(TaskMetrics::chained_to(&head));
        let further = TaskMetrics::chained_to(&chained);
        head.count_idle(Duration::from_millis(40));
        assert_eq!(chained.counters().idle_ms, 40.0);
        assert_eq!(further.counters().idle_ms, 40.0, "the thread's, however deep the chain");

        head.finish();
        std::thread::sleep(Duration::from_millis(20));
        let idle = head.counters().idle_ms;
        assert!(idle >= 60.0, "idle since it ended: {idle}");
        assert!(further.counters().idle_ms >= 60.0);
        let unfinished = TaskMetrics::default();
        unfinished.count_idle(Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(unfinished.counters().idle_ms, 5.0);
    }
}
