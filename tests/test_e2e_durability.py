"""Durability and lifecycle of a real server process: kill -9, SIGTERM, concurrent DDL."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ServerProcess, live_group_members, own_server
from tests.test_e2e_metrics import scrape, value

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


# Every log append after a partition's first goes to the log as an ingested SST file
# (docs/storage.md), and every pipeline batch is committed beside Spark's next (docs/views.md): a
# kill -9 may land between a file and its commit, or between Spark's record of a batch and the
# server's.
EVERY_BATCH_THE_LARGE_WAY = {"STREAMDB_STORAGE_INGEST_BYTES": "1", "STREAMDB_PIPELINE_ASYNC_COMMIT_ROWS": "1"}


def sst_file_helpers(srv: ServerProcess) -> list[int]:
    """The server's helper processes that build its SST files (storage/sst_files.py): in the
    server's process group, as everything it starts."""
    assert srv.proc is not None
    found = []
    for pid in live_group_members(srv.proc.pid):
        with contextlib.suppress(OSError):  # gone meanwhile
            if b"streamdb.storage.sst_files" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def wait_gone(srv: ServerProcess, timeout: float = 15) -> list[int]:
    """The server's SST file helpers still alive after up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while (alive := sst_file_helpers(srv)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


@pytest.fixture()
def ingesting_server() -> Iterator[ServerProcess]:
    """A server of its own that writes every batch as a large one would be (above)."""
    with own_server("ingest", extra_env=EVERY_BATCH_THE_LARGE_WAY) as srv:
        yield srv


def test_acknowledged_writes_survive_kill_9(ingesting_server):
    srv = ingesting_server
    acknowledged: list[int] = []
    with srv.connect() as c:
        c.execute("CREATE STREAM events (id INT, payload TEXT) WITH (partitions = 2)")
        c.execute("CREATE TABLE state (id INT PRIMARY KEY, v INT)")
        c.execute('CREATE STREAM loose WITH (FORMAT = "JSON")')
        c.execute("INSERT INTO loose (a, b) VALUES (1, 'x')")

    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            with srv.connect() as c:
                i = offset
                while not stop.is_set():
                    try:
                        c.execute("INSERT INTO events VALUES (%s, %s)", (i, f"p{i}"))
                        c.execute("INSERT INTO state VALUES (%s, %s)", (i % 10, i))
                    except psycopg.OperationalError:
                        return  # the server died mid-statement: that write was never acknowledged
                    acknowledged.append(i)
                    i += 2
        except psycopg.OperationalError:
            return
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    helpers = sst_file_helpers(srv)
    srv.kill9()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(acknowledged) > 10
    # The helper that built the files ends with the server: its input closed.
    assert len(helpers) == 1, helpers
    assert wait_gone(srv) == []

    srv.restart()
    with srv.connect() as c:
        ids = {r[0] for r in c.execute("SELECT id FROM events").fetchall()}
        assert set(acknowledged) <= ids, sorted(set(acknowledged) - ids)[:10]
        # At most the in-flight insert per writer may have landed without being acknowledged.
        assert len(ids - set(acknowledged)) <= 2
        kinds = dict(c.execute("SHOW ALL").fetchall())
        assert kinds == {"events": "stream", "state": "table", "loose": "stream"}
        assert c.execute("SELECT a, b FROM loose").fetchall() == [(1, "x")]
        # The table holds, per key, the last acknowledged value or the in-flight one after it.
        state = dict(c.execute("SELECT id, v FROM state").fetchall())
        for key in range(10):
            acked = [i for i in acknowledged if i % 10 == key]
            if acked:
                assert state[key] >= max(acked)
        c.execute("INSERT INTO events VALUES (-1, 'after restart')")
        assert c.execute("SELECT count(*) FROM events WHERE id = -1").fetchone() == (1,)


def test_sigterm_shuts_down_cleanly_and_loses_nothing(ingesting_server):
    """SIGTERM while a client writes: exit 0 within 30 s; every acknowledged write and the views
    survive (their changes and the stream's rows written as ingested files)."""
    srv = ingesting_server
    with srv.connect() as c:
        c.execute("CREATE TABLE t (k INT PRIMARY KEY, v TEXT)")
        c.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        c.execute("CREATE STREAM ev (id INT)")
        c.execute("CREATE MATERIALIZED VIEW ev_count AS SELECT count(*) AS n FROM ev")
        # Kept as its log alone (append-only), and kept as rows with retractions (each new id
        # replaces its group's count): their row counts after the restart come from the storage's
        # running weight sums, not from this process (docs/storage.md).
        c.execute("CREATE MATERIALIZED VIEW ev_even AS SELECT id FROM ev WHERE id % 2 = 0")
        c.execute("CREATE MATERIALIZED VIEW ev_tens AS SELECT id / 10 AS g, count(*) AS n FROM ev GROUP BY id / 10")
        c.execute("FLUSH")
    acknowledged: list[int] = []
    writing = threading.Event()

    def writer() -> None:
        try:
            with srv.connect() as c:
                for i in range(1_000_000):
                    c.execute("INSERT INTO ev VALUES (%s)", (i,))
                    acknowledged.append(i)
                    writing.set()
        except psycopg.Error:
            return  # the server shut down: the statement in flight was not acknowledged

    thread = threading.Thread(target=writer)
    thread.start()
    assert writing.wait(timeout=30)
    time.sleep(0.5)
    # The stream's rows and the views' changes went to the log as ingested files, built by the
    # helper process but for the first.
    scraped = scrape(srv)
    assert value(scraped, "streamdb_storage_ingested_batches_total") > 10
    assert value(scraped, "streamdb_storage_sst_files_built_total", by="helper") > 5
    assert value(scraped, "streamdb_storage_sst_files_built_total", by="server") == 1
    assert len(sst_file_helpers(srv)) == 1
    started = time.monotonic()
    assert srv.stop(timeout=30) == 0
    assert wait_gone(srv) == []
    shutdown_seconds = time.monotonic() - started
    # The batches the shutdown cancelled are expected: no ERROR (py4j logged each with both stack
    # traces).
    assert [line for line in srv.log_path.read_text(errors="replace").splitlines() if " ERROR " in line] == []
    thread.join(timeout=30)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "sigterm.json").write_text(json.dumps(
        {"shutdown_seconds": round(shutdown_seconds, 2), "rows_acknowledged": len(acknowledged)}) + "\n")
    print(f"SIGTERM shutdown took {shutdown_seconds:.2f} s with a writer connected")
    assert shutdown_seconds < 30
    assert len(acknowledged) > 0

    srv.restart()
    with srv.connect() as c:
        assert c.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [(1, "a"), (2, "b")]
        ids = [r[0] for r in c.execute("SELECT id FROM ev").fetchall()]
        assert set(acknowledged) <= set(ids) and len(ids) == len(set(ids))
        assert len(ids) - len(acknowledged) <= 1  # at most the insert in flight at the signal
        c.execute("FLUSH")
        assert c.execute("SELECT n FROM ev_count").fetchone() == (len(ids),)
        for view, recomputed in (("ev_even", "SELECT count(*) FROM ev WHERE id % 2 = 0"),
                                 ("ev_tens", "SELECT count(DISTINCT id / 10) FROM ev")):
            counted = c.execute(f"SELECT count(*) FROM {view}").fetchone()[0]  # before any read of its rows
            assert c.execute("SHOW streamdb.last_query_engine").fetchone() == ("count",)
            expected = c.execute(recomputed).fetchone()[0]
            assert counted == expected == len(c.execute(f"SELECT * FROM {view}").fetchall()) > 0, view


