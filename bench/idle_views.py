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

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from flush_latency import arguments, flush_samples, fresh_server, step_figures, write_results  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "idle_views.json"


def add_table(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(f"CREATE TABLE {name} (k INT PRIMARY KEY, g INT, v INT)")
    conn.execute(f"INSERT INTO {name} VALUES (1, 1, 1), (2, 1, 2), (3, 2, 3)")
    conn.execute(f"CREATE MATERIALIZED VIEW {name}_agg AS SELECT g, count(*) AS n, sum(v) AS s "
                 f"FROM {name} GROUP BY g")
    conn.execute(f"CREATE MATERIALIZED VIEW {name}_rank AS SELECT k, g, row_number() OVER "
                 f"(PARTITION BY g ORDER BY v) AS rn FROM {name}")


def main() -> None:
    args = arguments("0,10,20", "idle tables (2 views each) at each step", RESULTS)
    steps = [int(s) for s in args.steps.split(",")]
    figures: list[dict[str, object]] = []
    with fresh_server(args.spark_master) as conn:
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
            flushes = flush_samples(conn, "INSERT INTO active VALUES (%s, %s, %s)",
                                    [(k, k % 3, k) for k in range(key, key + args.samples)])
            key += args.samples
            # The view equals its query run as a batch query over the same rows.
            view = sorted(conn.execute("SELECT k, g, rn FROM active_rank").fetchall())
            batch = sorted(conn.execute("SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY v) "
                                        "FROM active").fetchall())
            figures.append({"idle_views": 2 * idle, "views": 2 * idle + 2, **step_figures(flushes),
                            "create_step_s": round(created_s, 1), "view_equals_batch": view == batch})
            print(f"{2 * idle:4d} idle views: FLUSH after a one-row write, median "
                  f"{statistics.median(flushes):6.2f} s (samples {[round(x, 2) for x in flushes]}); "
                  f"view equals batch: {view == batch}", flush=True)
    write_results(args.out, figures, "the same server with no idle views, this run", args.samples,
                  "ratio_to_no_idle_views")
    for f in figures:
        print(f"{f['idle_views']:4d} idle views: {f['flush_s_median']:.2f} s, {f['ratio_to_no_idle_views']}x "
              "the latency with none")


if __name__ == "__main__":
    main()
