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
//!
//! The cache is bounded: every plugin built while developing one leaves an
//! entry (a compiled Python or JavaScript plugin is ~100 MB), so after
//! each write the entries used least recently are deleted until the rest
//! fit in `$WEIR_CACHE_MAX_MB` (default 2 GiB). A hit marks its entry as
//! used now (its modification time).
//!
//! An entry ends with a checksum of the compiled code ([`TRAILER`]), checked
//! before wasmtime maps it: wasmtime trusts a serialized component, and a
//! damaged one (a disk error, a crash while the file was written) would
//! crash the host rather than fail to load. A damaged entry is deleted and
//! the plugin compiled again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tracing::{debug, warn};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Ends every entry, followed by the CRC-32 (little-endian) of what
/// precedes it.
const TRAILER: &[u8; 8] = b"weircrc1";

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
        let bytes = std::fs::read(&path).map_err(|error| warn!(path = %path.display(), %error, "cannot read a cache entry")).ok()?;
        let Some(compiled) = checked(&bytes) else {
            warn!(path = %path.display(), "deleting a damaged cache entry (its checksum does not match); compiling the plugin again");
            let _ = std::fs::remove_file(&path);
            return None;
        };
        // SAFETY: the bytes were written by `put` below from
        // `Component::serialize` for an engine with the same compatibility
        // hash, and their checksum matches; the cache directory is the
        // user's own, trusted like the binary itself.
        match unsafe { Component::deserialize(engine, compiled) } {
            Ok(component) => {
                debug!(path = %path.display(), "compiled plugin loaded from the cache");
                // Used now: the last to go when the cache is pruned.
                let _ = std::fs::File::open(&path).and_then(|file| file.set_modified(SystemTime::now()));
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
            let mut bytes = component.serialize().map_err(|e| e.to_string())?;
            let crc = crc32fast::hash(&bytes);
            bytes.extend_from_slice(TRAILER);
            bytes.extend_from_slice(&crc.to_le_bytes());
            let dir = path.parent().expect("cache entries are in a directory");
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            crate::dirs::write_durably(&path, &bytes).map_err(|e| e.to_string())
        };
        if let Err(error) = write() {
            warn!(path = %path.display(), %error, "cannot cache the compiled plugin");
            return;
        }
        if let Some(dir) = path.parent() {
            prune(dir, max_bytes(), &path);
        }
    }
}

/// The compiled code of an entry whose checksum matches.
fn checked(entry: &[u8]) -> Option<&[u8]> {
    let (rest, crc) = entry.split_last_chunk::<4>()?;
    let compiled = rest.strip_suffix(TRAILER)?;
    (crc32fast::hash(compiled) == u32::from_le_bytes(*crc)).then_some(compiled)
}

/// The cache's budget: `$WEIR_CACHE_MAX_MB` MiB, else 2 GiB.
fn max_bytes() -> u64 {
    let mb = std::env::var("WEIR_CACHE_MAX_MB").ok().and_then(|mb| mb.parse::<u64>().ok());
    mb.unwrap_or(2048) * 1024 * 1024
}

/// Deletes the entries of `dir` used least recently (oldest modification
/// time first) until the others fit in `budget` bytes; never `keep`, the
/// entry just written.
fn prune(dir: &Path, budget: u64, keep: &Path) {
    let Ok(listing) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let path = entry.path();
            let metadata = entry.metadata().ok()?;
            let cached = path.extension().is_some_and(|e| e == "cwasm") && metadata.is_file();
            cached.then(|| (metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH), metadata.len(), path))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|(_, size, _)| size).sum();
    entries.sort();
    for (_, size, path) in entries {
        if total <= budget {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            debug!(path = %path.display(), size, "pruned from the compiled-plugin cache");
            total -= size;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Writes an entry of `size` bytes last used `age_s` seconds ago.
    fn entry(dir: &Path, name: &str, size: usize, age_s: u64) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![0u8; size]).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(age_s)).unwrap();
        path
    }

    /// A damaged entry is found before wasmtime maps it (it would crash
    /// the host), deleted, and the plugin compiled again.
    #[test]
    fn a_damaged_entry_is_deleted_and_the_plugin_compiled_again() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ComponentCache { dir: Some(dir.path().into()), engine_hash: 1 };
        // An empty component: the preamble alone.
        let component = Component::from_binary(&engine, b"\0asm\x0d\0\x01\0").unwrap();
        cache.put("abc", &component);
        assert!(cache.get(&engine, "abc").is_some());
        let path = cache.entry("abc").unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(cache.get(&engine, "abc").is_none());
        assert!(!path.exists(), "deleted");
        std::fs::write(&path, b"short").unwrap();
        assert!(cache.get(&engine, "abc").is_none(), "an entry from before checksums, or cut short");
    }

    #[test]
    fn pruning_drops_the_least_recently_used_entries_until_the_rest_fit() {
        let dir = tempfile::tempdir().unwrap();
        let oldest = entry(dir.path(), "a.cwasm", 400, 300);
        let older = entry(dir.path(), "b.cwasm", 400, 200);
        let recent = entry(dir.path(), "c.cwasm", 400, 100);
        let other = entry(dir.path(), "notes.txt", 10_000, 1_000);
        // Just written, yet the oldest by its time: never the one pruned.
        let kept = entry(dir.path(), "d.cwasm", 400, 400);
        prune(dir.path(), 1_000, &kept);
        let left: Vec<bool> = [&oldest, &older, &recent, &other, &kept].iter().map(|p| p.exists()).collect();
        assert_eq!(left, [false, false, true, true, true], "1 000 bytes hold the two most recent entries");
        prune(dir.path(), 10_000, &kept);
        assert!(recent.exists() && kept.exists(), "within the budget nothing goes");
    }
}
