"""The same views on a Spark standalone cluster (a master and two workers on loopback) as in local mode."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import ARTIFACTS, ServerProcess
from spark_cluster import SparkCluster

SETUP = [
    "CREATE TABLE users (id INT PRIMARY KEY, plan TEXT)",
    "CREATE STREAM clicks (user_id INT, page TEXT, ms INT)",
    "CREATE MATERIALIZED VIEW per_plan AS SELECT u.plan, count(*) AS views, sum(c.ms) AS total_ms, "
    "min(c.ms) AS fastest FROM clicks c JOIN users u ON u.id = c.user_id GROUP BY u.plan",
    "CREATE MATERIALIZED VIEW slow AS SELECT user_id, page, ms / 10 AS tens FROM clicks WHERE ms > 50",
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
        # A large ad hoc read runs on the cluster too.
        c.execute("SET streamdb.spark_read_threshold_rows = 0")
        out["adhoc"] = sorted(c.execute(QUERIES["per_plan"]).fetchall())
        assert c.execute("SHOW streamdb.last_query_engine").fetchone() == ("spark",)
    return out


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
    assert cluster_answers == local_answers
    assert cluster_answers["per_plan"] and cluster_answers["slow"]
