//! The sandbox: plugins that trap, allocate without bound or loop forever
//! fail the job with an error naming the operator and the cause — the host
//! neither crashes nor hangs — and plugins cannot reach the filesystem, the
//! environment or the network.

mod common;

use common::{Host, JobDir, discarded_count_job, plugin, run_job, toml_path};
use weir::PluginEngine;
use weir::plugin::{InitialState, Limits, OperatorInstance};
use weir::state::MemoryBackend;

fn faulty_job(dir: &JobDir, mode: &str, limits: &str) -> std::path::PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "faulty"
[[source]]
name = "gen"
type = "generator"
events = 100

[[operator]]
uid = "misbehaving-{mode}"
plugin = {plugin}
inputs = ["gen"]
config = {{ mode = "{mode}" }}
{limits}

[[sink]]
name = "out"
type = "file"
path = "out.txt"
format = "kv"
input = "misbehaving-{mode}"
"#,
            plugin = toml_path(&plugin("faulty"))
        ),
    )
}

#[test]
fn a_panicking_plugin_fails_the_job_with_its_message() {
    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "panic", ""), &[]).failure();
    assert!(error.contains("operator `misbehaving-panic` (subtask 1 of 1) failed"), "{error}");
    assert!(error.contains("the plugin trapped"), "{error}");
    assert!(error.contains("faulty operator panicked on purpose"), "shows the panic message: {error}");
}

/// A plugin that exits as a process would (`std::process::exit`) fails
/// the job saying so and what to do instead, not with a wasm backtrace.
#[test]
fn a_plugin_that_exits_fails_the_job_saying_so() {
    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "exit", ""), &[]).failure();
    assert!(error.contains("operator `misbehaving-exit` (subtask 1 of 1) failed"), "{error}");
    assert!(error.contains("it exited with a failure status (std::process::exit, sys.exit or process.exit)"), "{error}");
    assert!(error.contains("report a failure as an error") && !error.contains("wasm backtrace"), "{error}");
}

/// A plugin may log as much as it likes: the host keeps the last of it
/// for the error report, and a long log never fails the plugin.
#[test]
fn a_plugin_logging_much_runs_and_its_last_lines_are_reported() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "chatty", "").to_str().unwrap().to_owned();
    let text = std::fs::read_to_string(&job).unwrap().replace("events = 100", "events = 300");
    std::fs::write(&job, text.replace("mode = \"chatty\"", "mode = \"chatty\", after = 1000")).unwrap();
    run_job(job.as_ref(), &[]).success();
    assert_eq!(dir.read("out.txt").lines().count(), 300, "300 KiB of log, every event through");
    std::fs::write(&job, text.replace("mode = \"chatty\"", "mode = \"chatty\", after = 250")).unwrap();
    let error = run_job(job.as_ref(), &[]).failure();
    assert!(error.contains("event 250 of a chatty operator: stopping here"), "{error}");
    assert!(error.contains("faulty operator panicked after 249 lines of log"), "{error}");
    assert!(error.len() < 3000, "long lines shortened: {error}");
}

/// A call's output may be as large as the instance's memory allows: a
/// batch of 8 192 records of 20 kB is 164 MB handed to the host at once,
/// beyond wasmtime's default bound on what a call may pass it.
#[test]
fn a_plugin_emitting_large_records_runs_within_its_memory_cap() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "huge", "memory_limit_mb = 1024");
    let text = std::fs::read_to_string(&job).unwrap().replace("events = 100", "events = 9000");
    let text = text.replace("mode = \"huge\"", "mode = \"huge\", after = 20000").replace("type = \"file\"\npath = \"out.txt\"\nformat = \"kv\"", "type = \"discard\"");
    std::fs::write(&job, text).unwrap();
    let run = run_job(&job, &[]);
    assert!(run.success().stderr().contains("9000 events read, 9000 written"), "{}", run.stderr());
}

