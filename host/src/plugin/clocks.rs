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
//! the wall clock, and the plugin could finish its call in the gap. A sleep
//! within the deadline, or without one (`call_timeout_ms = 0`), is WASI's.

use std::time::Instant;

use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{Duration, Host, Instant as WasiInstant};

/// What `monotonic-clock` sees of a plugin instance's store: WASI's clocks,
/// and when the current call must end.
pub struct DeadlineClocks<'a> {
    pub wasi: WasiClocksCtxView<'a>,
    pub deadline: Option<Instant>,
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

    fn resolution(&mut self) -> wasmtime::Result<Duration> {
        self.wasi.resolution()
    }

    fn subscribe_instant(&mut self, when: WasiInstant) -> wasmtime::Result<Resource<DynPollable>> {
        let now = self.wasi.now()?;
        self.subscribe_duration(when.saturating_sub(now))
    }

    fn subscribe_duration(&mut self, nanos: Duration) -> wasmtime::Result<Resource<DynPollable>> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if u128::from(nanos) > left.as_nanos() {
                std::thread::sleep(left);
                return Err(wasmtime::Trap::Interrupt.into());
            }
        }
        self.wasi.subscribe_duration(nanos)
    }
}
