"""Multi-row literal INSERTs into a stream without views: what a statement of 1, 100 and 1,000
rows costs the server end to end.

    python bench/literal_inserts.py [--rounds 2] [--seconds 3] [--repo PEER_WORKTREE] [--out FILE.json]

A fresh server (real Spark, local[2]) from this tree, and with --repo from a peer worktree,
alternating per round; one client sends `INSERT INTO ing VALUES (i, i % 1000), ...` by the simple
protocol for --seconds per size, after 20 warm-up statements, and reports the median statement
(ms) and rows/s (rows over the statements' summed time). No view reads the stream, so Spark's
micro-batches do not compete for the cores (bench/pg_compare.py measures with one). Figures,
never assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg
from tree_server import alternate, server_from

SIZES = (1, 100, 1000)


def measure(repo: Path, seconds: float) -> dict[str, dict[str, float]]:
    with server_from(repo) as (server, _):
        conn = server.connect()
        conn.execute("CREATE STREAM ing (id BIGINT, v BIGINT)")
        cur = psycopg.ClientCursor(conn)
        out: dict[str, dict[str, float]] = {}
        next_id = 0

        def statement(rows: int) -> str:
            nonlocal next_id
            sql = "INSERT INTO ing VALUES " + ", ".join(f"({j}, {j % 1000})" for j in range(next_id, next_id + rows))
            next_id += rows
            return sql

        for rows in SIZES:
            for _ in range(20):
                cur.execute(statement(rows))
            lat: list[float] = []
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                sql = statement(rows)
                a = time.perf_counter()
                cur.execute(sql)
                lat.append(time.perf_counter() - a)
            out[str(rows)] = {"p50_ms": statistics.median(lat) * 1000, "rows_per_s": len(lat) * rows / sum(lat)}
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repo", type=Path, help="a peer worktree, run alternately with this one")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs = alternate(args.repo, args.rounds, lambda tree: measure(tree, args.seconds),
                     lambda run: "; ".join(f"{n} rows p50 {v['p50_ms']:.2f} ms {v['rows_per_s']:,.0f} rows/s"
                                           for n, v in run.items()))
    for label, rs in runs.items():
        print(label + ": " + "; ".join(
            f"{n} rows: p50 {statistics.median(r[n]['p50_ms'] for r in rs):.2f} ms, "
            f"{statistics.median(r[n]['rows_per_s'] for r in rs):,.0f} rows/s" for n in rs[0]))
    if args.out:
        args.out.write_text(json.dumps({"rounds": args.rounds, "seconds": args.seconds,
                                        "peer": str(args.repo or ""), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
