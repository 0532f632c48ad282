//! `weir plugin check`.

use std::path::Path;

use weir::PluginEngine;
use weir::plugin::{CallError, Limits, WIT_PACKAGE};

pub fn check(path: &Path) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let (inspection, loaded) = engine.inspect(path)?;
    out!("{}: WebAssembly component", path.display());
    out_text!("{inspection}");
    let loaded = loaded?;
    loaded.check_types().map_err(|error| match error {
        // The reason says so, and to rebuild the plugin against the WIT.
        CallError::Instantiate(reason) if reason.contains(WIT_PACKAGE) => anyhow::anyhow!("{}: {reason}", path.display()),
        other => anyhow::anyhow!(
            "{}: it fails as it starts, before any call, under the limits of a job's operator by default \
             (memory_limit_mb = {}, call_timeout_ms = {}): {other}",
            path.display(),
            Limits::DEFAULT_MEMORY_MB,
            Limits::DEFAULT_CALL_TIMEOUT_MS
        ),
    })?;
    out!("ok: implements the {WIT_PACKAGE} plugin world (sha256 {})", loaded.digest);
    Ok(())
}
