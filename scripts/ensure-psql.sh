#!/usr/bin/env bash
# The end-to-end tests drive the server with the real psql client, and the Postgres sink tests
# run a real PostgreSQL server (initdb + postgres, started by the test fixture).
set -euo pipefail
have_server() {
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
  command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
  return 1
}
if command -v psql >/dev/null 2>&1 && have_server; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "psql or the PostgreSQL server binaries not found: installing postgresql with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-client postgresql >/dev/null
  exit 0
fi
echo "The tests need psql and the PostgreSQL server binaries (initdb, postgres): install postgresql" \
     "(Debian/Ubuntu) or postgresql@15 (Homebrew)." >&2
exit 1
