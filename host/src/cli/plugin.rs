//! `weir plugin check`.

use std::path::Path;

use weir::PluginEngine;
use weir::plugin::WIT_PACKAGE;

pub fn check(path: &Path) -> anyhow::Result<()> {
    let engine = PluginEngine::new()?;
    let (inspection, loaded) = engine.inspect(path)?;
    out!("{}: WebAssembly component", path.display());
    out_text!("{inspection}");
    let loaded = loaded?;
    out!("ok: implements the {WIT_PACKAGE} plugin world (sha256 {})", loaded.digest);
    Ok(())
}
