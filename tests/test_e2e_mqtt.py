"""MQTT sources end to end: a real `streamdb serve` (real Spark) reading topics of a real
Mosquitto broker over TCP (tests/mqtt_util.py; `make test` installs mosquitto)."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.mqtt_util import Broker, publish, sessions_total
from tests.source_util import wait_for, wait_source


def wait_sessions(broker: Broker, auth: tuple[str, str], expected: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    got = sessions_total(broker, auth)
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        got = sessions_total(broker, auth)
    assert got == expected, f"the broker holds {got} sessions, not {expected}"


def test_mqtt_stream_views_dead_letters_and_wildcards(server, conn, unique, mqtt_broker):
    c, s = f"mq_{unique}", f"readings_{unique}"
    conn.execute(f"CREATE SOURCE CONNECTOR {c} MQTT WITH (broker = 'tcp://{mqtt_broker.address}', "
                 f"topic = 'plant{unique}/+/temp', qos = 1)")
    conn.execute(f"CREATE EXTERNAL STREAM {s} (topic TEXT KEY, seq INT, celsius DOUBLE PRECISION) "
                 f"WITH (connector = '{c}', format = 'json', max_record_bytes = 2000)")
    conn.execute(f"CREATE MATERIALIZED VIEW {s}_per_topic AS SELECT topic, count(*) AS n, sum(celsius) AS total, "
                 f"max(seq) AS last FROM {s} GROUP BY topic")
    wait_source(conn, s, "running")  # subscribed: MQTT keeps nothing for a subscription not there yet
    sent = {f"plant{unique}/{d}/temp": [{"seq": i, "celsius": 20 + (i * 7 + len(d)) % 13 / 2} for i in range(50)]
            for d in ("boiler", "tank", "pump")}
    for topic, payloads in sent.items():
        publish(mqtt_broker, topic, payloads)
    # Not under the filter: never read.
    publish(mqtt_broker, f"plant{unique}/boiler/pressure", [{"seq": 1, "celsius": 1.0}])
    bad = f"plant{unique}/bad/temp"
    publish(mqtt_broker, bad, ["{not json", {"seq": "many", "celsius": 1}, {"seq": 1, "celsius": 1, "pad": "x" * 3000}])
    wait_for(conn, f"SELECT count(*) FROM {s}", [(150,)])
    expected = sorted((t, len(p), sum(x["celsius"] for x in p), 49) for t, p in sent.items())
    assert sorted(conn.execute(f"SELECT topic, count(*), sum(celsius), max(seq) FROM {s} GROUP BY topic")
                  .fetchall()) == expected
    conn.execute(f"FLUSH {s}_per_topic")
    view = sorted(conn.execute(f"SELECT * FROM {s}_per_topic").fetchall())
    assert view == expected
    # The incremental view equals the same query run as a batch query over the stream.
    assert view == sorted(conn.execute(f"SELECT topic, count(*), sum(celsius), max(seq) FROM {s} GROUP BY topic")
                          .fetchall())
    # Bad records: counted, kept with the topic, the reason and the bytes.
    wait_for(conn, f"SELECT count(*) FROM {s}_errors", [(3,)])
    errors = conn.execute(f"SELECT source, reason, raw_key, raw_text FROM {s}_errors ORDER BY length(raw_text)"
                          ).fetchall()
    assert {(e[0], bytes(e[2])) for e in errors} == {(bad, bad.encode())}
    assert errors[0][1].startswith("invalid JSON") and errors[0][3] == "{not json"
    assert 'column "seq"' in errors[1][1] and "many" in errors[1][1]
    assert "exceeds the limit of 2000 bytes" in errors[2][1]
    row = wait_source(conn, s, "running")
    assert row[1:4] == (c, f"plant{unique}/+/temp", "json")
    assert row[5:9] == (150, 3, f"{s}_errors", None)
    # More messages flow into the view.
    publish(mqtt_broker, f"plant{unique}/tank/temp", [{"seq": 50, "celsius": 100.0}])
    wait_for(conn, f"SELECT count(*) FROM {s}", [(151,)])
    conn.execute(f"FLUSH {s}_per_topic")
    tank = conn.execute(f"SELECT n, total, last FROM {s}_per_topic WHERE topic = 'plant{unique}/tank/temp'").fetchone()
    assert tank == (51, sum(x["celsius"] for x in sent[f"plant{unique}/tank/temp"]) + 100.0, 50)
    conn.execute(f"DROP CONNECTOR {c} CASCADE")
    assert s not in {r[0] for r in conn.execute("SHOW SOURCES").fetchall()}


def test_mqtt_options_are_checked(conn, unique, mqtt_broker):
    def refused(sql: str, error: type[Exception], part: str, hint_part: str | None = None) -> None:
        with pytest.raises(error) as e:
            conn.execute(sql)
        assert part in str(e.value), str(e.value)
        if hint_part is not None:
            assert hint_part in (e.value.diag.message_hint or ""), e.value.diag.message_hint
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection stays usable

    broker = f"tcp://{mqtt_broker.address}"
    refused(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (broker = '{broker}', keep_alive = 5)",
            psycopg.errors.InvalidParameterValue, 'unrecognized mqtt connector option "keep_alive"', "broker")
    refused(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (topic = 'a')",
            psycopg.errors.InvalidParameterValue, '"broker"')
    refused(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (broker = 'http://h:1')",
            psycopg.errors.InvalidParameterValue, 'unknown scheme "http"')
    refused(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (broker = '{broker}', qos = 2)",
            psycopg.errors.FeatureNotSupported, "qos 2 (exactly once) is not supported", "Use qos 1")
    refused(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (broker = '{broker}', qos = 'sometimes')",
            psycopg.errors.InvalidParameterValue, 'invalid MQTT qos "sometimes"')
    refused(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (broker = '{broker}', topic = 'a/#/b')",
            psycopg.errors.InvalidParameterValue, 'invalid MQTT topic filter "a/#/b"', "'#'")
    refused(f"CREATE SINK CONNECTOR m_{unique} MQTT WITH (broker = '{broker}')",
            psycopg.errors.SyntaxError, "syntax error at or near \"MQTT\"")  # MQTT has no sink
    conn.execute(f"CREATE SOURCE CONNECTOR m_{unique} MQTT WITH (broker = '{broker}', username = 'u', "
                 "password = 'hunter2')")
    shown = {r[0]: r for r in conn.execute("SHOW CONNECTORS").fetchall()}[f"m_{unique}"]
    assert shown[1:3] == ("source", "mqtt") and "hunter2" not in shown[3] and "password = '********'" in shown[3]
    refused(f"CREATE EXTERNAL STREAM ms_{unique} (v INT) WITH (connector = 'm_{unique}')",
            psycopg.errors.InvalidParameterValue, "needs a topic filter")
    refused(f"CREATE EXTERNAL STREAM ms_{unique} (v INT) WITH (connector = 'm_{unique}', kafka_topic = 't')",
            psycopg.errors.InvalidParameterValue, "kafka_topic is for Kafka streams, not MQTT ones")
    refused(f"CREATE STREAM ms_{unique} (v INT) WITH (mqtt_topic = 't')",
            psycopg.errors.FeatureNotSupported, "declare it EXTERNAL")
    # RisingWave's form: the broker in the source's options; credentials need a connector.
    refused(f"CREATE SOURCE rw_{unique} (v INT) WITH (connector = 'mqtt', url = '{broker}', topic = 't', "
            "username = 'u') FORMAT PLAIN ENCODE JSON",
            psycopg.errors.InvalidParameterValue, 'unrecognized mqtt source option "username"', "CONNECTOR")
    conn.execute(f"CREATE SOURCE rw_{unique} (v INT) WITH (connector = 'mqtt', url = '{broker}', "
                 f"topic = 'rw{unique}/v', qos = 'at_least_once') FORMAT PLAIN ENCODE JSON")
    # MQTT keeps nothing for a subscription that does not exist yet: publish once it does.
    wait_source(conn, f"rw_{unique}", "running")
    publish(mqtt_broker, f"rw{unique}/v", [{"v": 1}, {"v": 2}])
    wait_for(conn, f"SELECT sum(v) FROM rw_{unique}", [(3,)])
    conn.execute(f"DROP SOURCE rw_{unique}")
    conn.execute(f"DROP CONNECTOR m_{unique}")


def test_mqtt_source_survives_kill9_and_broker_restarts(fresh_server):
    """QoS 1 with a persistent session: messages published while the server is down (killed -9)
    or while the broker is away arrive; none is lost. Retained messages are read once."""
    broker = Broker(users={"plant": "s3cret"})
    broker.start()
    auth = ("plant", "s3cret")
    try:
        with fresh_server.connect() as conn:
            conn.execute(f"CREATE SOURCE CONNECTOR wrong MQTT WITH (broker = '{broker.address}', username = 'plant', "
                         "password = 'nope')")
            conn.execute("CREATE EXTERNAL STREAM denied (n INT) WITH (connector = 'wrong', mqtt_topic = 'x')")
            row = wait_source(conn, "denied", "retrying", "refused the connection")
            assert "nope" not in row[8]
            conn.execute("DROP CONNECTOR wrong CASCADE")
            publish(broker, "line/state", [{"n": 0}], retain=True, auth=auth)
            conn.execute(f"CREATE SOURCE CONNECTOR line MQTT WITH (broker = '{broker.address}', username = 'plant', "
                         "password = 's3cret', client_id = 'line')")
            conn.execute("CREATE EXTERNAL STREAM events (n INT) WITH (connector = 'line', mqtt_topic = 'line/#')")
            conn.execute("CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS c, count(DISTINCT n) AS d, "
                         "sum(n) AS s FROM events")
            wait_source(conn, "events", "running")
            publish(broker, "line/a", [{"n": i} for i in range(1, 101)], auth=auth)
            wait_for(conn, "SELECT count(*) FROM events", [(101,)])
            time.sleep(0.5)  # the acknowledgements follow the commit; this test wants none repeated
        fresh_server.kill9()
        publish(broker, "line/b", [{"n": i} for i in range(101, 201)], auth=auth)  # while the server is down
        fresh_server.restart()
        with fresh_server.connect() as conn:
            wait_for(conn, "SELECT count(DISTINCT n) FROM events", [(201,)])
            # As before the kill: the acknowledgements follow the commit, and a broker stopped
            # before they reach it delivers those messages again (at least once; seen in CI).
            time.sleep(0.5)
            broker.stop()
            wait_source(conn, "events", "retrying")
            broker.start()
            wait_source(conn, "events", "running")
            publish(broker, "line/c", [{"n": i} for i in range(201, 251)], auth=auth)
            wait_for(conn, "SELECT count(DISTINCT n) FROM events", [(251,)])
            # At least once: a message is repeated only if the server died between storing it and
            # acknowledging it; here it died at rest, so none is. The retained one was read once.
            ns = [r[0] for r in conn.execute("SELECT n FROM events").fetchall()]
            assert sorted(ns) == list(range(251))
            conn.execute("FLUSH totals")
            assert conn.execute("SELECT * FROM totals").fetchall() == [(251, 251, sum(range(251)))]
            assert conn.execute("SELECT * FROM totals").fetchall() == conn.execute(
                "SELECT count(*), count(DISTINCT n), sum(n) FROM events").fetchall()
            # Dropping the stream ends its persistent session: the broker keeps nothing more for it.
            wait_sessions(broker, auth, 2)  # the stream's session and the reader's own
            conn.execute("DROP CONNECTOR line CASCADE")
            wait_sessions(broker, auth, 1)
    finally:
        broker.close()


def test_mqtt_qos0_text_values(conn, unique, mqtt_broker):
    conn.execute(f"CREATE SOURCE CONNECTOR m0_{unique} MQTT WITH (broker = '{mqtt_broker.address}', qos = 0, "
                 "format = 'text')")
    conn.execute(f"CREATE EXTERNAL STREAM lines_{unique} (line TEXT) WITH (connector = 'm0_{unique}', "
                 f"mqtt_topic = 'log{unique}')")
    wait_source(conn, f"lines_{unique}", "running")  # QoS 0: nothing is kept for a session not yet there
    publish(mqtt_broker, f"log{unique}", ["started", "ok", "stopped"], qos=0)
    wait_for(conn, f"SELECT line FROM lines_{unique} ORDER BY line", [("ok",), ("started",), ("stopped",)])
    conn.execute(f"DROP CONNECTOR m0_{unique} CASCADE")
