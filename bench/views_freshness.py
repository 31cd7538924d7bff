"""Freshness of materialized views: insert acknowledged -> visible in the view.

Starts its own server (real Spark, local mode), creates a linear view (maintained
incrementally) and an aggregate view (recomputed), then inserts one event at a time
and polls each view until the event shows. Prints p50/p99/max per view and writes
bench/results/views_freshness.json. Figures, never assertions.

    .venv/bin/python bench/views_freshness.py [--samples 30] [--views 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamdb.cli", "serve", "--port", str(port),
                             "--console-port", str(free_port()), "--data-dir",
                             str(data), "--spark-master", "local[2]", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    dsn = f"postgresql://streamdb@127.0.0.1:{port}/streamdb"
    for _ in range(300):
        try:
            psycopg.connect(dsn).close()
            return proc, dsn
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--views", type=int, default=1, help="extra aggregate views maintained alongside")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        proc, dsn = start_server(Path(d) / "data")
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("CREATE STREAM ev (id BIGINT, k INT, v INT)")
                c.execute("CREATE MATERIALIZED VIEW linear_v AS SELECT id, v * 2 AS v2 FROM ev WHERE v >= 0")
                c.execute("CREATE MATERIALIZED VIEW agg_v AS SELECT k, count(*) AS n, max(id) AS last_id "
                          "FROM ev GROUP BY k")
                for i in range(args.views - 1):
                    c.execute(f"CREATE MATERIALIZED VIEW extra_{i} AS SELECT k, sum(v) AS s FROM ev GROUP BY k")
                c.execute("INSERT INTO ev VALUES (0, 0, 0)")
                c.execute("FLUSH")  # waits for Spark to start and the first epoch
                fresh: dict[str, list[float]] = {"linear_v (incremental)": [], "agg_v (recompute)": []}
                probes = {"linear_v (incremental)": "SELECT 1 FROM linear_v WHERE id = %s",
                          "agg_v (recompute)": "SELECT 1 FROM agg_v WHERE last_id >= %s"}
                for i in range(1, args.samples + 1):
                    c.execute("INSERT INTO ev VALUES (%s, %s, %s)", (i, i % 4, i))
                    acked = time.monotonic()
                    pending = dict(probes)
                    while pending:
                        for name, sql in list(pending.items()):
                            if c.execute(sql, (i,)).fetchone():
                                fresh[name].append((time.monotonic() - acked) * 1000)
                                del pending[name]
                        time.sleep(0.005)
                reads = []
                for i in range(200):
                    t = time.monotonic()
                    c.execute("SELECT n FROM agg_v WHERE k = %s", (i % 4,)).fetchall()
                    reads.append((time.monotonic() - t) * 1000)
        finally:
            proc.terminate()
            proc.wait(60)
    result = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "samples": args.samples, "views": args.views + 1,
        "freshness_ms": {name: {"p50": statistics.median(xs), "p99": percentile(xs, 99), "max": max(xs)}
                         for name, xs in fresh.items()},
        "point_read_ms": {"p50": statistics.median(reads), "p99": percentile(reads, 99)},
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "views_freshness.json").write_text(json.dumps(result, indent=2))
    for name, f in result["freshness_ms"].items():
        print(f"{name:24s} freshness p50 {f['p50']:7.0f} ms  p99 {f['p99']:7.0f} ms  max {f['max']:7.0f} ms")
    r = result["point_read_ms"]
    print(f"point read on a view       p50 {r['p50']:7.2f} ms  p99 {r['p99']:7.2f} ms")


if __name__ == "__main__":
    main()
