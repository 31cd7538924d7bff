"""Statements a PostgreSQL user types out of habit, against a real `streamdb serve`: each is
refused before any data moves, with Postgres' SQLSTATE and wording, and the session goes on.
See docs/pg-compat.md, "Errors where StreamDB lacks the feature".
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ServerProcess

COPY_HINT_IN = "Use COPY ... FROM STDIN; psql's \\copy command reads and writes files on the client."
COPY_HINT_OUT = "Use COPY ... TO STDOUT; psql's \\copy command reads and writes files on the client."


def error_of(conn: psycopg.Connection, sql: str, params: list[object] | None = None) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    assert conn.execute("SELECT 41 + 1").fetchone() == (42,)  # the session is still usable
    return info.value


def diag(e: psycopg.Error) -> tuple[str | None, str | None, int | None]:
    position = e.diag.statement_position
    return e.sqlstate, e.diag.message_primary, int(position) if position is not None else None


def psql_script(srv: ServerProcess, script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script.sql"
    path.write_text(script)
    return subprocess.run(["psql", "-X", "-h", srv.host, "-p", str(srv.port), "-U", "streamdb", "streamdb",
                           "-f", str(path)], capture_output=True, text=True, timeout=60)


# --- 1. COPY with a server-side file or program ----------------------------------------------------

def test_copy_from_or_to_a_file_or_program_is_refused(conn: psycopg.Connection, unique: str) -> None:
    t = f"copy_t_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'ann')")
    cases = [
        (f"COPY {t} FROM '/etc/hostname'", "COPY FROM a file is not supported", COPY_HINT_IN),
        (f"COPY {t} (id, name) FROM '/etc/hostname' WITH (FORMAT csv)", "COPY FROM a file is not supported",
         COPY_HINT_IN),
        (f"COPY {t} FROM PROGRAM 'cat /etc/passwd'", "COPY FROM PROGRAM is not supported", COPY_HINT_IN),
        (f"COPY {t} TO '/tmp/streamdb-copy-{unique}.csv'", "COPY TO a file is not supported", COPY_HINT_OUT),
        (f"COPY (SELECT * FROM {t}) TO '/tmp/streamdb-copy-{unique}.csv'", "COPY TO a file is not supported",
         COPY_HINT_OUT),
        (f"COPY {t} TO PROGRAM 'cat'", "COPY TO PROGRAM is not supported", COPY_HINT_OUT),
    ]
    for sql, message, hint in cases:
        e = error_of(conn, sql)
        assert (e.sqlstate, e.diag.message_primary, e.diag.message_hint) == ("0A000", message, hint), sql
    # Through psycopg's COPY API too: the server answers with the error, not a CopyInResponse.
    with pytest.raises(psycopg.errors.FeatureNotSupported) as info, conn.cursor() as cur, \
            cur.copy(f"COPY {t} FROM '/etc/hostname'") as copy:
        copy.write_row((2, "bob"))
    assert info.value.diag.message_primary == "COPY FROM a file is not supported"
    assert not Path(f"/tmp/streamdb-copy-{unique}.csv").exists()
    # Nothing was read or written; STDIN/STDOUT still work on the same connection.
    assert conn.execute(f"SELECT id, name FROM {t} ORDER BY id").fetchall() == [(1, "ann")]
    with conn.cursor() as cur, cur.copy(f"COPY {t} FROM STDIN") as copy:
        copy.write_row((2, "bob"))
    assert conn.execute(f"SELECT id, name FROM {t} ORDER BY id").fetchall() == [(1, "ann"), (2, "bob")]


def test_psql_script_goes_on_after_copy_from_a_file(server: ServerProcess, conn: psycopg.Connection,
                                                     unique: str, tmp_path: Path) -> None:
    """Before the fix psql sent the rest of the script as COPY data; now the COPY fails alone."""
    t = f"copy_psql_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    out = psql_script(server, (
        f"COPY {t} FROM '/etc/hostname';\n"
        f"INSERT INTO {t} VALUES (1, 'after');\n"
        f"COPY {t} FROM PROGRAM 'echo 2,x' WITH (FORMAT csv);\n"
        f"INSERT INTO {t} VALUES (3, 'later');\n"
        f"SELECT id, name FROM {t} ORDER BY id;\n"
    ), tmp_path)
    assert out.returncode == 0, out.stderr
    assert "ERROR:  COPY FROM a file is not supported" in out.stderr
    assert "ERROR:  COPY FROM PROGRAM is not supported" in out.stderr
    assert "HINT:  Use COPY ... FROM STDIN; psql's \\copy command reads and writes files on the client." \
        in out.stderr
    assert out.stdout.count("INSERT 0 1") == 2
    assert conn.execute(f"SELECT id, name FROM {t} ORDER BY id").fetchall() == [(1, "after"), (3, "later")]


# --- 2. SELECT STREAM in a subquery ------------------------------------------------------------------

def test_select_stream_in_a_subquery_is_refused_with_a_position(conn: psycopg.Connection, unique: str) -> None:
    t = f"sub_t_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'ann')")
    hint = "Use SELECT STREAM as the whole statement, or read the subquery's relations as tables."
    for sql in (f"SELECT id FROM (SELECT STREAM * FROM {t}) sub",
                f"WITH c AS (SELECT STREAM id FROM {t}) SELECT * FROM c",
                f"SELECT count(*) FROM {t} WHERE id IN (SELECT STREAM id FROM {t})",
                f"SELECT * FROM (SELECT STREAM * FROM {t}) sub EMIT CHANGES"):
        e = error_of(conn, sql)
        assert diag(e) == ("0A000", "SELECT STREAM is not supported in a subquery", sql.index("STREAM") + 1), sql
        assert e.diag.message_hint == hint
    # Extended protocol (Parse/Describe) too.
    sql = f"SELECT id FROM (SELECT STREAM * FROM {t}) sub WHERE id = %s"
    assert diag(error_of(conn, sql, [1]))[:2] == ("0A000", "SELECT STREAM is not supported in a subquery")
    # A whole-statement SELECT STREAM still reads the change log.
    assert conn.execute(f"SELECT STREAM id, name FROM {t}").fetchall()[-1][-2:] == (1, "ann")


# --- 3. TEMP / TEMPORARY / UNLOGGED ----------------------------------------------------------------

def test_temporary_relations_are_refused_and_unlogged_is_accepted(conn: psycopg.Connection, unique: str) -> None:
    for sql, what in ((f"CREATE TEMP TABLE tmp_{unique} (a int)", "table"),
                      (f"CREATE TEMPORARY TABLE tmp_{unique} (a int PRIMARY KEY)", "table"),
                      (f"CREATE TEMP TABLE tmp_{unique} AS SELECT 1 AS a", "table"),
                      (f"CREATE TEMP VIEW tmp_{unique} AS SELECT 1 AS a", "view")):
        e = error_of(conn, sql)
        assert (e.sqlstate, e.diag.message_primary, e.diag.message_hint) == (
            "0A000", f"temporary {what}s are not supported",
            f"Create an ordinary {what} and drop it when you are done."), sql
    # Nothing was created.
    assert conn.execute("SELECT count(*) FROM pg_class WHERE relname = %s", [f"tmp_{unique}"]).fetchone() == (0,)
    # UNLOGGED: accepted, an ordinary (logged) table.
    t = f"unlogged_{unique}"
    assert conn.execute(f"CREATE UNLOGGED TABLE {t} (id INT PRIMARY KEY, v TEXT)").statusmessage == "CREATE TABLE"
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'c')")
    assert conn.execute(f"SELECT id, v FROM {t} ORDER BY id").fetchall() == [(1, "c"), (2, "b")]


# --- 4. Unknown columns ------------------------------------------------------------------------------

def test_unknown_column_is_42703_with_its_position(conn: psycopg.Connection, unique: str) -> None:
    t = f"cols_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    cases = [
        ("SELECT nope", 'column "nope" does not exist', 8),
        ("SELECT 1, nope + 1", 'column "nope" does not exist', 11),
        (f"SELECT nope FROM {t}", 'column "nope" does not exist', 8),
        (f"SELECT id FROM {t} WHERE nope = 1", 'column "nope" does not exist', len(f"SELECT id FROM {t} WHERE ") + 1),
        (f"SELECT {t}.nope FROM {t}", f"column {t}.nope does not exist", 8),
        (f"SELECT x.nope FROM {t} x", "column x.nope does not exist", 8),
    ]
    for sql, message, position in cases:
        assert diag(error_of(conn, sql)) == ("42703", message, position), sql
    # Extended protocol: the error comes from Parse/Describe.
    assert diag(error_of(conn, "SELECT nope + %s", [1])) == ("42703", 'column "nope" does not exist', 8)
    # In a multi-statement query the position counts from the start of the whole text.
    assert diag(error_of(conn, "SELECT 1; SELECT nope")) == ("42703", 'column "nope" does not exist', 18)


def test_psql_points_at_the_unknown_column(server: ServerProcess, tmp_path: Path) -> None:
    out = psql_script(server, "SELECT 1, nope + 1;\nSELECT 2 AS still_here;\n", tmp_path)
    assert 'ERROR:  column "nope" does not exist\nLINE 1: SELECT 1, nope + 1;\n                  ^' in out.stderr
    assert "still_here" in out.stdout


# --- Writing into views ------------------------------------------------------------------------------

def test_writing_into_a_view_is_refused_as_postgres_does(conn: psycopg.Connection, unique: str) -> None:
    t, v, mv = f"base_{unique}", f"v_{unique}", f"mv_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'ann')")
    conn.execute(f"CREATE VIEW {v} AS SELECT id, name FROM {t}")
    conn.execute(f"CREATE MATERIALIZED VIEW {mv} AS SELECT id, name FROM {t}")
    for sql, verb, command in ((f"INSERT INTO {v} VALUES (2, 'bob')", "insert into", "Insert"),
                               (f"UPDATE {v} SET name = 'x'", "update", "Update"),
                               (f"DELETE FROM {v} WHERE id = 1", "delete from", "Delete")):
        e = error_of(conn, sql)
        assert (e.sqlstate, e.diag.message_primary, e.diag.message_detail, e.diag.message_hint) == (
            "55000", f'cannot {verb} view "{v}"', "Views are not automatically updatable in StreamDB.",
            f"{command} through the relations the view reads from."), sql
    for sql in (f"INSERT INTO {mv} VALUES (2, 'bob')", f"UPDATE {mv} SET name = 'x'", f"DELETE FROM {mv}"):
        assert diag(error_of(conn, sql))[:2] == ("42809", f'cannot change materialized view "{mv}"'), sql
    conn.execute("FLUSH")
    assert conn.execute(f"SELECT id, name FROM {v}").fetchall() == [(1, "ann")]
    assert conn.execute(f"SELECT id, name FROM {mv}").fetchall() == [(1, "ann")]


# --- Values no Python type holds (found by the SQL fuzzer) -----------------------------------------

def test_infinite_dates_are_a_data_error_not_an_internal_one(conn: psycopg.Connection, unique: str) -> None:
    s = f"days_{unique}"
    conn.execute(f"CREATE STREAM {s} (d DATE)")
    conn.execute(f"INSERT INTO {s} VALUES ('2024-01-01')")
    for sql in (f"SELECT 'Infinity'::DATE FROM {s}", "SELECT 'infinity'::timestamp"):
        sqlstate, message, _ = diag(error_of(conn, sql))
        assert sqlstate == "22008", (sql, sqlstate, message)
        assert message is not None and "out of the range StreamDB can return" in message
    assert conn.execute(f"SELECT d FROM {s}").fetchall() == [(dt.date(2024, 1, 1),)]


def test_copy_refuses_an_unterminated_csv_quote_and_nul_bytes_and_stores_nothing(conn: psycopg.Connection,
                                                                                  unique: str) -> None:
    """An unterminated CSV quote is 22P04 (it was an internal error); a NUL byte in text is 22021
    on the fast path of a typed stream too (pyarrow stored it)."""
    s = f"cp_{unique}"
    conn.execute(f"CREATE STREAM {s} (id INT, t TEXT)")
    with pytest.raises(psycopg.errors.BadCopyFileFormat, match="unterminated CSV quoted field"):
        with conn.cursor() as cur, cur.copy(f"COPY {s} FROM STDIN WITH (FORMAT csv)") as copy:
            copy.write('1,"abc\n2,x\n')
    for options, payload in (("", "1\ta\x00b\n"), (" WITH (FORMAT csv)", "1,a\x00b\n")):
        with pytest.raises(psycopg.errors.CharacterNotInRepertoire, match="0x00"):
            with conn.cursor() as cur, cur.copy(f"COPY {s} FROM STDIN{options}") as copy:
                copy.write(payload)
    assert conn.execute(f"SELECT count(*) FROM {s}").fetchone() == (0,)
    with conn.cursor() as cur, cur.copy(f"COPY {s} FROM STDIN WITH (FORMAT csv)") as copy:
        copy.write('1,"a ""quoted"" b"\n')
    assert conn.execute(f"SELECT id, t FROM {s}").fetchall() == [(1, 'a "quoted" b')]


def test_identifiers_longer_than_63_bytes_are_truncated_with_a_notice(conn: psycopg.Connection, unique: str) -> None:
    """As Postgres's scanner: a name past NAMEDATALEN - 1 bytes is cut (at a character boundary)
    and a NOTICE says so, wherever it is written (it was kept whole)."""
    long_name = f"t_{unique}_" + "x" * 70
    cut = long_name[:63]
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(f"{d.sqlstate} {d.message_primary}"))
    conn.execute(f'CREATE TABLE {long_name} (id INT PRIMARY KEY, "{"é" * 40}" TEXT)')
    assert notices == [f'42622 identifier "{long_name}" will be truncated to "{cut}"',
                       f'42622 identifier "{"é" * 40}" will be truncated to "{"é" * 31}"']
    conn.execute(f"INSERT INTO {long_name} VALUES (1, 'a')")  # the literal INSERT path
    conn.execute(f"INSERT INTO {cut} VALUES (2, 'b')")
    cur = conn.execute(f"SELECT * FROM {long_name} ORDER BY id")
    assert cur.fetchall() == [(1, "a"), (2, "b")]
    assert [d.name for d in cur.description or ()] == ["id", "é" * 31]
    assert conn.execute("SELECT relname FROM pg_class WHERE relname = %s", (cut,)).fetchall() == [(cut,)]


def test_deep_nesting_is_54001_and_moderate_nesting_runs(conn: psycopg.Connection, unique: str) -> None:
    """Postgres answers 54001 `stack depth limit exceeded` for statements nested past its stack;
    these were internal errors (Python's RecursionError), and 50 nested parentheses already failed."""
    too_deep = ["SELECT " + "(" * 5000 + "1" + ")" * 5000,
                "SELECT " + "CASE WHEN true THEN " * 2000 + "1" + " END" * 2000,
                "SELECT " + "(SELECT " * 500 + "1" + ")" * 500,
                "SELECT " + "+".join(["1"] * 20000)]
    for sql in too_deep:
        for prepare in (False, True):
            with pytest.raises(psycopg.errors.StatementTooComplex, match="stack depth limit exceeded"):
                conn.execute(sql, prepare=prepare)
    fine = ["SELECT " + "(" * 200 + "1" + ")" * 200,
            "SELECT " + "CASE WHEN true THEN " * 100 + "1" + " END" * 100,
            "SELECT " + "(SELECT " * 30 + "1" + ")" * 30,
            "SELECT " + "+".join(["1"] * 500)]
    for sql, expected in zip(fine, (1, 1, 1, 500), strict=True):
        assert conn.execute(sql).fetchone() == (expected,)
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_generate_series_with_a_zero_step_is_22023_ad_hoc_and_in_a_view(conn: psycopg.Connection, unique: str) -> None:
    """DuckDB gave no rows and Spark an internal error where Postgres says 22023."""
    for sql in ("SELECT generate_series(1, 2, 0)", "SELECT * FROM generate_series(1, 3, 0)"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="step size cannot equal zero"):
            conn.execute(sql)
    t, mv = f"gz_{unique}", f"gz_mv_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, x INT)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 1)")
    conn.execute(f"CREATE MATERIALIZED VIEW {mv} AS SELECT id, generate_series(1, 2, x) AS s FROM {t}")
    conn.execute(f"UPDATE {t} SET x = 0 WHERE id = 1")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="step size cannot equal zero"):
        conn.execute("FLUSH")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="step size cannot equal zero"):
        conn.execute(f"SELECT * FROM {mv}")
    conn.execute(f"UPDATE {t} SET x = 1 WHERE id = 1")  # the cause gone, the view recovers
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT * FROM {mv}").fetchall()) == [(1, 1), (1, 2)]


