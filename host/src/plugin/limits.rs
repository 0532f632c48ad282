//! The sandbox's resource limits: a memory cap per instance and a deadline
//! per call.
//!
//! Deadlines use wasmtime's epoch interruption: one ticker thread per engine
//! advances the epoch every [`EPOCH_TICK`]. This costs a counter check in
//! loop headers of the guest, far cheaper than fuel metering. A call does
//! not run to its deadline in one stretch of ticks: every
//! [`CHECK_INTERVAL_TICKS`] at most the instance looks at the wall clock and
//! at its job's cancel flag ([`super::instance`]), so that a cancel
//! interrupts a call under way within a tenth of a second instead of
//! waiting for its deadline (10 s by default).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

/// How often the engine's epoch advances; the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The most ticks a call runs between looks at its deadline and its job's
/// cancel flag: how long a cancel may wait for a busy call.
pub const CHECK_INTERVAL_TICKS: u64 = 10;

/// Limits for one operator's instances, from the job file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most linear memory one instance may have, in bytes.
    pub memory_bytes: usize,
    /// The longest one call (`init` or `process`) may run; `None`: no
    /// deadline (`call_timeout_ms = 0`), the plugin compiled without the
    /// checks that enforce one.
    pub call_timeout: Option<Duration>,
}

impl Limits {
    pub const DEFAULT_MEMORY_MB: u64 = 256;
    pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 10_000;
}

/// Ticks until the next look at a call's deadline, `left` away: enough to
/// cover it (rounded up; a tick under way may end early, and the look then
/// finds time left and waits again), but no more than
/// [`CHECK_INTERVAL_TICKS`].
pub fn ticks_to_next_check(left: Duration) -> u64 {
    let tick = EPOCH_TICK.as_millis();
    (left.as_millis().div_ceil(tick) as u64).clamp(1, CHECK_INTERVAL_TICKS)
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: (Self::DEFAULT_MEMORY_MB << 20) as usize,
            call_timeout: Some(Duration::from_millis(Self::DEFAULT_CALL_TIMEOUT_MS)),
        }
    }
}

/// Enforces the memory cap and remembers whether it was hit, so that the
/// resulting trap can be reported as what it is.
#[derive(Debug)]
pub struct MemoryLimiter {
    cap: usize,
    /// The size an instance asked for when it hit the cap.
    pub refused: Option<usize>,
}

impl MemoryLimiter {
    pub fn new(cap: usize) -> Self {
        MemoryLimiter { cap, refused: None }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.refused = Some(desired);
            wasmtime::bail!("memory cap of {} MiB exceeded", self.cap >> 20);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// Advances an engine's epoch every [`EPOCH_TICK`] until dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawn the epoch ticker thread");
        EpochTicker { stop, thread: Some(thread) }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_looked_at_by_its_deadline_or_sooner() {
        let ms = Duration::from_millis;
        assert_eq!(ticks_to_next_check(ms(0)), 1);
        assert_eq!(ticks_to_next_check(ms(1)), 1);
        assert_eq!(ticks_to_next_check(ms(10)), 1);
        assert_eq!(ticks_to_next_check(ms(11)), 2);
        assert_eq!(ticks_to_next_check(ms(95)), 10);
        assert_eq!(ticks_to_next_check(ms(10_000)), CHECK_INTERVAL_TICKS);
    }
}
