//! The sandbox's resource limits: a memory cap per instance, a deadline
//! per call and a bound on the timers a subtask may have pending (the host
//! holds them, outside the memory cap).
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
    /// The most timers one subtask may have pending. Timers live in the
    /// host's memory and are written whole into every checkpoint, so a
    /// plugin setting one per event rather than per key and window would
    /// otherwise grow the host without bound (`usize::MAX`: no bound,
    /// `timer_limit = 0`).
    pub max_timers: usize,
}

impl Limits {
    pub const DEFAULT_MEMORY_MB: u64 = 512;
    pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 10_000;
    /// One pending timer for each of a million keys: 100–200 MB of host
    /// memory with short keys.
    pub const DEFAULT_TIMER_LIMIT: usize = 1_000_000;
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
            max_timers: Self::DEFAULT_TIMER_LIMIT,
        }
    }
}

/// Enforces the memory cap on all of a plugin's linear memories together
/// — a component may hold many core modules, each with memories of its
/// own (the sandbox audit filled 16 of 240 MiB under a 256 MiB cap) — and
/// remembers whether it was hit in the call under way, so that what
/// follows can be reported as what it is. A growth past the cap fails as
/// the plugin's allocator sees it (`memory.grow` returns -1), not as a
/// trap: a plugin may handle it (Rust's `try_reserve`, Python's
/// `MemoryError`); most then trap or fail the call, and the error names
/// the cap. Tables are bounded together likewise.
#[derive(Debug)]
pub struct MemoryLimiter {
    cap: usize,
    /// Bytes the store's memories hold, all together.
    memory_bytes: usize,
    /// Elements the store's tables hold, all together.
    table_elements: usize,
    /// The size an instance asked for, its memories together, when it hit
    /// the cap.
    pub refused: Option<usize>,
}

/// The most table elements (function references) a plugin's tables may
/// hold together.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl MemoryLimiter {
    pub fn new(cap: usize) -> Self {
        MemoryLimiter { cap, memory_bytes: 0, table_elements: 0, refused: None }
    }

    /// The cap and what was asked for past it, in MiB, if it was hit.
    pub fn refused_mib(&self) -> Option<(usize, usize)> {
        self.refused.map(|asked| (self.cap >> 20, asked.div_ceil(1 << 20)))
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = (self.memory_bytes - current.min(self.memory_bytes)).saturating_add(desired);
        if total > self.cap {
            self.refused = Some(total);
            return Ok(false);
        }
        self.memory_bytes = total;
        tracing::trace!(from_kib = current >> 10, to_kib = desired >> 10, total_mib = total >> 20, "plugin memory grows");
        Ok(true)
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = (self.table_elements - current.min(self.table_elements)).saturating_add(desired);
        if total > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.table_elements = total;
        Ok(true)
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

    /// A component of many core modules, each with a memory under the cap,
    /// may not hold more than the cap together.
    #[test]
    fn the_memory_cap_holds_for_all_memories_together() {
        let mib = |n: usize| n << 20;
        let mut limiter = MemoryLimiter::new(mib(100));
        assert!(limiter.memory_growing(0, mib(60), None).unwrap(), "a first memory");
        assert!(limiter.memory_growing(0, mib(30), None).unwrap(), "a second");
        assert!(limiter.memory_growing(mib(30), mib(40), None).unwrap(), "the second grows: 100 MiB in all");
        assert!(!limiter.memory_growing(0, mib(1), None).unwrap(), "a third memory is past the cap");
        assert_eq!(limiter.refused, Some(mib(101)));

        let mut limiter = MemoryLimiter::new(mib(100));
        assert!(limiter.table_growing(0, MAX_TABLE_ELEMENTS - 10, None).unwrap());
        assert!(!limiter.table_growing(0, 11, None).unwrap(), "tables are bounded together too");
        assert!(limiter.table_growing(0, 10, None).unwrap());
    }
}
