"""The wire peer: point reads and ingest, StreamDB vs PostgreSQL, measured in the same run.

Starts a StreamDB server (real Spark, local[2], fresh data dir) and a PostgreSQL server from the
machine's binaries (bench/pgserver.py: own port and temporary directory) with PostgreSQL's
default durability (fsync, synchronous_commit and full_page_writes on: a commit is acknowledged
once its WAL is flushed, as StreamDB acknowledges a write once it is durable in its log;
--pg-fast turns the three off, as in the tests), and loads the same --rows rows
(id, v) into both:

  StreamDB    CREATE STREAM s (id BIGINT, v BIGINT); CREATE MATERIALIZED VIEW kv AS
              SELECT id, max(v) AS v FROM s GROUP BY id; COPY s FROM STDIN; FLUSH
  PostgreSQL  CREATE TABLE kv (id BIGINT PRIMARY KEY, v BIGINT); COPY kv FROM STDIN; ANALYZE

Measured in each of --runs runs, every figure StreamDB then PostgreSQL back to back (so a noisy
moment hits both), each for --seconds:

  point     SELECT v FROM kv WHERE id = <random existing key>, queries/s, by 1, 4 and 8 client
            processes (--clients), each with its own connection, warmed up (<= 0.3 s) and started
            together (one not ready in time starts late and still runs --seconds: q/s is the sum
            of the clients' rates; late clients are counted in the JSON); per protocol:
              simple    literal SQL: the simple query protocol, parsed on every query
              extended  a %s parameter, prepare=False: unnamed statement, Parse+Bind+Execute
                        every time (not run unless listed in --protocols)
              prepared  a %s parameter, prepare=True: parsed once, then Bind+Execute
  insert_single  rows/s of single-row INSERT INTO ing VALUES (%s, %s) from one client,
                 prepared (psycopg's default after 5 executions)
  insert_single_x8  the same from max(--clients) client processes at once, each on its own
                 ids: the sum of their rows / the window (group commit shares the syncs)
  insert_batch   rows/s of multi-row INSERT INTO ing VALUES (...), ... of --batch rows, literal SQL
  copy           rows/s of COPY ing FROM STDIN, --copy-batch rows per statement (text format)

  fairness  the p99 latency of 1 client's simple point reads alone, then while another client
            sends large statements back to back (--heavy: a ~1 MB multi-row INSERT into `heavy`,
            a ~100 KB SELECT with a 15,000-value IN list, alternating); the ratio loaded/idle is
            each system's own (the target: within 2x).

Ingest goes to StreamDB's stream `ing`, which a view ing_kv (same shape as kv) reads, and to
PostgreSQL's table `ing` with a primary key: both keep the rows keyed. StreamDB acknowledges a
write once it is durable in its log; its view catches up asynchronously (on the same 2 cores:
that Spark work competes with the ingest). The time of a FLUSH after each StreamDB ingest figure
(the view caught up) is reported too. Ingest rows/s count the time spent in the statements only
(rows are formatted before each statement is timed); point queries/s are whole loops (client
included: the client processes share the machine's cores with both servers).

Each figure is the median across runs with min and max; ratio = StreamDB / PostgreSQL of the
medians. Figures, never assertions. Written to bench/results/pg_compare.json.

    .venv/bin/python bench/pg_compare.py [--quick] [--runs 3] [--seconds 3] [--rows 100000]
        [--clients 1,4,8] [--protocols simple,prepared] [--batch 100] [--copy-batch 10000]
        [--heavy insert,select] [--out bench/results/pg_compare.json]

--quick: --runs 2 --seconds 1 --rows 10000 --clients 1,8 (the 4-client figure is left out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pgserver import PostgresServer  # noqa: E402
from views_scale import start_server, stop_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "pg_compare.json"
SYSTEMS = ("streamdb", "postgresql")
POINT_SQL = "SELECT v FROM kv WHERE id = %s"
INGEST_KINDS = ("insert_single", "insert_single_x8", "insert_batch", "copy")
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
INGEST_ID_BASE = 10**12  # ingested ids never meet kv's


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- point reads, in worker processes ---------------------------------------------------------

_worker_conns: dict[str, psycopg.Connection[Any]] = {}


def _worker_conn(dsn: str) -> psycopg.Connection[Any]:
    conn = _worker_conns.get(dsn)
    if conn is None or conn.closed:
        # Nothing is prepared unless a query says prepare=True (each query passes prepare=...):
        # prepare_threshold=None would disable preparing altogether, prepare=True included.
        conn = psycopg.connect(dsn, autocommit=True)
        _worker_conns[dsn] = conn
    return conn


def wait_until(at: float) -> None:
    while time.time() < at:
        time.sleep(min(0.01, max(0.0, at - time.time())))


def point_worker(task: tuple[str, str, int, int, float, float, float]) -> dict[str, Any]:
    """One client: connect (the connection is kept for later tasks), warm up for up to `warmup` s,
    wait for start_at, then query for `seconds`. A client not ready by start_at (a slow server)
    starts late and still queries for `seconds` from then: its rate counts, its lateness is reported."""
    dsn, protocol, n_keys, seed, start_at, seconds, warmup = task
    rng = random.Random(seed)
    conn = _worker_conn(dsn)
    if protocol == "simple":
        def query(key: int) -> Any:
            return conn.execute(f"SELECT v FROM kv WHERE id = {key}", prepare=False).fetchone()
    else:
        prepare = protocol == "prepared"

        def query(key: int) -> Any:
            return conn.execute(POINT_SQL, (key,), prepare=prepare).fetchone()
    warm_until = min(start_at, time.time() + warmup)
    query(rng.randrange(n_keys))  # at least one: prepares the statement
    while time.time() < warm_until:
        query(rng.randrange(n_keys))
    began = max(time.time(), start_at)
    late = began - start_at
    wait_until(start_at)
    done = misses = 0
    lat: list[float] = []
    end_at = began + seconds
    while time.time() < end_at:
        t0 = time.perf_counter()
        row = query(rng.randrange(n_keys))
        lat.append(time.perf_counter() - t0)
        done += 1
        misses += row is None
    window = time.time() - began  # includes the last query, which may end past end_at
    return {"queries": done, "per_s": done / window, "misses": misses, "late_s": late,
            "lat_ms": [x * 1000 for x in lat]}


def insert_worker(task: tuple[str, int, float, float]) -> dict[str, Any]:
    """One writing client: single-row prepared INSERTs of ids from `first` on, for `seconds`
    from start_at (one INSERT before it prepares the statement)."""
    dsn, first, start_at, seconds = task
    conn = _worker_conn(dsn)
    i = first
    conn.execute("INSERT INTO ing VALUES (%s, %s)", (i, i % 1000), prepare=True)
    wait_until(start_at)
    began = time.time()
    rows = 0
    while time.time() - began < seconds:
        i += 1
        conn.execute("INSERT INTO ing VALUES (%s, %s)", (i, i % 1000), prepare=True)
        rows += 1
    return {"rows": rows, "window": time.time() - began, "last_id": i}


def measure_insert_clients(pool: Any, dsn: str, clients: int, first: int, seconds: float) -> dict[str, Any]:
    """Rows/s of `clients` concurrent single-row writers (each on ids first + c * 10**8 ...)."""
    start_at = time.time() + 0.5 + 0.05 * clients
    tasks = [(dsn, first + c * 10**8, start_at, seconds) for c in range(clients)]
    results = pool.map(insert_worker, tasks)
    rows = sum(r["rows"] for r in results)
    window = max(r["window"] for r in results)
    return {"per_s": rows / window if window else None, "rows": rows, "clients": clients,
            "statement_ms_mean": window / (rows / clients) * 1000 if rows else None}


def percentile(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure_point(pool: Any, dsn: str, protocol: str, clients: int, n_keys: int, seconds: float,
                  seed: int) -> dict[str, Any]:
    """Queries/s of `clients` concurrent clients: the sum of each client's rate over its window."""
    start_at = time.time() + 0.3 + 0.05 * clients
    tasks = [(dsn, protocol, n_keys, seed * 1000 + i, start_at, seconds, 0.3) for i in range(clients)]
    results = pool.map(point_worker, tasks, chunksize=1)
    lat = [x for r in results for x in r["lat_ms"]]
    return {"per_s": sum(r["per_s"] for r in results), "queries": sum(r["queries"] for r in results),
            "misses": sum(r["misses"] for r in results),
            "late_clients": sum(r["late_s"] > 0.05 for r in results),
            "late_s_max": max(r["late_s"] for r in results),
            "latency_ms_p50": percentile(lat, 50), "latency_ms_p99": percentile(lat, 99)}


