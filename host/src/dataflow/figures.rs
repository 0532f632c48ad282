//! What a job's counters say: each source, operator and sink's figures,
//! the job's totals, and rates over the last few seconds.
//!
//! Every subtask counts the records it takes in and sends out, and the time
//! it waited to send into full channels ([`TaskMetrics`](super::task::TaskMetrics)),
//! from its start. Totals answer "how much", but a share of the whole
//! uptime hides what is happening now: a job held back for the last minute
//! after a day of running smoothly would show 0 %. So the supervisor
//! samples the counters at every progress report ([`Sampler`]), and each
//! node also carries its rates over the interval between the last two
//! ([`Recent`]) — the figures Flink shows as `numRecordsInPerSecond` and
//! `backPressuredTimeMsPerSecond`.

use std::time::Instant;

use super::{Role, TaskSummary};
use crate::control::{Counters, NodeInfo, Recent, SubtaskInfo};
use crate::state::StateSize;

/// Records produced by the sources of `tasks`.
pub(super) fn records_read(tasks: &[TaskSummary]) -> u64 {
    tasks.iter().filter(|t| t.role == Role::Source).map(|t| t.counters.records_out).sum()
}

/// Records received by the sinks of `tasks`.
pub(super) fn records_written(tasks: &[TaskSummary]) -> u64 {
    tasks.iter().filter(|t| t.role == Role::Sink).map(|t| t.counters.records_in).sum()
}

/// How far the job's event time has come: its sinks' lowest watermark;
/// none while a sink subtask has none (or in processing time), nor once
/// every input has ended.
pub(super) fn sinks_watermark(tasks: &[TaskSummary]) -> Option<i64> {
    let sinks = tasks.iter().filter(|t| t.role == Role::Sink);
    sinks.map(|t| t.watermark_ms).min().flatten().filter(|&ms| ms < i64::MAX)
}

/// The figures of each source, operator and sink, its subtasks' summed, in
/// the order of `tasks` (without rates: see [`Sampler::nodes`]).
pub(super) fn node_figures(tasks: &[TaskSummary]) -> Vec<NodeInfo> {
    let mut nodes: Vec<NodeInfo> = Vec::new();
    for task in tasks {
        let node = match nodes.iter_mut().find(|n| n.node == task.node) {
            Some(node) => node,
            None => {
                nodes.push(NodeInfo { node: task.node.clone(), ..NodeInfo::default() });
                nodes.last_mut().expect("just pushed")
            }
        };
        node.subtasks += 1;
        node.counters += task.counters;
        let (subtask, counters, watermark_ms, backlog) = (task.subtask, task.counters, task.watermark_ms, task.backlog.clone());
        let state = task.state;
        node.by_subtask.push(SubtaskInfo { subtask, counters, recent: Recent::default(), watermark_ms, backlog, state });
    }
    for node in &mut nodes {
        node.by_subtask.sort_by_key(|s| s.subtask);
        node.watermark_ms = lowest_watermark(&node.by_subtask);
        node.backlog_records = backlog_records(&node.by_subtask);
        node.state = state_size(&node.by_subtask);
    }
    nodes
}

/// An operator's keyed state: its subtasks' summed (those measured so
/// far); none for a source or sink, which have none.
fn state_size(subtasks: &[SubtaskInfo]) -> Option<StateSize> {
    subtasks.iter().filter_map(|s| s.state).reduce(|mut total, size| {
        total += size;
        total
    })
}

/// A source's records yet to read: its subtasks' backlogs summed, once
/// every one of them knows its own.
fn backlog_records(subtasks: &[SubtaskInfo]) -> Option<u64> {
    subtasks.iter().map(|s| s.backlog.as_ref()?.records).sum()
}

/// A node's event time: its slowest subtask's, none while one has none.
fn lowest_watermark(subtasks: &[SubtaskInfo]) -> Option<i64> {
    subtasks.iter().map(|s| s.watermark_ms).min().flatten()
}

/// [`node_figures`], each node's rates taken over the whole run, `seconds`
/// long: for a job that has ended.
pub(super) fn node_figures_of_run(tasks: &[TaskSummary], seconds: f64) -> Vec<NodeInfo> {
    let mut nodes = node_figures(tasks);
    for node in &mut nodes {
        set_rates(node, None, seconds);
    }
    nodes
}

/// Sets the rates of `node` and of each of its subtasks since `before`
/// (the same node, earlier; `None`: at the start), `seconds` apart.
fn set_rates(node: &mut NodeInfo, before: Option<&NodeInfo>, seconds: f64) {
    // A node's shares average over its subtasks, its processor time over
    // those of them that have a thread.
    let subtasks = f64::from(node.subtasks.max(1));
    let threads = node.by_subtask.iter().filter(|s| s.counters.cpu_ms.is_some()).count().max(1) as f64;
    node.recent = rates(&node.counters, before.map(|b| &b.counters), seconds, subtasks, threads);
    for subtask in &mut node.by_subtask {
        let earlier = before.and_then(|b| b.by_subtask.iter().find(|s| s.subtask == subtask.subtask));
        subtask.recent = rates(&subtask.counters, earlier.map(|s| &s.counters), seconds, 1.0, 1.0);
    }
}

