//! `weir bench`: the reference workloads of `docs/workloads.md`,
//! run through real plugins (or, with `--native`, the same plugin crates
//! compiled into the host), printing a `RESULT` line like the Flink harness.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::ValueEnum;
use weir::job::{self, NodeKind, Overrides};
use weir::dataflow::{Role, TaskSummary};
use weir::plugin::Limits;
use weir::{PluginEngine, dataflow};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Keyed count: key = i mod 100000, a value state per key, one output per event.
    Count,
    /// Key = i mod 1000, timestamp = i / 10 ms, 100 ms out of order; 1 s tumbling event-time windows summing per key.
    Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Memory,
    Rocksdb,
}

/// Options of `weir bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The workload.
    #[arg(value_enum)]
    pub workload: Workload,
    /// Number of events.
    #[arg(long, default_value_t = 20_000_000)]
    pub events: u64,
    /// Parallelism of sources and operators.
    #[arg(long, short = 'p', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub parallelism: u32,
    /// State backend.
    #[arg(long, value_enum, default_value_t = Backend::Memory)]
    pub backend: Backend,
    /// Number of distinct keys, `i mod keys` (default: the workload's own,
    /// 100000 for `count` and 1000 for `window`). More keys than the
    /// processor's caches hold show what state lookups cost at scale.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Option<u64>,
    /// Run the same plugin crate compiled into the host (the baseline for
    /// the cost of Wasm) instead of the Wasm plugin.
    #[arg(long)]
    pub native: bool,
    /// Checkpoint interval in ms (0: no checkpoints). Checkpoints go to a
    /// temporary directory, deleted afterwards.
    #[arg(long, default_value_t = 1000)]
    pub checkpoint_interval_ms: u64,
    /// Align the source subtasks' watermarks (`window`): a subtask more
    /// than this many ms of event time ahead of the slowest waits. Off by
    /// default, as in the Flink harness.
    #[arg(long)]
    pub max_drift_ms: Option<u64>,
    /// The operator's call deadline in ms, as `call_timeout_ms` in a job
    /// file (default 10000); 0: none, the plugin compiled without the
    /// checks that enforce one.
    #[arg(long)]
    pub call_timeout_ms: Option<u64>,
    /// The operator's `memory_limit_mb`, as in a job file (default 512):
    /// the Rust SDK holds keyed state in the instance up to about half of
    /// it, and reads and writes through the host what does not fit.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub memory_limit_mb: Option<u64>,
    /// The operator's `timer_limit`, as in a job file: the most timers a
    /// subtask may have pending (default 1000000; 0: no bound). The
    /// window workload's unaligned sources leave a timer pending for each
    /// window waiting, more than the default over long runs.
    #[arg(long)]
    pub timer_limit: Option<u64>,
    /// Where the built plugins are (default: examples/plugins, then the
    /// wasm32-wasip2 release directory of CARGO_TARGET_DIR or target/).
    #[arg(long)]
    pub plugin_dir: Option<PathBuf>,
}

