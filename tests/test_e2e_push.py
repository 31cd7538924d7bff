"""Push queries (EMIT CHANGES) with real clients: the current result first (the snapshot), then rows
arrive while the query runs; cancel ends it."""

from __future__ import annotations

import threading
import time
from collections import Counter

import psycopg
import pytest
from conftest import running_server


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
    """Wait until the push query has taken its starting point (the snapshot, or with snapshot =
    false the result it diffs against): writes made after that come as changes of their own."""
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


def push_changes(server, conn, sql: str, want: int, *writes: str) -> list[tuple]:
    """Run a push query until `want` changes came, making `writes` once it has started; the
    changes as (op, *columns), in arrival order."""
    thread, rows = start_push(server, conn, sql, want)
    for write in writes:
        conn.execute(write)
    thread.join(60)
    assert not thread.is_alive()
    return [(r[1][0], *r[1][2:]) for r in rows]


def test_push_query_filter_over_schemaless_stream(server, conn, unique):
    s = f"pdemo_{unique}"
    conn.execute(f'CREATE STREAM {s} WITH (FORMAT = "JSON")')
    # Before the query: one event the filter drops, one in the snapshot.
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (20, 10), (21, 75)")
    t, rows = start_push(server, conn, f"SELECT * FROM {s} WHERE humidity > 70 EMIT CHANGES", 3)
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (22, 80), (25, 65)")
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (19, 91)")
    t.join(60)
    assert not t.is_alive()
    assert rows[0][1][0:1] + rows[0][1][2:] == ("insert", 21, 75)
    assert sorted(r[1][0:1] + r[1][2:] for r in rows[1:]) == [("insert", 19, 91), ("insert", 22, 80)]
    assert all(r[1][1] is not None for r in rows)  # each change carries its time
    # The connection that ran the push query was cancelled; a new query works right away.
    assert conn.execute(f"SELECT count(*) FROM {s}").fetchone() == (5,)


def test_push_query_aggregate_over_table_sends_retractions(server, conn, unique):
    t_name = f"ptab_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, plan TEXT)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'free'), (2, 'pro')")
    th, rows = start_push(server, conn,
                          f"SELECT plan, count(*) AS n FROM {t_name} GROUP BY plan EMIT CHANGES", 5)
    # The snapshot: the current groups, as inserts.
    snapshot_deadline = time.monotonic() + 30
    while len(rows) < 2 and time.monotonic() < snapshot_deadline:
        time.sleep(0.1)
    assert sorted((r[1][0], r[1][2], r[1][3]) for r in rows) == [("insert", "free", 1), ("insert", "pro", 1)]
    conn.execute(f"UPDATE {t_name} SET plan = 'pro' WHERE id = 1")
    th.join(60)
    assert not th.is_alive()
    changes = sorted((r[1][0], r[1][2], r[1][3]) for r in rows[2:])
    assert changes == [("delete", "free", 1), ("delete", "pro", 1), ("insert", "pro", 2)]


def wait_rows(rows: list, n: int) -> None:
    deadline = time.monotonic() + 60
    while len(rows) < n:
        assert time.monotonic() < deadline, f"{len(rows)} of {n} changes arrived: {rows}"
        time.sleep(0.05)


def fetch_snapshot_then_changes(c, conn, t_name: str) -> None:
    """From cursor `cur` over the plan counts of `t_name` (rows 1 free, 2 pro, 3 free): the
    snapshot as inserts, then the changes that moving row 3 to pro makes."""
    snapshot = c.execute("FETCH ALL cur WITH (timeout = '30s')").fetchall()
    assert sorted((r[0], r[2], r[3]) for r in snapshot) == [("insert", "free", 2), ("insert", "pro", 1)]
    conn.execute(f"UPDATE {t_name} SET plan = 'pro' WHERE id = 3")
    changes: list = []
    deadline = time.monotonic() + 30
    while len(changes) < 4 and time.monotonic() < deadline:
        changes += c.execute("FETCH 100 cur WITH (timeout = '1s')").fetchall()
    assert sorted((r[0], r[2], r[3]) for r in changes) == sorted([
        ("delete", "free", 2), ("insert", "free", 1), ("delete", "pro", 1), ("insert", "pro", 2)])


