//! Integers as decimal digits, without `fmt`.

use crate::extend_small;

/// Writes `n` in decimal without going through `fmt` (this is on the hot path
/// of every counting operator).
///
/// Counts are mostly small: up to four digits are made in a register and
/// stored at once, inlined into the caller. Digits written byte by byte to
/// the stack and read back as wider words stall the load (a store-to-load
/// forward needs the load inside one store), which cost more than the
/// digits; and the stack of a Wasm instance is in its memory, behind a
/// pointer the function must move.
#[inline(always)]
pub fn write_u64(n: u64, out: &mut Vec<u8>) {
    if n < 10_000 {
        let (word, len) = small_decimal(n as u32);
        out.reserve(4);
        let at = out.len();
        // SAFETY: four bytes of spare capacity were just reserved; `len`
        // of them, at most four, are the digits.
        unsafe {
            out.as_mut_ptr().add(at).cast::<[u8; 4]>().write_unaligned(word.to_le_bytes());
            out.set_len(at + len);
        }
        return;
    }
    write_large_u64(n, out);
}

/// [`write_u64`] for 10 000 and above.
#[inline(never)]
fn write_large_u64(n: u64, out: &mut Vec<u8>) {
    let mut digits: Digits = [0; 24];
    let start = decimal_digits(n, &mut digits);
    extend_small(out, &digits[start..]);
}

/// The decimal digits of `n` (below 10 000) as a little-endian word, the
/// first digit in its lowest byte, and how many there are.
#[inline(always)]
fn small_decimal(n: u32) -> (u32, usize) {
    let pair = |p: u32| u32::from(u16::from_le_bytes([DIGIT_PAIRS[2 * p as usize], DIGIT_PAIRS[2 * p as usize + 1]]));
    match n {
        0..=9 => (u32::from(b'0') + n, 1),
        10..=99 => (pair(n), 2),
        100..=999 => (u32::from(b'0') + n / 100 | pair(n % 100) << 8, 3),
        _ => (pair(n / 100) | pair(n % 100) << 16, 4),
    }
}

/// "00" to "99": two digits per division.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Room for a `u64`'s digits (20), as [`decimal_digits`] writes them:
/// eight at a time.
pub type Digits = [u8; 24];

/// Writes `n`'s digits at the end of `digits`; returns where they start.
///
/// Eight digits at a time, each eight made in a register and stored at
/// once ([`digits_word`]); the leading zeros of the first eight are then
/// skipped. Wasm has no 64-bit multiply-high, so dividing a `u64` by a
/// constant calls `__multi3`: only past `u32::MAX` are eight digits split
/// off with such a division, and the rest is done in `u32`.
#[inline]
pub fn decimal_digits(mut n: u64, digits: &mut Digits) -> usize {
    let mut end = digits.len();
    while n > u64::from(u32::MAX) {
        end -= 8;
        put_eight(digits, end, (n % 100_000_000) as u32);
        n /= 100_000_000;
    }
    let n = n as u32;
    let (high, low) = (n / 100_000_000, n % 100_000_000);
    end -= 8;
    let mut first = put_eight(digits, end, low);
    if high > 0 {
        end -= 8;
        first = put_eight(digits, end, high);
    }
    // The first eight's zero digits before the first other one, but the
    // last digit stays (`n` = 0 is "0").
    let zeros = (first ^ ZERO_DIGITS).trailing_zeros() as usize / 8;
    end + zeros.min(7)
}

/// Eight '0' digits as a word.
pub(crate) const ZERO_DIGITS: u64 = u64::from_le_bytes(*b"00000000");

/// Writes the eight digits of `n` (below 10^8, zero-padded) at `at`;
/// returns them as the word [`digits_word`] makes.
#[inline(always)]
fn put_eight(digits: &mut Digits, at: usize, n: u32) -> u64 {
    let word = digits_word(n);
    digits[at..at + 8].copy_from_slice(&word.to_le_bytes());
    word
}

/// The eight decimal digits of `n` (below 10^8, zero-padded) as a
/// little-endian word, the first digit in its lowest byte.
///
/// Without a table (as in Lemire's "fixed-digit" conversion): the two
/// halves of four digits side by side in a word, split into lanes of two
/// digits and then of one by multiplications that divide every lane at
/// once — exact below 10 000 (by 100: × 10 486 >> 20) and below 100 (by
/// 10: × 103 >> 10) — then offset to ASCII.
#[inline(always)]
fn digits_word(n: u32) -> u64 {
    const LANES_OF_4: u64 = 0x7F | 0x7F << 32;
    const LANES_OF_2: u64 = 0xF | 0xF << 16 | 0xF << 32 | 0xF << 48;
    let halves = u64::from(n / 10_000) | u64::from(n % 10_000) << 32;
    let hundreds = (halves.wrapping_mul(10_486) >> 20) & LANES_OF_4;
    let pairs = (halves - 100 * hundreds) << 16 | hundreds;
    let tens = (pairs.wrapping_mul(103) >> 10) & LANES_OF_2;
    let digits = (pairs - 10 * tens) << 8 | tens;
    digits + ZERO_DIGITS
}
/// Writes `n` in decimal: a `-` before a negative one's digits.
#[inline(always)]
pub fn write_i64(n: i64, out: &mut Vec<u8>) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(n.unsigned_abs(), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(n: u64) -> String {
        let mut out = Vec::new();
        write_u64(n, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn written_signed(n: i64) -> String {
        let mut out = Vec::new();
        write_i64(n, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// Digits appended after what the buffer holds, at every change in
    /// their number and around the 32-bit split.
    #[test]
    fn integers_are_appended_as_fmt_writes_them() {
        // Every number made in a register, then the boundaries above.
        let mut numbers: Vec<u64> = (0..10_001).collect();
        numbers.extend([u64::from(u32::MAX), u64::from(u32::MAX) + 1, u64::MAX]);
        // Across the 32-bit range: every count of leading zeros in a word
        // of eight digits, with and without digits above it.
        numbers.extend((0..5_000_000_000u64).step_by(499_979));
        for power in 0..20 {
            let ten = 10u64.pow(power);
            numbers.extend([ten - 1, ten, ten + 1, ten.saturating_mul(7).saturating_add(3)]);
        }
        for n in numbers {
            let mut out = b"prefix:".to_vec();
            write_u64(n, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), format!("prefix:{n}"));
        }
    }

    /// The lanes are divided independently: every value of each half,
    /// beside a few of the other.
    #[test]
    fn eight_digits_are_made_exactly() {
        for half in 0..10_000u32 {
            for other in [0, 1, 99, 100, 5_050, 9_999] {
                for n in [half * 10_000 + other, other * 10_000 + half] {
                    assert_eq!(digits_word(n).to_le_bytes(), *format!("{n:08}").as_bytes(), "{n}");
                }
            }
        }
    }

    /// Random numbers of every magnitude, and their negatives.
    #[test]
    fn integers_are_written_as_the_standard_formatter_writes_them() {
        let mut samples: Vec<u64> = (0..=1000).collect();
        samples.extend([99_999_999, 100_000_000, 4_294_967_295, 4_294_967_296]);
        samples.extend([10_000_000_000_000_000, 18_446_744_073_709_551_615, 12_345_678_900_000_000]);
        let mut n: u64 = 1;
        for _ in 0..2000 {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            samples.push(n >> (n % 64));
        }
        for n in samples {
            assert_eq!(written(n), n.to_string());
            if let Ok(signed) = i64::try_from(n) {
                assert_eq!(written_signed(-signed), (-signed).to_string());
            }
        }
        assert_eq!(written_signed(i64::MIN), i64::MIN.to_string());
    }
}
