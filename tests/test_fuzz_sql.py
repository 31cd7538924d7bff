"""The SQL fuzzer (tests/fuzz/sql_fuzz.py) against a real server, and the internal errors it found
(now proper SQLSTATEs)."""

from __future__ import annotations

import datetime as dt
import threading
import time

import psycopg
import pytest

from tests.fuzz import sql_fuzz


def test_sql_fuzzer_finds_no_unfiled_internal_error(server):
    report = sql_fuzz.fuzz(server.dsn, statements=600, seed=20261121)
    print("sql fuzz:", {k: v for k, v in report.items() if k != "internal_errors"})
    assert report["internal_errors"] == [], "XX000 not filed in docs/known-issues.md"
    assert report["connection_lost"] == []
    # The statements were meaningful: many ran, many were refused for ordinary reasons.
    assert report["sqlstates"].get("ok", 0) > 100
    assert report["sqlstates"].get("42601", 0) > 10
    for kind in ("create", "insert", "select", "emit_changes", "show", "mutation"):
        assert report["kinds"].get(kind, 0) > 0, kind
    assert server.proc is not None and server.proc.poll() is None


def test_only_open_known_issues_excuse_internal_errors(tmp_path):
    doc = tmp_path / "known-issues.md"
    doc.write_text("# Known issues\n\n### Open one\n- **Statement**: `SELECT x`\n- **Error**: `boom here`\n"
                   "- **Status**: open (filed)\n\n### Fixed one\n- **Error**: `old boom`\n- **Status**: fixed\n")
    assert sql_fuzz.known_issue_fragments(doc) == ["boom here"]
    assert sql_fuzz.known_issue_fragments(tmp_path / "missing.md") == []
    assert "XX000" not in sql_fuzz.known_issue_fragments()  # the real file parses


@pytest.mark.parametrize(("ddl", "statement", "sqlstate"), [
    # decimal.InvalidOperation escaped as XX000 when a NUMERIC value exceeded the storage precision.
    ("CREATE TABLE {n} (id INT PRIMARY KEY, x NUMERIC)", "INSERT INTO {n} VALUES (1, 1e1000)", "22003"),
    ("CREATE STREAM {n} (x NUMERIC(10,2))", "INSERT INTO {n} VALUES (1e40)", "22003"),
    # A string literal where a column name belongs: AttributeError in the planner.
    (None, "CREATE TABLE {n} ('not a name' BIGINT, c0 INT)", "42601"),
    # Epoch milliseconds far out of range for a timestamp: ValueError from datetime.
    ("CREATE STREAM {n} (a TEXT, ts TIMESTAMPTZ)", "INSERT INTO {n} VALUES ('x', -9223372036854775808)", "22008"),
    # Spark's DATATYPE_MISMATCH (WHERE over an INT) was reported as XX000.
    ("CREATE TABLE {n} (id INT PRIMARY KEY, v INT)", "CREATE MATERIALIZED VIEW {n}_v AS SELECT id FROM {n} WHERE v",
     "42804"),
    # A view whose pipeline could not start (Spark: BOOLEAN and SMALLINT), retried for ever; and
    # the same condition ad hoc, which DuckDB answered taking the number as a truth value.
    ("CREATE TABLE {n} (id INT PRIMARY KEY, v SMALLINT, b BOOLEAN)",
     "CREATE MATERIALIZED VIEW {n}_v AS SELECT id FROM {n} WHERE b AND v", "42804"),
    ("CREATE TABLE {n} (id INT PRIMARY KEY, v SMALLINT)", "SELECT id FROM {n} WHERE v", "42804"),
])
def test_former_internal_errors_have_sqlstates(conn, unique, ddl, statement, sqlstate):
    name = f"fzreg_{unique}"
    if ddl:
        conn.execute(ddl.format(n=name))
    with pytest.raises(psycopg.Error) as e:
        conn.execute(statement.format(n=name))
    assert e.value.sqlstate == sqlstate, str(e.value)
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_sql_fuzzer_finds_no_answer_that_differs_between_the_engines(server):
    """Every plain SELECT the fuzzer generates runs through the embedded engine and through
    Spark: the same columns and rows, or both refuse it."""
    report = sql_fuzz.fuzz(server.dsn, statements=500, seed=20261127, compare_engines=True)
    print("sql fuzz, engines compared:", report["compared"], "differences:", report["engine_differences"])
    assert report["compared"] > 30
    assert report["engine_differences"] == []
    assert report["internal_errors"] == []


