//! The host's jobs as Prometheus metrics: `GET /metrics`, in the text
//! exposition format (version 0.0.4), for the monitoring a platform team
//! already runs — the figures of `GET /jobs`, one sample per line.
//!
//! Counters (`_total`) count from the start of a job's current run: a
//! restart, an upgrade or a resumed process starts them again, which
//! Prometheus's `rate()` and `increase()` take as a counter reset. Rates
//! are left to the scraper. A node is labelled by `job`, `kind` (`source`,
//! `operator`, `sink`) and `name`, and its records and time held back are
//! counted per subtask (label `subtask`): `sum by (job, kind, name)` gives
//! the node's, and one subtask far above the others shows skewed keys.
//! `weir_node_watermark_seconds` is each subtask's event time: for events
//! stamped with the clock, `time() - weir_node_watermark_seconds` is how
//! far event time lags behind, and its `min by (job, kind, name)` is the
//! time up to which a node's windows can fire.
//! `weir_operator_state_entries` and `_bytes` are each operator subtask's
//! keyed state: growing without bound, some keys are never cleared (give
//! their state a time-to-live).
//! `weir_source_backlog_records` is what a source has yet to read, and
//! `weir_kafka_partition_lag_records` the same per Kafka partition (the
//! consumer lag): growing, the job does not keep up with its input.

use std::fmt::Write;

use super::{Counters, JobInfo, NodeInfo, SubtaskInfo};

/// The `Content-Type` of the reply.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric's name, type and help, and its samples (labels and value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

/// Every job's metrics, each family once with all jobs' samples.
pub fn prometheus(jobs: &[JobInfo]) -> String {
    let families = [
        family("weir_job_status", "gauge", "1 for the job's status (running, restarting, upgrading, finished, failed, cancelled, stopped).", jobs, |job| {
            vec![(format!("status=\"{}\"", escape(&job.status)), 1.0)]
        }),
        job_gauge("weir_job_uptime_seconds", "Seconds since the job's current run started.", jobs, |job| Some(job.uptime_s)),
        job_counter("weir_job_records_read_total", "Records its sources have read.", jobs, |job| Some(job.read as f64)),
        job_counter("weir_job_records_written_total", "Records its sinks have received.", jobs, |job| Some(job.written as f64)),
        job_counter("weir_job_restarts_total", "Restarts after task failures in the job's run.", jobs, |job| Some(f64::from(job.restarts))),
        job_counter("weir_checkpoints_completed_total", "Checkpoints its current run has completed.", jobs, |job| {
            Some(job.checkpoint.as_ref().map_or(0.0, |c| c.completed as f64))
        }),
        job_counter("weir_checkpoints_failed_total", "Checkpoints its current run abandoned or failed.", jobs, |job| {
            Some(job.checkpoints_failed as f64)
        }),
        job_gauge(
            "weir_sink_epochs_behind",
            "Sink epochs of checkpoints older than the newest not committed yet (output held back).",
            jobs,
            |job| Some(job.epochs_behind as f64),
        ),
        job_gauge("weir_checkpoint_last_id", "The number of the newest completed checkpoint.", jobs, |job| {
            job.checkpoint.as_ref().map(|c| c.id as f64)
        }),
        job_gauge("weir_checkpoint_last_duration_seconds", "The newest checkpoint's time from trigger to manifest.", jobs, |job| {
            job.checkpoint.as_ref().map(|c| c.stats.duration_ms / 1e3)
        }),
        job_gauge("weir_checkpoint_last_alignment_seconds", "The newest checkpoint's longest barrier alignment.", jobs, |job| {
            job.checkpoint.as_ref().map(|c| c.stats.alignment_ms / 1e3)
        }),
        job_gauge("weir_checkpoint_last_sync_seconds", "The newest checkpoint's longest synchronous capture.", jobs, |job| {
            job.checkpoint.as_ref().map(|c| c.stats.sync_ms / 1e3)
        }),
        job_gauge("weir_checkpoint_last_size_bytes", "The size of every file the newest checkpoint refers to.", jobs, |job| {
            job.checkpoint.as_ref().map(|c| c.stats.size_bytes as f64)
        }),
        job_gauge("weir_checkpoint_last_written_bytes", "What the newest checkpoint wrote (the rest it shares).", jobs, |job| {
            job.checkpoint.as_ref().map(|c| c.stats.written_bytes as f64)
        }),
        node_family("weir_node_subtasks", "gauge", "The node's parallel subtasks.", jobs, |n| f64::from(n.subtasks)),
        subtask_counter("weir_node_records_in_total", "Records a subtask of the node took in.", jobs, |s| Some(s.records_in as f64)),
        subtask_counter("weir_node_records_out_total", "Records a subtask of the node sent on.", jobs, |s| Some(s.records_out as f64)),
        subtask_counter(
            "weir_node_backpressured_seconds_total",
            "Time a subtask of the node waited to send into full channels.",
            jobs,
            |s| Some(s.backpressured_ms / 1e3),
        ),
        subtask_counter(
            "weir_node_idle_seconds_total",
            "Time a subtask of the node had nothing to do (an empty inbox, nothing to read yet).",
            jobs,
            |s| Some(s.idle_ms / 1e3),
        ),
        subtask_counter(
            "weir_node_cpu_seconds_total",
            "Processor time of a subtask's thread, with the operators chained into it (none for those).",
            jobs,
            |s| s.cpu_ms.map(|ms| ms / 1e3),
        ),
        subtask_family(
            "weir_node_watermark_seconds",
            "gauge",
            "A subtask's event time: the watermark it sent (a source) or has from its inputs, in seconds \
             (none before its first watermark or after its input ended).",
            jobs,
            |s| s.watermark_ms.filter(|&ms| ms < i64::MAX).map(|ms| ms as f64 / 1e3),
        ),
        subtask_family(
            "weir_source_backlog_records",
            "gauge",
            "Records a source subtask has yet to read, where it can tell (a Kafka source's consumer lag, \
             a bounded generator's events left).",
            jobs,
            |s| s.backlog.as_ref()?.records.map(|n| n as f64),
        ),
        subtask_family(
            "weir_source_backlog_bytes",
            "gauge",
            "Bytes a source subtask has yet to read, where it counts bytes (a file source).",
            jobs,
            |s| s.backlog.as_ref()?.bytes.map(|n| n as f64),
        ),
        subtask_family(
            "weir_operator_state_entries",
            "gauge",
            "Keyed state entries of an operator subtask (a value, a map entry), measured at most a second ago \
             (RocksDB: its estimate).",
            jobs,
            |s| s.state.map(|size| size.entries as f64),
        ),
        subtask_family(
            "weir_operator_state_bytes",
            "gauge",
            "Bytes of an operator subtask's keyed state: as a full snapshot writes them (memory), or RocksDB's \
             estimate of its live data and memtables.",
            jobs,
            |s| s.state.map(|size| size.bytes as f64),
        ),
        subtask_samples(
            "weir_kafka_partition_lag_records",
            "gauge",
            "Records of a Kafka partition after the source's offset, up to the partition's end as its client last saw it.",
            jobs,
            partition_lags,
        ),
    ];
    let mut out = String::new();
    for family in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for (labels, value) in &family.samples {
            let _ = writeln!(out, "{}{{{labels}}} {value}", family.name);
        }
    }
    out
}

