"""Python UDFs (CREATE FUNCTION ... LANGUAGE python) end to end against a real `streamdb serve`:
ad hoc on the embedded engine and on Spark, in materialized views (the Spark pipelines' Python
workers), in push queries; errors, dependencies, privileges and restarts."""

from __future__ import annotations

import tempfile
from pathlib import Path

import psycopg

from tests.conftest import ServerProcess
from tests.test_e2e_push import start_push


def gcd_function(name: str) -> str:
    return f"""CREATE FUNCTION {name}(a int, b int) RETURNS int LANGUAGE python AS $$
def {name}(a, b):
    if a is None or b is None:
        return -1
    while b:
        a, b = b, a % b
    return a
$$"""


def sqlstate(conn: psycopg.Connection, sql: str) -> tuple[str | None, str]:
    try:
        conn.execute(sql)
    except psycopg.Error as e:
        return e.sqlstate, e.diag.message_primary or ""
    return None, ""


def test_scalar_function_ad_hoc_in_views_and_push_queries_equals_batch(server, conn, unique):
    g, label, t = f"gcd_{unique}", f"label_{unique}", f"nums_{unique}"
    conn.execute(gcd_function(g))
    conn.execute(f"""CREATE FUNCTION {label}(s text, ts timestamptz) RETURNS text LANGUAGE python STRICT AS $$
def {label}(s, ts):
    return f"{{s.upper()}}@{{ts.hour:02d}}"
$$""")
    # Ad hoc, NULL arguments included (called on NULL input unless STRICT, as in PostgreSQL).
    cur = conn.execute(f"SELECT {g}(12, 18), {g}(NULL, 3), {label}(NULL, now())")
    assert cur.fetchone() == (6, -1, None)
    assert [c.name for c in cur.description] == [g, g, label]  # named after the function, as in PostgreSQL
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT, name TEXT, at TIMESTAMPTZ)")
    conn.execute(f"INSERT INTO {t} SELECT i, i * 3, 'n' || (i % 4), TIMESTAMPTZ '2026-11-27 00:00:00+00' "
                 f"+ i * INTERVAL '1 hour' FROM generate_series(1, 200) AS i")
    views = {
        f"by_gcd_{unique}": f"SELECT {g}(v, 12) AS d, count(*) AS n, sum(v) AS total FROM {t} GROUP BY {g}(v, 12)",
        f"labels_{unique}": f"SELECT id, {label}(name, at) AS l FROM {t} WHERE {g}(v, 10) > 1",
    }
    for name, query in views.items():
        conn.execute(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    conn.execute("FLUSH")

    def check() -> None:
        for name, query in views.items():
            maintained = sorted(conn.execute(f"SELECT * FROM {name}").fetchall())
            batch = sorted(conn.execute(query).fetchall())
            assert maintained == batch and batch, name

    check()
    assert conn.execute(f"SELECT l FROM labels_{unique} WHERE id = 5").fetchone() == ("N1@05",)
    assert conn.execute(f"SELECT n FROM by_gcd_{unique} WHERE d = 12").fetchone() == (50,)
    # Changes of every kind reach the views through the Python workers.
    conn.execute(f"UPDATE {t} SET v = 7 WHERE id <= 20")
    conn.execute(f"DELETE FROM {t} WHERE id > 180")
    conn.execute(f"INSERT INTO {t} VALUES (500, NULL, NULL, NULL)")
    conn.execute("FLUSH")
    check()
    assert conn.execute(f"SELECT n FROM by_gcd_{unique} WHERE d = -1").fetchone() == (1,)
    # A push query calls it too (the epoch driver's Spark jobs).
    thread, rows = start_push(server, conn, f"SELECT id, {g}(v, 9) AS d FROM {t} WHERE id > 1000 EMIT CHANGES", 2)
    conn.execute(f"INSERT INTO {t} (id, v) VALUES (1001, 27), (1002, 10)")
    thread.join(60)
    assert not thread.is_alive()
    assert sorted((r[1][0], r[1][2], r[1][3]) for r in rows) == [("insert", 1001, 9), ("insert", 1002, 1)]


def test_a_failing_function_is_38000_and_a_view_recovers_when_the_row_goes(server, conn, unique):
    inv, t = f"inv_{unique}", f"den_{unique}"
    conn.execute(f"CREATE FUNCTION {inv}(a int) RETURNS double precision LANGUAGE python AS $$ "
                 f"def {inv}(a): return 1 / a $$")
    assert sqlstate(conn, f"SELECT {inv}(0)") == ("38000", f"{inv}: ZeroDivisionError: division by zero")
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection goes on
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, v INT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 2), (2, 4)")
    conn.execute(f"CREATE MATERIALIZED VIEW inverses_{unique} AS SELECT id, {inv}(v) AS i FROM {t}")
    conn.execute(f"CREATE MATERIALIZED VIEW plain_{unique} AS SELECT id, v * 2 AS w FROM {t}")
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT * FROM inverses_{unique}").fetchall()) == [(1, 0.5), (2, 0.25)]
    conn.execute(f"INSERT INTO {t} VALUES (3, 0)")
    state, message = sqlstate(conn, f"FLUSH inverses_{unique}")
    assert state == "38000" and "ZeroDivisionError" in message
    state, message = sqlstate(conn, f"SELECT * FROM inverses_{unique}")
    assert state == "38000" and "ZeroDivisionError: division by zero" in message
    status = {r[0]: r for r in conn.execute("SHOW QUERIES").fetchall()}
    assert status[f"inverses_{unique}"][2] == "failed"
    assert "ZeroDivisionError" in status[f"inverses_{unique}"][7]
    # The row's error is data: the view beside it in the same pipeline goes on.
    conn.execute(f"FLUSH plain_{unique}")
    assert sorted(conn.execute(f"SELECT * FROM plain_{unique}").fetchall()) == [(1, 4), (2, 8), (3, 0)]
    conn.execute(f"DELETE FROM {t} WHERE id = 3")
    conn.execute(f"FLUSH inverses_{unique}")
    assert sorted(conn.execute(f"SELECT * FROM inverses_{unique}").fetchall()) == [(1, 0.5), (2, 0.25)]


