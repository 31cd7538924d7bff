"""/metrics of a real server: work done through the wire shows up in a Prometheus scrape.

The shared server serves other tests too, so counters are compared as differences between a
scrape before and after this test's work (tests run one at a time), and series of relations
are looked up by this test's unique names."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable

import psycopg
import psycopg.errors
import pytest
from prometheus_client.parser import text_string_to_metric_families

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server) -> Scrape:
    url = f"http://{server.host}:{server.console_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    out: Scrape = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(scraped: Scrape, name: str, **labels: str) -> float:
    """A sample's value; 0 for a series not (yet) exported, as Prometheus' increase() reads it."""
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def series(scraped: Scrape, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in scraped.items() if n == name}


def eventually(server, check: Callable[[Scrape], bool], timeout: float = 60) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        scraped = scrape(server)
        if check(scraped):
            return scraped
        assert time.monotonic() < deadline, "the metrics did not reach the expected values in time"
        time.sleep(0.2)


OK = {"outcome": "ok", "sqlstate_class": "00"}


def test_metrics_reflect_connections_statements_appends_views_and_push_queries(server, unique):
    clicks, per_user, broken = f"m_clicks_{unique}", f"m_per_user_{unique}", f"m_broken_{unique}"
    before = scrape(server)

    def delta(after: Scrape, name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    with server.connect() as a, server.connect() as b:
        during = scrape(server)
        assert delta(during, "streamdb_connections") == 2
        assert delta(during, "streamdb_connections_accepted_total") == 2

        a.execute(f"CREATE STREAM {clicks} (user_id TEXT, ms INT)")
        a.execute(f"INSERT INTO {clicks} VALUES ('ann', 120), ('bob', 340)")
        a.execute(f"INSERT INTO {clicks} VALUES ('ann', 95)")
        a.execute(f"CREATE MATERIALIZED VIEW {per_user} AS "
                  f"SELECT user_id, count(*) AS n, sum(ms) AS total FROM {clicks} GROUP BY user_id")
        a.execute(f"INSERT INTO {clicks} VALUES ('cy', 410)")
        a.execute("FLUSH")
        assert a.execute(f"SELECT user_id, n, total FROM {per_user} ORDER BY user_id").fetchall() == [
            ("ann", 2, 215), ("bob", 1, 340), ("cy", 1, 410)]
        with pytest.raises(psycopg.errors.UndefinedColumn):
            a.execute(f"SELECT nope FROM {clicks}")
        # A view whose rows divide by zero: the CREATE fails with 22012 (those rows are the view's
        # errors; its pipeline goes on for the others).
        with pytest.raises(psycopg.errors.DivisionByZero):
            a.execute(f"CREATE MATERIALIZED VIEW {broken} AS SELECT ms / (ms - ms) AS x FROM {clicks}")

        # A push query whose client does not read: its changes wait in its buffer.
        b.execute("BEGIN")
        b.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE TO {per_user}")
        buffered = eventually(server, lambda s: 3 in series(s, "streamdb_push_query_buffered_changes").values())
        assert value(buffered, "streamdb_push_queries") >= 1
        assert delta(buffered, "streamdb_epoch_duration_seconds_count", query="push_query") >= 1
        rows = b.execute("FETCH ALL cur WITH (timeout = '30s')").fetchall()
        assert sorted((r[0], r[2], r[3]) for r in rows) == [
            ("insert", "ann", 2), ("insert", "bob", 1), ("insert", "cy", 1)]
        drained = scrape(server)
        assert 3 not in series(drained, "streamdb_push_query_buffered_changes").values()
        b.execute("CLOSE cur")
        b.execute("COMMIT")

    after = eventually(server, lambda s: delta(s, "streamdb_connections") == 0)
    assert delta(after, "streamdb_connections_accepted_total") == 2

    # Statements by kind and outcome, exactly.
    assert delta(after, "streamdb_statements_total", kind="create_stream", **OK) == 1
    assert delta(after, "streamdb_statements_total", kind="insert", **OK) == 3
    assert delta(after, "streamdb_statements_total", kind="create_materialized_view", **OK) == 1
    assert delta(after, "streamdb_statements_total", kind="create_materialized_view", outcome="error",
                 sqlstate_class="22") == 1
    assert delta(after, "streamdb_statements_total", kind="flush", **OK) == 1
    assert delta(after, "streamdb_statements_total", kind="select", **OK) == 1
    assert delta(after, "streamdb_statements_total", kind="select", outcome="error", sqlstate_class="42") == 1
    assert delta(after, "streamdb_statements_total", kind="declare_cursor", **OK) == 1
    assert delta(after, "streamdb_statements_total", kind="fetch_cursor", **OK) == 1
    assert delta(after, "streamdb_statements_total", kind="transaction_control", **OK) == 2
    assert delta(after, "streamdb_statement_duration_seconds_count", kind="insert") == 3
    assert delta(after, "streamdb_statement_duration_seconds_sum", kind="insert") > 0

    # Group commit: each INSERT (and the catalog's and the view's commits) made one commit durable;
    # a durable write carries one or more of them.
    commits = delta(after, "streamdb_storage_commits_total")
    groups = delta(after, "streamdb_storage_commit_groups_total")
    assert commits >= 3 + 1 + 1  # the INSERTs, CREATE STREAM, CREATE MATERIALIZED VIEW at least
    assert 1 <= groups <= commits

    # The log: the stream's four records, and the view's changes.
    assert value(after, "streamdb_log_appended_records_total", relation=clicks, kind="stream") == 4
    assert value(after, "streamdb_log_appended_bytes_total", relation=clicks, kind="stream") > 0
    assert value(after, "streamdb_log_appended_records_total", relation=per_user,
                 kind="materialized_view") >= 3
    # The broken view was dropped again: no series for it.
    assert not any(dict(labels).get("view") == broken for labels in series(after, "streamdb_view_lag_records"))

    # The view: caught up after FLUSH, maintained by epochs, not failing.
    view = {"view": per_user}
    assert value(after, "streamdb_view_lag_records", **view) == 0
    assert value(after, "streamdb_view_staleness_seconds", **view) == 0
    assert value(after, "streamdb_view_epochs_total", **view) >= 1
    assert value(after, "streamdb_view_failed", **view) == 0
    assert 0 < time.time() - value(after, "streamdb_view_last_epoch_timestamp_seconds", **view) < 600
    assert delta(after, "streamdb_epoch_duration_seconds_count", query="materialized_view") >= 1
    assert delta(after, "streamdb_epoch_duration_seconds_sum", query="materialized_view") > 0
    # The view ran on Spark, so the runtime is up: the readiness gauge says so.
    assert value(after, "streamdb_spark_ready") == 1

    # Process metrics come from prometheus-client's collector.
    assert value(after, "process_resident_memory_bytes") > 0


def test_metrics_count_refused_connections(server):
    before = scrape(server)
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(f"postgresql://nobody_here@{server.host}:{server.port}/streamdb", connect_timeout=10)
    after = scrape(server)
    refused = value(after, "streamdb_connections_refused_total", sqlstate="28000") - value(
        before, "streamdb_connections_refused_total", sqlstate="28000")
    assert refused == 1
    assert value(after, "streamdb_connections_accepted_total") == value(before, "streamdb_connections_accepted_total")


def test_metrics_count_source_records_and_dead_letters(server, conn, unique):
    folder = server.data_dir / "files" / f"metrics_in_{unique}"
    folder.mkdir(parents=True)
    lines = [json.dumps({"id": i, "name": f"n{i}"}) for i in range(3)] + ["{oops", "[1, 2"]
    (folder / "001.jsonl").write_text("\n".join(lines) + "\n")
    source = f"m_people_{unique}"
    conn.execute(f"CREATE SOURCE CONNECTOR m_files_{unique} FILE WITH (path = 'metrics_in_{unique}')")
    conn.execute(f"CREATE EXTERNAL STREAM {source} (id INT, name TEXT) WITH (connector = 'm_files_{unique}', "
                 "value_format = 'json', pattern = '*.jsonl')")
    scraped = eventually(server, lambda s: value(s, "streamdb_source_records_total", source=source) == 3
                         and value(s, "streamdb_source_bad_records_total", source=source) == 2)
    assert value(scraped, "streamdb_source_failed", source=source) == 0
    # The rows and the dead letters went through the log like any other append.
    assert value(scraped, "streamdb_log_appended_records_total", relation=source, kind="stream") == 3
    assert value(scraped, "streamdb_log_appended_records_total", relation=f"{source}_errors", kind="stream") == 2
    assert conn.execute(f"SELECT count(*) FROM {source}_errors").fetchone() == (2,)
    conn.execute(f"DROP CONNECTOR m_files_{unique} CASCADE")
    gone = scrape(server)
    assert ("streamdb_source_records_total", (("source", source),)) not in gone
