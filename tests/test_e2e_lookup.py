"""Point lookups by key (planner/lookup.py): answered from a hash index over the cached rows (a
table's whole primary key: from its state store, one read by key), by the simple and the
extended protocol, and always equal to the general engine's answer
(the same query written so that it is not a lookup: `id + 0 = 5` runs on the embedded engine)."""

from __future__ import annotations

import contextlib
from decimal import Decimal

import psycopg


def rows(conn: psycopg.Connection, sql: str, params=None, *, prepare: bool | None = None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, params, prepare=prepare)
        return cur.fetchall()


def engine(conn: psycopg.Connection) -> str:
    return rows(conn, "SHOW streamdb.last_query_engine")[0][0]


def both(conn: psycopg.Connection, lookup_sql: str, general_sql: str, params=None) -> list[tuple]:
    """The lookup's rows, checked against the embedded engine's rows for the same question."""
    got = rows(conn, lookup_sql, params)
    assert engine(conn) == "index", lookup_sql
    expected = rows(conn, general_sql, params)
    assert engine(conn) == "embedded", general_sql
    assert sorted(got) == sorted(expected), (lookup_sql, got, expected)
    return got


def test_lookup_on_a_view_by_literal_and_parameter(conn, unique):
    s, v = f"lk_s_{unique}", f"lk_v_{unique}"
    conn.execute(f"CREATE STREAM {s} (id BIGINT, name TEXT, n INT)")
    conn.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT id, name, count(*) AS c, sum(n) AS total "
                 f"FROM {s} GROUP BY id, name")
    conn.execute(f"INSERT INTO {s} VALUES (1, 'ann', 10), (1, 'ann', 5), (2, 'bob', 7), (3, NULL, 1), "
                 f"(4, 'it''s', 2)")
    conn.execute("FLUSH")
    plan = "\n".join(r[0] for r in rows(conn, f"EXPLAIN SELECT total FROM {v} WHERE id = 1"))
    assert "index lookup on (id)" in plan

    assert both(conn, f"SELECT total, c FROM {v} WHERE id = 1", f"SELECT total, c FROM {v} WHERE id + 0 = 1") \
        == [(15, 2)]
    # The same shape again (now from the literal template, no parse), another key, a missing key.
    assert both(conn, f"SELECT total, c FROM {v} WHERE id = 2", f"SELECT total, c FROM {v} WHERE id + 0 = 2") \
        == [(7, 1)]
    assert both(conn, f"SELECT total, c FROM {v} WHERE id = 99", f"SELECT total, c FROM {v} WHERE id + 0 = 99") \
        == []
    # Parameters (extended protocol), prepared and not; text keys with quotes; two keys.
    for prepare in (True, False, True):
        assert rows(conn, f"SELECT name, total FROM {v} WHERE id = %s", (2,), prepare=prepare) == [("bob", 7)]
        assert engine(conn) == "index"
    assert both(conn, f"SELECT id FROM {v} WHERE name = 'it''s'", f"SELECT id FROM {v} WHERE name || '' = 'it''s'") \
        == [(4,)]
    assert both(conn, f"SELECT total FROM {v} WHERE name = %s AND id = %s",
                f"SELECT total FROM {v} WHERE name || '' = %s AND id + 0 = %s", ("ann", 1)) == [(15,)]
    assert both(conn, f"SELECT * FROM {v} AS x WHERE (x.id = -1)", f"SELECT * FROM {v} AS x WHERE x.id + 0 = -1") == []
    # NULL equals nothing, NULL keys included.
    assert rows(conn, f"SELECT id FROM {v} WHERE name = %s", (None,)) == []
    assert engine(conn) == "index"
    # A literal outside the column type's range compares as Postgres does: no row, no error.
    assert rows(conn, f"SELECT id FROM {v} WHERE id = 99999999999999999999") == []


