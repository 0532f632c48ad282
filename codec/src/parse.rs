//! Numbers read from decimal text.

use weir_key_slab::hash::le_word;

use crate::digits::ZERO_DIGITS;

/// The number `bytes` spell (decimal text, as Rust's `f64` parser reads
/// it, with surrounding whitespace allowed), or `None`.
///
/// Integers of up to 15 digits, the common case of a numeric value, are
/// read a word at a time ([`small_integer`]), without UTF-8 validation or
/// the general float parser (which gives the same value).
#[inline]
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    if let Some(integer) = small_integer(bytes) {
        return Some(integer);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    // Surrounding whitespace is rare: only then is the text trimmed.
    text.parse().or_else(|_| text.trim().parse()).ok()
}

/// Decimal digits with an optional `-`, short enough (15 digits) to be
/// exact in an `f64`.
#[inline]
fn small_integer(bytes: &[u8]) -> Option<f64> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    let value = match digits.len() {
        1..=8 => eight_digits(digits)?,
        9..=15 => {
            let (high, low) = digits.split_at(digits.len() - 8);
            eight_digits(high)? * 100_000_000 + eight_digits(low)?
        }
        _ => return None,
    } as f64;
    Some(if negative { -value } else { value })
}

/// The value of 1 to 8 decimal digits, or `None` if a byte is not a digit.
///
/// All eight at once in one word ("SWAR", as simdjson parses them): padded
/// in front with `'0'`s, checked with two masks, and combined pairwise by
/// three multiplications instead of eight multiply-adds.
#[inline]
fn eight_digits(digits: &[u8]) -> Option<u64> {
    debug_assert!((1..=8).contains(&digits.len()));
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    let pad = 8 * (8 - digits.len() as u32);
    // The first digit is in the lowest byte: shift the digits up and fill
    // the bytes below with '0'.
    let word = le_word(digits) << pad | ZERO_DIGITS.checked_shr(64 - pad).unwrap_or(0);
    // A digit's byte is 0x30..=0x39: high nibble 3, and still 3 after adding 6.
    let all_digits = (word & HIGH_NIBBLES) | ((word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES) >> 4) == 0x3333_3333_3333_3333;
    if !all_digits {
        return None;
    }
    let pairs = ((word & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(10 << 8 | 1)) >> 8;
    let quads = ((pairs & 0x00FF_00FF_00FF_00FF).wrapping_mul(100 << 16 | 1)) >> 16;
    Some(((quads & 0x0000_FFFF_0000_FFFF).wrapping_mul(10_000 << 32 | 1)) >> 32)
}

/// The unsigned integer `bytes` spell in decimal (no sign, no spaces), or
/// `None` if they do not or it does not fit.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer shortcut reads exactly what the float parser reads.
    #[test]
    fn floats_decode_as_the_standard_parser_reads_them() {
        let texts = ["0", "-0", "7", "-42", "4999999", "999999999999999", "9999999999999999", "12345678901234567890", "1.5", "-2.5e3", " 3 ", "1e400"];
        for text in texts {
            let expected: f64 = text.trim().parse().unwrap();
            let decoded = parse_f64(text.as_bytes()).unwrap();
            assert_eq!(decoded.to_bits(), expected.to_bits(), "{text:?}");
        }
        for bad in ["", "-", "1-2", "x", "--1"] {
            assert_eq!(parse_f64(bad.as_bytes()), None, "{bad:?}");
        }
    }

    /// The word-at-a-time digit parser agrees with the standard parser on
    /// every length, and refuses bytes next to the digits in ASCII (`/`
    /// and `:`) and beyond, in any position.
    #[test]
    fn integers_of_every_length_decode_exactly() {
        let mut n: u64 = 0;
        for length in 1..=15 {
            for seed in 0..200u64 {
                n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407 + seed);
                let digits: String = (0..length).map(|i| char::from(b'0' + ((n >> (i * 4 % 60)) % 10) as u8)).collect();
                for text in [digits.clone(), format!("-{digits}")] {
                    let expected: f64 = text.parse().unwrap();
                    assert_eq!(small_integer(text.as_bytes()).map(f64::to_bits), Some(expected.to_bits()), "{text:?}");
                }
                for position in 0..length {
                    for bad in [b'/', b':', b' ', b'.', 0xB0, 0x3A + 0x40] {
                        let mut text = digits.clone().into_bytes();
                        text[position] = bad;
                        assert_eq!(small_integer(&text), None, "{:?}", String::from_utf8_lossy(&text));
                    }
                }
            }
        }
    }
}
