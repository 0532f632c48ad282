//! Drives an [`Operator`] over batches: the code shared by the Wasm export
//! and the native test harness.

use crate::context::Context;
use crate::event::{BatchView, Outputs};
use crate::state::{StateHost, StateStore};
use crate::{Error, Operator};

/// One operator instance with its state caches and output buffers.
pub(crate) struct Runtime<T> {
    operator: T,
    states: StateStore,
    pub outputs: Outputs,
}

impl<T: Operator> Runtime<T> {
    pub fn new(operator: T, host: Box<dyn StateHost>) -> Self {
        Runtime { operator, states: StateStore::new(host), outputs: Outputs::default() }
    }

    /// Runs the operator over every event of `batch`, then writes state back.
    /// On error nothing is written back: the host discards the failed call.
    pub fn process(&mut self, batch: &BatchView<'_>) -> Result<(), Error> {
        self.states.begin_batch();
        let keyed = batch.is_keyed();
        for i in 0..batch.len() {
            let event = batch.event(i)?;
            let mut ctx = Context {
                slot: if keyed { Some(batch.key_slots[i]) } else { None },
                timestamp: event.timestamp,
                states: &mut self.states,
                outputs: &mut self.outputs,
            };
            self.operator.process(&mut ctx, &event)?;
        }
        self.states.flush()
    }
}
