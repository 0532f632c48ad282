//! # weir-key-slab — values by key, numbered
//!
//! The table in which Weir's Rust SDK holds keyed state inside a plugin
//! between calls ([`KeySlab`]), the hash it uses ([`hash`]), and how it
//! finds a key's window among the key's windows ([`position_by_start`]).
//!
//! It is a crate of its own so that the host's native operators
//! (`weir bench --native`, the baseline for the cost of Wasm) hold their
//! state in the same table, and search it the same way, as the plugins they
//! are measured against: the two then differ by the Wasm boundary only, not
//! by their data structures.

mod by_start;
pub mod hash;
mod slab;

pub use by_start::{SearchHint, position_by_start};
pub use slab::{KeySlab, ResolveError, SlotOutOfOrder};
