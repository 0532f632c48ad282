//! Savepoints, rescaling, hot upgrades, forks and reprocessing, through
//! the `weir` binary and its control API: every test counts the committed
//! output against what an uninterrupted run (or a model of the plugin)
//! gives — nothing lost, nothing twice.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{
    Host, JobDir, committed_lines, complete_checkpoints, js_plugin, plugin, python_plugin, run_job, stopped_with_savepoint,
    toml_path, weir,
};

/// A job of one keyed operator `uid` running `plugin` over the source
/// `source` (its table's fields), into part files in `out/`, checkpointing.
fn keyed_job(dir: &JobDir, name: &str, source: &str, uid: &str, plugin: &Path, out: &str) -> PathBuf {
    dir.write(
        &format!("{name}.toml"),
        &format!(
            r#"
name = "{name}"
parallelism = 2
checkpoint_dir = "checkpoints-{name}"
checkpoint_interval_ms = 300

[[source]]
{source}

[[operator]]
uid = "{uid}"
plugin = {plugin}
inputs = ["input"]
key_by = true

[[sink]]
name = "out"
type = "files"
input = "{uid}"
path = "{out}"
"#,
            plugin = toml_path(plugin)
        ),
    )
}

/// A keyed count over `events` generated events (key = i mod `keys`), at
/// `rate` events/s, into part files in `out/`.
fn count_job(dir: &JobDir, name: &str, events: u64, keys: u64, rate: u64, plugin_path: &Path) -> PathBuf {
    let source = format!("name = \"input\"\ntype = \"generator\"\nevents = {events}\nkeys = {keys}\nrate = {rate}");
    keyed_job(dir, name, &source, "count", plugin_path, "out")
}

/// What a keyed count emits, exactly once: `key<TAB>n` for n = 1..=count.
fn expected_counts(events: u64, keys: u64) -> Vec<String> {
    let mut lines: Vec<String> = (0..keys)
        .flat_map(|key| {
            let count = events / keys + u64::from(key < events % keys);
            (1..=count).map(move |n| format!("{key}\t{n}"))
        })
        .collect();
    lines.sort();
    lines
}

/// The checkpoint a savepoint was taken at, and its manifest as JSON.
fn savepoint_manifest(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("_SAVEPOINT")).expect("read the savepoint manifest");
    let (_, json) = text.split_once('\n').expect("a header line");
    serde_json::from_str(json).expect("the manifest is JSON")
}

fn savepoint_checkpoint(dir: &Path) -> u64 {
    savepoint_manifest(dir)["checkpoint"].as_u64().expect("a checkpoint number")
}

/// The byte offset the file source had reached in a savepoint.
fn savepoint_offset(dir: &Path) -> u64 {
    savepoint_manifest(dir)["sources"][0]["splits"][0]["next"].as_u64().expect("a file offset")
}

#[test]
fn a_job_stopped_and_restored_at_parallelism_1_4_and_2_counts_exactly_as_an_uninterrupted_run() {
    let dir = JobDir::new();
    let (events, keys) = (60_000, 500);
    let job = count_job(&dir, "rescaled", events, keys, 15_000, &plugin("word-count"));
    let mut restore_from: Option<PathBuf> = None;
    for (round, parallelism) in ["1", "4", "2"].iter().enumerate() {
        let mut extra = vec!["-p", parallelism];
        let from = restore_from.as_ref().map(|d| d.to_str().unwrap().to_owned());
        if let Some(from) = &from {
            extra.extend(["--from-savepoint", from]);
        }
        let host = Host::start(&job, &extra);
        if round == 2 {
            let (status, stderr) = host.wait();
            assert!(status.success(), "{stderr}");
            break;
        }
        host.wait_for_records("rescaled", 5_000 * (round as u64 + 1));
        let savepoint = dir.path(&format!("sp-{round}"));
        let reply = host.stop_with_savepoint("rescaled", &savepoint);
        assert!(reply.contains("written to"), "{reply}");
        let (status, stderr) = host.wait();
        assert!(status.success(), "{stderr}");
        assert!(stderr.contains("stopped with savepoint"), "{stderr}");
        let inspect = weir(&["savepoint", "inspect", savepoint.to_str().unwrap()]).success().stdout();
        assert!(inspect.contains(&format!("operator `count` (parallelism {parallelism})")), "{inspect}");
        assert!(inspect.contains("every file matches its checksum"), "{inspect}");
        restore_from = Some(savepoint);
    }
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));
}

/// A files sink names its parts by checkpoint, so a job restored from a
/// savepoint numbers its checkpoints after the savepoint's — also with no
/// checkpoints of its own to number after: a job without `checkpoint_dir`
/// (it takes savepoints only), or one whose checkpoint directory was
/// deleted. Stopped and restored twice, every part committed stays.
#[test]
fn restored_from_savepoints_without_its_checkpoints_a_job_overwrites_no_committed_part() {
    for checkpoint_dir in ["none", "deleted"] {
        let dir = JobDir::new();
        let (events, keys) = (40_000, 100);
        let job = count_job(&dir, "renumbered", events, keys, 10_000, &plugin("word-count"));
        if checkpoint_dir == "none" {
            let text = std::fs::read_to_string(&job).unwrap();
            let kept: Vec<&str> = text.lines().filter(|line| !line.starts_with("checkpoint_")).collect();
            std::fs::write(&job, kept.join("\n")).unwrap();
        }
        let mut restore_from: Option<PathBuf> = None;
        for round in 0..3u64 {
            let from = restore_from.as_ref().map(|d| d.to_str().unwrap().to_owned());
            let extra: Vec<&str> = from.iter().flat_map(|from| ["--from-savepoint", from.as_str()]).collect();
            let host = Host::start(&job, &extra);
            if round == 2 {
                let (status, stderr) = host.wait();
                assert!(status.success(), "{stderr}");
                break;
            }
            host.wait_for_records("renumbered", 5_000 * (round + 1));
            let savepoint = dir.path(&format!("sp-{round}"));
            host.stop_with_savepoint("renumbered", &savepoint);
            assert!(host.wait().0.success());
            if round > 0 {
                let previous = savepoint_checkpoint(restore_from.as_ref().unwrap());
                assert!(savepoint_checkpoint(&savepoint) > previous, "{checkpoint_dir}: numbered after the savepoint restored");
            }
            let _ = std::fs::remove_dir_all(dir.path("checkpoints-renumbered"));
            restore_from = Some(savepoint);
        }
        assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys), "checkpoint directory {checkpoint_dir}");
    }
}

/// A restored generator keeps the bounds it started with: a job file that
/// now asks for more events is refused, saying so, rather than run to the
/// old end as if the new number had been read.
#[test]
fn restoring_a_generator_with_more_events_than_it_started_with_is_refused() {
    let dir = JobDir::new();
    let job = count_job(&dir, "bounded", 20_000, 100, 10_000, &plugin("word-count"));
    let savepoint = stopped_with_savepoint(&dir, &job, "bounded", 5_000);
    let text = std::fs::read_to_string(&job).unwrap();
    std::fs::write(&job, text.replace("events = 20000", "events = 30000")).unwrap();
    let error = run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).failure();
    assert!(error.contains("sets `events = 30000`, but the generator restored was started with `events = 20000`"), "{error}");
    std::fs::write(&job, text).unwrap();
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(20_000, 100));
}

/// An upgrade changes the running job, not its job file. Restarted from
/// that file after the host was killed, the job resumes with the plugin it
/// was upgraded to — also once a comment is added to the file; from the
/// file naming another plugin, with that one — and the log says that it
/// differs from the checkpoint's.
#[test]
fn an_upgraded_job_restarted_from_its_unchanged_job_file_keeps_its_new_plugin() {
    let dir = JobDir::new();
    let job = count_job(&dir, "upgraded", 60_000, 100, 10_000, &plugin("word-count"));
    let checkpoints = dir.path("checkpoints-upgraded");
    let host = Host::start(&job, &[]);
    host.wait_for_checkpoint("upgraded");
    let v2 = plugin("faulty");
    host.weir(&["upgrade", "upgraded", "--operator", "count", "--plugin", v2.to_str().unwrap()]).success();
    wait_for_checkpoint_of(&checkpoints, &host, "faulty.wasm");
    drop(host); // SIGKILL

    let host = Host::start(&job, &[]);
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("count=faulty.wasm"), "resumed with the upgrade: {jobs}");
    let resumed = newest_checkpoint(&checkpoints);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while newest_checkpoint(&checkpoints) <= resumed {
        assert!(std::time::Instant::now() < deadline, "no checkpoint of the resumed job: {}", host.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!host.stderr().contains("resumes with another plugin"), "{}", host.stderr());
    drop(host); // SIGKILL

    // A comment changes no plugin: the upgrade is still carried.
    let text = std::fs::read_to_string(&job).unwrap();
    std::fs::write(&job, format!("# edited\n{text}")).unwrap();
    let host = Host::start(&job, &[]);
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("count=faulty.wasm"), "a comment added, still the upgrade: {jobs}");
    drop(host); // SIGKILL

    // The file naming another plugin is the user's word.
    let v1 = dir.path("word_count_v1.wasm");
    std::fs::copy(plugin("word-count"), &v1).unwrap();
    let edited = text.replace(&toml_path(&plugin("word-count")), &toml_path(&v1));
    assert_ne!(edited, text);
    std::fs::write(&job, edited).unwrap();
    let run = run_job(&job, &[]);
    run.success();
    let stderr = run.stderr();
    let warning = stderr.lines().find(|l| l.contains("resumes with another plugin")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(warning.contains("faulty.wasm") && warning.contains("word_count_v1.wasm"), "{warning}");
}

