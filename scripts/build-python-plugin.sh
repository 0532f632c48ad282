#!/usr/bin/env bash
# Builds a Weir plugin written in Python into a WebAssembly component.
#
#   scripts/build-python-plugin.sh SRC_DIR OUT.wasm
#
# SRC_DIR holds the plugin's `app.py` (and any modules of its own); the SDK
# (guest-sdk/python/weir_sdk) is put on the path. componentize-py comes from
# scripts/python-tools.sh, which installs it on first use. The component
# targets the world `plugin` of wit/ (weir:operator@0.5.2) and is ~19 MB:
# it embeds a CPython interpreter, snapshotted after importing app.py.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 SRC_DIR OUT.wasm" >&2
    exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$(cd "$1" && pwd)"
out="$2"
if [[ ! -f "$src/app.py" ]]; then
    echo "error: $src/app.py not found (a Python plugin's module is app.py)" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"

componentize_py="$("$root/scripts/python-tools.sh")"

# Build from copies: componentize-py's interpreter writes __pycache__
# directories next to the modules it imports.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sdk" "$work/src"
cp -R "$root/guest-sdk/python/weir_sdk" "$work/sdk/"
cp -R "$src/." "$work/src/"
find "$work" -name __pycache__ -prune -exec rm -rf {} +
# Where componentize-py's mounts (below) came from, so that a traceback at
# run time names the plugin's own files (see weir_sdk/export.py).
python3 -c 'import sys; print("MOUNTS = " + repr({"/0/": sys.argv[1] + "/", "/1/": sys.argv[2] + "/"}))' \
    "$root/guest-sdk/python" "$src" > "$work/sdk/weir_sdk/_built_from.py"

echo "==> building $out from $src/app.py" >&2
# No VIRTUAL_ENV: componentize-py would add that venv's site-packages (the
# build tools) to the plugin's path. Its errors (a syntax error in app.py,
# an import that fails) name the modules by where it mounted them — /0/
# the SDK, /1/ the plugin's directory — so they are named by their own
# paths here; and without its Rust backtrace, which says nothing of the
# plugin (printed when RUST_BACKTRACE is set, as for a Rust toolchain).
if ! env -u VIRTUAL_ENV RUST_LIB_BACKTRACE=0 "$componentize_py" -d "$root/wit" -w plugin componentize \
    -p "$work/sdk" -p "$work/src" app -o "$out" 2> "$work/errors"; then
    sed -e "s|\"/0/|\"$root/guest-sdk/python/|g" -e "s|\"/1/|\"$src/|g" -e "s|(/1/|($src/|g" "$work/errors" >&2
    echo "error: $src/app.py did not build into a plugin (the error above)" >&2
    exit 1
fi
echo "==> $out ($(du -h "$out" | cut -f1))" >&2
