"""Does a push query over an aggregate or a join cost its change, or its inputs? 10k to 1M rows.

One StreamDB server (real Spark, local[2]) holds a stream `ev (k, v)` and a table `dim (id, grp)`
of 1,000 keys. At each size in --sizes (cumulative, by COPY into `ev`), after FLUSH:

  agg   SELECT k % 100 AS g, count(*) AS n, sum(v) AS s FROM ev GROUP BY k % 100
  join  SELECT d.grp, count(*) AS n FROM ev e JOIN dim d ON d.id = e.k GROUP BY d.grp

each run as `DECLARE c CURSOR FOR <query> EMIT CHANGES WITH (snapshot = false)` on a connection
of its own: the seconds DECLARE takes (the push query's start) are reported, then --probes times
one event is inserted into `ev` and timed from its acknowledgement until FETCH returns its
change (the group's old row retracted, the new one inserted).

Named peer, in the same run: the same query as a materialized view, created before the load;
after the same kind of event, the seconds until a SELECT of the view (polled every 20 ms) shows it.

Figures, never assertions; medians of --probes. Results: bench/results/push_growth.json.

    .venv/bin/python bench/push_growth.py [--sizes 10000,100000,1000000] [--probes 5]
        [--spark-master local[2]] [--out bench/results/push_growth.json]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from flush_latency import fresh_server, machine_summary  # noqa: E402

QUERIES = {
    "agg": "SELECT k % 100 AS g, count(*) AS n, sum(v) AS s FROM ev GROUP BY k % 100",
    "join": "SELECT d.grp, count(*) AS n FROM ev e JOIN dim d ON d.id = e.k GROUP BY d.grp",
}


def copy_rows(conn: psycopg.Connection[Any], table: str, rows: list[tuple[int, ...]]) -> None:
    buf = io.StringIO()
    for r in rows:
        buf.write("\t".join(map(str, r)) + "\n")
    with conn.cursor() as cur, cur.copy(f"COPY {table} FROM STDIN") as copy:
        copy.write(buf.getvalue())


def push_probe(server_conn: psycopg.Connection[Any], writer: psycopg.Connection[Any], query: str,
               probes: int, next_key: int) -> tuple[float, list[float]]:
    """The seconds DECLARE took, and for each probe the seconds from an acknowledged INSERT to
    its change arriving by FETCH."""
    c = server_conn
    c.execute("BEGIN")
    t = time.monotonic()
    c.execute(f"DECLARE pc CURSOR FOR {query} EMIT CHANGES WITH (snapshot = false)")
    start_s = time.monotonic() - t
    # Some starts come back before the first epoch: let the query settle so probes are alike.
    c.execute("FETCH ALL pc WITH (timeout = '1s')").fetchall()
    latencies = []
    for i in range(probes):
        writer.execute("INSERT INTO ev VALUES (%s, %s)", ((next_key + i) % 1000, 7))  # a key of dim
        t = time.monotonic()
        got: list[Any] = []
        while len(got) < 2 and time.monotonic() - t < 120:
            got += c.execute("FETCH ALL pc WITH (timeout = '120s')").fetchall()
        latencies.append(time.monotonic() - t)
    c.execute("CLOSE pc")
    c.execute("COMMIT")
    return start_s, latencies


def view_probe(writer: psycopg.Connection[Any], view: str, probes: int, next_key: int) -> list[float]:
    latencies = []
    for i in range(probes):
        before = writer.execute(f"SELECT sum(n) FROM {view}").fetchone()
        writer.execute("INSERT INTO ev VALUES (%s, %s)", ((next_key + i) % 1000, 7))
        t = time.monotonic()
        while writer.execute(f"SELECT sum(n) FROM {view}").fetchone() == before and time.monotonic() - t < 120:
            time.sleep(0.02)
        latencies.append(time.monotonic() - t)
    return latencies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--probes", type=int, default=5)
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "push_growth.json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: list[dict[str, Any]] = []
    with fresh_server(args.spark_master) as conn:
        conn.execute("CREATE STREAM ev (k INT, v INT)")
        conn.execute("CREATE TABLE dim (id INT PRIMARY KEY, grp INT)")
        copy_rows(conn, "dim", [(i, i % 50) for i in range(1000)])
        for name, query in QUERIES.items():
            conn.execute(f"CREATE MATERIALIZED VIEW mv_{name} AS {query}")
        loaded = 0
        key = 10_000_000
        server = conn.info
        for size in sizes:
            t = time.monotonic()
            while loaded < size:
                n = min(200_000, size - loaded)
                copy_rows(conn, "ev", [(i % 1000, i % 97) for i in range(loaded, loaded + n)])
                loaded += n
            conn.execute("FLUSH")
            load_s = time.monotonic() - t
            step: dict[str, Any] = {"rows": size, "load_s": round(load_s, 1)}
            for name, query in QUERIES.items():
                with psycopg.connect(server.dsn, autocommit=True) as c:
                    start_s, push = push_probe(c, conn, query, args.probes, key)
                key += args.probes
                conn.execute("FLUSH")
                view = view_probe(conn, f"mv_{name}", args.probes, key)
                key += args.probes
                step[name] = {"push_start_s": round(start_s, 2),
                              "push_change_s_median": round(statistics.median(push), 3),
                              "view_change_s_median": round(statistics.median(view), 3),
                              "push_change_s": [round(x, 3) for x in push],
                              "view_change_s": [round(x, 3) for x in view]}
                step[name]["push_vs_view"] = round(step[name]["push_change_s_median"]
                                                   / step[name]["view_change_s_median"], 2)
                print(json.dumps({"rows": size, name: step[name]}), flush=True)
            figures.append(step)
    result = {"machine": machine_summary(),
              "peer": "the same query as a materialized view, in the same run", "probes": args.probes,
              "steps": figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print("| rows | query | push start s | push change s | view change s | push / view |")
    print("|---|---|---|---|---|---|")
    for f in figures:
        for name in QUERIES:
            q = f[name]
            print(f"| {f['rows']:,} | {name} | {q['push_start_s']} | {q['push_change_s_median']} | "
                  f"{q['view_change_s_median']} | {q['push_vs_view']} |")


if __name__ == "__main__":
    main()
