//! `weir checkpoints DIR`: the checkpoints of a checkpoint directory, each
//! verified against its checksums, with its figures.

use std::path::Path;

use weir::checkpoint::{CheckpointStorage, Manifest, PendingCommit, SavepointStart};
use weir::plugin::now_ms;
use weir::savepoint::{Savepoint, MANIFEST_FILE};

/// Lists the checkpoints of `dir`. Fails (exit status 1) when the job has
/// nothing to resume from — no checkpoint of its newest run verifies, and
/// that run did not start from a savepoint that is still there — so that a
/// script can tell.
///
/// A run from a savepoint leaves a record (see [`SavepointStart`]); the
/// checkpoints an earlier run took before it are listed as `superseded`,
/// since `weir run` never resumes from them again.
pub fn list(dir: &Path) -> anyhow::Result<()> {
    check_is_checkpoint_dir(dir)?;
    let storage = CheckpointStorage::open(dir)?;
    let start = SavepointStart::read(dir).map_err(anyhow::Error::msg)?;
    let first_own = start.as_ref().map_or(0, |start| start.first_checkpoint);
    let ids = storage.ids();
    if ids.is_empty() && start.is_none() {
        anyhow::bail!("no checkpoint in {}: the job has none to resume from", dir.display());
    }
    out!(
        "{:>10}  {:<10}  {:>9}  {:>11}  {:>12}  {:>10}  {:>10}",
        "checkpoint", "state", "age", "duration", "alignment", "size", "written"
    );
    let mut usable = 0;
    let mut oldest_usable = None;
    let mut newest_finished = false;
    for id in ids {
        if id < first_own {
            out!("{id:>10}  superseded  (an earlier run's, before the run from the savepoint below: never resumed from)");
            continue;
        }
        if !storage.is_complete(id) {
            out!("{id:>10}  incomplete  (no manifest: abandoned, timed out or failed (the job's log says why), or taken as the job stopped)");
            continue;
        }
        // Part files where the checkpoint wrote them (no job file here to say
        // where its sinks are now).
        match storage.verify_with_output(id, |_| None) {
            Ok(manifest) => {
                usable += 1;
                oldest_usable.get_or_insert(id);
                newest_finished = manifest.finished;
                let stats = &manifest.stats;
                out!(
                    "{id:>10}  {:<10}  {:>7.1} s  {:>8.1} ms  {:>9.1} ms  {:>10}  {:>10}",
                    if manifest.finished { "finished" } else { "ok" },
                    (now_ms() - manifest.completed_at_ms) as f64 / 1000.0,
                    stats.duration_ms,
                    stats.alignment_ms,
                    bytes(stats.size_bytes),
                    bytes(stats.written_bytes),
                );
                say_damaged_kafka_logs(&manifest);
            }
            Err(reason) => out!("{id:>10}  CORRUPT     {reason}"),
        }
    }
    if let Some((id, version)) = storage.complete_ids().last().and_then(|&id| Some((id, storage.newer_format(id)?))) {
        anyhow::bail!(
            "checkpoint {id} was written by a newer Weir (checkpoint format {version}): `weir run` resumes this \
             directory only with that Weir"
        );
    }
    if let Some(id) = oldest_usable {
        let newest = match newest_finished {
            true => "the job finished: `weir run` of the job file has nothing to do",
            false => "`weir run` of the job file resumes from the newest",
        };
        out!(
            "({newest}; to start from an older one, name it: `weir run JOB --from-savepoint {}`)",
            dir.join(CheckpointStorage::dir_name(id)).display()
        );
    }
    match start {
        Some(start) => report_savepoint_start(&start, &storage, usable),
        None if usable == 0 => anyhow::bail!("no checkpoint in {} verifies: the job has none to resume from", dir.display()),
        None => Ok(()),
    }
}

/// Names each pending Kafka epoch of `manifest` whose write-ahead log is
/// damaged: the checkpoint resumes, but that epoch can never be committed
/// (the job's log says the same, with the ways out).
fn say_damaged_kafka_logs(manifest: &Manifest) {
    for commit in manifest.commits_in(|_| None) {
        let PendingCommit::Kafka(commit) = commit else { continue };
        if let Err(error) = commit.check_log() {
            out!(
                "{:>10}  its pending output for kafka sink `{}` can never be committed: the write-ahead log {error}; \
                 move the file away to commit the rest without it, or restore a savepoint taken before checkpoint {}",
                "",
                commit.sink,
                commit.checkpoint
            );
        }
    }
}

/// Says which savepoint the newest run began from and what `weir run` will
/// resume from; fails if that is the savepoint and it is gone.
fn report_savepoint_start(start: &SavepointStart, storage: &CheckpointStorage, usable: usize) -> anyhow::Result<()> {
    let savepoint = start.savepoint.display();
    out!("the newest run started from savepoint {savepoint}, its checkpoints numbered from {}", start.first_checkpoint);
    if usable > 0 {
        return Ok(());
    }
    if start.has_checkpoints(storage) {
        anyhow::bail!(
            "no checkpoint of the newest run verifies: the job has none to resume from; restore the savepoint it \
             began from (`weir run JOB --from-savepoint {savepoint}`) or another one"
        );
    }
    if let Err(error) = Savepoint::open(&start.savepoint) {
        anyhow::bail!(
            "the newest run completed no checkpoint of its own, and its savepoint cannot be read ({error}): put it back, \
             or restore another one with `weir run JOB --from-savepoint DIR`"
        );
    }
    out!("it completed no checkpoint of its own: `weir run` of the job file restores that savepoint again");
    Ok(())
}

/// Refuses what is not a checkpoint directory, saying what to give instead.
fn check_is_checkpoint_dir(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a directory; give a job's checkpoint_dir", dir.display());
    }
    if dir.join(MANIFEST_FILE).exists() {
        anyhow::bail!("{0} is a savepoint, not a checkpoint directory: see it with `weir savepoint inspect {0}`", dir.display());
    }
    if let Some(parent) = dir.parent().filter(|_| CheckpointStorage::is_one_checkpoint(dir)) {
        anyhow::bail!(
            "{} is one checkpoint; give the directory that holds it: `weir checkpoints {}`",
            dir.display(),
            parent.display()
        );
    }
    Ok(())
}

pub(crate) fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / 1048576.0),
        n => format!("{:.1} KiB", n as f64 / 1024.0),
    }
}
