"""The Spark driver's live heap after a long-lived server's kind of work: many views, many
micro-batches, and many distinct ad hoc queries through Spark.

    python bench/driver_heap.py [--adhoc 400] [--repo PEER_WORKTREE]

Starts a fresh server (real Spark, local[2]) from this tree (and, with --repo, from a peer
worktree, one after the other), creates 20 views of four shapes over a stream and a table,
inserts 150 batches of 50 rows (a FLUSH every 10), runs --adhoc distinct random queries through
Spark (`streamdb.spark_read_threshold_rows = 0`), then reads the JVM's live heap
(`jmap -histo:live`, which collects first): in all, Spark SQL's parser caches (ANTLR), byte
arrays, and the status store's classes kept for Spark's UI, and the old generation after that
collection (`jstat`). Figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
from pathlib import Path

from tree_server import server_from

JDK = os.environ.get("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64") + "/bin"


VIEWS = [
    "SELECT k, count(*) AS c{i}, sum(v + {i}) AS s FROM s GROUP BY k",
    "SELECT s.k, tb.name, count(*) AS c{i} FROM s JOIN tb ON s.k = tb.k WHERE s.v > {i} GROUP BY s.k, tb.name",
    "SELECT k, v FROM (SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM s) x "
    "WHERE rn <= {top}",
    "SELECT DISTINCT k, t || '{i}' AS t FROM s WHERE v % {m} = 0",
]


def random_expression(rnd: random.Random, depth: int) -> str:
    if depth == 0 or rnd.random() < 0.25:
        return rnd.choice(["k", "v", str(rnd.randrange(100)), "length(t)"])
    a, b = random_expression(rnd, depth - 1), random_expression(rnd, depth - 1)
    return rnd.choice([f"({a} + {b})", f"({a} * {b})", f"CASE WHEN {a} > {b} THEN {a} ELSE {b} END",
                       f"coalesce({a}, {b})", f"abs({a} - {b})", f"greatest({a}, {b}, 3)",
                       f"(CASE WHEN {a} IN (1, 2, {b}) THEN 1 ELSE 0 END)", f"(CASE WHEN {a} BETWEEN 0 AND {b} THEN {b} END)"])


def live_heap(jvm: int) -> str:
    histo = subprocess.run([f"{JDK}/jmap", "-histo:live", str(jvm)], capture_output=True, text=True,
                           timeout=120).stdout
    total = parser = byte_arrays = status = 0
    for line in histo.splitlines()[2:]:
        fields = line.split()
        if len(fields) < 4:
            continue
        size, name = int(fields[2]), fields[3]
        total += size
        parser += size if "antlr" in name else 0
        byte_arrays += size if name == "[B" else 0
        status += size if "execution.ui" in name or "org.apache.spark.status" in name else 0
    gc = subprocess.run([f"{JDK}/jstat", "-gc", str(jvm)], capture_output=True, text=True).stdout.split("\n")
    old_mib = float(gc[1].split()[gc[0].split().index("OU")]) / 1024
    return (f"live {total / 2**20:.0f} MiB: parser caches (ANTLR) {parser / 2**20:.0f}, byte arrays "
            f"{byte_arrays / 2**20:.0f}, status store classes {status / 2**20:.1f}; old generation after "
            f"the collection {old_mib:.0f} MiB")


def measure(repo: Path, n_adhoc: int) -> str:
    with server_from(repo) as (server, runner):
        conn = server.connect()
        conn.execute("CREATE STREAM s (k INT, v BIGINT, t TEXT)")
        conn.execute("CREATE TABLE tb (k INT PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO tb SELECT g, 'n' || g FROM generate_series(0, 99) g")
        for i in range(20):
            query = VIEWS[i % 4].format(i=i, top=1 + i % 3, m=i + 2)
            conn.execute(f"CREATE MATERIALIZED VIEW v{i} AS {query}")
        conn.execute("FLUSH")
        rnd = random.Random(1)
        for batch in range(150):
            rows = ", ".join(f"({rnd.randrange(100)}, {rnd.randrange(10**6)}, 'x{rnd.randrange(50)}')" for _ in range(50))
            conn.execute(f"INSERT INTO s VALUES {rows}")
            if batch % 10 == 9:
                conn.execute("FLUSH")
        conn.execute("SET streamdb.spark_read_threshold_rows = 0")
        for i in range(n_adhoc):
            try:
                conn.execute(f"SELECT k, sum({random_expression(rnd, 4)}) AS x, max({random_expression(rnd, 3)}) "
                             f"FROM s WHERE {random_expression(rnd, 3)} > {i} GROUP BY k ORDER BY k "
                             f"LIMIT {i + 1}").fetchall()
            except runner.psycopg.Error:
                pass  # refused by Spark (an overflow, say) after its parser read it
        conn.execute("FLUSH")
        jvm = next(p for p in runner.descendants(server.proc.pid) if "java" in runner._command_name(p))
        return live_heap(jvm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adhoc", type=int, default=400, help="distinct ad hoc queries through Spark")
    ap.add_argument("--repo", type=Path, help="a peer worktree, measured after this one")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    for label, tree in [("this", here)] + ([("peer", args.repo.resolve())] if args.repo else []):
        print(f"{label}: {measure(tree, args.adhoc)}", flush=True)


if __name__ == "__main__":
    main()
