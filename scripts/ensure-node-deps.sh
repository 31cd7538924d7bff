#!/usr/bin/env bash
# tests/test_e2e_node.py drives the server with node-postgres (`pg` from the npm registry):
# node and npm from apt when missing, then tests/node's locked dependencies with `npm ci`.
set -euo pipefail
cd "$(dirname "$0")/../tests/node"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "node or npm not found: installing nodejs and npm with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "The node-postgres tests need Node.js 16+ and npm: install nodejs and npm." >&2
    exit 1
  fi
fi
# npm ci again only when package-lock.json changed since the last install.
stamp=node_modules/.package-lock.json
if [ -f "$stamp" ] && [ ! package-lock.json -nt "$stamp" ]; then exit 0; fi
npm ci --no-audit --no-fund --loglevel=error
