"""The server's CPU per point read, prepared and simple, against a peer tree's code.

    .venv/bin/python bench/wire_cpu.py [--queries 10000] [--rounds 3] [--repo PEER_WORKTREE]

A fresh server of this tree (and, with --repo, of a peer worktree, alternating per round;
bench/tree_server.py) with Spark off (`STREAMDB_SPARK_ENABLED=false`: the read of a table's row
by its key is the wire layer and the session, nothing else) and 10,000 rows in
`kv (id BIGINT PRIMARY KEY, v BIGINT)`. Per run and protocol, over --queries queries from one
client after 500 to warm up: the server's CPU (user + system, /proc) per query and the client's
queries/s. Every answer is checked. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from tree_server import alternate, server_from

sys.path.insert(0, str(Path(__file__).resolve().parent / "nexmark"))
from run_flink import tree_cpu_seconds  # noqa: E402

ROWS = 10_000
PROTOCOLS = ("prepared", "simple")


def query(conn: psycopg.Connection[Any], protocol: str, key: int) -> Any:
    if protocol == "prepared":
        return conn.execute("SELECT v FROM kv WHERE id = %s", (key,), prepare=True).fetchone()
    return conn.execute(f"SELECT v FROM kv WHERE id = {key}").fetchone()


def measure(repo: Path, n: int) -> dict[str, tuple[float, float]]:
    """(us of server CPU per query, queries/s) per protocol, on a fresh server of `repo`."""
    # psycopg's defaults (Server.connect turns prepared statements off): a prepared statement
    # is parsed once, then Bind/Describe/Execute/Sync each time.
    with server_from(repo) as (server, _), psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kv (id BIGINT PRIMARY KEY, v BIGINT)")
        with conn.cursor().copy("COPY kv FROM STDIN") as copy:
            for i in range(ROWS):
                copy.write_row((i, i * 2))
        out = {}
        for protocol in PROTOCOLS:
            for i in range(500):
                query(conn, protocol, i)
            cpu0, t0 = tree_cpu_seconds(server.proc.pid), time.perf_counter()
            for i in range(n):
                row = query(conn, protocol, i % ROWS)
                assert row is not None and row[0] == (i % ROWS) * 2, row
            out[protocol] = ((tree_cpu_seconds(server.proc.pid) - cpu0) / n * 1e6, n / (time.perf_counter() - t0))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repo", type=Path, help="a peer worktree, run alternately with this one")
    args = ap.parse_args()
    os.environ["STREAMDB_SPARK_ENABLED"] = "false"  # the servers inherit it
    runs = alternate(args.repo, args.rounds, lambda tree: measure(tree, args.queries),
                     lambda run: "  ".join(f"{p}: {us:.0f} us CPU/query, {qps:,.0f} q/s"
                                           for p, (us, qps) in run.items()))
    for label, rs in runs.items():
        print(f"median {label}: " + "  ".join(
            f"{p}: {statistics.median(r[p][0] for r in rs):.0f} us CPU/query, "
            f"{statistics.median(r[p][1] for r in rs):,.0f} q/s" for p in PROTOCOLS))


if __name__ == "__main__":
    main()
