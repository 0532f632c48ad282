//! Shared by the integration tests: builds the example plugins from source
//! (once per test binary), runs jobs through the `weir` binary in temporary
//! directories.

#![allow(dead_code)]

pub mod carts;
pub mod groups;
pub mod kafka;
pub mod windows;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ is inside the workspace").to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"))
}

fn cargo(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(workspace())
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo {args:?} failed");
}

/// The `weir` binary cargo built for these tests.
pub fn weir_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_weir"))
}

/// The example and test plugins, built for wasm32-wasip2 from source.
pub const PLUGINS: [&str; 12] = [
    "tokenize",
    "word-count",
    "faulty",
    "amplifier",
    "rules-filter",
    "sensor-window",
    "fraud-detector",
    "fraud-detector-v2",
    "fraud-detector-incompatible",
    "shopping-cart",
    "count-window",
    "dedup",
];

/// The path of plugin `name` (a crate under plugins/), built from source.
pub fn plugin(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let mut args = vec!["build", "--release", "--target", "wasm32-wasip2"];
        for plugin in PLUGINS {
            args.extend(["-p", plugin]);
        }
        cargo(&args);
        target_dir().join("wasm32-wasip2").join("release")
    });
    dir.join(format!("{}.wasm", name.replace('-', "_")))
}

/// A temporary directory holding a job file and its data.
pub struct JobDir {
    pub dir: tempfile::TempDir,
}

impl JobDir {
    pub fn new() -> Self {
        JobDir { dir: tempfile::tempdir().expect("create a temporary directory") }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write a test file");
        path
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).expect("read an output file")
    }
}

/// What a `weir` run did.
pub struct Run {
    pub output: Output,
    pub took: Duration,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Asserts that weir failed cleanly (exit code 1, not a crash) and
    /// returns its error message (from the `error:` line to the end).
    pub fn failure(&self) -> String {
        assert_eq!(
            self.output.status.code(),
            Some(1),
            "weir should fail with exit code 1; stderr: {}",
            self.stderr()
        );
        let stderr = self.stderr();
        let start = stderr.find("error: ").unwrap_or_else(|| panic!("no error line in: {stderr}"));
        let host_panicked = stderr
            .lines()
            .any(|l| (l.starts_with("thread 'main'") || l.starts_with("thread 'weir-")) && l.contains("panicked"));
        assert!(!host_panicked, "weir panicked: {stderr}");
        stderr[start..].to_owned()
    }

    pub fn success(&self) -> &Self {
        assert!(self.output.status.success(), "weir failed: {}", self.stderr());
        self
    }
}

/// The jobs' log level: warnings, or `WEIR_TEST_LOG` (e.g. `info` to
/// see every checkpoint and commit of a failing test).
pub fn log_level() -> String {
    std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "warn".to_owned())
}

/// Runs `weir` with `args`.
pub fn weir(args: &[&str]) -> Run {
    let started = Instant::now();
    let output = Command::new(weir_binary())
        .args(args)
        .env("WEIR_LOG", log_level())
        .output()
        .expect("run weir");
    Run { output, took: started.elapsed() }
}

/// Runs the job file `job` with `weir run`.
pub fn run_job(job: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["run", job.to_str().expect("UTF-8 path")];
    args.extend_from_slice(extra);
    weir(&args)
}

/// TOML for a string path.
pub fn toml_path(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("UTF-8 path"))
}


/// The amplifier job: `readings` (a generator of `events` sensor readings,
/// key = i mod 1000, at `rate` per second, two subtasks) and `control` (a
/// file setting the factors of sensors 900 and 901 to 10 and 0.5) into the
/// keyed two-input `amplifier`, then the sink `out` (TOML given). `header`
/// goes at the top of the job file.
pub fn amplifier_job(dir: &JobDir, header: &str, events: u64, rate: u64, sink: &str) -> PathBuf {
    dir.write("control.jsonl", "{\"key\":\"900\",\"value\":\"10\"}\n{\"key\":\"901\",\"value\":\"0.5\"}\n");
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "amplify"
parallelism = 2
{header}

[[source]]
name = "readings"
type = "generator"
events = {events}
keys = 1000
rate = {rate}

[[source]]
name = "control"
type = "file"
path = "control.jsonl"
format = "json"

[[operator]]
uid = "amplifier"
plugin = {plugin}
inputs = ["readings", "control"]
key_by = true

[[sink]]
name = "out"
input = "amplifier"
{sink}
"#,
            plugin = toml_path(&plugin("amplifier"))
        ),
    )
}

