"""A real `streamdb serve` process for end-to-end tests, reached over the wire protocol."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql
import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
# Modules that start Spark inside the pytest process. pyspark forks its JVM with a Python pre-exec
# hook, which crashes the child once DuckDB's threads exist in this process (any in-process planning
# or embedded query starts them): these modules run first, whatever their names.
IN_PROCESS_SPARK_MODULES = ("test_spark_runtime.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in IN_PROCESS_SPARK_MODULES)  # stable: order kept otherwise


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports: held open together while chosen (two calls to free_port() can
    give the same port, and a server's console then could not listen)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# The test servers' Spark JVMs compile with C1 only: each lives for a few tests over small data,
# where C2's compiles never pay for themselves (a third of the suite's JVM CPU went to compiler
# threads; docs/testing.md). A test's extra_env may set its own.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


class ServerProcess:
    """One server process with its own data directory; restartable on the same directory and port."""

    def __init__(self, data_dir: Path, name: str = "server", extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        # parallel servers must not collide on the default 6876 console port
        self.port, self.console_port = free_ports(2)
        self.host = "127.0.0.1"
        self.name = name
        self.extra_env = extra_env or {}
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None
        # Each start is a process group of its own: the Spark JVM a killed server leaves behind stays
        # in it, so stop() can end it before the data directory is removed.
        self.process_groups: list[int] = []
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / f"{name}-{self.port}.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://streamdb@{self.host}:{self.port}/streamdb"

    def start(self, timeout: float = 60) -> None:
        env = {"STREAMDB_SPARK_JVM_OPTIONS": TEST_JVM_OPTIONS, **os.environ, **self.extra_env}
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process's life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamdb.cli", "serve", "--host", self.host, "--port", str(self.port),
             "--console-port", str(self.console_port), "--data-dir", str(self.data_dir),
             "--spark-master", "local[2]", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT), start_new_session=True,
        )
        self.process_groups.append(self.proc.pid)
        _STARTED.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log_path}:\n"
                                   + self.log_path.read_text()[-3000:])
            try:
                with psycopg.connect(self.dsn, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not accept connections within {timeout}s; see {self.log_path}")

    def connect(self, **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, **kwargs)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 40) -> int:
        if self.proc is None or self.proc.poll() is not None:
            self.end_process_groups()
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.end_process_groups()

    def end_process_groups(self, timeout: float = 30) -> None:
        """Kill what is left of every start (a killed server's JVM exits on its own, but not at once)
        and wait until it is gone, so nothing writes into a data directory being removed."""
        deadline = time.monotonic() + timeout
        for pgid in self.process_groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            while live_group_members(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.process_groups = [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []

    def restart(self) -> None:
        self.start()


_STARTED: list[ServerProcess] = []


def live_group_members(pgid: int) -> list[int]:
    """Processes of the group that still run (a container's init may leave zombies unreaped)."""
    members = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat_file.parent.name))
    return members


def pytest_sessionfinish() -> None:
    # Servers in their own process groups do not hear an interrupted run's signals.
    for srv in _STARTED:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait()
        srv.end_process_groups(timeout=5)


