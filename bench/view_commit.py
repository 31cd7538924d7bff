"""A view over a keyed table after bulk changes: every row of the view changes (issue 13).

A view whose rows can be retracted (here a filter and projection of a table: an UPDATE takes a
row back and puts its new version in) keeps each distinct row with its count in the server's
state store, and every batch of the pipeline commits its changed rows there and in the view's
change log. This measures that path at volume, with PostgreSQL in the same run as the peer.

For each --rows size, a StreamDB server (real Spark, local[2], fresh data dir, log level info)
and a PostgreSQL server from the machine's binaries (bench/pgserver.py) get:

    CREATE TABLE kt (id BIGINT PRIMARY KEY, k INT, v BIGINT)
    CREATE MATERIALIZED VIEW kv AS SELECT id, k, v * 2 AS v2 FROM kt WHERE v % 7 <> 0

  load     COPY of ids 0 .. rows-1 (k = id % 100, v = id), then the view made current: StreamDB
           FLUSH kv (the pipeline's batches committed), PostgreSQL REFRESH MATERIALIZED VIEW kv
  change   --runs times: every row's v + 1 (StreamDB: a COPY of every id, which upserts by key;
           PostgreSQL: UPDATE kt SET v = v + 1), then the view made current as above. About
           12/7 x rows changes of the view each time (a row that stays takes its old version back
           and adds the new one, a row leaving or joining the filter one change).

Reported: seconds and view changes/s of each phase (median of the change runs), the ratio to
PostgreSQL's (which recomputes the view: it has no incremental maintenance), the server's commit
time of the view's batches from its log ("commit N ms" of each pipeline batch) and whether both
views hold the same count and sum after the last phase. Figures, never assertions. Written to
bench/results/view_commit.json.

    .venv/bin/python bench/view_commit.py [--rows 100000,1000000] [--runs 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import platform
import re
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
RESULTS = ROOT / "bench" / "results" / "view_commit.json"
TABLE = "CREATE TABLE kt (id BIGINT PRIMARY KEY, k INT, v BIGINT)"
VIEW = "CREATE MATERIALIZED VIEW kv AS SELECT id, k, v * 2 AS v2 FROM kt WHERE v % 7 <> 0"
CHUNK = 100_000
_BATCH_LINE = re.compile(r"pipeline depth-[\d.]+: batch \d+ in \d+ ms \(sink: Spark job (\d+) ms, (\d+) rows; "
                         r"(commit|commit beside the next batch, waited for the last) (\d+) ms\)")
# A large batch is committed beside Spark's next one (docs/views.md), logged apart.
_BESIDE_LINE = re.compile(r"pipeline depth-[\d.]+: batch \d+ committed beside the next in (\d+) ms")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def copy_rows(c: psycopg.Connection[Any], rows: int, plus: int) -> None:
    for start in range(0, rows, CHUNK):
        blob = "".join(f"{i}\t{i % 100}\t{i + plus}\n" for i in range(start, min(rows, start + CHUNK))).encode()
        with c.cursor().copy("COPY kt FROM STDIN") as cp:
            cp.write(blob)


def view_changes(rows: int, before: int | None, after: int) -> int:
    """How many changes the view takes when v goes from `before` + id to `after` + id."""
    def kept(plus: int) -> int:
        return sum(1 for i in range(rows) if (i + plus) % 7 != 0)
    # Every old version retracted, every new one added (v changed for every row).
    return kept(after) + (kept(before) if before is not None else 0)


def contents(c: psycopg.Connection[Any]) -> tuple[int, int]:
    row = c.execute("SELECT count(*), sum(v2) FROM kv").fetchone()
    assert row is not None
    return int(row[0]), int(row[1] or 0)


def commit_ms(log: Path, offset: int) -> tuple[float, float, int, int]:
    """(commit ms, Spark job ms, batches, rows) of the pipeline batches logged from `offset` on."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    commit = job = 0.0
    batches = rows = 0
    for m in _BATCH_LINE.finditer(text):
        job += float(m.group(1))
        rows += int(m.group(2))
        if m.group(3) == "commit":
            commit += float(m.group(4))
        batches += 1
    commit += sum(float(m.group(1)) for m in _BESIDE_LINE.finditer(text))
    return commit, job, batches, rows


