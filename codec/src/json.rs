//! Values written as JSON, as serde_json writes them, faster.

use serde::Serialize;

use crate::digits::{Digits, decimal_digits, write_i64};
use crate::extend_small;

/// Appends `value` as JSON to `out`, byte for byte as
/// `serde_json::to_writer` does, faster in a Wasm instance: serde_json
/// writes a value in many small pieces (punctuation, each number's digits),
/// each a `memory.copy` there, which [`SmallWrites`] turns into
/// [`extend_small`]; and a float with an integral value — a sum of whole
/// numbers, a count held as a float — is written as an integer, not by the
/// general shortest-digits algorithm ([`WholeFloats`]).
pub fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(SmallWrites(out), WholeFloats))
}

/// Appends a window's result `[start, end)` with `value` as the JSON
/// object `{"start":…,"end":…,"value":…}`, byte for byte as serde_json
/// writes a struct of those fields — without serde's per-field machinery
/// (a call per field and an escaping pass over each field's name), which
/// cost more than the numbers themselves: a window operator emits one
/// result per key and window. Only the value goes through serde. The
/// SDK's `WindowResult` writes it here.
pub fn write_window_result<T: Serialize + ?Sized>(out: &mut Vec<u8>, start: i64, end: i64, value: &T) -> serde_json::Result<()> {
    extend_small(out, b"{\"start\":");
    write_i64(start, out);
    extend_small(out, b",\"end\":");
    write_i64(end, out);
    extend_small(out, b",\"value\":");
    write_json(out, value)?;
    out.push(b'}');
    Ok(())
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

    /// A window's result is the object serde_json writes for a struct of
    /// its three fields, after what the buffer holds.
    #[test]
    fn window_results_are_written_as_serde_json_writes_the_struct() {
        #[derive(Serialize)]
        struct Result<T> {
            start: i64,
            end: i64,
            value: T,
        }
        for (start, end, value) in [(0, 1_000, 0.0), (-2_000, -1_000, -3.5), (i64::MIN, i64::MAX, 123456789.0), (1_700_000_000_000, 1_700_000_001_000, 0.1)] {
            let mut ours = b"prefix".to_vec();
            write_window_result(&mut ours, start, end, &value).unwrap();
            let expected = serde_json::to_string(&Result { start, end, value }).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), format!("prefix{expected}"));
        }
        let mut ours = Vec::new();
        write_window_result(&mut ours, 1, 2, &vec![3, 4]).unwrap();
        assert_eq!(ours, br#"{"start":1,"end":2,"value":[3,4]}"#);
    }
}
