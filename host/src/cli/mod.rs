//! The `weir` command line.

/// `eprintln!` that never panics: a host whose standard error was closed
/// (`weir run … 2>&1 | head`) still finishes its jobs and exits cleanly.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{}", crate::cli::printable(&format!($($arg)*)));
    }};
}

/// `println!` that does not panic: a listing read by `head` stops being
/// written when the pipe closes (the command goes on to its exit status);
/// any other failure to write (a full disk) ends the command with an error.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(error) = writeln!(std::io::stdout(), "{}", crate::cli::printable(&format!($($arg)*))) {
            crate::cli::output_failed(error);
        }
    }};
}

/// [`out!`] for text that ends its own lines (a table), as `print!`.
macro_rules! out_text {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(error) = write!(std::io::stdout(), "{}", crate::cli::printable(&format!($($arg)*))) {
            crate::cli::output_failed(error);
        }
    }};
}

/// `text` as the commands print it: control characters other than line
/// breaks and tabs escaped (`\u{1b}`). What plugins choose — state names,
/// error messages, what they printed — reaches the user's terminal, where
/// escape sequences could clear the screen, forge lines or set its title.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let harmful = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.contains(harmful) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if harmful(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// What [`out!`] does when writing fails.
pub(crate) fn output_failed(error: std::io::Error) {
    if error.kind() != std::io::ErrorKind::BrokenPipe {
        say!("error: cannot write to standard output: {error}");
        std::process::exit(1);
    }
}

mod bench;
mod checkpoints;
mod control;
mod plugin;
mod run;
mod savepoint_inspect;
mod scaffold;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Weir: stream processing with WebAssembly operators.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a job described by a TOML job file, in the foreground.
    Run(run::RunArgs),
    /// List the checkpoints in a job's checkpoint directory, verifying each
    /// against its checksums, with its figures.
    Checkpoints {
        /// The checkpoint directory (`checkpoint_dir` of the job file).
        dir: PathBuf,
    },
    /// Run a reference workload (docs/workloads.md) and print its throughput.
    Bench(bench::BenchArgs),
    /// Work with plugin files.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// List the jobs of a running host (`weir run`).
    Jobs(control::JobsArgs),
    /// Take a savepoint of a running job (`weir savepoint JOB`), or inspect
    /// a savepoint directory (`weir savepoint inspect DIR`).
    Savepoint(control::SavepointArgs),
    /// Cancel a running job.
    Cancel(control::CancelArgs),
    /// Swap the plugin of one operator of a running job, keeping its state.
    Upgrade(control::UpgradeArgs),
    /// Start a new job from a running job or a savepoint, with other
    /// plugins or sinks.
    Fork(control::ForkArgs),
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Say whether a file is a component implementing the Weir operator world,
    /// and list what it exports and imports.
    Check {
        /// The plugin file (.wasm).
        plugin: PathBuf,
        /// The memory cap its start-up code runs under, as an operator's
        /// `memory_limit_mb`.
        #[arg(long, default_value_t = weir::plugin::Limits::DEFAULT_MEMORY_MB, value_parser = clap::value_parser!(u64).range(1..=4096))]
        memory_limit_mb: u64,
        /// The deadline its start-up code runs under, as an operator's
        /// `call_timeout_ms` (0: none).
        #[arg(long, default_value_t = weir::plugin::Limits::DEFAULT_CALL_TIMEOUT_MS)]
        call_timeout_ms: u64,
    },
    /// Create a ready-to-build plugin project.
    New {
        /// The plugin's name (also its directory's).
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum, default_value_t = scaffold::Language::Rust)]
        lang: scaffold::Language,
        /// Where to create the project directory.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Path of the weir-sdk crate (default: the one in the Weir checkout around the current
        /// directory, else the checkout this weir binary is in, else the one it was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
}

