"""Kafka -> external stream -> view: how fast a backlog is ingested, and the same count through
COPY as the named peer, measured in the same run.

Starts librdkafka's mock cluster (tests/kafka_mock.py) and a server (real Spark, local[2]),
produces N JSON records, creates an external stream and a count view over it, and times until
the stream holds all N rows and until the view says N. Then COPYs the same N rows into an
internal stream and times that. Figures, never assertions.

    .venv/bin/python bench/kafka_ingest.py [--records 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from views_freshness import start_server  # noqa: E402


def wait_count(c: psycopg.Connection, sql: str, n: int, timeout: float = 600) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if c.execute(sql).fetchone()[0] >= n:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {n} rows: {sql}")


def one_run(n: int, bootstrap: str, run: int) -> dict[str, float]:
    topic = f"bench_{run}_{int(time.time())}"
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        p.produce(topic, json.dumps({"id": i, "k": i % 100, "v": i % 7}).encode())
        if i % 10000 == 0:
            p.poll(0)
    p.flush(60)
    with tempfile.TemporaryDirectory() as d:
        proc, dsn = start_server(Path(d) / "data")
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT 1")
                c.execute(f"CREATE SOURCE CONNECTOR k KAFKA WITH (bootstrap_servers = '{bootstrap}')")
                c.execute("CREATE STREAM warm (id BIGINT)")
                c.execute("CREATE MATERIALIZED VIEW warm_n AS SELECT count(*) AS n FROM warm")  # Spark is up
                t0 = time.monotonic()
                c.execute(f"CREATE EXTERNAL STREAM ev (id BIGINT, k INT, v INT) WITH (connector = 'k', "
                          f"kafka_topic = '{topic}')")
                c.execute("CREATE MATERIALIZED VIEW ev_n AS SELECT count(*) AS n FROM ev")
                wait_count(c, "SELECT count(*) FROM ev", n)
                ingest = time.monotonic() - t0
                wait_count(c, "SELECT coalesce(max(n), 0) FROM ev_n", n)
                view_total = time.monotonic() - t0
                c.execute("CREATE STREAM copied (id BIGINT, k INT, v INT)")
                data = io.StringIO("".join(f"{i}\t{i % 100}\t{i % 7}\n" for i in range(n)))
                t1 = time.monotonic()
                with c.cursor().copy("COPY copied FROM STDIN") as cp:
                    cp.write(data.getvalue())
                copy_s = time.monotonic() - t1
        finally:
            proc.terminate()
            proc.wait(60)
    return {"kafka_rows_per_s": n / ingest, "view_caught_up_s": view_total, "copy_rows_per_s": n / copy_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    mock = subprocess.Popen([sys.executable, str(ROOT / "tests" / "kafka_mock.py")], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        bootstrap = mock.stdout.readline().strip() if mock.stdout else ""
        runs = [one_run(args.records, bootstrap, i) for i in range(args.runs)]
    finally:
        mock.terminate()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out = {"records": args.records, "runs": runs, "median": med}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "kafka_ingest.json").write_text(json.dumps(out, indent=2))
    print(f"Kafka backlog -> external stream: {med['kafka_rows_per_s']:,.0f} rows/s (median of {args.runs})")
    print(f"view over it caught up {med['view_caught_up_s']:.1f} s after CREATE")
    print(f"peer, COPY FROM STDIN into an internal stream: {med['copy_rows_per_s']:,.0f} rows/s "
          f"(ratio Kafka/COPY {med['kafka_rows_per_s'] / med['copy_rows_per_s']:.2f})")


if __name__ == "__main__":
    main()