/// Batches are cut at 4 MiB of keys and values, not only at 8 192 records:
/// a plugin is handed its input batch whole, in its own memory, and 40
/// records of 1 MiB in one batch failed a word count under a 32 MiB cap
/// through no fault of its own (the sandbox audit: records of 2 MiB under
/// 256 MiB).
#[test]
fn large_records_come_in_batches_a_plugin_can_hold() {
    let dir = JobDir::new();
    let value = "x".repeat(1 << 20);
    let lines: String = (0..40).map(|i| format!("{{\"key\": \"k{}\", \"value\": \"{value}\"}}\n", i % 4)).collect();
    dir.write("big.jsonl", &lines);
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "big-records"
[[source]]
name = "in"
type = "file"
path = "big.jsonl"
format = "json"

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["in"]
key_by = true
memory_limit_mb = 32

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
            plugin = toml_path(&plugin("word-count"))
        ),
    );
    let run = run_job(&job, &[]);
    assert!(run.success().stderr().contains("40 events read, 40 written"), "{}", run.stderr());
}

/// A plugin's output batch is cut for the plugin after it too, on every
/// kind of edge: 100 records of 1 MiB, emitted at once under a 1 GiB cap,
/// failed the next operator under its 64 MiB on a forward (chained),
/// rebalance or broadcast edge (found by the re-audit).
#[test]
fn a_large_output_batch_is_cut_for_the_next_plugin() {
    for (parallelism, edge) in [(1, ""), (2, ""), (2, "broadcast = [\"big\"]")] {
        let dir = JobDir::new();
        // A broadcast input comes beside a regular one.
        let inputs = if edge.is_empty() { r#"inputs = ["big"]"# } else { r#"inputs = ["gen"]"# };
        let job = dir.write(
            "job.toml",
            &format!(
                r#"
name = "big-outputs"
[[source]]
name = "gen"
type = "generator"
events = 100
parallelism = 1

[[operator]]
uid = "big"
plugin = {plugin}
inputs = ["gen"]
parallelism = 1
memory_limit_mb = 1024
config = {{ mode = "huge", after = 1048576 }}

[[operator]]
uid = "small"
plugin = {plugin}
{inputs}
{edge}
parallelism = {parallelism}
memory_limit_mb = 64
config = {{ mode = "none" }}

[[sink]]
name = "out"
type = "discard"
input = "small"
"#,
                plugin = toml_path(&plugin("faulty"))
            ),
        );
        let run = run_job(&job, &[]);
        let written = if edge.is_empty() { 100 } else { 100 + 100 * parallelism };
        let expected = format!("100 events read, {written} written");
        assert!(run.success().stderr().contains(&expected), "at {parallelism} {edge}: {}", run.stderr());
    }
}

#[test]
fn a_plugin_allocating_without_bound_hits_its_memory_cap() {
    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "alloc", "memory_limit_mb = 32"), &[]).failure();
    assert!(error.contains("operator `misbehaving-alloc`"), "{error}");
    assert!(error.contains("exceeded its memory cap of 32 MiB in `process`"), "names the call: {error}");
    assert!(error.contains("memory_limit_mb"), "says what to change: {error}");
}

/// Reaching the cap fails the allocation as the plugin sees it, not the
/// call: one that asks with `try_reserve` (a Python `MemoryError`, a
/// JavaScript `RangeError`) can handle it and go on (it was killed at
/// once: found by the sandbox audit).
#[test]
fn a_plugin_may_handle_reaching_its_memory_cap() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "try-alloc", "memory_limit_mb = 32");
    let text = std::fs::read_to_string(&job).unwrap().replace(r#"mode = "try-alloc""#, r#"mode = "try-alloc", after = 200"#);
    std::fs::write(&job, text).unwrap();
    run_job(&job, &[]).success();
    let out = std::fs::read_to_string(dir.path("out.txt")).unwrap();
    assert_eq!(out.lines().count(), 100);
    assert!(out.lines().all(|line| line.ends_with("\trefused")), "{out}");
}

