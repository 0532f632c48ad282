//! Kafka end to end against a real Kafka-protocol broker (tansu): a keyed
//! count from an input topic to an output topic through the transactional
//! sink — killed with SIGKILL and restarted, restored from a savepoint at
//! another parallelism, cut off from its broker for a while — and the clear
//! errors of a bad connection or table.
//!
//! Exactly-once is established without trusting the broker's transaction
//! isolation (tansu shows records of aborted transactions to every reader):
//! every output record names the checkpoint whose transaction wrote it and
//! the commit attempt; per (writer, checkpoint) only the last attempt is
//! kept (see `common::kafka::committed_records`), and what remains must be
//! exactly the counts 1..=n of every key — nothing lost, nothing twice.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::kafka::{Broker, OutputRecord, committed_records};
use common::windows::{Sums, WINDOW_SINKS, run_windows, window_sums_of, windows};
use common::{Host, JobDir, plugin, run_job, toml_path, wait_for_a_checkpoint, weir, weir_binary};
use weir::connectors::PartitionBacklog;
use weir::control::NodeInfo;
use weir::control::client::ApiClient;
use weir::job::{self, Overrides};
use weir::{PluginEngine, dataflow};

const KEYS: u64 = 240;

/// The tests run one at a time: each starts a broker and jobs, and two at
/// once on a small machine starve each other's brokers of CPU.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `count` events `first..first+count`: key `i mod KEYS`, value `i`.
fn events(first: u64, count: u64) -> impl Iterator<Item = (String, String)> {
    (first..first + count).map(|i| ((i % KEYS).to_string(), i.to_string()))
}

/// A keyed count from topic `in` to topic `out`. `source` and `sink` add
/// lines to those tables.
fn count_job(dir: &JobDir, name: &str, broker: &Broker, parallelism: u32, source: &str, sink: &str) -> PathBuf {
    count_job_with(dir, name, broker, parallelism, "", source, sink)
}

/// [`count_job`] with job-level `settings`.
fn count_job_with(dir: &JobDir, name: &str, broker: &Broker, parallelism: u32, settings: &str, source: &str, sink: &str) -> PathBuf {
    dir.write(
        &format!("{name}.toml"),
        &format!(
            r#"
name = "kafka-count"
parallelism = {parallelism}
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 150
{settings}

[[source]]
name = "in"
type = "kafka"
brokers = "{brokers}"
topics = ["in"]
{source}

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["in"]
key_by = true

[[sink]]
name = "out"
type = "kafka"
input = "count"
brokers = "{brokers}"
topic = "out"
{sink}
"#,
            brokers = broker.address(),
            plugin = toml_path(&plugin("word-count"))
        ),
    )
}

/// The committed counts of topic `out`, by key, sorted.
fn committed_counts(broker: &Broker) -> BTreeMap<u64, Vec<u64>> {
    let (records, aborted) = committed_records(broker.read_all("out"));
    eprintln!("output: {} committed records; {aborted} of aborted attempts dropped", records.len());
    let mut epochs: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for record in &records {
        let writer = record.attempt.as_deref().and_then(|a| a.rsplit_once('/')).map(|(w, _)| w.to_owned());
        *epochs.entry((writer.unwrap_or_default(), record.checkpoint.unwrap_or_default())).or_default() += 1;
    }
    eprintln!("records per (writer, checkpoint): {epochs:?}");
    counts_by_key(records)
}

/// Output records (key, count) as the counts of each key, sorted.
fn counts_by_key(records: Vec<OutputRecord>) -> BTreeMap<u64, Vec<u64>> {
    let mut counts: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for record in records {
        counts.entry(record.key.parse().unwrap()).or_default().push(record.value.parse().unwrap());
    }
    counts.values_mut().for_each(|v| v.sort_unstable());
    counts
}

