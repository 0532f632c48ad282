//! How typed keys and values become the bytes of an event.
//!
//! Events carry bytes. Numbers are written as decimal text and strings as
//! UTF-8, so that outputs are readable in a text sink and plugins written in
//! any language agree on the encoding; [`Json`] wraps any serde type.

use std::mem::MaybeUninit;

use serde::{Serialize, de::DeserializeOwned};
use weir_key_slab::hash::le_word;

use crate::Error;

/// A type that can be written as the key or value of an emitted event.
pub trait Encode {
    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);
}

/// A type that can be read from the key or value of an event.
pub trait Decode: Sized {
    /// Decodes `bytes`, or says what was expected.
    fn decode(bytes: &[u8]) -> Result<Self, Error>;
}

/// Encodes and decodes any serde type as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

impl<T: Encode + ?Sized> Encode for &T {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        (**self).encode(out)
    }
}

impl Encode for [u8] {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        extend_small(out, self);
    }
}

impl Encode for Vec<u8> {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        extend_small(out, self);
    }
}

impl Encode for str {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        extend_small(out, self.as_bytes());
    }
}

impl Encode for String {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        extend_small(out, self.as_bytes());
    }
}

impl Encode for u64 {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        write_u64(*self, out);
    }
}

impl Encode for u32 {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        write_u64(u64::from(*self), out);
    }
}

impl Encode for i64 {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        if *self < 0 {
            out.push(b'-');
        }
        write_u64(self.unsigned_abs(), out);
    }
}

impl Encode for f64 {
    fn encode(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = write!(out, "{self}");
    }
}

impl<T: Serialize> Encode for Json<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        // Serialising plain data into a Vec cannot fail.
        let _ = write_json(out, &self.0);
    }
}

/// Appends `value` as JSON to `out`, byte for byte as
/// `serde_json::to_writer` does, faster in a Wasm instance: serde_json
/// writes a value in many small pieces (punctuation, each number's digits),
/// each a `memory.copy` there, which [`SmallWrites`] turns into
/// [`extend_small`]; and a float with an integral value — a sum of whole
/// numbers, a count held as a float — is written as an integer, not by the
/// general shortest-digits algorithm ([`WholeFloats`]).
pub(crate) fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(SmallWrites(out), WholeFloats))
}

/// A vector written to with [`extend_small`].
struct SmallWrites<'a>(&'a mut Vec<u8>);

impl std::io::Write for SmallWrites<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes)?;
        Ok(bytes.len())
    }

    /// Every write appends whole; serde_json's calls come here directly,
    /// without the default method's retry loop.
    #[inline]
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        extend_small(self.0, bytes);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// serde_json's compact format, with a float whose value is a whole
/// number below 10^15 written as that integer and `.0` — what serde_json
/// writes for it too (its shortest round-trip digits are the integer's
/// own up to 10^16, where it turns to an exponent).
struct WholeFloats;

/// Floats with whole values below this take the fast path.
const WHOLE_FLOAT_LIMIT: f64 = 1e15;

impl serde_json::ser::Formatter for WholeFloats {
    #[inline]
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: f64) -> std::io::Result<()> {
        let magnitude = value.abs();
        if magnitude >= WHOLE_FLOAT_LIMIT || magnitude.fract() != 0.0 {
            return serde_json::ser::CompactFormatter.write_f64(writer, value);
        }
        // "-0.0" for negative zero, as serde_json writes it.
        let mut digits: Digits = [0; 24];
        let start = decimal_digits(magnitude as u64, &mut digits);
        if value.is_sign_negative() {
            writer.write_all(b"-")?;
        }
        writer.write_all(&digits[start..])?;
        writer.write_all(b".0")
    }
}

impl Decode for Vec<u8> {
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        Ok(bytes.to_vec())
    }
}

impl Decode for String {
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::input("expected UTF-8 text"))
    }
}

impl Decode for u64 {
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        parse_u64(bytes).ok_or_else(|| not_a("an unsigned integer", bytes))
    }
}

impl Decode for i64 {
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        match bytes.split_first() {
            Some((b'-', digits)) => parse_u64(digits)
                .and_then(|n| 0i64.checked_sub_unsigned(n))
                .ok_or_else(|| not_a("an integer", bytes)),
            _ => parse_u64(bytes)
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| not_a("an integer", bytes)),
        }
    }
}

/// Decimal digits with an optional `-`, short enough (15 digits) to be
/// exact in an `f64`: the common case of a numeric value, read without
/// UTF-8 validation or the general float parser (which gives the same value).
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

impl Decode for f64 {
    #[inline]
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        if let Some(integer) = small_integer(bytes) {
            return Ok(integer);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| not_a("a number", bytes))?;
        // Surrounding whitespace is rare: only then is the text trimmed.
        text.parse().or_else(|_| text.trim().parse()).map_err(|_| not_a("a number", bytes))
    }
}

impl<T: DeserializeOwned> Decode for Json<T> {
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        serde_json::from_slice(bytes)
            .map(Json)
            .map_err(|e| Error::input(format!("expected JSON: {e}")))
    }
}

fn not_a(what: &str, bytes: &[u8]) -> Error {
    Error::input(format!("expected {what}, got {:?}", String::from_utf8_lossy(bytes)))
}

