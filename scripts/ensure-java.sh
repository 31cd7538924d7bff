#!/usr/bin/env bash
# Spark needs Java 17 or newer. Use it if present; otherwise install it with apt when we can.
set -euo pipefail

java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
  exit 0
fi

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "Java 17+ not found: installing openjdk-17-jre-headless with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  exit 0
fi

cat >&2 <<'MSG'
StreamDB runs Spark, which needs Java 17 or newer, and none was found.
Install it, then run make again:
  Debian/Ubuntu:  sudo apt-get install openjdk-17-jre-headless
  macOS:          brew install openjdk@17
  or any JDK 17+ from https://adoptium.net, with `java` on PATH or JAVA_HOME set.
MSG
exit 1