/// Waits up to `patience` until the source's consumer group has `offsets`
/// committed in all (those of completed checkpoints, committed
/// asynchronously).
fn wait_for_group_offsets(broker: &Broker, host: &Host, offsets: i64, patience: Duration) {
    let deadline = std::time::Instant::now() + patience;
    while broker.committed_offsets("weir-in", "in") < offsets {
        assert!(std::time::Instant::now() < deadline, "offsets committed to the group: {}", host.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every key counted 1, 2, … up to its number of events, each once.
fn assert_exact_counts(counts: &BTreeMap<u64, Vec<u64>>, events: u64) {
    assert_eq!(counts.len() as u64, KEYS, "every key has output");
    let expected: Vec<u64> = (1..=events / KEYS).collect();
    let wrong: Vec<&u64> = counts.iter().filter(|(_, values)| **values != expected).map(|(key, _)| key).collect();
    eprintln!("{} keys with wrong counts: {wrong:?}", wrong.len());
    for (key, values) in counts {
        assert_eq!(values, &expected, "key {key}: each count exactly once (no loss, no duplicate)");
    }
}

fn broker_with_input(events_in: u64) -> Broker {
    let broker = Broker::start();
    broker.create_topic("in", 3);
    broker.create_topic("out", 3);
    broker.produce("in", events(0, events_in));
    broker
}

/// SIGKILLs `job` at `kills` moments 0.4–1.2 s after each start, then lets
/// it run to the end.
fn run_with_kills(job: &Path, kills: u64) -> String {
    run_with_kills_at(job, &vec![None; kills as usize + 1], false)
}

/// [`run_with_kills`], each run at the parallelism `runs` gives it (`None`:
/// the job file's), the last to the end; with `after_a_checkpoint`, the
/// first not before it has completed a checkpoint, so that the last resumes
/// from one however slowly the broker lets the runs start.
fn run_with_kills_at(job: &Path, runs: &[Option<u32>], after_a_checkpoint: bool) -> String {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    eprintln!("kill schedule seed: {seed}");
    let parallelism = |p: Option<u32>| p.map(|p| vec!["-p".to_owned(), p.to_string()]).unwrap_or_default();
    let (last, killed) = runs.split_last().expect("at least the last run");
    for (kill, &p) in (0..).zip(killed) {
        let mut child = Command::new(weir_binary())
            .args(["run", job.to_str().unwrap()])
            .args(parallelism(p))
            .env("WEIR_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if kill == 0 && after_a_checkpoint {
            wait_for_a_checkpoint(&job.parent().unwrap().join("checkpoints"), &mut child);
        }
        let wait = 400 + (seed.wrapping_mul(kill + 7) >> 3) % 800;
        std::thread::sleep(Duration::from_millis(wait));
        assert!(child.try_wait().unwrap().is_none(), "the job ended before kill {}", kill + 1);
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let last = parallelism(*last);
    let run = run_job(job, &last.iter().map(String::as_str).collect::<Vec<_>>());
    run.success();
    run.stderr()
}

#[test]
fn sigkill_and_restart_commit_every_count_exactly_once_to_the_output_topic() {
    let _serial = one_at_a_time();
    // 5 s of input at 6 000/s: more than 4 runs of at most 1.2 s read.
    let broker = broker_with_input(30_000);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 2, "bounded = true\nrate = 6000", "");
    let stderr = run_with_kills_at(&job, &[None; 5], true);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    assert_exact_counts(&committed_counts(&broker), 30_000);
}

/// Killed at one parallelism and resumed from its checkpoint at another —
/// 2, 3, 1, then 4 to the end, with 3 partitions — the job commits every
/// count once: sources' partitions dealt out again, state redistributed by
/// key group, and the sink subtasks that are gone cleaned up after.
#[test]
fn killed_and_resumed_at_other_parallelisms_every_count_is_committed_once() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(30_000);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 2, "bounded = true\nrate = 6000", "");
    let stderr = run_with_kills_at(&job, &[None, Some(3), Some(1), Some(4)], true);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    assert_exact_counts(&committed_counts(&broker), 30_000);
}

#[test]
fn epochs_of_abandoned_checkpoints_are_committed_with_a_later_one() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(12_000);
    let dir = JobDir::new();
    // Checkpoints time out after 1 ms: most are abandoned after the sinks
    // sealed their epochs' logs, which must then go with a later checkpoint.
    let job = count_job_with(&dir, "job", &broker, 2, "checkpoint_timeout_ms = 1\ntolerable_failed_checkpoints = 1000000", "bounded = true\nrate = 6000", "");
    let stderr = run_with_kills(&job, 1);
    assert!(stderr.contains("checkpoint timed out; abandoning it"), "checkpoints were abandoned: {stderr}");
    assert_exact_counts(&committed_counts(&broker), 12_000);
}

#[test]
fn a_savepoint_resumes_at_its_offsets_at_another_parallelism() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(12_000);
    let dir = JobDir::new();
    // Unbounded, 2 subtasks over 3 partitions; stopped with a savepoint.
    let job = count_job(&dir, "first", &broker, 2, "", "");
    let host = Host::start(&job, &[]);
    host.wait_for_records("kafka-count", 12_000);
    // Completed checkpoints' offsets go to the consumer group (asynchronously,
    // for monitoring only).
    wait_for_group_offsets(&broker, &host, 12_000, Duration::from_secs(20));
    let savepoint = dir.path("savepoint");
    host.stop_with_savepoint("kafka-count", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    eprintln!("first run's log:\n{stderr}");

    // More input while it is stopped; restored with 4 subtasks (one has
    // no partition) and read to the end.
    broker.produce("in", events(12_000, 12_000));
    let job = count_job(&dir, "second", &broker, 4, "bounded = true", "");
    let second = run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]);
    second.success();
    eprintln!("second run's log:\n{}", second.stderr());
    assert_exact_counts(&committed_counts(&broker), 24_000);
}

