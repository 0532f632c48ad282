//! A subtask's inbox: a bounded channel whose full state holds producers
//! back (backpressure), with producers woken in bursts rather than once per
//! message.
//!
//! A crossbeam channel wakes a blocked sender on every receive. Behind a
//! slower consumer that is one wake-up per batch: the producer sends one
//! batch, finds the inbox full again and parks. A wake-up is a system call
//! in the consumer's thread — the busy one, since it is the bottleneck —
//! and on these virtual machines it costs tens of microseconds (an
//! interprocessor interrupt to a halted virtual CPU): a tenth of a Wasm
//! count operator's time (the performance log, session 35). So producers
//! that find the inbox full wait on its [`Room`] instead, and the consumer
//! wakes them only once the inbox has drained to half: one wake-up per
//! half an inbox of batches, and the producer refills it in one go.
//!
//! Two rules keep that fair when several producers share an inbox (the
//! subtasks behind a key-by or a rebalance). A producer does not take the
//! quick path past producers already waiting: woken, they would otherwise
//! race a running producer that refills the inbox before they get to it,
//! and one of them could lose for seconds — and hold back the watermarks
//! and checkpoint barriers it carries. And the time a producer waits is
//! counted as it goes, not when its send returns, so the backpressure a
//! job reports includes sends still waiting.

use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, TrySendError};

use super::channel::{Cancel, Envelope};
use super::task::{TaskError, TaskMetrics};

/// How long a blocked send or receive waits before checking for cancellation.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A bounded inbox of `capacity` messages: its producers' end and its
/// consumer's.
pub fn inbox(capacity: usize) -> (InboxSender, Inbox) {
    let (sender, receiver) = crossbeam_channel::bounded(capacity);
    let room = Arc::new(Room { wake_at: capacity / 2, ..Room::default() });
    (InboxSender { sender, room: room.clone() }, Inbox { receiver, room })
}

/// An inbox that never holds its producers back (for tests).
#[cfg(test)]
pub fn unbounded_inbox() -> (InboxSender, Inbox) {
    let (sender, receiver) = crossbeam_channel::unbounded();
    let room = Arc::new(Room::default());
    (InboxSender { sender, room: room.clone() }, Inbox { receiver, room })
}

/// Where producers that found the inbox full wait for it to drain.
#[derive(Debug, Default)]
struct Room {
    /// Producers waiting (or about to).
    waiting: AtomicUsize,
    /// Wake them once the inbox holds this many messages or fewer.
    wake_at: usize,
    lock: Mutex<()>,
    drained: Condvar,
}

/// A producer's end of an inbox.
#[derive(Debug, Clone)]
pub struct InboxSender {
    sender: Sender<Envelope>,
    room: Arc<Room>,
}

impl InboxSender {
    /// Sends, waiting while the inbox is full (backpressure) but giving up
    /// when the job is cancelled or the consumer is gone. Time spent
    /// waiting is counted in `metrics`.
    pub fn send(&self, envelope: Envelope, cancel: &Cancel, metrics: &TaskMetrics) -> Result<(), TaskError> {
        if self.room.waiting.load(Ordering::Relaxed) > 0 {
            // Behind producers already waiting, not past them.
            return self.send_when_drained(envelope, cancel, metrics);
        }
        match self.sender.try_send(envelope) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(envelope)) => self.send_when_drained(envelope, cancel, metrics),
            Err(TrySendError::Disconnected(_)) => Err(TaskError::Stopped),
        }
    }

    /// Sends once the inbox has room, waiting on it with the other
    /// producers; the time waited is counted in `metrics` at each wake-up.
    fn send_when_drained(&self, mut envelope: Envelope, cancel: &Cancel, metrics: &TaskMetrics) -> Result<(), TaskError> {
        let room = &self.room;
        let mut guard = room.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        room.waiting.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let sent = loop {
            // Tried again after counting itself as waiting: a consumer that
            // drained the inbox before it looked at `waiting` left room.
            match self.sender.try_send(envelope) {
                Ok(()) => break Ok(()),
                Err(TrySendError::Full(back)) if !cancel.is_cancelled() => envelope = back,
                Err(_) => break Err(TaskError::Stopped),
            }
            let waited = Instant::now();
            guard = match room.drained.wait_timeout(guard, POLL_INTERVAL) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
            metrics.count_backpressure(waited.elapsed());
        };
        room.waiting.fetch_sub(1, Ordering::SeqCst);
        sent
    }
}

/// A consumer's end of an inbox.
#[derive(Debug, Clone)]
pub struct Inbox {
    receiver: Receiver<Envelope>,
    room: Arc<Room>,
}

impl Inbox {
    pub fn try_recv(&self) -> Result<Envelope, TryRecvError> {
        let envelope = self.receiver.try_recv()?;
        self.taken();
        Ok(envelope)
    }

