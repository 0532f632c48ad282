//! Windows over event time or processing time, built on keyed state and
//! timers — in the SDK, so that the host stays small.
//!
//! A [`Windows`] value assigns each event of a key to its windows (tumbling,
//! sliding or session), folds it into each window's accumulator, and
//! registers a timer at each window's end. Tumbling and sliding windows keep
//! one map-state entry per (key, window start), so an event costs the same
//! however many windows of its key are open; sessions, which merge, keep a
//! key's windows in one value state.
//! When the timer fires — in event time, when the watermark passes the end —
//! [`Windows::on_timer`] returns the window's result. With allowed lateness
//! a window is kept that much longer; an event arriving late but within it
//! updates the window and its result is returned again at once. An event
//! later than that is dropped, or sent to a side output.
//!
//! ```ignore
//! let windows = Windows::tumbling("sums", 1_000, Sum).late_output("late");
//! // in process:  for r in windows.add(ctx, event, event.value_as::<f64>()?)? { let t = Some(r.end - 1); ctx.emit_at(event.key(), Json(r), t) }
//! // in on_timer: for r in windows.on_timer(ctx, timer)? { ctx.emit(timer.key(), Json(r)) }
//! ```
//!
//! Tumbling and sliding windows start at multiples of their size (slide)
//! from the epoch, as Flink's; [`Windows::offset`] shifts them, as Flink's
//! window offset does — daily windows of a time zone (`offset(-8 h)` for
//! UTC+8's midnight), or hourly ones on the quarter hour.
//!
//! A result `on_timer` returns carries the timer's time, its window's end
//! - 1; one `add` returns (a late event's update) is best emitted at that
//! time too (`emit_at`), as Flink stamps a late firing, rather than at the
//! late event's.

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use weir_codec::write_window_result;

use std::cell::{Cell, RefMut};

use crate::state::{ResidentCell, StateStore};
pub use crate::window_results::{WindowResults, WindowResultsIter};
use crate::window_store::{HeldWindow, KeyIndex, WindowStore};
use crate::{Batch, Context, Encode, Error, Event, MapState, TimeDomain, Timer, TimerBatch, ValueState};

/// How a window folds its events.
pub trait Aggregate {
    type Input;
    type Acc: Serialize + DeserializeOwned + Clone + 'static;
    type Output;
    fn create(&self) -> Self::Acc;
    fn add(&self, acc: &mut Self::Acc, input: Self::Input);
    /// Combines two accumulators (session windows merge).
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    fn result(&self, acc: &Self::Acc) -> Self::Output;
}

/// The sum of `f64` inputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sum;

impl Aggregate for Sum {
    type Input = f64;
    type Acc = f64;
    type Output = f64;
    fn create(&self) -> f64 {
        0.0
    }
    fn add(&self, acc: &mut f64, input: f64) {
        *acc += input;
    }
    fn merge(&self, acc: &mut f64, other: f64) {
        *acc += other;
    }
    fn result(&self, acc: &f64) -> f64 {
        *acc
    }
}

/// The number of inputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Count;

impl Aggregate for Count {
    type Input = ();
    type Acc = u64;
    type Output = u64;
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, _: ()) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// Reduces inputs of type `T` with a function (`max`, `min`, …).
pub struct Reduce<T, F>(pub F, pub std::marker::PhantomData<fn() -> T>);

impl<T, F: Fn(&T, &T) -> T> Reduce<T, F> {
    pub fn new(f: F) -> Self {
        Reduce(f, std::marker::PhantomData)
    }
}

impl<T: Serialize + DeserializeOwned + Clone + 'static, F: Fn(&T, &T) -> T> Aggregate for Reduce<T, F> {
    type Input = T;
    type Acc = Option<T>;
    type Output = Option<T>;
    fn create(&self) -> Option<T> {
        None
    }
    fn add(&self, acc: &mut Option<T>, input: T) {
        *acc = Some(match acc.take() {
            Some(current) => (self.0)(&current, &input),
            None => input,
        });
    }
    fn merge(&self, acc: &mut Option<T>, other: Option<T>) {
        if let Some(other) = other {
            self.add(acc, other);
        }
    }
    fn result(&self, acc: &Option<T>) -> Option<T> {
        acc.clone()
    }
}

/// How events are assigned to windows (times in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Consecutive windows of `size`, aligned to multiples of it.
    Tumbling { size: i64 },
    /// Windows of `size` starting every `slide`: each event is in size/slide of them.
    Sliding { size: i64, slide: i64 },
    /// A window per burst of a key's events, closed after `gap` without one;
    /// an event bridging two sessions merges them.
    Session { gap: i64 },
}

/// A window's result: `[start, end)` and the aggregate.
///
/// Emitted as is (`ctx.emit(key, result)`), it is the JSON object
/// `{"start":…,"end":…,"value":…}`: the bytes `Json(result)` gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowResult<O> {
    pub start: i64,
    pub end: i64,
    pub value: O,
}

/// Written without serde's per-field machinery ([`write_window_result`]).
impl<O: Serialize> Encode for WindowResult<O> {
    fn encode(&self, out: &mut Vec<u8>) {
        // Serialising plain data into a Vec cannot fail.
        let _ = write_window_result(out, self.start, self.end, &self.value);
    }
}

/// One open window of a key. Stored as a JSON array `[start, end, acc,
/// fired]` rather than an object: the state of every key is decoded and
/// encoded for each of its events, and field names would double the work.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "(i64, i64, A, bool)", into = "(i64, i64, A, bool)")]
struct OpenWindow<A: Clone> {
    start: i64,
    end: i64,
    acc: A,
    /// Whether its result has been emitted (later events re-emit it).
    fired: bool,
}

/// Whether session window `w` overlaps or touches `[start, end)`: sessions
/// that touch merge, as in Flink (`TimeWindow.intersects`), so that events
/// at most `gap` ms apart are in one session.
fn touches<Acc: Clone>(w: &OpenWindow<Acc>, start: i64, end: i64) -> bool {
    w.start <= end && start <= w.end
}

impl<A: Clone> From<(i64, i64, A, bool)> for OpenWindow<A> {
    fn from((start, end, acc, fired): (i64, i64, A, bool)) -> Self {
        OpenWindow { start, end, acc, fired }
    }
}

impl<A: Clone> From<OpenWindow<A>> for (i64, i64, A, bool) {
    fn from(w: OpenWindow<A>) -> Self {
        (w.start, w.end, w.acc, w.fired)
    }
}

/// Windows of one kind with one aggregate, for every key of the operator.
pub struct Windows<A: Aggregate> {
    kind: WindowKind,
    domain: TimeDomain,
    allowed_lateness: i64,
    late_output: Option<String>,
    aggregate: A,
    /// Sessions: all of a key's windows.
    state: ValueState<Vec<OpenWindow<A::Acc>>>,
    /// Tumbling and sliding: window start → (end, accumulator, fired).
    by_start: MapState<(i64, A::Acc, bool)>,
    /// Tumbling and sliding: the accumulators held between calls.
    held: ResidentCell<WindowStore<A::Acc>>,
    /// Tumbling and sliding: where windows start, after multiples of the
    /// size (slide), in `[0, size)` (`[0, slide)`).
    offset: i64,
    /// Tumbling: the start of the window the last event fell in.
    last_tumbling: Cell<Option<i64>>,
    /// The timestamps whose windows, and their timers, fit in 64-bit time.
    fitting: std::ops::RangeInclusive<i64>,
    name: String,
}