def test_drop_and_replace_refuse_while_a_view_calls_the_function(server, conn, unique):
    f, t = f"twice_{unique}", f"tw_{unique}"
    conn.execute(f"CREATE FUNCTION {f}(a bigint) RETURNS bigint LANGUAGE python AS $$ def {f}(a): return 2 * a $$")
    conn.execute(f"CREATE STREAM {t} (a BIGINT)")
    conn.execute(f"INSERT INTO {t} VALUES (1), (2)")
    conn.execute(f"CREATE MATERIALIZED VIEW uses_{unique} AS SELECT sum({f}(a)) AS s FROM {t}")
    conn.execute(f"CREATE VIEW plain_uses_{unique} AS SELECT {f}(a) AS d FROM {t}")
    conn.execute("FLUSH")
    assert conn.execute(f"SELECT * FROM uses_{unique}").fetchone() == (6,)
    state, message = sqlstate(conn, f"DROP FUNCTION {f}")
    assert (state, message) == ("2BP01", f"cannot drop function {f} because other objects depend on it")
    state, message = sqlstate(conn, f"CREATE OR REPLACE FUNCTION {f}(a bigint) RETURNS bigint LANGUAGE python AS "
                                    f"$$ def {f}(a): return 3 * a $$")
    assert state == "2BP01"
    assert conn.execute(f"SELECT * FROM uses_{unique}").fetchone() == (6,)  # unchanged
    conn.execute(f"DROP FUNCTION {f}(bigint) CASCADE")
    names = {r[0] for r in conn.execute("SHOW ALL").fetchall()}
    assert f"uses_{unique}" not in names and f"plain_uses_{unique}" not in names
    assert sqlstate(conn, f"SELECT {f}(1)")[0] == "42883"
    # Without dependents, OR REPLACE changes the definition.
    conn.execute(f"CREATE FUNCTION {f}(a bigint) RETURNS bigint LANGUAGE python AS $$ def {f}(a): return 2 * a $$")
    conn.execute(f"CREATE OR REPLACE FUNCTION {f}(a bigint) RETURNS bigint LANGUAGE python AS "
                 f"$$ def {f}(a): return 3 * a $$")
    assert conn.execute(f"SELECT {f}(5)").fetchone() == (15,)
    conn.execute(f"DROP FUNCTION IF EXISTS {f}, never_{unique}")
    assert sqlstate(conn, f"DROP FUNCTION {f}")[0] == "42704"


