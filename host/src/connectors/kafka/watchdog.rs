//! Waiting for librdkafka calls that may not return.
//!
//! librdkafka's transactional calls take a timeout, yet one of them can
//! wait past it: `send_offsets_to_transaction` waits for its request's
//! answer with no deadline of its own (librdkafka 2.12 leaves the timeout
//! to the request, which a transaction coordinator that went away while it
//! was in flight may never answer). Seen here: with the brokers away
//! during a stop with a savepoint, a commit waited in it for more than ten
//! minutes, and the job's end with it.
//!
//! [`watched`] therefore runs such work on a thread of its own, which beats
//! a [`Heartbeat`] after each call; the waiter gives the work up when no
//! beat came for longer than the bound its caller sets (every call is
//! meant to return within its timeout). The thread is left to end when its
//! call returns, or with the process. For a commit that is safe: the next
//! attempt's producer fences the abandoned one (same transactional id), so
//! its transaction is aborted or, committed before the fence, shows in the
//! commit marker that the next attempt reads first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Beaten by watched work after each step that could wait.
pub(super) struct Heartbeat {
    started: Instant,
    /// Milliseconds from `started` to the last beat.
    last_ms: AtomicU64,
}

impl Heartbeat {
    fn new() -> Self {
        Heartbeat { started: Instant::now(), last_ms: AtomicU64::new(0) }
    }

    /// Says the work is still moving.
    pub(super) fn beat(&self) {
        self.last_ms.store(self.started.elapsed().as_millis() as u64, Ordering::Release);
    }

    /// How long since the last beat (or the start).
    fn silence(&self) -> Duration {
        self.started.elapsed().saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Acquire)))
    }
}

/// Why watched work gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GivenUp {
    /// It went silent for longer than its bound and was left behind.
    Stalled,
    /// It panicked, with this message.
    Panicked(String),
}

/// Work started by [`watched`].
pub(super) struct Watched<T> {
    heartbeat: std::sync::Arc<Heartbeat>,
    result: mpsc::Receiver<T>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts `work` on a thread named `name`, handing it the heartbeat to beat.
pub(super) fn watched<T, F>(name: &str, work: F) -> Watched<T>
where
    T: Send + 'static,
    F: FnOnce(&Heartbeat) -> T + Send + 'static,
{
    let heartbeat = std::sync::Arc::new(Heartbeat::new());
    let (done, result) = mpsc::channel();
    let beats = heartbeat.clone();
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            // The waiter may have given up: nobody to tell then.
            let _ = done.send(work(&beats));
        })
        .expect("spawn a kafka client thread");
    Watched { heartbeat, result, thread }
}

impl<T> Watched<T> {
    /// The work's result; [`GivenUp::Stalled`] once it has not beaten for
    /// longer than `stall` (its thread is then left to end on its own), or
    /// [`GivenUp::Panicked`] if it panicked.
    pub(super) fn wait(self, stall: Duration) -> Result<T, GivenUp> {
        const LOOK: Duration = Duration::from_millis(50);
        loop {
            match self.result.recv_timeout(LOOK) {
                Ok(result) => return Ok(result),
                Err(mpsc::RecvTimeoutError::Timeout) if self.heartbeat.silence() > stall => {
                    return Err(GivenUp::Stalled);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // The sender went without a result: the work unwound.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(GivenUp::Panicked(panic_message(self.thread.join())));
                }
            }
        }
    }
}

/// What a panicked thread said, as text.
fn panic_message(ended: std::thread::Result<()>) -> String {
    let Err(payload) = ended else { return "the thread ended without a result".to_owned() };
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => "a panic without a message".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_that_goes_silent_is_given_up_and_work_that_beats_is_waited_for() {
        let silent = watched("test-silent", |_| std::thread::sleep(Duration::from_secs(30)));
        let started = Instant::now();
        assert_eq!(silent.wait(Duration::from_millis(200)), Err(GivenUp::Stalled));
        assert!(started.elapsed() < Duration::from_secs(10), "given up after {:?}", started.elapsed());

        // Longer in all than the bound, but never silent for that long.
        let beating = watched("test-beating", |heartbeat| {
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(50));
                heartbeat.beat();
            }
            7
        });
        assert_eq!(beating.wait(Duration::from_secs(1)), Ok(7));
    }

    #[test]
    fn work_that_panics_is_reported_with_its_message_at_once() {
        let panicking = watched("test-panicking", |_| -> u32 { panic!("producer gone: {}", 42) });
        let started = Instant::now();
        assert_eq!(panicking.wait(Duration::from_secs(60)), Err(GivenUp::Panicked("producer gone: 42".to_owned())));
        assert!(started.elapsed() < Duration::from_secs(10), "reported after {:?}", started.elapsed());
    }
}
