//! Checkpoints and recovery: exactly-once results under SIGKILL (Rust and
//! Python operators), plugin traps and corrupt checkpoints, for both state
//! backends; alignment of a multi-input operator; RocksDB with millions of
//! keys in a small memory budget, checkpointed incrementally.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Host, JobDir, amplifier_job, committed_lines, complete_checkpoints, discarded_count_job, plugin, python_plugin,
    run_job, run_with_kills, spawn_quiet, toml_path, weir_binary,
};

/// A keyed count (`plugin`, with `config`) over `events` generated events
/// with `keys` keys at `rate` events/s, into the transactional file sink.
fn count_job(dir: &JobDir, backend: &str, plugin: &Path, config: &str, extra: &str) -> PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "chaos-count"
parallelism = 2
state_backend = "{backend}"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 150
{extra}

[[source]]
name = "numbers"
type = "generator"
events = 60000
keys = 600
rate = 8000

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["numbers"]
key_by = true
config = {{ {config} }}

[[sink]]
name = "out"
type = "files"
path = "out"
input = "count"
"#,
            plugin = toml_path(plugin)
        ),
    )
}

/// Every committed output line of the files sink in `dir`, `key<TAB>value`,
/// grouped by key with values sorted numerically.
fn committed(dir: &Path) -> BTreeMap<u64, Vec<u64>> {
    let mut out: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the sink's directory exists") {
        let entry = entry.unwrap();
        if !entry.file_name().to_string_lossy().starts_with("part-") {
            continue;
        }
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let (key, value) = line.split_once('\t').expect("key<TAB>value");
            out.entry(key.parse().unwrap()).or_default().push(value.parse().unwrap());
        }
    }
    out.values_mut().for_each(|v| v.sort_unstable());
    out
}

/// Exactly once: every key counted 1, 2, … up to its number of events,
/// each count exactly once.
fn assert_exact_counts(out: &BTreeMap<u64, Vec<u64>>, events: u64, keys: u64) {
    assert_eq!(out.len() as u64, keys, "every key has output");
    let expected: Vec<u64> = (1..=events / keys).collect();
    for (key, counts) in out {
        assert_eq!(counts, &expected, "key {key}: each count exactly once (no loss, no duplicate)");
    }
}

fn chaos(backend: &str, extra: &str) {
    let dir = JobDir::new();
    let job = count_job(&dir, backend, &plugin("word-count"), "", extra);
    let stderr = run_with_kills(&job, 6);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".part-"))
        .collect();
    assert!(leftovers.is_empty(), "no pending or in-progress files remain: {leftovers:?}");
}

#[test]
fn sigkill_at_random_moments_loses_and_duplicates_nothing_memory() {
    chaos("memory", "");
}

#[test]
fn sigkill_at_random_moments_loses_and_duplicates_nothing_rocksdb() {
    chaos("rocksdb", "");
}

/// A count job (memory backend) over more keys than its operator's
/// instances hold under `memory_limit_mb`.
struct ManyKeys {
    events: u64,
    keys: u64,
    rate: u64,
    memory_limit_mb: u64,
    checkpoint_interval_ms: u64,
}

impl ManyKeys {
    /// The job file, written into `dir`.
    fn count_job(&self, dir: &JobDir, plugin: &Path) -> PathBuf {
        let ManyKeys { events, keys, rate, memory_limit_mb, checkpoint_interval_ms } = self;
        let job = count_job(dir, "memory", plugin, "", "");
        let text = std::fs::read_to_string(&job).unwrap();
        let many = text
            .replace("events = 60000\nkeys = 600\nrate = 8000", &format!("events = {events}\nkeys = {keys}\nrate = {rate}"))
            .replace("checkpoint_interval_ms = 150\n", &format!("checkpoint_interval_ms = {checkpoint_interval_ms}\n"))
            .replace("key_by = true\n", &format!("key_by = true\nmemory_limit_mb = {memory_limit_mb}\n"));
        let wanted = [format!("keys = {keys}\n"), format!("memory_limit_mb = {memory_limit_mb}\n"), format!("_ms = {checkpoint_interval_ms}\n")];
        assert!(wanted.iter().all(|line| many.contains(line.as_str())), "{many}");
        std::fs::write(&job, many).unwrap();
        job
    }

    /// Runs the count with `plugin` through three SIGKILLs and a last run
    /// that resumes, asserts every count came exactly once, and returns the
    /// last run's stderr.
    fn count_through_kills(&self, dir: &JobDir, plugin: &Path) -> String {
        let stderr = run_with_kills(&self.count_job(dir, plugin), 3);
        assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
        assert_exact_counts(&committed(&dir.path("out")), self.events, self.keys);
        stderr
    }
}

/// Keys cycling through more than the operator's instance holds (a Rust
/// SDK bound of 2 MiB, ~14 000 counts, for 40 000 keys per subtask) are
/// written back, forgotten and read again all the time — by the SDK's
/// eviction for keys that cycle, which keeps those used least recently —
/// and still count exactly once through SIGKILLs. (The last run logs the
/// warning of such an operator: ten write-backs and more.)
#[test]
fn sigkill_with_more_keys_than_the_instance_holds_loses_and_duplicates_nothing() {
    let dir = JobDir::new();
    let many = ManyKeys { events: 960_000, keys: 80_000, rate: 120_000, memory_limit_mb: 16, checkpoint_interval_ms: 150 };
    let stderr = many.count_through_kills(&dir, &plugin("word-count"));
    assert!(stderr.contains("give the operator a larger memory_limit_mb"), "the keys outgrew the instance: {stderr}");
}

/// The Python SDK holds its counts in the instance between calls, writes
/// them back when the host flushes before a checkpoint, and, past its
/// share of a 64 MiB memory limit (~32 000 values, for 50 000 keys per
/// subtask), writes back and forgets half and fetches them again. With a
/// checkpoint a second (~25 000 counts changed per subtask in between),
/// the half forgotten holds changes no checkpoint has yet. Through SIGKILLs
/// every count still comes exactly once.
#[test]
fn sigkill_with_a_python_operator_holding_its_counts_loses_and_duplicates_nothing() {
    let dir = JobDir::new();
    let many = ManyKeys { events: 300_000, keys: 100_000, rate: 50_000, memory_limit_mb: 64, checkpoint_interval_ms: 1000 };
    many.count_through_kills(&dir, &python_plugin("word-count"));
}

/// RocksDB at its smallest budgets: no block cache, no write-back layer
/// (every batch's writes reach the database), 1 MiB memtables (flushed to
/// files often, between and during checkpoints).
#[test]
fn sigkill_with_rocksdb_at_its_smallest_memory_budgets_loses_and_duplicates_nothing() {
    chaos("rocksdb", "[rocksdb]\nblock_cache_mb = 0\nwrite_buffer_mb = 1\nhot_entries_mb = 0\n");
}

