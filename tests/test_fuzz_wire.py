"""The wire-protocol fuzzer (tests/fuzz/wire_fuzz.py) against a real server, plus the bugs it found,
checked byte for byte against what PostgreSQL 15 answers to the same input."""

from __future__ import annotations

import socket
import time

import psycopg

from tests.fuzz import wire_fuzz as wf


def _session(port: int, user: str, database: str) -> socket.socket:
    return wf.Connector("127.0.0.1", port, user, database, 5.0).open(do_startup=True)


def _exchange(sock: socket.socket, payload: bytes, until_probe: bool = True, timeout: float = 5.0) -> tuple[
        list[tuple[bytes, bytes]], bool]:
    """Send `payload`; read until the trailing SELECT 1 is answered (or EOF / timeout)."""
    sock.sendall(payload)
    data, closed = b"", False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (until_probe and wf._probe_answered(data)):
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            closed = True
            break
        data += chunk
    return wf.parse_backend(data)[0], closed


def _postgres_port(dsn: str) -> int:
    return int(dsn.rsplit(":", 1)[1].split("/")[0])


def test_wire_fuzzer_finds_no_crash_hang_or_wrong_answer(server):
    """1,200 hostile cases (`make soak` runs 100,000); every one that completes startup holds a session until it closes its
    socket, so a leaked session would exhaust max_connections (100) and show up as a connect failure."""
    report = wf.fuzz(server.host, server.port, cases=1200, seed=20261121, timeout=3.0, concurrency=4,
                     alive=lambda: server.proc is not None and server.proc.poll() is None)
    print("wire fuzz:", {k: v for k, v in report.items() if k != "families"})
    assert report["cases"] == 1200
    assert report["failures"] == []
    assert (report["crashes"], report["hangs"], report["wrong_answers"], report["connect_failures"]) == (0, 0, 0, 0)
    assert report["healthy_client"]["errors"] == 0, report["healthy_client"]["first_errors"]
    assert report["healthy_client"]["ops"] > 50
    assert report["healthy_client"]["max_latency_ms"] < 5000
    # Every family ran (so a broken generator cannot pass quietly).
    for family in ("bad_length", "unknown_type", "nul_in_query", "sync_storm", "half_sent_message",
                   "stalled_after_startup", "mutated_session", "ssl_after_startup", "copydata_outside_copy"):
        assert report["families"].get(family, 0) > 0, family
    assert server.proc is not None and server.proc.poll() is None


def test_nul_inside_query_string_is_refused_like_postgres(server, postgres_server):
    """PostgreSQL 15 answers a Query whose string holds a NUL with ERROR 08P01 "invalid message
    format" and stays usable; StreamDB used to run the part before the NUL."""
    payload = wf.msg(b"Q", b"SELECT 42\0SELECT 2\0") + wf.PROBE
    answers = {}
    for name, port, user in (("streamdb", server.port, "streamdb"),
                             ("postgres", _postgres_port(postgres_server), "postgres")):
        with _session(port, user, user) as sock:
            messages, closed = _exchange(sock, payload)
        errors = [(wf.error_code(b), b.split(b"\0M", 1)[1].split(b"\0")[0]) for k, b in messages if k == b"E"]
        rows = [b for k, b in messages if k == b"D"]
        probe_answered = any(k == b"C" and b.startswith(b"SELECT 1\0") for k, b in messages)
        answers[name] = (errors, len(rows), closed, probe_answered)
    assert answers["streamdb"] == answers["postgres"] == ([("08P01", b"invalid message format")], 1, False, True)


def test_invalid_utf8_and_trailing_bytes_get_postgres_sqlstates(server, postgres_server):
    cases = [
        (wf.query(b"SELECT '\xff'") + wf.PROBE, "22021"),  # StreamDB used to answer nothing at all
        (wf.msg(b"Q", b"SELECT 1") + wf.PROBE, "08P01"),  # no terminating NUL: used to hang too
        (wf.msg(b"S", b"junk") + wf.PROBE, "08P01"),  # Sync with a body: used to skip ReadyForQuery
        (wf.parse(b"", b"SELECT 1") + wf.bind(b"", b"") + wf.msg(b"E", b"\0\0\0\0\0zz") + wf.SYNC + wf.PROBE,
         "08P01"),  # Execute with trailing bytes: used to run
    ]
    for payload, sqlstate in cases:
        for port, user in ((server.port, "streamdb"), (_postgres_port(postgres_server), "postgres")):
            with _session(port, user, user) as sock:
                messages, closed = _exchange(sock, payload)
            codes = [wf.error_code(b) for k, b in messages if k == b"E"]
            assert codes == [sqlstate], (port, payload, messages)
            assert not closed
            assert any(k == b"C" and b.startswith(b"SELECT 1\0") for k, b in messages), (port, payload)


def test_garbage_message_type_after_startup_is_refused_at_once(server, postgres_server):
    """An SSLRequest sent after startup starts with byte 0: an invalid message type. PostgreSQL
    refuses it at once (FATAL 08P01); StreamDB used to wait for 2 KB of 'message' first."""
    for port, user in ((server.port, "streamdb"), (_postgres_port(postgres_server), "postgres")):
        with _session(port, user, user) as sock:
            started = time.monotonic()
            messages, closed = _exchange(sock, wf.SSL_REQUEST, until_probe=False)
            assert closed and time.monotonic() - started < 3
        assert [(k, wf.error_code(b)) for k, b in messages] == [(b"E", "08P01")]
        assert b"SFATAL\0" in messages[0][1] and b"invalid frontend message type 0" in messages[0][1]


def test_half_sent_and_stalled_clients_do_not_block_others_and_are_freed(server):
    """30 clients stall (half a message, or nothing after startup) while another works; closing
    their sockets frees their sessions: 30 more stall and close again, then all is normal."""
    for _round in range(2):
        stalled = []
        for i in range(30):
            sock = _session(server.port, "streamdb", "streamdb")
            sock.sendall(wf.PROBE[: 1 + i % (len(wf.PROBE) - 1)] if i % 2 else b"")
            stalled.append(sock)
        # Served while they stall (a blocked loop would hang here: no timing is asserted).
        with psycopg.connect(server.dsn, autocommit=True, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        for sock in stalled:
            sock.close()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_a_half_sent_startup_packet_is_dropped_after_the_authentication_timeout(fresh_server):
    """PostgreSQL's authentication_timeout: a client that never finishes its startup packet (or
    sends nothing at all) is disconnected, where its connection used to stay open for good."""
    fresh_server.stop()
    fresh_server.extra_env["STREAMDB_AUTHENTICATION_TIMEOUT_S"] = "2"
    fresh_server.start()
    half, silent = socket.create_connection(("127.0.0.1", fresh_server.port)), \
        socket.create_connection(("127.0.0.1", fresh_server.port))
    try:
        half.sendall(b"\x00\x00\x00\x30\x00\x03\x00\x00user\x00")  # 48 bytes announced, 13 sent
        for sock in (half, silent):
            sock.settimeout(30)
            assert sock.recv(1) == b""  # closed by the server, without a message
        with fresh_server.connect() as conn:  # a client that completes its startup is served
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        half.close()
        silent.close()
