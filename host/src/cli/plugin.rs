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
    loaded.check_types().map_err(|reason| {
        anyhow::anyhow!(
            "{}: its exports do not have the types of the {WIT_PACKAGE} plugin world ({reason}); rebuild it against \
             that WIT (the SDKs do)",
            path.display()
        )
    })?;
    out!("ok: implements the {WIT_PACKAGE} plugin world (sha256 {})", loaded.digest);
    Ok(())
}