/// A job SIGKILLed before its first checkpoint, with output already in the
/// sink's part in progress and (RocksDB) state on local disk, starts over
/// from the beginning: neither that output nor that state counts, and
/// every count comes exactly once. (The random kills above come after a
/// first checkpoint, so that their last run resumes.)
fn killed_before_its_first_checkpoint(backend: &str) {
    let dir = JobDir::new();
    let job = count_job(&dir, backend, &plugin("word-count"), "", "");
    let every_150_ms = std::fs::read_to_string(&job).unwrap();
    std::fs::write(&job, every_150_ms.replace("checkpoint_interval_ms = 150", "checkpoint_interval_ms = 600000")).unwrap();
    let out = dir.path("out");
    // (The sink makes its directory when it starts.)
    let in_progress_output = || {
        let parts = std::fs::read_dir(&out).into_iter().flatten().flatten();
        let in_progress = parts.filter(|part| part.file_name().to_string_lossy().starts_with(".part-"));
        in_progress.filter_map(|part| part.metadata().ok()).any(|meta| meta.len() > 0)
    };
    kill_once(&job, "output in a part in progress", in_progress_output);
    assert!(complete_checkpoints(&dir.path("checkpoints")).is_empty(), "killed before a checkpoint completed");

    std::fs::write(&job, every_150_ms).unwrap();
    let stderr = run_job(&job, &[]).stderr();
    assert!(!stderr.contains("resumed from checkpoint"), "nothing to resume from: {stderr}");
    assert_exact_counts(&committed(&out), 60000, 600);
    assert!(names_starting(&out, ".part-").is_empty(), "no part left in progress");
}

#[test]
fn a_job_killed_before_its_first_checkpoint_starts_over_exactly_memory() {
    killed_before_its_first_checkpoint("memory");
}

#[test]
fn a_job_killed_before_its_first_checkpoint_starts_over_exactly_rocksdb() {
    killed_before_its_first_checkpoint("rocksdb");
}

/// Gives the job's `files` sink (the last table of its file) `setting`.
fn with_sink_setting(job: &Path, setting: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(job).unwrap();
    writeln!(file, "{setting}").unwrap();
}

/// The names of the files in `dir` whose names start with `prefix`.
fn names_starting(dir: &Path, prefix: &str) -> Vec<String> {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
    names.filter(|name| name.starts_with(prefix)).collect()
}

/// Parts rolled every 600 ms while checkpoints come every 150 ms: a part
/// spans checkpoints, the kills land while parts are in progress, and each
/// restore commits the share of the part its checkpoint covered. Every
/// count exactly once, in fewer parts than a part per checkpoint.
#[test]
fn sigkill_with_parts_rolling_across_checkpoints_loses_and_duplicates_nothing() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    with_sink_setting(&job, "roll_interval_ms = 600");
    let stderr = run_with_kills(&job, 6);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
    assert!(names_starting(&dir.path("out"), ".part-").is_empty(), "no part left in progress");
    // About 7.5 s of input and 6 restarts: a part per checkpoint would be
    // ~50–80; rolled every 600 ms, about 12, and one more per restart.
    let parts = names_starting(&dir.path("out"), "part-");
    assert!(parts.len() <= 30, "{} parts: {parts:?}", parts.len());
}

/// A savepoint commits the part in progress whole, however young: its
/// output needs no checkpoint of the run that took it. Run from it with
/// that run's checkpoints gone, the job goes on to exact counts.
#[test]
fn a_savepoint_commits_the_part_in_progress_whole() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    with_sink_setting(&job, "roll_interval_ms = 3600000");
    let host = Host::start(&job, &[]);
    host.wait_for_checkpoint("chaos-count");
    host.wait_for_records("chaos-count", 20_000);
    let savepoint = dir.path("savepoint");
    host.stop_with_savepoint("chaos-count", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    let out = dir.path("out");
    assert!(names_starting(&out, ".part-").is_empty(), "{:?}", names_starting(&out, ""));
    assert_eq!(names_starting(&out, "part-").len(), 1, "the hour-long part, rolled by the savepoint");
    std::fs::remove_dir_all(dir.path("checkpoints")).unwrap();
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_exact_counts(&committed(&out), 60000, 600);
}

#[test]
fn output_of_abandoned_checkpoints_is_committed_with_a_later_one() {
    // Checkpoints time out after 3 ms: about half of them are abandoned
    // after the sinks pre-committed their part files. Two kills restart
    // the job from checkpoints that completed after abandoned ones.
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "checkpoint_timeout_ms = 3\ntolerable_failed_checkpoints = 1000000");
    let stderr = run_with_kills(&job, 2);
    assert!(stderr.contains("checkpoint timed out; abandoning it"), "checkpoints were abandoned: {stderr}");
    assert!(stderr.contains(" failed (the log says why)"), "and the summary counts them: {stderr}");
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// Checkpoints that keep failing fail the job over (a state backend that
/// failed once may fail every snapshot after: RocksDB after its disk was
/// full) instead of leaving it running with nothing newer to recover from;
/// the next run resumes exactly.
#[test]
fn checkpoints_failing_in_a_row_fail_the_job_over() {
    let dir = JobDir::new();
    let failing = "checkpoint_timeout_ms = 1\ntolerable_failed_checkpoints = 2\n[restart]\nstrategy = \"none\"";
    let job = count_job(&dir, "memory", &plugin("word-count"), "", failing);
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("3 checkpoints failed in a row, more than tolerable_failed_checkpoints = 2 allows"), "{error}");
    assert!(error.contains("the last: it timed out after 1 ms"), "{error}");
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    run_job(&job, &[]).success();
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

#[test]
fn a_plugin_that_traps_once_is_recovered_from_exactly() {
    for backend in ["memory", "rocksdb"] {
        let dir = JobDir::new();
        let restart = "[restart]\nstrategy = \"fixed-delay\"\nmax_attempts = 3\ndelay_ms = 100";
        let job = count_job(&dir, backend, &plugin("faulty"), "mode = \"trap-once\", after = 8000", restart);
        let run = run_job(&job, &[]);
        run.success();
        assert!(run.stderr().contains("1 restart(s) after failures"), "{}", run.stderr());
        assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
    }
}

/// Between a failure and its restart the job says it is restarting and
/// why, at once: `weir jobs`, `/metrics`, and a savepoint refused without
/// waiting for the restart. Then it runs on and counts exactly; a cancel
/// during the wait ends the job at once.
#[test]
fn a_job_waiting_to_restart_says_so_and_can_be_cancelled_at_once() {
    let dir = JobDir::new();
    let restart = "[restart]\nstrategy = \"fixed-delay\"\nmax_attempts = 3\ndelay_ms = 4000";
    let job = count_job(&dir, "memory", &plugin("faulty"), "mode = \"trap-once\", after = 8000", restart);
    let host = Host::start(&job, &[]);
    let restarting = wait_for_status(&host, "restarting");
    let asked = Instant::now();
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("job `chaos-count` restarting (restart 1); the last failure: ") && jobs.contains("trapped"), "{jobs}");
    let error = host.weir(&["savepoint", "chaos-count", "--dir", dir.path("sp").to_str().unwrap()]).failure();
    assert!(error.contains("the job failed and restarts in"), "{error}");
    let faulty = plugin("faulty");
    let error = host.weir(&["upgrade", "chaos-count", "--operator", "count", "--plugin", faulty.to_str().unwrap()]).failure();
    assert!(error.contains("cannot be upgraded now: the job failed and restarts in"), "{error}");
    let request = weir::control::SavepointRequest { dir: Some(dir.path("sp")), stop: false };
    let refused = weir::control::client::ApiClient::new(&host.api).savepoint("chaos-count", &request).unwrap_err();
    assert_eq!(refused.status(), Some(409), "not running, not failed: {refused}");
    assert!(!dir.path("sp").exists(), "a savepoint not taken leaves no directory");
    let metrics = weir::control::client::ApiClient::new(&host.api).metrics().unwrap();
    assert!(metrics.contains("weir_job_restarts_total{job=\"chaos-count\"} 1"), "{metrics}");
    assert!(asked.elapsed() < Duration::from_secs(3), "answered while it waits, not after: {:?}", asked.elapsed());
    assert!(restarting.elapsed() < Duration::from_secs(4), "asked during the wait");
    wait_for_status(&host, "running");
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);

    let restart = "[restart]\nstrategy = \"fixed-delay\"\nmax_attempts = 3\ndelay_ms = 60000";
    let job = count_job(&dir, "memory", &plugin("faulty"), "mode = \"always-trap\", after = 100", restart);
    std::fs::remove_dir_all(dir.path("checkpoints")).unwrap();
    std::fs::remove_dir_all(dir.path("out")).unwrap();
    let host = Host::start(&job, &[]);
    wait_for_status(&host, "restarting");
    let asked = Instant::now();
    let reply = host.weir(&["cancel", "chaos-count"]).success().stdout();
    assert!(reply.contains("cancelled") && asked.elapsed() < Duration::from_secs(5), "{reply} after {:?}", asked.elapsed());
    let _ = host.wait();
}

