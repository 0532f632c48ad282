//! Operators in Python and JavaScript: built from source with their SDKs
//! (componentize-py, componentize-js), run by the same host, agreeing with Rust — down
//! to each other's state.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{JobDir, build_plugin as build, js_plugin, js_plugin_interpreted, plugin, python_plugin, run_job, stopped_with_savepoint, toml_path, weir, workspace};

/// A Python plugin that does not compile fails its build naming its own
/// file and line, without a Rust backtrace: componentize-py names it by
/// where it mounted it (`/1/app.py`), and adds its backtrace when
/// RUST_BACKTRACE is set, as it often is where Rust is written.
#[test]
fn a_python_plugin_with_a_syntax_error_fails_its_build_naming_the_line() {
    let dir = JobDir::new();
    std::fs::create_dir(dir.path("bad")).unwrap();
    dir.write("bad/app.py", "from weir_sdk import Operator, export\n\nclass Bad(Operator):\n    def process(self, ctx, event)\n        pass\n\nexport(Bad)\n");
    let (source, out) = (dir.path("bad").canonicalize().unwrap(), dir.path("bad.wasm"));
    let built = Command::new("bash")
        .arg(workspace().join("scripts/build-python-plugin.sh"))
        .args([&source, &out])
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run the Python build script");
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(!built.status.success() && !out.exists(), "{stderr}");
    assert!(stderr.contains(&format!("File \"{}/app.py\", line 4", source.display())), "{stderr}");
    assert!(stderr.contains("SyntaxError: expected ':'") && !stderr.contains("backtrace"), "{stderr}");
}

/// A Python or JavaScript plugin that fails fails the job with a
/// traceback naming its own files and lines: not the mount componentize-py
/// built it from (`/1/app.py`), nor the bundle componentize-js was given (`plugin.js:842`,
/// a file the build deleted). The build scripts record where the sources
/// were (for JavaScript, the bundle's source map), and the SDKs read it.
/// The frames through which the SDK and the runtime called the plugin are
/// left out.
#[test]
fn an_error_in_a_python_or_javascript_plugin_names_its_own_lines() {
    let dir = JobDir::new();
    std::fs::create_dir(dir.path("py")).unwrap();
    let python = dir.write(
        "py/app.py",
        "import json\nfrom weir_sdk import Operator, export\n\n\ndef parse(text):\n    return json.loads(text)[\"missing\"][\"field\"]\n\n\n\
         class Thrower(Operator):\n    def process(self, ctx, event):\n        ctx.emit(event.key, str(parse(event.value.decode())))\n\n\n\
         export(Thrower)\n",
    );
    let javascript = dir.write(
        "thrower.js",
        "import { Operator, exportOperator } from \"weir-sdk\";\n\nfunction parse(text) {\n  return JSON.parse(text).missing.field;\n}\n\n\
         class Thrower extends Operator {\n  process(ctx, event) {\n    ctx.emit(event.key, String(parse(event.valueString())));\n  }\n}\n\
         export const operator = exportOperator(Thrower);\n",
    );
    dir.write("in.jsonl", "{\"key\":\"a\",\"value\":\"{}\"}\n");
    let failure = |wasm: &Path| {
        let job = dir.write(
            "job.toml",
            &format!(
                "name = \"thrower\"\n[[source]]\nname = \"in\"\ntype = \"file\"\nformat = \"json\"\npath = \"in.jsonl\"\n\n\
                 [[operator]]\nuid = \"throw\"\nplugin = {}\ninputs = [\"in\"]\nmemory_limit_mb = 512\n\n\
                 [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"throw\"\n",
                toml_path(wasm)
            ),
        );
        run_job(&job, &[]).failure()
    };

    let error = failure(&build("build-python-plugin.sh", &dir.path("py"), "thrower-py"));
    let file = python.canonicalize().unwrap();
    assert!(error.contains("KeyError: 'missing'"), "{error}");
    assert!(error.contains(&format!("File \"{}\", line 6, in parse", file.display())), "{error}");
    assert!(error.contains(&format!("File \"{}\", line 11, in process", file.display())), "{error}");
    assert!(!error.contains("File \"/0/") && !error.contains("File \"/1/"), "{error}");
    assert!(!error.contains("weir_sdk/"), "the SDK's calls into the plugin are left out: {error}");

    let error = failure(&build("build-js-plugin.sh", &javascript, "thrower-js"));
    let file = javascript.canonicalize().unwrap();
    assert!(error.contains("TypeError") && error.contains(&format!("parse@{}:4:", file.display())), "{error}");
    assert!(error.contains(&format!("process@{}:9:", file.display())), "{error}");
    assert!(!error.contains("plugin.js:"), "{error}");
    assert!(!error.contains("weir-sdk.js") && !error.contains("initializer.js"), "the SDK's and the runtime's calls left out: {error}");
}

