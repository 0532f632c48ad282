//! Jobs that sum a number per key in 1 s event-time windows (the
//! `sensor-window` plugin), and their results read back.

use std::collections::BTreeMap;

use weir::job::{self, Overrides};
use weir::{PluginEngine, dataflow};

use super::{JobDir, plugin, toml_path};

/// Window sums by key: key → [(start, end, sum)].
pub type Sums = BTreeMap<String, Vec<(i64, i64, f64)>>;

/// The window result lines of a file sink.
pub fn windows(output: &str) -> Sums {
    let mut map: Sums = BTreeMap::new();
    for line in output.lines() {
        let (sensor, json) = line.split_once('\t').expect("key<TAB>value");
        let value: serde_json::Value = serde_json::from_str(json).expect("a JSON window result");
        let window = (value["start"].as_i64().unwrap(), value["end"].as_i64().unwrap(), value["value"].as_f64().unwrap());
        map.entry(sensor.to_owned()).or_default().push(window);
    }
    for list in map.values_mut() {
        list.sort_by_key(|w| w.0);
    }
    map
}

/// What events (key, event time in ms, value) sum to per key and 1 s
/// window.
pub fn window_sums_of(events: impl IntoIterator<Item = (String, i64, f64)>) -> Sums {
    let mut sums: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    for (key, time, value) in events {
        *sums.entry(key).or_default().entry(time.div_euclid(1000) * 1000).or_default() += value;
    }
    let windows = |starts: BTreeMap<i64, f64>| starts.into_iter().map(|(start, sum)| (start, start + 1000, sum)).collect();
    sums.into_iter().map(|(key, starts)| (key, windows(starts))).collect()
}

/// The sinks of the window jobs: results to sums.txt, late events to late.txt.
pub const WINDOW_SINKS: &str = r#"
[[sink]]
name = "sums"
type = "file"
path = "sums.txt"
input = "windows"

[[sink]]
name = "late"
type = "file"
path = "late.txt"
input = "windows.late"
"#;

/// Runs `sources` into 1 s windows summing per key (inputs `inputs`),
/// checkpointing every 20 ms, in this process. Returns the window results
/// and the size of the largest checkpoint; nothing may be late.
pub fn run_windows(parallelism: u32, sources: &str, inputs: &str) -> (Sums, u64) {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "windows"
parallelism = {parallelism}
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 20
{sources}
[[operator]]
uid = "windows"
plugin = {plugin}
inputs = {inputs}
key_by = true

{WINDOW_SINKS}"#,
            plugin = toml_path(&plugin("sensor-window"))
        ),
    );
    let graph = job::load(&job, Overrides::default()).unwrap();
    let summary = dataflow::run_job(&graph, &PluginEngine::new().unwrap()).unwrap();
    let late = dir.read("late.txt");
    assert!(late.is_empty(), "nothing is late: {} late events, the first {:?}", late.lines().count(), late.lines().take(3).collect::<Vec<_>>());
    let largest = summary.checkpoints.figures().iter().map(|(_, stats)| stats.size_bytes).max().unwrap_or(0);
    (windows(&dir.read("sums.txt")), largest)
}