/// Waits until `weir jobs` shows job `chaos-count` with `status`; when
/// it first did.
fn wait_for_status(host: &Host, status: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = host.job_line("chaos-count");
        if line.as_ref().is_ok_and(|l| l.split_whitespace().nth(1) == Some(status)) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "job `chaos-count` never {status}: {line:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_file_sink_keeps_what_it_wrote_before_a_restart() {
    let dir = JobDir::new();
    let restart = "[restart]\nstrategy = \"fixed-delay\"\nmax_attempts = 3\ndelay_ms = 100";
    let job = count_job(&dir, "memory", &plugin("faulty"), "mode = \"trap-once\", after = 8000", restart);
    let text = std::fs::read_to_string(&job).unwrap();
    std::fs::write(&job, text.replace("type = \"files\"\npath = \"out\"", "type = \"file\"\npath = \"out.txt\"")).unwrap();
    let run = run_job(&job, &[]);
    run.success();
    assert!(run.stderr().contains("1 restart(s) after failures"), "{}", run.stderr());
    // Not transactional: what followed the checkpoint comes twice, but
    // nothing written before the restart is lost.
    let mut counts: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for line in dir.read("out.txt").lines() {
        let (key, count) = line.split_once('\t').expect("key<TAB>count");
        counts.entry(key.parse().unwrap()).or_default().push(count.parse().unwrap());
    }
    assert_eq!(counts.len(), 600);
    for (key, mut seen) in counts {
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (1..=100).collect::<Vec<u64>>(), "key {key}");
    }
}

#[test]
fn a_second_run_of_a_running_job_is_refused() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    let host = Host::start(&job, &[]);
    host.wait_for_records("chaos-count", 1000);
    let error = run_job(&job, &["--api", "127.0.0.1:0"]).failure();
    assert!(error.contains("is in use by another running job"), "{error}");
    assert!(error.contains("give this one a checkpoint_dir of its own"), "{error}");
    // A copy under another name, with checkpoints of its own, writing the
    // same output: its part files would overwrite the first job's.
    let text = std::fs::read_to_string(&job).unwrap();
    let copy = dir.write("copy.toml", &text.replace("name = \"chaos-count\"", "name = \"copy\"").replace("checkpoint_dir = \"checkpoints\"", "checkpoint_dir = \"checkpoints-copy\""));
    let error = run_job(&copy, &["--api", "127.0.0.1:0"]).failure();
    assert!(error.contains(&format!("{} is being written by another running job", dir.path("out").display())), "{error}");
    // Two jobs writing one `file` sink's file (copies with a `file` sink):
    // their lines would mix.
    let lines = |name: &str, checkpoints: &str| {
        text.replace("name = \"chaos-count\"", &format!("name = \"{name}\""))
            .replace("checkpoint_dir = \"checkpoints\"", checkpoints)
            .replace("type = \"files\"", "type = \"file\"")
            .replace("path = \"out\"", "path = \"lines.txt\"")
    };
    let writer = Host::start(&dir.write("lines.toml", &lines("lines", "checkpoint_dir = \"checkpoints-lines\"")), &[]);
    writer.wait_for_records("lines", 1000);
    let second = dir.write("lines-2.toml", &lines("second", "checkpoint_dir = \"checkpoints-second\""));
    let error = run_job(&second, &["--api", "127.0.0.1:0"]).failure();
    assert!(error.contains(&format!("{} is being written by another running job", dir.path("lines.txt").display())), "{error}");
    assert!(error.contains("`file` sink a path of its own"), "{error}");
    writer.weir(&["cancel", "lines"]).success();
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

#[test]
fn a_plugin_that_always_traps_exhausts_the_restart_attempts() {
    let dir = JobDir::new();
    let restart = "[restart]\nstrategy = \"exponential-backoff\"\nmax_attempts = 2\ndelay_ms = 50";
    let job = count_job(&dir, "memory", &plugin("faulty"), "mode = \"always-trap\", after = 100", restart);
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `count`"), "{error}");
    assert!(error.contains("trapped on purpose"), "{error}");
    assert!(error.contains("gave up after 2 restart(s)"), "{error}");
    assert!(committed(&dir.path("out")).values().all(|counts| counts.windows(2).all(|w| w[0] < w[1])));
}

/// A host lists a failed job with how far its last attempt got, as it
/// lists a running one, not with zeros.
#[test]
fn a_failed_job_is_listed_with_the_figures_of_its_last_attempt() {
    use weir::control::ControlPlane;
    let dir = JobDir::new();
    let restart = "[restart]\nstrategy = \"fixed-delay\"\nmax_attempts = 1\ndelay_ms = 50";
    let job = count_job(&dir, "memory", &plugin("faulty"), "mode = \"always-trap\", after = 2000", restart);
    let graph = weir::job::load(&job, weir::Overrides::default()).unwrap();
    let manager = weir::host::JobManager::new(weir::PluginEngine::new().unwrap());
    manager.submit(graph, None, false).unwrap();
    manager.wait_all();
    let info = manager.job("chaos-count").unwrap();
    assert_eq!(info.status, "failed", "{info:?}");
    assert!(info.error.as_deref().is_some_and(|e| e.contains("trapped on purpose")), "{info:?}");
    assert!(info.read >= 2000 && info.written > 0, "read {}, written {}", info.read, info.written);
    assert_eq!(info.restarts, 1, "{info:?}");
    let count = info.nodes.iter().find(|node| node.node == "operator `count`").expect("the operator is listed");
    assert!(count.counters.records_in >= 2000, "{count:?}");
}

