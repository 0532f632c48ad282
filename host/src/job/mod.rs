//! Job files: parsing ([`spec`]) and validation into a [`JobGraph`].
//!
//! A job is a directed acyclic graph of sources, operators and sinks.
//! Validation catches what would otherwise fail at run time — unknown
//! inputs, duplicate names, cycles, bad parallelism — and says which table
//! of the job file is wrong and how to fix it.

mod graph;
mod pinpoint;
pub mod spec;

use std::path::{Path, PathBuf};

use crate::checkpoint::OperatorPlugin;
use crate::savepoint::JobDefinition;

pub use graph::{Edge, JobGraph, Node, NodeId, NodeKind, OperatorNode, Partitioning, check_job_name};
pub use spec::{
    AlignmentSpec, FileFormat, GENERATOR_KEYS, GeneratorMode, JobSpec, OperatorSpec, OutputFormat, RestartSpec, RestartStrategy, SinkSpec, SourceSpec,
};

/// Options given on the command line that override the job file.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    /// The job's default parallelism, as Flink's `-p`: of every source,
    /// operator and Kafka sink that does not set its own.
    pub parallelism: Option<u32>,
}

/// A job file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot read job file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("job file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("job file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The largest job file read (one is a few KiB).
const MAX_JOB_FILE_BYTES: u64 = 16 << 20;

