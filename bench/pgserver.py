"""A throwaway PostgreSQL server from the machine's binaries (initdb + postgres on 127.0.0.1).

Used by the benchmarks (bench/pg_compare.py) and by the `postgres_server` fixture in
tests/conftest.py. Finds `initdb`/`postgres` on PATH, via `pg_config --bindir` or in the usual
places (/usr/lib/postgresql/*/bin, ...). PostgreSQL refuses to run as root: run as root, the
server runs as the 'postgres' (or else 'nobody') account, which owns the temporary directory.
Settings favour speed over durability (fsync, synchronous_commit and full_page_writes off).

    server = PostgresServer(artifacts_dir)
    server.initdb(); server.start()
    ... psycopg.connect(server.dsn) ...
    server.cleanup()

Problems the caller cannot fix by retrying (no binaries, no account to run as, initdb failing)
raise PostgresSetupError; a server that does not come up raises RuntimeError.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ARTIFACTS = ROOT / "test-artifacts"


class PostgresSetupError(Exception):
    """PostgreSQL cannot be set up on this machine as it is (message says what to do)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bindir() -> Path:
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
    raise PostgresSetupError(
        "PostgreSQL server binaries (initdb, postgres) not found on PATH, via pg_config --bindir or "
        "in /usr/lib/postgresql/*/bin; install them (Debian/Ubuntu: apt-get install postgresql; "
        "macOS: brew install postgresql) or set STREAMDB_TEST_POSTGRES to the DSN of a server to use")


def postgres_run_as() -> pwd.struct_passwd | None:
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
    raise PostgresSetupError(
        "running as root, and neither a 'postgres' nor a 'nobody' account exists to run PostgreSQL "
        "as (it refuses to run as root); create one (useradd --system postgres)")


def reachable_by_others(path: Path) -> bool:
    """Whether every directory from / to ``path`` lets other users through (search permission)."""
    for d in [path, *path.parents]:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return False
    return True


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: have the kernel send SIGQUIT (immediate shutdown) to the postmaster if its parent dies."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def postgres_version(bindir: Path | None = None) -> str | None:
    """`postgres --version` of the binaries PostgresServer would use, or None."""
    try:
        d = bindir or postgres_bindir()
        out = subprocess.run([str(d / "postgres"), "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except (PostgresSetupError, OSError, subprocess.TimeoutExpired):
        return None


class PostgresServer:
    """A throwaway PostgreSQL cluster: initdb into a temporary directory, `postgres` on 127.0.0.1.

    ``settings`` are extra `-c name=value` options, after (so overriding) the defaults."""

    def __init__(self, artifacts: Path = DEFAULT_ARTIFACTS, settings: dict[str, str] | None = None) -> None:
        self.artifacts = artifacts
        self.settings = settings or {}
        self.bindir = postgres_bindir()
        self.account = postgres_run_as()
        base = Path(tempfile.gettempdir())
        # The unprivileged account must reach the directory; Unix socket paths must stay short.
        if (self.account is not None and not reachable_by_others(base)) or len(str(base)) > 60:
            base = Path("/tmp")
        self.dir = Path(tempfile.mkdtemp(prefix="streamdb-pg-", dir=base))
        if self.account is not None:
            os.chown(self.dir, self.account.pw_uid, self.account.pw_gid)
        self.data = self.dir / "data"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = artifacts / "postgres-init.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self.env.update(LC_ALL="C", LANG="C")
        if self.account is not None:
            self.env.update(HOME=str(self.dir), USER=self.account.pw_name, LOGNAME=self.account.pw_name)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_account(self) -> dict[str, Any]:
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def initdb(self) -> None:
        out = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            capture_output=True, text=True, env=self.env, cwd=str(self.dir), timeout=180, **self._as_account())
        if out.returncode != 0:
            raise PostgresSetupError(f"initdb failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")

    def start(self, timeout: float = 60, attempts: int = 3) -> None:
        self.artifacts.mkdir(exist_ok=True)
        settings = {
            # Speed over durability, and logical decoding for change-data-capture tests.
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "shared_buffers": "32MB", "max_connections": "100",
            "wal_level": "logical", "max_wal_senders": "10", "max_replication_slots": "10",
            **self.settings,
        }
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        for _ in range(attempts):
            self.port = free_port()
            self.log_path = self.artifacts / f"postgres-{self.port}.log"
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                     "-h", "127.0.0.1", "-k", str(self.dir), *options],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                    cwd=str(self.dir), preexec_fn=die_with_parent if sys.platform == "linux" else None,
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
