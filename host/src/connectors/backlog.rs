//! How much input a source subtask has yet to read: its backlog.
//!
//! A source that can tell says how many records wait for it (Flink's
//! `pendingRecords`): a bounded generator what is left of its ranges, a
//! Kafka source, per partition, the records between its next offset and
//! the partition's end as its client last saw it (the consumer lag). A file
//! source knows bytes, not records (Flink's `pendingBytes`). A backlog that
//! keeps growing says the job does not keep up with its input.

use serde::{Deserialize, Serialize};

/// A source subtask's backlog (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Backlog {
    /// Records it has yet to read; `None` while the end of one of its
    /// partitions is not known yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
    /// Bytes it has yet to read, for a source that counts bytes (a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// For a Kafka source, each partition it reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionBacklog>,
}

/// Where a source subtask stands in one Kafka partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionBacklog {
    pub topic: String,
    pub partition: i32,
    /// The offset of the next record it reads (past transaction markers).
    pub offset: i64,
    /// The partition's end, as the client last saw it: its high watermark
    /// from the last fetch response (for a bounded source, where it stops
    /// if that comes first). `None` until known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Records between `offset` and `end`: the consumer lag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
}

impl PartitionBacklog {
    pub fn new(topic: String, partition: i32, offset: i64, end: Option<i64>) -> Self {
        let lag = end.map(|end| end.saturating_sub(offset).max(0) as u64);
        PartitionBacklog { topic, partition, offset, end, lag }
    }
}

impl Backlog {
    /// The backlog of a Kafka source's partitions: their lags summed, once
    /// every one is known.
    pub fn of_partitions(partitions: Vec<PartitionBacklog>) -> Self {
        let records = partitions.iter().map(|p| p.lag).sum();
        Backlog { records, partitions, ..Backlog::default() }
    }

    /// `records` left to read, of a source without partitions.
    pub fn records(records: u64) -> Self {
        Backlog { records: Some(records), ..Backlog::default() }
    }

    /// `bytes` left to read, of a source that cannot count its records.
    pub fn bytes(bytes: u64) -> Self {
        Backlog { bytes: Some(bytes), ..Backlog::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kafka_backlog_is_known_once_every_partitions_end_is() {
        let known = PartitionBacklog::new("t".into(), 0, 40, Some(100));
        assert_eq!(known.lag, Some(60));
        let caught_up = PartitionBacklog::new("t".into(), 1, 100, Some(100));
        let unknown = PartitionBacklog::new("t".into(), 2, 7, None);
        assert_eq!(Backlog::of_partitions(vec![known.clone(), caught_up.clone()]).records, Some(60));
        assert_eq!(Backlog::of_partitions(vec![known, unknown]).records, None, "a partition not fetched yet");
        assert_eq!(Backlog::of_partitions(Vec::new()).records, Some(0), "a subtask without partitions waits for none");
        // An end seen before records the subtask has taken since is no lag.
        assert_eq!(PartitionBacklog::new("t".into(), 0, 120, Some(100)).lag, Some(0));
    }
}
