//! What the control API says: requests and replies, as JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::checkpoint::LatestCheckpoint;
use crate::connectors::Backlog;
use crate::state::StateSize;

/// A job the host runs (or ran).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub name: String,
    /// `running`, `restarting` (after a failure), `upgrading`, `finished`,
    /// `failed`, `cancelled` or `stopped` (stopped with a savepoint).
    pub status: String,
    /// Seconds since the job's current run started (a restart after a
    /// failure or an upgrade starts another, and its counters afresh; 0
    /// while it waits to restart); once it has ended, from its start to its
    /// end.
    pub uptime_s: f64,
    /// Records read by its sources and written by its sinks so far.
    pub read: u64,
    pub written: u64,
    /// Each operator's uid and plugin file.
    pub operators: Vec<OperatorInfo>,
    /// The newest checkpoint its current (or last) run completed: its
    /// number, how many the run completed, and its figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<LatestCheckpoint>,
    /// Checkpoints of its current (or last) run that were abandoned or
    /// failed (timed out, a subtask could not snapshot, …; the log says why).
    #[serde(default)]
    pub checkpoints_failed: u64,
    /// Sink epochs of checkpoints older than its newest that are not
    /// committed yet: output held back (a Kafka sink's brokers away, or its
    /// write-ahead log damaged; the log says which and what to do).
    #[serde(default)]
    pub epochs_behind: u64,
    /// Each source, operator and sink: records in and out, time held back.
    #[serde(default)]
    pub nodes: Vec<NodeInfo>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Restarts after task failures in this run of the job (the status
    /// is `restarting` while it waits for the next).
    #[serde(default)]
    pub restarts: u32,
    /// The failure that caused the last restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}

/// The figures of one source, operator or sink, its subtasks' summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// "source `x`", "operator `y`" or "sink `z`".
    pub node: String,
    pub subtasks: u32,
    /// Its subtasks' counters, summed.
    #[serde(flatten)]
    pub counters: Counters,
    /// The same over the last few seconds, as rates.
    #[serde(default)]
    pub recent: Recent,
    /// Its event time: the lowest of its subtasks' watermarks, `None`
    /// while one of them has none (see [`SubtaskInfo::watermark_ms`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_ms: Option<i64>,
    /// A source's records yet to read (Flink's `pendingRecords`; for Kafka
    /// the consumer lag): its subtasks' backlogs summed, `None` while one
    /// of them cannot tell (see [`SubtaskInfo::backlog`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_records: Option<u64>,
    /// An operator's keyed state, its subtasks' summed: entries and bytes
    /// (see [`StateSize`]); none for sources and sinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateSize>,
    /// Each subtask's part of the totals, by subtask index.
    #[serde(default)]
    pub by_subtask: Vec<SubtaskInfo>,
}

/// What a subtask counts from its start (a node's: its subtasks', summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub records_in: u64,
    pub records_out: u64,
    /// Time spent waiting to send into full channels (a node's: up to its
    /// subtasks × the uptime): a high share of the uptime says something
    /// downstream is the bottleneck.
    pub backpressured_ms: f64,
    /// Time spent with nothing to do (an empty inbox, or for a source
    /// nothing to read yet). The rest of the time it was busy.
    #[serde(default)]
    pub idle_ms: f64,
    /// Processor time of the subtask's thread (with the operators chained
    /// into it); `None` for an operator chained into another node's
    /// thread, whose time is that thread's, or where it cannot be read.
    /// Busy time is wall-clock time: a busy subtask without a core to run
    /// on counts as busy but gets no processor time.
    #[serde(default)]
    pub cpu_ms: Option<f64>,
}