/// Builds a Python or JavaScript plugin with its build script (once per
/// test binary and output name) into the test build directory.
pub fn build_plugin(script: &str, source: &Path, name: &str) -> PathBuf {
    build_plugin_with_env(script, source, name, &[])
}

/// [`build_plugin`] with environment variables `env` set for the script.
pub fn build_plugin_with_env(script: &str, source: &Path, name: &str, env: &[(&str, &str)]) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let out = target_dir().join("other-languages").join(format!("{name}.wasm"));
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().unwrap();
    if !built.contains(&name.to_owned()) {
        let status = Command::new("bash")
            .arg(workspace().join("scripts").join(script))
            .arg(source)
            .arg(&out)
            .envs(env.iter().copied())
            .status()
            .expect("run a plugin build script");
        assert!(status.success(), "{script} {} failed", source.display());
        built.push(name.to_owned());
    }
    out
}

/// The Python plugin `plugins/python/NAME`, built.
pub fn python_plugin(name: &str) -> PathBuf {
    build_plugin("build-python-plugin.sh", &workspace().join("plugins/python").join(name), &format!("{name}-py"))
}

/// The JavaScript plugin `plugins/js/NAME/NAME.js`, built.
pub fn js_plugin(name: &str) -> PathBuf {
    let source = workspace().join("plugins/js").join(name).join(format!("{name}.js"));
    build_plugin("build-js-plugin.sh", &source, &format!("{name}-js"))
}

/// [`js_plugin`] built without ahead-of-time compilation (`WEIR_JS_AOT=0`):
/// the engine's plain interpreter runs the plugin.
pub fn js_plugin_interpreted(name: &str) -> PathBuf {
    let source = workspace().join("plugins/js").join(name).join(format!("{name}.js"));
    build_plugin_with_env("build-js-plugin.sh", &source, &format!("{name}-js-interpreted"), &[("WEIR_JS_AOT", "0")])
}

/// A `weir run` in the background, with its control API.
pub struct Host {
    child: Child,
    /// The control API's address, as the host printed it.
    pub api: String,
    stderr: Arc<Mutex<String>>,
}

impl Host {
    /// Starts `weir run JOB EXTRA... --api 127.0.0.1:0` and waits for it to
    /// say where its control API is.
    pub fn start(job: &Path, extra: &[&str]) -> Host {
        Host::start_with_env(job, extra, &[])
    }