/// An upgrade to a plugin that starts, then fails at every event: the job
/// fails once its restarts are spent, and the failure says which plugin the
/// upgrade gave it and how to go back to the job file's.
#[test]
fn a_job_failing_after_an_upgrade_says_how_to_go_back() {
    let dir = JobDir::new();
    let job = count_job(&dir, "broken", 1_000_000, 100, 10_000, &plugin("word-count"));
    let source = std::fs::read_to_string(common::workspace().join("plugins/js/word-count/word-count.js"))
        .unwrap()
        .replace("const n = (this.count.get(ctx) ?? 0) + 1;", "throw new Error(\"broken on purpose\");");
    let broken = common::build_plugin("build-js-plugin.sh", &dir.write("broken.js", &source), "broken-count-js");
    let host = Host::start(&job, &[]);
    host.wait_for_checkpoint("broken");
    host.weir(&["upgrade", "broken", "--operator", "count", "--plugin", broken.to_str().unwrap()]).success();
    let (status, stderr) = host.wait();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("broken on purpose"), "{stderr}");
    let note = format!("operator `count` runs {}, which `weir upgrade` gave it; the job file names", broken.display());
    assert!(stderr.contains(&note), "{stderr}");
    assert!(stderr.contains("start it from the savepoint the upgrade took (the newest `upgrade-broken-…`"), "{stderr}");
}

/// A keyed count of a million events whose sink, a `discard` sink, takes
/// 200 events/s: the job falls behind at once and stays behind.
fn paced_count_job(dir: &JobDir, name: &str) -> PathBuf {
    let job = count_job(dir, name, 1_000_000, 100, 20_000, &plugin("word-count"));
    let text = std::fs::read_to_string(&job).unwrap();
    let paced = text.replace("type = \"files\"\ninput = \"count\"\npath = \"out\"", "type = \"discard\"\ninput = \"count\"\nrate = 200");
    assert_ne!(paced, text);
    std::fs::write(&job, paced).unwrap();
    job
}

/// A fork of a job without checkpoints has none either: `weir fork` says
/// it cannot be resumed once the host stops, and refuses a checkpoint
/// directory it would not use.
#[test]
fn a_fork_of_a_job_without_checkpoints_says_it_cannot_be_resumed() {
    let dir = JobDir::new();
    let job = paced_count_job(&dir, "plain");
    let text = std::fs::read_to_string(&job).unwrap();
    let unchecked: String = text.lines().filter(|l| !l.starts_with("checkpoint")).map(|l| format!("{l}\n")).collect();
    assert_ne!(unchecked, text);
    std::fs::write(&job, unchecked).unwrap();
    let host = Host::start(&job, &[]);
    host.wait_for_records("plain", 1_000);
    let savepoint = dir.path("point");
    host.savepoint("plain", &savepoint);
    let from = savepoint.to_str().unwrap();
    let kept = dir.path("kept");
    let refused = host.weir(&["fork", from, "--name", "kept", "--checkpoint-dir", kept.to_str().unwrap()]).failure();
    assert!(refused.contains("the fork would have no checkpoints to keep in") && refused.contains("no `checkpoint_dir`"), "{refused}");
    assert!(!kept.exists());
    let reply = host.weir(&["fork", from, "--name", "copy"]).success().stdout();
    assert!(reply.contains("it takes no checkpoints") && reply.contains("cannot be resumed once this host stops"), "{reply}");
    for name in ["plain", "copy"] {
        host.weir(&["cancel", name]).success();
    }
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
}

/// A checkpoint directory inside another job's is refused — a fork's
/// asked for there, and a job run with one there — before anything is
/// written: the other job's clean-up deletes what it does not know (a fork
/// there lost its checkpoints and job file, found by the operations audit).
#[test]
fn a_checkpoint_directory_inside_another_jobs_is_refused() {
    let dir = JobDir::new();
    let job = paced_count_job(&dir, "outer");
    let host = Host::start(&job, &[]);
    host.wait_for_checkpoint("outer");
    let inside = dir.path("checkpoints-outer/shared/fork");
    let refused = host.weir(&["fork", "outer", "--name", "inner", "--checkpoint-dir", inside.to_str().unwrap()]).failure();
    assert!(refused.contains("would be inside") && refused.contains("checkpoints-outer"), "{refused}");
    assert!(refused.contains("--checkpoint-dir DIR"), "{refused}");
    assert!(!inside.exists());

    let text = std::fs::read_to_string(&job).unwrap();
    let nested = text.replace("name = \"outer\"", "name = \"nested\"").replace("checkpoints-outer", "checkpoints-outer/nested");
    let nested = dir.write("nested.toml", &nested);
    let error = run_job(&nested, &[]).failure();
    assert!(error.contains("lies inside the checkpoint directory") && error.contains("checkpoints-outer"), "{error}");
    assert!(!dir.path("checkpoints-outer/nested").exists(), "nothing written");
    host.weir(&["cancel", "outer"]).success();
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
}

/// A job being upgraded can be cancelled: the upgrade is given up, its
/// request says so, and the job ends cancelled — no new version starts.
#[test]
fn a_job_cancelled_during_its_upgrade_ends_and_is_not_upgraded() {
    let dir = JobDir::new();
    // Its sink holds barriers back behind its backlog: the upgrade's
    // savepoints take seconds.
    let host = Host::start(&paced_count_job(&dir, "slow"), &[]);
    host.wait_for_records("slow", 5_000);
    let (api, v2) = (host.api.clone(), plugin("faulty"));
    let upgrade =
        std::thread::spawn(move || weir(&["upgrade", "slow", "--operator", "count", "--plugin", v2.to_str().unwrap(), "--api", &api]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !host.weir(&["jobs"]).success().stdout().lines().any(|l| l.starts_with("slow") && l.contains(" upgrading ")) {
        assert!(std::time::Instant::now() < deadline && !upgrade.is_finished(), "never upgrading: {}", host.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let reply = host.weir(&["cancel", "slow"]).success().stdout();
    assert!(reply.contains("cancelled"), "{reply}");
    let refused = upgrade.join().unwrap().failure();
    assert!(refused.contains("job `slow` was cancelled during its upgrade"), "{refused}");
    // Its only job ended, the host exits, saying how it ended.
    let (status, stderr) = host.wait();
    assert!(status.success() && stderr.contains("job `slow` was cancelled"), "{stderr}");
}

/// A cancel ends a job whose sink waits on purpose (a `discard` sink at
/// 200 events/s takes 41 s over a batch) at once, not after its wait.
#[test]
fn a_cancel_does_not_wait_for_a_rate_limited_sink() {
    let dir = JobDir::new();
    let host = Host::start(&paced_count_job(&dir, "paced"), &[]);
    host.wait_for_records("paced", 10_000);
    let cancel = host.weir(&["cancel", "paced"]);
    assert!(cancel.success().stdout().contains("cancelled"), "{}", cancel.stdout());
    assert!(cancel.took < std::time::Duration::from_secs(10), "cancelled at once, not after the sink's wait: {:?}", cancel.took);
    let _ = host.wait();
}

/// An upgrade killed before the upgraded job's first checkpoint is not
/// undone: its savepoint is the job's newest state, and the job file
/// restarts from it with the plugin the upgrade put in.
#[test]
fn an_upgrade_survives_a_kill_before_the_upgraded_jobs_first_checkpoint() {
    let dir = JobDir::new();
    let job = count_job(&dir, "upgraded", 30_000, 100, 5_000, &plugin("word-count"));
    let text = std::fs::read_to_string(&job).unwrap();
    let job_text = text.replace("checkpoint_interval_ms = 300", "checkpoint_interval_ms = 600000");
    std::fs::write(&job, &job_text).unwrap();
    // The same code under another digest: a custom section added.
    let v2 = dir.path("word_count_v2.wasm");
    let mut bytes = std::fs::read(plugin("word-count")).unwrap();
    bytes.extend_from_slice(&[0, 3, 2, b'v', b'2']);
    std::fs::write(&v2, bytes).unwrap();
    let host = Host::start(&job, &[]);
    host.wait_for_records("upgraded", 3_000);
    host.weir(&["upgrade", "upgraded", "--operator", "count", "--plugin", v2.to_str().unwrap()]).success();
    drop(host); // SIGKILL, long before the next checkpoint
    assert!(checkpoint_manifests(&dir.path("checkpoints-upgraded")).iter().all(|m| !m.contains("word_count_v2.wasm")));

    let host = Host::start(&job, &[]);
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("count=word_count_v2.wasm"), "resumed with the upgrade: {jobs}");
    let (status, stderr) = host.wait();
    assert!(status.success() && stderr.contains("started from savepoint"), "{stderr}");
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(30_000, 100));
}

/// Reprocessing from an older savepoint drops the output committed after
/// it. If that run stops before its first checkpoint — killed, or its new
/// code failing — the job file restarts from the savepoint again, not from
/// the earlier run's newer checkpoints (whose output is gone), a newer
/// savepoint of the earlier run is refused, and every count is exact.
#[test]
fn a_run_from_an_older_savepoint_stopped_before_its_first_checkpoint_restarts_from_it() {
    let dir = JobDir::new();
    let job = count_job(&dir, "reprocess", 20_000, 100, 4_000, &plugin("word-count"));
    let host = Host::start(&job, &[]);
    host.wait_for_records("reprocess", 4_000);
    let savepoint = dir.path("sp");
    host.savepoint("reprocess", &savepoint);
    host.wait_for_records("reprocess", 8_000);
    let later = dir.path("sp-later");
    host.savepoint("reprocess", &later);
    host.wait_for_records("reprocess", 12_000);
    drop(host); // SIGKILL
    let cut = savepoint_checkpoint(&savepoint);
    assert!(!committed_lines(&dir.path("out"), Some(cut)).is_empty(), "output committed after the savepoint");

    // Its checkpoints too far apart to take one before it is killed.
    let text = std::fs::read_to_string(&job).unwrap();
    let slow = dir.write("slow.toml", &text.replace("checkpoint_interval_ms = 300", "checkpoint_interval_ms = 600000"));
    let host = Host::start(&slow, &["--from-savepoint", savepoint.to_str().unwrap()]);
    host.wait_for_records("reprocess", 2_000);
    drop(host); // SIGKILL
    assert!(committed_lines(&dir.path("out"), Some(cut)).is_empty(), "gone back to the savepoint");

    // `weir checkpoints` tells what `weir run` will do: the earlier run's
    // checkpoints are superseded, and the savepoint is restored again.
    let checkpoints = dir.path("checkpoints-reprocess");
    let listing = weir(&["checkpoints", checkpoints.to_str().unwrap()]).success().stdout();
    assert!(listing.lines().any(|l| l.contains("superseded")) && !listing.lines().any(|l| l.contains(" ok ")), "{listing}");
    assert!(listing.contains(&format!("started from savepoint {}", savepoint.display())), "{listing}");
    assert!(listing.contains("completed no checkpoint of its own: `weir run` of the job file restores that savepoint again"), "{listing}");
    // A listing that cannot be written is an error, not an empty success.
    let full = std::process::Command::new(common::weir_binary())
        .args(["checkpoints", checkpoints.to_str().unwrap()])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(full.status.code(), Some(1), "{}", String::from_utf8_lossy(&full.stderr));
    assert!(String::from_utf8_lossy(&full.stderr).contains("cannot write to standard output"));

    // The later savepoint is of the history gone back from: the output
    // between the two savepoints was deleted, and restoring it is refused.
    let error = run_job(&job, &["--from-savepoint", later.to_str().unwrap()]).failure();
    assert!(error.contains(&format!("when the job went back to checkpoint {cut}")), "{error}");
    assert!(error.contains(&format!("checkpoint {}, taken before that", savepoint_checkpoint(&later))), "{error}");

    // Only that savepoint matches the output now: moved away, it is asked for.
    std::fs::rename(&savepoint, dir.path("sp-moved")).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains(&format!("started from savepoint {}", savepoint.display())) && error.contains("put it back"), "{error}");
    let error = weir(&["checkpoints", checkpoints.to_str().unwrap()]).failure();
    assert!(error.contains("its savepoint cannot be read") && error.contains("put it back"), "{error}");
    std::fs::rename(dir.path("sp-moved"), &savepoint).unwrap();
    let run = run_job(&job, &[]);
    assert!(run.success().stderr().contains(&format!("started from savepoint {}", savepoint.display())), "{}", run.stderr());
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(20_000, 100));
}