/// Stopped with a savepoint while the brokers are away, a job cannot
/// commit its last epochs: the reply says so, and a restore from the
/// savepoint with the checkpoint directory in place commits them — every
/// count once (they were never committed).
#[test]
fn epochs_left_uncommitted_by_a_stop_during_an_outage_are_committed_by_the_restore() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(12_000);
    let dir = JobDir::new();
    let job = count_job(&dir, "first", &broker, 2, "rate = 3000", "timeout_ms = 5000");
    let host = Host::start(&job, &[]);
    host.wait_for_records("kafka-count", 3_000);
    broker.proxy.down();
    let savepoint = dir.path("savepoint");
    let stop = host.weir(&["savepoint", "kafka-count", "--stop", "--dir", savepoint.to_str().unwrap()]);
    assert!(stop.success().stderr().contains("not committed yet"), "{}", stop.stderr());
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    broker.proxy.up();
    let job = count_job(&dir, "second", &broker, 3, "bounded = true", "");
    run_job(&job, &["--from-savepoint", savepoint.to_str().unwrap()]).success();
    assert_exact_counts(&committed_counts(&broker), 12_000);
}

/// `weir checkpoints` names a pending epoch whose write-ahead log is
/// damaged: its checkpoint still resumes, but those records can never be
/// committed, and the listing says so rather than "ok" alone.
#[test]
fn weir_checkpoints_names_a_pending_epoch_whose_log_is_damaged() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(12_000);
    let dir = JobDir::new();
    let host = Host::start(&count_job(&dir, "job", &broker, 1, "rate = 3000", "timeout_ms = 30000"), &[]);
    host.wait_for_records("kafka-count", 3_000);
    broker.proxy.down();
    // Checkpoints go on completing while their epochs wait for the brokers,
    // and `weir jobs` says the output is held back.
    std::thread::sleep(Duration::from_secs(2));
    let jobs = host.weir(&["jobs"]).success().stdout();
    assert!(jobs.contains("sink epochs not committed: see the log"), "{jobs}");
    drop(host); // SIGKILL
    let checkpoints = dir.path("checkpoints");
    let list = || common::weir(&["checkpoints", checkpoints.to_str().unwrap()]).success().stdout();
    assert!(!list().contains("can never be committed"), "{}", list());
    let logs: Vec<PathBuf> = std::fs::read_dir(checkpoints.join(weir::connectors::kafka::LOG_DIR))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "wal") && std::fs::metadata(path).is_ok_and(|m| m.len() > 64))
        .collect();
    // The oldest epoch waiting: a completed checkpoint's (a newer one's
    // checkpoint may not have completed before the kill).
    let epoch = |path: &PathBuf| path.file_stem().and_then(|s| s.to_str()?.rsplit_once('.')?.1.parse::<u64>().ok());
    let log = logs.iter().min_by_key(|path| epoch(path)).expect("an epoch waits in a write-ahead log");
    let mut bytes = std::fs::read(log).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(log, bytes).unwrap();
    let listing = list();
    let line = listing.lines().find(|line| line.contains("can never be committed")).unwrap_or_else(|| panic!("{listing}"));
    assert!(line.contains("kafka sink `out`") && line.contains(&log.display().to_string()) && line.contains("damaged"), "{line}");
}