/// A Python plugin reaching its memory cap gets a `MemoryError` it may
/// handle, and goes on; one it does not handle fails the job with its
/// traceback and the cap it reached (the cap killed the call at once: the
/// sandbox audit).
#[test]
fn a_python_plugin_may_handle_a_memory_error() {
    let dir = JobDir::new();
    std::fs::create_dir(dir.path("py")).unwrap();
    dir.write(
        "py/app.py",
        r#"from weir_sdk import Operator, export


class Hoarder(Operator):
    def process(self, ctx, event):
        if event.value == b"unhandled":
            bytearray(200 << 20)
        try:
            bytearray(200 << 20)
            ctx.emit(event.key, "granted")
        except MemoryError:
            ctx.emit(event.key, "refused")


export(Hoarder)
"#,
    );
    let wasm = build("build-python-plugin.sh", &dir.path("py"), "hoarder-py");
    let run = |value: &str| {
        dir.write("in.jsonl", &format!("{{\"key\":\"a\",\"value\":\"{value}\"}}\n"));
        let job = dir.write(
            "job.toml",
            &format!(
                "name = \"hoarder\"\n[[source]]\nname = \"in\"\ntype = \"file\"\nformat = \"json\"\npath = \"in.jsonl\"\n\n\
                 [[operator]]\nuid = \"hoard\"\nplugin = {}\ninputs = [\"in\"]\nmemory_limit_mb = 64\n\n\
                 [[sink]]\nname = \"out\"\ntype = \"file\"\npath = \"out.txt\"\ninput = \"hoard\"\n",
                toml_path(&wasm)
            ),
        );
        run_job(&job, &[])
    };
    run("handled").success();
    assert_eq!(std::fs::read_to_string(dir.path("out.txt")).unwrap(), "a\trefused\n");
    let error = run("unhandled").failure();
    assert!(error.contains("MemoryError"), "{error}");
    assert!(error.contains("`process` reached its memory cap of 64 MiB"), "{error}");
}

/// A JavaScript operator's map state: entries by sub-key, read and written
/// through the host across batches, kept in a savepoint and restored —
/// every count exact after a stop with a savepoint halfway and a restore.
#[test]
fn a_javascript_map_state_keeps_entries_by_sub_key_across_a_savepoint() {
    let dir = JobDir::new();
    let source = dir.write(
        "category-count.js",
        r#"import { MapState, Operator, exportOperator } from "weir-sdk";

class CategoryCount extends Operator {
  init(config) {
    this.counts = new MapState("by-category", { check: (n) => Number.isSafeInteger(n) });
  }
  process(ctx, event) {
    const category = event.valueString();
    if (category.startsWith("reset-")) {
      this.counts.remove(ctx, category.slice(6));
      ctx.emit(event.key, category);
      return;
    }
    const n = (this.counts.get(ctx, category) ?? 0) + 1;
    this.counts.set(ctx, category, n);
    ctx.emit(event.key, `${category} ${n}`);
  }
}
export const operator = exportOperator(CategoryCount);
"#,
    );
    let wasm = build("build-js-plugin.sh", &source, "category-count-js");
    let categories = ["a", "b", "c", "a", "reset-a", "b", "c", "ä"];
    let events: Vec<(String, &str)> = (0..9_000).map(|i| (format!("user{}", i % 7), categories[(i / 7) % categories.len()])).collect();
    let input: String = events.iter().map(|(key, value)| format!("{{\"key\":\"{key}\",\"value\":\"{value}\"}}\n")).collect();
    dir.write("in.jsonl", &input);
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "categories"
parallelism = 2
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 200

[[source]]
name = "events"
type = "file"
format = "json"
path = "in.jsonl"
rate = 3000

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["events"]
key_by = true

[[sink]]
name = "out"
type = "files"
input = "count"
path = "out"
"#,
            plugin = toml_path(&wasm)
        ),
    );
    let savepoint = stopped_with_savepoint(&dir, &job, "categories", 3_000);
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();

    let mut counts = std::collections::HashMap::<(String, String), u64>::new();
    let mut expected: Vec<String> = events
        .iter()
        .map(|(key, value)| match value.strip_prefix("reset-") {
            Some(category) => {
                counts.remove(&(key.clone(), category.to_owned()));
                format!("{key}\t{value}")
            }
            None => {
                let n = counts.entry((key.clone(), value.to_string())).or_default();
                *n += 1;
                format!("{key}\t{value} {n}")
            }
        })
        .collect();
    expected.sort();
    assert_eq!(sorted_output(&dir.path("out")), expected, "every count exactly once, resets included");
}

