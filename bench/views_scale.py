"""Scale targets of materialized views: freshness under a sustained write load.

Two scenarios, each run --runs times on a fresh server (real Spark, local[2]) and data dir:

  many  100 materialized views over 4 streams s0..s3 (id BIGINT, k INT, v INT, ts TIMESTAMPTZ)
        at 1,000 events/s in total. Target: p99 freshness <= 2 s on 2 cores.
        View i is over stream i % 4 and cycles through six shapes: filter+projection (linear),
        count/sum by k, avg/min/max by k, global count with max(id), a 10 s TUMBLE window count
        by k, and count(DISTINCT k). The engine picks each view's strategy (SHOW QUERIES).
  fast  one view over one stream at 10,000 events/s. Target: p99 freshness <= 1 s. Two
        variants, each alone in its own server: a linear view (filter+projection) and an
        aggregate view (count and max(id) by k).

Measured, per run: freshness = insert acknowledged -> marker row visible in a view. A writer
thread (own connection) inserts at the target rate in small multi-row INSERT ... VALUES batches
every ~10 ms (larger batches, up to 100 ms worth, when it falls behind; the achieved rate is
reported as measured). After --warmup seconds, a probe thread inserts one marker event
(id = 10**12 + n) at a time, at most every ~200 ms and never two in flight, and a separate
connection polls every ~20 ms until the marker shows in that stream's linear view (WHERE id =
marker) and aggregate view (WHERE last_id >= marker); a probe not visible after 60 s counts as
a timeout. Freshness ends when the poll that saw the marker returns, so it includes one poll
(a read of a view costs more as the view grows); also reported up to that poll's start.
Also reported: the time to CREATE the views and of the first FLUSH, the writer's achieved rate
and INSERT latency, the time of one poll, SHOW QUERIES every --lag-every s of the window (is the
backlog steady or growing?) and at its end (failed views, max lag, epoch time), the time of a
final FLUSH that drains the backlog once the load stops, whether the count views then match
the events written, and the load average (other processes on the machine skew every figure).
Each run's p50/p99/max per probe kind, and the median of those p50s and p99s across runs, go to
bench/results/views_scale.json (scenarios run earlier and not rerun this time are kept).
Figures, never assertions. Probes run back to back, so a window gives about
seconds / freshness samples: with few samples a run's p99 is its max; use a longer --seconds.

    .venv/bin/python bench/views_scale.py [--scenario many|fast|both] [--runs 3] [--seconds 30]
        [--warmup 5] [--rate N] [--views N] [--insert values|copy] [--lag-every 5]
        [--variants linear,aggregate]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "views_scale.json"
MARKER_BASE = 10**12
PROBE_EVERY_S = 0.2
POLL_EVERY_S = 0.02
PROBE_TIMEOUT_S = 60.0
WRITER_TICK_S = 0.01
K_DOMAIN = 50

# (shape name, probe kind or None, SQL with {s} for the stream)
SHAPES: list[tuple[str, str | None, str]] = [
    ("filter", "linear", "SELECT id, k, v * 2 AS v2 FROM {s} WHERE v % 7 <> 0"),
    ("count_sum", None, "SELECT k, count(*) AS n, sum(v) AS s FROM {s} GROUP BY k"),
    ("avg_min_max", None, "SELECT k, avg(v) AS a, min(v) AS lo, max(v) AS hi FROM {s} GROUP BY k"),
    ("global", "aggregate", "SELECT count(*) AS n, max(id) AS last_id FROM {s}"),
    ("tumble", None, "SELECT window_start, k, count(*) AS n FROM TUMBLE({s}, ts, INTERVAL '10' SECOND) "
                     "GROUP BY window_start, k"),
    ("distinct", None, "SELECT count(DISTINCT k) AS dk FROM {s}"),
]
FAST_SHAPES: dict[str, tuple[str, str]] = {
    "linear": ("linear", "SELECT id, k, v * 2 AS v2 FROM {s} WHERE v >= 0"),
    "aggregate": ("aggregate", "SELECT k, count(*) AS n, max(id) AS last_id FROM {s} GROUP BY k"),
}
PROBE_SQL = {"linear": "SELECT 1 FROM {view} WHERE id = {marker}",
             "aggregate": "SELECT 1 FROM {view} WHERE last_id >= {marker}"}
TARGETS = {"many": {"rate": 1000, "views": 100, "p99_ms": 2000},
           "fast": {"rate": 10000, "views": 1, "p99_ms": 1000}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data: Path, log: Path, log_level: str = "warning") -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "streamdb.cli", "serve", "--port", str(port),
                                 "--console-port", str(free_port()),
                                 "--data-dir", str(data), "--spark-master", "local[2]", "--log-level", log_level],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
    dsn = f"postgresql://streamdb@127.0.0.1:{port}/streamdb"
    for _ in range(300):
        try:
            psycopg.connect(dsn).close()
            return proc, dsn
        except psycopg.OperationalError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start; log:\n{log.read_text(errors='replace')[-3000:]}")


def connect(dsn: str) -> psycopg.Connection[Any]:
    # prepare_threshold=None: every statement text here is either unique or cheap to plan.
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(xs), "p50": statistics.median(xs), "p99": percentile(xs, 99), "max": max(xs)}


def ts_literal() -> str:
    return dt.datetime.now(dt.UTC).isoformat(sep=" ")


# ---- workload definition ------------------------------------------------------------------


def many_views(n_views: int, streams: list[str]) -> list[tuple[str, str, str | None, str]]:
    """(view name, stream, probe kind, SQL): view i is over stream i % 4 with shape (i // 4) % 6,
    so every stream gets every shape (and both probe kinds once there are 16 views or more)."""
    views = []
    for i in range(n_views):
        stream = streams[i % len(streams)]
        shape, kind, sql = SHAPES[(i // len(streams)) % len(SHAPES)]
        views.append((f"v{i:03d}_{shape}_{stream}", stream, kind, sql.format(s=stream)))
    return views


def fast_views(n_views: int, variant: str) -> list[tuple[str, str, str | None, str]]:
    kind, sql = FAST_SHAPES[variant]
    return [(f"fast_{variant}_{i}", "s", kind, sql.format(s="s")) for i in range(n_views)]


# ---- load and probes ----------------------------------------------------------------------


class Writer(threading.Thread):
    """Inserts `rate` events/s in total, one batch every ~10 ms, rotating over the streams.
    Falls behind gracefully: the next batch carries what is due (at most 100 ms worth); more
    than 1 s behind, the debt is dropped and counted."""

    def __init__(self, dsn: str, streams: list[str], rate: float, mode: str) -> None:
        super().__init__(daemon=True)
        self.conn = connect(dsn)
        self.streams, self.rate, self.mode = streams, rate, mode
        self.stop = threading.Event()
        self.acks: list[tuple[float, int, float]] = []  # (ack time, rows, statement seconds)
        self.per_stream: Counter[str] = Counter()
        self.dropped = 0
        self.error: str | None = None
        self.next_id = 1

    def run(self) -> None:
        rng = random.Random(7)
        max_batch = max(1, int(self.rate * 0.1))
        start = time.monotonic()
        due_base, sent, tick, turn = 0, 0, 0, 0
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                due = int(self.rate * (now - start)) - due_base - sent
                if due > self.rate:
                    self.dropped += due - max_batch
                    due_base += due - max_batch
                    due = max_batch
                n = min(due, max_batch)
                if n > 0:
                    stream = self.streams[turn % len(self.streams)]
                    turn += 1
                    rows = [(i, i % K_DOMAIN, rng.randrange(1000)) for i in range(self.next_id, self.next_id + n)]
                    self.next_id += n
                    t0 = time.monotonic()
                    self._insert(stream, rows, ts_literal())
                    t1 = time.monotonic()
                    self.acks.append((t1, n, t1 - t0))
                    self.per_stream[stream] += n
                    sent += n
                tick += 1
                pause = start + tick * WRITER_TICK_S - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                else:
                    tick = int((time.monotonic() - start) / WRITER_TICK_S)
        except Exception as e:  # reported, not raised: the run's other figures still count
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.conn.close()

    def _insert(self, stream: str, rows: list[tuple[int, int, int]], ts: str) -> None:
        if self.mode == "copy":
            with self.conn.cursor().copy(f"COPY {stream} FROM STDIN") as cp:
                for i, k, v in rows:
                    cp.write_row((i, k, v, ts))
        else:
            values = ", ".join(f"({i}, {k}, {v}, '{ts}')" for i, k, v in rows)
            self.conn.execute(f"INSERT INTO {stream} VALUES {values}".encode())

    def rate_between(self, t0: float, t1: float) -> float:
        return sum(n for t, n, _ in self.acks if t0 <= t <= t1) / (t1 - t0)


class Prober(threading.Thread):
    """One marker at a time, until `until`: insert (own connection), then poll (another
    connection) each probe view of the marker's stream until it shows, or 60 s pass."""

    def __init__(self, dsn: str, probes: dict[str, dict[str, str]], until: float) -> None:
        super().__init__(daemon=True)
        self.ins, self.poll = connect(dsn), connect(dsn)
        self.probes = probes  # stream -> {kind: view}
        self.until = until
        self.fresh: dict[str, list[float]] = {k: [] for v in probes.values() for k in v}
        self.fresh_start: dict[str, list[float]] = {k: [] for k in self.fresh}  # to the seeing poll's start
        self.timeouts: Counter[str] = Counter()
        self.poll_ms: list[float] = []
        self.insert_ms: list[float] = []
        self.markers: Counter[str] = Counter()
        self.error: str | None = None

    def run(self) -> None:
        streams = sorted(self.probes)
        n = 0
        try:
            while time.monotonic() < self.until:
                began = time.monotonic()
                n += 1
                stream = streams[n % len(streams)]
                marker = MARKER_BASE + n
                self.ins.execute(f"INSERT INTO {stream} VALUES ({marker}, {n % K_DOMAIN}, 1, '{ts_literal()}')")
                acked = time.monotonic()
                self.insert_ms.append((acked - began) * 1000)
                self.markers[stream] += 1
                pending = {kind: PROBE_SQL[kind].format(view=view, marker=marker)
                           for kind, view in self.probes[stream].items()}
                while pending and time.monotonic() - acked < PROBE_TIMEOUT_S:
                    for kind, sql in list(pending.items()):
                        t0 = time.monotonic()
                        seen = self.poll.execute(sql).fetchone()
                        t1 = time.monotonic()
                        self.poll_ms.append((t1 - t0) * 1000)
                        if seen:
                            self.fresh[kind].append((t1 - acked) * 1000)
                            self.fresh_start[kind].append((t0 - acked) * 1000)
                            del pending[kind]
                    if pending:
                        time.sleep(POLL_EVERY_S)
                for kind in pending:
                    self.timeouts[kind] += 1
                pause = began + PROBE_EVERY_S - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.ins.close()
            self.poll.close()


# ---- one run ------------------------------------------------------------------------------


def show_queries(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    cur = conn.execute("SHOW QUERIES")
    names = [d.name for d in cur.description or ()]
    rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    took = time.monotonic() - t0
    lags = [r["lag"] for r in rows if r.get("lag") is not None]
    epoch_ms = [r["last_epoch_ms"] for r in rows if r.get("last_epoch_ms") is not None]
    epochs = [r["epochs"] for r in rows if r.get("epochs") is not None]
    errors = [r for r in rows if r.get("error") is not None]
    return {
        "seconds": took, "queries": len(rows), "with_error": len(errors),
        "errors": sorted({f"{r['name']}: {r['error']}"[:300] for r in errors})[:5],
        "status": dict(Counter(str(r.get("status")) for r in rows)),
        "max_lag": max(lags, default=None), "total_lag": sum(lags) if lags else None,
        "max_last_epoch_ms": max(epoch_ms, default=None),
        "median_last_epoch_ms": statistics.median(epoch_ms) if epoch_ms else None,
        "epochs_min": min(epochs, default=None), "epochs_max": max(epochs, default=None),
    }


def consistency(conn: psycopg.Connection[Any], probes: dict[str, dict[str, str]],
                counting: set[str], expected: Counter[str]) -> dict[str, Any]:
    """After the final FLUSH: each counting probe view's rows vs the events written to its stream."""
    out: dict[str, Any] = {}
    for stream, by_kind in sorted(probes.items()):
        for kind, name in sorted(by_kind.items()):
            if name not in counting:
                continue
            sql = f"SELECT count(*) FROM {name}" if kind == "linear" else f"SELECT sum(n) FROM {name}"
            got = conn.execute(sql).fetchone()
            n = int(got[0]) if got and got[0] is not None else 0
            out[name] = {"stream": stream, "rows": n, "written": expected[stream], "match": n == expected[stream]}
    return out


def server_problems(log: Path) -> list[str]:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [ln[:300] for ln in lines if any(w in ln for w in ("ERROR", "Traceback", "Exception", "CRITICAL"))]


def create_views(dsn: str, label: str, streams: list[str], views: list[tuple[str, str, str | None, str]],
                 rate: float, result: dict[str, Any]) -> None:
    with connect(dsn) as c:
        for s in streams:
            c.execute(f"CREATE STREAM {s} (id BIGINT, k INT, v INT, ts TIMESTAMPTZ)")
        create_s: list[float] = []
        t0 = time.monotonic()
        for name, _stream, _kind, sql in views:
            t = time.monotonic()
            c.execute(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
            create_s.append(time.monotonic() - t)
        result["create_views_s"] = time.monotonic() - t0
        result["create_view_s"] = {"p50": statistics.median(create_s), "max": max(create_s)}
    print(f"  [{label}] {len(views)} views created in {result['create_views_s']:.1f} s; load {rate:.0f} events/s",
          flush=True)


def stop_server(proc: subprocess.Popen[bytes], data: Path | None = None) -> None:
    """Stop the server; with its data dir, also wait for its Spark JVM (which outlives the server
    for a moment, still writing checkpoints) before the data dir is copied."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if data is not None:
        wait_for_jvm(data)


def wait_for_jvm(data: Path) -> None:
    """Wait (30 s at most, then kill it) for the Spark JVM of a server that ran on `data`."""
    try:
        jvm = int((data / "spark" / "jvm.pid").read_text())
    except (OSError, ValueError):
        return
    for _ in range(300):
        if not Path(f"/proc/{jvm}").exists():
            return
        time.sleep(0.1)
    os.kill(jvm, 9)


def run_once(label: str, streams: list[str], views: list[tuple[str, str, str | None, str]],
             rate: float, args: argparse.Namespace) -> dict[str, Any]:
    probes: dict[str, dict[str, str]] = {}
    for name, stream, kind, _ in views:
        if kind is not None:
            probes.setdefault(stream, {}).setdefault(kind, name)
    result: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="views_scale-") as d:
        log = Path(d) / "server.log"
        data = Path(d) / "data"
        snapshot = Path(args.views_snapshot).absolute() / label if args.views_snapshot else None
        reuse = snapshot is not None and snapshot.exists()  # the views were created by an earlier run
        if snapshot is not None:
            snapshot.parent.mkdir(parents=True, exist_ok=True)
            data = snapshot.with_name(f"{label}.data")
            log = snapshot.with_name(f"{label}.log")  # kept, beside the data dir
            wait_for_jvm(data)
            shutil.rmtree(data, ignore_errors=True)
            if reuse:
                shutil.copytree(snapshot, data)
        proc, dsn = start_server(data, log, args.log_level)
        writer: Writer | None = None
        try:
            if not reuse:
                create_views(dsn, label, streams, views, rate, result)
            if snapshot is not None and not reuse:
                stop_server(proc, data)
                shutil.copytree(data, snapshot)
                proc, dsn = start_server(data, log, args.log_level)
            with connect(dsn) as c:
                t = time.monotonic()
                c.execute("FLUSH")
                result["first_flush_s"] = time.monotonic() - t

                writer = Writer(dsn, streams, rate, args.insert)
                writer.start()
                time.sleep(args.warmup)
                m0 = time.monotonic()
                prober = Prober(dsn, probes, m0 + args.seconds)
                prober.start()
                lag_trend = []  # is the backlog steady or growing? SHOW QUERIES every --lag-every s
                while prober.is_alive():
                    prober.join(args.lag_every or None)
                    if prober.is_alive():
                        q = show_queries(c)
                        lag_trend.append({"t": round(time.monotonic() - m0, 1), "max_lag": q["max_lag"],
                                          "total_lag": q["total_lag"], "with_error": q["with_error"],
                                          "median_last_epoch_ms": q["median_last_epoch_ms"]})
                m1 = time.monotonic()
                result["lag_trend"] = lag_trend
                result["show_queries"] = show_queries(c)
                writer.stop.set()
                writer.join()
                stopped = time.monotonic()
                t = time.monotonic()
                try:
                    c.execute("FLUSH")
                    result["final_flush_s"] = time.monotonic() - t
                except psycopg.Error as e:
                    result["final_flush_s"] = None
                    result["final_flush_error"] = str(e)
                expected = writer.per_stream + prober.markers
                # Views that keep every event: the fast linear view (v >= 0) and the count views.
                counting = {name for name, _, kind, sql in views
                            if kind == "aggregate" or (kind == "linear" and "v % 7" not in sql)}
                result["consistency"] = consistency(c, probes, counting, expected)

            stmt_ms = [s * 1000 for _, _, s in writer.acks]
            result["writer"] = {
                "target_rate": rate,
                "achieved_rate_measured": writer.rate_between(m0, m1),
                "achieved_rate_overall": sum(writer.per_stream.values()) / (stopped - (m0 - args.warmup)),
                "events": sum(writer.per_stream.values()), "dropped_behind": writer.dropped,
                "batches": len(writer.acks),
                "mean_batch_rows": statistics.mean(n for _, n, _ in writer.acks) if writer.acks else None,
                "insert_ms": summary(stmt_ms), "error": writer.error, "mode": args.insert,
            }
            result["measured_s"] = m1 - m0
            result["freshness_ms"] = {kind: summary(xs) for kind, xs in prober.fresh.items()}
            result["freshness_to_poll_start_ms"] = {kind: summary(xs) for kind, xs in prober.fresh_start.items()}
            result["timeouts"] = dict(prober.timeouts)
            result["probe_insert_ms"] = summary(prober.insert_ms)
            result["poll_ms"] = summary(prober.poll_ms)
            result["probe_error"] = prober.error
        except Exception as e:  # a failed run is a figure too: recorded, and the next run goes on
            result["error"] = f"{type(e).__name__}: {e}"
        finally:
            if writer is not None:
                writer.stop.set()
            stop_server(proc, data)
            problems = server_problems(log)
            result["server_log_problem_lines"] = len(problems)
            result["server_log_excerpt"] = problems[:10]
    result["loadavg_after"] = os.getloadavg()
    return result


def median_of(runs: list[dict[str, Any]], *path: str) -> float | None:
    xs = []
    for r in runs:
        v: Any = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, int | float):
            xs.append(float(v))
    return statistics.median(xs) if xs else None


def run_scenario(key: str, target: str, streams: list[str], views: list[tuple[str, str, str | None, str]],
                 shapes: list[str], rate: float, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for i in range(args.runs):
        print(f"{key}: run {i + 1}/{args.runs}", flush=True)
        runs.append(run_once(key, streams, views, rate, args))
        print_run(key, i + 1, runs[-1])
    kinds = sorted({k for r in runs for k in r.get("freshness_ms", {})})
    return {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "parameters": {"streams": len(streams), "views": len(views), "rate": rate, "runs": args.runs,
                       "seconds": args.seconds, "warmup": args.warmup, "insert": args.insert,
                       "shapes": shapes},
        "target": {"rate": TARGETS[target]["rate"], "views": TARGETS[target]["views"],
                   "p99_ms": TARGETS[target]["p99_ms"]},
        "runs": runs,
        "median": {
            "freshness_ms": {k: {"p50": median_of(runs, "freshness_ms", k, "p50"),
                                 "p99": median_of(runs, "freshness_ms", k, "p99")} for k in kinds},
            "freshness_to_poll_start_ms": {k: {"p50": median_of(runs, "freshness_to_poll_start_ms", k, "p50"),
                                               "p99": median_of(runs, "freshness_to_poll_start_ms", k, "p99")}
                                           for k in kinds},
            "poll_ms_p50": median_of(runs, "poll_ms", "p50"),
            "achieved_rate_measured": median_of(runs, "writer", "achieved_rate_measured"),
            "create_views_s": median_of(runs, "create_views_s"),
            "first_flush_s": median_of(runs, "first_flush_s"),
            "final_flush_s": median_of(runs, "final_flush_s"),
        },
    }


# ---- output -------------------------------------------------------------------------------


def fmt(v: Any, spec: str = "7.0f") -> str:
    return format(v, spec) if isinstance(v, int | float) else format("-", ">" + spec.split(".")[0])


def print_run(key: str, i: int, r: dict[str, Any]) -> None:
    if r.get("error"):
        print(f"  run {i} FAILED: {r['error'][:500]}")
    for kind, f in r.get("freshness_ms", {}).items():
        print(f"  run {i} {kind:9s} n {f['n']:4d}  p50 {fmt(f['p50'])}  p99 {fmt(f['p99'])}  "
              f"max {fmt(f['max'])} ms  timeouts {r['timeouts'].get(kind, 0)}")
    if "writer" in r:
        w, q = r["writer"], r["show_queries"]
        print(f"  run {i} rate {w['achieved_rate_measured']:.0f}/{w['target_rate']:.0f} events/s "
              f"(insert p50 {fmt(w['insert_ms']['p50'], '.1f')} ms, batch {fmt(w['mean_batch_rows'], '.0f')} rows)  "
              f"create {fmt(r.get('create_views_s'), '.1f')} s  poll p50 {fmt(r['poll_ms']['p50'], '.1f')} ms  "
              f"SHOW QUERIES: {q['with_error']} failed, max lag {q['max_lag']}  "
              f"final FLUSH {fmt(r.get('final_flush_s'), '.1f')} s  "
              f"counts match {all(c['match'] for c in r['consistency'].values())}", flush=True)
        if r.get("lag_trend"):
            print(f"  run {i} max lag every {r['lag_trend'][0]['t']:.0f} s: "
                  + " -> ".join(str(x["max_lag"]) for x in r["lag_trend"]))
        for what, err in (("writer", w["error"]), ("probe", r["probe_error"])):
            if err:
                print(f"  run {i} {what} error: {err}")
    if r.get("server_log_problem_lines"):
        print(f"  run {i} server log: {r['server_log_problem_lines']} problem lines, first: "
              f"{r['server_log_excerpt'][0]}")


def print_table(scenarios: dict[str, dict[str, Any]]) -> None:
    print()
    print(f"{'scenario':19s} {'views':>5s} {'rate/target':>11s} {'probe':9s} {'n':>4s} "
          f"{'p50 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'target':>7s} {'tmout':>5s} "
          f"{'poll ms':>7s} {'create s':>8s} {'failed':>6s} {'max lag':>7s}")
    for key, sc in scenarios.items():
        runs, med = sc["runs"], sc["median"]
        rate = f"{fmt(med['achieved_rate_measured'], '.0f')}/{sc['parameters']['rate']:.0f}"
        shown = [r["show_queries"] for r in runs if "show_queries" in r]
        failed = max((q["with_error"] for q in shown), default=-1)
        lag = max((q["max_lag"] or 0 for q in shown), default=-1)
        if not med["freshness_ms"]:
            print(f"{key:19s} no figures: {sum(1 for r in runs if r.get('error'))} of {len(runs)} runs failed")
        for kind, f in med["freshness_ms"].items():
            worst = max((r.get("freshness_ms", {}).get(kind, {}).get("max") or 0) for r in runs)
            n = sum(r.get("freshness_ms", {}).get(kind, {}).get("n") or 0 for r in runs)
            touts = sum(r.get("timeouts", {}).get(kind, 0) for r in runs)
            print(f"{key:19s} {sc['parameters']['views']:5d} {rate:>11s} {kind:9s} {n:4d} "
                  f"{fmt(f['p50'])} {fmt(f['p99'])} {worst:7.0f} {'<=' + str(sc['target']['p99_ms']):>7s} "
                  f"{touts:5d} {fmt(med['poll_ms_p50'], '7.1f')} {fmt(med['create_views_s'], '8.1f')} "
                  f"{failed:6d} {lag:7d}")
    print("p50/p99: median across runs of each run's figure; max: worst probe; n: probes in all runs; "
          "poll: median p50 of one poll; failed/max lag: worst run's SHOW QUERIES at the window's end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--scenario", choices=("many", "fast", "both"), default="both")
    ap.add_argument("--runs", type=int, default=3, help="fresh server and data dir per run")
    ap.add_argument("--seconds", type=float, default=30, help="measured window per run")
    ap.add_argument("--warmup", type=float, default=5, help="load before probes start")
    ap.add_argument("--rate", type=float, help="events/s in total (default 1000 many, 10000 fast)")
    ap.add_argument("--views", type=int, help="views (default 100 many, 1 fast)")
    ap.add_argument("--views-snapshot", help="directory keeping each scenario's data dir right after its views "
                    "were created: later runs start from a copy instead of creating them again (CREATE of 100 views "
                    "takes minutes)")
    ap.add_argument("--lag-every", type=float, default=5, help="SHOW QUERIES every N s of the window (0: off)")
    ap.add_argument("--variants", default="linear,aggregate", help="fast scenario: view shapes, each alone")
    ap.add_argument("--insert", choices=("values", "copy"), default="values",
                    help="writer's statement: multi-row INSERT ... VALUES, or COPY FROM STDIN")
    ap.add_argument("--log-level", default="warning", help="the server's (info: each pipeline batch's times)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results file (merged by scenario)")
    args = ap.parse_args()

    scenarios: dict[str, dict[str, Any]] = {}
    suffix = "" if args.insert == "values" else f"_{args.insert}"  # kept apart in the results file
    if args.scenario in ("many", "both"):
        streams = [f"s{i}" for i in range(4)]
        views = many_views(args.views or TARGETS["many"]["views"], streams)
        shapes = [sql for _, _, sql in SHAPES]
        scenarios["many" + suffix] = run_scenario("many" + suffix, "many", streams, views, shapes,
                                         args.rate or TARGETS["many"]["rate"], args)
    if args.scenario in ("fast", "both"):
        for variant in args.variants.split(","):
            views = fast_views(args.views or TARGETS["fast"]["views"], variant)
            key = f"fast_{variant}{suffix}"
            scenarios[key] = run_scenario(key, "fast", ["s"], views, [FAST_SHAPES[variant][1]],
                                          args.rate or TARGETS["fast"]["rate"], args)

    previous: dict[str, Any] = {}
    if args.out.exists():
        try:
            previous = json.loads(args.out.read_text()).get("scenarios", {})
        except (json.JSONDecodeError, AttributeError):
            previous = {}
    result = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "spark_master": "local[2]"},
        "scenarios": {**previous, **scenarios},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print_table(scenarios)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
