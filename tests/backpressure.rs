//! Backpressure: a fast generator feeding a deliberately slow sink is slowed
//! down to the sink's pace, so the records in flight (and the memory they
//! take) stay bounded by the channels' capacity.

mod common;

use std::time::{Duration, Instant};

use common::{JobDir, plugin, toml_path};
use weir::dataflow::{BATCH_SIZE, CHANNEL_CAPACITY, RunError, RunningJob};
use weir::job::{self, Overrides};
use weir::{PluginEngine, dataflow};

/// Starts a generator (unbounded; at `source_rate` if given) into
/// `word-count` keyed at parallelism 2, into a discard sink `sink` (at
/// `sink_rate` if given).
fn start_count_job(dir: &JobDir, source_rate: Option<u32>, sink: &str, sink_rate: Option<u32>) -> RunningJob {
    let rate = |rate: Option<u32>| rate.map(|r| format!("rate = {r}")).unwrap_or_default();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "backpressure"
parallelism = 2

[[source]]
name = "gen"
type = "generator"
{source_rate}

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["gen"]
key_by = true

[[sink]]
name = "{sink}"
type = "discard"
input = "count"
{sink_rate}
"#,
            source_rate = rate(source_rate),
            sink_rate = rate(sink_rate),
            plugin = toml_path(&plugin("word-count"))
        ),
    );
    let graph = job::load(&job, Overrides::default()).unwrap();
    let engine = PluginEngine::new().unwrap();
    dataflow::start_job(&graph, &engine).unwrap()
}

#[test]
fn a_slow_sink_slows_the_sources_and_keeps_records_in_flight_bounded() {
    let dir = JobDir::new();
    let running = start_count_job(&dir, None, "slow", Some(20_000));

    // What can be in flight: the inboxes of the 2 count subtasks and of the
    // sink, the key-by buffers of the 2 sources (one per target), and one
    // batch in the hands of each of the 5 tasks.
    let bound = ((2 + 1) * CHANNEL_CAPACITY + 2 * 2 + 5) * BATCH_SIZE;
    let started = Instant::now();
    let mut worst = 0;
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
        let progress = running.progress();
        let in_flight = (progress.read - progress.written) as usize;
        worst = worst.max(in_flight);
        assert!(in_flight <= bound, "{in_flight} records in flight, more than the channels can hold ({bound})");
    }
    let progress = running.progress();
    assert!(progress.written > 20_000, "the sink kept receiving: {progress:?}");
    // Unthrottled, the generator produces millions of events per second.
    assert!(progress.read < 4 * 20_000 + bound as u64, "the sources were slowed to the sink's pace: {progress:?}");
    eprintln!("after 4 s: {progress:?}, at most {worst} records in flight (bound {bound})");

    // The sources and the operator say they were held back most of the
    // time; the sink, which sends nothing, never.
    let held_back = |name: &str| {
        let node = progress.nodes.iter().find(|n| n.node == name).unwrap_or_else(|| panic!("{name} in {:?}", progress.nodes));
        node.counters.backpressured_ms / (f64::from(node.subtasks) * started.elapsed().as_secs_f64() * 1e3)
    };
    for name in ["source `gen`", "operator `count`"] {
        assert!(held_back(name) > 0.3, "{name} held back {:.0} % of the time", 100.0 * held_back(name));
    }
    assert_eq!(held_back("sink `slow`"), 0.0);
    // The same over the last few seconds (here: since the start), as
    // rates: the sink takes in what its rate allows.
    let recent = |name: &str| progress.nodes.iter().find(|n| n.node == name).expect("listed").recent;
    for name in ["source `gen`", "operator `count`"] {
        assert!(recent(name).backpressured_ms_per_s > 300.0, "{name}: {:?}", recent(name));
    }
    let sink = recent("sink `slow`");
    assert!(sink.backpressured_ms_per_s == 0.0 && (5_000.0..40_000.0).contains(&sink.records_in_per_s), "{sink:?}");
    // The sink, the bottleneck, always has records waiting: never idle.
    assert!(sink.idle_ms_per_s < 200.0, "{sink:?}");

    running.cancel();
    assert!(matches!(running.wait(), Err(RunError::Cancelled)));
}

/// The other way round: a slow source leaves everything downstream of it
/// idle most of the time, and the source itself waits on its rate.
#[test]
fn a_slow_source_leaves_its_operator_and_sink_idle() {
    let dir = JobDir::new();
    let running = start_count_job(&dir, Some(5_000), "out", None);
    std::thread::sleep(Duration::from_secs(2));
    let progress = running.progress();
    running.cancel();
    assert!(matches!(running.wait(), Err(RunError::Cancelled)));
    assert!(progress.written > 0, "{progress:?}");
    for node in &progress.nodes {
        eprintln!("{}: {:?}", node.node, node.recent);
        let recent = node.recent;
        assert!(recent.idle_ms_per_s > 500.0 && recent.backpressured_ms_per_s < 100.0, "{}: {recent:?}", node.node);
        assert!(recent.busy_ms_per_s() < 500.0, "{}: {recent:?}", node.node);
        // Each has a thread of its own, which waits rather than spins.
        let cpu = recent.cpu_ms_per_s.unwrap_or_else(|| panic!("{}: no processor time in {recent:?}", node.node));
        assert!(cpu < 300.0, "{}: idle, yet {cpu:.0} ms of processor time a second", node.node);
        assert!(node.by_subtask.iter().all(|s| s.counters.cpu_ms.is_some()), "{}: {:?}", node.node, node.by_subtask);
    }
}