def test_push_query_over_a_global_count_sends_its_current_value_first(server, conn, unique):
    """Issue 14: `SELECT count(*) ... EMIT CHANGES` sent `delete 0` as its first change without
    ever having sent `insert 0`; now it sends the current count, then its changes."""
    t_name = f"pcount_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, v TEXT)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    th, rows = start_push(server, conn, f"SELECT count(*) AS n FROM {t_name} EMIT CHANGES", 3)
    wait_rows(rows, 1)
    assert [(r[1][0], r[1][2]) for r in rows] == [("insert", 3)]
    conn.execute(f"INSERT INTO {t_name} VALUES (4, 'd')")
    th.join(60)
    assert not th.is_alive()
    assert sorted((r[1][0], r[1][2]) for r in rows[1:]) == [("delete", 3), ("insert", 4)]


def test_push_query_over_a_stream_sends_the_existing_events_then_new_ones(server, conn, unique):
    s = f"pstream_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT, b TEXT)")
    conn.execute(f"INSERT INTO {s} VALUES (1, 'x'), (2, 'y')")
    th, rows = start_push(server, conn, f"SELECT a, b FROM {s} EMIT CHANGES", 4)
    wait_rows(rows, 2)
    assert sorted(r[1][0:1] + r[1][2:] for r in rows) == [("insert", 1, "x"), ("insert", 2, "y")]
    conn.execute(f"INSERT INTO {s} VALUES (3, 'z'), (1, 'x')")  # a duplicate event is an event too
    th.join(60)
    assert not th.is_alive()
    assert sorted(r[1][0:1] + r[1][2:] for r in rows[2:]) == [("insert", 1, "x"), ("insert", 3, "z")]


def test_push_query_without_snapshot_sends_only_new_changes(server, conn, unique):
    s, t_name = f"pnosnap_{unique}", f"pnosnapt_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT)")
    conn.execute(f"INSERT INTO {s} VALUES (1), (2)")
    assert push_changes(server, conn, f"SELECT a FROM {s} EMIT CHANGES WITH (snapshot = false)", 1,
                        f"INSERT INTO {s} VALUES (3)") == [("insert", 3)]
    # An aggregate diffs against its result when the query began, which it does not send.
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1), (2)")
    assert sorted(push_changes(server, conn, f"SELECT count(*) AS n FROM {t_name} EMIT CHANGES WITH (snapshot = false)",
                               2, f"INSERT INTO {t_name} VALUES (3)")) == [("delete", 2), ("insert", 3)]


def test_copy_and_cursor_push_queries_send_the_snapshot(server, conn, unique):
    t_name = f"pforms_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, plan TEXT)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'free'), (2, 'pro'), (3, 'free')")
    query = f"SELECT plan, count(*) AS n FROM {t_name} GROUP BY plan EMIT CHANGES"
    # COPY (...) TO STDOUT: one line per change, the snapshot's first.
    lines: list[str] = []
    with server.connect() as c, c.cursor() as cur:
        with pytest.raises(psycopg.errors.QueryCanceled), cur.copy(f"COPY ({query}) TO STDOUT") as copy:
            for data in copy:
                lines += bytes(data).decode().splitlines()
                if len(lines) == 2:
                    c.cancel()  # a push query runs until cancelled
        assert c.execute("SELECT 1").fetchone() == (1,)
    assert sorted((f[0], f[2], f[3]) for f in (line.split("\t") for line in lines)) == [
        ("insert", "free", "2"), ("insert", "pro", "1")]
    # DECLARE ... CURSOR FOR <query> EMIT CHANGES, then FETCH: the snapshot, then the changes.
    with server.connect() as c:
        c.execute("BEGIN")
        c.execute(f"DECLARE cur CURSOR FOR {query}")
        fetch_snapshot_then_changes(c, conn, t_name)
        c.execute("CLOSE cur")
        # WITH (snapshot = false) in a cursor: nothing until a change.
        c.execute(f"DECLARE quiet CURSOR FOR {query} WITH (snapshot = false)")
        assert c.execute("FETCH ALL quiet WITH (timeout = '2s')").fetchall() == []
        c.execute("COMMIT")
    assert not push_queries(conn)


