//! `count-window`: each key's events in groups of `size`, as Flink's
//! `keyBy(…).countWindow(size)` — a tumbling count window per key.
//!
//! A key's event values are appended to a list state until the `size`-th
//! arrives; then the group is emitted as `(key, "V1 V2 … Vsize")`, in
//! arrival order, and the list emptied. Appending costs the same however
//! full the list is (it is not read until the group is complete), and a
//! key's last, incomplete group stays in state — in checkpoints and
//! savepoints — until more events complete it.
//!
//! Config: `size` (events per group, at least 1; 3 by default).

use weir_sdk::{Config, Context, Error, Event, ListState, Operator};

pub struct CountWindow {
    size: u64,
    group: ListState<String>,
}

impl Operator for CountWindow {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&["size"])?;
        let size = config.parse_or("size", 3u64)?;
        if size == 0 {
            return Err(Error::config("`size` must be at least 1: it is how many events of a key make a group"));
        }
        Ok(CountWindow { size, group: ListState::new("group") })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        self.group.add(ctx, &event.value_str()?.to_owned())?;
        if self.group.len(ctx)? == self.size {
            let group = self.group.get(ctx)?;
            ctx.emit(event.key(), group.join(" "));
            self.group.clear(ctx)?;
        }
        Ok(())
    }
}

weir_sdk::export_operator!(CountWindow);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn emits_each_keys_events_in_groups_of_size_across_batches() {
        let mut op = TestHarness::<CountWindow>::new(&[("size", "3")]).unwrap();
        let first = op.process((0..5).map(|i| TestEvent::new(["a", "b"][i % 2], format!("e{i}")))).unwrap();
        let out: Vec<(String, String)> = first.iter().map(|e| (e.key_str(), e.value_str())).collect();
        assert_eq!(out, [("a".to_owned(), "e0 e2 e4".to_owned())]);
        let second = op.process([TestEvent::new("b", "e5"), TestEvent::new("a", "e6")]).unwrap();
        let out: Vec<(String, String)> = second.iter().map(|e| (e.key_str(), e.value_str())).collect();
        assert_eq!(out, [("b".to_owned(), "e1 e3 e5".to_owned())], "a's e6 waits for two more");
    }

    #[test]
    fn a_size_of_zero_is_refused() {
        let error = TestHarness::<CountWindow>::new(&[("size", "0")]).err().unwrap();
        assert!(error.to_string().contains("`size` must be at least 1"), "{error}");
    }
}