def processes_naming(path: Path) -> list[int]:
    """Processes whose command line names `path` (the Spark JVM names its data directory)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(path).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
    return found


def test_sigterm_while_spark_starts_ends_its_jvm_before_the_server_exits():
    """The JVM runs in a process group of its own: a server stopped while Spark was still starting
    left it running for a moment, writing its scratch directories into the data directory after
    the server had exited (CI: a test's removal of that directory failed)."""
    with own_server("stop-starting") as srv:
        assert srv.proc is not None
        deadline = time.monotonic() + 60
        while not (jvms := processes_naming(srv.data_dir)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert jvms, "the Spark JVM was not launched"
        assert "Spark ready" not in srv.log_path.read_text(errors="replace")
        srv.proc.terminate()
        assert srv.proc.wait(timeout=60) == 0
        assert processes_naming(srv.data_dir) == []
        assert "Spark failed to start" not in srv.log_path.read_text(errors="replace")
        srv.start()  # and the next start is a working server
        with srv.connect() as c:
            c.execute("CREATE STREAM ev (id INT)")
            c.execute("CREATE MATERIALIZED VIEW n_ev AS SELECT count(*) AS n FROM ev")
            c.execute("INSERT INTO ev VALUES (1), (2)")
            c.execute("FLUSH")
            assert c.execute("SELECT n FROM n_ev").fetchone() == (2,)


def test_a_batch_spark_recorded_before_the_server_committed_it_runs_again_after_kill_9():
    """A batch committed beside Spark's next: the server is killed after Spark recorded the batch
    as done and before the server's commit landed (the commit-beside-kill failpoint). At the
    restart the pipeline's checkpoint is rewound to the last batch the server committed, so the
    batch is not skipped: each view equals its batch recomputation, with the batch's rows once."""
    marker = "streamdb-failpoint:commit-beside-kill"
    with own_server("rewind", extra_env={**EVERY_BATCH_THE_LARGE_WAY,
                                         "STREAMDB_TEST_FAILPOINTS": "commit-beside-kill"}) as srv:
        with srv.connect() as c:
            c.execute("CREATE STREAM ev (id INT, tag TEXT) WITH (partitions = 2)")
            c.execute("CREATE MATERIALIZED VIEW ev_copy AS SELECT id, tag FROM ev WHERE id > 0")
            c.execute("CREATE MATERIALIZED VIEW ev_by_tag AS SELECT tag, count(*) AS n, sum(id) AS total "
                      "FROM ev GROUP BY tag")
            c.execute("INSERT INTO ev SELECT i, 't' || (i % 3) FROM generate_series(1, 100) AS i")
            c.execute("FLUSH")
            assert c.execute("SELECT count(*) FROM ev_copy").fetchone() == (100,)
            c.execute("INSERT INTO ev VALUES (101, %s), (102, 't1')", (marker,))
        assert srv.proc is not None
        assert srv.proc.wait(timeout=90) == -9  # the failpoint, once Spark had the batch's commit
        srv.end_process_groups()
        srv.extra_env = EVERY_BATCH_THE_LARGE_WAY
        srv.start()
        with srv.connect() as c:
            c.execute("SET statement_timeout = 60000")  # a skipped batch: FLUSH would wait forever
            c.execute("FLUSH")
            copied = sorted(c.execute("SELECT id, tag FROM ev_copy").fetchall())
            assert copied == sorted(c.execute("SELECT id, tag FROM ev WHERE id > 0").fetchall())
            assert len(copied) == 102 and (101, marker) in copied
            by_tag = sorted(c.execute("SELECT tag, n, total FROM ev_by_tag").fetchall())
            assert by_tag == sorted(c.execute("SELECT tag, count(*), sum(id) FROM ev GROUP BY tag").fetchall())
            assert (marker, 1, 101) in by_tag and ("t1", 35, sum(range(1, 101, 3)) + 102) in by_tag
            c.execute("INSERT INTO ev VALUES (103, 't0')")
            c.execute("FLUSH")
            assert c.execute("SELECT count(*) FROM ev_copy").fetchone() == (103,)
        assert "checkpoint rewound by 1 batch(es)" in srv.log_path.read_text(errors="replace")


def test_concurrent_ddl_keeps_the_catalog_consistent(server, unique):
    names = [f"ddl_{unique}_{i}" for i in range(12)]
    failures: list[BaseException] = []

    def create(batch: list[str]) -> None:
        try:
            with server.connect() as c:
                for n in batch:
                    c.execute(f"CREATE STREAM IF NOT EXISTS {n} (a INT)")
                    c.execute(f"INSERT INTO {n} VALUES (1)")
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=create, args=(names[i::3],)) for i in range(3)]
    threads.append(threading.Thread(target=create, args=(names,)))  # races the others on every name
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures, failures
    with server.connect() as c:
        listed = {r[0] for r in c.execute("SHOW STREAMS").fetchall()}
        assert set(names) <= listed
        for n in names:
            assert c.execute(f"SELECT count(*) FROM {n}").fetchone()[0] in (1, 2)
