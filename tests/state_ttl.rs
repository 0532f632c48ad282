//! State with a time-to-live (`open-expiring`), through the `dedup`
//! plugin: an id repeated within its time-to-live is dropped and one
//! repeated after it passes again, on both backends and in the Python and
//! JavaScript twins; ids pass exactly once under SIGKILL, and across a
//! savepoint handed from the Rust plugin to the Python one at another
//! parallelism; a savepoint
//! holds only the ids still live, says their state expires, and a job
//! cannot restore it into a plugin that opens the state without a
//! time-to-live. A job without checkpoints frees expired ids too, and
//! shows its state's size.

mod common;

use std::time::Duration;

use std::path::{Path, PathBuf};

use common::{
    Host, JobDir, Lcg, assert_exactly_once_under_kills, committed_lines, js_plugin, keyed_file_job_at, plugin, printed_seed,
    python_plugin, run_job, stopped_with_savepoint, toml_path, weir,
};

/// Ids that come twice close together, then again long after.
const REPEATED: u64 = 50;
/// Fresh ids between the repeats: at 200 events/s, 3 s of processing time.
const FILLER: u64 = 600;

/// The dedup job on `backend` with `plugin`, reading `in.jsonl` at `rate`
/// events/s, its ids living `ttl_ms`.
fn dedup_job(dir: &JobDir, backend: &str, plugin: &Path, ttl_ms: u64, rate: u64) -> PathBuf {
    keyed_file_job_at(dir, "dedup", backend, plugin, &format!("ttl_ms = \"{ttl_ms}\""), rate)
}

fn event(id: &str) -> String {
    format!("{{\"key\":\"{id}\",\"value\":\"{id}\"}}\n")
}

fn repeats_pass_again_once_expired(backend: &str, plugin: &Path) {
    let dir = JobDir::new();
    let mut input = String::new();
    for i in 0..REPEATED {
        input.push_str(&event(&format!("id{i}")).repeat(2));
    }
    for i in 0..FILLER {
        input.push_str(&event(&format!("fresh{i}")));
    }
    for i in 0..REPEATED {
        input.push_str(&event(&format!("id{i}")));
    }
    dir.write("in.jsonl", &input);
    run_job(&dedup_job(&dir, backend, plugin, 1_000, 200), &[]).success();

    let mut expected: Vec<String> = (0..REPEATED).flat_map(|i| [format!("id{i}\tid{i}"), format!("id{i}\tid{i}")]).collect();
    expected.extend((0..FILLER).map(|i| format!("fresh{i}\tfresh{i}")));
    expected.sort();
    let out = committed_lines(&dir.path("out"), None);
    assert_eq!(out.len(), expected.len(), "{} lines, expected {}", out.len(), expected.len());
    assert_eq!(out, expected, "a repeat 5 ms later is dropped, one 3 s later passes (time-to-live 1 s)");
}

#[test]
fn repeats_within_the_time_to_live_are_dropped_and_later_ones_pass_memory() {
    repeats_pass_again_once_expired("memory", &plugin("dedup"));
}

#[test]
fn repeats_within_the_time_to_live_are_dropped_and_later_ones_pass_rocksdb() {
    repeats_pass_again_once_expired("rocksdb", &plugin("dedup"));
}

#[test]
fn the_python_twin_expires_its_ids_alike() {
    repeats_pass_again_once_expired("memory", &python_plugin("dedup"));
}

#[test]
fn the_javascript_twin_expires_its_ids_alike() {
    repeats_pass_again_once_expired("rocksdb", &js_plugin("dedup"));
}

