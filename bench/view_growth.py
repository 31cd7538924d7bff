"""Does the cost of keeping a view fresh follow the change, or the data? Growth from 10k to 10M rows.

Three materialized views (issue 13), on one StreamDB server (real Spark, local[2]):

  join_agg  a stream joined with a table, then GROUP BY:
            SELECT d.grp, count(*) AS n, sum(e.v) AS total FROM ev e JOIN dim d ON d.id = e.k GROUP BY d.grp
  topn      the top 3 per key over the stream:
            SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM ev) q
            WHERE rn <= 3
  minmax    min/max over a table with deletes:
            SELECT grp, min(v) AS lo, max(v) AS hi, count(*) AS n FROM tt GROUP BY grp
  top_table the top 10 of a whole table with deletes (one partition holding every row):
            SELECT id, v FROM tt ORDER BY v DESC LIMIT 10
  semi_join the stream's events whose key is in a subquery over the table, counted (a view
            with a subquery in WHERE was recomputed over its whole input every epoch before
            2026-12-02, per touched group when it had GROUP BY):
            SELECT count(*) AS n, max(e.v) AS hi FROM ev e
            WHERE e.k IN (SELECT id FROM dim WHERE grp IN ('g1', 'g2', 'g3', 'g4', 'g5'))
  session   session windows per user over a stream of clicks (1,000 users), counted per session:
            SELECT u, window_start, window_end, count(*) AS n
            FROM SESSION(clicks, ts, INTERVAL '60' SECOND, u) GROUP BY u, window_start, window_end
  recent    a temporal filter: the last hour's hits per key (a view reading now() was recomputed
            over its whole input every epoch before 2026-12-02):
            SELECT k, count(*) AS n, max(v) AS hi FROM hits WHERE ts > now() - INTERVAL '1 hour' GROUP BY k
  rollup    ROLLUP over the table with deletes: a row per group and the grand total (a view with
            GROUPING SETS, ROLLUP or CUBE was recomputed over its whole input every epoch before
            2026-12-02):
            SELECT grp, count(*) AS n, sum(v) AS total, max(v) AS hi FROM tt GROUP BY ROLLUP (grp)
  share     each group's share of the table, a scalar subquery over the groups (such a view was
            recomputed over its whole input every epoch before 2026-12-02):
            SELECT grp, count(*) AS n, count(*) * 1000 / (SELECT count(*) FROM tt) AS permille FROM tt GROUP BY grp
  changed   a filter over a window function (rows whose value rose from the previous one in their
            group; such a view was recomputed over its whole input every epoch before 2026-12-02):
            SELECT id, grp, v, prev FROM (SELECT id, grp, v, lag(v) OVER (PARTITION BY grp ORDER BY id)
            AS prev FROM tt) q WHERE v > prev
  unnest    a set-returning function over the table with deletes, two rows per table row (run
            by the epoch driver over the table's changes, a linear query; a Recompute per row on
            the pipeline was measured against it and dropped, 2026-12-02):
            SELECT id, unnest(ARRAY[grp, v]) AS e FROM tt

The stream `ev` and the table `tt` grow to each size in --sizes (cumulative, by COPY; 1% of the
table's rows are deleted at each step; the table stops at --table-cap rows, 1M by default, because
each DELETE on a StreamDB table costs O(table) today, issue 14); `dim` holds 1,000 keys in 50 groups. At each size, after
FLUSH, --probes single changes are made one at a time and timed from acknowledgement until the
view shows them (polled every 20 ms): a new event for join_agg, a new top value for topn, for
minmax the DELETE of a group's current minimum (a retraction of the minimum: the hard case), for
top_table the DELETE of the table's current top row (the view takes the next one in; for
rollup the same DELETE, the grand total's max then the next value; for unnest the same
DELETE, the view then without the row's two values; for share the same DELETE, the row's group
then one row fewer; for changed the same DELETE, the view then without the row), for
semi_join a new top value for a key the subquery holds, for recent a hit of now with a new top
value (the stream `hits` gets as many rows as `ev`, their times spread over the two hours before
the load, so rows leave the view all along), and
for session a click that starts a new session for a user (the user's sessions are recomputed
from all their clicks: size / 1,000 of them). The stream `clicks` gets as many rows as `ev`, one
second apart in event time.

Named peer, in the same run: PostgreSQL 15 (started by bench/pgserver.py) holding the same data
as plain tables, with the same queries as materialized views (session: SESSION's window
functions written out, as the planner expands it); after the same change,
`REFRESH MATERIALIZED VIEW` is timed (PostgreSQL recomputes a materialized view from all its
data). Also reported: the server's and Spark JVM's resident memory (RSS) at each size, and how
long each load took to be reflected (COPY + the views catching up).

Figures, never assertions. Results: bench/results/view_growth.json and a Markdown table on stdout.

    .venv/bin/python bench/view_growth.py [--sizes 10000,100000,1000000,10000000] [--probes 5]
        [--no-postgres] [--spark-master local[2]] [--table-cap N] [--views join_agg,topn,minmax,session]
        [--out bench/results/view_growth.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "nexmark"))

from pgserver import PostgresServer  # noqa: E402
from run_streamdb import Server, descendants, flush  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "view_growth.json"
KEYS = 1000
GROUPS = 50
TABLE_GROUPS = 100
POLL_S = 0.02
TIMEOUT_S = 120.0

VIEWS = {
    "join_agg": "SELECT d.grp, count(*) AS n, sum(e.v) AS total FROM ev e JOIN dim d ON d.id = e.k GROUP BY d.grp",
    "topn": "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM ev) q "
            "WHERE rn <= 3",
    "minmax": "SELECT grp, min(v) AS lo, max(v) AS hi, count(*) AS n FROM tt GROUP BY grp",
    "top_table": "SELECT id, v FROM tt ORDER BY v DESC LIMIT 10",
    "semi_join": "SELECT count(*) AS n, max(e.v) AS hi FROM ev e "
                 "WHERE e.k IN (SELECT id FROM dim WHERE grp IN ('g1', 'g2', 'g3', 'g4', 'g5'))",
    "session": "SELECT u, window_start, window_end, count(*) AS n "
               "FROM SESSION(clicks, ts, INTERVAL '60' SECOND, u) GROUP BY u, window_start, window_end",
    "recent": "SELECT k, count(*) AS n, max(v) AS hi FROM hits WHERE ts > now() - INTERVAL '1 hour' GROUP BY k",
    "rollup": "SELECT grp, count(*) AS n, sum(v) AS total, max(v) AS hi FROM tt GROUP BY ROLLUP (grp)",
    "unnest": "SELECT id, unnest(ARRAY[grp, v]) AS e FROM tt",
    "share": "SELECT grp, count(*) AS n, count(*) * 1000 / (SELECT count(*) FROM tt) AS permille FROM tt GROUP BY grp",
    "changed": "SELECT id, grp, v, prev FROM (SELECT id, grp, v, lag(v) OVER (PARTITION BY grp ORDER BY id) AS prev "
               "FROM tt) q WHERE v > prev",
}
# PostgreSQL has no SESSION(): the same query as the window functions the planner expands it to.
PG_VIEWS = {**VIEWS, "session": (
    "SELECT u, window_start, window_end, count(*) AS n FROM ("
    " SELECT u, min(ts) OVER (PARTITION BY u, sid) AS window_start,"
    " max(ts) OVER (PARTITION BY u, sid) + INTERVAL '60 seconds' AS window_end FROM ("
    "  SELECT u, ts, sum(CASE WHEN prev IS NULL OR ts > prev + INTERVAL '60 seconds' THEN 1 ELSE 0 END)"
    "  OVER (PARTITION BY u ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid FROM ("
    "   SELECT u, ts, lag(ts) OVER (PARTITION BY u ORDER BY ts) AS prev FROM clicks) a) b) c "
    "GROUP BY u, window_start, window_end")}
USERS = 1000
T0 = dt.datetime(2024, 1, 1)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rss_mib(root: int) -> dict[str, float]:
    """Resident memory of the server process and of its descendants (the Spark JVM, Python workers)."""
    def rss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0
    children = descendants(root)
    return {"server_mib": round(rss(root) / 1024, 1), "spark_mib": round(sum(rss(p) for p in children) / 1024, 1)}


def copy_rows(conn: psycopg.Connection[Any], table: str, columns: str, rows: list[tuple[int, ...]]) -> None:
    buf = io.StringIO()
    for r in rows:
        buf.write("\t".join(str(x) for x in r) + "\n")
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        copy.write(buf.getvalue())


def wait_until(conn: psycopg.Connection[Any], sql: str, check) -> float:
    """Seconds until `check(rows)` holds for the rows of `sql` (polled every 20 ms)."""
    started = time.monotonic()
    while True:
        rows = conn.execute(sql).fetchall()
        if check(rows):
            return time.monotonic() - started
        if time.monotonic() - started > TIMEOUT_S:
            raise RuntimeError(f"not reflected after {TIMEOUT_S:.0f} s: {sql}")
        time.sleep(POLL_S)


class Data:
    """What was loaded, mirrored on both systems."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.events = 0
        self.table_rows = 0  # ids 0 .. table_rows - 1 were inserted
        self.deleted: set[int] = set()
        self.top = 10**9  # values above every loaded value, for probes
        self.clicks = 0
        self.hits = 0

    def click_rows(self, n: int) -> list[tuple[int, dt.datetime]]:
        rows = [(self.rng.randrange(USERS), T0 + dt.timedelta(seconds=self.clicks + i)) for i in range(n)]
        self.clicks += n
        return rows

    def hit_rows(self, n: int) -> list[tuple[int, int, dt.datetime]]:
        now = dt.datetime.now(dt.UTC)
        rows = [(self.rng.randrange(KEYS), self.rng.randrange(1_000_000),
                 now - dt.timedelta(seconds=self.rng.uniform(0, 7200))) for _ in range(n)]
        self.hits += n
        return rows

    def event_rows(self, n: int) -> list[tuple[int, int]]:
        rows = [(self.rng.randrange(KEYS), self.rng.randrange(1_000_000)) for _ in range(n)]
        self.events += n
        return rows

    def table_rows_upto(self, n: int) -> list[tuple[int, int, int]]:
        rows = [(i, i % TABLE_GROUPS, self.rng.randrange(1_000_000)) for i in range(self.table_rows, n)]
        self.table_rows = n
        return rows


