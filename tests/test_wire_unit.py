"""Wire protocol tests: a WireServer over a canned fake engine, driven by real clients
(psycopg 3, asyncpg, psql) and by a raw socket for protocol corner cases."""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import asyncpg
import psycopg
import psycopg.errors
import pytest
from fake_engine import TYPES_ROW, FakeEngine
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb import types as T
from streamdb import values
from streamdb.errors import StreamDBError
from streamdb.types import SqlType
from streamdb.wire import codecs
from streamdb.wire import protocol as pq
from streamdb.wire.server import WireServer


class ServerThread:
    """A WireServer on an ephemeral port, in its own event loop on a background thread."""

    def __init__(self, **kwargs: Any) -> None:
        self.engine = FakeEngine()
        self.loop = asyncio.new_event_loop()
        self.server = WireServer(self.engine, "127.0.0.1", 0, **kwargs)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.server.start())
        self.port = self.server.port

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def stop(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()

    def dsn(self, **extra: str) -> str:
        params = {"host": "127.0.0.1", "port": str(self.port), "user": "streamdb", "dbname": "streamdb",
                  "sslmode": "disable", **extra}
        return " ".join(f"{k}={v}" for k, v in params.items())


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    server = ServerThread()
    yield server
    server.stop()


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


# --- raw protocol client ---------------------------------------------------------------


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""
        self.key: tuple[int, int] | None = None
        self.parameters: dict[str, str] = {}

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def startup(self, **params: str) -> list[tuple[bytes, bytes]]:
        params = {"user": "streamdb", "database": "streamdb", **params}
        body = struct.pack("!I", pq.PROTOCOL_3_0) + b"".join(pq.cstring(k) + pq.cstring(v) for k, v in params.items())
        self.send(struct.pack("!i", len(body) + 5) + body + b"\x00")
        messages = self.read_until(b"Z")
        for kind, payload in messages:
            if kind == b"K":
                self.key = struct.unpack("!II", payload)
            if kind == b"S":
                name, value, _ = payload.split(b"\x00")
                self.parameters[name.decode()] = value.decode()
        return messages

    def _recv(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("server closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_message(self) -> tuple[bytes, bytes]:
        kind = self._recv(1)
        (length,) = struct.unpack("!i", self._recv(4))
        return kind, self._recv(length - 4)

    def read_until(self, kind: bytes) -> list[tuple[bytes, bytes]]:
        messages = []
        while True:
            message = self.read_message()
            messages.append(message)
            if message[0] == kind:
                return messages

    def query(self, sql: str) -> list[tuple[bytes, bytes]]:
        self.send(pq.message(b"Q", pq.cstring(sql)))
        return self.read_until(b"Z")

    def is_closed(self) -> bool:
        try:
            while True:
                self.read_message()
        except (EOFError, ConnectionError):
            return True


def error_fields(payload: bytes) -> dict[str, str]:
    fields = {}
    for part in payload.rstrip(b"\x00").split(b"\x00"):
        if part:
            fields[chr(part[0])] = part[1:].decode()
    return fields


def kinds(messages: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(kind for kind, _ in messages)


def parse_msg(sql: str, name: str = "", oids: tuple[int, ...] = ()) -> bytes:
    body = pq.cstring(name) + pq.cstring(sql) + struct.pack("!h", len(oids))
    body += b"".join(struct.pack("!I", oid) for oid in oids)
    return pq.message(b"P", body)


def bind_msg(portal: str = "", statement: str = "", params: tuple[bytes | None, ...] = (),
             param_formats: tuple[int, ...] = (), result_formats: tuple[int, ...] = ()) -> bytes:
    body = pq.cstring(portal) + pq.cstring(statement)
    body += struct.pack("!h", len(param_formats)) + b"".join(struct.pack("!h", f) for f in param_formats)
    body += struct.pack("!h", len(params))
    for value in params:
        body += struct.pack("!i", -1) if value is None else struct.pack("!i", len(value)) + value
    body += struct.pack("!h", len(result_formats)) + b"".join(struct.pack("!h", f) for f in result_formats)
    return pq.message(b"B", body)


def execute_msg(portal: str = "", max_rows: int = 0) -> bytes:
    return pq.message(b"E", pq.cstring(portal) + struct.pack("!i", max_rows))


def describe_msg(target: bytes, name: str = "") -> bytes:
    return pq.message(b"D", target + pq.cstring(name))


SYNC = pq.message(b"S")


# --- psycopg ---------------------------------------------------------------------------


def test_psycopg_simple_query(srv: ServerThread) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchall() == [(1,)]
        assert conn.execute("SELECT null").fetchone() == (None,)
        assert conn.info.parameter_status("server_version") == "16.0 (StreamDB)"


def test_psycopg_text_results_of_every_type(srv: ServerThread) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        row = conn.execute("SELECT types").fetchone()
    assert row is not None
    assert_types_row(row)


def test_psycopg_binary_results(srv: ServerThread) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        cur = conn.cursor(binary=True)
        row = cur.execute("SELECT types").fetchone()
    assert row is not None
    assert_types_row(row)


def assert_types_row(row: tuple[Any, ...]) -> None:
    expected = list(TYPES_ROW)
    expected[16] = uuid.UUID("12345678-1234-5678-1234-567812345678")
    expected[17] = {"a": 1}
    expected[18] = {"b": [1, 2]}
    assert row[:4] == tuple(expected[:4])
    assert row[4] == pytest.approx(1.5) and row[5] == 0.1
    assert row[6] == Decimal("-12345.6789")
    assert row[7:13] == tuple(expected[7:13])
    assert row[13] == dt.datetime(2024, 1, 2, 3, 4, 5, 123000)
    assert row[14] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert row[15:] == tuple(expected[15:])


def test_psycopg_prepared_statement_with_params(srv: ServerThread) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        for n in range(3):
            row = conn.execute("SELECT %s::int4, %s::text", (n, f"v{n}"), prepare=True).fetchone()
            assert row == (n, f"v{n}")
        cur = conn.cursor(binary=True)
        assert cur.execute("SELECT %b::int4, %b::text", (7, "x")).fetchone() == (7, "x")
        # Arrays, as declared by the client (int2[] here), in text and binary.
        assert conn.execute("SELECT %s", ([1, None, 3],)).fetchone() == ([1, None, 3],)
        assert cur.execute("SELECT %b", ([[1, 2], [3, 4]],)).fetchone() == ([[1, 2], [3, 4]],)


def test_psycopg_error_then_connection_still_works(srv: ServerThread) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedColumn) as info:
            conn.execute("SELECT error")
        assert info.value.diag.sqlstate == "42703"
        assert info.value.diag.statement_position == "8"
        assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.errors.SyntaxError) as syntax:
            conn.execute("SELECT 1; BAD stuff")
        assert syntax.value.diag.statement_position == "11"
        with pytest.raises(psycopg.errors.InternalError_) as internal:
            conn.execute("crash")
        assert "internal error: boom" in str(internal.value)
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_psycopg_transaction_and_notice(srv: ServerThread) -> None:
    notices: list[str] = []
    with psycopg.connect(srv.dsn()) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.commit()
        conn.autocommit = True
        conn.execute("notice")
        conn.execute("SET application_name TO 'tester'")
        assert conn.info.parameter_status("application_name") == "tester"
    assert notices == ["hello there"]


def test_psycopg_copy_from_stdin_and_to_stdout(srv: ServerThread) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        cur = conn.cursor()
        with cur.copy("COPY items FROM STDIN") as copy:
            for i in range(5):
                copy.write_row((i, f"name {i}"))
        assert cur.rowcount == 5
        assert srv.engine.copied[-1].splitlines()[0] == b"0\tname 0"
        # An exception inside the block makes psycopg send CopyFail, then re-raise.
        with pytest.raises(RuntimeError):
            with cur.copy("COPY items FROM STDIN") as copy:
                copy.write_row((1, "x"))
                raise RuntimeError("client gave up")
        assert "client gave up" in srv.engine.failed_copies[-1]
        with cur.copy("COPY items TO STDOUT") as copy:
            rows = list(copy.rows())
        assert rows == [("1", "a"), ("2", "b"), ("3", "c")]
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_psycopg_refused_database(srv: ServerThread) -> None:
    with pytest.raises(psycopg.OperationalError, match='database "nope" does not exist'):
        psycopg.connect(srv.dsn(dbname="nope"))


def test_startup_options_reach_the_engine(srv: ServerThread) -> None:
    dsn = srv.dsn(application_name="app1", options="'-c search_path=foo -c statement_timeout=5'")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        session = srv.engine.sessions[-1]
        assert session.options["application_name"] == "app1"
        assert session.options["search_path"] == "foo"
        assert session.options["statement_timeout"] == "5"
    wait_for(lambda: session.closed)


# --- asyncpg ---------------------------------------------------------------------------


def test_asyncpg(srv: ServerThread) -> None:
    async def scenario() -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=srv.port, user="streamdb", database="streamdb",
                                     ssl=False)
        try:
            assert await conn.fetchval("SELECT 1") == 1
            row = await conn.fetchrow("SELECT $1::int4, $2::text", 41, "héllo")
            assert tuple(row) == (41, "héllo")
            stmt = await conn.prepare("SELECT $1::int4, $2::text")
            assert [tuple(r) for r in await stmt.fetch(1, None)] == [(1, None)]
            assert stmt.get_parameters()[0].name == "int4"
            types_row = await conn.fetchrow("SELECT types")
            assert types_row["i8"] == 2**40 and types_row["n"] == Decimal("-12345.6789")
            assert types_row["tz"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
            assert types_row["iv"] == dt.timedelta(days=1, seconds=7384)
            assert types_row["by"] == b"\x00\x01\xff"
            with pytest.raises(asyncpg.exceptions.UndefinedColumnError) as info:
                await conn.fetch("SELECT error")
            assert info.value.sqlstate == "42703"
            async with conn.transaction():
                seen = [r["n"] async for r in conn.cursor("SELECT * FROM series", prefetch=3)]
            assert seen == list(range(10))
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()

    asyncio.run(scenario())


# --- psql ------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql not installed")
def test_psql(srv: ServerThread) -> None:
    result = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(srv.port), "-U", "streamdb", "-w", "streamdb", "-c", "SELECT 1"],
        capture_output=True, text=True, timeout=15,
    )
    assert result.returncode == 0, result.stderr
    assert "?column?" in result.stdout and "(1 row)" in result.stdout
    failed = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-p", str(srv.port), "-U", "streamdb", "-w", "streamdb",
         "-v", "ON_ERROR_STOP=1", "-c", "SELECT error"],
        capture_output=True, text=True, timeout=15,
    )
    assert failed.returncode != 0
    assert 'column "error" does not exist' in failed.stderr