/// A job resumed at offsets past the end of its partitions (the topic
/// recreated with fewer records, here on a fresh broker) says so: the
/// records it will not read are not skipped in silence.
#[test]
fn resuming_past_the_end_of_a_recreated_topic_says_so() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(6_000);
    let dir = JobDir::new();
    let host = Host::start(&count_job(&dir, "first", &broker, 1, "", ""), &[]);
    host.wait_for_records("kafka-count", 6_000);
    // Checkpoints every 150 ms: the newest has each partition's 2 000.
    std::thread::sleep(Duration::from_secs(1));
    drop(host); // SIGKILL
    let recreated = broker_with_input(300);
    let host = Host::start(&count_job(&dir, "second", &recreated, 1, "", ""), &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !host.stderr().contains("reading from past the end of the partition") {
        assert!(std::time::Instant::now() < deadline, "no word of the offsets past the end: {}", host.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_job_rides_out_a_broker_outage_without_losing_or_repeating_output() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(18_000);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 2, "bounded = true\nrate = 6000", "");
    let host = Host::start(&job, &[]);
    host.wait_for_records("kafka-count", 3_000);
    broker.proxy.down();
    std::thread::sleep(Duration::from_secs(4));
    broker.proxy.up();
    let (status, stderr) = host.wait();
    assert!(status.success(), "the job recovers: {stderr}");
    assert!(stderr.contains("kafka client error"), "the outage was noticed: {stderr}");
    assert_exact_counts(&committed_counts(&broker), 18_000);
}

/// Brokers away longer than `timeout_ms` fail the job; with restarts
/// allowed, each restart that cannot reach them is one of its attempts —
/// the strategy gives up after them all, not after the first.
#[test]
fn brokers_away_longer_than_the_timeout_fail_the_job_with_a_clear_error() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(2_400);
    for (restart, failure) in [
        ("strategy = \"none\"", "have been unreachable for"),
        ("strategy = \"fixed-delay\"\nmax_attempts = 2\ndelay_ms = 100", "gave up after 2 restart(s)"),
    ] {
        let dir = JobDir::new();
        let job = count_job(&dir, "job", &broker, 1, "timeout_ms = 2000", "timeout_ms = 2000");
        let text = std::fs::read_to_string(&job).unwrap();
        let text = text.replace("checkpoint_interval_ms = 150", &format!("checkpoint_interval_ms = 150\n[restart]\n{restart}"));
        std::fs::write(&job, text).unwrap();
        let host = Host::start(&job, &[]);
        host.wait_for_records("kafka-count", 2_400);
        broker.proxy.down();
        let (status, stderr) = host.wait();
        assert!(!status.success(), "the job fails: {stderr}");
        assert!(stderr.contains("kafka source `in`: the brokers at") && stderr.contains("have been unreachable for"), "{stderr}");
        let error = stderr.lines().skip_while(|line| !line.starts_with("error: ")).collect::<Vec<_>>().join("\n");
        assert!(error.contains(failure), "{restart}: {error}");
        broker.proxy.up();
    }
}

/// A broker that hangs — connections taken, nothing answered — causes no
/// connection errors, only requests that time out; it fails the job after
/// `timeout_ms` as brokers that are gone do.
#[test]
fn a_hung_broker_fails_the_job_after_the_timeout() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(2_400);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 1, "timeout_ms = 2000", "timeout_ms = 2000");
    let text = std::fs::read_to_string(&job).unwrap();
    let text = text.replace("checkpoint_interval_ms = 150", "checkpoint_interval_ms = 150\n[restart]\nstrategy = \"none\"");
    std::fs::write(&job, text).unwrap();
    let host = Host::start(&job, &[]);
    host.wait_for_records("kafka-count", 2_400);
    broker.proxy.freeze();
    let (status, stderr) = host.wait();
    broker.proxy.thaw();
    assert!(!status.success(), "the job fails: {stderr}");
    assert!(stderr.contains("kafka source `in`: the brokers at") && stderr.contains("have been unreachable for"), "{stderr}");
}

#[test]
fn a_fresh_start_by_timestamp_skips_older_records() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(2_400);
    std::thread::sleep(Duration::from_millis(200));
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    broker.produce("in", events(2_400, 2_400));
    let dir = JobDir::new();
    let source = format!("bounded = true\nstart = \"timestamp\"\nstart_timestamp_ms = {}", since_epoch.as_millis());
    let job = count_job(&dir, "job", &broker, 2, &source, "");
    run_job(&job, &[]).success();
    assert_exact_counts(&committed_counts(&broker), 2_400);
}

#[test]
fn a_fresh_start_at_latest_reads_only_what_comes_after() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(2_400);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 2, "start = \"latest\"", "");
    let host = Host::start(&job, &[]);
    // Its first checkpoint records the ends it started at, and commits
    // them to the group: then it is surely reading from there.
    wait_for_group_offsets(&broker, &host, 2_400, Duration::from_secs(30));
    broker.produce("in", events(2_400, 2_400));
    host.wait_for_records("kafka-count", 2_400);
    let savepoint = dir.path("savepoint");
    host.stop_with_savepoint("kafka-count", &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    assert_exact_counts(&committed_counts(&broker), 2_400);
}

#[test]
fn at_least_once_delivers_every_count() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(6_000);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 2, "bounded = true", "delivery = \"at-least-once\"");
    run_job(&job, &[]).success();
    let records = broker.read_all("out");
    assert!(records.iter().all(|r| r.checkpoint.is_none()), "no transactions, no checkpoint headers");
    assert_exact_counts(&counts_by_key(records), 6_000);
}

