//! The `weir` command line.

mod bench;
mod plugin;
mod run;
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
    Run {
        /// The job file.
        job: PathBuf,
        /// Parallelism of every source and operator (overrides the job file).
        #[arg(long, short = 'p')]
        parallelism: Option<u32>,
    },
    /// Run a reference workload (shared/bench/WORKLOADS.md) and print its throughput.
    Bench(bench::BenchArgs),
    /// Work with plugin files.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Say whether a file is a component implementing the Weir operator world,
    /// and list what it exports and imports.
    Check {
        /// The plugin file (.wasm).
        plugin: PathBuf,
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
        /// Path of the weir-sdk crate (default: the one this weir was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
}

/// Runs the parsed command line.
pub fn execute(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { job, parallelism } => run::run(&job, parallelism),
        Command::Plugin { command: PluginCommand::Check { plugin } } => plugin::check(&plugin),
        Command::Plugin { command: PluginCommand::New { name, lang, dir, sdk } } => {
            scaffold::new_plugin(lang, &name, &dir, sdk.as_deref())
        }
        Command::Bench(args) => bench::bench(&args),
    }
}