/// `now`'s rates since `before` (`None`: at the start), `seconds` apart,
/// shares of time averaged over `subtasks` and processor time over
/// `threads`. A counter that went back (a restarted job's fresh subtasks)
/// counts as having started at zero.
fn rates(now: &Counters, before: Option<&Counters>, seconds: f64, subtasks: f64, threads: f64) -> Recent {
    let seconds = seconds.max(1e-3);
    let delta = |now: f64, before: f64| if now >= before { now - before } else { now };
    let zero = Counters::default();
    let before = before.unwrap_or(&zero);
    let per_subtask_second = |ms: f64| (ms / seconds / subtasks).min(1e3);
    Recent {
        seconds,
        records_in_per_s: delta(now.records_in as f64, before.records_in as f64) / seconds,
        records_out_per_s: delta(now.records_out as f64, before.records_out as f64) / seconds,
        backpressured_ms_per_s: per_subtask_second(delta(now.backpressured_ms, before.backpressured_ms)),
        idle_ms_per_s: per_subtask_second(delta(now.idle_ms, before.idle_ms)),
        cpu_ms_per_s: now.cpu_ms.map(|cpu_ms| (delta(cpu_ms, before.cpu_ms.unwrap_or(0.0)) / seconds / threads).min(1e3)),
    }
}

/// The job's counters at its last progress report, with each node's (and
/// subtask's) rates over the interval before it.
#[derive(Debug)]
pub(super) struct Sampler {
    at: Instant,
    read: u64,
    /// The processor time of the job's task threads, in all.
    cpu_ms: f64,
    nodes: Vec<NodeInfo>,
    /// Whether a report has come: then `nodes` carry the rates up to it.
    sampled: bool,
}

/// What a progress report says of its interval.
#[derive(Debug)]
pub(super) struct Interval {
    /// Records the sources read per second.
    pub read_per_s: f64,
    /// The node held back most, and its milliseconds per second.
    pub most_backpressured: Option<(String, f64)>,
    /// How many cores the job's task threads kept busy: their processor
    /// time over the interval's (`None` where it cannot be read).
    pub cores_busy: Option<f64>,
}

impl Sampler {
    /// Counting from `started`, when every counter was zero.
    pub fn new(started: Instant) -> Self {
        Sampler { at: started, read: 0, cpu_ms: 0.0, nodes: Vec::new(), sampled: false }
    }

    /// Samples `tasks` now, closing an interval: its rates become each
    /// node's recent ones.
    pub fn sample(&mut self, tasks: &[TaskSummary]) -> Interval {
        let seconds = self.at.elapsed().as_secs_f64();
        let (read, mut nodes) = (records_read(tasks), node_figures(tasks));
        for node in &mut nodes {
            set_rates(node, self.nodes.iter().find(|b| b.node == node.node), seconds);
        }
        let most_backpressured = nodes
            .iter()
            .filter(|n| n.recent.backpressured_ms_per_s > 0.0)
            .max_by(|a, b| a.recent.backpressured_ms_per_s.total_cmp(&b.recent.backpressured_ms_per_s))
            .map(|n| (n.node.clone(), n.recent.backpressured_ms_per_s));
        let read_per_s = read.saturating_sub(self.read) as f64 / seconds.max(1e-3);
        let cpu_ms = tasks.iter().filter_map(|t| t.counters.cpu_ms).sum::<f64>();
        let timed = tasks.iter().any(|t| t.counters.cpu_ms.is_some());
        let cores_busy = timed.then(|| (cpu_ms - self.cpu_ms).max(0.0) / 1e3 / seconds.max(1e-3));
        *self = Sampler { at: Instant::now(), read, cpu_ms, nodes, sampled: true };
        Interval { read_per_s, most_backpressured, cores_busy }
    }

    /// Time since the last sample (or the start).
    pub fn age(&self) -> std::time::Duration {
        self.at.elapsed()
    }

