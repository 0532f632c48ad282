//! `weir checkpoints DIR`: the checkpoints of a checkpoint directory, each
//! verified against its checksums, with its figures.

use std::path::Path;

use weir::checkpoint::CheckpointStorage;
use weir::plugin::now_ms;
use weir::savepoint::MANIFEST_FILE;

pub fn list(dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a directory; give a job's checkpoint_dir", dir.display());
    }
    if dir.join(MANIFEST_FILE).exists() {
        anyhow::bail!("{0} is a savepoint, not a checkpoint directory: see it with `weir savepoint inspect {0}`", dir.display());
    }
    let storage = CheckpointStorage::open(dir)?;
    let ids = storage.complete_ids();
    if ids.is_empty() {
        println!("no complete checkpoint in {}", dir.display());
        return Ok(());
    }
    println!(
        "{:>10}  {:<8}  {:>9}  {:>11}  {:>12}  {:>10}  {:>10}",
        "checkpoint", "state", "age", "duration", "alignment", "size", "written"
    );
    for id in ids {
        match storage.verify(id) {
            Ok(manifest) => {
                let stats = &manifest.stats;
                println!(
                    "{id:>10}  {:<8}  {:>7.1} s  {:>8.1} ms  {:>9.1} ms  {:>10}  {:>10}",
                    if manifest.finished { "finished" } else { "ok" },
                    (now_ms() - manifest.completed_at_ms) as f64 / 1000.0,
                    stats.duration_ms,
                    stats.alignment_ms,
                    bytes(stats.size_bytes),
                    bytes(stats.written_bytes),
                );
            }
            Err(reason) => println!("{id:>10}  CORRUPT   {reason}"),
        }
    }
    Ok(())
}

pub(crate) fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / 1048576.0),
        n => format!("{:.1} KiB", n as f64 / 1024.0),
    }
}