/// The number of the newest complete checkpoint in `dir` (0: none).
fn newest_checkpoint(dir: &Path) -> u64 {
    let ids = complete_checkpoints(dir).into_iter().filter_map(|p| p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok());
    ids.max().unwrap_or(0)
}

/// Waits until a complete checkpoint in `dir` records `plugin`.
fn wait_for_checkpoint_of(dir: &Path, host: &Host, plugin: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !checkpoint_manifests(dir).iter().any(|m| m.contains(plugin)) {
        assert!(std::time::Instant::now() < deadline, "no checkpoint with {plugin}: {}", host.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The manifests of the complete checkpoints in `dir`.
fn checkpoint_manifests(dir: &Path) -> Vec<String> {
    complete_checkpoints(dir).iter().filter_map(|path| std::fs::read_to_string(path.join("_MANIFEST")).ok()).collect()
}

/// A stop with a savepoint that cannot be taken leaves the job running, as
/// in Flink. A directory that cannot take it (one holding a savepoint, the
/// job's own checkpoint directory) is refused before the sources stop; a
/// savepoint that fails once they have stopped lets them read on. Either
/// way the job goes on to count exactly.
#[test]
fn a_failed_stop_with_a_savepoint_leaves_the_job_running() {
    let dir = JobDir::new();
    let (events, keys) = (60_000, 500);
    let job = count_job(&dir, "stopping", events, keys, 8_000, &plugin("word-count"));
    let host = Host::start(&job, &[]);
    host.wait_for_records("stopping", 5_000);
    let taken = dir.path("taken");
    assert!(host.savepoint("stopping", &taken).contains("written to"));
    let occupied = dir.path("plugins");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("op.wasm"), "not a savepoint").unwrap();
    let refusals = [
        (taken, "a savepoint is there already"),
        (dir.path("checkpoints-stopping"), "among the job's checkpoints"),
        (occupied, "it holds other files, and a savepoint needs a directory of its own"),
    ];
    for (refused, reason) in refusals {
        let error = host.weir(&["savepoint", "stopping", "--stop", "--dir", refused.to_str().unwrap()]).failure();
        assert!(error.contains(reason), "{error}");
        reads_on(&host);
    }
    // Asked at once into one new directory: one savepoint is written, and
    // the others are refused as requests in conflict (409) or for a
    // directory already taken (400), not as failures of the job (500).
    let contested = dir.path("contested");
    let request = weir::control::SavepointRequest { dir: Some(contested.clone()), stop: false };
    let answers: Vec<_> = std::thread::scope(|scope| {
        let asks: Vec<_> =
            (0..4).map(|_| scope.spawn(|| weir::control::client::ApiClient::new(&host.api).savepoint("stopping", &request))).collect();
        asks.into_iter().map(|ask| ask.join().unwrap()).collect()
    });
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 1, "{answers:?}");
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert!(matches!(refused.status(), Some(409 | 400)), "{refused}");
    }
    assert!(contested.join("_SAVEPOINT").exists() && !contested.join(".writing").exists());
    reads_on(&host);
    // So deep that it can be made but nothing in it can be named (the
    // longest path is 4095 bytes): the savepoint fails as it is written,
    // after the sources stopped at its barrier.
    let mut deep = dir.path("deep");
    while deep.as_os_str().len() < 4_090 - 200 {
        deep.push("d".repeat(200));
    }
    deep.push("d".repeat(4_090 - deep.as_os_str().len() - 1));
    let error = host.weir(&["savepoint", "stopping", "--stop", "--dir", deep.to_str().unwrap()]).failure();
    assert!(error.contains("savepoint of job `stopping` failed"), "{error}");
    reads_on(&host);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));
}

/// Waits until job `stopping` has read more than it has now.
fn reads_on(host: &Host) {
    let read = host.records_read("stopping");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while host.records_read("stopping") <= read {
        assert!(std::time::Instant::now() < deadline, "the job reads on: {}", host.stderr());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_hot_upgrade_mid_stream_loses_and_repeats_nothing() {
    let dir = JobDir::new();
    let (events, keys) = (80_000, 1_000);
    let job = count_job(&dir, "counts", events, keys, 10_000, &plugin("word-count"));
    // The same code under another file name: what matters is the swap.
    let v2 = dir.path("word_count_v2.wasm");
    std::fs::copy(plugin("word-count"), &v2).unwrap();
    let host = Host::start(&job, &[]);
    host.wait_for_records("counts", 10_000);
    let line = host.wait_for_checkpoint("counts");
    let cell = line.split(" #").nth(1).unwrap_or_default();
    let id: u64 = cell.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(id >= 1 && cell.contains(" ms"), "the newest checkpoint's number, size and duration: {line}");
    let detail = host.weir(&["jobs", "counts"]).success().stdout();
    let count = detail.lines().find(|l| l.starts_with("operator `count`")).unwrap_or_else(|| panic!("{detail}"));
    let records_in: u64 = count.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(records_in > 0 && count.contains(" %"), "the operator's records and time held back: {detail}");
    let in_per_s: f64 = count.split_whitespace().nth(5).and_then(|n| n.parse().ok()).unwrap_or(0.0);
    assert!(in_per_s > 0.0 && detail.contains("over the last"), "the operator's recent rate: {detail}");
    let skew: f64 = count.split_whitespace().nth(13).and_then(|n| n.parse().ok()).unwrap_or(0.0);
    assert!(detail.contains("SKEW") && (1.0..2.0).contains(&skew), "its busiest subtask against the mean: {detail}");
    let cpu_share: f64 = count.split_whitespace().nth(11).and_then(|n| n.parse().ok()).unwrap_or(-1.0);
    assert!(detail.contains("CPU") && (0.0..=100.0).contains(&cpu_share), "the share of a core its threads got: {detail}");
    // The same for Prometheus, at GET /metrics.
    let metrics = weir::control::client::ApiClient::new(&host.api).metrics().unwrap();
    // The samples whose name and labels start so, summed (one per subtask).
    let sum = |prefix: &str| -> f64 {
        let values = metrics.lines().filter(|l| l.starts_with(prefix)).map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()));
        values.map(|v| v.unwrap_or_else(|| panic!("a value after {prefix}"))).sum()
    };
    assert!(sum("weir_checkpoints_completed_total{job=\"counts\"}") >= 1.0, "{metrics}");
    let operator = "weir_node_records_in_total{job=\"counts\",kind=\"operator\",name=\"count\",subtask=";
    assert!(sum(operator) > 0.0 && metrics.matches(operator).count() == 2, "the operator's 2 subtasks: {metrics}");
    // Each subtask's thread has had processor time (the host reads it from /proc).
    let cpu = "weir_node_cpu_seconds_total{job=\"counts\",kind=\"operator\",name=\"count\",subtask=";
    assert!(sum(cpu) > 0.0 && metrics.matches(cpu).count() == 2, "the operator's processor time: {metrics}");
    let reply = host.weir(&["upgrade", "counts", "--operator", "count", "--plugin", v2.to_str().unwrap()]).success().stdout();
    assert!(reply.contains("upgraded operator `count` of job `counts`") && reply.contains("downtime"), "{reply}");
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("count=word_count_v2.wasm") && jobs.contains("running"), "{jobs}");
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));
}

