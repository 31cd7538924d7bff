#!/usr/bin/env bash
# The MQTT source tests run a real Mosquitto broker (started by the test fixture on a free port).
set -euo pipefail
# The user guide publishes its MQTT examples with mosquitto_pub (mosquitto-clients).
if { command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; } && command -v mosquitto_pub >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  echo "mosquitto or mosquitto_pub not found: installing them with apt-get (the MQTT source tests need a broker)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mosquitto mosquitto-clients >/dev/null
  # The package enables a system broker on port 1883; the tests start their own.
  (service mosquitto stop || true) >/dev/null 2>&1
  exit 0
fi
echo "The MQTT source tests need the Mosquitto broker: install mosquitto (Debian/Ubuntu) or brew install mosquitto." >&2
exit 1
