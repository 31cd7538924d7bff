"""kill -9 cycles against a real server: continuous writes, SIGKILL at random moments, restart, verify.

A stream, a keyed table and four materialized views over them (a filter, a GROUP BY count/sum, a
view on a view and a join of the table with a view). Writer threads insert small batches of rows
with unique ids into the stream and insert/update/delete rows of the table; each writer logs to a
file ONLY what the server acknowledged. Every cycle the harness lets them write for 0.5-3 s, kills
the server with SIGKILL, restarts it on the same data directory and waits (FLUSH, then compare)
until every view equals its batch recomputation: the same SELECT run as a plain query over the
base relations. After the last cycle it counts acknowledged stream rows that are missing or
duplicated and compares the table with the acknowledged final state.

Used by tests/test_e2e_faults.py (a few cycles) and tests/faults/soak.py (`make soak`, 50 cycles).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg

CONVERGE_TIMEOUT_SECONDS = 60.0
GROUPS = 7  # stream rows fall into groups 0..6; the table's keys are the same numbers (the join)
STREAM_WRITERS = 2
BATCH_ROWS = 5

# Event time runs this much faster than the wall clock, so windows close (the watermark passes
# them) within a few seconds of writing, however fast the machine runs the cycles.
EVENT_TIME_SPEEDUP = 20
_CLOCK_START = dt.datetime.now(dt.UTC).replace(tzinfo=None)


def event_time() -> dt.datetime:
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return _CLOCK_START + (now - _CLOCK_START) * EVENT_TIME_SPEEDUP


SCHEMA = [
    # ts is the writers' clock, sped up (event_time): out of order by well under a second, so with
    # a 30 s watermark delay no event is late and the EMIT ON WINDOW CLOSE view has a plain batch
    # recomputation.
    "CREATE STREAM ev (id BIGINT, grp INT, amount INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '30' SECOND) "
    "WITH (partitions = 2)",
    "CREATE TABLE acct (k INT PRIMARY KEY, v INT)",
    "CREATE MATERIALIZED VIEW ev_big AS SELECT id, grp, amount FROM ev WHERE amount >= 50",
    "CREATE MATERIALIZED VIEW ev_by_grp AS SELECT grp, count(*) AS n, sum(amount) AS total FROM ev GROUP BY grp",
    "CREATE MATERIALIZED VIEW big_by_grp AS SELECT grp, count(*) AS n FROM ev_big GROUP BY grp",
    "CREATE MATERIALIZED VIEW acct_activity AS SELECT a.k, a.v, g.n FROM acct a JOIN ev_by_grp g ON a.k = g.grp",
    "CREATE MATERIALIZED VIEW ev_seconds AS SELECT window_start, window_end, count(*) AS n, sum(amount) AS total "
    "FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end EMIT ON WINDOW CLOSE",
]

# Each view's contents, and the same query over the base relations only (its batch recomputation).
VIEW_CHECKS: dict[str, tuple[str, str]] = {
    "ev_big": ("SELECT id, grp, amount FROM ev_big",
               "SELECT id, grp, amount FROM ev WHERE amount >= 50"),
    "ev_by_grp": ("SELECT grp, n, total FROM ev_by_grp",
                  "SELECT grp, count(*), sum(amount) FROM ev GROUP BY grp"),
    "big_by_grp": ("SELECT grp, n FROM big_by_grp",
                   "SELECT grp, count(*) FROM ev WHERE amount >= 50 GROUP BY grp"),
    "acct_activity": ("SELECT k, v, n FROM acct_activity",
                      "SELECT a.k, a.v, g.n FROM acct a JOIN (SELECT grp, count(*) AS n FROM ev GROUP BY grp) g "
                      "ON a.k = g.grp"),
    # Closed windows only: those ending by the watermark (the largest event time less 30 s).
    "ev_seconds": ("SELECT window_start, window_end, n, total FROM ev_seconds",
                   "SELECT window_start, window_end, count(*), sum(amount) FROM TUMBLE(ev, ts, INTERVAL '1' SECOND) "
                   "GROUP BY window_start, window_end "
                   "HAVING window_end <= (SELECT max(ts) - INTERVAL '30' SECOND FROM ev)"),
}


class Connectable(Protocol):
    def connect(self, **kwargs: Any) -> psycopg.Connection: ...


class Server(Connectable, Protocol):
    """What the driver needs of a server (tests/conftest.py's ServerProcess)."""

    def kill9(self) -> None: ...

    def restart(self) -> None: ...


@dataclass
class Figures:
    cycles: int = 0
    seed: int = 0
    rows_acknowledged: int = 0
    rows_in_flight_at_kill: int = 0  # sent but never acknowledged: may or may not be stored
    rows_stored: int = 0
    missing: int = 0
    duplicates: int = 0
    table_ops_acknowledged: int = 0
    table_mismatches: int = 0
    views_not_converged: int = 0
    unexpected_errors: list[str] = field(default_factory=list)
    mismatch_details: list[str] = field(default_factory=list)
    restart_seconds: list[float] = field(default_factory=list)
    converge_seconds: list[float] = field(default_factory=list)
    spark_ready_seconds: list[float] = field(default_factory=list)  # from process start, per the server log
    view_rows: dict[str, int] = field(default_factory=dict)  # at the end (a check over no rows proves little)
    # Views whose count(*) (the reader's kept count, not a count of rows read) differs from the
    # rows a read of the view returns, at the end.
    view_counts_wrong: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicates or self.table_mismatches or self.views_not_converged
                    or self.unexpected_errors or self.view_counts_wrong)

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        for name in ("restart_seconds", "converge_seconds", "spark_ready_seconds"):
            values = out[name]
            out[name] = [round(v, 2) for v in values]
            out[name.replace("_seconds", "_seconds_max")] = round(max(values), 2) if values else None
            out[name.replace("_seconds", "_seconds_median")] = round(statistics.median(values), 2) if values else None
        return out


