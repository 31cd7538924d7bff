"""Real clients against a real server: asyncpg (extended protocol, binary).

psql, SQLAlchemy and pandas are in tests/test_e2e_tools.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal

import asyncpg


def test_asyncpg_binary_extended_protocol(server, unique):
    t = f"apg_{unique}"

    async def main() -> None:
        conn = await asyncpg.connect(host=server.host, port=server.port, user="streamdb", database="streamdb")
        try:
            await conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT, score DOUBLE PRECISION, "
                               f"amount NUMERIC, at TIMESTAMPTZ, day DATE, ok BOOLEAN)")
            when = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
            await conn.executemany(
                f"INSERT INTO {t} VALUES ($1, $2, $3, $4, $5, $6, $7)",
                [(i, f"n{i}", i * 1.5, Decimal(i) / 4, when, dt.date(2025, 1, i + 1), i % 2 == 0)
                 for i in range(4)])
            got = await conn.fetch(f"SELECT id, name, score, amount, at, day, ok FROM {t} WHERE id > $1 ORDER BY id", 1)
            assert [tuple(r) for r in got] == [
                (2, "n2", 3.0, Decimal("0.5"), when, dt.date(2025, 1, 3), True),
                (3, "n3", 4.5, Decimal("0.75"), when, dt.date(2025, 1, 4), False)]
            stmt = await conn.prepare(f"SELECT count(*) FROM {t} WHERE name = $1")
            assert await stmt.fetchval("n0") == 1
            assert await stmt.fetchval("zz") == 0
            try:
                await conn.fetch(f"SELECT nope FROM {t}")
            except asyncpg.exceptions.UndefinedColumnError:
                pass
            else:
                raise AssertionError("expected 42703")
            assert await conn.fetchval("SELECT 41 + $1::int", 1) == 42
        finally:
            await conn.close()

    asyncio.run(main())


def test_every_statement_form_twenty_times_through_psycopg_and_asyncpg(server, unique):
    """Drivers prepare statements on their own after a few runs (psycopg after 5, asyncpg's
    statement cache at once): each literal and parameterized form of reads and writes runs 20
    times through each, with its rows checked every time."""
    import psycopg

    t, v = f"reuse_{unique}", f"reuse_v_{unique}"
    with server.connect() as c:
        c.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT, n BIGINT)")
        c.execute(f"INSERT INTO {t} VALUES " + ", ".join(f"({i}, 'n{i}', {i})" for i in range(40)))
        c.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT name, sum(n) AS total FROM {t} GROUP BY name")
        c.execute("FLUSH")

    with psycopg.connect(server.dsn, autocommit=True) as conn:  # prepare_threshold: psycopg's default
        for i in range(20):
            assert conn.execute(f"SELECT total FROM {v} WHERE name = 'n7'").fetchall() == [(7,)]
            assert conn.execute(f"SELECT total FROM {v} WHERE name = %s", (f"n{i}",)).fetchall() == [(i,)]
            assert conn.execute(f"SELECT name FROM {t} WHERE id = 3").fetchall() == [("n3",)]
            conn.execute(f"INSERT INTO {t} VALUES (1000, 'lit', 1)")
            conn.execute(f"INSERT INTO {t} VALUES (%s, %s, %s)", (2000 + i, "par", i))
            conn.execute(f"UPDATE {t} SET n = n + 1 WHERE id = 1000")
            conn.execute(f"UPDATE {t} SET n = %s WHERE id = %s", (i * 10, 2000 + i))
            assert conn.execute(f"SELECT n FROM {t} WHERE id = 1000").fetchall() == [(2,)]
            assert conn.execute(f"SELECT n FROM {t} WHERE id = %s", (2000 + i,)).fetchall() == [(i * 10,)]
            conn.execute(f"DELETE FROM {t} WHERE id = 1000")
            conn.execute(f"DELETE FROM {t} WHERE id = %s", (2000 + i,))
        assert conn.execute(f"SELECT count(*) FROM {t}").fetchall() == [(40,)]

    async def main() -> None:
        conn = await asyncpg.connect(host=server.host, port=server.port, user="streamdb", database="streamdb")
        try:
            for i in range(20):
                assert [tuple(r) for r in await conn.fetch(f"SELECT total FROM {v} WHERE name = 'n7'")] == [(7,)]
                assert await conn.fetchval(f"SELECT total FROM {v} WHERE name = $1", f"n{i}") == i
                await conn.execute(f"INSERT INTO {t} VALUES (1000, 'lit', 1)")
                await conn.execute(f"INSERT INTO {t} VALUES ($1, $2, $3)", 3000 + i, "par", i)
                await conn.execute(f"UPDATE {t} SET n = n + 1 WHERE id = 1000")
                await conn.execute(f"UPDATE {t} SET n = $1 WHERE id = $2", i * 10, 3000 + i)
                assert await conn.fetchval(f"SELECT n FROM {t} WHERE id = 1000") == 2
                assert await conn.fetchval(f"SELECT n FROM {t} WHERE id = $1", 3000 + i) == i * 10
                await conn.execute(f"DELETE FROM {t} WHERE id = 1000")
                await conn.execute(f"DELETE FROM {t} WHERE id = $1", 3000 + i)
            assert await conn.fetchval(f"SELECT count(*) FROM {t}") == 40
        finally:
            await conn.close()

    asyncio.run(main())
