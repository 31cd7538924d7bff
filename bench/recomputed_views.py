"""What views recomputed per partition cost when they all have changes: FLUSH after a one-row write.

A fresh server (real Spark) has one table and, in steps, more window-function views over it
(recomputed per partition: each batch reruns a view's query over the partitions the batch
touched, old and new rows). After each step, --samples times: one row is written to the table,
then FLUSH (which waits for the pipeline's batch). Every view has rows in every batch, so this is
the cost `bench/idle_views.py` does not see. The peer is the same server with one such view,
measured in the same run: reported as the ratio of each step's median to that one. Figures,
never assertions.

    .venv/bin/python bench/recomputed_views.py [--steps 1,4,8,12] [--samples 7] [--spark-master local[2]] [--out FILE]

Results: bench/results/recomputed_views.json (--out).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from flush_latency import arguments, flush_samples, fresh_server, step_figures, write_results  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "recomputed_views.json"

# Window-function shapes users write; view i takes shape i modulo their number.
QUERIES = [
    "SELECT k, g, row_number() OVER (PARTITION BY g ORDER BY v, k) AS x FROM t",
    "SELECT k, g, rank() OVER (PARTITION BY g ORDER BY v) AS x FROM t",
    "SELECT k, g, sum(v) OVER (PARTITION BY g ORDER BY k) AS x FROM t",
    "SELECT k, g, lag(v) OVER (PARTITION BY g ORDER BY k) AS x FROM t",
    "SELECT k, g, count(*) OVER (PARTITION BY g) AS x FROM t",
    "SELECT k, g, dense_rank() OVER (PARTITION BY g ORDER BY v DESC) AS x FROM t",
]


def main() -> None:
    args = arguments("1,4,8,12", "window-function views at each step", RESULTS)
    steps = [int(s) for s in args.steps.split(",")]
    figures: list[dict[str, object]] = []
    with fresh_server(args.spark_master) as conn:
        conn.execute("CREATE TABLE t (k INT PRIMARY KEY, g INT, v INT)")
        conn.execute("INSERT INTO t SELECT i, i % 10, (i * 7) % 100 FROM generate_series(1, 1000) AS s(i)")
        views = 0
        key = 100_000
        for step in steps:
            started = time.monotonic()
            while views < step:
                conn.execute(f"CREATE MATERIALIZED VIEW w{views} AS {QUERIES[views % len(QUERIES)]}")
                views += 1
            conn.execute("FLUSH")
            created_s = time.monotonic() - started
            flushes = flush_samples(conn, "INSERT INTO t VALUES (%s, %s, %s)",
                                    [(k, k % 10, k % 100) for k in range(key, key + args.samples)])
            key += args.samples
            # Every view equals its query run as a batch query over the same rows.
            equal = all(sorted(conn.execute(f"SELECT * FROM w{i}").fetchall())
                        == sorted(conn.execute(QUERIES[i % len(QUERIES)]).fetchall()) for i in range(views))
            figures.append({"views": views, **step_figures(flushes), "create_step_s": round(created_s, 1),
                            "views_equal_batch": equal})
            print(f"{views:4d} views: FLUSH after a one-row write, median {statistics.median(flushes):6.2f} s "
                  f"(samples {[round(x, 2) for x in flushes]}); views equal batch: {equal}", flush=True)
    write_results(args.out, figures, f"the same server with {steps[0]} view(s), this run", args.samples,
                  "ratio_to_first_step")
    for f in figures:
        print(f"{f['views']:4d} views: {f['flush_s_median']:.2f} s, {f['ratio_to_first_step']}x the first step")


if __name__ == "__main__":
    main()