impl<A: Aggregate> Windows<A> {
    /// Windows of `kind` whose accumulators live in the value state `name`.
    ///
    /// # Panics
    /// If a size, slide or gap of `kind` is not above 0: such windows hold
    /// nothing, and a plugin configured with one should fail at its start,
    /// naming the setting, rather than at its first event.
    pub fn new(name: &str, kind: WindowKind, aggregate: A) -> Self {
        let lengths: &[(&str, i64)] = match &kind {
            WindowKind::Tumbling { size } => &[("size", *size)],
            WindowKind::Sliding { size, slide } => &[("size", *size), ("slide", *slide)],
            WindowKind::Session { gap } => &[("gap", *gap)],
        };
        for (what, ms) in lengths {
            assert!(*ms > 0, "windows `{name}`: the {what} must be above 0 ms, not {ms} ({kind:?})");
        }
        // Only the kind's own state is declared: restored from windows of
        // another kind, the plugin would find its state empty, and
        // `check-state` is to refuse that instead. (Nor is the other kind's
        // taken from a state of the plugin's own of that name.)
        let (state, by_start) = match kind {
            WindowKind::Session { .. } => (ValueState::new(name), MapState::undeclared(name.to_owned())),
            _ => (ValueState::undeclared(name.to_owned()), MapState::new(name)),
        };
        constrain_stored_windows(name, kind, 0);
        Windows {
            kind,
            domain: TimeDomain::EventTime,
            allowed_lateness: 0,
            late_output: None,
            aggregate,
            state,
            by_start,
            held: ResidentCell::default(),
            offset: 0,
            last_tumbling: Cell::new(None),
            fitting: fitting(kind, 0, 0),
            name: name.to_owned(),
        }
    }

    /// Tumbling windows of `size` ms.
    ///
    /// # Panics
    /// If `size` is not above 0 (from `init`, the host reports the message).
    pub fn tumbling(name: &str, size: i64, aggregate: A) -> Self {
        Self::new(name, WindowKind::Tumbling { size }, aggregate)
    }

    /// Windows of `size` ms starting every `slide` ms (with `slide` above
    /// `size`, events between two windows are in none).
    ///
    /// # Panics
    /// If `size` or `slide` is not above 0.
    pub fn sliding(name: &str, size: i64, slide: i64, aggregate: A) -> Self {
        Self::new(name, WindowKind::Sliding { size, slide }, aggregate)
    }

    /// Session windows closed after `gap` ms without an event.
    ///
    /// # Panics
    /// If `gap` is not above 0.
    pub fn session(name: &str, gap: i64, aggregate: A) -> Self {
        Self::new(name, WindowKind::Session { gap }, aggregate)
    }

    /// Windows by the wall clock instead of event time.
    pub fn processing_time(mut self) -> Self {
        self.domain = TimeDomain::ProcessingTime;
        self
    }

    /// Keeps windows open this long (ms) after the watermark passed their end.
    pub fn allowed_lateness(mut self, lateness: i64) -> Self {
        self.allowed_lateness = lateness.max(0);
        self.fitting = fitting(self.kind, self.allowed_lateness, self.offset);
        self
    }

    /// Starts tumbling and sliding windows `offset` ms after multiples of
    /// their size (slide) from the epoch, as Flink's window offset: with
    /// `size` one day, `offset(-8 * 3_600_000)` gives days from midnight
    /// in UTC+8. The offset is taken modulo the size (slide), so -8 h and
    /// 16 h are the same windows.
    ///
    /// Windows are found again by the start the offset gives, so, like the
    /// size, it cannot change across an upgrade or restore while windows
    /// are open: `check-state` refuses the change, naming a stored window.
    ///
    /// # Panics
    /// For session windows, which start at their first event.
    pub fn offset(mut self, offset: i64) -> Self {
        let period = match self.kind {
            WindowKind::Tumbling { size } => size,
            WindowKind::Sliding { slide, .. } => slide,
            WindowKind::Session { .. } => {
                panic!("windows `{}`: session windows start at their first event and take no offset", self.name)
            }
        };
        self.offset = offset.rem_euclid(period);
        self.last_tumbling.set(None);
        self.fitting = fitting(self.kind, self.allowed_lateness, self.offset);
        constrain_stored_windows(&self.name, self.kind, self.offset);
        self
    }

    /// Sends events too late for their windows to this side output instead
    /// of dropping them.
    pub fn late_output(mut self, output: &str) -> Self {
        self.late_output = Some(output.to_owned());
        self
    }

    /// The windows an event at `timestamp` belongs to, as (start, end).
    pub fn assign(&self, timestamp: i64) -> Vec<(i64, i64)> {
        self.windows_of(timestamp).collect()
    }

    /// [`Windows::assign`] without allocating: the windows in start order.
    #[inline]
    fn windows_of(&self, timestamp: i64) -> impl DoubleEndedIterator<Item = (i64, i64)> + use<A> {
        let (first, count, slide, size) = match self.kind {
            WindowKind::Session { gap } => (timestamp, 1, 1, gap),
            WindowKind::Tumbling { size } => (self.tumbling_start(timestamp, size), 1, size, size),
            WindowKind::Sliding { size, slide } => {
                // Starts are `offset` past multiples of `slide`, in
                // (timestamp - size, timestamp].
                let shifted = timestamp - self.offset;
                let last = shifted.div_euclid(slide) * slide;
                let first = (shifted - size).div_euclid(slide) * slide + slide;
                (first + self.offset, (last - first).div_euclid(slide) + 1, slide, size)
            }
        };
        (0..count.max(0)).map(move |i| {
            let start = first + i * slide;
            (start, start + size)
        })
    }

    /// The start of the tumbling window holding `timestamp`. Consecutive
    /// events are mostly in the same window, and a 64-bit division is most
    /// of the work of finding it, so the last window found is tried first.
    #[inline]
    fn tumbling_start(&self, timestamp: i64, size: i64) -> i64 {
        if let Some(last) = self.last_tumbling.get()
            && timestamp >= last
            && timestamp - last < size
        {
            return last;
        }
        let start = (timestamp - self.offset).div_euclid(size) * size + self.offset;
        self.last_tumbling.set(Some(start));
        start
    }

    /// Fetches the accumulators of every window the batch's events fall in,
    /// in one host call: call it from [`crate::Operator::prepare`]. (Session
    /// windows need nothing: their value state is read in one call anyway.)
    pub fn prefetch(&self, batch: &mut Batch<'_>) -> Result<(), Error> {
        if self.fixed_size().is_none() {
            return Ok(());
        }
        // Only windows not held in memory yet are read from the host.
        let view = batch.view;
        let mut wanted = Vec::new();
        let mut store = self.store(batch.states)?;
        if store.holds_all() {
            return Ok(()); // (The host has none this store does not hold.)
        }
        for (event, &slot) in view.events().zip(view.key_slots) {
            let event = event?;
            let timestamp = match self.domain {
                TimeDomain::ProcessingTime => view.processing_time,
                TimeDomain::EventTime => match event.timestamp() {
                    Some(timestamp) => timestamp,
                    None => continue, // `add` reports it.
                },
            };
            let key = store.key(slot, event.key());
            for (start, end) in self.windows_of(timestamp) {
                store.want((slot, key, start, end), &mut wanted);
            }
        }
        store.fetch(&wanted)
    }

    /// Fetches, in one host call, the accumulators of every window the
    /// call's timers fire or expire that is not held in memory (because it
    /// was evicted, or the instance restored): call it from
    /// [`crate::Operator::prepare_timers`]. Without it each such window is
    /// one host call.
    pub fn prefetch_timers(&self, timers: &mut TimerBatch<'_>) -> Result<(), Error> {
        let Some(size) = self.fixed_size() else { return Ok(()) };
        let lateness = if self.domain == TimeDomain::EventTime { self.allowed_lateness } else { 0 };
        let mut wanted = Vec::new();
        let mut store = self.store(timers.states)?;
        if store.holds_all() {
            return Ok(());
        }
        for item in timers.timers() {
            let (slot, timer) = item?;
            if timer.domain() != self.domain {
                continue;
            }
            let key = store.key(slot, timer.key());
            // As `on_timer_fixed` reads them: the window ending with the
            // timer, and the one it expires.
            let end = timer.timestamp() + 1;
            store.want((slot, key, end - size, end), &mut wanted);
            if lateness > 0 {
                store.want((slot, key, end - lateness - size, end - lateness), &mut wanted);
            }
        }
        store.fetch(&wanted)
    }