def heavy_statements(kinds: list[str]) -> list[str]:
    """The large statements of the fairness figure, built once."""
    pad = "x" * 60
    out = []
    if "insert" in kinds:  # ~1 MB; ids from a range of their own, so repeats add rows, never clash
        out.append("INSERT INTO heavy VALUES " + ", ".join(f"({i}, '{pad}')" for i in range(13_000)))
    if "select" in kinds:
        out.append("SELECT count(*) FROM kv WHERE id IN (" + ", ".join(str(i * 7) for i in range(15_000)) + ")")
    return out


def measure_fairness(pool: Any, dsn: str, n_keys: int, seconds: float, seed: int,
                     statements: list[str]) -> dict[str, Any]:
    """Point-read latency of one simple-protocol client alone, then while another client sends
    `statements` one after another."""
    idle = measure_point(pool, dsn, "simple", 1, n_keys, seconds, seed)
    stop = threading.Event()
    heavy_s: list[float] = []
    errors: list[str] = []

    def send() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            k = 0
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    conn.execute(statements[k % len(statements)].encode())
                except psycopg.Error as e:
                    errors.append(f"{type(e).__name__}: {e}"[:300])
                    return
                heavy_s.append(time.monotonic() - t0)
                k += 1

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(0.3)  # the first large statement is in the server
    loaded = measure_point(pool, dsn, "simple", 1, n_keys, seconds, seed + 1)
    stop.set()
    sender.join(timeout=600)
    return {"idle_p99_ms": idle["latency_ms_p99"], "loaded_p99_ms": loaded["latency_ms_p99"],
            "idle_p50_ms": idle["latency_ms_p50"], "loaded_p50_ms": loaded["latency_ms_p50"],
            "p99_ratio": ratio(loaded["latency_ms_p99"], idle["latency_ms_p99"]),
            "heavy_statements": len(heavy_s), "heavy_statement_s_median": statistics.median(heavy_s) if heavy_s else None,
            "heavy_errors": errors}


