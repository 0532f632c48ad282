//! Hot upgrade: swap the plugin of one operator of a running job.
//!
//! 1. The new module is compiled and checked against the world.
//! 2. A savepoint is taken while the job runs on, and every stored value
//!    of the operator's states is offered to the new plugin's
//!    `check-state`: a plugin that cannot read its predecessor's state is
//!    refused here, with the job untouched.
//! 3. The job is stopped with a savepoint (sources stop at its barrier),
//!    and started again from it with the new plugin, in the same host.
//!
//! The downtime is the time from the stop request to the new tasks running.

use std::sync::Arc;
use std::time::Instant;

use tracing::{info, warn};

use super::{JobManager, JobStatus, retention};
use crate::control::{ControlError, UpgradeInfo, UpgradeRequest};
use crate::dataflow::{StateCheckError, WrittenBy, changed_plugins, check_state};
use crate::dirs::absolute;
use crate::job::{JobGraph, NodeKind};
use crate::plugin::{LoadedPlugin, PluginEngine};
use crate::savepoint::Savepoint;

pub(super) fn upgrade(manager: &Arc<JobManager>, name: &str, request: UpgradeRequest) -> Result<UpgradeInfo, ControlError> {
    let (graph, _, generation) = manager.running(name)?;
    let uid = &request.operator;
    let plugin_path = absolute(&request.plugin);
    let plugin = manager
        .engine
        .load(&plugin_path)
        .map_err(|e| ControlError::Rejected(format!("upgrade refused, job `{name}` runs on unchanged: {e}")))?;
    let upgraded = with_plugin(&graph, uid, &plugin_path)?;
    // From here on, other upgrades and savepoint requests are turned away.
    manager.begin_upgrade(name, generation)?;
    // Before the job stops: it runs on, unless it was cancelled meanwhile.
    let give_up = |error: ControlError| {
        manager.abandon_upgrade(name);
        match manager.cancelled_during_upgrade(name, generation) {
            true => ControlError::Conflict(format!("job `{name}` was cancelled during its upgrade, which was given up")),
            false => error,
        }
    };
    let checked_entries = check_before_stop(manager, name, &graph, &upgraded, uid, &plugin).map_err(give_up)?;

    let stop_requested = Instant::now();
    let dir = match &request.savepoint_dir {
        Some(dir) => absolute(dir),
        None => manager.default_savepoint_dir(&graph, "upgrade"),
    };
    let savepoint = manager.take_savepoint(name, dir, true, "be upgraded").map_err(give_up)?;
    if request.savepoint_dir.is_none() {
        retention::mark_taken_by_host(&savepoint.dir, "upgrade");
    }
    manager.wait_ended(name, generation, None);
    // After it stopped: a host shutting down or a cancel leaves it stopped.
    let not_upgraded = |error: ControlError| match error {
        ControlError::Conflict(why) => {
            manager.abandon_upgrade(name);
            ControlError::Conflict(format!(
                "{why}; it stopped with savepoint {} and was not upgraded; restore that savepoint with the new \
                 plugin named in the job file to upgrade it",
                savepoint.dir.display()
            ))
        }
        other => other,
    };
    let opened = Savepoint::open(&savepoint.dir).map_err(failed)?;
    // The state was checked above; its newest writes are by the same plugin.
    match manager.start(upgraded, Some(opened.clone()), false, Some(generation)) {
        Ok(()) => {}
        Err(error @ ControlError::Conflict(_)) => return Err(not_upgraded(error)),
        Err(error) => {
            warn!(job = %name, %error, "the upgraded job did not start; starting the old version again");
            manager.start(graph, Some(opened), false, Some(generation)).map_err(not_upgraded)?;
            return Err(ControlError::Failed(format!(
                "the upgraded job did not start ({error}); job `{name}` was restarted with its old plugin from savepoint {}",
                savepoint.dir.display()
            )));
        }
    }
    let downtime_ms = stop_requested.elapsed().as_secs_f64() * 1000.0;
    manager.forget_old_savepoints(&graph, "upgrade");
    info!(job = %name, operator = %uid, plugin = %plugin_path.display(), downtime_ms, "upgraded");
    Ok(UpgradeInfo { job: name.to_owned(), operator: uid.clone(), plugin: plugin_path, savepoint, downtime_ms, checked_entries })
}

/// `graph` with operator `uid` running `plugin`.
pub(super) fn with_plugin(graph: &JobGraph, uid: &str, plugin: &std::path::Path) -> Result<JobGraph, ControlError> {
    let mut graph = graph.clone();
    match graph.operator_mut(uid) {
        Some(operator) => operator.plugin = plugin.to_path_buf(),
        None => {
            let uids: Vec<&str> = graph
                .nodes
                .iter()
                .filter(|n| matches!(n.kind, NodeKind::Operator(_)))
                .map(|n| n.name.as_str())
                .collect();
            return Err(ControlError::Rejected(format!(
                "job `{}` has no operator with uid `{uid}` (its operators: {})",
                graph.name,
                uids.join(", ")
            )));
        }
    }
    Ok(graph)
}

