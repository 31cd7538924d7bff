"""Does a read of a table after a write cost the write, or the table? 10k to 500k rows.

One StreamDB server (real Spark, local[2]) and one PostgreSQL 15 in the same run hold the same
table `t (id INT PRIMARY KEY, g INT, v TEXT)`, grown by COPY to each size of --sizes. At each
size, --probes times, three writes each followed by the same ad hoc read:

  insert   INSERT INTO t VALUES (<new id>, 5, 'new')
  update   UPDATE t SET v = 'u' WHERE id = <existing id>
  delete   DELETE FROM t WHERE id = <existing id>
  read     SELECT count(*), max(v) FROM t WHERE g = 5

timed from the read's start to its rows (the write is acknowledged before); then --probes times
an update and a delete each followed by a point read, `SELECT v FROM t WHERE id = <an id>`
(`update, point read`, `delete, point read`), and 300 point reads with no write between them
(`point read, no write before`, the median of the last 250). StreamDB answered those from a hash
index on id over the cached rows (rebuilt after every update or delete until 2026-11-28, night);
it now reads the row by its primary key from the table's state store. Before 2026-11-28 a
StreamDB table's cached rows were rescanned and decoded from the state store after every write,
so the read cost O(table); they are now brought up to date from the write's changes. The same
for a materialized view with a row per 10 ids of a copy `tv` of the table (StreamDB only: `view`,
an insert into `tv`, FLUSH, then `SELECT count(*), max(n) FROM vt`; a table of its own, so the
view's pipeline is idle while `t` is measured); its peer is PostgreSQL running the view's query
over `t` (`agg`).

Sizes stay under `spark_read_threshold_rows` (1M): above it the read runs on Spark instead, whose
cost is shipping the table. Figures, never assertions; medians of --probes.

    .venv/bin/python bench/table_reads.py [--sizes 10000,100000,500000] [--probes 9]
        [--out bench/results/table_reads.json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from flush_latency import fresh_server, machine_summary  # noqa: E402
from pgserver import PostgresServer  # noqa: E402

READ = "SELECT count(*), max(v) FROM t WHERE g = 5"
POINT = "SELECT v FROM t WHERE id = {id}"  # a point lookup: StreamDB answers it from a hash index
VIEW = "SELECT id / 10 AS k, count(*) AS n, max(v) AS m FROM {t} GROUP BY id / 10"
VIEW_READ = "SELECT count(*), max(n) FROM vt"
WRITES: dict[str, Callable[[int, int], str]] = {
    "insert": lambda new, old: f"INSERT INTO t VALUES ({new}, 5, 'new')",
    "update": lambda new, old: f"UPDATE t SET v = 'u' WHERE id = {old}",
    "delete": lambda new, old: f"DELETE FROM t WHERE id = {old}",
}


def load(conn: psycopg.Connection[Any], start: int, end: int, table: str = "t") -> None:
    buf = io.StringIO()
    for i in range(start, end):
        buf.write(f"{i}\t{i % 1000}\tv{i}\n")
    with conn.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN") as copy:
        copy.write(buf.getvalue())


def probe(conn: psycopg.Connection[Any], write: str, read: str, flush: bool = False) -> float:
    """Milliseconds of `read` after `write` was acknowledged (and FLUSHed)."""
    conn.execute(write)
    if flush:
        conn.execute("FLUSH")
    t = time.monotonic()
    conn.execute(read).fetchall()
    return (time.monotonic() - t) * 1000


def measure(conn: psycopg.Connection[Any], size: int, probes: int, streamdb: bool) -> dict[str, float]:
    if streamdb:
        conn.execute("FLUSH")  # the view's pipeline is done with the load before `t` is measured
    conn.execute(READ).fetchall()  # the first read after the load builds the cache
    out = {}
    for i, (name, write) in enumerate(WRITES.items()):
        # new ids past every size; existing ids spread over the loaded range, distinct per write
        times = [probe(conn, write(10_000_000 + size * 10 + i * probes + p, (size // 2 + (i * probes + p) * 997) % size),
                       READ) for p in range(probes)]
        out[name] = round(statistics.median(times), 1)
    conn.execute(POINT.format(id=1)).fetchall()
    idle = []
    for k in range(300):  # no write between these
        t = time.monotonic()
        conn.execute(POINT.format(id=k * 61 % size)).fetchall()
        idle.append((time.monotonic() - t) * 1000)
    out["point read, no write before"] = round(statistics.median(idle[50:]), 3)
    for i, name in enumerate(("update", "delete"), start=len(WRITES)):
        ids = [(size // 3 + (i * probes + p) * 991) % size for p in range(probes)]
        out[f"{name}, point read"] = round(statistics.median(
            probe(conn, WRITES[name](0, old), POINT.format(id=(old + 1) % size)) for old in ids), 2)
    new = 20_000_000 + size * 10
    if streamdb:
        conn.execute("FLUSH")
        conn.execute(VIEW_READ).fetchall()
        out["view"] = round(statistics.median(
            probe(conn, f"INSERT INTO tv VALUES ({new + p}, 5, 'new')", VIEW_READ, flush=True)
            for p in range(probes)), 1)
    else:
        out["agg"] = round(statistics.median(
            probe(conn, WRITES["insert"](new + p, 0), f"SELECT count(*), max(n) FROM ({VIEW.format(t='t')}) vt")
            for p in range(probes)), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,500000")
    ap.add_argument("--probes", type=int, default=9)
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "table_reads.json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    steps: list[dict[str, Any]] = []
    pg = PostgresServer()
    pg.initdb()
    pg.start()
    try:
        with fresh_server(args.spark_master) as sdb, psycopg.connect(pg.dsn, autocommit=True) as pgc:
            for conn in (sdb, pgc):
                conn.execute("CREATE TABLE t (id INT PRIMARY KEY, g INT, v TEXT)")
            sdb.execute("CREATE TABLE tv (id INT PRIMARY KEY, g INT, v TEXT)")
            sdb.execute(f"CREATE MATERIALIZED VIEW vt AS {VIEW.format(t='tv')}")
            loaded = 0
            for size in sizes:
                for conn in (sdb, pgc):
                    load(conn, loaded, size)
                load(sdb, loaded, size, "tv")
                pgc.execute("ANALYZE t")
                loaded = size
                step = {"rows": size, "streamdb_ms": measure(sdb, size, args.probes, True),
                        "postgresql_ms": measure(pgc, size, args.probes, False)}
                print(json.dumps(step), flush=True)
                steps.append(step)
    finally:
        pg.cleanup()
    result = {"machine": machine_summary(),
              "read": READ, "peer": "PostgreSQL 15, the same table and statements, in the same run",
              "probes": args.probes, "steps": steps}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print("| rows | write | StreamDB read ms | PostgreSQL read ms |")
    print("|---|---|---|---|")
    for s in steps:
        for name in [*WRITES, "point read, no write before", "update, point read", "delete, point read"]:
            print(f"| {s['rows']:,} | {name} | {s['streamdb_ms'][name]} | {s['postgresql_ms'][name]} |")
        print(f"| {s['rows']:,} | insert, then the view (PostgreSQL: its query) | {s['streamdb_ms']['view']} | "
              f"{s['postgresql_ms']['agg']} |")


if __name__ == "__main__":
    main()
