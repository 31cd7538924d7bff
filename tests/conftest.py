"""A real `streamdb serve` process for end-to-end tests, reached over the wire protocol."""

from __future__ import annotations

import glob
import os
import pwd
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One server process with its own data directory; restartable on the same directory and port."""

    def __init__(self, data_dir: Path, name: str = "server", extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.host = "127.0.0.1"
        self.name = name
        self.extra_env = extra_env or {}
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen[bytes] | None = None
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / f"{name}-{self.port}.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://streamdb@{self.host}:{self.port}/streamdb"

    def start(self, timeout: float = 60) -> None:
        env = {**os.environ, **self.extra_env}
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process's life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamdb.cli", "serve", "--host", self.host, "--port", str(self.port),
             "--data-dir", str(self.data_dir), "--spark-master", "local[2]", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
        )
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
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def restart(self) -> None:
        self.start()


@pytest.fixture(scope="session")
def server() -> Iterator[ServerProcess]:
    """The shared server for end-to-end tests (real Spark in local mode)."""
    with tempfile.TemporaryDirectory(prefix="streamdb-test-") as d:
        srv = ServerProcess(Path(d) / "data", "shared")
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


@pytest.fixture()
def fresh_server() -> Iterator[ServerProcess]:
    """A server of its own, for tests that kill or restart it."""
    # Not pytest's tmp_path: another pytest run on the machine may prune its base directory.
    with tempfile.TemporaryDirectory(prefix="streamdb-fresh-") as d:
        srv = ServerProcess(Path(d) / "data", "fresh")
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

def _postgres_bindir() -> Path:
    """The directory holding both `initdb` and `postgres` (PATH, `pg_config --bindir`, usual places)."""
    candidates: list[Path] = []
    for name in ("initdb", "postgres", "pg_ctl"):
        found = shutil.which(name)
        if found:
            candidates.append(Path(found).parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(Path(out.stdout.strip()))
        except (OSError, subprocess.TimeoutExpired):
            pass
    # Debian/Ubuntu keep the server binaries off PATH; also the source-build and Homebrew places.
    versioned = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name)
                       if Path(d).parent.name.isdigit() else 0, reverse=True)
    candidates += [Path(d) for d in versioned]
    candidates += [Path("/usr/local/pgsql/bin"), *map(Path, sorted(glob.glob("/opt/homebrew/opt/postgresql*/bin")))]
    for d in candidates:
        if (d / "initdb").is_file() and (d / "postgres").is_file():
            return d
    pytest.fail("PostgreSQL server binaries (initdb, postgres) not found on PATH, via pg_config --bindir or "
                "in /usr/lib/postgresql/*/bin; install them (Debian/Ubuntu: apt-get install postgresql; "
                "macOS: brew install postgresql) or set STREAMDB_TEST_POSTGRES to the DSN of a server to use",
                pytrace=False)


def _postgres_run_as() -> pwd.struct_passwd | None:
    """PostgreSQL refuses to run as root: as root, the unprivileged account to run it as."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            continue
        if account.pw_uid != 0:
            return account
    pytest.fail("running as root, and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL "
                "as (it refuses to run as root); create one (useradd --system postgres)", pytrace=False)


def _reachable_by_others(path: Path) -> bool:
    """Whether every directory from / to ``path`` lets other users through (search permission)."""
    for d in [path, *path.parents]:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
    return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: have the kernel send SIGQUIT (immediate shutdown) to the postmaster if pytest dies."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class PostgresServer:
    """A throwaway PostgreSQL cluster: initdb into a temporary directory, `postgres` on 127.0.0.1."""

    def __init__(self) -> None:
        self.bindir = _postgres_bindir()
        self.account = _postgres_run_as()
        base = Path(tempfile.gettempdir())
        # The unprivileged account must reach the directory; Unix socket paths must stay short.
        if (self.account is not None and not _reachable_by_others(base)) or len(str(base)) > 60:
            base = Path("/tmp")
        self.dir = Path(tempfile.mkdtemp(prefix="streamdb-pg-", dir=base))
        if self.account is not None:
            os.chown(self.dir, self.account.pw_uid, self.account.pw_gid)
        self.data = self.dir / "data"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = ARTIFACTS / "postgres-init.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self.env.update(LC_ALL="C", LANG="C")
        if self.account is not None:
            self.env.update(HOME=str(self.dir), USER=self.account.pw_name, LOGNAME=self.account.pw_name)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_account(self) -> dict:
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def initdb(self) -> None:
        out = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            capture_output=True, text=True, env=self.env, cwd=str(self.dir), timeout=180, **self._as_account())
        if out.returncode != 0:
            pytest.fail(f"initdb failed ({out.returncode}):\n{out.stdout}\n{out.stderr}", pytrace=False)

    def start(self, timeout: float = 60, attempts: int = 3) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        for _ in range(attempts):
            self.port = free_port()
            self.log_path = ARTIFACTS / f"postgres-{self.port}.log"
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                     "-h", "127.0.0.1", "-k", str(self.dir),
                     # Speed over durability, and logical decoding for change-data-capture tests.
                     "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                     "-c", "shared_buffers=32MB", "-c", "max_connections=100",
                     "-c", "wal_level=logical", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                    cwd=str(self.dir), preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                    **self._as_account())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with psycopg.connect(self.dsn, connect_timeout=2, autocommit=True) as conn:
                        conn.execute("SELECT 1")
                    return
                except psycopg.OperationalError:
                    time.sleep(0.1)
            else:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not accept connections within {timeout}s; see {self.log_path}")
            log_text = self.log_path.read_text(errors="replace")
            if "could not bind" not in log_text and "already in use" not in log_text:
                break  # not a lost race for the port: retrying will not help
        raise RuntimeError(f"PostgreSQL exited with {self.proc.returncode if self.proc else None}; "
                           f"see {self.log_path}:\n" + self.log_path.read_text(errors="replace")[-3000:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # SIGINT: fast shutdown (disconnect clients, checkpoint); SIGQUIT: immediate; then SIGKILL.
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGQUIT, 10)):
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
        self.proc.kill()
        self.proc.wait()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


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
    server = PostgresServer()
    try:
        server.initdb()
        server.start()
        yield server.dsn
    finally:
        server.cleanup()
