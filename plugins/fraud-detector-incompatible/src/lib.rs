//! `fraud-detector-incompatible`: `fraud-detector` (v1) with a state type
//! that cannot read v1's state — for testing that the host refuses such an
//! upgrade. Do not use it as an example of how to evolve state.
//!
//! Behaviour is v1's. Input keyed by source address (`key_by = true`), value
//! the event type as text: `login`, `auth-ok`, `auth-fail`, `access` or
//! `logout`. Each address runs this state machine:
//!
//! ```text
//! logged-out     --login-->     authenticating
//! authenticating --auth-ok-->   active
//! authenticating --auth-fail--> logged-out
//! active         --access-->    active
//! active         --logout-->    logged-out
//! ```
//!
//! An address seen for the first time starts in `logged-out`. Valid
//! transitions emit nothing. Any other event, including an unknown event
//! type, is invalid: it emits one alert and resets the address to
//! `logged-out`. An alert has key = the address and value, as in v1,
//!
//! ```text
//! invalid <event> in <state> after <n> events
//! ```
//!
//! (`<state>` the state the event arrived in, by name; `<n>` the address's
//! event count, this event included).
//!
//! State: the value state `session`, the same name as v1, but as JSON
//! `{"state":2,"events":3,"alerts":0}`: the state is a number (0 =
//! `logged-out`, 1 = `authenticating`, 2 = `active`) where v1 writes a
//! string, and `alerts` (alerts raised for the address) is required. v1's
//! `{"state":"active","events":3}` therefore fails to decode on both counts.
//!
//! Config: no keys.

use std::fmt;

use serde::{Deserialize, Serialize};
use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};

/// Where an address is in the login protocol; stored as a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Phase {
    #[default]
    LoggedOut = 0,
    Authenticating = 1,
    Active = 2,
}

impl From<Phase> for u8 {
    fn from(phase: Phase) -> u8 {
        phase as u8
    }
}

impl TryFrom<u8> for Phase {
    type Error = String;

    fn try_from(code: u8) -> Result<Phase, String> {
        match code {
            0 => Ok(Phase::LoggedOut),
            1 => Ok(Phase::Authenticating),
            2 => Ok(Phase::Active),
            other => Err(format!("no session state has code {other}")),
        }
    }
}

impl Phase {
    /// The state after `event`, or `None` if `event` is not allowed here.
    pub fn next(self, event: &str) -> Option<Phase> {
        use Phase::*;
        match (self, event) {
            (LoggedOut, "login") => Some(Authenticating),
            (Authenticating, "auth-ok") => Some(Active),
            (Authenticating, "auth-fail") => Some(LoggedOut),
            (Active, "access") => Some(Active),
            (Active, "logout") => Some(LoggedOut),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Phase::LoggedOut => "logged-out",
            Phase::Authenticating => "authenticating",
            Phase::Active => "active",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The state kept per address. Deliberately not compatible with v1's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub state: Phase,
    /// Events seen for the address, valid or not.
    pub events: u64,
    /// Alerts raised for the address. Required: no `#[serde(default)]`.
    pub alerts: u64,
}

pub struct FraudDetector {
    session: ValueState<Session>,
}

impl Operator for FraudDetector {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        // v1's name: the host finds v1's state under it and must refuse it.
        Ok(FraudDetector { session: ValueState::new("session") })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        // A value that is not UTF-8 is just another unknown event type.
        let event_type = String::from_utf8_lossy(event.value());
        let mut session = self.session.get(ctx)?.unwrap_or_default();
        session.events += 1;
        match session.state.next(&event_type) {
            Some(next) => session.state = next,
            None => {
                let alert = format!("invalid {event_type} in {} after {} events", session.state, session.events);
                ctx.emit(event.key(), alert);
                session.state = Phase::LoggedOut;
                session.alerts += 1;
            }
        }
        self.session.set(ctx, &session)
    }
}

weir_sdk::export_operator!(FraudDetector);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    /// Runs `(address, event type)` pairs as one batch and returns the
    /// alerts as (key, value).
    fn alerts(op: &mut TestHarness<FraudDetector>, pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        let out = op.process(pairs.iter().map(|&(address, event)| TestEvent::new(address, event))).unwrap();
        out.iter().map(|e| (e.key_str(), e.value_str())).collect()
    }

    fn alert(address: &str, text: &str) -> (String, String) {
        (address.to_owned(), text.to_owned())
    }

    const IP: &str = "10.0.0.7";

    #[test]
    fn valid_sessions_emit_nothing() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        let events = ["login", "auth-fail", "login", "auth-ok", "access", "logout"];
        let pairs: Vec<_> = events.iter().map(|&e| (IP, e)).collect();
        assert_eq!(alerts(&mut op, &pairs), []);
        assert_eq!(op.state::<Session>("session", IP), Some(Session { state: Phase::LoggedOut, events: 6, alerts: 0 }));
    }

    #[test]
    fn invalid_transitions_alert_and_reset() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        let pairs = [(IP, "login"), (IP, "auth-ok"), (IP, "login"), (IP, "sudo"), (IP, "login")];
        assert_eq!(
            alerts(&mut op, &pairs),
            [
                alert(IP, "invalid login in active after 3 events"),
                alert(IP, "invalid sudo in logged-out after 4 events"),
            ]
        );
        let stored = Session { state: Phase::Authenticating, events: 5, alerts: 2 };
        assert_eq!(op.state::<Session>("session", IP), Some(stored));
    }

    #[test]
    fn addresses_are_isolated() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        let out = alerts(&mut op, &[("a", "login"), ("b", "auth-ok"), ("a", "auth-ok")]);
        assert_eq!(out, [alert("b", "invalid auth-ok in logged-out after 1 events")]);
        assert_eq!(op.state::<Session>("session", "a"), Some(Session { state: Phase::Active, events: 2, alerts: 0 }));
    }

    #[test]
    fn state_is_numeric_json() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        alerts(&mut op, &[(IP, "login"), (IP, "auth-ok"), (IP, "access")]);
        let stored = op.state::<serde_json::Value>("session", IP).unwrap();
        assert_eq!(stored, serde_json::json!({"state": 2, "events": 3, "alerts": 0}));
    }

    #[test]
    fn cannot_read_state_written_by_v1() {
        // The string state alone, and the missing field alone, each refuse it.
        assert!(serde_json::from_str::<Session>(r#"{"state":"active","events":3}"#).is_err());
        assert!(serde_json::from_str::<Session>(r#"{"state":"active","events":3,"alerts":0}"#).is_err());
        assert!(serde_json::from_str::<Session>(r#"{"state":2,"events":3}"#).is_err());
    }

    #[test]
    fn accepts_no_config() {
        assert!(TestHarness::<FraudDetector>::new(&[("threshold", "3")]).is_err());
    }
}