@contextlib.contextmanager
def server_directory(prefix: str) -> Iterator[str]:
    """A temporary directory for a server's data, removed at exit. Removal is retried: a process
    outside the server's process groups (a Python worker Spark started) can still be writing
    into it for a moment after the server is gone."""
    # Not pytest's tmp_path: another pytest run on the machine may prune its base directory.
    d = tempfile.mkdtemp(prefix=prefix)
    try:
        yield d
    finally:
        for attempt in range(20):
            try:
                shutil.rmtree(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                if attempt == 19:
                    raise
                time.sleep(0.25)


@contextlib.contextmanager
def running_server(name: str, extra_env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """A started server on a data directory of its own, stopped and removed at exit."""
    with server_directory(f"streamdb-{name}-") as d:
        srv = ServerProcess(Path(d) / "data", name, extra_env=extra_env)
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


def create_views(server: ServerProcess, views: dict[str, str], sessions: int = 8) -> None:
    """`CREATE MATERIALIZED VIEW name AS query` for each of `views`, from several sessions at once
    (as clients would): the pipeline takes them in a few restarts, where one session creating
    them in turn costs a restart and a first batch per view."""
    def create(name: str) -> None:
        with server.connect() as own:
            own.execute(f"CREATE MATERIALIZED VIEW {name} AS {views[name]}")

    with ThreadPoolExecutor(sessions) as pool:
        list(pool.map(create, views))


_SHARED: list[ServerProcess] = []  # the shared server, once a test has asked for it


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    """The shared server for end-to-end tests (real Spark in local mode), with the failpoints
    a test hits by writing their marker (streamdb/runtime/failpoints.py)."""
    with running_server("shared", {"STREAMDB_TEST_FAILPOINTS": "view-commit,read-pause"}) as srv:
        _SHARED.append(srv)
        try:
            yield srv
        finally:
            _SHARED.remove(srv)


def _shared_views() -> set[str] | None:
    """The materialized views on the shared server, or None when it is not running."""
    if not _SHARED or _SHARED[0].proc is None or _SHARED[0].proc.poll() is not None:
        return None
    with _SHARED[0].connect() as c:
        return {r[0] for r in c.execute("SHOW MATERIALIZED VIEWS").fetchall()}


def _drop_shared_views(names: set[str]) -> None:
    if names:
        with _SHARED[0].connect() as c:
            c.execute(psycopg.sql.SQL("DROP MATERIALIZED VIEW IF EXISTS {} CASCADE").format(
                psycopg.sql.SQL(", ").join(psycopg.sql.Identifier(n) for n in sorted(names))))


@pytest.fixture(autouse=True, scope="module")
def _drop_shared_views_after_module() -> Iterator[None]:
    """The materialized views a module left on the shared server (its module-scoped fixtures')
    are dropped after it. All views of one depth share a Spark pipeline, so a view nobody reads
    any more still costs every later batch and restart of its pipeline: beside 96 such views, a
    FLUSH of the property test's 32 took 13.6 s instead of 6.3 (docs/testing.md)."""
    yield
    _drop_shared_views(_shared_views() or set())


@pytest.fixture(autouse=True)
def _drop_shared_views_after_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """The materialized views a test made on the shared server are dropped after it, not at its
    module's end: each CREATE restarts its depth's pipeline with every view of that depth, so
    views a module's earlier tests left made each later CREATE and batch cost more. Views that
    were there before the test (a module-scoped fixture's) stay."""
    before = _shared_views() if "server" in request.fixturenames else None
    yield
    if before is not None:
        _drop_shared_views((_shared_views() or set()) - before)


@pytest.fixture()
def fresh_server() -> Iterator[ServerProcess]:
    """A server of its own, for tests that kill or restart it."""
    with own_server("fresh") as srv:
        yield srv


@contextlib.contextmanager
def own_server(name: str, extra_env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """A started server in a directory of its own, stopped (if still running) and removed after."""
    with server_directory(f"streamdb-{name}-") as d:
        srv = ServerProcess(Path(d) / "data", name, extra_env=extra_env)
        srv.start()
        try:
            yield srv
        finally:
            try:
                srv.stop()
            except Exception:  # noqa: BLE001 - already dead is fine
                pass


@pytest.fixture()
def conn(server: ServerProcess) -> Iterator[psycopg.Connection]:
    with server.connect() as c:
        yield c


_counter = iter(range(1_000_000))


@pytest.fixture()
def unique() -> str:
    """A name suffix unique in this test session, so tests on the shared server don't collide."""
    return f"{os.getpid()}_{next(_counter)}"


# --- Kafka -------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """bootstrap.servers of a Kafka cluster for the session: $STREAMDB_TEST_KAFKA if set, else
    librdkafka's mock cluster run by tests/kafka_mock.py (see its docstring for what it can do)."""
    external = os.environ.get("STREAMDB_TEST_KAFKA")
    if external:
        yield external
        return
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"kafka-mock-{os.getpid()}.log"
    with open(log_path, "ab") as log:
        # stdin stays an open pipe: the mock exits when it closes, so it never outlives this session.
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "kafka_mock.py")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=str(ROOT))
    try:
        stdout = proc.stdout
        assert stdout is not None
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=30).decode().strip()
        except queue.Empty:
            line = ""
        if not line:
            raise RuntimeError(f"the Kafka mock cluster did not start (exit code {proc.poll()}); see {log_path}:\n"
                               + log_path.read_text(errors="replace")[-3000:])
        yield line
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture()
def kafka_topic() -> str:
    """A topic name no other test (or test run) uses; the topic itself is created on first use."""
    return f"t_{uuid.uuid4().hex[:16]}"


# --- PostgreSQL ----------------------------------------------------------------------------------------

def _load_pgserver():
    """bench/pgserver.py (shared with the benchmarks), loaded by path: bench/ is not a package."""
    spec = importlib.util.spec_from_file_location("streamdb_bench_pgserver", ROOT / "bench" / "pgserver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_pgserver = _load_pgserver()
PostgresSetupError = _pgserver.PostgresSetupError


_PostgresServerBase: Any = _pgserver.PostgresServer  # Any: mypy cannot see a module loaded by path


class PostgresServer(_PostgresServerBase):
    """A throwaway PostgreSQL cluster (bench/pgserver.py) whose logs go to test-artifacts/."""

    def __init__(self) -> None:
        super().__init__(ARTIFACTS)


# --- MQTT ------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def mqtt_broker() -> Iterator[Any]:
    """A real Mosquitto broker for the session (tests/mqtt_util.py)."""
    from tests.mqtt_util import Broker

    broker = Broker()
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """DSN of a real PostgreSQL server for the session (user postgres, trust auth, database postgres):
    $STREAMDB_TEST_POSTGRES if set, else a fresh cluster from the machine's binaries, on 127.0.0.1.
    Fails (never skips) when the binaries are missing. Run as root, the server runs as the
    'postgres' (or else 'nobody') account, which owns the temporary directory."""
    external = os.environ.get("STREAMDB_TEST_POSTGRES")
    if external:
        yield external
        return
    try:
        server = PostgresServer()
    except PostgresSetupError as e:  # no binaries, or no account to run them as (when root)
        pytest.fail(str(e), pytrace=False)
    try:
        try:
            server.initdb()
        except PostgresSetupError as e:
            pytest.fail(str(e), pytrace=False)
        server.start()
        yield server.dsn
    finally:
        server.cleanup()
