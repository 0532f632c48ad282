//! A group consumer whose close cannot hold its owner's thread.
//!
//! Dropping an rdkafka consumer that has a `group.id` closes it: it leaves
//! the group, and polls with no deadline until the group's coordinator has
//! answered what is still in flight (an offset commit, say). With the
//! brokers away that never happens, and the thread that drops the consumer
//! hangs with it — for a source, the very thread on its way to report that
//! the brokers are unreachable, so the job neither fails nor restarts.
//!
//! [`GroupConsumer`] therefore drops its consumer on a thread of its own and
//! waits for that at most a few seconds. A close that takes longer goes on
//! in the background and ends when the brokers come back, or with the
//! process. Nothing is lost by it: the offsets a source commits to its
//! group are for monitoring only (its snapshots hold the real ones), and
//! the sink's marker consumer commits nothing itself.

use std::ops::Deref;
use std::sync::mpsc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use tracing::warn;

/// The longest the owner of a consumer waits for its close: closing takes
/// milliseconds while the brokers answer.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A consumer, closed within `bound` when dropped (see the module docs).
pub(super) struct GroupConsumer<C: ConsumerContext + 'static> {
    consumer: Option<BaseConsumer<C>>,
    bound: Duration,
    /// Names the consumer in the warning of a close that took too long.
    what: String,
}

impl<C: ConsumerContext + 'static> GroupConsumer<C> {
    /// Wraps `consumer`, whose close will be waited for at most
    /// [`CLOSE_WAIT`], or `timeout` (the connector's `timeout_ms`) if shorter.
    pub(super) fn new(consumer: BaseConsumer<C>, timeout: Duration, what: String) -> Self {
        GroupConsumer { consumer: Some(consumer), bound: timeout.min(CLOSE_WAIT), what }
    }
}

impl<C: ConsumerContext + 'static> Deref for GroupConsumer<C> {
    type Target = BaseConsumer<C>;

    fn deref(&self) -> &BaseConsumer<C> {
        self.consumer.as_ref().expect("a group consumer is only taken when dropped")
    }
}

impl<C: ConsumerContext + 'static> Drop for GroupConsumer<C> {
    fn drop(&mut self) {
        let Some(consumer) = self.consumer.take() else { return };
        let (closed, wait) = mpsc::channel();
        let closing = std::thread::Builder::new().name("weir-kafka-close".into()).spawn(move || {
            drop(consumer);
            let _ = closed.send(());
        });
        if closing.is_err() {
            // No thread to spare: the failed spawn dropped the consumer, and
            // so closed it, on this thread (it may have waited, not leaked).
            return;
        }
        if wait.recv_timeout(self.bound).is_err() {
            warn!(consumer = %self.what, bound_ms = self.bound.as_millis() as u64,
                  "kafka consumer did not close in time (its group coordinator does not answer); closing it in the background");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};

    use super::*;

    /// A consumer of a group whose brokers refuse connections, with an
    /// offset commit waiting for the group's coordinator: what a source
    /// holds when its brokers go away.
    fn consumer_with_a_commit_in_flight() -> BaseConsumer {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("group.id", "weir-closing-test")
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer");
        let mut offsets = TopicPartitionList::new();
        offsets.add_partition_offset("t", 0, Offset::Offset(1)).expect("an offset");
        consumer.assign(&offsets).expect("assigned");
        consumer.commit(&offsets, CommitMode::Async).expect("a commit queued");
        consumer
    }

    #[test]
    fn dropping_a_consumer_whose_coordinator_is_away_does_not_hold_the_thread() {
        let consumer = GroupConsumer::new(consumer_with_a_commit_in_flight(), Duration::from_millis(200), "test".into());
        let started = Instant::now();
        drop(consumer);
        // Dropped as it is, this consumer polls until the commit times out
        // of the coordinator queue (the group session timeout, 45 s).
        assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    }
}
