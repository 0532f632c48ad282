//! The validated job graph: nodes in topological order, edges with their
//! partitioning decided.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Overrides;
use crate::connectors::kafka::Delivery;
use super::spec::{JobSpec, KafkaSourceSpec, OperatorSpec, RestartSpec, RestartStrategy, SinkSpec, SourceSpec};
use crate::checkpoint::CheckpointSettings;
use crate::plugin::Limits;
use crate::state::{BackendConfig, BackendKind, DEFAULT_MAX_PARALLELISM, MAX_PARALLELISM_RANGE};

/// Index of a node in [`JobGraph::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// How records travel along an edge from the upstream subtasks to the
/// downstream ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioning {
    /// Subtask i to subtask i (equal parallelism).
    Forward,
    /// Whole batches round-robin over the downstream subtasks.
    Rebalance,
    /// By key group of each record's key.
    KeyBy,
    /// Every batch to every downstream subtask.
    Broadcast,
}

/// An input of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: NodeId,
    /// The upstream output read: empty for the main output, else a side output.
    pub output: String,
    pub partitioning: Partitioning,
}

/// An operator as it will run.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorNode {
    pub plugin: PathBuf,
    pub config: Vec<(String, String)>,
    pub limits: Limits,
    pub key_by: bool,
}

impl OperatorNode {
    /// The SHA-256 of its `config` table: recorded with its state, so that
    /// state restored under another configuration is checked by the plugin
    /// first (a window size from the config decides where windows are).
    pub fn config_digest(&self) -> String {
        let mut bytes = Vec::new();
        for (key, value) in &self.config {
            for part in [key, value] {
                bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
                bytes.extend_from_slice(part.as_bytes());
            }
        }
        crate::plugin::sha256_hex(&bytes)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Source(SourceSpec),
    Operator(OperatorNode),
    Sink(SinkSpec),
}

/// A source, operator or sink with its parallelism and inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: NodeId,
    /// The source's or sink's name, or the operator's uid.
    pub name: String,
    pub parallelism: u32,
    pub kind: NodeKind,
    pub inputs: Vec<Edge>,
}

impl Node {
    /// "source `x`", "operator `x`" or "sink `x`", for messages.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            NodeKind::Source(_) => "source",
            NodeKind::Operator(_) => "operator",
            NodeKind::Sink(_) => "sink",
        };
        format!("{kind} `{}`", self.name)
    }
}

/// A validated job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobGraph {
    pub name: String,
    pub max_parallelism: u32,
    /// Sources first, then operators in topological order, then sinks.
    pub nodes: Vec<Node>,
    pub backend: BackendConfig,
    /// Checkpointing, if the job file enables it.
    pub checkpoints: Option<CheckpointSettings>,
    pub restart: RestartSpec,
    /// The job file it was loaded from (savepoints keep it, so that a job
    /// can be forked from a savepoint alone).
    pub definition: Option<crate::savepoint::JobDefinition>,
}

impl RestartSpec {
    /// The delay before restart number `attempt` (from 1), or `None` when
    /// no more restarts are allowed.
    pub fn delay_before(&self, attempt: u32) -> Option<Duration> {
        if attempt > self.max_attempts {
            return None;
        }
        let base = Duration::from_millis(self.delay_ms);
        match self.strategy {
            RestartStrategy::None => None,
            RestartStrategy::FixedDelay => Some(base),
            RestartStrategy::ExponentialBackoff => {
                let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
                Some((base * factor).min(Duration::from_millis(self.max_delay_ms)))
            }
        }
    }
}

/// With checkpoints and no `[restart]` table, a failed job is restarted
/// from its last checkpoint up to 3 times, 1 s apart; without checkpoints,
/// it is not restarted.
fn restart_policy(spec: &JobSpec) -> RestartSpec {
    let strategy = if spec.checkpoint_dir.is_some() { RestartStrategy::FixedDelay } else { RestartStrategy::None };
    spec.restart.clone().unwrap_or_else(|| RestartSpec::with_defaults(strategy))
}

