#!/usr/bin/env bash
# Installs the JavaScript component toolchain for Weir plugins, if missing:
#   @bytecodealliance/componentize-js  (SpiderMonkey-based ESM -> component,
#                                       CLI `componentize-js`)
#   esbuild                            (bundles guest-sdk/js with a plugin)
# into ${WEIR_TOOLS:-$HOME/.cache/weir-tools}/js with `npm install --prefix`.
#
# Idempotent: does nothing when the pinned versions are already there.
# Prints the path of the componentize-js executable on stdout; logs go to
# stderr. The esbuild executable is next to it (same directory).
#
# Usage: scripts/js-tools.sh            -> prints .../node_modules/.bin/componentize-js
set -euo pipefail

# Pinned versions. componentize-js 0.23 rather than jco 1.35's `jco
# componentize` (which needs componentize-js ^0.22): the import bindings 0.22
# generates run an async task's bookkeeping in the interpreter on every call
# into the host, ~55 µs a call, and 0.23's do not (the window workload, a
# map-state read per window, 34.7 s -> 19.0 s for a million events).
COMPONENTIZE_JS_VERSION=0.23.0
ESBUILD_VERSION=0.28.2

log() { echo "js-tools: $*" >&2; }

command -v node >/dev/null || { log "node is required (Node.js >= 18)"; exit 1; }
command -v npm >/dev/null || { log "npm is required"; exit 1; }

prefix="${WEIR_TOOLS:-$HOME/.cache/weir-tools}/js"
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

echo "$componentize"
