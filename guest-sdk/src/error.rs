//! The error an operator returns; the host shows it with the operator's uid.

use std::fmt;

/// Why an operator call failed. Returning an error fails the task; the host
/// reports it together with the operator's uid and recovers the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The job file's `config` for this operator is wrong.
    InvalidConfig(String),
    /// An input event could not be decoded.
    InvalidInput(String),
    /// Keyed state could not be read or written.
    State(String),
    /// Anything else.
    Other(String),
}

impl Error {
    /// An [`Error::InvalidConfig`] with the given message.
    pub fn config(message: impl Into<String>) -> Self {
        Error::InvalidConfig(message.into())
    }

    /// An [`Error::InvalidInput`] with the given message.
    pub fn input(message: impl Into<String>) -> Self {
        Error::InvalidInput(message.into())
    }

    /// An [`Error::Other`] with the given message.
    pub fn other(message: impl Into<String>) -> Self {
        Error::Other(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidConfig(m) => write!(f, "invalid config: {m}"),
            Error::InvalidInput(m) => write!(f, "invalid input: {m}"),
            Error::State(m) => write!(f, "state: {m}"),
            Error::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}
