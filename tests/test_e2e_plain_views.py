"""Plain (non-materialized) views end to end, against a real `streamdb serve` with Spark.

A plain view is a named query: every query that reads it runs the view's query in its place
(ad hoc reads, materialized views, push queries, views over views). See docs/views.md.
"""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from tests.conftest import ServerProcess
from tests.test_e2e_push import start_push


def error_of(conn: psycopg.Connection, sql: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql)
    return info.value


def psql(srv: ServerProcess, *args: str) -> str:
    out = subprocess.run(["psql", "-X", "-h", srv.host, "-p", str(srv.port), "-U", "streamdb", "streamdb", *args],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def test_view_filters_projects_and_stacks(conn: psycopg.Connection, unique: str) -> None:
    users, pros, pro_ids = f"users_{unique}", f"pros_{unique}", f"pro_ids_{unique}"
    conn.execute(f"CREATE TABLE {users} (id INT PRIMARY KEY, name TEXT, plan TEXT)")
    conn.execute(f"INSERT INTO {users} VALUES (1, 'ann', 'free'), (2, 'bob', 'pro'), (3, 'cy', 'pro')")
    cur = conn.execute(f"CREATE VIEW {pros} AS SELECT id, upper(name) AS uname FROM {users} WHERE plan = 'pro'")
    assert cur.statusmessage == "CREATE VIEW"
    assert conn.execute(f"SELECT * FROM {pros} ORDER BY id").fetchall() == [(2, "BOB"), (3, "CY")]
    # Not stored: a write to the table shows in the next read, no FLUSH needed.
    conn.execute(f"UPDATE {users} SET plan = 'pro' WHERE id = 1")
    conn.execute(f"DELETE FROM {users} WHERE id = 3")
    assert conn.execute(f"SELECT * FROM {pros} ORDER BY id").fetchall() == [(1, "ANN"), (2, "BOB")]
    # A view over the view, with its own column names; joined back to the table; a lookup-shaped
    # read (not served from an index: the view holds no rows).
    conn.execute(f"CREATE VIEW {pro_ids} (pid, shout) AS SELECT id, uname || '!' FROM {pros}")
    assert conn.execute(f"SELECT * FROM {pro_ids} ORDER BY pid").fetchall() == [(1, "ANN!"), (2, "BOB!")]
    assert conn.execute(f"SELECT p.pid, u.name FROM {pro_ids} AS p JOIN {users} u ON u.id = p.pid "
                        "ORDER BY 1").fetchall() == [(1, "ann"), (2, "bob")]
    assert conn.execute(f"SELECT x.a FROM {pro_ids} AS x (a) WHERE x.a = 2").fetchall() == [(2,)]
    assert conn.execute(f"SELECT shout FROM {pro_ids} WHERE pid = 2").fetchall() == [("BOB!",)]
    assert conn.execute(f"SELECT shout FROM {pro_ids} WHERE pid = %s", (1,)).fetchall() == [("ANN!",)]
    with conn.cursor().copy(f"COPY {pro_ids} TO STDOUT") as copy:
        assert sorted(copy.rows()) == [("1", "ANN!"), ("2", "BOB!")]
    # Column types come from the described query.
    cur = conn.execute(f"SELECT * FROM {pro_ids} LIMIT 0")
    assert [(d.name, d.type_code) for d in cur.description] == [("pid", 23), ("shout", 25)]

    shown = {r[0] for r in conn.execute("SHOW VIEWS").fetchall()}
    assert {pros, pro_ids} <= shown
    assert users not in shown
    assert conn.execute(f"SHOW CREATE VIEW {pro_ids}").fetchall() == [
        (pro_ids, f"CREATE VIEW {pro_ids} (pid, shout) AS SELECT id, uname || '!' FROM {pros}")]
    described = dict(conn.execute(f"DESCRIBE {pros}").fetchall())
    assert described["kind"] == "view"
    assert described["column id"] == "integer" and described["column uname"] == "text"
    assert "FROM" in described["query"] and "row count" not in described


def test_materialized_view_over_plain_view_matches_recomputation(conn: psycopg.Connection, unique: str) -> None:
    clicks, users = f"clicks_{unique}", f"vusers_{unique}"
    slow, slow2, agg, agg2 = f"slow_{unique}", f"slow2_{unique}", f"slow_agg_{unique}", f"slow2_rows_{unique}"
    conn.execute(f"CREATE STREAM {clicks} (user_id INT, page TEXT, ms INT)")
    conn.execute(f"CREATE TABLE {users} (id INT PRIMARY KEY, plan TEXT)")
    conn.execute(f"INSERT INTO {users} VALUES (1, 'free'), (2, 'pro'), (3, 'pro')")
    conn.execute(f"CREATE VIEW {slow} AS SELECT c.user_id, c.page, c.ms, u.plan FROM {clicks} c "
                 f"JOIN {users} u ON u.id = c.user_id WHERE c.ms > 100")
    conn.execute(f"CREATE VIEW {slow2} AS SELECT user_id, page FROM {slow} WHERE plan = 'pro'")
    conn.execute(f"INSERT INTO {clicks} VALUES (1, '/a', 150), (2, '/b', 50), (2, '/c', 300), (3, '/d', 120)")
    agg_query = f"SELECT plan, count(*) AS n, sum(ms) AS total FROM {slow} GROUP BY plan"
    rows_query = f"SELECT user_id, page FROM {slow2}"
    conn.execute(f"CREATE MATERIALIZED VIEW {agg} AS {agg_query}")
    conn.execute(f"CREATE MATERIALIZED VIEW {agg2} AS {rows_query}")

    def check(expected_agg: list[tuple]) -> None:
        conn.execute("FLUSH")
        maintained = conn.execute(f"SELECT * FROM {agg} ORDER BY plan").fetchall()
        assert maintained == conn.execute(f"{agg_query} ORDER BY plan").fetchall() == expected_agg
        assert sorted(conn.execute(f"SELECT * FROM {agg2}").fetchall()) == \
            sorted(conn.execute(rows_query).fetchall())

    check([("free", 1, 150), ("pro", 2, 420)])
    conn.execute(f"INSERT INTO {clicks} VALUES (2, '/e', 500), (1, '/f', 10)")
    check([("free", 1, 150), ("pro", 3, 920)])
    conn.execute(f"UPDATE {users} SET plan = 'free' WHERE id = 3")
    check([("free", 2, 270), ("pro", 2, 800)])
    conn.execute(f"DELETE FROM {users} WHERE id = 1")
    check([("free", 1, 120), ("pro", 2, 800)])
    assert sorted(conn.execute(f"SELECT * FROM {agg2}").fetchall()) == [(2, "/c"), (2, "/e")]

    # The materialized views depend on the plain views: no DROP without CASCADE, no OR REPLACE
    # (the stored results were computed with the old query).
    e = error_of(conn, f"DROP VIEW {slow}")
    assert e.sqlstate == "2BP01"
    assert f"materialized view {agg} depends on view {slow}" in (e.diag.message_detail or "")
    e = error_of(conn, f"CREATE OR REPLACE VIEW {slow2} AS SELECT user_id, page FROM {slow}")
    assert e.sqlstate == "2BP01"
    conn.execute(f"DROP VIEW {slow} CASCADE")
    left = {r[0] for r in conn.execute("SHOW ALL").fetchall()}
    assert {slow, slow2, agg, agg2} & left == set()
    assert {clicks, users} <= left


def test_materialized_views_over_filtering_views_are_incremental(conn: psycopg.Connection, unique: str) -> None:
    orders, open_orders, big_open = f"orders_{unique}", f"open_orders_{unique}", f"big_open_{unique}"
    rows_mv, agg_mv = f"big_open_rows_{unique}", f"big_open_totals_{unique}"
    clicks, slow, slow_stream = f"mclicks_{unique}", f"mslow_{unique}", f"mslow_stream_{unique}"
    conn.execute(f"CREATE TABLE {orders} (id INT PRIMARY KEY, customer TEXT, amount INT, status TEXT)")
    conn.execute(f"INSERT INTO {orders} VALUES (1, 'ann', 5, 'open'), (2, 'bob', 20, 'open'), "
                 "(3, 'ann', 30, 'open'), (4, 'cy', 40, 'closed')")
    conn.execute(f"CREATE VIEW {open_orders} AS SELECT id, customer, amount * 100 + 1 AS cents FROM {orders} "
                 "WHERE status = 'open'")
    conn.execute(f"CREATE VIEW {big_open} (oid, who, cents) AS SELECT id, upper(customer), cents FROM {open_orders} "
                 "WHERE cents >= 1000")
    rows_query = f"SELECT oid, who, cents * 2 AS doubled FROM {big_open} WHERE who <> 'ZED'"
    agg_query = f"SELECT who, count(*) AS n, sum(cents) AS total FROM {big_open} GROUP BY who"
    # The same queries written against the table: what the views stand for.
    rows_direct = (f"SELECT id, upper(customer), (amount * 100 + 1) * 2 FROM {orders} "
                   "WHERE status = 'open' AND amount * 100 + 1 >= 1000 AND upper(customer) <> 'ZED'")
    agg_direct = (f"SELECT upper(customer), count(*), sum(amount * 100 + 1) FROM {orders} "
                  "WHERE status = 'open' AND amount * 100 + 1 >= 1000 GROUP BY 1")
    conn.execute(f"CREATE MATERIALIZED VIEW {rows_mv} AS {rows_query}")
    conn.execute(f"CREATE MATERIALIZED VIEW {agg_mv} AS {agg_query}")
    conn.execute(f"CREATE STREAM {clicks} (user_id INT, ms INT)")
    conn.execute(f"CREATE VIEW {slow} AS SELECT user_id, ms / 1000 AS secs FROM {clicks} WHERE ms > 1000")
    conn.execute(f"CREATE STREAM {slow_stream} AS SELECT * FROM {slow}")
    conn.execute(f"INSERT INTO {clicks} VALUES (1, 500), (2, 3000)")

    def check() -> None:
        conn.execute("FLUSH")
        maintained = sorted(conn.execute(f"SELECT * FROM {rows_mv}").fetchall())
        assert maintained == sorted(conn.execute(rows_query).fetchall()) == \
            sorted(conn.execute(rows_direct).fetchall())
        maintained = sorted(conn.execute(f"SELECT * FROM {agg_mv}").fetchall())
        assert maintained == sorted(conn.execute(agg_query).fetchall()) == sorted(conn.execute(agg_direct).fetchall())
        assert sorted(conn.execute(f"SELECT * FROM {slow_stream}").fetchall()) == \
            sorted(conn.execute(f"SELECT * FROM {slow}").fetchall())

    check()
    assert sorted(conn.execute(f"SELECT * FROM {agg_mv}").fetchall()) == [("ANN", 1, 3001), ("BOB", 1, 2001)]
    conn.execute(f"INSERT INTO {orders} VALUES (5, 'bob', 50, 'open'), (6, 'dee', 9, 'open')")
    conn.execute(f"INSERT INTO {clicks} VALUES (3, 1500), (4, 999)")
    check()
    conn.execute(f"UPDATE {orders} SET status = 'open' WHERE id = 4")
    conn.execute(f"UPDATE {orders} SET amount = 1 WHERE id = 2")
    conn.execute(f"DELETE FROM {orders} WHERE id = 3")
    check()
    assert sorted(conn.execute(f"SELECT * FROM {rows_mv}").fetchall()) == [(4, "CY", 8002), (5, "BOB", 10002)]
    assert sorted(conn.execute(f"SELECT * FROM {slow_stream}").fetchall()) == [(2, 3), (3, 1)]
    # Ad hoc reads take the same merge: ORDER BY a name means the output column, as in Postgres.
    assert conn.execute(f"SELECT who, -cents AS cents FROM {big_open} ORDER BY cents").fetchall() == [
        ("BOB", -5001), ("CY", -4001)]
    # Planned as if written against the relations: maintained from the changes only.
    status = {r[0]: r[2] for r in conn.execute("SHOW QUERIES").fetchall()}
    assert status[rows_mv] == status[slow_stream] == "running (incremental)"
    assert status[agg_mv] == "running (incremental)"


def test_view_star_is_frozen_at_creation(conn: psycopg.Connection, unique: str) -> None:
    s, v = f"fs_{unique}", f"fv_{unique}"
    conn.execute(f'CREATE STREAM {s} WITH (FORMAT = "JSON")')
    conn.execute(f"INSERT INTO {s} (temperature, humidity) VALUES (22, 80)")
    conn.execute(f"CREATE VIEW {v} AS SELECT * FROM {s} WHERE temperature > 20")
    assert conn.execute(f"SHOW CREATE VIEW {v}").fetchall() == [
        (v, f"CREATE VIEW {v} AS SELECT temperature, humidity FROM {s} WHERE temperature > 20")]
    assert conn.execute("SELECT definition FROM pg_views WHERE viewname = %s", (v,)).fetchone() == (
        f" SELECT temperature, humidity FROM {s} WHERE temperature > 20;",)
    # A new key widens the stream, not the view.
    conn.execute(f"INSERT INTO {s} (temperature, humidity, pressure) VALUES (25, 60, 1013), (10, 50, 990)")
    assert [d.name for d in conn.execute(f"SELECT * FROM {s} LIMIT 0").description or []] == \
        ["temperature", "humidity", "pressure"]
    cur = conn.execute(f"SELECT * FROM {v} ORDER BY temperature")
    assert [d.name for d in cur.description or []] == ["temperature", "humidity"]
    assert cur.fetchall() == [(22, 80), (25, 60)]


def test_push_query_over_plain_view_sees_new_rows(server: ServerProcess, conn: psycopg.Connection,
                                                  unique: str) -> None:
    events, hot = f"pevents_{unique}", f"hot_{unique}"
    conn.execute(f"CREATE STREAM {events} (sensor TEXT, temp INT)")
    conn.execute(f"CREATE VIEW {hot} AS SELECT sensor, temp * 10 AS deci FROM {events} WHERE temp > 30")
    conn.execute(f"INSERT INTO {events} VALUES ('a', 40)")  # before the push query: its snapshot
    t, rows = start_push(server, conn, f"SELECT * FROM {hot} EMIT CHANGES", 3)
    conn.execute(f"INSERT INTO {events} VALUES ('b', 35), ('c', 20)")
    conn.execute(f"INSERT INTO {events} VALUES ('d', 31)")
    t.join(60)
    assert not t.is_alive()
    assert (rows[0][1][0], *rows[0][1][2:]) == ("insert", "a", 400)
    assert sorted((r[1][0], *r[1][2:]) for r in rows[1:]) == [("insert", "b", 350), ("insert", "d", 310)]


def test_or_replace_and_if_not_exists(conn: psycopg.Connection, unique: str) -> None:
    t, v, w = f"rt_{unique}", f"rv_{unique}", f"rw_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT, score INT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a', 5), (2, 'b', 50)")
    conn.execute(f"CREATE VIEW {v} AS SELECT id, name FROM {t} WHERE score > 10")
    conn.execute(f"CREATE VIEW {w} AS SELECT name FROM {v}")
    # As in Postgres: the existing columns stay, same names and types, in front.
    for sql, message in [
        (f"SELECT id FROM {t}", "cannot drop columns from view"),
        (f"SELECT id, name AS label FROM {t}", 'cannot change name of view column "name" to "label"'),
        (f"SELECT id, score AS name FROM {t}", 'cannot change data type of view column "name" from text to integer'),
    ]:
        e = error_of(conn, f"CREATE OR REPLACE VIEW {v} AS {sql}")
        assert (e.sqlstate, e.diag.message_primary) == ("42P16", message)
    conn.execute(f"CREATE OR REPLACE VIEW {v} AS SELECT id, name, score FROM {t}")
    assert conn.execute(f"SELECT * FROM {v} ORDER BY id").fetchall() == [(1, "a", 5), (2, "b", 50)]
    # The view over it reads the new query.
    assert conn.execute(f"SELECT * FROM {w} ORDER BY name").fetchall() == [("a",), ("b",)]
    # A view cannot come to read itself.
    e = error_of(conn, f"CREATE OR REPLACE VIEW {v} AS SELECT 1 AS id, name, 2 AS score FROM {w}")
    assert e.sqlstate == "42P17"

    cur = conn.execute(f"CREATE VIEW IF NOT EXISTS {v} AS SELECT 1 AS x")
    assert cur.statusmessage == "CREATE VIEW"
    assert conn.execute(f"SELECT count(*) FROM {v}").fetchone() == (2,)
    assert error_of(conn, f"CREATE VIEW {v} AS SELECT 1 AS x").sqlstate == "42P07"
    e = error_of(conn, f"CREATE OR REPLACE VIEW {t} AS SELECT 1 AS x")
    assert (e.sqlstate, e.diag.message_primary) == ("42809", f'"{t}" is not a view')


