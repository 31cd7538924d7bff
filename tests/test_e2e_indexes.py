"""CREATE INDEX and DROP INDEX on tables and materialized views, end to end against a real
`streamdb serve` (real Spark): the catalog shows the index as PostgreSQL does, lookups through it
equal the same query recomputed over the base table, it is kept through changes, a restart
after kill -9, a rename and a replaced view, and what it cannot be is refused clearly."""

from __future__ import annotations

import subprocess

import psycopg
import pytest


def _psql(srv, command: str) -> str:
    out = subprocess.run(["psql", "-X", "-h", srv.host, "-p", str(srv.port), "-U", "streamdb", "streamdb",
                          "-c", command], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _lookups_equal_recomputation(conn, view: str, table: str) -> None:
    groups = [g for (g,) in conn.execute(f"SELECT DISTINCT grp FROM {table}").fetchall()]
    assert groups
    for g in [*groups, "absent"]:
        got = conn.execute(f"SELECT n, total FROM {view} WHERE grp = %s", (g,), prepare=True).fetchall()
        assert conn.execute("SHOW streamdb.last_query_engine").fetchone() == ("index",)
        want = conn.execute(f"SELECT count(*), sum(v) FROM {table} WHERE grp = %s GROUP BY grp", (g,)).fetchall()
        assert got == want, (g, got, want)


def test_an_index_on_a_view_is_listed_used_kept_current_and_dropped(server, conn, unique):
    t, mv, plain, s = f"ix_t_{unique}", f"ix_mv_{unique}", f"ix_v_{unique}", f"ix_s_{unique}"
    conn.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, grp TEXT, v BIGINT)")
    conn.execute(f"INSERT INTO {t} SELECT i, 'g' || (i % 7), i FROM generate_series(1, 500) AS i")
    conn.execute(f"CREATE MATERIALIZED VIEW {mv} AS SELECT grp, count(*) AS n, sum(v) AS total FROM {t} GROUP BY grp")
    conn.execute(f"CREATE INDEX {mv}_grp ON {mv} (grp)")

    assert conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (mv,)).fetchall() == [
        (f"{mv}_grp", f"CREATE INDEX {mv}_grp ON public.{mv} USING btree (grp)")]
    assert conn.execute("SELECT c.relkind, i.indisunique, i.indisprimary, i.indnkeyatts FROM pg_index i "
                        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class r ON r.oid = i.indrelid "
                        "WHERE r.relname = %s", (mv,)).fetchall() == [("i", False, False, 1)]
    described = _psql(server, rf"\d {mv}")
    assert "Indexes:" in described and f'"{mv}_grp" btree (grp)' in described, described
    assert f"{mv}_grp" in _psql(server, r"\di")
    conn.execute("FLUSH")
    _lookups_equal_recomputation(conn, mv, t)

    # Changes of every kind: the index follows them.
    conn.execute(f"UPDATE {t} SET grp = 'g1' WHERE id % 5 = 0")
    conn.execute(f"DELETE FROM {t} WHERE id % 11 = 0")
    conn.execute(f"INSERT INTO {t} SELECT i, 'new', i FROM generate_series(1000, 1010) AS i")
    conn.execute("FLUSH")
    _lookups_equal_recomputation(conn, mv, t)

    # Unnamed indexes are named as PostgreSQL names them; a lookup's WHERE may list the columns
    # in any order.
    conn.execute(f"CREATE INDEX ON {t} (grp, v)")
    conn.execute(f"CREATE INDEX ON {t} (grp, v)")
    names = [n for (n,) in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY 1",
                                        (t,)).fetchall()]
    assert names == [f"{t}_grp_v_idx", f"{t}_grp_v_idx1", f"{t}_pkey"]
    for v, grp in ((7, "g0"), (10, "g1"), (1005, "new"), (1005, "g0")):
        want = conn.execute(f"SELECT id FROM {t} WHERE v + 0 = %s AND grp || '' = %s", (v, grp)).fetchall()
        assert conn.execute(f"SELECT id FROM {t} WHERE v = %s AND grp = %s", (v, grp),
                            prepare=True).fetchall() == want
        assert (v, grp) == (1005, "g0") or want
    with conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_grp_v_idx ON {t} (v)") as cur:
        assert cur.statusmessage == "CREATE INDEX"

    # What an index here cannot be is refused, naming what.
    conn.execute(f"CREATE VIEW {plain} AS SELECT * FROM {t}")
    conn.execute(f"CREATE STREAM {s} (a INT)")
    for sql, sqlstate, message in [
        (f"CREATE UNIQUE INDEX ON {t} (v)", "0A000", "unique indexes are not supported"),
        (f"CREATE INDEX ON {t} ((v + 1))", "0A000", "indexes on expressions are not supported"),
        (f"CREATE INDEX ON {t} (v) WHERE v > 1", "0A000", "partial indexes"),
        (f"CREATE INDEX ON {t} USING gin (grp)", "0A000", 'access method "gin" is not supported'),
        (f"CREATE INDEX ON {t} (nope)", "42703", 'column "nope" does not exist'),
        (f"CREATE INDEX ON {plain} (v)", "42809", f'cannot create index on relation "{plain}"'),
        (f"CREATE INDEX ON {s} (a)", "0A000", f'cannot create index on stream "{s}"'),
        (f"CREATE INDEX {mv}_grp ON {t} (v)", "42P07", f'relation "{mv}_grp" already exists'),
        (f"CREATE INDEX {t} ON {mv} (n)", "42P07", f'relation "{t}" already exists'),
        # and an index's name is a relation's name (pg_class): no relation takes it
        *((sql, "42P07", f'relation "{mv}_grp" already exists') for sql in (
            f"CREATE TABLE {mv}_grp (a INT)", f"CREATE STREAM {mv}_grp (a INT)",
            f"CREATE VIEW {mv}_grp AS SELECT 1 AS a", f"CREATE OR REPLACE VIEW {mv}_grp AS SELECT 1 AS a",
            f"CREATE MATERIALIZED VIEW {mv}_grp AS SELECT * FROM {t}", f"ALTER VIEW {plain} RENAME TO {mv}_grp")),
        (f"CREATE INDEX ON nope_{unique} (v)", "42P01", f'relation "nope_{unique}" does not exist'),
        (f"DROP INDEX nope_{unique}", "42704", f'index "nope_{unique}" does not exist'),
    ]:
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(sql)
        assert refused.value.sqlstate == sqlstate and message in str(refused.value), (sql, refused.value)
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the session goes on
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute(f"CREATE TABLE IF NOT EXISTS {mv}_grp (a INT)")
    assert notices == [f'relation "{mv}_grp" already exists, skipping']
    assert conn.execute("SELECT relkind FROM pg_class WHERE relname = %s", (f"{mv}_grp",)).fetchall() == [("i",)]

    conn.execute(f"DROP INDEX IF EXISTS nope_{unique}, {t}_grp_v_idx1")
    conn.execute(f"DROP INDEX {mv}_grp")
    assert conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s", (mv,)).fetchone() == (0,)
    _lookups_equal_recomputation(conn, mv, t)  # lookups without a declared index: the same rows
    # A table's indexes go with it, no CASCADE needed (as in PostgreSQL); a plain view reading
    # the table does need one.
    conn.execute(f"DROP MATERIALIZED VIEW {mv}")
    conn.execute(f"DROP VIEW {plain}")
    conn.execute(f"DROP TABLE {t}")
    assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE %s",
                        (f"ix_%{unique}%",)).fetchone() == (0,)
    conn.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, grp TEXT, v BIGINT)")
    conn.execute(f"CREATE INDEX ON {t} (grp, v)")  # the name is free again
    assert conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname <> %s",
                        (t, f"{t}_pkey")).fetchall() == [(f"{t}_grp_v_idx",)]
    conn.execute(f"DROP TABLE {t}")
    conn.execute(f"DROP STREAM {s}")


