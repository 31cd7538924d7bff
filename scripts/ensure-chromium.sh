#!/usr/bin/env bash
# The web console tests (tests/test_e2e_console.py) drive a real headless Chromium through Playwright.
# Debian's `chromium` package is used (Playwright is told its path); `playwright install` is never run.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "/usr/bin/chromium not found: installing chromium with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  exit 0
fi
echo "The console tests need Chromium at /usr/bin/chromium: install Debian's chromium package." >&2
exit 1
