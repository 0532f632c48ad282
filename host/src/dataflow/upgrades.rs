//! Upgrades carried over a restart of the host.
//!
//! `weir upgrade` changes the running job, not its job file. Started again
//! from that file after the host stopped or was killed, the job would
//! resume the upgraded plugin's state with the file's old plugin. So before
//! the job starts, the manifest of its newest checkpoint is read: it
//! records the plugin each operator ran and the one the job file named
//! when that run began. Where the file still names that one and the run
//! ran another, the operator was upgraded while it ran, and it resumes
//! with its upgrade — provided that file is still there, unchanged. An
//! operator whose plugin the file names differently now is the user's
//! word: the file's plugin runs (the builder warns where it differs from
//! the checkpoint's), which is how a plugin is changed across a restart —
//! provided it can read the state (`resume_check::check_changed_plugins`).
//! Other edits of the file — a comment, a rate — change nothing of this.

use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::checkpoint::{CheckpointStorage, OperatorPlugin};
use crate::dirs::resolved;
use crate::job::{JobGraph, NodeKind};
use crate::plugin::sha256_hex;

/// An operator that resumes with the plugin it was upgraded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarriedUpgrade {
    pub uid: String,
    pub plugin: PathBuf,
    /// What the job file names.
    pub instead_of: PathBuf,
}

/// What a checkpoint's run ran, and what its job file named then.
struct RunPlugins<'a> {
    ran: &'a [OperatorPlugin],
    named: &'a [OperatorPlugin],
}

/// Sets `graph`'s operators to the plugins their newest checkpoint's run
/// was upgraded to, where the job file still names the plugins that run
/// began with (see the module docs); returns those it set. A run that
/// began from a savepoint (an upgrade's) and has no checkpoint yet is
/// resumed from that savepoint, with the plugins that run recorded there.
pub fn carry_upgrades(graph: &mut JobGraph) -> Vec<CarriedUpgrade> {
    let Some(settings) = &graph.checkpoints else { return Vec::new() };
    if !settings.dir.exists() {
        return Vec::new(); // A first run: nothing to carry (and no directory made for a run that may not start).
    }
    let Ok(storage) = CheckpointStorage::open(&settings.dir) else { return Vec::new() };
    // (An unreadable record is reported when the run looks for its savepoint.)
    let start = super::recovery::newest_savepoint_start(graph).ok().flatten().and_then(|(start, has)| (!has).then_some(start));
    let newest = storage.complete_ids().last().and_then(|&id| storage.manifest(id).ok()).filter(|m| !m.finished);
    let (run, from) = match (&start, &newest) {
        (Some(start), _) => {
            (RunPlugins { ran: &start.plugins, named: &start.job_file_plugins }, format!("savepoint {}", start.savepoint.display()))
        }
        (None, Some(manifest)) => {
            (RunPlugins { ran: &manifest.plugins, named: &manifest.job_file_plugins }, format!("checkpoint {}", manifest.checkpoint))
        }
        (None, None) => return Vec::new(),
    };
    let carried = upgrades(graph, &run, &|path| std::fs::read(path).ok().map(|bytes| sha256_hex(&bytes)));
    for upgrade in &carried {
        if let Some(operator) = graph.operator_mut(&upgrade.uid) {
            operator.plugin = upgrade.plugin.clone();
        }
        info!(
            job = %graph.name,
            operator = %upgrade.uid,
            plugin = %upgrade.plugin.display(),
            job_file_names = %upgrade.instead_of.display(),
            from = %from,
            "resuming with the plugin the job was upgraded to while it ran; name it in the job file to keep it"
        );
    }
    carried
}

