#!/usr/bin/env bash
# Installs what a fresh machine lacks, builds the `weir` host and the example
# plugins, and copies the plugins next to the example jobs.
#
#   scripts/setup.sh
#
# Set CARGO_TARGET_DIR to reuse a build directory.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

bash scripts/install-deps.sh

log "building the weir host (release; the first build compiles wasmtime and RocksDB and takes 15-20 minutes)"
cargo build --release -p weir --bin weir

log "building the example plugins for wasm32-wasip2"
plugins=(tokenize word-count amplifier rules-filter sensor-window faulty fraud-detector fraud-detector-v2 fraud-detector-incompatible shopping-cart count-window dedup)
cargo build --release --target wasm32-wasip2 "${plugins[@]/#/-p}"

target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p examples/plugins
for plugin in "${plugins[@]}"; do
    cp "$target_dir/wasm32-wasip2/release/${plugin//-/_}.wasm" examples/plugins/
done
mkdir -p bin
ln -sf "$(cd "$target_dir" && pwd)/release/weir" bin/weir
log "ready: bin/weir, plugins in examples/plugins/"