/// Checkpoints that may fail in a row before the job fails over, unless
/// the job file says otherwise.
const DEFAULT_TOLERABLE_FAILURES: u32 = 3;

fn checkpoint_settings(spec: &JobSpec, base: &Path) -> Result<Option<CheckpointSettings>, String> {
    if spec.checkpoint_dir.as_ref().is_some_and(|dir| dir.as_os_str().is_empty()) {
        return Err("`checkpoint_dir` is empty: name a directory of its own (relative to the job file), or leave the \
                    key out for a job without checkpoints"
            .into());
    }
    let Some(dir) = &spec.checkpoint_dir else {
        if spec.checkpoint_interval_ms.is_some()
            || spec.checkpoints_retained.is_some()
            || spec.checkpoint_timeout_ms.is_some()
            || spec.tolerable_failed_checkpoints.is_some()
        {
            return Err(
                "checkpoint_interval_ms, checkpoints_retained, checkpoint_timeout_ms and tolerable_failed_checkpoints \
                 need checkpoint_dir: add it"
                    .into(),
            );
        }
        return Ok(None);
    };
    let interval = spec.checkpoint_interval_ms.unwrap_or(1000);
    if interval == 0 {
        return Err("checkpoint_interval_ms must be at least 1".into());
    }
    let retain = spec.checkpoints_retained.unwrap_or(3);
    if retain == 0 {
        return Err("checkpoints_retained must be at least 1".into());
    }
    let timeout = spec.checkpoint_timeout_ms.unwrap_or(120_000);
    if timeout == 0 {
        return Err("checkpoint_timeout_ms must be at least 1".into());
    }
    Ok(Some(CheckpointSettings {
        dir: base.join(dir),
        interval: Duration::from_millis(interval),
        retain,
        timeout: Duration::from_millis(timeout),
        tolerable_failures: spec.tolerable_failed_checkpoints.unwrap_or(DEFAULT_TOLERABLE_FAILURES),
    }))
}

fn backend_config(spec: &JobSpec) -> Result<BackendConfig, String> {
    let kind = spec.state_backend;
    let Some(rocksdb) = spec.rocksdb else { return Ok(BackendConfig::new(kind)) };
    if kind != BackendKind::Rocksdb {
        return Err(format!(
            "the [rocksdb] table sets RocksDB's memory, but state_backend is \"{kind}\": set state_backend = \"rocksdb\" or remove the table"
        ));
    }
    rocksdb.validate()?;
    Ok(BackendConfig { kind, rocksdb })
}

impl JobGraph {
    /// The job's Kafka sinks, whose commits the checkpoint coordinator makes.
    pub fn kafka_sinks(&self) -> Vec<crate::connectors::kafka::KafkaSinkSpec> {
        let sinks = self.nodes.iter().filter_map(|node| match &node.kind {
            NodeKind::Sink(SinkSpec::Kafka(spec)) => Some(spec.clone()),
            _ => None,
        });
        sinks.collect()
    }

    /// Where each `file` and `files` sink writes: (name, its file or
    /// directory).
    pub fn sink_places(&self) -> impl Iterator<Item = (&str, &std::path::Path)> {
        self.nodes.iter().filter_map(|node| match &node.kind {
            NodeKind::Sink(SinkSpec::File { path, .. } | SinkSpec::Files { path, .. }) => Some((node.name.as_str(), path.as_path())),
            _ => None,
        })
    }

    /// The directory of `files` sink `name`.
    pub fn files_sink_dir(&self, name: &str) -> Option<&std::path::Path> {
        self.nodes.iter().find(|node| node.name == name).and_then(|node| match &node.kind {
            NodeKind::Sink(SinkSpec::Files { path, .. }) => Some(path.as_path()),
            _ => None,
        })
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// The operator with uid `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorNode> {
        self.nodes.iter().find(|n| n.name == uid).and_then(|node| match &node.kind {
            NodeKind::Operator(operator) => Some(operator),
            _ => None,
        })
    }