/// Login events of `addresses` source addresses, as JSON lines: mostly
/// valid sessions, with invalid transitions and second logins mixed in.
fn fraud_events(addresses: u32, events: u32) -> String {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut phase: BTreeMap<u32, usize> = BTreeMap::new();
    let script = ["login", "auth-ok", "access", "access", "logout"];
    let mut out = String::new();
    for _ in 0..events {
        let address = (random() % u64::from(addresses)) as u32;
        let step = phase.entry(address).or_insert(0);
        let event = match random() % 100 {
            0..=3 => ["access", "logout", "auth-ok", "hack"][(random() % 4) as usize],
            4..=9 if *step >= 2 => "login",
            10..=13 if *step == 1 => "auth-fail",
            _ => script[*step],
        };
        *step = match event {
            "auth-fail" => 0,
            _ if event == script[*step] => (*step + 1) % script.len(),
            _ => *step,
        };
        out.push_str(&format!("{{\"key\": \"10.0.{}.{}\", \"value\": \"{event}\"}}\n", address / 256, address % 256));
    }
    out
}

/// The fraud detector, as a model: v1 until byte `cut` of the input, v2
/// after (with v1's sessions carried over); the alerts it emits as
/// `address<TAB>alert` lines, sorted.
fn model_alerts(input: &str, cut: usize, v2_after_cut: bool) -> Vec<String> {
    #[derive(Default, Clone)]
    struct Session {
        state: &'static str,
        events: u64,
        failures: u64,
    }
    let mut sessions: BTreeMap<String, Session> = BTreeMap::new();
    let mut alerts = Vec::new();
    let mut offset = 0;
    for line in input.lines() {
        let v2 = v2_after_cut && offset >= cut;
        offset += line.len() + 1;
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        let (key, event) = (event["key"].as_str().unwrap(), event["value"].as_str().unwrap());
        let session = sessions.entry(key.to_owned()).or_insert(Session { state: "logged-out", ..Default::default() });
        session.events += 1;
        if v2 && event == "auth-fail" {
            session.failures += 1;
        }
        let next = match (session.state, event) {
            ("logged-out", "login") => Some("authenticating"),
            ("authenticating", "auth-ok") => Some("active"),
            ("authenticating", "auth-fail") => Some("logged-out"),
            ("active", "access") => Some("active"),
            ("active", "logout") => Some("logged-out"),
            ("active", "login") if v2 => Some("active"),
            _ => None,
        };
        match next {
            Some(next) => session.state = next,
            None => {
                let mut alert = format!("{key}\tinvalid {event} in {} after {} events", session.state, session.events);
                if v2 {
                    alert.push_str(&format!(" (failures {})", session.failures));
                }
                alerts.push(alert);
                session.state = "logged-out";
            }
        }
    }
    alerts.sort();
    alerts
}

/// A fraud-detection job over `events.jsonl` at `rate` lines/s.
fn fraud_job(dir: &JobDir, name: &str, plugin_name: &str, rate: u32, out: &str) -> PathBuf {
    let source = format!("name = \"input\"\ntype = \"file\"\nformat = \"json\"\npath = \"events.jsonl\"\nrate = {rate}");
    keyed_job(dir, name, &source, "detector", &plugin(plugin_name), out)
}

#[test]
fn the_fraud_detector_v1_to_v2_upgrade_carries_every_open_session_over() {
    let dir = JobDir::new();
    let input = fraud_events(300, 40_000);
    dir.write("events.jsonl", &input);
    let job = fraud_job(&dir, "fraud", "fraud-detector", 5_000, "alerts");
    let host = Host::start(&job, &[]);
    host.wait_for_records("fraud", 8_000);
    let savepoint = dir.path("upgrade-savepoint");
    let v2 = plugin("fraud-detector-v2");
    let reply = host
        .weir(&["upgrade", "fraud", "--operator", "detector", "--plugin", v2.to_str().unwrap(), "--savepoint-dir", savepoint.to_str().unwrap()])
        .success()
        .stdout();
    assert!(reply.contains(", 300 entries checked)"), "every address's session, offered to v2: {reply}");
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    let cut = savepoint_offset(&savepoint) as usize;
    assert!(cut > 0 && cut < input.len(), "the upgrade happened mid-stream (at byte {cut})");
    let expected = model_alerts(&input, cut, true);
    assert_ne!(expected, model_alerts(&input, cut, false), "the data exercises v2's new rule");
    assert_eq!(committed_lines(&dir.path("alerts"), None), expected);
}

/// A fork lives in the host that started it, but not only there: it has a
/// job file of its own, and once that host is killed, `weir run` of the
/// file resumes the fork from its checkpoints — its output exactly what
/// the original (resumed from its own job file) writes after the fork point.
#[test]
fn a_fork_resumes_from_its_own_job_file_after_its_host_is_killed() {
    let dir = JobDir::new();
    dir.write("events.jsonl", &fraud_events(300, 40_000));
    let job = fraud_job(&dir, "original", "fraud-detector", 5_000, "alerts-original");
    let note = "# Alerts for the fraud team; ask them before changing the rules.";
    std::fs::write(&job, format!("{note}\n{}", std::fs::read_to_string(&job).unwrap())).unwrap();
    // The file says 2; the fork runs, and resumes, as the host ran the job.
    let host = Host::start(&job, &["--parallelism", "3"]);
    host.wait_for_records("original", 8_000);
    let same = dir.path("alerts-same");
    let reply = host.weir(&["fork", "original", "--name", "same", "--sink", &format!("out={}", same.display())]).success().stdout();
    let job_file = dir.path("same").join("job.toml");
    assert!(reply.contains(&format!("weir run {}", job_file.display())), "{reply}");
    let forked_text = std::fs::read_to_string(&job_file).unwrap();
    assert!(forked_text.contains(note), "the original's comments are kept: {forked_text}");
    let forked: toml::Table = forked_text.parse().unwrap();
    let detector = &forked["operator"][0];
    assert_eq!((detector["uid"].as_str(), detector["parallelism"].as_integer()), (Some("detector"), Some(3)), "{forked}");
    let savepoint = reply.split("(savepoint ").nth(1).and_then(|rest| rest.split(')').next()).map(PathBuf::from).unwrap();
    host.wait_for_checkpoint("same");
    drop(host); // SIGKILL: both jobs stop mid-stream.
    let resumed = run_job(&job_file, &[]);
    assert!(resumed.success().stderr().contains("job `same` resumed from checkpoint"), "{}", resumed.stderr());
    run_job(&job, &[]).success();
    let original_after = committed_lines(&dir.path("alerts-original"), Some(savepoint_checkpoint(&savepoint)));
    assert!(!original_after.is_empty());
    assert_eq!(committed_lines(&same, None), original_after, "the fork, resumed, as the original from the fork point on");
}

/// A fraud job `original` on an endless-enough input, in a host, once it
/// has completed a checkpoint.
fn checkpointing_original(dir: &JobDir) -> (PathBuf, Host) {
    dir.write("events.jsonl", &fraud_events(300, 200_000));
    let job = fraud_job(dir, "original", "fraud-detector", 2_000, "alerts-original");
    let host = Host::start(&job, &[]);
    host.wait_for_checkpoint("original");
    (job, host)
}

/// Forks job `original` of `host` as `name`, its alerts into `alerts-NAME`.
fn fork_original(host: &Host, dir: &JobDir, name: &str) {
    let out = dir.path(&format!("alerts-{name}"));
    host.weir(&["fork", "original", "--name", name, "--sink", &format!("out={}", out.display())]).success();
}

/// A host that forks, cancels and upgrades jobs all day lists (and exports
/// metrics of) only the newest of the cancelled ones, beside the jobs it
/// runs, and keeps only the newest of the savepoints it took for them.
#[test]
fn a_host_forgets_all_but_its_newest_cancelled_forks_and_their_savepoints() {
    let dir = JobDir::new();
    let (_, host) = checkpointing_original(&dir);
    let forks = weir::host::KEPT_ENDED_JOBS + 2;
    for i in 0..forks {
        let name = format!("fork{i}");
        fork_original(&host, &dir, &name);
        // (Once it has a checkpoint: until then its savepoint is all a
        // later `weir run` of its job file could resume it from.)
        host.wait_for_checkpoint(&name);
        host.weir(&["cancel", &name]).success();
    }
    let jobs = host.weir(&["jobs"]).success().stdout();
    let listed = |name: &str| jobs.lines().any(|line| line.split_whitespace().next() == Some(name));
    assert!(listed("original") && jobs.contains("running"), "{jobs}");
    assert!(!listed("fork0") && !listed("fork1"), "the oldest cancelled forks are forgotten: {jobs}");
    assert!((2..forks).all(|i| listed(&format!("fork{i}"))), "the newest are kept: {jobs}");
    let metrics = weir::control::client::ApiClient::new(&host.api).metrics().unwrap();
    assert!(!metrics.contains("job=\"fork0\"") && metrics.contains(&format!("job=\"fork{}\"", forks - 1)), "{metrics}");
    // A savepoint the user asked for is theirs, whatever its name.
    let mine = dir.path("checkpoints-original").join("savepoints").join("upgrade-original-1000000000000");
    let plugins = [plugin("fraud-detector-v2"), plugin("fraud-detector")];
    let v2 = plugins[0].to_str().unwrap();
    host.weir(&["upgrade", "original", "--operator", "detector", "--plugin", v2, "--savepoint-dir", mine.to_str().unwrap()]).success();
    for i in 1..weir::host::KEPT_HOST_SAVEPOINTS + 3 {
        let plugin = plugins[i % 2].to_str().unwrap();
        host.weir(&["upgrade", "original", "--operator", "detector", "--plugin", plugin]).success();
    }
    let savepoints = |label: &str| {
        let names = std::fs::read_dir(dir.path("checkpoints-original").join("savepoints")).unwrap();
        names.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(label)).count()
    };
    assert_eq!(savepoints("fork-original-"), weir::host::KEPT_HOST_SAVEPOINTS);
    assert_eq!(savepoints("upgrade-original-"), weir::host::KEPT_HOST_SAVEPOINTS + 1);
    assert!(mine.join("_SAVEPOINT").is_file(), "the user's savepoint is kept");
    let original = host.job_line("original").unwrap_or_else(|jobs| panic!("{jobs}"));
    assert!(original.contains("running") && original.contains("detector=fraud_detector.wasm"), "the last upgrade (to v1) runs: {original}");
    host.weir(&["cancel", "original"]).success();
}

