//! The types of an instance's states, as declared by creating typed handles
//! (`ValueState<T>`, `MapState<V>`), so that the host can ask — before an
//! upgrade stops the old version — whether this version can read what the
//! old one stored (the `check-state` export). A helper whose entries mean
//! more than their type says (a window's start and end must fit the
//! windows' size) adds a check of each entry with [`constrain`].

use std::cell::RefCell;

use serde::de::DeserializeOwned;

use crate::Ttl;

/// The kinds of state `check-state` asks about; each a namespace of its
/// own (a map and a value state may share a name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    Value,
    Map,
    Broadcast,
}

impl Stored {
    fn noun(self) -> &'static str {
        match self {
            Stored::Value => "value state",
            Stored::Map => "map state",
            Stored::Broadcast => "broadcast state",
        }
    }
}

/// One declared state: its name, its kind, and how to check a stored value.
struct Declared {
    name: String,
    kind: Stored,
    /// The Rust type of its values, to refuse a second handle of another.
    type_name: &'static str,
    check: fn(&[u8]) -> Result<(), String>,
    /// A further check of each (sub-key, value) entry, after its type's.
    entries: Option<Box<EntryCheck>>,
    /// The time-to-live its values have, if any ([`expire`]).
    ttl: Option<Ttl>,
}

/// A check of one stored (sub-key, value) entry: `Err(why)` refuses it.
pub(crate) type EntryCheck = dyn Fn(&[u8], &[u8]) -> Result<(), String>;

thread_local! {
    /// A component instance is single-threaded: this is the instance's.
    static DECLARED: RefCell<Vec<Declared>> = const { RefCell::new(Vec::new()) };
}

/// Records that state `name` holds JSON-encoded `T`s.
///
/// # Panics
/// If a handle on the same state was made with another type: the two would
/// write over each other's values, each unreadable to the other (a panic
/// in `init` fails the instance with this message).
pub(crate) fn declare<T: DeserializeOwned>(name: &str, kind: Stored) {
    let type_name = std::any::type_name::<T>();
    DECLARED.with(|declared| {
        let mut declared = declared.borrow_mut();
        if let Some(other) = declared.iter().find(|d| d.name == name && d.kind == kind && d.type_name != type_name) {
            let kind = kind.noun();
            panic!(
                "{kind} `{name}` is declared twice, holding {} and {type_name}: one state holds one type, and the \
                 two would write over each other's values; give each state a name of its own (windows keep theirs \
                 under the windows' name)",
                other.type_name
            );
        }
        declared.retain(|d| !(d.name == name && d.kind == kind));
        declared.push(Declared { name: name.to_owned(), kind, type_name, check: check_json::<T>, entries: None, ttl: None });
    });
}

/// Records that the declared state `name`'s values expire as `ttl` says.
pub(crate) fn expire(name: &str, kind: Stored, ttl: Ttl) {
    DECLARED.with(|declared| {
        if let Some(state) = declared.borrow_mut().iter_mut().find(|d| d.name == name && d.kind == kind) {
            state.ttl = Some(ttl);
        }
    });
}

/// Whether state `name` of `kind` is declared, and if so with which
/// time-to-live: `check-state` opens it so, for the host to refuse a state
/// stored with another choice ([`crate::export`]).
pub(crate) fn declared_ttl(name: &str, kind: Stored) -> Option<Option<Ttl>> {
    DECLARED.with(|declared| declared.borrow().iter().find(|d| d.name == name && d.kind == kind).map(|d| d.ttl))
}

/// Adds `check` of each stored entry to the declared state `name` (its
/// message is the refusal, as it is).
pub(crate) fn constrain(name: &str, kind: Stored, check: Box<EntryCheck>) {
    DECLARED.with(|declared| {
        if let Some(state) = declared.borrow_mut().iter_mut().find(|d| d.name == name && d.kind == kind) {
            state.entries = Some(check);
        }
    });
}

fn check_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<T>(bytes).map(|_| ()).map_err(|e| e.to_string())
}

/// Checks that every stored (sub-key, value) entry can be read as the type
/// state `name` was declared with, and passes its further check if it has
/// one (a value state's sub-keys are empty; a broadcast state's are its
/// keys).
pub(crate) fn check<'a>(name: &str, stored: Stored, entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Result<(), String> {
    let kind = stored.noun();
    DECLARED.with(|declared| {
        let declared = declared.borrow();
        let Some(state) = declared.iter().find(|d| d.name == name && d.kind == stored) else {
            return Err(format!(
                "this plugin declares no {kind} `{name}` (its stored entries would be lost); keep the state's name, \
                 or keep declaring the old state beside the new one (its entries are then carried along unused)"
            ));
        };
        for (i, (sub_key, value)) in entries.enumerate() {
            (state.check)(value).map_err(|error| {
                format!(
                    "{kind} `{name}`: stored value #{i} ({}) cannot be read by this plugin: {error}. \
                     New fields need #[serde(default)]; a changed type needs a new state name",
                    preview(value)
                )
            })?;
            if let Some(check) = &state.entries {
                check(sub_key, value)?;
            }
        }
        Ok(())
    })
}

/// The start of a value, for messages.
fn preview(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct V2 {
        state: String,
        #[serde(default)]
        failures: u64,
    }

    /// Two handles on one state with different types would write over
    /// each other's values: the second is refused, naming both types.
    #[test]
    fn a_state_declared_twice_with_other_types_is_refused() {
        let refused = std::thread::spawn(|| {
            declare::<u64>("x", Stored::Value);
            declare::<u64>("x", Stored::Value);
            declare::<String>("x", Stored::Map);
            declare::<String>("x", Stored::Value);
        })
        .join()
        .unwrap_err();
        let message = refused.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("value state `x` is declared twice, holding u64 and alloc::string::String"), "{message}");
    }

    #[test]
    fn added_fields_with_defaults_read_old_values_and_other_changes_do_not() {
        declare::<V2>("session", Stored::Value);
        assert!(check("session", Stored::Value, [(&b""[..], &br#"{"state":"active"}"#[..])].into_iter()).is_ok());
        let error = check("session", Stored::Value, [(&b""[..], &br#"{"state":2}"#[..])].into_iter()).unwrap_err();
        assert!(error.contains("value state `session`: stored value #0 ({\"state\":2})"), "{error}");
        let error = check("count", Stored::Value, std::iter::empty()).unwrap_err();
        assert!(error.contains("declares no value state `count`"), "{error}");
        assert!(check("session", Stored::Map, std::iter::empty()).is_err(), "a map of the same name is another state");
        let error = check("session", Stored::Broadcast, std::iter::empty()).unwrap_err();
        assert!(error.contains("declares no broadcast state `session`"), "{error}");
    }
}