    /// The operator with uid `uid`, to change (its plugin, for an upgrade).
    pub fn operator_mut(&mut self, uid: &str) -> Option<&mut OperatorNode> {
        self.nodes.iter_mut().find(|n| n.name == uid).and_then(|node| match &mut node.kind {
            NodeKind::Operator(operator) => Some(operator),
            _ => None,
        })
    }

    /// The nodes reading from `id`, with the index of that input among
    /// their inputs.
    pub fn consumers(&self, id: NodeId) -> impl Iterator<Item = (&Node, u32, &Edge)> {
        self.nodes.iter().flat_map(move |node| {
            node.inputs.iter().enumerate().filter(move |(_, e)| e.from == id).map(move |(i, e)| (node, i as u32, e))
        })
    }

    pub(super) fn build(spec: JobSpec, base: &Path, overrides: Overrides) -> Result<Self, String> {
        let max_parallelism = spec.max_parallelism.unwrap_or(DEFAULT_MAX_PARALLELISM);
        if !MAX_PARALLELISM_RANGE.contains(&max_parallelism) {
            let (least, most) = MAX_PARALLELISM_RANGE.into_inner();
            return Err(format!("max_parallelism = {max_parallelism} must be between {least} and {most}"));
        }
        let parallelism = overrides.parallelism.or(spec.parallelism).unwrap_or(1);
        let job = if overrides.parallelism.is_some() { "the job (-p on the command line)" } else { "the job" };
        check_parallelism(job, parallelism, max_parallelism).map_err(|error| {
            // The key groups are fixed for the life of a job's state.
            format!(
                "{error}; max_parallelism, the number of key groups, cannot change once the job has state \
                 (a new job may set a larger one)"
            )
        })?;
        check_job_name(&spec.name)?;
        if spec.operators.len() > MAX_OPERATORS {
            return Err(format!(
                "the job has {} operators, more than the {MAX_OPERATORS} a job may have: split it into several jobs",
                spec.operators.len()
            ));
        }
        check_names(&spec)?;
        check_connectors(&spec, base)?;
        if spec.sources.is_empty() {
            return Err("the job has no source: add a [[source]] table".into());
        }
        if spec.sinks.is_empty() {
            return Err("the job has no sink, so its results would go nowhere: add a [[sink]] table".into());
        }

        let mut nodes = Vec::new();
        let mut ids: HashMap<String, NodeId> = HashMap::new();
        for source in &spec.sources {
            let p = source_parallelism(source, parallelism)?;
            check_parallelism(&format!("source `{}`", source.name()), p, max_parallelism)?;
            ids.insert(source.name().to_owned(), NodeId(nodes.len()));
            nodes.push(Node {
                id: NodeId(nodes.len()),
                name: source.name().to_owned(),
                parallelism: p,
                kind: NodeKind::Source(resolve_source(source.clone(), base)),
                inputs: Vec::new(),
            });
        }
        for op in topological_order(&spec.operators)? {
            let p = op.parallelism.unwrap_or(parallelism);
            check_parallelism(&format!("operator `{}`", op.uid), p, max_parallelism)?;
            let what = format!("operator `{}`", op.uid);
            let regular = op.inputs.iter().map(|input| edge(&what, input, op.key_by, p, &ids, &nodes));
            let broadcast = op.broadcast.iter().map(|input| {
                edge(&what, input, false, p, &ids, &nodes).map(|e| Edge { partitioning: Partitioning::Broadcast, ..e })
            });
            let inputs = regular.chain(broadcast).collect::<Result<_, _>>()?;
            if op.inputs.is_empty() {
                return Err(format!("operator `{}` has no inputs: list at least one in `inputs`", op.uid));
            }
            check_inputs_once(op)?;
            ids.insert(op.uid.clone(), NodeId(nodes.len()));
            nodes.push(Node {
                id: NodeId(nodes.len()),
                name: op.uid.clone(),
                parallelism: p,
                kind: NodeKind::Operator(operator_node(op, base)?),
                inputs,
            });
        }
        for sink in &spec.sinks {
            let what = format!("sink `{}`", sink.name());
            let p = sink_parallelism(sink, parallelism);
            check_parallelism(&what, p, max_parallelism)?;
            let input = edge(&what, sink.input(), false, p, &ids, &nodes)?;
            nodes.push(Node {
                id: NodeId(nodes.len()),
                name: sink.name().to_owned(),
                parallelism: p,
                kind: NodeKind::Sink(resolve_sink(sink.clone(), base)),
                inputs: vec![input],
            });
        }
        let checkpoints = checkpoint_settings(&spec, base)?;
        let restart = restart_policy(&spec);
        let backend = backend_config(&spec)?;
        Ok(JobGraph { name: spec.name, max_parallelism, nodes, backend, checkpoints, restart, definition: None })
    }
}