/// Reads, parses and validates the job file at `path`.
pub fn load(path: &Path, overrides: Overrides) -> Result<JobGraph, JobError> {
    let read = |source| JobError::Read { path: path.into(), source };
    let bytes = crate::dirs::read_file_of_at_most(path, MAX_JOB_FILE_BYTES).map_err(read)?;
    let text = String::from_utf8(bytes).map_err(|_| read(std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text")))?;
    // Absolute: checkpoints record the paths (of the files a sink has yet
    // to commit, for one), and a job may be resumed from another directory.
    let absolute = crate::dirs::absolute(path);
    let base = absolute.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut graph = parse(&text, &base, overrides).map_err(|error| match error {
        ParseError::Syntax(message) => JobError::Parse { path: path.into(), message },
        ParseError::Invalid(message) => JobError::Invalid { path: path.into(), message },
    })?;
    if let Some(why) = graph.checkpoints.as_ref().and_then(|settings| crate::dirs::obstacle(&settings.dir)) {
        return Err(JobError::Invalid { path: path.into(), message: format!("`checkpoint_dir`: {why}") });
    }
    let job_file = crate::dirs::resolved(&absolute);
    if let Some((sink, _)) = graph.sink_places().find(|(_, place)| crate::dirs::resolved(place) == job_file) {
        let message = format!("sink `{sink}` would write over the job file itself: give the sink another path");
        return Err(JobError::Invalid { path: path.into(), message });
    }
    graph.definition = Some(crate::savepoint::JobDefinition { path: absolute, text });
    Ok(graph)
}

/// The plugin each operator of the job file `definition` names, its path
/// made absolute — what the file says, whatever the job was upgraded to
/// since it was loaded; empty if the text no longer parses.
pub fn named_plugins(definition: &JobDefinition) -> Vec<OperatorPlugin> {
    let base = definition.path.parent().unwrap_or(Path::new(""));
    let Ok(graph) = parse(&definition.text, base, Overrides::default()) else { return Vec::new() };
    let operators = graph.nodes.into_iter().filter_map(|node| match node.kind {
        NodeKind::Operator(operator) => {
            let plugin = crate::dirs::absolute(&operator.plugin);
            Some(OperatorPlugin { uid: node.name, plugin, sha256: None, config_sha256: None })
        }
        _ => None,
    });
    operators.collect()
}

/// Why a job text was refused, before the file's path is attached.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{0}")]
    Syntax(String),
    #[error("{0}")]
    Invalid(String),
}

/// Parses and validates job text; relative paths are taken from `base`.
pub fn parse(text: &str, base: &Path, overrides: Overrides) -> Result<JobGraph, ParseError> {
    let spec: JobSpec = toml::from_str(text).map_err(|e| ParseError::Syntax(pinpoint::describe(text, &e)))?;
    JobGraph::build(spec, base, overrides).map_err(ParseError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job files the README starts users on load as they are: a
    /// field renamed or a rule added shows here first.
    #[test]
    fn every_example_job_file_is_valid() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut loaded = Vec::new();
        for entry in std::fs::read_dir(&examples).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let graph = load(&path, Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
                loaded.push((path.file_name().unwrap().to_string_lossy().into_owned(), graph));
            }
        }
        assert!(loaded.len() >= 7, "the examples: {:?}", loaded.iter().map(|(name, _)| name).collect::<Vec<_>>());
        let (_, exactly_once) = loaded.iter().find(|(name, _)| name == "exactly-once.toml").expect("exactly-once.toml");
        let budgets = crate::state::RocksDbMemory { block_cache_mb: 8, write_buffer_mb: 4, hot_entries_mb: 4 };
        assert_eq!(exactly_once.backend, crate::state::BackendConfig { kind: crate::state::BackendKind::Rocksdb, rocksdb: budgets });
    }

    /// `-p` sets the job's default parallelism; a node that sets its own
    /// keeps it, as in Flink.
    #[test]
    fn the_parallelism_override_is_the_default_not_every_nodes() {
        let text = "name = \"j\"\nparallelism = 2\n[[source]]\nname = \"gen\"\ntype = \"generator\"\nparallelism = 1\n\
                    [[operator]]\nuid = \"op\"\nplugin = \"p.wasm\"\ninputs = [\"gen\"]\nkey_by = true\n\
                    [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"op\"\n";
        let parallelism = |overrides| {
            let graph = parse(text, Path::new(""), overrides).unwrap_or_else(|e| panic!("{e:?}"));
            ["gen", "op"].map(|name| graph.nodes.iter().find(|n| n.name == name).unwrap().parallelism)
        };
        assert_eq!(parallelism(Overrides::default()), [1, 2]);
        assert_eq!(parallelism(Overrides { parallelism: Some(4) }), [1, 4]);
    }

    /// The limits an operator's line in the job file gives it.
    fn operator_limits(setting: &str) -> crate::plugin::Limits {
        let text = format!(
            "name = \"j\"\n[[source]]\nname = \"gen\"\ntype = \"generator\"\n\
             [[operator]]\nuid = \"op\"\nplugin = \"p.wasm\"\ninputs = [\"gen\"]\n{setting}\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"op\"\n"
        );
        let graph = parse(&text, Path::new(""), Overrides::default()).unwrap_or_else(|e| panic!("{e:?}"));
        let op = graph.nodes.iter().find_map(|node| match &node.kind {
            graph::NodeKind::Operator(op) => Some(op.limits),
            _ => None,
        });
        op.expect("the operator")
    }

    /// `call_timeout_ms`: absent, the default deadline; 0, none.
    #[test]
    fn call_timeout_ms_zero_means_no_deadline() {
        let timeout = |setting: &str| operator_limits(setting).call_timeout;
        let default = crate::plugin::Limits::default().call_timeout;
        assert_eq!(timeout(""), default);
        assert!(default.is_some());
        assert_eq!(timeout("call_timeout_ms = 250"), Some(std::time::Duration::from_millis(250)));
        assert_eq!(timeout("call_timeout_ms = 0"), None);
    }

    /// `timer_limit`: absent, the default bound; 0, none.
    #[test]
    fn timer_limit_zero_means_no_bound() {
        let timers = |setting: &str| operator_limits(setting).max_timers;
        assert_eq!(timers(""), crate::plugin::Limits::DEFAULT_TIMER_LIMIT);
        assert_eq!(timers("timer_limit = 5000"), 5000);
        assert_eq!(timers("timer_limit = 0"), usize::MAX);
    }
}
