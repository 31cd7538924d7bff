"""Limits and timeouts (docs/limits.md), end to end against real servers started with small limits."""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import ServerProcess

from streamdb.config import load_settings
from streamdb.errors import ConfigurationError

STATEMENT_TIMEOUT_MS = 1500
IDLE_IN_TRANSACTION_MS = 1000
MAX_RESULT_ROWS = 1000
MAX_RESULT_BYTES = 1024 * 1024
MAX_MESSAGE_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def limited() -> Iterator[ServerProcess]:
    """A server (with Spark, for push queries) whose limits are small enough to reach in a test."""
    with tempfile.TemporaryDirectory(prefix="streamdb-limits-") as d:
        srv = ServerProcess(Path(d) / "data", "limits", extra_env={
            "STREAMDB_STATEMENT_TIMEOUT_MS": str(STATEMENT_TIMEOUT_MS),
            "STREAMDB_IDLE_IN_TRANSACTION_SESSION_TIMEOUT_MS": str(IDLE_IN_TRANSACTION_MS),
            "STREAMDB_MAX_RESULT_ROWS": str(MAX_RESULT_ROWS),
            "STREAMDB_MAX_RESULT_BYTES": str(MAX_RESULT_BYTES),
            "STREAMDB_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES),
        })
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


# --- statement_timeout ---------------------------------------------------------------------------


def test_sessions_start_with_the_server_timeouts_and_take_postgres_units(limited):
    with limited.connect() as c:
        assert c.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        assert c.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("1s",)
        for value, shown in [("'2s'", "2s"), ("500", "500ms"), ("'1min'", "1min"), ("0", "0"),
                             ("'1.5s'", "1500ms"), ("'250ms'", "250ms")]:
            c.execute(f"SET statement_timeout = {value}")
            assert c.execute("SHOW statement_timeout").fetchone() == (shown,)
        assert c.execute("SELECT current_setting('statement_timeout')").fetchone() == ("250ms",)
        c.execute("RESET statement_timeout")
        assert c.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        for bad, sqlstate in [("'abc'", "22023"), ("'5 parsecs'", "22023"), ("-1", "22023")]:
            with pytest.raises(psycopg.Error) as info:
                c.execute(f"SET statement_timeout = {bad}")
            assert info.value.sqlstate == sqlstate
        assert c.execute("SHOW statement_timeout").fetchone() == ("1500ms",)


def test_startup_options_set_the_timeout_too(limited):
    with limited.connect(options="-c statement_timeout=2min") as c:
        assert c.execute("SHOW statement_timeout").fetchone() == ("2min",)


def test_a_statement_over_the_timeout_is_cancelled_and_the_connection_stays_usable(limited):
    with limited.connect() as c:
        started = time.monotonic()
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT pg_sleep(30)")
        elapsed = time.monotonic() - started
        assert info.value.sqlstate == "57014"
        assert "canceling statement due to statement timeout" in str(info.value)
        assert STATEMENT_TIMEOUT_MS / 1000 <= elapsed < 15
        assert c.execute("SELECT 41 + 1").fetchone() == (42,)
        # Under the timeout the same function just runs.
        assert c.execute("SELECT pg_sleep(0.1), 7").fetchone() == ("", 7)


def test_the_extended_protocol_is_timed_out_as_well(limited):
    with limited.connect() as c:
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT pg_sleep(%s::float8)", [30.0], prepare=True)
        assert info.value.sqlstate == "57014"
        assert c.execute("SELECT %s::int + 1", [1]).fetchone() == (2,)


def test_the_timeout_stops_a_cpu_bound_query_on_the_embedded_engine(limited):
    with limited.connect() as c:
        c.execute("SET statement_timeout = '300ms'")
        started = time.monotonic()
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 1000000) b "
                      "WHERE a + b = 3")
        assert info.value.sqlstate == "57014"
        assert time.monotonic() - started < 10
        # The join was interrupted, not left running: the next query is answered at once.
        started = time.monotonic()
        assert c.execute("SELECT count(*) FROM generate_series(1, 1000)").fetchone() == (1000,)
        assert time.monotonic() - started < 5


