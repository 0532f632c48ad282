//! The benchmark's native baseline (`plugin = "native:…"`, what
//! `weir bench --native` runs) computes what the plugin it stands for
//! computes: the same outputs from the same events, with the keys split
//! between two subtasks and checkpoints taken along the way, in memory and
//! in RocksDB. Without this, native / Wasm would compare two programs.

mod common;

use common::{JobDir, plugin, run_job, toml_path};

/// The sorted output lines of `operator` (a plugin path or `native:…`) on
/// the `sequence` generator with `generator` settings, at parallelism 2.
fn outputs(operator: &str, generator: &str, backend: &str) -> Vec<String> {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "baseline"
parallelism = 2
state_backend = "{backend}"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 10

[[source]]
name = "numbers"
type = "generator"
mode = "sequence"
{generator}

[[operator]]
uid = "operator"
plugin = {operator}
inputs = ["numbers"]
key_by = true

[[sink]]
name = "out"
type = "file"
input = "operator"
path = "out.txt"
"#,
            operator = toml_path(std::path::Path::new(operator))
        ),
    );
    run_job(&job, &[]).success();
    let mut lines: Vec<String> = dir.read("out.txt").lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

fn same_outputs(plugin_name: &str, native: &str, generator: &str, expected_lines: usize) {
    for backend in ["memory", "rocksdb"] {
        let wasm = outputs(plugin(plugin_name).to_str().unwrap(), generator, backend);
        let native = outputs(native, generator, backend);
        assert_eq!(wasm.len(), expected_lines, "{plugin_name} on {backend}");
        assert!(wasm == native, "{native:?} differs from {plugin_name} on {backend}");
    }
}

#[test]
fn the_native_count_counts_as_the_word_count_plugin() {
    // An output per event; 1000 keys, 50 events each.
    same_outputs("word-count", "native:count", "events = 50000\nkeys = 1000", 50_000);
}

#[test]
fn the_native_window_sum_sums_as_the_sensor_window_plugin() {
    // 5 s of event time: 100 keys' sums in each of 5 one-second windows.
    same_outputs("sensor-window", "native:window-sum", "events = 50000\nkeys = 100\nevents_per_ms = 10\nout_of_orderness_ms = 100", 500);
}

/// The compiled-in plugin reports a misuse as the plugin does: the job
/// fails, naming the operator and what to change.
#[test]
fn the_native_count_on_an_unkeyed_input_fails_as_the_plugin_does() {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        r#"
name = "unkeyed"

[[source]]
name = "numbers"
type = "generator"
events = 100

[[operator]]
uid = "operator"
plugin = "native:count"
inputs = ["numbers"]

[[sink]]
name = "out"
type = "discard"
input = "operator"
"#,
    );
    let failure = run_job(&job, &[]).failure();
    assert!(failure.contains("operator") && failure.contains("key_by = true"), "{failure}");
}
