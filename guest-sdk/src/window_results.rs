//! What a window operator's call gives back: the results of the windows
//! that fired or changed, in window order.
//!
//! Nearly always none or one (a timer fires one window; an event changes
//! a fired window only when it is late within the allowed lateness), so
//! one is held inline and more go to a vector: a fired window's result
//! was one allocation and one free per window when it was a `Vec`.

use crate::windows::WindowResult;

/// The results of a call to [`Windows::add`] or [`Windows::on_timer`], in
/// window order: iterate over it.
///
/// [`Windows::add`]: crate::windows::Windows::add
/// [`Windows::on_timer`]: crate::windows::Windows::on_timer
#[derive(Debug, Clone, PartialEq)]
pub struct WindowResults<O>(Held<O>);

#[derive(Debug, Clone, PartialEq)]
enum Held<O> {
    None,
    One(WindowResult<O>),
    Many(Vec<WindowResult<O>>),
}

impl<O> WindowResults<O> {
    pub(crate) fn new() -> Self {
        WindowResults(Held::None)
    }

    #[inline]
    pub(crate) fn push(&mut self, result: WindowResult<O>) {
        match self.0 {
            Held::None => self.0 = Held::One(result),
            _ => self.push_more(result),
        }
    }

    /// [`WindowResults::push`] past the first: rare, so out of line.
    #[inline(never)]
    fn push_more(&mut self, result: WindowResult<O>) {
        self.0 = match std::mem::replace(&mut self.0, Held::None) {
            Held::None => Held::One(result),
            Held::One(first) => Held::Many(vec![first, result]),
            Held::Many(mut all) => {
                all.push(result);
                Held::Many(all)
            }
        };
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Held::None => 0,
            Held::One(_) => 1,
            Held::Many(all) => all.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<O> From<Vec<WindowResult<O>>> for WindowResults<O> {
    fn from(all: Vec<WindowResult<O>>) -> Self {
        WindowResults(Held::Many(all))
    }
}

impl<O> IntoIterator for WindowResults<O> {
    type Item = WindowResult<O>;
    type IntoIter = WindowResultsIter<O>;

    fn into_iter(self) -> Self::IntoIter {
        WindowResultsIter(match self.0 {
            Held::None => Iter::One(None),
            Held::One(result) => Iter::One(Some(result)),
            Held::Many(all) => Iter::Many(all.into_iter()),
        })
    }
}

/// The iterator over [`WindowResults`].
pub struct WindowResultsIter<O>(Iter<O>);

enum Iter<O> {
    One(Option<WindowResult<O>>),
    Many(std::vec::IntoIter<WindowResult<O>>),
}

impl<O> Iterator for WindowResultsIter<O> {
    type Item = WindowResult<O>;

    #[inline]
    fn next(&mut self) -> Option<WindowResult<O>> {
        match &mut self.0 {
            Iter::One(result) => result.take(),
            Iter::Many(all) => all.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_their_order_past_the_first() {
        let result = |start: i64| WindowResult { start, end: start + 10, value: start as f64 };
        let mut results = WindowResults::new();
        assert!(results.is_empty());
        (0..3).for_each(|i| results.push(result(i * 10)));
        assert_eq!(results.len(), 3);
        let starts: Vec<i64> = results.into_iter().map(|r| r.start).collect();
        assert_eq!(starts, [0, 10, 20]);
        let from_vec = WindowResults::from(vec![result(5), result(7)]);
        assert_eq!(from_vec.into_iter().map(|r| r.start).collect::<Vec<_>>(), [5, 7]);
    }
}