def test_errors(conn: psycopg.Connection, unique: str) -> None:
    t, v, vv = f"et_{unique}", f"ev_{unique}", f"evv_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a')")
    sql = f"CREATE VIEW {v} AS SELECT id FROM nosuch_{unique}"
    e = error_of(conn, sql)
    assert e.sqlstate == "42P01"
    assert e.diag.statement_position == str(sql.index("nosuch") + 1)
    e = error_of(conn, f"CREATE VIEW {v} AS SELEC 1")
    assert e.sqlstate == "42601"
    assert error_of(conn, f"CREATE VIEW {v} AS SELECT id, name AS id FROM {t}").sqlstate == "42701"
    assert error_of(conn, f"CREATE VIEW {v} (a, b, c) AS SELECT id, name FROM {t}").sqlstate == "42601"
    assert error_of(conn, f"CREATE VIEW {v} AS SELECT id FROM {t} WHERE id = $1").sqlstate == "0A000"

    conn.execute(f"CREATE VIEW {v} AS SELECT id, name FROM {t}")
    conn.execute(f"CREATE VIEW {vv} AS SELECT name FROM {v}")
    e = error_of(conn, f"DROP TABLE {t}")
    assert e.sqlstate == "2BP01"
    assert f"view {v} depends on table {t}" in (e.diag.message_detail or "")
    assert error_of(conn, f"DROP VIEW {v}").sqlstate == "2BP01"
    assert error_of(conn, f"DROP VIEW {t}").sqlstate == "42809"
    assert error_of(conn, f"DROP MATERIALIZED VIEW {v}").sqlstate == "42809"
    assert error_of(conn, f"INSERT INTO {v} VALUES (2, 'b')").sqlstate == "55000"  # as Postgres
    assert error_of(conn, f"SELECT STREAM * FROM {v}").sqlstate == "0A000"
    assert error_of(conn, f"SELECT nope FROM {v}").sqlstate == "42703"
    # CASCADE drops the views, over views too.
    conn.execute(f"DROP TABLE {t} CASCADE")
    for name in (v, vv):
        assert error_of(conn, f"SELECT * FROM {name}").sqlstate == "42P01"
    conn.execute(f"DROP VIEW IF EXISTS {v}")


