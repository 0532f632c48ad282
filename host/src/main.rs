//! The `weir` binary: parses the command line, sets up logging, reports
//! errors. Everything else lives in the library.

mod cli;

use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        // A closed or full standard error loses the log, not the jobs: the
        // fallback report of a failed write would panic the thread logging.
        .log_internal_errors(false)
        // Colours only for a person at a terminal, not in logs and pipes.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli::execute(cli::Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Library errors carry their causes in their own message.
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