    /// The accumulators held in memory between calls (tumbling and sliding).
    fn store(&self, states: &mut StateStore) -> Result<RefMut<'_, WindowStore<A::Acc>>, Error> {
        self.held.get(states, &self.name, |host, start| WindowStore::new(&self.name, host.open_map(&self.name, None), start))
    }

    /// The current key's window starting at `start`, read from the host
    /// state the first time it is used.
    fn held_window<'s>(
        &self,
        ctx: &mut Context<'_>,
        store: &'s mut WindowStore<A::Acc>,
        (key, start, end): (KeyIndex, i64, i64),
    ) -> Result<&'s mut HeldWindow<A::Acc>, Error> {
        if !store.contains(key, start) {
            let window = self.load_window(ctx, store, key, start, end)?;
            store.insert_loaded(key, start, window);
        }
        Ok(store.get_mut(key, start).expect("the window was just loaded"))
    }

    /// The current key's window starting at `start` as the host state holds
    /// it, to be held from now on (for operators that do not prefetch: one
    /// host call per window, unless `store` knows the host has none).
    fn load_window(&self, ctx: &mut Context<'_>, store: &WindowStore<A::Acc>, key: KeyIndex, start: i64, end: i64) -> Result<HeldWindow<A::Acc>, Error> {
        if !store.may_be_stored(key, start) {
            return Ok(HeldWindow::loaded(end, None));
        }
        Ok(match self.by_start.get(ctx, start)? {
            Some((end, acc, fired)) => HeldWindow::loaded(end, Some((acc, fired))),
            None => HeldWindow::loaded(end, None),
        })
    }

    /// Folds `input` into a held window (emitting its result again into
    /// `updated` if it had fired); returns whether the window's timers are
    /// to be set: this opened it, or it is to fire again.
    fn fold(
        &self,
        held: &mut HeldWindow<A::Acc>,
        input: A::Input,
        (start, end, watermark): (i64, i64, i64),
        updated: &mut WindowResults<A::Output>,
    ) -> bool {
        let opened = held.window.is_none();
        let (acc, fired) = held.window.get_or_insert_with(|| (self.aggregate.create(), false));
        self.aggregate.add(acc, input);
        // A window that fired, before a watermark that has not reached its
        // end (a host that restored no watermark): it fires again, with
        // this event, when its end is passed — as Flink's trigger sets the
        // window's timer for every event — rather than holding it unsaid.
        let fires_again = *fired && end - 1 > watermark;
        if fires_again {
            *fired = false;
        }
        if end - 1 <= watermark {
            // Late, within the allowed lateness: the result changes now.
            *fired = true;
            updated.push(WindowResult { start, end, value: self.aggregate.result(acc) });
        }
        held.touch();
        opened || fires_again
    }

    /// Adds `event` (with `input` for the aggregate) to its windows. Returns
    /// the updated results of windows that had already fired (a late event
    /// within the allowed lateness).
    pub fn add(&self, ctx: &mut Context<'_>, event: &Event<'_>, input: A::Input) -> Result<WindowResults<A::Output>, Error>
    where
        A::Input: Clone,
    {
        let timestamp = match self.domain {
            TimeDomain::ProcessingTime => ctx.processing_time(),
            TimeDomain::EventTime => event
                .timestamp()
                .ok_or_else(|| Error::input("event-time windows need events with timestamps"))?,
        };
        if !self.fitting.contains(&timestamp) {
            return Err(self.beyond_time(timestamp));
        }
        if let Some(size) = self.fixed_size() {
            return self.add_fixed(ctx, event, input, timestamp, size);
        }
        let mut open = self.state.get(ctx)?.unwrap_or_default();
        let watermark = self.clock(ctx);
        let mut updated = WindowResults::new();
        let mut placed = false;
        for (start, end) in self.assign(timestamp) {
            // An event whose own window is gone still joins an open
            // session it overlaps (which it then extends back), as in
            // Flink: lateness is judged on the merged window.
            let joins_open = || open.iter().any(|w| touches(w, start, end) && !self.gone(w.end, watermark));
            if self.gone(end, watermark) && !joins_open() {
                continue;
            }
            placed = true;
            let mut window = OpenWindow { start, end, acc: self.aggregate.create(), fired: false };
            self.aggregate.add(&mut window.acc, input.clone());
            let merged = self.merge_into(ctx, &mut open, window)?;
            if merged.end - 1 <= watermark {
                // Late, within the allowed lateness: the result changes now.
                merged.fired = true;
                updated.push(WindowResult { start: merged.start, end: merged.end, value: self.aggregate.result(&merged.acc) });
            } else {
                // (A session that grew past the watermark fires again at its new end.)
                merged.fired = false;
            }
        }
        if !placed {
            self.send_late(ctx, event);
            return Ok(updated);
        }
        self.state.set(ctx, &open)?;
        Ok(updated)
    }

    /// The size of tumbling and sliding windows; `None` for sessions.
    fn fixed_size(&self) -> Option<i64> {
        match self.kind {
            WindowKind::Tumbling { size } | WindowKind::Sliding { size, .. } => Some(size),
            WindowKind::Session { .. } => None,
        }
    }

    /// `add` for tumbling and sliding windows: one map entry per window.
    fn add_fixed(
        &self,
        ctx: &mut Context<'_>,
        event: &Event<'_>,
        input: A::Input,
        timestamp: i64,
        size: i64,
    ) -> Result<WindowResults<A::Output>, Error>
    where
        A::Input: Clone,
    {
        let watermark = self.clock(ctx);
        let mut store = self.store(ctx.states)?;
        let key = store.key(ctx.key_slot()?, event.key());
        let mut updated = WindowResults::new();
        let placed = match self.kind {
            // Every event of a tumbling-window operator takes this path:
            // one window, found without the iterator (whose state
            // Cranelift kept in memory, read back at each step). Its size
            // from the kind, not the argument: that kept one more value
            // alive across the event, ~7 instructions more under callgrind.
            WindowKind::Tumbling { size } => {
                let start = self.tumbling_start(timestamp, size);
                self.add_to_window(ctx, &mut store, key, input, (start, start + size, watermark), &mut updated)?
            }
            _ => {
                let mut placed = false;
                // Latest start first, as Flink assigns sliding windows: a
                // late event re-fires the windows it updates in that order.
                for (start, end) in self.windows_of(timestamp).rev() {
                    debug_assert_eq!(end - start, size);
                    placed |= self.add_to_window(ctx, &mut store, key, input.clone(), (start, end, watermark), &mut updated)?;
                }
                placed
            }
        };
        // An event in no window (between hopping windows) is not late:
        // it is dropped, as it would be in time.
        if !placed && self.gone(timestamp.saturating_add(1), watermark) {
            self.send_late(ctx, event);
        }
        Ok(updated)
    }

    /// Why an event at `timestamp` cannot be placed: its windows would end
    /// (or be kept for their lateness) past the end of 64-bit time, or
    /// start before its beginning, and wrap round.
    #[cold]
    fn beyond_time(&self, timestamp: i64) -> Error {
        Error::input(format!(
            "windows `{}`: an event at {timestamp} ms is too near the ends of 64-bit time for its windows ({:?}, \
             {} ms of lateness), which would not fit: timestamps must lie in {}..={} (is it in milliseconds?)",
            self.name,
            self.kind,
            self.allowed_lateness,
            self.fitting.start(),
            self.fitting.end()
        ))
    }

    /// Whether a window ending at `end` is gone: the watermark passed its
    /// end and its allowed lateness (never, by the wall clock).
    #[inline(always)]
    fn gone(&self, end: i64, watermark: i64) -> bool {
        self.domain == TimeDomain::EventTime && end - 1 + self.allowed_lateness <= watermark
    }

    /// An event too late for every window it falls in: to the late output,
    /// if there is one, or dropped.
    fn send_late(&self, ctx: &mut Context<'_>, event: &Event<'_>) {
        if let Some(output) = &self.late_output {
            ctx.emit_to(output, event.key(), event.value());
        }
    }

    /// Folds `input` into `key`'s window `[start, end)` and registers its
    /// timers if this opened it; `false` if the window is gone (the event
    /// is too late for it).
    #[inline(always)]
    fn add_to_window(
        &self,
        ctx: &mut Context<'_>,
        store: &mut WindowStore<A::Acc>,
        key: KeyIndex,
        input: A::Input,
        (start, end, watermark): (i64, i64, i64),
        updated: &mut WindowResults<A::Output>,
    ) -> Result<bool, Error> {
        if self.gone(end, watermark) {
            return Ok(false);
        }
        let at = (start, end, watermark);
        // One lookup when the window is held (nearly always).
        let opened = match store.find_mut(key, start) {
            Ok(held) => self.fold(held, input, at, updated),
            Err(place) => {
                // (A new window, nearly always: known absent without a call.)
                let mut held = if store.may_be_stored(key, start) {
                    self.load_window(ctx, store, key, start, end)?
                } else {
                    HeldWindow::loaded(end, None)
                };
                let opened = self.fold(&mut held, input, at, updated);
                store.insert_loaded_at(key, place, start, held);
                opened
            }
        };
        if opened {
            self.register_timers(ctx, end)?;
        }
        Ok(true)
    }

    /// `on_timer` for tumbling and sliding windows: the timer at `end - 1`
    /// fires the window starting at `end - size`; the one at `end - 1 +
    /// lateness` forgets it.
    fn on_timer_fixed(&self, ctx: &mut Context<'_>, key: &[u8], time: i64, size: i64) -> Result<WindowResults<A::Output>, Error> {
        let lateness = if self.domain == TimeDomain::EventTime { self.allowed_lateness } else { 0 };
        let mut results = WindowResults::new();
        let start = time + 1 - size;
        let mut store = self.store(ctx.states)?;
        let key = store.key(ctx.key_slot()?, key);
        if lateness == 0 {
            // The window's only timer: it fires and leaves, found once.
            let fires = |held: &HeldWindow<A::Acc>| held.end - 1 == time;
            let load = |store: &WindowStore<A::Acc>| self.load_window(ctx, store, key, start, time + 1);
            if let Some(acc) = store.fire(key, start, fires, load)? {
                results.push(WindowResult { start, end: time + 1, value: self.aggregate.result(&acc) });
            }
            return Ok(results);
        }
        let held = self.held_window(ctx, &mut store, (key, start, time + 1))?;
        let end = held.end;
        if let Some((acc, fired)) = &mut held.window
            && end - 1 == time
            && !*fired
        {
            results.push(WindowResult { start, end, value: self.aggregate.result(acc) });
            *fired = true;
            held.touch();
            // Registered again: a window opened before an upgrade that
            // raised the lateness (from none, say) has no timer to forget
            // it by, and would stay in the state for ever. (One timer per
            // key and time: a second registration changes nothing.)
            ctx.register_timer(self.domain, end - 1 + lateness)?;
        }
        if lateness > 0 {
            let expired = time + 1 - lateness - size;
            let held = self.held_window(ctx, &mut store, (key, expired, expired + size))?;
            if held.window.is_some() && held.end - 1 + lateness == time {
                store.remove(key, expired);
            }
        }
        Ok(results)
    }

    /// Folds `window` into the key's open sessions, merging those it
    /// overlaps, and returns the session it ended up in, with its timers
    /// registered.
    fn merge_into<'w>(
        &self,
        ctx: &mut Context<'_>,
        open: &'w mut Vec<OpenWindow<A::Acc>>,
        mut window: OpenWindow<A::Acc>,
    ) -> Result<&'w mut OpenWindow<A::Acc>, Error> {
        // A merged session may reach further windows: repeat until none touches.
        while let Some(index) = open.iter().position(|w| touches(w, window.start, window.end)) {
            let other = open.swap_remove(index);
            // Its timers stay: there is one timer per key and time, which
            // another window set of the operator, or the operator itself,
            // may have registered too. When they fire, no session ends
            // there any more, and `on_timer` passes them by.
            window.start = window.start.min(other.start);
            window.end = window.end.max(other.end);
            window.fired |= other.fired;
            self.aggregate.merge(&mut window.acc, other.acc);
        }
        self.register_timers(ctx, window.end)?;
        open.push(window);
        Ok(open.last_mut().expect("just pushed"))
    }

    fn register_timers(&self, ctx: &mut Context<'_>, end: i64) -> Result<(), Error> {
        ctx.register_timer(self.domain, end - 1)?;
        if self.allowed_lateness > 0 && self.domain == TimeDomain::EventTime {
            ctx.register_timer(self.domain, end - 1 + self.allowed_lateness)?;
        }
        Ok(())
    }

    /// The time windows are judged by: the watermark, or the wall clock.
    fn clock(&self, ctx: &Context<'_>) -> i64 {
        match self.domain {
            TimeDomain::EventTime => ctx.watermark().unwrap_or(i64::MIN),
            TimeDomain::ProcessingTime => i64::MIN,
        }
    }

    /// Handles a fired timer: returns the results of the key's windows that
    /// end with it, and forgets windows past their allowed lateness. Timers
    /// that are not these windows' are ignored.
    pub fn on_timer(&self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<WindowResults<A::Output>, Error> {
        if timer.domain() != self.domain {
            return Ok(WindowResults::new());
        }
        let time = timer.timestamp();
        if let Some(size) = self.fixed_size() {
            return self.on_timer_fixed(ctx, timer.key(), time, size);
        }
        let Some(mut open) = self.state.get(ctx)? else { return Ok(WindowResults::new()) };
        let mut results = Vec::new();
        for window in open.iter_mut().filter(|w| w.end - 1 == time && !w.fired) {
            window.fired = true;
            results.push(WindowResult { start: window.start, end: window.end, value: self.aggregate.result(&window.acc) });
        }
        let lateness = if self.domain == TimeDomain::EventTime { self.allowed_lateness } else { 0 };
        let before = open.len();
        open.retain(|w| w.end - 1 + lateness > time);
        if open.is_empty() {
            self.state.clear(ctx)?;
        } else if open.len() != before || !results.is_empty() {
            self.state.set(ctx, &open)?;
        }
        results.sort_by_key(|r| r.start);
        Ok(results.into())
    }
}

