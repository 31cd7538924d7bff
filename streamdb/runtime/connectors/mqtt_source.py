"""An external stream's MQTT topic filter, copied into the stream's log at least once.

One thread per external stream holds an MQTT 3.1.1 session with the broker (paho-mqtt, driven
from this thread: no second network thread). With QoS 1 the session is persistent (a fixed
client id, clean_session off), so the broker keeps the messages published while StreamDB is
down, and a message is acknowledged only after the commit that stored it is durable: none is
lost, and a crash between the commit and the acknowledgement delivers that batch again (at least
once; MQTT has no offsets to store with the rows). With QoS 0 the broker sends each message once
and forgets it (at most once).

A message is a record whose key is its topic (a `KEY` column holds it), whose value is its
payload, and whose event time is its arrival time (MQTT 3.1.1 carries none) unless the stream
names a timestamp column.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from streamdb.catalog import RelationDef
from streamdb.planner.connectors import mask_text
from streamdb.runtime.connectors.decode import Decoder, Record
from streamdb.runtime.connectors.source_base import SourceThread

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")

# A batch: at most this many messages, gathered for at most this long after the first one. The
# broker sends a QoS 1 session only so many unacknowledged messages (mosquitto: 20 by default),
# so a batch is usually cut by the time, and acknowledged as soon as it is stored.
BATCH_RECORDS = 1000
GATHER_SECONDS = 0.05
CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_S = 30


class MqttSource(SourceThread):
    """Copies the messages of `topic` (a filter) into stream `rel` (bad ones into `errors_rel`)."""

    kind = "mqtt-source"

    def __init__(self, engine: Engine, rel: RelationDef, errors_rel: RelationDef | None, decoder: Decoder, *,
                 host: str, port: int, tls: bool, topic: str, qos: int, client_id: str,
                 username: str | None = None, password: str | None = None) -> None:
        super().__init__(engine, rel, errors_rel, decoder)
        self.host, self.port, self.tls = host, port, tls
        self.topic, self.qos, self.client_id = topic, qos, client_id
        self.username, self.password = username, password
        self.next_seq = 0  # the number the next message gets (the dead letters' offset)
        self._pending: list[Any] = []

    def restore(self, meta: dict[str, Any]) -> None:
        self.next_seq = int(meta.get("next_seq", 0))

    def dropped(self) -> None:
        """End the stream's persistent session, or the broker would queue its messages for good.
        In the background and best effort: the broker may be away (then its own expiry of
        sessions, mosquitto's persistent_client_expiration, ends it)."""
        if self.qos == 0:
            return

        def end_session() -> None:
            try:
                client = self._client(clean_session=True)
                connected: list[bool] = []
                client.on_connect = lambda *_args: connected.append(True)
                client.connect(self.host, self.port, keepalive=KEEPALIVE_S)
                self._wait(client, lambda: bool(connected), "the broker did not answer the connection")
                self._close(client)
            except Exception as e:  # noqa: BLE001 - best effort
                log.info("source %s: its MQTT session was not ended: %s", self.rel.name, mask_text(str(e)))

        threading.Thread(target=end_session, name=f"{self.kind}-{self.rel.name}-drop", daemon=True).start()

    # ---- the consuming thread ----------------------------------------------------------

    def _run(self) -> None:
        client: Any = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = self._connect()
                    self.status.state = "running"
                    self.status.last_error = None
                self._loop(client, 0.1)
                if self._pending:
                    until = time.monotonic() + GATHER_SECONDS
                    while len(self._pending) < BATCH_RECORDS and time.monotonic() < until:
                        self._loop(client, 0.01)
                    self._ingest(client)
            except Exception as e:  # noqa: BLE001 - a broker problem: report it, retry
                self.status.state = "retrying"
                self.status.last_error = mask_text(str(e))
                log.warning("source %s: %s", self.rel.name, self.status.last_error)
                self._close(client)
                client = None
                # What was received and not stored is not acknowledged: the session delivers it again.
                self._pending = []
                self._stop.wait(1.0)
        self._close(client)

    def _client(self, clean_session: bool) -> Any:
        """An MQTT 3.1.1 client of this stream's session id, credentials and TLS, not connected."""
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id, clean_session=clean_session,
                             protocol=mqtt.MQTTv311, manual_ack=True, reconnect_on_failure=False)
        if self.username is not None:
            client.username_pw_set(self.username, self.password)
        if self.tls:
            client.tls_set()  # the system's CAs; the broker's name is checked
        return client

    def _connect(self) -> Any:
        client = self._client(clean_session=self.qos == 0)  # QoS 1: a persistent session
        connack: dict[str, Any] = {}
        suback: dict[str, Any] = {}

        def on_connect(_c: Any, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
            connack.update(session_present=bool(flags.session_present), reason=reason)

        def on_subscribe(_c: Any, _u: Any, _mid: Any, reasons: Any, _p: Any) -> None:
            suback["reasons"] = reasons

        client.on_connect = on_connect
        client.on_subscribe = on_subscribe
        client.on_message = lambda _c, _u, msg: self._pending.append(msg)
        client.connect(self.host, self.port, keepalive=KEEPALIVE_S)
        try:
            self._wait(client, lambda: bool(connack), "the broker did not answer the connection")
        except ConnectionError:
            if not connack:
                raise
        # paho reports a refusal both to on_connect (with the broker's reason) and as a failed loop.
        reason = connack["reason"]
        if reason.is_failure:
            raise ConnectionError(f"the MQTT broker refused the connection: {reason}")
        # A persistent session keeps its subscription: subscribing again would make the broker
        # send its retained messages again, and they would be stored twice.
        if not connack["session_present"]:
            client.subscribe(self.topic, qos=self.qos)
            self._wait(client, lambda: "reasons" in suback, "the broker did not answer the subscription")
            refused = [r for r in suback["reasons"] if r.is_failure]
            if refused:
                raise ConnectionError(f'the MQTT broker refused the subscription to "{self.topic}": {refused[0]}')
        log.info("source %s: connected to %s:%d (%s, session %s)", self.rel.name, self.host, self.port, self.topic,
                 "resumed" if connack["session_present"] else "new")
        return client

    def _wait(self, client: Any, done: Any, what: str) -> None:
        until = time.monotonic() + CONNECT_TIMEOUT_S
        while not done():
            if time.monotonic() > until:
                raise ConnectionError(what)
            self._loop(client, 0.1)

    @staticmethod
    def _loop(client: Any, timeout: float) -> None:
        import paho.mqtt.client as mqtt

        rc = client.loop(timeout=timeout)
        if rc != mqtt.MQTT_ERR_SUCCESS:
            raise ConnectionError(f"the connection to the MQTT broker failed: {mqtt.error_string(rc)}")

    def _ingest(self, client: Any) -> None:
        messages, self._pending = self._pending, []
        records = [Record(value=m.payload, key=m.topic.encode(), source=m.topic, offset=self.next_seq + i)
                   for i, m in enumerate(messages)]
        rows, rowtimes, bad = self.decode(records)
        self.commit(rows, rowtimes, bad, {"next_seq": self.next_seq + len(messages)})
        self.next_seq += len(messages)
        for m in messages:  # stored: now the broker may forget them
            if m.qos > 0:
                client.ack(m.mid, m.qos)
        self._loop(client, 0)  # send the acknowledgements now

    @staticmethod
    def _close(client: Any) -> None:
        if client is None:
            return
        try:
            client.disconnect()
            client.loop(timeout=0.1)
        except Exception:  # noqa: BLE001 - closing a connection that is already gone
            pass
