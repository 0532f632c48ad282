//! `word-count`: counts events per key.
//!
//! Keyed by word (a `key_by` edge in the job file), it keeps one value state
//! `count` per key and emits `(key, count so far)` for every event, so the
//! last output for a key is its total.

use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};

pub struct WordCount {
    count: ValueState<u64>,
}

impl Operator for WordCount {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        Ok(WordCount { count: ValueState::new("count") })
    }

    // Called by the SDK for every event: inlined into its loop, the event
    // stays in registers instead of being built in memory for a call.
    #[inline]
    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        let count = self.count.update(ctx, |count| count.unwrap_or(0) + 1)?;
        ctx.emit(event.key(), count);
        Ok(())
    }
}

weir_sdk::export_operator!(WordCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn counts_per_key_across_batches() {
        let mut op = TestHarness::<WordCount>::new(&[]).unwrap();
        let out = op.process(["a", "b", "a"].map(|w| TestEvent::new(w, 1u64))).unwrap();
        let pairs: Vec<(String, String)> = out.iter().map(|e| (e.key_str(), e.value_str())).collect();
        assert_eq!(pairs, [("a", "1"), ("b", "1"), ("a", "2")].map(|(k, v)| (k.into(), v.into())));

        op.process([TestEvent::new("a", 1u64)]).unwrap();
        assert_eq!(op.state::<u64>("count", "a"), Some(3));
        assert_eq!(op.state::<u64>("count", "b"), Some(1));
        assert_eq!(op.state::<u64>("count", "c"), None);
    }

    #[test]
    fn keeps_timestamps_of_inputs() {
        let mut op = TestHarness::<WordCount>::new(&[]).unwrap();
        let out = op.process([TestEvent::new("a", 1u64).at(1_000)]).unwrap();
        assert_eq!(out[0].timestamp, Some(1_000));
    }

    #[test]
    fn unkeyed_input_is_a_clear_error() {
        let mut op = TestHarness::<WordCount>::new(&[]).unwrap();
        let err = op.process([TestEvent::unkeyed("x")]).unwrap_err();
        assert!(err.to_string().contains("key_by = true"), "{err}");
    }
}
