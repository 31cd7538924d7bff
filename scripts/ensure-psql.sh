#!/usr/bin/env bash
# The end-to-end tests drive the server with the real psql client too.
set -euo pipefail
if command -v psql >/dev/null 2>&1; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "psql not found: installing postgresql-client with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-client >/dev/null
  exit 0
fi
echo "The tests need the psql client: install postgresql-client (Debian/Ubuntu) or libpq (macOS)." >&2
exit 1
