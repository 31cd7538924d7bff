"""Nexmark on StreamDB: each query alone, on its own server, in throughput or freshness mode.

    python bench/nexmark/run_streamdb.py --events DIR --queries q0,q1,... --mode throughput|freshness
        [--rate 10000] [--runs 3] [--seconds 30] --out FILE.json
        [--warmup 5] [--chunk 10000] [--timeout 1800] [--spark-master local[2]] [--spool FILE]

DIR is the output of bench/nexmark/generator.py. Every run starts a fresh server (real Spark,
local[2] by default) on a fresh data directory, creates the streams (queries/ddl.sql) and ONE
query's view (queries/qN.sql), then:

- throughput: loads every event of DIR as fast as it can by COPY ... FROM STDIN (CSV), in
  event-time order, --chunk events at a time (one COPY per stream per chunk: persons, then
  auctions, then bids), then FLUSH (returns once the view reflects every acknowledged write).
  events/s = N / (first COPY -> FLUSH returned); ingest_seconds = first COPY -> last COPY
  acknowledged. The payloads are built before the clock starts, in memory, or with --spool
  in a file read back during the run (20M events would take ~6 GB of memory).
  With --preload, every event is COPYed first and the view is created after: events/s = N /
  (CREATE -> FLUSH returned), the view's pipeline reading the log alone (its backfill), as
  Flink's steady rate is its job reading its files (the COPYs no longer share the cores). The
  CREATE waits until the server's Spark runtime is ready (it starts in the background during
  the load), as Flink's steady rate leaves out its cluster's start; the pipeline's own start
  is counted.
- freshness: feeds the events in event-time order at --rate events/s (a COPY per stream every
  ~20 ms) for --seconds; after --warmup seconds it probes: one marker at a time (at most every
  200 ms) is written by COPY and the view is polled every 20 ms until it shows; freshness = COPY
  acknowledged -> the poll that saw it returned. Markers are events with ids >= 10**12 the query
  passes through (see `probe`); every query here has one. A query without one falls back to
  SHOW QUERIES' lag (input records not yet reflected, sampled every 200 ms) divided by the rate
  of the streams it reads (QUERY_INPUTS, bids by default) as a proxy; the lag and that proxy are
  reported in every run anyway. After the window, a FLUSH drains the rest.

Measured for the server process and all its descendants (the Spark JVM and its Python workers),
from /proc: CPU seconds (utime + stime) over the measured window, sampled every 250 ms (a
process that exits loses at most its last 250 ms), and peak memory (the sum of each process's
VmHWM, an upper bound of the simultaneous peak; also the largest sampled sum of VmRSS). Processes
seen in fewer than two samples are left out of the peak: a child forked by the JVM to run a tool
(chmod) shows the JVM's whole resident set for a moment, which is shared, not more memory; they
are listed in peak_rss_transient_mib.
cores_used = cpu_seconds / seconds; events_per_s_per_core = events_per_s / cores_used.

A query file whose first line is `-- unsupported: <reason>` is skipped and reported so. The JSON
written to --out (also after each query, so partial results survive):

    {"system": "streamdb", "version": "...", "machine": {"cores", "mem_gib", "python", ...},
     "mode": "throughput" | "freshness", "events": N, "rate": ..., ...,
     "queries": {"q0": {"status": "ok" | "unsupported" | "failed", "reason": str | null,
                        "runs": [{"seconds", "events_per_s", "cpu_seconds", "cores_used",
                                  "peak_rss_mib", "ingest_seconds", ...}, ...],
                        "events_per_s": {"median", "min", "max"},
                        "freshness_ms": {"p50", "p99", "method"}}}}   # freshness mode only

Progress goes to stderr. Figures, never assertions: the machine's other load skews them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
QUERIES_DIR = HERE / "queries"
ALL_QUERIES = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q12", "q14", "q17", "q22")

_spec = importlib.util.spec_from_file_location("streamdb_bench_nexmark_generator", HERE / "generator.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen
_spec.loader.exec_module(gen)
KINDS: tuple[str, ...] = gen.KINDS
FIELDS: dict[str, tuple[str, ...]] = gen.FIELDS

MARKER_BASE = 10**12
PROBE_EVERY_S = 0.2
POLL_EVERY_S = 0.02
PROBE_TIMEOUT_S = 60.0
FEED_TICK_S = 0.02
LAG_EVERY_S = 0.2
MONITOR_EVERY_S = 0.25
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def progress(label: str, done: int, total: int, started: float, last: list[float]) -> None:
    """A text progress bar on stderr: redrawn in place on a terminal, else a line every ~5 s."""
    now = time.monotonic()
    tty = sys.stderr.isatty()
    if done < total and now - last[0] < (0.2 if tty else 5.0):
        return
    last[0] = now
    width = 30
    filled = int(width * done / max(total, 1))
    elapsed = now - started
    line = (f"{label} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} events "
            f"{elapsed:6.1f} s ({done / max(elapsed, 1e-9):,.0f}/s)")
    sys.stderr.write(("\r" + line + ("\n" if done >= total else "")) if tty else line + "\n")
    sys.stderr.flush()


# ---- query files ------------------------------------------------------------------------------


def read_query(name: str) -> tuple[str, str | None]:
    """(SQL text, reason if the file says `-- unsupported: <reason>` before any statement)."""
    text = (QUERIES_DIR / f"{name}.sql").read_text()
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if s.lower().startswith("-- unsupported:"):
            return text, s.split(":", 1)[1].strip() or "unsupported"
        if not s.startswith("--"):
            break
    return text, None


def statements(sql: str) -> list[str]:
    """Statements of a file: whole-line `--` comments dropped, split at `;` (the files have no
    semicolons inside literals)."""
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


# ---- events -----------------------------------------------------------------------------------


def csv_field(v: Any) -> str:
    s = str(v)
    if s == "" or any(c in s for c in ',"\n\r'):
        return '"' + s.replace('"', '""') + '"'
    return s


def csv_line(kind: str, row: dict[str, Any]) -> str:
    return ",".join(csv_field(row[f]) for f in FIELDS[kind]) + "\n"


class Events:
    """Every event of DIR in event-time order: its stream (index into KINDS), its CSV line for
    COPY and its date_time. The three files are each in event order; they are merged by
    date_time (ties: persons, then auctions, then bids)."""

    def __init__(self, directory: Path, spool: Path | None = None, chunk: int = 10_000) -> None:
        """With `spool`, the events are not held in memory: each round of `chunk` events is
        written to that file as its COPY payloads (for 10M+ events; see `rounds`)."""
        self.meta = json.loads((directory / "meta.json").read_text())
        self.kinds = bytearray()
        self.lines: list[str] = []
        self.times: list[str] = []
        self.spool, self.chunk, self.count = spool, chunk, 0
        self._rounds: list[tuple[int, int, int]] = []  # spooled: (end, file offset, bytes)
        streams = [self._read(directory / f"{k}.jsonl", i) for i, k in enumerate(KINDS)]
        started, last = time.monotonic(), [0.0]
        total = int(self.meta.get("events", 0))
        out = spool.open("wb") if spool is not None else None
        try:
            for when, k, line in heapq.merge(*streams, key=lambda t: t[0]):
                self.kinds.append(k)
                self.lines.append(line)
                self.times.append(when)
                self.count += 1
                if out is not None and len(self.lines) == chunk:
                    self._spool_round(out)
                if self.count % 50_000 == 0:
                    progress("reading events", self.count, total, started, last)
            if out is not None and self.lines:
                self._spool_round(out)
        finally:
            if out is not None:
                out.close()
        if self.count % 50_000:
            progress("reading events", self.count, self.count, started, last)
        if total and total != self.count:
            raise SystemExit(f"{directory}: meta.json says {total} events, the files hold {self.count}")

    def _spool_round(self, out: Any) -> None:
        data = json.dumps(self.batch(0, len(self.lines))).encode()
        self._rounds.append((self.count, out.tell(), len(data)))
        out.write(data)
        self.kinds, self.lines, self.times = bytearray(), [], []  # spooled: throughput mode only

    def rounds(self, chunk: int) -> list[tuple[int, list[tuple[str, str]]]] | Iterator[tuple[int, list[tuple[str, str]]]]:
        """(end, payloads) per COPY round: built in memory, or read back from the spool file."""
        if self.spool is None:
            return [(b, self.batch(a, b)) for a, b in
                    ((a, min(a + chunk, self.count)) for a in range(0, self.count, chunk))]
        return self._read_rounds()

    def _read_rounds(self) -> Iterator[tuple[int, list[tuple[str, str]]]]:
        assert self.spool is not None
        with self.spool.open("rb") as f:
            for end, offset, size in self._rounds:
                f.seek(offset)
                yield end, [(stream, payload) for stream, payload in json.loads(f.read(size))]

    @staticmethod
    def _read(path: Path, k: int) -> Iterator[tuple[str, int, str]]:
        kind = KINDS[k]
        with path.open(encoding="utf-8") as f:
            for raw in f:
                row = json.loads(raw)
                yield row["date_time"], k, csv_line(kind, row)

    def __len__(self) -> int:
        return self.count

    def batch(self, start: int, end: int) -> list[tuple[str, str]]:
        """Events [start, end) as (stream, CSV payload) per stream, persons first."""
        per: list[list[str]] = [[], [], []]
        kinds, lines = self.kinds, self.lines
        for i in range(start, end):
            per[kinds[i]].append(lines[i])
        return [(KINDS[k], "".join(rows)) for k, rows in enumerate(per) if rows]


def copy_sql(stream: str) -> str:
    return f"COPY {stream} ({', '.join(FIELDS[stream])}) FROM STDIN WITH (FORMAT csv)"


def copy_rows(cur: psycopg.Cursor[Any], stream: str, payload: str) -> None:
    with cur.copy(copy_sql(stream)) as cp:
        cp.write(payload)


# ---- server and its processes -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`streamdb serve` on a fresh data directory, real Spark."""

    def __init__(self, workdir: Path, spark_master: str) -> None:
        self.log = workdir / "server.log"
        port = free_port()
        self.console_port = free_port()
        with self.log.open("wb") as err:
            # BENCH_SERVER_LOG_LEVEL=debug logs each micro-batch's durations (where its time went).
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamdb.cli", "serve", "--port", str(port),
                 "--console-port", str(self.console_port), "--data-dir",
                 str(workdir / "data"), "--spark-master", spark_master,
                 "--log-level", os.environ.get("BENCH_SERVER_LOG_LEVEL", "warning")],
                stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        self.dsn = f"postgresql://streamdb@127.0.0.1:{port}/streamdb"
        for _ in range(600):
            try:
                psycopg.connect(self.dsn).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not start: {self.log_tail()}")

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None)

    def wait_spark_ready(self, timeout: float = 300) -> float:
        """Block until the server's Spark runtime is up (its `streamdb_spark_ready` gauge); the
        seconds waited. Spark starts in the background when the server does, so a benchmark
        that times a view's pipeline alone waits for it first, as Flink's steady rate leaves out
        its cluster's start."""
        t0 = time.monotonic()
        url = f"http://127.0.0.1:{self.console_port}/metrics"
        while True:
            with urllib.request.urlopen(url, timeout=30) as response:
                if re.search(rb"^streamdb_spark_ready 1(\.0)?$", response.read(), re.M):
                    return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"Spark not ready after {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        for pid in descendants(self.proc.pid):  # a JVM left behind by a killed server
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime in ticks) of a process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _memory_kib(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) in KiB."""
    hwm = rss = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1])
                elif line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1])
    except OSError:
        pass
    return hwm, rss


def _process_table() -> dict[int, tuple[int, int]]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                table[int(name)] = st
    return table


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    table = _process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _command_name(pid: int) -> str:
    """The process's command name (java, python), so memory figures say whose they are."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "exited"


