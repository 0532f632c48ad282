//! `weir run`.

use std::path::Path;

use weir::job::{self, Overrides};
use weir::{PluginEngine, run_job};

pub fn run(job_file: &Path, parallelism: Option<u32>) -> anyhow::Result<()> {
    let graph = job::load(job_file, Overrides { parallelism })?;
    let engine = PluginEngine::new()?;
    let summary = run_job(&graph, &engine)?;
    if summary.already_finished {
        let dir = graph.checkpoints.as_ref().map(|c| c.dir.display().to_string()).unwrap_or_default();
        eprintln!(
            "job `{}` had already finished (checkpoint {} in {dir}); nothing to do. \
             To run it again from the start, delete that directory.",
            summary.name,
            summary.restored_from.unwrap_or_default()
        );
        return Ok(());
    }
    if let Some(checkpoint) = summary.restored_from {
        eprintln!("job `{}` resumed from checkpoint {checkpoint}", summary.name);
    }
    eprintln!(
        "job `{}` finished in {:.2} s: {} events read, {} written{}",
        summary.name,
        summary.duration.as_secs_f64(),
        summary.records_read(),
        summary.records_written(),
        match summary.restarts {
            0 => String::new(),
            n => format!(" ({n} restart(s) after failures)"),
        }
    );
    eprintln!("peak memory: {}", super::peak_memory().unwrap_or_else(|| "unknown".into()));
    if !summary.checkpoints.is_empty() {
        eprintln!("{}", super::checkpoint_figures(&summary.checkpoints));
    }
    Ok(())
}
