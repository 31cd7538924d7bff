#!/usr/bin/env bash
# tests/test_e2e_jdbc.py compiles a small Java program with javac and runs it against the server
# with pgjdbc, the PostgreSQL JDBC driver Debian packages (a jar under /usr/share/java).
set -euo pipefail
have_jar() { ls /usr/share/java/postgresql*.jar >/dev/null 2>&1; }
packages=()
command -v javac >/dev/null 2>&1 || packages+=(openjdk-17-jdk-headless)
have_jar || packages+=(libpostgresql-jdbc-java)
if [ "${#packages[@]}" -eq 0 ]; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "installing ${packages[*]} with apt-get (the JDBC tests need javac and pgjdbc)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null
  exit 0
fi
echo "The JDBC tests need javac (JDK 17+) and the PostgreSQL JDBC driver jar under /usr/share/java:" \
     "install openjdk-17-jdk-headless and libpostgresql-jdbc-java (Debian/Ubuntu)." >&2
exit 1