def test_reading_a_view_needs_select_on_the_view_only(server: ServerProcess, conn: psycopg.Connection,
                                                      unique: str) -> None:
    t, v, reader = f"pt_{unique}", f"pv_{unique}", f"vreader_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, secret TEXT, public_name TEXT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 's1', 'one'), (2, 's2', 'two')")
    conn.execute(f"CREATE VIEW {v} AS SELECT id, public_name FROM {t}")
    conn.execute(f"CREATE USER {reader}")
    with psycopg.connect(server.dsn, user=reader, autocommit=True) as r:
        assert error_of(r, f"SELECT * FROM {v}").sqlstate == "42501"
        conn.execute(f"GRANT SELECT ON {v} TO {reader}")
        # As in Postgres, the view's owner's rights reach the table through the view.
        assert r.execute(f"SELECT * FROM {v} ORDER BY id").fetchall() == [(1, "one"), (2, "two")]
        assert error_of(r, f"SELECT * FROM {t}").sqlstate == "42501"
        assert error_of(r, f"DROP VIEW {v}").sqlstate == "42501"
        # Creating a view needs SELECT on what it reads, as a materialized view does.
        assert error_of(r, f"CREATE VIEW mine_{unique} AS SELECT secret FROM {t}").sqlstate == "42501"