/// The `check-state` of stored tumbling or sliding windows (sub-key: the
/// start; value: `[end, accumulator, fired]`): each must be one these
/// windows would have. A window is found by its start, computed from the
/// size, slide and offset the operator has now — so windows stored under
/// other ones would never be found again, nor fire: a plugin or
/// configuration that changed them is refused instead, naming a window.
/// (Sessions, which start anywhere, have no such check.)
fn constrain_stored_windows(name: &str, kind: WindowKind, offset: i64) {
    let (size, slide, mut what) = match kind {
        WindowKind::Tumbling { size } => (size, size, format!("tumbling windows of {size} ms")),
        WindowKind::Sliding { size, slide } => (size, slide, format!("sliding windows of {size} ms every {slide} ms")),
        WindowKind::Session { .. } => return,
    };
    if offset != 0 {
        what.push_str(&format!(" offset by {offset} ms"));
    }
    let windows = name.to_owned();
    let check = Box::new(move |sub_key: &[u8], value: &[u8]| {
        let start = <i64 as crate::Decode>::decode(sub_key).ok();
        let end = serde_json::from_slice::<(i64, serde::de::IgnoredAny, serde::de::IgnoredAny)>(value).ok().map(|(end, ..)| end);
        let (Some(start), Some(end)) = (start, end) else {
            return Err(format!(
                "windows `{windows}`: a stored window (sub-key {:?}) is not a window's start and end; was the state \
                 written by other windows, or by a map state of the same name?",
                String::from_utf8_lossy(sub_key)
            ));
        };
        if end.checked_sub(start) == Some(size) && start.rem_euclid(slide) == offset {
            return Ok(());
        }
        Err(format!(
            "windows `{windows}` hold the window [{start}, {end}), which {what} do not have: their size, slide or \
             offset changed since it was stored, and windows stored under the old ones would never fire (they \
             are found by the start the new ones give). Keep the old size, slide and offset until the stored \
             windows have fired — stop the job with a savepoint once the watermark has passed their ends, or let \
             a bounded input finish — or give the changed windows a new name and keep the old windows beside \
             them until they have fired"
        ))
    });
    crate::schema::constrain(name, crate::schema::Stored::Map, check);
}

