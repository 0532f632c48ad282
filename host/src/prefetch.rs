//! Prefetch hints. A loop that looks up many keys in a table larger than
//! the processor's caches waits on memory at each lookup in turn; told a
//! few keys ahead where a later lookup will start, the processor loads
//! those lines meanwhile, and the misses overlap instead.

/// How many keys ahead of the one being looked up a loop prefetches the
/// lookup of: enough lookups' work to cover a load from the last-level
/// cache (the exchange's key numbering) or from memory (a state table).
pub const PREFETCH_AHEAD: usize = 8;

/// Starts loading the cache line at `address`. Only a hint: it has no
/// effect the program can observe, whatever the address.
#[inline(always)]
pub fn prefetch<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and does not
    // fault, on any address.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// What a prefetching loop works out for each key — its hash, the key
/// group — once: [`PREFETCH_AHEAD`] keys before the key's turn, when its
/// lookup is prefetched, then kept in a ring until the turn comes. (Worked
/// out again at the lookup, a hash over a short key is ~15–20 ns of the
/// ~200 ns a write to a table of a million entries takes.)
pub struct Lookahead<T> {
    ring: [T; PREFETCH_AHEAD],
}

impl<T: Copy + Default> Lookahead<T> {
    /// The ring for a loop over keys `0..n`, holding what `work_out` gives
    /// for the first [`PREFETCH_AHEAD`] of them.
    pub fn new(n: usize, mut work_out: impl FnMut(usize) -> T) -> Self {
        let mut ring = [T::default(); PREFETCH_AHEAD];
        for (i, place) in ring.iter_mut().enumerate().take(n) {
            *place = work_out(i);
        }
        Lookahead { ring }
    }

    /// What was worked out for key `i` (keys taken in order from 0), with,
    /// if the loop's `n` keys go that far, what `work_out` gives for key
    /// `i + PREFETCH_AHEAD` — kept in `i`'s place, and returned to
    /// prefetch with.
    #[inline]
    pub fn next(&mut self, i: usize, n: usize, work_out: impl FnOnce(usize) -> T) -> (T, Option<T>) {
        let place = &mut self.ring[i % PREFETCH_AHEAD];
        let now = *place;
        let ahead = i + PREFETCH_AHEAD;
        let later = (ahead < n).then(|| {
            *place = work_out(ahead);
            *place
        });
        (now, later)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key's value comes back at its turn, each worked out once and
    /// handed out ahead exactly when the key is `PREFETCH_AHEAD` away.
    #[test]
    fn each_key_is_worked_out_once_and_comes_back_at_its_turn() {
        for n in [0, 1, PREFETCH_AHEAD - 1, PREFETCH_AHEAD, PREFETCH_AHEAD + 1, 3 * PREFETCH_AHEAD + 5] {
            let mut worked_out = Vec::new();
            let mut ring = Lookahead::new(n, |i| {
                worked_out.push(i);
                i * 10
            });
            let mut ahead_seen = Vec::new();
            for i in 0..n {
                let (now, later) = ring.next(i, n, |k| {
                    worked_out.push(k);
                    k * 10
                });
                assert_eq!(now, i * 10, "key {i} of {n}");
                if let Some(later) = later {
                    ahead_seen.push(later / 10);
                }
            }
            assert_eq!(worked_out, (0..n).collect::<Vec<_>>(), "each of {n} keys once, in order");
            assert_eq!(ahead_seen, (PREFETCH_AHEAD.min(n)..n).collect::<Vec<_>>(), "handed out ahead");
        }
    }
}