def test_psql_lists_and_describes_views(server: ServerProcess, conn: psycopg.Connection, unique: str) -> None:
    s, v = f"ps_{unique}", f"pview_{unique}"
    conn.execute(f"CREATE STREAM {s} (user_id INT, page TEXT, ms INT)")
    conn.execute(f"CREATE VIEW {v} AS SELECT user_id, page FROM {s} WHERE ms < 100")
    listed = psql(server, "--csv", "-c", rf"\dv {v}")
    assert listed.splitlines() == ["Schema,Name,Type,Owner", f"public,{v},view,streamdb"]
    described = psql(server, "-c", rf"\d+ {v}")
    assert f'View "public.{v}"' in described
    lines = [[cell.strip() for cell in line.split("|")] for line in described.splitlines() if "|" in line]
    assert [row[:2] for row in lines[1:]] == [["user_id", "integer"], ["page", "text"]]
    assert f"SELECT user_id, page FROM {s} WHERE ms < 100" in described.split("View definition:")[1]
    assert conn.execute("SELECT definition FROM pg_views WHERE viewname = %s", (v,)).fetchone() == (
        f" SELECT user_id, page FROM {s} WHERE ms < 100;",)
    assert conn.execute("SELECT table_name FROM information_schema.views WHERE table_name = %s",
                        (v,)).fetchall() == [(v,)]


