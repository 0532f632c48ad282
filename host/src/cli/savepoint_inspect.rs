//! `weir savepoint inspect DIR`: what a savepoint holds — its job, the
//! state of each operator by uid, the sources' positions — verified against
//! its checksums; with `--entries`, the keyed entries themselves.

use std::path::Path;

use weir::savepoint::{Savepoint, SavepointEntry, StateKind};

use super::checkpoints::bytes;

pub fn inspect(dir: &Path, entries: bool, limit: Option<usize>) -> anyhow::Result<()> {
    let savepoint = Savepoint::open(dir)?;
    let verified = savepoint.verify();
    let manifest = &savepoint.manifest;
    out!("savepoint {} (format {})", dir.display(), manifest.format);
    out!("  job:             {}", manifest.job);
    out!("  checkpoint:      {}", manifest.checkpoint);
    out!("  max_parallelism: {}", manifest.max_parallelism);
    if let Some(job_file) = &manifest.job_file {
        out!("  job file:        {}", job_file.path.display());
    }
    out!("  size:            {}", bytes(manifest.files().map(|f| f.size).sum()));
    for operator in &manifest.operators {
        let count: u64 = operator.keyed.iter().map(|k| k.entries).sum();
        out!("operator `{}` (parallelism {}): {count} entries", operator.uid, operator.parallelism);
        out!("  plugin: {}", operator.plugin.display());
        if let Some(digest) = &operator.plugin_sha256 {
            out!("  sha256: {digest}");
        }
        for state in &operator.states {
            let expires = if state.expires { ", values expire" } else { "" };
            out!("  state {}: {} ({}{expires})", state.id, state.name, kind(state.kind));
        }
        if operator.broadcast.is_some() {
            out!("  broadcast state: yes");
        }
    }
    for source in &manifest.sources {
        let splits: Vec<String> = source
            .splits
            .iter()
            .map(|s| match s.end {
                Some(end) => format!("split {}: next {} (ends at {end})", s.id, s.next),
                None => format!("split {}: next {}", s.id, s.next),
            })
            .collect();
        out!("source `{}` (parallelism {}): {}", source.name, source.parallelism, splits.join(", "));
    }
    match &verified {
        Ok(()) => out!("every file matches its checksum"),
        Err(error) => out!("CORRUPT: {error}"),
    }
    if entries {
        print_entries(&savepoint, limit.unwrap_or(usize::MAX))?;
    }
    verified.map_err(Into::into)
}

fn print_entries(savepoint: &Savepoint, limit: usize) -> anyhow::Result<()> {
    let mut shown = 0;
    for operator in &savepoint.manifest.operators {
        savepoint.entries(&operator.uid, &mut |entry: SavepointEntry| {
            if shown < limit {
                out!(
                    "{}\t{}\t{}\t{}\t{}",
                    operator.uid,
                    entry.key_group,
                    entry.state,
                    text(&entry.key),
                    value(&entry)
                );
            }
            shown += 1;
        })?;
    }
    if shown > limit {
        out!("… {} more (--limit)", shown - limit);
    }
    Ok(())
}

fn kind(kind: StateKind) -> &'static str {
    match kind {
        StateKind::Value => "value",
        StateKind::Map => "map",
        StateKind::EventTimer => "event-time timers",
        StateKind::ProcessingTimer => "processing-time timers",
    }
}

/// Bytes as text when they are UTF-8, else as hex.
fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_owned(),
        _ => bytes.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

fn value(entry: &SavepointEntry) -> String {
    match (entry.kind.is_timer(), <[u8; 8]>::try_from(entry.value.as_slice()), entry.expires_at) {
        (true, Ok(timestamp), _) => format!("timer at {}", i64::from_le_bytes(timestamp)),
        (_, _, Some(expires_at)) => format!("{}\texpires at {expires_at}", text(&entry.value)),
        _ => text(&entry.value),
    }
}