#[test]
fn a_plugin_looping_forever_is_interrupted_at_its_deadline() {
    let dir = JobDir::new();
    let run = run_job(&faulty_job(&dir, "loop", "call_timeout_ms = 300"), &[]);
    let error = run.failure();
    assert!(error.contains("operator `misbehaving-loop`"), "{error}");
    assert!(error.contains("`process` exceeded its deadline of 300 ms"), "names the call: {error}");
    assert!(error.contains("call_timeout_ms"), "says what to change: {error}");
}

/// A plugin asleep is blocked in the host, where wasmtime's epoch checks
/// do not run: its sleep ends at the call's deadline, and the call fails
/// there (it ran the hour it asked for, and a cancel waited as long; then,
/// woken at the deadline but left to the epoch check, it often finished
/// its call in the ticker's lag behind the clock, with deadlines of 2 s
/// and more).
/// A `flush` (the SDK writing state back, at a checkpoint) that runs past
/// its deadline fails the task with that cause: the checkpoint was
/// abandoned and the next call failed on the interrupted instance, so the
/// job failed with wasmtime's "cannot enter component instance" (found by
/// the sandbox audit).
#[test]
fn a_flush_past_its_deadline_fails_the_job_saying_so() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "slow-flush", "key_by = true\ncall_timeout_ms = 300");
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace("events = 100", "events = 100000\nrate = 1000")
        .replace(
            "name = \"faulty\"",
            "name = \"faulty\"\ncheckpoint_dir = \"checkpoints\"\ncheckpoint_interval_ms = 100\n[restart]\nstrategy = \"none\"",
        );
    std::fs::write(&job, text).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `misbehaving-slow-flush` (subtask 1 of 1) failed"), "{error}");
    assert!(error.contains("`flush` exceeded its deadline of 300 ms"), "{error}");
    assert!(!error.contains("cannot enter component instance"), "{error}");
}

#[test]
fn a_plugin_sleeping_is_interrupted_at_its_deadline() {
    let dir = JobDir::new();
    for deadline in [300, 2000] {
        let run = run_job(&faulty_job(&dir, "sleep", &format!("call_timeout_ms = {deadline}")), &[]);
        let error = run.failure();
        assert!(error.contains("operator `misbehaving-sleep`"), "{error}");
        assert!(error.contains(&format!("exceeded its deadline of {deadline} ms")), "{error}");
    }
}

/// `call_timeout_ms = 0` turns the deadline off (the plugin compiled
/// without its checks, on a second engine): the job runs and says so, and
/// the memory cap still holds.
#[test]
fn a_plugin_without_a_deadline_runs_and_keeps_its_memory_cap() {
    let dir = JobDir::new();
    let run = run_job(&faulty_job(&dir, "none", "call_timeout_ms = 0"), &[]);
    run.success();
    let out = std::fs::read_to_string(dir.path("out.txt")).unwrap();
    assert_eq!(out.lines().count(), 100, "{out}");
    let log = run.stderr();
    assert!(log.contains("no call deadline") && log.contains("misbehaving-none"), "warns: {log}");

    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "alloc", "call_timeout_ms = 0\nmemory_limit_mb = 32"), &[]).failure();
    assert!(error.contains("exceeded its memory cap of 32 MiB"), "{error}");
}

/// The engine compiles an operator's plugin with the checks that enforce a
/// call deadline exactly when the operator has one, and an instance refuses
/// to hold a deadline its plugin's code could not keep.
#[test]
fn only_plugins_under_a_deadline_carry_its_checks() {
    let engine = PluginEngine::new().unwrap();
    let path = plugin("faulty");
    let (deadline, none) = (Limits::default(), Limits { call_timeout: None, ..Limits::default() });
    assert!(engine.load(&path).unwrap().checks_deadlines(), "the default engine checks");
    assert!(engine.load_for(&path, &deadline).unwrap().checks_deadlines());
    let unchecked = engine.load_for(&path, &none).unwrap();
    assert!(!unchecked.checks_deadlines(), "no deadline, no checks");

    let state = || InitialState {
        backend: Box::new(MemoryBackend::new()),
        meta: None,
        max_parallelism: 128,
        key_groups: 0..128,
    };
    OperatorInstance::new(&unchecked, none, state(), &[]).unwrap();
    let error = OperatorInstance::new(&unchecked, deadline, state(), &[]).err().expect("a deadline it cannot keep");
    assert!(error.to_string().contains("compiled without the checks that enforce a call deadline"), "{error}");
}