def test_view_survives_restart(fresh_server: ServerProcess) -> None:
    with fresh_server.connect() as c:
        c.execute("CREATE TABLE items (id INT PRIMARY KEY, price INT)")
        c.execute("INSERT INTO items VALUES (1, 5), (2, 50), (3, 500)")
        c.execute("CREATE VIEW pricey (item, cents) AS SELECT id, price * 100 FROM items WHERE price > 10")
        c.execute("CREATE VIEW pricey_ids AS SELECT item FROM pricey")
        c.execute("CREATE MATERIALIZED VIEW pricey_count AS SELECT count(*) AS n FROM pricey")
        # An append-only view, kept as its change log alone (no per-row state).
        c.execute("CREATE STREAM clicks (id INT, ms INT)")
        c.execute("INSERT INTO clicks VALUES (1, 5), (2, 500), (2, 500), (3, 700)")
        c.execute("CREATE MATERIALIZED VIEW slow_clicks AS SELECT id, ms / 100 AS tenths FROM clicks WHERE ms > 100")
        c.execute("CREATE MATERIALIZED VIEW slow_per_id AS SELECT id, count(*) AS n FROM slow_clicks GROUP BY id")
        c.execute("FLUSH")
    fresh_server.stop()
    # Without its checkpoints every pipeline view is rebuilt from scratch: its rows retracted
    # (from the state store, or from the log for the append-only view), then backfilled again.
    # Checkpoints of an older state layout are dropped at start, which comes to the same.
    pipelines = fresh_server.data_dir / "spark" / "pipelines"
    assert (pipelines / "STATE_LAYOUT").read_text().strip() == "2"
    (pipelines / "STATE_LAYOUT").write_text("1\n")
    old_files = [pipelines / "depth-1" / "left-by-layout-1", pipelines / "depth-0" / "left-by-layout-1"]
    for f in old_files:
        f.write_text("")
    fresh_server.restart()
    assert (pipelines / "STATE_LAYOUT").read_text().strip() == "2"
    assert not any(f.exists() for f in old_files)
    with fresh_server.connect() as c:
        c.execute("INSERT INTO clicks VALUES (4, 900)")
        c.execute("FLUSH")
        slow = "SELECT id, ms / 100 AS tenths FROM clicks WHERE ms > 100"
        assert sorted(c.execute("SELECT * FROM slow_clicks").fetchall()) == \
            sorted(c.execute(slow).fetchall()) == [(2, 5), (2, 5), (3, 7), (4, 9)]
        # Its log took back the rows of before (SHOW QUERIES counts the log's weights; the view
        # over it reads that log).
        shown = {r[0]: r[5] for r in c.execute("SHOW QUERIES").fetchall()}
        assert shown["slow_clicks"] == 4 and shown["slow_per_id"] == 3
        assert sorted(c.execute("SELECT * FROM slow_per_id").fetchall()) == [(2, 2), (3, 1), (4, 1)]
        assert c.execute("SELECT * FROM pricey ORDER BY item").fetchall() == [(2, 5000), (3, 50000)]
        assert c.execute("SELECT * FROM pricey_ids ORDER BY item").fetchall() == [(2,), (3,)]
        c.execute("INSERT INTO items VALUES (4, 11)")
        c.execute("FLUSH")
        assert c.execute("SELECT n FROM pricey_count").fetchone() == (3,)
        assert c.execute("SELECT count(*) FROM pricey").fetchone() == (3,)
        assert [r[0] for r in c.execute("SHOW VIEWS").fetchall()] == ["pricey", "pricey_ids"]
        assert error_of(c, "DROP VIEW pricey").sqlstate == "2BP01"
        # Nothing is maintained for the plain views.
        assert {q[0] for q in c.execute("SHOW QUERIES").fetchall()} == {"pricey_count", "slow_clicks", "slow_per_id"}