/// A family with a sample per job and the labels `labels` gives besides the job's.
fn family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    jobs: &[JobInfo],
    samples: impl Fn(&JobInfo) -> Vec<(String, f64)>,
) -> Family {
    let samples = jobs
        .iter()
        .flat_map(|job| {
            let job_label = format!("job=\"{}\"", escape(&job.name));
            samples(job).into_iter().map(move |(labels, value)| {
                (if labels.is_empty() { job_label.clone() } else { format!("{job_label},{labels}") }, value)
            })
        })
        .collect();
    Family { name, kind, help, samples }
}

fn job_gauge(name: &'static str, help: &'static str, jobs: &[JobInfo], value: impl Fn(&JobInfo) -> Option<f64>) -> Family {
    family(name, "gauge", help, jobs, |job| value(job).map(|v| (String::new(), v)).into_iter().collect())
}

fn job_counter(name: &'static str, help: &'static str, jobs: &[JobInfo], value: impl Fn(&JobInfo) -> Option<f64>) -> Family {
    Family { kind: "counter", ..job_gauge(name, help, jobs, value) }
}

/// A family with a sample per node of every job.
fn node_family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    jobs: &[JobInfo],
    value: impl Fn(&NodeInfo) -> f64,
) -> Family {
    family(name, kind, help, jobs, |job| job.nodes.iter().map(|node| (node_labels(&node.node), value(node))).collect())
}

/// A counter with a sample per subtask of every node of every job (that
/// has a value).
fn subtask_counter(name: &'static str, help: &'static str, jobs: &[JobInfo], value: impl Fn(&Counters) -> Option<f64>) -> Family {
    subtask_family(name, "counter", help, jobs, |s| value(&s.counters))
}