@pytest.mark.parametrize(("sql", "message"), [
    ("CREATE TABLE {n} (id INT PRIMARY KEY, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)",
     "a table with both a WATERMARK and a PRIMARY KEY is not supported"),
    ("CREATE TABLE {n} (id INT, ts TIMESTAMP, PRIMARY KEY (id), WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)",
     "a table with both a WATERMARK and a PRIMARY KEY is not supported"),
    ("CREATE TABLE {n} (id INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH TTL",
     r"WATERMARK \.\.\. WITH TTL is not supported"),
    ("CREATE TABLE {n} (id INT PRIMARY KEY, v INT) ON CONFLICT DO NOTHING",
     r"CREATE TABLE \.\.\. ON CONFLICT is not supported"),
    ("CREATE TABLE {n} (id INT PRIMARY KEY, v INT, ver INT) WITH VERSION COLUMN(ver)",
     "WITH VERSION COLUMN is not supported"),
    ("CREATE TABLE {n} (id INT, p STRUCT<a INT, b VARCHAR>)", "STRUCT columns are not supported"),
    ("CREATE INDEX {n} ON {n}_t (v) INCLUDE (id) DISTRIBUTED BY (v)",
     r"CREATE INDEX \.\.\. DISTRIBUTED BY is not supported"),
    ("CREATE MATERIALIZED VIEW {n} AS WITH sub AS CHANGELOG FROM {n}_t SELECT * FROM sub",
     "AS CHANGELOG FROM is not supported"),
    ("CREATE MATERIALIZED VIEW {n} AS SELECT * FROM {n}_s AS a JOIN {n}_t FOR SYSTEM_TIME AS OF PROCTIME() AS b "
     "ON a.id = b.id", r"a temporal join \(FOR SYSTEM_TIME AS OF\) is not supported in a materialized view"),
], ids=["watermark-inline-key", "watermark-table-key", "ttl", "create-on-conflict", "version-column", "struct",
        "create-index", "changelog", "temporal-join-view"])
