//! `dedup`: passes each event on the first time its key is seen, and drops
//! repeats — Flink's deduplication with state time-to-live.
//!
//! Keyed by an event id, it remembers which ids it has seen in a value
//! state whose values expire `ttl_ms` of processing time after they were
//! written (config `ttl_ms`, default one hour; `0` remembers for ever).
//! A repeat within that time is dropped; one after it passes again, as a
//! new event. The expiry is what keeps the state bounded: without it an
//! operator deduplicating a stream of fresh ids holds every id it ever
//! saw. The host removes expired ids from its state and its snapshots.

use std::time::Duration;

use weir_sdk::{Config, Context, Error, Event, Operator, Ttl, ValueState};

pub struct Dedup {
    seen: ValueState<bool>,
}

/// One hour.
const DEFAULT_TTL_MS: u64 = 3_600_000;

impl Operator for Dedup {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&["ttl_ms"])?;
        let seen = ValueState::new("seen");
        let seen = match config.parse_or("ttl_ms", DEFAULT_TTL_MS)? {
            0 => seen,
            ms => seen.with_ttl(Ttl::after(Duration::from_millis(ms))),
        };
        Ok(Dedup { seen })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        if self.seen.get(ctx)?.is_none() {
            self.seen.set(ctx, &true)?;
            ctx.emit(event.key(), event.value());
        }
        Ok(())
    }
}

weir_sdk::export_operator!(Dedup);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    fn passed(op: &mut TestHarness<Dedup>, now: i64, ids: &[&str]) -> Vec<String> {
        op.advance_processing_time(now).unwrap();
        let out = op.process(ids.iter().map(|id| TestEvent::new(*id, format!("event {id}")))).unwrap();
        out.iter().map(|e| e.key_str()).collect()
    }

    #[test]
    fn repeats_within_the_time_to_live_are_dropped_and_later_ones_pass() {
        let mut op = TestHarness::<Dedup>::new(&[("ttl_ms", "1000")]).unwrap();
        assert_eq!(passed(&mut op, 0, &["a", "b", "a"]), ["a", "b"]);
        assert_eq!(passed(&mut op, 500, &["a", "c"]), ["c"]);
        assert_eq!(passed(&mut op, 1_000, &["a", "b", "c"]), ["a", "b"], "a and b expired at 1 000, c lives to 1 500");
        let mut restored = op.restored(&[("ttl_ms", "1000")]).unwrap();
        assert_eq!(passed(&mut restored, 1_999, &["a", "c"]), ["c"], "restored, a lives to 2 000");
    }

    #[test]
    fn a_time_to_live_of_zero_remembers_for_ever() {
        let mut op = TestHarness::<Dedup>::new(&[("ttl_ms", "0")]).unwrap();
        assert_eq!(passed(&mut op, 0, &["a"]), ["a"]);
        assert_eq!(passed(&mut op, i64::MAX / 2, &["a"]), Vec::<String>::new());
    }
}