/// The timestamps whose windows of `kind`, kept `lateness` ms after their
/// end, start and end within 64-bit time: an event's windows start no
/// earlier than its timestamp less their length, and end (with their
/// lateness) no later than its timestamp plus it.
fn fitting(kind: WindowKind, lateness: i64, offset: i64) -> std::ops::RangeInclusive<i64> {
    let reach = match kind {
        WindowKind::Tumbling { size } => size,
        // The first start is found a slide below `timestamp - size`.
        WindowKind::Sliding { size, slide } => size.saturating_add(slide),
        WindowKind::Session { gap } => gap,
    };
    // Starts are found from `timestamp - offset`, the offset (below the
    // size or slide) added back.
    i64::MIN.saturating_add(reach).saturating_add(offset) ..= i64::MAX.saturating_sub(reach).saturating_sub(lateness)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Emitted, TestEvent, TestHarness};
    use crate::{Config, Json, Operator};

    /// Sums values per key in windows chosen by the config.
    struct Summing {
        windows: Windows<Sum>,
        /// Whether it prefetches its windows (config `prefetch`).
        prefetch: bool,
    }

    impl Operator for Summing {
        fn init(config: &Config) -> Result<Self, Error> {
            let windows = match config.get("kind").unwrap_or("tumbling") {
                "sliding" => Windows::sliding("w", 1000, 500, Sum),
                "hopping" => Windows::sliding("w", 200, 500, Sum),
                "session" => Windows::session("w", 100, Sum),
                _ => Windows::tumbling("w", 1000, Sum),
            };
            let windows = match config.get("offset") {
                Some(_) => windows.offset(config.parse_or("offset", 0)?),
                None => windows,
            };
            Ok(Summing {
                windows: windows.allowed_lateness(config.parse_or("lateness", 0)?).late_output("late"),
                prefetch: config.parse_or("prefetch", false)?,
            })
        }

        fn prepare(&mut self, batch: &mut Batch<'_>) -> Result<(), Error> {
            if self.prefetch { self.windows.prefetch(batch) } else { Ok(()) }
        }

        fn prepare_timers(&mut self, timers: &mut TimerBatch<'_>) -> Result<(), Error> {
            if self.prefetch { self.windows.prefetch_timers(timers) } else { Ok(()) }
        }

        fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
            for result in self.windows.add(ctx, event, event.value_as()?)? {
                ctx.emit(event.key(), Json(result));
            }
            Ok(())
        }

        fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
            for result in self.windows.on_timer(ctx, timer)? {
                ctx.emit(timer.key(), Json(result));
            }
            Ok(())
        }
    }

    fn harness(config: &[(&str, &str)]) -> TestHarness<Summing> {
        TestHarness::new(config).unwrap()
    }

    fn event(key: &str, value: f64, at: i64) -> TestEvent {
        TestEvent::new(key, value).at(at)
    }

    /// (key, start, end, sum) of main-output results.
    fn results(emitted: &[Emitted]) -> Vec<(String, i64, i64, f64)> {
        emitted
            .iter()
            .filter(|e| e.output.is_empty())
            .map(|e| {
                let r: WindowResult<f64> = serde_json::from_slice(&e.value).unwrap();
                (e.key_str(), r.start, r.end, r.value)
            })
            .collect()
    }

    fn row(key: &str, start: i64, end: i64, sum: f64) -> (String, i64, i64, f64) {
        (key.to_owned(), start, end, sum)
    }

    /// Emitted as is, a result is byte for byte what `Json(result)` gives.
    #[test]
    fn results_encode_as_their_json() {
        fn same<O: Serialize + Clone>(value: O) {
            for (start, end) in [(0, 1000), (-5_000, -4_000), (i64::MIN, i64::MAX)] {
                let result = WindowResult { start, end, value: value.clone() };
                let (mut direct, mut json) = (Vec::new(), Vec::new());
                result.encode(&mut direct);
                Json(&result).encode(&mut json);
                assert_eq!(String::from_utf8(direct).unwrap(), String::from_utf8(json).unwrap());
            }
        }
        for value in [0.25, -0.0, 20.0, 1e300, f64::NAN, f64::INFINITY] {
            same(value);
        }
        same(u64::MAX);
        same(Some("a \"quoted\" \\ name\n".to_owned()));
        same(None::<i64>);
        same(vec![1, 2, 3]);
    }

    #[test]
    fn tumbling_windows_fire_when_the_watermark_passes_their_end() {
        let mut h = harness(&[]);
        h.process([event("a", 1.0, 100), event("a", 2.0, 900), event("b", 5.0, 950), event("a", 4.0, 1100)]).unwrap();
        assert!(h.advance_watermark(998).unwrap().is_empty(), "not before the end");
        let fired = h.advance_watermark(999).unwrap();
        assert_eq!(results(&fired), vec![row("a", 0, 1000, 3.0), row("b", 0, 1000, 5.0)]);
        assert_eq!(results(&h.advance_watermark(5000).unwrap()), vec![row("a", 1000, 2000, 4.0)]);
        assert!(h.advance_watermark(i64::MAX - 1).unwrap().is_empty(), "closed windows are forgotten");
    }

    #[test]
    fn sliding_windows_assign_each_event_to_size_over_slide_windows() {
        let windows = Windows::sliding("w", 1000, 250, Sum);
        assert_eq!(windows.assign(1100), vec![(250, 1250), (500, 1500), (750, 1750), (1000, 2000)]);
        let mut h = harness(&[("kind", "sliding")]);
        h.process([event("a", 1.0, 1200)]).unwrap();
        let fired = h.advance_watermark(10_000).unwrap();
        assert_eq!(results(&fired), vec![row("a", 500, 1500, 1.0), row("a", 1000, 2000, 1.0)]);
    }

    /// An offset shifts where windows start, as Flink's: taken modulo the
    /// size (slide), so -8 h and 16 h are the same daily windows.
    #[test]
    fn an_offset_shifts_the_windows_starts() {
        let tumbling = Windows::tumbling("w", 1000, Sum).offset(300);
        assert_eq!(tumbling.assign(299), vec![(-700, 300)]);
        assert_eq!(tumbling.assign(300), vec![(300, 1300)]);
        assert_eq!(tumbling.assign(-701), vec![(-1700, -700)]);
        let day = 24 * 3_600_000;
        let utc8 = Windows::tumbling("d", day, Sum).offset(-8 * 3_600_000);
        let noon_utc = 5 * day + 12 * 3_600_000;
        assert_eq!(utc8.assign(noon_utc), vec![(5 * day + 16 * 3_600_000 - day, 5 * day + 16 * 3_600_000)]);
        assert_eq!(utc8.assign(noon_utc), Windows::tumbling("d", day, Sum).offset(16 * 3_600_000).assign(noon_utc));
        let sliding = Windows::sliding("w", 1000, 500, Sum).offset(100);
        assert_eq!(sliding.assign(1200), vec![(600, 1600), (1100, 2100)]);
        assert_eq!(sliding.assign(1099), vec![(100, 1100), (600, 1600)]);

        let mut h = harness(&[("offset", "300")]);
        h.process([event("a", 1.0, 250), event("a", 2.0, 300), event("a", 4.0, 1299)]).unwrap();
        assert_eq!(results(&h.advance_watermark(299).unwrap()), vec![row("a", -700, 300, 1.0)]);
        assert!(h.advance_watermark(999).unwrap().is_empty(), "[300, 1300) is open at 999");
        assert_eq!(results(&h.advance_watermark(1299).unwrap()), vec![row("a", 300, 1300, 6.0)]);
        let mut h = harness(&[("kind", "sliding"), ("offset", "100")]);
        h.process([event("a", 1.0, 1200)]).unwrap();
        assert_eq!(results(&h.advance_watermark(10_000).unwrap()), vec![row("a", 600, 1600, 1.0), row("a", 1100, 2100, 1.0)]);
    }

    #[test]
    #[should_panic(expected = "session windows start at their first event and take no offset")]
    fn sessions_take_no_offset() {
        let _ = Windows::session("w", 1000, Sum).offset(10);
    }

    #[test]
    fn sessions_close_after_the_gap_and_merge_when_a_late_event_bridges_them() {
        let mut h = harness(&[("kind", "session")]);
        h.process([event("a", 1.0, 0), event("a", 1.0, 50), event("a", 10.0, 200), event("b", 7.0, 0)]).unwrap();
        // Sessions so far: a [0,150), a [200,300), b [0,100).
        assert_eq!(results(&h.advance_watermark(99).unwrap()), vec![row("b", 0, 100, 7.0)]);
        // An out-of-order event at 120 bridges a's two sessions into one.
        h.process([event("a", 100.0, 120)]).unwrap();
        assert!(h.advance_watermark(200).unwrap().is_empty(), "the first session no longer ends at 150");
        assert_eq!(results(&h.advance_watermark(299).unwrap()), vec![row("a", 0, 300, 112.0)]);
    }

    /// Sessions that touch merge, as in Flink: events `gap` ms apart are in
    /// one session; a millisecond more apart, in two (found by the
    /// event-time audit: they stayed apart).
    #[test]
    fn sessions_that_touch_merge() {
        let mut h = harness(&[("kind", "session")]);
        h.process([event("a", 1.0, 0), event("a", 2.0, 100), event("b", 1.0, 0), event("b", 2.0, 101)]).unwrap();
        let mut fired = results(&h.advance_watermark(10_000).unwrap());
        fired.sort_by(|x, y| x.partial_cmp(y).unwrap());
        assert_eq!(fired, vec![row("a", 0, 200, 3.0), row("b", 0, 100, 1.0), row("b", 101, 201, 2.0)]);
    }

    /// An event whose own session would be late joins the open session it
    /// overlaps, extending it back (Flink judges the merged window); one
    /// that overlaps none goes to the late output.
    #[test]
    fn a_late_event_extends_the_open_session_it_overlaps() {
        let mut h = harness(&[("kind", "session")]);
        h.process([event("a", 1.0, 400), event("b", 10.0, 450)]).unwrap();
        assert!(h.advance_watermark(449).unwrap().is_empty());
        // [250, 350) is gone (349 ≤ 449) but overlaps a's open [400, 500).
        let late = h.process([event("a", 100.0, 350), event("b", 5.0, 200)]).unwrap();
        assert_eq!(late.iter().map(|e| (e.output.as_str(), e.key_str())).collect::<Vec<_>>(), [("late", "b".to_owned())]);
        let fired = h.advance_watermark(10_000).unwrap();
        assert_eq!(results(&fired), vec![row("a", 350, 500, 101.0), row("b", 450, 550, 10.0)]);
    }

    /// With the slide above the size, an event between two windows is in
    /// none: dropped, not sent to the late output as if it were late.
    #[test]
    fn an_event_between_hopping_windows_is_not_late() {
        let mut h = harness(&[("kind", "hopping")]);
        let emitted = h.process([event("a", 1.0, 100), event("a", 2.0, 300), event("a", 4.0, 550)]).unwrap();
        assert!(emitted.is_empty(), "{emitted:?}");
        let fired = h.advance_watermark(10_000).unwrap();
        assert_eq!(results(&fired), vec![row("a", 0, 200, 1.0), row("a", 500, 700, 4.0)]);
        // Behind the watermark, in a window or between two, an event is late.
        let late = h.process([event("a", 8.0, 150), event("a", 16.0, 300)]).unwrap();
        assert_eq!(late.iter().map(|e| (e.output.as_str(), e.value_str())).collect::<Vec<_>>(), [("late", "8".into()), ("late", "16".into())]);
    }

    /// A size, slide or gap of 0 or less is refused when the windows are
    /// built (a plugin's `init`), naming it.
    #[test]
    fn windows_without_length_are_refused_when_built() {
        let message = |build: fn()| {
            let panic = std::panic::catch_unwind(build).unwrap_err();
            panic.downcast_ref::<String>().cloned().unwrap()
        };
        assert!(message(|| drop(Windows::tumbling("t", 0, Sum))).contains("windows `t`: the size must be above 0 ms, not 0"));
        assert!(message(|| drop(Windows::sliding("s", 1000, -5, Sum))).contains("the slide must be above 0 ms, not -5"));
        assert!(message(|| drop(Windows::session("g", -1, Count))).contains("the gap must be above 0 ms"));
    }

    /// A sum that overflows to infinity cannot be stored as JSON (it would
    /// read back as null and fail every restore): writing it back fails,
    /// naming the windows, and nothing is stored.
    #[test]
    fn a_window_that_cannot_be_stored_fails_its_write_back_naming_it() {
        for kind in ["tumbling", "session"] {
            let mut h = harness(&[("kind", kind)]);
            h.process([event("a", 1e308, 100), event("a", 1e308, 150)]).unwrap();
            let error = h.flush().unwrap_err().to_string();
            assert!(error.contains("`w`") && error.contains("not finite"), "{kind}: {error}");
        }
    }

    /// Windows declare the state of their kind only: a plugin whose windows
    /// changed kind cannot take over the stored ones (an upgrade or restore
    /// is refused by `check-state`, rather than the windows lost).
    #[test]
    fn windows_declare_only_the_state_of_their_kind() {
        // (Each in a thread of its own: an instance's declarations are its thread's.)
        let declared_by = |make: fn() -> Windows<Sum>| {
            std::thread::spawn(move || {
                drop(make());
                let declares = |kind| crate::schema::check("w", kind, std::iter::empty()).is_ok();
                (declares(crate::schema::Stored::Map), declares(crate::schema::Stored::Value))
            })
            .join()
            .unwrap()
        };
        assert_eq!(declared_by(|| Windows::tumbling("w", 1000, Sum)), (true, false), "tumbling windows are a map by start");
        assert_eq!(declared_by(|| Windows::session("w", 1000, Sum)), (false, true), "sessions are a value per key");
        assert_eq!(declared_by(|| Windows::sliding("w", 1000, 500, Sum)), (true, false));
    }

    /// Windows stored under another size, slide or offset would never fire again:
    /// `check-state` refuses them, naming one, and takes those that fit.
    #[test]
    fn stored_windows_of_another_size_slide_or_offset_are_refused() {
        let check = |make: fn() -> Windows<Sum>, start: &str, value: &str| {
            let (start, value) = (start.to_owned(), value.to_owned());
            std::thread::spawn(move || {
                drop(make());
                crate::schema::check("w", crate::schema::Stored::Map, [(start.as_bytes(), value.as_bytes())].into_iter())
            })
            .join()
            .unwrap()
        };
        let tumbling = || Windows::tumbling("w", 1000, Sum);
        assert_eq!(check(tumbling, "-2000", "[-1000,1.5,false]"), Ok(()));
        let error = check(tumbling, "0", "[2000,1.5,false]").unwrap_err();
        assert!(error.contains("windows `w` hold the window [0, 2000), which tumbling windows of 1000 ms do not have"), "{error}");
        assert!(check(tumbling, "500", "[1500,1.5,true]").is_err(), "a window of the right size at another start");
        let sliding = || Windows::sliding("w", 1000, 250, Sum);
        assert_eq!(check(sliding, "750", "[1750,1.5,false]"), Ok(()));
        let error = check(sliding, "500", "[1500,1.5,false]").map(|_| ()).and(check(sliding, "100", "[1100,1,false]")).unwrap_err();
        assert!(error.contains("sliding windows of 1000 ms every 250 ms do not have"), "{error}");
        let offset = || Windows::tumbling("w", 1000, Sum).offset(-700);
        assert_eq!(check(offset, "-1700", "[-700,1.5,false]"), Ok(()), "-700 ms is 300 ms past each second");
        let error = check(offset, "1000", "[2000,1.5,false]").unwrap_err();
        assert!(error.contains("[1000, 2000), which tumbling windows of 1000 ms offset by 300 ms do not have"), "{error}");
        assert!(check(tumbling, "1300", "[2300,1.5,false]").is_err(), "windows offset by 300 ms, restored without");
        let sliding_offset = || Windows::sliding("w", 1000, 250, Sum).offset(100);
        assert_eq!(check(sliding_offset, "850", "[1850,1.5,false]"), Ok(()));
        assert!(check(sliding_offset, "750", "[1750,1.5,false]").is_err());
        let error = check(tumbling, "start", "[1000,1.5,false]").unwrap_err();
        assert!(error.contains("is not a window's start and end"), "{error}");
        let sessions = || Windows::session("w", 1000, Sum);
        let stored = std::thread::spawn(move || {
            drop(sessions());
            crate::schema::check("w", crate::schema::Stored::Value, [(&b""[..], &b"[[0,5000,1.0,false]]"[..])].into_iter())
        });
        assert!(stored.join().unwrap().is_ok(), "sessions of any gap are taken");
    }

    /// A value state of the plugin's own beside tumbling windows of the
    /// same name stays declared (a map and a value state may share a name),
    /// so that an upgrade to the same plugin is not refused.
    #[test]
    fn windows_leave_a_plugin_state_of_their_name_declared() {
        std::thread::spawn(|| {
            let _total: ValueState<f64> = ValueState::new("sums");
            drop(Windows::tumbling("sums", 1000, Sum));
            assert!(crate::schema::check("sums", crate::schema::Stored::Value, [(&b""[..], &b"1.5"[..])].into_iter()).is_ok());
            assert!(crate::schema::check("sums", crate::schema::Stored::Map, std::iter::empty()).is_ok());
        })
        .join()
        .unwrap();
    }

    /// A session sum (to the side output `session`) and a tumbling sum of
    /// the same events, side by side in one operator.
    struct SessionsAndTumbling {
        sessions: Windows<Sum>,
        tumbling: Windows<Sum>,
    }

    impl Operator for SessionsAndTumbling {
        fn init(_: &Config) -> Result<Self, Error> {
            Ok(SessionsAndTumbling { sessions: Windows::session("s", 1000, Sum), tumbling: Windows::tumbling("t", 1000, Sum) })
        }

        fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
            let value: f64 = event.value_as()?;
            for result in self.sessions.add(ctx, event, value)? {
                ctx.emit_to("session", event.key(), Json(result));
            }
            for result in self.tumbling.add(ctx, event, value)? {
                ctx.emit(event.key(), Json(result));
            }
            Ok(())
        }

        fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
            for result in self.sessions.on_timer(ctx, timer)? {
                ctx.emit_to("session", timer.key(), Json(result));
            }
            for result in self.tumbling.on_timer(ctx, timer)? {
                ctx.emit(timer.key(), Json(result));
            }
            Ok(())
        }
    }

    /// Sessions that merge leave the timers of the sessions merged away:
    /// the tumbling window [0, 1000) needs the timer at 999 that the first
    /// session [0, 1000) had too.
    #[test]
    fn merged_sessions_leave_the_timers_other_windows_share() {
        let mut h = TestHarness::<SessionsAndTumbling>::new(&[]).unwrap();
        h.process([event("a", 1.0, 0)]).unwrap();
        h.process([event("a", 2.0, 300)]).unwrap();
        let fired = h.advance_watermark(10_000).unwrap();
        assert_eq!(results(&fired), vec![row("a", 0, 1000, 3.0)], "the tumbling window fired");
        let sessions: Vec<String> = fired.iter().filter(|e| e.output == "session").map(|e| e.value_str()).collect();
        assert_eq!(sessions, ["{\"start\":0,\"end\":1300,\"value\":3.0}"]);
    }

    /// A late event updating several sliding windows re-fires them latest
    /// start first, as Flink does (found by the differential audit).
    #[test]
    fn a_late_event_refires_sliding_windows_latest_start_first() {
        let mut h = harness(&[("kind", "sliding"), ("lateness", "5000")]);
        h.process([event("a", 1.0, 700)]).unwrap();
        let fired = h.advance_watermark(2000).unwrap();
        assert_eq!(results(&fired), vec![row("a", 0, 1000, 1.0), row("a", 500, 1500, 1.0)], "on time: by end");
        let updated = h.process([event("a", 2.0, 600)]).unwrap();
        assert_eq!(results(&updated), vec![row("a", 500, 1500, 3.0), row("a", 0, 1000, 3.0)]);
    }

    #[test]
    fn late_events_update_within_allowed_lateness_and_go_to_the_side_output_beyond() {
        let mut h = harness(&[("lateness", "500")]);
        h.process([event("a", 1.0, 100)]).unwrap();
        assert_eq!(results(&h.advance_watermark(999).unwrap()), vec![row("a", 0, 1000, 1.0)]);
        // Late but within the lateness: the window's result is updated at once.
        let updated = h.process([event("a", 2.0, 200)]).unwrap();
        assert_eq!(results(&updated), vec![row("a", 0, 1000, 3.0)]);
        assert!(h.advance_watermark(1499).unwrap().is_empty(), "no duplicate firing");
        // Beyond the lateness: not into the closed window, but to the side output.
        let late = h.process([event("a", 4.0, 300)]).unwrap();
        assert!(results(&late).is_empty());
        assert_eq!(late.iter().map(|e| (e.output.as_str(), e.value_str())).collect::<Vec<_>>(), vec![("late", "4".to_owned())]);
    }

    /// A window opened without lateness has no timer to forget it by after
    /// its end: restored under a lateness, it fires, takes late events
    /// within it, and then leaves the state instead of staying for ever.
    #[test]
    fn windows_opened_before_the_lateness_was_raised_still_leave() {
        let mut h = harness(&[]);
        h.process([event("a", 1.0, 100)]).unwrap();
        let mut h = h.restored(&[("lateness", "500")]).unwrap();
        assert_eq!(results(&h.advance_watermark(999).unwrap()), vec![row("a", 0, 1000, 1.0)]);
        assert_eq!(results(&h.process([event("a", 2.0, 200)]).unwrap()), vec![row("a", 0, 1000, 3.0)]);
        assert!(h.advance_watermark(1499).unwrap().is_empty());
        assert_eq!(h.map_state::<(i64, f64, bool)>("w", "a", 0i64), None, "forgotten at its end plus the lateness");
    }

    /// An event whose windows would not fit in 64-bit time (a timestamp in
    /// microseconds, a corrupt one) fails with a clear error instead of
    /// windows that wrap round; one just inside fires at the end of time.
    #[test]
    fn timestamps_near_the_ends_of_time_fail_clearly_instead_of_wrapping() {
        for (kind, at) in [("tumbling", i64::MAX - 10), ("tumbling", i64::MIN + 1), ("sliding", i64::MIN + 1200), ("session", i64::MAX - 50)] {
            let mut h = harness(&[("kind", kind), ("lateness", "100")]);
            let error = h.process([event("a", 1.0, at)]).unwrap_err().to_string();
            assert!(error.contains(&format!("an event at {at} ms is too near the ends of 64-bit time")), "{kind}: {error}");
        }
        // Its start found from `at - 900`, rounded down below i64::MIN.
        let at = i64::MIN + 1500;
        let error = harness(&[("offset", "900")]).process([event("a", 1.0, at)]).unwrap_err().to_string();
        assert!(error.contains(&format!("an event at {at} ms is too near the ends of 64-bit time")), "{error}");
        let mut h = harness(&[("lateness", "100")]);
        let last = i64::MAX - 1100;
        h.process([event("a", 1.0, last)]).unwrap();
        let fired = h.advance_watermark(i64::MAX).unwrap();
        let start = last.div_euclid(1000) * 1000;
        assert_eq!(results(&fired), vec![row("a", start, start + 1000, 1.0)]);
    }

    /// Restored on a host that did not keep the watermark (one before it
    /// did, or a rescale that restores the lowest of the subtasks'), an
    /// event replayed into a window that has fired, within the lateness,
    /// is not lost: the window fires again when the watermark passes it.
    #[test]
    fn a_fired_window_updated_below_its_end_fires_again() {
        let mut h = harness(&[("lateness", "100000")]);
        h.process([event("a", 1.0, 100), event("a", 10.0, 5000)]).unwrap();
        assert_eq!(results(&h.advance_watermark(4999).unwrap()), vec![row("a", 0, 1000, 1.0)]);
        let mut restored = h.restored(&[("lateness", "100000")]).unwrap();
        restored.watermark = i64::MIN;
        assert!(results(&restored.process([event("a", 2.0, 200)]).unwrap()).is_empty(), "not late at no watermark");
        let fired = restored.advance_watermark(4999).unwrap();
        assert_eq!(results(&fired), vec![row("a", 0, 1000, 3.0)], "the update is emitted, not held unsaid");
    }

    /// Tumbling and sliding windows hold their accumulators in the
    /// instance between calls; they reach the host's map state — `(end,
    /// sum, fired)` under the decimal start, as `MapState` would write them
    /// — when the host flushes before a snapshot, and fired windows leave it.
    #[test]
    fn held_windows_reach_the_host_state_when_it_flushes() {
        let mut h = harness(&[("lateness", "500")]);
        h.process([event("a", 1.0, 100), event("a", 2.0, 1100)]).unwrap();
        h.process([event("a", 4.0, 200)]).unwrap();
        let stored = |h: &TestHarness<Summing>, start: i64| h.stored_map_state::<(i64, f64, bool)>("w", "a", start);
        assert_eq!(stored(&h, 0), None, "held in memory between calls");
        h.flush().unwrap();
        assert_eq!((stored(&h, 0), stored(&h, 1000)), (Some((1000, 5.0, false)), Some((2000, 2.0, false))));
        assert_eq!(results(&h.advance_watermark(999).unwrap()), vec![row("a", 0, 1000, 5.0)]);
        h.flush().unwrap();
        assert_eq!(stored(&h, 0), Some((1000, 5.0, true)), "kept for the allowed lateness, marked fired");
        h.advance_watermark(1499).unwrap();
        h.flush().unwrap();
        assert_eq!((stored(&h, 0), stored(&h, 1000)), (None, Some((2000, 2.0, false))), "forgotten after the lateness");
    }

    /// Started on empty state, an operator asks the host for no window it
    /// never wrote; restored, for each window on its first use — all of a
    /// call's at once if it prefetches.
    #[test]
    fn windows_are_read_from_the_host_only_when_it_may_hold_them() {
        for (prefetch, reads) in [("false", 2), ("true", 1)] {
            let config = [("prefetch", prefetch)];
            let mut fresh = harness(&config);
            fresh.process([event("a", 1.0, 100), event("b", 2.0, 200), event("a", 4.0, 1100)]).unwrap();
            assert_eq!(fresh.map_fetches(), 0, "prefetch {prefetch}: empty state, nothing to read");
            let mut restored = fresh.restored(&config).unwrap();
            restored.process([event("a", 8.0, 150), event("c", 1.0, 300)]).unwrap();
            assert_eq!(restored.map_fetches(), reads, "prefetch {prefetch}: restored, the windows are read");
            let fired = results(&restored.advance_watermark(1999).unwrap());
            let expected = [row("a", 0, 1000, 9.0), row("b", 0, 1000, 2.0), row("c", 0, 1000, 1.0), row("a", 1000, 2000, 4.0)];
            assert_eq!(fired, expected, "prefetch {prefetch}");
        }
    }

    /// A new instance (a restore) reads the windows the old one flushed and
    /// goes on folding into them.
    #[test]
    fn a_restored_instance_continues_the_flushed_windows() {
        for kind in ["tumbling", "sliding"] {
            let mut before = harness(&[("kind", kind)]);
            before.process([event("a", 1.0, 100), event("b", 2.0, 700)]).unwrap();
            let mut after = before.restored(&[("kind", kind)]).unwrap();
            after.process([event("a", 4.0, 600), event("b", 8.0, 800)]).unwrap();
            let mut expected = harness(&[("kind", kind)]);
            expected.process([event("a", 1.0, 100), event("b", 2.0, 700), event("a", 4.0, 600), event("b", 8.0, 800)]).unwrap();
            let fired = results(&after.advance_watermark(10_000).unwrap());
            assert_eq!(fired, results(&expected.advance_watermark(10_000).unwrap()), "{kind}");
            assert!(fired.iter().any(|r| r.3 == 5.0 || r.3 == 10.0), "{kind}: {fired:?}");
        }
    }

    /// More windows than an instance holds are written back at the end of
    /// the call (bounding its memory) and read again when used.
    #[test]
    fn windows_beyond_the_memory_bound_are_written_back_and_read_again() {
        // Past the bound: a held window takes more than 16 bytes.
        let keys = crate::state::RESIDENT_BYTES / 16;
        let mut h = harness(&[]);
        h.process((0..keys).map(|k| event(&format!("k{k}"), 1.0, 10))).unwrap();
        assert_eq!(h.stored_map_state::<(i64, f64, bool)>("w", "k7", 0i64), Some((1000, 1.0, false)), "written back without a flush");
        h.process((0..keys).map(|k| event(&format!("k{k}"), 2.0, 20))).unwrap();
        let fired = results(&h.advance_watermark(999).unwrap());
        assert_eq!(fired.len(), keys);
        assert!(fired.iter().all(|r| r.3 == 3.0), "every window has both events");
    }

    /// Windows evicted from memory are read back, with what they held, in
    /// one host call for all the timers of a call that fire or expire them.
    #[test]
    fn evicted_windows_are_read_in_one_call_when_their_timers_fire() {
        // Past the bound: a held window takes more than 16 bytes.
        let keys = crate::state::RESIDENT_BYTES / 16;
        for lateness in ["0", "500"] {
            let mut h = harness(&[("prefetch", "true"), ("lateness", lateness)]);
            // More windows than held, all used in one call: all evicted.
            h.process((0..keys).map(|k| event(&format!("k{k}"), 1.5, 10))).unwrap();
            let fetches = h.map_fetches();
            let fired = results(&h.advance_watermark(999).unwrap());
            assert_eq!(fired.len(), keys, "lateness {lateness}");
            assert!(fired.iter().all(|r| r.3 == 1.5), "lateness {lateness}: every window's sum was read back");
            assert_eq!(h.map_fetches(), fetches + 1, "lateness {lateness}: one read for the call's windows");
            h.advance_watermark(1499).unwrap();
            h.flush().unwrap();
            assert_eq!(h.map_state::<(i64, f64, bool)>("w", "k7", 0i64), None, "lateness {lateness}: expired");
        }
    }

    #[test]
    fn processing_time_windows_follow_the_clock() {
        struct Clocked(Windows<Count>);
        impl Operator for Clocked {
            fn init(_: &Config) -> Result<Self, Error> {
                Ok(Clocked(Windows::tumbling("w", 1000, Count).processing_time()))
            }
            fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
                self.0.add(ctx, event, ())?;
                Ok(())
            }
            fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
                for r in self.0.on_timer(ctx, timer)? {
                    ctx.emit(timer.key(), Json(r));
                }
                Ok(())
            }
        }
        let mut h = TestHarness::<Clocked>::new(&[]).unwrap();
        h.advance_processing_time(5_100).unwrap();
        h.process([event("a", 0.0, 1), event("a", 0.0, 999_999)]).unwrap();
        assert!(h.advance_watermark(i64::MAX - 1).unwrap().is_empty(), "event time does not matter");
        assert!(h.advance_processing_time(5_999).unwrap().is_empty(), "its last millisecond has not passed");
        // An event in that millisecond is still the window's, which fires once.
        h.process([event("a", 0.0, 3)]).unwrap();
        let fired = h.advance_processing_time(6_000).unwrap();
        assert_eq!(fired.len(), 1);
        let r: WindowResult<u64> = serde_json::from_slice(&fired[0].value).unwrap();
        assert_eq!(r, WindowResult { start: 5000, end: 6000, value: 3 });
    }
}
