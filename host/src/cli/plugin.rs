//! `weir plugin check`.

use std::path::Path;

use weir::PluginEngine;
use weir::plugin::{CallError, Limits, WIT_PACKAGE};

pub fn check(path: &Path, memory_limit_mb: u64, call_timeout_ms: u64) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let (inspection, loaded) = engine.inspect(path)?;
    out!("{}: WebAssembly component", path.display());
    out_text!("{inspection}");
    let loaded = loaded?;
    let limits = Limits {
        memory_bytes: (memory_limit_mb << 20) as usize,
        call_timeout: (call_timeout_ms > 0).then(|| std::time::Duration::from_millis(call_timeout_ms)),
        ..Limits::default()
    };
    loaded.check_types(&limits).map_err(|error| match error {
        // The reason says so, and to rebuild the plugin against the WIT.
        CallError::Instantiate(reason) if reason.contains(WIT_PACKAGE) => anyhow::anyhow!("{}: {reason}", path.display()),
        other => anyhow::anyhow!(
            "{}: it fails as it starts, before any call, under memory_limit_mb = {memory_limit_mb} and \
             call_timeout_ms = {call_timeout_ms} (a job's defaults unless `--memory-limit-mb` and \
             `--call-timeout-ms` say otherwise, as its operator's would): {other}",
            path.display()
        ),
    })?;
    let package = inspection.package().unwrap_or_else(|| WIT_PACKAGE.to_owned());
    out!("ok: implements the {package} plugin world (sha256 {})", loaded.digest);
    Ok(())
}
