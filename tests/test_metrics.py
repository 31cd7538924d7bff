"""streamdb/metrics.py without a server process: statement kinds, an engine's own registry (no
Spark) counting statements and log appends, and the wire server counting connections.
tests/test_e2e_metrics.py scrapes a real server's /metrics."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fake_engine import FakeEngine
from prometheus_client.parser import text_string_to_metric_families

from streamdb.config import Settings
from streamdb.errors import StreamDBError
from streamdb.metrics import Metrics, exposition, statement_kind
from streamdb.runtime.engine import Engine
from streamdb.sql.parser import parse_statements
from streamdb.wire.server import WireServer


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return scraped.get((name, tuple(sorted(labels.items()))))


@pytest.mark.parametrize(("sql", "kind"), [
    ("SELECT 1", "select"),
    ("SELECT a FROM t UNION SELECT b FROM u", "select"),
    ("VALUES (1)", "select"),
    ("INSERT INTO t VALUES (1)", "insert"),
    ("UPDATE t SET a = 1", "update"),
    ("DELETE FROM t", "delete"),
    ("CREATE TABLE t (a INT PRIMARY KEY)", "create_table"),
    ("CREATE STREAM s (a INT)", "create_stream"),
    ("CREATE MATERIALIZED VIEW v AS SELECT 1", "create_materialized_view"),
    ("CREATE VIEW v AS SELECT 1", "create_view"),
    ("DROP TABLE t", "drop"),
    ("SELECT * FROM s EMIT CHANGES", "push_query"),
    ("SHOW QUERIES", "show_objects"),
    ("FLUSH", "flush"),
    ("BEGIN", "transaction_control"),
    ("COPY t FROM STDIN", "copy"),
])
def test_statement_kind_names_the_kind_of_statement_only(sql: str, kind: str) -> None:
    (statement,) = parse_statements(sql)
    assert statement_kind(statement.ast) == kind


@pytest.fixture()
def engine() -> Iterator[Engine]:
    with tempfile.TemporaryDirectory(prefix="streamdb-metrics-") as d:
        eng = Engine(Settings(data_dir=Path(d), spark_enabled=False))
        try:
            yield eng
        finally:
            eng.close()


async def _run(engine: Engine, sqls: list[str]) -> list[str]:
    """Run each statement in one session; the SQLSTATE of each that fails, in order."""
    session = engine.new_session("streamdb", "streamdb", {})
    failures = []
    for sql in sqls:
        try:
            for statement in session.parse(sql):
                await session.execute(statement)
        except StreamDBError as e:
            failures.append(e.sqlstate)
    session.close()
    return failures


def test_engine_counts_statements_by_kind_and_outcome_and_log_appends(engine: Engine) -> None:
    failures = asyncio.run(_run(engine, [
        "CREATE STREAM readings (sensor TEXT, celsius INT)",
        "INSERT INTO readings VALUES ('a', 20), ('b', 21)",
        "INSERT INTO readings VALUES ('c', 22)",
        "CREATE TABLE plans (id INT PRIMARY KEY, name TEXT)",
        "INSERT INTO plans VALUES (1, 'free')",
        "INSERT INTO plans VALUES (1, 'pro')",  # replaces row 1: logs -1 old, +1 new
        "SELECT count(*) FROM readings",
        "SELECT nope FROM readings",  # 42703 at execution
        "SELEC 1",  # 42601 at parse
    ]))
    assert failures == ["42703", "42601"]
    scraped = samples(exposition(engine)[0])
    ok = {"outcome": "ok", "sqlstate_class": "00"}
    assert value(scraped, "streamdb_statements_total", kind="create_stream", **ok) == 1
    assert value(scraped, "streamdb_statements_total", kind="create_table", **ok) == 1
    assert value(scraped, "streamdb_statements_total", kind="insert", **ok) == 4
    assert value(scraped, "streamdb_statements_total", kind="select", **ok) == 1
    assert value(scraped, "streamdb_statements_total", kind="select", outcome="error", sqlstate_class="42") == 1
    assert value(scraped, "streamdb_statements_total", kind="unparsed", outcome="error", sqlstate_class="42") == 1
    assert value(scraped, "streamdb_statement_duration_seconds_count", kind="insert") == 4
    assert value(scraped, "streamdb_statement_duration_seconds_count", kind="select") == 2
    assert value(scraped, "streamdb_statement_duration_seconds_sum", kind="insert") > 0
    assert value(scraped, "streamdb_log_appended_records_total", relation="readings", kind="stream") == 3
    assert value(scraped, "streamdb_log_appended_records_total", relation="plans", kind="table") == 3
    assert value(scraped, "streamdb_log_appended_bytes_total", relation="readings", kind="stream") > 0
    assert value(scraped, "streamdb_push_queries") == 0
    assert value(scraped, "streamdb_spark_job_failures_total", query="materialized_view") == 0
    assert value(scraped, "process_cpu_seconds_total") is not None  # the process collector is there

    # A dropped relation's series end with it.
    asyncio.run(_run(engine, ["DROP STREAM readings"]))
    scraped = samples(exposition(engine)[0])
    assert value(scraped, "streamdb_log_appended_records_total", relation="readings", kind="stream") is None
    assert value(scraped, "streamdb_log_appended_records_total", relation="plans", kind="table") == 3


def test_each_engine_has_its_own_registry(engine: Engine) -> None:
    with tempfile.TemporaryDirectory(prefix="streamdb-metrics-") as d:
        other = Engine(Settings(data_dir=Path(d), spark_enabled=False))
        try:
            asyncio.run(_run(other, ["SELECT 1", "SELECT 2"]))
            asyncio.run(_run(engine, ["SELECT 1"]))
            ok = {"kind": "select", "outcome": "ok", "sqlstate_class": "00"}
            assert value(samples(exposition(other)[0]), "streamdb_statements_total", **ok) == 2
            assert value(samples(exposition(engine)[0]), "streamdb_statements_total", **ok) == 1
        finally:
            other.close()


def test_exposition_is_the_prometheus_text_format(engine: Engine) -> None:
    body, content_type = exposition(engine)
    assert content_type.startswith("text/plain")
    assert b"# TYPE streamdb_statements_total counter" in body
    assert b"# TYPE streamdb_statement_duration_seconds histogram" in body


class _WireThread:
    """A WireServer over the fake engine with a Metrics observer, in a loop on its own thread."""

    def __init__(self, **kwargs: Any) -> None:
        self.metrics = Metrics()
        self.loop = asyncio.new_event_loop()
        self.server = WireServer(FakeEngine(), "127.0.0.1", 0, observer=self.metrics, **kwargs)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)

    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.server.port} user=streamdb dbname=streamdb sslmode=disable"

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client import generate_latest

        return samples(generate_latest(self.metrics.registry))

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def _eventually(check: Any, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_wire_server_counts_open_accepted_and_refused_connections() -> None:
    wire = _WireThread(max_connections=1)
    try:
        with psycopg.connect(wire.dsn()) as first:
            first.execute("select 1")
            scraped = wire.scrape()
            assert value(scraped, "streamdb_connections") == 1
            assert value(scraped, "streamdb_connections_accepted_total") == 1
            with pytest.raises(psycopg.OperationalError, match="too many clients"):
                psycopg.connect(wire.dsn())
            assert value(wire.scrape(), "streamdb_connections_refused_total", sqlstate="53300") == 1
        _eventually(lambda: value(wire.scrape(), "streamdb_connections") == 0)
        with psycopg.connect(wire.dsn()) as second:
            second.execute("select 1")
        _eventually(lambda: value(wire.scrape(), "streamdb_connections") == 0)
        scraped = wire.scrape()
        assert value(scraped, "streamdb_connections_accepted_total") == 2
        assert value(scraped, "streamdb_connections_refused_total", sqlstate="53300") == 1
    finally:
        wire.stop()
