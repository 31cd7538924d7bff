"""Real clients against a real server: asyncpg (extended protocol, binary), psql, SQLAlchemy."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
from decimal import Decimal

import asyncpg
import sqlalchemy as sa


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


def _psql(server, *args: str) -> str:
    out = subprocess.run(
        ["psql", "-X", "-h", server.host, "-p", str(server.port), "-U", "streamdb", "streamdb", *args],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERROR" not in out.stderr, out.stderr
    return out.stdout


def test_psql_describes_relations_and_queries(server, conn, unique):
    s, t = f"psqls_{unique}", f"psqlt_{unique}"
    conn.execute(f"CREATE STREAM {s} (device TEXT KEY, reading DOUBLE PRECISION)")
    conn.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, label VARCHAR NOT NULL)")
    conn.execute(f"INSERT INTO {t} VALUES (1, 'one'), (2, 'two')")
    listing = _psql(server, "-c", r"\dt")
    assert s in listing and t in listing
    described = _psql(server, "-c", rf"\d {t}")
    assert f'Table "public.{t}"' in described
    assert "bigint" in described and "not null" in described
    assert f'"{t}_pkey" PRIMARY KEY, btree (id)' in described
    assert "double precision" in _psql(server, "-c", rf"\d {s}")
    csv_out = _psql(server, "--csv", "-c", f"SELECT id, label FROM {t} ORDER BY id")
    assert csv_out.splitlines() == ["id,label", "1,one", "2,two"]


def test_sqlalchemy_connects_reflects_and_queries(server, conn, unique):
    t = f"sqla_{unique}"
    conn.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, name TEXT)")
    conn.execute(f"INSERT INTO {t} VALUES (7, 'seven')")
    engine = sa.create_engine(f"postgresql+psycopg://streamdb@{server.host}:{server.port}/streamdb")
    try:
        with engine.connect() as c:
            assert c.execute(sa.text(f"SELECT name FROM {t} WHERE id = :id"), {"id": 7}).all() == [("seven",)]
        inspector = sa.inspect(engine)
        assert t in inspector.get_table_names()
        cols = {c["name"]: str(c["type"]) for c in inspector.get_columns(t)}
        assert cols == {"id": "INTEGER", "name": "TEXT"}
        assert inspector.get_pk_constraint(t)["constrained_columns"] == ["id"]
    finally:
        engine.dispose()
