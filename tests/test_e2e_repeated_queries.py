"""The same query text sent again reuses its parse and its plan (runtime/session.py: `_parsed`,
`_query_plans`; a pool's `SELECT 1`, a dashboard's refresh) and still answers as if it were
planned afresh: new rows, a table dropped and created again with other columns, a changed
setting, the clock, and system tables, by the simple and the extended protocol."""

from __future__ import annotations

import time
from decimal import Decimal

import psycopg
import pytest


def one(cur: psycopg.Cursor, sql: str) -> tuple:
    cur.execute(sql)
    row = cur.fetchone()
    assert row is not None
    return row


@pytest.mark.parametrize("protocol", ["simple", "extended"])
def test_a_repeated_query_answers_as_if_planned_again(server, conn, unique, protocol):
    cur = psycopg.ClientCursor(conn) if protocol == "simple" else conn.cursor()
    t = f"rq_{protocol}_{unique}"
    q = f"SELECT count(*), max(v) FROM {t}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v TEXT)")
    assert one(cur, q) == (0, None)
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    assert one(cur, q) == (2, "b")
    conn.execute(f"DELETE FROM {t} WHERE id = 2")
    assert one(cur, q) == (1, "a")

    # The catalog changed: the same text now reads another table of the same name.
    conn.execute(f"DROP TABLE {t}")
    with pytest.raises(psycopg.errors.UndefinedTable):
        one(cur, q)
    conn.rollback()
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 7), (2, 40)")
    assert one(cur, q) == (2, 40)

    # A setting the query reads, set between two runs of the same text.
    setting = f"SELECT current_setting('rq.x_{protocol}', true)"
    assert one(cur, setting) == (None,)
    conn.execute(f"SET rq.x_{protocol} = 'first'")
    assert one(cur, setting) == ("first",)
    conn.execute(f"SET rq.x_{protocol} = 'second'")
    assert one(cur, setting) == ("second",)

    # The clock and random() are read when the query runs, not when it was planned.
    first = one(cur, "SELECT now(), random()")
    time.sleep(0.01)
    second = one(cur, "SELECT now(), random()")
    assert second[0] > first[0] and second[1] != first[1]

    # A system table's rows are those of the moment (its rows follow the session's settings).
    activity = "SELECT application_name FROM pg_stat_activity"
    conn.execute(f"SET application_name = 'rq_{protocol}_1'")
    assert one(cur, activity) == (f"rq_{protocol}_1",)
    conn.execute(f"SET application_name = 'rq_{protocol}_2'")
    assert one(cur, activity) == (f"rq_{protocol}_2",)
    assert one(cur, "SELECT 1") == (1,)
    assert one(cur, "SELECT 1") == (1,)

    # current_setting() of the engine that answered the statement before: read when planned.
    engine = f"SELECT current_setting('streamdb.last_query_engine') AS e, {len(protocol)} AS n"
    one(cur, "SELECT 1")
    after_embedded = one(cur, engine)[0]
    one(cur, f"SELECT v FROM {t} WHERE id = 1")  # a lookup: answered by the index
    assert one(cur, engine)[0] == "index" and after_embedded == "embedded"
    assert one(cur, engine)[0] == "embedded"  # the previous statement was this one


def test_one_text_prepared_with_other_parameter_types_keeps_each_ones_types(conn):
    """`SELECT $1` prepared once for an integer and once for a text (psycopg sends each value's
    type with Parse): each prepared statement answers with its own parameter's type, however the
    two are interleaved."""
    cur = conn.cursor()
    for _ in range(3):
        cur.execute("SELECT %s AS x", ("007",), prepare=True)
        assert cur.fetchall() == [("007",)]
        cur.execute("SELECT %s AS x", (7,), prepare=True)
        assert cur.fetchall() == [(7,)]
        cur.execute("SELECT %s AS x", (Decimal("7.50"),), prepare=True)
        assert cur.fetchall() == [(Decimal("7.50"),)]
