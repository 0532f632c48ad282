//! A smoke run of `weir bench` with a tiny N: the command works and prints
//! its RESULT line. Its figures are not checked (benchmarks are not tests).

mod common;

use common::{plugin, weir};

fn result_line(stdout: &str) -> &str {
    stdout.lines().find(|l| l.starts_with("RESULT ")).unwrap_or_else(|| panic!("no RESULT line in {stdout:?}"))
}

#[test]
fn bench_count_runs_the_wasm_plugin_and_the_native_baseline() {
    let dir = plugin("word-count").parent().unwrap().to_str().unwrap().to_owned();
    for extra in [&[][..], &["--native"][..]] {
        let mut args = vec!["bench", "count", "--events", "20000", "--parallelism", "2", "--plugin-dir", &dir];
        args.extend_from_slice(extra);
        let run = weir(&args);
        run.success();
        let line = result_line(&run.stdout()).to_owned();
        assert!(line.starts_with("RESULT workload=count backend=memory par=2 events=20000 seconds="), "{line}");
        assert!(line.contains(" events_per_s="), "{line}");
        assert!(run.stderr().contains("peak memory"), "{}", run.stderr());
    }
}

#[test]
fn bench_window_runs_the_wasm_plugin_and_the_native_baseline() {
    let dir = plugin("sensor-window").parent().unwrap().to_str().unwrap().to_owned();
    for extra in [&[][..], &["--native"][..]] {
        let mut args = vec!["bench", "window", "--events", "25000", "--parallelism", "2", "--plugin-dir", &dir];
        args.extend_from_slice(extra);
        let run = weir(&args);
        run.success();
        let line = result_line(&run.stdout()).to_owned();
        assert!(line.starts_with("RESULT workload=window backend=memory par=2 events=25000 seconds="), "{line}");
    }
}

#[test]
fn bench_says_what_it_cannot_do_yet() {
    let error = weir(&["bench", "count", "--events", "10", "--backend", "rocksdb"]).failure();
    assert!(error.contains("rocksdb"), "{error}");
    let error = weir(&["bench", "count", "--events", "10", "--plugin-dir", "/nonexistent"]).failure();
    assert!(error.contains("cannot find the plugin word_count.wasm"), "{error}");
}