pub fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    let (workload, native, plugin_file) = match args.workload {
        Workload::Count => ("count", "native:count", "word_count.wasm"),
        Workload::Window => ("window", "native:window-sum", "sensor_window.wasm"),
    };
    let plugin = if args.native { PathBuf::from(native) } else { find_plugin(args, plugin_file)? };
    let keys = keys(args);
    let expected = match args.workload {
        Workload::Count => args.events,
        Workload::Window => window_outputs(args.events, keys),
    };
    let backend = backend_name(args.backend);
    let checkpoint_dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&checkpoint_dir);
    let graph = job::parse(&job_file(args, &plugin, &checkpoint_dir), Path::new(""), Overrides { parallelism: Some(args.parallelism) })
        .map_err(|e| anyhow::anyhow!("benchmark job: {e}"))?;
    let engine = PluginEngine::new()?;

    let implementation = if args.native { "native" } else { "wasm" };
    let checkpoints = match args.checkpoint_interval_ms {
        0 => "off".to_string(),
        ms => format!("every {ms} ms"),
    };
    if matches!(args.workload, Workload::Count) && args.max_drift_ms.is_some() {
        anyhow::bail!("--max-drift-ms aligns event time, and the count workload's events have none: use it with `window`");
    }
    let alignment = args.max_drift_ms.map(|ms| format!(" max_drift_ms={ms}")).unwrap_or_default();
    let memory_limit = args.memory_limit_mb.map(|mb| format!(" memory_limit_mb={mb}")).unwrap_or_default();
    eprintln!(
        "{workload}: {} events, {keys} keys, parallelism {}, backend {backend}, operator {implementation} ({}), checkpoints {checkpoints}{}",
        args.events,
        args.parallelism,
        plugin.display(),
        args.max_drift_ms.map(|ms| format!(", watermarks aligned to {ms} ms")).unwrap_or_default()
    );
    if matches!(args.workload, Workload::Window) && args.parallelism > 1 && args.max_drift_ms.is_none() {
        let waiting = windows_waiting_per_subtask(args.events, keys, args.parallelism);
        eprintln!(
            "note: the window workload splits its events into {} contiguous ranges, so the later ones run far ahead in \
             event time and their windows wait in state for the first (by the end about {waiting} per operator \
             subtask, each with a timer); --max-drift-ms 1000 aligns the sources (the Flink harness does not)",
            args.parallelism
        );
        let limit = args.timer_limit.unwrap_or(Limits::DEFAULT_TIMER_LIMIT as u64);
        if limit != 0 && waiting > limit {
            bail!(
                "this run would leave about {waiting} timers pending in an operator subtask, past its timer_limit of \
                 {limit}, and fail: align the sources (--max-drift-ms 1000), run fewer events, or lift the bound \
                 (--timer-limit 0; the host then holds them all, and writes them into every checkpoint)"
            );
        }
    }
    // Compiled before the clock starts: a plugin's first run compiles it
    // (seconds); the job then finds it in the engine, as later runs do on disk.
    for node in &graph.nodes {
        if let NodeKind::Operator(op) = &node.kind
            && !args.native
        {
            engine.load_for(&op.plugin, &op.limits)?;
        }
    }
    let (started, cpu_before, machine_before) = (Instant::now(), dataflow::process_time(), dataflow::machine_time());
    let summary = dataflow::run_job(&graph, &engine);
    let seconds = started.elapsed().as_secs_f64();
    let cpu = dataflow::process_time().zip(cpu_before).map(|(after, before)| (after - before).as_secs_f64());
    let machine = dataflow::machine_time().zip(machine_before).map(|(after, before)| after.since(before));
    let _ = std::fs::remove_dir_all(&checkpoint_dir);
    let summary = summary?;
    if summary.records_written() != expected {
        bail!("expected {expected} outputs, the sink received {}", summary.records_written());
    }
    let rate = args.events as f64 / seconds;
    eprintln!("events/s: {rate:.0}");
    eprintln!("peak memory (RSS high-water mark): {}", super::peak_memory().unwrap_or_else(|| "unknown".into()));
    eprintln!("{}", super::checkpoint_figures(&summary.checkpoints));
    eprintln!("{}", processor_time(&summary.tasks, cpu, seconds));
    if let Some(machine) = machine {
        eprintln!("{}", stolen_time(machine));
    }
    let cpu = cpu.map(|cpu| format!(" cpu_s={cpu:.2}")).unwrap_or_default();
    let steal = machine.map(|m| format!(" steal_pct={:.0}", m.steal_share() * 100.0)).unwrap_or_default();
    let memory = super::peak_memory_mib().map(|mib| format!(" peak_rss_mib={mib:.1}")).unwrap_or_default();
    let checkpoint_fields = super::CheckpointMeans::of(&summary.checkpoints).map(|c| c.result_fields()).unwrap_or_default();
    out!(
        "RESULT workload={workload} backend={backend} par={} events={} seconds={seconds:.2} events_per_s={rate:.0} operator={implementation} keys={keys}{memory_limit} checkpoints={}{alignment}{cpu}{steal}{memory}{checkpoint_fields}",
        args.parallelism,
        args.events,
        summary.checkpoints.count()
    );
    Ok(())
}

