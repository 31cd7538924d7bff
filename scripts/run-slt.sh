#!/usr/bin/env bash
# Runs the sqllogictest runner over a directory of .slt files against a fresh server.
# Usage: scripts/run-slt.sh [PATH...]   (default: ../shared/suites/risingwave/e2e_test)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(../shared/suites/risingwave/e2e_test)
data=$(mktemp -d)
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p test-artifacts
.venv/bin/streamdb serve --port "$port" --console-port 0 --data-dir "$data/data" --log-level warning > test-artifacts/slt-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 100); do
  .venv/bin/python -c "import psycopg; psycopg.connect('postgresql://streamdb@127.0.0.1:$port/streamdb').close()" 2>/dev/null && break
  sleep 0.2
done
.venv/bin/python -m tests.slt.runner --dsn "postgresql://streamdb@127.0.0.1:$port/streamdb" \
  --json test-artifacts/slt-report.json "${paths[@]}" || true