/// A cart plugin in another language (plugins/python/shopping-cart,
/// plugins/js/shopping-cart) lists whole carts from the host — one larger
/// than a page of a listing — and clears them, across a savepoint, as the
/// Rust plugin does (tests/map_state.rs).
fn carts_in(wasm: &Path) {
    let dir = JobDir::new();
    let (input, expected) = common::carts::cart_session(7, 24_000, 5_000);
    dir.write("in.jsonl", &input);
    let job = common::carts::cart_job(&dir, "memory", wasm);
    let savepoint = stopped_with_savepoint(&dir, &job, "carts", 12_000);
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_eq!(sorted_output(&dir.path("out")), expected, "every checkout once, listing its whole cart");
}

#[test]
fn a_python_map_state_lists_and_clears_a_keys_entries() {
    carts_in(&python_plugin("shopping-cart"));
}

#[test]
fn a_javascript_map_state_lists_and_clears_a_keys_entries() {
    carts_in(&js_plugin("shopping-cart"));
}

/// A count-window job run by `first` until a savepoint, then resumed from
/// it by `then`, a plugin in another language: the groups `first` left
/// incomplete in list state are completed by `then` — exactly the groups
/// one plugin would have made — so the languages' list layouts agree.
fn groups_handed_over(first: &Path, then: &Path) {
    let dir = JobDir::new();
    let (input, expected) = common::groups::group_session(11, 16_000, 5);
    dir.write("in.jsonl", &input);
    let job = common::groups::groups_job(&dir, "memory", first, 5);
    let savepoint = stopped_with_savepoint(&dir, &job, "groups", 8_000);
    let handed_over = std::fs::read_to_string(&job).unwrap().replace(&toml_path(first), &toml_path(then));
    std::fs::write(&job, handed_over).unwrap();
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_eq!(sorted_output(&dir.path("out")), expected, "every group once, in order, across the hand-over");
}

#[test]
fn a_python_list_state_goes_on_with_the_lists_a_rust_plugin_left() {
    groups_handed_over(&plugin("count-window"), &python_plugin("count-window"));
}

#[test]
fn a_rust_list_state_goes_on_with_the_lists_a_javascript_plugin_left() {
    groups_handed_over(&js_plugin("count-window"), &plugin("count-window"));
}

/// A keyed count of `in.jsonl` by `plugin`, printed as `key<TAB>count`.
fn count_job(dir: &JobDir, name: &str, plugin: &Path, extra_source: &str) -> PathBuf {
    dir.write(
        &format!("{name}.toml"),
        &format!(
            r#"
name = "{name}"
parallelism = 2
checkpoint_dir = "checkpoints-{name}"
checkpoint_interval_ms = 300

[[source]]
name = "words"
type = "file"
format = "json"
path = "in.jsonl"
{extra_source}

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["words"]
key_by = true
memory_limit_mb = 512

[[sink]]
name = "out"
type = "files"
input = "count"
path = "out-{name}"
"#,
            plugin = toml_path(plugin)
        ),
    )
}