/// Where the processor time went: the task threads' by role, and the
/// whole process's (`cpu` seconds, with the checkpoint writers) against the
/// run's `seconds` and the machine's cores. With as many busy threads as
/// cores, parallelism cannot go faster.
fn processor_time(tasks: &[TaskSummary], cpu: Option<f64>, seconds: f64) -> String {
    let role_seconds = |role: Role| {
        let times: Vec<f64> = tasks.iter().filter(|t| t.role == role).filter_map(|t| t.counters.cpu_ms).collect();
        (!times.is_empty()).then(|| times.iter().sum::<f64>() / 1e3)
    };
    let roles = [(Role::Source, "sources"), (Role::Operator, "operators"), (Role::Sink, "sinks")];
    let by_role: Vec<String> =
        roles.iter().filter_map(|&(role, name)| Some(format!("{name} {:.2} s", role_seconds(role)?))).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match cpu {
        Some(cpu) if !by_role.is_empty() => format!(
            "processor time: {} (task threads); the process {cpu:.2} s in {seconds:.2} s, {:.2} of {cores} cores busy",
            by_role.join(", "),
            cpu / seconds.max(1e-3)
        ),
        _ => "processor time: unknown (needs Linux's /proc)".into(),
    }
}

/// How much of the machine's time during the run a hypervisor took.
fn stolen_time(machine: dataflow::MachineTime) -> String {
    let share = machine.steal_share() * 100.0;
    let line = format!(
        "stolen by the hypervisor: {:.2} s of the cores' {:.2} s ({share:.0} %)",
        machine.steal.as_secs_f64(),
        machine.total.as_secs_f64()
    );
    // Past a few per cent the run measured the host's other tenants as much
    // as Weir: other figures are comparable only with runs stolen from alike.
    if share >= STEAL_WARNING_PCT { format!("{line}: a shared host; compare with runs that lost as much") } else { line }
}

/// The stolen share past which `weir bench` warns that its figures are
/// the host's as much as Weir's.
const STEAL_WARNING_PCT: f64 = 5.0;

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Memory => "memory",
        Backend::Rocksdb => "rocksdb",
    }
}

/// The job file of the benchmark `args` asks for, through `plugin`,
/// checkpointing (if it does) into `checkpoint_dir`.
fn job_file(args: &BenchArgs, plugin: &Path, checkpoint_dir: &Path) -> String {
    let mut operator = String::new();
    if let Some(ms) = args.call_timeout_ms {
        operator += &format!("call_timeout_ms = {ms}\n");
    }
    if let Some(mb) = args.memory_limit_mb {
        operator += &format!("memory_limit_mb = {mb}\n");
    }
    if let Some(limit) = args.timer_limit {
        operator += &format!("timer_limit = {limit}\n");
    }
    let job = match args.workload {
        Workload::Count => count_job(plugin, args.events, keys(args), &operator),
        Workload::Window => window_job(plugin, args.events, keys(args), args.max_drift_ms, &operator),
    };
    let job = format!("state_backend = \"{}\"\n{job}", backend_name(args.backend));
    match args.checkpoint_interval_ms {
        0 => job,
        interval => format!("checkpoint_dir = {:?}\ncheckpoint_interval_ms = {interval}\n{job}", checkpoint_dir.display().to_string()),
    }
}

/// The workload's number of keys: `--keys`, or that of its definition.
fn keys(args: &BenchArgs) -> u64 {
    args.keys.unwrap_or(match args.workload {
        Workload::Count => 100_000,
        Workload::Window => 1000,
    })
}

