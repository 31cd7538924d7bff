"""The connector test infrastructure works for real: a Kafka cluster (mock or $STREAMDB_TEST_KAFKA)
and a PostgreSQL server started by the fixtures in conftest.py."""

from __future__ import annotations

import os
import time

import psycopg
from confluent_kafka import Consumer
from kafka_util import Record, consume_all, produce


def test_kafka_round_trip_with_keys_headers_and_timestamps(kafka_bootstrap: str, kafka_topic: str) -> None:
    ts = int(time.time() * 1000) - 60_000
    delivered = produce(kafka_bootstrap, kafka_topic, [
        {"key": "k1", "value": b"\x00raw", "headers": {"source": "test", "n": b"1"}, "timestamp_ms": ts},
        {"key": b"k2", "value": "text", "headers": [("h", b"a"), ("h", b"b")], "timestamp_ms": ts + 1},
        {"key": None, "value": {"id": 3, "name": "three"}, "timestamp_ms": ts + 2},
    ], partition=0)
    assert delivered == [(0, 0), (0, 1), (0, 2)]

    records = consume_all(kafka_bootstrap, kafka_topic, expected=3)

    assert records == [
        Record(b"k1", b"\x00raw", [("source", b"test"), ("n", b"1")], 0, 0, ts),
        Record(b"k2", b"text", [("h", b"a"), ("h", b"b")], 0, 1, ts + 1),
        Record(None, b'{"id":3,"name":"three"}', [], 0, 2, ts + 2),
    ]


def test_kafka_multiple_partitions_and_tombstones(kafka_bootstrap: str, kafka_topic: str) -> None:
    # Auto-created topics on the mock cluster have 4 partitions; a real broker's default may differ.
    produce(kafka_bootstrap, kafka_topic, [{"key": "warm-up", "value": "x", "partition": 0}])
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused"})
    try:
        partitions = len(consumer.list_topics(kafka_topic, timeout=10).topics[kafka_topic].partitions)
    finally:
        consumer.close()
    if "STREAMDB_TEST_KAFKA" not in os.environ:
        assert partitions == 4
    last = partitions - 1
    produce(kafka_bootstrap, kafka_topic, [
        {"key": "a", "value": "to-last", "partition": last},
        {"key": "a", "value": None, "partition": last},  # tombstone
        {"key": "b", "value": "to-first"},
    ], partition=0)

    # expected=None: read everything present when reading began, then return without waiting.
    started = time.monotonic()
    records = consume_all(kafka_bootstrap, kafka_topic, timeout=20)
    assert time.monotonic() - started < 15

    assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
        (0, 0, b"warm-up", b"x"),
        (0, 1, b"b", b"to-first"),
        (last, 0, b"a", b"to-last"),
        (last, 1, b"a", None),
    ]


def test_kafka_consume_of_missing_topic_times_out_empty(kafka_bootstrap: str, kafka_topic: str) -> None:
    assert consume_all(kafka_bootstrap, kafka_topic, timeout=1) == []


def test_postgres_upsert_round_trip(postgres_server: str) -> None:
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None and int(version[0]) >= 120000
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        conn.execute("DROP TABLE IF EXISTS infra_upsert")
        conn.execute("CREATE TABLE infra_upsert (id int PRIMARY KEY, name text NOT NULL, n int NOT NULL)")
        upsert = ("INSERT INTO infra_upsert (id, name, n) VALUES (%s, %s, %s) "
                  "ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, n = infra_upsert.n + EXCLUDED.n")
        conn.execute(upsert, (1, "first", 1))
        conn.execute(upsert, (1, "second ü", 10))
        conn.execute(upsert, (2, "other", 5))
        rows = conn.execute("SELECT id, name, n FROM infra_upsert ORDER BY id").fetchall()
        assert rows == [(1, "second ü", 11), (2, "other", 5)]
        conn.execute("DROP TABLE infra_upsert")
