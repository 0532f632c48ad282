//! Decimal digits counted up in place: the generator writes two numbers per
//! event, consecutive ones mostly, so this is on the benchmarks' hot path.

/// The most digits of a `u64`.
const MAX_DIGITS: usize = 20;

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
        weir_codec::write_u64(value, &mut written);
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
    /// their length: a copy of a length known only at run time would be a
    /// `memmove` call, for a few bytes.
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
}