/// `n` words (JSON lines keyed by word), some of them non-ASCII.
fn words(n: usize) -> String {
    let vocabulary = ["stream", "état", "事件", "window", "käse", "plugin", "w", ""];
    (0..n).map(|i| format!("{{\"key\": \"{}{}\", \"value\": 1}}\n", vocabulary[i % 7], i % 13)).collect()
}

fn sorted_output(dir: &Path) -> Vec<String> {
    common::committed_lines(dir, None)
}

/// JavaScript built both ways: compiled ahead of time (the default) and for
/// the engine's plain interpreter (`WEIR_JS_AOT=0`).
#[test]
fn word_count_gives_identical_results_in_rust_python_and_javascript() {
    let dir = JobDir::new();
    dir.write("in.jsonl", &words(5_000));
    let mut outputs = Vec::new();
    let languages = [
        ("rust", plugin("word-count")),
        ("python", python_plugin("word-count")),
        ("js", js_plugin("word-count")),
        ("js-interpreted", js_plugin_interpreted("word-count")),
    ];
    for (language, plugin) in languages {
        weir(&["plugin", "check", plugin.to_str().unwrap()]).success();
        run_job(&count_job(&dir, language, &plugin, ""), &[]).success();
        outputs.push((language, sorted_output(&dir.path(&format!("out-{language}")))));
    }
    assert_eq!(outputs[0].1.len(), 5_000, "one count per event");
    for (language, output) in &outputs[1..] {
        assert_eq!(output, &outputs[0].1, "{language} agrees with Rust");
    }
}

#[test]
fn a_savepoint_taken_with_the_rust_operator_restores_into_the_python_and_javascript_ones() {
    for (language, other) in [("python", python_plugin("word-count")), ("js", js_plugin("word-count"))] {
        counts_handed_over(&plugin("word-count"), &other, &format!("Rust, then {language}"));
    }
}

/// The Python SDK holds its counts in the instance between calls: the stop's
/// savepoint has them only because the host's `flush` wrote them back.
#[test]
fn a_savepoint_taken_with_the_python_operator_restores_into_the_rust_one() {
    counts_handed_over(&python_plugin("word-count"), &plugin("word-count"), "Python, then Rust");
}

/// Counts 12 000 words with `first`, stopped with a savepoint after 3 000
/// outputs, then from the savepoint with `then`: every count exactly once.
fn counts_handed_over(first: &Path, then: &Path, what: &str) {
    let dir = JobDir::new();
    dir.write("in.jsonl", &words(12_000));
    let job = count_job(&dir, "counts", first, "rate = 3000");
    let savepoint = stopped_with_savepoint(&dir, &job, "counts", 3_000);
    // The same job, with the other operator, from the savepoint.
    let text = std::fs::read_to_string(&job).unwrap();
    let switched = dir.write("switched.toml", &text.replace(&toml_path(first), &toml_path(then)).replace("rate = 3000", ""));
    run_job(&switched, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    let mut expected: Vec<String> = Vec::new();
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for line in words(12_000).lines() {
        let key = serde_json::from_str::<serde_json::Value>(line).unwrap()["key"].as_str().unwrap().to_owned();
        let count = counts.entry(key.clone()).or_default();
        *count += 1;
        expected.push(format!("{key}\t{count}"));
    }
    expected.sort();
    assert_eq!(sorted_output(&dir.path("out-counts")), expected, "{what}: every count exactly once");
}

#[test]
fn a_python_window_operator_sums_pressure_to_zero_in_event_time() {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "sensors"
parallelism = 2

[[source]]
name = "sensors"
type = "generator"
mode = "sensors"
events = 3000
shuffle_ms = 100
out_of_orderness_ms = 100

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["sensors"]
key_by = true
memory_limit_mb = 512
config = {{ time = "event" }}

[[sink]]
name = "sums"
type = "file"
input = "windows"
path = "sums.txt"
"#,
            plugin = toml_path(&python_plugin("sensor-window"))
        ),
    );
    run_job(&job, &[]).success();
    let sums = dir.read("sums.txt");
    let pressure: Vec<f64> = sums
        .lines()
        .filter(|l| l.starts_with("pressure\t"))
        .map(|l| {
            let value: serde_json::Value = serde_json::from_str(l.split_once('\t').unwrap().1).unwrap();
            value["value"].as_f64().unwrap_or_else(|| panic!("a sum in {l}"))
        })
        .collect();
    assert_eq!(pressure.len(), 10, "ten 1 s windows: {sums}");
    assert!(pressure.iter().all(|s| s.abs() < 1e-9), "{pressure:?}");
}

