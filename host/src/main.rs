//! The `weir` binary: parses the command line, sets up logging, reports
//! errors. Everything else lives in the library.

mod cli;

use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let (filter, complaint) = log_filter();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A closed or full standard error loses the log, not the jobs: the
        // fallback report of a failed write would panic the thread logging.
        .log_internal_errors(false)
        // Colours only for a person at a terminal, not in logs and pipes.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some(complaint) = complaint {
        tracing::warn!("{complaint}");
    }
    match cli::execute(cli::Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Library errors carry their causes in their own message.
            eprintln!("error: {}", cli::printable(&error.to_string()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The log filter `WEIR_LOG` gives (default `info`), and what is wrong with
/// it, if anything. A word that is not a level is a target to the filter
/// (`WEIR_LOG=bogus` logs module `bogus` only, so nothing at all): unless it
/// names one of Weir's modules, it is taken for a mistake and `info` used.
fn log_filter() -> (EnvFilter, Option<String>) {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    let Ok(setting) = std::env::var("WEIR_LOG") else { return (EnvFilter::new("info"), None) };
    let not_a_level = setting
        .split(',')
        .map(str::trim)
        .find(|d| !d.is_empty() && !d.contains('=') && !LEVELS.contains(&d.to_ascii_lowercase().as_str()) && !d.starts_with("weir"));
    let refused = match (not_a_level, EnvFilter::try_new(&setting)) {
        (None, Ok(filter)) => return (filter, None),
        (Some(word), _) => format!("`{word}` is not a level"),
        (None, Err(error)) => error.to_string(),
    };
    let complaint = format!(
        "WEIR_LOG={setting:?} is not a log filter ({refused}); logging at info. Give a level (trace, debug, info, \
         warn, error) or module=level pairs, such as WEIR_LOG=info,weir::plugin=debug"
    );
    (EnvFilter::new("info"), Some(complaint))
}
