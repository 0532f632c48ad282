//! `weir run`.

use std::path::Path;

use weir::job::{self, Overrides};
use weir::{PluginEngine, run_job};

pub fn run(job_file: &Path, parallelism: Option<u32>) -> anyhow::Result<()> {
    let graph = job::load(job_file, Overrides { parallelism })?;
    let engine = PluginEngine::new()?;
    let summary = run_job(&graph, &engine)?;
    eprintln!(
        "job `{}` finished in {:.2} s: {} events read, {} written",
        summary.name,
        summary.duration.as_secs_f64(),
        summary.records_read(),
        summary.records_written()
    );
    Ok(())
}