/// Starts the job and kills it once at least `n` checkpoints are complete.
/// A job whose bounded branch ends goes on checkpointing: the ended
/// branch's output is committed by the next checkpoint, not only when the
/// whole job ends, a savepoint can be taken, and a kill loses and
/// duplicates nothing. Before, the first task to end other than a lone
/// source stopped every checkpoint for the rest of the run (found by the
/// event-time audit).
#[test]
fn checkpoints_go_on_after_a_branch_of_the_job_ends() {
    let dir = JobDir::new();
    // A source and its sink, chained into one task, that end at once.
    let branch = "[[source]]\nname = \"short\"\ntype = \"generator\"\nevents = 10\nparallelism = 1\n\n\
                  [[sink]]\nname = \"short-out\"\ntype = \"files\"\npath = \"short\"\ninput = \"short\"\n";
    let job = count_job(&dir, "memory", &plugin("word-count"), "", branch);
    let host = Host::start(&job, &[]);
    let started = Instant::now();
    while committed_lines(&dir.path("short"), None).len() < 10 {
        assert!(started.elapsed() < Duration::from_secs(30), "the ended branch's output is not committed: {}", host.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    let reply = host.savepoint("chaos-count", &dir.path("sp"));
    assert!(reply.contains("savepoint of job `chaos-count` written"), "{reply}");
    assert!(host.records_read("chaos-count") < 60_010, "the unbounded branch still runs");
    drop(host); // SIGKILL
    run_job(&job, &[]).success();
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
    let short = committed_lines(&dir.path("short"), None);
    assert_eq!(short.len(), 10, "the ended branch's output once: {short:?}");
}

fn kill_after_checkpoints(job: &Path, checkpoints: &Path, n: usize) {
    kill_once(job, &format!("{n} checkpoints"), || complete_checkpoints(checkpoints).len() >= n);
}

/// Runs `job` and SIGKILLs it once it has completed checkpoint `id` or a
/// later one (older ones may be gone by then: only a few are retained).
fn kill_after_checkpoint(job: &Path, checkpoints: &Path, id: u64) {
    let newest = || complete_checkpoints(checkpoints).last().map_or(0, |dir| checkpoint_id(dir));
    kill_once(job, &format!("checkpoint {id}"), || newest() >= id);
}

/// Runs `job` and SIGKILLs it once `done` says so; `what` names the wait.
fn kill_once(job: &Path, what: &str, done: impl Fn() -> bool) {
    let mut child = spawn_quiet(job);
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(30), "no {what} in 30 s");
        assert!(child.try_wait().unwrap().is_none(), "the job ended before {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A checkpoint directory that lost its `LINEAGE` file (a backup that left
/// out one small file) gets it back from its checkpoints' manifests, and
/// the job resumes from its newest checkpoint to exact counts. Before, the
/// run made a new lineage, took its own sink's parts in progress for
/// another job's, and every later run found every checkpoint "written in
/// another checkpoint directory" (found by the operations audit).
#[test]
fn a_lost_lineage_file_is_restored_from_the_checkpoints() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    let checkpoints = dir.path("checkpoints");
    kill_after_checkpoints(&job, &checkpoints, 2);
    let lineage = std::fs::read_to_string(checkpoints.join("LINEAGE")).unwrap();
    std::fs::remove_file(checkpoints.join("LINEAGE")).unwrap();
    let stderr = run_job(&job, &[]).success().stderr();
    assert!(stderr.contains("resumed from checkpoint") && stderr.contains("LINEAGE file was missing"), "{stderr}");
    assert_eq!(std::fs::read_to_string(checkpoints.join("LINEAGE")).unwrap(), lineage);
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// A job may change its state backend between runs: its resume reads the
/// checkpoint the other backend wrote, at its parallelism and at another,
/// to exact counts (rocksdb → memory was refused at the same parallelism,
/// and failed on a confusing message at another: the state-backend audit).
#[test]
fn a_job_resumes_on_another_state_backend() {
    for (from, to, parallelism) in [("rocksdb", "memory", "2"), ("rocksdb", "memory", "3"), ("memory", "rocksdb", "1")] {
        let dir = JobDir::new();
        let job = count_job(&dir, from, &plugin("word-count"), "", "");
        kill_after_checkpoints(&job, &dir.path("checkpoints"), 2);
        count_job(&dir, to, &plugin("word-count"), "", "");
        let stderr = run_job(&job, &["--parallelism", parallelism]).success().stderr();
        assert!(stderr.contains("resumed from checkpoint"), "{from} → {to} at {parallelism}: {stderr}");
        assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
    }
}

/// A `LINEAGE` file damaged by a flipped bit: one whose content is no
/// longer an id as Weir makes them (an upper-case digit) is restored from
/// the checkpoints as a lost one is, and the job resumes to exact counts.
/// One still of that form cannot be told from checkpoints all copied in
/// from another directory, so the run is refused — but it names the
/// lineage the checkpoints carry and where to write it, where the message
/// only said to start afresh, losing the intact checkpoints (found by the
/// bad-input audit).
#[test]
fn a_damaged_lineage_file_is_restored_or_named() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    let checkpoints = dir.path("checkpoints");
    let lineage_file = checkpoints.join("LINEAGE");
    kill_after_checkpoints(&job, &checkpoints, 2);
    let lineage = std::fs::read_to_string(&lineage_file).unwrap();
    // One bit flipped in the first digit (0 <-> 1, …) or the first letter
    // (a -> A): a lineage has both but for odds of 1 in millions.
    let flip_first = |is: fn(&u8) -> bool, bit: u8| {
        let mut bytes = lineage.clone().into_bytes();
        *bytes.iter_mut().find(|b| is(b)).expect("a lineage of 32 hex digits") ^= bit;
        String::from_utf8(bytes).unwrap()
    };
    let still_an_id = flip_first(u8::is_ascii_digit, 1);
    std::fs::write(&lineage_file, &still_an_id).unwrap();
    let error = run_job(&job, &[]).failure();
    let hint = format!("write {lineage} into {}", lineage_file.display());
    assert!(error.contains("copied in by hand?") && error.contains(&hint), "{error}");
    assert_eq!(std::fs::read_to_string(&lineage_file).unwrap(), still_an_id, "a refused run changes nothing");

    std::fs::write(&lineage_file, flip_first(u8::is_ascii_lowercase, 0x20)).unwrap();
    let stderr = run_job(&job, &[]).success().stderr();
    assert!(stderr.contains("resumed from checkpoint") && stderr.contains("LINEAGE file was damaged"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&lineage_file).unwrap(), lineage);
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// The stored values a resume offers a changed plugin's `check-state` come
/// in calls of at most 4 MiB, as input batches do, not 4 096 values of any
/// size: a job holding values of 8 KB ran under its 24 MiB cap, but its
/// resume with a changed config failed the check for its memory cap
/// (found by the state-backend audit with values of 100 KB under 256 MiB).
#[test]
fn a_changed_plugin_checks_large_stored_values_within_its_memory_cap() {
    let dir = JobDir::new();
    let value = "x".repeat(8 << 10);
    let lines: String = (0..4500).map(|i| format!("{{\"key\": \"v{i}\", \"value\": \"{value}\"}}\n")).collect();
    dir.write("values.jsonl", &lines);
    // A slow second source keeps the job running once the values are read.
    let job = |config: &str| {
        format!(
            r#"
name = "big-values"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 100
[restart]
strategy = "none"

[[source]]
name = "values"
type = "file"
path = "values.jsonl"
format = "json"

[[source]]
name = "ticks"
type = "generator"
events = 1000000
rate = 1

[[operator]]
uid = "store"
plugin = {plugin}
inputs = ["values", "ticks"]
key_by = true
memory_limit_mb = 24
config = {config}

[[sink]]
name = "out"
type = "files"
path = "out"
input = "store"
"#,
            plugin = toml_path(&plugin("faulty"))
        )
    };
    let path = dir.write("job.toml", &job(r#"{ mode = "big-state" }"#));
    let values_committed = || committed_lines(&dir.path("out"), None).iter().filter(|l| l.starts_with('v')).count();
    kill_once(&path, "every value committed", || dir.path("out").exists() && values_committed() == 4500);

    dir.write("job.toml", &job(r#"{ mode = "big-state", after = 1 }"#));
    let mut child = Command::new(weir_binary())
        .args(["run", path.to_str().unwrap()])
        .env("WEIR_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    for line in stderr.lines().map_while(Result::ok) {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("resuming from checkpoint") || line.contains("did not start") || line.contains("failed") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.contains("reads the checkpoint's state") && seen.contains("resuming from checkpoint"), "{seen}");
}

/// SIGTERM (a service manager stopping it) or SIGINT (Ctrl-C) cancels the
/// host's job, saying so, and the process exits as a shell reports the
/// signal; the job resumes from its newest checkpoint, to exact counts.
#[test]
fn sigterm_cancels_the_job_which_resumes_from_its_checkpoint() {
    for (signal, status) in [("TERM", 143), ("INT", 130)] {
        let dir = JobDir::new();
        let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
        let checkpoints = dir.path("checkpoints");
        let child = Command::new(weir_binary())
            .args(["run", job.to_str().unwrap(), "--api", "127.0.0.1:0"])
            .env("WEIR_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir");
        wait_for_complete_checkpoints(&checkpoints, 2);
        let sent = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(status), "{stderr}");
        assert!(stderr.contains(&format!("weir: SIG{signal}: cancelling the jobs")) && stderr.contains("was cancelled"), "{stderr}");
        assert!(run_job(&job, &[]).success().stderr().contains("resumed from checkpoint"));
        assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
    }
}

/// A job started from one working directory resumes from another, and a
/// copy of its directory from there. Killed after a checkpoint's manifest
/// was written and before its parts were renamed into place, the job
/// commits them on resuming from elsewhere (with paths relative to the
/// first working directory, it deleted them), and the copy commits its own
/// (with the paths the checkpoint recorded, it committed the original's
/// and lost its own).
#[test]
fn a_job_resumes_from_another_working_directory_and_commits_what_its_checkpoint_left() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    let checkpoints = dir.path("checkpoints");
    let mut child = Command::new(weir_binary())
        .args(["run", "job.toml"])
        .current_dir(job.parent().unwrap())
        .env("WEIR_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir");
    wait_for_complete_checkpoints(&checkpoints, 2);
    child.kill().unwrap();
    child.wait().unwrap();

    let newest = complete_checkpoints(&checkpoints).pop().unwrap();
    let mut uncommitted = Vec::new();
    for task in manifest_json(&newest)["tasks"].as_array().unwrap() {
        for commit in task["commits"].as_array().into_iter().flatten() {
            let (from, to) = (Path::new(commit["from"].as_str().unwrap()), Path::new(commit["to"].as_str().unwrap()));
            assert!(from.is_absolute() && to.is_absolute(), "{commit}");
            // (The kill may have come before the commit, under load.)
            if to.exists() {
                std::fs::rename(to, from).unwrap();
            }
            if from.exists() {
                uncommitted.push(from.to_path_buf());
            }
        }
    }
    assert!(!uncommitted.is_empty(), "the newest checkpoint has parts to commit");
    // A copy of the job's directory commits its own parts, where its job
    // file puts them, not the original's — and checks them there: one cut
    // short in the copy sends the copy back to the checkpoint before.
    let copy = JobDir::new();
    let copied = Command::new("cp").arg("-a").arg(dir.dir.path().join(".")).arg(copy.dir.path()).status().unwrap();
    assert!(copied.success());
    let cut = copy.path("out").join(uncommitted[0].file_name().unwrap());
    std::fs::write(&cut, &std::fs::read(&cut).unwrap()[..1]).unwrap();
    for (job, out) in [(copy.path("job.toml"), copy.path("out")), (job, dir.path("out"))] {
        let run = Command::new(weir_binary()).args(["run", job.to_str().unwrap()]).current_dir("/").output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        assert_exact_counts(&committed(&out), 60000, 600);
    }
}

/// Waits (at most 30 s) until `dir` holds `n` complete checkpoints.
fn wait_for_complete_checkpoints(dir: &Path, n: usize) {
    let started = Instant::now();
    while complete_checkpoints(dir).len() < n {
        assert!(started.elapsed() < Duration::from_secs(30), "no {n} checkpoints in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn checkpoint_id(dir: &Path) -> u64 {
    dir.file_name().unwrap().to_str().unwrap().trim_start_matches("chk-").parse().unwrap()
}

/// The manifest of checkpoint `dir`, as JSON (after its checksum line).
fn manifest_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("_MANIFEST")).unwrap();
    serde_json::from_str(text.split_once('\n').unwrap().1).unwrap()
}

/// The in-memory state file that checkpoint `newest` wrote itself: one of
/// its whole snapshot or change files that `previous` does not refer to.
fn own_state_file(previous: &Path, newest: &Path) -> PathBuf {
    let files = |dir: &Path| -> Vec<String> {
        let manifest = manifest_json(dir);
        let keyed = manifest["tasks"].as_array().unwrap().iter().map(|t| t["keyed"].clone()).collect::<Vec<_>>();
        let refs = keyed.iter().flat_map(|k| std::iter::once(k["entries"].clone()).chain(k["changes"].as_array().cloned().unwrap_or_default()));
        refs.filter_map(|f| f["path"].as_str().map(str::to_owned)).collect()
    };
    let older = files(previous);
    let own = files(newest).into_iter().find(|f| !older.contains(f)).expect("the newest checkpoint wrote a state file");
    newest.parent().unwrap().join(own)
}

/// The first file of checkpoint `dir` whose name ends with `suffix`.
fn file_ending(dir: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("no *{suffix} in {}", dir.display()))
}

fn recovers_from_the_previous_checkpoint(corrupt: impl Fn(&Path, &Path), what: &str) {
    recovers_from_the_previous_checkpoint_with("", corrupt, what);
}

/// [`recovers_from_the_previous_checkpoint`], with `sink_setting` on the
/// `files` sink.
fn recovers_from_the_previous_checkpoint_with(sink_setting: &str, corrupt: impl Fn(&Path, &Path), what: &str) {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    with_sink_setting(&job, sink_setting);
    kill_after_checkpoints(&job, &dir.path("checkpoints"), 2);
    let checkpoints = complete_checkpoints(&dir.path("checkpoints"));
    let (previous, newest) = (&checkpoints[checkpoints.len() - 2], &checkpoints[checkpoints.len() - 1]);
    corrupt(previous, newest);
    let listing = common::weir(&["checkpoints", dir.path("checkpoints").to_str().unwrap()]);
    listing.success();
    let line = |id: u64| {
        listing.stdout().lines().find(|l| l.trim_start().starts_with(&format!("{id} "))).map(str::to_owned).unwrap_or_default()
    };
    assert!(line(checkpoint_id(newest)).contains("CORRUPT"), "{what}: listed as corrupt: {}", listing.stdout());
    assert!(line(checkpoint_id(previous)).contains(" ok "), "{what}: the previous is fine: {}", listing.stdout());
    let run = run_job(&job, &[]);
    run.success();
    let stderr = run.stderr();
    assert!(stderr.contains("skipping a corrupt checkpoint"), "{what}: {stderr}");
    assert!(stderr.contains(&format!("checkpoint={}", checkpoint_id(newest))), "{what}: names the checkpoint: {stderr}");
    assert!(
        stderr.contains(&format!("resumed from checkpoint {}", checkpoint_id(previous))),
        "{what}: uses the previous one: {stderr}"
    );
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// Flips a byte in the middle of a state file of `newest`'s own.
fn flip_a_byte_of_the_newest(previous: &Path, newest: &Path) {
    let file = own_state_file(previous, newest);
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&file, bytes).unwrap();
}

#[test]
fn a_checkpoint_with_a_flipped_byte_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint(flip_a_byte_of_the_newest, "flipped byte");
}

/// With parts rolled across checkpoints, the previous checkpoint's part
/// may have been committed by the newest (corrupt) one since: the restore
/// takes the previous one's share of it.
#[test]
fn a_checkpoint_with_a_flipped_byte_is_skipped_for_the_previous_one_with_rolling_parts() {
    recovers_from_the_previous_checkpoint_with("roll_interval_ms = 300", flip_a_byte_of_the_newest, "flipped byte, rolling parts");
}

#[test]
fn a_truncated_checkpoint_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint(
        |_, newest| {
            let file = file_ending(newest, "_MANIFEST");
            let bytes = std::fs::read(&file).unwrap();
            std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
        },
        "truncated manifest",
    );
}

/// Where the first output part with lines that checkpoint `dir` commits
/// is written (pending) and goes (committed).
fn a_part_with_lines(dir: &Path) -> (PathBuf, PathBuf) {
    let manifest = manifest_json(dir);
    let commits = manifest["tasks"].as_array().unwrap().iter().flat_map(|t| t["commits"].as_array().into_iter().flatten());
    let commit = commits.filter(|c| c["size"].as_u64() > Some(1)).next().expect("a part with lines");
    (PathBuf::from(commit["from"].as_str().unwrap()), PathBuf::from(commit["to"].as_str().unwrap()))
}

/// An output part the newest checkpoint has yet to commit, cut short (the
/// job killed before the rename, the file damaged): that checkpoint is
/// not resumed, and its output is computed again from the previous one.
#[test]
fn a_checkpoint_whose_pending_output_is_cut_short_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint(
        |_, newest| {
            let (from, to) = a_part_with_lines(newest);
            let (from, to) = (from.as_path(), to.as_path());
            if to.exists() {
                std::fs::rename(to, from).unwrap();
            }
            let bytes = std::fs::read(from).unwrap();
            std::fs::write(from, &bytes[..bytes.len() / 2]).unwrap();
        },
        "pending part cut short",
    );
}

/// An output part the newest checkpoint committed, cut short since (a
/// disk that lost its end, a hand that edited it): that checkpoint is not
/// resumed either — its output is computed again from the previous one.
/// Before, only a part still pending was checked, and the resume kept the
/// damaged part, its lines lost.
#[test]
fn a_checkpoint_whose_committed_output_is_cut_short_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint(
        |_, newest| {
            let (from, to) = a_part_with_lines(newest);
            let (from, to) = (from.as_path(), to.as_path());
            if !to.exists() {
                std::fs::rename(from, to).unwrap(); // As its commit would have.
            }
            let bytes = std::fs::read(to).unwrap();
            std::fs::write(to, &bytes[..bytes.len() / 2]).unwrap();
        },
        "committed part cut short",
    );
}

/// A part in progress changed within the newest checkpoint's share (its
/// length kept): that checkpoint is damaged and skipped for the previous
/// one, whose shorter share is intact, and the output is exact.
#[test]
fn a_checkpoint_whose_part_in_progress_was_changed_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint_with(
        "roll_interval_ms = 100000",
        |_, newest| {
            let manifest = manifest_json(newest);
            let commits = manifest["tasks"].as_array().unwrap().iter().flat_map(|t| t["commits"].as_array().into_iter().flatten());
            let part = commits.filter(|c| c["durable"].as_u64() > Some(1)).next().expect("a part in progress");
            let (path, durable) = (Path::new(part["in_progress"].as_str().unwrap()), part["durable"].as_u64().unwrap());
            let mut bytes = std::fs::read(path).unwrap();
            bytes[durable as usize - 2] ^= 0x01; // A digit of the share's last line.
            std::fs::write(path, bytes).unwrap();
        },
        "part in progress changed",
    );
}

