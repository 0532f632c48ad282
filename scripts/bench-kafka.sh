#!/usr/bin/env bash
# Kafka → keyed count → Kafka, with and without transactions: fills an
# input topic with EVENTS records (key = i mod KEYS) on a local tansu
# broker, then runs the `word-count` plugin over it (bounded, checkpoints
# every second) with the Kafka sink exactly-once and at-least-once, and
# prints events/s for each. Runs bin/weir (scripts/setup.sh builds it).
#
#   scripts/bench-kafka.sh [EVENTS] [PARALLELISM] [KEYS]    # defaults: 1000000 2 10000
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-1000000}"
parallelism="${2:-2}"
keys="${3:-10000}"
work="$(mktemp -d)"
trap 'kill "$broker" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

log() { printf '==> %s\n' "$*" >&2; }
source scripts/lib/venv.sh

tansu="$(bash scripts/kafka-broker.sh path)"
venv="${WEIR_TOOLS:-$HOME/.cache/weir-tools}/kafka"
python="$venv/bin/python"
"$python" -c 'import confluent_kafka' 2>/dev/null || venv_install "$venv" confluent-kafka
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
brokers="127.0.0.1:$port"
"$tansu" broker --listener-url "tcp://$brokers" --advertised-listener-url "tcp://$brokers" \
    --storage-engine memory://tansu/ >"$work/tansu.log" 2>&1 &
broker=$!

log "filling topic \`in\` with $events records ($keys keys, $parallelism partitions)"
"$python" - "$brokers" "$events" "$keys" "$parallelism" <<'PY'
import sys, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
brokers, events, keys, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
admin = AdminClient({"bootstrap.servers": brokers})
for _ in range(50):
    try:
        admin.list_topics(timeout=1)
        break
    except Exception:
        time.sleep(0.2)
for topic in ("in", "out-exactly-once", "out-at-least-once"):
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result()
# One record per batch: tansu 0.6 reports a partition's high watermark as its
# last batch's base offset + 1, and the bounded source stops there.
producer = Producer({"bootstrap.servers": brokers, "linger.ms": 0, "batch.num.messages": 1,
                     "queue.buffering.max.messages": 1000000})
started = time.time()
for i in range(events):
    while True:
        try:
            producer.produce("in", key=str(i % keys), value=str(i))
            break
        except BufferError:
            producer.poll(0.01)
    if i % 10000 == 0:
        producer.poll(0)
producer.flush()
print(f"==> filled in {time.time() - started:.1f} s", file=sys.stderr)
PY

for delivery in exactly-once at-least-once; do
    cat > "$work/$delivery.toml" <<TOML
name = "kafka-count-$delivery"
parallelism = $parallelism
checkpoint_dir = "checkpoints-$delivery"
checkpoint_interval_ms = 1000

[[source]]
name = "in"
type = "kafka"
brokers = "$brokers"
topics = ["in"]
bounded = true

[[operator]]
uid = "count"
plugin = "$PWD/examples/plugins/word_count.wasm"
inputs = ["in"]
key_by = true

[[sink]]
name = "out"
type = "kafka"
input = "count"
brokers = "$brokers"
topic = "out-$delivery"
delivery = "$delivery"
TOML
    log "running Kafka → count → Kafka, $delivery"
    summary="$( { /usr/bin/time -f "weir cpu: %U s user, %S s system" bin/weir run "$work/$delivery.toml"; } 2>&1 | grep -E "finished in|peak memory|weir cpu")"
    printf '%s\n' "$summary" >&2
    seconds="$(sed -nE 's/.*finished in ([0-9.]+) s.*/\1/p' <<<"$summary")"
    read_events="$(sed -nE 's/.*: ([0-9]+) events read.*/\1/p' <<<"$summary")"
    rate="$(awk -v n="$read_events" -v s="$seconds" 'BEGIN { printf "%.0f", n / s }')"
    echo "RESULT workload=kafka-count delivery=$delivery par=$parallelism events=$read_events seconds=$seconds events_per_s=$rate"
done