def test_a_cancel_request_also_stops_an_embedded_query_at_once(limited):
    import threading

    with limited.connect() as c:
        c.execute("SET statement_timeout = 0")
        threading.Timer(0.5, c.cancel).start()
        started = time.monotonic()
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT pg_sleep(30)")
        assert info.value.sqlstate == "57014"
        assert "user request" in str(info.value)
        assert time.monotonic() - started < 10
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_zero_turns_the_statement_timeout_off(limited):
    with limited.connect() as c:
        c.execute("SET statement_timeout = 0")
        assert c.execute("SELECT pg_sleep(2), 1").fetchone() == ("", 1)  # longer than the server's 1.5 s


def test_a_timeout_inside_a_transaction_block_aborts_the_transaction(limited):
    with limited.connect() as c:
        c.execute("BEGIN")
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT pg_sleep(30)")
        assert info.value.sqlstate == "57014"
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT 1")
        assert info.value.sqlstate == "25P02"
        c.execute("ROLLBACK")
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_push_queries_are_exempt_from_the_statement_timeout(limited):
    with limited.connect() as c:
        c.execute("CREATE TABLE exempt_t (id INT PRIMARY KEY, v TEXT)")
        c.execute("INSERT INTO exempt_t VALUES (1, 'a'), (2, 'b')")
        c.execute("SET statement_timeout = '500ms'")
        c.execute("SET idle_in_transaction_session_timeout = 0")
        c.execute("BEGIN")
        c.execute("DECLARE cur CURSOR FOR SUBSCRIBE TO exempt_t")
        snapshot = c.execute("FETCH ALL cur WITH (timeout = '60s')").fetchall()
        assert sorted(r[-2:] for r in snapshot) == [(1, "a"), (2, "b")]
        # Waiting 2 s for changes that never come is what the FETCH asked for, not a timeout.
        started = time.monotonic()
        assert c.execute("FETCH 10 cur WITH (timeout = '2s')").fetchall() == []
        assert time.monotonic() - started >= 1.9
        c.execute("COMMIT")


# --- idle_in_transaction_session_timeout ----------------------------------------------------------


def test_a_session_idle_in_a_transaction_is_terminated_with_25P03(limited):
    c = limited.connect()
    try:
        c.execute("BEGIN")
        c.execute("SELECT 1")
        time.sleep(IDLE_IN_TRANSACTION_MS / 1000 + 1.5)
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT 2")
        assert info.value.sqlstate == "25P03"
        assert "terminating connection due to idle-in-transaction timeout" in str(info.value)
        assert c.closed or c.broken
    finally:
        c.close()
    with limited.connect() as other:  # the server itself is fine
        assert other.execute("SELECT 3").fetchone() == (3,)


def test_a_failed_transaction_block_times_out_too(limited):
    c = limited.connect()
    try:
        c.execute("BEGIN")
        with pytest.raises(psycopg.Error):
            c.execute("SELECT * FROM no_such_table_here")
        time.sleep(IDLE_IN_TRANSACTION_MS / 1000 + 1.5)
        with pytest.raises(psycopg.Error) as info:
            c.execute("ROLLBACK")
        assert info.value.sqlstate == "25P03"
    finally:
        c.close()


def test_idle_outside_a_transaction_or_with_the_timeout_off_is_not_limited(limited):
    with limited.connect() as c:
        c.execute("SELECT 1")
        time.sleep(IDLE_IN_TRANSACTION_MS / 1000 + 1.0)
        assert c.execute("SELECT 2").fetchone() == (2,)
        c.execute("SET idle_in_transaction_session_timeout = 0")
        c.execute("BEGIN")
        time.sleep(IDLE_IN_TRANSACTION_MS / 1000 + 1.0)
        assert c.execute("SELECT 3").fetchone() == (3,)
        c.execute("COMMIT")


# --- result size -----------------------------------------------------------------------------------


