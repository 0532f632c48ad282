//! An on-disk cache of compiled components, so that starting a job does not
//! compile its plugins again.
//!
//! Entries are named by the SHA-256 of the plugin file and a hash of the
//! engine's compilation settings (wasmtime version, target, flags), so a
//! changed plugin or a new host never uses a stale entry. The directory is
//! `$WEIR_CACHE_DIR`, else `$XDG_CACHE_HOME/weir/components`, else
//! `~/.cache/weir/components`; `WEIR_CACHE_DIR=off` disables the cache.
//! Failures to read or write the cache are logged and otherwise ignored:
//! the plugin is simply compiled.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;

use tracing::{debug, warn};
use wasmtime::Engine;
use wasmtime::component::Component;

pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_hash: u64,
}

impl ComponentCache {
    pub fn new(engine: &Engine) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache { dir: cache_dir(), engine_hash: hasher.finish() }
    }

    fn entry(&self, digest: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{digest}-{:016x}.cwasm", self.engine_hash)))
    }

    /// The compiled component for `digest`, if cached.
    pub fn get(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.entry(digest)?;
        if !path.is_file() {
            return None;
        }
        // SAFETY: the file was written by `put` below from
        // `Component::serialize` for an engine with the same compatibility
        // hash; the cache directory is the user's own, trusted like the
        // binary itself.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => {
                debug!(path = %path.display(), "compiled plugin loaded from the cache");
                Some(component)
            }
            Err(error) => {
                warn!(path = %path.display(), %error, "ignoring an unreadable cache entry");
                None
            }
        }
    }

    /// Stores a compiled component (atomically: temporary file, then rename).
    pub fn put(&self, digest: &str, component: &Component) {
        let Some(path) = self.entry(digest) else { return };
        let write = || -> Result<(), String> {
            let bytes = component.serialize().map_err(|e| e.to_string())?;
            let dir = path.parent().expect("cache entries are in a directory");
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            let temporary = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&temporary, bytes).map_err(|e| e.to_string())?;
            std::fs::rename(&temporary, &path).map_err(|e| e.to_string())
        };
        if let Err(error) = write() {
            warn!(path = %path.display(), %error, "cannot cache the compiled plugin");
        }
    }
}

fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os("WEIR_CACHE_DIR") {
        Some(dir) if dir == "off" => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
            Some(base.join("weir").join("components"))
        }
    }
}
