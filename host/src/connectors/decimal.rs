//! Decimal digits written straight into a buffer: the generator formats two
//! numbers per event, so this is on the benchmarks' hot path.

/// "00", "01", … "99": two digits per division by 100.
const DIGIT_PAIRS: [u8; 200] = digit_pairs();

const fn digit_pairs() -> [u8; 200] {
    let mut pairs = [0; 200];
    let mut n = 0;
    while n < 100 {
        pairs[2 * n] = b'0' + (n / 10) as u8;
        pairs[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    pairs
}

/// The most digits of a `u64`.
const MAX_DIGITS: usize = 20;

/// Appends `n` in decimal.
///
/// The digits are written in place, from the last: the buffer grows by a
/// fixed [`MAX_DIGITS`] bytes and is cut back to the number's length. A
/// formatter's own buffer copied over would cost a `memmove` call of a
/// length known only at run time, for a few bytes.
pub fn write_decimal(mut n: u64, out: &mut Vec<u8>) {
    let len = n.checked_ilog10().map_or(1, |log| log as usize + 1);
    let start = out.len();
    out.extend_from_slice(&[b'0'; MAX_DIGITS]);
    out.truncate(start + len);
    let digits = &mut out[start..];
    let mut end = len;
    while n >= 100 {
        let pair = 2 * (n % 100) as usize;
        n /= 100;
        digits[end - 2..end].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        end -= 2;
    }
    if n >= 10 {
        let pair = 2 * n as usize;
        digits[end - 2..end].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        digits[end - 1] = b'0' + n as u8;
    }
}

/// A number held as its decimal digits and counted up in place: writing a
/// run of consecutive numbers takes no division, and incrementing mostly
/// touches the last digit.
#[derive(Debug, Clone, Copy)]
pub struct DecimalCounter {
    /// The digits, left-aligned; zeros after them.
    digits: [u8; MAX_DIGITS],
    len: usize,
    value: u64,
}

impl DecimalCounter {
    pub fn new(value: u64) -> Self {
        let mut written = Vec::with_capacity(MAX_DIGITS);
        write_decimal(value, &mut written);
        let mut digits = [b'0'; MAX_DIGITS];
        digits[..written.len()].copy_from_slice(&written);
        DecimalCounter { digits, len: written.len(), value }
    }

    pub fn value(&self) -> u64 {
        self.value
    }

    /// Adds one.
    #[inline]
    pub fn increment(&mut self) {
        self.value += 1;
        for digit in self.digits[..self.len].iter_mut().rev() {
            if *digit != b'9' {
                *digit += 1;
                return;
            }
            *digit = b'0';
        }
        // Every digit was a nine: one digit more, a one followed by zeros
        // (the array holds zeros past the digits).
        self.digits[0] = b'1';
        self.len += 1;
    }

    /// Appends the digits to `out`, as one fixed-size copy cut back to
    /// their length (see [`write_decimal`]).
    #[inline]
    pub fn write(&self, out: &mut Vec<u8>) {
        let end = out.len() + self.len;
        out.extend_from_slice(&self.digits);
        out.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decimal(n: u64) -> String {
        let mut out = b"x".to_vec();
        write_decimal(n, &mut out);
        String::from_utf8(out[1..].to_vec()).unwrap()
    }

    #[test]
    fn writes_what_the_standard_formatter_writes() {
        let powers = (0..20).map(|e| 10u64.pow(e));
        let edges = powers.flat_map(|p| [p - 1, p, p + 1]);
        let mut random = 0x9e37_79b9_7f4a_7c15u64;
        let randoms = std::iter::repeat_with(move || {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random >> (random % 64)
        });
        for n in (0..=1000).chain(edges).chain([u64::MAX, u64::MAX - 1]).chain(randoms.take(5000)) {
            assert_eq!(decimal(n), n.to_string());
        }
    }

    #[test]
    fn a_counter_writes_each_number_it_counts_through() {
        let starts = [0, 8, 95, 998, 99_995, 123_456_789, 10u64.pow(19) - 3, u64::MAX - 3];
        for start in starts {
            let mut counter = DecimalCounter::new(start);
            for n in start..start + 3 {
                let mut out = b"x".to_vec();
                counter.write(&mut out);
                assert_eq!(out, format!("x{n}").as_bytes());
                assert_eq!(counter.value(), n);
                counter.increment();
            }
        }
    }

    #[test]
    fn appends_after_what_the_buffer_holds() {
        let mut out = b"key=".to_vec();
        write_decimal(42, &mut out);
        write_decimal(7, &mut out);
        assert_eq!(out, b"key=427");
    }
}