def test_a_result_over_max_result_rows_fails_with_54000_and_nothing_is_sent(limited):
    with limited.connect() as c:
        for run in (lambda: c.execute("SELECT * FROM generate_series(1, 2000)"),
                    lambda: c.execute("SELECT * FROM generate_series(1, %s::int)", [2000], prepare=True)):
            with pytest.raises(psycopg.Error) as info:
                run()
            assert info.value.sqlstate == "54000"
            assert str(info.value).startswith(f"result exceeds max_result_rows ({MAX_RESULT_ROWS})")
            assert "LIMIT" in (info.value.diag.message_hint or "")
            assert c.execute("SELECT 1").fetchone() == (1,)
        assert len(c.execute("SELECT * FROM generate_series(1, 1000)").fetchall()) == MAX_RESULT_ROWS
        with c.cursor() as cur:  # psql's way of reading a big result: not half a result, an error
            with pytest.raises(psycopg.Error) as info:
                cur.execute("SELECT * FROM generate_series(1, 5000)")
            assert info.value.sqlstate == "54000"
            assert cur.rowcount <= 0


def test_a_session_may_lower_max_result_rows_but_not_raise_it(limited):
    with limited.connect() as c:
        c.execute("SET streamdb.max_result_rows = 10")
        assert len(c.execute("SELECT * FROM generate_series(1, 10)").fetchall()) == 10
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT * FROM generate_series(1, 11)")
        assert info.value.sqlstate == "54000" and "(10)" in str(info.value)
        with pytest.raises(psycopg.Error) as info:
            c.execute("SET streamdb.max_result_rows = 5000")
        assert info.value.sqlstate == "22023"
        with pytest.raises(psycopg.Error) as info:
            c.execute("SET streamdb.max_result_rows = 'lots'")
        assert info.value.sqlstate == "22023"
        c.execute("RESET streamdb.max_result_rows")
        assert len(c.execute("SELECT * FROM generate_series(1, 500)").fetchall()) == 500


def test_a_result_over_max_result_bytes_fails_with_54000(limited):
    with limited.connect() as c:
        with pytest.raises(psycopg.Error) as info:
            c.execute("SELECT repeat('x', 10000) FROM generate_series(1, 500)")  # about 5 MB
        assert info.value.sqlstate == "54000"
        assert f"max_result_bytes ({MAX_RESULT_BYTES})" in str(info.value)
        rows = c.execute("SELECT repeat('x', 1000) FROM generate_series(1, 50)").fetchall()
        assert len(rows) == 50 and rows[0][0] == "x" * 1000


def test_inserts_from_a_query_are_not_capped_by_max_result_rows(limited):
    with limited.connect() as c:
        c.execute("CREATE TABLE uncapped_t (id INT PRIMARY KEY)")
        c.execute("INSERT INTO uncapped_t SELECT * FROM generate_series(1, 3000)")
        assert c.execute("SELECT count(*) FROM uncapped_t").fetchone() == (3000,)


# --- message size -----------------------------------------------------------------------------------


def _startup(sock: socket.socket) -> None:
    params = b"user\0streamdb\0database\0streamdb\0\0"
    sock.sendall(struct.pack("!iI", 8 + len(params), 196608) + params)
    while True:
        kind, _body = _read_message(sock)
        assert kind != b"E", _body
        if kind == b"Z":
            return


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    header = _read_exactly(sock, 5)
    (length,) = struct.unpack("!i", header[1:])
    return header[:1], _read_exactly(sock, length - 4)


