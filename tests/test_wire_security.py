"""Authentication (SCRAM-SHA-256, md5, trust) and TLS in the wire layer, over the fake engine:
real clients (psycopg/libpq, asyncpg, psql) and raw sockets for the protocol's corner cases."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import shutil
import socket
import ssl
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psycopg
import pytest
from test_wire_unit import RawClient, ServerThread, error_fields
from tls_certs import CertificateFiles, make_test_certificates

from streamdb.auth import make_verifier, parse_verifier
from streamdb.config import Settings, check_network_security, is_loopback_host
from streamdb.errors import ConfigurationError, ProtocolViolation
from streamdb.runtime.api import LoginInfo
from streamdb.wire import protocol as pq
from streamdb.wire.scram import ScramAuthenticationFailed, ScramServer
from streamdb.wire.tls import server_ssl_context

PASSWORD = "correct-horse-battery"


def md5_hash(password: str, user: str) -> str:
    return "md5" + hashlib.md5((password + user).encode()).hexdigest()  # noqa: S324 - PostgreSQL's format


def add_roles(server: ServerThread) -> None:
    logins = server.engine.logins
    logins["alice"] = LoginInfo("alice", True, False, make_verifier(PASSWORD), None)
    logins["oldclient"] = LoginInfo("oldclient", True, False, make_verifier(PASSWORD),
                                    md5_hash(PASSWORD, "oldclient"))
    logins["nopass"] = LoginInfo("nopass", True, False, None, None)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return make_test_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def scram_srv() -> Iterator[ServerThread]:
    server = ServerThread(auth_method="scram-sha-256")
    add_roles(server)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def md5_srv() -> Iterator[ServerThread]:
    server = ServerThread(auth_method="md5")
    add_roles(server)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls_srv(certs: CertificateFiles) -> Iterator[ServerThread]:
    server = ServerThread(auth_method="scram-sha-256", ssl_context=server_ssl_context(certs.cert, certs.key))
    add_roles(server)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls_only_srv(certs: CertificateFiles) -> Iterator[ServerThread]:
    server = ServerThread(ssl_context=server_ssl_context(certs.cert, certs.key), tls_required=True)
    yield server
    server.stop()


def startup_packet(user: str) -> bytes:
    body = struct.pack("!I", pq.PROTOCOL_3_0) + pq.cstring("user") + pq.cstring(user) + b"\x00"
    return struct.pack("!i", len(body) + 4) + body


def ssl_request() -> bytes:
    return struct.pack("!ii", 8, pq.SSL_REQUEST_CODE)


def auth_code(payload: bytes) -> int:
    return int(struct.unpack("!i", payload[:4])[0])


def expect_fatal(client: RawClient, sqlstate: str) -> dict[str, str]:
    kind, payload = client.read_message()
    assert kind == b"E", (kind, payload)
    fields = error_fields(payload)
    assert (fields["S"], fields["C"]) == ("FATAL", sqlstate), fields
    assert client.is_closed()
    return fields


# --- pure SCRAM / verifier helpers ---------------------------------------------------------


def test_scram_exchange_matches_rfc7677_example() -> None:
    verifier = make_verifier("pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    exchange = ScramServer("user", verifier, server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert exchange.server_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = exchange.server_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                  b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_verifier_format_is_postgresql_s_and_salted_freshly() -> None:
    first, second = make_verifier(PASSWORD), make_verifier(PASSWORD)
    assert first != second  # random salt
    assert first.startswith("SCRAM-SHA-256$4096:") and PASSWORD not in first
    iterations, salt, stored_key, server_key = parse_verifier(first)
    assert (iterations, len(salt), len(stored_key), len(server_key)) == (4096, 16, 32, 32)
    for bad in ("md5abc", "SCRAM-SHA-256$x:y$z:w", "SCRAM-SHA-256$4096"):
        with pytest.raises(ValueError):
            parse_verifier(bad)


def test_scram_rejects_malformed_and_channel_binding_messages() -> None:
    for message in (b"p=tls-server-end-point,,n=,r=abc", b"n,a=admin,n=,r=abc", b"x,,n=,r=abc",
                    b"n,,r=abc", b"garbage", b"n,,n=,r=", b"\xff\xfe"):
        with pytest.raises(ProtocolViolation):
            ScramServer("alice", make_verifier(PASSWORD)).server_first(message)
    exchange = ScramServer("alice", make_verifier(PASSWORD))
    exchange.server_first(b"n,,n=,r=clientnonce")
    with pytest.raises(ProtocolViolation, match="nonce"):
        exchange.server_final(b"c=biws,r=othernonce,p=" + base64.b64encode(bytes(32)))
    exchange = ScramServer("alice", make_verifier(PASSWORD))
    exchange.server_first(b"y,,n=,r=clientnonce")
    with pytest.raises(ProtocolViolation, match="channel binding"):
        exchange.server_final(b"c=biws,r=clientnonce,p=" + base64.b64encode(bytes(32)))  # must be eSws


def test_scram_without_verifier_always_fails() -> None:
    exchange = ScramServer("ghost", None)
    first = exchange.server_first(b"n,,n=,r=abc").decode()
    assert ",s=" in first and first.endswith(",i=4096")
    nonce = first.split(",")[0][2:]
    with pytest.raises(ScramAuthenticationFailed):
        exchange.server_final(f"c=biws,r={nonce},p=".encode() + base64.b64encode(bytes(32)))


# --- SCRAM through real clients ----------------------------------------------------------


def test_psycopg_scram_login_with_password(scram_srv: ServerThread) -> None:
    with psycopg.connect(scram_srv.dsn(user="alice", password=PASSWORD), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchall() == [(1,)]
    assert scram_srv.engine.sessions[-1].user == "alice"


def test_asyncpg_scram_login_with_password(scram_srv: ServerThread) -> None:
    async def run() -> object:
        conn = await asyncpg.connect(host="127.0.0.1", port=scram_srv.port, user="alice", password=PASSWORD,
                                     database="streamdb", ssl=False)
        try:
            return await conn.fetchval("SELECT 1")
        finally:
            await conn.close()

    assert asyncio.run(run()) == 1


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("ghost", PASSWORD), ("nopass", "")],
                         ids=["wrong-password", "unknown-role", "role-without-password"])
def test_failed_password_authentication_says_the_same_for_every_cause(
        scram_srv: ServerThread, user: str, password: str) -> None:
    with pytest.raises(psycopg.OperationalError, match=f'password authentication failed for user "{user}"'):
        psycopg.connect(scram_srv.dsn(user=user, password=password or "x"))

    async def run() -> None:
        await asyncpg.connect(host="127.0.0.1", port=scram_srv.port, user=user, password=password or "x",
                              database="streamdb", ssl=False)

    with pytest.raises(asyncpg.InvalidPasswordError) as info:
        asyncio.run(run())
    assert info.value.sqlstate == "28P01"
    assert str(info.value) == f'password authentication failed for user "{user}"'


def test_psql_scram_login_with_pgpassword(scram_srv: ServerThread) -> None:
    psql = shutil.which("psql")
    assert psql is not None
    env = {"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"}
    result = subprocess.run([psql, scram_srv.dsn(user="alice"), "-At", "-c", "SELECT 1"],
                            capture_output=True, text=True, env=env, timeout=30)
    assert (result.returncode, result.stdout.strip()) == (0, "1"), result.stderr
    env["PGPASSWORD"] = "wrong"
    result = subprocess.run([psql, scram_srv.dsn(user="alice"), "-At", "-c", "SELECT 1"],
                            capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 2
    assert 'password authentication failed for user "alice"' in result.stderr


def _scram_client_final(server_first: str, client_first_bare: str, gs2_header: str, password: str) -> tuple[str, bytes]:
    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attributes["s"]),
                                 int(attributes["i"]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = f"c={base64.b64encode(gs2_header.encode()).decode()},r={attributes['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    expected_final = b"v=" + base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest())
    return f"{without_proof},p={base64.b64encode(proof).decode()}", expected_final


def test_raw_scram_exchange_with_gs2_header_y(scram_srv: ServerThread) -> None:
    """A client that supports channel binding but sees no -PLUS mechanism sends `y,,`."""
    client = RawClient(scram_srv.port)
    try:
        client.send(startup_packet("alice"))
        kind, payload = client.read_message()
        assert (kind, auth_code(payload)) == (b"R", 10)
        assert payload[4:] == b"SCRAM-SHA-256\x00\x00"  # no SCRAM-SHA-256-PLUS
        bare = f"n=,r={secrets.token_urlsafe(18)}"
        first = ("y,," + bare).encode()
        client.send(pq.message(b"p", pq.cstring("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first))
        kind, payload = client.read_message()
        assert (kind, auth_code(payload)) == (b"R", 11)
        final, expected_server_final = _scram_client_final(payload[4:].decode(), bare, "y,,", PASSWORD)
        client.send(pq.message(b"p", final.encode()))
        kind, payload = client.read_message()
        assert (kind, auth_code(payload), payload[4:]) == (b"R", 12, expected_server_final)
        messages = client.read_until(b"Z")
        assert (messages[0][0], auth_code(messages[0][1])) == (b"R", 0)
        assert any(kind == b"D" for kind, _ in client.query("SELECT 1"))
    finally:
        client.close()


def test_raw_scram_refuses_unknown_mechanism_and_wrong_message(scram_srv: ServerThread) -> None:
    client = RawClient(scram_srv.port)
    client.send(startup_packet("alice"))
    client.read_message()
    client.send(pq.message(b"p", pq.cstring("SCRAM-SHA-256-PLUS") + struct.pack("!i", 3) + b"abc"))
    assert "invalid SASL authentication mechanism" in expect_fatal(client, "08P01")["M"]
    client = RawClient(scram_srv.port)
    client.send(startup_packet("alice"))
    client.read_message()
    client.send(pq.message(b"Q", pq.cstring("SELECT 1")))  # no query before authentication
    assert "expected password response" in expect_fatal(client, "08P01")["M"]
    client = RawClient(scram_srv.port)
    client.send(startup_packet("alice"))
    client.read_message()
    client.send(b"p" + struct.pack("!i", 1_000_000))  # far over the 65535-byte cap for auth messages
    assert expect_fatal(client, "08P01")["M"] == "invalid message length"


def test_raw_wrong_password_is_fatal_28p01(scram_srv: ServerThread) -> None:
    client = RawClient(scram_srv.port)
    client.send(startup_packet("alice"))
    client.read_message()
    bare = "n=,r=abcdef"
    first = ("n,," + bare).encode()
    client.send(pq.message(b"p", pq.cstring("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first))
    _kind, payload = client.read_message()
    final, _ = _scram_client_final(payload[4:].decode(), bare, "n,,", "not the password")
    client.send(pq.message(b"p", final.encode()))
    fields = expect_fatal(client, "28P01")
    assert fields["M"] == 'password authentication failed for user "alice"'


# --- md5 ---------------------------------------------------------------------------------


def test_md5_for_roles_with_an_md5_hash(md5_srv: ServerThread) -> None:
    client = RawClient(md5_srv.port)
    client.send(startup_packet("oldclient"))
    kind, payload = client.read_message()
    assert (kind, auth_code(payload), len(payload)) == (b"R", 5, 8)  # AuthenticationMD5Password, 4-byte salt
    salt = payload[4:]
    inner = md5_hash(PASSWORD, "oldclient")[3:]
    client.send(pq.message(b"p", pq.cstring("md5" + hashlib.md5(inner.encode() + salt).hexdigest())))  # noqa: S324
    messages = client.read_until(b"Z")
    assert (messages[0][0], auth_code(messages[0][1])) == (b"R", 0)
    client.close()
    with psycopg.connect(md5_srv.dsn(user="oldclient", password=PASSWORD), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchall() == [(1,)]
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "oldclient"'):
        psycopg.connect(md5_srv.dsn(user="oldclient", password="wrong"))


def test_md5_method_uses_scram_for_roles_without_an_md5_hash(md5_srv: ServerThread) -> None:
    client = RawClient(md5_srv.port)
    client.send(startup_packet("alice"))
    kind, payload = client.read_message()
    assert (kind, auth_code(payload)) == (b"R", 10)
    client.close()
    with psycopg.connect(md5_srv.dsn(user="alice", password=PASSWORD), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchall() == [(1,)]


def test_md5_salts_differ_between_connections(md5_srv: ServerThread) -> None:
    salts = set()
    for _ in range(5):
        client = RawClient(md5_srv.port)
        client.send(startup_packet("oldclient"))
        salts.add(client.read_message()[1][4:])
        client.close()
    assert len(salts) == 5


# --- TLS ---------------------------------------------------------------------------------


def test_tls_sslmode_require_and_verify_full(tls_srv: ServerThread, certs: CertificateFiles) -> None:
    with psycopg.connect(tls_srv.dsn(user="alice", password=PASSWORD, sslmode="require")) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT 1").fetchall() == [(1,)]
    dsn = tls_srv.dsn(user="alice", password=PASSWORD, sslmode="verify-full", sslrootcert=str(certs.ca),
                      host="localhost")
    with psycopg.connect(dsn) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.info.host == "localhost"
    # A client that does not ask for TLS still gets plain text (tls_required is off here).
    with psycopg.connect(tls_srv.dsn(user="alice", password=PASSWORD, sslmode="disable")) as conn:
        assert not conn.pgconn.ssl_in_use


def test_tls_verify_full_fails_for_a_wrong_host_name(tls_srv: ServerThread, certs: CertificateFiles,
                                                     tmp_path: Path) -> None:
    other_ca = make_test_certificates(tmp_path / "other").ca
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(tls_srv.dsn(user="alice", password=PASSWORD, sslmode="verify-full",
                                    sslrootcert=str(other_ca), host="localhost"))


def test_tls_with_psql(tls_srv: ServerThread, certs: CertificateFiles) -> None:
    psql = shutil.which("psql")
    assert psql is not None
    dsn = tls_srv.dsn(user="alice", sslmode="verify-full", sslrootcert=str(certs.ca), host="localhost")
    result = subprocess.run([psql, dsn, "-At", "-c", "SELECT 1", "-c", "\\conninfo"], capture_output=True,
                            text=True, env={"PGPASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"}, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "1"
    assert "SSL connection (protocol: TLSv1." in result.stdout


def test_tls_required_refuses_plain_text(tls_only_srv: ServerThread) -> None:
    with pytest.raises(psycopg.OperationalError, match="TLS is required"):
        psycopg.connect(tls_only_srv.dsn(sslmode="disable"))
    client = RawClient(tls_only_srv.port)
    client.send(startup_packet("streamdb"))
    assert "TLS is required" in expect_fatal(client, "28000")["M"]
    with psycopg.connect(tls_only_srv.dsn(sslmode="require")) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT 1").fetchall() == [(1,)]


def test_plaintext_pipelined_after_ssl_request_is_refused(tls_srv: ServerThread) -> None:
    """Bytes sent after SSLRequest, before the handshake, must never be taken as encrypted input."""
    sessions_before = len(tls_srv.engine.sessions)
    client = RawClient(tls_srv.port)
    client.send(ssl_request() + startup_packet("alice") + pq.message(b"Q", pq.cstring("SELECT 1")))
    fields = expect_fatal(client, "08P01")
    assert fields["M"] == "received unencrypted data after SSL request"
    assert len(tls_srv.engine.sessions) == sessions_before  # nothing ran


def _tls_client(port: int, certs: CertificateFiles) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(ssl_request())
    assert sock.recv(1) == b"S"
    context = ssl.create_default_context(cafile=str(certs.ca))
    return context.wrap_socket(sock, server_hostname="localhost")


def test_second_ssl_request_is_refused(tls_srv: ServerThread, certs: CertificateFiles) -> None:
    # After TLS is up: the second SSLRequest arrives encrypted and is refused.
    tls_sock = _tls_client(tls_srv.port, certs)
    client = RawClient.__new__(RawClient)
    client.sock, client.buffer = tls_sock, b""
    client.send(ssl_request())
    assert "already negotiated" in expect_fatal(client, "08P01")["M"]
    tls_sock.close()


def test_second_ssl_request_after_n_is_refused(scram_srv: ServerThread) -> None:
    client = RawClient(scram_srv.port)  # no TLS configured: 'N'
    client.send(ssl_request())
    assert client._recv(1) == b"N"
    client.send(ssl_request())
    assert "already negotiated" in expect_fatal(client, "08P01")["M"]


def test_gssenc_request_gets_n_then_ssl_is_still_offered(tls_srv: ServerThread, certs: CertificateFiles) -> None:
    sock = socket.create_connection(("127.0.0.1", tls_srv.port), timeout=5)
    sock.sendall(struct.pack("!ii", 8, pq.GSSENC_REQUEST_CODE))
    assert sock.recv(1) == b"N"
    sock.sendall(ssl_request())
    assert sock.recv(1) == b"S"
    tls_sock = ssl.create_default_context(cafile=str(certs.ca)).wrap_socket(sock, server_hostname="localhost")
    assert tls_sock.version() in ("TLSv1.2", "TLSv1.3")
    tls_sock.close()
    # libpq with gssencmode=prefer sends GSSENCRequest first, then SSLRequest.
    with psycopg.connect(tls_srv.dsn(user="alice", password=PASSWORD, sslmode="require",
                                     gssencmode="disable")) as conn:
        assert conn.pgconn.ssl_in_use


# --- settings ------------------------------------------------------------------------------


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "::", "", "10.0.0.1", "example.com", "192.168.1.10"):
        assert not is_loopback_host(host), host


def test_network_security_checks(certs: CertificateFiles) -> None:
    check_network_security(Settings())  # trust on 127.0.0.1: fine
    check_network_security(Settings(host="0.0.0.0", auth_method="scram-sha-256"))
    with pytest.raises(ConfigurationError, match="--auth-method scram-sha-256"):
        check_network_security(Settings(host="0.0.0.0"))
    with pytest.raises(ConfigurationError, match="must be set together"):
        check_network_security(Settings(tls_cert_file=certs.cert))
    with pytest.raises(ConfigurationError, match="tls_required needs a certificate"):
        check_network_security(Settings(tls_required=True))
    with pytest.raises(ConfigurationError, match="does not exist"):
        check_network_security(Settings(tls_cert_file=certs.cert, tls_key_file=certs.cert.parent / "missing"))
    with pytest.raises(ConfigurationError, match="cannot load TLS certificate"):
        server_ssl_context(certs.cert, certs.ca)  # the CA certificate is not the server's key