def test_lookup_follows_new_events_updates_and_deletes(conn, unique):
    s, f, t = f"lk_s2_{unique}", f"lk_f_{unique}", f"lk_t_{unique}"
    conn.execute(f"CREATE STREAM {s} (id BIGINT, v TEXT)")
    # A filter view only ever grows: its cached rows and index are extended in place.
    conn.execute(f"CREATE MATERIALIZED VIEW {f} AS SELECT id, v FROM {s} WHERE id % 2 = 0")
    conn.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, v TEXT)")
    conn.execute(f"INSERT INTO {s} VALUES (2, 'a'), (4, 'b'), (5, 'c')")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'one'), (2, 'two')")
    conn.execute("FLUSH")
    assert both(conn, f"SELECT v FROM {f} WHERE id = 2", f"SELECT v FROM {f} WHERE id + 0 = 2") == [("a",)]
    assert both(conn, f"SELECT v FROM {t} WHERE id = 2", f"SELECT v FROM {t} WHERE id + 0 = 2") == [("two",)]
    for round_ in range(3):
        conn.execute(f"INSERT INTO {s} VALUES (2, 'a{round_}'), (6, 'x{round_}'), (7, 'odd')")
        conn.execute(f"UPDATE {t} SET v = 'two-{round_}' WHERE id = 2")
        conn.execute(f"DELETE FROM {t} WHERE id = 1")
        conn.execute("FLUSH")
        got = both(conn, f"SELECT v FROM {f} WHERE id = 2", f"SELECT v FROM {f} WHERE id + 0 = 2")
        assert sorted(got) == sorted([("a",)] + [(f"a{i}",) for i in range(round_ + 1)])
        got = both(conn, f"SELECT v FROM {f} WHERE id = 6", f"SELECT v FROM {f} WHERE id + 0 = 6")
        assert sorted(got) == [(f"x{i}",) for i in range(round_ + 1)]
        assert both(conn, f"SELECT v FROM {t} WHERE id = 2", f"SELECT v FROM {t} WHERE id + 0 = 2") == \
            [(f"two-{round_}",)]
        assert both(conn, f"SELECT v FROM {t} WHERE id = 1", f"SELECT v FROM {t} WHERE id + 0 = 1") == []