# ---- ingest, from this process ----------------------------------------------------------------


class Ingest:
    """Single-client ingest into `ing` of one system; ids continue across figures and runs."""

    def __init__(self, dsn: str, batch: int, copy_batch: int) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)  # preparing as each statement says
        self.batch, self.copy_batch = batch, copy_batch
        self.next_id = INGEST_ID_BASE

    def _ids(self, n: int) -> range:
        ids = range(self.next_id, self.next_id + n)
        self.next_id += n
        return ids

    def run(self, kind: str, seconds: float) -> dict[str, Any]:
        busy = 0.0  # time inside statements
        rows = statements = 0
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            if kind == "insert_single":
                (i,) = self._ids(1)
                t0 = time.perf_counter()
                self.conn.execute("INSERT INTO ing VALUES (%s, %s)", (i, i % 1000), prepare=True)
                busy += time.perf_counter() - t0
                n = 1
            elif kind == "insert_batch":
                sql = ("INSERT INTO ing VALUES "
                       + ", ".join(f"({i}, {i % 1000})" for i in self._ids(self.batch))).encode()
                t0 = time.perf_counter()
                self.conn.execute(sql)
                busy += time.perf_counter() - t0
                n = self.batch
            else:
                blob = "".join(f"{i}\t{i % 1000}\n" for i in self._ids(self.copy_batch)).encode()
                t0 = time.perf_counter()
                with self.conn.cursor().copy("COPY ing FROM STDIN") as cp:
                    cp.write(blob)
                busy += time.perf_counter() - t0
                n = self.copy_batch
            rows += n
            statements += 1
        return {"per_s": rows / busy if busy else None, "rows": rows, "statements": statements,
                "statement_ms_mean": busy / statements * 1000 if statements else None}

    def close(self) -> None:
        self.conn.close()


# ---- setup ------------------------------------------------------------------------------------


def load_rows(conn: psycopg.Connection[Any], table: str, n: int, chunk: int = 50_000) -> float:
    t0 = time.monotonic()
    for start in range(0, n, chunk):
        blob = "".join(f"{i}\t{(i * 7919) % 100_000}\n" for i in range(start, min(n, start + chunk))).encode()
        with conn.cursor().copy(f"COPY {table} FROM STDIN") as cp:
            cp.write(blob)
    return time.monotonic() - t0