#[test]
fn a_plugin_returning_an_error_fails_the_job_with_it() {
    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "error", ""), &[]).failure();
    assert!(error.contains("the plugin returned an error: faulty operator failed on purpose"), "{error}");
    assert!(error.contains("it printed: faulty: giving up on this batch"), "what it printed goes with it: {error}");
}

/// A timer that `on_timer` sets again for the time firing fires again at
/// once, in the same advance of time, forever: the advance is cut off and
/// the job fails saying why, instead of spinning with its output held.
#[test]
fn a_timer_set_again_for_the_time_firing_fails_the_job_saying_why() {
    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "rearm", "key_by = true"), &[]).failure();
    assert!(error.contains("operator `misbehaving-rearm`"), "{error}");
    assert!(error.contains("keeps setting timers for times already reached"), "{error}");
}

/// A periodic timer — `on_timer` sets the next one a millisecond on —
/// catches up on a jump of event time, one timer after the other in one
/// advance, however many that takes: each is set for later than the one
/// firing, so the advance ends. Here 600 keys fire 3 000 timers each
/// (1.8 million) when the watermark jumps from 0 to 3 000; the job failed
/// past a million, as if the plugin had set timers for the time firing.
/// (So would a periodic processing-time timer restored after downtime.)
#[test]
fn a_periodic_timer_catches_up_on_a_jump_of_event_time() {
    let dir = JobDir::new();
    // Each key's two events in one batch: the watermark then jumps past both.
    let lines: String = (0..600).map(|k| format!("{{\"key\":\"k{k}\",\"timestamp\":0}}\n{{\"key\":\"k{k}\",\"timestamp\":3000}}\n")).collect();
    dir.write("in.jsonl", &lines);
    let job = dir.write(
        "job.toml",
        &format!(
            r#"
name = "periodic"
[[source]]
name = "in"
type = "file"
format = "json"
path = "in.jsonl"

[[operator]]
uid = "chain"
plugin = {plugin}
inputs = ["in"]
key_by = true
config = {{ mode = "chain" }}

[[sink]]
name = "out"
type = "file"
path = "out.txt"
input = "chain"
"#,
            plugin = toml_path(&plugin("faulty"))
        ),
    );
    run_job(&job, &[]).success();
    let out = dir.read("out.txt");
    let ends: std::collections::BTreeMap<&str, &str> = out.lines().filter_map(|line| line.split_once('\t')).collect();
    assert_eq!(ends.len(), 600, "every key's chain ended: {} lines", out.lines().count());
    assert!(ends.values().all(|&end| end == "3000"), "each at its latest time: {ends:?}");
}

/// State named by data — a new state for each event, or a name as long as
/// a value — is refused, saying what to do instead: the host keeps every
/// name for the operator's life and writes each into every checkpoint, and
/// a plugin doing so grew a host to 11 GiB in 12 s, aborting it and every
/// job on it (found by the sandbox audit).
#[test]
fn state_named_by_data_is_refused() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "state-names", "key_by = true");
    let many_events = std::fs::read_to_string(&job)
        .unwrap()
        .replace("events = 100", "events = 10000")
        .replace(r#"mode = "state-names""#, r#"mode = "state-names", after = 10"#);
    std::fs::write(&job, &many_events).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `misbehaving-state-names` (subtask 1 of 1) failed: the host refused"), "{error}");
    assert!(error.contains("state `0000004097` would be its operator's state number 4097, past the 4096"), "{error}");
    assert!(error.contains("keep per-key data in the values of one state"), "{error}");

    let long_names = many_events.replace("after = 10", "after = 2000");
    std::fs::write(&job, long_names).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("a state name of 2000 bytes (`0000000000"), "{error}");
    assert!(error.contains("names are at most 1024 bytes"), "{error}");
}