    /// `tasks`' node figures, each with its rates over the last interval
    /// sampled — or, before the first, since the start.
    pub fn nodes(&self, tasks: &[TaskSummary]) -> Vec<NodeInfo> {
        if !self.sampled {
            return node_figures_of_run(tasks, self.at.elapsed().as_secs_f64());
        }
        let mut nodes = node_figures(tasks);
        for node in &mut nodes {
            let Some(sampled) = self.nodes.iter().find(|s| s.node == node.node) else { continue };
            node.recent = sampled.recent;
            for subtask in &mut node.by_subtask {
                let rates = sampled.by_subtask.iter().find(|s| s.subtask == subtask.subtask).map(|s| s.recent);
                subtask.recent = rates.unwrap_or_default();
            }
        }
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(node: &str, role: Role, subtask: u32, records_in: u64, records_out: u64, backpressured_ms: f64) -> TaskSummary {
        let counters = Counters { records_in, records_out, backpressured_ms, ..Counters::default() };
        TaskSummary { node: node.into(), role, subtask, counters, watermark_ms: None, backlog: None, state: None }
    }

    #[test]
    fn nodes_sum_their_subtasks_and_the_job_counts_sources_and_sinks() {
        let tasks = [
            task("source `gen`", Role::Source, 0, 0, 300, 10.0),
            task("operator `count`", Role::Operator, 0, 500, 500, 0.0),
            task("source `gen`", Role::Source, 1, 0, 200, 30.0),
            task("sink `out`", Role::Sink, 0, 450, 0, 0.0),
        ];
        assert_eq!((records_read(&tasks), records_written(&tasks)), (500, 450));
        let nodes = node_figures(&tasks);
        let names: Vec<&str> = nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(names, ["source `gen`", "operator `count`", "sink `out`"]);
        assert_eq!((nodes[0].subtasks, nodes[0].counters.records_out, nodes[0].counters.backpressured_ms), (2, 500, 40.0));
        let parts: Vec<(u32, u64)> = nodes[0].by_subtask.iter().map(|s| (s.subtask, s.counters.records_out)).collect();
        assert_eq!(parts, [(0, 300), (1, 200)]);
        assert_eq!(nodes[0].skew(), 1.2, "the busier source subtask read 300 of 500");
        assert_eq!(nodes[2].skew(), 1.0, "one subtask is never skewed");
    }

    #[test]
    fn a_nodes_watermark_is_its_slowest_subtasks() {
        let at = |subtask, watermark_ms| TaskSummary { watermark_ms, ..task("operator `w`", Role::Operator, subtask, 0, 0, 0.0) };
        let nodes = node_figures(&[at(0, Some(5_000)), at(1, Some(2_000)), at(2, Some(i64::MAX))]);
        assert_eq!(nodes[0].watermark_ms, Some(2_000), "windows fire only as the slowest subtask's time passes them");
        let subtasks: Vec<Option<i64>> = nodes[0].by_subtask.iter().map(|s| s.watermark_ms).collect();
        assert_eq!(subtasks, [Some(5_000), Some(2_000), Some(i64::MAX)]);
        let nodes = node_figures(&[at(0, Some(5_000)), at(1, None)]);
        assert_eq!(nodes[0].watermark_ms, None, "a subtask without a watermark holds the node's event time back");
        let sink = |subtask, watermark_ms| TaskSummary { watermark_ms, ..task("sink `s`", Role::Sink, subtask, 0, 0, 0.0) };
        assert_eq!(sinks_watermark(&[at(0, Some(1)), sink(0, Some(3_000)), sink(1, Some(i64::MAX))]), Some(3_000));
        assert_eq!(sinks_watermark(&[sink(0, Some(i64::MAX))]), None, "all ended: no time to tell");
        assert_eq!(sinks_watermark(&[at(0, Some(1)), sink(0, None)]), None);
    }

    #[test]
    fn recent_rates_are_over_the_last_interval_not_the_whole_run() {
        let two_seconds_ago = Instant::now() - std::time::Duration::from_secs(2);
        let mut sampler = Sampler::new(two_seconds_ago);
        // Before any report: since the start, 2 s.
        let tasks = [task("source `gen`", Role::Source, 0, 0, 2_000, 1_000.0)];
        let recent = sampler.nodes(&tasks)[0].recent;
        assert!((recent.records_out_per_s - 1_000.0).abs() < 50.0, "{recent:?}");
        assert!((recent.backpressured_ms_per_s - 500.0).abs() < 25.0, "{recent:?}");

        sampler.at = two_seconds_ago;
        let interval = sampler.sample(&tasks);
        assert!((interval.read_per_s - 1_000.0).abs() < 50.0, "{interval:?}");
        assert_eq!(interval.most_backpressured.as_ref().map(|(n, _)| n.as_str()), Some("source `gen`"));

        // The next interval: 2 000 more records, no more time held back.
        sampler.at = Instant::now() - std::time::Duration::from_secs(2);
        let later = [task("source `gen`", Role::Source, 0, 0, 4_000, 1_000.0)];
        let interval = sampler.sample(&later);
        assert!(interval.most_backpressured.is_none(), "{interval:?}");
        let node = &sampler.nodes(&later)[0];
        assert_eq!((node.counters.records_out, node.counters.backpressured_ms), (4_000, 1_000.0), "totals stay totals");
        assert!((node.recent.records_out_per_s - 1_000.0).abs() < 50.0, "{:?}", node.recent);
        assert_eq!(node.recent.backpressured_ms_per_s, 0.0, "held back before, not in the last interval");
    }

    /// A key that went hot on subtask 1 after subtask 0 did most of the
    /// work: the totals look even, the last interval does not.
    #[test]
    fn each_subtask_has_its_own_recent_rates_and_skew_follows_them() {
        let op = |subtask, records_in| task("operator `count`", Role::Operator, subtask, records_in, 0, 0.0);
        let mut sampler = Sampler::new(Instant::now() - std::time::Duration::from_secs(2));
        sampler.sample(&[op(0, 9_000), op(1, 1_000)]);
        sampler.at = Instant::now() - std::time::Duration::from_secs(2);
        let later = [op(0, 10_000), op(1, 10_000)];
        sampler.sample(&later);
        let node = &sampler.nodes(&later)[0];
        let rates: Vec<f64> = node.by_subtask.iter().map(|s| s.recent.records_in_per_s.round()).collect();
        assert!((rates[0] - 500.0).abs() < 30.0 && (rates[1] - 4_500.0).abs() < 250.0, "{rates:?}");
        assert_eq!(node.skew(), 1.0, "over the run, even");
        assert!((node.recent_skew() - 1.8).abs() < 0.01, "now, subtask 1 takes 9 in 10: {}", node.recent_skew());
        // Before any report, and for an ended run, the rates are since the start.
        let ended = &node_figures_of_run(&later, 4.0)[0];
        assert_eq!(ended.by_subtask[1].recent.records_in_per_s, 2_500.0);
    }

    #[test]
    fn an_ended_runs_rates_are_over_the_whole_run() {
        let tasks = [task("sink `out`", Role::Sink, 0, 3_000, 0, 0.0)];
        let node = &node_figures_of_run(&tasks, 1.5)[0];
        assert_eq!((node.counters.records_in, node.recent.seconds, node.recent.records_in_per_s), (3_000, 1.5, 2_000.0));
    }

    #[test]
    fn subtasks_are_busy_when_neither_held_back_nor_idle() {
        let before = Counters { backpressured_ms: 100.0, idle_ms: 100.0, ..Counters::default() };
        let now = Counters { backpressured_ms: 500.0, idle_ms: 1_300.0, ..before };
        let recent = rates(&now, Some(&before), 2.0, 2.0, 1.0);
        assert_eq!((recent.backpressured_ms_per_s, recent.idle_ms_per_s, recent.busy_ms_per_s()), (100.0, 300.0, 600.0));
    }

    /// Processor time is per thread: a chained operator (no thread of its
    /// own) has none, and a node's rate averages over its threads.
    #[test]
    fn processor_time_is_summed_over_a_nodes_threads() {
        let with_cpu = |subtask, cpu_ms| {
            let mut task = task("operator `op`", Role::Operator, subtask, 0, 0, 0.0);
            task.counters.cpu_ms = cpu_ms;
            task
        };
        let chained = task("operator `chained`", Role::Operator, 0, 0, 0, 0.0);
        let nodes = node_figures_of_run(&[with_cpu(0, Some(1_500.0)), with_cpu(1, Some(500.0)), chained], 2.0);
        assert_eq!((nodes[0].counters.cpu_ms, nodes[0].recent.cpu_ms_per_s), (Some(2_000.0), Some(500.0)));
        assert_eq!(nodes[0].by_subtask[1].counters.cpu_ms, Some(500.0));
        assert_eq!((nodes[1].counters.cpu_ms, nodes[1].recent.cpu_ms_per_s), (None, None));

        // The job's threads over a progress interval: 3 s of processor time in 2 s.
        let mut sampler = Sampler::new(Instant::now() - std::time::Duration::from_secs(2));
        let interval = sampler.sample(&[with_cpu(0, Some(2_000.0)), with_cpu(1, Some(1_000.0))]);
        assert!(interval.cores_busy.is_some_and(|cores| (cores - 1.5).abs() < 0.05), "{interval:?}");
        let untimed = Sampler::new(Instant::now()).sample(&[task("source `s`", Role::Source, 0, 0, 0, 0.0)]);
        assert_eq!(untimed.cores_busy, None);
    }

    #[test]
    fn a_counter_that_went_back_counts_from_zero() {
        let before = Counters { records_in: 1_000, backpressured_ms: 4_000.0, ..Counters::default() };
        let now = Counters { records_in: 100, backpressured_ms: 500.0, ..before };
        let recent = rates(&now, Some(&before), 1.0, 2.0, 1.0);
        assert_eq!((recent.records_in_per_s, recent.backpressured_ms_per_s), (100.0, 250.0));
    }
}