def test_an_unknown_push_query_option_is_refused(server, conn, unique):
    s = f"popt_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT)")
    for sql in (f"SELECT a FROM {s} EMIT CHANGES WITH (snapshot = false, nosuch = 1)",
                f"COPY (SELECT a FROM {s} EMIT CHANGES WITH (nosuch = 1)) TO STDOUT"):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
            conn.execute(sql)
        assert info.value.sqlstate == "22023"
        assert info.value.diag.message_primary == 'unrecognized EMIT CHANGES option "nosuch"'
        assert info.value.diag.message_hint == "valid options are: snapshot"
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection goes on
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="requires a Boolean value"):
        conn.execute(f"SELECT a FROM {s} EMIT CHANGES WITH (snapshot = 'maybe')")
    assert conn.execute(f"SELECT count(*) FROM {s}").fetchone() == (0,)
    assert not push_queries(conn)


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
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            c.execute(f"DECLARE early CURSOR FOR SUBSCRIBE TO {view}")
        c.execute("BEGIN")
        c.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE TO {view}")
        # SUBSCRIBE starts with the current result, as inserts.
        fetch_snapshot_then_changes(c, conn, t_name)
        assert c.execute("FETCH 10 cur WITH (timeout = '100ms')").fetchall() == []
        c.execute("CLOSE cur")
        # A cursor over an ordinary query reads its rows in pieces.
        c.execute(f"DECLARE q CURSOR FOR SELECT id FROM {t_name} ORDER BY id")
        assert c.execute("FETCH 2 q").fetchall() == [(1,), (2,)]
        assert c.execute("FETCH ALL q").fetchall() == [(3,)]
        c.execute("COMMIT")
        with pytest.raises(psycopg.errors.InvalidCursorName):
            c.execute("FETCH q")
    assert not push_queries(conn)  # COMMIT and CLOSE released the subscription


def test_subscribe_streams_rows_to_the_client(server, conn, unique):
    s = f"subs_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT)")
    conn.execute(f"INSERT INTO {s} VALUES (1)")
    assert sorted(push_changes(server, conn, f"SUBSCRIBE TO {s}", 2, f"INSERT INTO {s} VALUES (2)")) == [
        ("insert", 1), ("insert", 2)]