/// The `count` workload: key = i mod `keys` (100000), value = i; keyed count.
fn count_job(plugin: &Path, events: u64, keys: u64, operator: &str) -> String {
    bench_job("count", plugin, &format!("events = {events}\nkeys = {keys}"), operator)
}

/// The `window` workload: key = i mod `keys` (1000), value = i, timestamp =
/// i / 10 ms, watermarks 100 ms behind; per key, sums over 1 s tumbling
/// windows.
fn window_job(plugin: &Path, events: u64, keys: u64, max_drift_ms: Option<u64>, operator: &str) -> String {
    let mut generator =
        format!("events = {events}\nkeys = {keys}\nevents_per_ms = {WINDOW_EVENTS_PER_MS}\nout_of_orderness_ms = 100");
    if let Some(drift) = max_drift_ms {
        generator += &format!("\nwatermark_alignment = {{ max_drift_ms = {drift} }}");
    }
    bench_job("window", plugin, &generator, operator)
}

/// A `sequence` generator (with `generator` settings) → the keyed operator
/// `plugin` (with `operator` settings) → a sink that counts and discards;
/// no restarts.
fn bench_job(workload: &str, plugin: &Path, generator: &str, operator: &str) -> String {
    format!(
        r#"
name = "bench-{workload}"

[[source]]
name = "numbers"
type = "generator"
mode = "sequence"
{generator}

[[operator]]
uid = "{workload}"
plugin = {plugin:?}
inputs = ["numbers"]
key_by = true
{operator}

[[sink]]
name = "discard"
type = "discard"
input = "{workload}"

# A failed task fails the benchmark: a restart would hide in its time.
[restart]
strategy = "none"
"#,
        plugin = plugin.display().to_string()
    )
}

/// The window workload's event time: 10 events a millisecond, so that a
/// 1 s window holds 10 000 events.
const WINDOW_EVENTS_PER_MS: u64 = 10;
const EVENTS_PER_WINDOW: u64 = WINDOW_EVENTS_PER_MS * 1000;

/// About how many windows wait, each with its timer, in one operator
/// subtask by the end of the window workload over `parallelism` unaligned
/// sources: all those of the ranges after the first (every 1 s window
/// holds 10 000 events, so up to as many keys) until the first range's
/// watermark reaches them, at its end; spread over the subtasks by key.
fn windows_waiting_per_subtask(events: u64, keys: u64, parallelism: u32) -> u64 {
    let parallelism = u64::from(parallelism);
    let ahead = events / parallelism * (parallelism - 1);
    ahead.div_ceil(EVENTS_PER_WINDOW) * keys.min(EVENTS_PER_WINDOW) / parallelism
}

/// One output per key per window: a window's events (10 000 when full)
/// are consecutive, so they hold as many keys as events, up to `keys`.
fn window_outputs(events: u64, keys: u64) -> u64 {
    let per_window = EVENTS_PER_WINDOW;
    (0..events.div_ceil(per_window)).map(|w| (events - w * per_window).min(per_window).min(keys)).sum()
}

