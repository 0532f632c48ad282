//! Watermark alignment: source subtasks that run ahead in event time wait
//! for the slowest.
//!
//! An operator's watermark is the least of its inputs', so when one source
//! subtask runs far ahead of another (a backfill of one partition, a
//! generator's later range) every window and timer it opens waits in state
//! until the slowest catches up: state, checkpoints and memory grow with
//! the distance. As in Flink's watermark alignment, the subtasks of an
//! alignment group publish their watermarks, and one whose watermark is
//! more than the group's `max_drift` ahead of the group's least stops
//! reading until the others catch up. It still passes on checkpoint
//! barriers and stop requests while it waits; only its reads pause, so the
//! results are the same as without alignment.
//!
//! A subtask counts towards the group's least from its first watermark
//! until it is idle or has ended; one that has not made a watermark yet
//! does not hold the others back (it may have nothing to read), and the
//! subtask with the least watermark never waits, so the group always
//! makes progress.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::Signal;
use crate::job::{JobGraph, Node, NodeKind, SourceSpec};

/// The watermark alignment groups of a job's sources, and where each
/// aligned source's subtasks sit in their group.
pub(super) struct JobAlignment {
    groups: HashMap<String, Arc<AlignmentGroup>>,
    /// By source node: its group and the member number of its subtask 0.
    members: HashMap<usize, (String, usize)>,
}

impl JobAlignment {
    /// The groups of `graph`'s aligned sources, its subtasks numbered in
    /// them source by source.
    pub(super) fn of(graph: &JobGraph) -> Self {
        let mut sizes: HashMap<String, usize> = HashMap::new();
        let mut members = HashMap::new();
        for node in &graph.nodes {
            if let NodeKind::Source(spec) = &node.kind
                && let Some(alignment) = spec.watermark_alignment()
            {
                let group = alignment.group_of(&node.name).to_owned();
                let size = sizes.entry(group.clone()).or_default();
                members.insert(node.id.0, (group, *size));
                *size += node.parallelism as usize;
            }
        }
        let groups = sizes.into_iter().map(|(group, size)| (group, AlignmentGroup::new(size))).collect();
        JobAlignment { groups, members }
    }

    /// The place of `subtask` of source `node` in its alignment group.
    pub(super) fn source(&self, node: &Node, spec: &SourceSpec, subtask: u32) -> Option<AlignedSource> {
        let max_drift_ms = spec.watermark_alignment()?.max_drift_ms;
        let (group, first) = &self.members[&node.id.0];
        Some(AlignedSource::new(self.groups[group].clone(), first + subtask as usize, max_drift_ms))
    }
}

/// A watermark that does not hold the group back: not made yet, idle, or
/// ended.
const NOT_HOLDING_BACK: i64 = i64::MAX;

/// The published watermarks of the subtasks of one alignment group.
#[derive(Debug)]
pub struct AlignmentGroup {
    watermarks: Vec<AtomicI64>,
}

impl AlignmentGroup {
    /// A group of `members` source subtasks.
    pub fn new(members: usize) -> Arc<Self> {
        Arc::new(AlignmentGroup { watermarks: (0..members).map(|_| AtomicI64::new(NOT_HOLDING_BACK)).collect() })
    }

    /// How many source subtasks the group has.
    #[cfg(test)]
    pub fn members(&self) -> usize {
        self.watermarks.len()
    }

    /// The least watermark of the members that hold the group back.
    fn least(&self) -> i64 {
        self.watermarks.iter().map(|w| w.load(Ordering::Acquire)).min().unwrap_or(NOT_HOLDING_BACK)
    }
}

/// One source subtask's place in its alignment group.
#[derive(Debug)]
pub struct AlignedSource {
    group: Arc<AlignmentGroup>,
    member: usize,
    max_drift: i64,
    waiting: bool,
}

/// Whether a source subtask may read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// It may read, as it could before.
    Read,
    /// It is too far ahead; `first` when it was reading until now.
    Wait { first: bool },
    /// It was waiting and may read again.
    ReadAgain,
}

impl AlignedSource {
    /// Member `member` of `group`, which may run at most `max_drift_ms`
    /// ahead of the group's least watermark.
    pub fn new(group: Arc<AlignmentGroup>, member: usize, max_drift_ms: u64) -> Self {
        assert!(member < group.watermarks.len(), "alignment member {member} outside its group");
        let max_drift = i64::try_from(max_drift_ms).unwrap_or(i64::MAX);
        AlignedSource { group, member, max_drift, waiting: false }
    }

    /// Publishes what the subtask just sent downstream.
    pub fn sent(&self, signal: Signal) {
        match signal {
            Signal::Watermark(watermark) => self.publish(watermark),
            Signal::Idle => self.publish(NOT_HOLDING_BACK),
        }
    }

    /// Whether the subtask may read now, and whether that changed.
    pub fn gate(&mut self) -> Gate {
        let must_wait = self.must_wait();
        let was_waiting = std::mem::replace(&mut self.waiting, must_wait);
        match (was_waiting, self.waiting) {
            (_, true) => Gate::Wait { first: !was_waiting },
            (true, false) => Gate::ReadAgain,
            (false, false) => Gate::Read,
        }
    }