/// A manifest that says it is another checkpoint than its directory's
/// (copied in from elsewhere) is not that checkpoint.
#[test]
fn a_checkpoint_whose_manifest_names_another_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint(
        |previous, newest| edit_manifest(newest, |manifest| manifest.checkpoint = checkpoint_id(previous)),
        "manifest of another number",
    );
}

/// A checkpoint copied in from another checkpoint directory (another run
/// of a job of the same name) is not this job's: skipped.
#[test]
fn a_checkpoint_of_another_directory_is_skipped_for_the_previous_one() {
    recovers_from_the_previous_checkpoint(
        |_, newest| {
            edit_manifest(newest, |manifest| {
                assert!(manifest.lineage.is_some(), "a manifest records its directory's lineage");
                manifest.lineage = Some("0123456789abcdef0123456789abcdef".into());
            })
        },
        "manifest of another directory",
    );
}

/// Rewrites checkpoint `dir`'s manifest as `edit` changes it, with a
/// checksum that matches (a hand edit, not damage).
fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut weir::checkpoint::Manifest)) {
    let path = dir.join("_MANIFEST");
    let mut manifest = weir::checkpoint::Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    edit(&mut manifest);
    std::fs::write(&path, manifest.encode()).unwrap();
}

/// A checkpoint a newer Weir wrote is neither read nor passed over for an
/// older one (which would undo the output it committed): the run is
/// refused, saying which Weir to use, and the output is left as it was.
#[test]
fn a_checkpoint_of_a_newer_weir_is_refused_not_passed_over() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    kill_after_checkpoints(&job, &dir.path("checkpoints"), 2);
    let newest = complete_checkpoints(&dir.path("checkpoints")).pop().unwrap();
    let manifest = newest.join("_MANIFEST");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let header = format!("weir-checkpoint {} ", weir::checkpoint::MANIFEST_FORMAT);
    assert!(text.starts_with(&header), "{text}");
    std::fs::write(&manifest, text.replacen(&header, "weir-checkpoint 99 ", 1)).unwrap();
    let before = committed(&dir.path("out"));
    let error = run_job(&job, &[]).failure();
    let expected = format!("checkpoint {} was written by a newer Weir (checkpoint format 99", checkpoint_id(&newest));
    assert!(error.contains(&expected) && error.contains("run the job with that Weir"), "{error}");
    assert_eq!(committed(&dir.path("out")), before, "the committed output is untouched");
    let listing = common::weir(&["checkpoints", dir.path("checkpoints").to_str().unwrap()]);
    assert!(listing.stdout().contains("written by a newer Weir (format version 99"), "{}", listing.stdout());
    assert!(listing.failure().contains("resumes this directory only with that Weir"), "fails as `weir run` does");
}

