"""The same views on a Spark standalone cluster (a master and two workers on loopback) as in local mode."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from conftest import ARTIFACTS, ServerProcess
from spark_cluster import SparkCluster

RUNS_IN = """CREATE FUNCTION runs_in(x int) RETURNS text LANGUAGE python AS $$
import os

def runs_in(x):
    pid = os.getpid()
    for _ in range(8):  # up the process tree: a Python worker, its daemon, the JVM that started it
        try:
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"CoarseGrainedExecutorBackend" in cmdline.read():
                    return "executor"
        except (OSError, ValueError, IndexError):
            break
    return "driver"
$$"""
SETUP = [
    "CREATE TABLE users (id INT PRIMARY KEY, plan TEXT)",
    "CREATE STREAM clicks (user_id INT, page TEXT, ms INT)",
    "CREATE MATERIALIZED VIEW per_plan AS SELECT u.plan, count(*) AS views, sum(c.ms) AS total_ms, "
    "min(c.ms) AS fastest FROM clicks c JOIN users u ON u.id = c.user_id GROUP BY u.plan",
    "CREATE MATERIALIZED VIEW slow AS SELECT user_id, page, ms / 10 AS tens FROM clicks WHERE ms > 50",
    # Python functions run in the Python workers of the tasks: on the executors on a cluster.
    "CREATE FUNCTION shout(t text) RETURNS text LANGUAGE python AS $$ def shout(t): return t.upper() + '!' $$",
    RUNS_IN,
    "CREATE MATERIALIZED VIEW per_page AS SELECT shout(page) AS page, count(*) AS n FROM clicks GROUP BY shout(page)",
    "CREATE MATERIALIZED VIEW udf_place AS SELECT runs_in(user_id) AS place, count(*) AS n FROM clicks "
    "GROUP BY runs_in(user_id)",
    "INSERT INTO users VALUES (1, 'free'), (2, 'pro'), (3, 'free')",
    "INSERT INTO clicks VALUES " + ", ".join(f"({i % 4}, '/p{i % 3}', {i * 7 % 100})" for i in range(120)),
    "UPDATE users SET plan = 'team' WHERE id = 3",
    "DELETE FROM users WHERE id = 2",
    "FLUSH",
]
QUERIES = {
    "per_plan": "SELECT u.plan, count(*) AS views, sum(c.ms) AS total_ms, min(c.ms) AS fastest "
                "FROM clicks c JOIN users u ON u.id = c.user_id GROUP BY u.plan",
    "slow": "SELECT user_id, page, ms / 10 AS tens FROM clicks WHERE ms > 50",
    "per_page": "SELECT shout(page) AS page, count(*) AS n FROM clicks GROUP BY shout(page)",
}


def run_workload(srv: ServerProcess) -> dict[str, list[tuple]]:
    out = {}
    with srv.connect() as c:
        for sql in SETUP:
            c.execute(sql)
        for view, query in QUERIES.items():
            maintained = sorted(c.execute(f"SELECT * FROM {view}").fetchall())
            assert maintained == sorted(c.execute(query).fetchall()), view
            out[view] = maintained
        out["udf_place"] = sorted(c.execute("SELECT * FROM udf_place").fetchall())
        # A large ad hoc read runs on the cluster too.
        c.execute("SET streamdb.spark_read_threshold_rows = 0")
        out["adhoc"] = sorted(c.execute(QUERIES["per_plan"]).fetchall())
        assert c.execute("SHOW streamdb.last_query_engine").fetchone() == ("spark",)
    return out


def _open_files(pid: int) -> set[str]:
    files = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                files.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
    except OSError:
        pass
    return files


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def where_the_state_lives(srv: ServerProcess, cluster: SparkCluster) -> dict[str, object]:
    """Which processes hold the views' state (Spark's RocksDB state store) and read the log: the
    executors under the workers, or the server's driver JVM."""
    assert srv.proc is not None
    executors = [p for w in cluster.procs for p in _descendants(w.pid) if "CoarseGrainedExecutorBackend" in _cmdline(p)]
    drivers = [p for p in _descendants(srv.proc.pid) if "java" in _cmdline(p).split(" ", 1)[0]]
    log_dir = str(srv.data_dir / "log")

    def files(pids: list[int]) -> dict[str, int]:
        opened = set().union(*(_open_files(p) for p in pids)) if pids else set()
        return {"state_store": sum("StateStoreId" in f for f in opened),
                "log": sum(f.startswith(log_dir) for f in opened)}

    return {"executors": len(executors), "drivers": len(drivers),
            "executor_files": files(executors), "driver_files": files(drivers)}


@pytest.mark.slow
def test_views_on_a_standalone_cluster_match_local_mode():
    with tempfile.TemporaryDirectory(prefix="streamdb-cluster-") as d:
        work = Path(d)
        cluster = SparkCluster(work / "spark", workers=2, log_dir=ARTIFACTS)
        (work / "spark").mkdir()
        cluster.start()
        try:
            on_cluster = ServerProcess(work / "cluster-data", "cluster", extra_args=["--spark-master", cluster.url])
            on_cluster.start()
            try:
                cluster_answers = run_workload(on_cluster)
                placement = where_the_state_lives(on_cluster, cluster)
                (ARTIFACTS / "cluster-state-placement.json").write_text(json.dumps(placement, indent=2))
                # The views' keyed state is in the executors' state stores, and the executors read
                # the log themselves; the driver JVM (in the server) holds no state (it opens the
                # log only to learn its end offsets).
                assert placement["executors"] == 2, placement
                assert placement["executor_files"]["state_store"] > 0, placement
                assert placement["executor_files"]["log"] > 0, placement
                assert placement["driver_files"]["state_store"] == 0, placement
                # The view's Python function ran in Python workers started by the executors.
                assert cluster_answers["udf_place"] == [("executor", 120)], cluster_answers["udf_place"]
            finally:
                on_cluster.stop()
            assert "Registering app" in (ARTIFACTS / "spark-master.log").read_text()
        finally:
            cluster.stop()
        local = ServerProcess(work / "local-data", "local")
        local.start()
        try:
            local_answers = run_workload(local)
        finally:
            local.stop()
    assert local_answers.pop("udf_place") == [("driver", 120)]
    cluster_answers.pop("udf_place")
    assert cluster_answers == local_answers
    assert cluster_answers["per_plan"] and cluster_answers["slow"]