def load(systems: list[psycopg.Connection[Any]], data: Data, size: int, table_cap: int, views: list[str]) -> None:
    chunk = 200_000
    if "session" in views:
        while data.clicks < size:
            rows = data.click_rows(min(chunk, size - data.clicks))
            for c in systems:
                copy_rows(c, "clicks", "u, ts", rows)
    if "recent" in views:
        while data.hits < size:
            rows = data.hit_rows(min(chunk, size - data.hits))
            for c in systems:
                copy_rows(c, "hits", "k, v, ts", rows)
    remaining = size - data.events if {"join_agg", "topn", "semi_join"} & set(views) else 0
    while remaining > 0:
        n = min(chunk, remaining)
        rows = data.event_rows(n)
        for c in systems:
            copy_rows(c, "ev", "k, v", rows)
        remaining -= n
    if not {"minmax", "top_table", "rollup", "unnest", "share", "changed"} & set(views):
        return
    size = min(size, table_cap)
    if size <= data.table_rows:
        return
    for start in range(data.table_rows, size, chunk):
        rows = data.table_rows_upto(min(size, start + chunk))
        for c in systems:
            copy_rows(c, "tt", "id, grp, v", rows)
    # 1% of the new table rows deleted (retractions)
    new = [i for i in range(max(0, size - size // 10), size) if i not in data.deleted]
    doomed = data.rng.sample(new, min(len(new), max(1, size // 100)))
    data.deleted.update(doomed)
    for c in systems:
        streamdb = c is systems[0]  # then the PostgreSQL mirror
        if streamdb:
            # StreamDB matches these DELETEs ad hoc: in the embedded engine, not by shipping a
            # 10M-row table to Spark (which runs out of heap; ad hoc reads are not measured here).
            c.execute("SET streamdb.spark_read_threshold_rows = 1000000000")
        for start in range(0, len(doomed), 5000):
            ids = ",".join(str(i) for i in doomed[start:start + 5000])
            c.execute(f"DELETE FROM tt WHERE id IN ({ids})")
        if streamdb:
            c.execute("RESET streamdb.spark_read_threshold_rows")


def probe(sdb: psycopg.Connection[Any], pg: psycopg.Connection[Any] | None, data: Data,
          view: str, n: int) -> dict[str, Any]:
    """n single changes for `view`, timed until visible; and PostgreSQL's REFRESH after the same change."""
    sdb_times, ack_times, pg_times = [], [], []
    if view in ("unnest", "changed"):
        # The view has up to 2 rows per table row: its reads stay embedded on a tree before 2026-12-02
        # too (there, past 1M rows they went to Spark, which took seconds and once ran its heap
        # out), so the probe times the view, not the read.
        sdb.execute("SET streamdb.spark_read_threshold_rows = 1000000000")
    for _ in range(n):
        if view == "join_agg":
            k = data.rng.randrange(KEYS)
            grp = sdb.execute("SELECT grp FROM dim WHERE id = %s", (k,)).fetchone()[0]
            before = sdb.execute(f"SELECT total FROM {view} WHERE grp = %s", (grp,)).fetchone()[0]
            data.top += 1
            change = ("INSERT INTO ev (k, v) VALUES (%s, %s)", (k, data.top))
            target = before + data.top
            check_sql, check = (f"SELECT total FROM {view} WHERE grp = '{grp}'",
                                lambda rows, t=target: bool(rows) and rows[0][0] == t)
        elif view == "session":
            u = data.rng.randrange(USERS)
            data.clicks += 3600  # an hour after every click so far: a new session of its own
            start = T0 + dt.timedelta(seconds=data.clicks)
            change = ("INSERT INTO clicks (u, ts) VALUES (%s, %s)", (u, start))
            check_sql, check = (f"SELECT n FROM {view} WHERE u = {u} AND window_start = '{start.isoformat(sep=' ')}'",
                                lambda rows: rows == [(1,)])
        elif view == "semi_join":
            k = data.rng.randrange(KEYS // GROUPS) * GROUPS + data.rng.randrange(1, 6)  # grp g1 .. g5
            data.top += 1
            change = ("INSERT INTO ev (k, v) VALUES (%s, %s)", (k, data.top))
            check_sql, check = (f"SELECT hi FROM {view}", lambda rows, t=data.top: rows == [(t,)])
        elif view == "recent":
            k = data.rng.randrange(KEYS)
            data.top += 1
            change = ("INSERT INTO hits (k, v, ts) VALUES (%s, %s, now())", (k, data.top))
            check_sql, check = (f"SELECT hi FROM {view} WHERE k = {k}", lambda rows, t=data.top: rows == [(t,)])
        elif view == "topn":
            k = data.rng.randrange(KEYS)
            data.top += 1
            change = ("INSERT INTO ev (k, v) VALUES (%s, %s)", (k, data.top))
            check_sql, check = (f"SELECT v FROM {view} WHERE k = {k}",
                                lambda rows, t=data.top: any(r[0] == t for r in rows))
        elif view == "rollup":
            mirror = pg if pg is not None else sdb
            victim, top = mirror.execute("SELECT id, v FROM tt ORDER BY v DESC, id LIMIT 1").fetchone()
            data.deleted.add(victim)
            change = ("DELETE FROM tt WHERE id = %s", (victim,))
            after = mirror.execute("SELECT max(v) FROM tt WHERE id <> %s", (victim,)).fetchone()[0]
            n = mirror.execute("SELECT count(*) FROM tt").fetchone()[0] - 1
            check_sql, check = (f"SELECT n, hi FROM {view} WHERE grp IS NULL",
                                lambda rows, t=(n, after): rows == [t])
        elif view == "share":
            mirror = pg if pg is not None else sdb
            victim, grp = mirror.execute("SELECT id, grp FROM tt ORDER BY v DESC, id LIMIT 1").fetchone()
            data.deleted.add(victim)
            change = ("DELETE FROM tt WHERE id = %s", (victim,))
            n = mirror.execute("SELECT count(*) FROM tt WHERE grp = %s", (grp,)).fetchone()[0] - 1
            check_sql, check = (f"SELECT n FROM {view} WHERE grp = {grp}", lambda rows, t=n: rows == [(t,)])
        elif view in ("unnest", "changed"):
            mirror = pg if pg is not None else sdb
            victim = mirror.execute("SELECT id FROM tt ORDER BY v DESC, id LIMIT 1").fetchone()[0]
            data.deleted.add(victim)
            change = ("DELETE FROM tt WHERE id = %s", (victim,))
            check_sql, check = (f"SELECT count(*) FROM {view} WHERE id = {victim}", lambda rows: rows == [(0,)])
        elif view == "top_table":
            mirror = pg if pg is not None else sdb
            victim = mirror.execute("SELECT id FROM tt ORDER BY v DESC, id LIMIT 1").fetchone()[0]
            data.deleted.add(victim)
            change = ("DELETE FROM tt WHERE id = %s", (victim,))
            expected = [r[0] for r in mirror.execute(
                "SELECT v FROM tt WHERE id <> %s ORDER BY v DESC LIMIT 10", (victim,)).fetchall()]
            check_sql, check = (f"SELECT v FROM {view} ORDER BY v DESC",
                                lambda rows, t=expected: [r[0] for r in rows] == t)
        else:
            grp = data.rng.randrange(TABLE_GROUPS)
            lo = sdb.execute(f"SELECT lo FROM {view} WHERE grp = %s", (grp,)).fetchone()[0]
            # The victim and the next minimum are looked up in the mirror when there is one (an ad
            # hoc scan of a 10M-row table is not what is measured here).
            mirror = pg if pg is not None else sdb
            victim = mirror.execute("SELECT id FROM tt WHERE grp = %s AND v = %s LIMIT 1", (grp, lo)).fetchone()[0]
            data.deleted.add(victim)
            change = ("DELETE FROM tt WHERE id = %s", (victim,))
            remaining = mirror.execute("SELECT min(v) FROM tt WHERE grp = %s AND id <> %s",
                                       (grp, victim)).fetchone()[0]
            check_sql, check = (f"SELECT lo FROM {view} WHERE grp = {grp}",
                                lambda rows, t=remaining: bool(rows) and rows[0][0] == t)
        started = time.monotonic()
        sdb.execute(*change)
        acked = time.monotonic() - started
        ack_times.append(acked)
        sdb_times.append(acked + wait_until(sdb, check_sql, check))
        if pg is not None:
            pg.execute(*change)
            t = time.monotonic()
            pg.execute(f"REFRESH MATERIALIZED VIEW {view}")
            pg_times.append(time.monotonic() - t)
    if view in ("unnest", "changed"):
        sdb.execute("RESET streamdb.spark_read_threshold_rows")
    out: dict[str, Any] = {"streamdb_ms": [round(x * 1000, 1) for x in sdb_times],
                           "streamdb_median_ms": round(statistics.median(sdb_times) * 1000, 1),
                           # of which the statement's own time (INSERT, or DELETE's match of the row)
                           "ack_ms": [round(x * 1000, 1) for x in ack_times],
                           "ack_median_ms": round(statistics.median(ack_times) * 1000, 1)}
    if pg_times:
        out["postgres_refresh_ms"] = [round(x * 1000, 1) for x in pg_times]
        out["postgres_median_ms"] = round(statistics.median(pg_times) * 1000, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000,10000000")
    ap.add_argument("--probes", type=int, default=5)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--views", default=",".join(VIEWS), help="which of the views, comma-separated")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the results' JSON file")
    ap.add_argument("--table-cap", type=int, default=1_000_000,
                    help="rows at most in the table tt: a DELETE on a StreamDB table rebuilds the table's "
                         "ad hoc read cache (O(table) per statement, issue 14), which is not what is measured")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    views = [v for v in args.views.split(",") if v]
    unknown = set(views) - set(VIEWS)
    if unknown:
        ap.error(f"unknown views: {', '.join(sorted(unknown))}")
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                               "sizes": sizes, "views": views, "steps": []}
    with tempfile.TemporaryDirectory(prefix="streamdb-growth-") as tmp:
        server = Server(Path(tmp), args.spark_master)
        pgs = None if args.no_postgres else PostgresServer()
        try:
            sdb = server.connect()
            # A FLUSH after a large load can outlast the server's default statement_timeout (5 min).
            sdb.execute("SET statement_timeout = 0")
            pg = None
            if pgs is not None:
                pgs.initdb()
                pgs.start()
                pg = psycopg.connect(pgs.dsn, autocommit=True)
            dim = [(i, f"g{i % GROUPS}") for i in range(KEYS)]
            sdb.execute("CREATE STREAM ev (k BIGINT, v BIGINT)")
            sdb.execute("CREATE TABLE dim (id BIGINT PRIMARY KEY, grp TEXT)")
            sdb.execute("CREATE TABLE tt (id BIGINT PRIMARY KEY, grp BIGINT, v BIGINT)")
            sdb.execute("CREATE STREAM clicks (u BIGINT, ts TIMESTAMP)")
            sdb.execute("CREATE STREAM hits (k BIGINT, v BIGINT, ts TIMESTAMPTZ)")
            if pg is not None:
                pg.execute("CREATE TABLE clicks (u BIGINT, ts TIMESTAMP)")
                pg.execute("CREATE TABLE hits (k BIGINT, v BIGINT, ts TIMESTAMPTZ)")
                pg.execute("CREATE TABLE ev (k BIGINT, v BIGINT)")
                pg.execute("CREATE TABLE dim (id BIGINT PRIMARY KEY, grp TEXT)")
                pg.execute("CREATE TABLE tt (id BIGINT PRIMARY KEY, grp BIGINT, v BIGINT)")
            for c in [x for x in (sdb, pg) if x is not None]:
                copy_rows(c, "dim", "id, grp", dim)
            data = Data(42)
            load([x for x in (sdb, pg) if x is not None], data, sizes[0], args.table_cap, views)
            for name in views:
                t = time.monotonic()
                sdb.execute(f"CREATE MATERIALIZED VIEW {name} AS {VIEWS[name]}")
                log(f"created {name} in {time.monotonic() - t:.1f} s")
                if pg is not None:
                    pg.execute(f"CREATE MATERIALIZED VIEW {name} AS {PG_VIEWS[name]}")
            for size in sizes:
                t = time.monotonic()
                load([x for x in (sdb, pg) if x is not None], data, size, args.table_cap, views)
                loaded = time.monotonic() - t
                flush(sdb, f"{size:,} events")
                reflected = time.monotonic() - t
                if pg is not None:
                    for name in views:
                        pg.execute(f"REFRESH MATERIALIZED VIEW {name}")
                log(f"{size:,} events ({data.table_rows:,} table rows): loaded in {loaded:.1f} s, reflected in {reflected:.1f} s")
                step: dict[str, Any] = {"size": size, "table_rows": data.table_rows, "load_s": round(loaded, 1), "reflected_s": round(reflected, 1),
                                        "memory": rss_mib(server.proc.pid), "views": {}}
                for name in views:
                    step["views"][name] = probe(sdb, pg, data, name, args.probes)
                    log(f"  {name}: {step['views'][name]}")
                status = {r[0]: (r[2], r[6]) for r in sdb.execute("SHOW QUERIES").fetchall()}
                step["status"] = status
                step["memory_after"] = rss_mib(server.proc.pid)
                results["steps"].append(step)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(results, indent=2, default=str))
        finally:
            server.stop()
            if pgs is not None:
                pgs.cleanup()
    print(report(results))


def report(results: dict[str, Any]) -> str:
    steps = results["steps"]
    if not steps:
        return "no results"
    views = results.get("views", list(VIEWS))
    base = {name: steps[0]["views"][name]["streamdb_median_ms"] for name in views}
    lines = ["| rows | view | StreamDB median ms | of which the statement | vs 10k | PostgreSQL REFRESH ms | "
             "StreamDB / PostgreSQL | server RSS MiB | Spark RSS MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        for name in views:
            v = s["views"][name]
            pgm = v.get("postgres_median_ms")
            lines.append(f"| {s['size']:,} | {name} | {v['streamdb_median_ms']:.0f} | {v.get('ack_median_ms', 0):.0f} | "
                         f"{v['streamdb_median_ms'] / base[name]:.2f}x | {pgm if pgm is not None else '-'} | "
                         f"{(v['streamdb_median_ms'] / pgm) if pgm else float('nan'):.2f} | "
                         f"{s['memory_after']['server_mib']:.0f} | {s['memory_after']['spark_mib']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
