//! # weir-sdk — write Weir stream operators in Rust
//!
//! A Weir operator is a WebAssembly component that the Weir host feeds with
//! batches of events. This crate hides the component plumbing: implement
//! [`Operator`], call [`export_operator!`] once, and build with
//! `cargo build --release --target wasm32-wasip2`.
//!
//! ```ignore
//! use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};
//!
//! struct WordCount { count: ValueState<u64> }
//!
//! impl Operator for WordCount {
//!     fn init(_config: &Config) -> Result<Self, Error> {
//!         Ok(WordCount { count: ValueState::new("count") })
//!     }
//!     fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
//!         let n = self.count.get(ctx)?.unwrap_or(0) + 1;
//!         self.count.set(ctx, &n)?;
//!         ctx.emit(event.key(), n);
//!         Ok(())
//!     }
//! }
//!
//! weir_sdk::export_operator!(WordCount);
//! ```
//!
//! ## How it maps to the host
//!
//! The host calls the plugin once per *batch*; the SDK calls
//! [`Operator::process`] once per event of it. Keyed state is read from the
//! host for all new keys of a batch on first use (one call per state) and
//! then kept in the instance's memory from batch to batch; what changed is
//! written back when the host calls `flush` — before every checkpoint or
//! savepoint — or when the state held grows past the instance's bound
//! (least recently used first, unless keys cycle through more than it
//! holds). So state access costs no boundary crossing
//! per event, and every change is in the host's state before a snapshot.
//! A state with a time-to-live ([`Ttl`], `with_ttl`) is the exception: the
//! host judges expiry, so its values are read and written once a call.
//! Emitted events are collected in flat buffers and returned in one piece.
//!
//! [`testing::TestHarness`] runs the same code natively, without Wasm, for
//! unit tests of operator logic.

mod broadcast;
mod codec;
mod context;
pub mod embed;
mod error;
mod event;
mod export;
mod forgotten_keys;
mod list_state;
mod map_state;
mod operator;
mod runtime;
mod schema;
mod state;
pub mod testing;
mod timer;
mod ttl;
mod value_store;
mod window_results;
mod window_store;
pub mod windows;

pub use broadcast::BroadcastState;
pub use codec::{Decode, Encode, Json};
pub use context::{Batch, Context, TimerBatch};
pub use error::Error;
pub use event::Event;
pub use list_state::ListState;
pub use map_state::{MapEntry, MapState};
pub use operator::{Config, Operator, TaskInfo};
pub use state::ValueState;
pub use timer::{TimeDomain, Timer};
pub use ttl::Ttl;

/// Implementation details used by [`export_operator!`]; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::Adapter;

    #[allow(missing_docs, clippy::all)]
    pub mod bindings {
        wit_bindgen::generate!({
            world: "plugin",
            path: "../wit",
            pub_export_macro: true,
            export_macro_name: "export_plugin",
            default_bindings_module: "weir_sdk::__private::bindings",
        });
    }
}

/// Exports `$operator` (a type implementing [`Operator`]) as the plugin's
/// operator. Call it once, at the top level of the plugin crate.
///
/// The exports exist only in Wasm builds: a native build of the plugin crate
/// (for its unit tests) links without them.
#[macro_export]
macro_rules! export_operator {
    ($operator:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type __WeirExportedOperator = $crate::__private::Adapter<$operator>;
            $crate::__private::bindings::export_plugin!(__WeirExportedOperator);
        };
    };
}
