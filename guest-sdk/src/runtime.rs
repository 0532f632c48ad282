//! Drives an [`Operator`] over batches: the code shared by the Wasm export
//! and the native test harness.

use crate::context::{Batch, CallKeys, Context, TimerBatch};
use crate::event::{BatchView, Outputs};
use crate::state::{HostStart, StateHost, StateStore};
use crate::timer::{TimeDomain, Timer};
use crate::{Error, Operator};

/// Fired timers received from the host, borrowed column-wise as the WIT
/// `timer-batch` lays them out.
pub struct TimerView<'a> {
    pub data: &'a [u8],
    pub offsets: &'a [u32],
    pub timestamps: &'a [i64],
    pub domains: Vec<TimeDomain>,
    pub key_slots: &'a [u32],
    pub watermark: i64,
    pub processing_time: i64,
}

impl<'a> TimerView<'a> {
    /// The keys of the timers, each with its slot.
    pub(crate) fn keys(&self) -> CallKeys<'a> {
        CallKeys::of_timers(self.data, self.offsets, self.key_slots)
    }

    /// Every timer with its key's slot. The columns must be as long as
    /// each other ([`Runtime::on_timers`] checks).
    pub(crate) fn fired(&'a self) -> impl Iterator<Item = Result<(u32, Timer<'a>), Error>> + 'a {
        let (timestamps, domains) = (self.timestamps, &self.domains);
        self.keys().iter().zip(timestamps.iter().zip(domains)).map(|(item, (&timestamp, &domain))| {
            let (slot, key) = item?;
            Ok((slot, Timer { key, timestamp, domain }))
        })
    }
}

/// One operator instance with its state caches and output buffers.
pub(crate) struct Runtime<T> {
    operator: T,
    states: StateStore,
    pub outputs: Outputs,
}

impl<T: Operator> Runtime<T> {
    /// An instance of `operator` whose state is `host`'s, which started as
    /// `start` says; its resident state may hold `resident_bytes`.
    pub fn new(operator: T, host: Box<dyn StateHost>, start: HostStart, resident_bytes: usize) -> Self {
        Runtime { operator, states: StateStore::new(host, start, resident_bytes), outputs: Outputs::default() }
    }

    /// Runs the operator over every event of `batch`, then writes state back.
    /// On error nothing is written back: the host discards the failed call.
    pub fn process(&mut self, batch: &BatchView<'_>) -> Result<(), Error> {
        self.states.begin_batch();
        let keyed = batch.is_keyed();
        if keyed {
            if batch.key_slots.len() != batch.len() {
                return Err(Error::input(format!("{} events but {} key slots", batch.len(), batch.key_slots.len())));
            }
            self.operator.prepare(&mut Batch { view: batch, states: &mut self.states })?;
        }
        // One context for the call, of which each event changes only its
        // own fields: built per event, it was two dozen stores each time.
        let mut ctx = Context {
            slot: None,
            keys: CallKeys::of_events(batch),
            timestamp: None,
            watermark: batch.watermark,
            processing_time: batch.processing_time,
            states: &mut self.states,
            outputs: &mut self.outputs,
        };
        for (i, event) in batch.events().enumerate() {
            let event = event?;
            // (Checked above: a keyed batch has a slot per event.)
            ctx.slot = batch.key_slots.get(i).copied();
            ctx.timestamp = event.timestamp;
            self.operator.process(&mut ctx, &event)?;
        }
        self.states.flush()?;
        self.states.end_call_residents()
    }

    /// Writes back the state kept in memory between calls (the host
    /// snapshots next).
    pub fn flush(&mut self) -> Result<(), Error> {
        self.states.write_back_residents()
    }

    /// Runs the operator's `on_timer` for every fired timer, then writes
    /// state back.
    pub fn on_timers(&mut self, timers: &TimerView<'_>) -> Result<(), Error> {
        self.states.begin_batch();
        let keys = timers.keys();
        let count = timers.timestamps.len();
        if timers.domains.len() != count || keys.len() != count {
            return Err(Error::input(format!(
                "{count} timers but {} time domains and {} key slots",
                timers.domains.len(),
                keys.len()
            )));
        }
        self.operator.prepare_timers(&mut TimerBatch { view: timers, states: &mut self.states })?;
        let mut ctx = Context {
            slot: None,
            keys,
            timestamp: None,
            watermark: timers.watermark,
            processing_time: timers.processing_time,
            states: &mut self.states,
            outputs: &mut self.outputs,
        };
        for item in timers.fired() {
            let (slot, timer) = item?;
            ctx.slot = Some(slot);
            ctx.timestamp = Some(timer.timestamp);
            self.operator.on_timer(&mut ctx, &timer)?;
        }
        self.states.flush()?;
        self.states.end_call_residents()
    }
}
