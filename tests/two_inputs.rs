//! Two-input operators sharing keyed state (amplifier), broadcast inputs
//! with broadcast state (rules-filter) and side outputs, at parallelism 2.

mod common;

use std::collections::BTreeMap;

use common::{JobDir, amplifier_job, js_plugin, plugin, run_job, stopped_with_savepoint, toml_path};

/// `key<TAB>value` lines → key → values, sorted numerically (the two source
/// subtasks interleave in no fixed order).
fn by_key(output: &str) -> BTreeMap<u64, Vec<String>> {
    let mut map: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for line in output.lines() {
        let (key, value) = line.split_once('\t').expect("key<TAB>value");
        map.entry(key.parse().unwrap()).or_default().push(value.to_owned());
    }
    for values in map.values_mut() {
        values.sort_by(|a, b| a.parse::<f64>().unwrap().total_cmp(&b.parse::<f64>().unwrap()));
    }
    map
}

#[test]
fn amplifier_multiplies_readings_by_the_factor_its_control_stream_set() {
    let dir = JobDir::new();
    // Factors for sensors 900 and 901. Their first readings come ~0.9 s
    // after the start (readings are rate-limited), long after the control
    // file has been read: the control messages arrive before any data for
    // their keys, and must wait in keyed state on whichever subtask owns
    // the sensor.
    let job = amplifier_job(&dir, "", 2000, 2000, "type = \"file\"\npath = \"out.txt\"");
    run_job(&job, &[]).success();
    let out = by_key(&dir.read("out.txt"));
    assert_eq!(out.values().map(Vec::len).sum::<usize>(), 2000, "one output per reading");
    assert_eq!(out[&900], ["9000", "19000"]);
    assert_eq!(out[&901], ["450.5", "950.5"]);
    // Sensors without control messages keep factor 1.
    assert_eq!(out[&5], ["5", "1005"]);
    assert_eq!(out[&999], ["999", "1999"]);
}

fn rules_job(dir: &JobDir, plugin: &std::path::Path, rules_input: &str) -> std::path::PathBuf {
    dir.write(
        "rules.jsonl",
        concat!(
            "{\"key\":\"700\",\"value\":\"pass\"}\n",
            "{\"key\":\"701\",\"value\":\"pass\"}\n",
            "{\"key\":\"702\",\"value\":\"pass\"}\n",
            "{\"key\":\"702\",\"value\":\"block\"}\n",
        ),
    );
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "filter"
parallelism = 2

[[source]]
name = "data"
type = "generator"
events = 2000
keys = 1000
rate = 2000

[[source]]
name = "rules"
type = "file"
path = "rules.jsonl"
format = "json"

[[operator]]
uid = "filter"
plugin = {plugin}
{rules_input}

[[sink]]
name = "passed"
type = "file"
path = "passed.txt"
input = "filter"

[[sink]]
name = "blocked"
type = "file"
path = "blocked.txt"
input = "filter.blocked"
"#,
            plugin = toml_path(plugin)
        ),
    )
}

/// The Rust plugin and its JavaScript twin (`plugins/js/rules-filter`, on
/// the JavaScript SDK's `BroadcastState`) alike.
#[test]
fn rules_filter_applies_broadcast_rules_on_every_subtask() {
    for (language, plugin) in [("rust", plugin("rules-filter")), ("js", js_plugin("rules-filter"))] {
        let dir = JobDir::new();
        // Data keys 700-702 first appear ~0.7 s after the start on each of the
        // two source subtasks (each produces one half of the range).
        let job = rules_job(&dir, &plugin, "inputs = [\"data\"]\nbroadcast = [\"rules\"]");
        run_job(&job, &[]).success();
        let passed = by_key(&dir.read("passed.txt"));
        let expected: BTreeMap<u64, Vec<String>> = [(700, vec!["700", "1700"]), (701, vec!["701", "1701"])]
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().map(String::from).collect()))
            .collect();
        assert_eq!(passed, expected, "{language}: events 700 and 1700 come from different subtasks: both have the rules");
        let blocked = by_key(&dir.read("blocked.txt"));
        assert_eq!(blocked.values().map(Vec::len).sum::<usize>(), 1996, "{language}: everything else goes to the side output");
        assert_eq!(blocked[&702], ["702", "1702"], "{language}: a later `block` rule removes the pass");
    }
}

/// The two plugins' broadcast states are one: stopped with a savepoint
/// after the Rust plugin has read the rules (and before keys 700-702 come),
/// the job goes on with the JavaScript one, which applies rules it never
/// read itself.
#[test]
fn the_javascript_rules_filter_takes_over_the_rust_ones_rules_through_a_savepoint() {
    let dir = JobDir::new();
    let job = rules_job(&dir, &plugin("rules-filter"), "inputs = [\"data\"]\nbroadcast = [\"rules\"]");
    let text = std::fs::read_to_string(&job).unwrap().replace("rate = 2000", "rate = 500");
    std::fs::write(&job, &text).unwrap();
    let savepoint = stopped_with_savepoint(&dir, &job, "filter", 100);
    let passed_before = dir.read("passed.txt");
    assert_eq!(passed_before, "", "the savepoint came before the keys with rules");

    let rust = toml_path(&plugin("rules-filter"));
    // A version that keeps its rules as text cannot read the stored `true`s:
    // refused before it starts, naming the state and the value.
    let source = std::fs::read_to_string(common::workspace().join("plugins/js/rules-filter/rules-filter.js"))
        .unwrap()
        .replace("new BroadcastState(\"rules\")", "new BroadcastState(\"rules\", { check: (rule) => typeof rule === \"string\" })");
    let strict = common::build_plugin("build-js-plugin.sh", &dir.write("strict-rules.js", &source), "strict-rules-js");
    let refused = dir.write("strict.toml", &text.replace(&rust, &toml_path(&strict)));
    let error = run_job(&refused, &["--from-savepoint", savepoint.to_str().unwrap()]).failure();
    assert!(error.contains("broadcast state `rules`: stored value #0 (true) is refused"), "{error}");

    let switched = dir.write("switched.toml", &text.replace(&rust, &toml_path(&js_plugin("rules-filter"))));
    run_job(&switched, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    let passed = by_key(&dir.read("passed.txt"));
    assert_eq!(passed.keys().copied().collect::<Vec<_>>(), [700, 701], "the JavaScript plugin applies the Rust one's rules");
    let blocked = by_key(&dir.read("blocked.txt"));
    assert_eq!(blocked.values().map(Vec::len).sum::<usize>(), 1996, "everything else is blocked, once: {blocked:?}");
}

#[test]
fn broadcast_state_cannot_be_written_from_a_regular_input() {
    for (language, plugin) in [("rust", plugin("rules-filter")), ("js", js_plugin("rules-filter"))] {
        let dir = JobDir::new();
        let job = rules_job(&dir, &plugin, "inputs = [\"data\", \"rules\"]");
        let error = run_job(&job, &[]).failure();
        assert!(error.contains("operator `filter`"), "{language}: {error}");
        assert!(error.contains("broadcast state can only be changed"), "{language}: {error}");
        assert!(error.contains("`broadcast` in the job file"), "{language}: says how to fix it: {error}");
    }
}
