"""Temporal filters end to end (`WHERE ts > now() - INTERVAL ...`): views that keep the recent
rows incrementally on a pipeline of their own, whose micro-batches run on the clock. Checked
against the same query run as a batch, over a table with updates and deletes and over a stream,
as time passes without input, and through a kill -9.

Rows are either far from the window's edges (an hour away), so the view and the batch query
agree whatever second each reads now() at, or due to cross an edge within seconds, which the
tests wait for."""

from __future__ import annotations

import datetime as dt
import random
import time

import psycopg

VIEWS = {
    # a table's rows of the last ten minutes, and their count per key up to now (not the future's)
    "t_recent": "SELECT id, k, ts FROM tev WHERE ts > now() - INTERVAL '10 minutes'",
    "t_recent_count": "SELECT k, count(*) AS n, max(id) AS top FROM tev "
                      "WHERE ts > now() - INTERVAL '10 minutes' AND ts <= now() GROUP BY k",
    # a stream's, with the bound on either side of the comparison
    "s_recent_count": "SELECT k, count(*) AS n FROM sev WHERE now() - INTERVAL '10 minutes' < ts GROUP BY k",
    "s_arrived": "SELECT k, ts FROM sev WHERE ts <= now()",
    # over a join, and under an IN subquery's own WHERE
    "joined_recent": "SELECT t.id, s.k, s.ts FROM tev t JOIN sev s ON t.k = s.k "
                     "WHERE s.ts > now() - INTERVAL '10 minutes'",
    "recent_keys": "SELECT id FROM tev WHERE k IN (SELECT k FROM sev WHERE ts >= now() - INTERVAL '10 minutes')",
}


