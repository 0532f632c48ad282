//! A fork's own job file, so that it outlives the host that started it.
//!
//! A fork exists only in the host that runs it: its name, plugins, sinks
//! and checkpoint directory came with the request, not from a file. If the
//! host stops, the original job resumes from its job file, and the fork
//! would be lost with the events it had committed — unless it has a job
//! file of its own. So the host writes one, `job.toml` in the fork's
//! checkpoint directory: the original's job file with the fork's name,
//! checkpoint directory, plugins, sink paths, topics and transactional ids,
//! and every path made absolute (the file no longer sits beside the one
//! its relative paths were relative to). The rest of the file, comments and
//! layout included, is the original's as it was written (`toml_edit`). `weir run DIR/job.toml` then
//! resumes the fork from its newest checkpoint, as for any job.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, TableLike, Value, value};

use crate::dirs::absolute;
use crate::control::ControlError;
use crate::job::{JobGraph, Node, NodeKind, SinkSpec, SourceSpec};
use crate::savepoint::JobDefinition;

/// The name of a fork's job file in its checkpoint directory.
use crate::checkpoint::layout::FORK_JOB_FILE as FILE_NAME;

/// Writes the job file of `fork`, started from `savepoint` (see the module
/// docs), and makes it the graph's definition; `None` for a fork without a
/// checkpoint directory (nothing to resume from) or whose original had no
/// job file.
pub(super) fn write_fork_file(fork: &mut JobGraph, savepoint: &Path) -> Result<Option<PathBuf>, ControlError> {
    let (Some(settings), Some(original)) = (&fork.checkpoints, &fork.definition) else { return Ok(None) };
    let failed = |what: String| ControlError::Failed(format!("cannot write the job file of fork `{}`: {what}", fork.name));
    let mut file: DocumentMut = original.text.parse().map_err(|e| failed(format!("its original's job file does not parse: {e}")))?;
    let forked_from = file.get("name").and_then(Item::as_str).unwrap_or_default().to_owned();
    file["name"] = value(fork.name.clone());
    file["checkpoint_dir"] = path_value(&settings.dir);
    let file_parallelism = file.get("parallelism").and_then(Item::as_integer).unwrap_or(1);
    for (key, field) in [("source", "name"), ("operator", "uid"), ("sink", "name")] {
        for entry in file.get_mut(key).map(tables_of).unwrap_or_default() {
            let node = entry.get(field).and_then(Item::as_str).and_then(|name| fork.nodes.iter().find(|n| n.name == name));
            if let Some(node) = node {
                as_forked(entry, node);
                keep_parallelism(entry, node, file_parallelism);
            }
        }
    }
    let text = format!(
        "# The job file of fork `{}`, written by the Weir host that started it from job `{}` ({}).\n\
         # `weir run` it to resume the fork from its newest checkpoint (before its first,\n\
         # from savepoint {}, which it started from).\n\n{}",
        fork.name,
        forked_from,
        original.path.display(),
        savepoint.display(),
        file
    );
    let path = absolute(&settings.dir.join(FILE_NAME));
    write(&path, &text).map_err(|e| failed(format!("{}: {e}", path.display())))?;
    fork.definition = Some(JobDefinition { path: path.clone(), text });
    Ok(Some(path))
}

/// The tables of an array of them, `[[source]]` or `source = [{ … }]`.
fn tables_of(item: &mut Item) -> Vec<&mut dyn TableLike> {
    match item {
        Item::ArrayOfTables(tables) => tables.iter_mut().map(|t| t as &mut dyn TableLike).collect(),
        Item::Value(Value::Array(array)) => {
            array.iter_mut().filter_map(Value::as_inline_table_mut).map(|t| t as &mut dyn TableLike).collect()
        }
        _ => Vec::new(),
    }
}

/// Sets what the fork changed, and its paths made absolute, in the job
/// file's table of `node`.
fn as_forked(entry: &mut dyn TableLike, node: &Node) {
    match &node.kind {
        NodeKind::Source(SourceSpec::File { path, .. }) => {
            entry.insert("path", path_value(path));
        }
        NodeKind::Operator(operator) => {
            entry.insert("plugin", path_value(&operator.plugin));
        }
        NodeKind::Sink(SinkSpec::File { path, .. } | SinkSpec::Files { path, .. }) => {
            entry.insert("path", path_value(path));
        }
        NodeKind::Sink(SinkSpec::Kafka(kafka)) => {
            entry.insert("topic", value(kafka.topic.clone()));
            if let Some(prefix) = &kafka.transactional_id_prefix {
                entry.insert("transactional_id_prefix", value(prefix.clone()));
            }
        }
        _ => {}
    }
}

/// Writes `node`'s parallelism into its table where the file would give it
/// another — the original host's `--parallelism`, which the fork runs with
/// — so that the fork resumes as it ran, without a copy of its state by
/// key group.
fn keep_parallelism(entry: &mut dyn TableLike, node: &Node, file_parallelism: i64) {
    let runs_in_parallel = matches!(
        node.kind,
        NodeKind::Source(SourceSpec::Generator { .. } | SourceSpec::Kafka(_))
            | NodeKind::Operator(_)
            | NodeKind::Sink(SinkSpec::Kafka(_))
    );
    let named = entry.get("parallelism").and_then(Item::as_integer).unwrap_or(file_parallelism);
    if runs_in_parallel && named != i64::from(node.parallelism) {
        entry.insert("parallelism", value(i64::from(node.parallelism)));
    }
}

fn path_value(path: &Path) -> Item {
    value(absolute(path).to_string_lossy().into_owned())
}

/// Writes `text` to `path`, whole and durably (the file is what outlives a
/// crash of the host).
fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::dirs::create(dir)?;
    }
    crate::dirs::write_durably(path, text.as_bytes())
}
