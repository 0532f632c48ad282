//! Short appends as word copies.

use std::mem::MaybeUninit;

/// Appends `bytes` to `out`. Up to 32 bytes are copied as a few
/// fixed-size words, not with a `memcpy` — in a Wasm instance that is a
/// `memory.copy`, which wasmtime runs as a call into the host, dearer than
/// the copy of a key of a few bytes — nor with a `push` per byte, which
/// reloads the vector's length and pointer after every byte (a byte store
/// in linear memory may alias them). Always inlined: most callers append
/// a constant, whose length picks the copy when compiling.
#[inline(always)]
pub fn extend_small(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if n > 32 {
        out.extend_from_slice(bytes);
        return;
    }
    out.reserve(n);
    let len = out.len();
    copy_small(&mut out.spare_capacity_mut()[..n], bytes);
    // SAFETY: `copy_small` initialised the `n` bytes after `len`, within
    // the capacity just reserved.
    unsafe { out.set_len(len + n) };
}

/// Copies `src` (at most 32 bytes) to `dst`, as long: two copies of a fixed
/// width that overlap in the middle (the first and the last 16, 8, 4 or 2
/// bytes), as `le_word` reads.
#[inline(always)]
fn copy_small(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    let n = src.len();
    assert!(dst.len() == n && n <= 32, "copy_small copies up to 32 bytes between slices as long");
    match n {
        16..=32 => {
            copy_fixed::<16>(dst, src, 0);
            copy_fixed::<16>(dst, src, n - 16);
        }
        8..=15 => {
            copy_fixed::<8>(dst, src, 0);
            copy_fixed::<8>(dst, src, n - 8);
        }
        4..=7 => {
            copy_fixed::<4>(dst, src, 0);
            copy_fixed::<4>(dst, src, n - 4);
        }
        2..=3 => {
            copy_fixed::<2>(dst, src, 0);
            copy_fixed::<2>(dst, src, n - 2);
        }
        1 => {
            dst[0].write(src[0]);
        }
        _ => {}
    }
}

/// Copies the `W` bytes of `src` at `at` to `dst` at `at`: a copy of a
/// size known when compiling, which becomes loads and stores of words.
#[inline(always)]
fn copy_fixed<const W: usize>(dst: &mut [MaybeUninit<u8>], src: &[u8], at: usize) {
    let word: &[u8; W] = src[at..at + W].try_into().expect("W bytes");
    let target: &mut [MaybeUninit<u8>; W] = (&mut dst[at..at + W]).try_into().expect("W bytes");
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and both arrays
    // are `W` bytes long; `src` and `dst` are distinct borrows.
    unsafe { std::ptr::copy_nonoverlapping(word.as_ptr(), target.as_mut_ptr().cast::<u8>(), W) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to past the word copies' limit, onto a buffer with
    /// and without room.
    #[test]
    fn extend_small_appends_exactly_the_bytes() {
        let source: Vec<u8> = (1..=40).collect();
        for n in 0..=source.len() {
            for prefix in [0, 3, 64] {
                let mut out = Vec::with_capacity(prefix);
                out.extend((0..prefix).map(|i| 200 + i as u8 % 50));
                let before = out.clone();
                extend_small(&mut out, &source[..n]);
                assert_eq!(out.len(), prefix + n);
                assert_eq!(&out[..prefix], &before[..]);
                assert_eq!(&out[prefix..], &source[..n], "{n} bytes after {prefix}");
            }
        }
    }
}
