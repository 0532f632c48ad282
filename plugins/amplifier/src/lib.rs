//! `amplifier`: sensor readings multiplied by a per-sensor factor that a
//! control stream sets — a two-input operator sharing keyed state.
//!
//! Inputs (both keyed by sensor, `key_by = true`):
//! - input 0, readings: key = sensor, value = a number;
//! - input 1, control: key = sensor, value = the sensor's new factor.
//!
//! A reading is emitted as `(sensor, reading × factor)`, with factor 1 until
//! a control message sets one. The factor lives in keyed state, so it holds
//! on whichever subtask owns the sensor, however early it arrived.

use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};

const READINGS: u32 = 0;
const CONTROL: u32 = 1;

pub struct Amplifier {
    factor: ValueState<f64>,
}

impl Operator for Amplifier {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        Ok(Amplifier { factor: ValueState::new("factor") })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        match event.input() {
            READINGS => {
                let reading: f64 = event.value_as()?;
                let factor = self.factor.get(ctx)?.unwrap_or(1.0);
                ctx.emit(event.key(), reading * factor);
            }
            CONTROL => {
                let factor: f64 = event.value_as()?;
                self.factor.set(ctx, &factor)?;
            }
            other => return Err(Error::other(format!("amplifier has two inputs, got an event on input {other}"))),
        }
        Ok(())
    }
}

weir_sdk::export_operator!(Amplifier);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn readings_use_the_latest_factor_of_their_sensor() {
        let mut op = TestHarness::<Amplifier>::new(&[]).unwrap();
        let out = op.process_input(READINGS, [TestEvent::new("s1", 2u64)]).unwrap();
        assert_eq!(out[0].value_str(), "2", "factor 1 before any control message");
        op.process_input(CONTROL, [TestEvent::new("s1", 10u64), TestEvent::new("s2", 0.5f64)]).unwrap();
        let out = op.process_input(READINGS, [TestEvent::new("s1", 3u64), TestEvent::new("s2", 3u64)]).unwrap();
        let values: Vec<String> = out.iter().map(|e| e.value_str()).collect();
        assert_eq!(values, ["30", "1.5"]);
        assert_eq!(op.state::<f64>("factor", "s1"), Some(10.0));
    }

    #[test]
    fn a_bad_reading_is_an_input_error() {
        let mut op = TestHarness::<Amplifier>::new(&[]).unwrap();
        let err = op.process_input(READINGS, [TestEvent::new("s1", "hot")]).unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    }
}