/// A fork whose host is killed before the fork's first checkpoint resumes
/// from the savepoint it began from, however many forks the restarted host
/// makes meanwhile: the host keeps a savepoint a run still needs.
#[test]
fn a_forks_only_savepoint_is_kept_after_its_host_is_gone() {
    let dir = JobDir::new();
    let (job, host) = checkpointing_original(&dir);
    fork_original(&host, &dir, "early");
    drop(host); // SIGKILL, within the fork's first checkpoint interval
    let early_checkpoints = dir.path("early");
    let started = std::fs::read_to_string(early_checkpoints.join("_STARTED_FROM_SAVEPOINT")).unwrap();
    let host = Host::start(&job, &[]);
    host.wait_for_checkpoint("original");
    for i in 0..weir::host::KEPT_HOST_SAVEPOINTS + 1 {
        let name = format!("later{i}");
        fork_original(&host, &dir, &name);
        host.wait_for_checkpoint(&name);
        host.weir(&["cancel", &name]).success();
    }
    let kept = std::fs::read_dir(dir.path("checkpoints-original").join("savepoints")).unwrap().count();
    let has_checkpoint = !complete_checkpoints(&early_checkpoints).is_empty();
    if !has_checkpoint {
        assert_eq!(kept, weir::host::KEPT_HOST_SAVEPOINTS + 1, "the early fork's savepoint is kept: {started}");
        host.weir(&["cancel", "original"]).success();
        let resumed = Host::start(&early_checkpoints.join("job.toml"), &[]);
        resumed.wait_for_checkpoint("early");
        resumed.weir(&["cancel", "early"]).success();
    }
}

#[test]
fn rejected_upgrades_leave_the_running_job_running() {
    let dir = JobDir::new();
    let input = fraud_events(200, 30_000);
    dir.write("events.jsonl", &input);
    let garbage = dir.write("broken.wasm", "\0asm not really");
    let job = fraud_job(&dir, "fraud", "fraud-detector", 4_000, "alerts");
    let host = Host::start(&job, &[]);
    host.wait_for_records("fraud", 4_000);
    let broken = host.weir(&["upgrade", "fraud", "--operator", "detector", "--plugin", garbage.to_str().unwrap()]);
    let error = broken.failure();
    assert!(error.contains("upgrade refused, job `fraud` runs on unchanged") && error.contains("broken.wasm"), "{error}");
    let incompatible = plugin("fraud-detector-incompatible");
    let error = host.weir(&["upgrade", "fraud", "--operator", "detector", "--plugin", incompatible.to_str().unwrap()]).failure();
    assert!(error.contains("cannot take over the state of operator `detector`"), "{error}");
    assert!(error.contains("value state `session`") && error.contains("cannot be read by this plugin"), "{error}");
    let error = host.weir(&["upgrade", "fraud", "--operator", "nope", "--plugin", incompatible.to_str().unwrap()]).failure();
    assert!(error.contains("no operator with uid `nope`"), "{error}");
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("running") && jobs.contains("detector=fraud_detector.wasm"), "{jobs}");
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_eq!(committed_lines(&dir.path("alerts"), None), model_alerts(&input, 0, false));
}

#[test]
fn forks_from_one_savepoint_match_the_original_and_differ_with_v2_only_by_its_rule() {
    let dir = JobDir::new();
    let input = fraud_events(300, 40_000);
    dir.write("events.jsonl", &input);
    let job = fraud_job(&dir, "original", "fraud-detector", 5_000, "alerts-original");
    let host = Host::start(&job, &[]);
    host.wait_for_records("original", 8_000);
    let savepoint = dir.path("fork-point");
    host.savepoint("original", &savepoint);
    let same = dir.path("alerts-same");
    let reply = host
        .weir(&["fork", savepoint.to_str().unwrap(), "--name", "same", "--sink", &format!("out={}", same.display())])
        .success()
        .stdout();
    assert!(reply.contains("same"), "{reply}");
    let v2 = dir.path("alerts-v2");
    let v2_plugin = plugin("fraud-detector-v2");
    host.weir(&[
        "fork",
        savepoint.to_str().unwrap(),
        "--name",
        "v2",
        "--operator",
        &format!("detector={}", v2_plugin.display()),
        "--sink",
        &format!("out={}", v2.display()),
    ])
    .success();
    let clash = host.weir(&["fork", "original", "--name", "clash"]).failure();
    assert!(clash.contains("would write to") && clash.contains("as job `original` does"), "{clash}");
    // A plugin that is not one is refused before a savepoint is taken for
    // the fork, and the refused fork leaves nothing behind.
    let savepoints = dir.path("checkpoints-original/savepoints");
    let forks_taken = || std::fs::read_dir(&savepoints).map_or(0, |entries| entries.count());
    let taken = forks_taken();
    let not_a_plugin = dir.write("not-a-plugin.wasm", "not wasm");
    let refused = host
        .weir(&["fork", "original", "--name", "bad", "--operator", &format!("detector={}", not_a_plugin.display()), "--sink", "out=/tmp/nowhere-bad"])
        .failure();
    assert!(refused.contains("operator `detector`"), "{refused}");
    assert_eq!(forks_taken(), taken, "no savepoint taken for it");
    assert!(!dir.path("bad").exists(), "no checkpoint directory made for it");
    // The same place spelt otherwise is the same place.
    let spelt = format!("out={}", v2.parent().unwrap().join("x/../alerts-v2").display());
    let clash = host.weir(&["fork", "original", "--name", "clash", "--sink", &spelt]).failure();
    assert!(clash.contains("as job `v2` does"), "{clash}");
    let jobs = host.weir(&["jobs"]).success().stdout();
    for name in ["original", "same", "v2"] {
        assert!(jobs.lines().any(|l| l.starts_with(name)), "{jobs}");
    }
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");

    let checkpoint = savepoint_checkpoint(&savepoint);
    let original_after = committed_lines(&dir.path("alerts-original"), Some(checkpoint));
    let forked_same = committed_lines(&same, None);
    assert!(!forked_same.is_empty());
    assert_eq!(forked_same, original_after, "an identical fork reproduces the original from the savepoint on");

    // Forked again from the savepoint, in a host that does not run them:
    // into the original's output, or under the first fork's name (its
    // checkpoint directory), it is refused, and the output stays as it is.
    let host = Host::start(&fraud_job(&dir, "other", "fraud-detector", 5_000, "alerts-other"), &[]);
    let original = committed_lines(&dir.path("alerts-original"), None);
    let into_original = host.weir(&["fork", savepoint.to_str().unwrap(), "--name", "again"]).failure();
    assert!(into_original.contains("alerts-original, which holds committed output already: a fork is a new job"), "{into_original}");
    assert!(into_original.contains("--sink out=PATH"), "{into_original}");
    let fresh = format!("out={}", dir.path("alerts-again").display());
    let same_name = host.weir(&["fork", savepoint.to_str().unwrap(), "--name", "same", "--sink", &fresh]).failure();
    assert!(same_name.contains("which holds checkpoints already") && same_name.contains("--checkpoint-dir"), "{same_name}");
    drop(host);
    assert_eq!(committed_lines(&dir.path("alerts-original"), None), original);
    assert_eq!(committed_lines(&same, None), forked_same);

    // v2 alone, from the same point: exactly what the model says v2 does
    // on v1's sessions; and where no second login happened in an active
    // session, the same alerts as v1 (but for v2's failure counts).
    let cut = savepoint_offset(&savepoint) as usize;
    let after = |alerts: Vec<String>, v1: &[String]| -> Vec<String> {
        let mut rest = alerts;
        for line in v1 {
            if let Some(i) = rest.iter().position(|l| l == line) {
                rest.remove(i);
            }
        }
        rest
    };
    let v1_before = model_alerts(&input[..cut], cut, false);
    let v2_expected = after(model_alerts(&input, cut, true), &v1_before);
    let forked_v2 = committed_lines(&v2, None);
    assert_eq!(forked_v2, v2_expected);
    let strip = |line: &String| line.split(" (failures").next().unwrap().to_owned();
    let differing: std::collections::BTreeSet<String> = forked_v2
        .iter()
        .map(strip)
        .collect::<std::collections::BTreeSet<_>>()
        .symmetric_difference(&forked_same.iter().cloned().collect())
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    let relogins: std::collections::BTreeSet<String> =
        forked_same.iter().filter(|l| l.contains("invalid login in active")).map(|l| l.split('\t').next().unwrap().to_owned()).collect();
    assert!(!differing.is_empty());
    assert!(differing.is_subset(&relogins), "v2 differs only for addresses that logged in again while active");
}

