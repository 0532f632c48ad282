//! The wasmtime engine, the linker and the cache of compiled plugins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, OptLevel};

use super::bindings::PluginPre;
use super::broadcast::BroadcastAccess;
use super::cache::ComponentCache;
use super::clocks::DeadlineClocksAccess;
use super::timers::TimersAccess;
use super::error::{CallError, PluginError};
use super::host_state::PluginState;
use super::inspect::{self, Inspection};
use super::limits::{EpochTicker, Limits};
use super::state::KeyedStateAccess;

/// A compiled plugin, checked against the world and ready to instantiate.
#[derive(Clone)]
pub struct LoadedPlugin {
    pub path: PathBuf,
    /// Hex SHA-256 of the file: identifies the code in snapshots and logs.
    pub digest: String,
    pub(crate) pre: PluginPre<PluginState>,
}

impl LoadedPlugin {
    /// Whether the plugin's compiled code carries wasmtime's epoch checks,
    /// without which a call deadline cannot interrupt it: read from the
    /// engine that compiled it.
    pub fn checks_deadlines(&self) -> bool {
        self.pre.engine().get_epoch_interruption()
    }

    /// Instantiates the plugin in a scratch store, calling none of its
    /// functions: the types of its exports are checked then (loading checks
    /// their names), so a plugin whose `process` takes a string where the
    /// world has a record is refused here, not when a job starts it. Its
    /// core modules' start functions run, under `limits` (an operator's).
    pub fn check_types(&self, limits: &Limits) -> Result<(), CallError> {
        super::instance::check_instantiates(self, limits)
    }
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin").field("path", &self.path).field("digest", &self.digest).finish()
    }
}

/// One per host process: compiles plugins once and links them to the host's
/// implementation of the WIT imports.
///
/// Plugins are compiled with wasmtime's epoch checks (a counter compared in
/// every function entry and loop header), which enforce the call deadlines.
/// An operator without a deadline (`call_timeout_ms = 0`, a trusted plugin)
/// gets its plugin from a second engine, made on first use, that compiles
/// without them: 3–4 % fewer instructions, 6–10 % less operator time on
/// the reference workloads (docs/benchmarks.md).
pub struct PluginEngine {
    checked: Compiler,
    /// Its creation's error, if it failed.
    unchecked: OnceLock<Result<Compiler, String>>,
    _ticker: EpochTicker,
}

/// An engine, its linker and its caches of compiled plugins.
struct Compiler {
    engine: Engine,
    linker: Linker<PluginState>,
    cache: Mutex<RecentPlugins<LoadedPlugin>>,
    compiled: ComponentCache,
}

/// The plugins loaded last, by digest: a job's restarts, upgrades and forks
/// load the same few again and again. At most [`RecentPlugins::CAPACITY`]:
/// a host that is given a new build at every deploy must not keep every
/// build's code (and its memory image) for its life. A job holds its own
/// clone of what it runs, so dropping one here frees it only once no job
/// runs it; loading it again reads the compiled code from the disk cache.
struct RecentPlugins<P> {
    entries: HashMap<String, (P, u64)>,
    uses: u64,
}

impl<P: Clone> RecentPlugins<P> {
    const CAPACITY: usize = 8;

    fn new() -> Self {
        RecentPlugins { entries: HashMap::new(), uses: 0 }
    }

    fn get(&mut self, digest: &str) -> Option<P> {
        self.uses += 1;
        let uses = self.uses;
        self.entries.get_mut(digest).map(|(loaded, last)| {
            *last = uses;
            loaded.clone()
        })
    }

    fn insert(&mut self, digest: String, loaded: P) {
        self.uses += 1;
        self.entries.insert(digest, (loaded, self.uses));
        while self.entries.len() > Self::CAPACITY {
            let oldest = self.entries.iter().min_by_key(|(_, (_, last))| *last).map(|(digest, _)| digest.clone());
            oldest.map(|digest| self.entries.remove(&digest));
        }
    }
}

impl PluginEngine {
    pub fn new() -> Result<Arc<Self>, PluginError> {
        let checked = Compiler::new(true)?;
        let ticker = EpochTicker::start(checked.engine.clone());
        Ok(Arc::new(PluginEngine { checked, unchecked: OnceLock::new(), _ticker: ticker }))
    }

    /// Reads, compiles and checks the plugin at `path`; compiled plugins are
    /// cached by content, so loading the same file again is cheap.
    pub fn load(&self, path: &Path) -> Result<LoadedPlugin, PluginError> {
        self.checked.load(path)
    }

    /// [`load`](Self::load) for an operator with `limits`: without a call
    /// deadline, compiled without the checks that enforce one.
    pub fn load_for(&self, path: &Path, limits: &Limits) -> Result<LoadedPlugin, PluginError> {
        if limits.call_timeout.is_some() {
            return self.checked.load(path);
        }
        match self.unchecked.get_or_init(|| Compiler::new(false).map_err(|e| e.to_string())) {
            Ok(unchecked) => unchecked.load(path),
            Err(message) => Err(internal(message.clone())),
        }
    }

    /// Compiles and inspects the plugin at `path`; the inspection is
    /// returned even when the component does not fit the world (for `weir
    /// plugin check`).
    pub fn inspect(&self, path: &Path) -> Result<(Inspection, Result<LoadedPlugin, PluginError>), PluginError> {
        self.checked.inspect(path)
    }
}

