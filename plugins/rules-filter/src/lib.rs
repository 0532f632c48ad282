//! `rules-filter`: passes the events whose key a broadcast rule allows.
//!
//! Inputs:
//! - input 0, data: any events with keys;
//! - input 1, rules (a `broadcast` input): key = the data key a rule is
//!   about, value = `pass` or `block`.
//!
//! Rules are kept in broadcast state, so every subtask has all of them. A
//! data event whose key has a `pass` rule goes to the main output; any other
//! goes to the side output `blocked`.

use weir_sdk::{BroadcastState, Config, Context, Error, Event, Operator};

const DATA: u32 = 0;
const RULES: u32 = 1;

pub struct RulesFilter {
    rules: BroadcastState<bool>,
}

impl Operator for RulesFilter {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        Ok(RulesFilter { rules: BroadcastState::new("rules") })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        match event.input() {
            DATA => {
                if self.rules.get(ctx, event.key())? == Some(true) {
                    ctx.emit(event.key(), event.value());
                } else {
                    ctx.emit_to("blocked", event.key(), event.value());
                }
            }
            RULES => match event.value_str()? {
                "pass" => self.rules.set(ctx, event.key(), &true)?,
                "block" => self.rules.remove(ctx, event.key())?,
                other => return Err(Error::input(format!("a rule is `pass` or `block`, got {other:?}"))),
            },
            other => return Err(Error::other(format!("rules-filter has two inputs, got an event on input {other}"))),
        }
        Ok(())
    }
}

weir_sdk::export_operator!(RulesFilter);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn passes_allowed_keys_and_side_outputs_the_rest() {
        let mut op = TestHarness::<RulesFilter>::new(&[]).unwrap();
        op.process_broadcast(RULES, [TestEvent::new("a", "pass"), TestEvent::new("b", "pass")]).unwrap();
        op.process_broadcast(RULES, [TestEvent::new("b", "block")]).unwrap();
        let out = op.process_input(DATA, ["a", "b", "c"].map(|k| TestEvent::new(k, "v"))).unwrap();
        let routed: Vec<(String, String)> = out.iter().map(|e| (e.output.clone(), e.key_str())).collect();
        let expected = [("", "a"), ("blocked", "b"), ("blocked", "c")];
        assert_eq!(routed, expected.map(|(o, k)| (o.to_owned(), k.to_owned())));
    }

    #[test]
    fn rules_cannot_be_written_from_the_data_input() {
        let mut op = TestHarness::<RulesFilter>::new(&[]).unwrap();
        let err = op.process_input(RULES, [TestEvent::new("a", "pass")]).unwrap_err();
        assert!(err.to_string().contains("broadcast input"), "{err}");
    }
}
