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
