//! How long state values live: Flink's `StateTtlConfig`, kept by the host.

use std::time::Duration;

/// A time-to-live for the values of a state ([`crate::ValueState::with_ttl`],
/// [`crate::MapState::with_ttl`], [`crate::ListState::with_ttl`]).
///
/// A value expires when `duration` of processing time — the host's wall
/// clock — has passed since it was last written (or read, with
/// [`Ttl::refreshed_on_read`]). An expired value reads as absent, however
/// late the host removes it; the host removes expired values from its
/// storage and snapshots in the background, so that the state of keys
/// never seen again does not grow for ever. The time a value expires at is
/// stored with it: it holds across failures, upgrades and rescales.
///
/// A state keeps the choice it was first opened with: a job whose
/// snapshots hold a state without a time-to-live refuses to open it with
/// one (and the other way), rather than read values in the wrong format.
/// A new duration applies from each value's next write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    millis: u64,
    refresh_on_read: bool,
}

impl Ttl {
    /// Values expire `duration` after they were last written (at least a
    /// millisecond).
    pub fn after(duration: Duration) -> Self {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1);
        Ttl { millis, refresh_on_read: false }
    }

    /// Reading a value restarts its time too (Flink's `OnReadAndWrite`):
    /// a value lives as long as it keeps being used.
    pub fn refreshed_on_read(self) -> Self {
        Ttl { refresh_on_read: true, ..self }
    }

    /// The duration, in milliseconds.
    pub fn millis(&self) -> u64 {
        self.millis
    }

    /// Whether reading a value restarts its time.
    pub fn refresh_on_read(&self) -> bool {
        self.refresh_on_read
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Ttl;
    use crate::testing::{TestEvent, TestHarness};
    use crate::{Config, Context, Error, Event, ListState, MapState, Operator, ValueState};

    /// Per key: a count of events and the events seen, living 1 000 ms of
    /// processing time from their last write; `touched` lives as long from
    /// its last read too. Emits "count: items (touched)".
    struct Recent {
        count: ValueState<u64>,
        seen: MapState<u64>,
        log: ListState<String>,
        touched: ValueState<bool>,
    }

    impl Operator for Recent {
        fn init(_: &Config) -> Result<Self, Error> {
            let ttl = Ttl::after(Duration::from_millis(1_000));
            Ok(Recent {
                count: ValueState::new("count").with_ttl(ttl),
                seen: MapState::new("seen").with_ttl(ttl),
                log: ListState::new("log").with_ttl(ttl),
                touched: ValueState::new("touched").with_ttl(ttl.refreshed_on_read()),
            })
        }

        fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
            let value = event.value_str()?.to_owned();
            let touched = self.touched.get(ctx)?.is_some();
            if value == "peek" {
                return Ok(ctx.emit(event.key(), format!("touched {touched}")));
            }
            let count = self.count.update(ctx, |n| n.unwrap_or(0) + 1)?;
            self.seen.set(ctx, value.as_str(), &count)?;
            self.log.add(ctx, &value)?;
            if !touched {
                self.touched.set(ctx, &true)?;
            }
            let seen: Vec<String> = self.seen.keys::<String>(ctx)?;
            let log = self.log.get(ctx)?;
            ctx.emit(event.key(), format!("{count}: {} / {}", seen.join(" "), log.join(" ")));
            Ok(())
        }
    }

    fn at(op: &mut TestHarness<Recent>, now: i64, value: &str) -> String {
        op.advance_processing_time(now).unwrap();
        op.process([TestEvent::new("k", value)]).unwrap()[0].value_str()
    }

    #[test]
    fn values_entries_and_items_expire_a_time_to_live_after_their_last_write() {
        let mut op = TestHarness::<Recent>::new(&[]).unwrap();
        assert_eq!(at(&mut op, 0, "x"), "1: x / x");
        assert_eq!(at(&mut op, 500, "y"), "2: x y / x y");
        // The count was written at 500: it lives; entry and item x not.
        assert_eq!(at(&mut op, 1_200, "z"), "3: y z / y z");
        let mut restored = op.restored(&[]).unwrap();
        assert_eq!(at(&mut restored, 2_199, "w"), "4: w z / z w", "the count lives to 2 200, z to 2 200");
        assert_eq!(at(&mut restored, 4_000, "v"), "1: v / v", "all expired");
    }

    #[test]
    fn a_value_refreshed_on_read_lives_while_it_is_read() {
        let mut op = TestHarness::<Recent>::new(&[]).unwrap();
        at(&mut op, 0, "x");
        for now in [900, 1_800, 2_700] {
            assert_eq!(at(&mut op, now, "peek"), "touched true", "read at {now}");
        }
        assert_eq!(at(&mut op, 3_700, "peek"), "touched false", "unread for 1 000 ms");
    }

    #[test]
    fn a_time_to_live_is_at_least_a_millisecond() {
        assert_eq!(Ttl::after(Duration::from_micros(10)).millis(), 1);
        assert!(!Ttl::after(Duration::from_secs(1)).refresh_on_read());
        assert!(Ttl::after(Duration::from_secs(1)).refreshed_on_read().refresh_on_read());
    }
}
