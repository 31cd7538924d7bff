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
