"""node-postgres (`pg` from npm) against a real server: simple and parameterized queries, named
prepared statements, and push queries (EMIT CHANGES) whose rows arrive one by one while another
connection inserts (tests/node/streamdb_pg.js prints what it saw as JSON)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

NODE_PROJECT = ROOT / "tests" / "node"


@pytest.fixture(scope="session")
def node_deps() -> None:
    """node, npm and tests/node's locked dependencies (scripts/ensure-node-deps.sh runs `npm ci`)."""
    subprocess.run([str(ROOT / "scripts" / "ensure-node-deps.sh")], check=True, timeout=600)


def run_node_program(server, suffix: str) -> dict:
    out = subprocess.run(["node", "streamdb_pg.js", server.host, str(server.port), suffix],
                         capture_output=True, text=True, timeout=600, cwd=NODE_PROJECT)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return json.loads(out.stdout)


def test_node_postgres_queries_and_push_rows_one_by_one(node_deps, server, conn, unique):
    got = run_node_program(server, unique)

    # Simple protocol, typed by OID: int4 23, text 25, bool 16.
    assert got["simple"] == [{"answer": 42, "greeting": "hi", "yes": True}]
    assert got["simpleTypes"] == [["answer", 23], ["greeting", 25], ["yes", 16]]
    # Extended protocol: parameters sent untyped (OID 0) and inferred by the server.
    assert got["insertCount"] == 3
    assert got["updateCount"] == 1
    assert got["param"] == [{"device": "a", "reading": 1.5, "seq": 1}, {"device": "b", "reading": 2.5, "seq": 2}]
    assert got["named"] == [[{"seq": 1}, {"seq": 3}], [{"seq": 2}]]
    # pg returns int8 as a string (it may not fit a JS number).
    assert got["users"] == [{"id": "1", "name": "ann", "active": True}, {"id": "2", "name": "bob", "active": True}]
    assert got["error"] == "42703"

    for key, expected in (("push", [("c", 10), ("d", 11), ("e", 12)]),
                          ("pushWithParameter", [("f", 100), ("h", 101)])):
        push = got[key]
        assert push["fields"] == ["op", "rowtime", "device", "seq"]
        assert [(a["row"]["op"], a["row"]["device"], a["row"]["seq"]) for a in push["arrivals"]] == \
            [("insert", device, seq) for device, seq in expected]
        assert all(a["row"]["rowtime"] for a in push["arrivals"])
        # Each matching insert's row arrived before the next insert, while the query still ran;
        # the row the filter drops (seq 5 / 99) brought nothing.
        assert all(a["whileRunning"] for a in push["arrivals"])
        assert push["steps"] == ([1, 1, 2, 3] if key == "push" else [1, 1, 2])
        # A cancel request ended it with 57014 and the connection stayed usable.
        assert push["end"] == {"ended": "error", "code": "57014"}
        assert push["afterCancel"] == [{"ok": 1}]
    assert got["total"] == 10
    assert conn.execute(f"SELECT count(*) FROM nevents_{unique} WHERE seq >= 10").fetchone() == (6,)
    # Cancelled push queries are gone from SHOW QUERIES.
    deadline = time.monotonic() + 10
    while [q for q in conn.execute("SHOW QUERIES").fetchall() if q[1] == "push query"]:
        assert time.monotonic() < deadline, "a cancelled push query is still registered"
        time.sleep(0.1)