/// With every checkpoint corrupt, or with none left, starting over would
/// replace committed output: the run is refused, and the output is left as
/// it was.
#[test]
fn a_directory_of_only_corrupt_checkpoints_is_refused_and_its_output_kept() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    kill_after_checkpoints(&job, &dir.path("checkpoints"), 2);
    for checkpoint in complete_checkpoints(&dir.path("checkpoints")) {
        let manifest = checkpoint.join("_MANIFEST");
        let bytes = std::fs::read(&manifest).unwrap();
        std::fs::write(&manifest, &bytes[..bytes.len() / 2]).unwrap();
    }
    let before = committed(&dir.path("out"));
    assert!(!before.is_empty(), "the killed run had committed output");
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("every checkpoint there is corrupt"), "{error}");
    assert!(error.contains("move the directory and the sinks' output away to start afresh"), "{error}");
    assert_eq!(committed(&dir.path("out")), before, "the committed output is untouched");

    // `weir checkpoints` lists them as corrupt, an unfinished one as
    // incomplete, and fails: there is nothing to resume from.
    let checkpoints = dir.path("checkpoints");
    std::fs::create_dir(checkpoints.join("chk-00000999")).unwrap();
    let listing = common::weir(&["checkpoints", checkpoints.to_str().unwrap()]);
    let error = listing.failure();
    assert!(error.contains("verifies: the job has none to resume from"), "{error}");
    let stdout = listing.stdout();
    assert!(stdout.lines().filter(|l| l.contains("CORRUPT")).count() >= 2, "{stdout}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("999  incomplete")), "{stdout}");
    let one = checkpoints.join("chk-00000999");
    let error = common::weir(&["checkpoints", one.to_str().unwrap()]).failure();
    assert!(error.contains(&format!("is one checkpoint; give the directory that holds it: `weir checkpoints {}`", checkpoints.display())), "{error}");

    // With the manifests gone too there is nothing that looks like a
    // checkpoint, and the run would start from the beginning: the sink's
    // committed parts are kept, and the run refused, until the user moves
    // them away — then it starts afresh, to exact counts.
    for checkpoint in std::fs::read_dir(&checkpoints).unwrap() {
        let _ = std::fs::remove_file(checkpoint.unwrap().path().join("_MANIFEST"));
    }
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("holds the committed output of an earlier run"), "{error}");
    assert!(error.contains("to start afresh"), "{error}");
    assert_eq!(committed(&dir.path("out")), before, "the committed output is untouched");
    std::fs::rename(dir.path("out"), dir.path("out-before")).unwrap();
    run_job(&job, &[]).success();
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// A checkpoint restores by key group: a job resumed from one with other
/// key groups, a renamed uid or under another name would hand keys to
/// subtasks that do not own them, and counts would
/// start again or repeat. Each is refused, naming the change and the way
/// to make it; the committed output stays as it was, and the job then
/// resumes exactly — with its source at another parallelism, whose splits
/// are dealt out again.
#[test]
fn resuming_a_changed_job_from_a_checkpoint_is_refused() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    kill_after_checkpoints(&job, &dir.path("checkpoints"), 2);
    let before = committed(&dir.path("out"));
    let original = std::fs::read_to_string(&job).unwrap();
    let edited = |edits: &[(&str, &str)]| {
        let text = edits.iter().fold(original.clone(), |text, (from, to)| {
            assert!(text.contains(from), "{from}");
            text.replacen(from, to, 1)
        });
        std::fs::write(&job, text).unwrap();
    };
    edited(&[("uid = \"count\"", "uid = \"counter\""), ("input = \"count\"", "input = \"counter\"")]);
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("cannot resume job `chaos-count` from checkpoint"), "{error}");
    assert!(error.contains("state for `count`, which the job no longer has"), "{error}");
    edited(&[("parallelism = 2", "parallelism = 2\nmax_parallelism = 64")]);
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("max_parallelism = 128 and the job now has 64"), "{error}");
    edited(&[("name = \"chaos-count\"", "name = \"other\"")]);
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("it is job `chaos-count`'s, not `other`'s"), "{error}");
    // Another plugin that cannot read the counts is refused before it
    // starts (not at the first event of each key), as from a savepoint.
    let word_count = toml_path(&plugin("word-count"));
    edited(&[(word_count.as_str(), toml_path(&plugin("fraud-detector")).as_str())]);
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `count` resumes with plugin") && error.contains("cannot read it"), "{error}");
    assert!(error.contains("declares no value state `count`"), "{error}");
    assert_eq!(committed(&dir.path("out")), before, "the committed output is untouched");
    // Only the source's parallelism changed: its splits are dealt out
    // again. And the plugin is another build of word-count (a custom
    // section added), which reads the counts: it resumes with them.
    let rebuilt = dir.path("word_count_rebuilt.wasm");
    let mut bytes = std::fs::read(plugin("word-count")).unwrap();
    bytes.extend_from_slice(&[0, 8, 7, b'r', b'e', b'b', b'u', b'i', b'l', b't']);
    std::fs::write(&rebuilt, bytes).unwrap();
    let text = original.replacen("type = \"generator\"", "type = \"generator\"\nparallelism = 3", 1);
    std::fs::write(&job, text.replace(&word_count, &toml_path(&rebuilt))).unwrap();
    assert!(run_job(&job, &[]).success().stderr().contains("resumed from checkpoint"));
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// A job killed at one parallelism resumes from its checkpoint at another,
/// as after a crash a user gives it more subtasks or fewer (`weir run JOB
/// -p N`, or the job file's `parallelism`): the checkpoint's state is
/// redistributed by key group, and the counts come out exact through a
/// kill at each parallelism — 2, then 3, then 1 to the end — with either
/// backend. The redistributed copy is gone afterwards.
#[test]
fn a_checkpoint_resumes_at_another_parallelism_with_every_count_exact() {
    for backend in ["memory", "rocksdb"] {
        let dir = JobDir::new();
        let job = count_job(&dir, backend, &plugin("word-count"), "", "");
        let checkpoints = dir.path("checkpoints");
        kill_after_checkpoints(&job, &checkpoints, 2);
        let at_parallelism = |p: u32| {
            let text = std::fs::read_to_string(&job).unwrap();
            let (before, after) = text.split_once("parallelism = ").unwrap();
            let rest = after.split_once('\n').unwrap().1;
            std::fs::write(&job, format!("{before}parallelism = {p}\n{rest}")).unwrap();
        };
        at_parallelism(3);
        let resumed = checkpoint_id(complete_checkpoints(&checkpoints).last().unwrap());
        kill_after_checkpoint(&job, &checkpoints, resumed + 2);
        let latest = complete_checkpoints(&checkpoints).pop().unwrap();
        let subtasks = manifest_json(&latest)["tasks"].as_array().unwrap().iter().filter(|t| t["node"] == "count").count();
        assert_eq!(subtasks, 3, "{backend}: the second run checkpointed at parallelism 3");
        at_parallelism(1);
        let run = run_job(&job, &[]);
        assert!(run.success().stderr().contains("resumed from checkpoint"), "{}", run.stderr());
        assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
        assert!(!checkpoints.join(".rescale").exists() && !checkpoints.join(".rescale-work").exists(), "{backend}");
    }
}

