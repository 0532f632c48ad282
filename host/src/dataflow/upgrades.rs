//! Upgrades carried over a restart of the host.
//!
//! `weir upgrade` changes the running job, not its job file. Started again
//! from that file after the host stopped or was killed, the job would
//! resume the upgraded plugin's state with the file's old plugin. So before
//! the job starts, the manifest of its newest checkpoint is read: if the
//! job file is still the one that run was started from (the manifest
//! records its SHA-256) and the run ran other plugins than the file names,
//! those were upgrades, and the job resumes with them — provided their
//! files are still there, unchanged. A job file edited since is the user's
//! word: its plugins run (the builder warns where they differ from the
//! checkpoint's), which is how a plugin is changed across a restart.

use std::path::{Path, PathBuf};

use tracing::{info, warn};

use crate::checkpoint::{CheckpointStorage, OperatorPlugin};
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

/// Sets `graph`'s operators to the plugins their newest checkpoint's run
/// was upgraded to, where the job file is unchanged since that run began
/// (see the module docs); returns those it set.
pub fn carry_upgrades(graph: &mut JobGraph) -> Vec<CarriedUpgrade> {
    let (Some(settings), Some(definition)) = (&graph.checkpoints, &graph.definition) else { return Vec::new() };
    let storage = CheckpointStorage::open(&settings.dir);
    let newest = storage.ok().and_then(|s| s.complete_ids().last().and_then(|&id| s.manifest(id).ok()));
    let Some(manifest) = newest.filter(|m| !m.finished) else { return Vec::new() };
    if manifest.job_file_sha256.as_deref() != Some(sha256_hex(definition.text.as_bytes()).as_str()) {
        return Vec::new();
    }
    let carried = upgrades(graph, &manifest.plugins, &|path| std::fs::read(path).ok().map(|bytes| sha256_hex(&bytes)));
    for upgrade in &carried {
        set_plugin(graph, &upgrade.uid, &upgrade.plugin);
        info!(
            job = %graph.name,
            operator = %upgrade.uid,
            plugin = %upgrade.plugin.display(),
            job_file_names = %upgrade.instead_of.display(),
            checkpoint = manifest.checkpoint,
            "resuming with the plugin the job was upgraded to while it ran; name it in the job file to keep it"
        );
    }
    carried
}

/// The operators of `graph` whose plugin (by digest, `digest_of` a file)
/// is not the one a checkpoint's run `ran`, where that one's file is there
/// with the digest the checkpoint recorded.
fn upgrades(graph: &JobGraph, ran: &[OperatorPlugin], digest_of: &dyn Fn(&Path) -> Option<String>) -> Vec<CarriedUpgrade> {
    let mut carried = Vec::new();
    for node in &graph.nodes {
        let NodeKind::Operator(operator) = &node.kind else { continue };
        let Some(ran) = ran.iter().find(|p| p.uid == node.name) else { continue };
        let Some(recorded) = &ran.sha256 else { continue };
        if digest_of(&operator.plugin).as_ref() == Some(recorded) {
            continue;
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

fn set_plugin(graph: &mut JobGraph, uid: &str, plugin: &Path) {
    for node in graph.nodes.iter_mut().filter(|n| n.name == uid) {
        if let NodeKind::Operator(operator) = &mut node.kind {
            operator.plugin = plugin.to_path_buf();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Overrides, parse};

    fn graph() -> JobGraph {
        let text = "name = \"j\"\n[[source]]\nname = \"in\"\ntype = \"generator\"\n\
                    [[operator]]\nuid = \"count\"\nplugin = \"v1.wasm\"\ninputs = [\"in\"]\n\
                    [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"count\"\n";
        parse(text, Path::new("/jobs"), Overrides::default()).unwrap()
    }

    fn ran(plugin: &str, sha256: &str) -> Vec<OperatorPlugin> {
        vec![OperatorPlugin { uid: "count".into(), plugin: plugin.into(), sha256: Some(sha256.into()) }]
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

    #[test]
    fn an_operator_resumes_with_the_plugin_it_was_upgraded_to_if_that_is_still_there() {
        let graph = graph();
        let carried = upgrades(&graph, &ran("/jobs/v2.wasm", "two"), &digest_of);
        let expected = CarriedUpgrade { uid: "count".into(), plugin: "/jobs/v2.wasm".into(), instead_of: "/jobs/v1.wasm".into() };
        assert_eq!(carried, [expected]);
        assert_eq!(upgrades(&graph, &ran("/jobs/v1.wasm", "one"), &digest_of), [], "not upgraded");
        assert_eq!(upgrades(&graph, &ran("/elsewhere/v1.wasm", "one"), &digest_of), [], "the same plugin by digest");
        assert_eq!(upgrades(&graph, &ran("/jobs/v3.wasm", "three"), &digest_of), [], "changed since: the job file's runs");
        assert_eq!(upgrades(&graph, &ran("/gone.wasm", "four"), &digest_of), [], "gone: the job file's runs");
    }
}