#[test]
fn reprocessing_from_an_older_savepoint_with_new_code_recomputes_the_output_from_there() {
    let dir = JobDir::new();
    let input = fraud_events(200, 30_000);
    dir.write("events.jsonl", &input);
    let job = fraud_job(&dir, "fraud", "fraud-detector", 6_000, "alerts");
    let host = Host::start(&job, &[]);
    host.wait_for_records("fraud", 6_000);
    let savepoint = dir.path("older");
    host.savepoint("fraud", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_eq!(committed_lines(&dir.path("alerts"), None), model_alerts(&input, 0, false));

    // The same job (name, checkpoints, output) with v2, from the savepoint.
    let v2_job = dir.write(
        "fraud-v2.toml",
        &std::fs::read_to_string(&job).unwrap().replace("fraud_detector.wasm", "fraud_detector_v2.wasm"),
    );
    let run = run_job(&v2_job, &["--from-savepoint", savepoint.to_str().unwrap()]);
    let note = "weir: operator `detector` restores with";
    let said = run.success().stderr().lines().find(|l| l.starts_with(note)).map(str::to_owned).unwrap_or_else(|| run.stderr());
    assert!(said.contains("fraud_detector_v2.wasm (named in the job file); the savepoint was taken with"), "{said}");
    let cut = savepoint_offset(&savepoint) as usize;
    assert_eq!(committed_lines(&dir.path("alerts"), None), model_alerts(&input, cut, true));
}

/// The commands find a job's host without `--api`: every host announces
/// its address in a directory of the user's (here `XDG_RUNTIME_DIR`), and
/// a command asks the host that runs the job named — also when it is not at
/// the default address. `weir jobs` lists every host's jobs. The
/// announcement goes when the host ends.
#[test]
fn the_commands_find_a_jobs_host_without_being_told_its_address() {
    let dir = JobDir::new();
    let runtime = dir.path("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let env = [("XDG_RUNTIME_DIR", runtime.as_path())];
    let first = Host::start_with_env(&count_job(&dir, "first", 1_000_000, 10, 2_000, &plugin("word-count")), &[], &env);
    let source = "name = \"input\"\ntype = \"generator\"\nevents = 1000000\nkeys = 10\nrate = 2000";
    let second = Host::start_with_env(&keyed_job(&dir, "second", source, "count", &plugin("word-count"), "out-2"), &[], &env);
    let untold = |args: &[&str]| {
        let output = std::process::Command::new(common::weir_binary())
            .args(args)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env_remove("WEIR_API")
            .output()
            .unwrap();
        assert!(output.status.success(), "weir {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (listed, _) = untold(&["jobs"]);
    for host in [&first, &second] {
        assert!(listed.contains(&format!("the Weir host at {}:", host.api)), "{listed}");
    }
    assert!(listed.lines().any(|l| l.starts_with("first ")) && listed.lines().any(|l| l.starts_with("second ")), "{listed}");
    let (shown, said) = untold(&["jobs", "second"]);
    assert!(shown.lines().any(|l| l.starts_with("second ")), "{shown}");
    assert!(said.contains(&format!("job `second` is on the host at {} (found without --api)", second.api)), "{said}");
    untold(&["cancel", "second"]);
    let gone = second.api.clone();
    let _ = second.wait();
    let (listed, _) = untold(&["jobs"]);
    assert!(listed.lines().any(|l| l.starts_with("first ")) && !listed.contains(&gone), "{listed}");
    untold(&["cancel", "first"]);
    let _ = first.wait();
    let left: Vec<_> = std::fs::read_dir(runtime.join("weir")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "the hosts withdrew their announcements: {left:?}");
}

/// The committed lines of the files sink in `dir` up to checkpoint `id`'s
/// parts.
fn committed_up_to(dir: &Path, id: u64) -> Vec<String> {
    let after: std::collections::BTreeSet<String> = committed_lines(dir, Some(id)).into_iter().collect();
    committed_lines(dir, None).into_iter().filter(|line| !after.contains(line)).collect()
}

/// A job goes back to one of its retained checkpoints as to a savepoint
/// (Flink's `-s …/chk-N`): the output committed after it is computed
/// again, and the job ends counting exactly as an uninterrupted run — at
/// another parallelism too. Another job started from that checkpoint goes
/// on from it. A checkpoint of a running job, one that is not there and a
/// damaged one are refused, saying why.
#[test]
fn a_job_started_from_a_retained_checkpoint_counts_on_from_it() {
    for backend in ["memory", "rocksdb"] {
        started_from_a_retained_checkpoint(backend);
    }
}

fn started_from_a_retained_checkpoint(backend: &str) {
    let dir = JobDir::new();
    let (events, keys) = (40_000, 200);
    let job = count_job(&dir, "going-back", events, keys, 10_000, &plugin("word-count"));
    let settings = format!("checkpoint_interval_ms = 300\ncheckpoints_retained = 50\nstate_backend = \"{backend}\"");
    let text = std::fs::read_to_string(&job).unwrap().replace("checkpoint_interval_ms = 300", &settings);
    std::fs::write(&job, text).unwrap();
    let copy = dir.write("copy.toml", &std::fs::read_to_string(&job).unwrap().replace("going-back", "copy").replace("\"out\"", "\"out-copy\""));
    let checkpoints = dir.path("checkpoints-going-back");

    let host = Host::start(&job, &[]);
    host.wait_for_records("going-back", 20_000);
    let held = complete_checkpoints(&checkpoints)[0].clone();
    let error = run_job(&copy, &["--from-savepoint", held.to_str().unwrap()]).failure();
    assert!(error.contains("a running job holds its checkpoint directory") && error.contains("weir savepoint"), "{error}");
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));

    let listing = weir(&["checkpoints", checkpoints.to_str().unwrap()]).success().stdout();
    assert!(listing.contains(&format!("to start from an older one, name it: `weir run JOB --from-savepoint {}/chk-", checkpoints.display())), "{listing}");
    let retained = complete_checkpoints(&checkpoints);
    let chosen = retained[retained.len() / 2].clone();
    let id: u64 = chosen.file_name().unwrap().to_str().unwrap().strip_prefix("chk-").unwrap().parse().unwrap();
    let error = weir(&["savepoint", "inspect", chosen.to_str().unwrap()]).failure();
    assert!(error.contains(&format!("it is one checkpoint of {}", checkpoints.display())), "{error}");
    assert!(error.contains(&format!("`weir run JOB --from-savepoint {}`", chosen.display())), "{error}");
    let before = committed_up_to(&dir.path("out"), id);
    assert!(before.len() < events as usize && !before.is_empty(), "the checkpoint chosen is midway: {} lines before it", before.len());

    // The last checkpoint, taken as the job finished, keeps no state.
    let last = retained.last().unwrap();
    let error = run_job(&job, &["--from-savepoint", last.to_str().unwrap()]).failure();
    assert!(error.contains("taken as it finished") && error.contains("choose an earlier one"), "{error}");

    // Another job from it goes on from there.
    let run = run_job(&copy, &["--from-savepoint", chosen.to_str().unwrap()]);
    assert!(run.success().stderr().contains(&format!("starting from checkpoint {}", chosen.display())), "{}", run.stderr());
    let mut both = before.clone();
    both.extend(committed_lines(&dir.path("out-copy"), None));
    both.sort();
    assert_eq!(both, expected_counts(events, keys), "the copy's output goes on from the checkpoint's");

    // Another job may not take this job's checkpoint directory so; refused
    // before the state is copied.
    let thief = dir.write("thief.toml", &std::fs::read_to_string(&copy).unwrap().replace("checkpoints-copy", "checkpoints-going-back").replace("name = \"copy\"", "name = \"thief\""));
    let error = run_job(&thief, &["--from-savepoint", chosen.to_str().unwrap()]).failure();
    assert!(error.contains("it holds the checkpoints of job `going-back`, which this run of `thief` would take over"), "{error}");
    let copies = || std::fs::read_dir(checkpoints.join("savepoints")).into_iter().flatten().flatten().map(|e| e.file_name().into_string().unwrap()).collect::<Vec<_>>();
    assert!(copies().is_empty(), "nothing was copied: {:?}", copies());

    // What a host killed while copying left is removed by the next copy.
    std::fs::create_dir_all(checkpoints.join("savepoints/.checkpoint-123-work")).unwrap();
    std::fs::create_dir_all(checkpoints.join("savepoints/checkpoint-going-back-123")).unwrap();
    std::fs::write(checkpoints.join("savepoints/checkpoint-going-back-123/.writing"), "").unwrap();

    // The job itself, back to it, at parallelism 3.
    run_job(&job, &["--from-savepoint", chosen.to_str().unwrap(), "-p", "3"]).success();
    assert_eq!(committed_up_to(&dir.path("out"), id), before, "the output up to the checkpoint stays as it was");
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));
    // A checkpoint of the first run after the one gone back to, taken
    // before the rollback, would leave the output the rollback deleted
    // missing: refused, and its unused copy removed.
    let superseded = &retained[retained.len() - 2];
    let error = run_job(&job, &["--from-savepoint", superseded.to_str().unwrap()]).failure();
    assert!(error.contains(&format!("lost the output of the checkpoints after {id}")), "{error}");
    assert_eq!(copies().len(), 1, "only the copy the go-back used is kept: {:?}", copies());
    assert!(copies().iter().all(|name| name.starts_with("checkpoint-going-back-") && !name.ends_with("-123")), "{:?}", copies());

    let missing = checkpoints.join("chk-99999999");
    let error = run_job(&job, &["--from-savepoint", missing.to_str().unwrap()]).failure();
    assert!(error.contains("there is no checkpoint 99999999") && error.contains("weir checkpoints"), "{error}");
    let files_of = |chk: &Path| std::fs::read_dir(chk).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_file() && !p.ends_with("_MANIFEST")).collect::<Vec<_>>();
    let damaged = complete_checkpoints(&checkpoints).into_iter().rev().find(|chk| !files_of(chk).is_empty()).unwrap();
    let data = files_of(&damaged)[0].clone();
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[0] ^= 0x40;
    std::fs::write(&data, bytes).unwrap();
    let error = run_job(&job, &["--from-savepoint", damaged.to_str().unwrap()]).failure();
    assert!(error.contains("does not match") && error.contains("choose another"), "{error}");
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys), "a refused start changes no output");
}