/// Runs the parsed command line.
pub fn execute(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Plugin { command: PluginCommand::Check { plugin, memory_limit_mb, call_timeout_ms } } => {
            plugin::check(&plugin, memory_limit_mb, call_timeout_ms)
        }
        Command::Plugin { command: PluginCommand::New { name, lang, dir, sdk } } => {
            scaffold::new_plugin(lang, &name, &dir, sdk.as_deref())
        }
        Command::Bench(args) => bench::bench(&args),
        Command::Checkpoints { dir } => checkpoints::list(&dir),
        Command::Jobs(args) => control::jobs(&args),
        Command::Savepoint(args) => control::savepoint(&args),
        Command::Cancel(args) => control::cancel(&args),
        Command::Upgrade(args) => control::upgrade(&args),
        Command::Fork(args) => control::fork(&args),
    }
}

/// What a run's completed checkpoints took: means (and the longest
/// duration) over the figures its history kept.
pub(crate) struct CheckpointMeans {
    completed: u64,
    /// How many checkpoints the means are over (the history keeps the last few).
    measured: usize,
    duration_ms: f64,
    max_duration_ms: f64,
    alignment_ms: f64,
    size_mib: f64,
    written_mib: f64,
}

impl CheckpointMeans {
    /// `None` if no checkpoint completed.
    pub(crate) fn of(history: &weir::checkpoint::CheckpointHistory) -> Option<Self> {
        let checkpoints = history.figures();
        if checkpoints.is_empty() {
            return None;
        }
        let n = checkpoints.len() as f64;
        let mean = |f: fn(&weir::checkpoint::CheckpointStats) -> f64| checkpoints.iter().map(|(_, s)| f(s)).sum::<f64>() / n;
        const MIB: f64 = 1048576.0;
        Some(CheckpointMeans {
            completed: history.count(),
            measured: checkpoints.len(),
            duration_ms: mean(|s| s.duration_ms),
            max_duration_ms: checkpoints.iter().map(|(_, s)| s.duration_ms).fold(0.0, f64::max),
            alignment_ms: mean(|s| s.alignment_ms),
            size_mib: mean(|s| s.size_bytes as f64) / MIB,
            written_mib: mean(|s| s.written_bytes as f64) / MIB,
        })
    }

    /// The figures as `key=value` fields of a `RESULT` line, each after a space.
    pub(crate) fn result_fields(&self) -> String {
        format!(
            " checkpoint_ms_mean={:.1} checkpoint_ms_max={:.1} checkpoint_mib_mean={:.2} checkpoint_written_mib_mean={:.2}",
            self.duration_ms, self.max_duration_ms, self.size_mib, self.written_mib
        )
    }
}

/// The checkpoint figures of a run, for people.
pub(crate) fn checkpoint_figures(history: &weir::checkpoint::CheckpointHistory) -> String {
    let failed = match history.failed() {
        0 => String::new(),
        n => format!("; {n} failed (the log says why)"),
    };
    let Some(c) = CheckpointMeans::of(history) else {
        return format!("checkpoints: none completed{failed}");
    };
    let over = if c.completed > c.measured as u64 { format!(" (figures of the last {})", c.measured) } else { String::new() };
    format!(
        "checkpoints: {} completed{over}; duration mean {:.1} ms (max {:.1}), alignment mean {:.1} ms, \
         size mean {:.2} MiB, written mean {:.2} MiB{failed}",
        c.completed, c.duration_ms, c.max_duration_ms, c.alignment_ms, c.size_mib, c.written_mib
    )
}

/// The process's peak resident memory, from /proc (Linux).
pub(crate) fn peak_memory() -> Option<String> {
    peak_memory_mib().map(|mib| format!("{mib:.1} MiB"))
}

/// The process's peak resident memory in MiB (Linux's `VmHWM`).
pub(crate) fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::printable;

    /// A plugin's text reaches the terminal without its escape sequences
    /// (the sandbox audit cleared the screen and forged a "checksum ok"
    /// line through a state name and an error message).
    #[test]
    fn text_a_plugin_chose_is_printed_without_escape_sequences() {
        assert_eq!(printable("one\n\ttwo"), "one\n\ttwo");
        assert_eq!(printable("\u{1b}[2Jcleared\r"), "\\u{1b}[2Jcleared\\u{d}");
    }
}
