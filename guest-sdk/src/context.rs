//! The per-event context: where state is scoped and output goes.

use crate::event::{BatchView, Outputs};
use crate::runtime::TimerView;
use crate::state::StateStore;
use crate::timer::TimeDomain;
use crate::{Encode, Error, Event, Timer};

/// What an operator can do while it processes one event: emit events and
/// (through [`crate::ValueState`]) read and write the state of the event's
/// key.
pub struct Context<'a> {
    pub(crate) slot: Option<u32>,
    /// Every key of the call, for state that resolves them all at once.
    pub(crate) keys: CallKeys<'a>,
    pub(crate) timestamp: Option<i64>,
    pub(crate) watermark: i64,
    pub(crate) processing_time: i64,
    pub(crate) states: &'a mut StateStore,
    pub(crate) outputs: &'a mut Outputs,
}

impl Context<'_> {
    /// Emits an event to the main output, with the timestamp of the event
    /// being processed.
    #[inline]
    pub fn emit(&mut self, key: impl Encode, value: impl Encode) {
        let timestamp = self.timestamp;
        self.outputs.main().push(key, value, timestamp);
    }

    /// Emits an event to the main output with an explicit timestamp.
    pub fn emit_at(&mut self, key: impl Encode, value: impl Encode, timestamp: Option<i64>) {
        self.outputs.main().push(key, value, timestamp);
    }

    /// Emits an event to the side output `output` (wired in the job file as
    /// `<operator uid>.<output>`).
    pub fn emit_to(&mut self, output: &str, key: impl Encode, value: impl Encode) {
        let timestamp = self.timestamp;
        self.outputs.named(output).push(key, value, timestamp);
    }

    /// The operator's current event-time watermark: no event at or below it
    /// is expected any more. `None` before the first watermark.
    #[inline]
    pub fn watermark(&self) -> Option<i64> {
        (self.watermark != i64::MIN).then_some(self.watermark)
    }

    /// The wall-clock time of the call (ms since the epoch).
    #[inline]
    pub fn processing_time(&self) -> i64 {
        self.processing_time
    }

    /// Whether an event with this timestamp is late: at or below the watermark.
    pub fn is_late(&self, timestamp: i64) -> bool {
        timestamp <= self.watermark
    }

    /// Registers a timer for the current key; [`crate::Operator::on_timer`]
    /// is called when it fires. There is at most one timer per (key,
    /// timestamp, domain).
    #[inline]
    pub fn register_timer(&mut self, domain: TimeDomain, timestamp: i64) -> Result<(), Error> {
        let slot = self.timer_slot()?;
        self.states.timers.change(slot, timestamp, domain, false);
        Ok(())
    }

    /// Deletes a timer of the current key, if it is registered.
    pub fn delete_timer(&mut self, domain: TimeDomain, timestamp: i64) -> Result<(), Error> {
        let slot = self.timer_slot()?;
        self.states.timers.change(slot, timestamp, domain, true);
        Ok(())
    }

    /// The slot of the current event's key, for keyed state.
    #[inline]
    pub(crate) fn key_slot(&self) -> Result<u32, Error> {
        self.slot.ok_or_else(|| not_keyed("keyed state"))
    }

    /// [`key_slot`](Self::key_slot), for a timer.
    #[inline]
    fn timer_slot(&self) -> Result<u32, Error> {
        self.slot.ok_or_else(|| not_keyed("a timer"))
    }
}

/// A keyed batch about to be processed, for [`crate::Operator::prepare`]:
/// its events with their key slots, and the state to prefetch for them.
pub struct Batch<'a> {
    pub(crate) view: &'a BatchView<'a>,
    pub(crate) states: &'a mut StateStore,
}

impl<'a> Batch<'a> {
    /// The batch's events, each with its key's slot.
    pub fn events(&self) -> impl Iterator<Item = Result<(u32, Event<'a>), Error>> + '_ {
        // (A keyed batch has a slot per event: checked before `prepare`.)
        self.view.events().zip(self.view.key_slots).map(|(event, &slot)| Ok((slot, event?)))
    }

    /// The processing time the batch is processed at.
    pub fn processing_time(&self) -> i64 {
        self.view.processing_time
    }

    /// The watermark before the batch.
    pub fn watermark(&self) -> i64 {
        self.view.watermark
    }
}

/// The timers of a call about to fire, for
/// [`crate::Operator::prepare_timers`]: each with its key's slot, and the
/// state to prefetch for them.
pub struct TimerBatch<'a> {
    pub(crate) view: &'a TimerView<'a>,
    pub(crate) states: &'a mut StateStore,
}

impl<'a> TimerBatch<'a> {
    /// The timers, each with its key's slot, in firing order.
    pub fn timers(&self) -> impl Iterator<Item = Result<(u32, Timer<'a>), Error>> + 'a {
        self.view.fired()
    }
}

/// The keys of a call's events or timers, each with its slot: key `i` is
/// `data[offsets[stride * i] .. offsets[stride * i + 1]]`, in slot
/// `slots[i]` — events carry (key, value) pairs (stride 2), timers keys
/// (stride 1).
#[derive(Clone, Copy)]
pub(crate) struct CallKeys<'a> {
    data: &'a [u8],
    offsets: &'a [u32],
    slots: &'a [u32],
    stride: usize,
}

impl<'a> CallKeys<'a> {
    /// The keys of a batch's events (none if the input is not keyed).
    pub fn of_events(batch: &BatchView<'a>) -> Self {
        CallKeys { data: batch.data, offsets: batch.offsets, slots: batch.key_slots, stride: 2 }
    }

    /// The keys of fired timers.
    pub fn of_timers(data: &'a [u8], offsets: &'a [u32], slots: &'a [u32]) -> Self {
        CallKeys { data, offsets, slots, stride: 1 }
    }

    /// How many events or timers the call has.
    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Each event's or timer's slot, in the order of the call (a slot
    /// recurs for each of its events).
    #[inline]
    pub fn slots(&self) -> &'a [u32] {
        self.slots
    }

    /// The key of event or timer `i`.
    #[inline]
    pub fn key(&self, i: usize) -> Result<&'a [u8], Error> {
        let at = self.stride * i;
        self.offsets
            .get(at..at + 2)
            .and_then(|range| self.data.get(range[0] as usize..range[1] as usize))
            .ok_or_else(|| key_outside_batch(i))
    }

    /// Every (slot, key), in the order of the call (a slot recurs for each
    /// of its events).
    #[inline]
    pub fn iter(self) -> impl Iterator<Item = Result<(u32, &'a [u8]), Error>> + 'a {
        self.slots.iter().enumerate().map(move |(i, &slot)| Ok((slot, self.key(i)?)))
    }
}

/// Kept out of line: the error's formatting would otherwise sit in every
/// loop that reads keys.
#[cold]
#[inline(never)]
fn key_outside_batch(i: usize) -> Error {
    Error::input(format!("key {i} has offsets outside its batch"))
}

/// `what` (keyed state, a timer) needs the key of the event being processed.
#[cold]
pub(crate) fn not_keyed(what: &str) -> Error {
    Error::State(format!(
        "{what} used on an event without a key: either the operator's inputs are not keyed (set `key_by = true` \
         for it in the job file), or the event came from a broadcast input (listed under `broadcast`), whose events \
         go to every subtask without a key (keep what they carry in broadcast state)"
    ))
}
