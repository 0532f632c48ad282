//! `fraud-detector-v2`: alerts on sessions that break the login protocol.
//!
//! An upgrade of `fraud-detector` (v1) that reads v1's state. Input keyed by
//! source address (`key_by = true`, e.g. key `10.0.0.7`), value the event
//! type as text: `login`, `auth-ok`, `auth-fail`, `access` or `logout`. Each
//! address runs this state machine:
//!
//! ```text
//! logged-out     --login-->     authenticating
//! authenticating --auth-ok-->   active
//! authenticating --auth-fail--> logged-out
//! active         --access-->    active
//! active         --login-->     active         (new in v2; v1 alerts)
//! active         --logout-->    logged-out
//! ```
//!
//! An address seen for the first time starts in `logged-out`. Valid
//! transitions emit nothing. Any other event, including an unknown event
//! type, is invalid: it emits one alert and resets the address to
//! `logged-out`. An alert has key = the address and value
//!
//! ```text
//! invalid <event> in <state> after <n> events (failures <k>)
//! ```
//!
//! where `<event>` is the event's value as received, `<state>` the state it
//! arrived in (`logged-out`, `authenticating` or `active`), `<n>` the number
//! of events seen for the address, this one included (always "events", even
//! for 1), and `<k>` the number of `auth-fail` events seen for the address,
//! this one included, valid or not. Example:
//! `invalid access in logged-out after 1 events (failures 0)`.
//!
//! State: the value state `session` of v1, as JSON, with one more field:
//! `{"state":"active","events":3,"failures":1}`. `failures` has a serde
//! default, so v1's `{"state":"active","events":3}` reads as 0 failures:
//! counting starts at the upgrade.
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
            (Active, "access" | "login") => Some(Active),
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

/// The state kept per address: v1's fields plus `failures`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub state: Phase,
    /// Events seen for the address, valid or not.
    pub events: u64,
    /// `auth-fail` events seen for the address. New in v2: the default lets
    /// v2 read what v1 wrote.
    #[serde(default)]
    pub failures: u64,
}

pub struct FraudDetector {
    session: ValueState<Session>,
}

impl Operator for FraudDetector {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        // The same name as v1, so that an upgrade keeps the state.
        Ok(FraudDetector { session: ValueState::new("session") })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        // A value that is not UTF-8 is just another unknown event type.
        let event_type = String::from_utf8_lossy(event.value());
        let mut session = self.session.get(ctx)?.unwrap_or_default();
        session.events += 1;
        if event_type == "auth-fail" {
            session.failures += 1;
        }
        match session.state.next(&event_type) {
            Some(next) => session.state = next,
            None => {
                let alert = format!(
                    "invalid {event_type} in {} after {} events (failures {})",
                    session.state, session.events, session.failures
                );
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

    fn session(state: Phase, events: u64, failures: u64) -> Session {
        Session { state, events, failures }
    }

    const IP: &str = "10.0.0.7";

    #[test]
    fn valid_sessions_emit_nothing() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        let events = ["login", "auth-fail", "login", "auth-ok", "access", "logout", "login", "auth-ok"];
        let pairs: Vec<_> = events.iter().map(|&e| (IP, e)).collect();
        assert_eq!(alerts(&mut op, &pairs), []);
        assert_eq!(op.state::<Session>("session", IP), Some(session(Phase::Active, 8, 1)));
    }

    #[test]
    fn a_second_login_in_an_active_session_is_allowed() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        assert_eq!(alerts(&mut op, &[(IP, "login"), (IP, "auth-ok"), (IP, "login"), (IP, "access")]), []);
        assert_eq!(op.state::<Session>("session", IP), Some(session(Phase::Active, 4, 0)));
    }

    #[test]
    fn invalid_transitions_alert_with_failures_and_reset() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        let pairs = [(IP, "login"), (IP, "auth-fail"), (IP, "auth-fail"), (IP, "login"), (IP, "access")];
        assert_eq!(
            alerts(&mut op, &pairs),
            [
                alert(IP, "invalid auth-fail in logged-out after 3 events (failures 2)"),
                alert(IP, "invalid access in authenticating after 5 events (failures 2)"),
            ]
        );
        assert_eq!(op.state::<Session>("session", IP), Some(session(Phase::LoggedOut, 5, 2)));
        assert_eq!(
            alerts(&mut op, &[(IP, "logout")]),
            [alert(IP, "invalid logout in logged-out after 6 events (failures 2)")]
        );
    }

    #[test]
    fn unknown_event_types_are_invalid() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        assert_eq!(alerts(&mut op, &[(IP, "sudo")]), [alert(IP, "invalid sudo in logged-out after 1 events (failures 0)")]);
    }

    #[test]
    fn addresses_are_isolated() {
        let mut op = TestHarness::<FraudDetector>::new(&[]).unwrap();
        let out = alerts(&mut op, &[("a", "login"), ("b", "login"), ("b", "auth-fail"), ("a", "auth-ok"), ("b", "access")]);
        assert_eq!(out, [alert("b", "invalid access in logged-out after 3 events (failures 1)")]);
        assert_eq!(op.state::<Session>("session", "a"), Some(session(Phase::Active, 2, 0)));
        assert_eq!(op.state::<Session>("session", "b"), Some(session(Phase::LoggedOut, 3, 1)));
    }

    #[test]
    fn reads_state_written_by_v1() {
        let v1: Session = serde_json::from_str(r#"{"state":"active","events":3}"#).unwrap();
        assert_eq!(v1, session(Phase::Active, 3, 0));
        let v1: Session = serde_json::from_str(r#"{"state":"logged-out","events":7}"#).unwrap();
        assert_eq!(v1, session(Phase::LoggedOut, 7, 0));
    }

    #[test]
    fn reads_what_the_v1_crate_actually_stores() {
        let mut v1 = TestHarness::<fraud_detector::FraudDetector>::new(&[]).unwrap();
        v1.process(["login", "auth-ok"].map(|e| TestEvent::new(IP, e))).unwrap();
        assert_eq!(v1.state::<Session>("session", IP), Some(session(Phase::Active, 2, 0)));
    }

    #[test]
    fn accepts_no_config() {
        assert!(TestHarness::<FraudDetector>::new(&[("threshold", "3")]).is_err());
    }
}
