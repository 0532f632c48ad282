//! Event time end to end: the sensors demo. Pressure is a sine wave with a
//! period of exactly 1 s, so every 1 s window of *event* time sums to 0 —
//! whatever the arrival order, replay speed or parallelism. Windows drawn by
//! the machine's clock do not give that result.

mod common;

use std::time::{Duration, Instant};

use common::windows::{Sums, WINDOW_SINKS, run_windows, window_sums_of, windows};
use common::{Host, JobDir, plugin, run_job, toml_path};
use weir::job::{self, Overrides};
use weir::{PluginEngine, dataflow};

/// The sensors job: `seconds` of readings, shuffled by up to 100 ms, at
/// `speed`, summed per sensor in 1 s windows of `time`.
fn sensors_job(dir: &JobDir, parallelism: u32, seconds: u64, speed: f64, time: &str) -> std::path::PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "sensors"
parallelism = {parallelism}

[[source]]
name = "sensors"
type = "generator"
mode = "sensors"
events = {events}
shuffle_ms = 100
speed = {speed}
out_of_orderness_ms = 100

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["sensors"]
key_by = true
config = {{ time = "{time}" }}

{WINDOW_SINKS}"#,
            events = seconds * 300,
            plugin = toml_path(&plugin("sensor-window"))
        ),
    )
}

fn check_event_time_sums(parallelism: u32, seconds: u64, speed: f64) {
    let dir = JobDir::new();
    run_job(&sensors_job(&dir, parallelism, seconds, speed, "event"), &[]).success();
    let sums = windows(&dir.read("sums.txt"));
    let pressure = &sums["pressure"];
    assert_eq!(pressure.len() as u64, seconds, "one window per second of data: {pressure:?}");
    for (i, (start, end, sum)) in pressure.iter().enumerate() {
        assert_eq!(*start % 1000, 0, "windows are aligned to whole seconds");
        assert_eq!((end - start, start - pressure[0].0), (1000, 1000 * i as i64), "consecutive 1 s windows");
        assert!(sum.abs() < 1e-9, "pressure window at {start} sums to {sum}, not 0");
    }
    assert_eq!(sums["temp"].len() as u64, seconds);
    assert!(dir.read("late.txt").is_empty(), "within the bound, nothing is late");
}

#[test]
fn pressure_sums_to_zero_in_event_time_at_p1_and_1x_speed() {
    check_event_time_sums(1, 2, 1.0);
}

#[test]
fn pressure_sums_to_zero_in_event_time_at_p2_and_1x_speed() {
    check_event_time_sums(2, 2, 1.0);
}

#[test]
fn pressure_sums_to_zero_in_event_time_at_p1_and_100x_speed() {
    check_event_time_sums(1, 30, 100.0);
}

#[test]
fn pressure_sums_to_zero_in_event_time_at_p2_and_100x_speed() {
    check_event_time_sums(2, 30, 100.0);
}

#[test]
fn processing_time_windows_do_not_sum_to_zero() {
    let dir = JobDir::new();
    // 20 s of data replayed at 6.3× take ~3 s of wall clock. A window of the
    // machine's clock holds 6.3 s of data: whole periods plus 0.3 of one,
    // at a phase that moves from window to window — so the sums are not 0.
    // (At a whole-number speed every such window would hold whole periods.)
    run_job(&sensors_job(&dir, 1, 20, 6.3, "processing"), &[]).success();
    let sums = windows(&dir.read("sums.txt"));
    let pressure = &sums["pressure"];
    assert!(!pressure.is_empty(), "processing-time windows fired");
    assert!(
        pressure.iter().any(|(_, _, sum)| sum.abs() > 1e-3),
        "processing-time windows are not aligned with the data: {pressure:?}"
    );
}