def _create(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE tev (id INT PRIMARY KEY, k INT, ts TIMESTAMPTZ)")
    conn.execute("CREATE STREAM sev (k INT, ts TIMESTAMPTZ)")
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")


def _equal_to_batch(conn: psycopg.Connection) -> None:
    conn.execute("FLUSH")
    for name, sql in VIEWS.items():
        view = sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
        batch = sorted(conn.execute(sql).fetchall(), key=repr)
        assert view == batch, name


def _wait_for(conn: psycopg.Connection, sql: str, expected: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    got = None
    while time.monotonic() < deadline:
        got = conn.execute(sql).fetchall()
        if got == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"{sql}: {got!r}, waiting for {expected!r}")


def test_temporal_views_equal_batch_recomputation_through_changes_and_time(server):
    """Random inserts, updates and deletes of rows an hour old, minutes old and an hour ahead;
    then rows due to enter and leave within seconds, which the views take in and let go with no
    input at all."""
    rng = random.Random(7)
    now = dt.datetime.now(dt.UTC)
    ages = [dt.timedelta(hours=1), dt.timedelta(minutes=3), dt.timedelta(0), dt.timedelta(hours=-1), None]
    with server.connect() as conn:
        _create(conn)
        try:
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x AS {VIEWS['t_recent']}"))
            assert "strategy: incremental" in plan and "Temporal filter now() < " in plan
            queries = {r[0]: r[9] for r in conn.execute("SHOW QUERIES").fetchall()}
            assert queries["t_recent"].startswith("pipeline clock-depth-1")

            def ts() -> str:
                age = rng.choice(ages)
                return "NULL" if age is None else f"'{(now - age).isoformat()}'"

            present: set[int] = set()
            for _ in range(4):
                for _ in range(25):
                    i = rng.randrange(60)
                    if i in present and rng.random() < 0.4:
                        conn.execute(f"DELETE FROM tev WHERE id = {i}")
                        present.discard(i)
                    elif i in present:
                        conn.execute(f"UPDATE tev SET ts = {ts()}, k = {rng.randrange(4)} WHERE id = {i}")
                    else:
                        conn.execute(f"INSERT INTO tev VALUES ({i}, {rng.randrange(4)}, {ts()})")
                        present.add(i)
                conn.execute("INSERT INTO sev VALUES " + ", ".join(f"({rng.randrange(4)}, {ts()})" for _ in range(20)))
                _equal_to_batch(conn)
            # Rows that cross an edge within seconds, with nothing inserted after them (10 s: the
            # checks before they cross must not race them on a busy machine).
            conn.execute("INSERT INTO tev VALUES (100, 9, now() - INTERVAL '10 minutes' + INTERVAL '10 seconds'), "
                         "(101, 9, now() + INTERVAL '10 seconds')")
            conn.execute("INSERT INTO sev VALUES (9, now() + INTERVAL '10 seconds')")
            conn.execute("FLUSH")
            assert conn.execute("SELECT id FROM t_recent WHERE k = 9 ORDER BY id").fetchall() == [(100,), (101,)]
            assert conn.execute("SELECT n FROM t_recent_count WHERE k = 9").fetchall() == [(1,)]
            assert conn.execute("SELECT count(*) FROM s_arrived WHERE k = 9").fetchone() == (0,)
            _wait_for(conn, "SELECT id FROM t_recent WHERE k = 9 ORDER BY id", [(101,)])  # 100 left
            _wait_for(conn, "SELECT n, top FROM t_recent_count WHERE k = 9", [(1, 101)])  # 101 came
            _wait_for(conn, "SELECT count(*) FROM s_arrived WHERE k = 9", [(1,)])
            conn.execute("DELETE FROM tev WHERE id >= 100")
            _equal_to_batch(conn)
        finally:
            conn.execute("DROP STREAM sev CASCADE")
            conn.execute("DROP TABLE tev CASCADE")


def test_temporal_views_survive_kill_9_and_let_rows_go_after_it(fresh_server):
    """A kill -9 with rows still in the window: after the restart the views hold what the batch
    query does, and the rows whose time passed while the server was down (or passes after) go."""
    with fresh_server.connect() as conn:
        _create(conn)
        conn.execute("INSERT INTO tev SELECT i, i % 4, now() - i * INTERVAL '1 minute' FROM generate_series(1, 30) AS i")
        conn.execute("INSERT INTO sev SELECT i % 4, now() - i * INTERVAL '1 minute' FROM generate_series(1, 30) AS i")
        conn.execute("INSERT INTO tev VALUES (100, 9, now() - INTERVAL '10 minutes' + INTERVAL '15 seconds')")
        conn.execute("FLUSH")
        assert conn.execute("SELECT count(*) FROM t_recent").fetchone() == (10,)  # 9 minutes and 100
    fresh_server.kill9()
    fresh_server.start()
    with fresh_server.connect() as conn:
        conn.execute("INSERT INTO sev VALUES (1, now())")
        conn.execute("DELETE FROM tev WHERE id = 2")
        # each pipeline (t_recent's one layer, t_recent_count's two) lets it go at its own tick
        _wait_for(conn, "SELECT count(*) FROM t_recent WHERE id = 100", [(0,)], seconds=60)
        _wait_for(conn, "SELECT count(*) FROM t_recent_count WHERE k = 9", [(0,)], seconds=60)
        _equal_to_batch(conn)
        rows = conn.execute("SELECT id FROM t_recent ORDER BY id").fetchall()
        assert rows == [(i,) for i in range(1, 10) if i != 2]


def test_a_push_query_with_a_temporal_filter_sends_rows_as_they_leave(server):
    """`... WHERE ts > now() - INTERVAL '15 seconds' EMIT CHANGES`: the rows of the window first,
    then each one's delete as its time passes, with no input."""
    with server.connect() as conn:
        conn.execute("CREATE STREAM pev (id INT, ts TIMESTAMPTZ)")
        try:
            conn.execute("INSERT INTO pev VALUES (1, now() - INTERVAL '1 hour'), (2, now()), "
                         "(3, now() + INTERVAL '1 hour')")
            conn.execute("FLUSH")
            with server.connect() as c:
                c.execute("BEGIN")
                c.execute("DECLARE cur CURSOR FOR SELECT id FROM pev WHERE ts > now() - INTERVAL '15 seconds' "
                          "EMIT CHANGES")
                changes = c.execute("FETCH ALL cur WITH (timeout = '30s')").fetchall()
                deadline = time.monotonic() + 60
                while not any(r[0] == "delete" for r in changes) and time.monotonic() < deadline:
                    changes += c.execute("FETCH 100 cur WITH (timeout = '1s')").fetchall()
                assert sorted((r[0], r[2]) for r in changes) == [("delete", 2), ("insert", 2), ("insert", 3)]
                c.execute("CLOSE cur")
                c.execute("COMMIT")
        finally:
            conn.execute("DROP STREAM pev CASCADE")