impl std::ops::AddAssign for Counters {
    /// Sums two subtasks' counters; processor time is absent only where
    /// both lack it.
    fn add_assign(&mut self, other: Counters) {
        self.records_in += other.records_in;
        self.records_out += other.records_out;
        self.backpressured_ms += other.backpressured_ms;
        self.idle_ms += other.idle_ms;
        self.cpu_ms = match (self.cpu_ms, other.cpu_ms) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

impl NodeInfo {
    /// How far its busiest subtask is above the average: the largest
    /// subtask's records (in, or out for a source) over the mean, 1 when
    /// even. Well above 1 behind a key-by edge, the keys are skewed: a few
    /// hot keys load one subtask while the others idle.
    pub fn skew(&self) -> f64 {
        let source = self.node.starts_with("source ");
        skew(self.by_subtask.iter().map(|s| if source { s.counters.records_out } else { s.counters.records_in } as f64))
    }

    /// [`NodeInfo::skew`] over the last few seconds (the subtasks' recent
    /// rates): hot keys now, which the totals of a long run would hide.
    pub fn recent_skew(&self) -> f64 {
        let source = self.node.starts_with("source ");
        let rate = |r: &Recent| if source { r.records_out_per_s } else { r.records_in_per_s };
        skew(self.by_subtask.iter().map(|s| rate(&s.recent)))
    }
}

/// The largest of `values` over their mean; 1 when all are 0.
fn skew(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let (count, total) = values.clone().fold((0.0, 0.0), |(n, sum), v| (n + 1.0, sum + v));
    let largest = values.fold(0.0, f64::max);
    if total > 0.0 { largest * count / total } else { 1.0 }
}

/// One subtask's figures (see [`NodeInfo`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubtaskInfo {
    pub subtask: u32,
    #[serde(flatten)]
    pub counters: Counters,
    /// Its rates over the same interval as its node's.
    #[serde(default)]
    pub recent: Recent,
    /// Its watermark, ms: for a source the last one it sent, for an
    /// operator or a sink the lowest of its inputs' (Flink's
    /// `currentInputWatermark`); `i64::MAX` once its input has ended,
    /// `None` before the first. Event-time windows and timers fire only
    /// as it passes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_ms: Option<i64>,
    /// A source subtask's input yet to read: a bounded generator's events
    /// left, a file source's bytes, a Kafka source's lag per partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<Backlog>,
    /// An operator subtask's keyed state, measured at most a second ago
    /// while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateSize>,
}

/// A node's (or subtask's) rates over the last few seconds: between the job's last two
/// progress reports (5 s apart), or since its start before the first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Recent {
    /// How long the interval was.
    pub seconds: f64,
    pub records_in_per_s: f64,
    pub records_out_per_s: f64,
    /// Milliseconds per second its subtasks spent waiting to send into
    /// full channels, on average (0 to 1000; Flink's
    /// `backPressuredTimeMsPerSecond`).
    pub backpressured_ms_per_s: f64,
    /// Milliseconds per second they had nothing to do (Flink's
    /// `idleTimeMsPerSecond`).
    #[serde(default)]
    pub idle_ms_per_s: f64,
    /// Milliseconds of processor time per second its subtasks' threads
    /// got, on average (0 to 1000; see [`Counters::cpu_ms`]).
    #[serde(default)]
    pub cpu_ms_per_s: Option<f64>,
}

impl Recent {
    /// Milliseconds per second its subtasks worked: neither held back nor
    /// idle (Flink's `busyTimeMsPerSecond`).
    pub fn busy_ms_per_s(&self) -> f64 {
        (1e3 - self.backpressured_ms_per_s - self.idle_ms_per_s).clamp(0.0, 1e3)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorInfo {
    pub uid: String,
    pub plugin: PathBuf,
    pub parallelism: u32,
}

/// `POST /jobs/{name}/savepoint`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavepointRequest {
    /// Where to write it (default: `savepoints/sp-<job>-<checkpoint>` beside
    /// the job's checkpoint directory, or in the host's working directory).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Stop the job once the savepoint is complete.
    #[serde(default)]
    pub stop: bool,
}

/// A savepoint written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointInfo {
    pub job: String,
    pub dir: PathBuf,
    /// The checkpoint it was taken at.
    pub checkpoint: u64,
    pub size_bytes: u64,
    /// Keyed entries it holds (all operators).
    pub entries: u64,
    /// From the request to the savepoint written.
    pub duration_ms: f64,
    /// Stopped with it: sink epochs before it still not committed when the
    /// job ended (its Kafka brokers away). They stay in the job's
    /// checkpoint directory, and are committed when the job resumes from
    /// its checkpoints, or from this savepoint with that directory in place.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uncommitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `POST /jobs/{name}/upgrade`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradeRequest {
    /// The operator to swap the plugin of.
    pub operator: String,
    /// The new plugin file.
    pub plugin: PathBuf,
    /// Where to write the savepoint the upgrade goes through (default as
    /// for savepoints).
    #[serde(default)]
    pub savepoint_dir: Option<PathBuf>,
}

