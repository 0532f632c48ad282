//! What an operator subtask runs: a sandboxed Wasm instance, or — as the
//! benchmark baseline for the cost of Wasm — the same logic compiled into
//! the host ([`super::native`]).

use super::RecordBatch;
use crate::plugin::{CallError, CapturedState, EmbeddedInstance, InputKind, OperatorInstance};
use crate::state::StateSizeGauge;

/// Emitted batches, grouped by output name ("" for the main output).
pub type Emitted = Vec<(String, RecordBatch)>;

/// One operator subtask's logic.
pub trait OperatorLogic: Send {
    fn process(&mut self, input: u32, batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError>;

    /// Moves the event-time watermark forward, firing the timers it passes.
    fn advance_watermark(&mut self, _watermark: i64) -> Result<Emitted, CallError> {
        Ok(Vec::new())
    }

    /// Fires the processing-time timers due at `now` (ms since the epoch).
    fn fire_processing_timers(&mut self, _now: i64) -> Result<Emitted, CallError> {
        Ok(Vec::new())
    }

    /// When the next processing-time timer is due.
    fn next_processing_timer(&self) -> Option<i64> {
        None
    }

    /// Captures the operator's state for a checkpoint.
    fn snapshot(&mut self) -> Result<CapturedState, CallError>;

    /// Reports the size of its keyed state to `gauge` from now on.
    fn report_state_size(&mut self, gauge: StateSizeGauge);

    /// How many times it wrote state it holds between calls back to the
    /// host outside `flush`, for holding more than its bound.
    fn held_write_backs(&self) -> u64 {
        0
    }
}

impl OperatorLogic for OperatorInstance {
    fn process(&mut self, input: u32, batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError> {
        OperatorInstance::process(self, input, batch, kind)
    }

    fn advance_watermark(&mut self, watermark: i64) -> Result<Emitted, CallError> {
        OperatorInstance::advance_watermark(self, watermark)
    }

    fn fire_processing_timers(&mut self, now: i64) -> Result<Emitted, CallError> {
        OperatorInstance::fire_processing_timers(self, now)
    }

    fn next_processing_timer(&self) -> Option<i64> {
        OperatorInstance::next_processing_timer(self)
    }

    fn snapshot(&mut self) -> Result<CapturedState, CallError> {
        OperatorInstance::snapshot(self)
    }

    fn report_state_size(&mut self, gauge: StateSizeGauge) {
        OperatorInstance::report_state_size(self, gauge)
    }

    fn held_write_backs(&self) -> u64 {
        OperatorInstance::held_write_backs(self)
    }
}

impl<T: weir_sdk::Operator> OperatorLogic for EmbeddedInstance<T> {
    fn process(&mut self, input: u32, batch: RecordBatch, kind: InputKind) -> Result<Emitted, CallError> {
        EmbeddedInstance::process(self, input, batch, kind)
    }

    fn advance_watermark(&mut self, watermark: i64) -> Result<Emitted, CallError> {
        EmbeddedInstance::advance_watermark(self, watermark)
    }

    fn fire_processing_timers(&mut self, now: i64) -> Result<Emitted, CallError> {
        EmbeddedInstance::fire_processing_timers(self, now)
    }

    fn next_processing_timer(&self) -> Option<i64> {
        EmbeddedInstance::next_processing_timer(self)
    }

    fn snapshot(&mut self) -> Result<CapturedState, CallError> {
        EmbeddedInstance::snapshot(self)
    }

    fn report_state_size(&mut self, gauge: StateSizeGauge) {
        EmbeddedInstance::report_state_size(self, gauge)
    }
}