    /// Whether the subtask must wait before reading more: its watermark is
    /// more than the drift ahead of the group's least.
    fn must_wait(&self) -> bool {
        let own = self.own();
        own != NOT_HOLDING_BACK && own > self.group.least().saturating_add(self.max_drift)
    }

    /// The subtask's number in its group.
    #[cfg(test)]
    pub fn member(&self) -> usize {
        self.member
    }

    fn own(&self) -> i64 {
        self.group.watermarks[self.member].load(Ordering::Acquire)
    }

    fn publish(&self, watermark: i64) {
        self.group.watermarks[self.member].store(watermark, Ordering::Release);
    }
}

impl Drop for AlignedSource {
    /// A subtask that has ended (or stopped) no longer holds the group back.
    fn drop(&mut self) {
        self.publish(NOT_HOLDING_BACK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_of(members: usize, max_drift_ms: u64) -> Vec<AlignedSource> {
        let group = AlignmentGroup::new(members);
        (0..members).map(|m| AlignedSource::new(group.clone(), m, max_drift_ms)).collect()
    }

    #[test]
    fn a_subtask_ahead_by_more_than_the_drift_waits_until_the_slowest_catches_up() {
        let sources = group_of(2, 1000);
        sources[0].sent(Signal::Watermark(0));
        sources[1].sent(Signal::Watermark(1000));
        assert!(!sources[1].must_wait(), "exactly the drift ahead may read on");
        sources[1].sent(Signal::Watermark(5000));
        assert!(sources[1].must_wait());
        assert!(!sources[0].must_wait(), "the slowest never waits");
        sources[0].sent(Signal::Watermark(4000));
        assert!(!sources[1].must_wait());
    }

    #[test]
    fn members_without_watermarks_idle_or_ended_do_not_hold_the_group_back() {
        let mut sources = group_of(3, 10);
        sources[0].sent(Signal::Watermark(1_000_000));
        assert!(!sources[0].must_wait(), "the others have made no watermark yet");
        sources[1].sent(Signal::Watermark(0));
        assert!(sources[0].must_wait());
        sources[1].sent(Signal::Idle);
        assert!(!sources[0].must_wait(), "an idle member does not hold it back");
        sources[1].sent(Signal::Watermark(0));
        assert!(sources[0].must_wait(), "until it reads again");
        sources.remove(1);
        assert!(!sources[0].must_wait(), "an ended member does not hold it back");
    }

    #[test]
    fn the_gate_says_when_waiting_starts_and_ends() {
        let mut sources = group_of(2, 0);
        sources[0].sent(Signal::Watermark(0));
        sources[1].sent(Signal::Watermark(10));
        assert_eq!(sources[1].gate(), Gate::Wait { first: true });
        assert_eq!(sources[1].gate(), Gate::Wait { first: false });
        sources[0].sent(Signal::Watermark(10));
        assert_eq!(sources[1].gate(), Gate::ReadAgain);
        assert_eq!(sources[1].gate(), Gate::Read);
    }

    #[test]
    fn a_member_that_has_not_read_never_waits() {
        let sources = group_of(2, 0);
        sources[0].sent(Signal::Watermark(100));
        assert!(!sources[1].must_wait());
    }

    #[test]
    fn aligned_sources_share_their_group_and_number_their_subtasks_in_it() {
        let job = r#"
name = "aligned"
parallelism = 2

[[source]]
name = "clicks"
type = "generator"
events_per_ms = 1
watermark_alignment = { max_drift_ms = 500, group = "inputs" }

[[source]]
name = "views"
type = "generator"
parallelism = 3
events_per_ms = 1
watermark_alignment = { max_drift_ms = 2000, group = "inputs" }

[[source]]
name = "orders"
type = "generator"
events_per_ms = 1
watermark_alignment = { max_drift_ms = 100 }

[[source]]
name = "rules"
type = "generator"

[[operator]]
uid = "join"
plugin = "native:count"
inputs = ["clicks", "views", "orders", "rules"]
key_by = true

[[sink]]
name = "out"
type = "discard"
input = "join"
"#;
        let graph = crate::job::parse(job, std::path::Path::new(""), crate::job::Overrides::default()).expect("the job parses");
        let alignment = JobAlignment::of(&graph);
        let size = |group: &str| alignment.groups[group].members();
        assert_eq!((size("inputs"), size("orders"), alignment.groups.len()), (5, 2, 2));
        let place = |name: &str, subtask: u32| {
            let node = graph.nodes.iter().find(|n| n.name == name).expect("a source");
            let NodeKind::Source(spec) = &node.kind else { unreachable!() };
            alignment.source(node, spec, subtask).map(|aligned| aligned.member())
        };
        assert_eq!([place("clicks", 0), place("clicks", 1), place("views", 0), place("views", 2)], [Some(0), Some(1), Some(2), Some(4)]);
        assert_eq!((place("orders", 1), place("rules", 0)), (Some(1), None));
    }
}
