"""Reads of a stream written one row per INSERT, as it grows: StreamDB vs PostgreSQL.

A fresh StreamDB server (real Spark, local[2]) and a PostgreSQL server (bench/pgserver.py, with
fsync off: only the reads are timed) each get rows (id, g, t) one single-row INSERT at a time:
StreamDB into a stream (each INSERT is one batch of its log), PostgreSQL into a table without
an index. At each size in --sizes, every query of QUERIES is run --reads times on each system
and the median read (after one untimed read, which brings StreamDB's cache up to date) is
reported in ms, with StreamDB / PostgreSQL. Flat figures as the stream grows are the point:
a read's cost should follow the rows it scans, not the number of INSERTs that wrote them.
Figures, never assertions.

    .venv/bin/python bench/stream_reads.py [--sizes 1000,5000,20000] [--reads 7]
        [--out bench/results/stream_reads.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pgserver import PostgresServer  # noqa: E402
from views_scale import start_server, stop_server  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "stream_reads.json"
QUERIES = {
    "count": "SELECT count(*) FROM s",
    "point": "SELECT t FROM s WHERE id = 7",
    "group": "SELECT g, count(*) FROM s GROUP BY g ORDER BY g",
}


def read_ms(conn: psycopg.Connection[Any], sql: str, reads: int) -> tuple[float, list[tuple[Any, ...]]]:
    answer = conn.execute(sql).fetchall()  # untimed: StreamDB's cache takes the new batches here
    times = []
    for _ in range(reads):
        t0 = time.perf_counter()
        conn.execute(sql).fetchall()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), answer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="1000,5000,20000")
    ap.add_argument("--reads", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        pg = PostgresServer(Path(d) / "pg-logs")
        pg.initdb()
        pg.start()
        proc, dsn = start_server(Path(d) / "data", Path(d) / "server.log")
        try:
            sdb = psycopg.connect(dsn, autocommit=True)
            pgc = psycopg.connect(pg.dsn, autocommit=True)
            sdb.execute("CREATE STREAM s (id BIGINT, g INT, t TEXT)")
            pgc.execute("CREATE TABLE s (id BIGINT, g INT, t TEXT)")
            n = 0
            for size in sizes:
                while n < size:
                    row = (n, n % 5, f"t{n}")
                    sdb.execute("INSERT INTO s VALUES (%s, %s, %s)", row)
                    pgc.execute("INSERT INTO s VALUES (%s, %s, %s)", row)
                    n += 1
                for name, sql in QUERIES.items():
                    s_ms, s_rows = read_ms(sdb, sql, args.reads)
                    p_ms, p_rows = read_ms(pgc, sql, args.reads)
                    same = [tuple(r) for r in s_rows] == [tuple(r) for r in p_rows]
                    figures.append({"inserts": size, "query": name, "streamdb_ms": round(s_ms, 3),
                                    "postgresql_ms": round(p_ms, 3), "same_answer": same})
                    print(f"{size:>7,} inserts  {name:6s} StreamDB {s_ms:7.2f} ms  PostgreSQL {p_ms:6.2f} ms  "
                          f"ratio {s_ms / p_ms:5.1f}x  {'same answer' if same else 'ANSWERS DIFFER'}", flush=True)
        finally:
            stop_server(proc)
            pg.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "sizes": sizes,
                                    "reads": args.reads, "figures": figures}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
