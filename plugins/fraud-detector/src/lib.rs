//! `fraud-detector` (v1): alerts on sessions that break the login protocol.
//!
//! Input keyed by source address (`key_by = true`, e.g. key `10.0.0.7`),
//! value the event type as text: `login`, `auth-ok`, `auth-fail`, `access`
//! or `logout`. Each address runs this state machine:
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
//! `logged-out`. An alert has key = the address and value
//!
//! ```text
//! invalid <event> in <state> after <n> events
//! ```
//!
//! where `<event>` is the event's value as received, `<state>` the state it
//! arrived in (`logged-out`, `authenticating` or `active`) and `<n>` the
//! number of events seen for the address, this one included (always
//! "events", even for 1). Example: `invalid access in logged-out after 1 events`.
//!
//! State: one value state `session` per address, as JSON
//! `{"state":"active","events":3}`. Later versions keep the name and must
//! be able to read this (`fraud-detector-v2` does).
//!
//! Config: no keys.

use std::fmt;

use serde::{Deserialize, Serialize};
use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};

/// Where an address is in the login protocol; stored as its kebab-case name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    #[default]
    LoggedOut,
    Authenticating,
    Active,
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

/// The state kept per address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub state: Phase,
    /// Events seen for the address, valid or not.
    pub events: u64,
}

pub struct FraudDetector {
    session: ValueState<Session>,
}

impl Operator for FraudDetector {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
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
        let session = ["login", "auth-fail", "login", "auth-ok", "access", "access", "logout", "login", "auth-ok"];
        let pairs: Vec<_> = session.iter().map(|&e| (IP, e)).collect();
        assert_eq!(alerts(&mut op, &pairs), []);
        assert_eq!(op.state::<Session>("session", IP), Some(Session { state: Phase::Active, events: 9 }));
    }

    #[test]
    fn invalid_transitions_alert_and_reset() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        assert_eq!(
            alerts(&mut op, &[(IP, "access"), (IP, "login"), (IP, "login")]),
            [
                alert(IP, "invalid access in logged-out after 1 events"),
                alert(IP, "invalid login in authenticating after 3 events"),
            ]
        );
        // The second alert reset the address: a new login is valid again.
        assert_eq!(op.state::<Session>("session", IP), Some(Session { state: Phase::LoggedOut, events: 3 }));
        assert_eq!(alerts(&mut op, &[(IP, "login"), (IP, "auth-ok")]), []);
        // v1 does not allow a second login in an active session.
        assert_eq!(alerts(&mut op, &[(IP, "login")]), [alert(IP, "invalid login in active after 6 events")]);
    }

    #[test]
    fn unknown_event_types_are_invalid() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        assert_eq!(
            alerts(&mut op, &[(IP, "login"), (IP, "sudo")]),
            [alert(IP, "invalid sudo in authenticating after 2 events")]
        );
    }

    #[test]
    fn addresses_are_isolated() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        // Interleaved in one batch: `a` behaves, `b` skips authentication.
        let out = alerts(&mut op, &[("a", "login"), ("b", "login"), ("a", "auth-ok"), ("b", "access"), ("a", "access")]);
        assert_eq!(out, [alert("b", "invalid access in authenticating after 2 events")]);
        assert_eq!(op.state::<Session>("session", "a"), Some(Session { state: Phase::Active, events: 3 }));
        assert_eq!(op.state::<Session>("session", "b"), Some(Session { state: Phase::LoggedOut, events: 2 }));
        assert_eq!(op.state::<Session>("session", "c"), None);
    }

    #[test]
    fn state_is_stored_as_v1_json() {
        // The format later versions have to read.
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        alerts(&mut op, &[(IP, "login"), (IP, "auth-ok"), (IP, "access")]);
        let stored = op.state::<serde_json::Value>("session", IP).unwrap();
        assert_eq!(stored, serde_json::json!({"state": "active", "events": 3}));
    }

    #[test]
    fn accepts_no_config() {
        assert!(TestHarness::<FraudDetector>::new(&[("threshold", "3")]).is_err());
    }
}
