"""Postgres CDC end to end: a table of a real `streamdb serve` (real Spark) following a table of a
real PostgreSQL 15 (wal_level=logical, the `postgres_server` fixture) through logical replication."""

from __future__ import annotations

import decimal
import time

import psycopg
import pytest

from tests.source_util import wait_for, wait_source


def _upstream(postgres_server: str) -> psycopg.Connection:
    return psycopg.connect(postgres_server, autocommit=True)


def test_table_follows_a_postgres_table_snapshot_then_changes(fresh_server, postgres_server):
    up_name = f"orders_{int(time.time() * 1000) % 10**9}"
    with _upstream(postgres_server) as up:
        up.execute(f"CREATE TABLE {up_name} (id INT PRIMARY KEY, customer TEXT, amount NUMERIC(10, 2), "
                   "paid BOOLEAN, at TIMESTAMPTZ, note TEXT)")
        up.execute(f"INSERT INTO {up_name} SELECT i, 'c' || (i % 7), i * 1.25, i % 2 = 0, "
                   "'2024-05-01 09:00:00+00'::timestamptz + i * interval '1 minute', NULL "
                   "FROM generate_series(1, 500) AS i")
    expected = {i: (f"c{i % 7}", decimal.Decimal(i) * decimal.Decimal("1.25"), i % 2 == 0) for i in range(1, 501)}
    with fresh_server.connect() as conn:
        dsn = postgres_server
        conn.execute(f"CREATE SOURCE CONNECTOR shop POSTGRES WITH (dsn = '{dsn}')")
        conn.execute(f"CREATE TABLE orders (id INT PRIMARY KEY, customer TEXT, amount NUMERIC(10, 2), paid BOOLEAN, "
                     f"at TIMESTAMPTZ) WITH (connector = 'shop', postgres_table = 'public.{up_name}')")
        conn.execute("CREATE MATERIALIZED VIEW per_customer AS SELECT customer, count(*) AS n, sum(amount) AS total "
                     "FROM orders GROUP BY customer")
        # The snapshot.
        wait_for(conn, "SELECT count(*) FROM orders", [(500,)])
        assert {r[0]: r[1:] for r in conn.execute("SELECT id, customer, amount, paid FROM orders").fetchall()} \
            == expected
        assert conn.execute("SELECT at FROM orders WHERE id = 60").fetchone()[0].isoformat() \
            == "2024-05-01T10:00:00+00:00"
        # Changes: inserts, updates (one of its key), deletes, in several transactions.
        with _upstream(postgres_server) as up:
            up.execute(f"INSERT INTO {up_name} (id, customer, amount, paid) VALUES (501, 'new', 9.99, false)")
            up.execute(f"UPDATE {up_name} SET amount = amount + 100 WHERE id <= 10")
            up.execute(f"UPDATE {up_name} SET id = 1000 WHERE id = 20")
            up.execute(f"DELETE FROM {up_name} WHERE id BETWEEN 30 AND 39")
            with up.transaction():
                up.execute(f"DELETE FROM {up_name} WHERE id = 40")
                up.execute(f"INSERT INTO {up_name} (id, customer, amount, paid) VALUES (40, 'again', 1, true)")
        expected[501] = ("new", decimal.Decimal("9.99"), False)
        for i in range(1, 11):
            expected[i] = (expected[i][0], expected[i][1] + 100, expected[i][2])
        expected[1000] = expected.pop(20)
        for i in range(30, 40):
            del expected[i]
        expected[40] = ("again", decimal.Decimal("1.00"), True)
        # The amount total tells the last transaction apart: it keeps the count and the ids.
        wait_for(conn, "SELECT count(*), sum(id), sum(amount) FROM orders",
                 [(len(expected), sum(expected), sum(v[1] for v in expected.values()))])
        got = {r[0]: r[1:] for r in conn.execute("SELECT id, customer, amount, paid FROM orders").fetchall()}
        assert got == expected
        # The view over it equals the same query run as a batch query, and the upstream's own answer.
        conn.execute("FLUSH per_customer")
        view = sorted(conn.execute("SELECT * FROM per_customer").fetchall())
        assert view == sorted(conn.execute("SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer")
                              .fetchall())
        with _upstream(postgres_server) as up:
            assert view == sorted(up.execute(f"SELECT customer, count(*), sum(amount) FROM {up_name} GROUP BY 1")
                                  .fetchall())
        row = wait_source(conn, "orders", "running")
        assert row[1:3] == ("shop", f"public.{up_name}")
        # Writes come from upstream only.
        for sql in ("INSERT INTO orders (id) VALUES (9999)", "UPDATE orders SET paid = true",
                    "DELETE FROM orders WHERE id = 1"):
            with pytest.raises(psycopg.errors.WrongObjectType, match="its rows follow PostgreSQL table"):
                conn.execute(sql)
    # kill -9, upstream changes meanwhile, restart: each applied once, none lost.
    fresh_server.kill9()
    with _upstream(postgres_server) as up:
        up.execute(f"UPDATE {up_name} SET customer = 'moved' WHERE id BETWEEN 100 AND 149")
        up.execute(f"INSERT INTO {up_name} (id, customer, amount, paid) SELECT i, 'late', 2, true "
                   "FROM generate_series(2000, 2099) AS i")
    fresh_server.restart()
    with fresh_server.connect() as conn:
        wait_for(conn, "SELECT count(*) FROM orders WHERE customer IN ('moved', 'late')", [(150,)])
        with _upstream(postgres_server) as up:
            upstream_rows = sorted(up.execute(f"SELECT id, customer, amount, paid FROM {up_name}").fetchall())
        assert sorted(conn.execute("SELECT id, customer, amount, paid FROM orders").fetchall()) == upstream_rows
        conn.execute("FLUSH per_customer")
        assert sorted(conn.execute("SELECT * FROM per_customer").fetchall()) == sorted(
            conn.execute("SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer").fetchall())
        # Dropping the table drops its replication slot upstream (it would hold WAL for good).
        with _upstream(postgres_server) as up:
            slots = up.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'streamdb_%'") \
                .fetchone()[0]
            assert slots >= 1
        conn.execute("DROP TABLE orders CASCADE")
        with _upstream(postgres_server) as up:
            deadline = time.monotonic() + 30
            while up.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'streamdb_%'") \
                    .fetchone()[0] != slots - 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert up.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'streamdb_%'") \
                .fetchone()[0] == slots - 1
            up.execute(f"DROP TABLE {up_name}")


