#!/usr/bin/env bash
# Installs the JavaScript component toolchain for Weir plugins, if missing:
#   @bytecodealliance/componentize-js  (SpiderMonkey-based ESM -> component,
#                                       CLI `componentize-js`)
#   esbuild                            (bundles guest-sdk/js with a plugin)
# into ${WEIR_TOOLS:-$HOME/.cache/weir-tools}/js with `npm install --prefix`;
# with the argument `weval`, the Weval partial evaluator instead, built with
# `cargo install` from crates.io into ${WEIR_TOOLS:-…}/weval (a few minutes,
# once): componentize-js's `--aot` needs it, and its npm package would
# download it from GitHub, which Weir's build machines cannot reach.
#
# With the argument `engine`, it also writes (once) copies of componentize-js's
# JavaScript engines without the engine's own 32 MiB heap cap, so that a
# plugin is bounded by its instance's memory limit (scripts/patch-js-engine.mjs
# says why and how), and prints their directory; scripts/build-js-plugin.sh
# builds with them.
#
# Idempotent: does nothing when the pinned versions are already there.
# Prints the path of the executable on stdout; logs go to stderr. The
# esbuild executable is next to componentize-js (same directory).
#
# Usage: scripts/js-tools.sh            -> prints .../node_modules/.bin/componentize-js
#        scripts/js-tools.sh engine     -> prints .../js/engine (the patched engines)
#        scripts/js-tools.sh weval      -> prints .../weval/bin/weval
set -euo pipefail

# Pinned versions. componentize-js 0.23 rather than jco 1.35's `jco
# componentize` (which needs componentize-js ^0.22): the import bindings 0.22
# generates run an async task's bookkeeping in the interpreter on every call
# into the host, ~55 µs a call, and 0.23's do not (the window workload, a
# map-state read per window, 34.7 s -> 19.0 s for a million events).
COMPONENTIZE_JS_VERSION=0.23.0
ESBUILD_VERSION=0.28.2
# The Weval componentize-js 0.23 is made for (its npm dependency: ^0.5.0).
WEVAL_VERSION=0.5.1

log() { echo "js-tools: $*" >&2; }

command -v node >/dev/null || { log "node is required (Node.js >= 18)"; exit 1; }
command -v npm >/dev/null || { log "npm is required"; exit 1; }

tools="${WEIR_TOOLS:-$HOME/.cache/weir-tools}"

if [[ ${1:-} == weval ]]; then
    weval="$tools/weval/bin/weval"
    if [[ -x $weval && $("$weval" --version 2>/dev/null) == "weval $WEVAL_VERSION" ]]; then
        log "weval $WEVAL_VERSION already in $tools/weval"
    else
        command -v cargo >/dev/null || { log "cargo is required to build weval (https://rustup.rs)"; exit 1; }
        log "building weval $WEVAL_VERSION with cargo into $tools/weval (a few minutes, once)"
        # Its own target directory (a temporary one), not the project's.
        env -u CARGO_TARGET_DIR cargo install weval --version "$WEVAL_VERSION" --locked --root "$tools/weval" >&2
    fi
    echo "$weval"
    exit 0
fi

prefix="$tools/js"
bin="$prefix/node_modules/.bin"
componentize="$bin/componentize-js"

installed_version() { # package dir under node_modules -> version, or nothing
    local manifest="$prefix/node_modules/$1/package.json"
    if [[ -f $manifest ]]; then node -p "require('$manifest').version" 2>/dev/null || true; fi
}

if [[ -x $componentize && -x $bin/esbuild ]] \
    && [[ $(installed_version @bytecodealliance/componentize-js) == "$COMPONENTIZE_JS_VERSION" ]] \
    && [[ $(installed_version esbuild) == "$ESBUILD_VERSION" ]]; then
    log "componentize-js $COMPONENTIZE_JS_VERSION, esbuild $ESBUILD_VERSION already in $prefix"
else
    log "installing componentize-js $COMPONENTIZE_JS_VERSION, esbuild $ESBUILD_VERSION into $prefix"
    mkdir -p "$prefix"
    # A package.json of our own keeps npm from walking up to another project
    # (and replaces one with the overrides earlier versions of this script wrote).
    echo '{ "name": "weir-js-tools", "private": true }' >"$prefix/package.json"
    rm -rf "$prefix/package-lock.json" "$prefix/node_modules"
    npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
        "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION" \
        "esbuild@$ESBUILD_VERSION" >&2
    [[ -x $componentize ]] || { log "npm install finished but $componentize is missing"; exit 1; }
fi

if [[ ${1:-} == engine ]]; then
    engines="$prefix/engine"
    node "$(dirname "${BASH_SOURCE[0]}")/patch-js-engine.mjs" \
        "$prefix/node_modules/@bytecodealliance/componentize-js/lib" "$engines"
    echo "$engines"
    exit 0
fi

echo "$componentize"
