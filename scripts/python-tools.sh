#!/usr/bin/env bash
# Installs the tools that build Python plugins, if they are missing, and
# prints the path of the componentize-py executable on stdout (logs go to
# stderr). Idempotent: a second run only checks the installed version.
#
#   componentize_py="$(scripts/python-tools.sh)"
#
# The tools live in a virtualenv at ${WEIR_TOOLS:-$HOME/.cache/weir-tools}/venv,
# created with `python3 -m venv` (Python 3.10 or later). Set PYTHON to use
# another interpreter for the venv.
set -euo pipefail

# Pinned: componentize-py bundles its own CPython and wit-bindgen; another
# version may generate different bindings. Change it on purpose, and rebuild
# and re-test the Python plugins when you do.
COMPONENTIZE_PY_VERSION="0.25.1"

tools="${WEIR_TOOLS:-$HOME/.cache/weir-tools}"
venv="$tools/venv"
exe="$venv/bin/componentize-py"

log() { printf '==> %s\n' "$*" >&2; }
source "$(dirname "$0")/lib/venv.sh"

installed_version() {
    "$venv/bin/python" - <<'EOF' 2>/dev/null
from importlib.metadata import version
print(version("componentize-py"))
EOF
}

if [[ -x "$exe" && "$(installed_version || true)" == "$COMPONENTIZE_PY_VERSION" ]]; then
    printf '%s\n' "$exe"
    exit 0
fi

venv_install "$venv" "componentize-py==$COMPONENTIZE_PY_VERSION"

if [[ ! -x "$exe" ]]; then
    log "error: $exe is missing after the install"
    exit 1
fi
printf '%s\n' "$exe"