/// The JavaScript SDK's windows agree with the Rust SDK's: the sensor
/// readings, out of order, summed over 200 ms windows offset by 50 ms by
/// `plugins/js/sensor-window` and the Rust `plugins/sensor-window` at
/// parallelism 2 — every window starts 50 ms past a multiple of 200 ms,
/// and every window's sum is the same (to rounding, and compared
/// as numbers: JavaScript writes `3` where Rust writes `3.0`). The readings are
/// shuffled within the out-of-orderness bound, so that none is late: which
/// events beyond it are depends on where the source's batches were cut
/// (docs/job-file.md), and two runs would not compare.
#[test]
fn javascript_windows_agree_with_the_rust_ones() {
    let dir = JobDir::new();
    let windows = |language: &str, plugin: &Path| {
        let source = r#"type = "generator"
mode = "sensors"
events = 6000
shuffle_ms = 300
out_of_orderness_ms = 400"#;
        let job = sensor_window_job(&dir, &format!("sensors-{language}"), plugin, source, "size_ms = 200, offset_ms = -150, lateness_ms = 50");
        run_job(&job, &[]).success();
        let mut sums: Vec<(String, i64, i64, f64)> = dir
            .read(&format!("sums-sensors-{language}.txt"))
            .lines()
            .map(|line| {
                let (key, json) = line.split_once('\t').unwrap();
                let window: serde_json::Value = serde_json::from_str(json).unwrap();
                let field = |name: &str| window[name].as_i64().unwrap_or_else(|| panic!("{name} in {line}"));
                (key.to_owned(), field("start"), field("end"), window["value"].as_f64().unwrap())
            })
            .collect();
        sums.sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)).then(a.3.total_cmp(&b.3)));
        let mut late: Vec<String> = dir.read(&format!("late-sensors-{language}.txt")).lines().map(str::to_owned).collect();
        late.sort();
        (sums, late)
    };
    let (rust_sums, rust_late) = windows("rust", &plugin("sensor-window"));
    let (js_sums, js_late) = windows("js", &js_plugin("sensor-window"));
    assert!(rust_sums.len() > 100, "windows to compare: {rust_sums:?}");
    let unaligned: Vec<_> = rust_sums.iter().filter(|(_, start, end, _)| start.rem_euclid(200) != 50 || end - start != 200).collect();
    assert!(unaligned.is_empty(), "windows of 200 ms from 50 ms past a multiple (-150 ms modulo 200): {unaligned:?}");
    // A key's readings come from both source subtasks, in either order:
    // sums agree to rounding, as two runs of one plugin do.
    let same = |(key, start, end, sum): &(String, i64, i64, f64), other: &(String, i64, i64, f64)| {
        (key, start, end) == (&other.0, &other.1, &other.2) && (sum - other.3).abs() <= 1e-9 * sum.abs().max(1.0)
    };
    let differ: Vec<_> = js_sums.iter().zip(&rust_sums).filter(|(js, rust)| !same(js, rust)).take(5).collect();
    assert!(differ.is_empty() && js_sums.len() == rust_sums.len(), "JavaScript, Rust: {differ:?} ({} and {} windows)", js_sums.len(), rust_sums.len());
    assert_eq!(js_late, rust_late);
}

