//! Typed keyed list state: per key, a list of values that grows by
//! appending, as Flink's `ListState`.
//!
//! It is built on the host's map and value states, with no call of its
//! own: item `i` of a key's list is the entry of map state `name` under
//! sub-key `i` written as 20 decimal digits (so that the entries' byte
//! order is the list's order), and value state `name#next` holds the
//! index the next item takes — the list's length, since items are only
//! appended, and the whole list replaced or cleared. Appending writes one
//! entry and the index, however long the list (as Flink's RocksDB list
//! state appends without reading it); reading the list lists the map. The
//! Python and JavaScript SDKs store lists alike, so a plugin in one
//! language reads what another wrote.

use serde::{Serialize, de::DeserializeOwned};

use crate::{Context, Error, MapState, Ttl, ValueState};

/// The suffix of the value state holding a list's next index.
pub(crate) const NEXT_SUFFIX: &str = "#next";

/// A keyed list state: for the current key, a list of `T` (each stored as
/// JSON). Use it to buffer a key's events until a timer or a count says
/// what to do with them.
pub struct ListState<T> {
    items: MapState<T>,
    next: ValueState<u64>,
}

impl<T: Serialize + DeserializeOwned> ListState<T> {
    /// A handle on the list state called `name` (stored as the map state
    /// `name` and the value state `name#next`).
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let next = ValueState::new(format!("{name}{NEXT_SUFFIX}"));
        ListState { items: MapState::new(name), next }
    }

    /// The same state, each item expiring as `ttl` says (see [`Ttl`]), as
    /// in Flink: an expired item is left out of [`ListState::get`]. The
    /// length expires with the last item added, which is the last to
    /// expire (unless reads refresh the items: then with the last item
    /// read or added); until then [`ListState::len`] counts the
    /// items added since the list was last emptied, expired or not.
    pub fn with_ttl(self, ttl: Ttl) -> Self {
        ListState { items: self.items.with_ttl(ttl), next: self.next.with_ttl(ttl) }
    }

    /// Appends `value` to the current key's list.
    pub fn add(&self, ctx: &mut Context<'_>, value: &T) -> Result<(), Error> {
        let index = self.len(ctx)?;
        self.items.set(ctx, item_key(index), value)?;
        self.next.set(ctx, &(index + 1))
    }

    /// Appends every value of `values`, in order.
    pub fn add_all<'v>(&self, ctx: &mut Context<'_>, values: impl IntoIterator<Item = &'v T>) -> Result<(), Error>
    where
        T: 'v,
    {
        values.into_iter().try_for_each(|value| self.add(ctx, value))
    }

    /// The current key's list, in the order its items were added (empty
    /// if it has none).
    pub fn get(&self, ctx: &mut Context<'_>) -> Result<Vec<T>, Error> {
        Ok(self.items.entries::<Vec<u8>>(ctx)?.into_iter().map(|(_, value)| value).collect())
    }

    /// Replaces the current key's list by `values`.
    pub fn update<'v>(&self, ctx: &mut Context<'_>, values: impl IntoIterator<Item = &'v T>) -> Result<(), Error>
    where
        T: 'v,
    {
        self.clear(ctx)?;
        self.add_all(ctx, values)
    }

    /// Empties the current key's list.
    pub fn clear(&self, ctx: &mut Context<'_>) -> Result<(), Error> {
        self.items.clear(ctx)?;
        self.next.clear(ctx)
    }

    /// How many items the current key's list holds (without reading them).
    pub fn len(&self, ctx: &mut Context<'_>) -> Result<u64, Error> {
        Ok(self.next.get(ctx)?.unwrap_or(0))
    }

    /// Whether the current key's list is empty (without reading it).
    pub fn is_empty(&self, ctx: &mut Context<'_>) -> Result<bool, Error> {
        Ok(self.len(ctx)? == 0)
    }
}

/// The sub-key of item `index`: 20 digits, the most a `u64` has, so that
/// the items sort by index.
fn item_key(index: u64) -> String {
    format!("{index:020}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestEvent, TestHarness};
    use crate::{Config, Event, Operator, TimeDomain, Timer};

    /// Buffers each key's events until its timer at the event's time plus
    /// 10, then emits them in one line and empties the list; `reset`
    /// replaces a key's list by `["reset"]`.
    struct Buffer {
        list: ListState<String>,
    }

    impl Operator for Buffer {
        fn init(_: &Config) -> Result<Self, Error> {
            Ok(Buffer { list: ListState::new("buffer") })
        }

        fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
            let value = event.value_str()?.to_owned();
            if value == "reset" {
                return self.list.update(ctx, &["reset".to_owned()]);
            }
            if self.list.is_empty(ctx)? {
                ctx.register_timer(TimeDomain::EventTime, event.timestamp().unwrap_or(0) + 10)?;
            }
            self.list.add(ctx, &value)
        }

        fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer<'_>) -> Result<(), Error> {
            let items = self.list.get(ctx)?;
            let length = self.list.len(ctx)?;
            ctx.emit(timer.key(), format!("{length}: {}", items.join(" ")));
            self.list.clear(ctx)
        }
    }

    fn lines(out: &[crate::testing::Emitted]) -> Vec<(String, String)> {
        out.iter().map(|e| (e.key_str(), e.value_str())).collect()
    }

    #[test]
    fn a_list_keeps_its_order_across_batches_and_is_emptied_whole() {
        let mut op = TestHarness::<Buffer>::new(&[]).unwrap();
        let events: Vec<TestEvent> = (0..12).map(|i| TestEvent::new(["a", "b"][i % 2], format!("e{i}")).at(100)).collect();
        op.process(events).unwrap();
        op.process([TestEvent::new("a", "late").at(101), TestEvent::new("b", "reset").at(101)]).unwrap();
        let fired = op.advance_watermark(200).unwrap();
        let a = "7: e0 e2 e4 e6 e8 e10 late";
        assert_eq!(lines(&fired), [("a".to_owned(), a.to_owned()), ("b".to_owned(), "1: reset".to_owned())]);
        assert_eq!(op.map_state::<String>("buffer", "a", "00000000000000000000"), None, "emptied");
        op.process([TestEvent::new("a", "again").at(300)]).unwrap();
        assert_eq!(op.map_state::<String>("buffer", "a", "00000000000000000000").as_deref(), Some("again"), "from index 0");
        assert_eq!(lines(&op.advance_watermark(400).unwrap()), [("a".to_owned(), "1: again".to_owned())]);
    }
}