/// A job waiting for brokers it cannot reach is cancelled at once, by
/// `weir cancel` as by SIGTERM: before, both waited out `timeout_ms`, and
/// the job ended as failed.
#[test]
fn a_job_waiting_for_unreachable_brokers_is_cancelled_at_once() {
    let _serial = one_at_a_time();
    let dir = JobDir::new();
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let job = dir.write(
        "waiting.toml",
        &format!(
            "name = \"waiting\"\n\n[[source]]\nname = \"in\"\ntype = \"kafka\"\nbrokers = \"127.0.0.1:{nobody}\"\n\
             topics = [\"in\"]\ntimeout_ms = 60000\n\n[[sink]]\nname = \"out\"\ntype = \"stdout\"\ninput = \"in\"\n"
        ),
    );
    // (The host announces its API once the job runs; it serves it before.)
    let api = format!("127.0.0.1:{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port());
    let mut host = std::process::Command::new(weir_binary())
        .args(["run", job.to_str().unwrap(), "--api", &api])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let asked = Instant::now();
    let reply = weir(&["cancel", "waiting", "--api", &api]).success().stdout();
    assert!(reply.contains("job `waiting` cancelled"), "{reply}");
    let status = host.wait().unwrap();
    assert!(asked.elapsed() < Duration::from_secs(20), "not the 60 s timeout: {:?}", asked.elapsed());
    assert!(status.success(), "a cancelled job is no failure: {status:?}");
}

#[test]
fn an_unreachable_broker_or_a_missing_topic_fails_the_job_with_a_clear_error() {
    let _serial = one_at_a_time();
    let dir = JobDir::new();
    let write = |name: &str, brokers: &str, topic: &str| {
        dir.write(
            &format!("{name}.toml"),
            &format!(
                r#"
name = "{name}"
[restart]
strategy = "none"

[[source]]
name = "in"
type = "kafka"
brokers = "{brokers}"
topics = ["{topic}"]
timeout_ms = 2000

[[sink]]
name = "out"
type = "stdout"
input = "in"
"#
            ),
        )
    };
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let run = run_job(&write("unreachable", &format!("127.0.0.1:{nobody}"), "in"), &[]);
    let error = run.failure();
    assert!(error.contains("kafka connector `in`") && error.contains("cannot reach the brokers"), "{error}");
    // The wait is not silent: the client's errors are logged as they come,
    // well before the job gives up (timestamps of the log lines, seconds
    // of the day).
    let log = run.stderr();
    let at = |needle: &str| {
        let line = log.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in {log}"));
        let clock = line.get(11..26).unwrap_or_else(|| panic!("a timestamped line: {line}"));
        let parts: Vec<f64> = clock.split(':').map(|p| p.parse().unwrap()).collect();
        parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
    };
    assert!(at("job failed") - at("Connection refused") >= 0.5, "logged while waiting: {log}");

    // The exactly-once sink talks to the brokers only to commit a
    // checkpoint's transaction (and retries that); it checks them at start.
    let sink_job = dir.write(
        "unreachable-sink.toml",
        &format!(
            r#"
name = "unreachable-sink"
checkpoint_dir = "checkpoints"
[restart]
strategy = "none"

[[source]]
name = "in"
type = "generator"
rate = 100

[[sink]]
name = "out"
type = "kafka"
input = "in"
brokers = "127.0.0.1:{nobody}"
topic = "out"
timeout_ms = 2000
"#
        ),
    );
    let error = run_job(&sink_job, &[]).failure();
    assert!(error.contains("kafka connector `out`") && error.contains("cannot reach the brokers"), "{error}");

    let broker = Broker::start();
    let run = run_job(&write("missing", &broker.address(), "nope"), &[]);
    let error = run.failure();
    assert!(error.contains("topic `nope` does not exist"), "{error}");
}

#[test]
fn bad_credentials_fail_the_job_naming_the_properties_to_check() {
    let _serial = one_at_a_time();
    let broker = Broker::start_with_authentication();
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "intruder"
[restart]
strategy = "none"

[[source]]
name = "in"
type = "kafka"
brokers = "{}"
topics = ["in"]
timeout_ms = 3000
properties = {{ "security.protocol" = "SASL_PLAINTEXT", "sasl.mechanism" = "SCRAM-SHA-256", "sasl.username" = "nobody", "sasl.password" = "wrong" }}

[[sink]]
name = "out"
type = "stdout"
input = "in"
"#,
            broker.address()
        ),
    );
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("authentication failed: check the sasl.* and ssl.* entries of `properties`"), "{error}");
}