/// Session windows agree in the three SDKs, and with the sessions worked
/// out here: four sensors' readings, mostly less than the 150 ms gap apart
/// and sometimes more, shuffled within 300 ms of event time (under the
/// source's bound, so none is late) — so that a reading often arrives
/// after later ones and joins, or bridges, sessions already open. Each
/// session is a sensor's readings until a pause longer than the gap, from
/// its first reading to its last plus the gap, and sums them (whole numbers: exact in
/// any order).
#[test]
fn session_windows_agree_in_rust_python_and_javascript() {
    const GAP: i64 = 150;
    let dir = JobDir::new();
    let (input, expected) = sensor_sessions(GAP);
    dir.write("in.jsonl", &input);
    assert!(expected.len() > 300, "sessions to compare: {}", expected.len());
    for (language, plugin) in [("rust", plugin("sensor-window")), ("python", python_plugin("sensor-window")), ("js", js_plugin("sensor-window"))] {
        let source = r#"type = "file"
format = "json"
path = "in.jsonl"
out_of_orderness_ms = 400"#;
        let job = sensor_window_job(&dir, &format!("sessions-{language}"), &plugin, source, &format!("gap_ms = {GAP}"));
        run_job(&job, &[]).success();
        let mut sessions: Vec<(String, i64, i64, i64)> = common::windows::windows(&dir.read(&format!("sums-sessions-{language}.txt")))
            .into_iter()
            .flat_map(|(sensor, windows)| windows.into_iter().map(move |(start, end, sum)| (sensor.clone(), start, end, sum as i64)))
            .collect();
        sessions.sort();
        let differ: Vec<_> = sessions.iter().zip(&expected).filter(|(got, want)| got != want).take(3).collect();
        assert!(differ.is_empty() && sessions.len() == expected.len(), "{language}: {differ:?} ({} sessions of {})", sessions.len(), expected.len());
        assert_eq!(dir.read(&format!("late-sessions-{language}.txt")), "", "{language}: nothing late");
    }
}

/// Job `name` at parallelism 2: the source `sensors` (the inside of its
/// table) into `plugin`, a sensor-window keyed by sensor with `config` (the
/// inside of a TOML inline table); its results to `sums-{name}.txt`, its
/// late events to `late-{name}.txt`.
fn sensor_window_job(dir: &JobDir, name: &str, plugin: &Path, source: &str, config: &str) -> PathBuf {
    dir.write(
        &format!("{name}.toml"),
        &format!(
            r#"
name = "{name}"
parallelism = 2

[[source]]
name = "sensors"
{source}

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["sensors"]
key_by = true
config = {{ {config} }}

[[sink]]
name = "sums"
type = "file"
input = "windows"
path = "sums-{name}.txt"

[[sink]]
name = "late"
type = "file"
input = "windows.late"
path = "late-{name}.txt"
"#,
            plugin = toml_path(plugin)
        ),
    )
}

/// JSON lines of sensor readings (whole numbers 1–9) shuffled within 300 ms
/// of event time, and their sessions with `gap` as (sensor, start, end,
/// sum), sorted.
fn sensor_sessions(gap: i64) -> (String, Vec<(String, i64, i64, i64)>) {
    const EPOCH: i64 = 1_700_000_000_000;
    let mut random = common::Lcg(29);
    let mut readings = Vec::new();
    let mut sessions = Vec::new();
    for sensor in ["temp", "pressure", "door", "light"] {
        let mut time = EPOCH + random.below(500) as i64;
        let mut session: Option<(i64, i64, i64)> = None;
        for _ in 0..1500 {
            let value = 1 + random.below(9) as i64;
            readings.push((time, random.below(1 << 30), sensor, value));
            session = match session {
                // Touching sessions merge, as in Flink: a reading `gap` after the last joins.
                Some((start, last, sum)) if time - last <= gap => Some((start, time, sum + value)),
                Some((start, last, sum)) => {
                    sessions.push((sensor.to_owned(), start, last + gap, sum));
                    Some((time, time, value))
                }
                None => Some((time, time, value)),
            };
            time += match random.below(5) {
                0 => gap + random.below(400) as i64, // now and then exactly the gap
                _ => 1 + random.below(100) as i64,
            };
        }
        let (start, last, sum) = session.expect("readings");
        sessions.push((sensor.to_owned(), start, last + gap, sum));
    }
    readings.sort_by_key(|&(time, shuffle, _, _)| ((time - EPOCH) / 300, shuffle));
    let lines: String = readings
        .iter()
        .map(|(time, _, sensor, value)| format!("{{\"key\": \"{sensor}\", \"value\": {value}, \"timestamp\": {time}}}\n"))
        .collect();
    sessions.sort();
    (lines, sessions)
}

