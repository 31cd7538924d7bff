#!/usr/bin/env bash
# Spark needs Java 17 or newer, and the view engine's operators (streamdb/runtime/spark/jvm) are
# compiled once with javac: so a JDK, not only a JRE. Use one if present; otherwise install it with
# apt when we can.
set -euo pipefail

java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

has_jdk() {
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; then return 0; fi
  command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 \
    && [ "$(java_major)" -ge 17 ] 2>/dev/null
}

if has_jdk; then
  exit 0
fi

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "JDK 17+ (java and javac) not found: installing openjdk-17-jdk-headless with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
  exit 0
fi

cat >&2 <<'MSG'
StreamDB runs Spark, which needs a Java 17+ JDK (java, and javac to build the view engine's
operators once), and none was found. Install it, then run make again:
  Debian/Ubuntu:  sudo apt-get install openjdk-17-jdk-headless
  macOS:          brew install openjdk@17
  or any JDK 17+ from https://adoptium.net, with `java` and `javac` on PATH or JAVA_HOME set.
MSG
exit 1