#[test]
fn kafka_tables_that_break_the_contract_are_refused_before_connecting() {
    let _serial = one_at_a_time();
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        r#"
name = "bad"
[[source]]
name = "in"
type = "kafka"
brokers = "127.0.0.1:1"
topics = ["in"]
properties = { "enable.auto.commit" = "true" }

[[sink]]
name = "out"
type = "stdout"
input = "in"
"#,
    );
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("kafka source `in`: property `enable.auto.commit` is managed by Weir"), "{error}");

    let job = dir.write(
        "no-checkpoints.toml",
        r#"
name = "no-checkpoints"
[[source]]
name = "in"
type = "generator"
events = 10

[[sink]]
name = "out"
type = "kafka"
input = "in"
brokers = "127.0.0.1:1"
topic = "out"
"#,
    );
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("kafka sink `out` commits its output when a checkpoint completes") && error.contains("checkpoint_dir"), "{error}");
}

/// The commit protocol itself, against the broker: an epoch whose
/// transaction committed is not sent again by a later attempt (a restart
/// that finds its log still there), because its commit marker says so —
/// which is what lets readers keep the last attempt of each epoch.
#[test]
fn a_committed_epoch_is_never_sent_again() {
    let _serial = one_at_a_time();
    use weir::checkpoint::{Committer, PendingCommit};
    use weir::connectors::kafka::{KafkaSink, KafkaSinkSpec};
    use weir::connectors::{Sink, SinkPlace};
    use weir::dataflow::RecordBatch;

    let broker = Broker::start();
    broker.create_topic("out", 1);
    let spec: KafkaSinkSpec = toml::from_str(&format!(
        "name = \"out\"\ninput = \"x\"\nbrokers = \"{}\"\ntopic = \"out\"\ntimeout_ms = 10000",
        broker.address()
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stop = weir::dataflow::Cancel::default();
    let place = SinkPlace { job: "job", subtask: 0, parallelism: 1, restored: 0, restored_at_ms: 0, checkpoint_dir: dir.path(), lineage: None, stop: &stop };
    let mut sink = KafkaSink::open(&spec, &place).unwrap();
    let mut batch = RecordBatch::new();
    for i in 0..10 {
        batch.push(b"k", i.to_string().as_bytes(), None);
    }
    sink.write(&batch).unwrap();
    let commits = sink.precommit(1, false).unwrap();
    let PendingCommit::Kafka(commit) = &commits[0] else { panic!("a kafka commit: {commits:?}") };
    let log = std::fs::read(&commit.wal).unwrap();

    let mut committer = Committer::new(vec![spec.clone()]);
    committer.commit(commits.clone());
    assert!(committer.pending().is_empty(), "committed");
    assert!(!commit.wal.exists(), "the log of a committed epoch is deleted");

    // A crash before the log was deleted: a new process commits again.
    std::fs::write(&commit.wal, log).unwrap();
    let mut again = Committer::new(vec![spec]);
    again.commit(commits);
    assert!(again.pending().is_empty());
    let records = broker.read_all("out");
    let attempts: std::collections::BTreeSet<_> = records.iter().map(|r| r.attempt.clone().unwrap()).collect();
    assert_eq!((records.len(), attempts.len()), (10, 1), "one attempt, sent once: {records:?}");
    assert!(records.iter().all(|r| r.checkpoint == Some(1)));
}

/// A fork of a running Kafka job must write elsewhere (a topic of its own)
/// and gets transactional ids of its own, so the two never fence each other;
/// both then commit their counts exactly once.
#[test]
fn a_fork_writes_its_own_topic_with_its_own_transactional_ids() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(4_800);
    broker.create_topic("forked", 3);
    let dir = JobDir::new();
    let job = count_job(&dir, "job", &broker, 2, "", "");
    let host = Host::start(&job, &[]);
    host.wait_for_records("kafka-count", 4_800);

    let clash = host.weir(&["fork", "kafka-count", "--name", "clash"]).failure();
    assert!(clash.contains("would write to kafka://") && clash.contains("--topic NAME=TOPIC"), "{clash}");
    host.weir(&["fork", "kafka-count", "--name", "twin", "--topic", "out=forked"]).success();
    broker.produce("in", events(4_800, 2_400));
    host.wait_for_records("kafka-count", 7_200);
    host.wait_for_records("twin", 2_400);
    // Stopping with a savepoint commits everything read.
    let original = dir.path("sp-original");
    let twin = dir.path("sp-twin");
    host.stop_with_savepoint("kafka-count", &original);
    host.stop_with_savepoint("twin", &twin);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");

    assert_exact_counts(&committed_counts(&broker), 7_200);
    let (forked, _) = committed_records(broker.read_all("forked"));
    assert!(forked.iter().all(|r| r.attempt.as_deref().unwrap().starts_with("weir-twin-out-")), "the fork's own ids");
    // The fork restored the counts at its savepoint and counted on from there.
    let counts = counts_by_key(forked);
    assert_eq!(counts.len() as u64, KEYS);
    for (key, values) in &counts {
        assert_eq!(values.last(), Some(&30), "key {key}: 30 events in all");
        let mut distinct = values.clone();
        distinct.dedup();
        assert_eq!(&distinct, values, "key {key}: no count twice");
    }
}

/// Readings per partition of the backfill below, one each 100 ms of event
/// time per partition, keys `0`..`9` in turn.
const BACKFILL_READINGS: u64 = 2_000;

/// Reading `i` of partition `p`: (key, value, event time in ms), partition
/// 1's 200 s after partition 0's. (Event times from 2023 on: a producer
/// sends a timestamp of 0 as "now".)
fn backfill_reading(p: u64, i: u64) -> (String, String, i64) {
    let n = p * BACKFILL_READINGS + i;
    ((n % 10).to_string(), n.to_string(), 1_700_000_000_000 + (n * 100) as i64)
}

/// A backfill of a topic whose two partitions are 200 s apart in event
/// time, read at P = 2 (a partition per subtask) at 1 000 records/s each.
/// Unaligned, the subtask with the later partition reads at full pace and
/// all its windows wait in state for the other; aligned to 1 s, it reads a
/// few records and waits until the other has caught up. Same results,
/// nothing late, and the checkpoints stay small.
#[test]
fn watermark_alignment_holds_back_the_partition_ahead_in_event_time() {
    let _serial = one_at_a_time();
    let broker = Broker::start();
    broker.create_topic("readings", 2);
    for p in 0..2 {
        broker.produce_timed("readings", p as i32, (0..BACKFILL_READINGS).map(|i| backfill_reading(p, i)));
    }
    let source = |alignment: &str| {
        format!(
            r#"
[[source]]
name = "readings"
type = "kafka"
brokers = "{brokers}"
topics = ["readings"]
bounded = true
rate = 2000
out_of_orderness_ms = 100
{alignment}
"#,
            brokers = broker.address()
        )
    };
    let readings = (0..2).flat_map(|p| (0..BACKFILL_READINGS).map(move |i| backfill_reading(p, i)));
    let expected = window_sums_of(readings.map(|(key, value, time)| (key, time, value.parse().unwrap())));
    let (unaligned, unaligned_largest) = run_windows(2, &source(""), r#"["readings"]"#);
    let (aligned, aligned_largest) = run_windows(2, &source("watermark_alignment = { max_drift_ms = 1000 }"), r#"["readings"]"#);
    eprintln!("largest checkpoint: {aligned_largest} bytes aligned, {unaligned_largest} unaligned");
    assert_eq!(unaligned, expected);
    assert_eq!(aligned, expected, "alignment changes when records are read, not the results");
    assert!(aligned_largest > 0, "checkpoints completed while aligned");
    assert!(
        aligned_largest * 4 < unaligned_largest,
        "the largest checkpoint holds {aligned_largest} bytes aligned, {unaligned_largest} unaligned"
    );
}

/// A live topic of two partitions read at P = 2 with watermark alignment,
/// of which one goes quiet after a few readings: once it has been quiet for
/// `idle_timeout_ms` its subtask is idle, and no longer holds back the other
/// subtask (which waits while it is more than 1 s ahead) nor the windows
/// downstream. Without the timeout the job would read one partition's first
/// seconds and then wait for the quiet one for ever.
#[test]
fn an_idle_partition_does_not_hold_back_an_aligned_job() {
    let _serial = one_at_a_time();
    let broker = Broker::start();
    broker.create_topic("live", 2);
    broker.produce_timed("live", 0, (0..BACKFILL_READINGS).map(|i| backfill_reading(0, i)));
    let quiet: Vec<(String, String, i64)> = (0..5).map(|i| ("quiet".to_owned(), "1".to_owned(), 1_700_000_000_000 + i * 100)).collect();
    broker.produce_timed("live", 1, quiet.clone());
    let dir = JobDir::new();
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "idle-aligned"
parallelism = 2
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 50

[[source]]
name = "live"
type = "kafka"
brokers = "{brokers}"
topics = ["live"]
out_of_orderness_ms = 100
# Long enough for the subtasks to have read their first records: a
# partition idle before that could see them come in behind the watermark.
idle_timeout_ms = 1000
watermark_alignment = {{ max_drift_ms = 1000 }}

[[operator]]
uid = "windows"
plugin = {plugin}
inputs = ["live"]
key_by = true
{WINDOW_SINKS}"#,
            brokers = broker.address(),
            plugin = toml_path(&plugin("sensor-window"))
        ),
    );
    // Every window the busy partition's last watermark closes (the stream
    // has no end, so its last second's stays open), with the quiet one's.
    let readings: Vec<(String, String, i64)> = (0..BACKFILL_READINGS).map(|i| backfill_reading(0, i)).chain(quiet).collect();
    let last_watermark = readings.iter().map(|r| r.2).max().unwrap() - 100;
    let all = window_sums_of(readings.into_iter().map(|(key, value, time)| (key, time, value.parse().unwrap())));
    let closed: Sums = all
        .iter()
        .map(|(key, list)| (key.clone(), list.iter().copied().filter(|w| w.1 <= last_watermark).collect()))
        .collect();
    let expected = closed.values().map(Vec::len).sum::<usize>();

    let graph = job::load(&job, Overrides::default()).unwrap();
    let running = dataflow::start_job(&graph, &PluginEngine::new().unwrap()).unwrap();
    let started = Instant::now();
    let fired = || windows(&std::fs::read_to_string(dir.path("sums.txt")).unwrap_or_default());
    while fired().values().map(Vec::len).sum::<usize>() < expected && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("windows fired after {:?}", started.elapsed());
    running.cancel();
    let _ = running.wait();
    let fired = fired();
    assert_eq!(fired.values().map(Vec::len).sum::<usize>(), expected, "every closed window fired, the quiet partition's too");
    assert_eq!(fired, closed, "with the sums of every reading");
    assert_eq!(std::fs::read_to_string(dir.path("late.txt")).unwrap_or_default(), "", "nothing late");
}

/// A user whose job falls behind its topic sees by how much, per partition
/// (`weir jobs JOB`, the API, `/metrics`), falling to 0 as it catches up,
/// and growing again with new input.
#[test]
fn the_consumer_lag_of_each_partition_is_shown_until_the_job_catches_up() {
    let _serial = one_at_a_time();
    let broker = broker_with_input(4_800);
    let dir = JobDir::new();
    // 1 200 records a second over 2 subtasks: 4 s behind at the start.
    let job = count_job(&dir, "job", &broker, 2, "rate = 1200", "");
    let host = Host::start(&job, &[]);
    let api = ApiClient::new(&host.api);

    let behind = wait_for_backlog(&api, &host, |records| records > 0);
    let records = behind.backlog_records.unwrap();
    assert!(records < 4_800, "behind by {records} of 4 800");
    let partitions: Vec<(u32, PartitionBacklog)> =
        behind.by_subtask.iter().flat_map(|s| s.backlog.iter().flat_map(|b| b.partitions.clone()).map(|p| (s.subtask, p))).collect();
    let placed: Vec<(u32, i32)> = partitions.iter().map(|(subtask, p)| (*subtask, p.partition)).collect();
    assert_eq!(placed, [(0, 0), (0, 2), (1, 1)], "each partition, with the subtask reading it");
    let ends: i64 = partitions.iter().map(|(_, p)| p.end.unwrap()).sum();
    assert_eq!(ends, 4_800, "the partitions end where the input does");
    for (_, p) in &partitions {
        assert_eq!(p.lag, Some((p.end.unwrap() - p.offset) as u64), "{p:?}");
    }
    let shown = host.weir(&["jobs", "kafka-count"]).success().stdout();
    assert!(shown.contains("\nsource `in`: ") && shown.contains(" records yet to read\n"), "{shown}");
    assert!(shown.contains("SUBTASK  TOPIC  PARTITION  OFFSET"), "{shown}");
    let metrics = api.metrics().unwrap();
    let lag = "weir_kafka_partition_lag_records{job=\"kafka-count\",kind=\"source\",name=\"in\",subtask=\"1\",topic=\"in\",partition=\"1\"}";
    assert!(metrics.contains(lag) && metrics.contains("weir_source_backlog_records{job=\"kafka-count\""), "{metrics}");

    wait_for_backlog(&api, &host, |records| records == 0);
    assert_eq!(host.records_read("kafka-count"), 4_800, "caught up: every record read");
    broker.produce("in", events(4_800, 6_000));
    wait_for_backlog(&api, &host, |records| records > 0);
    wait_for_backlog(&api, &host, |records| records == 0);
    assert_eq!(host.records_read("kafka-count"), 10_800);
}

/// The source `in` of job `kafka-count` once its backlog is known and
/// `wanted`.
fn wait_for_backlog(api: &ApiClient, host: &Host, wanted: impl Fn(u64) -> bool) -> NodeInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = api.job("kafka-count").unwrap();
        if let Some(source) = job.nodes.into_iter().find(|n| n.node == "source `in`")
            && source.backlog_records.is_some_and(&wanted)
        {
            return source;
        }
        assert!(Instant::now() < deadline, "no such backlog in 60 s: {}", host.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}
