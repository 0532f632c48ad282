//! Drives an [`Operator`] over batches: the code shared by the Wasm export
//! and the native test harness.

use crate::context::{Batch, CallKeys, Context};
use crate::event::{BatchView, Outputs};
use crate::state::{StateHost, StateStore};
use crate::timer::{TimeDomain, Timer};
use crate::{Error, Operator};

/// Fired timers received from the host, borrowed column-wise.
pub(crate) struct TimerView<'a> {
    pub data: &'a [u8],
    pub offsets: &'a [u32],
    pub timestamps: &'a [i64],
    pub domains: Vec<TimeDomain>,
    pub key_slots: &'a [u32],
    pub watermark: i64,
    pub processing_time: i64,
}

/// One operator instance with its state caches and output buffers.
pub(crate) struct Runtime<T> {
    operator: T,
    states: StateStore,
    pub outputs: Outputs,
}

impl<T: Operator> Runtime<T> {
    pub fn new(operator: T, host: Box<dyn StateHost>) -> Self {
        Runtime { operator, states: StateStore::new(host), outputs: Outputs::default() }
    }

    /// Runs the operator over every event of `batch`, then writes state back.
    /// On error nothing is written back: the host discards the failed call.
    pub fn process(&mut self, batch: &BatchView<'_>) -> Result<(), Error> {
        self.states.begin_batch();
        let keyed = batch.is_keyed();
        if keyed {
            self.operator.prepare(&mut Batch { view: batch, states: &mut self.states })?;
        }
        let keys = CallKeys::of_events(batch);
        for i in 0..batch.len() {
            let event = batch.event(i)?;
            let mut ctx = Context {
                slot: if keyed { Some(batch.key_slots[i]) } else { None },
                keys,
                timestamp: event.timestamp,
                watermark: batch.watermark,
                processing_time: batch.processing_time,
                states: &mut self.states,
                outputs: &mut self.outputs,
            };
            self.operator.process(&mut ctx, &event)?;
        }
        self.states.flush()?;
        self.states.trim_residents()
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
        let keys = CallKeys::of_timers(timers.data, timers.offsets, timers.key_slots);
        let count = timers.timestamps.len();
        if timers.domains.len() != count || keys.len() != count {
            return Err(Error::input(format!(
                "{count} timers but {} time domains and {} key slots",
                timers.domains.len(),
                keys.len()
            )));
        }
        let fired = keys.iter().zip(timers.timestamps).zip(&timers.domains);
        for ((item, &timestamp), &domain) in fired {
            let (slot, key) = item?;
            let timer = Timer { key, timestamp, domain };
            let mut ctx = Context {
                slot: Some(slot),
                keys,
                timestamp: Some(timestamp),
                watermark: timers.watermark,
                processing_time: timers.processing_time,
                states: &mut self.states,
                outputs: &mut self.outputs,
            };
            self.operator.on_timer(&mut ctx, &timer)?;
        }
        self.states.flush()?;
        self.states.trim_residents()
    }
}
