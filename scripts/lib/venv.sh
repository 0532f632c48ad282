# Sourced by the scripts that install Python tools into virtualenvs under
# ${WEIR_TOOLS:-$HOME/.cache/weir-tools}. The caller defines `log`.

# venv_install VENV SPEC...: creates the virtualenv VENV if it is missing
# (with $PYTHON, default python3), then pip-installs SPEC into it.
venv_install() {
    local venv="$1"
    shift
    local python="${PYTHON:-python3}"
    if [[ ! -x "$venv/bin/python" ]]; then
        command -v "$python" >/dev/null || { log "error: $python not found; install Python 3.10+ (apt-get install python3 python3-venv)"; exit 1; }
        log "creating a virtualenv at $venv"
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv" >&2
    fi
    log "installing $* into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
}