/// A run from a savepoint owns only the checkpoints it takes: restarted
/// after a failure before its first one, it restores the savepoint again,
/// whatever an earlier run left in the directory (here, all corrupt).
#[test]
fn a_run_from_a_savepoint_failing_before_its_first_checkpoint_restores_the_savepoint_again() {
    let dir = JobDir::new();
    let host = Host::start(&count_job(&dir, "memory", &plugin("word-count"), "", ""), &[]);
    host.wait_for_records("chaos-count", 10_000);
    let savepoint = dir.path("savepoint");
    host.stop_with_savepoint("chaos-count", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    let earlier = complete_checkpoints(&dir.path("checkpoints"));
    assert!(!earlier.is_empty(), "the first run left checkpoints");
    for checkpoint in earlier {
        std::fs::write(checkpoint.join("_MANIFEST"), b"{").unwrap();
    }
    // Traps after 100 events, long before the run's first checkpoint.
    let restart = "[restart]\nstrategy = \"fixed-delay\"\nmax_attempts = 3\ndelay_ms = 100";
    let job = count_job(&dir, "memory", &plugin("faulty"), "mode = \"trap-once\", after = 100", restart);
    let run = run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]);
    run.success();
    assert!(run.stderr().contains("1 restart(s) after failures"), "{}", run.stderr());
    assert!(!run.stderr().contains("skipping a corrupt checkpoint"), "the earlier run's are not looked at: {}", run.stderr());
    assert_exact_counts(&committed(&dir.path("out")), 60000, 600);
}

/// The most change files any task of checkpoint `dir` restores on top of
/// its base snapshot (memory backend).
fn chained_change_files(dir: &Path) -> usize {
    let manifest = manifest_json(dir);
    let tasks = manifest["tasks"].as_array().unwrap();
    tasks.iter().map(|t| t["keyed"]["changes"].as_array().map_or(0, Vec::len)).max().unwrap_or(0)
}