#[test]
fn events_later_than_the_watermark_allows_go_to_the_late_output() {
    let dir = JobDir::new();
    // A file source reads BATCH_SIZE lines per batch and sends its
    // watermark after each: the first batch (timestamps 0, 5, 10, …) moves
    // event time past 1000, so the reading at 100 in the second batch is too
    // late for its window.
    let batch = dataflow::BATCH_SIZE as i64;
    let mut lines: Vec<String> = (0..batch).map(|i| format!(r#"{{"key":"s","value":"1","timestamp":{}}}"#, i * 5)).collect();
    let last = batch * 5 + 100;
    lines.push(r#"{"key":"s","value":"7","timestamp":100}"#.to_owned());
    lines.push(format!(r#"{{"key":"s","value":"1","timestamp":{last}}}"#));
    dir.write("readings.jsonl", &(lines.join("\n") + "\n"));
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "late"
[[source]]
name = "readings"
type = "file"
path = "readings.jsonl"
format = "json"

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["readings"]
key_by = true

{WINDOW_SINKS}"#,
            plugin = toml_path(&plugin("sensor-window"))
        ),
    );
    run_job(&job, &[]).success();
    assert_eq!(dir.read("late.txt"), "s\t7\n", "the late reading, and only it, goes to the side output");
    let sums = windows(&dir.read("sums.txt"));
    let first = sums["s"][0];
    assert_eq!(first, (0, 1000, 200.0), "the closed window did not take the late reading");
    assert_eq!(sums["s"].len() as i64, last / 1000 + 1, "one window per second up to the last reading");

    // The late output's name misspelt: its sink gets nothing, and the log
    // says where the late reading went.
    std::fs::write(&job, std::fs::read_to_string(&job).unwrap().replace("\"windows.late\"", "\"windows.lat\"")).unwrap();
    let run = run_job(&job, &[]);
    run.success();
    assert_eq!(dir.read("late.txt"), "", "nothing emits to `lat`");
    let stderr = run.stderr();
    let warning = stderr.lines().find(|l| l.contains("output nothing reads")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(warning.contains("output=late") && warning.contains(r#"`input = "windows.late"`"#), "{warning}");
}

/// A job whose second reading fires the window [0, 1000) of key `a`, and
/// whose third, a second later, is too late for it.
fn job_with_a_late_reading(dir: &JobDir) -> std::path::PathBuf {
    let lines = [
        r#"{"key":"a","value":1,"timestamp":100}"#,
        r#"{"key":"a","value":10,"timestamp":5000}"#,
        r#"{"key":"a","value":2,"timestamp":200}"#,
        r#"{"key":"f","value":0,"timestamp":5000}"#,
    ];
    dir.write("readings.jsonl", &(lines.join("\n") + "\n"));
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "resumed-late"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 100

[[source]]
name = "readings"
type = "file"
path = "readings.jsonl"
format = "json"
rate = 1.0

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["readings"]
key_by = true

[[sink]]
name = "sums"
type = "files"
path = "sums"
input = "windows"

[[sink]]
name = "late"
type = "files"
path = "late"
input = "windows.late"
"#,
            plugin = toml_path(&plugin("sensor-window"))
        ),
    )
}

/// Waits until the window [0, 1000) is committed (its checkpoint complete).
fn wait_for_the_first_window(dir: &JobDir) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path("sums").exists() || common::committed_lines(&dir.path("sums"), None).is_empty() {
        assert!(Instant::now() < deadline, "the first window was not committed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The late reading went to the late output, as in a run never stopped,
/// and the fired window was not emitted again with it.
fn assert_judged_late_as_the_first_time(dir: &JobDir) {
    let sums = common::committed_lines(&dir.path("sums"), None);
    let first: Vec<&String> = sums.iter().filter(|line| line.contains(r#""start":0,"#)).collect();
    assert_eq!(first.len(), 1, "the window [0, 1000) fired once: {sums:?}");
    assert!(first[0].ends_with(r#""value":1.0}"#), "{sums:?}");
    assert_eq!(common::committed_lines(&dir.path("late"), None), ["a\t2"], "the late reading goes to the late output");
}

/// Killed between a window's firing and a reading too late for it, and
/// resumed, the windows judge the replayed reading against the event time
/// they had reached, not as if none had passed.
#[test]
fn a_resumed_operator_keeps_the_event_time_it_had_reached() {
    let dir = JobDir::new();
    let job = job_with_a_late_reading(&dir);
    let mut child = std::process::Command::new(common::weir_binary())
        .args(["run", job.to_str().unwrap()])
        .env("WEIR_LOG", "warn")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_the_first_window(&dir);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(run_job(&job, &[]).success().stderr().contains("resumed from checkpoint"));
    assert_judged_late_as_the_first_time(&dir);
}

/// The same through a savepoint (an upgrade's way): it keeps the event
/// time too, and needs no checkpoint to restore it.
#[test]
fn an_operator_restored_from_a_savepoint_keeps_the_event_time_it_had_reached() {
    let dir = JobDir::new();
    let job = job_with_a_late_reading(&dir);
    let host = Host::start(&job, &[]);
    wait_for_the_first_window(&dir);
    let savepoint = dir.path("savepoint");
    host.stop_with_savepoint("resumed-late", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    std::fs::remove_dir_all(dir.path("checkpoints")).unwrap();
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_judged_late_as_the_first_time(&dir);
}

/// An idle source does not hold event time back, whether it feeds the
/// windows directly or through other operators: one chained to it (in its
/// thread) and one behind an exchange, each idle because its input is.
#[test]
fn an_idle_source_does_not_stall_event_time() {
    let through_operators = format!(
        r#"
[[operator]]
uid = "pass"
plugin = {faulty}
inputs = ["quiet"]
config = {{ mode = "none" }}

[[operator]]
uid = "amplify"
plugin = {amplifier}
inputs = ["pass"]
key_by = true
"#,
        faulty = toml_path(&plugin("faulty")),
        amplifier = toml_path(&plugin("amplifier"))
    );
    for (quiet_input, operators) in [("quiet", String::new()), ("amplify", through_operators)] {
        let dir = JobDir::new();
        let job = dir.write(
            "job.toml",
            &format!(
                r#"
name = "idle"

[[source]]
name = "sensors"
type = "generator"
mode = "sensors"
events = 3000
speed = 100
out_of_orderness_ms = 100

# Unbounded and (almost) silent — one event at once, the next in 1000 s:
# without an idleness timeout it would hold the watermark back forever.
[[source]]
name = "quiet"
type = "generator"
rate = 0.001
events_per_ms = 1
idle_timeout_ms = 200
{operators}
[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["sensors", "{quiet_input}"]
key_by = true

[[sink]]
name = "sums"
type = "discard"
input = "windows"
"#,
                plugin = toml_path(&plugin("sensor-window"))
            ),
        );
        let graph = job::load(&job, Overrides::default()).unwrap();
        let running = dataflow::start_job(&graph, &PluginEngine::new().unwrap()).unwrap();
        let started = Instant::now();
        // 10 s of data: windows must close while the quiet source is still open.
        while running.progress().written < 3 * 5 && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let written = running.progress().written;
        running.cancel();
        let _ = running.wait();
        assert!(written >= 15, "windows fired despite the idle source (read through `{quiet_input}`): {written} results");
    }
}

/// Where event time stands is a figure of every node: `weir jobs JOB`
/// shows it as a date, `/metrics` per subtask. A user whose windows do not
/// fire looks there first.
#[test]
fn each_nodes_watermark_is_shown_as_event_time_moves() {
    let dir = JobDir::new();
    // 4 s of readings replayed at their own pace: subtask 1's half starts 2 s in.
    let host = Host::start(&sensors_job(&dir, 2, 4, 1.0, "event"), &[]);
    host.wait_for_records("sensors", 300);
    let api = weir::control::client::ApiClient::new(&host.api);
    let watermarks = |node: &str| -> Vec<f64> {
        let metrics = api.metrics().unwrap();
        let prefix = format!("weir_node_watermark_seconds{{job=\"sensors\",kind=\"operator\",name=\"{node}\",subtask=");
        let values = metrics.lines().filter_map(|l| l.strip_prefix(&prefix)).map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap());
        values.collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while watermarks("windows").len() < 2 {
        assert!(Instant::now() < deadline, "no watermark for both subtasks of `windows`: {}", host.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = watermarks("windows");
    // The sensors' readings start at 1 700 000 000 s, 2023-11-14 22:13:20 UTC.
    let epoch = 1_700_000_000.0;
    assert!(first.iter().all(|w| (epoch..epoch + 4.0).contains(w)), "within the readings' 4 s: {first:?}");
    let detail = host.weir(&["jobs", "sensors"]).success().stdout();
    let row = detail.lines().find(|l| l.starts_with("operator `windows`")).unwrap_or_else(|| panic!("{detail}"));
    assert!(detail.contains("WATERMARK") && row.contains("2023-11-14 22:13:2"), "event time as a date: {detail}");
    std::thread::sleep(Duration::from_millis(1_500));
    let later = watermarks("windows");
    assert!(later.len() < 2 || later.iter().sum::<f64>() > first.iter().sum::<f64>(), "event time moved on: {first:?} then {later:?}");
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
}

/// A timestamped `sequence` generator: `events` events, key `i mod 10`,
/// value `i`, timestamp `i / events_per_ms` ms; `extra` adds settings.
fn sequence_source(name: &str, events: u64, events_per_ms: u64, extra: &str) -> String {
    format!(
        r#"
[[source]]
name = "{name}"
type = "generator"
events = {events}
keys = 10
events_per_ms = {events_per_ms}
out_of_orderness_ms = 100
{extra}
"#
    )
}

/// What `sequence_source`s of `(events, events_per_ms)` sum to per key and
/// 1 s window, together.
fn sequence_sums(streams: &[(u64, u64)]) -> Sums {
    let events = streams.iter().flat_map(|&(events, per_ms)| (0..events).map(move |i| ((i % 10).to_string(), (i / per_ms) as i64, i as f64)));
    window_sums_of(events)
}

const ALIGNED: &str = "watermark_alignment = { max_drift_ms = 1000, group = \"inputs\" }";

/// One generator at P = 2: its second subtask reads the second half of
/// 400 s of event time, 200 s ahead of the first. Without alignment the
/// ahead half's windows (10 keys × up to 200 s) wait in state until the
/// other half catches up, and checkpoints carry them. Aligned to 1 s, the
/// ahead subtask waits instead: a key holds windows for the drift, the
/// out-of-orderness and what is in flight in the channels, a few seconds'
/// worth. The results are the same.
#[test]
fn watermark_alignment_keeps_a_source_far_ahead_from_filling_state() {
    let expected = sequence_sums(&[(4_000_000, 10)]);
    let (unaligned, unaligned_largest) = run_windows(2, &sequence_source("numbers", 4_000_000, 10, ""), r#"["numbers"]"#);
    assert_eq!(unaligned, expected);
    let (aligned, aligned_largest) = run_windows(2, &sequence_source("numbers", 4_000_000, 10, ALIGNED), r#"["numbers"]"#);
    assert_eq!(aligned, expected, "alignment changes when events are read, not the results");
    assert!(aligned_largest > 0, "checkpoints completed while aligned");
    assert!(
        aligned_largest * 4 < unaligned_largest,
        "the largest checkpoint holds {aligned_largest} bytes aligned, {unaligned_largest} unaligned"
    );
}

/// Two sources in one alignment group: `fast` covers 1 000 s of event time
/// in the events `slow` needs for 100 s. Unaligned, `fast`'s windows wait
/// for `slow`; aligned, `fast` waits while it is more than 1 s ahead, and
/// runs free once `slow` has ended.
#[test]
fn sources_of_one_alignment_group_wait_for_each_other() {
    let run = |extra: &str| {
        let sources = sequence_source("slow", 1_000_000, 10, extra) + &sequence_source("fast", 1_000_000, 1, extra);
        run_windows(1, &sources, r#"["slow", "fast"]"#)
    };
    let expected = sequence_sums(&[(1_000_000, 10), (1_000_000, 1)]);
    let (unaligned, unaligned_largest) = run("");
    assert_eq!(unaligned, expected);
    let (aligned, aligned_largest) = run(ALIGNED);
    assert_eq!(aligned, expected);
    assert!(aligned_largest > 0, "checkpoints completed while aligned");
    assert!(
        aligned_largest * 4 < unaligned_largest,
        "the largest checkpoint holds {aligned_largest} bytes aligned, {unaligned_largest} unaligned"
    );
}

/// A stop with a savepoint holds processing-time timers as well as the
/// sources: a window of the machine's clock that was open at the
/// savepoint's barrier fires once — in the run restored from it — even
/// into a `file` sink, which cannot take output back. Before, windows
/// whose end passed while the savepoint was written fired in the stopping
/// run too, and again after the restore. And a window fires once within a
/// run: its timer fires after its last millisecond, so an event processed
/// in that millisecond no longer opens it again (it did, and the window
/// fired twice, split). Five stops and restores of 10 ms windows: no
/// window of a sensor appears twice.
#[test]
fn a_stop_with_a_savepoint_fires_no_processing_time_timers_after_its_barrier() {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "clock"
checkpoint_dir = "checkpoints"

[[source]]
name = "sensors"
type = "generator"
mode = "sensors"
events = 10000000
speed = 1

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["sensors"]
key_by = true
config = {{ time = "processing", size_ms = 10 }}

{WINDOW_SINKS}"#,
            plugin = toml_path(&plugin("sensor-window"))
        ),
    );
    let mut from: Option<std::path::PathBuf> = None;
    for round in 0..5 {
        let extra: Vec<&str> = from.iter().flat_map(|sp| ["--from-savepoint", sp.to_str().unwrap()]).collect();
        let host = Host::start(&job, &extra);
        let read = host.records_read("clock");
        host.wait_for_records("clock", read + 150);
        let savepoint = dir.path(&format!("sp{round}"));
        host.stop_with_savepoint("clock", &savepoint);
        let (status, stderr) = host.wait();
        assert!(status.success(), "{stderr}");
        from = Some(savepoint);
    }
    let sums = windows(&dir.read("sums.txt"));
    assert_eq!(sums.len(), 3, "windows of the three sensors: {sums:?}");
    for (sensor, windows) in &sums {
        let twice: Vec<_> = windows.windows(2).filter(|pair| pair[0].0 == pair[1].0).map(|pair| pair[0]).collect();
        assert!(twice.is_empty(), "windows of `{sensor}` written twice: {twice:?}");
    }
}

/// An operator whose inbox never runs dry — slower than its source, here
/// with 200 000 keys — still fires its processing-time timers: windows of
/// the machine's clock come out while the input streams. (They fired only
/// when the inbox was empty: never, for such an operator.)
#[test]
fn a_busy_operator_fires_its_processing_time_timers() {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "busy"
parallelism = 1

[[source]]
name = "numbers"
type = "generator"
keys = 200000

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["numbers"]
key_by = true
config = {{ time = "processing", size_ms = 200 }}

[[sink]]
name = "sums"
type = "file"
path = "sums.txt"
input = "windows"
"#,
            plugin = toml_path(&plugin("sensor-window"))
        ),
    );
    let host = Host::start(&job, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(dir.path("sums.txt")).unwrap_or_default().is_empty() {
        assert!(Instant::now() < deadline, "no window fired in 30 s, {} records read", host.records_read("busy"));
        std::thread::sleep(Duration::from_millis(100));
    }
    host.weir(&["cancel", "busy"]).success();
}