/// A family with a sample per subtask of every node of every job (that
/// has a value).
fn subtask_family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    jobs: &[JobInfo],
    value: impl Fn(&SubtaskInfo) -> Option<f64>,
) -> Family {
    subtask_samples(name, kind, help, jobs, |s| value(s).map(|v| (String::new(), v)).into_iter().collect())
}

/// A family with the samples `samples` gives for each subtask of every
/// node of every job, each with the labels it gives besides the subtask's.
fn subtask_samples(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    jobs: &[JobInfo],
    samples: impl Fn(&SubtaskInfo) -> Vec<(String, f64)>,
) -> Family {
    family(name, kind, help, jobs, |job| {
        let mut all = Vec::new();
        for node in &job.nodes {
            let labels = node_labels(&node.node);
            for subtask in &node.by_subtask {
                let labels = format!("{labels},subtask=\"{}\"", subtask.subtask);
                all.extend(samples(subtask).into_iter().map(|(more, value)| match more.is_empty() {
                    true => (labels.clone(), value),
                    false => (format!("{labels},{more}"), value),
                }));
            }
        }
        all
    })
}

/// The lag of each Kafka partition a source subtask reads, labelled by
/// topic and partition.
fn partition_lags(subtask: &SubtaskInfo) -> Vec<(String, f64)> {
    let partitions = subtask.backlog.iter().flat_map(|b| &b.partitions);
    partitions
        .filter_map(|p| Some((format!("topic=\"{}\",partition=\"{}\"", escape(&p.topic), p.partition), p.lag? as f64)))
        .collect()
}

/// `kind="operator",name="count"` for the node "operator `count`". Only
/// the quoting backticks go: a uid may hold backticks of its own (`c` and
/// `c\`` are two operators, and two series).
fn node_labels(node: &str) -> String {
    let (kind, quoted) = node.split_once(' ').unwrap_or(("node", node));
    let name = quoted.strip_prefix('`').and_then(|name| name.strip_suffix('`')).unwrap_or(quoted);
    format!("kind=\"{}\",name=\"{}\"", escape(kind), escape(name))
}