/// Checks every operator whose plugin differs from the one `savepoint` was
/// taken with against its state there.
pub(super) fn check_changed_plugins(
    engine: &PluginEngine,
    graph: &JobGraph,
    savepoint: &Savepoint,
) -> Result<(), ControlError> {
    let wrote = |uid: &str| WrittenBy::of_savepoint(savepoint, uid);
    let changed = changed_plugins(graph, engine, wrote).map_err(|e| ControlError::Rejected(e.to_string()))?;
    for (uid, plugin) in &changed {
        let reconfigured = wrote(uid).is_some_and(|wrote| wrote.same_plugin(&plugin.digest));
        check_state(graph, uid, plugin, savepoint).map_err(|error| match error {
            StateCheckError::Savepoint(reason) => {
                ControlError::Rejected(format!("cannot restore from savepoint {}: {reason}", savepoint.dir.display()))
            }
            StateCheckError::Plugin(reason) if reconfigured => ControlError::Rejected(format!(
                "operator `{uid}` has another `config` than when savepoint {} was taken, and its plugin {} cannot \
                 take over its state so: {reason}. Restore it with the config it was taken with",
                savepoint.dir.display(),
                plugin.path.display()
            )),
            StateCheckError::Plugin(reason) => ControlError::Rejected(format!(
                "plugin {} of operator `{uid}` cannot take over its state in savepoint {}: {reason}",
                plugin.path.display(),
                savepoint.dir.display()
            )),
        })?;
    }
    Ok(())
}

fn failed(error: impl std::fmt::Display) -> ControlError {
    ControlError::Failed(error.to_string())
}

impl JobManager {
    /// Marks job `name` (incarnation `generation`) as being upgraded, if it
    /// is running.
    fn begin_upgrade(&self, name: &str, generation: u64) -> Result<(), ControlError> {
        let mut jobs = self.lock();
        match jobs.get_mut(name) {
            Some(job) if job.generation == generation && job.status == JobStatus::Running => {
                job.status = JobStatus::Upgrading;
                Ok(())
            }
            Some(job) => Err(ControlError::Conflict(format!("job `{name}` is {}, not running", job.status.word()))),
            None => Err(ControlError::NoSuchJob(name.to_owned())),
        }
    }
}

/// What the savepoints an upgrade takes to check the new plugin against
/// the state are called (`upgrade-check-JOB-MILLIS`); each is deleted once
/// read.
const UPGRADE_CHECK: &str = "upgrade-check";

/// Deletes the check savepoints of job `name`'s earlier upgrades in `root`
/// that a host killed while checking left behind. The job runs in this
/// host, which holds its checkpoint directory: no other is writing one.
fn remove_interrupted_checks(root: &std::path::Path, name: &str) {
    let prefix = format!("{UPGRADE_CHECK}-{name}-");
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let millis = file_name.to_str().and_then(|n| n.strip_prefix(&prefix));
        if millis.is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit())) {
            tracing::debug!(dir = %entry.path().display(), "removing an interrupted upgrade's check savepoint");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Takes a savepoint of the running job and checks the new plugin against
/// the operator's state in it; returns how many values it read.
fn check_before_stop(
    manager: &JobManager,
    name: &str,
    graph: &JobGraph,
    upgraded: &JobGraph,
    uid: &str,
    plugin: &LoadedPlugin,
) -> Result<u64, ControlError> {
    remove_interrupted_checks(&manager.default_savepoint_root(graph), name);
    let check_dir = manager.default_savepoint_dir(graph, UPGRADE_CHECK);
    let check = manager.take_savepoint(name, check_dir.clone(), false, "be upgraded")?;
    let checked = Savepoint::open(&check.dir)
        .map_err(|e| StateCheckError::Savepoint(e.to_string()))
        .and_then(|savepoint| check_state(upgraded, uid, plugin, &savepoint));
    let _ = std::fs::remove_dir_all(&check_dir);
    checked.map_err(|(StateCheckError::Savepoint(reason) | StateCheckError::Plugin(reason))| {
        ControlError::Rejected(format!(
            "upgrade refused, job `{name}` runs on unchanged: the new plugin {} cannot take over the state of \
             operator `{uid}`: {reason}",
            plugin.path.display()
        ))
    })
}

/// For a job that failed running plugins `weir upgrade` gave it: which,
/// and the way back — a run of the job file (which names the plugins it
/// had before) from the savepoint an upgrade took in `savepoints`. (A run
/// of the job file from its checkpoints resumes the upgraded plugins.)
pub(super) fn way_back(graph: &JobGraph, savepoints: &std::path::Path) -> Option<String> {
    let definition = graph.definition.as_ref()?;
    let named = crate::job::named_plugins(definition);
    let upgraded: Vec<String> = graph
        .nodes
        .iter()
        .filter_map(|node| {
            let NodeKind::Operator(op) = &node.kind else { return None };
            let file = named.iter().find(|named| named.uid == node.name)?;
            (absolute(&op.plugin) != file.plugin).then(|| {
                format!("operator `{}` runs {}, which `weir upgrade` gave it; the job file names {}", node.name, op.plugin.display(), file.plugin.display())
            })
        })
        .collect();
    if upgraded.is_empty() {
        return None;
    }
    Some(format!(
        "{}. To go back to the job file's plugins, start it from the savepoint the upgrade took (the newest \
         `upgrade-{}-…` in {}): `weir run {} --from-savepoint DIR`",
        upgraded.join("; "),
        graph.name,
        savepoints.display(),
        definition.path.display()
    ))
}
