#!/usr/bin/env bash
# Savepoint and upgrade figures for a keyed count with many keys: savepoint
# size and time (several), and the downtime of hot upgrades (several, with
# the median). Runs bin/weir (scripts/setup.sh builds it).
#
#   scripts/bench-savepoints.sh [KEYS] [BACKEND] [ROUNDS]     # defaults: 1000000 memory 5
set -euo pipefail
cd "$(dirname "$0")/.."
keys="${1:-1000000}"
backend="${2:-memory}"
rounds="${3:-5}"
work="$(mktemp -d)"
trap 'kill "$host" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

cp examples/plugins/word_count.wasm "$work/count_a.wasm"
cp examples/plugins/word_count.wasm "$work/count_b.wasm"
cat > "$work/job.toml" <<TOML
name = "many-keys"
parallelism = 2
state_backend = "$backend"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 10000

[[source]]
name = "numbers"
type = "generator"
keys = $keys
rate = 200000

[[operator]]
uid = "count"
plugin = "count_a.wasm"
inputs = ["numbers"]
key_by = true

[[sink]]
name = "out"
type = "discard"
input = "count"
TOML

api="127.0.0.1:$((20000 + RANDOM % 20000))"
WEIR_LOG=${WEIR_LOG:-warn} bin/weir run "$work/job.toml" --api "$api" 2> "$work/host.log" &
host=$!
echo "filling $keys keys ($backend backend) ..." >&2
until read=$(bin/weir jobs --api "$api" 2>/dev/null | awk '$1 == "many-keys" { print $4 }') && [ -n "$read" ] && [ "$read" -ge "$((keys + keys / 5))" ]; do
    sleep 1
done

echo "savepoints of $keys keys:"
for i in $(seq 1 3); do
    bin/weir savepoint many-keys --dir "$work/sp-$i" --api "$api"
done

echo "upgrades (checked against $keys entries each):"
downtimes=()
for i in $(seq 1 "$rounds"); do
    plugin="$work/count_b.wasm"; [ $((i % 2)) -eq 0 ] && plugin="$work/count_a.wasm"
    line=$(bin/weir upgrade many-keys --operator count --plugin "$plugin" --api "$api")
    echo "  $line"
    downtimes+=("$(sed -E 's/.*downtime ([0-9.]+) ms.*/\1/' <<< "$line")")
done
median=$(printf '%s\n' "${downtimes[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "RESULT keys=$keys backend=$backend upgrade_downtime_median_ms=$median"
bin/weir cancel many-keys --api "$api" > /dev/null
