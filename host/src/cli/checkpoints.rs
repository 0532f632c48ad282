//! `weir checkpoints DIR`: the checkpoints of a checkpoint directory, each
//! verified against its checksums, with its figures.

use std::path::Path;

use weir::checkpoint::CheckpointStorage;
use weir::plugin::now_ms;
use weir::savepoint::MANIFEST_FILE;

/// Lists the checkpoints of `dir`. Fails (exit status 1) when none of them
/// verifies, so that a script can tell whether the job has one to resume
/// from.
pub fn list(dir: &Path) -> anyhow::Result<()> {
    check_is_checkpoint_dir(dir)?;
    let storage = CheckpointStorage::open(dir)?;
    let ids = storage.ids();
    if ids.is_empty() {
        anyhow::bail!("no checkpoint in {}: the job has none to resume from", dir.display());
    }
    println!(
        "{:>10}  {:<10}  {:>9}  {:>11}  {:>12}  {:>10}  {:>10}",
        "checkpoint", "state", "age", "duration", "alignment", "size", "written"
    );
    let mut usable = 0;
    for id in ids {
        if !storage.is_complete(id) {
            println!("{id:>10}  incomplete  (no manifest: taken when the job stopped, or its manifest was lost)");
            continue;
        }
        match storage.verify(id) {
            Ok(manifest) => {
                usable += 1;
                let stats = &manifest.stats;
                println!(
                    "{id:>10}  {:<10}  {:>7.1} s  {:>8.1} ms  {:>9.1} ms  {:>10}  {:>10}",
                    if manifest.finished { "finished" } else { "ok" },
                    (now_ms() - manifest.completed_at_ms) as f64 / 1000.0,
                    stats.duration_ms,
                    stats.alignment_ms,
                    bytes(stats.size_bytes),
                    bytes(stats.written_bytes),
                );
            }
            Err(reason) => println!("{id:>10}  CORRUPT     {reason}"),
        }
    }
    if usable == 0 {
        anyhow::bail!("no checkpoint in {} verifies: the job has none to resume from", dir.display());
    }
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