/// Timers live in the host, outside the plugin's memory cap, and are
/// written into every checkpoint: a plugin setting them by event rather
/// than by key and window is stopped at its operator's `timer_limit`,
/// told what to do.
#[test]
fn timers_past_the_operators_limit_are_refused() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "timers", "key_by = true\ntimer_limit = 5000");
    // 100 timers an event: 10 000 over the generator's 100 events.
    let text = std::fs::read_to_string(&job).unwrap().replace(r#"mode = "timers""#, r#"mode = "timers", after = 100"#);
    std::fs::write(&job, &text).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `misbehaving-timers` (subtask 1 of 1) failed: the host refused the plugin's timer"), "{error}");
    assert!(error.contains("pending timer number 5001, past the operator's `timer_limit` of 5000"), "{error}");
    assert!(error.contains("set one per key and window end, not one per event"), "{error}");
    assert!(error.contains("raise `timer_limit` for this operator in the job file"), "{error}");

    // Under the default bound the same job runs to its end.
    std::fs::write(&job, text.replace("timer_limit = 5000", "")).unwrap();
    run_job(&job, &[]).success();
}

#[test]
fn a_plugin_rejecting_its_config_says_why() {
    let dir = JobDir::new();
    let error = run_job(&faulty_job(&dir, "explode", ""), &[]).failure();
    assert!(error.contains("operator `misbehaving-explode`"), "{error}");
    assert!(error.contains("invalid config: unknown mode \"explode\""), "{error}");
}

/// `weir.*` keys are the host's: a job file cannot set them (it could fake
/// a restart attempt or a memory budget).
#[test]
fn a_job_file_setting_the_hosts_config_keys_is_refused() {
    let dir = JobDir::new();
    let job = faulty_job(&dir, "none", "");
    let text = std::fs::read_to_string(&job).unwrap().replace("mode = \"none\"", "mode = \"none\", \"weir.attempt\" = \"1\"");
    std::fs::write(&job, text).unwrap();
    let error = run_job(&job, &[]).failure();
    assert!(error.contains("operator `misbehaving-none`: config `weir.attempt`: keys starting with `weir.` are the host's"), "{error}");
}

/// Plugins built with a Rust SDK from before the host passed `weir.state`
/// and `weir.memory-limit-mb` call the keys unknown: the host starts them
/// without those.
#[test]
fn a_plugin_refusing_newer_host_keys_is_started_without_them() {
    let dir = JobDir::new();
    run_job(&faulty_job(&dir, "pre-weir-state", ""), &[]).success();
    assert_eq!(dir.read("out.txt").lines().count(), 100, "every event forwarded");
}

#[test]
fn plugins_cannot_reach_files_environment_or_network() {
    let dir = JobDir::new();
    run_job(&faulty_job(&dir, "probe", ""), &[]).success();
    let out = dir.read("out.txt");
    let probe = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}\t")))
            .unwrap_or_else(|| panic!("no {key} line in {out}"))
            .to_owned()
    };
    assert!(probe("fs").starts_with("denied"), "filesystem: {}", probe("fs"));
    assert_eq!(probe("env"), "0 variables");
    assert!(probe("net").starts_with("denied"), "network: {}", probe("net"));
}

