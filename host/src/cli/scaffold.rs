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
    if language != Language::Rust {
        bail!("scaffolding {language:?} plugins is not supported yet; only --lang rust is (see docs/plugin-guide.md for the contract)");
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("plugin name {name:?} must be letters, digits, '-' or '_'");
    }
    let project = dir.join(name);
    if project.exists() {
        bail!("{} already exists; choose another name or directory", project.display());
    }
    let sdk = sdk_path(sdk)?;
    std::fs::create_dir_all(project.join("src")).with_context(|| format!("cannot create {}", project.display()))?;
    let files = [
        ("Cargo.toml", cargo_toml(name, &sdk)),
        ("src/lib.rs", LIB_RS.to_owned()),
        ("README.md", readme(name)),
        (".gitignore", "/target/\n".to_owned()),
    ];
    for (file, contents) in files {
        let path = project.join(file);
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("created {} — build it with:", project.display());
    println!("  cd {} && cargo build --release --target wasm32-wasip2", project.display());
    Ok(())
}

/// The SDK crate to depend on: `--sdk`, else the one this binary was built from.
fn sdk_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk"),
    };
    path.join("Cargo.toml")
        .is_file()
        .then(|| path.canonicalize())
        .transpose()?
        .with_context(|| format!("no weir-sdk crate at {}; pass --sdk PATH to the guest-sdk directory", path.display()))
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
