"""What views that receive no changes cost the views that do: FLUSH latency after a one-row write.

A fresh server (real Spark) has one active table with an aggregate view and a window-function
view (recomputed per partition) over it. Idle tables are added in steps, each with the same two
views; after each step, --samples times: one row is written to the active table, then FLUSH
(which waits for the pipeline's batch). All the views of one depth share one Spark query, so an
idle view is in every batch: its cost per batch should be near nothing, whatever the number of
views. The peer is the same server before any idle view, measured in the same run: reported as
the ratio of each step's median to that one. Figures, never assertions.

    .venv/bin/python bench/idle_views.py [--steps 0,10,20] [--samples 7] [--spark-master local[2]]

Results: bench/results/idle_views.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "nexmark"))

from run_streamdb import Server  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "idle_views.json"


def add_table(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(f"CREATE TABLE {name} (k INT PRIMARY KEY, g INT, v INT)")
    conn.execute(f"INSERT INTO {name} VALUES (1, 1, 1), (2, 1, 2), (3, 2, 3)")
    conn.execute(f"CREATE MATERIALIZED VIEW {name}_agg AS SELECT g, count(*) AS n, sum(v) AS s "
                 f"FROM {name} GROUP BY g")
    conn.execute(f"CREATE MATERIALIZED VIEW {name}_rank AS SELECT k, g, row_number() OVER "
                 f"(PARTITION BY g ORDER BY v) AS rn FROM {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="0,10,20", help="idle tables (2 views each) at each step")
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--spark-master", default="local[2]")
    args = ap.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    figures: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as d:
        server = Server(Path(d), args.spark_master)
        try:
            with server.connect() as conn:
                conn.execute("SET statement_timeout = '600s'")
                add_table(conn, "active")
                idle = 0
                key = 100
                for step in steps:
                    started = time.monotonic()
                    while idle < step:
                        add_table(conn, f"idle_{idle}")
                        idle += 1
                    conn.execute("FLUSH")
                    created_s = time.monotonic() - started
                    flushes = []
                    for _ in range(args.samples):
                        key += 1
                        conn.execute("INSERT INTO active VALUES (%s, %s, %s)", (key, key % 3, key))
                        t = time.monotonic()
                        conn.execute("FLUSH")
                        flushes.append(time.monotonic() - t)
                    # The view equals its query run as a batch query over the same rows.
                    view = sorted(conn.execute("SELECT k, g, rn FROM active_rank").fetchall())
                    batch = sorted(conn.execute("SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY v) "
                                                "FROM active").fetchall())
                    figures.append({"idle_views": 2 * idle, "views": 2 * idle + 2,
                                    "flush_s_median": statistics.median(flushes),
                                    "flush_s": [round(x, 3) for x in flushes],
                                    "create_step_s": round(created_s, 1), "view_equals_batch": view == batch})
                    print(f"{2 * idle:4d} idle views: FLUSH after a one-row write, median "
                          f"{statistics.median(flushes):6.2f} s (samples {[round(x, 2) for x in flushes]}); "
                          f"view equals batch: {view == batch}", flush=True)
        finally:
            server.stop()
    base = figures[0]["flush_s_median"]
    for f in figures:
        f["ratio_to_no_idle_views"] = round(float(f["flush_s_median"]) / float(base), 2)  # type: ignore[arg-type]
    result = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                          "load_avg": os.getloadavg()},
              "peer": "the same server with no idle views, this run", "samples": args.samples, "steps": figures}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    for f in figures:
        print(f"{f['idle_views']:4d} idle views: {f['flush_s_median']:.2f} s, {f['ratio_to_no_idle_views']}x "
              "the latency with none")


if __name__ == "__main__":
    main()
