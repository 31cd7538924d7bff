"""A real `streamdb serve` process for end-to-end tests, reached over the wire protocol."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
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
