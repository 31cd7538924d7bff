"""Authentication and TLS against a real `streamdb serve`: SCRAM-SHA-256 over verified TLS with psql,
psycopg and asyncpg; refusals; and the refusal to serve a public address with trust authentication."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import asyncpg
import psycopg
import pytest
from conftest import ROOT, ServerProcess
from tls_certs import CertificateFiles, make_test_certificates

ADMIN_PASSWORD = "admin-Pw-7431"
ALICE_PASSWORD = "alice-Pw-2209"
# These tests are about the wire layer and the catalog's roles: Spark stays off to spare the CPU.
NO_SPARK = {"STREAMDB_SPARK_ENABLED": "false"}


class PasswordServer(ServerProcess):
    """A server whose readiness probe (and dsn) logs in with a password, over TLS when asked."""

    user = "streamdb"
    password = ""
    sslmode = "disable"

    @property
    def dsn(self) -> str:
        auth = quote(self.user) + (":" + quote(self.password) if self.password else "")
        return f"postgresql://{auth}@{self.host}:{self.port}/streamdb?sslmode={self.sslmode}"


class SecureServer(PasswordServer):
    def __init__(self, data_dir: Path, certs: CertificateFiles, extra_args: list[str]) -> None:
        super().__init__(data_dir, "secure", extra_env=NO_SPARK, extra_args=extra_args)
        self.certs = certs

    def libpq_dsn(self, user: str, sslmode: str = "verify-full", **extra: str) -> str:
        params = {"host": "localhost", "port": str(self.port), "user": user, "dbname": "streamdb",
                  "sslmode": sslmode, "sslrootcert": str(self.certs.ca), **extra}
        return " ".join(f"{k}={v}" for k, v in params.items())


@pytest.fixture(scope="module")
def secure_server() -> Iterator[SecureServer]:
    """Bootstrapped as an operator would: start on loopback with trust, create users with passwords,
    restart with SCRAM-SHA-256 and TLS required."""
    with tempfile.TemporaryDirectory(prefix="streamdb-secure-") as d:
        certs = make_test_certificates(Path(d) / "tls")
        tls_args = ["--tls-cert-file", str(certs.cert), "--tls-key-file", str(certs.key)]
        srv = SecureServer(Path(d) / "data", certs, extra_args=tls_args)
        srv.start()
        try:
            with srv.connect() as conn:
                conn.execute(f"CREATE USER admin WITH SUPERUSER PASSWORD '{ADMIN_PASSWORD}'")
                conn.execute(f"CREATE USER alice WITH PASSWORD '{ALICE_PASSWORD}'")
                conn.execute("CREATE USER nopass")  # LOGIN, but no password
                conn.execute(f"CREATE ROLE cannot_login WITH NOLOGIN PASSWORD '{ALICE_PASSWORD}'")
            srv.stop()
            srv.extra_args = [*tls_args, "--auth-method", "scram-sha-256", "--tls-required"]
            srv.user, srv.password, srv.sslmode = "admin", ADMIN_PASSWORD, "require"
            srv.start()
            yield srv
        finally:
            srv.stop()


def test_trust_on_a_public_address_refuses_to_start() -> None:
    with tempfile.TemporaryDirectory(prefix="streamdb-public-") as d:
        result = subprocess.run(
            [sys.executable, "-m", "streamdb.cli", "serve", "--host", "0.0.0.0", "--port", "0", "--console-port", "0",
             "--data-dir", str(Path(d) / "data")],
            capture_output=True, text=True, timeout=60, cwd=str(ROOT), env={**os.environ, **NO_SPARK})
        assert result.returncode != 0
        assert "refusing to listen on 0.0.0.0 with auth_method 'trust'" in result.stderr
        assert "--auth-method scram-sha-256" in result.stderr
        assert "CREATE USER" in result.stderr and "PASSWORD" in result.stderr
        assert not (Path(d) / "data").exists()  # refused before opening anything


def test_half_configured_tls_refuses_to_start(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streamdb.cli", "serve", "--port", "0", "--console-port", "0", "--data-dir", str(tmp_path / "data"),
         "--tls-cert-file", str(tmp_path / "cert.pem")],
        capture_output=True, text=True, timeout=60, cwd=str(ROOT), env={**os.environ, **NO_SPARK})
    assert result.returncode != 0
    assert "tls_cert_file and tls_key_file must be set together" in result.stderr


def test_psql_with_scram_over_verified_tls(secure_server: SecureServer) -> None:
    psql = shutil.which("psql")
    assert psql is not None
    result = subprocess.run(
        [psql, secure_server.libpq_dsn("alice"), "-At", "-c", "SELECT current_user", "-c", "\\conninfo"],
        capture_output=True, text=True, timeout=30, env={"PGPASSWORD": ALICE_PASSWORD, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "alice"
    assert "SSL connection (protocol: TLSv1." in result.stdout


def test_psycopg_with_scram_over_tls(secure_server: SecureServer) -> None:
    dsn = secure_server.libpq_dsn("alice", password=ALICE_PASSWORD)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT current_user, session_user").fetchone() == ("alice", "alice")


def test_failed_logins_all_say_password_authentication_failed(secure_server: SecureServer) -> None:
    context = ssl.create_default_context(cafile=str(secure_server.certs.ca))

    async def login(user: str, password: str) -> None:
        conn = await asyncpg.connect(host="localhost", port=secure_server.port, user=user, password=password,
                                     database="streamdb", ssl=context)
        await conn.close()

    for user, password in (("alice", "wrong"), ("nobody_such", ALICE_PASSWORD), ("nopass", "anything"),
                           ("streamdb", "anything")):  # the bootstrap superuser has no password
        with pytest.raises(asyncpg.InvalidPasswordError) as info:
            asyncio.run(login(user, password))
        assert info.value.sqlstate == "28P01"
        assert str(info.value) == f'password authentication failed for user "{user}"'
    # Right password, but the role may not log in: 28000 after authentication.
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="not permitted to log in"):
        asyncio.run(login("cannot_login", ALICE_PASSWORD))


def test_plain_text_is_refused_when_tls_is_required(secure_server: SecureServer) -> None:
    with pytest.raises(psycopg.OperationalError, match="TLS is required"):
        psycopg.connect(secure_server.libpq_dsn("alice", sslmode="disable", password=ALICE_PASSWORD))


def test_password_change_applies_to_the_next_login(secure_server: SecureServer) -> None:
    new_password = "alice-Pw-new-55"
    with secure_server.connect() as admin:
        admin.execute(f"ALTER USER alice WITH PASSWORD '{new_password}'")
    try:
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "alice"'):
            psycopg.connect(secure_server.libpq_dsn("alice", password=ALICE_PASSWORD))
        with psycopg.connect(secure_server.libpq_dsn("alice", password=new_password)) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("alice",)
    finally:
        with secure_server.connect() as admin:
            admin.execute(f"ALTER USER alice WITH PASSWORD '{ALICE_PASSWORD}'")


def test_md5_for_old_clients_when_md5_hashes_are_kept(tmp_path: Path) -> None:
    """password_encryption_md5 keeps an md5 hash too; --auth-method md5 then asks those roles for md5."""
    srv = PasswordServer(tmp_path / "data", "md5",
                         extra_env={**NO_SPARK, "STREAMDB_PASSWORD_ENCRYPTION_MD5": "true"})
    srv.start()
    try:
        with srv.connect() as conn:
            conn.execute(f"CREATE USER oldclient WITH PASSWORD '{ALICE_PASSWORD}'")
        srv.stop()
        srv.extra_args = ["--auth-method", "md5"]
        srv.user, srv.password = "oldclient", ALICE_PASSWORD
        srv.start()
        with socket.create_connection((srv.host, srv.port), timeout=5) as sock:
            body = struct.pack("!I", 196608) + b"user\x00oldclient\x00\x00"
            sock.sendall(struct.pack("!i", len(body) + 4) + body)
            reply = sock.recv(13)
        assert reply[:1] == b"R" and struct.unpack("!i", reply[5:9])[0] == 5  # AuthenticationMD5Password
        dsn = f"host=127.0.0.1 port={srv.port} user=oldclient dbname=streamdb sslmode=disable"
        with psycopg.connect(dsn, password=ALICE_PASSWORD) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("oldclient",)
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "oldclient"'):
            psycopg.connect(dsn, password="wrong")
    finally:
        srv.stop()