@pytest.mark.parametrize(("ddl", "statement", "sqlstate"), [
    # A malformed multidimensional array reached Arrow (XX000).
    ("CREATE STREAM {n} (a INT[])", "INSERT INTO {n} VALUES ('{{1,{{2}}}}')", "22P02"),
    # Comparisons PostgreSQL has no operator for: the embedded engine cast one side.
    ("CREATE TABLE {n} (id INT PRIMARY KEY, b BOOLEAN, x NUMERIC)", "SELECT 1 FROM {n} l JOIN {n} r ON l.b = r.x",
     "42883"),
    ("CREATE TABLE {n} (id INT PRIMARY KEY, t TIME, v VARCHAR(8))", "SELECT id FROM {n} WHERE t = v", "42883"),
    ("CREATE TABLE {n} (id INT PRIMARY KEY, j JSON)", "SELECT id FROM {n} WHERE j = j", "42883"),
    # A CASE WHEN over an integer, and a cast PostgreSQL lacks, where no row reaches them.
    ("CREATE TABLE {n} (id INT PRIMARY KEY, c INT)", "SELECT CASE WHEN id THEN 1 END FROM {n}", "42804"),
    ("CREATE TABLE {n} (id INT PRIMARY KEY, c INT)", "SELECT (id * c)::DATE FROM {n}", "42846"),
])
def test_engines_refuse_what_postgresql_refuses(server, conn, unique, ddl, statement, sqlstate):
    """Found by comparing the engines: each is refused by both, as PostgreSQL refuses it."""
    name = f"fzcmp_{unique}"
    conn.execute(ddl.format(n=name))
    with server.connect() as spark:
        spark.execute("SET streamdb.spark_read_threshold_rows = 0")
        for c in (conn, spark):
            with pytest.raises(psycopg.Error) as e:
                c.execute(statement.format(n=name))
            assert e.value.sqlstate == sqlstate, str(e.value)
            assert c.execute("SELECT 1").fetchone() == (1,)


def test_push_query_with_array_values(server, conn, unique):
    """array_agg in an EMIT CHANGES query: rows holding lists were counted in a Counter, which
    failed with "unhashable type: 'list'" (XX000)."""
    t = f"fzarr_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, c TEXT)")

    def insert_later() -> None:
        time.sleep(1)
        with server.connect() as other:
            other.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")

    writer = threading.Thread(target=insert_later)
    writer.start()
    got = []
    with server.connect() as push, push.cursor() as cur:
        # A bound, not a timing assertion: the push query stops as soon as both rows came. On a
        # fresh server Spark is not ready when the rows are written; without a snapshot they must
        # still come as changes (the result they are diffed against is the one when the query began).
        timer = threading.Timer(60, push.cancel)
        timer.start()
        try:
            for row in cur.stream(f"SELECT id, array_agg(c) AS a FROM {t} GROUP BY id "
                                  "EMIT CHANGES WITH (snapshot = false)"):
                got.append((row[0], row[2], row[3]))
                if len(got) == 2:
                    push.cancel()
        except psycopg.errors.QueryCanceled:
            pass
        finally:
            timer.cancel()
    writer.join()
    assert sorted(got) == [("insert", 1, ["a"]), ("insert", 2, ["b"])]


def test_array_agg_of_intervals(conn, unique):
    """Arrow's MonthDayNano elements of an interval[] were formatted as nested arrays (XX000)."""
    s = f"fziv_{unique}"
    conn.execute(f"CREATE STREAM {s} (k INT, d INTERVAL)")
    conn.execute(f"INSERT INTO {s} VALUES (1, '1 day 2 hours'), (1, '-1 minute')")
    row = conn.execute(f"SELECT k, array_agg(d) FROM {s} GROUP BY k").fetchone()
    assert row is not None and row[0] == 1
    assert sorted(row[1]) == [dt.timedelta(minutes=-1), dt.timedelta(days=1, hours=2)]
