//! What the `files` sink deleted when a job went back in time.
//!
//! Restored from checkpoint `k` (an older savepoint, say), the sink deletes
//! the parts committed after `k`: their records are produced again. The
//! parts of the checkpoints between `k` and the newest deleted are then
//! gone — for good, if a later run restores one of those checkpoints (a
//! newer savepoint of the earlier history) instead of continuing from
//! `k`. So each subtask records every such rollback in `.rollbacks-S` in the
//! sink's directory (`k newest at_ms` per line, before deleting), and a
//! restore of a checkpoint after `k` and up to the newest, taken before the
//! rollback, is refused. Checkpoints of the run that went back are taken
//! after it, and restore as usual.

use std::io::Write;
use std::path::Path;

use super::ConnectorError;

const PREFIX: &str = ".rollbacks-";

/// Records that subtask `subtask` went back to checkpoint `restored`,
/// deleting the parts of checkpoints up to `newest` (`u64::MAX`: the final
/// part too), now.
pub(super) fn record(dir: &Path, subtask: u32, restored: u64, newest: u64) -> std::io::Result<()> {
    let path = dir.join(format!("{PREFIX}{subtask}"));
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(file, "{restored} {newest} {}", crate::plugin::now_ms())?;
    file.sync_all()
}

/// Fails if restoring checkpoint `restored`, taken at `taken_at_ms`, would
/// leave output that a rollback since deleted missing.
pub(super) fn refuse_output_rolled_back(dir: &Path, restored: u64, taken_at_ms: i64) -> Result<(), ConnectorError> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let files = entries.filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX));
    for file in files {
        let path = file.path();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
            tracing::warn!(file = %path.display(), %error, "cannot read a record of rollbacks: a restore it would refuse is let through");
            String::new()
        });
        let lines = text.lines().filter(|line| !line.trim().is_empty());
        let parsed = lines.filter_map(|line| {
            let rollback = parse_line(line);
            if rollback.is_none() {
                tracing::warn!(file = %path.display(), line, "a record of rollbacks holds a line that is not one; it is passed over");
            }
            rollback
        });
        for (back_to, newest, at_ms) in parsed {
            if back_to < restored && restored <= newest && taken_at_ms < at_ms {
                return Err(ConnectorError::Restore(format!(
                    "{} lost the output of the checkpoints after {back_to} when the job went back to checkpoint \
                     {back_to} (from a savepoint); checkpoint {restored}, taken before that, would leave it missing. \
                     Restore the savepoint of checkpoint {back_to} or one taken since, or move {} away to start afresh",
                    dir.display(),
                    dir.display()
                )));
            }
        }
    }
    Ok(())
}

fn parse_line(line: &str) -> Option<(u64, u64, i64)> {
    let mut fields = line.split_whitespace();
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_whose_output_a_later_rollback_deleted_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        refuse_output_rolled_back(dir.path(), 9, 0).unwrap();
        record(dir.path(), 1, 3, 12).unwrap();
        let now = crate::plugin::now_ms();
        let error = refuse_output_rolled_back(dir.path(), 9, now - 60_000).unwrap_err().to_string();
        assert!(error.contains("went back to checkpoint 3") && error.contains("checkpoint 9, taken before that"), "{error}");
        refuse_output_rolled_back(dir.path(), 3, now - 60_000).unwrap();
        refuse_output_rolled_back(dir.path(), 13, now - 60_000).unwrap();
        refuse_output_rolled_back(dir.path(), 9, now + 60_000).unwrap();
    }
}
