//! `weir plugin new`: a ready-to-build plugin project.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
}

/// Creates `dir/name`, a plugin project for `language`.
pub fn new_plugin(language: Language, name: &str, dir: &Path, sdk: Option<&Path>) -> anyhow::Result<()> {
    // Cargo's rule for package names, which the Rust project's name is.
    let starts_with_letter = name.starts_with(|c: char| c.is_ascii_alphabetic());
    if !starts_with_letter || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("plugin name {name:?} must start with a letter and be letters, digits, '-' or '_'");
    }
    if name.replace('_', "-") == "weir-sdk" {
        bail!("plugin name {name:?} is the SDK's own (the project depends on it); choose another");
    }
    let project = dir.join(name);
    if project.exists() {
        bail!("{} already exists; choose another name or directory", project.display());
    }
    let weir = weir_root(sdk)?;
    std::fs::create_dir_all(&project).with_context(|| format!("cannot create {}", project.display()))?;
    let placed = project.canonicalize().with_context(|| format!("cannot resolve {}", project.display()))?;
    let (files, build) = match language {
        Language::Rust => rust_project(name, &sdk_path_from(&placed, &weir.join("guest-sdk"))),
        Language::Python => python_project(name, &weir),
        Language::Js => js_project(name, &weir),
    };
    for (file, contents) in files {
        let path = project.join(file);
        std::fs::create_dir_all(path.parent().expect("inside the project"))
            .with_context(|| format!("cannot create {}", project.display()))?;
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))?;
    }
    out!("created {} — build it with:", project.display());
    out!("  cd {} && {build}", project.display());
    Ok(())
}

/// A project's files (path, contents) and its build command.
type Project = (Vec<(String, String)>, String);

fn rust_project(name: &str, sdk: &Path) -> Project {
    let files = [
        ("Cargo.toml", cargo_toml(name, sdk)),
        ("src/lib.rs", LIB_RS.to_owned()),
        ("README.md", readme(name)),
        (".gitignore", "/target/\n".to_owned()),
    ];
    (files.map(|(f, c)| (f.to_owned(), c)).into(), "cargo build --release --target wasm32-wasip2".to_owned())
}

fn python_project(name: &str, weir: &Path) -> Project {
    let wasm = format!("{}.wasm", name.replace('-', "_"));
    let build = format!("{}/scripts/build-python-plugin.sh . {wasm}", weir.display());
    let files = [
        ("app.py".to_owned(), APP_PY.to_owned()),
        ("README.md".to_owned(), other_readme(name, "Python", "app.py", &build, &wasm)),
        (".gitignore".to_owned(), "*.wasm\n__pycache__/\n".to_owned()),
    ];
    (files.into(), build)
}

fn js_project(name: &str, weir: &Path) -> Project {
    let (source, wasm) = (format!("{name}.js"), format!("{}.wasm", name.replace('-', "_")));
    let build = format!("{}/scripts/build-js-plugin.sh {source} {wasm}", weir.display());
    let files = [
        ("README.md".to_owned(), other_readme(name, "JavaScript", &source, &build, &wasm)),
        (source, PLUGIN_JS.to_owned()),
        (".gitignore".to_owned(), "*.wasm\n".to_owned()),
    ];
    (files.into(), build)
}

fn other_readme(name: &str, language: &str, source: &str, build: &str, wasm: &str) -> String {
    format!(
        r#"# {name}

A Weir operator plugin in {language} (`{source}`). Build it into a
WebAssembly component with

    {build}

(the first build installs the toolchain under ~/.cache/weir-tools), check
it with

    weir plugin check {wasm}

and use it in a job file:

```toml
[[operator]]
uid = "{name}"
plugin = "{wasm}"
inputs = ["your-source"]
key_by = true{memory}
```

The contract is in Weir's docs/plugin-guide.md; the SDK's API in Weir's
guest-sdk/{sdk}/README.md.
"#,
        sdk = if language == "Python" { "python" } else { "js" },
        // CPython in Wasm needs 512 MiB (plugin guide): said in the job so
        // that it stays so whatever the default.
        memory = if language == "Python" { "\nmemory_limit_mb = 512" } else { "" }
    )
}

/// The Weir checkout whose SDKs and build scripts a project uses: the
/// parent of `--sdk` (the guest-sdk directory); else the checkout the
/// command is run in (the current directory or one above it); else the one
/// the `weir` binary run is in (`bin/weir`, as invoked or as linked to);
/// else the one it was built from.
fn weir_root(sdk: Option<&Path>) -> anyhow::Result<PathBuf> {
    let sdk = match sdk {
        Some(path) => path.to_path_buf(),
        None => nearest_checkout().unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).join("guest-sdk"),
    };
    sdk.join("Cargo.toml")
        .is_file()
        .then(|| sdk.canonicalize())
        .transpose()?
        .and_then(|sdk| sdk.parent().map(Path::to_path_buf))
        .with_context(|| format!("no weir-sdk at {}; pass --sdk PATH to Weir's guest-sdk directory", sdk.display()))
}