def test_an_index_survives_kill_9_a_rename_and_a_replaced_view(fresh_server):
    with fresh_server.connect() as conn:
        conn.execute("CREATE TABLE base (id BIGINT PRIMARY KEY, grp TEXT, v BIGINT)")
        conn.execute("INSERT INTO base SELECT i, 'g' || (i % 4), i FROM generate_series(1, 200) AS i")
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT grp, count(*) AS n, sum(v) AS total FROM base GROUP BY grp")
        conn.execute("CREATE INDEX agg_by_grp ON agg USING hash (grp)")
        conn.execute("FLUSH")
    fresh_server.kill9()
    fresh_server.restart()
    with fresh_server.connect() as conn:
        assert conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'agg_by_grp'").fetchall() == [
            ("CREATE INDEX agg_by_grp ON public.agg USING hash (grp)",)]
        conn.execute("INSERT INTO base VALUES (500, 'g9', 5)")
        conn.execute("FLUSH")
        _lookups_equal_recomputation(conn, "agg", "base")
        conn.execute("ALTER MATERIALIZED VIEW agg RENAME TO agg2")
        assert conn.execute("SELECT tablename FROM pg_indexes WHERE indexname = 'agg_by_grp'").fetchall() == [
            ("agg2",)]
        # The new definition still has the column: the index follows the view.
        conn.execute("CREATE OR REPLACE MATERIALIZED VIEW agg2 AS "
                     "SELECT grp, count(*) AS n, sum(v) AS total, max(v) AS top FROM base GROUP BY grp")
        assert conn.execute("SELECT tablename, indexdef FROM pg_indexes WHERE indexname = 'agg_by_grp'").fetchall() \
            == [("agg2", "CREATE INDEX agg_by_grp ON public.agg2 USING hash (grp)")]
        _lookups_equal_recomputation(conn, "agg2", "base")
        # A definition without the column leaves the index behind, dropped with the old view.
        conn.execute("CREATE OR REPLACE MATERIALIZED VIEW agg2 AS SELECT count(*) AS n FROM base")
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'agg_by_grp'").fetchone() == (0,)