#[test]
fn restores_refuse_savepoints_that_do_not_fit_the_job() {
    let dir = JobDir::new();
    let job = count_job(&dir, "small", 20_000, 100, 10_000, &plugin("word-count"));
    let savepoint = stopped_with_savepoint(&dir, &job, "small", 2_000);
    let sp = savepoint.to_str().unwrap();

    let text = std::fs::read_to_string(&job).unwrap();
    let other_groups = dir.write("groups.toml", &text.replace("parallelism = 2", "parallelism = 2\nmax_parallelism = 64"));
    let error = run_job(&other_groups, &["--from-savepoint", sp]).failure();
    assert!(error.contains("max_parallelism = 128 but the job has 64"), "{error}");

    let renamed = text.replace("uid = \"count\"", "uid = \"counter\"").replace("input = \"count\"", "input = \"counter\"");
    let renamed = dir.write("renamed.toml", &renamed);
    let error = run_job(&renamed, &["--from-savepoint", sp]).failure();
    assert!(error.contains("state for operator `count` which the job does not have"), "{error}");
    assert!(error.contains("--allow-non-restored-state"), "{error}");
    let run = run_job(&renamed, &["--from-savepoint", sp, "--allow-non-restored-state"]);
    assert!(!run.success().stderr().contains("was taken of job"), "the same job: {}", run.stderr());

    // Another job's savepoint restores (forks are made so), with a note —
    // into a checkpoint directory of its own, not the one holding the
    // other job's checkpoints, which it would take over.
    let other_job = text.replace("name = \"small\"", "name = \"other\"").replace("path = \"out\"", "path = \"out-other\"");
    let error = run_job(&dir.write("other-job.toml", &other_job), &["--from-savepoint", sp]).failure();
    assert!(error.contains("it holds the checkpoints of job `small`, which this run of `other` would take over"), "{error}");
    let other_job = other_job.replace("checkpoints-small", "checkpoints-other");
    let run = run_job(&dir.write("other-job.toml", &other_job), &["--from-savepoint", sp]);
    let note = format!("savepoint {sp} was taken of job `small`; restoring it into job `other`");
    assert!(run.success().stderr().contains(&note), "{}", run.stderr());

    let other_code = dir.write("other-code.toml", &text.replace("word_count.wasm", "fraud_detector.wasm"));
    let error = run_job(&other_code, &["--from-savepoint", sp]).failure();
    assert!(error.contains("cannot take over its state") && error.contains("declares no value state `count`"), "{error}");

    let keyed = std::fs::read_dir(savepoint.join("count")).unwrap().next().unwrap().unwrap().path();
    // An entry of a state the manifest has no descriptor for, its checksums
    // made to match (a bad writer, not damage): refused, not a panic.
    let original = (std::fs::read(&keyed).unwrap(), std::fs::read(savepoint.join("_SAVEPOINT")).unwrap());
    let mut bytes = original.0.clone();
    bytes[10..14].copy_from_slice(&7u32.to_le_bytes());
    resign(&savepoint, &keyed, &bytes);
    let error = run_job(&job, &["--from-savepoint", sp]).failure();
    assert!(error.contains("an entry refers to state 7, which has no descriptor"), "{error}");
    std::fs::write(&keyed, &original.0).unwrap();
    std::fs::write(savepoint.join("_SAVEPOINT"), &original.1).unwrap();

    let mut bytes = std::fs::read(&keyed).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&keyed, bytes).unwrap();
    let inspect = weir(&["savepoint", "inspect", sp]);
    assert!(inspect.stdout().contains("CORRUPT"), "{}", inspect.stdout());
    let error = run_job(&job, &["--from-savepoint", sp]).failure();
    assert!(error.contains("checksum") && error.contains("does not match"), "{error}");
    let error = run_job(&job, &["--from-savepoint", dir.path("nowhere").to_str().unwrap()]).failure();
    assert!(error.contains("is not a Weir savepoint: it does not exist"), "{error}");
    let error = run_job(&job, &["--from-savepoint", dir.path("checkpoints-small").to_str().unwrap()]).failure();
    assert!(error.contains("it has no _SAVEPOINT file: it holds checkpoints (`weir checkpoints "), "{error}");
    assert!(error.contains("without --from-savepoint"), "says how a job resumes from its checkpoints: {error}");
    assert!(error.contains("checkpoints-small/chk-…`"), "says how to start from an older one: {error}");
    let error = weir(&["checkpoints", sp]).failure();
    assert!(error.contains("is a savepoint, not a checkpoint directory: see it with `weir savepoint inspect"), "{error}");
    let usage = weir(&["savepoint", "inspect", sp, "--limit", "3"]);
    assert_eq!(usage.output.status.code(), Some(2), "a usage error: {}", usage.stderr());
    assert!(usage.stderr().contains("--entries"), "--limit lists entries, so needs --entries: {}", usage.stderr());
    std::fs::create_dir(dir.path("empty")).unwrap();
    let error = run_job(&job, &["--from-savepoint", dir.path("empty").to_str().unwrap()]).failure();
    assert!(error.contains("is not a Weir savepoint: it has no _SAVEPOINT file"), "{error}");
}

/// Writes `bytes` to the savepoint's data file `file`, with the checksum
/// the manifest keeps for it to match.
fn resign(savepoint: &Path, file: &Path, bytes: &[u8]) {
    std::fs::write(file, bytes).unwrap();
    let path = savepoint.join("_SAVEPOINT");
    let mut manifest = weir::savepoint::SavepointManifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    let name = file.strip_prefix(savepoint).unwrap().to_str().unwrap();
    let keyed = manifest.operators.iter_mut().flat_map(|o| &mut o.keyed).find(|k| k.file.path == name).unwrap();
    keyed.file.crc32 = crc32fast::hash(bytes);
    std::fs::write(&path, manifest.encode()).unwrap();
}

#[test]
fn a_savepoint_of_rocksdb_state_restores_into_the_memory_backend_at_another_parallelism() {
    let dir = JobDir::new();
    let (events, keys) = (40_000, 2_000);
    let job = count_job(&dir, "backends", events, keys, 10_000, &plugin("word-count"));
    let text = std::fs::read_to_string(&job).unwrap();
    let rocksdb = dir.write("rocksdb.toml", &text.replace("parallelism = 2", "parallelism = 2\nstate_backend = \"rocksdb\""));
    let host = Host::start(&rocksdb, &[]);
    host.wait_for_records("backends", 8_000);
    let savepoint = dir.path("sp");
    host.stop_with_savepoint("backends", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap(), "-p", "3"]).success();
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));
}

/// The sensors demo (30 s of readings at 5× speed, one source subtask) in
/// 1 s event-time windows — map state and timers — into part files in `out`.
fn windows_job(dir: &JobDir, name: &str, out: &str) -> PathBuf {
    windows_job_of(dir, name, out, &plugin("sensor-window"))
}

/// [`windows_job`] with the sensor-window `plugin` of another language.
fn windows_job_of(dir: &JobDir, name: &str, out: &str, plugin: &Path) -> PathBuf {
    dir.write(
        &format!("{name}.toml"),
        &format!(
            r#"
name = "{name}"
parallelism = 2
checkpoint_dir = "checkpoints-{name}"

[[source]]
name = "sensors"
type = "generator"
mode = "sensors"
events = 9000
shuffle_ms = 100
speed = 5
out_of_orderness_ms = 100
parallelism = 1

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["sensors"]
key_by = true
config = {{ time = "event" }}

[[sink]]
name = "sums"
type = "files"
input = "windows"
path = "{out}"
"#,
            plugin = toml_path(plugin)
        ),
    )
}

#[test]
fn open_windows_and_their_timers_survive_a_stop_and_a_restore_at_another_parallelism() {
    let dir = JobDir::new();
    run_job(&windows_job(&dir, "uninterrupted", "expected"), &["-p", "2"]).success();
    let expected = committed_lines(&dir.path("expected"), None);
    assert_eq!(expected.len(), 90, "30 one-second windows of 3 sensors");

    let job = windows_job(&dir, "stopped", "out");
    let host = Host::start(&job, &[]);
    host.wait_for_records("stopped", 3_000);
    let savepoint = dir.path("sp");
    host.stop_with_savepoint("stopped", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    let inspect = weir(&["savepoint", "inspect", savepoint.to_str().unwrap()]).success().stdout();
    assert!(inspect.contains("(map)") && inspect.contains("(event-time timers)"), "{inspect}");
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap(), "-p", "3"]).success();
    assert_eq!(committed_lines(&dir.path("out"), None), expected);
}