def _assert_closed_by_peer(fd: int) -> None:
    """Reads what is left on the socket until the peer's close (EOF or reset); a socket the
    server kept open times out instead."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.settimeout(10)
        while True:
            try:
                if not sock.recv(65536):
                    return
            except ConnectionError:
                return


def _error_fields(body: bytes) -> dict[str, str]:
    return {part[:1].decode(): part[1:].decode() for part in body.split(b"\0") if part}


def test_a_message_over_max_message_bytes_is_refused_and_the_connection_closed(limited):
    with socket.create_connection((limited.host, limited.port), timeout=30) as sock:
        _startup(sock)
        # Only the header: the server must judge the length before reading (or buffering) the body.
        sock.sendall(b"Q" + struct.pack("!i", MAX_MESSAGE_BYTES + 4 + 1))
        kind, body = _read_message(sock)
        assert kind == b"E"
        fields = _error_fields(body)
        assert (fields["S"], fields["C"], fields["M"]) == ("FATAL", "08P01", "invalid message length")
        with pytest.raises((EOFError, ConnectionError)):
            _read_message(sock)
    with limited.connect() as c:
        # Under the cap, big messages are fine; over it, the client sees the error too.
        assert c.execute("SELECT length(%s)", ["y" * 500_000]).fetchone() == (500_000,)
        with pytest.raises(psycopg.OperationalError) as info:
            c.execute("SELECT length(%s)", ["y" * (MAX_MESSAGE_BYTES + 10)])
        # The server answers FATAL and closes at once: a client still sending the body may meet
        # the closed socket before it reads the error (PostgreSQL behaves the same).
        assert info.value.sqlstate == "08P01" or "closed" in str(info.value), info.value
        if not (c.closed or c.broken):
            # When the server's close meets libpq still sending the body, psycopg may leave the
            # connection marked as busy, not broken: the socket itself must be closed by the server.
            _assert_closed_by_peer(c.fileno())
    with limited.connect() as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_the_startup_packet_is_capped_at_10000_bytes(limited):
    with socket.create_connection((limited.host, limited.port), timeout=30) as sock:
        sock.sendall(struct.pack("!iI", 10_001, 196608))
        kind, body = _read_message(sock)
        assert kind == b"E"
        assert _error_fields(body)["C"] == "08P01"


# --- max_connections -------------------------------------------------------------------------------


def test_max_connections_refuses_further_clients_with_53300():
    with tempfile.TemporaryDirectory(prefix="streamdb-maxconn-") as d:
        srv = ServerProcess(Path(d) / "data", "maxconn", extra_env={"STREAMDB_SPARK_ENABLED": "false"},
                            extra_args=["--max-connections", "3"])
        srv.start()
        try:
            held = [srv.connect() for _ in range(3)]
            try:
                with pytest.raises(psycopg.OperationalError) as info:
                    srv.connect()
                assert "FATAL:  sorry, too many clients already" in str(info.value)
                with socket.create_connection((srv.host, srv.port), timeout=30) as sock:
                    # psycopg does not expose the SQLSTATE of a failed connection: read it raw.
                    params = b"user\0streamdb\0database\0streamdb\0\0"
                    sock.sendall(struct.pack("!iI", 8 + len(params), 196608) + params)
                    kind, body = _read_message(sock)
                    while kind == b"R":  # an authentication request first, depending on the method
                        kind, body = _read_message(sock)
                    assert kind == b"E"
                    assert (_error_fields(body)["S"], _error_fields(body)["C"]) == ("FATAL", "53300")
                assert all(c.execute("SELECT 1").fetchone() == (1,) for c in held)
                held.pop().close()
                deadline = time.monotonic() + 10
                while True:  # the server notices the close shortly after
                    try:
                        extra = srv.connect()
                        break
                    except psycopg.OperationalError:
                        assert time.monotonic() < deadline
                        time.sleep(0.1)
                held.append(extra)
                assert extra.execute("SELECT 2").fetchone() == (2,)
            finally:
                for c in held:
                    c.close()
        finally:
            srv.stop()


# --- configuration ------------------------------------------------------------------------------------


def test_limit_settings_are_validated():
    settings = load_settings(environ={})
    assert (settings.max_message_bytes, settings.statement_timeout_ms,
            settings.idle_in_transaction_session_timeout_ms, settings.max_result_rows,
            settings.max_result_bytes, settings.subscriber_buffer_changes, settings.max_connections) == \
        (64 * 1024 * 1024, 300_000, 600_000, 1_000_000, 1024**3, 100_000, 100)
    for env in ({"STREAMDB_STATEMENT_TIMEOUT_MS": "-1"}, {"STREAMDB_MAX_MESSAGE_BYTES": "10"},
                {"STREAMDB_MAX_RESULT_ROWS": "many"}, {"STREAMDB_IDLE_IN_TRANSACTION_SESSION_TIMEOUT_MS": "x"}):
        with pytest.raises(ConfigurationError) as info:
            load_settings(environ=env)
        assert next(iter(env))[len("STREAMDB_"):].lower() in str(info.value)
