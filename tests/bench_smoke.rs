//! A smoke run of `weir bench` with a tiny N: the command works and prints
//! its RESULT line. Its figures are not checked (benchmarks are not tests).

mod common;

use common::{plugin, weir};

fn result_line(stdout: &str) -> &str {
    stdout.lines().find(|l| l.starts_with("RESULT ")).unwrap_or_else(|| panic!("no RESULT line in {stdout:?}"))
}

/// Runs `weir bench WORKLOAD` on a tiny N with the Wasm plugin and
/// natively, on `backend`, checkpointing every 5 ms.
fn smoke(workload: &str, plugin_name: &str, events: &str, backend: &str) {
    let dir = plugin(plugin_name).parent().unwrap().to_str().unwrap().to_owned();
    for extra in [&[][..], &["--native"][..]] {
        let mut args = vec!["bench", workload, "--events", events, "--parallelism", "2", "--plugin-dir", &dir];
        args.extend_from_slice(&["--backend", backend, "--checkpoint-interval-ms", "5"]);
        args.extend_from_slice(extra);
        let run = weir(&args);
        run.success();
        let line = result_line(&run.stdout()).to_owned();
        let expected = format!("RESULT workload={workload} backend={backend} par=2 events={events} seconds=");
        assert!(line.starts_with(&expected), "{line}");
        assert!(line.contains(" events_per_s="), "{line}");
        assert!(run.stderr().contains("peak memory"), "{}", run.stderr());
        assert!(run.stderr().contains("checkpoints: "), "{}", run.stderr());
        // Where the processor time went, read from /proc (Linux).
        assert!(line.contains(" cpu_s="), "{line}");
        assert!(run.stderr().contains("processor time: sources "), "{}", run.stderr());
        // And how much of the machine's time a hypervisor took (0 % on
        // bare metal), from /proc/stat.
        assert!(line.contains(" steal_pct="), "{line}");
        assert!(run.stderr().contains("stolen by the hypervisor: "), "{}", run.stderr());
        assert!(line.contains(" peak_rss_mib="), "{line}");
    }
}

/// The value of `name=` in a RESULT line.
fn field<'l>(line: &'l str, name: &str) -> Option<&'l str> {
    line.split(' ').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

#[test]
fn bench_reports_the_checkpoints_its_run_completed() {
    let dir = plugin("word-count").parent().unwrap().to_str().unwrap().to_owned();
    // A run of 5 M events takes a tenth of a second or more: checkpoints
    // triggered every millisecond complete in it.
    let args = ["bench", "count", "--events", "5000000", "--checkpoint-interval-ms", "1", "--plugin-dir", &dir];
    let run = weir(&args);
    run.success();
    let line = result_line(&run.stdout()).to_owned();
    let completed: u64 = field(&line, "checkpoints").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"));
    assert!(completed >= 1, "{line}");
    for name in ["checkpoint_ms_mean", "checkpoint_ms_max", "checkpoint_mib_mean", "checkpoint_written_mib_mean"] {
        let value: f64 = field(&line, name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {name} in {line}"));
        assert!(value >= 0.0, "{line}");
    }
    // 100 000 counts are stored: a checkpoint holds some of them.
    let size: f64 = field(&line, "checkpoint_mib_mean").unwrap().parse().unwrap();
    assert!(size > 0.0, "{line}");
    assert!(run.stderr().contains(&format!("checkpoints: {completed} completed")), "{}", run.stderr());

    // Without checkpoints, no checkpoint figures.
    let run = weir(&["bench", "count", "--events", "20000", "--checkpoint-interval-ms", "0", "--plugin-dir", &dir]);
    let line = result_line(&run.stdout()).to_owned();
    assert_eq!(field(&line, "checkpoints"), Some("0"), "{line}");
    assert_eq!(field(&line, "checkpoint_ms_mean"), None, "{line}");
}

#[test]
fn bench_count_runs_the_wasm_plugin_and_the_native_baseline() {
    smoke("count", "word-count", "20000", "memory");
    smoke("count", "word-count", "20000", "rocksdb");
}

#[test]
fn bench_window_runs_the_wasm_plugin_and_the_native_baseline() {
    smoke("window", "sensor-window", "25000", "memory");
    smoke("window", "sensor-window", "25000", "rocksdb");
}

#[test]
fn bench_window_aligns_its_sources_watermarks_on_request() {
    let dir = plugin("sensor-window").parent().unwrap().to_str().unwrap().to_owned();
    let run = weir(&["bench", "window", "--events", "200000", "-p", "2", "--max-drift-ms", "1000", "--plugin-dir", &dir]);
    run.success();
    let line = result_line(&run.stdout()).to_owned();
    assert!(line.starts_with("RESULT workload=window backend=memory par=2 events=200000 "), "{line}");
    assert!(line.contains(" max_drift_ms=1000"), "{line}");
}

#[test]
fn bench_names_a_missing_plugin() {
    let error = weir(&["bench", "count", "--events", "10", "--plugin-dir", "/nonexistent"]).failure();
    assert!(error.contains("cannot find the plugin word_count.wasm"), "{error}");
    assert!(error.contains("give --plugin-dir the directory that holds word_count.wasm"), "{error}");
}

#[test]
fn bench_count_refuses_watermark_alignment_it_could_not_apply() {
    let dir = plugin("word-count").parent().unwrap().to_str().unwrap().to_owned();
    let error = weir(&["bench", "count", "--events", "10", "--max-drift-ms", "100", "--plugin-dir", &dir]).failure();
    assert!(error.contains("the count workload's events have none: use it with `window`"), "{error}");
}

/// `--keys` and `--memory-limit-mb` reach the job: the RESULT line says
/// so, and the run checks its output count against the keys — for the
/// window, one output per key and window, every event its own key once
/// the keys outnumber a window's 10 000 events.
#[test]
fn bench_runs_the_workloads_over_other_numbers_of_keys() {
    for (workload, plugin_name, keys) in [("count", "word-count", "250000"), ("window", "sensor-window", "20000")] {
        let dir = plugin(plugin_name).parent().unwrap().to_str().unwrap().to_owned();
        let args = ["bench", workload, "--events", "200000", "--keys", keys, "--memory-limit-mb", "512", "--plugin-dir", &dir];
        let run = weir(&args);
        run.success();
        let line = result_line(&run.stdout()).to_owned();
        assert_eq!(field(&line, "keys"), Some(keys), "{line}");
        assert_eq!(field(&line, "memory_limit_mb"), Some("512"), "{line}");
        assert!(run.stderr().contains(&format!("200000 events, {keys} keys")), "{}", run.stderr());
    }
}
