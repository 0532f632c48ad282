//! # weir-key-slab — values by key, numbered
//!
//! The table in which Weir's Rust SDK holds keyed state inside a plugin
//! between calls ([`KeySlab`]), the hash it uses ([`hash`]), and how it
//! finds a key's window among the key's windows ([`position_by_start`]).
//!
//! It is a crate of its own, free of the SDK's bindings, so that its table
//! can be tested and measured natively on its own.

mod by_start;
pub mod hash;
mod slab;

pub use by_start::{SearchHint, position_by_start};
pub use slab::{KeySlab, ResolveError, SlotOutOfOrder};