def run_size(rows: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="view-commit-") as d:
        pg = PostgresServer(Path(d) / "pg")
        pg.initdb()
        pg.start()
        log = Path(d) / "streamdb.log"
        proc, dsn = start_server(Path(d) / "streamdb", log, log_level="info")
        try:
            s = psycopg.connect(dsn, autocommit=True)
            p = psycopg.connect(pg.dsn, autocommit=True)
            s.execute("SET statement_timeout = 0")
            for c in (s, p):
                c.execute(TABLE)
                c.execute(VIEW)
            s.execute("FLUSH kv")
            phases: list[dict[str, Any]] = []
            before: int | None = None
            for plus in range(runs + 1):
                changes = view_changes(rows, before, plus)
                offset = log.stat().st_size
                t0 = time.monotonic()
                copy_rows(s, rows, plus)
                s_write = time.monotonic() - t0
                s.execute("FLUSH kv")
                s_total = time.monotonic() - t0
                commit, job, batches, batch_rows = commit_ms(log, offset)
                t0 = time.monotonic()
                if plus == 0:
                    copy_rows(p, rows, plus)
                else:
                    p.execute("UPDATE kt SET v = v + 1")
                p.execute("REFRESH MATERIALIZED VIEW kv")
                p_total = time.monotonic() - t0
                phase = {"phase": "load" if plus == 0 else "change", "view_changes": changes,
                         "streamdb_s": s_total, "streamdb_write_s": s_write,
                         "streamdb_changes_per_s": changes / s_total,
                         "postgresql_s": p_total, "postgresql_changes_per_s": changes / p_total,
                         "ratio": p_total / s_total, "commit_ms": commit, "spark_job_ms": job,
                         "batches": batches, "batch_rows": batch_rows}
                phases.append(phase)
                say(f"{rows:,} rows {phase['phase']}: StreamDB {s_total:.2f} s (COPY {s_write:.2f} s; "
                    f"{changes / s_total:,.0f} changes/s; "
                    f"{batches} batches, commit {commit / 1000:.2f} s, Spark job {job / 1000:.2f} s), "
                    f"PostgreSQL {p_total:.2f} s, ratio {p_total / s_total:.2f}x")
                before = plus
            s_contents, p_contents = contents(s), contents(p)
            change = [ph for ph in phases if ph["phase"] == "change"]
            med = {k: statistics.median(ph[k] for ph in change) for k in
                   ("streamdb_s", "streamdb_changes_per_s", "postgresql_s", "postgresql_changes_per_s", "ratio",
                    "commit_ms", "spark_job_ms")} if change else {}
            return {"phases": phases, "change_median": med,
                    "contents": {"streamdb": s_contents, "postgresql": p_contents, "equal": s_contents == p_contents}}
        finally:
            stop_server(proc)
            pg.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rows", default="100000,1000000", help="table sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="change phases per size")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    result: dict[str, Any] = {
        "benchmark": "view_commit", "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cores": mp.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": args.runs, "sizes": {}}
    for rows in [int(x) for x in args.rows.split(",")]:
        result["sizes"][str(rows)] = run_size(rows, args.runs)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    result["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| rows | phase | view changes | StreamDB s | changes/s | commit s | Spark job s | PostgreSQL s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rows, r in result["sizes"].items():
        for ph in r["phases"]:
            print(f"| {int(rows):,} | {ph['phase']} | {ph['view_changes']:,} | {ph['streamdb_s']:.2f} | "
                  f"{ph['streamdb_changes_per_s']:,.0f} | {ph['commit_ms'] / 1000:.2f} | {ph['spark_job_ms'] / 1000:.2f} | "
                  f"{ph['postgresql_s']:.2f} | {ph['ratio']:.2f}x |")
        print(f"contents {rows}: {r['contents']}")
    say(f"written to {args.out}")


if __name__ == "__main__":
    main()