fn check_parallelism(what: &str, parallelism: u32, max_parallelism: u32) -> Result<(), String> {
    if parallelism == 0 || parallelism > max_parallelism {
        return Err(format!(
            "{what} has parallelism {parallelism}; it must be between 1 and max_parallelism ({max_parallelism})"
        ));
    }
    Ok(())
}

fn source_parallelism(source: &SourceSpec, job: u32) -> Result<u32, String> {
    match source {
        // A file is read by one subtask: its position is one byte offset.
        SourceSpec::File { .. } => Ok(1),
        SourceSpec::Generator { parallelism, .. } | SourceSpec::Kafka(KafkaSourceSpec { parallelism, .. }) => {
            Ok(parallelism.unwrap_or(job))
        }
    }
}

/// A Kafka sink runs in parallel (a transactional id per subtask); the
/// other sinks write one stream (stdout, a file, a directory) from one
/// subtask.
fn sink_parallelism(sink: &SinkSpec, job: u32) -> u32 {
    match sink {
        SinkSpec::Kafka(kafka) => kafka.parallelism.unwrap_or(job),
        _ => 1,
    }
}

/// A setting of `source` that means something only for events with
/// timestamps: its name, what it would do, and what to remove.
fn setting_needing_event_time(source: &SourceSpec) -> Option<(&'static str, &'static str, &'static str)> {
    if source.watermark_alignment().is_some() {
        Some(("`watermark_alignment`", "to align", "the table"))
    } else if !source.watermark_settings().out_of_orderness.is_zero() {
        Some(("`out_of_orderness_ms`", "to bound", "the setting"))
    } else {
        None
    }
}

