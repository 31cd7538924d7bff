"""Backup and restore as docs/guide/operations.md describes them: stop the server, copy the data
directory (`cp -a`), start a server on the copy. Rows, the catalog and a materialized view must come
back intact, and the view must go on being maintained on the copy."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import ServerProcess

VIEW = "SELECT user_id, count(*) AS clicks, sum(ms) AS total_ms FROM clicks GROUP BY user_id"


def _view(srv: ServerProcess) -> list[tuple]:
    with srv.connect() as c:
        c.execute("FLUSH")
        return sorted(c.execute("SELECT user_id, clicks, total_ms FROM per_user").fetchall())


@pytest.mark.slow
def test_a_copy_of_the_stopped_servers_data_directory_is_a_working_server():
    with tempfile.TemporaryDirectory(prefix="streamdb-backup-") as d:
        work = Path(d)
        original = ServerProcess(work / "data", "backup-original")
        original.start()
        try:
            with original.connect() as c:
                c.execute("CREATE TABLE users (id INT PRIMARY KEY, name TEXT, plan TEXT)")
                c.execute("CREATE STREAM clicks (user_id INT, page TEXT, ms INT)")
                c.execute(f"CREATE MATERIALIZED VIEW per_user AS {VIEW}")
                c.execute("INSERT INTO users VALUES (1, 'ann', 'free'), (2, 'bob', 'pro')")
                c.execute("UPDATE users SET plan = 'team' WHERE id = 2")
                c.execute("INSERT INTO clicks VALUES (1, '/a', 10), (1, '/b', 20), (2, '/a', 5)")
            assert _view(original) == [(1, 2, 30), (2, 1, 5)]
        finally:
            assert original.stop() == 0  # a clean stop: SIGTERM

        # The backup, exactly as the guide shows it.
        backup = work / "backup"
        subprocess.run(["cp", "-a", str(original.data_dir), str(backup)], check=True)
        # The original is gone (another machine, a lost disk): nothing may still read it. Spark's
        # checkpoints named its files by absolute path, and the restored views failed every batch.
        shutil.rmtree(original.data_dir)
        # Restoring is copying it back to where a server will use it (here: a new place).
        restored_dir = work / "restored"
        subprocess.run(["cp", "-a", str(backup), str(restored_dir)], check=True)

        restored = ServerProcess(restored_dir, "backup-restored")
        restored.start()
        try:
            with restored.connect() as c:
                assert sorted(c.execute("SELECT id, name, plan FROM users").fetchall()) == [
                    (1, "ann", "free"), (2, "bob", "team")]
                assert sorted(c.execute("SELECT user_id, page, ms FROM clicks").fetchall()) == [
                    (1, "/a", 10), (1, "/b", 20), (2, "/a", 5)]
            assert _view(restored) == [(1, 2, 30), (2, 1, 5)]
            # Still maintained: new events reach the view, which agrees with the query it stands for.
            with restored.connect() as c:
                c.execute("INSERT INTO clicks VALUES (2, '/c', 7), (3, '/a', 1)")
            assert _view(restored) == [(1, 2, 30), (2, 2, 12), (3, 1, 1)]
            with restored.connect() as c:
                assert sorted(c.execute(VIEW).fetchall()) == [(1, 2, 30), (2, 2, 12), (3, 1, 1)]
                c.execute("DELETE FROM users WHERE id = 1")
                assert c.execute("SELECT id FROM users").fetchall() == [(2,)]
        finally:
            assert restored.stop() == 0

        # The backup itself was not changed by the restored server's writes: restoring it again
        # gives the state at backup time.
        again = ServerProcess(work / "again", "backup-again")
        subprocess.run(["cp", "-a", str(backup), str(again.data_dir)], check=True)
        again.start()
        try:
            assert _view(again) == [(1, 2, 30), (2, 1, 5)]
        finally:
            assert again.stop() == 0