class Monitor(threading.Thread):
    """CPU and memory of a process tree over a window: start() marks its beginning, finish() its end."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.stopping = threading.Event()
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.hwm: dict[int, int] = {}
        self.seen: dict[int, int] = {}  # samples each process was in
        self.rss_peak = 0
        self.started = 0.0

    def _sample(self) -> None:
        table = _process_table()
        rss_sum = 0
        for pid in [self.root, *descendants(self.root, table)]:
            if pid not in table:
                continue
            self.last[pid] = table[pid][1]
            hwm, rss = _memory_kib(pid)
            self.hwm[pid] = max(self.hwm.get(pid, 0), hwm)
            self.seen[pid] = self.seen.get(pid, 0) + 1
            rss_sum += rss
        self.rss_peak = max(self.rss_peak, rss_sum)

    def start(self) -> None:
        self._sample()
        self.first = dict(self.last)
        self.started = time.monotonic()
        super().start()

    def run(self) -> None:
        while not self.stopping.wait(MONITOR_EVERY_S):
            self._sample()

    def finish(self) -> dict[str, Any]:
        self.stopping.set()
        self.join()
        self._sample()
        ticks = sum(t - self.first.get(pid, 0) for pid, t in self.last.items())
        lasting = {pid: kib for pid, kib in self.hwm.items() if self.seen.get(pid, 0) >= 2}
        by_process = {f"{_command_name(pid)}[{pid}]": round(kib / 1024, 1) for pid, kib in lasting.items()}
        transient = {f"{_command_name(pid)}[{pid}]": round(kib / 1024, 1) for pid, kib in self.hwm.items()
                     if pid not in lasting and kib}
        return {"cpu_seconds": ticks / CLK_TCK, "peak_rss_mib": sum(lasting.values()) / 1024,
                "peak_rss_sampled_mib": self.rss_peak / 1024, "processes": len(self.last),
                "peak_rss_by_process_mib": by_process, "peak_rss_transient_mib": transient,
                "monitored_seconds": time.monotonic() - self.started}


def show_query(conn: psycopg.Connection[Any], view: str) -> dict[str, Any] | None:
    cur = conn.execute("SHOW QUERIES")
    names = [d.name for d in cur.description or ()]
    for row in cur.fetchall():
        r = dict(zip(names, row, strict=True))
        if r.get("name") == view:
            return r
    return None


class LagSampler(threading.Thread):
    """SHOW QUERIES every 200 ms: the view's lag (input records not yet reflected) and epochs."""

    def __init__(self, dsn: str, view: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
        self.view = view
        self.stopping = threading.Event()
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stopping.wait(LAG_EVERY_S):
                r = show_query(self.conn, self.view)
                if r is not None:
                    self.samples.append({"t": time.monotonic(), "lag": r.get("lag"), "epochs": r.get("epochs"),
                                         "last_epoch_ms": r.get("last_epoch_ms"), "error": r.get("error")})
        except Exception as e:  # noqa: BLE001 - the server went away (timeout) or the view failed
            self.error = f"{type(e).__name__}: {e}"[:300]
        finally:
            self.conn.close()

    def finish(self, since: float | None = None, rate: float | None = None) -> dict[str, Any]:
        self.stopping.set()
        self.join(10)
        lags = [s["lag"] for s in self.samples if s["lag"] is not None and (since is None or s["t"] >= since)]
        epochs = [s["epochs"] for s in self.samples if s["epochs"] is not None]
        epoch_ms = [s["last_epoch_ms"] for s in self.samples if s["last_epoch_ms"] is not None]
        out: dict[str, Any] = {"samples": len(lags), "p50_records": pct(lags, 50), "p99_records": pct(lags, 99),
                               "max_records": max(lags, default=None),
                               "epochs": max(epochs) - min(epochs) if epochs else None,
                               "median_epoch_ms": statistics.median(epoch_ms) if epoch_ms else None}
        if rate:
            out["proxy_ms_p50"] = None if out["p50_records"] is None else out["p50_records"] / rate * 1000
            out["proxy_ms_p99"] = None if out["p99_records"] is None else out["p99_records"] / rate * 1000
        return out


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# ---- freshness probes -----------------------------------------------------------------------------


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_iso(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


FAR_FUTURE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
# The streams each query reads: its lag (records) becomes time at the rate of those streams only.
QUERY_INPUTS = {"q3": ("person", "auction"), "q4": ("auction", "bid"), "q8": ("person", "auction")}
STREAM_SHARE = {"person": gen.PERSON_PROPORTION / gen.TOTAL_PROPORTION,
                "auction": gen.AUCTION_PROPORTION / gen.TOTAL_PROPORTION,
                "bid": gen.BID_PROPORTION / gen.TOTAL_PROPORTION}


def input_rate(query: str, rate: float) -> float:
    """Events/s reaching the query's input streams when `rate` events/s are fed in total."""
    return rate * sum(STREAM_SHARE[s] for s in QUERY_INPUTS.get(query, ("bid",)))


def probe(query: str, n: int, now: str) -> tuple[list[tuple[str, dict[str, Any]]], str] | None:
    """Marker events for probe n of a query and the condition that finds them in its view, or
    None if the query has no observable marker. `now` is the event time of the feed so far;
    windowed top-1 queries (q5, q7) put their marker alone in a window far in the future, where
    it is the top bid by construction."""
    m = MARKER_BASE + n
    url = "https://www.nexmark.com/marker/probe/run/item.htm?query=1"

    def bid(**kw: Any) -> tuple[str, dict[str, Any]]:
        row = {"auction": m, "bidder": m, "price": 1000, "channel": "marker", "url": url, "date_time": now,
               "extra": "marker"}
        return "bid", {**row, **kw}

    def person(**kw: Any) -> tuple[str, dict[str, Any]]:
        row = {"id": m, "name": "Marker Probe", "email_address": "marker@probe.com",
               "credit_card": "0000 0000 0000 0000", "city": "Bend", "state": "OR", "date_time": now,
               "extra": "marker"}
        return "person", {**row, **kw}

    def auction(**kw: Any) -> tuple[str, dict[str, Any]]:
        row = {"id": m, "item_name": "marker", "description": "marker probe", "initial_bid": 100,
               "reserve": 200, "date_time": now, "expires": iso(parse_iso(now) + dt.timedelta(hours=1)),
               "seller": m, "category": 10, "extra": "marker"}
        return "auction", {**row, **kw}

    later = iso(FAR_FUTURE + dt.timedelta(minutes=n))
    if query in ("q0", "q1", "q17", "q22"):
        return [bid()], f"auction = {m}"
    if query == "q2":
        a = 123 * (MARKER_BASE // 100 + n)  # passes auction % 123 = 0
        return [bid(auction=a)], f"auction = {a}"
    if query == "q14":
        return [bid(price=10_000_000)], f"auction = {m}"  # 0.908 * price within (1e6, 5e7)
    if query == "q12":
        return [bid()], f"bidder = {m}"
    if query == "q3":
        return [person(state="OR"), auction(category=10)], f"id = {m}"
    if query == "q4":  # its own category: a new output row
        return [auction(category=m), bid()], f"category = {m}"
    if query in ("q5", "q7"):
        return [bid(date_time=later)], f"auction = {m}"
    if query == "q8":  # registers and sells in the same window
        return [person(), auction()], f"id = {m}"
    return None


class Feeder(threading.Thread):
    """Feeds the events in order at `rate` events/s, a COPY per stream every ~20 ms; a batch
    carries what is due (at most 0.5 s worth when behind)."""

    def __init__(self, dsn: str, events: Events, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
        self.events, self.rate, self.seconds = events, rate, seconds
        self.stopping = threading.Event()
        self.sent = 0
        self.now = events.times[0] if len(events) else iso(dt.datetime.fromtimestamp(0, dt.UTC))
        self.started = self.ended = 0.0
        self.copy_ms: list[float] = []
        self.error: str | None = None
        self.lock = threading.Lock()

    def run(self) -> None:
        total = len(self.events)
        max_batch = max(1, int(self.rate * 0.5))
        self.started = time.monotonic()
        tick = 0
        last = [0.0]
        try:
            with self.conn.cursor() as cur:
                while not self.stopping.is_set() and self.sent < total:
                    elapsed = time.monotonic() - self.started
                    if elapsed >= self.seconds:
                        break
                    due = min(int(self.rate * elapsed) - self.sent, max_batch, total - self.sent)
                    if due > 0:
                        t0 = time.monotonic()
                        for stream, payload in self.events.batch(self.sent, self.sent + due):
                            copy_rows(cur, stream, payload)
                        self.copy_ms.append((time.monotonic() - t0) * 1000)
                        with self.lock:
                            self.sent += due
                            self.now = self.events.times[self.sent - 1]
                        progress("feeding", self.sent, min(total, int(self.rate * self.seconds)), self.started, last)
                    tick += 1
                    pause = self.started + tick * FEED_TICK_S - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    else:
                        tick = int((time.monotonic() - self.started) / FEED_TICK_S)
        except Exception as e:  # noqa: BLE001 - reported in the run
            self.error = f"{type(e).__name__}: {e}"[:500]
        finally:
            self.ended = time.monotonic()
            self.conn.close()

    def event_time(self) -> str:
        with self.lock:
            return self.now


class Prober(threading.Thread):
    """One marker at a time: COPY it, poll the view every 20 ms until it shows."""

    def __init__(self, dsn: str, query: str, view: str, feeder: Feeder, start_at: float) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None)
        self.query, self.view, self.feeder, self.start_at = query, view, feeder, start_at
        self.stopping = threading.Event()  # stop now
        self.finishing = threading.Event()  # start no new probe; the one in flight completes
        self.fresh_ms: list[float] = []
        self.seen_at: list[float] = []  # when each of fresh_ms was seen
        self.poll_ms: list[float] = []
        self.timeouts = 0
        self.error: str | None = None

    def run(self) -> None:
        n = 0
        try:
            if self.stopping.wait(max(0.0, self.start_at - time.monotonic())):
                return
            with self.conn.cursor() as cur:
                while not self.stopping.is_set() and not self.finishing.is_set():
                    began = time.monotonic()
                    n += 1
                    spec = probe(self.query, n, self.feeder.event_time())
                    if spec is None:
                        return
                    rows, cond = spec
                    for stream, row in rows:
                        copy_rows(cur, stream, csv_line(stream, row))
                    acked = time.monotonic()
                    sql = f"SELECT 1 FROM {self.view} WHERE {cond} LIMIT 1"
                    while True:
                        t0 = time.monotonic()
                        seen = cur.execute(sql).fetchone() is not None
                        t1 = time.monotonic()
                        self.poll_ms.append((t1 - t0) * 1000)
                        if seen:
                            self.fresh_ms.append((t1 - acked) * 1000)
                            self.seen_at.append(t1)
                            break
                        if t1 - acked > PROBE_TIMEOUT_S:
                            self.timeouts += 1
                            break
                        if self.stopping.wait(POLL_EVERY_S):
                            return
                    self.finishing.wait(max(0.0, began + PROBE_EVERY_S - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - reported in the run
            self.error = f"{type(e).__name__}: {e}"[:500]
        finally:
            self.conn.close()


# ---- one run ----------------------------------------------------------------------------------------


class RunFailed(Exception):
    pass


def flush(conn: psycopg.Connection[Any], label: str) -> None:
    """FLUSH until it returns: one waits at most 5 minutes (the server's FLUSH timeout), and a
    view millions of events behind the COPYs (q5 at 20M events) needs longer. --timeout bounds
    the run."""
    while True:
        try:
            conn.execute("FLUSH")
            return
        except psycopg.errors.QueryCanceled as e:
            if "FLUSH timed out" not in str(e):
                raise
            log(f"{label}: FLUSH timed out with the view still behind; again")


def setup(server: Server, query_sql: str, view: str, with_view: bool = True) -> tuple[psycopg.Connection[Any], float]:
    conn = server.connect()
    # The server's default statement_timeout (5 min) would cancel the final FLUSH of a long run
    # (q5 at 20M events); --timeout bounds the run instead.
    conn.execute("SET statement_timeout = 0")
    for st in statements((QUERIES_DIR / "ddl.sql").read_text()):
        conn.execute(st)
    if not with_view:
        return conn, 0.0
    return conn, create_view(conn, query_sql, view)


def create_view(conn: psycopg.Connection[Any], query_sql: str, view: str) -> float:
    """Creates the query's view and waits until it reflects every acknowledged write; seconds."""
    t0 = time.monotonic()
    for st in statements(query_sql):
        conn.execute(st)
    conn.execute("FLUSH")
    create_s = time.monotonic() - t0
    r = show_query(conn, view)
    if r is None:
        raise RunFailed(f"the query file created no view named {view}")
    return create_s


def view_state(conn: psycopg.Connection[Any], view: str) -> dict[str, Any]:
    r = show_query(conn, view) or {}
    rows = conn.execute(f"SELECT count(*) FROM {view}").fetchone()
    return {"view_rows": rows[0] if rows else None, "view_status": r.get("status"), "view_epochs": r.get("epochs"),
            "view_error": r.get("error"), "spark_job": r.get("spark_job")}


def run_throughput(query: str, query_sql: str, events: Events, args: argparse.Namespace,
                   label: str) -> dict[str, Any]:
    view = f"nexmark_{query}"
    with tempfile.TemporaryDirectory(prefix=f"nexmark-{query}-") as d:
        log(f"{label}: starting server")
        server = Server(Path(d), args.spark_master)
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            server.stop()

        watchdog = threading.Timer(args.timeout, on_timeout)
        threads: list[Any] = []
        try:
            conn, create_s = setup(server, query_sql, view, with_view=not args.preload)
            if args.preload:
                return _preloaded(server, conn, query_sql, view, events, args, label, watchdog, timed_out)
            log(f"{label}: view created in {create_s:.1f} s; loading {len(events):,} events by COPY")
            monitor = Monitor(server.proc.pid)
            lag = LagSampler(server.dsn, view)
            threads += [monitor, lag]
            rounds = events.rounds(args.chunk)  # prepared before the clock starts (or spooled on disk)
            copy_ms: list[float] = []
            watchdog.start()
            monitor.start()
            lag.start()
            t0 = time.monotonic()
            last = [0.0]
            try:
                with conn.cursor() as cur:
                    for end, batch in rounds:
                        c0 = time.monotonic()
                        for stream, payload in batch:
                            copy_rows(cur, stream, payload)
                        copy_ms.append((time.monotonic() - c0) * 1000)
                        progress(f"{label} ingest", end, len(events), t0, last)
                t_ingest = time.monotonic()
                log(f"{label}: ingested in {t_ingest - t0:.1f} s; FLUSH")
                flush(conn, label)
                t1 = time.monotonic()
            except psycopg.Error as e:
                if timed_out.is_set():
                    raise RunFailed(f"timeout: not done after {args.timeout:.0f} s (--timeout)") from None
                raise RunFailed(f"{type(e).__name__}: {e}"[:500]) from None
            stats = monitor.finish()
            lag_stats = lag.finish()
            watchdog.cancel()
            seconds = t1 - t0
            eps = len(events) / seconds
            cores = stats["cpu_seconds"] / seconds if seconds > 0 else None
            result = {"status": "ok", "seconds": seconds, "events_per_s": eps, **stats, "cores_used": cores,
                      "events_per_s_per_core": eps / cores if cores else None,
                      "ingest_seconds": t_ingest - t0, "ingest_events_per_s": len(events) / (t_ingest - t0),
                      "flush_seconds": t1 - t_ingest, "create_seconds": create_s,
                      "copy_ms": {"n": len(copy_ms), "p50": pct(copy_ms, 50), "max": max(copy_ms, default=None)},
                      "lag": lag_stats, **view_state(conn, view), "loadavg": os.getloadavg()}
            if result.get("view_error"):
                raise RunFailed(f"view failed: {result['view_error']}"[:500])
            conn.close()
            return result
        except RunFailed:
            kept = keep_server_log(server, query)
            log(f"{label}: failed; the server's log is kept in {kept}")
            raise
        finally:
            watchdog.cancel()
            for t in threads:
                t.stopping.set()
            server.stop()


def _preloaded(server: Server, conn: psycopg.Connection[Any], query_sql: str, view: str, events: Events,
               args: argparse.Namespace, label: str, watchdog: threading.Timer,
               timed_out: threading.Event) -> dict[str, Any]:
    """--preload: every event is COPYed before the view exists; then the view is created and
    FLUSHed. events/s = N / (CREATE -> FLUSH returned): what the view's pipeline processes
    per second reading the log (its backfill), without the COPYs competing for the cores, the
    analogue of Flink's steady rate over its files."""
    log(f"{label}: loading {len(events):,} events by COPY before the view exists")
    t_load = time.monotonic()
    last = [0.0]
    with conn.cursor() as cur:
        for end, batch in events.rounds(args.chunk):
            for stream, payload in batch:
                copy_rows(cur, stream, payload)
            progress(f"{label} preload", end, len(events), t_load, last)
    load_s = time.monotonic() - t_load
    spark_wait = server.wait_spark_ready()
    log(f"{label}: loaded in {load_s:.1f} s, then {spark_wait:.1f} s more until Spark was ready; creating the view")
    monitor = Monitor(server.proc.pid)
    watchdog.start()
    monitor.start()
    t0 = time.monotonic()
    try:
        create_view(conn, query_sql, view)
    except psycopg.Error as e:
        monitor.stopping.set()
        if timed_out.is_set():
            raise RunFailed(f"timeout: not done after {args.timeout:.0f} s (--timeout)") from None
        raise RunFailed(f"{type(e).__name__}: {e}"[:500]) from None
    seconds = time.monotonic() - t0
    stats = monitor.finish()
    watchdog.cancel()
    eps = len(events) / seconds
    cores = stats["cpu_seconds"] / seconds if seconds > 0 else None
    result = {"status": "ok", "preloaded": True, "seconds": seconds, "events_per_s": eps, **stats,
              "cores_used": cores, "events_per_s_per_core": eps / cores if cores else None,
              "ingest_seconds": load_s, "ingest_events_per_s": len(events) / load_s, "flush_seconds": seconds,
              "create_seconds": seconds, "spark_wait_seconds": spark_wait, **view_state(conn, view),
              "loadavg": os.getloadavg()}
    if result.get("view_error"):
        raise RunFailed(f"view failed: {result['view_error']}"[:500])
    conn.close()
    return result


def keep_server_log(server: Server, query: str) -> Path:
    """A failed run's server log, copied out of its temporary directory (which goes away)."""
    out = ROOT / "bench" / "results" / "tmp" / "logs" / f"nexmark-{query}-server-{time.strftime('%H%M%S')}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(server.log, out)
    return out


def run_freshness(query: str, query_sql: str, events: Events, args: argparse.Namespace,
                  label: str) -> dict[str, Any]:
    view = f"nexmark_{query}"
    with tempfile.TemporaryDirectory(prefix=f"nexmark-{query}-") as d:
        log(f"{label}: starting server")
        server = Server(Path(d), args.spark_master)
        threads: list[Any] = []
        try:
            conn, create_s = setup(server, query_sql, view)
            needed = int(args.rate * args.seconds)
            log(f"{label}: view created in {create_s:.1f} s; feeding {args.rate:,.0f} events/s for {args.seconds:g} s"
                f" ({min(needed, len(events)):,} events), probing after {args.warmup:g} s")
            monitor = Monitor(server.proc.pid)
            lag = LagSampler(server.dsn, view)
            feeder = Feeder(server.dsn, events, args.rate, args.seconds)
            has_marker = probe(query, 0, events.times[0] if len(events) else "2024-01-01T00:00:00.000Z") is not None
            prober = Prober(server.dsn, query, view, feeder, time.monotonic() + args.warmup) if has_marker else None
            threads += [monitor, lag, feeder] + ([prober] if prober is not None else [])
            monitor.start()
            lag.start()
            t0 = time.monotonic()
            feeder.start()
            if prober is not None:
                prober.start()
            feeder.join()
            t1 = time.monotonic()
            stats = monitor.finish()
            lag_stats = lag.finish(since=t0 + args.warmup, rate=input_rate(query, args.rate))
            if prober is not None:  # the probe in flight completes (its marker was written under load)
                prober.finishing.set()
                prober.join(PROBE_TIMEOUT_S + 5)
                prober.stopping.set()
                prober.join(5)
            if feeder.error:
                raise RunFailed(f"feeding failed: {feeder.error}")
            if prober is not None and prober.error:
                raise RunFailed(f"probe failed: {prober.error}")
            seconds = feeder.ended - feeder.started
            log(f"{label}: fed {feeder.sent:,} events in {seconds:.1f} s; FLUSH")
            f0 = time.monotonic()
            conn.execute("FLUSH")
            flush_s = time.monotonic() - f0
            eps = feeder.sent / seconds if seconds > 0 else 0.0
            wall = t1 - t0
            cores = stats["cpu_seconds"] / wall if wall > 0 else None
            if prober is not None:
                xs = prober.fresh_ms
                fresh: dict[str, Any] = {"method": "marker", "n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99),
                                         "max": max(xs, default=None), "timeouts": prober.timeouts,
                                         "seen_after_feed_ended": sum(t > t1 for t in prober.seen_at),
                                         "poll_ms_p50": pct(prober.poll_ms, 50)}
            else:
                fresh = {"method": "lag_proxy", "n": lag_stats["samples"], "p50": lag_stats.get("proxy_ms_p50"),
                         "p99": lag_stats.get("proxy_ms_p99"), "max": None}
            result = {"status": "ok", "seconds": seconds, "events_per_s": eps, "events_fed": feeder.sent,
                      "target_rate": args.rate, "feed_exhausted": feeder.sent >= len(events) and seconds < args.seconds,
                      **stats, "cores_used": cores, "events_per_s_per_core": eps / cores if cores else None,
                      "ingest_seconds": seconds, "copy_ms": {"n": len(feeder.copy_ms), "p50": pct(feeder.copy_ms, 50),
                                                             "max": max(feeder.copy_ms, default=None)},
                      "freshness_ms": fresh, "lag": lag_stats, "final_flush_seconds": flush_s,
                      "create_seconds": create_s, **view_state(conn, view), "loadavg": os.getloadavg()}
            if result.get("view_error"):
                raise RunFailed(f"view failed: {result['view_error']}"[:500])
            conn.close()
            return result
        except psycopg.Error as e:
            raise RunFailed(f"{type(e).__name__}: {e}"[:500]) from None
        finally:
            for t in threads:
                t.stopping.set()
            server.stop()


# ---- the whole benchmark -----------------------------------------------------------------------------


MARKER_METHOD = ("marker: one marker event at a time (ids >= 1e12; for joins a matching person/auction too) "
                 "written by COPY while the feed runs, the view polled every 20 ms until it shows it; "
                 "ms from the COPY acknowledged to the poll that saw it returned. p50/p99: median across "
                 "runs of each run's p50/p99")
LAG_METHOD = ("lag_proxy: SHOW QUERIES' lag (input records not yet reflected in the view) sampled every "
              "200 ms, divided by the rate of the streams the query reads; a proxy, not a measured latency. "
              "p50/p99: median across runs")


def summarize(name: str, runs: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    ok = [r for r in runs if r.get("status") == "ok"]
    failed = [r for r in runs if r.get("status") != "ok"]
    out: dict[str, Any] = {"status": "ok" if ok and not failed else "failed",
                           "reason": failed[0].get("reason") if failed else None, "runs": runs}
    eps = [r["events_per_s"] for r in ok]
    out["events_per_s"] = ({"median": statistics.median(eps), "min": min(eps), "max": max(eps)} if eps
                           else {"median": None, "min": None, "max": None})
    per_core = [r["events_per_s_per_core"] for r in ok if r.get("events_per_s_per_core")]
    out["events_per_s_per_core"] = {"median": statistics.median(per_core) if per_core else None}
    cores = [r["cores_used"] for r in ok if r.get("cores_used") is not None]
    out["cores_used"] = {"median": statistics.median(cores) if cores else None}
    rss = [r["peak_rss_mib"] for r in ok]
    out["peak_rss_mib"] = {"max": max(rss) if rss else None}
    if mode == "freshness":
        f = [r["freshness_ms"] for r in ok]
        p50 = [x["p50"] for x in f if x.get("p50") is not None]
        p99 = [x["p99"] for x in f if x.get("p99") is not None]
        method = f[0]["method"] if f else ("marker" if probe(name, 0, "2024-01-01T00:00:00.000Z") else "lag_proxy")
        out["freshness_ms"] = {"p50": statistics.median(p50) if p50 else None,
                               "p99": statistics.median(p99) if p99 else None,
                               "method": MARKER_METHOD if method == "marker" else LAG_METHOD}
    return out


def not_run(status: str, reason: str, mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "reason": reason, "runs": [],
                           "events_per_s": {"median": None, "min": None, "max": None}}
    if mode == "freshness":
        out["freshness_ms"] = {"p50": None, "p99": None, "method": None}
    return out


def version() -> str:
    """The package version, plus the commit read from .git (no git command is run)."""
    try:
        v = importlib.metadata.version("streamdb")
    except importlib.metadata.PackageNotFoundError:
        v = "unknown"
    try:
        head = (ROOT / ".git" / "HEAD").read_text().strip()
        sha = head
        if head.startswith("ref: "):
            ref = head[5:]
            path = ROOT / ".git" / ref
            if path.exists():
                sha = path.read_text().strip()
            else:
                packed = (ROOT / ".git" / "packed-refs").read_text().splitlines()
                sha = next(line.split()[0] for line in packed if line.endswith(" " + ref))
        return f"{v}+g{sha[:10]}"
    except (OSError, StopIteration):
        return v


def machine() -> dict[str, Any]:
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    except (OSError, StopIteration):
        pass
    return {"cores": os.cpu_count(), "mem_gib": round(mem_kib / 1024**2, 1), "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_at_start": os.getloadavg()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Nexmark queries on StreamDB, each alone on a fresh server.")
    ap.add_argument("--events", type=Path, required=True, help="directory written by bench/nexmark/generator.py")
    ap.add_argument("--queries", default=",".join(ALL_QUERIES), help="comma-separated, e.g. q0,q1 (default: all)")
    ap.add_argument("--mode", choices=("throughput", "freshness"), required=True)
    ap.add_argument("--rate", type=float, default=10_000, help="freshness: events/s fed (default 10000)")
    ap.add_argument("--runs", type=int, default=3, help="runs per query, each on a fresh server (default 3)")
    ap.add_argument("--seconds", type=float, default=30, help="freshness: seconds of feeding (default 30)")
    ap.add_argument("--out", type=Path, required=True, help="the JSON result")
    ap.add_argument("--warmup", type=float, default=5, help="freshness: seconds before the first probe (default 5)")
    ap.add_argument("--chunk", type=int, default=10_000, help="throughput: events per COPY round (default 10000)")
    ap.add_argument("--timeout", type=float, default=1800, help="throughput: give up a run after this (default 1800 s)")
    ap.add_argument("--preload", action="store_true",
                    help="throughput: COPY every event first, then create the view; events/s = N / "
                         "(CREATE -> FLUSH): the view's processing rate alone (its backfill)")
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--spool", type=Path, default=None,
                    help="throughput: keep the COPY payloads in this file, not in memory (10M+ events)")
    args = ap.parse_args(argv)
    queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    if args.runs < 1 or args.rate <= 0 or args.seconds <= 0 or args.chunk < 1:
        ap.error("--runs, --rate, --seconds and --chunk must be positive")
    if args.spool is not None and args.mode != "throughput":
        ap.error("--spool is for --mode throughput")
    log(f"reading {args.events}")
    events = Events(args.events, args.spool, args.chunk)
    result: dict[str, Any] = {
        "system": "streamdb", "version": version(), "machine": machine(), "mode": args.mode, "events": len(events),
        "rate": args.rate if args.mode == "freshness" else None, "runs": args.runs,
        "seconds": args.seconds if args.mode == "freshness" else None, "spark_master": args.spark_master,
        "events_dir": str(args.events), "generator": events.meta,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "queries": {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runner = run_throughput if args.mode == "throughput" else run_freshness
    for q in queries:
        if not (QUERIES_DIR / f"{q}.sql").exists():
            log(f"{q}: no such query file {QUERIES_DIR / (q + '.sql')}")
            result["queries"][q] = not_run("failed", "no such query file", args.mode)
            continue
        sql, unsupported = read_query(q)
        if unsupported is not None:
            log(f"{q}: skipped, unsupported: {unsupported}")
            result["queries"][q] = not_run("unsupported", unsupported, args.mode)
            continue
        runs: list[dict[str, Any]] = []
        for i in range(args.runs):
            label = f"{q} run {i + 1}/{args.runs}"
            try:
                r = runner(q, sql, events, args, label)
                fresh = r.get("freshness_ms")
                log(f"{label}: {r['events_per_s']:,.0f} events/s, {r['cpu_seconds']:.1f} CPU s "
                    f"({r['cores_used']:.2f} cores), peak {r['peak_rss_mib']:,.0f} MiB"
                    + (f", freshness p50 {_ms(fresh['p50'])} p99 {_ms(fresh['p99'])} ({fresh['method']}, n={fresh['n']})"
                       if fresh else f", ingest {r['ingest_seconds']:.1f} s + FLUSH {r['flush_seconds']:.1f} s"))
            except (RunFailed, RuntimeError, psycopg.Error) as e:
                log(f"{label}: FAILED: {e}")
                r = {"status": "failed", "reason": str(e)[:500]}
            runs.append(r)
            result["queries"][q] = summarize(q, runs, args.mode)
            args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        result["queries"][q] = summarize(q, runs, args.mode)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    result["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_table(result)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


def print_table(result: dict[str, Any]) -> None:
    def f(v: Any, spec: str = ",.0f") -> str:
        return "-" if v is None else format(v, spec)

    fresh = result["mode"] == "freshness"
    print(f"\nStreamDB Nexmark, {result['mode']}, {result['events']:,} events, {result['machine']['cores']} cores",
          file=sys.stderr)
    print(f"{'query':6s} {'status':11s} {'events/s':>10s} {'per core':>10s} {'cores':>6s} {'peak MiB':>9s}"
          + (f" {'p50 ms':>8s} {'p99 ms':>8s}" if fresh else ""), file=sys.stderr)
    for q, r in result["queries"].items():
        line = (f"{q:6s} {r['status']:11s} {f(r['events_per_s']['median']):>10s} "
                f"{f(r.get('events_per_s_per_core', {}).get('median')):>10s} "
                f"{f(r.get('cores_used', {}).get('median'), '.2f'):>6s} {f(r.get('peak_rss_mib', {}).get('max')):>9s}")
        if fresh:
            fm = r.get("freshness_ms") or {}
            line += f" {f(fm.get('p50')):>8s} {f(fm.get('p99')):>8s}"
        if r["status"] != "ok":
            line += f"  {r['reason']}"
        print(line, file=sys.stderr)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    # Stopped with SIGTERM (`kill`, `pkill`), the run still stops its server and the JVM under it
    # (the `finally` blocks), instead of leaving them running under the next benchmark.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    main()