/// A JavaScript operator judges lateness by the watermark the host passes:
/// none before the first (jco hands the host's "no watermark" over as
/// 2^63, which every event was judged late against) and negative ones as
/// negative. In-order events from -20 s on: not one is late.
#[test]
fn a_javascript_operator_sees_no_watermark_before_the_first_and_negative_ones_as_such() {
    let dir = JobDir::new();
    let source = dir.write(
        "late-split.js",
        r#"import { Operator, ValueState, exportOperator } from "weir-sdk";

class LateSplit extends Operator {
  init(config) {
    config.allowOnly([]);
    this.count = new ValueState("count");
  }

  process(ctx, event) {
    if (ctx.isLate(event.timestamp)) {
      ctx.emitTo("late", event.key, `${event.timestamp} behind ${ctx.watermark}`);
      return;
    }
    const n = (this.count.get(ctx) ?? 0) + 1;
    this.count.set(ctx, n);
    ctx.emit(event.key, n);
  }
}

export const operator = exportOperator(LateSplit);
"#,
    );
    let plugin = build("build-js-plugin.sh", &source, "late-split-js");
    let events: String =
        (0..20_000).map(|i| format!("{{\"key\": \"k{}\", \"value\": 1, \"timestamp\": {}}}\n", i % 10, i - 20_000)).collect();
    dir.write("in.jsonl", &events);
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "late-split"

[[source]]
name = "in"
type = "file"
format = "json"
path = "in.jsonl"

[[operator]]
uid = "split"
plugin = {plugin}
inputs = ["in"]
key_by = true
memory_limit_mb = 512

[[sink]]
name = "counts"
type = "file"
input = "split"
path = "counts.txt"

[[sink]]
name = "late"
type = "file"
input = "split.late"
path = "late.txt"
"#,
            plugin = toml_path(&plugin)
        ),
    );
    run_job(&job, &[]).success();
    let late = dir.read("late.txt");
    assert_eq!(late.lines().count(), 0, "in-order events judged late: {}", late.lines().take(3).collect::<Vec<_>>().join("; "));
    assert_eq!(dir.read("counts.txt").lines().count(), 20_000);
}