/// The nearest directory that holds Weir's SDK, from the current one up,
/// else from the binary's up.
fn nearest_checkout() -> Option<PathBuf> {
    let invoked = std::env::args_os().next().map(|arg0| weir::dirs::absolute(Path::new(&arg0)));
    let starts = [std::env::current_dir().ok(), invoked, std::env::current_exe().ok()];
    starts.into_iter().flatten().find_map(|start| checkout_around(&start))
}

/// The nearest directory from `start` up that holds Weir's SDK.
fn checkout_around(start: &Path) -> Option<PathBuf> {
    let holds_sdk = |dir: &&Path| {
        let manifest = std::fs::read_to_string(dir.join("guest-sdk/Cargo.toml")).unwrap_or_default();
        manifest.lines().any(|line| line.replace(' ', "") == "name=\"weir-sdk\"")
    };
    start.ancestors().find(holds_sdk).map(Path::to_path_buf)
}

/// How the project at `project` refers to `sdk`: relative when both are in
/// one checkout (which then can move), else absolute.
fn sdk_path_from(project: &Path, sdk: &Path) -> PathBuf {
    let Some(weir) = sdk.parent() else { return sdk.to_path_buf() };
    let Ok(inside) = project.strip_prefix(weir) else { return sdk.to_path_buf() };
    let up: PathBuf = inside.components().map(|_| "..").collect();
    up.join("guest-sdk")
}

fn cargo_toml(name: &str, sdk: &Path) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

# Its own workspace, so that it builds wherever it is put.
[workspace]

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
weir-sdk = {{ path = {sdk:?} }}

[profile.release]
strip = true
# One codegen unit: LLVM inlines across the SDK's layers (faster plugin).
codegen-units = 1
"#,
        sdk = sdk.display().to_string()
    )
}

fn readme(name: &str) -> String {
    let file = name.replace('-', "_");
    format!(
        r#"# {name}

A Weir operator plugin. Build it with

    cargo build --release --target wasm32-wasip2

(`rustup target add wasm32-wasip2` once), which writes
`target/wasm32-wasip2/release/{file}.wasm`. Check it with

    weir plugin check target/wasm32-wasip2/release/{file}.wasm

and run its unit tests natively with `cargo test`. Use it in a job file:

```toml
[[operator]]
uid = "{name}"
plugin = "target/wasm32-wasip2/release/{file}.wasm"
inputs = ["your-source"]
key_by = true
```

The contract is in Weir's docs/plugin-guide.md.
"#
    )
}

const LIB_RS: &str = r#"//! A Weir operator: counts events per key and emits `(key, count so far)`.
//! Change `process` to do what you need.

use weir_sdk::{Config, Context, Error, Event, Operator, ValueState};

pub struct Plugin {
    seen: ValueState<u64>,
}

impl Operator for Plugin {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        Ok(Plugin { seen: ValueState::new("seen") })
    }

    // Called for every event: `#[inline]` lets it run inside the SDK's
    // loop instead of as a call per event.
    #[inline]
    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        let seen = self.seen.update(ctx, |seen| seen.unwrap_or(0) + 1)?;
        ctx.emit(event.key(), seen);
        Ok(())
    }
}

weir_sdk::export_operator!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    #[test]
    fn counts_per_key() {
        let mut plugin = TestHarness::<Plugin>::new(&[]).unwrap();
        let out = plugin.process(["a", "b", "a"].map(|k| TestEvent::new(k, ""))).unwrap();
        let counts: Vec<String> = out.iter().map(|e| e.value_str()).collect();
        assert_eq!(counts, ["1", "1", "2"]);
    }
}
"#;

const APP_PY: &str = r#""""A Weir operator: counts events per key and emits (key, count so far).
Change `process` to do what you need."""

from weir_sdk import Operator, ValueState, export


class Plugin(Operator):
    def init(self, config):
        self.seen = ValueState("seen")

    def process(self, ctx, event):
        seen = self.seen.get(ctx, 0) + 1
        self.seen.set(ctx, seen)
        ctx.emit(event.key, str(seen).encode())


export(Plugin)
"#;

const PLUGIN_JS: &str = r#"// A Weir operator: counts events per key and emits (key, count so far).
// Change `process` to do what you need.

import { Operator, ValueState, exportOperator } from "weir-sdk";

class Plugin extends Operator {
  init(config) {
    config.allowOnly([]);
    this.seen = new ValueState("seen");
  }

  process(ctx, event) {
    const seen = (this.seen.get(ctx) ?? 0) + 1;
    this.seen.set(ctx, seen);
    ctx.emit(event.key, seen);
  }
}

export const operator = exportOperator(Plugin);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_inside_the_checkout_refers_to_the_sdk_relatively() {
        let sdk = Path::new("/src/weir/guest-sdk");
        assert_eq!(sdk_path_from(Path::new("/src/weir/plugins/my-op"), sdk), Path::new("../../guest-sdk"));
        assert_eq!(sdk_path_from(Path::new("/home/me/my-op"), sdk), sdk, "elsewhere: the checkout's place");
    }
}