fn find_plugin(args: &BenchArgs, file: &str) -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| "target".into());
    let candidates: Vec<PathBuf> = match &args.plugin_dir {
        Some(dir) => vec![dir.join(file)],
        None => vec![Path::new("examples/plugins").join(file), target.join("wasm32-wasip2/release").join(file)],
    };
    let hint = match &args.plugin_dir {
        Some(_) => format!("give --plugin-dir the directory that holds {file}"),
        None => "build the plugins first with scripts/setup.sh, or pass --plugin-dir".to_owned(),
    };
    candidates.iter().find(|p| p.is_file()).cloned().with_context(|| {
        let looked = candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        format!("cannot find the plugin {file} (looked at {looked}); {hint}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// A task that fails fails the benchmark: with checkpoints on, a job
    /// file without `[restart]` would restart from the last checkpoint, and
    /// the figure would include the failure and the replay.
    #[test]
    fn the_benchmark_job_checkpoints_but_never_restarts() {
        for workload in ["count", "window"] {
            let args = Command::parse_from(["bench", workload, "--backend", "rocksdb", "-p", "2"]).bench;
            let text = job_file(&args, Path::new("native:count"), Path::new("/tmp/checkpoints"));
            let graph = job::parse(&text, Path::new(""), Overrides { parallelism: Some(2) }).expect("the benchmark job parses");
            assert!(graph.checkpoints.is_some(), "{workload}: checkpoints every second by default");
            assert_eq!(graph.restart.delay_before(1), None, "{workload}: no restart");
        }
    }

    /// `--keys` sets the generator's keys; the window's expected outputs
    /// follow (every event its own key once there are more keys than a
    /// window has events).
    #[test]
    fn keys_set_the_generators_keys_and_the_windows_outputs() {
        let default = Command::parse_from(["bench", "window"]).bench;
        assert!(job_file(&default, Path::new("native:window-sum"), Path::new("/tmp/c")).contains("keys = 1000\n"));
        let many = Command::parse_from(["bench", "count", "--keys", "1000000", "--memory-limit-mb", "2048"]).bench;
        let text = job_file(&many, Path::new("native:count"), Path::new("/tmp/c"));
        assert!(text.contains("keys = 1000000\n"), "{text}");
        let graph = job::parse(&text, Path::new(""), Overrides::default()).expect("the benchmark job parses");
        let job::NodeKind::Operator(operator) = &graph.nodes[1].kind else { panic!("the second node is the operator") };
        assert_eq!(operator.limits.memory_bytes, 2048 << 20);
        assert_eq!(window_outputs(25_000, 1000), 1000 + 1000 + 1000);
        assert_eq!(window_outputs(25_000, 100_000), 25_000);
        assert_eq!(window_outputs(25_000, 7), 21);
    }

    /// A run whose unaligned windows would pass the operator's timer limit
    /// is refused before it starts, with what to do; `--timer-limit`
    /// reaches the job.
    #[test]
    fn unaligned_windows_past_the_timer_limit_are_refused_up_front() {
        // 20 M events at P = 2: 1 000 windows ahead of 1 000 keys, half each.
        assert_eq!(windows_waiting_per_subtask(20_000_000, 1000, 2), 500_000);
        assert_eq!(windows_waiting_per_subtask(200_000_000, 1000, 2), 5_000_000);
        let long = Command::parse_from(["bench", "window", "-p", "2", "--events", "200000000", "--native"]);
        let refused = bench(&long.bench).expect_err("past the limit");
        let message = format!("{refused:#}");
        assert!(message.contains("timer_limit of 1000000") && message.contains("--timer-limit 0"), "{message}");
        let lifted = Command::parse_from(["bench", "window", "-p", "2", "--timer-limit", "0"]).bench;
        let text = job_file(&lifted, Path::new("native:window-sum"), Path::new("/tmp/c"));
        let graph = job::parse(&text, Path::new(""), Overrides { parallelism: Some(2) }).expect("the benchmark job parses");
        let job::NodeKind::Operator(operator) = &graph.nodes[1].kind else { panic!("the second node is the operator") };
        assert_eq!(operator.limits.max_timers, usize::MAX);
    }

    #[test]
    fn max_drift_aligns_the_window_workloads_source() {
        let args = Command::parse_from(["bench", "window", "-p", "2", "--max-drift-ms", "1000"]).bench;
        let text = job_file(&args, Path::new("native:window-sum"), Path::new("/tmp/checkpoints"));
        let graph = job::parse(&text, Path::new(""), Overrides { parallelism: Some(2) }).expect("the benchmark job parses");
        let job::NodeKind::Source(source) = &graph.nodes[0].kind else { panic!("the first node is the source") };
        assert_eq!(source.watermark_alignment().map(|a| a.max_drift_ms), Some(1000));
    }
}
