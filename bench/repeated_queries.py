"""The same query text sent again and again: what a round trip costs once the session has seen it.

    python bench/repeated_queries.py [--rounds 2] [--seconds 2] [--repo PEER_WORKTREE] [--out FILE.json]

Starts a fresh server (real Spark, local[2]) from this tree (and, with --repo, from a peer
worktree, alternating: this tree, then the peer, per round), creates a 1,000-row table `t` and an
aggregate view `tv` over it, then sends each query below for --seconds from one client, by the
simple and the extended protocol, after 200 warm-up runs, and reports the median round trip in
ms (client included). Figures, never assertions: the machine's other load skews them.

- select_1:  `SELECT 1` (a pool's health check)
- version:   `SELECT version()`
- agg_table: a GROUP BY over the table (a dashboard's refresh)
- agg_view:  a sum over the view's rows
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg
from tree_server import alternate, server_from

QUERIES = {"select_1": "SELECT 1",
           "version": "SELECT version()",
           "agg_table": "SELECT k, count(*), sum(v) FROM t WHERE v > 10 GROUP BY k ORDER BY k",
           "agg_view": "SELECT sum(c) FROM tv"}


def measure(repo: Path, seconds: float) -> dict[str, float]:
    with server_from(repo) as (server, _):
        conn = server.connect()
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, k INT, v INT)")
        conn.execute("INSERT INTO t SELECT g, g % 10, g FROM generate_series(1, 1000) g")
        conn.execute("CREATE MATERIALIZED VIEW tv AS SELECT k, count(*) AS c FROM t GROUP BY k")
        conn.execute("FLUSH")
        out: dict[str, float] = {}
        for name, sql in QUERIES.items():
            for protocol in ("simple", "extended"):
                cur = psycopg.ClientCursor(conn) if protocol == "simple" else conn.cursor()
                for _ in range(200):
                    cur.execute(sql)
                    cur.fetchall()
                lat: list[float] = []
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    a = time.perf_counter()
                    cur.execute(sql)
                    cur.fetchall()
                    lat.append(time.perf_counter() - a)
                out[f"{name}/{protocol}"] = statistics.median(lat) * 1000
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repo", type=Path, help="a peer worktree, run alternately with this one")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs = alternate(args.repo, args.rounds, lambda tree: measure(tree, args.seconds),
                     lambda run: " ".join(f"{k}={v:.3f}" for k, v in run.items()))
    trees = list(runs)
    medians = {label: {k: statistics.median(run[k] for run in rs) for k in rs[0]} for label, rs in runs.items()}
    print(f"{'query/protocol':24s} " + " ".join(f"{label + ' ms':>10s}" for label in trees)
          + ("      ratio" if "peer" in trees else ""))
    for k in medians["this"]:
        cells = " ".join(f"{medians[label][k]:10.3f}" for label in trees)
        ratio = f"  {medians['this'][k] / medians['peer'][k]:8.2f}x" if "peer" in trees else ""
        print(f"{k:24s} {cells}{ratio}")
    if args.out:
        args.out.write_text(json.dumps({"rounds": args.rounds, "seconds": args.seconds, "peer": str(args.repo or ""),
                                        "runs": runs, "medians": medians}, indent=1))


if __name__ == "__main__":
    main()