/// Connector tables that deserialised can still be wrong (Kafka brokers,
/// managed librdkafka properties).
fn check_connectors(spec: &JobSpec, base: &Path) -> Result<(), String> {
    for source in &spec.sources {
        if let Some((setting, what_for, remove)) = setting_needing_event_time(source).filter(|_| !source.has_event_time()) {
            return Err(format!(
                "source `{}` has {setting}, but its events have no event time {what_for}: \
                 give them timestamps (a generator's `events_per_ms`, a file's `format = \"json\"`, \
                 a Kafka source's `timestamp`) or remove {remove}",
                source.name()
            ));
        }
        source.check_numbers()?;
        if let SourceSpec::File { name, path, .. } = source {
            if path.as_os_str().is_empty() {
                return Err(format!("source `{name}` has an empty `path`: name the file it reads"));
            }
            if base.join(path).is_dir() {
                return Err(format!("source `{name}` reads {}, which is a directory: name a file", path.display()));
            }
        }
        if let SourceSpec::Kafka(kafka) = source {
            kafka.validate()?;
        }
    }
    // What the job reads, which no sink may write over.
    let read: HashMap<PathBuf, String> = spec
        .sources
        .iter()
        .filter_map(|source| match source {
            SourceSpec::File { name, path, .. } => Some((crate::dirs::resolved(path), format!("source `{name}`'s input"))),
            _ => None,
        })
        .chain(spec.operators.iter().map(|op| (crate::dirs::resolved(&op.plugin), format!("operator `{}`'s plugin", op.uid))))
        .collect();
    let checkpoints = spec.checkpoint_dir.as_deref().map(crate::dirs::resolved);
    // (name, where it writes, whether a `files` sink's directory).
    let mut places: Vec<(&String, PathBuf, bool)> = Vec::new();
    for sink in &spec.sinks {
        sink.check_numbers()?;
        if let SinkSpec::Files { name, roll_interval_ms, roll_size_mb, .. } = sink
            && (roll_interval_ms.is_some() || roll_size_mb.is_some())
            && spec.checkpoint_dir.is_none()
        {
            return Err(format!(
                "files sink `{name}` has a rolling policy, but the job takes no checkpoints, so its one part is \
                 committed at the end of input: set `checkpoint_dir`, or remove `roll_interval_ms` and `roll_size_mb`"
            ));
        }
        // By the place named, however spelt (`x.txt`, `./x.txt`, a link).
        if let SinkSpec::File { name, path, .. } | SinkSpec::Files { name, path, .. } = sink {
            if path.as_os_str().is_empty() {
                return Err(format!("sink `{name}` has an empty `path`: name where it writes"));
            }
            let place = crate::dirs::resolved(path);
            if checkpoints.as_ref().is_some_and(|checkpoints| place.starts_with(checkpoints)) {
                return Err(format!(
                    "sink `{name}` would write inside the job's checkpoint directory, {}, whose clean-up deletes \
                     the files there it does not know: give the sink a path outside it",
                    path.display()
                ));
            }
            if let Some(what) = read.get(&place) {
                return Err(format!("sink `{name}` would write over {what}, {}: give the sink another path", path.display()));
            }
            if let Some((other, _, _)) = places.iter().find(|(_, other_place, _)| *other_place == place) {
                return Err(format!(
                    "sinks `{other}` and `{name}` both write to {}, and would overwrite each other: give each its own path",
                    path.display()
                ));
            }
            places.push((name, place, matches!(sink, SinkSpec::Files { .. })));
        }
        if let SinkSpec::Kafka(kafka) = sink {
            kafka.validate()?;
            if kafka.delivery == Delivery::ExactlyOnce && spec.checkpoint_dir.is_none() {
                return Err(format!(
                    "kafka sink `{}` commits its output when a checkpoint completes, but the job takes none: \
                     set `checkpoint_dir`, or `delivery = \"at-least-once\"` on the sink",
                    kafka.name
                ));
            }
        }
    }
    // A `files` sink's directory is its own: it takes what it finds there
    // for the output of an earlier run.
    for (name, place, _) in &places {
        if let Some((directory_of, _, _)) = places.iter().find(|(other, dir, files)| *files && other != name && place.starts_with(dir)) {
            return Err(format!(
                "sink `{name}` would write inside files sink `{directory_of}`'s directory, which holds that sink's \
                 part files only: give it a path outside it"
            ));
        }
    }
    Ok(())
}

/// The most operators a job may have: far more than any job needs, and few
/// enough that a line of them chained into one thread (calls nested in
/// calls) fits in its stack, as does the check for cycles.
const MAX_OPERATORS: usize = 1000;

/// The longest job name, in bytes.
const MAX_JOB_NAME: usize = 200;

