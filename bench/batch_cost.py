"""What a small micro-batch costs: FLUSH time and Spark JVM CPU per batch of a few rows.

A fresh server (real Spark, local[2]) with two materialized views over one stream: `agg`, a
count and sum per key (one stateful layer, pipeline depth-1), and `joined`, the stream joined
with a 100-row table then grouped (two stateful layers, pipeline depth-2). Each batch is one
`INSERT ... SELECT` of --rows rows then FLUSH; after --warmup batches (the JVM compiles Spark's
hot paths meanwhile), --batches more are timed. Per run: FLUSH ms (median and p90) and the
Spark JVM's CPU ms per batch (all of it, its executor task threads', and its micro-batch
threads', which plan and schedule each batch) and the server's (from /proc), which with batches this small are
each batch's fixed cost: planning, tasks, state store setup and commit, checkpoints. The peer
is the previous code from a git worktree (`--repo`), measured alternately in the same session.
The view's sum is checked against the rows written. Figures, never assertions.

    .venv/bin/python bench/batch_cost.py [--runs 3] [--warmup 150] [--batches 100] [--rows 200]
        [--repo DIR] [--out bench/results/batch_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "batch_cost.json"


def run_once(repo: Path, warmup: int, batches: int, rows: int) -> dict[str, Any]:
    """One fresh server of `repo`'s code (in a subprocess of that tree, so its modules load)."""
    code = f"""
import json, os, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {str(repo / "bench" / "nexmark")!r})
from run_streamdb import Server, _command_name, _stat, descendants
warmup, batches, rows = {warmup}, {batches}, {rows}
with tempfile.TemporaryDirectory() as d:
    srv = Server(Path(d), "local[2]")
    try:
        conn = srv.connect()
        conn.autocommit = True
        conn.execute("CREATE STREAM ev (k int, v int)")
        conn.execute("CREATE TABLE dim (k int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO dim SELECT g, 'n' || g FROM generate_series(0, 99) g")
        conn.execute("CREATE MATERIALIZED VIEW agg AS SELECT k, count(*) AS c, sum(v) AS s FROM ev GROUP BY k")
        conn.execute("CREATE MATERIALIZED VIEW joined AS SELECT d.name, count(*) AS c, max(e.v) AS m "
                     "FROM ev e JOIN dim d ON e.k = d.k GROUP BY d.name")
        conn.execute("FLUSH")
        java = [p for p in descendants(srv.proc.pid) if _command_name(p) == "java"][0]
        tick = os.sysconf("SC_CLK_TCK")

        def batch(i):
            lo = i * rows
            conn.execute(f"INSERT INTO ev SELECT g % 100, g FROM generate_series({{lo}}, {{lo + rows - 1}}) g")
            t0 = time.monotonic()
            conn.execute("FLUSH")
            return (time.monotonic() - t0) * 1000

        def threads():
            # CPU ticks of the JVM's executor task threads and its micro-batch (stream) threads
            out = {{"executor": 0, "stream": 0}}
            for t in os.listdir(f"/proc/{{java}}/task"):
                try:
                    with open(f"/proc/{{java}}/task/{{t}}/stat") as f:
                        st = f.read()
                except OSError:
                    continue
                name = st[st.index("(") + 1:st.rindex(")")]
                fields = st[st.rindex(")") + 2:].split()
                kind = "executor" if name.startswith("Executor task") else "stream" if name.startswith("stream exec") else None
                if kind:
                    out[kind] += int(fields[11]) + int(fields[12])
            return out

        for i in range(warmup):
            batch(i)
        j0, s0, t0 = _stat(java)[1], _stat(srv.proc.pid)[1], threads()
        ms = [batch(warmup + i) for i in range(batches)]
        j1, s1, t1 = _stat(java)[1], _stat(srv.proc.pid)[1], threads()
        n = warmup + batches
        total, = conn.execute("SELECT sum(s) FROM agg").fetchone()
        joined, = conn.execute("SELECT sum(c) FROM joined").fetchone()
        print(json.dumps({{
            "flush_ms_p50": round(statistics.median(ms), 1),
            "flush_ms_p90": round(sorted(ms)[int(len(ms) * 0.9)], 1),
            "jvm_cpu_ms_per_batch": round((j1 - j0) / tick * 1000 / batches, 1),
            "executor_cpu_ms_per_batch": round((t1["executor"] - t0["executor"]) / tick * 1000 / batches, 1),
            "stream_thread_cpu_ms_per_batch": round((t1["stream"] - t0["stream"]) / tick * 1000 / batches, 1),
            "server_cpu_ms_per_batch": round((s1 - s0) / tick * 1000 / batches, 1),
            "sum_ok": int(total) == n * rows * (n * rows - 1) // 2 and int(joined) == n * rows,
        }}))
    finally:
        srv.stop()
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--repo", type=Path, help="a worktree of the code to compare with, run alternately")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    trees = {"this": HERE.parent}
    if args.repo is not None:
        trees["peer"] = args.repo.resolve()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
    for r in range(args.runs):
        for name, tree in trees.items():
            fig = run_once(tree, args.warmup, args.batches, args.rows)
            runs[name].append(fig)
            print(f"run {r + 1} {name}: FLUSH p50 {fig['flush_ms_p50']:.0f} ms, p90 {fig['flush_ms_p90']:.0f} ms; "
                  f"JVM CPU {fig['jvm_cpu_ms_per_batch']:.0f} ms/batch (executor tasks "
                  f"{fig['executor_cpu_ms_per_batch']:.0f}, micro-batch threads {fig['stream_thread_cpu_ms_per_batch']:.0f}), "
                  f"server {fig['server_cpu_ms_per_batch']:.0f}; "
                  f"sums {'match' if fig['sum_ok'] else 'DO NOT MATCH'}", flush=True)
    summary = {name: {k: statistics.median(f[k] for f in figs) for k in figs[0] if k != "sum_ok"}
               for name, figs in runs.items()}
    for name, s in summary.items():
        print(f"median {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in s.items()))
    if "peer" in summary:
        print("this / peer: " + ", ".join(f"{k} {summary['this'][k] / summary['peer'][k]:.2f}x"
                                          for k in summary["this"] if summary["peer"][k]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": os.cpu_count(), "load_avg": os.getloadavg(),
        "parameters": {"warmup": args.warmup, "batches": args.batches, "rows": args.rows,
                       "peer": str(args.repo) if args.repo else None},
        "runs": runs, "median": summary}, indent=2))


if __name__ == "__main__":
    main()