# --- raw protocol ----------------------------------------------------------------------


def test_oversized_startup_packet_is_rejected(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.send(struct.pack("!iI", 20_000, pq.PROTOCOL_3_0))
    kind, payload = client.read_message()
    assert kind == b"E"
    fields = error_fields(payload)
    assert fields["S"] == "FATAL" and fields["C"] == "08P01"
    assert client.is_closed()


def test_ssl_request_is_declined_then_startup_continues(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.send(struct.pack("!iI", 8, pq.SSL_REQUEST_CODE))
    assert client._recv(1) == b"N"
    client.send(struct.pack("!iI", 8, pq.GSSENC_REQUEST_CODE))
    assert client._recv(1) == b"N"
    messages = client.startup()
    assert kinds(messages).startswith(b"R") and messages[-1] == (b"Z", b"I")
    assert client.parameters["session_authorization"] == "streamdb"
    client.close()


def test_cancel_request_cancels_the_running_statement(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    assert client.key is not None
    client.send(pq.message(b"Q", pq.cstring("sleep")))
    session = srv.engine.sessions[-1]
    wait_for(lambda: ("sleep", None) in session.executed)
    canceller = RawClient(srv.port)
    canceller.send(struct.pack("!iIII", 16, pq.CANCEL_REQUEST_CODE, *client.key))
    assert canceller.is_closed()
    messages = client.read_until(b"Z")
    assert error_fields(messages[0][1])["C"] == "57014"
    assert session.cancels == 1
    # A wrong secret cancels nothing.
    other = RawClient(srv.port)
    other.send(struct.pack("!iIII", 16, pq.CANCEL_REQUEST_CODE, client.key[0], client.key[1] ^ 1))
    assert other.is_closed()
    assert session.cancels == 1
    assert kinds(client.query("SELECT 1")) == b"TDCZ"
    client.close()


def test_stream_sends_batches_until_cancelled(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    assert client.key is not None
    client.send(pq.message(b"Q", pq.cstring("stream")))
    assert client.read_message()[0] == b"T"
    rows = [client.read_message() for _ in range(6)]
    assert [k for k, _ in rows] == [b"D"] * 6
    canceller = RawClient(srv.port)
    canceller.send(struct.pack("!iIII", 16, pq.CANCEL_REQUEST_CODE, *client.key))
    rest = client.read_until(b"Z")
    errors = [error_fields(p) for k, p in rest if k == b"E"]
    assert errors and errors[0]["C"] == "57014"
    assert kinds(client.query("SELECT 1")) == b"TDCZ"
    client.close()


def test_stream_ends_when_client_disconnects(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    closed_before = srv.engine.streams_closed
    client.send(pq.message(b"Q", pq.cstring("stream")))
    assert client.read_message()[0] == b"T"
    client.read_message()
    client.close()
    wait_for(lambda: srv.engine.streams_closed == closed_before + 1)
    session = srv.engine.sessions[-1]
    wait_for(lambda: session.closed)


def test_extended_stream_with_pipelined_sync_notices_disconnect(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    closed_before = srv.engine.streams_closed
    client.send(parse_msg("stream") + bind_msg(result_formats=(1,)) + describe_msg(b"P") + execute_msg() + SYNC)
    assert kinds([client.read_message() for _ in range(3)]) == b"12T"
    assert client.read_message() == (b"D", struct.pack("!hiq", 1, 8, 0))
    client.close()
    wait_for(lambda: srv.engine.streams_closed == closed_before + 1)


def test_simple_query_edge_cases(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    assert kinds(client.query("")) == b"IZ"
    assert kinds(client.query("  ;  ")) == b"IZ"
    # Multiple statements; the first error stops the rest.
    assert kinds(client.query("SELECT 1; SELECT 1")) == b"TDCTDCZ"
    messages = client.query("SELECT 1; SELECT error; SELECT 1")
    assert kinds(messages) == b"TDCEZ"
    assert error_fields(messages[3][1])["P"] == str(len("SELECT 1; ") + 8)
    messages = client.query("notice")
    assert kinds(messages) == b"NCZ"
    assert error_fields(messages[0][1])["H"] == "be nice"
    assert client.query("BEGIN")[-1] == (b"Z", b"T")
    assert client.query("SELECT 1")[-1] == (b"Z", b"T")
    assert client.query("COMMIT")[-1] == (b"Z", b"I")
    client.close()


def test_extended_protocol_with_portal_suspension(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    client.send(parse_msg("SELECT * FROM series", "s1") + describe_msg(b"S", "s1") + SYNC)
    assert kinds(client.read_until(b"Z")) == b"1tTZ"
    client.send(bind_msg("p1", "s1", result_formats=(1,)) + describe_msg(b"P", "p1") + execute_msg("p1", 4)
                + execute_msg("p1", 4) + execute_msg("p1", 4) + SYNC)
    messages = client.read_until(b"Z")
    assert kinds(messages) == b"2T" + b"D" * 4 + b"s" + b"D" * 4 + b"s" + b"DD" + b"CZ"
    assert messages[2][1] == struct.pack("!hiq", 1, 8, 0)  # binary int8
    assert messages[-2] == (b"C", b"SELECT 10\x00")
    # Text parameter decoding by the statement's parameter types.
    client.send(parse_msg("SELECT $1::int4, $2::text") + bind_msg(params=(b"12", None)) + execute_msg() + SYNC)
    messages = client.read_until(b"Z")
    assert kinds(messages) == b"12DCZ"
    assert messages[2][1] == struct.pack("!hi", 2, 2) + b"12" + struct.pack("!i", -1)
    # Binary parameters.
    client.send(bind_msg(params=(struct.pack("!i", -5), b"abc"), param_formats=(1,), result_formats=(1, 0))
                + execute_msg() + SYNC)
    messages = client.read_until(b"Z")
    assert messages[1][1] == struct.pack("!hii", 2, 4, -5) + struct.pack("!i", 3) + b"abc"
    # Close, then the statement is gone.
    client.send(pq.message(b"C", b"S" + pq.cstring("s1")) + SYNC)
    assert kinds(client.read_until(b"Z")) == b"3Z"
    client.close()


def test_extended_protocol_errors_skip_until_sync(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    client.send(bind_msg("", "missing") + execute_msg() + describe_msg(b"S") + SYNC)
    messages = client.read_until(b"Z")
    assert kinds(messages) == b"EZ"
    assert error_fields(messages[0][1])["C"] == "26000"
    client.send(execute_msg("nope") + SYNC)
    messages = client.read_until(b"Z")
    assert error_fields(messages[0][1])["C"] == "34000"
    client.send(parse_msg("SELECT $1::int4, $2::text") + bind_msg(params=(b"abc", b"x")) + execute_msg() + SYNC)
    messages = client.read_until(b"Z")
    assert kinds(messages) == b"1EZ"
    fields = error_fields(messages[1][1])
    assert fields["C"] == "22P02" and fields["M"] == 'invalid input syntax for type integer: "abc"'
    client.send(bind_msg(params=(b"\x00\x01", b"x"), param_formats=(1,)) + SYNC)
    assert error_fields(client.read_until(b"Z")[0][1])["C"] == "22P03"
    client.send(bind_msg(params=(b"1",)) + SYNC)
    assert error_fields(client.read_until(b"Z")[0][1])["C"] == "08P01"
    client.send(parse_msg("SELECT $1", oids=(600,)) + SYNC)  # point: unsupported
    assert error_fields(client.read_until(b"Z")[0][1])["C"] == "0A000"
    client.send(parse_msg("", "empty") + bind_msg("", "empty") + describe_msg(b"P") + execute_msg() + SYNC)
    assert kinds(client.read_until(b"Z")) == b"12nIZ"
    client.send(parse_msg("SELECT error") + bind_msg() + execute_msg() + SYNC)
    messages = client.read_until(b"Z")
    assert kinds(messages) == b"12EZ"
    assert error_fields(messages[2][1])["P"] == "8"
    # Still usable.
    assert kinds(client.query("SELECT 1")) == b"TDCZ"
    client.close()


def test_unknown_message_type_is_fatal(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    client.send(pq.message(b"?", b""))
    kind, payload = client.read_message()
    assert kind == b"E"
    fields = error_fields(payload)
    assert fields["S"] == "FATAL" and fields["C"] == "08P01"
    assert client.is_closed()


def test_invalid_message_length_is_fatal(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    client.send(b"Q" + struct.pack("!i", -3))
    kind, payload = client.read_message()
    assert error_fields(payload)["M"] == "invalid message length"
    assert client.is_closed()


def test_terminate_closes_session(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    session = srv.engine.sessions[-1]
    client.send(pq.message(b"X"))
    assert client.is_closed()
    wait_for(lambda: session.closed)


def test_copy_in_with_raw_protocol(srv: ServerThread) -> None:
    client = RawClient(srv.port)
    client.startup()
    client.send(pq.message(b"Q", pq.cstring("COPY items FROM STDIN")))
    kind, payload = client.read_message()
    assert kind == b"G" and payload == bytes([0]) + struct.pack("!hhh", 2, 0, 0)
    client.send(pq.message(b"d", b"1\ta\n2\tb\n") + pq.message(b"H") + pq.message(b"d", b"3\tc\n") + pq.message(b"c"))
    assert client.read_until(b"Z")[0] == (b"C", b"COPY 3\x00")
    client.send(pq.message(b"Q", pq.cstring("COPY items FROM STDIN")))
    client.read_message()
    client.send(pq.message(b"f", pq.cstring("oops")))
    messages = client.read_until(b"Z")
    fields = error_fields(messages[0][1])
    assert fields["C"] == "57014" and fields["M"] == "COPY from stdin failed: oops"
    client.close()


def test_messages_are_cut_from_any_split_of_the_byte_stream(srv: ServerThread) -> None:
    """The server reads the socket in chunks and cuts messages from its buffer: messages that
    arrive a byte at a time, several in one segment, or larger than a read chunk give the
    answers they give one message per segment."""
    client = RawClient(srv.port)
    client.startup()
    rows = b"".join(b"%d\tname %d\n" % (i, i) for i in range(20_000))  # ~280 KB in one message
    stream = (pq.message(b"Q", pq.cstring("SELECT 1")) + parse_msg("SELECT 1", "split")
              + bind_msg(statement="split") + execute_msg() + SYNC
              + pq.message(b"Q", pq.cstring("COPY items FROM STDIN")) + pq.message(b"d", rows) + pq.message(b"c"))
    for i in range(0, 60):  # the first messages a byte at a time
        client.send(stream[i:i + 1])
        time.sleep(0.001)
    client.send(stream[60:])  # the rest in one go, a message far larger than a read chunk among them
    assert kinds(client.read_until(b"Z")) == b"TDCZ"
    assert kinds(client.read_until(b"Z")) == b"12DCZ"
    assert client.read_message()[0] == b"G"
    assert client.read_until(b"Z")[0] == (b"C", b"COPY 20000\x00")
    assert srv.engine.copied[-1] == rows
    # Many pipelined extended-protocol rounds in one segment: each answered, in order.
    client.send((bind_msg(statement="split") + execute_msg() + SYNC) * 50)
    for _ in range(50):
        assert kinds(client.read_until(b"Z")) == b"2DCZ"
    client.close()


def test_too_many_connections_and_server_close() -> None:
    server = ServerThread(max_connections=1)
    try:
        first = RawClient(server.port)
        first.startup()
        second = RawClient(server.port)
        second.send(struct.pack("!i", 9 + len(b"user\x00x\x00")) + struct.pack("!I", pq.PROTOCOL_3_0)
                    + b"user\x00x\x00\x00")
        kind, payload = second.read_message()
        assert error_fields(payload)["C"] == "53300"
        assert server.server.connection_count >= 1
    finally:
        server.stop()
    kind, payload = first.read_message()
    assert error_fields(payload)["C"] == "57P01"
    assert first.is_closed()
    assert all(s.closed for s in server.engine.sessions)


# --- binary codecs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "sql_type", "encoded"),
    [
        (True, T.BOOLEAN, b"\x01"),
        (-2, T.SMALLINT, b"\xff\xfe"),
        (1, T.INTEGER, b"\x00\x00\x00\x01"),
        (Decimal("1.50"), T.NUMERIC, struct.pack("!hhHHHH", 2, 0, 0, 2, 1, 5000)),
        (Decimal("-12345.6789"), T.NUMERIC, struct.pack("!hhHHHHH", 3, 1, 0x4000, 4, 1, 2345, 6789)),
        (Decimal("100000"), T.NUMERIC, struct.pack("!hhHHH", 1, 1, 0, 0, 10)),
        (Decimal("0.001"), T.NUMERIC, struct.pack("!hhHHH", 1, -1, 0, 3, 10)),
        (Decimal("0"), T.NUMERIC, struct.pack("!hhHH", 0, 0, 0, 0)),
        (Decimal("NaN"), T.NUMERIC, struct.pack("!hhHH", 0, 0, 0xC000, 0)),
        (dt.date(2000, 1, 2), T.DATE, struct.pack("!i", 1)),
        (dt.datetime(2000, 1, 1, 0, 0, 1), T.TIMESTAMP, struct.pack("!q", 1_000_000)),
        (dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=dt.UTC), T.TIMESTAMPTZ, struct.pack("!q", -1_000_000)),
        (dt.timedelta(days=2, seconds=3), T.INTERVAL, struct.pack("!qii", 3_000_000, 2, 0)),
        (dt.time(0, 0, 1), T.TIME, struct.pack("!q", 1_000_000)),
        ('{"a": 1}', T.JSONB, b'\x01{"a": 1}'),
        (uuid.UUID(int=1), T.UUID, b"\x00" * 15 + b"\x01"),
    ],
)
def test_binary_codecs(value: Any, sql_type: SqlType, encoded: bytes) -> None:
    assert codecs.encode_binary(value, sql_type) == encoded
    decoded = codecs.decode_binary(encoded, sql_type)
    assert str(decoded) == "NaN" if isinstance(value, Decimal) and value.is_nan() else decoded == value


@settings(max_examples=300, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_numeric_binary_round_trip(value: Decimal) -> None:
    decoded = codecs.decode_binary(codecs.encode_binary(value, T.NUMERIC), T.NUMERIC)
    assert decoded == value
    exponent = int(value.as_tuple().exponent)
    if exponent < 0:  # the display scale survives
        assert int(decoded.as_tuple().exponent) == exponent


def test_binary_arrays() -> None:
    int_array = values.array_type(T.INTEGER)
    encoded = codecs.encode_binary([1, None], int_array)
    assert encoded == struct.pack("!iiIii", 1, 1, 23, 2, 1) + struct.pack("!ii", 4, 1) + struct.pack("!i", -1)
    assert codecs.decode_binary(encoded, int_array) == [1, None]
    nested = [["a", "b"], ["c", "d"]]
    text_array = values.array_type(T.TEXT)
    assert codecs.decode_binary(codecs.encode_binary(nested, text_array), text_array) == nested
    assert codecs.decode_binary(codecs.encode_binary([], text_array), text_array) == []
    assert codecs.supports_binary(int_array)


def test_binary_codec_errors() -> None:
    with pytest.raises(codecs.InvalidBinaryRepresentation):
        codecs.decode_binary(b"\x00\x01", T.INTEGER)
    with pytest.raises(StreamDBError) as info:
        codecs.encode_binary(2**40, T.INTEGER)
    assert info.value.sqlstate == "22003"
    point = SqlType("point", 600, 16, 1017, "G")
    assert not codecs.supports_binary(point)
    with pytest.raises(StreamDBError) as unsupported:
        codecs.encode_binary((1.0, 2.0), point)
    assert unsupported.value.sqlstate == "0A000"
