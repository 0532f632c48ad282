//! # weir-key-slab — values by key, numbered
//!
//! The table in which Weir's Rust SDK holds keyed state inside a plugin
//! between calls ([`KeySlab`]), and the hash it uses ([`hash`]).
//!
//! It is a crate of its own so that the host's native operators
//! (`weir bench --native`, the baseline for the cost of Wasm) hold their
//! state in the same table as the plugins they are measured against: the
//! two then differ by the Wasm boundary only, not by their data structures.

pub mod hash;
mod slab;

pub use slab::KeySlab;
