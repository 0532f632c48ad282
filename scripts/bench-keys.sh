#!/usr/bin/env bash
# The count workload (docs/workloads.md) at more keys than its 100 000, on
# Apache Flink and on Weir (Wasm plugin and native baseline), back to back,
# at P = 1 for each backend class; prints the RESULT lines and a table.
#
#   scripts/bench-keys.sh [KEYS] [EVENTS]     (default 1000000 20000000)
#   BACKENDS="memory rocksdb" scripts/bench-keys.sh   (default: both)
#   FLINK_ROCKSDB_EVENTS=N scripts/bench-keys.sh   (Flink's RocksDB run; default
#                                              EVENTS — it takes ~40 s per 5 M)
#   MEMORY_LIMIT_MB=N scripts/bench-keys.sh    (the last column's operator
#                                              memory_limit_mb; default 2048)
#
# Weir runs each backend three times: the Wasm plugin and the native
# baseline with the job file's default memory_limit_mb (512; the Rust SDK
# holds keyed state in the instance up to about half of it, 1.7 million
# counts), and the Wasm plugin with MEMORY_LIMIT_MB (2048: 7 million).
#
# The Flink harness fixes the keys at 100 000; this runs a copy of it (in a
# temporary directory) with KEYS instead, and nothing else changed. Needs
# the shared/ directory beside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
keys="${1:-1000000}"
events="${2:-20000000}"
flink_rocksdb_events="${FLINK_ROCKSDB_EVENTS:-$events}"
limit="${MEMORY_LIMIT_MB:-2048}"
harness=../shared/bench/flink
source scripts/lib/bench.sh
[[ -f $harness/run.sh && -f $harness/FlinkBench.java ]] || { echo "no Flink harness in $harness" >&2; exit 2; }
grep -q 'long keys = 100_000;' "$harness/FlinkBench.java" ||
    { echo "$harness/FlinkBench.java no longer says 'long keys = 100_000;': update this script" >&2; exit 2; }
scripts/setup.sh

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp "$harness/run.sh" "$copy/"
sed "s/long keys = 100_000;/long keys = $keys;/" "$harness/FlinkBench.java" >"$copy/FlinkBench.java"
# Its own class cache (the class differs), the shared Flink install —
# made by the harness itself on its first run.
flink_cache="${WEIR_FLINK_CACHE:-$HOME/.cache/weir-flink}"
[[ -x $flink_cache/venv/bin/python ]] || bash "$harness/run.sh" count 100000 1 hashmap >/dev/null
mkdir -p "$copy/cache"
ln -s "$flink_cache/venv" "$copy/cache/venv"
weir=bin/weir

# The RESULT line to stderr, its events/s to stdout. (Not `tee /dev/fd/2`:
# with stderr redirected to a file, that reopens and truncates it.)
rate() {
    local result
    result=$(grep '^RESULT' | tail -n 1 || true)
    echo "$result" >&2
    events_per_s <<<"$result"
}

rows=()
for backend in ${BACKENDS:-memory rocksdb}; do
    n=$events flink_n=$events flink_backend=hashmap
    [[ $backend == rocksdb ]] && flink_n=$flink_rocksdb_events flink_backend=rocksdb
    echo "== count, $keys keys, $n events, $backend" >&2
    flink=$(WEIR_FLINK_CACHE="$copy/cache" bash "$copy/run.sh" count "$flink_n" 1 "$flink_backend" | rate)
    wasm=$("$weir" bench count --events "$n" --keys "$keys" --backend "$backend" 2>/dev/null | rate)
    native=$("$weir" bench count --events "$n" --keys "$keys" --backend "$backend" --native 2>/dev/null | rate)
    roomy=$("$weir" bench count --events "$n" --keys "$keys" --backend "$backend" --memory-limit-mb "$limit" 2>/dev/null | rate)
    rows+=("| $keys | $n, Flink $flink_n | $backend / $flink_backend | $flink | $wasm | $native | $roomy | $(ratio "$wasm" "$flink") | $(ratio "$roomy" "$flink") |")
done
echo
echo "count at P = 1 ($(date -u +%F), $(nproc) cores): events per second, one run each"
echo
echo "| keys | events | backend | Flink | Weir (Wasm) | Weir (native) | Weir (Wasm), $limit MiB | Wasm / Flink | $limit MiB / Flink |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