/// The operators of `graph` that `run` upgraded: the job file names the
/// plugin it named when the run began, the run ran another (by digest,
/// `digest_of` a file), and that one's file is there with the digest the
/// checkpoint recorded.
fn upgrades(graph: &JobGraph, run: &RunPlugins<'_>, digest_of: &dyn Fn(&Path) -> Option<String>) -> Vec<CarriedUpgrade> {
    let mut carried = Vec::new();
    for node in &graph.nodes {
        let NodeKind::Operator(operator) = &node.kind else { continue };
        let Some(ran) = run.ran.iter().find(|p| p.uid == node.name) else { continue };
        let Some(recorded) = &ran.sha256 else { continue };
        let named = resolved(&operator.plugin);
        let named_then = run.named.iter().find(|p| p.uid == node.name).map(|p| resolved(&p.plugin));
        if named_then.as_ref() != Some(&named) {
            continue; // The file names another plugin now: its word.
        }
        if resolved(&ran.plugin) == named || digest_of(&named).as_ref() == Some(recorded) {
            continue; // The file's plugin ran (or one just like it): no upgrade.
        }
        if digest_of(&ran.plugin).as_ref() != Some(recorded) {
            warn!(
                operator = %node.name,
                plugin = %ran.plugin.display(),
                "the plugin the job was upgraded to is gone or changed; the operator resumes with the job file's"
            );
            continue;
        }
        carried.push(CarriedUpgrade { uid: node.name.clone(), plugin: ran.plugin.clone(), instead_of: operator.plugin.clone() });
    }
    carried
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Overrides, parse};

    fn graph(plugin: &str) -> JobGraph {
        let text = format!(
            "name = \"j\"\n[[source]]\nname = \"in\"\ntype = \"generator\"\n\
             [[operator]]\nuid = \"count\"\nplugin = \"{plugin}\"\ninputs = [\"in\"]\n\
             [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"count\"\n"
        );
        parse(&text, Path::new("/jobs"), Overrides::default()).unwrap()
    }

    fn plugin(path: &str, sha256: Option<&str>) -> Vec<OperatorPlugin> {
        vec![OperatorPlugin { uid: "count".into(), plugin: path.into(), sha256: sha256.map(Into::into), config_sha256: None }]
    }

    /// Digests of the files there are: v1 and v2 as built, v3 rebuilt since.
    fn digest_of(path: &Path) -> Option<String> {
        match path.to_str()? {
            "/jobs/v1.wasm" => Some("one".into()),
            "/jobs/v2.wasm" => Some("two".into()),
            "/jobs/v3.wasm" => Some("three, rebuilt".into()),
            _ => None,
        }
    }

    /// What the operators of `graph` resume with after a run that began
    /// with the job file naming v1 and ran `ran` (digest `sha256`).
    fn carried(graph: &JobGraph, ran: &str, sha256: &str) -> Vec<CarriedUpgrade> {
        let (ran, named) = (plugin(ran, Some(sha256)), plugin("/jobs/v1.wasm", None));
        upgrades(graph, &RunPlugins { ran: &ran, named: &named }, &digest_of)
    }

    #[test]
    fn an_operator_resumes_with_the_plugin_it_was_upgraded_to_if_the_job_file_still_names_the_old_one() {
        let file = graph("v1.wasm");
        let expected = CarriedUpgrade { uid: "count".into(), plugin: "/jobs/v2.wasm".into(), instead_of: "/jobs/v1.wasm".into() };
        assert_eq!(carried(&file, "/jobs/v2.wasm", "two"), [expected]);
        assert_eq!(carried(&file, "/jobs/v1.wasm", "one"), [], "not upgraded");
        assert_eq!(carried(&file, "/jobs/v1.wasm", "one, before a rebuild"), [], "the file's plugin, rebuilt: not upgraded");
        assert_eq!(carried(&file, "/elsewhere/v1.wasm", "one"), [], "the same plugin by digest");
        assert_eq!(carried(&file, "/jobs/v3.wasm", "three"), [], "changed since: the job file's runs");
        assert_eq!(carried(&file, "/gone.wasm", "four"), [], "gone: the job file's runs");
        assert_eq!(carried(&graph("v3.wasm"), "/jobs/v2.wasm", "two"), [], "the file names another plugin now: its word");
        let (ran, named) = (plugin("/jobs/v2.wasm", Some("two")), Vec::new());
        assert_eq!(upgrades(&file, &RunPlugins { ran: &ran, named: &named }, &digest_of), [], "what the file named is unknown");
    }
}
