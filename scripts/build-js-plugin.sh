#!/usr/bin/env bash
# Builds a Weir operator plugin written in JavaScript into a component.
#
#   scripts/build-js-plugin.sh SRC.js OUT.wasm
#
# 1. scripts/js-tools.sh installs (once) componentize-js and esbuild.
# 2. esbuild bundles SRC.js with the SDK (`import ... from "weir-sdk"` is
#    guest-sdk/js/weir-sdk.js) into one ES module; the WIT imports
#    (`weir:operator/...`) stay external — componentize-js binds them.
# 3. `componentize-js` builds the component against wit/, world `plugin`,
#    with the engine of scripts/js-tools.sh engine (componentize-js's own
#    without its 32 MiB heap cap: the instance's memory limit bounds the
#    plugin, see scripts/patch-js-engine.mjs),
#    with the WASI features the host does not need (outgoing HTTP, the
#    fetch event) disabled; stdio stays so that errors reach stderr (the host
#    keeps stderr for error reports), random and clocks stay for Math.random
#    and Date.
#
# The JS is compiled ahead of time (componentize-js `--aot`: Weval
# specialises the engine's interpreter to the plugin's bytecode), which runs
# a plugin 1.5–1.7× as fast for a ~18 MB component instead of ~13 MB and a
# build of ~15 s instead of ~5 s; scripts/js-tools.sh builds Weval with
# cargo on first use (a few minutes, once). WEIR_JS_AOT=0 builds the plain
# interpreter instead.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 SRC.js OUT.wasm" >&2
    exit 2
fi
src=$1
out=$2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ -f $src ]] || { echo "build-js-plugin: no such file: $src" >&2; exit 1; }

componentize="$("$root/scripts/js-tools.sh")"
esbuild="$(dirname "$componentize")/esbuild"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "build-js-plugin: bundling $src" >&2
"$esbuild" "$src" --bundle --format=esm --platform=neutral --target=es2022 \
    --alias:weir-sdk="$root/guest-sdk/js/weir-sdk.js" \
    '--external:weir:*' '--external:wasi:*' \
    --log-level=warning --sourcemap=external --outfile="$work/plugin.js"
# The world's exports come from `export const operator = exportOperator(…)`:
# without it componentize-js fails naming the bundle, a temporary file.
if ! sed -n '/^export {/,/};/p' "$work/plugin.js" | grep -qE '(^|[ ,{])operator([ ,}]|$)'; then
    echo "error: $src exports no \`operator\`: end it with \`export const operator = exportOperator(YourOperator);\`" \
         "(exportOperator from \"weir-sdk\"; see guest-sdk/js/README.md)" >&2
    exit 1
fi
# The bundle goes with its source map (the sources as absolute paths), so
# that the SDK can name the plugin's own files and lines in the stack of an
# error it reports, not the bundle's, which is deleted below.
node -e '
const fs = require("fs"), path = require("path");
const bundle = process.argv[1];
const map = JSON.parse(fs.readFileSync(`${bundle}.map`, "utf8"));
const sources = map.sources.map((source) => path.resolve(path.dirname(bundle), source));
fs.appendFileSync(bundle, `\nglobalThis.__weirSourceMap = ${JSON.stringify({ sources, mappings: map.mappings })};\n`);
' "$work/plugin.js"

engines="$("$root/scripts/js-tools.sh" engine)"
args=("$work/plugin.js" --wit "$root/wit" --world-name plugin
      --disable http fetch-event -o "$work/plugin.wasm")
if [[ ${WEIR_JS_AOT:-1} != 0 ]]; then
    weval="$("$root/scripts/js-tools.sh" weval)"
    args+=(--aot --weval-bin "$weval" --engine "$engines/starlingmonkey_embedding_weval.wasm")
else
    args+=(--engine "$engines/starlingmonkey_embedding.wasm")
fi

echo "build-js-plugin: componentizing (componentize-js ${args[*]})" >&2
"$componentize" "${args[@]}" >&2
mkdir -p "$(dirname "$out")"
mv "$work/plugin.wasm" "$out"
echo "build-js-plugin: wrote $out ($(du -h "$out" | cut -f1))" >&2