def test_risingwave_forms_streamdb_lacks_are_refused_by_name(conn: psycopg.Connection, unique: str, sql: str,
                                                             message: str) -> None:
    """RisingWave's forms without an equivalent here are refused with 0A000 and a message naming
    them (they were syntax errors, 42704, or a temporal join kept like a regular one)."""
    n = f"rw_{unique}"
    conn.execute(f"CREATE TABLE {n}_t (id INT PRIMARY KEY, v INT)")
    conn.execute(f"CREATE STREAM {n}_s (id INT, w INT)")
    with pytest.raises(psycopg.errors.FeatureNotSupported, match=message):
        conn.execute(sql.format(n=n))
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_approx_percentile_is_the_exact_percentile_ad_hoc_and_in_a_view(conn: psycopg.Connection, unique: str) -> None:
    """RisingWave's approx_percentile(p [, error]) WITHIN GROUP (ORDER BY v): the exact value
    (percentile_cont), which is within any error bound, on both engines and in a view."""
    t, mv = f"ap_{unique}", f"ap_mv_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT, v DOUBLE PRECISION)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 1, 1), (2, 1, 2), (3, 1, 4), (4, 1, 5), (5, 2, 7)")
    query = (f"SELECT k, approx_percentile(0.5) WITHIN GROUP (ORDER BY v), "
             f"approx_percentile(0.25, 0.01) WITHIN GROUP (ORDER BY v DESC) AS q FROM {t} GROUP BY k")
    conn.execute(f"CREATE MATERIALIZED VIEW {mv} AS {query}")
    conn.execute(f"DELETE FROM {t} WHERE id = 4")
    conn.execute("FLUSH")
    expected = [(1, 2.0, 3.0), (2, 7.0, 7.0)]
    cur = conn.execute(f"{query} ORDER BY k")
    assert cur.fetchall() == expected
    assert [d.name for d in cur.description or ()] == ["k", "approx_percentile", "q"]
    conn.execute("SET streamdb.spark_read_threshold_rows = 0")
    try:
        assert conn.execute(f"{query} ORDER BY k").fetchall() == expected
    finally:
        conn.execute("RESET streamdb.spark_read_threshold_rows")
    assert conn.execute(f"SELECT * FROM {mv} ORDER BY k").fetchall() == expected


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_parquet('/tmp/x.parquet')",
    "SELECT * FROM read_json('http://127.0.0.1:1/x.json')",
])
def test_queries_cannot_read_the_servers_files(conn: psycopg.Connection, sql: str) -> None:
    """The embedded engine's file and URL readers answered any client with the server's files
    (`SELECT * FROM read_csv('/etc/passwd')`); its external access is off."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="reading files or URLs from a query is not allowed"):
        conn.execute(sql)
    assert conn.execute("SELECT 1").fetchone() == (1,)
