//! The sandbox's resource limits: a memory cap per instance and a deadline
//! per call.
//!
//! Deadlines use wasmtime's epoch interruption: one ticker thread per engine
//! advances the epoch every [`EPOCH_TICK`]; before each call the instance
//! sets its deadline in ticks. This costs a counter check in loop headers of
//! the guest, far cheaper than fuel metering.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

/// How often the engine's epoch advances; the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

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

    /// Ticks of [`EPOCH_TICK`] that cover the call timeout (at least one,
    /// rounded up, plus one for the tick already under way); `None` without
    /// a deadline.
    pub fn deadline_ticks(&self) -> Option<u64> {
        let tick = EPOCH_TICK.as_millis() as u64;
        self.call_timeout.map(|timeout| (timeout.as_millis() as u64).div_ceil(tick).max(1) + 1)
    }
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
    fn deadline_ticks_round_up() {
        let limits = |ms| Limits { memory_bytes: 0, call_timeout: Some(Duration::from_millis(ms)) };
        assert_eq!(limits(0).deadline_ticks(), Some(2));
        assert_eq!(limits(1).deadline_ticks(), Some(2));
        assert_eq!(limits(10).deadline_ticks(), Some(2));
        assert_eq!(limits(11).deadline_ticks(), Some(3));
        assert_eq!(limits(1000).deadline_ticks(), Some(101));
        assert_eq!(Limits { memory_bytes: 0, call_timeout: None }.deadline_ticks(), None);
    }
}
