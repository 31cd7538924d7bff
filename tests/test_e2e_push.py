"""Push queries (EMIT CHANGES) with real clients: rows arrive while the query runs; cancel ends it."""

from __future__ import annotations

import threading
import time

import psycopg


def consume(server, sql: str, want: int, out: list, started: threading.Event) -> None:
    with server.connect() as c:
        with c.cursor() as cur:
            stream = cur.stream(sql)
            started.set()
            t0 = time.monotonic()
            try:
                for row in stream:
                    out.append((time.monotonic() - t0, row))
                    if len(out) >= want:
                        break
            finally:
                stream.close()  # psycopg cancels the push query and frees the connection


def push_queries(conn) -> list[tuple]:
    return [q for q in conn.execute("SHOW QUERIES").fetchall() if q[1] == "push query"]


def wait_subscribed(conn, before: int) -> None:
    """Writes made before the push query is registered are not pushed: wait until it is."""
    deadline = time.monotonic() + 60
    while len(push_queries(conn)) <= before:
        assert time.monotonic() < deadline, "push query never registered"
        time.sleep(0.1)
    # A recomputed query takes its baseline in its first epoch.
    while any(q[2].startswith("starting") for q in push_queries(conn)):
        assert time.monotonic() < deadline, "push query never started"
        time.sleep(0.1)


def start_push(server, conn, sql: str, want: int) -> tuple[threading.Thread, list]:
    """Run a push query on a connection of its own until `want` rows arrived (into the returned
    list, as (seconds, row)); returns once it is subscribed, so later writes are pushed."""
    rows: list = []
    started = threading.Event()
    before = len(push_queries(conn))
    thread = threading.Thread(target=consume, args=(server, sql, want, rows, started))
    thread.start()
    started.wait(10)
    wait_subscribed(conn, before)
    return thread, rows


def test_push_query_filter_over_schemaless_stream(server, conn, unique):
    s = f"pdemo_{unique}"
    conn.execute(f'CREATE STREAM {s} WITH (FORMAT = "JSON")')
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (20, 10)")  # before: not pushed
    t, rows = start_push(server, conn, f"SELECT * FROM {s} WHERE humidity > 70 EMIT CHANGES", 2)
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (22, 80), (25, 65)")
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (19, 91)")
    t.join(60)
    assert not t.is_alive()
    assert sorted(r[1][0:1] + r[1][2:] for r in rows) == [("insert", 19, 91), ("insert", 22, 80)]
    assert all(r[1][1] is not None for r in rows)  # each change carries its time
    # The connection that ran the push query was cancelled; a new query works right away.
    assert conn.execute(f"SELECT count(*) FROM {s}").fetchone() == (4,)


def test_push_query_aggregate_over_table_sends_retractions(server, conn, unique):
    t_name = f"ptab_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, plan TEXT)")
    th, rows = start_push(server, conn,
                          f"SELECT plan, count(*) AS n FROM {t_name} GROUP BY plan EMIT CHANGES", 5)
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'free'), (2, 'pro')")
    time.sleep(1.5)
    conn.execute(f"UPDATE {t_name} SET plan = 'pro' WHERE id = 1")
    th.join(60)
    assert not th.is_alive()
    changes = sorted((r[1][0], r[1][2], r[1][3]) for r in rows)
    assert changes == sorted([("insert", "free", 1), ("insert", "pro", 1),
                              ("delete", "free", 1), ("delete", "pro", 1), ("insert", "pro", 2)])


def test_push_query_cancel_frees_the_subscription(server, conn, unique):
    s = f"pcancel_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT)")
    with server.connect() as c:
        def cancel_soon() -> None:
            time.sleep(1.5)
            c.cancel()
        threading.Thread(target=cancel_soon).start()
        t0 = time.monotonic()
        try:
            with c.cursor() as cur:
                for _ in cur.stream(f"SELECT a FROM {s} EMIT CHANGES"):
                    pass
        except psycopg.errors.QueryCanceled:
            pass
        assert time.monotonic() - t0 < 30
        assert c.execute("SELECT 1").fetchone() == (1,)
    queries = conn.execute("SHOW QUERIES").fetchall()
    assert all(s not in str(q) for q in queries)