/// Appends `bytes` to `out`. Up to 32 bytes are copied as a few
/// fixed-size words, not with a `memcpy` — in a Wasm instance that is a
/// `memory.copy`, which wasmtime runs as a call into the host, dearer than
/// the copy of a key of a few bytes — nor with a `push` per byte, which
/// reloads the vector's length and pointer after every byte (a byte store
/// in linear memory may alias them). Always inlined: most callers append
/// a constant, whose length picks the copy when compiling.
#[inline(always)]
pub(crate) fn extend_small(out: &mut Vec<u8>, bytes: &[u8]) {
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
fn write_u64(n: u64, out: &mut Vec<u8>) {
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
pub(crate) type Digits = [u8; 24];

/// Writes `n`'s digits at the end of `digits`; returns where they start.
///
/// Eight digits at a time, each eight made in a register and stored at
/// once ([`digits_word`]); the leading zeros of the first eight are then
/// skipped. Wasm has no 64-bit multiply-high, so dividing a `u64` by a
/// constant calls `__multi3`: only past `u32::MAX` are eight digits split
/// off with such a division, and the rest is done in `u32`.
#[inline]
fn decimal_digits(mut n: u64, digits: &mut Digits) -> usize {
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
const ZERO_DIGITS: u64 = u64::from_le_bytes(*b"00000000");

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

fn parse_u64(bytes: &[u8]) -> Option<u64> {
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

    /// `write_json` writes what serde_json writes: whole floats on both
    /// sides of the fast path's limit, fractions, negative zero, floats in
    /// containers, and strings that need escaping.
    #[test]
    fn write_json_writes_what_serde_json_writes() {
        let mut floats = vec![0.0, -0.0, 1.0, -1.0, 0.5, -2.25, 1e-7, 123456789.0, 2.5e15, 1e16, 1e21, f64::MAX, f64::MIN_POSITIVE];
        for power in 0..=17 {
            let p = 10f64.powi(power);
            floats.extend([p, p - 1.0, p + 1.0, -p, p / 3.0]);
        }
        floats.extend((0..2_000).map(|i| (i as f64) * 7_919.0 * 104_729.0));
        floats.extend([f64::NAN, f64::INFINITY]);
        for value in floats {
            let mut ours = Vec::new();
            write_json(&mut ours, &value).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&value).unwrap(), "{value:e}");
        }
        let nested = (1_700_000_000_000i64, vec![3.0, 0.1], true, "a \"quoted\" \\ line\n", Some(-7.0f64));
        let mut ours = b"prefix".to_vec();
        write_json(&mut ours, &nested).unwrap();
        assert_eq!(String::from_utf8(ours).unwrap(), format!("prefix{}", serde_json::to_string(&nested).unwrap()));
    }

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

    fn encoded(value: impl Encode) -> String {
        let mut out = Vec::new();
        value.encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_are_decimal_text() {
        assert_eq!(encoded(0u64), "0");
        assert_eq!(encoded(u64::MAX), "18446744073709551615");
        assert_eq!(encoded(-42i64), "-42");
        assert_eq!(encoded(i64::MIN), "-9223372036854775808");
        assert_eq!(encoded(1.5f64), "1.5");
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
            n.encode(&mut out);
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

    #[test]
    fn numbers_round_trip() {
        for n in [0u64, 7, 10, 99, 12345678901234, u64::MAX] {
            assert_eq!(u64::decode(encoded(n).as_bytes()), Ok(n));
        }
        for n in [0i64, -1, i64::MIN, i64::MAX] {
            assert_eq!(i64::decode(encoded(n).as_bytes()), Ok(n));
        }
    }

    /// The integer shortcut reads exactly what the float parser reads.
    #[test]
    fn floats_decode_as_the_standard_parser_reads_them() {
        let texts = ["0", "-0", "7", "-42", "4999999", "999999999999999", "9999999999999999", "12345678901234567890", "1.5", "-2.5e3", " 3 ", "1e400"];
        for text in texts {
            let expected: f64 = text.trim().parse().unwrap();
            let decoded = f64::decode(text.as_bytes()).unwrap();
            assert_eq!(decoded.to_bits(), expected.to_bits(), "{text:?}");
        }
        for bad in ["", "-", "1-2", "x", "--1"] {
            assert!(f64::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn integers_encode_as_the_standard_formatter_writes_them() {
        let mut samples: Vec<u64> = (0..=1000).collect();
        samples.extend([99_999_999, 100_000_000, 4_294_967_295, 4_294_967_296]);
        samples.extend([10_000_000_000_000_000, 18_446_744_073_709_551_615, 12_345_678_900_000_000]);
        let mut n: u64 = 1;
        for _ in 0..2000 {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            samples.push(n >> (n % 64));
        }
        for n in samples {
            assert_eq!(encoded(n), n.to_string());
            if let Ok(signed) = i64::try_from(n) {
                assert_eq!(encoded(-signed), (-signed).to_string());
            }
        }
        assert_eq!(encoded(i64::MIN), i64::MIN.to_string());
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

    #[test]
    fn bad_numbers_say_what_was_expected() {
        let err = u64::decode(b"12a").unwrap_err();
        assert_eq!(err, Error::input("expected an unsigned integer, got \"12a\""));
        assert!(u64::decode(b"").is_err());
        assert!(u64::decode(b"18446744073709551616").is_err());
        assert!(i64::decode(b"-9223372036854775809").is_err());
    }

    #[test]
    fn json_wraps_serde_types() {
        let value = Json(vec![1, 2, 3]);
        assert_eq!(encoded(&value), "[1,2,3]");
        assert_eq!(Json::<Vec<u32>>::decode(b"[1,2,3]"), Ok(value));
        assert!(Json::<Vec<u32>>::decode(b"{").is_err());
    }
}
