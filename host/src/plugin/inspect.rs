//! What a plugin file is, what it imports and exports, and whether it fits
//! the `weir:operator/plugin` world. Behind `weir plugin check`.

use std::fmt;
use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::error::PluginError;

/// The WIT package this host implements.
pub const WIT_PACKAGE: &str = "weir:operator@0.5.2";
/// The interface a plugin must export.
pub const OPERATOR_EXPORT: &str = "weir:operator/operator@0.5.2";
/// The same interface of the earlier versions this host runs too: each
/// version since only added functions to what plugins import (0.5.1:
/// `map-state.entries` and `map-state.clear`; 0.5.2: the states'
/// `open-expiring`), so a plugin built against
/// one imports a subset of what the host provides, and wasmtime links a
/// semver-compatible import (and finds the export) across patch versions.
const COMPATIBLE_EXPORTS: [&str; 2] = ["weir:operator/operator@0.5.0", "weir:operator/operator@0.5.1"];

const WASM_MAGIC: &[u8] = b"\0asm";
/// Bytes 6..8 of a component's header: the "layer" field, 1 for components
/// and 0 for core modules.
const COMPONENT_LAYER: [u8; 2] = [1, 0];

/// Checks the header: WebAssembly at all, and a component rather than a
/// core module.
pub fn check_header(path: &Path, bytes: &[u8]) -> Result<(), PluginError> {
    if bytes.len() < 8 || &bytes[..4] != WASM_MAGIC {
        return Err(PluginError::NotWasm { path: path.into() });
    }
    if bytes[6..8] != COMPONENT_LAYER {
        return Err(PluginError::CoreModule { path: path.into() });
    }
    Ok(())
}

/// A named import or export, with the functions of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub kind: &'static str,
    pub functions: Vec<String>,
}

/// What a component imports and exports.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    pub imports: Vec<Item>,
    pub exports: Vec<Item>,
}

/// Lists a compiled component's imports and exports.
pub fn describe(engine: &Engine, component: &Component) -> Inspection {
    let ty = component.component_type();
    let item = |name: &str, item: &ComponentItem| {
        let (kind, functions) = match item {
            ComponentItem::ComponentInstance(instance) => {
                let functions = instance
                    .exports(engine)
                    .filter(|(_, e)| matches!(e.ty, ComponentItem::ComponentFunc(_)))
                    .map(|(n, _)| n.to_owned())
                    .collect();
                ("interface", functions)
            }
            ComponentItem::ComponentFunc(_) => ("function", Vec::new()),
            ComponentItem::Resource(_) => ("resource", Vec::new()),
            ComponentItem::Type(_) => ("type", Vec::new()),
            _ => ("item", Vec::new()),
        };
        Item { name: name.to_owned(), kind, functions }
    };
    Inspection {
        imports: ty.imports(engine).map(|(n, e)| item(n, &e.ty)).collect(),
        exports: ty.exports(engine).map(|(n, e)| item(n, &e.ty)).collect(),
    }
}

impl Inspection {
    /// Whether the component exports Weir's operator interface, of the
    /// version this host implements.
    pub fn check_world(&self, path: &Path) -> Result<(), PluginError> {
        if self.exports.iter().any(|e| e.name == OPERATOR_EXPORT || COMPATIBLE_EXPORTS.contains(&e.name.as_str())) {
            return Ok(());
        }
        let other_version = self
            .exports
            .iter()
            .chain(&self.imports)
            .find_map(|e| e.name.strip_prefix("weir:operator/").and_then(|rest| rest.split_once('@')))
            .map(|(_, version)| format!("weir:operator@{version}"));
        match other_version {
            Some(found) if found != WIT_PACKAGE => {
                Err(PluginError::VersionMismatch { path: path.into(), found, expected: WIT_PACKAGE.into() })
            }
            _ => Err(self.wrong_world(path, format!("it does not export `{OPERATOR_EXPORT}`"))),
        }
    }

    /// The package version the plugin's operator export is of
    /// (`weir:operator@0.5.0`), once [`Inspection::check_world`] passed.
    pub fn package(&self) -> Option<String> {
        let export = self.exports.iter().find_map(|e| e.name.strip_prefix("weir:operator/operator@"))?;
        Some(format!("weir:operator@{export}"))
    }

    pub fn wrong_world(&self, path: &Path, reason: String) -> PluginError {
        let names = |items: &[Item]| items.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ");
        PluginError::WrongWorld {
            path: path.into(),
            reason,
            exports: names(&self.exports),
            imports: names(&self.imports),
            expected: OPERATOR_EXPORT.into(),
        }
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (title, items) in [("exports", &self.exports), ("imports", &self.imports)] {
            writeln!(f, "{title}:")?;
            for item in items {
                write!(f, "  {} ({})", item.name, item.kind)?;
                if !item.functions.is_empty() {
                    write!(f, ": {}", item.functions.join(", "))?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
