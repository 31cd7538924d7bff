"""A REAL full disk (a small tmpfs as the data directory; needs root and `mount`), for `make soak`.

The test suite injects ENOSPC instead (tests/test_e2e_faults.py, STREAMDB_TEST_FAULT_FILE) because
mounting needs privileges. This check shows what happens with RocksDB's own error handling: writes
fail with 53100 and are not acknowledged, reads and the server keep working, and once space is
freed writes resume after a restart (RocksDB keeps a failed WAL write's error until reopened).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import ServerProcess
from tests.faults.kill_cycles import wait_until_converged

TMPFS_MB = 48
BALLAST_MB = 28  # freed later; larger than the data, so reopening (which flushes the WAL) fits
ROW_PAYLOAD = "x" * 20_000
CHECKS = {"s_by_grp": ("SELECT grp, n FROM s_by_grp", "SELECT grp, count(*) FROM s GROUP BY grp")}


def run_real_disk_full() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="streamdb-tmpfs-") as d:
        mnt = Path(d) / "mnt"
        mnt.mkdir()
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mnt)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            return {"ok": True, "skipped": f"cannot mount a tmpfs here: {mounted.stderr.strip()}"}
        try:
            return _check(mnt)
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _check(mnt: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"tmpfs_mb": TMPFS_MB}
    ballast = mnt / "ballast"
    ballast.write_bytes(b"\0" * (BALLAST_MB << 20))
    srv = ServerProcess(mnt / "data", "tmpfs")
    srv.start()
    try:
        acked: list[int] = []
        with srv.connect() as c:
            c.execute("CREATE STREAM s (id INT, grp INT, payload TEXT)")
            c.execute("CREATE MATERIALIZED VIEW s_by_grp AS SELECT grp, count(*) AS n FROM s GROUP BY grp")
            failure = None
            for i in range(100_000):
                try:
                    c.execute("INSERT INTO s VALUES (%s, %s, %s)", (i, i % 5, ROW_PAYLOAD))
                except psycopg.Error as e:
                    failure = e
                    break
                acked.append(i)
            out["rows_acknowledged_before_full"] = len(acked)
            out["write_error"] = None if failure is None else f"{failure.sqlstate}: {failure}"
            out["write_error_is_53100"] = failure is not None and failure.sqlstate == "53100"
            again = _try_insert(c, -1)
            out["second_write_sqlstate"] = again
            out["reads_work_while_full"] = c.execute("SELECT count(*) FROM s").fetchone() == (len(acked),)
            out["server_alive_while_full"] = srv.proc is not None and srv.proc.poll() is None
        ballast.unlink()  # space is freed
        time.sleep(1)
        with srv.connect() as c:
            out["write_after_freeing_without_restart"] = _try_insert(c, -2)
        started = time.monotonic()
        out["sigterm_exit_code"] = srv.stop(timeout=30)
        out["sigterm_seconds"] = round(time.monotonic() - started, 2)
        srv.restart()
        with srv.connect() as c:
            out["write_after_restart"] = _try_insert(c, -3)
            ids = {r[0] for r in c.execute("SELECT id FROM s").fetchall()}
            out["missing_after_restart"] = len(set(acked) - ids)
            out["unacknowledged_visible_after_restart"] = sorted(ids - set(acked) - {-3})
        converged = wait_until_converged(srv, CHECKS)
        out["view_converged_seconds"] = None if converged is None else round(converged, 1)
    finally:
        try:
            srv.stop(timeout=30)
        except Exception:  # noqa: BLE001 - already dead is fine
            pass
    out["server_log"] = str(srv.log_path)
    out["ok"] = bool(out["write_error_is_53100"] and out["reads_work_while_full"] and out["server_alive_while_full"]
                     and out["write_after_restart"] == "ok" and out["missing_after_restart"] == 0
                     and len(out["unacknowledged_visible_after_restart"]) <= 1
                     and out["view_converged_seconds"] is not None)
    return out


def _try_insert(conn: psycopg.Connection, i: int) -> str:
    try:
        conn.execute("INSERT INTO s VALUES (%s, 0, 'small')", (i,))
        return "ok"
    except psycopg.Error as e:
        return f"{e.sqlstate}: {e}"


if __name__ == "__main__":
    import json

    print(json.dumps(run_real_disk_full(), indent=1))
