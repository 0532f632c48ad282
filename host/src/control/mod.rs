//! Controlling a running host: its jobs, savepoints, upgrades and forks.
//!
//! A [`ControlPlane`] is what the host offers; [`server`] serves it as
//! HTTP/JSON on localhost and [`client`] is what the `weir jobs`,
//! `weir savepoint`, `weir cancel`, `weir upgrade` and `weir fork` commands
//! use to reach it; [`registry`] is where hosts announce their address so
//! that the commands find them.
//!
//! | method and path                  | body                | reply            |
//! |----------------------------------|---------------------|------------------|
//! | `GET /jobs`                      |                     | `[JobInfo]`      |
//! | `GET /jobs/{name}`               |                     | `JobInfo`        |
//! | `POST /jobs/{name}/savepoint`    | `SavepointRequest`  | `SavepointInfo`  |
//! | `POST /jobs/{name}/cancel`       |                     | `JobInfo`        |
//! | `POST /jobs/{name}/upgrade`      | `UpgradeRequest`    | `UpgradeInfo`    |
//! | `POST /forks`                    | `ForkRequest`       | `ForkInfo`       |
//! | `GET /metrics`                   |                     | Prometheus text  |
//!
//! A host started with `WEIR_API_TOKEN` set answers only requests with
//! `Authorization: Bearer <token>` ([`auth`]), others with 401.
//!
//! Errors come back as `{"error": "..."}` with status 404 (no such job),
//! 401 (no token, or another, where the host has one), 400 (a bad
//! request: a bad module, an unknown uid, incompatible state), 409 (the
//! job is not in a state to do that), 405 (another method), 408 (a body
//! shorter than its length, after 30 s), 413 (a body over 1 MiB) or 500.

/// Where `weir run` serves the control API, and where the commands look for
/// it, unless told otherwise (`--api`, `WEIR_API`).
pub const DEFAULT_API_ADDR: &str = "127.0.0.1:7070";

pub mod auth;
pub mod client;
pub mod metrics;
pub mod registry;
pub mod server;
mod types;

pub use auth::{ApiToken, TOKEN_ENV};
pub use types::{
    Counters, ErrorReply, ForkInfo, ForkRequest, JobInfo, NodeInfo, OperatorInfo, Recent, SavepointInfo, SavepointRequest, SubtaskInfo, UpgradeInfo,
    UpgradeRequest,
};

/// Why a control request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlError {
    #[error("there is no job `{0}` in this host")]
    NoSuchJob(String),
    /// The request cannot be carried out as asked; nothing was changed.
    #[error("{0}")]
    Rejected(String),
    /// The job is not in a state to do that (finished, being upgraded …).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Failed(String),
}

impl ControlError {
    /// The HTTP status that carries this error.
    pub fn status(&self) -> u16 {
        match self {
            ControlError::NoSuchJob(_) => 404,
            ControlError::Rejected(_) => 400,
            ControlError::Conflict(_) => 409,
            ControlError::Failed(_) => 500,
        }
    }
}

/// What a running host lets its clients do. Every method may block until
/// the work is done (a savepoint written, an upgrade complete).
pub trait ControlPlane: Send + Sync {
    fn jobs(&self) -> Vec<JobInfo>;
    fn job(&self, name: &str) -> Result<JobInfo, ControlError>;
    fn savepoint(&self, job: &str, request: SavepointRequest) -> Result<SavepointInfo, ControlError>;
    fn cancel(&self, job: &str) -> Result<JobInfo, ControlError>;
    fn upgrade(&self, job: &str, request: UpgradeRequest) -> Result<UpgradeInfo, ControlError>;
    fn fork(&self, request: ForkRequest) -> Result<ForkInfo, ControlError>;
}
