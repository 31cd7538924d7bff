"""What Spark's cache of generated classes costs views: FLUSH time and CPU after small writes.

A fresh server (real Spark) holds --sets copies of the property test's 32 views
(`tests/test_e2e_views.py`: 31 shapes, aggregates, joins, top-N, window functions, shared
subplans, and a view over one of them), each copy over a table and a stream of its own with a
few rows; the last copy is active. --rounds times: 1-8 random writes to the active table and stream (the same seeded rounds
for every server), then FLUSH. Reported per server: the median FLUSH and the CPU seconds of the
server's processes (the Python server and its Spark JVM) over all rounds. The peer is the same
build with Spark's own cache size (100 classes), measured in the same run, alternating
(docs/views.md, "Generated code"). Figures, never assertions.

    .venv/bin/python bench/codegen_cache.py [--sets 4] [--rounds 8] [--runs 2]

Results: bench/results/codegen_cache.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "nexmark"))

from flush_latency import machine_summary  # noqa: E402
from run_flink import tree_cpu_seconds  # noqa: E402
from run_streamdb import Server  # noqa: E402

from tests.test_e2e_views import VIEWS, create_all  # noqa: E402
from tests.test_e2e_views import _apply as apply  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "codegen_cache.json"
PEER = {"spark.sql.codegen.cache.maxEntries": "100"}  # Spark's default


def random_ops(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    """`n` writes in the property test's form (`tests/test_e2e_views.py`, `op`), drawn from `rng`."""
    ops: list[tuple[Any, ...]] = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:
            ops.append(("upsert", rng.randrange(7), rng.choice("abc"), rng.randrange(10)))
        elif kind == 1:
            ops.append(("delete", rng.randrange(7)))
        elif kind == 2:
            ops.append(("update", rng.choice("abc"), rng.randrange(-2, 3)))
        else:
            ops.append(("event", rng.randrange(8), rng.randrange(10)))
    return ops


def measure(label: str, spark_conf: dict[str, str] | None, args: argparse.Namespace) -> dict[str, Any]:
    env_before = os.environ.get("STREAMDB_SPARK_CONF")
    if spark_conf is not None:
        os.environ["STREAMDB_SPARK_CONF"] = json.dumps(spark_conf)
    try:
        with tempfile.TemporaryDirectory() as d:
            server = Server(Path(d), args.spark_master)
            try:
                server.wait_spark_ready()
                rng = random.Random(7)
                with server.connect() as conn:
                    conn.execute("SET statement_timeout = '600s'")
                    table = stream = ""
                    for i in range(args.sets):
                        table, stream, _ = create_all(server, conn, f"{i}")  # the test's 32 views
                        apply(conn, table, stream, random_ops(rng, 5))
                    conn.execute("FLUSH")
                    for _ in range(2):  # every view's first batches: planned and compiled once
                        apply(conn, table, stream, random_ops(rng, 4))
                        conn.execute("FLUSH")
                    cpu_before = tree_cpu_seconds(server.proc.pid)
                    flushes = []
                    for _ in range(args.rounds):
                        apply(conn, table, stream, random_ops(rng, rng.randrange(1, 9)))
                        started = time.monotonic()
                        conn.execute("FLUSH")
                        flushes.append(round(time.monotonic() - started, 3))
                    cpu = tree_cpu_seconds(server.proc.pid) - cpu_before
            finally:
                server.stop()
    finally:
        if env_before is None:
            os.environ.pop("STREAMDB_SPARK_CONF", None)
        else:
            os.environ["STREAMDB_SPARK_CONF"] = env_before
    figure = {"server": label, "views": args.sets * (len(VIEWS) + 1), "flush_s_median": statistics.median(flushes),
              "flush_s": flushes, "cpu_s": round(cpu, 1)}
    print(json.dumps(figure), flush=True)
    return figure


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=4, help="copies of the 32 views (the last one active)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2, help="alternating runs of each server")
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    runs = []
    for _ in range(args.runs):
        runs.append(measure("Spark's cache size (100), the peer", PEER, args))
        runs.append(measure("StreamDB's (1,000)", None, args))
    peer = [r for r in runs if r["server"].startswith("Spark")]
    ours = [r for r in runs if not r["server"].startswith("Spark")]
    summary = {
        "flush_s_median_ratio": round(statistics.median(r["flush_s_median"] for r in ours)
                                      / statistics.median(r["flush_s_median"] for r in peer), 2),
        "cpu_s_ratio": round(statistics.median(r["cpu_s"] for r in ours) / statistics.median(r["cpu_s"] for r in peer), 2),
    }
    print(json.dumps(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine_summary(), "peer": "the same build with Spark's cache size, this run",
                                    "sets": args.sets, "rounds": args.rounds, "runs": runs, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