def _lost_connection(conn: psycopg.Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - the server is gone; nothing to close cleanly
            pass


class _Writer(threading.Thread):
    """Writes while `running` is set; after a lost connection waits for it and reconnects."""

    def __init__(self, server: Server, running: threading.Event, stop: threading.Event, log_path: Path,
                 errors: list[str]) -> None:
        super().__init__(daemon=True, name=type(self).__name__)
        self.server, self.running, self.stop, self.errors = server, running, stop, errors
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed when the thread ends

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        try:
            while not self.stop.is_set():
                if not self.running.wait(timeout=0.2):
                    continue
                if conn is None:
                    try:
                        conn = self.server.connect(connect_timeout=2)
                        self.reconnected(conn)
                    except psycopg.OperationalError:
                        _lost_connection(conn)
                        conn = None
                        time.sleep(0.2)
                        continue
                try:
                    self.write_once(conn)
                except psycopg.OperationalError:
                    # The server died mid-statement: that write was never acknowledged.
                    self.in_flight_lost()
                    _lost_connection(conn)
                    conn = None
                except psycopg.Error as e:
                    self.errors.append(f"{self.name}: {e.sqlstate}: {e}")
                    self.not_applied()
        except Exception as e:  # noqa: BLE001 - reported as a figure, never silently dropped
            self.errors.append(f"{self.name}: {type(e).__name__}: {e}")
        finally:
            _lost_connection(conn)
            self.log.close()

    def acknowledged(self, record: dict[str, Any]) -> None:
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()

    def write_once(self, conn: psycopg.Connection) -> None:
        raise NotImplementedError

    def in_flight_lost(self) -> None:
        """The statement in flight may or may not have committed."""

    def not_applied(self) -> None:
        """The server answered the statement in flight with an error: it did not commit."""

    def reconnected(self, conn: psycopg.Connection) -> None:
        """Connected (again): settle what was in flight when the server died."""


class _StreamWriter(_Writer):
    def __init__(self, index: int, rng: random.Random, *args: Any) -> None:
        super().__init__(*args)
        self.name = f"stream-writer-{index}"
        self.next_id = index
        self.rng = rng
        self.in_flight: list[tuple[int, int, int, dt.datetime]] = []
        self.uncertain = 0

    def write_once(self, conn: psycopg.Connection) -> None:
        rows = []
        now = event_time()
        for _ in range(BATCH_ROWS):
            rows.append((self.next_id, self.next_id % GROUPS, self.rng.randrange(100), now))
            self.next_id += STREAM_WRITERS  # ids are never reused, even after an unacknowledged batch
        self.in_flight = rows
        conn.execute("INSERT INTO ev VALUES " + ", ".join(["(%s, %s, %s, %s)"] * len(rows)),
                     [v for row in rows for v in row])
        for row in rows:
            self.acknowledged({"id": row[0], "grp": row[1], "amount": row[2]})
        self.in_flight = []

    def in_flight_lost(self) -> None:
        self.uncertain += len(self.in_flight)
        self.in_flight = []

    def not_applied(self) -> None:
        self.in_flight = []


class _TableWriter(_Writer):
    """Inserts, updates and deletes rows of acct, keeping the acknowledged state in `model`."""

    def __init__(self, rng: random.Random, mismatches: list[str], *args: Any) -> None:
        super().__init__(*args)
        self.name = "table-writer"
        self.rng = rng
        self.model: dict[int, int] = {}
        self.next_value = 1
        self.pending: tuple[int, int | None, int | None] | None = None  # key, value before, value after
        self.mismatches = mismatches
        self.ops = 0

    def write_once(self, conn: psycopg.Connection) -> None:
        key = self.rng.randrange(GROUPS)
        before = self.model.get(key)
        value = self.next_value
        self.next_value += 1
        if before is None:
            sql, params, after = "INSERT INTO acct VALUES (%s, %s)", (key, value), value
        elif self.rng.random() < 0.25:
            sql, params, after = "DELETE FROM acct WHERE k = %s", (key,), None
        else:
            sql, params, after = "UPDATE acct SET v = %s WHERE k = %s", (value, key), value
        self.pending = (key, before, after)
        conn.execute(sql, params)
        self.settle(after)
        self.acknowledged({"k": key, "v": after})
        time.sleep(0.01)  # the table changes a few dozen times a second, the stream much more often

    def settle(self, value: int | None) -> None:
        assert self.pending is not None
        key = self.pending[0]
        if value is None:
            self.model.pop(key, None)
        else:
            self.model[key] = value
        self.pending = None
        self.ops += 1

    def not_applied(self) -> None:
        self.pending = None

    def reconnected(self, conn: psycopg.Connection) -> None:
        if self.pending is None:
            return
        key, before, after = self.pending
        row = conn.execute("SELECT v FROM acct WHERE k = %s", (key,)).fetchone()
        stored = None if row is None else row[0]
        if stored == after:
            self.settle(after)
            self.acknowledged({"k": key, "v": after, "settled_after_restart": True})
        elif stored == before:
            self.pending = None
        else:
            self.mismatches.append(f"key {key}: stored {stored}, expected {before} or {after} after a kill")
            self.pending = None


def _rows(conn: psycopg.Connection, sql: str) -> list[tuple[Any, ...]]:
    return sorted(conn.execute(sql).fetchall(), key=repr)


def views_differing(conn: psycopg.Connection, checks: dict[str, tuple[str, str]] = VIEW_CHECKS) -> list[str]:
    """Names of the views whose contents differ from their batch recomputation."""
    return [name for name, (view_sql, batch_sql) in checks.items()
            if _rows(conn, view_sql) != _rows(conn, batch_sql)]


def wait_until_converged(server: Connectable, checks: dict[str, tuple[str, str]] = VIEW_CHECKS,
                         timeout: float = CONVERGE_TIMEOUT_SECONDS) -> float | None:
    """Seconds until every view equals its recomputation (FLUSH, compare, repeat), None on timeout."""
    started = time.monotonic()
    while (remaining := timeout - (time.monotonic() - started)) > 0:
        try:
            with server.connect(connect_timeout=5) as conn:
                # FLUSH itself may wait minutes (for Spark): cancel it when the time is up.
                cancel = threading.Timer(remaining, conn.cancel_safe)
                cancel.start()
                try:
                    conn.execute("FLUSH")
                    if not views_differing(conn, checks):
                        return time.monotonic() - started
                finally:
                    cancel.cancel()
        except psycopg.Error:
            pass  # still starting up, or FLUSH gave up or was cancelled: try again while time is left
        time.sleep(0.2)
    return None


def _spark_ready_seconds(server: Server, starts: int) -> float | None:
    """How long the latest start took to get Spark ready, from the server's log (if it has one)."""
    log_path = getattr(server, "log_path", None)
    if log_path is None or not Path(log_path).exists():
        return None
    found = re.findall(r"Spark ready in ([0-9.]+)s", Path(log_path).read_text(errors="replace"))
    return float(found[-1]) if len(found) >= starts else None


def run_kill_cycles(server: Server, cycles: int, work_dir: Path, seed: int | None = None,
                    report: Callable[[str], None] = print) -> Figures:
    """Create the schema on a fresh server, run `cycles` kill -9 cycles, verify; return the figures."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    figures = Figures(seed=seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    with server.connect() as conn:
        for ddl in SCHEMA:
            conn.execute(ddl)

    running, stop = threading.Event(), threading.Event()
    mismatches: list[str] = []
    stream_writers = [_StreamWriter(i, random.Random(rng.random()), server, running, stop,
                                    work_dir / f"acked-stream-{i}.jsonl", figures.unexpected_errors)
                      for i in range(STREAM_WRITERS)]
    table_writer = _TableWriter(random.Random(rng.random()), mismatches, server, running, stop,
                                work_dir / "acked-table.jsonl", figures.unexpected_errors)
    writers: list[_Writer] = [*stream_writers, table_writer]
    for w in writers:
        w.start()
    try:
        for cycle in range(1, cycles + 1):
            running.set()
            time.sleep(rng.uniform(0.5, 3.0))
            server.kill9()
            running.clear()
            started = time.monotonic()
            server.restart()
            figures.restart_seconds.append(time.monotonic() - started)
            converged = wait_until_converged(server)
            figures.cycles = cycle
            spark_ready = _spark_ready_seconds(server, starts=cycle + 1)
            if spark_ready is not None:
                figures.spark_ready_seconds.append(spark_ready)
            if converged is None:
                figures.views_not_converged += 1
                report(f"cycle {cycle}: views did not converge within {CONVERGE_TIMEOUT_SECONDS:.0f} s")
            else:
                figures.converge_seconds.append(converged)
                report(f"cycle {cycle}: restarted in {figures.restart_seconds[-1]:.1f} s, "
                       f"views converged in {converged:.1f} s (Spark ready {spark_ready} s after start)")
    finally:
        stop.set()
        running.set()  # wake writers waiting for the next cycle so they see `stop`
        for w in writers:
            w.join(timeout=30)
    running.clear()

    acked_rows = [json.loads(line) for i in range(STREAM_WRITERS)
                  for line in (work_dir / f"acked-stream-{i}.jsonl").read_text().splitlines()]
    acked = {r["id"]: (r["id"], r["grp"], r["amount"]) for r in acked_rows}
    with server.connect() as conn:
        # The table write in flight at the last kill was never settled by a reconnect: settle it now.
        table_writer.reconnected(conn)
        stored = conn.execute("SELECT id, grp, amount FROM ev").fetchall()
        for name in VIEW_CHECKS:
            figures.view_rows[name] = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            read = len(conn.execute(VIEW_CHECKS[name][0]).fetchall())
            if read != figures.view_rows[name]:
                figures.view_counts_wrong.append(f"{name}: count(*) {figures.view_rows[name]}, rows read {read}")
        table = dict(conn.execute("SELECT k, v FROM acct").fetchall())
    counts = Counter(row[0] for row in stored)
    stored_by_id = {row[0]: tuple(row) for row in stored}
    figures.rows_acknowledged = len(acked)
    figures.rows_in_flight_at_kill = sum(w.uncertain for w in stream_writers)
    figures.rows_stored = len(stored)
    figures.missing = sum(1 for i, row in acked.items() if stored_by_id.get(i) != row)
    figures.duplicates = sum(n - 1 for n in counts.values() if n > 1)
    figures.table_ops_acknowledged = table_writer.ops
    for key in sorted(set(table) | set(table_writer.model)):
        if table.get(key) != table_writer.model.get(key):
            mismatches.append(f"key {key}: stored {table.get(key)}, acknowledged {table_writer.model.get(key)}")
    figures.table_mismatches = len(mismatches)
    figures.mismatch_details = mismatches[:20]
    return figures