def test_definitions_are_checked_at_create(conn, unique):
    f = f"bad_{unique}"
    cases = {
        f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE python AS $$ def {f}(a) return a $$": "42P13",
        f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE python AS $$ def other(a): return a $$": "42P13",
        f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE python AS $$ def {f}(a, b, c): return a $$": "42P13",
        f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE python AS $$ raise ValueError('no') $$": "42P13",
        f"CREATE FUNCTION {f}(a interval) RETURNS int LANGUAGE python AS $$ def {f}(a): return 1 $$": "0A000",
        f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN a; END $$": "0A000",
        "CREATE FUNCTION upper(a text) RETURNS text LANGUAGE python AS $$ def upper(a): return a $$": "42723",
    }
    for sql, expected in cases.items():
        assert sqlstate(conn, sql)[0] == expected, sql
    assert sqlstate(conn, f"SELECT {f}(1)")[0] == "42883"  # none was created
    conn.execute(f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE python AS $$ def {f}(a): return a $$")
    assert sqlstate(conn, f"CREATE FUNCTION {f}(a int) RETURNS int LANGUAGE python AS $$ def {f}(a): return a $$") \
        == ("42723", f"function {f} already exists")
    state, message = sqlstate(conn, f"SELECT {f}(1, 2)")
    assert state == "42883" and "takes 1 argument" in message
    shown = [r for r in conn.execute("SHOW FUNCTIONS").fetchall() if r[0] == f]
    assert shown == [(f, "function", "a integer", "integer", "python", "streamdb")]
    assert conn.execute("SELECT proname, pronargs, proargtypes, prorettype FROM pg_catalog.pg_proc "
                        "WHERE proname = %s", (f,)).fetchall() == [(f, 1, [23], 23)]
    conn.execute(f"DROP FUNCTION {f}")
    assert [r for r in conn.execute("SHOW FUNCTIONS").fetchall() if r[0] == f] == []


def test_only_superusers_create_python_functions(server, conn, unique):
    user = f"dev_{unique}"
    conn.execute(f"CREATE ROLE {user} LOGIN")
    with psycopg.connect(server.dsn, user=user, autocommit=True) as c:
        state, message = sqlstate(c, f"CREATE FUNCTION f_{unique}(a int) RETURNS int LANGUAGE python AS "
                                     f"$$ def f_{unique}(a): return a $$")
        assert (state, message) == ("42501", "permission denied for language python")
    conn.execute(f"DROP ROLE {user}")


def test_functions_and_their_views_survive_kill_9_and_run_on_spark_ad_hoc():
    with tempfile.TemporaryDirectory(prefix="streamdb-udf-") as d:
        # Reads of more than 5 rows run on Spark, so ad hoc calls go through its Python workers too.
        srv = ServerProcess(Path(d) / "data", "udf", extra_env={"STREAMDB_SPARK_READ_THRESHOLD_ROWS": "5"})
        srv.start()
        try:
            with srv.connect() as conn:
                conn.execute("CREATE FUNCTION bucket(x int) RETURNS text LANGUAGE python AS $$\n"
                             "def bucket(x):\n    if x > 1000:\n        raise ValueError(f'{x} is too big')\n"
                             "    return 'small' if x < 50 else 'large'\n$$")
                conn.execute("CREATE STREAM readings (x INT)")
                conn.execute("INSERT INTO readings SELECT i FROM generate_series(1, 100) AS i")
                conn.execute("CREATE MATERIALIZED VIEW buckets AS SELECT bucket(x) AS b, count(*) AS n "
                             "FROM readings GROUP BY bucket(x)")
                conn.execute("FLUSH")
                assert sorted(conn.execute("SELECT * FROM buckets").fetchall()) == [("large", 51), ("small", 49)]
                on_spark = "SELECT bucket(x) AS b, count(*) FROM readings GROUP BY 1 ORDER BY 1"
                assert conn.execute(on_spark).fetchall() == [("large", 51), ("small", 49)]
                assert conn.execute("SHOW streamdb.last_query_engine").fetchone() == ("spark",)
                # Reading a materialized view never starts a Spark job, past the threshold too,
                # unless the session asks for Spark itself.
                conn.execute("CREATE MATERIALIZED VIEW evens AS SELECT x FROM readings WHERE x % 2 = 0")
                conn.execute("FLUSH")
                for chosen in (None, "5"):
                    if chosen:
                        conn.execute(f"SET streamdb.spark_read_threshold_rows = {chosen}")
                    assert conn.execute("SELECT count(*), sum(x) FROM evens WHERE x > 10").fetchall() == [(45, 2520)]
                    assert conn.execute("SHOW streamdb.last_query_engine").fetchone() == \
                        ("spark" if chosen else "embedded",)
                    assert conn.execute("SELECT count(*) FROM evens e JOIN readings r ON r.x = e.x + 1").fetchall() \
                        == [(50 - 1,)]
                    assert conn.execute("SHOW streamdb.last_query_engine").fetchone() == \
                        ("spark" if chosen else "embedded",)
                conn.execute("RESET streamdb.spark_read_threshold_rows")
            srv.kill9()
            srv.start()
            with srv.connect() as conn:
                conn.execute("INSERT INTO readings VALUES (1), (2), (999)")
                conn.execute("FLUSH")
                assert sorted(conn.execute("SELECT * FROM buckets").fetchall()) == [("large", 52), ("small", 51)]
                assert sorted(conn.execute("SELECT * FROM buckets").fetchall()) == \
                    sorted(conn.execute("SELECT bucket(x), count(*) FROM readings GROUP BY 1").fetchall())
                conn.execute("INSERT INTO readings VALUES (5000)")
                state, message = sqlstate(conn, "SELECT bucket(x) FROM readings")
                assert (state, message) == ("38000", "bucket: ValueError: 5000 is too big")
                state, message = sqlstate(conn, "FLUSH buckets")
                assert state == "38000" and "5000 is too big" in message
        finally:
            srv.stop()


WAVG = """CREATE AGGREGATE {name}(v double precision, w int) RETURNS double precision LANGUAGE python AS $$
def create_state():
    return (0.0, 0)

def accumulate(state, v, w):
    if v is None or w is None:
        return state
    if w < 0:
        raise ValueError(f"negative weight {{w}}")
    return (state[0] + v * w, state[1] + w)

def retract(state, v, w):
    return (state[0] - v * w, state[1] - w)

def finish(state):
    return state[0] / state[1] if state[1] else None
$$"""


def test_python_aggregates_ad_hoc_in_views_and_push_queries_equal_batch(server, conn, unique):
    wavg, t = f"wavg_{unique}", f"trades_{unique}"
    assert conn.execute(WAVG.format(name=wavg)).statusmessage == "CREATE AGGREGATE"
    cur = conn.execute(f"SELECT {wavg}(v, w) FROM (VALUES (1.0, 1), (3.0, 3), (NULL, 2)) AS x(v, w)")
    assert cur.fetchall() == [(2.5,)] and cur.description[0].name == wavg
    # Over no rows: finish(create_state()), as a PostgreSQL aggregate gives its final function's
    # answer for the initial state.
    assert conn.execute(f"SELECT {wavg}(v, w) FROM (SELECT 1.0 AS v, 1 AS w WHERE false) AS x").fetchall() == [(None,)]
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, sym TEXT, price DOUBLE PRECISION, qty INT)")
    conn.execute(f"INSERT INTO {t} SELECT i, 's' || (i % 7), (i % 13) + 1, (i % 5) + 1 FROM generate_series(1, 300) AS i")
    query = f"SELECT sym, {wavg}(price, qty) AS vwap, count(*) AS n FROM {t} GROUP BY sym"
    conn.execute(f"CREATE MATERIALIZED VIEW vwap_{unique} AS {query}")
    conn.execute("FLUSH")

    def check() -> None:
        maintained = sorted(conn.execute(f"SELECT * FROM vwap_{unique}").fetchall())
        batch = sorted(conn.execute(query).fetchall())
        assert [(s, round(a, 9), n) for s, a, n in maintained] == [(s, round(a, 9), n) for s, a, n in batch]
        assert batch

    check()
    conn.execute(f"UPDATE {t} SET qty = 10 WHERE id % 7 = 1")
    conn.execute(f"DELETE FROM {t} WHERE id % 7 = 2")
    conn.execute("FLUSH")
    check()
    assert conn.execute(f"SELECT count(*) FROM vwap_{unique} WHERE sym = 's2'").fetchone() == (0,)
    assert conn.execute(f"EXPLAIN CREATE MATERIALIZED VIEW x_{unique} AS {query}").fetchall()[3][0].strip() \
        .startswith("Recompute per partition")  # a changed group is folded again, from its rows
    # The aggregate's error is the statement's.
    state, message = sqlstate(conn, f"SELECT {wavg}(v, w) FROM (VALUES (1.0, -1)) AS x(v, w)")
    assert (state, message) == ("38000", f"{wavg}: ValueError: negative weight -1")
    # A push query folds the changed groups too.
    thread, rows = start_push(server, conn, f"SELECT {wavg}(price, qty) AS a FROM {t} WHERE id > 1000 EMIT CHANGES", 3)
    conn.execute(f"INSERT INTO {t} VALUES (1001, 'z', 4.0, 1), (1002, 'z', 1.0, 3)")
    thread.join(60)
    assert not thread.is_alive()
    # The snapshot (no rows: NULL), then that result retracted and the new one inserted.
    assert (rows[0][1][0], rows[0][1][2]) == ("insert", None)
    assert sorted(((r[1][0], r[1][2]) for r in rows[1:]), key=str) == [("delete", None), ("insert", 1.75)]
    # psql's \df lists it as PostgreSQL does.
    from tests.test_e2e_tools import psql_csv

    assert psql_csv(server, rf"\df {wavg}") == [["public", wavg, "double precision",
                                                 "v double precision, w integer", "agg"]]
    assert sqlstate(conn, f"DROP AGGREGATE {wavg}")[0] == "2BP01"
    assert sqlstate(conn, f"SELECT {wavg}(price, qty) FILTER (WHERE qty > 1) FROM {t}")[0] == "0A000"
    assert sqlstate(conn, f"CREATE AGGREGATE bad_{unique}(x int) RETURNS int LANGUAGE python AS "
                          f"$$ def create_state(): return 0 $$") == \
        ("42P13", f"the body of aggregate bad_{unique} does not define accumulate")
    assert conn.execute(f"DROP AGGREGATE {wavg} CASCADE").statusmessage == "DROP AGGREGATE"