def test_lookup_by_a_tables_primary_key_reads_its_row_by_key(conn, unique):
    """A table's row by its whole primary key is read from its state store by key (issue 14: the
    hash index over the cached rows was rebuilt, then patched, after each update or delete): every
    column type answers as the general engine does, a composite key in any order, a parameter, and
    after updates and deletes."""
    t, pair = f"lk_pk_{unique}", f"lk_pair_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, b BIGINT, s TEXT, vc VARCHAR(8), r REAL, d DOUBLE PRECISION, "
                 f"n NUMERIC(10, 2), ts TIMESTAMP, tz TIMESTAMPTZ, day DATE, iv INTERVAL, ok BOOLEAN, j JSONB, "
                 f"u UUID, a INT[])")
    conn.execute(f"INSERT INTO {t} VALUES (1, 9000000000, 'x', 'abc', 0.1, 0.1, 12.50, '2024-01-02 03:04:05.5', "
                 f"'2024-01-02 03:04:05+02', '2024-02-29', '1 day 02:00:00', true, '{{\"k\": [1, 2]}}', "
                 f"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{{1,2,NULL}}'), "
                 f"(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    for key in (1, 2, 3):
        both(conn, f"SELECT * FROM {t} WHERE id = {key}", f"SELECT * FROM {t} WHERE id + 0 = {key}")
        both(conn, f"SELECT r, s, id FROM {t} WHERE id = %s", f"SELECT r, s, id FROM {t} WHERE id + 0 = %s", (key,))
    conn.execute(f"UPDATE {t} SET s = 'y', r = 2.5, n = 7 WHERE id = 1")
    conn.execute(f"DELETE FROM {t} WHERE id = 2")
    assert both(conn, f"SELECT s, r, n FROM {t} WHERE id = 1", f"SELECT s, r, n FROM {t} WHERE id + 0 = 1") == [
        ("y", 2.5, Decimal("7.00"))]
    assert both(conn, f"SELECT s FROM {t} WHERE id = 2", f"SELECT s FROM {t} WHERE id + 0 = 2") == []
    conn.execute(f"CREATE TABLE {pair} (a TEXT, b INT, v TEXT, PRIMARY KEY (a, b))")
    conn.execute(f"INSERT INTO {pair} VALUES ('x', 1, 'x1'), ('x', 2, 'x2'), ('y', 1, 'y1')")
    assert both(conn, f"SELECT v FROM {pair} WHERE b = 2 AND a = 'x'",
                f"SELECT v FROM {pair} WHERE b + 0 = 2 AND a = 'x'") == [("x2",)]
    assert both(conn, f"SELECT v FROM {pair} WHERE a = %s AND b = %s",
                f"SELECT v FROM {pair} WHERE a = %s AND b + 0 = %s", ("y", 1)) == [("y1",)]


def test_existence_checks_are_lookups(conn, unique):
    """`SELECT 1 FROM rel WHERE key = $1`, the common existence check, is answered from the index
    (a table's primary key: its row by key) with the embedded engine's answer, by both protocols."""
    s, v, t = f"lk_s4_{unique}", f"lk_v4_{unique}", f"lk_t4_{unique}"
    conn.execute(f"CREATE STREAM {s} (id BIGINT, name TEXT)")
    conn.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT id, name FROM {s} WHERE id <> 3")
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    conn.execute(f"INSERT INTO {s} VALUES (1, 'a'), (2, 'b'), (2, 'c'), (3, 'd')")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    conn.execute("FLUSH")
    assert both(conn, f"SELECT 1 FROM {v} WHERE id = 1", f"SELECT 1 FROM {v} WHERE id + 0 = 1") == [(1,)]
    assert both(conn, f"SELECT 1 FROM {v} WHERE id = 2", f"SELECT 1 FROM {v} WHERE id + 0 = 2") == [(1,), (1,)]
    assert both(conn, f"SELECT 1 FROM {v} WHERE id = 3", f"SELECT 1 FROM {v} WHERE id + 0 = 3") == []
    assert both(conn, f"SELECT 7 AS seven, name FROM {v} WHERE name = %s",
                f"SELECT 7 AS seven, name FROM {v} WHERE name || '' = %s", ("c",)) == [(7, "c")]
    assert both(conn, f"SELECT 1 FROM {t} WHERE id = 2", f"SELECT 1 FROM {t} WHERE id + 0 = 2") == [(1,)]
    assert both(conn, f"SELECT 1 FROM {t} WHERE id = 5", f"SELECT 1 FROM {t} WHERE id + 0 = 5") == []
    for prepare in (True, False, True):
        assert rows(conn, f"SELECT 1 FROM {t} WHERE id = %s", (1,), prepare=prepare) == [(1,)]
        assert engine(conn) == "index"
        assert rows(conn, f"SELECT 1 FROM {v} WHERE id = %s", (9,), prepare=prepare) == []
        assert engine(conn) == "index"
    # The column's name and type are the general path's (?column?, integer), as in PostgreSQL.
    with conn.cursor() as cur:
        cur.execute(f"SELECT 1 FROM {v} WHERE id = 1")
        assert [(d.name, d.type_code) for d in cur.description] == [("?column?", 23)]


def test_lookup_shapes_that_take_the_general_path(conn, unique):
    s, v = f"lk_s3_{unique}", f"lk_v3_{unique}"
    conn.execute(f"CREATE STREAM {s} (id BIGINT, name TEXT)")
    conn.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT id, max(name) AS name FROM {s} GROUP BY id")
    conn.execute(f"INSERT INTO {s} VALUES (1, 'a'), (2, 'b')")
    conn.execute("FLUSH")
    # Not lookups: an expression out, a range, OR, a limit, a string literal against an integer
    # column (Postgres casts it), a stream (no cached rows to index).
    for sql, expected in [
        (f"SELECT name || '!' FROM {v} WHERE id = 1", [("a!",)]),
        (f"SELECT name FROM {v} WHERE id > 1", [("b",)]),
        (f"SELECT name FROM {v} WHERE id = 1 OR id = 2 ORDER BY name", [("a",), ("b",)]),
        (f"SELECT name FROM {v} WHERE id = 1 LIMIT 0", []),
        (f"SELECT name FROM {v} WHERE id = '2'", [("b",)]),
        (f"SELECT name FROM {s} WHERE id = 2", [("b",)]),
    ]:
        for _ in range(2):  # the second time through the literal template cache, if any
            assert rows(conn, sql) == expected, sql
            assert engine(conn) == "embedded", sql
    # A dropped and recreated view of the same name: the cached shape is not reused blindly.
    conn.execute(f"DROP MATERIALIZED VIEW {v}")
    conn.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT id, min(name) AS name FROM {s} GROUP BY id")
    conn.execute(f"INSERT INTO {s} VALUES (1, '0')")
    conn.execute("FLUSH")
    assert rows(conn, f"SELECT name FROM {v} WHERE id = 1") == [("0",)]
    assert engine(conn) == "index"


def test_whole_counts_are_the_relations_kept_counts(conn, unique):
    """`SELECT count(*) FROM rel` is answered from the row count the reader keeps from the log
    (SHOW QUERIES's), without building a view's rows: the same answer as the embedded engine's
    `count(1)`, for a stream, a keyed table, a view with retractions and a log-only view, after
    inserts, upserts and deletes; a failing view's count is its error, as its rows are."""
    s, t, agg, lin = f"wc_s_{unique}", f"wc_t_{unique}", f"wc_a_{unique}", f"wc_l_{unique}"
    conn.execute(f"CREATE STREAM {s} (id BIGINT, k INT)")
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT)")
    conn.execute(f"CREATE MATERIALIZED VIEW {agg} AS SELECT k, count(*) AS n FROM {t} GROUP BY k")
    conn.execute(f"CREATE MATERIALIZED VIEW {lin} AS SELECT id FROM {s} WHERE k <> 2")

    def check() -> None:
        conn.execute("FLUSH")
        for rel in (s, t, agg, lin):
            got = rows(conn, f"SELECT count(*) FROM {rel}")
            assert engine(conn) == "count", rel
            assert got == rows(conn, f"SELECT count(1) FROM {rel}"), rel
            assert engine(conn) == "embedded", rel

    check()
    conn.execute(f"INSERT INTO {s} SELECT g, g % 4 FROM generate_series(1, 50) g")
    conn.execute(f"INSERT INTO {t} SELECT g, g % 5 FROM generate_series(1, 40) g")
    check()
    conn.execute(f"DELETE FROM {t} WHERE k IN (1, 3)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 9), (2, 9), (100, 9)")
    conn.execute(f"INSERT INTO {s} VALUES (51, 2), (52, 0)")
    check()
    assert rows(conn, f"SELECT count(*) AS n FROM {agg}") == [(4,)]  # k = 0, 2, 4, 9
    assert rows(conn, f"SELECT count(*) FROM {s}") == [(52,)]
    # A view whose maintenance fails reads as its error, count included.
    bad = f"wc_bad_{unique}"
    conn.execute(f"CREATE MATERIALIZED VIEW {bad} AS SELECT id, 10 / (k - 7) AS q FROM {s}")
    conn.execute(f"FLUSH {bad}")
    assert rows(conn, f"SELECT count(*) FROM {bad}") == [(52,)]
    try:
        conn.execute(f"INSERT INTO {s} VALUES (53, 7)")
        with contextlib.suppress(psycopg.Error):
            conn.execute(f"FLUSH {bad}")
        try:
            conn.execute(f"SELECT count(*) FROM {bad}")
            raise AssertionError("the failing view's count was read")
        except psycopg.errors.DivisionByZero:
            pass
    finally:  # a failing view fails every FLUSH of the shared server's later tests
        conn.execute(f"DROP MATERIALIZED VIEW {bad}")