/// An upgrade done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpgradeInfo {
    pub job: String,
    pub operator: String,
    pub plugin: PathBuf,
    pub savepoint: SavepointInfo,
    /// From the stop request to the new job's tasks running: how long the
    /// job produced nothing.
    pub downtime_ms: f64,
    /// State entries of the operator checked against the new plugin.
    pub checked_entries: u64,
}

/// `POST /forks`: start a second job from a running job (a
/// savepoint is taken first) or from a savepoint directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// A running job's name, or a savepoint directory.
    pub from: String,
    /// The new job's name.
    pub name: String,
    /// Plugin swaps: operator uid → plugin file.
    #[serde(default)]
    pub operators: Vec<(String, PathBuf)>,
    /// Sink path overrides: sink name → path.
    #[serde(default)]
    pub sinks: Vec<(String, PathBuf)>,
    /// Kafka sink topic overrides: sink name → topic.
    #[serde(default)]
    pub topics: Vec<(String, String)>,
    /// The new job's checkpoint directory (default: beside the original's,
    /// named after the new job).
    #[serde(default)]
    pub checkpoint_dir: Option<PathBuf>,
}

/// A fork started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkInfo {
    pub job: JobInfo,
    pub savepoint: PathBuf,
    /// The fork's own job file (in its checkpoint directory): `weir run`
    /// it to resume the fork after this host has stopped. `None` for a
    /// fork without checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_file: Option<PathBuf>,
}

/// An error reply: `{"error": "..."}` with an HTTP status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointStats;

    #[test]
    fn a_jobs_newest_checkpoint_is_one_flat_object() {
        let stats = CheckpointStats { duration_ms: 4.5, alignment_ms: 0.5, sync_ms: 1.0, size_bytes: 2048, written_bytes: 512 };
        let job = JobInfo {
            name: "sums".into(),
            status: "running".into(),
            uptime_s: 3.0,
            read: 10,
            written: 9,
            operators: Vec::new(),
            checkpoint: Some(LatestCheckpoint { id: 7, completed: 6, stats }),
            nodes: Vec::new(),
            error: None,
            restarts: 0,
            last_failure: None,
            checkpoints_failed: 0,
            epochs_behind: 0,
        };
        let json = serde_json::to_value(&job).unwrap();
        assert_eq!(
            json["checkpoint"],
            serde_json::json!({
                "id": 7, "completed": 6, "duration_ms": 4.5, "alignment_ms": 0.5, "sync_ms": 1.0,
                "size_bytes": 2048, "written_bytes": 512
            })
        );
        assert_eq!(serde_json::from_value::<JobInfo>(json).unwrap(), job);
        let without = serde_json::to_value(JobInfo { checkpoint: None, ..job }).unwrap();
        assert!(without.get("checkpoint").is_none(), "no checkpoint yet: no field");
    }

    /// The counters are fields of the node and of each subtask, as they
    /// were before they had a struct of their own; an older host's reply,
    /// without idle or processor time, still reads.
    #[test]
    fn a_nodes_counters_are_its_own_fields() {
        let counters = Counters { records_in: 5, records_out: 4, backpressured_ms: 1.5, idle_ms: 2.0, cpu_ms: Some(3.0) };
        let subtask = SubtaskInfo { subtask: 1, counters, watermark_ms: Some(7_000), ..SubtaskInfo::default() };
        let node = NodeInfo { node: "operator `count`".into(), subtasks: 2, counters, by_subtask: vec![subtask], ..NodeInfo::default() };
        let json = serde_json::to_value(&node).unwrap();
        for object in [&json, &json["by_subtask"][0]] {
            assert_eq!((object["records_in"].as_u64(), object["cpu_ms"].as_f64()), (Some(5), Some(3.0)), "{object}");
            assert!(object.get("counters").is_none(), "{object}");
        }
        assert_eq!((json.get("watermark_ms"), json["by_subtask"][0]["watermark_ms"].as_i64()), (None, Some(7_000)));
        assert_eq!(serde_json::from_value::<NodeInfo>(json).unwrap(), node);
        let older = serde_json::json!({"node": "sink `out`", "subtasks": 1, "records_in": 7, "records_out": 0, "backpressured_ms": 0.0});
        let older: NodeInfo = serde_json::from_value(older).unwrap();
        assert_eq!((older.counters.records_in, older.counters.idle_ms, older.counters.cpu_ms), (7, 0.0, None));
        assert_eq!(older.watermark_ms, None);
    }
}