def test_sql_functions_are_inlined_ad_hoc_and_in_views(server, conn, unique):
    cc, add1, add2, s = f"count_char_{unique}", f"add1_{unique}", f"add2_{unique}", f"bid_{unique}"
    # RisingWave's Nexmark q14 declares its helper this way.
    conn.execute(f"CREATE FUNCTION {cc}(s varchar, c varchar) RETURNS int LANGUAGE SQL AS\n"
                 f"  $$SELECT LENGTH(s) - LENGTH(REPLACE(s, c, ''))$$")
    conn.execute(f"CREATE FUNCTION {add1}(int) RETURNS int LANGUAGE sql AS 'SELECT $1 + 1'")
    conn.execute(f"CREATE FUNCTION {add2}(x int) RETURNS bigint LANGUAGE sql AS $$ SELECT {add1}({add1}(x)) $$")
    cur = conn.execute(f"SELECT {cc}('abcabc', 'c'), {cc}(NULL, 'c'), {add2}(5)")
    assert cur.fetchone() == (2, None, 7)
    assert [c.name for c in cur.description] == [cc, cc, add2]
    conn.execute(f"CREATE STREAM {s} (auction INT, extra TEXT)")
    conn.execute(f"INSERT INTO {s} SELECT i, repeat('c', i % 4) || 'x' FROM generate_series(1, 50) AS i")
    query = f"SELECT auction, {cc}(extra, 'c') AS c_counts, {add2}(auction) AS a2 FROM {s}"
    conn.execute(f"CREATE MATERIALIZED VIEW q14_{unique} AS {query}")
    conn.execute(f"INSERT INTO {s} VALUES (51, NULL), (52, 'cc')")
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT * FROM q14_{unique}").fetchall()) == sorted(conn.execute(query).fetchall())
    assert conn.execute(f"SELECT c_counts, a2 FROM q14_{unique} WHERE auction = 52").fetchone() == (2, 54)
    assert sqlstate(conn, f"DROP FUNCTION {cc}")[0] == "2BP01"
    assert sqlstate(conn, f"CREATE FUNCTION bad_{unique}(x int) RETURNS int LANGUAGE sql AS $$ SELECT y $$")[0] \
        == "42703"
    assert sqlstate(conn, f"CREATE FUNCTION bad_{unique}(x int) RETURNS int LANGUAGE sql AS "
                          f"$$ SELECT x FROM {s} $$")[0] == "42P13"
    conn.execute(f"CREATE FUNCTION rec_{unique}(x int) RETURNS int LANGUAGE sql AS $$ SELECT x $$")
    conn.execute(f"CREATE OR REPLACE FUNCTION rec_{unique}(x int) RETURNS int LANGUAGE sql AS $$ SELECT rec_{unique}(x) $$")
    assert sqlstate(conn, f"SELECT rec_{unique}(1)") == ("54001", "stack depth limit exceeded")
    langs = {r[0]: r[4] for r in conn.execute("SHOW FUNCTIONS").fetchall()}
    assert langs[cc] == "sql"
    # Trusted: any role may create one.
    user = f"sqldev_{unique}"
    conn.execute(f"CREATE ROLE {user} LOGIN")
    with psycopg.connect(server.dsn, user=user, autocommit=True) as c:
        c.execute(f"CREATE FUNCTION mine_{unique}(x int) RETURNS int LANGUAGE sql AS $$ SELECT x * 2 $$")
        assert c.execute(f"SELECT mine_{unique}(21)").fetchone() == (42,)
        c.execute(f"DROP FUNCTION mine_{unique}")
    conn.execute(f"DROP ROLE {user}")
    conn.execute(f"DROP STREAM {s} CASCADE")
    conn.execute(f"DROP FUNCTION {cc}, {add2}, {add1}, rec_{unique}")