/// Ids at 100 a second living 1 s: a savepoint taken 3 s in holds about
/// the last second's, with their expiry; restoring it into the plugin
/// opening the state without a time-to-live is refused, naming the state —
/// by the check before the job starts (`check-state` opens the states as
/// the plugin will), in each language's SDK.
#[test]
fn a_savepoint_keeps_only_live_ids_and_its_state_keeps_its_time_to_live() {
    let dir = JobDir::new();
    let input: String = (0..100_000).map(|i| event(&format!("id{i}"))).collect();
    dir.write("in.jsonl", &input);
    let job = dedup_job(&dir, "memory", &plugin("dedup"), 1_000, 100);
    let host = Host::start(&job, &[]);
    host.wait_for_records("dedup", 100);
    std::thread::sleep(Duration::from_secs(2));
    let read = host.records_read("dedup");
    let savepoint = dir.path("sp");
    host.stop_with_savepoint("dedup", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");

    let inspect = weir(&["savepoint", "inspect", savepoint.to_str().unwrap(), "--entries"]).success().stdout();
    assert!(inspect.contains("seen (value, values expire)"), "{inspect}");
    let live = inspect.lines().filter(|line| line.contains("\texpires at ")).count() as u64;
    assert!(live > 0 && live * 2 < read, "{live} of the {read} ids read are in the savepoint: only the last second's");

    let text = std::fs::read_to_string(&job).unwrap().replace("ttl_ms = \"1000\"", "ttl_ms = \"0\"");
    for (language, other) in [("rust", None), ("python", Some(python_plugin("dedup"))), ("js", Some(js_plugin("dedup")))] {
        let text = match &other {
            Some(other) => text.replace(&toml_path(&plugin("dedup")), &toml_path(other)),
            None => text.clone(),
        };
        let forever = dir.write(&format!("forever-{language}.toml"), &text);
        let refused = run_job(&forever, &["--from-savepoint", savepoint.to_str().unwrap()]).failure();
        let checked = match other {
            None => "operator `dedup` has another `config` than when savepoint",
            Some(_) => "of operator `dedup` cannot take over its state in savepoint",
        };
        assert!(refused.contains(checked), "{language}: refused before the job starts: {refused}");
        assert!(refused.contains("value state `seen` is kept with a time-to-live") && refused.contains("cannot lose one"), "{refused}");
    }
}

/// `events` ids drawn from `ids` distinct ones, as input lines, and the
/// output a dedup whose ids outlive the run gives: each id drawn, once.
fn drawn_ids(seed: u64, events: u64, ids: u64) -> (String, Vec<String>) {
    let mut random = Lcg(seed);
    let drawn: Vec<String> = (0..events).map(|_| format!("id{}", random.below(ids))).collect();
    let mut expected: Vec<String> = drawn.iter().map(|id| format!("{id}\t{id}")).collect();
    expected.sort();
    expected.dedup();
    (drawn.iter().map(|id| event(id)).collect(), expected)
}

/// Ids that live an hour, killed three times: every id passes once — the
/// expiring state, its values carrying their expiry, restores exactly.
fn ids_pass_once_under_kills(backend: &str) {
    let dir = JobDir::new();
    let (input, expected) = drawn_ids(printed_seed("ids"), 30_000, 8_000);
    dir.write("in.jsonl", &input);
    let job = dedup_job(&dir, backend, &plugin("dedup"), 3_600_000, 8_000);
    assert_exactly_once_under_kills(&dir, &job, 3, &expected, "each id passes once");
}

#[test]
fn ids_pass_exactly_once_under_sigkill_memory() {
    ids_pass_once_under_kills("memory");
}

#[test]
fn ids_pass_exactly_once_under_sigkill_rocksdb() {
    ids_pass_once_under_kills("rocksdb");
}

/// The Rust plugin's expiring ids, handed over in a savepoint to the
/// Python twin at another parallelism (their key groups moved with their
/// expiry), keep it from passing them again.
#[test]
fn the_python_twin_goes_on_at_parallelism_3_with_the_ids_the_rust_plugin_saw() {
    let dir = JobDir::new();
    let (input, expected) = drawn_ids(13, 16_000, 4_000);
    dir.write("in.jsonl", &input);
    let rust = plugin("dedup");
    let job = dedup_job(&dir, "memory", &rust, 3_600_000, 8_000);
    let savepoint = stopped_with_savepoint(&dir, &job, "dedup", 8_000);
    let text = std::fs::read_to_string(&job).unwrap();
    let handed_over = text.replace(&toml_path(&rust), &toml_path(&python_plugin("dedup"))).replace("parallelism = 2", "parallelism = 3");
    assert!(handed_over.contains("parallelism = 3"), "{handed_over}");
    std::fs::write(&job, handed_over).unwrap();
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_eq!(committed_lines(&dir.path("out"), None), expected, "each id once, across the hand-over");
}

/// A job without checkpoints frees the expired ids of keys never seen
/// again — swept once a second between calls, not only before checkpoints
/// — and shows its state's size: fresh ids at 5 000 a second living
/// 300 ms, the operator's state stays near the last second's ids while
/// tens of thousands pass (`GET /jobs/JOB`, `weir jobs JOB`, `/metrics`).
#[test]
fn a_job_without_checkpoints_frees_expired_ids_and_shows_its_state_size() {
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "fresh"
parallelism = 1

[[source]]
name = "ids"
type = "generator"
mode = "sequence"
keys = 1000000000
events = 100000
rate = 5000

[[operator]]
uid = "dedup"
plugin = {plugin}
inputs = ["ids"]
key_by = true
config = {{ ttl_ms = "300" }}

[[sink]]
name = "out"
type = "discard"
input = "dedup"
"#,
            plugin = toml_path(&plugin("dedup"))
        ),
    );
    let host = Host::start(&job, &[]);
    let api = weir::control::client::ApiClient::new(&host.api);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (read, state) = loop {
        let info = api.job("fresh").unwrap();
        let dedup = info.nodes.iter().find(|n| n.node == "operator `dedup`").and_then(|n| n.state);
        if let Some(state) = dedup.filter(|_| info.read >= 25_000) {
            break (info.read, state);
        }
        assert!(std::time::Instant::now() < deadline, "25 000 ids and a measured state: {info:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Without the sweep every id would be held: as many entries as ids read.
    assert!(state.entries < 12_000, "{} ids held after {read} read (live: 300 ms of them, ~1 500)", state.entries);
    assert!(state.bytes > 0 && state.entries > 0, "{state:?}");
    let detail = host.weir(&["jobs", "fresh"]).success().stdout();
    assert!(detail.contains("operator `dedup`: keyed state of "), "{detail}");
    let metrics = api.metrics().unwrap();
    assert!(metrics.contains("weir_operator_state_entries{job=\"fresh\",kind=\"operator\",name=\"dedup\",subtask=\"0\"} "), "{metrics}");
    host.weir(&["cancel", "fresh"]).success();
}