def test_subscribe_with_cursor_and_fetch(server, conn, unique):
    t_name, view = f"subt_{unique}", f"subv_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, plan TEXT)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'free'), (2, 'pro'), (3, 'free')")
    conn.execute(f"CREATE MATERIALIZED VIEW {view} AS SELECT plan, count(*) AS n FROM {t_name} GROUP BY plan")
    with server.connect() as c:
        with __import__("pytest").raises(psycopg.errors.NoActiveSqlTransaction):
            c.execute(f"DECLARE early CURSOR FOR SUBSCRIBE TO {view}")
        c.execute("BEGIN")
        c.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE TO {view}")
        # SUBSCRIBE starts with the current result, as inserts.
        snapshot = c.execute("FETCH ALL cur WITH (timeout = '30s')").fetchall()
        assert sorted((r[0], r[2], r[3]) for r in snapshot) == [("insert", "free", 2), ("insert", "pro", 1)]
        conn.execute(f"UPDATE {t_name} SET plan = 'pro' WHERE id = 3")
        changes: list = []
        deadline = time.monotonic() + 30
        while len(changes) < 4 and time.monotonic() < deadline:
            changes += c.execute("FETCH 100 cur WITH (timeout = '1s')").fetchall()
        assert sorted((r[0], r[2], r[3]) for r in changes) == sorted([
            ("delete", "free", 2), ("insert", "free", 1), ("delete", "pro", 1), ("insert", "pro", 2)])
        assert c.execute("FETCH 10 cur WITH (timeout = '100ms')").fetchall() == []
        c.execute("CLOSE cur")
        # A cursor over an ordinary query reads its rows in pieces.
        c.execute(f"DECLARE q CURSOR FOR SELECT id FROM {t_name} ORDER BY id")
        assert c.execute("FETCH 2 q").fetchall() == [(1,), (2,)]
        assert c.execute("FETCH ALL q").fetchall() == [(3,)]
        c.execute("COMMIT")
        with __import__("pytest").raises(psycopg.errors.InvalidCursorName):
            c.execute("FETCH q")
    assert not push_queries(conn)  # COMMIT and CLOSE released the subscription


def test_subscribe_streams_rows_to_the_client(server, conn, unique):
    s = f"subs_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT)")
    conn.execute(f"INSERT INTO {s} VALUES (1)")
    th, rows = start_push(server, conn, f"SUBSCRIBE TO {s}", 2)
    conn.execute(f"INSERT INTO {s} VALUES (2)")
    th.join(60)
    assert not th.is_alive()
    assert sorted((r[1][0], r[1][2]) for r in rows) == [("insert", 1), ("insert", 2)]


def test_copy_push_query_to_stdout_with_psql(server, conn, unique):
    import os
    import select
    import subprocess

    s = f"pcopy_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT, b TEXT)")
    before = len(push_queries(conn))
    psql = subprocess.Popen(
        # stdbuf: psql writes COPY data through stdio, which a pipe would otherwise block-buffer.
        ["stdbuf", "-oL", "psql", "-X", "-h", server.host, "-p", str(server.port), "-U", "streamdb", "streamdb",
         "-c", f"COPY (SELECT a, b FROM {s} WHERE a > 1 EMIT CHANGES) TO STDOUT"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_subscribed(conn, before)
        conn.execute(f"INSERT INTO {s} VALUES (1, 'no'), (2, 'two'), (3, 'th\tree')")
        received = b""
        deadline = time.monotonic() + 60
        while received.count(b"\n") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([psql.stdout], [], [], 1.0)
            if ready:
                received += os.read(psql.stdout.fileno(), 65536)
        lines = received.splitlines(keepends=True)
        ops = sorted(line.decode().rstrip("\n").split("\t", 1)[0] + " " + line.decode().rstrip("\n").split("\t", 2)[2]
                     for line in lines)
        assert ops == ["insert 2\ttwo", "insert 3\tth\\tree"]
    finally:
        psql.terminate()
        psql.wait(30)
    deadline = time.monotonic() + 10
    while len(push_queries(conn)) > before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(push_queries(conn)) == before  # the disconnect freed the subscription


def test_a_stalled_subscriber_gets_a_clear_error_not_unbounded_memory(tmp_path):
    import tempfile
    from pathlib import Path

    from conftest import ServerProcess

    with tempfile.TemporaryDirectory(prefix="streamdb-slow-") as d:
        srv = ServerProcess(Path(d) / "data", "slow", extra_env={"STREAMDB_SUBSCRIBER_BUFFER_CHANGES": "1000"})
        srv.start()
        try:
            with srv.connect() as writer, srv.connect() as reader:
                writer.execute("CREATE STREAM firehose (i INT, pad TEXT)")
                with reader.cursor() as cur:
                    stream = cur.stream("SELECT i, pad FROM firehose EMIT CHANGES")
                    try:
                        # The query is sent when the first row is asked for: ask in a thread.
                        first: list = []
                        starter = threading.Thread(target=lambda: first.append(next(stream)))
                        starter.start()
                        wait_subscribed(writer, 0)
                        writer.execute("INSERT INTO firehose VALUES (-1, 'first')")
                        starter.join(60)
                        assert first and first[0][2:] == (-1, "first")
                        # The reader reads nothing while far more changes than its buffer arrive
                        # (and more than the sockets between them hold).
                        pad = "x" * 200
                        for _ in range(4):
                            with writer.cursor().copy("COPY firehose FROM STDIN") as cp:
                                for i in range(25_000):
                                    cp.write(f"{i}\t{pad}\n")
                        writer.execute("FLUSH")
                        with __import__("pytest").raises(psycopg.Error) as info:
                            for _ in stream:
                                pass
                        assert info.value.sqlstate == "53000"
                        assert "subscriber too slow" in str(info.value)
                    finally:
                        stream.close()
                assert reader.execute("SELECT 1").fetchone() == (1,)
                assert writer.execute("SELECT count(*) FROM firehose").fetchone() == (100_001,)
        finally:
            srv.stop()