    pub fn recv_timeout(&self, timeout: Duration) -> Result<Envelope, RecvTimeoutError> {
        let envelope = self.receiver.recv_timeout(timeout)?;
        self.taken();
        Ok(envelope)
    }

    /// After a message is taken: wakes the waiting producers once the
    /// inbox has drained to half.
    fn taken(&self) {
        // Orders the receive before the read of `waiting`, against a
        // producer's count of itself before its second try (Dekker's
        // pattern): one of the two sees the other.
        fence(Ordering::SeqCst);
        let room = &self.room;
        if room.waiting.load(Ordering::Relaxed) > 0 && self.receiver.len() <= room.wake_at {
            let _guard = room.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            room.drained.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::Message;

    fn end() -> Envelope {
        Envelope { input: 0, channel: 0, message: Message::End }
    }

    /// A producer held back by a full inbox sends again only once the
    /// consumer has taken half of it, and then nothing is lost.
    #[test]
    fn a_producer_waits_for_the_inbox_to_drain_to_half() {
        let (sender, inbox) = inbox(4);
        let (cancel, metrics) = (Cancel::default(), TaskMetrics::default());
        (0..4).for_each(|_| sender.send(end(), &cancel, &metrics).unwrap());
        let producer = std::thread::spawn(move || (0..6).for_each(|_| sender.send(end(), &cancel, &metrics).unwrap()));
        std::thread::sleep(Duration::from_millis(20));
        inbox.try_recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(inbox.receiver.len(), 3, "one taken of four: the producer still waits");
        inbox.try_recv().unwrap();
        let mut received = 2;
        while received < 10 {
            inbox.recv_timeout(Duration::from_secs(5)).expect("every message arrives");
            received += 1;
        }
        producer.join().unwrap();
        assert!(inbox.try_recv().is_err());
    }

    /// A producer's time waiting is counted while it still waits, not only
    /// once its send returns.
    #[test]
    fn waiting_counts_as_backpressure_while_it_lasts() {
        let (sender, inbox) = inbox(1);
        let (cancel, metrics) = (Cancel::default(), Arc::new(TaskMetrics::default()));
        sender.send(end(), &cancel, &metrics).unwrap();
        let waiting = metrics.clone();
        let producer = std::thread::spawn(move || sender.send(end(), &cancel, &waiting));
        std::thread::sleep(10 * POLL_INTERVAL);
        let counted = Duration::from_nanos(metrics.backpressured_ns.load(Ordering::Relaxed));
        assert!(!producer.is_finished(), "the inbox is full: the producer waits");
        assert!(counted >= 2 * POLL_INTERVAL, "only {counted:?} counted of a wait of {:?} so far", 10 * POLL_INTERVAL);
        inbox.try_recv().unwrap();
        producer.join().unwrap().unwrap();
    }

    /// A producer that finds others waiting queues behind them rather than
    /// taking the room they were woken for.
    #[test]
    fn a_producer_does_not_pass_producers_already_waiting() {
        let (sender, inbox) = inbox(2);
        let (cancel, metrics) = (Cancel::default(), TaskMetrics::default());
        (0..2).for_each(|_| sender.send(end(), &cancel, &metrics).unwrap());
        let (waiter, waiter_cancel) = (sender.clone(), cancel.clone());
        let first = std::thread::spawn(move || waiter.send(end(), &waiter_cancel, &TaskMetrics::default()));
        while sender.room.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Room for one while a producer waits, and the room's lock held as
        // if the waiting one were about to take it: a later send must not
        // take the room on its quick path.
        let room = sender.room.clone();
        let guard = room.lock.lock().unwrap();
        // (Taken past `Inbox::taken`, which would wake it with this lock.)
        inbox.receiver.try_recv().unwrap();
        let late = std::thread::spawn(move || sender.send(end(), &cancel, &metrics));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!late.is_finished(), "a later send took the room a waiting producer was woken for");
        drop(guard);
        for _ in 0..3 {
            inbox.recv_timeout(Duration::from_secs(5)).expect("both producers' messages arrive");
        }
        first.join().unwrap().unwrap();
        late.join().unwrap().unwrap();
    }

    /// A waiting producer gives up when the job is cancelled.
    #[test]
    fn a_waiting_producer_stops_on_cancel() {
        let (sender, _inbox) = inbox(1);
        let (cancel, metrics) = (Cancel::default(), TaskMetrics::default());
        sender.send(end(), &cancel, &metrics).unwrap();
        let stopper = cancel.clone();
        let producer = std::thread::spawn(move || sender.send(end(), &cancel, &metrics));
        stopper.cancel();
        assert!(matches!(producer.join().unwrap(), Err(TaskError::Stopped)));
    }
}
