"""A real Mosquitto broker for the MQTT source tests (installed by scripts/ensure-mosquitto.sh),
and a publisher that waits for the broker's acknowledgement of every message."""

from __future__ import annotations

import getpass
import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion


def mosquitto_binary() -> str:
    found = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    if found is None:
        raise RuntimeError("mosquitto is not installed: `make test` installs it (scripts/ensure-mosquitto.sh)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """Mosquitto on 127.0.0.1 and a port of its own, with persistence (sessions survive a restart
    of the broker), and optionally a password file."""

    def __init__(self, users: dict[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="streamdb-mosquitto-"))
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # `user`: run as root, mosquitto would drop to user "mosquitto", who cannot write here.
        conf = [f"user {getpass.getuser()}", f"listener {self.port} 127.0.0.1", "persistence true", f"persistence_location {self.dir}/",
                "autosave_interval 1", "max_queued_messages 100000", "max_inflight_messages 20", "sys_interval 1",
                f"log_dest file {self.dir}/mosquitto.log"]
        if users:
            pw = self.dir / "passwords"
            pw.write_text("")
            for user, password in users.items():
                subprocess.run(["mosquitto_passwd", "-b", str(pw), user, password], check=True)
            conf += ["allow_anonymous false", f"password_file {pw}"]
        else:
            conf.append("allow_anonymous true")
        (self.dir / "mosquitto.conf").write_text("\n".join(conf) + "\n")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([mosquitto_binary(), "-c", str(self.dir / "mosquitto.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.dir / "mosquitto.log"
                raise RuntimeError(f"mosquitto exited: {log.read_text() if log.exists() else ''}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not listen within 20 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: it saves its persistence file first
            self.proc.wait(timeout=20)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def publish(broker: Broker, topic: str, payloads: list[Any], *, qos: int = 1, retain: bool = False,
            auth: tuple[str, str] | None = None) -> None:
    """Publish each payload (a dict as JSON, str or bytes as is) and wait until the broker has it."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv311)
    if auth is not None:
        client.username_pw_set(*auth)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    try:
        infos = []
        for p in payloads:
            data = p if isinstance(p, bytes) else p.encode() if isinstance(p, str) else json.dumps(p).encode()
            infos.append(client.publish(topic, data, qos=qos, retain=retain))
        for info in infos:
            info.wait_for_publish(timeout=20)
            assert info.is_published(), f"the broker did not acknowledge a message to {topic}"
    finally:
        client.disconnect()
        client.loop_stop()


def sessions_total(broker: Broker, auth: tuple[str, str] | None = None) -> int:
    """The broker's count of sessions, connected or kept for a client that is away (this reader's own
    included): the last $SYS/broker/clients/total it publishes (every second, sys_interval) within
    2.5 s of this reader connecting, so the count includes the reader and not clients just gone."""
    got: list[int] = []
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="", protocol=mqtt.MQTTv311)
    if auth is not None:
        client.username_pw_set(*auth)
    client.on_message = lambda _c, _u, msg: got.append(int(msg.payload))
    client.connect("127.0.0.1", broker.port)
    client.subscribe("$SYS/broker/clients/total")
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        client.loop(timeout=0.1)
    client.disconnect()
    assert got, "the broker sent no $SYS/broker/clients/total"
    return got[-1]