def setup_streamdb(dsn: str, rows: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE STREAM s (id BIGINT, v BIGINT)")
        c.execute("CREATE STREAM ing (id BIGINT, v BIGINT)")
        c.execute("CREATE STREAM heavy (id BIGINT, pad TEXT)")
        t0 = time.monotonic()
        c.execute("CREATE MATERIALIZED VIEW kv AS SELECT id, max(v) AS v FROM s GROUP BY id")
        c.execute("CREATE MATERIALIZED VIEW ing_kv AS SELECT id, max(v) AS v FROM ing GROUP BY id")
        create_s = time.monotonic() - t0
        load_s = load_rows(c, "s", rows)
        t0 = time.monotonic()
        c.execute("FLUSH")
        flush_s = time.monotonic() - t0
        n = c.execute("SELECT count(*) FROM kv").fetchone()
        version = c.execute("SELECT version()").fetchone()
    got = int(n[0]) if n else 0
    if got != rows:
        raise RuntimeError(f"StreamDB view kv holds {got} rows after FLUSH, expected {rows}")
    return {"create_views_s": create_s, "load_s": load_s, "first_flush_s": flush_s,
            "version": version[0] if version else None}


def setup_postgres(dsn: str, rows: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE kv (id BIGINT PRIMARY KEY, v BIGINT)")
        c.execute("CREATE TABLE ing (id BIGINT PRIMARY KEY, v BIGINT)")
        c.execute("CREATE TABLE heavy (id BIGINT, pad TEXT)")
        load_s = load_rows(c, "kv", rows)
        c.execute("ANALYZE kv")
        version = c.execute("SHOW server_version").fetchone()
    return {"load_s": load_s, "version": version[0] if version else None}


# ---- the run ----------------------------------------------------------------------------------


def stats(xs: list[float | None]) -> dict[str, Any]:
    vals = [x for x in xs if isinstance(x, int | float)]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": xs}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": xs}


def ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def fmt(v: Any, spec: str = ",.0f") -> str:
    return format(v, spec) if isinstance(v, int | float) else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="--runs 2 --seconds 1 --rows 10000 --clients 1,8")
    ap.add_argument("--runs", type=int, help="default 3 (quick 2)")
    ap.add_argument("--seconds", type=float, help="per figure and run (default 3, quick 1)")
    ap.add_argument("--rows", type=int, help="rows in kv (default 100000, quick 10000)")
    ap.add_argument("--clients", help="concurrent point-read clients (default 1,4,8, quick 1,8)")
    ap.add_argument("--protocols", default="simple,prepared", help="of simple, extended, prepared")
    ap.add_argument("--batch", type=int, default=100, help="rows per multi-row INSERT")
    ap.add_argument("--copy-batch", type=int, default=10_000, help="rows per COPY statement")
    ap.add_argument("--heavy", default="insert,select",
                    help="the fairness figure's large statements, of insert and select ('' leaves it out)")
    ap.add_argument("--pg-fast", action="store_true",
                    help="PostgreSQL with fsync, synchronous_commit and full_page_writes off (default: on)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    runs = args.runs or (2 if args.quick else 3)
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    rows = args.rows or (10_000 if args.quick else 100_000)
    clients = [int(x) for x in (args.clients or ("1,8" if args.quick else "1,4,8")).split(",")]
    protocols = [p for p in args.protocols.split(",") if p]
    for p in protocols:
        if p not in ("simple", "extended", "prepared"):
            ap.error(f"unknown protocol {p!r}")

    result: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "spark_master": "local[2]"},
        "parameters": {"quick": args.quick, "runs": runs, "seconds": seconds, "rows": rows, "clients": clients,
                       "protocols": protocols, "batch": args.batch, "copy_batch": args.copy_batch,
                       "postgresql_durable": not args.pg_fast},
        "loadavg_before": os.getloadavg(),
        "errors": [],
    }
    point_raw: dict[str, dict[int, dict[str, list[dict[str, Any]]]]] = {
        p: {c: {s: [] for s in SYSTEMS} for c in clients} for p in protocols}
    ingest_raw: dict[str, dict[str, list[dict[str, Any]]]] = {k: {s: [] for s in SYSTEMS} for k in INGEST_KINDS}
    catch_up: dict[str, list[float]] = {k: [] for k in INGEST_KINDS}
    heavy = heavy_statements([k for k in args.heavy.split(",") if k])
    fairness_raw: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}

    with tempfile.TemporaryDirectory(prefix="pg_compare-") as d:
        log = Path(d) / "streamdb.log"
        pg: PostgresServer | None = None
        proc: subprocess.Popen[bytes] | None = None
        ctx = mp.get_context("spawn")
        pool = None
        try:
            say("pg_compare: starting PostgreSQL and StreamDB (real Spark, local[2])")
            pg = PostgresServer(Path(d) / "pg-logs", settings=None if args.pg_fast else DURABLE)
            pg.initdb()
            pg.start()
            proc, sdb_dsn = start_server(Path(d) / "data", log)
            dsns = {"streamdb": sdb_dsn, "postgresql": pg.dsn}
            pool = ctx.Pool(max(clients))  # client processes, started once, each keeping its connections
            result["setup"] = {"streamdb": setup_streamdb(sdb_dsn, rows), "postgresql": setup_postgres(pg.dsn, rows)}
            result["versions"] = {s: result["setup"][s]["version"] for s in SYSTEMS}
            say(f"pg_compare: {rows:,} rows loaded into both; StreamDB view ready "
                f"(CREATE {result['setup']['streamdb']['create_views_s']:.1f} s, "
                f"FLUSH {result['setup']['streamdb']['first_flush_s']:.1f} s)")
            ingest = {s: Ingest(dsns[s], args.batch, args.copy_batch) for s in SYSTEMS}
            flusher = psycopg.connect(sdb_dsn, autocommit=True)
            for run in range(runs):
                for p in protocols:
                    for n in clients:
                        for s in SYSTEMS:
                            try:
                                r = measure_point(pool, dsns[s], p, n, rows, seconds, seed=run * 100 + n)
                            except Exception as e:  # recorded; the other figures go on
                                r = {"per_s": None, "error": f"{type(e).__name__}: {e}"[:500]}
                                result["errors"].append(f"run {run + 1} point {p} x{n} {s}: {r['error']}")
                            point_raw[p][n][s].append(r)
                        say(f"  run {run + 1}/{runs} point {p:8s} {n} client(s): StreamDB "
                            f"{fmt(point_raw[p][n]['streamdb'][-1]['per_s'])} q/s, PostgreSQL "
                            f"{fmt(point_raw[p][n]['postgresql'][-1]['per_s'])} q/s")
                for s in SYSTEMS if heavy else ():
                    try:
                        fr = measure_fairness(pool, dsns[s], rows, seconds, run * 100 + 50, heavy)
                    except Exception as e:
                        fr = {"error": f"{type(e).__name__}: {e}"[:500]}
                        result["errors"].append(f"run {run + 1} fairness {s}: {fr['error']}")
                    fairness_raw[s].append(fr)
                if heavy:
                    said = [fmt(fairness_raw[s][-1].get(f), ".1f") for s in SYSTEMS
                            for f in ("idle_p99_ms", "loaded_p99_ms")]
                    say(f"  run {run + 1}/{runs} fairness (point p99 alone -> with large statements): "
                        f"StreamDB {said[0]} -> {said[1]} ms, PostgreSQL {said[2]} -> {said[3]} ms")
                for k in INGEST_KINDS:
                    for s in SYSTEMS:
                        try:
                            if k == "insert_single_x8":
                                # ids of their own, past every single client's (run and system apart)
                                first = INGEST_ID_BASE + 10**11 * (1 + run) + 10**10 * SYSTEMS.index(s)
                                r = measure_insert_clients(pool, dsns[s], max(clients), first, seconds)
                            else:
                                r = ingest[s].run(k, seconds)
                        except Exception as e:
                            r = {"per_s": None, "error": f"{type(e).__name__}: {e}"[:500]}
                            result["errors"].append(f"run {run + 1} {k} {s}: {r['error']}")
                        ingest_raw[k][s].append(r)
                        if s == "streamdb" and (run < runs - 1 or k != INGEST_KINDS[-1]):
                            # the view catches up before anything else is measured (nothing is after the last)
                            t0 = time.monotonic()
                            flusher.execute("FLUSH")
                            catch_up[k].append(time.monotonic() - t0)
                    say(f"  run {run + 1}/{runs} {k:13s}: StreamDB {fmt(ingest_raw[k]['streamdb'][-1]['per_s'])} "
                        f"rows/s, PostgreSQL {fmt(ingest_raw[k]['postgresql'][-1]['per_s'])} rows/s")
            flusher.close()
            for i in ingest.values():
                i.close()
        except Exception as e:
            result["errors"].append(f"{type(e).__name__}: {e}"[:3000])
            say(f"pg_compare FAILED: {type(e).__name__}: {e}"[:3000])
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()
            if proc is not None:
                stop_server(proc)
            if pg is not None:
                pg.cleanup()
            problems = [ln[:300] for ln in log.read_text(errors="replace").splitlines()
                        if any(w in ln for w in ("ERROR", "Traceback", "CRITICAL"))] if log.exists() else []
            result["streamdb_log_problem_lines"] = problems[:10]

    result["loadavg_after"] = os.getloadavg()
    point: dict[str, Any] = {}
    for p in protocols:
        point[p] = {}
        for n in clients:
            fig: dict[str, Any] = {}
            for s in SYSTEMS:
                raw = point_raw[p][n][s]
                fig[s] = stats([r.get("per_s") for r in raw])
                fig[s]["latency_ms_p50"] = stats([r.get("latency_ms_p50") for r in raw])["median"]
                fig[s]["latency_ms_p99"] = stats([r.get("latency_ms_p99") for r in raw])["median"]
                fig[s]["misses"] = sum(r.get("misses", 0) for r in raw)
                fig[s]["late_clients"] = sum(r.get("late_clients", 0) for r in raw)
            fig["ratio"] = ratio(fig["streamdb"]["median"], fig["postgresql"]["median"])
            point[p][str(n)] = fig
    ingest_out: dict[str, Any] = {}
    for k in INGEST_KINDS:
        fig = {s: stats([r.get("per_s") for r in ingest_raw[k][s]]) for s in SYSTEMS}
        for s in SYSTEMS:
            fig[s]["statement_ms_mean"] = stats([r.get("statement_ms_mean") for r in ingest_raw[k][s]])["median"]
        fig["ratio"] = ratio(fig["streamdb"]["median"], fig["postgresql"]["median"])
        fig["streamdb_view_catch_up_s"] = stats(list(catch_up[k]))
        ingest_out[k] = fig
    result["point_select"] = point
    if heavy:
        fair: dict[str, Any] = {}
        for s in SYSTEMS:
            fair[s] = {f: stats([r.get(f) for r in fairness_raw[s]]) for f in
                       ("idle_p99_ms", "loaded_p99_ms", "p99_ratio", "heavy_statement_s_median")}
            fair[s]["heavy_statements"] = sum(r.get("heavy_statements", 0) for r in fairness_raw[s])
            fair[s]["heavy_errors"] = [e for r in fairness_raw[s] for e in r.get("heavy_errors", [])]
        result["fairness"] = fair
    result["ingest"] = ingest_out
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print_table(result)
    try:
        shown = args.out.resolve().relative_to(ROOT)
    except ValueError:
        shown = args.out
    print(f"written to {shown}")
    if not any(f["ratio"] for f in ingest_out.values()) and not any(
            f["ratio"] for by_n in point.values() for f in by_n.values()):
        sys.exit(1)


