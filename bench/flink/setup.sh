#!/usr/bin/env bash
# Install Apache Flink SQL (PyFlink, from PyPI) into a separate virtualenv for the Nexmark
# streaming-peer benchmark (bench/nexmark/run_flink.py).
#
#   bash bench/flink/setup.sh            # idempotent: does nothing if already installed
#   FLINK_PYTHON=/path/to/python3.11 bash bench/flink/setup.sh
#
# The venv lives at bench/.flink-venv (git-ignored). It must not be the project's .venv:
# apache-flink pins old pandas/pyarrow/numpy/apache-beam versions that conflict with StreamDB's.
# Flink runs on the system Java (17; 11 also works); the jars come with the apache-flink wheel.
# On the last line the script prints the venv's python path (for scripts: `$(setup.sh | tail -1)`).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${FLINK_VENV:-$ROOT/bench/.flink-venv}"   # override only for testing
REQ="$HERE/requirements.txt"
CONSTRAINTS="$HERE/constraints.txt"   # the full resolved dependency set, pinned
WANT="$(sed -n 's/^apache-flink==\([^ ]*\).*/\1/p' "$REQ")"

log() { echo "[flink-setup] $*" >&2; }

installed_version() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" - <<'EOF' 2>/dev/null
from importlib.metadata import version
import pyflink  # noqa: F401  (fails if the install is broken)
print(version("apache-flink"))
EOF
}

if have="$(installed_version)" && [ "$have" = "$WANT" ]; then
    log "apache-flink $have already installed in $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

# A Python for which apache-flink $WANT has wheels (cp39..cp312).
pick_python() {
    local c
    for c in "${FLINK_PYTHON:-}" python3.11 python3.12 python3.10 python3 \
             /root/.pyenv/versions/3.11.*/bin/python3 /root/.pyenv/versions/3.12.*/bin/python3; do
        [ -n "$c" ] || continue
        command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
        if "$c" -c 'import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

PY="$(pick_python)" || { log "no Python 3.9-3.12 found (apache-flink $WANT has wheels only for those)"; exit 1; }
command -v java >/dev/null 2>&1 || { log "java not found on PATH (Flink needs Java 11 or 17)"; exit 1; }

log "installing apache-flink $WANT into $VENV with $("$PY" --version 2>&1) ($PY)"
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# --only-binary for apache-flink itself: never fall back to building the sdist.
"$VENV/bin/python" -m pip install --quiet --only-binary apache-flink -r "$REQ" -c "$CONSTRAINTS"

have="$(installed_version)" || { log "install finished but pyflink does not import"; exit 1; }
log "apache-flink $have installed in $(( $(date +%s) - start ))s; $(du -sh "$VENV" | cut -f1) on disk"
echo "$VENV/bin/python"
