//! `tokenize`: splits lines of text into words.
//!
//! Each input value is a line; each word in it is emitted with the word as
//! key (so a following `key_by` edge groups equal words) and 1 as value.
//! A word is a maximal run of alphanumeric characters (and apostrophes
//! inside words), lowercased unless `lowercase = "false"` is configured.

use weir_sdk::{Config, Context, Error, Event, Operator};

pub struct Tokenize {
    lowercase: bool,
    word: String,
}

impl Operator for Tokenize {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&["lowercase"])?;
        Ok(Tokenize { lowercase: config.parse_or("lowercase", true)?, word: String::new() })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        let line = event.value_str()?;
        for word in words(line) {
            self.word.clear();
            if self.lowercase {
                self.word.extend(word.chars().flat_map(char::to_lowercase));
            } else {
                self.word.push_str(word);
            }
            ctx.emit(self.word.as_str(), 1u64);
        }
        Ok(())
    }
}

/// The words of `line`: runs of alphanumerics, keeping inner apostrophes
/// ("don't") but not leading or trailing ones.
fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
}

weir_sdk::export_operator!(Tokenize);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn splits_lowercases_and_strips_punctuation() {
        let mut op = TestHarness::<Tokenize>::new(&[]).unwrap();
        let out = op.process([TestEvent::unkeyed("The cat's hat, the 'HAT'!")]).unwrap();
        let keys: Vec<String> = out.iter().map(|e| e.key_str()).collect();
        assert_eq!(keys, ["the", "cat's", "hat", "the", "hat"]);
        assert!(out.iter().all(|e| e.value_str() == "1"));
    }

    #[test]
    fn can_keep_case() {
        let mut op = TestHarness::<Tokenize>::new(&[("lowercase", "false")]).unwrap();
        let out = op.process([TestEvent::unkeyed("Hello World")]).unwrap();
        assert_eq!(out[0].key_str(), "Hello");
    }

    #[test]
    fn rejects_unknown_config() {
        let err = TestHarness::<Tokenize>::new(&[("lowercse", "true")]).err().unwrap();
        assert_eq!(err, Error::config("unknown key `lowercse`; this operator understands: lowercase"));
    }
}
