"""The server's CPU per point read, prepared and simple, against the code of another tree.

One client, Spark off (`STREAMDB_SPARK_ENABLED=false`: the read of a table's row by its key is
the wire layer and the session, nothing else), a fresh server per run with 10,000 rows in
`kv (id BIGINT PRIMARY KEY, v BIGINT)`. Per run and protocol: the server process's CPU (/proc,
user + system) per query and the client's queries/s over --queries queries, after 500 to warm
up. Trees alternate within each round, so a noisy moment hits both; every answer is checked.
Figures, never assertions.

    .venv/bin/python bench/wire_cpu.py [--queries 10000] [--rounds 3] TREE [TREE ...]

e.g. `bench/wire_cpu.py . /tmp/worktree-of-the-previous-commit`.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROWS = 10_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def query(conn: psycopg.Connection, mode: str, key: int) -> tuple | None:
    if mode == "prepared":
        return conn.execute("SELECT v FROM kv WHERE id = %s", (key,), prepare=True).fetchone()
    return conn.execute(f"SELECT v FROM kv WHERE id = {key}").fetchone()


def run(tree: str, n: int) -> dict[str, tuple[float, float]]:
    """One fresh server of `tree`'s code: (us of server CPU per query, queries/s) per protocol."""
    env = dict(os.environ, STREAMDB_SPARK_ENABLED="false")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wire-cpu-") as d:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamdb.cli", "serve", "--port", str(port), "--data-dir", d,
             "--console-port", str(free_port())],
            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            dsn = f"postgresql://streamdb@127.0.0.1:{port}/streamdb"
            deadline = time.monotonic() + 60
            while True:
                try:
                    conn = psycopg.connect(dsn, autocommit=True)
                    break
                except psycopg.OperationalError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            with conn:
                conn.execute("CREATE TABLE kv (id BIGINT PRIMARY KEY, v BIGINT)")
                with conn.cursor().copy("COPY kv FROM STDIN") as copy:
                    for i in range(ROWS):
                        copy.write_row((i, i * 2))
                out = {}
                for mode in ("prepared", "simple"):
                    for i in range(500):
                        query(conn, mode, i)
                    cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
                    for i in range(n):
                        row = query(conn, mode, i % ROWS)
                        assert row is not None and row[0] == (i % ROWS) * 2, row
                    out[mode] = ((cpu_seconds(proc.pid) - cpu0) / n * 1e6, n / (time.perf_counter() - t0))
            return out
        finally:
            proc.terminate()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description="server CPU per point read, alternating code trees")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("trees", nargs="+")
    args = ap.parse_args()
    for _ in range(args.rounds):
        for tree in args.trees:
            out = run(tree, args.queries)
            print(f"{tree:20s} " + "  ".join(f"{mode}: {us:.0f} us CPU/query, {qps:,.0f} q/s"
                                             for mode, (us, qps) in out.items()), flush=True)


if __name__ == "__main__":
    main()
