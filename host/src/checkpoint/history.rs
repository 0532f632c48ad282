//! What a run remembers of the checkpoints it completed: how many, and the
//! figures of the newest — not of all, since a job checkpointing every
//! second for months would hold millions.

use super::{CheckpointStats, LatestCheckpoint};

/// How many checkpoints' figures a run keeps at least.
pub const KEPT_FIGURES: usize = 1000;

/// The checkpoints a run completed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointHistory {
    /// The newest, oldest first: between [`KEPT_FIGURES`] and twice as many
    /// once that many have completed.
    kept: Vec<(u64, CheckpointStats)>,
    count: u64,
    /// Checkpoints abandoned or failed (timed out, a subtask could not
    /// snapshot, the manifest could not be written).
    failed: u64,
    /// Of those, how many since the last that completed.
    failed_in_a_row: u64,
    /// Why the newest that failed did.
    last_failure: Option<String>,
}

impl CheckpointHistory {
    /// Checkpoint `id` completed with `stats`.
    pub fn record(&mut self, id: u64, stats: CheckpointStats) {
        if self.kept.len() == 2 * KEPT_FIGURES {
            self.kept.drain(..KEPT_FIGURES);
        }
        self.kept.push((id, stats));
        self.count += 1;
        self.failed_in_a_row = 0;
    }

    /// How many completed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// A checkpoint was abandoned or failed, for `reason`.
    pub fn record_failure(&mut self, reason: &str) {
        self.failed += 1;
        self.failed_in_a_row += 1;
        self.last_failure = Some(reason.to_owned());
    }

    /// Why the newest that failed did.
    pub fn last_failure(&self) -> Option<&str> {
        self.last_failure.as_deref()
    }

    /// How many failed since the last that completed.
    pub fn failed_in_a_row(&self) -> u64 {
        self.failed_in_a_row
    }

    /// How many were abandoned or failed.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// The figures of the newest (at least [`KEPT_FIGURES`] of them, or
    /// all), oldest first.
    pub fn figures(&self) -> &[(u64, CheckpointStats)] {
        &self.kept
    }

    /// The newest, if any completed.
    pub fn latest(&self) -> Option<LatestCheckpoint> {
        let (id, stats) = self.kept.last()?;
        Some(LatestCheckpoint { id: *id, completed: self.count, stats: stats.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(size_bytes: u64) -> CheckpointStats {
        CheckpointStats { size_bytes, ..CheckpointStats::default() }
    }

    #[test]
    fn counts_every_checkpoint_and_keeps_the_newest_figures() {
        let mut history = CheckpointHistory::default();
        assert_eq!(history.latest(), None);
        for id in 1..=5 * KEPT_FIGURES as u64 + 7 {
            history.record(id, stats(id));
            let kept = history.figures();
            assert!(kept.len() <= 2 * KEPT_FIGURES, "bounded");
            assert!(kept.len() >= KEPT_FIGURES.min(id as usize), "the newest {KEPT_FIGURES} kept");
            assert_eq!(kept.last().unwrap().0, id);
            assert!(kept.windows(2).all(|w| w[0].0 + 1 == w[1].0), "consecutive, oldest first");
        }
        let latest = history.latest().unwrap();
        assert_eq!((latest.id, latest.completed, latest.stats.size_bytes), (5007, 5007, 5007));
        assert_eq!(history.count(), 5007);
    }
}
