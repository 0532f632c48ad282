//! How typed keys and values become the bytes of an event.
//!
//! Events carry bytes. Numbers are written as decimal text and strings as
//! UTF-8, so that outputs are readable in a text sink and plugins written in
//! any language agree on the encoding; [`Json`] wraps any serde type. The
//! digits and the JSON are written, and numbers read, by `weir-codec`,
//! which the host's native operators share (so that `weir bench --native`
//! formats numbers as a plugin does).

use serde::{Serialize, de::DeserializeOwned};
use weir_codec::{extend_small, parse_f64, parse_u64, write_i64, write_u64};

pub(crate) use weir_codec::{write_json, write_state_json};

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
        write_i64(*self, out);
    }
}

/// So that a bare integer literal (Rust's `i32` when nothing else says)
/// encodes: `ctx.emit(key, 1)`, `TestEvent::new("a", 1)`.
impl Encode for i32 {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        write_i64(i64::from(*self), out);
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

impl Decode for f64 {
    #[inline]
    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        parse_f64(bytes).ok_or_else(|| not_a("a number", bytes))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(encoded(1), "1", "a bare literal");
        assert_eq!(encoded(i32::MIN), "-2147483648");
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
