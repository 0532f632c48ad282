#!/usr/bin/env bash
# Runs the whole test suite: unit tests of the host, the SDK and the plugins,
# and the integration tests, which build the plugins from source and run real
# jobs through the `weir` binary.
#
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi
exec cargo test --release --workspace "$@"
