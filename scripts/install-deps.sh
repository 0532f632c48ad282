#!/usr/bin/env bash
# Installs the system packages and Rust target the build needs, if missing:
# the wasm32-wasip2 target (plugins), libclang (RocksDB's bindings), cmake and
# the headers librdkafka is built against (Kafka connectors); the toolchains
# of Python and JavaScript plugins (componentize-py in a virtualenv,
# componentize-js with npm) under ~/.cache/weir-tools; and the Kafka-protocol
# test broker (tansu).
#
#   scripts/install-deps.sh
set -euo pipefail

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

packages=(libclang-dev clang cmake pkg-config libcurl4-openssl-dev libsasl2-dev libssl-dev zlib1g-dev libzstd-dev)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    log "installing the wasm32-wasip2 Rust target"
    rustup target add wasm32-wasip2
fi

cd "$(dirname "$0")/.."
log "checking the Python and JavaScript plugin toolchains"
bash scripts/python-tools.sh >/dev/null
bash scripts/js-tools.sh >/dev/null
log "checking the Kafka test broker"
bash scripts/kafka-broker.sh path >/dev/null