/// A label value as the format quotes it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{CheckpointStats, LatestCheckpoint};
    use crate::connectors::{Backlog, PartitionBacklog};
    use crate::control::Recent;
    use crate::state::StateSize;

    fn job(name: &str, checkpoint: Option<LatestCheckpoint>) -> JobInfo {
        JobInfo {
            name: name.into(),
            status: "running".into(),
            uptime_s: 12.5,
            read: 1_000,
            written: 990,
            operators: Vec::new(),
            checkpoint,
            nodes: vec![NodeInfo {
                node: "operator `count`".into(),
                subtasks: 2,
                counters: Counters { records_in: 1_000, records_out: 990, backpressured_ms: 1_500.0, idle_ms: 250.0, cpu_ms: Some(1_250.0) },
                recent: Recent::default(),
                by_subtask: vec![
                    SubtaskInfo {
                        subtask: 0,
                        counters: Counters { records_in: 600, records_out: 590, backpressured_ms: 1_000.0, ..Counters::default() },
                        recent: Recent::default(),
                        watermark_ms: Some(1_764_870_000_250),
                        backlog: None,
                        state: Some(StateSize { entries: 1_200, bytes: 48_000 }),
                    },
                    SubtaskInfo {
                        subtask: 1,
                        counters: Counters { records_in: 400, records_out: 400, backpressured_ms: 500.0, idle_ms: 250.0, cpu_ms: Some(1_250.0) },
                        recent: Recent::default(),
                        watermark_ms: Some(i64::MAX),
                        backlog: None,
                        state: None,
                    },
                ],
                watermark_ms: Some(1_764_870_000_250),
                backlog_records: None,
                state: Some(StateSize { entries: 1_200, bytes: 48_000 }),
            }, kafka_source(), file_source()],
            error: None,
            restarts: 0,
            last_failure: None,
            checkpoints_failed: 0,
            epochs_behind: 0,
        }
    }

    /// A Kafka source of two subtasks, the second's partition not fetched yet.
    fn kafka_source() -> NodeInfo {
        let subtask = |subtask, partition, end| {
            let partitions = vec![PartitionBacklog::new("orders".into(), partition, 40, end)];
            SubtaskInfo { subtask, backlog: Some(Backlog::of_partitions(partitions)), ..SubtaskInfo::default() }
        };
        NodeInfo { node: "source `in`".into(), subtasks: 2, by_subtask: vec![subtask(0, 0, Some(100)), subtask(1, 1, None)], ..NodeInfo::default() }
    }

    fn file_source() -> NodeInfo {
        let subtask = SubtaskInfo { backlog: Some(Backlog::bytes(4096)), ..SubtaskInfo::default() };
        NodeInfo { node: "source `lines`".into(), subtasks: 1, by_subtask: vec![subtask], ..NodeInfo::default() }
    }

    #[test]
    fn each_family_is_typed_once_with_every_jobs_samples() {
        let stats = CheckpointStats { duration_ms: 42.0, alignment_ms: 1.0, sync_ms: 3.0, size_bytes: 4096, written_bytes: 512 };
        let text = prometheus(&[job("words", Some(LatestCheckpoint { id: 12, completed: 9, stats })), job("a\"b", None)]);
        for line in [
            "# TYPE weir_job_records_read_total counter",
            "weir_job_records_read_total{job=\"words\"} 1000",
            "weir_job_records_read_total{job=\"a\\\"b\"} 1000",
            "weir_job_status{job=\"words\",status=\"running\"} 1",
            "weir_checkpoints_completed_total{job=\"words\"} 9",
            "weir_job_restarts_total{job=\"words\"} 0",
            "weir_checkpoints_failed_total{job=\"words\"} 0",
            "weir_checkpoints_completed_total{job=\"a\\\"b\"} 0",
            "weir_checkpoint_last_duration_seconds{job=\"words\"} 0.042",
            "weir_checkpoint_last_size_bytes{job=\"words\"} 4096",
            "weir_node_subtasks{job=\"words\",kind=\"operator\",name=\"count\"} 2",
            "weir_node_records_in_total{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"0\"} 600",
            "weir_node_records_in_total{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"1\"} 400",
            "weir_node_backpressured_seconds_total{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"1\"} 0.5",
            "weir_node_idle_seconds_total{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"1\"} 0.25",
            "weir_node_cpu_seconds_total{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"1\"} 1.25",
            "# TYPE weir_node_watermark_seconds gauge",
            "weir_node_watermark_seconds{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"0\"} 1764870000.25",
            "# TYPE weir_source_backlog_records gauge",
            "weir_source_backlog_records{job=\"words\",kind=\"source\",name=\"in\",subtask=\"0\"} 60",
            "weir_kafka_partition_lag_records{job=\"words\",kind=\"source\",name=\"in\",subtask=\"0\",topic=\"orders\",partition=\"0\"} 60",
            "weir_source_backlog_bytes{job=\"words\",kind=\"source\",name=\"lines\",subtask=\"0\"} 4096",
            "# TYPE weir_operator_state_entries gauge",
            "weir_operator_state_entries{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"0\"} 1200",
            "weir_operator_state_bytes{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"0\"} 48000",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(text.matches("# TYPE weir_job_uptime_seconds gauge").count(), 1);
        assert!(!text.contains("weir_checkpoint_last_id{job=\"a"), "no checkpoint, no sample:\n{text}");
        assert!(!text.contains("cpu_seconds_total{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"0\"}"), "no time, no sample");
        assert!(!text.contains("watermark_seconds{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"1\"}"), "an ended input has no time");
        assert!(!text.contains("backlog_records{job=\"words\",kind=\"source\",name=\"in\",subtask=\"1\"}"), "no end seen, no backlog");
        assert!(!text.contains("partition=\"1\""), "nor lag");
        assert!(!text.contains("backlog_records{job=\"words\",kind=\"operator\""), "an operator reads no input of its own");
        assert!(!text.contains("backlog_records{job=\"words\",kind=\"source\",name=\"lines\""), "a file's records are not counted");
        assert!(!text.contains("state_entries{job=\"words\",kind=\"operator\",name=\"count\",subtask=\"1\"}"), "not measured yet");
        assert!(!text.contains("state_entries{job=\"words\",kind=\"source\""), "a source has no keyed state");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').expect("name and value");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn uids_with_backticks_of_their_own_keep_them_in_their_label() {
        assert_eq!(node_labels("operator `c`"), "kind=\"operator\",name=\"c\"");
        assert_eq!(node_labels("operator `c``"), "kind=\"operator\",name=\"c`\"");
        assert_eq!(node_labels("operator ``c`"), "kind=\"operator\",name=\"`c\"");
    }

    #[test]
    fn no_jobs_no_samples() {
        assert_eq!(prometheus(&[]), "");
    }
}