/// A cancel interrupts a call under way instead of waiting for its
/// deadline: a busy loop, a sleep past the deadline and one within it
/// (two minutes and two hours here). `weir cancel` waits 30 s for the job
/// to stop; before, it gave up on all three, the job running on until the
/// deadline failed the call. The job ends as cancelled, not failed.
#[test]
fn a_cancel_interrupts_a_call_under_way() {
    for (mode, deadline_ms) in [("loop", 120_000), ("sleep", 120_000), ("sleep", 7_200_000)] {
        let dir = JobDir::new();
        let host = Host::start(&faulty_job(&dir, mode, &format!("call_timeout_ms = {deadline_ms}")), &[]);
        host.wait_for_records("faulty", 1);
        std::thread::sleep(std::time::Duration::from_millis(300)); // Into the call.
        let reply = host.weir(&["cancel", "faulty"]).success().stdout();
        assert!(reply.contains("cancelled"), "{mode}, {deadline_ms} ms: {reply}");
        let (status, stderr) = host.wait();
        assert!(status.success() && stderr.contains("job `faulty` was cancelled"), "{mode}, {deadline_ms} ms: {stderr}");
        assert!(!stderr.contains("failed"), "{mode}, {deadline_ms} ms: {stderr}");
    }
}

/// A job stuck in a call without a deadline cannot be cancelled: `weir
/// cancel` says so after its wait instead of hanging.
#[test]
fn cancelling_a_job_stuck_without_a_deadline_says_it_is_stuck() {
    let dir = JobDir::new();
    let host = Host::start(&faulty_job(&dir, "loop", "call_timeout_ms = 0"), &[]);
    host.wait_for_records("faulty", 1);
    let error = host.weir(&["cancel", "faulty"]).failure();
    assert!(error.contains("job `faulty` was asked to stop but still runs after 30 s"), "{error}");
    assert!(error.contains("plugin call without a deadline"), "{error}");
}

/// A count of `events` over `keys` generated keys, read at most at
/// `rate` events/s, with the operator's `limits`; a checkpoint every
/// `interval_ms` (each calls the plugin's `flush`, whose writes do not
/// count as write-backs of held state).
fn many_keys_job(dir: &JobDir, (keys, events, rate, interval_ms): (u64, u64, u64, u64), limits: &str) -> std::path::PathBuf {
    let settings = format!("checkpoint_dir = \"checkpoints\"\ncheckpoint_interval_ms = {interval_ms}");
    discarded_count_job(dir, events, keys, &settings, &format!("rate = {rate}"), limits)
}

/// An operator whose keys outgrow what the Rust SDK keeps in the instance
/// (about half of `memory_limit_mb`: ~110 000 counts of 64 MiB) writes
/// them back and reads them again as it goes, several times slower; the
/// log says so once and names the setting. With room for its keys — the
/// default 512 MiB holds 1.7 million counts — or with few keys, it says
/// nothing.
#[test]
fn an_operator_holding_more_keys_than_its_memory_limit_keeps_is_told_to_raise_it() {
    const ADVICE: &str = "give the operator a larger memory_limit_mb";
    let many = (400_000, 800_000, 10_000_000, 1000);
    let cramped = run_job(&many_keys_job(&JobDir::new(), many, "memory_limit_mb = 64"), &[]);
    let stderr = cramped.stderr();
    cramped.success();
    assert_eq!(stderr.matches(ADVICE).count(), 1, "said once: {stderr}");
    assert!(stderr.contains("operator `count`"), "{stderr}");

    // Each run in a directory of its own: one that found the last run's
    // finished checkpoint would not run at all. The few keys' run lasts a
    // second and more, with a checkpoint every 20 ms: fifty and more.
    let few = (1_000, 100_000, 80_000, 20);
    for (job, limits) in [(many, ""), (few, "")] {
        let roomy = run_job(&many_keys_job(&JobDir::new(), job, limits), &[]);
        roomy.success();
        let (keys, events, ..) = job;
        let stderr = roomy.stderr();
        assert!(stderr.contains(&format!("{events} events read")), "{keys} keys, {limits:?}: the job ran: {stderr}");
        assert!(!stderr.contains(ADVICE), "{keys} keys, {limits:?}: {stderr}");
    }
}