/// A memory-backend checkpoint that is a base snapshot plus several change
/// files restores as the sum of them all: a job killed right after one
/// resumes from it with every count exact. (Each checkpoint touches a fifth
/// of the 6000 keys, so the chain grows for several checkpoints.)
#[test]
fn sigkill_after_a_chain_of_change_files_restores_base_and_changes_exactly() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    let job_file = std::fs::read_to_string(&job).unwrap().replace("keys = 600", "keys = 6000");
    std::fs::write(&job, job_file).unwrap();
    let checkpoints = dir.path("checkpoints");
    let mut child = spawn_quiet(&job);
    let started = Instant::now();
    loop {
        if complete_checkpoints(&checkpoints).pop().is_some_and(|newest| chained_change_files(&newest) >= 2) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint with two change files was taken");
        assert!(child.try_wait().unwrap().is_none(), "the job ended before a chain of change files");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // (Should one more checkpoint have completed before the kill landed,
    // its chain is one file longer: the chain is cut at five or more.)
    let newest = complete_checkpoints(&checkpoints).pop().unwrap();
    assert!(chained_change_files(&newest) >= 2, "checkpoint {} is a chain", checkpoint_id(&newest));
    let run = run_job(&job, &[]);
    run.success();
    let stderr = run.stderr();
    assert!(stderr.contains(&format!("resumed from checkpoint {}", checkpoint_id(&newest))), "{stderr}");
    assert_exact_counts(&committed(&dir.path("out")), 60000, 6000);
}

#[test]
fn a_multi_input_operator_aligns_checkpoints_and_restores() {
    let dir = JobDir::new();
    let header = "checkpoint_dir = \"checkpoints\"\ncheckpoint_interval_ms = 100";
    let job = amplifier_job(&dir, header, 8000, 2000, "type = \"files\"\npath = \"out\"");
    // Kill once the control stream's factors are in a checkpoint, then
    // twice more at other moments; each restart restores them.
    kill_after_checkpoints(&job, &dir.path("checkpoints"), 3);
    let stderr = run_with_kills(&job, 2);
    assert!(stderr.contains("resumed from checkpoint"), "{stderr}");
    let manifests: Vec<String> = complete_checkpoints(&dir.path("checkpoints"))
        .iter()
        .map(|d| std::fs::read_to_string(d.join("_MANIFEST")).unwrap())
        .collect();
    assert!(manifests.iter().any(|m| m.contains("\"alignment_ms\"")), "alignment is recorded");
    let mut out: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let parts = std::fs::read_dir(dir.path("out")).unwrap().map(|e| e.unwrap()).filter(|e| e.file_name().to_string_lossy().starts_with("part-"));
    for entry in parts {
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let (key, value) = line.split_once('\t').unwrap();
            out.entry(key.parse().unwrap()).or_default().push(value.parse().unwrap());
        }
    }
    out.values_mut().for_each(|v| v.sort_by(f64::total_cmp));
    assert_eq!(out.values().map(Vec::len).sum::<usize>(), 8000, "one output per reading, exactly once");
    let readings = |key: u64, factor: f64| (0..8).map(|i| (key + 1000 * i) as f64 * factor).collect::<Vec<_>>();
    assert_eq!(out[&900], readings(900, 10.0), "the factor set before the kills survives them");
    assert_eq!(out[&901], readings(901, 0.5));
    assert_eq!(out[&5], readings(5, 1.0));
}

/// Peak memory printed by `weir run` ("peak memory: N MiB").
fn peak_mib(stderr: &str) -> f64 {
    let line = stderr.lines().find(|l| l.contains("peak memory")).unwrap_or_else(|| panic!("no peak memory in {stderr}"));
    line.split_whitespace().rev().nth(1).unwrap().parse().unwrap()
}

#[test]
fn rocksdb_holds_millions_of_keys_in_a_small_memory_budget_with_incremental_checkpoints() {
    let dir = JobDir::new();
    let keys = 3_000_000;
    let settings = "state_backend = \"rocksdb\"\ncheckpoint_dir = \"checkpoints\"\ncheckpoint_interval_ms = 250\ncheckpoints_retained = 10";
    // The operator's instance holds up to about half its memory limit of
    // counts (the Rust SDK): a small limit leaves the keys to RocksDB.
    let job = discarded_count_job(&dir, keys, keys, settings, "", "memory_limit_mb = 96");
    let run = run_job(&job, &[]);
    run.success();
    let stderr = run.stderr();
    let peak = peak_mib(&stderr);
    // The memory backend needs ~360 MiB for these keys; RocksDB ~110 MiB.
    assert!(peak < 200.0, "peak memory {peak} MiB for {keys} keys: {stderr}");
    let manifests: Vec<serde_json::Value> = complete_checkpoints(&dir.path("checkpoints"))
        .iter()
        .map(|d| manifest_json(d))
        .filter(|m: &serde_json::Value| m["finished"] == false)
        .collect();
    assert!(manifests.len() >= 3, "at least three retained checkpoints with state: {stderr}");
    let shared = |m: &serde_json::Value| -> Vec<String> {
        m["tasks"].as_array().unwrap().iter().filter_map(|t| t["keyed"]["shared"].as_array()).flatten().map(|f| f["path"].as_str().unwrap().to_owned()).collect()
    };
    let stat = |m: &serde_json::Value, name: &str| m["stats"][name].as_u64().unwrap();
    // A compaction rewrites the files it merges (every key group is in
    // every file here), so a pair of checkpoints with one between them may
    // share nothing; which pair that is depends on timing. What must hold:
    // checkpoints reuse the files no compaction touched, and over the run
    // they write less than they hold.
    let mut pairs_sharing = 0;
    for pair in manifests.windows(2) {
        let (older, newer) = (&pair[0], &pair[1]);
        let reused = shared(older).iter().filter(|f| shared(newer).contains(f)).count();
        if reused > 0 {
            pairs_sharing += 1;
            let (size, written) = (stat(newer, "size_bytes"), stat(newer, "written_bytes"));
            assert!(written < size, "a checkpoint that reuses {reused} files writes less than its size ({written} of {size} bytes)");
        }
    }
    assert!(pairs_sharing > 0, "no checkpoint references the one before it's SST files: {stderr}");
    let (size, written): (u64, u64) = (manifests.iter().map(|m| stat(m, "size_bytes")).sum(), manifests.iter().map(|m| stat(m, "written_bytes")).sum());
    assert!(written < size, "the checkpoints wrote {written} bytes in all for {size} bytes of checkpoints: not incremental");
    for file in manifests.iter().flat_map(shared) {
        assert!(dir.path("checkpoints").join(&file).exists(), "{file} is kept while referenced");
    }
}

/// Another job started afresh in the directory of a job whose rolling part
/// is in progress (that job killed) is refused and deletes nothing: the
/// part is the output of the first job's checkpoints until it resumes,
/// and then the first job's counts are exact.
#[test]
fn another_job_is_refused_the_directory_of_a_rolling_part_in_progress() {
    let dir = JobDir::new();
    let job = count_job(&dir, "memory", &plugin("word-count"), "", "");
    with_sink_setting(&job, "roll_interval_ms = 3600000");
    kill_after_checkpoints(&job, &dir.path("checkpoints"), 3);
    let out = dir.path("out");
    let in_progress = || {
        let mut names = names_starting(&out, ".part-");
        names.sort();
        names
    };
    let before = in_progress();
    assert!(!before.is_empty() && names_starting(&out, "part-").is_empty(), "{:?}", names_starting(&out, ""));
    let text = std::fs::read_to_string(&job).unwrap();
    let other = text.replace("name = \"chaos-count\"", "name = \"other\"").replace("\"checkpoints\"", "\"other-checkpoints\"");
    let error = run_job(&dir.write("other.toml", &other), &[]).failure();
    let owner = format!("by the job with the checkpoint directory {}", dir.path("checkpoints").display());
    assert!(error.contains("holds parts in progress of another job") && error.contains(&owner), "{error}");
    assert_eq!(in_progress(), before, "it deleted nothing");
    run_job(&job, &[]).success();
    assert_exact_counts(&committed(&out), 60000, 600);
}