def print_table(result: dict[str, Any]) -> None:
    par = result["parameters"]
    print(f"\nStreamDB vs PostgreSQL ({par['rows']:,} rows, {par['runs']} runs x {par['seconds']} s; "
          f"median [min-max])")
    print(f"{'figure':28s} {'StreamDB':>26s} {'PostgreSQL':>26s} {'ratio':>7s}")

    def cell(f: dict[str, Any]) -> str:
        return f"{fmt(f['median'])} [{fmt(f['min'])}-{fmt(f['max'])}]"

    for p, by_n in result.get("point_select", {}).items():
        for n, f in by_n.items():
            print(f"{'point ' + p + ' x' + n + ' q/s':28s} {cell(f['streamdb']):>26s} {cell(f['postgresql']):>26s} "
                  f"{fmt(f['ratio'], '.3f'):>7s}")
    for k, f in result.get("ingest", {}).items():
        print(f"{k + ' rows/s':28s} {cell(f['streamdb']):>26s} {cell(f['postgresql']):>26s} "
              f"{fmt(f['ratio'], '.3f'):>7s}")
    fair = result.get("fairness")
    if fair:
        for f in ("idle_p99_ms", "loaded_p99_ms", "p99_ratio"):
            label = {"idle_p99_ms": "point p99 ms, alone", "loaded_p99_ms": "point p99 ms, large stmts",
                     "p99_ratio": "  loaded / alone"}[f]
            spec = ".2f" if f == "p99_ratio" else ".1f"
            cells = [f"{fmt(fair[s][f]['median'], spec)} [{fmt(fair[s][f]['min'], spec)}-{fmt(fair[s][f]['max'], spec)}]"
                     for s in SYSTEMS]
            print(f"{label:28s} {cells[0]:>26s} {cells[1]:>26s} {'':>7s}")
    for e in result.get("errors", []):
        print(f"error: {e[:500]}")


if __name__ == "__main__":
    main()
