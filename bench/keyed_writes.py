"""Writes by primary key, StreamDB vs PostgreSQL, measured in the same run (issue 14).

For each --rows size, starts a StreamDB server (real Spark, local[2], fresh data dir) and a
PostgreSQL server from the machine's binaries (bench/pgserver.py) with PostgreSQL's default
durability (fsync, synchronous_commit and full_page_writes on: a commit is acknowledged once it
is flushed, as StreamDB acknowledges a write once it is durable in its log), and loads the same
rows into a keyed table in both:

    CREATE TABLE kt (id BIGINT PRIMARY KEY, v BIGINT)      -- ids 0 .. rows-1, by COPY

Then, in each of --runs runs, every figure StreamDB then PostgreSQL back to back, for --seconds,
by 1 and 8 client processes (--clients), each with its own connection and prepared statements
(psycopg prepare=True: Parse once, then Bind/Execute):

  update         UPDATE kt SET v = %s WHERE id = %s           a random existing key
  update_expr    UPDATE kt SET v = v + 1 WHERE id = %s        a random existing key
  delete_insert  DELETE FROM kt WHERE id = %s, then INSERT INTO kt VALUES (%s, %s) of the same
                 key (the table keeps its size); the DELETEs and the INSERTs are timed apart:
                 `delete` and `insert` figures, statements/s each over the time spent in them

A client's keys are its own (id % clients == client), so concurrent clients never wait on one
another's rows. PostgreSQL is measured twice per figure: durable (its defaults, the peer) and
with `SET synchronous_commit = off` in the session (acknowledged before the WAL flush: what the
other benchmarks' PostgreSQL runs with; shown for reference, StreamDB has no such mode).
statements/s = the sum over clients of statements / seconds; latency percentiles over all
statements. After the runs, each table's row count is reported: every DELETE was followed by
its INSERT, so both must still hold --rows rows.

Each figure is the median across runs with min and max; ratio = StreamDB / durable PostgreSQL.
Figures, never assertions. Written to bench/results/keyed_writes.json.

    .venv/bin/python bench/keyed_writes.py [--rows 10000,1000000] [--clients 1,8] [--runs 3]
        [--seconds 3] [--ops update,update_expr,delete_insert] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import platform
import random
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

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "keyed_writes.json"
OPS = ("update", "update_expr", "delete_insert")
PEERS = ("streamdb", "postgresql", "postgresql_async")
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def client(task: tuple[str, bool, str, int, int, int, int, float, float]) -> dict[str, Any]:
    """One client process: its own connection and keys; waits for start_at, then runs `op` for
    `seconds`. Returns per-statement-kind counts, busy time and latencies."""
    dsn, async_commit, op, rows, index, clients, seed, start_at, seconds = task
    rng = random.Random(seed)
    keys = range(index, rows, clients)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if async_commit:
            conn.execute("SET synchronous_commit = off")
        timed: dict[str, list[float]] = {}

        def run(kind: str, sql: str, args: tuple[Any, ...]) -> None:
            t0 = time.perf_counter()
            conn.execute(sql, args, prepare=True)
            timed.setdefault(kind, []).append(time.perf_counter() - t0)

        def one() -> None:
            key = keys[rng.randrange(len(keys))]
            if op == "update":
                run("update", "UPDATE kt SET v = %s WHERE id = %s", (rng.randrange(1000), key))
            elif op == "update_expr":
                run("update_expr", "UPDATE kt SET v = v + 1 WHERE id = %s", (key,))
            else:
                run("delete", "DELETE FROM kt WHERE id = %s", (key,))
                run("insert", "INSERT INTO kt VALUES (%s, %s)", (key, key))

        for _ in range(3):  # prepared (psycopg prepares on first use with prepare=True)
            one()
        timed.clear()
        while time.time() < start_at:
            time.sleep(min(0.01, max(0.0, start_at - time.time())))
        began = time.time()
        while time.time() - began < seconds:
            one()
        window = time.time() - began
    return {kind: {"n": len(xs), "per_s": len(xs) / window, "busy_s": sum(xs), "lat_ms": [x * 1000 for x in xs]}
            for kind, xs in timed.items()}


def percentile(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure(pool: Any, dsn: str, async_commit: bool, op: str, rows: int, clients: int, seconds: float,
            seed: int) -> dict[str, Any]:
    start_at = time.time() + 1.0 + 0.05 * clients
    tasks = [(dsn, async_commit, op, rows, i, clients, seed * 100 + i, start_at, seconds) for i in range(clients)]
    parts = pool.map(client, tasks)
    out: dict[str, Any] = {}
    for kind in parts[0]:
        lat = [x for p in parts for x in p[kind]["lat_ms"]]
        out[kind] = {"per_s": sum(p[kind]["per_s"] for p in parts), "n": sum(p[kind]["n"] for p in parts),
                     "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99)}
    return out


def load(dsn: str, rows: int, create: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(create)
        t0 = time.monotonic()
        for start in range(0, rows, 100_000):
            blob = "".join(f"{i}\t{i}\n" for i in range(start, min(rows, start + 100_000))).encode()
            with c.cursor().copy("COPY kt FROM STDIN") as cp:
                cp.write(blob)
        return time.monotonic() - t0


def contents(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("SELECT count(*), sum(v) FROM kt").fetchone()
    assert row is not None
    return int(row[0]), int(row[1] or 0)


def stats(xs: list[float | None]) -> dict[str, Any]:
    vals = [x for x in xs if isinstance(x, int | float)]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": xs}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": xs}


def fmt(v: Any, spec: str = ",.0f") -> str:
    return format(v, spec) if isinstance(v, int | float) else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rows", default="10000,1000000", help="table sizes, comma-separated")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]
    clients = [int(x) for x in args.clients.split(",")]
    ops = [o for o in args.ops.split(",") if o]
    unknown = set(ops) - set(OPS)
    if unknown:
        ap.error(f"unknown --ops: {', '.join(sorted(unknown))}")
    result: dict[str, Any] = {
        "benchmark": "keyed_writes", "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cores": mp.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": args.runs, "seconds": args.seconds, "postgresql_settings": DURABLE, "sizes": {}}
    pool = mp.get_context("spawn").Pool(max(clients))
    try:
        for rows in sizes:
            result["sizes"][str(rows)] = run_size(pool, rows, clients, ops, args)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        pool.terminate()
    result["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    say(f"written to {args.out}")


def run_size(pool: Any, rows: int, clients: list[int], ops: list[str], args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="keyed-writes-") as d:
        pg = PostgresServer(Path(d) / "pg", settings=DURABLE)
        pg.initdb()
        pg.start()
        proc, dsn = start_server(Path(d) / "streamdb", Path(d) / "streamdb.log")
        try:
            say(f"{rows:,} rows: loading")
            setup = {"streamdb_load_s": load(dsn, rows, "CREATE TABLE kt (id BIGINT PRIMARY KEY, v BIGINT)"),
                     "postgresql_load_s": load(pg.dsn, rows, "CREATE TABLE kt (id BIGINT PRIMARY KEY, v BIGINT)")}
            figures: dict[str, Any] = {}
            raw: dict[str, dict[str, list[Any]]] = {}
            for run in range(args.runs):
                for op in ops:
                    for n in clients:
                        seed = run * 1000 + n
                        for peer, peer_dsn, async_commit in (("streamdb", dsn, False), ("postgresql", pg.dsn, False),
                                                             ("postgresql_async", pg.dsn, True)):
                            # The same seed: each system gets the same statements in the same order
                            # (a time-bound loop runs more or fewer of them).
                            got = measure(pool, peer_dsn, async_commit, op, rows, n, args.seconds, seed)
                            for kind, fig in got.items():
                                raw.setdefault(f"{kind}/{n}", {}).setdefault(peer, []).append(fig)
                            say(f"{rows:,} rows run {run + 1} {op} x{n} {peer}: "
                                + ", ".join(f"{k} {fmt(f['per_s'])}/s p99 {fmt(f['p99_ms'], '.1f')} ms"
                                            for k, f in got.items()))
            for name, per_peer in raw.items():
                figures[name] = {peer: {"per_s": stats([f["per_s"] for f in runs]),
                                        "p50_ms": stats([f["p50_ms"] for f in runs]),
                                        "p99_ms": stats([f["p99_ms"] for f in runs])}
                                 for peer, runs in per_peer.items()}
                s, p = figures[name]["streamdb"]["per_s"]["median"], figures[name]["postgresql"]["per_s"]["median"]
                figures[name]["ratio"] = s / p if s and p else None
            s_count, _ = contents(dsn)
            p_count, _ = contents(pg.dsn)
            return {"setup": setup, "figures": figures, "rows_after": {"streamdb": s_count, "postgresql": p_count}}
        finally:
            stop_server(proc)
            pg.cleanup()


def print_table(result: dict[str, Any]) -> None:
    print("\n| rows | statement | clients | StreamDB /s | PostgreSQL /s (durable) | ratio | PostgreSQL /s "
          "(synchronous_commit off) | StreamDB p99 ms | PostgreSQL p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rows, size in result["sizes"].items():
        for name, f in size["figures"].items():
            kind, n = name.split("/")
            s, p, a = f["streamdb"], f["postgresql"], f["postgresql_async"]
            print(f"| {int(rows):,} | {kind} | {n} | {fmt(s['per_s']['median'])} | {fmt(p['per_s']['median'])} | "
                  f"{fmt(f['ratio'], '.2f')}x | {fmt(a['per_s']['median'])} | {fmt(s['p99_ms']['median'], '.1f')} | "
                  f"{fmt(p['p99_ms']['median'], '.1f')} |")


if __name__ == "__main__":
    main()
