"""The Kafka-backed log (`--log kafka`) against a real Kafka cluster over TCP (the mock
cluster in its own process, or STREAMDB_TEST_KAFKA)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from streamdb.storage import Append, Commit, open_storage


def batches(snap, rel, partition=0, start=0, end=None):
    return [(first, count, payload) for first, count, payload in snap.read(rel, partition, start, end)]


def test_appends_reads_recovery_orphans_and_drops(tmp_path: Path, kafka_bootstrap: str) -> None:
    path = str(tmp_path / "db")
    s = open_storage("kafka", path, kafka_bootstrap=kafka_bootstrap)
    r1 = s.commit(Commit(appends=[Append(7, 0, b"a" * 10, 2), Append(7, 1, b"b", 1)],
                         puts=[("meta", b"k", b"v")]))
    assert r1.first_offsets == [0, 0]
    r2 = s.commit(Commit(appends=[Append(7, 0, b"c", 3)]))
    assert r2.first_offsets == [2] and r2.sequence > r1.sequence
    with s.snapshot() as snap:
        assert snap.end_offset(7, 0) == 5 and snap.end_offset(7, 1) == 1 and snap.end_offset(8, 0) == 0
        assert batches(snap, 7) == [(0, 2, b"a" * 10), (2, 3, b"c")]
        assert batches(snap, 7, start=3) == [(2, 3, b"c")]
        assert batches(snap, 7, 1) == [(0, 1, b"b")]
        assert snap.get("meta", b"k") == b"v"
        assert snap.get_many("meta", [b"x", b"k"]) == [None, b"v"]
    # A message produced but never acknowledged (a crash before the local commit) is an orphan:
    # readers never see it, and the next commit takes its offsets.
    orphan = Producer({"bootstrap.servers": kafka_bootstrap})
    orphan.produce(s.topic(7), b"orphan", partition=0)
    orphan.flush(10)
    s.commit(Commit(appends=[Append(7, 0, b"d", 1)]))
    topic = s.topic(7)
    s.close()
    # Reopen: everything is read back from Kafka through the index.
    s = open_storage("kafka", path, kafka_bootstrap=kafka_bootstrap)
    assert s.topic(7) == topic
    with s.snapshot() as snap:
        assert batches(snap, 7) == [(0, 2, b"a" * 10), (2, 3, b"c"), (5, 1, b"d")]
    # Drop, then append again in the same commit: offsets start over.
    r = s.commit(Commit(drop_relations=[7], appends=[Append(7, 0, b"new", 1)]))
    assert r.first_offsets == [0]
    with s.snapshot() as snap:
        assert batches(snap, 7) == [(0, 1, b"new")] and snap.end_offset(7, 1) == 0
    s.close()


def test_server_with_kafka_log_keeps_streams_views_and_tables_across_kill_9(tmp_path, kafka_bootstrap) -> None:
    from tests.conftest import ServerProcess

    srv = ServerProcess(tmp_path / "data", name="kafkalog",
                        extra_args=["--log", "kafka", "--kafka-bootstrap", kafka_bootstrap])
    srv.start()
    try:
        with srv.connect() as c:
            c.execute("CREATE STREAM ev (k INT, v INT)")
            c.execute("CREATE TABLE t (id INT PRIMARY KEY, name TEXT)")
            c.execute("CREATE MATERIALIZED VIEW sums AS SELECT k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k")
            c.execute("INSERT INTO ev SELECT i % 3, i FROM generate_series(1, 30) AS g(i)")
            c.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
            c.execute("UPDATE t SET name = 'z' WHERE id = 2")
            c.execute("FLUSH")
        srv.kill9()
        srv.start()
        with srv.connect() as c:
            c.execute("INSERT INTO ev VALUES (0, 100)")
            c.execute("FLUSH")
            assert c.execute("SELECT count(*), sum(v) FROM ev").fetchone() == (31, 565)
            assert sorted(c.execute("SELECT * FROM t").fetchall()) == [(1, "a"), (2, "z")]
            view = sorted(c.execute("SELECT * FROM sums").fetchall())
            assert view == sorted(c.execute("SELECT k, count(*), sum(v) FROM ev GROUP BY k").fetchall())
            assert [r[0] for r in c.execute("SHOW STREAMS").fetchall()] == ["ev"]
    finally:
        srv.stop()
