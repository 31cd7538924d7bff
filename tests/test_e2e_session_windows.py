"""SESSION(rel, ts, gap [, key ...]) window table function, end to end: ad hoc SELECTs (the
embedded engine) and materialized views (maintained on Spark), each view also compared with the
same query run as a plain batch SELECT after FLUSH."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import create_views

T0 = dt.datetime(2024, 1, 1)
SEC = dt.timedelta(seconds=1)


def check_views(conn, names: dict[str, str]) -> None:
    """After FLUSH, each view (maintained on Spark) equals its query run as a batch SELECT."""
    conn.execute("FLUSH")
    for view, query in names.items():
        maintained = sorted(conn.execute(f"SELECT * FROM {view}").fetchall(), key=repr)
        batch = sorted(conn.execute(query).fetchall(), key=repr)
        assert maintained == batch, (view, query)


def at(seconds: float) -> dt.datetime:
    return T0 + seconds * SEC


def ts_sql(seconds: float) -> str:
    return f"'{at(seconds).isoformat(sep=' ')}'"


def test_adhoc_session_windows_per_key(conn, unique):
    s = f"sess_ev_{unique}"
    conn.execute(f"CREATE STREAM {s} (k INT, v INT, ts TIMESTAMP)")
    rows = [
        (1, 1, 0), (1, 2, 5), (1, 3, 14),  # one session: each step <= 10 s
        (1, 4, 30), (1, 5, 40),  # 16 s after 14: a new session; 40 - 30 = 10 is not more than the gap
        (2, 6, 3),  # alone
        (2, 7, 20), (2, 8, 25),
        (3, 9, 0.5), (3, 10, 10.9),  # 10.4 s apart: two sessions (sub-second precision counts)
        ("NULL", 11, 1), ("NULL", 12, 2),  # NULL keys form one partition, as in GROUP BY
    ]
    conn.execute(f"INSERT INTO {s} VALUES " + ", ".join(f"({k}, {v}, {ts_sql(o)})" for k, v, o in rows))
    query = (f"SELECT window_start, window_end, k, count(*) AS n, sum(v) AS total "
             f"FROM SESSION({s}, ts, INTERVAL '10' SECOND, k) GROUP BY window_start, window_end, k")
    expected = [
        (at(0), at(24), 1, 3, 6), (at(30), at(50), 1, 2, 9),
        (at(3), at(13), 2, 1, 6), (at(20), at(35), 2, 2, 15),
        (at(0.5), at(10.5), 3, 1, 9), (at(10.9), at(20.9), 3, 1, 10),
        (at(1), at(12), None, 2, 23),
    ]
    assert sorted(conn.execute(query).fetchall(), key=repr) == sorted(expected, key=repr)

    # Without keys the whole relation is one partition; in time order (0, 0.5, 1, 2, 3, 5, 10.9, 14,
    # 20, 25, 30, 40) no step is more than 10 s, so everything chains into one session.
    unkeyed = conn.execute(f"SELECT window_start, window_end, count(*) FROM SESSION({s}, ts, INTERVAL '10' SECOND) "
                           f"GROUP BY window_start, window_end").fetchall()
    assert unkeyed == [(at(0), at(50), len(rows))]

    # `*` is the relation's columns and the two window columns: no helper columns.
    cur = conn.execute(f"SELECT * FROM SESSION({s}, ts, INTERVAL '10' SECOND, k) WHERE v = 2")
    assert [d.name for d in cur.description] == ["k", "v", "ts", "window_start", "window_end"]
    assert cur.fetchall() == [(1, 2, at(5), at(0), at(24))]
    # An alias, a join-free outer filter on the window columns, and ROWTIME as the time column.
    cur = conn.execute(f"SELECT w.v FROM SESSION({s}, ts, INTERVAL '4' SECOND, k) AS w "
                       f"WHERE w.window_start = {ts_sql(20)} ORDER BY w.v")
    assert cur.fetchall() == [(7,)]  # 25 - 20 > 4
    assert conn.execute(f"SELECT count(*) FROM SESSION({s}, rowtime, INTERVAL '1' HOUR, k) "
                        f"WHERE window_end > window_start").fetchone() == (len(rows),)
    conn.execute(f"DROP STREAM {s}")


def test_session_window_view_merges_sessions(conn, unique):
    s = f"sess_clicks_{unique}"
    conn.execute(f"CREATE STREAM {s} (usr TEXT, page TEXT, ts TIMESTAMP)")

    def insert(*rows):
        conn.execute(f"INSERT INTO {s} VALUES " + ", ".join(f"('{u}', '{p}', {ts_sql(o)})" for u, p, o in rows))

    insert(("a", "/1", 0), ("a", "/2", 5), ("a", "/3", 20), ("a", "/4", 25), ("b", "/1", 100),
           ("c", "/1", 0.5), ("c", "/2", 10.9))  # 10.4 s apart: on Spark too, sub-second times count
    agg = (f"SELECT usr, window_start, window_end, count(*) AS n, max(page) AS last_page "
           f"FROM SESSION({s}, ts, INTERVAL '10' SECOND, usr) GROUP BY usr, window_start, window_end")
    rows = f"SELECT * FROM SESSION({s}, ts, INTERVAL '10' SECOND, usr)"
    v_agg, v_rows = f"sess_agg_{unique}", f"sess_rows_{unique}"
    conn.execute(f"CREATE MATERIALIZED VIEW {v_agg} AS {agg}")
    conn.execute(f"CREATE MATERIALIZED VIEW {v_rows} AS {rows}")
    names = {v_agg: agg, v_rows: rows}
    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT * FROM {v_agg}").fetchall()) == [
        ("a", at(0), at(15), 2, "/2"), ("a", at(20), at(35), 2, "/4"), ("b", at(100), at(110), 1, "/1"),
        ("c", at(0.5), at(10.5), 1, "/1"), ("c", at(10.9), at(20.9), 1, "/2")]
    cur = conn.execute(f"SELECT * FROM {v_rows}")
    assert [d.name for d in cur.description] == ["usr", "page", "ts", "window_start", "window_end"]
    queries = {r[0]: r for r in conn.execute("SHOW QUERIES").fetchall()}
    assert queries[v_agg][2] == queries[v_rows][2] == "running (incremental)"  # on the pipelines, not failed

    # 12 is within 10 s of both 5 and 20: the two sessions of "a" become one. 115 starts a new one for "b".
    insert(("a", "/5", 12), ("b", "/2", 115))
    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT * FROM {v_agg} WHERE usr <> 'c'").fetchall()) == [
        ("a", at(0), at(35), 5, "/5"), ("b", at(100), at(110), 1, "/1"), ("b", at(115), at(125), 1, "/2")]
    assert sorted(conn.execute(f"SELECT page, window_start, window_end FROM {v_rows} WHERE usr = 'a'").fetchall()) \
        == [(f"/{i}", at(0), at(35)) for i in range(1, 6)]
    # Extending a session at its end moves window_end of every row in it.
    insert(("b", "/3", 124))
    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT window_start, window_end, n FROM {v_agg} WHERE usr = 'b'").fetchall()) == [
        (at(100), at(110), 1), (at(115), at(134), 2)]
    conn.execute(f"DROP STREAM {s} CASCADE")


def test_session_window_view_over_a_table_splits_on_update_and_delete(conn, unique):
    t = f"sess_visits_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, usr TEXT, ts TIMESTAMPTZ)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a', '2024-01-01 00:00:00+00'), (2, 'a', '2024-01-01 00:00:08+00'), "
                 f"(3, 'a', '2024-01-01 00:00:16+00'), (4, 'b', '2024-01-01 00:00:00+00')")
    agg = (f"SELECT usr, window_start, window_end, count(*) AS n "
           f"FROM SESSION({t}, ts, INTERVAL '10' SECOND, usr) GROUP BY usr, window_start, window_end")
    rows = f"SELECT * FROM SESSION({t}, ts, INTERVAL '10' SECOND, usr)"
    v_agg, v_rows = f"sess_tagg_{unique}", f"sess_trows_{unique}"
    conn.execute(f"CREATE MATERIALIZED VIEW {v_agg} AS {agg}")
    conn.execute(f"CREATE MATERIALIZED VIEW {v_rows} AS {rows}")
    names = {v_agg: agg, v_rows: rows}
    utc = dt.UTC

    def z(seconds: float) -> dt.datetime:
        return at(seconds).replace(tzinfo=utc)

    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT * FROM {v_agg}").fetchall()) == [("a", z(0), z(26), 3), ("b", z(0), z(10), 1)]
    # A table's hidden row key stays out of `*`.
    cur = conn.execute(f"SELECT * FROM {v_rows}")
    assert [d.name for d in cur.description] == ["id", "usr", "ts", "window_start", "window_end"]

    # Moving the middle visit out leaves a 16 s hole: the session splits.
    conn.execute(f"UPDATE {t} SET ts = '2024-01-01 00:00:22+00' WHERE id = 2")
    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT * FROM {v_agg}").fetchall()) == [
        ("a", z(0), z(10), 1), ("a", z(16), z(32), 2), ("b", z(0), z(10), 1)]
    # Deleting the visit that joined 16 and 22... leaves 22 alone; a new visit at 5 joins 0.
    conn.execute(f"DELETE FROM {t} WHERE id = 3")
    conn.execute(f"INSERT INTO {t} VALUES (5, 'a', '2024-01-01 00:00:05+00')")
    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT * FROM {v_agg}").fetchall()) == [
        ("a", z(0), z(15), 2), ("a", z(22), z(32), 1), ("b", z(0), z(10), 1)]
    assert sorted(conn.execute(f"SELECT id, window_start, window_end FROM {v_rows}").fetchall()) == [
        (1, z(0), z(15)), (2, z(22), z(32)), (4, z(0), z(10)), (5, z(0), z(15))]
    # Rekeying a row moves it between partitions.
    conn.execute(f"UPDATE {t} SET usr = 'b' WHERE id = 5")
    check_views(conn, names)
    assert sorted(conn.execute(f"SELECT * FROM {v_agg}").fetchall()) == [
        ("a", z(0), z(10), 1), ("a", z(22), z(32), 1), ("b", z(0), z(15), 2)]
    conn.execute(f"DROP TABLE {t} CASCADE")


def test_session_window_emit_on_window_close(conn, unique):
    s = f"sess_wm_{unique}"
    conn.execute(f"CREATE STREAM {s} (k INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)")
    final = f"sess_final_{unique}"
    conn.execute(f"CREATE MATERIALIZED VIEW {final} AS SELECT k, window_start, window_end, count(*) AS n "
                 f"FROM SESSION({s}, ts, INTERVAL '10' SECOND, k) GROUP BY k, window_start, window_end "
                 f"EMIT ON WINDOW CLOSE")

    def insert(*rows):
        conn.execute(f"INSERT INTO {s} VALUES " + ", ".join(f"({k}, {ts_sql(o)})" for k, o in rows))
        conn.execute("FLUSH")

    insert((1, 0), (1, 5))  # watermark 0: session [0, 15) still open
    assert conn.execute(f"SELECT * FROM {final}").fetchall() == []
    insert((2, 12))  # watermark 7: still open (a k=1 event at 7..15 would extend it)
    assert conn.execute(f"SELECT * FROM {final}").fetchall() == []
    insert((2, 21))  # watermark 16 passes 15: the k=1 session is final
    assert conn.execute(f"SELECT * FROM {final}").fetchall() == [(1, at(0), at(15), 2)]
    assert {r[0]: r[2] for r in conn.execute("SHOW QUERIES").fetchall()}[final] == "running (incremental)"
    conn.execute(f"DROP STREAM {s} CASCADE")


def test_session_window_errors(conn, unique):
    s = f"sess_err_{unique}"
    conn.execute(f"CREATE STREAM {s} (k INT, note TEXT, ts TIMESTAMP)")
    conn.execute(f"INSERT INTO {s} VALUES (1, 'x', '2024-01-01 00:00:00')")
    with pytest.raises(psycopg.errors.FeatureNotSupported) as info:
        conn.execute(f"SELECT * FROM SESSION({s}, ts)")
    assert "SESSION takes at least 3 arguments" in str(info.value)
    assert info.value.diag.statement_position == "15"
    with pytest.raises(psycopg.errors.FeatureNotSupported) as info:
        conn.execute(f"SELECT * FROM SESSION({s}, ts, 10, k)")
    assert "gap" in str(info.value) and "interval" in str(info.value)
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute(f"SELECT * FROM SESSION({s}, note, INTERVAL '1' SECOND)")  # not a timestamp
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute(f"SELECT * FROM SESSION({s}, ts, INTERVAL '1' SECOND, k + 1)")  # not a column
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(f"SELECT * FROM SESSION({s}, ts, INTERVAL '0' SECOND)")
    with pytest.raises(psycopg.errors.UndefinedColumn) as info:
        conn.execute(f"SELECT * FROM SESSION({s}, nope, INTERVAL '1' SECOND)")
    assert '"nope"' in str(info.value)
    sql = f"SELECT * FROM SESSION({s}, ts, INTERVAL '1' SECOND, k, nokey)"
    with pytest.raises(psycopg.errors.UndefinedColumn) as info:
        conn.execute(sql)
    assert '"nokey"' in str(info.value)
    assert info.value.diag.statement_position == str(sql.index("nokey") + 1)
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute(f"SELECT * FROM SESSION(missing_{unique}, ts, INTERVAL '1' SECOND)")
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute(f"WITH c AS (SELECT * FROM {s}) SELECT * FROM SESSION(c, ts, INTERVAL '1' SECOND)")
    with pytest.raises(psycopg.errors.UndefinedColumn):
        conn.execute(f"CREATE MATERIALIZED VIEW sess_bad_{unique} AS SELECT count(*) "
                     f"FROM SESSION({s}, ts, INTERVAL '1' SECOND, nokey)")
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute(f"SELECT * FROM sess_bad_{unique}")
    # The connection is still usable, and so is the stream.
    assert conn.execute("SELECT 1").fetchone() == (1,)
    assert conn.execute(f"SELECT k, window_start FROM SESSION({s}, ts, INTERVAL '1' SECOND, k)").fetchall() == [
        (1, T0)]
    conn.execute(f"DROP STREAM {s}")


# Sessions kept per key on the pipelines (a Session operator), against the same queries run as
# batch SELECTs: rows join, bridge, split and leave sessions through inserts, updates of their
# time or key, and deletes, in a table (timestamp) and a stream (timestamptz).
SESSION_VIEWS = {
    "rows": "SELECT * FROM SESSION({t}, ts, INTERVAL '3' SECOND, usr)",
    "agg": "SELECT usr, window_start, window_end, count(*) AS n, min(id) AS first_id "
           "FROM SESSION({t}, ts, INTERVAL '3' SECOND, usr) GROUP BY usr, window_start, window_end",
    "unkeyed": "SELECT window_start, window_end, count(*) AS n FROM SESSION({t}, ts, INTERVAL '2' SECOND) "
               "GROUP BY window_start, window_end",
    "stream": "SELECT usr, window_start, window_end, count(*) AS n "
              "FROM SESSION({s}, ts, INTERVAL '3' SECOND, usr) GROUP BY usr, window_start, window_end",
}

usr = st.sampled_from(["a", "b", None])
second = st.one_of(st.integers(0, 20), st.none())
session_op = st.one_of(
    st.tuples(st.just("upsert"), st.integers(0, 7), usr, second),
    st.tuples(st.just("retime"), st.integers(0, 7), second),
    st.tuples(st.just("rekey"), st.integers(0, 7), usr),
    st.tuples(st.just("delete"), st.integers(0, 7)),
    st.tuples(st.just("event"), usr, second),
)


@pytest.fixture()  # one test uses it; module-scoped, its views would stay in the pipelines
def session_views(server):
    with server.connect() as c:
        t, s = f"sess_pt_{__import__('os').getpid()}", f"sess_ps_{__import__('os').getpid()}"
        c.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, usr TEXT, ts TIMESTAMP)")
        c.execute(f"CREATE STREAM {s} (usr TEXT, ts TIMESTAMPTZ)")
        names = {f"{t}_{name}": sql.format(t=t, s=s) for name, sql in SESSION_VIEWS.items()}
        create_views(server, names)
        status = {r[0]: r[2] for r in c.execute("SHOW QUERIES").fetchall()}
        assert all(status[v] == "running (incremental)" for v in names), status
        yield t, s, names
        c.execute(f"DROP TABLE {t} CASCADE")
        c.execute(f"DROP STREAM {s} CASCADE")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(rounds=st.lists(st.lists(session_op, min_size=1, max_size=8), min_size=1, max_size=3))
def test_session_views_equal_batch_recomputation(conn, session_views, rounds):
    t, s, names = session_views
    for batch in rounds:
        for o in batch:
            when = None if o[0] in ("rekey", "delete") or o[-1] is None else at(o[-1])
            if o[0] == "upsert":
                conn.execute(f"INSERT INTO {t} VALUES (%s, %s, %s)", (o[1], o[2], when))
            elif o[0] == "retime":
                conn.execute(f"UPDATE {t} SET ts = %s WHERE id = %s", (when, o[1]))
            elif o[0] == "rekey":
                conn.execute(f"UPDATE {t} SET usr = %s WHERE id = %s", (o[2], o[1]))
            elif o[0] == "delete":
                conn.execute(f"DELETE FROM {t} WHERE id = %s", (o[1],))
            else:
                conn.execute(f"INSERT INTO {s} VALUES (%s, %s)",
                             (o[1], None if when is None else when.replace(tzinfo=dt.UTC)))
        check_views(conn, names)
