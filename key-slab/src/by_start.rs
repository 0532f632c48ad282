//! Finding a key's window among its windows, sorted by start.
//!
//! A window operator looks up one window per event among the key's open
//! windows. Usually there are one or two; but when one input runs far
//! ahead in event time, a key holds hundreds, and a bisection per event
//! is most of the operator's time (a third of a window operator's at
//! P = 2 before it searched as here). So the likely places are tried
//! first, in order: the newest window and the oldest (both inline, where
//! the search is called) — an event falls in one of them nearly always —
//! then the one before the newest (a batch
//! crossing into a new window) and the one after the oldest (inputs far
//! apart in event time: the behind one's windows are the oldest two while
//! the ahead one's pile up behind them), then around the place the last
//! search found, and only then bisection.

use std::cell::Cell;
use std::collections::VecDeque;

/// Where the last search of a key's windows found one. The next one looked
/// for is often there or just after: the window an input is filling
/// behind older ones still open, or windows firing in turn behind those
/// just fired.
#[derive(Debug, Default, Clone)]
pub struct SearchHint(Cell<usize>);

/// Where the item starting at `start` is among `items`, sorted by
/// `start_of` (`Err`: where it would go) — the same answer as
/// `items.binary_search_by_key(&start, start_of)`.
///
/// The newest item, where an input in order nearly always falls, and the
/// oldest, which fires first, are tried where this is called; the other
/// places in a function of their own. In a Wasm instance the whole search
/// was not inlined into the window's per-event path, and a call of it
/// took ~100 instructions an event, most of them the call's own
/// (callgrind, the window at P = 1).
#[inline(always)]
pub fn position_by_start<T>(items: &VecDeque<T>, start: i64, start_of: impl Fn(&T) -> i64, hint: &SearchHint) -> Result<usize, usize> {
    match (items.back().map(&start_of), items.front().map(&start_of)) {
        (Some(last), _) if last == start => Ok(items.len() - 1),
        (_, Some(first)) if first == start => Ok(0),
        _ => position_elsewhere(items, start, start_of, hint),
    }
}

/// [`position_by_start`] for a start that is neither the newest's nor the
/// oldest's.
#[inline]
fn position_elsewhere<T>(items: &VecDeque<T>, start: i64, start_of: impl Fn(&T) -> i64, hint: &SearchHint) -> Result<usize, usize> {
    let len = items.len();
    match (items.front().map(&start_of), items.back().map(&start_of)) {
        (None, _) | (_, None) => Err(0),
        (_, Some(last)) if last < start => Err(len),
        (Some(first), _) if start < first => Err(0),
        _ if len > 2 && start_of(&items[len - 2]) == start => Ok(len - 2),
        _ if len > 2 && start_of(&items[1]) == start => Ok(1),
        _ => search(items, start, start_of, hint),
    }
}

/// [`position_by_start`] for a start that is neither the oldest's nor the
/// newest's: at or just after the last place found (an input filling its
/// window behind older ones still open, or opening the next one there;
/// windows firing in turn behind those just fired), else by bisection.
fn search<T>(items: &VecDeque<T>, start: i64, start_of: impl Fn(&T) -> i64, hint: &SearchHint) -> Result<usize, usize> {
    let starts = |at: usize| items.get(at).map(&start_of);
    // Where `start` is against the item at `at`: there, or between the one
    // before it and it.
    let at_or_before = |at: usize| match starts(at) {
        Some(s) if s == start => Some(Ok(at)),
        Some(s) if s > start && at > 0 && starts(at - 1).is_some_and(|before| before < start) => Some(Err(at)),
        _ => None,
    };
    let last = hint.0.get();
    let near_hint = at_or_before(last).or_else(|| at_or_before(last + 1));
    let found = near_hint.unwrap_or_else(|| items.binary_search_by_key(&start, &start_of));
    // The item looked for is there now, or is inserted there next.
    hint.0.set(found.unwrap_or_else(|at| at));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wherever the last search left its hint, an item is found where it
    /// is, and an absent one placed where it belongs — as bisection says.
    #[test]
    fn positions_agree_with_bisection_whatever_was_searched_before() {
        let starts: VecDeque<i64> = (0..40).map(|i| i * 1000).collect();
        let hint = SearchHint::default();
        let probes: Vec<i64> = (0..200).map(|i| (i * 7919 % 200) * 250 - 500).collect();
        for &before in &probes {
            for &start in &probes {
                let _ = position_by_start(&starts, before, |s| *s, &hint);
                let expected = starts.binary_search(&start);
                assert_eq!(position_by_start(&starts, start, |s| *s, &hint), expected, "{start} after {before}");
            }
        }
        for len in 0..4 {
            let few: VecDeque<i64> = (0..len).map(|i| i * 1000).collect();
            for start in (-1..=len * 2).map(|i| i * 500) {
                assert_eq!(position_by_start(&few, start, |s| *s, &hint), few.binary_search(&start), "{start} among {len}");
            }
        }
    }
}
