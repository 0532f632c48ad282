#!/usr/bin/env bash
# Installs the JavaScript component toolchain for Weir plugins, if missing:
#   @bytecodealliance/jco              (CLI: `jco componentize`, `jco types`)
#   @bytecodealliance/componentize-js  (SpiderMonkey-based ESM -> component)
#   esbuild                            (bundles guest-sdk/js with a plugin)
# into ${WEIR_TOOLS:-$HOME/.cache/weir-tools}/js with `npm install --prefix`.
#
# Idempotent: does nothing when the pinned versions are already there.
# Prints the path of the jco executable on stdout; logs go to stderr.
# The esbuild executable is next to it (same directory).
#
# Usage: scripts/js-tools.sh            -> prints .../node_modules/.bin/jco
set -euo pipefail

# Pinned versions. componentize-js is the one jco 1.35 depends on (^0.22),
# so npm installs a single copy that both the jco CLI and we use. Wizer is
# pinned to 10.0.0: later releases lack prebuilt binaries for some platforms
# and can make npm refuse the lock file.
JCO_VERSION=1.35.0
COMPONENTIZE_JS_VERSION=0.22.0
ESBUILD_VERSION=0.28.2
WIZER_VERSION=10.0.0
# preview2-shim runs jco's own Wasm tools (WIT parser, splicer) under Node.
# 0.26.1 dropped the default "/" preopen that jco-transpile 0.15 relies on, so
# `jco componentize` and `jco types` fail with "No such file or directory
# (os error 44)"; 0.26.0 (released with jco 1.35.0) works. Forced with npm
# "overrides" in the prefix's package.json.
PREVIEW2_SHIM_VERSION=0.26.0

log() { echo "js-tools: $*" >&2; }

command -v node >/dev/null || { log "node is required (Node.js >= 18)"; exit 1; }
command -v npm >/dev/null || { log "npm is required"; exit 1; }

prefix="${WEIR_TOOLS:-$HOME/.cache/weir-tools}/js"
bin="$prefix/node_modules/.bin"
jco="$bin/jco"

installed_version() { # package dir under node_modules -> version, or nothing
    local manifest="$prefix/node_modules/$1/package.json"
    if [[ -f $manifest ]]; then node -p "require('$manifest').version" 2>/dev/null || true; fi
}

shim_ok() { # every copy of preview2-shim is the pinned one
    local found
    found=$(find "$prefix/node_modules" -path '*/@bytecodealliance/preview2-shim/package.json' \
        -exec node -p "require('{}').version" \; 2>/dev/null | sort -u)
    [[ $found == "$PREVIEW2_SHIM_VERSION" ]]
}

if [[ -x $jco && -x $bin/esbuild ]] \
    && [[ $(installed_version @bytecodealliance/jco) == "$JCO_VERSION" ]] \
    && [[ $(installed_version @bytecodealliance/componentize-js) == "$COMPONENTIZE_JS_VERSION" ]] \
    && [[ $(installed_version esbuild) == "$ESBUILD_VERSION" ]] \
    && shim_ok; then
    log "jco $JCO_VERSION, componentize-js $COMPONENTIZE_JS_VERSION, esbuild $ESBUILD_VERSION already in $prefix"
else
    log "installing jco $JCO_VERSION, componentize-js $COMPONENTIZE_JS_VERSION, esbuild $ESBUILD_VERSION into $prefix"
    mkdir -p "$prefix"
    # A package.json of our own keeps npm from walking up to another project
    # and carries the override of preview2-shim (see above).
    cat >"$prefix/package.json" <<JSON
{
  "name": "weir-js-tools",
  "private": true,
  "overrides": { "@bytecodealliance/preview2-shim": "$PREVIEW2_SHIM_VERSION" }
}
JSON
    rm -f "$prefix/package-lock.json"
    npm install --prefix "$prefix" --save-exact --no-audit --no-fund --loglevel=error \
        "@bytecodealliance/jco@$JCO_VERSION" \
        "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION" \
        "@bytecodealliance/preview2-shim@$PREVIEW2_SHIM_VERSION" \
        "@bytecodealliance/wizer@$WIZER_VERSION" \
        "esbuild@$ESBUILD_VERSION" >&2
    [[ -x $jco ]] || { log "npm install finished but $jco is missing"; exit 1; }
    shim_ok || log "warning: preview2-shim is not $PREVIEW2_SHIM_VERSION everywhere; jco may fail to read files"
fi

echo "$jco"