/// A job's name names its savepoints and a fork's checkpoint directory,
/// so it must be one plain path component.
pub fn check_job_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']);
    if !plain || name.chars().any(char::is_control) {
        return Err(format!(
            "the job name {name:?} must be non-empty, must not be `.` or `..`, and must not contain `/`, `\\` \
             or control characters (it names directories)"
        ));
    }
    // Directory names are at most 255 bytes, with room for what is added
    // to the name (`savepoint-NAME-1764870000000`).
    if name.len() > MAX_JOB_NAME {
        return Err(format!("the job name is {} bytes long; at most {MAX_JOB_NAME} (it names directories)", name.len()));
    }
    Ok(())
}

/// Names must be unique across sources, operators and sinks, and must not
/// contain '.', which separates an operator uid from a side output. They
/// name checkpoint files (`NAME-SUBTASK.…`), so they are plain file names
/// of at most [`MAX_JOB_NAME`] bytes.
fn check_names(spec: &JobSpec) -> Result<(), String> {
    let names = spec
        .sources
        .iter()
        .map(|s| ("source name", s.name()))
        .chain(spec.operators.iter().map(|o| ("operator uid", o.uid.as_str())))
        .chain(spec.sinks.iter().map(|s| ("sink name", s.name())));
    let mut seen = HashSet::new();
    for (kind, name) in names {
        if name.is_empty() || name.contains(['.', '/', '\\']) || name.chars().any(char::is_control) {
            return Err(format!("{kind} {name:?} must be non-empty and must not contain '.', '/', '\\' or control characters"));
        }
        if name.len() > MAX_JOB_NAME {
            let length = name.len();
            return Err(format!("{kind} `{name}` is {length} bytes long; at most {MAX_JOB_NAME} (it names checkpoint files)"));
        }
        if !seen.insert(name) {
            return Err(format!("the name `{name}` is used twice; sources, operators and sinks need distinct names"));
        }
    }
    Ok(())
}

/// An input listed twice would deliver its events twice — and, once in
/// `inputs` and once in `broadcast`, both keyed and not.
fn check_inputs_once(op: &OperatorSpec) -> Result<(), String> {
    let mut seen = HashSet::new();
    for input in op.inputs.iter().chain(&op.broadcast) {
        if !seen.insert(input) {
            let both = op.inputs.contains(input) && op.broadcast.contains(input);
            let lists = if both { "both in `inputs` and in `broadcast`" } else { "twice" };
            return Err(format!("operator `{}` lists `{input}` {lists}: list each input once", op.uid));
        }
    }
    Ok(())
}

/// Orders operators so that every operator comes after its inputs, or names
/// the operators of a cycle.
/// Inputs that name nothing are left for [`edge`] to report.
fn topological_order(operators: &[OperatorSpec]) -> Result<Vec<&OperatorSpec>, String> {
    let by_uid: HashMap<&str, &OperatorSpec> = operators.iter().map(|o| (o.uid.as_str(), o)).collect();
    // Depth-first search with colours: grey = on the current path.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Grey,
        Black,
    }
    fn visit<'a>(
        op: &'a OperatorSpec,
        by_uid: &HashMap<&str, &'a OperatorSpec>,
        marks: &mut HashMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
        order: &mut Vec<&'a OperatorSpec>,
    ) -> Result<(), String> {
        match marks.get(op.uid.as_str()) {
            Some(Mark::Black) => return Ok(()),
            Some(Mark::Grey) => {
                let start = path.iter().position(|uid| *uid == op.uid).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(&op.uid);
                return Err(format!(
                    "operators form a cycle: {}; a job must be acyclic",
                    cycle.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(" → ")
                ));
            }
            None => {}
        }
        marks.insert(&op.uid, Mark::Grey);
        path.push(&op.uid);
        for input in op.inputs.iter().chain(&op.broadcast) {
            let from = input.split_once('.').map_or(input.as_str(), |(uid, _)| uid);
            if let Some(upstream) = by_uid.get(from) {
                visit(upstream, by_uid, marks, path, order)?;
            }
        }
        path.pop();
        marks.insert(&op.uid, Mark::Black);
        order.push(op);
        Ok(())
    }
    let mut marks = HashMap::new();
    let mut order = Vec::new();
    for op in operators {
        visit(op, &by_uid, &mut marks, &mut Vec::new(), &mut order)?;
    }
    Ok(order)
}