    /// [`Host::start`] with environment variables `env` set.
    pub fn start_with_env(job: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Host {
        let mut child = Command::new(weir_binary())
            .arg("run")
            .arg(job)
            .args(extra)
            .args(["--api", "127.0.0.1:0"])
            .envs(env.iter().copied())
            .env("WEIR_LOG", log_level())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir run");
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut api = None;
        for line in lines.by_ref() {
            let line = line.expect("read weir's stderr");
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(rest) = line.strip_prefix("weir: control API on http://") {
                api = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
        }
        let api = api.unwrap_or_else(|| panic!("weir run printed no API address: {}", stderr.lock().unwrap()));
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                log.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Host { child, api, stderr }
    }

    /// Runs `weir ARGS... --api ADDR` against this host.
    pub fn weir(&self, args: &[&str]) -> Run {
        let mut args = args.to_vec();
        args.extend(["--api", &self.api]);
        weir(&args)
    }

    /// Takes a savepoint of job `name` into `dir` (`weir savepoint`); the
    /// command's reply.
    pub fn savepoint(&self, name: &str, dir: &Path) -> String {
        self.weir(&["savepoint", name, "--dir", dir.to_str().expect("a UTF-8 path")]).success().stdout()
    }

    /// Stops job `name` with a savepoint into `dir` (`weir savepoint
    /// --stop`); the command's reply.
    pub fn stop_with_savepoint(&self, name: &str, dir: &Path) -> String {
        self.weir(&["savepoint", name, "--stop", "--dir", dir.to_str().expect("a UTF-8 path")]).success().stdout()
    }

    /// Job `name`'s line in `weir jobs`, if it is listed; `Err` has the
    /// whole listing, for a test's message.
    pub fn job_line(&self, name: &str) -> Result<String, String> {
        let jobs = self.weir(&["jobs"]).success().stdout();
        let line = jobs.lines().find(|l| l.split_whitespace().next() == Some(name)).map(str::to_owned);
        line.ok_or(jobs)
    }

    /// Records read so far by the job `name` (from `weir jobs`; 0 while
    /// the host is still setting it up).
    pub fn records_read(&self, name: &str) -> u64 {
        let line = self.job_line(name).unwrap_or_default();
        line.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Waits until job `name` has read at least `n` records.
    pub fn wait_for_records(&self, name: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.records_read(name) < n {
            assert!(Instant::now() < deadline, "job `{name}` did not read {n} records: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The line of job `name` in `weir jobs` once its `CHECKPOINT` cell
    /// shows a completed checkpoint (`#N SIZE DURATION`).
    pub fn wait_for_checkpoint(&self, name: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = self.job_line(name);
            if let Ok(line) = &line
                && line.contains(" #")
            {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "no checkpoint of `{name}` in `weir jobs`: {}", line.unwrap_or_else(|jobs| jobs));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Everything the host wrote on standard error so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for the host to exit (every job ended).
    pub fn wait(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for weir") {
                std::thread::sleep(Duration::from_millis(50)); // Let the reader drain stderr.
                return (status, self.stderr());
            }
            assert!(Instant::now() < deadline, "weir run did not end: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `job` (named `name`) until it has read `records`, then stops it
/// with a savepoint; the savepoint's directory.
pub fn stopped_with_savepoint(dir: &JobDir, job: &Path, name: &str, records: u64) -> PathBuf {
    let host = Host::start(job, &[]);
    host.wait_for_records(name, records);
    let savepoint = dir.path("sp");
    host.stop_with_savepoint(name, &savepoint);
    let (status, stderr) = host.wait();
    assert!(status.success(), "{stderr}");
    savepoint
}

/// The lines of every committed part file in `dir` (sorted), or of those
/// whose checkpoint is after `after` (with the final parts).
pub fn committed_lines(dir: &Path, after: Option<u64>) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read the output directory") {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(label) = name.strip_prefix("part-").and_then(|rest| rest.split_once('-')).map(|(_, l)| l.to_owned()) else {
            continue;
        };
        let checkpoint = label.parse::<u64>().unwrap_or(u64::MAX);
        if after.is_some_and(|after| checkpoint <= after) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
    lines.sort();
    lines
}

/// Starts `weir run JOB`, its output discarded.
pub fn spawn_quiet(job: &Path) -> Child {
    Command::new(weir_binary())
        .args(["run", job.to_str().unwrap()])
        .env("WEIR_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir")
}

/// A small pseudo-random generator (no dependency, seed printed).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Kills the job with SIGKILL at `kills` random moments while it runs
/// (each 0.3–1 s after a start; the first 0–0.7 s after the job's first
/// completed checkpoint, so that the last run resumes from one however
/// slowly a busy machine starts it), then lets it finish.
pub fn run_with_kills(job: &Path, kills: usize) -> String {
    let mut random = Lcg(printed_seed("kill schedule"));
    for kill in 0..kills {
        let mut child = spawn_quiet(job);
        let delay = if kill == 0 {
            wait_for_a_checkpoint(&job.parent().expect("the job file's directory").join("checkpoints"), &mut child);
            random.below(700)
        } else {
            300 + random.below(700)
        };
        std::thread::sleep(Duration::from_millis(delay));
        let finished = child.try_wait().unwrap();
        assert!(finished.is_none(), "the job ended ({finished:?}) before kill {} of {kills}", kill + 1);
        child.kill().expect("SIGKILL weir");
        child.wait().unwrap();
    }
    let run = run_job(job, &[]);
    run.success();
    run.stderr()
}

/// The complete checkpoints (those with their `_MANIFEST`) in checkpoint
/// directory `dir`, oldest first; none while `dir` does not exist.
pub fn complete_checkpoints(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
    found.retain(|path| path.join("_MANIFEST").is_file());
    found.sort();
    found
}

/// Waits (at most 30 s) until a checkpoint in `dir` is complete, failing if
/// `child` ends first.
pub fn wait_for_a_checkpoint(dir: &Path, child: &mut Child) {
    let started = std::time::Instant::now();
    while complete_checkpoints(dir).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "no checkpoint in 30 s");
        assert!(child.try_wait().unwrap().is_none(), "the job ended before its first checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A seed from the clock, printed (with `what` it seeds) so that a failing
/// run can be repeated.
pub fn printed_seed(what: &str) -> u64 {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("{what} seed: {seed}");
    seed
}

/// Runs `job` (whose transactional sink writes `dir`'s `out`) with `kills`
/// SIGKILLs ([`run_with_kills`]) and checks that its committed output is
/// exactly `expected` (sorted): nothing lost, nothing twice. `what` says
/// what a line must be, for the message.
pub fn assert_exactly_once_under_kills(dir: &JobDir, job: &Path, kills: usize, expected: &[String], what: &str) {
    let stderr = run_with_kills(job, kills);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    let out = committed_lines(&dir.path("out"), None);
    assert_eq!(out.len(), expected.len(), "each line once");
    for (got, want) in out.iter().zip(expected) {
        assert_eq!(got, want, "{what}");
    }
}

/// `many-keys.toml`: a keyed count (`word-count`, operator `count`) of a
/// generator's `events` over `keys` keys into a `discard` sink;
/// `settings` go at the top of the file, `source` and `operator` lines
/// into those tables.
pub fn discarded_count_job(dir: &JobDir, events: u64, keys: u64, settings: &str, source: &str, operator: &str) -> PathBuf {
    dir.write(
        "many-keys.toml",
        &format!(
            r#"
name = "many-keys"
{settings}

[[source]]
name = "numbers"
type = "generator"
events = {events}
keys = {keys}
{source}

[[operator]]
uid = "count"
plugin = {plugin}
inputs = ["numbers"]
key_by = true
{operator}

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
            plugin = toml_path(&plugin("word-count"))
        ),
    )
}

/// Job `name` at parallelism 2 on `backend`: operator `name` (`plugin`,
/// keyed, with `config`, the inside of a TOML inline table) reads
/// `in.jsonl` (JSON lines at 8 000 events/s) and writes the transactional
/// `out` sink, with a checkpoint every 150 ms.
pub fn keyed_file_job(dir: &JobDir, name: &str, backend: &str, plugin: &Path, config: &str) -> PathBuf {
    keyed_file_job_at(dir, name, backend, plugin, config, 8000)
}

/// [`keyed_file_job`] reading `rate` events/s.
pub fn keyed_file_job_at(dir: &JobDir, name: &str, backend: &str, plugin: &Path, config: &str, rate: u64) -> PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "{name}"
parallelism = 2
state_backend = "{backend}"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 150

[[source]]
name = "events"
type = "file"
format = "json"
path = "in.jsonl"
rate = {rate}

[[operator]]
uid = "{name}"
plugin = {plugin}
inputs = ["events"]
key_by = true
config = {{ {config} }}

[[sink]]
name = "out"
type = "files"
path = "out"
input = "{name}"
"#,
            plugin = toml_path(plugin)
        ),
    )
}
