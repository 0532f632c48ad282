//! The bytes of events: numbers as decimal text, values as JSON.
//!
//! Events carry bytes, and Weir's operators write numbers as decimal text
//! so that outputs are readable in a text sink and plugins in any language
//! agree. Turning numbers into text and back is a good part of a simple
//! operator's work, so it is done here without `fmt` or the general float
//! parser where the common case allows: digits made eight at a time in a
//! register ([`write_u64`]), integers read a word at a time
//! ([`parse_f64`]), small appends as word copies ([`extend_small`]) —
//! each of which matters most in a Wasm instance, where a `memcpy` is a call
//! into the runtime.
//!
//! The Rust SDK encodes and decodes events with it, and the host its
//! generator's numbers.

mod copy;
mod digits;
mod finite;
mod json;
mod parse;

pub use copy::extend_small;
pub use digits::{Digits, decimal_digits, write_i64, write_u64};
pub use finite::write_state_json;
pub use json::{write_json, write_window_result};
pub use parse::{parse_f64, parse_u64};