/// The edge for input `input` ("name" or "uid.side-output") of a node.
fn edge(
    what: &str,
    input: &str,
    key_by: bool,
    parallelism: u32,
    ids: &HashMap<String, NodeId>,
    nodes: &[Node],
) -> Result<Edge, String> {
    let (name, output) = input.split_once('.').unwrap_or((input, ""));
    if input.ends_with('.') {
        return Err(format!(
            "{what} reads from `{input}`, which names no side output after the `.`: write `{name}` for its main \
             output, or `{name}.OUTPUT` for a side output"
        ));
    }
    let from = *ids.get(name).ok_or_else(|| {
        let mut known: Vec<&str> = ids.keys().map(String::as_str).collect();
        known.sort_unstable();
        format!(
            "{what} reads from `{input}`, which is not a source or operator of this job (known: {})",
            known.join(", ")
        )
    })?;
    let upstream = &nodes[from.0];
    if !output.is_empty() && !matches!(upstream.kind, super::NodeKind::Operator(_)) {
        return Err(format!("{what} reads side output `{input}`, but `{name}` is not an operator"));
    }
    let partitioning = if key_by {
        Partitioning::KeyBy
    } else if upstream.parallelism == parallelism {
        Partitioning::Forward
    } else {
        Partitioning::Rebalance
    };
    Ok(Edge { from, output: output.to_owned(), partitioning })
}

fn operator_node(op: &OperatorSpec, base: &Path) -> Result<OperatorNode, String> {
    let config = op
        .config
        .iter()
        .map(|(key, value)| {
            if key.starts_with("weir.") {
                return Err(format!(
                    "operator `{}`: config `{key}`: keys starting with `weir.` are the host's (it sets them for \
                     every instance); give the key another name",
                    op.uid
                ));
            }
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => value.to_string(),
                _ => {
                    return Err(format!(
                        "operator `{}`: config `{key}` must be a string, number or boolean",
                        op.uid
                    ));
                }
            };
            Ok((key.clone(), text))
        })
        .collect::<Result<_, _>>()?;
    let defaults = Limits::default();
    let memory_mb = op.memory_limit_mb.unwrap_or(Limits::DEFAULT_MEMORY_MB);
    if !(1..=4096).contains(&memory_mb) {
        return Err(format!("operator `{}`: memory_limit_mb = {memory_mb} must be between 1 and 4096", op.uid));
    }
    let limits = Limits {
        memory_bytes: (memory_mb << 20) as usize,
        // 0: no deadline (a trusted plugin, compiled without the checks).
        call_timeout: match op.call_timeout_ms {
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
            None => defaults.call_timeout,
        },
        // 0: no bound, for a plugin you trust.
        max_timers: match op.timer_limit {
            Some(0) => usize::MAX,
            Some(limit) => usize::try_from(limit).unwrap_or(usize::MAX),
            None => defaults.max_timers,
        },
    };
    Ok(OperatorNode { plugin: base.join(&op.plugin), config, limits, key_by: op.key_by })
}

fn resolve_source(mut source: SourceSpec, base: &Path) -> SourceSpec {
    if let SourceSpec::File { path, .. } = &mut source {
        *path = base.join(&*path);
    }
    source
}

fn resolve_sink(sink: SinkSpec, base: &Path) -> SinkSpec {
    match sink {
        SinkSpec::File { name, input, path, format } => SinkSpec::File { name, input, path: base.join(path), format },
        SinkSpec::Files { path, name, input, format, roll_interval_ms, roll_size_mb } => {
            SinkSpec::Files { path: base.join(path), name, input, format, roll_interval_ms, roll_size_mb }
        }
        other => other,
    }
}