impl Compiler {
    fn new(epoch_checks: bool) -> Result<Self, PluginError> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(epoch_checks)
            // Synchronous calls only: a component call costs ~170 ns instead
            // of ~550 ns with the concurrency machinery set up.
            .concurrency_support(false)
            .cranelift_opt_level(OptLevel::Speed);
        // `WEIR_PROFILE=perfmap` names JIT-compiled plugin functions for `perf`.
        if std::env::var_os("WEIR_PROFILE").is_some_and(|v| v == "perfmap") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(|e| internal(format!("cannot create the engine: {e}")))?;
        let linker = Self::linker(&engine)?;
        let compiled = ComponentCache::new(&engine);
        Ok(Compiler { engine, linker, cache: Mutex::new(RecentPlugins::new()), compiled })
    }

    fn linker(engine: &Engine) -> Result<Linker<PluginState>, PluginError> {
        let mut linker = Linker::new(engine);
        let link = |r: wasmtime::Result<()>| r.map_err(|e| internal(format!("cannot link host functions: {e}")));
        link(wasmtime_wasi::p2::add_to_linker_sync(&mut linker))?;
        // Sleeps bounded by the call's deadline, in place of WASI's own.
        linker.allow_shadowing(true);
        link(wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<_, DeadlineClocksAccess>(
            &mut linker,
            PluginState::clocks,
        ))?;
        linker.allow_shadowing(false);
        link(super::bindings::weir::operator::types::add_to_linker::<_, HasSelf<PluginState>>(&mut linker, |s| s))?;
        link(super::bindings::weir::operator::state::add_to_linker::<_, KeyedStateAccess>(
            &mut linker,
            PluginState::keyed_state,
        ))?;
        link(super::bindings::weir::operator::broadcast_state::add_to_linker::<_, BroadcastAccess>(
            &mut linker,
            PluginState::broadcast_state,
        ))?;
        link(super::bindings::weir::operator::timers::add_to_linker::<_, TimersAccess>(&mut linker, PluginState::timers))?;
        Ok(linker)
    }

    fn load(&self, path: &Path) -> Result<LoadedPlugin, PluginError> {
        let bytes = read_plugin(path)?;
        let digest = sha256_hex(&bytes);
        if let Some(loaded) = self.cache.lock().expect("plugin cache lock").get(&digest) {
            return Ok(LoadedPlugin { path: path.into(), ..loaded });
        }
        let loaded = self.analyse(path, &bytes, digest.clone())?.1?;
        self.cache.lock().expect("plugin cache lock").insert(digest, loaded.clone());
        Ok(loaded)
    }

    fn inspect(&self, path: &Path) -> Result<(Inspection, Result<LoadedPlugin, PluginError>), PluginError> {
        let bytes = read_plugin(path)?;
        let digest = sha256_hex(&bytes);
        self.analyse(path, &bytes, digest)
    }

    /// Compiles a component, describes it, and links it if it fits the world.
    fn analyse(
        &self,
        path: &Path,
        bytes: &[u8],
        digest: String,
    ) -> Result<(Inspection, Result<LoadedPlugin, PluginError>), PluginError> {
        let component = match self.compiled.get(&self.engine, &digest) {
            Some(component) => component,
            None => {
                let component = self.component(path, bytes)?;
                self.compiled.put(&digest, &component);
                component
            }
        };
        let inspection = inspect::describe(&self.engine, &component);
        let loaded = self.link(path, component, digest, &inspection);
        Ok((inspection, loaded))
    }

    fn component(&self, path: &Path, bytes: &[u8]) -> Result<Component, PluginError> {
        inspect::check_header(path, bytes)?;
        Component::new(&self.engine, bytes)
            .map_err(|e| PluginError::Invalid { path: path.into(), message: format!("{e:#}") })
    }

    fn link(
        &self,
        path: &Path,
        component: Component,
        digest: String,
        inspection: &Inspection,
    ) -> Result<LoadedPlugin, PluginError> {
        inspection.check_world(path)?;
        let wrong_world = |e: wasmtime::Error| inspection.wrong_world(path, format!("{e:#}"));
        let instance_pre = self.linker.instantiate_pre(&component).map_err(|error| {
            let reason = format!("{error:#}");
            // The linker names the import it has nothing for.
            match inspection.imports.iter().find(|import| reason.contains(&format!("`{}`", import.name))) {
                Some(import) => PluginError::UnavailableImport { path: path.into(), import: import.name.clone(), reason },
                None => wrong_world(error),
            }
        })?;
        let pre = PluginPre::new(instance_pre).map_err(wrong_world)?;
        Ok(LoadedPlugin { path: path.into(), digest, pre })
    }
}

fn internal(message: String) -> PluginError {
    PluginError::Invalid { path: PathBuf::from("<host>"), message }
}

/// The SHA-256 digest of `bytes` in hex, as plugins and job files are named
/// in manifests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The largest plugin file the host reads (a Python component is ~20 MiB).
const MAX_PLUGIN_BYTES: u64 = 1 << 30;

/// The bytes of the plugin file at `path`.
fn read_plugin(path: &Path) -> Result<Vec<u8>, PluginError> {
    crate::dirs::read_file_of_at_most(path, MAX_PLUGIN_BYTES).map_err(|source| PluginError::Read { path: path.into(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host given a new build at every deploy keeps the last few, not
    /// every one: the least recently loaded goes first.
    #[test]
    fn only_the_plugins_loaded_last_are_kept() {
        let mut recent = RecentPlugins::new();
        for build in 0..20 {
            recent.insert(format!("build-{build}"), build);
            assert_eq!(recent.get("build-0"), Some(0), "loaded again and again, so kept");
        }
        assert_eq!(recent.entries.len(), RecentPlugins::<i32>::CAPACITY);
        assert_eq!(recent.get("build-19"), Some(19));
        assert_eq!(recent.get("build-5"), None, "an old build is dropped");
    }
}
