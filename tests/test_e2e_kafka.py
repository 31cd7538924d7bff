"""Kafka sources end to end: a real `streamdb serve` (real Spark) reading topics of a Kafka
cluster over TCP (librdkafka's mock cluster in its own process, or STREAMDB_TEST_KAFKA)."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.kafka_util import produce
from tests.source_util import wait_for


def test_external_stream_views_and_dead_letters(server, conn, unique, kafka_bootstrap, kafka_topic):
    c, s = f"kc_{unique}", f"students_{unique}"
    conn.execute(f"CREATE SOURCE CONNECTOR {c} KAFKA WITH (bootstrap_servers = '{kafka_bootstrap}', "
                 "properties.client.id = 'streamdb-test')")
    conn.execute(f"CREATE EXTERNAL STREAM {s} (id STRING KEY, score INT, subject TEXT, trace TEXT HEADER('trace')) "
                 f"WITH (connector = '{c}', kafka_topic = '{kafka_topic}', value_format = 'JSON', partitions = 4, "
                 "max_record_bytes = 5000)")
    conn.execute(f"CREATE MATERIALIZED VIEW {s}_avg AS SELECT subject, count(*) AS n, sum(score) AS total "
                 f"FROM {s} GROUP BY subject")
    produce(kafka_bootstrap, kafka_topic, [
        {"key": "ann", "value": {"score": 90, "subject": "math"}, "headers": {"trace": "t1"}},
        {"key": "bob", "value": {"score": 70, "subject": "math"}},
        {"key": "cy", "value": {"score": 85, "subject": "art"}},
        {"key": "bad1", "value": "{not json"},
        {"key": "bad2", "value": {"score": "lots", "subject": "math"}},
        {"key": "big", "value": {"score": 1, "subject": "x" * 6000}},
    ])
    wait_for(conn, f"SELECT count(*) FROM {s}", [(3,)])
    assert sorted(conn.execute(f"SELECT id, score, subject, trace FROM {s}").fetchall()) == [
        ("ann", 90, "math", "t1"), ("bob", 70, "math", None), ("cy", 85, "art", None)]
    conn.execute("FLUSH")
    view = sorted(conn.execute(f"SELECT * FROM {s}_avg").fetchall())
    assert view == [("art", 1, 85), ("math", 2, 160)]
    assert view == sorted(conn.execute(f"SELECT subject, count(*), sum(score) FROM {s} GROUP BY subject").fetchall())
    # Bad records: counted, kept with their bytes and the reason, never silently dropped.
    wait_for(conn, f"SELECT count(*) FROM {s}_errors", [(3,)])
    errors = conn.execute(f"SELECT source, reason, raw_key, raw_text FROM {s}_errors ORDER BY raw_text").fetchall()
    assert {(e[0], bytes(e[2])) for e in errors} == {(kafka_topic, b"bad1"), (kafka_topic, b"bad2"),
                                                     (kafka_topic, b"big")}
    reasons = {bytes(e[2]): e[1] for e in errors}
    assert reasons[b"bad1"].startswith("invalid JSON")
    assert 'column "score"' in reasons[b"bad2"] and "lots" in reasons[b"bad2"]
    assert "exceeds the limit of 5000 bytes" in reasons[b"big"]
    sources = {r[0]: r for r in conn.execute("SHOW SOURCES").fetchall()}
    assert sources[s][1:5] == (c, kafka_topic, "json", "running")
    assert sources[s][5:8] == (3, 3, f"{s}_errors")
    # More records flow into the view.
    produce(kafka_bootstrap, kafka_topic, [{"key": "dee", "value": {"score": 60, "subject": "art"}}])
    wait_for(conn, f"SELECT count(*) FROM {s}", [(4,)])
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT * FROM {s}_avg").fetchall()) == [("art", 2, 145), ("math", 2, 160)]
    # A push query over the external stream sees records as they arrive from Kafka.
    with server.connect() as push:
        push.execute("BEGIN")
        push.execute(f"DECLARE pq CURSOR FOR SUBSCRIBE TO (SELECT id, score FROM {s} WHERE score > 95) "
                     "WITH (snapshot = false)")
        assert push.execute("FETCH ALL pq WITH (timeout = '2s')").fetchall() == []
        produce(kafka_bootstrap, kafka_topic, [{"key": "eve", "value": {"score": 99, "subject": "art"}},
                                               {"key": "fay", "value": {"score": 10, "subject": "art"}}])
        pushed: list = []
        deadline = time.monotonic() + 30
        while not pushed and time.monotonic() < deadline:
            pushed += push.execute("FETCH 10 pq WITH (timeout = '1s')").fetchall()
        assert [(r[0], r[2], r[3]) for r in pushed] == [("insert", "eve", 99)]
        push.execute("COMMIT")
    # Dropping the connector needs CASCADE; it takes the stream, its dead letters and the view.
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        conn.execute(f"DROP SOURCE CONNECTOR {c}")
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        conn.execute(f"DROP STREAM {s}_errors")
    conn.execute(f"DROP CONNECTOR {c} CASCADE")
    for rel in (s, f"{s}_errors", f"{s}_avg"):
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute(f"SELECT * FROM {rel}")
    assert s not in {r[0] for r in conn.execute("SHOW SOURCES").fetchall()}


def test_connector_options_are_checked_and_secrets_masked(conn, unique, kafka_bootstrap):
    c = f"sec_{unique}"
    conn.execute(f"CREATE SOURCE CONNECTOR {c} KAFKA WITH (bootstrap_servers = '{kafka_bootstrap}', "
                 "properties.security.protocol = 'PLAINTEXT', properties.sasl.username = 'u', "
                 "properties.sasl.password = 'hunter2')")
    shown = conn.execute("SHOW CONNECTORS").fetchall()
    row = next(r for r in shown if r[0] == c)
    assert row[1:3] == ("source", "kafka") and "hunter2" not in row[3] and "********" in row[3]
    assert "sasl.username = 'u'" in row[3]
    created = conn.execute(f"SHOW CREATE SOURCE CONNECTOR {c}").fetchone()
    assert created[0] == c and "hunter2" not in created[1] and "properties.sasl.password = '********'" in created[1]
    assert conn.execute(f"SHOW CREATE CONNECTOR {c}").fetchone() == created
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        conn.execute(f"CREATE SOURCE CONNECTOR {c}_f KAFKA WITH (bootstrap_servers = 'x:1', "
                     "properties.ssl.ca.location = '/etc/passwd')")
    assert "ssl.ca.location" in str(e.value)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
        conn.execute(f"CREATE SOURCE CONNECTOR {c}_u KAFKA WITH (bootstrap_servers = 'x:1', properties.bogus = 1)")
    assert "bogus" in str(e.value)
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(f"CREATE SOURCE CONNECTOR {c}_m KAFKA WITH (topic = 'x')")
    with pytest.raises(psycopg.errors.DuplicateObject):
        conn.execute(f"CREATE SOURCE CONNECTOR {c} KAFKA WITH (bootstrap_servers = 'x:1')")
    conn.execute(f"CREATE SOURCE CONNECTOR IF NOT EXISTS {c} KAFKA WITH (bootstrap_servers = 'x:1')")
    with pytest.raises(psycopg.errors.UndefinedObject):
        conn.execute(f"CREATE EXTERNAL STREAM nope_{unique} (a INT) WITH (connector = 'missing_{unique}', "
                     "kafka_topic = 't')")
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute(f"CREATE STREAM internal_{unique} (a INT) WITH (kafka_topic = 't')")
    conn.execute(f"DROP SOURCE CONNECTOR {c}")
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_risingwave_create_source_and_restart_exactly_once(fresh_server, kafka_bootstrap, kafka_topic):
    srv = fresh_server
    with srv.connect() as c:
        c.execute(f"CREATE SOURCE bids (auction INT, price INT) WITH (connector = 'kafka', topic = '{kafka_topic}', "
                  f"properties.bootstrap.server = '{kafka_bootstrap}', scan.startup.mode = 'earliest') "
                  "FORMAT PLAIN ENCODE JSON")
        c.execute("CREATE MATERIALIZED VIEW bid_totals AS SELECT auction, count(*) AS n, sum(price) AS total "
                  "FROM bids GROUP BY auction")
        produce(kafka_bootstrap, kafka_topic, [{"value": {"auction": i % 3, "price": i}} for i in range(100)])
        wait_for(c, "SELECT count(*) FROM bids", [(100,)])
    srv.kill9()
    produce(kafka_bootstrap, kafka_topic, [{"value": {"auction": i % 3, "price": i}} for i in range(100, 150)])
    srv.start()
    with srv.connect() as c:
        wait_for(c, "SELECT count(*) FROM bids", [(150,)])
        time.sleep(1.0)  # nothing arrives twice
        assert c.execute("SELECT count(*), sum(price) FROM bids").fetchone() == (150, sum(range(150)))
        c.execute("FLUSH")
        view = sorted(c.execute("SELECT * FROM bid_totals").fetchall())
        assert view == sorted(c.execute("SELECT auction, count(*), sum(price) FROM bids GROUP BY auction").fetchall())
        assert sum(r[1] for r in view) == 150
        c.execute("DROP SOURCE bids CASCADE")


def test_csv_avro_and_text_formats(conn, unique, kafka_bootstrap):
    import io
    import json

    import fastavro

    c = f"fmt_{unique}"
    conn.execute(f"CREATE SOURCE CONNECTOR {c} KAFKA WITH (bootstrap_servers = '{kafka_bootstrap}')")
    topics = {f: f"t_{f}_{unique}" for f in ("csv", "avro", "text")}
    conn.execute(f"CREATE EXTERNAL STREAM csv_{unique} (a INT, b TEXT, at TIMESTAMPTZ) WITH (connector = '{c}', "
                 f"kafka_topic = '{topics['csv']}', value_format = 'csv', csv_delimiter = ';', timestamp = 'at')")
    schema = {"type": "record", "name": "Reading", "fields": [{"name": "sensor", "type": "string"},
                                                              {"name": "value", "type": "double"}]}
    conn.execute(f"CREATE EXTERNAL STREAM avro_{unique} (sensor TEXT, value DOUBLE PRECISION) WITH (connector = "
                 f"'{c}', kafka_topic = '{topics['avro']}', value_format = 'avro', "
                 f"avro_schema = '{json.dumps(schema)}')")
    conn.execute(f"CREATE EXTERNAL STREAM text_{unique} (line TEXT) WITH (connector = '{c}', "
                 f"kafka_topic = '{topics['text']}', value_format = 'text')")
    conn.execute(f"CREATE EXTERNAL STREAM raw_{unique} (k BYTEA KEY, payload BYTEA, hs JSONB HEADERS) WITH "
                 f"(connector = '{c}', kafka_topic = '{topics['text']}', value_format = 'bytes', "
                 "key_format = 'bytes')")

    def avro(doc: dict, confluent: bool) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), doc)
        return (b"\x00\x00\x00\x00\x07" if confluent else b"") + buf.getvalue()

    produce(kafka_bootstrap, topics["csv"], [{"value": "1;one;2024-01-01 00:00:00+00"}, {"value": "2;;"},
                                             {"value": "x;bad;"}, {"value": "1;2"}])
    produce(kafka_bootstrap, topics["avro"], [{"value": avro({"sensor": "s1", "value": 1.5}, False)},
                                              {"value": avro({"sensor": "s2", "value": -2.0}, True)},
                                              {"value": b"\x01\x02"}])
    produce(kafka_bootstrap, topics["text"], [{"value": "hello, world", "key": b"\x01",
                                               "headers": [("h", b"1"), ("h", b"2")]},
                                              {"value": b"\xff\xfe"}])
    wait_for(conn, f"SELECT a, b FROM csv_{unique} ORDER BY a", [(1, "one"), (2, None)])
    assert conn.execute(f"SELECT rowtime FROM csv_{unique} WHERE a = 1").fetchone()[0].isoformat() == \
        "2024-01-01T00:00:00+00:00"
    wait_for(conn, f"SELECT sensor, value FROM avro_{unique} ORDER BY sensor", [("s1", 1.5), ("s2", -2.0)])
    wait_for(conn, f"SELECT line FROM text_{unique}", [("hello, world",)])
    wait_for(conn, f"SELECT count(*) FROM raw_{unique}", [(2,)])
    raw = sorted(((bytes(r[0]) if r[0] is not None else None, bytes(r[1]),
                   json.loads(r[2]) if isinstance(r[2], str) else r[2])
                  for r in conn.execute(f"SELECT k, payload, hs FROM raw_{unique}").fetchall()), key=repr)
    assert raw == sorted([(b"\x01", b"hello, world", [{"key": "h", "value": "1"}, {"key": "h", "value": "2"}]),
                          (None, b"\xff\xfe", [])], key=repr)
    wait_for(conn, f"SELECT count(*) FROM csv_{unique}_errors", [(2,)])
    reasons = sorted(r[0] for r in conn.execute(f"SELECT reason FROM csv_{unique}_errors").fetchall())
    assert any("CSV record has 2 fields" in r for r in reasons) and any('column "a"' in r for r in reasons)
    wait_for(conn, f"SELECT count(*) FROM avro_{unique}_errors", [(1,)])
    assert "Avro" in conn.execute(f"SELECT reason FROM avro_{unique}_errors").fetchone()[0]
    wait_for(conn, f"SELECT reason FROM text_{unique}_errors", [("the record value is not UTF-8 text "
                                                               "(value_format = 'text')",)])
    conn.execute(f"DROP CONNECTOR {c} CASCADE")


def test_avro_with_a_schema_registry(conn, unique, kafka_bootstrap, kafka_topic):
    """Writer schemas come from a Confluent-compatible registry (a small HTTP server here)."""
    import http.server
    import io
    import json
    import threading

    import fastavro

    schema = {"type": "record", "name": "Click", "fields": [{"name": "page", "type": "string"},
                                                            {"name": "ms", "type": "int"}]}

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            if self.path == "/schemas/ids/42":
                body = json.dumps({"schema": json.dumps(schema)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        conn.execute(f"CREATE EXTERNAL STREAM clicks_{unique} (page TEXT, ms INT) WITH (kafka_topic = "
                     f"'{kafka_topic}', value_format = 'avro', schema_registry_url = '{url}', "
                     f"bootstrap_servers = '{kafka_bootstrap}')")

        def framed(schema_id: int, doc: dict) -> bytes:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), doc)
            return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()

        produce(kafka_bootstrap, kafka_topic, [{"value": framed(42, {"page": "/a", "ms": 12})},
                                               {"value": framed(7, {"page": "/b", "ms": 1})}])
        wait_for(conn, f"SELECT page, ms FROM clicks_{unique}", [("/a", 12)])
        wait_for(conn, f"SELECT reason FROM clicks_{unique}_errors", [("schema id 7 is not in the schema registry",)])
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute(f"CREATE EXTERNAL STREAM nos_{unique} (a INT) WITH (kafka_topic = 't', value_format = 'avro')")
        conn.execute(f"DROP STREAM clicks_{unique}")
    finally:
        httpd.shutdown()
