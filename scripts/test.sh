#!/usr/bin/env bash
# Runs the whole test suite: unit tests of the host, the SDK and the plugins,
# and the integration tests, which build the plugins from source and run real
# jobs through the `weir` binary.
#
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The JavaScript plugins the tests build are compiled ahead of time by Weval,
# which is built once with cargo (a few minutes; the demo does not need it).
bash scripts/js-tools.sh weval >/dev/null
printf '\033[1m==> %s\033[0m\n' "the Python SDK's unit tests" >&2
python3 -m unittest discover -s guest-sdk/python/tests
printf '\033[1m==> %s\033[0m\n' "the JavaScript SDK's unit tests" >&2
node --test --test-reporter=dot guest-sdk/js/tests/config.test.mjs guest-sdk/js/tests/state.test.mjs
exec cargo test --release --workspace "$@"