/// Windows of the JavaScript and Python SDKs reach a savepoint and restore:
/// both SDKs hold their windows in the instance between calls, so the
/// stop's savepoint has the open ones only because the host's `flush` had
/// them written back. Restored into the same language (each SDK reads a
/// key's windows from the host when it first sees the key) and into Rust
/// (the same state layout), every window's sum is the uninterrupted Rust
/// run's — compared as numbers: JavaScript writes `3` where Rust writes
/// `3.0`.
#[test]
fn javascript_and_python_windows_reach_the_savepoint_and_restore_in_their_language_and_in_rust() {
    let dir = JobDir::new();
    run_job(&windows_job(&dir, "uninterrupted", "expected"), &["-p", "2"]).success();
    let expected = window_sums(&committed_lines(&dir.path("expected"), None));
    assert_eq!(expected.len(), 90, "30 one-second windows of 3 sensors");
    let (javascript, python, rust) = (js_plugin("sensor-window"), python_plugin("sensor-window"), plugin("sensor-window"));
    let handovers = [
        (&javascript, &javascript, "js-then-js"),
        (&javascript, &rust, "js-then-rust"),
        (&python, &python, "python-then-python"),
        (&python, &rust, "python-then-rust"),
    ];
    for (first, then, name) in handovers {
        let job = windows_job_of(&dir, name, &format!("out-{name}"), first);
        let host = Host::start(&job, &[]);
        host.wait_for_records(name, 3_000);
        let savepoint = dir.path(&format!("sp-{name}"));
        host.stop_with_savepoint(name, &savepoint);
        let (status, stderr) = host.wait();
        assert!(status.success(), "{stderr}");
        let inspect = weir(&["savepoint", "inspect", savepoint.to_str().unwrap(), "--entries"]).success().stdout();
        assert!(inspect.contains("(map)"), "open windows in the savepoint: {inspect}");
        let text = std::fs::read_to_string(&job).unwrap();
        let switched = dir.write(&format!("{name}-restored.toml"), &text.replace(&toml_path(first), &toml_path(then)));
        run_job(&switched, &["--from-savepoint", savepoint.to_str().unwrap(), "-p", "3"]).success();
        let sums = window_sums(&committed_lines(&dir.path(&format!("out-{name}")), None));
        assert_eq!(sums.len(), expected.len(), "{name}: every window once");
        for ((window, sum), (expected_window, expected_sum)) in sums.iter().zip(&expected) {
            assert_eq!(window, expected_window, "{name}");
            assert!((sum - expected_sum).abs() <= 1e-9 * expected_sum.abs().max(1.0), "{name}: {window:?} sums to {sum}, not {expected_sum}");
        }
    }
}

/// `key<TAB>{"start", "end", "value"}` lines as ((key, start, end), value), sorted.
fn window_sums(lines: &[String]) -> Vec<((String, i64, i64), f64)> {
    let mut sums: Vec<_> = lines
        .iter()
        .map(|line| {
            let (key, json) = line.split_once('\t').unwrap_or_else(|| panic!("a key and a window: {line}"));
            let window: serde_json::Value = serde_json::from_str(json).unwrap();
            let field = |name: &str| window[name].as_i64().unwrap_or_else(|| panic!("{name} in {line}"));
            ((key.to_owned(), field("start"), field("end")), window["value"].as_f64().unwrap())
        })
        .collect();
    sums.sort_by(|a, b| a.0.cmp(&b.0));
    sums
}

/// Windows are found by the start their size gives, so windows stored
/// under another size would never fire: a job restored from a savepoint,
/// or resumed from its checkpoint, with the window size (or offset)
/// changed in its config is refused, naming a stored window — the plugin
/// is asked (`check-state`) because its config changed, though its file
/// did not.
/// A config that changes nothing the state depends on is let through, and
/// the results are exact.
#[test]
fn a_window_size_changed_in_the_config_is_refused_instead_of_losing_open_windows() {
    let dir = JobDir::new();
    run_job(&windows_job(&dir, "uninterrupted", "expected"), &["-p", "2"]).success();
    let expected = committed_lines(&dir.path("expected"), None);
    let job = windows_job(&dir, "resized", "out");
    let text = std::fs::read_to_string(&job).unwrap();
    let configured = |size: &str| {
        let config = format!("config = {{ time = \"event\", size_ms = {size} }}");
        let file = format!("resized-{}.toml", size.replace([',', ' ', '='], ""));
        dir.write(&file, &text.replace("config = { time = \"event\" }", &config))
    };
    let refusal = "windows `sums` hold the window [";
    let resized = "which tumbling windows of 2000 ms do not have";

    let savepoint = stopped_with_savepoint(&dir, &job, "resized", 3_000);
    let error = run_job(&configured("2000"), &["--from-savepoint", savepoint.to_str().unwrap()]).failure();
    assert!(error.contains(refusal) && error.contains(resized), "{error}");
    assert!(error.contains("operator `windows` has another `config` than when savepoint"), "{error}");
    // Shifted by an offset, the windows start elsewhere: refused alike.
    let error = run_job(&configured("1000, offset_ms = 250"), &["--from-savepoint", savepoint.to_str().unwrap()]).failure();
    assert!(error.contains(refusal) && error.contains("which tumbling windows of 1000 ms offset by 250 ms do not have"), "{error}");

    // Resumed from a checkpoint after a kill: the same refusal, and the
    // checkpoint stays for a run with the old size.
    let host = Host::start(&configured("1000"), &["--from-savepoint", savepoint.to_str().unwrap()]);
    host.wait_for_checkpoint("resized");
    drop(host);
    let error = run_job(&configured("2000"), &[]).failure();
    assert!(error.contains(refusal) && error.contains(resized), "{error}");
    assert!(error.contains("resumes with another `config` than the one its state was written with"), "{error}");
    run_job(&job, &[]).success();
    assert_eq!(committed_lines(&dir.path("out"), None), expected);
}

/// The native baseline (`native:count`, the word-count crate compiled
/// into the host) keeps its state as the plugin does, so a savepoint of one
/// restores into the other and the counts go on exactly once.
fn counts_go_on_across(first: &Path, then: &Path) {
    let dir = JobDir::new();
    let (events, keys) = (40_000, 2_000);
    let job = count_job(&dir, "swapped", events, keys, 10_000, first);
    let host = Host::start(&job, &[]);
    host.wait_for_records("swapped", 8_000);
    let savepoint = dir.path("sp");
    host.stop_with_savepoint("swapped", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    let text = std::fs::read_to_string(&job).unwrap().replace(&toml_path(first), &toml_path(then));
    let swapped = dir.write("swapped.toml", &text);
    run_job(&swapped, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_eq!(committed_lines(&dir.path("out"), None), expected_counts(events, keys));
}

#[test]
fn a_savepoint_of_the_plugin_restores_into_the_native_baseline() {
    counts_go_on_across(&plugin("word-count"), Path::new("native:count"));
}

#[test]
fn a_savepoint_of_the_native_baseline_restores_into_the_plugin() {
    counts_go_on_across(Path::new("native:count"), &plugin("word-count"));
}

/// A host running a long count, `main`, and a fork of it, `side`, writing
/// its own output.
fn main_and_its_fork_side() -> (JobDir, Host) {
    let dir = JobDir::new();
    let job = count_job(&dir, "main", 1_000_000, 100, 20000, &plugin("word-count"));
    let host = Host::start(&job, &[]);
    host.wait_for_records("main", 1000);
    let out = dir.path("out-side");
    host.weir(&["fork", "main", "--name", "side", "--sink", &format!("out={}", out.display())]).success();
    (dir, host)
}

/// A job stopped with a savepoint keeps its last checkpoint in `weir jobs`
/// while the host runs on (here for the job it was forked from); it showed
/// none.
#[test]
fn a_job_stopped_with_a_savepoint_keeps_its_checkpoint_in_the_listing() {
    let (dir, host) = main_and_its_fork_side();
    let running = host.wait_for_checkpoint("side");
    host.stop_with_savepoint("side", &dir.path("sp-side"));
    let line = host.job_line("side").unwrap_or_else(|jobs| panic!("no line for the job: {jobs}"));
    assert!(line.contains("stopped") && line.contains(" #"), "its last checkpoint is listed: {line} (running: {running})");
    host.weir(&["cancel", "main"]).success();
}

/// A cancelled job's line in `weir jobs` keeps the figures it had when it
/// was cancelled, and its uptime stops, while the host runs on (here for
/// the job it was forked from).
#[test]
fn a_cancelled_job_keeps_its_figures() {
    let (_dir, host) = main_and_its_fork_side();
    host.wait_for_records("side", 2000);
    let reply = host.weir(&["cancel", "side"]).success().stdout();
    assert!(reply.contains("job `side` cancelled"), "{reply}");
    let line = |host: &Host| {
        let line = host.job_line("side").unwrap_or_else(|jobs| panic!("no line for the job: {jobs}"));
        // Compared cell by cell: the columns' widths follow the other job's figures.
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let before = line(&host);
    assert!(host.records_read("side") >= 2000, "the records it had read: {before}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(line(&host), before, "nothing changes once it is cancelled");
    host.weir(&["cancel", "main"]).success();
}

/// A host started with `WEIR_API_TOKEN` answers only commands that send
/// the same token: without it (or with another) `weir` says what to set and
/// the job runs on; with it, the commands work as ever.
#[test]
fn a_host_with_an_api_token_takes_commands_with_that_token_only() {
    let dir = JobDir::new();
    let job = paced_count_job(&dir, "guarded");
    let token = std::path::Path::new("correct-horse");
    let host = Host::start_with_env(&job, &[], &[("WEIR_API_TOKEN", token)]);
    let command = |args: &[&str], token: Option<&str>| {
        let mut command = std::process::Command::new(common::weir_binary());
        command.args(args).args(["--api", &host.api]).env_remove("WEIR_API_TOKEN");
        if let Some(token) = token {
            command.env("WEIR_API_TOKEN", token);
        }
        command.output().unwrap()
    };
    for token in [None, Some("battery-staple")] {
        let refused = command(&["cancel", "guarded"], token);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && said.contains("set WEIR_API_TOKEN to the token the host was started with"), "{said}");
    }
    let listed = command(&["jobs"], Some("correct-horse"));
    assert!(String::from_utf8_lossy(&listed.stdout).lines().any(|l| l.starts_with("guarded ") && l.contains(" running ")));
    assert!(command(&["cancel", "guarded"], Some("correct-horse")).status.success());
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
}