/// Numbers a JavaScript operator emits are written as the Rust SDK writes
/// an `f64` (Rust's `Display`), never with an exponent: plugins in either
/// language give the same text. Its config says how it starts, as the Rust
/// SDK's does.
#[test]
fn a_javascript_operator_writes_numbers_as_rust_does() {
    let numbers = [0.0, -0.0, 7.0, -1.0, 0.25, -2.25, 1e-7, 123.456, 0.1 + 0.2, 2.5e15, 1e21, 1.5e300, f64::MAX, 5e-324, -1e-300];
    let literals: Vec<String> = numbers.iter().map(|x| format!("{x:e}")).collect();
    let dir = JobDir::new();
    let source = dir.write(
        "numbers.js",
        &format!(
            r#"import {{ Operator, exportOperator }} from "weir-sdk";

class Numbers extends Operator {{
  init(config) {{
    config.allowOnly(["bad"]);
    this.bad = config.has("bad");
    this.start = `restored ${{config.restored}}, ${{config.memoryLimitMb}} MiB`;
  }}

  process(ctx, event) {{
    if (this.bad) ctx.emitAt(event.key, "x", "abc");
    ctx.emit(event.key, this.start);
    for (const x of [{}]) ctx.emit(event.key, x);
    ctx.emit(event.key, NaN);
    ctx.emit(event.key, -Infinity);
  }}
}}

export const operator = exportOperator(Numbers);
"#,
            literals.join(", ")
        ),
    );
    let plugin = build("build-js-plugin.sh", &source, "numbers-js");
    dir.write("in.jsonl", "{\"key\": \"n\", \"value\": 1}\n");
    let job = dir.write(
        "job.toml",
        &format!(
            "name = \"numbers\"\n[[source]]\nname = \"in\"\ntype = \"file\"\nformat = \"json\"\npath = \"in.jsonl\"\n\n\
             [[operator]]\nuid = \"numbers\"\nplugin = {}\ninputs = [\"in\"]\nmemory_limit_mb = 512\n\n\
             [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"numbers\"\nformat = \"value\"\n",
            toml_path(&plugin)
        ),
    );
    let run = run_job(&job, &[]);
    run.success();
    let mut expected = vec!["restored false, 512 MiB".to_owned()];
    expected.extend(numbers.iter().map(|x| x.to_string()));
    expected.extend([f64::NAN.to_string(), f64::NEG_INFINITY.to_string()]);
    assert_eq!(run.stdout().lines().collect::<Vec<_>>(), expected);
    // A timestamp that is not one fails the call where it was given (it
    // went out as no timestamp).
    let text = std::fs::read_to_string(&job).unwrap().replace("memory_limit_mb = 512", "memory_limit_mb = 512\nconfig = { bad = 1 }");
    let error = run_job(&dir.write("bad.toml", &text), &[]).failure();
    assert!(error.contains("an event's timestamp must be an integer number of ms (or a bigint), got abc"), "{error}");
}

/// A JavaScript plugin may hold as much as its instance's memory limit
/// allows: the engine's own cap on its heap (SpiderMonkey's default of
/// 32 MiB, which StarlingMonkey keeps) is lifted in the engine the build
/// script uses (scripts/patch-js-engine.mjs). With the cap a million held
/// objects failed with the engine's "out of memory" at any
/// `memory_limit_mb`; past the limit the host names the limit.
#[test]
fn a_javascript_plugin_holds_what_its_memory_limit_allows_not_the_engines_32_mib() {
    let dir = JobDir::new();
    let source = dir.write(
        "hoard.js",
        r#"import { Operator, exportOperator } from "weir-sdk";

// Keeps every object it makes: `value` of them an event, each with a string.
const hoard = [];

class Hoard extends Operator {
  process(ctx, event) {
    const n = event.valueNumber();
    for (let i = 0; i < n; i++) hoard.push({ i, name: `item-${hoard.length}` });
    ctx.emit(event.key, hoard.length);
  }
}

export const operator = exportOperator(Hoard);
"#,
    );
    dir.write("in.jsonl", &"{\"key\": \"k\", \"value\": 25000}\n".repeat(40));
    // Both engines: ahead of time (the default) and the plain interpreter.
    let aot = build("build-js-plugin.sh", &source, "hoard-js");
    let interpreted = common::build_plugin_with_env("build-js-plugin.sh", &source, "hoard-js-interpreted", &[("WEIR_JS_AOT", "0")]);
    for plugin in [aot, interpreted] {
        holds_a_million_objects_within_its_limit(&dir, &plugin);
    }
}

fn holds_a_million_objects_within_its_limit(dir: &JobDir, plugin: &Path) {
    let job_with = |limit: &str| {
        format!(
            "name = \"hoard\"\n[[source]]\nname = \"in\"\ntype = \"file\"\nformat = \"json\"\npath = \"in.jsonl\"\n\n\
             [[operator]]\nuid = \"hoard\"\nplugin = {}\ninputs = [\"in\"]\n{limit}\n\n\
             [[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"hoard\"\nformat = \"value\"\n",
            toml_path(plugin)
        )
    };
    let run = run_job(&dir.write("job.toml", &job_with("")), &[]);
    run.success();
    assert_eq!(run.stdout().lines().last(), Some("1000000"));
    let error = run_job(&dir.write("small.toml", &job_with("memory_limit_mb = 64")), &[]).failure();
    assert!(error.contains("exceeded its memory cap of 64 MiB") && error.contains("raise `memory_limit_mb`"), "{error}");
}