@pytest.mark.parametrize("statement", [
    "COPY (SELECT a, b FROM {s} WHERE a > 1 EMIT CHANGES) TO STDOUT",
    # typed as a plain query in psql: answered as the COPY form is, so its rows print as they come
    "SELECT a, b FROM {s} WHERE a > 1 EMIT CHANGES",
])
def test_copy_push_query_to_stdout_with_psql(server, conn, unique, statement):
    import os
    import select
    import subprocess

    s = f"pcopy_{unique}"
    conn.execute(f"CREATE STREAM {s} (a INT, b TEXT)")
    conn.execute(f"INSERT INTO {s} VALUES (5, 'old')")  # the snapshot
    before = len(push_queries(conn))
    psql = subprocess.Popen(
        # stdbuf: psql writes COPY data through stdio, which a pipe would otherwise block-buffer.
        ["stdbuf", "-oL", "psql", "-X", "-h", server.host, "-p", str(server.port), "-U", "streamdb", "streamdb",
         "-c", statement.format(s=s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_subscribed(conn, before)
        conn.execute(f"INSERT INTO {s} VALUES (1, 'no'), (2, 'two'), (3, 'th\tree')")
        received = b""
        deadline = time.monotonic() + 60
        while received.count(b"\n") < 3 and time.monotonic() < deadline:
            ready, _, _ = select.select([psql.stdout], [], [], 1.0)
            if ready:
                received += os.read(psql.stdout.fileno(), 65536)
        ops = [line.split("\t", 1)[0] + " " + line.split("\t", 2)[2] for line in received.decode().splitlines()]
        assert ops[0] == "insert 5\told"
        assert sorted(ops[1:]) == ["insert 2\ttwo", "insert 3\tth\\tree"]
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
                        with pytest.raises(psycopg.Error) as info:
                            for _ in stream:
                                pass
                        assert info.value.sqlstate == "53000"
                        assert "subscriber too slow" in str(info.value)
                    finally:
                        stream.close()
                assert reader.execute("SELECT 1").fetchone() == (1,)
                assert writer.execute("SELECT count(*) FROM firehose").fetchone() == (100_001,)
                # The snapshot is not held against the limit: a push query over more rows than the
                # buffer holds sends them all, then the changes after them.
                with reader.cursor() as cur:
                    stream = cur.stream("SELECT i FROM firehose WHERE i >= 0 AND i < 5000 EMIT CHANGES")
                    try:
                        got = [next(stream) for _ in range(20_000)]
                        assert [r[0] for r in got] == ["insert"] * 20_000
                        assert sorted(r[2] for r in got) == sorted(list(range(5000)) * 4)
                        writer.execute("INSERT INTO firehose VALUES (7, 'new')")
                        assert next(stream)[0::2] == ("insert", 7)
                    finally:
                        stream.close()
        finally:
            srv.stop()


def fold(changes: list[tuple], into: Counter | None = None) -> Counter:
    """Changes as (op, rowtime, *columns) folded into the multiset of rows they describe."""
    rows = into if into is not None else Counter()
    for op, _rowtime, *columns in changes:
        rows[tuple(columns)] += 1 if op == "insert" else -1
    return Counter({row: n for row, n in rows.items() if n})  # a retraction too many stays, negative


def fetch_until(c, cursor: str, rows: Counter, want: Counter) -> Counter:
    """FETCH from `cursor`, folding into `rows`, until they are `want` (or a minute passed)."""
    deadline = time.monotonic() + 60
    while rows != want and time.monotonic() < deadline:
        rows = fold(c.execute(f"FETCH ALL {cursor} WITH (timeout = '1s')").fetchall(), rows)
    return rows


def test_a_push_query_over_a_join_and_aggregate_runs_on_a_view_of_its_own(server, conn, unique):
    """Issue 13: a push query that is not linear used to be recomputed from its whole inputs in
    every epoch with a change. It now runs as a materialized view of its own, on the pipelines,
    listed nowhere but SHOW QUERIES; its changes are checked against the same query run as a
    plain query over the same data."""
    ev, dim = f"pjev_{unique}", f"pjdim_{unique}"
    conn.execute(f"CREATE STREAM {ev} (k INT, v INT)")
    conn.execute(f"CREATE TABLE {dim} (id INT PRIMARY KEY, grp TEXT)")
    conn.execute(f"INSERT INTO {dim} VALUES (1, 'a'), (2, 'a'), (3, 'b')")
    conn.execute(f"INSERT INTO {ev} VALUES (1, 10), (2, 20), (3, 30), (3, 1), (4, 5)")
    query = (f"SELECT d.grp, count(*) AS n, sum(e.v) AS s, max(e.v) AS top FROM {ev} e "
             f"JOIN {dim} d ON d.id = e.k GROUP BY d.grp")

    def recomputed() -> Counter:
        return Counter(conn.execute(query).fetchall())

    assert recomputed() == Counter([("a", 2, 30, 20), ("b", 2, 31, 30)])
    explain = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {query} EMIT CHANGES").fetchall())
    assert "maintained as a materialized view of its own" in explain and "Join inner" in explain
    with server.connect() as c:
        c.execute("BEGIN")
        c.execute(f"DECLARE pj CURSOR FOR {query} EMIT CHANGES")
        rows = fetch_until(c, "pj", Counter(), recomputed())
        assert rows == recomputed()
        [listed] = [q for q in push_queries(conn)]
        assert listed[2] == "running (incremental)" and listed[9].startswith("pipeline push-")
        # Its view is nobody's to see, list or drop.
        assert [r for r in conn.execute("SHOW MATERIALIZED VIEWS").fetchall() if r[0].startswith("subscribe")] == []
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'subscribe%'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_name LIKE 'subscribe%'").fetchone() == (0,)
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute(f"SELECT * FROM subscribe_{listed[0].split()[-1]}")
        # Events, a key moving to another group, a key deleted: each batch of changes takes the
        # folded rows to the recomputed result.
        conn.execute(f"INSERT INTO {ev} VALUES (1, 50), (3, 2), (9, 9)")
        rows = fetch_until(c, "pj", rows, recomputed())
        assert rows == recomputed() == Counter([("a", 3, 80, 50), ("b", 3, 33, 30)])
        conn.execute(f"UPDATE {dim} SET grp = 'b' WHERE id = 1")
        conn.execute(f"DELETE FROM {dim} WHERE id = 3")
        rows = fetch_until(c, "pj", rows, recomputed())
        assert rows == recomputed() == Counter([("a", 1, 20, 20), ("b", 2, 60, 50)])
        c.execute("CLOSE pj")
        c.execute("COMMIT")
    assert not push_queries(conn)


def test_a_push_query_without_snapshot_starts_where_it_began(server, conn, unique):
    """Issue 13: `WITH (snapshot = false)` over a join and an aggregate sends the changes made from
    the moment the statement began, writes made while its view starts included. Its view's
    pipeline runs no batch past the inputs' offsets then (its backlog of 300,000 events takes two
    batches to get there), so its log holds that result and every change after it; before, the
    result then was computed once more from the whole inputs. The changes, folded over the result
    before the statement, are checked against the same query run as a plain query."""
    ev, dim = f"phev_{unique}", f"phdim_{unique}"
    conn.execute(f"CREATE STREAM {ev} (k INT, v INT)")
    conn.execute(f"CREATE TABLE {dim} (id INT PRIMARY KEY, grp TEXT)")
    conn.execute(f"INSERT INTO {dim} SELECT g, 'g' || (g % 7) FROM generate_series(0, 99) g")
    with conn.cursor() as cur, cur.copy(f"COPY {ev} FROM STDIN") as copy:
        copy.write("".join(f"{i % 100}\t{i % 13}\n" for i in range(300_000)))
    query = f"SELECT d.grp, count(*) AS n, sum(e.v) AS s FROM {ev} e JOIN {dim} d ON d.id = e.k GROUP BY d.grp"
    before = Counter(conn.execute(query).fetchall())
    assert sum(n for _, n, _ in before) == 300_000

    def write_while_it_starts() -> None:
        time.sleep(0.3)
        with server.connect() as w:
            w.execute(f"INSERT INTO {ev} VALUES (1, 100), (2, 200)")
            w.execute(f"UPDATE {dim} SET grp = 'moved' WHERE id = 3")

    with server.connect() as c:
        c.execute("BEGIN")
        writer = threading.Thread(target=write_while_it_starts)
        writer.start()
        c.execute(f"DECLARE held CURSOR FOR {query} EMIT CHANGES WITH (snapshot = false)")
        writer.join(30)
        [listed] = push_queries(conn)
        conn.execute(f"INSERT INTO {ev} VALUES (5, 1), (99, 7)")
        want = Counter(conn.execute(query).fetchall())
        assert want != before and ("moved", 3000, sum(i % 13 for i in range(3, 300_000, 100))) in want
        assert fetch_until(c, "held", before, want) == want
        c.execute("CLOSE held")
        c.execute("COMMIT")
    log_text = server.log_path.read_text()
    assert f"push query {listed[0].split()[-1]}: its view held the result as of its start" in log_text


def test_a_push_query_ends_with_an_error_when_what_it_reads_is_dropped(server, conn, unique):
    t_name = f"pdrop_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, plan TEXT)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'free')")
    with server.connect() as c:
        c.execute("BEGIN")
        c.execute(f"DECLARE pd CURSOR FOR SELECT plan, count(*) AS n FROM {t_name} GROUP BY plan EMIT CHANGES")
        assert [r[2:] for r in c.execute("FETCH ALL pd WITH (timeout = '30s')").fetchall()] == [("free", 1)]
        conn.execute(f"DROP TABLE {t_name}")  # a push query does not hold up a DROP (as in Materialize)
        with pytest.raises(psycopg.errors.UndefinedTable) as info:
            c.execute("FETCH ALL pd WITH (timeout = '30s')")
        assert info.value.diag.message_primary == "push query ended: a relation it reads was dropped or renamed"
        c.execute("ROLLBACK")
        assert c.execute("SELECT 1").fetchone() == (1,)
    assert not push_queries(conn)


def test_a_push_query_whose_rows_raise_fails_with_their_error(server, conn, unique):
    s = f"praise_{unique}"
    conn.execute(f"CREATE TABLE {s} (id INT PRIMARY KEY, k INT, v INT)")
    conn.execute(f"INSERT INTO {s} VALUES (1, 1, 2), (2, 1, 0)")
    with server.connect() as c:
        with pytest.raises(psycopg.errors.DivisionByZero) as info:
            c.execute(f"SELECT k, sum(10 / v) AS s FROM {s} GROUP BY k EMIT CHANGES").fetchall()
        assert info.value.diag.message_primary == "push query failed: division by zero"
        assert c.execute("SELECT 1").fetchone() == (1,)
        # Started before the bad row: the push query fails when it comes.
        c.execute("BEGIN")
        conn.execute(f"DELETE FROM {s} WHERE v = 0")
        c.execute(f"DECLARE pr CURSOR FOR SELECT k, sum(10 / v) AS s FROM {s} GROUP BY k EMIT CHANGES")
        assert [r[2:] for r in c.execute("FETCH ALL pr WITH (timeout = '30s')").fetchall()] == [(1, 5)]
        conn.execute(f"INSERT INTO {s} VALUES (3, 2, 0)")
        with pytest.raises(psycopg.errors.DivisionByZero):
            for _ in range(60):
                c.execute("FETCH ALL pr WITH (timeout = '1s')")
        c.execute("ROLLBACK")
    assert not push_queries(conn)


def test_a_push_querys_view_does_not_outlive_a_crash(fresh_server):
    """kill -9 while a push query over an aggregate runs: the restarted server drops its view
    before the pipelines start, and push queries go on as before."""
    from streamdb.runtime.catalog_store import CatalogStore
    from streamdb.storage import open_storage

    srv = fresh_server
    query = "SELECT plan, count(*) AS n FROM accounts GROUP BY plan EMIT CHANGES"
    with srv.connect() as conn:
        conn.execute("CREATE TABLE accounts (id INT PRIMARY KEY, plan TEXT)")
        conn.execute("INSERT INTO accounts VALUES (1, 'free'), (2, 'pro')")
    c = srv.connect()
    c.execute("BEGIN")
    c.execute(f"DECLARE running CURSOR FOR {query}")
    assert len(c.execute("FETCH ALL running WITH (timeout = '30s')").fetchall()) == 2
    pipelines = srv.data_dir / "spark" / "pipelines"
    [left] = list(pipelines.glob("push-*"))  # its own pipeline's checkpoint, state included
    srv.kill9()
    c.close()
    srv.restart()
    assert not left.exists()
    with srv.connect() as conn:
        assert not push_queries(conn)
        conn.execute("INSERT INTO accounts VALUES (3, 'pro')")
        with srv.connect() as c:
            c.execute("BEGIN")
            c.execute(f"DECLARE again CURSOR FOR {query}")
            assert fold(c.execute("FETCH ALL again WITH (timeout = '30s')").fetchall()) == \
                Counter([("free", 1), ("pro", 2)])
            assert len(list(pipelines.glob("push-*"))) == 1
            c.execute("CLOSE again")
            c.execute("COMMIT")
        # The closed push query's view goes in the background, and its pipeline with it.
        deadline = time.monotonic() + 60
        while list(pipelines.glob("push-*")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(pipelines.glob("push-*")) == []
    assert srv.stop() == 0
    storage = open_storage("rocksdb", str(srv.data_dir / "log"))
    try:
        catalog = CatalogStore(storage).snapshot()
        assert catalog.transient == {} and set(catalog.relations) == {"accounts"}
    finally:
        storage.close()


def test_a_push_query_with_parameters_gets_its_view_too(server, conn, unique):
    """Drivers send parameters (`WHERE id > $1`): they are bound before the push query is planned
    to run, so it runs on its own view, not recomputed."""
    t_name = f"pparam_{unique}"
    conn.execute(f"CREATE TABLE {t_name} (id INT PRIMARY KEY, plan TEXT)")
    conn.execute(f"INSERT INTO {t_name} VALUES (1, 'free'), (2, 'pro'), (3, 'pro')")
    rows: list = []
    before = len(push_queries(conn))

    def consume_with_parameters() -> None:
        with server.connect() as c, c.cursor() as cur:
            stream = cur.stream(f"SELECT plan, count(*) AS n FROM {t_name} WHERE id > %s GROUP BY plan EMIT CHANGES",
                                (1,))
            try:
                for row in stream:
                    rows.append((row[0], *row[2:]))
                    if len(rows) == 3:
                        break
            finally:
                stream.close()

    thread = threading.Thread(target=consume_with_parameters)
    thread.start()
    wait_subscribed(conn, before)
    [listed] = push_queries(conn)[before:]
    assert listed[2] == "running (incremental)" and listed[9].startswith("pipeline push-")
    wait_rows(rows, 1)
    conn.execute(f"INSERT INTO {t_name} VALUES (4, 'pro')")
    thread.join(60)
    assert not thread.is_alive()
    assert rows[0] == ("insert", "pro", 2)
    assert sorted(rows[1:]) == [("delete", "pro", 2), ("insert", "pro", 3)]


def test_push_queries_past_push_pipelines_share_their_depths_pipeline():
    """`push_pipelines = 1`: the first push query over an aggregate gets a pipeline of its own, the
    others share their depth's; all send the right changes. One without a snapshot there cannot
    hold the shared pipeline at its start: its result then is computed from its inputs."""
    with running_server("pushshare", {"STREAMDB_PUSH_PIPELINES": "1"}) as srv, srv.connect() as conn:
        conn.execute("CREATE TABLE accounts (id INT PRIMARY KEY, plan TEXT)")
        conn.execute("INSERT INTO accounts VALUES (1, 'free'), (2, 'pro')")
        query = "SELECT plan, count(*) AS n FROM accounts GROUP BY plan EMIT CHANGES"
        with srv.connect() as first, srv.connect() as second, srv.connect() as third:
            for c, name, options in ((first, "one", ""), (second, "two", ""), (third, "three", " WITH (snapshot = false)")):
                c.execute("BEGIN")
                c.execute(f"DECLARE {name} CURSOR FOR {query}{options}")
            assert sorted(q[9].split("-")[0] for q in push_queries(conn)) == [
                "pipeline depth", "pipeline depth", "pipeline push"]
            conn.execute("UPDATE accounts SET plan = 'pro' WHERE id = 1")
            want = Counter([("pro", 2)])
            for c, name in ((first, "one"), (second, "two")):
                assert fetch_until(c, name, Counter(), want) == want
                c.execute("COMMIT")
            # Without a snapshot: the change from the result as of its start.
            assert fetch_until(third, "three", Counter([("free", 1), ("pro", 1)]), want) == want
            third.execute("COMMIT")
        assert "its result as of its start is computed from its inputs" in srv.log_path.read_text()