def test_cdc_errors_are_clear(conn, unique, postgres_server):
    def refused(sql: str, error: type[Exception], part: str) -> None:
        with pytest.raises(error) as e:
            conn.execute(sql)
        assert part in str(e.value), str(e.value)
        assert conn.execute("SELECT 1").fetchone() == (1,)

    c = f"pg_{unique}"
    conn.execute(f"CREATE SOURCE CONNECTOR {c} POSTGRES WITH (dsn = '{postgres_server}')")
    refused(f"CREATE TABLE t_{unique} (id INT, v TEXT) WITH (connector = '{c}')",
            psycopg.errors.InvalidParameterValue, "needs its primary key")
    refused(f"CREATE TABLE t_{unique} (id INT PRIMARY KEY) WITH (postgres_table = 'x')",
            psycopg.errors.InvalidParameterValue, "need connector")
    refused(f"CREATE TABLE t_{unique} (id INT PRIMARY KEY) WITH (connector = 'nope_{unique}')",
            psycopg.errors.UndefinedObject, f'connector "nope_{unique}" does not exist')
    refused(f"CREATE TABLE t_{unique} (id INT PRIMARY KEY) WITH (connector = '{c}', postgres_table = 'a.b.c')",
            psycopg.errors.InvalidParameterValue, "is not table or schema.table")
    # An upstream table that is missing, and one that loses a column: said in SHOW SOURCES.
    conn.execute(f"CREATE TABLE missing_{unique} (id INT PRIMARY KEY) WITH (connector = '{c}')")
    wait_source(conn, f"missing_{unique}", "retrying", f'"public.missing_{unique}" does not exist')
    up_name = f"items_{unique}"
    with _upstream(postgres_server) as up:
        up.execute(f"CREATE TABLE {up_name} (id INT PRIMARY KEY, label TEXT, qty INT)")
        up.execute(f"INSERT INTO {up_name} VALUES (1, 'a', 1), (2, 'b', 2)")
    conn.execute(f"CREATE TABLE items_{unique} (id INT PRIMARY KEY, label TEXT, qty INT) "
                 f"WITH (connector = '{c}', postgres_table = '{up_name}')")
    wait_for(conn, f"SELECT id, label, qty FROM items_{unique} ORDER BY id", [(1, "a", 1), (2, "b", 2)])
    with _upstream(postgres_server) as up:
        up.execute(f"ALTER TABLE {up_name} ADD COLUMN extra TEXT")  # a column more: followed as before
        up.execute(f"INSERT INTO {up_name} VALUES (3, 'c', 3, 'x')")
    wait_for(conn, f"SELECT id, label, qty FROM items_{unique} ORDER BY id", [(1, "a", 1), (2, "b", 2), (3, "c", 3)])
    with _upstream(postgres_server) as up:
        up.execute(f"ALTER TABLE {up_name} DROP COLUMN qty")
        up.execute(f"INSERT INTO {up_name} VALUES (4, 'd', 'y')")
    wait_source(conn, f"items_{unique}", "retrying", 'has no column "qty"')
    assert conn.execute(f"SELECT count(*) FROM items_{unique}").fetchone() == (3,)  # what it had stays
    conn.execute(f"DROP CONNECTOR {c} CASCADE")
    with _upstream(postgres_server) as up:
        up.execute(f"DROP TABLE {up_name}")
