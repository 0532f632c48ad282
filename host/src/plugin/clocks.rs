//! Host side of `wasi:clocks/monotonic-clock`, with sleeps bounded by the
//! call's deadline.
//!
//! wasmtime interrupts a call at its deadline by epoch checks in the
//! plugin's code, which a plugin blocked in the host does not run: a
//! `time.sleep(30)` in Python waits in `wasi:io/poll` on a pollable this
//! interface made, and the deadline passed unnoticed until it woke (a
//! cancel of the job waited as long). So a sleep that would outlast the
//! call's deadline sleeps only until then, here, and fails the call as the
//! epoch check fails a busy loop (`Trap::Interrupt`, reported as the
//! deadline exceeded). Waking early instead and leaving the interruption
//! to the epoch check is not enough: the epoch ticker runs a little behind
//! the wall clock, and the plugin could finish its call in the gap.
//!
//! A cancel of the job ends a sleep too: the one to the deadline fails the
//! call as cancelled, and one within the deadline wakes early, so that the
//! plugin's next epoch check fails it ([`super::instance`]). A sleep
//! without a deadline (`call_timeout_ms = 0`), or outside a job, is WASI's.

use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::async_trait;
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{Duration as WasiDuration, Host, Instant as WasiInstant};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::instance::CallCancelled;
use crate::dataflow::Cancel;

/// How often a sleeping plugin's job's cancel flag is looked at.
const CANCEL_LOOK: Duration = Duration::from_millis(20);

/// What `monotonic-clock` sees of a plugin instance's store: WASI's clocks,
/// when the current call must end, and the job's cancel flag.
pub struct DeadlineClocks<'a> {
    pub wasi: WasiClocksCtxView<'a>,
    pub deadline: Option<Instant>,
    pub cancel: Option<Cancel>,
}

/// Marker for [`HasData`]: `monotonic-clock` is implemented on
/// [`DeadlineClocks`].
pub struct DeadlineClocksAccess;

impl HasData for DeadlineClocksAccess {
    type Data<'a> = DeadlineClocks<'a>;
}

impl Host for DeadlineClocks<'_> {
    fn now(&mut self) -> wasmtime::Result<WasiInstant> {
        self.wasi.now()
    }

    fn resolution(&mut self) -> wasmtime::Result<WasiDuration> {
        self.wasi.resolution()
    }

    fn subscribe_instant(&mut self, when: WasiInstant) -> wasmtime::Result<Resource<DynPollable>> {
        let now = self.wasi.now()?;
        self.subscribe_duration(when.saturating_sub(now))
    }

    fn subscribe_duration(&mut self, nanos: WasiDuration) -> wasmtime::Result<Resource<DynPollable>> {
        let Some(deadline) = self.deadline else { return self.wasi.subscribe_duration(nanos) };
        let left = deadline.saturating_duration_since(Instant::now());
        let wanted = Duration::from_nanos(nanos);
        if wanted > left {
            sleep_unless_cancelled(left, self.cancel.as_ref())?;
            return Err(wasmtime::Trap::Interrupt.into());
        }
        let Some(cancel) = self.cancel.clone() else { return self.wasi.subscribe_duration(nanos) };
        let sleep = self.wasi.table.push(CancellableSleep { until: tokio::time::Instant::now() + wanted, cancel })?;
        subscribe(self.wasi.table, sleep)
    }
}

/// Sleeps for `duration` on this thread, or fails as cancelled once
/// `cancel` is set.
fn sleep_unless_cancelled(duration: Duration, cancel: Option<&Cancel>) -> Result<(), CallCancelled> {
    let until = Instant::now() + duration;
    loop {
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Err(CallCancelled);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(CANCEL_LOOK));
    }
}

/// A sleep within the call's deadline, ready at `until` or as soon as the
/// job is cancelled.
struct CancellableSleep {
    until: tokio::time::Instant,
    cancel: Cancel,
}

#[async_trait]
impl Pollable for CancellableSleep {
    async fn ready(&mut self) {
        while !self.cancel.is_cancelled() {
            let now = tokio::time::Instant::now();
            if now >= self.until {
                return;
            }
            tokio::time::sleep_until(self.until.min(now + CANCEL_LOOK)).await;
        }
    }
}
