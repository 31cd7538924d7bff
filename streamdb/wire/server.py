"""The PostgreSQL v3 wire protocol server: one asyncio task per client connection.

A connection drives one engine Session (streamdb/runtime/api.py) and owns the protocol
state: prepared statements, portals, the error-recovery mode of the extended protocol,
and COPY sub-protocols. Values are encoded with streamdb.values (text) and
streamdb.wire.codecs (binary).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import secrets
import ssl
import struct
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from streamdb import types as T
from streamdb import values
from streamdb.auth import redact_sql
from streamdb.errors import (
    FeatureNotSupported,
    IdleInTransactionSessionTimeout,
    InternalError,
    InvalidAuthorization,
    InvalidCursorName,
    InvalidPassword,
    InvalidSqlStatementName,
    Notice,
    ProtocolViolation,
    QueryCanceled,
    StreamDBError,
    TooManyConnections,
)
from streamdb.runtime.api import (
    OFF_LOOP_CHARS,
    Column,
    CopyInRequest,
    Engine,
    ExecutionResult,
    PreparedStatement,
    Session,
    Statement,
)
from streamdb.types import SqlType
from streamdb.wire import codecs, scram
from streamdb.wire import protocol as pq

log = logging.getLogger("streamdb.wire")

# Flush the output buffer once it holds this much, so big results stream with backpressure.
_FLUSH_THRESHOLD = 64 * 1024
# Input is read from the socket up to this much at a time (_fill_input).
_READ_CHUNK = 64 * 1024
# RowDescriptions and row encoders a connection keeps (Connection._output).
_OUTPUTS_KEPT = 64
_RowEncoder = Callable[[tuple[Any, ...]], bytes]
_CLOSE_GRACE_SECONDS = 2.0
# Messages a client may pipeline while a push query streams before we stop reading them.
_MAX_QUEUED_MESSAGES = 1000
# Message types of the extended query protocol: an error in one of them discards
# everything up to the next Sync.
_EXTENDED_MESSAGES = frozenset(b"PBDECHS")
# Every message type a frontend may send (PostgreSQL's SocketBackend list).
_FRONTEND_MESSAGE_TYPES = frozenset(bytes([t]) for t in b"QPBDECSHFXdcf")
AUTH_METHODS = ("trust", "scram-sha-256", "md5")
# A client must send its startup packet and finish the password exchange within this
# (PostgreSQL's authentication_timeout); the server's setting authentication_timeout_s.
DEFAULT_AUTHENTICATION_TIMEOUT_SECONDS = 60.0
# Longest password / SASL message accepted (PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH).
_MAX_AUTH_MESSAGE_BYTES = 65535


class ConnectionObserver(Protocol):
    """Told about connections as they come and go (the server's metrics count them)."""

    def connection_opened(self) -> None:
        """A client completed startup: it holds a session now."""

    def connection_closed(self) -> None:
        """A client that completed startup went away."""

    def connection_refused(self, sqlstate: str) -> None:
        """A client was turned away before it got a session (FATAL with this SQLSTATE)."""


class _ConnectionClosed(Exception):
    """The client went away (EOF, reset, Terminate): end the connection quietly."""


class _FatalError(Exception):
    """Send this error with severity FATAL, then close the connection."""

    def __init__(self, error: StreamDBError) -> None:
        super().__init__(error.message)
        self.error = error


class WireServer:
    """Accepts Postgres clients on (host, port) and serves them from `engine`."""

    def __init__(
        self,
        engine: Engine,
        host: str,
        port: int,
        *,
        max_connections: int = 100,
        max_message_bytes: int = 64 * 1024 * 1024,
        auth_method: str = "trust",
        ssl_context: ssl.SSLContext | None = None,
        tls_required: bool = False,
        observer: ConnectionObserver | None = None,
        authentication_timeout: float = DEFAULT_AUTHENTICATION_TIMEOUT_SECONDS,
    ) -> None:
        if auth_method not in AUTH_METHODS:
            raise ValueError(f"unknown auth_method {auth_method!r}")
        if tls_required and ssl_context is None:
            raise ValueError("tls_required needs an ssl_context")
        self.engine = engine
        self.host = host
        self.port = port  # the bound port once start() returns (useful with port=0)
        self.max_connections = max_connections
        self.max_message_bytes = max_message_bytes
        self.auth_method = auth_method
        self.ssl_context = ssl_context
        self.tls_required = tls_required
        self.observer = observer
        self.authentication_timeout = authentication_timeout
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._by_cancel_key: dict[tuple[int, int], Connection] = {}
        self._pids = itertools.count(10_000 + secrets.randbelow(20_000))

    @property
    def connection_count(self) -> int:
        """Live client connections (including ones still in startup)."""
        return len(self._connections)

    @property
    def session_count(self) -> int:
        """Connections that completed startup and hold an engine session."""
        return len(self._by_cancel_key)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle_client, self.host, self.port)
        sockets = self._server.sockets or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("listening on %s:%d", self.host, self.port)

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def close(self) -> None:
        """Stop accepting, terminate every connection, wait briefly for them to finish."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.terminate("terminating connection due to administrator command")
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=_CLOSE_GRACE_SECONDS)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=_CLOSE_GRACE_SECONDS)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), _CLOSE_GRACE_SECONDS)
            self._server = None

    async def _handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(self, reader, writer)
        task = asyncio.current_task()
        self._connections.add(connection)
        if task is not None:
            self._tasks.add(task)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            if task is not None:
                self._tasks.discard(task)

    # --- cancel-key registry ----------------------------------------------------------

    def _register(self, connection: Connection) -> tuple[int, int]:
        while True:
            key = (next(self._pids) % 2**31, secrets.randbits(32))
            if key not in self._by_cancel_key:
                self._by_cancel_key[key] = connection
                return key

    def _unregister(self, key: tuple[int, int] | None) -> None:
        if key is not None:
            self._by_cancel_key.pop(key, None)

    def _cancel(self, pid: int, secret: int) -> bool:
        connection = self._by_cancel_key.get((pid, secret))
        if connection is None:
            log.info("cancel request for unknown backend %d ignored", pid)
            return False
        connection.request_cancel()
        return True


@dataclass
class _Portal:
    """A bound statement (Bind) waiting to be, or being, executed (Execute)."""

    prepared: PreparedStatement
    params: list[Any]
    result_format_codes: list[int]
    result: ExecutionResult | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    position: int = 0
    done: bool = False


class Connection:
    """The protocol state machine of one client connection."""

    def __init__(self, server: WireServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.session: Session | None = None
        self.cancel_key: tuple[int, int] | None = None
        self._out = bytearray()
        self._statements: dict[str, PreparedStatement] = {}
        # Parameter types the client declared in Parse; they win over inferred ones for decoding.
        self._declared_types: dict[str, list[SqlType | None]] = {}
        self._portals: dict[str, _Portal] = {}
        # (id of a columns tuple, formats) -> (the tuple, its RowDescription, its row encoder)
        self._outputs: dict[tuple[int, tuple[int, ...]], tuple[Sequence[Column], bytes, _RowEncoder]] = {}
        self._skip_until_sync = False
        self._cancel_event = asyncio.Event()
        # A read started while streaming (to notice disconnects); its message is handled next.
        self._pending_read: asyncio.Task[tuple[bytes, bytes]] | None = None
        self._queued_messages: collections.deque[tuple[bytes, bytes]] = collections.deque()
        # Input after startup (_read_from_socket): bytes read and not yet cut into messages.
        self._in = bytearray()
        self._in_pos = 0
        self._terminating = False
        self.tls_in_use = False
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)

    # --- lifecycle ----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            if await self._startup():
                await self._message_loop()
        except _FatalError as fatal:
            if self.cancel_key is None and self.server.observer is not None:
                self.server.observer.connection_refused(fatal.error.sqlstate)
            self._send_error(fatal.error, severity="FATAL")
            with contextlib.suppress(_ConnectionClosed):
                await self._flush()
        except _ConnectionClosed:
            pass
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            log.debug("connection %s cancelled", self.peer)
        except Exception:
            log.exception("connection %s failed", self.peer)
        finally:
            await self._cleanup()

    async def _cleanup(self) -> None:
        if self._pending_read is not None:
            pending, self._pending_read = self._pending_read, None
            if pending.done() and not pending.cancelled():
                pending.exception()  # consumed: the connection is over anyway
            pending.cancel()
        self.server._unregister(self.cancel_key)
        if self.cancel_key is not None and self.server.observer is not None:
            self.server.observer.connection_closed()
        if self.session is not None:
            session, self.session = self.session, None
            try:
                session.close()
            except Exception:
                log.exception("session.close() failed")
        with contextlib.suppress(Exception):
            self.writer.close()
        log.debug("connection %s closed", self.peer)

    def terminate(self, message: str) -> None:
        """Server shutdown: tell the client (FATAL 57P01) and close the socket."""
        if self._terminating:
            return
        self._terminating = True
        error = StreamDBError(message, sqlstate="57P01")
        with contextlib.suppress(Exception):
            self.writer.write(pq.error_or_notice(b"E", _error_fields(error, "FATAL")))
        with contextlib.suppress(Exception):
            self.writer.close()

    def request_cancel(self) -> None:
        """A CancelRequest named this connection."""
        log.info("cancel request for connection %s", self.peer)
        if self.session is not None:
            try:
                self.session.cancel()
            except Exception:
                log.exception("session.cancel() failed")
        self._cancel_event.set()

    # --- output -------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        self._out += data

    async def _flush(self) -> None:
        if self._out:
            data = bytes(self._out)
            self._out.clear()
            try:
                self.writer.write(data)
            except (ConnectionError, OSError, RuntimeError) as exc:
                raise _ConnectionClosed() from exc
        try:
            await self.writer.drain()
        except (ConnectionError, OSError, RuntimeError) as exc:
            raise _ConnectionClosed() from exc

    def _output_full(self) -> bool:
        """Whether the buffered output is due to be flushed (a plain test: callers await _flush
        only then, so a message or a row costs no coroutine)."""
        return len(self._out) >= _FLUSH_THRESHOLD

    def _send_error(self, error: StreamDBError, *, severity: str | None = None, position_offset: int = 0) -> None:
        self._send(pq.error_or_notice(b"E", _error_fields(error, severity, position_offset)))

    def _send_notice(self, notice: Notice) -> None:
        self._send(pq.error_or_notice(b"N", [
            ("S", notice.severity), ("V", notice.severity), ("C", notice.sqlstate),
            ("M", notice.message), ("D", notice.detail), ("H", notice.hint),
        ]))

    def _send_ready(self) -> None:
        status = self.session.transaction_status if self.session is not None else "I"
        self._send(pq.ready_for_query(status))

    # --- input --------------------------------------------------------------------------

    async def _read_exactly(self, n: int) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            raise _ConnectionClosed() from exc

    async def _fill_input(self) -> None:
        """Append what the socket has (at least one byte) to the input buffer."""
        if self._in_pos:
            del self._in[:self._in_pos]
            self._in_pos = 0
        try:
            data = await self.reader.read(_READ_CHUNK)
        except (ConnectionError, OSError) as exc:
            raise _ConnectionClosed() from exc
        if not data:
            raise _ConnectionClosed()
        self._in += data

    async def _read_from_socket(self) -> tuple[bytes, bytes]:
        # Messages are cut from a buffer filled a chunk at a time: a pipelined Bind, Describe,
        # Execute and Sync cost one read, not three awaits of the stream each.
        buf = self._in
        while len(buf) - self._in_pos < 1:
            await self._fill_input()
        pos = self._in_pos
        kind = bytes(buf[pos:pos + 1])
        # Check the type before the length, as PostgreSQL does: garbage (or an SSLRequest sent
        # after startup) is refused at once instead of waiting for a bogus length's worth of bytes.
        if kind not in _FRONTEND_MESSAGE_TYPES:
            raise _FatalError(ProtocolViolation(f"invalid frontend message type {kind[0]}"))
        while len(buf) - self._in_pos < 5:
            await self._fill_input()
        pos = self._in_pos
        (length,) = struct.unpack_from("!i", buf, pos + 1)
        if length < 4 or length - 4 > self.server.max_message_bytes:
            raise _FatalError(ProtocolViolation("invalid message length"))
        end = pos + 1 + length
        if end <= len(buf):
            body = bytes(buf[pos + 5:end])
            if end == len(buf):
                buf.clear()
                self._in_pos = 0
            else:
                self._in_pos = end
            return kind, body
        # A message larger than what has arrived: the rest straight from the stream.
        head = bytes(buf[pos + 5:])
        buf.clear()
        self._in_pos = 0
        return kind, head + await self._read_exactly(end - pos - 5 - len(head))

    async def _read_message(self) -> tuple[bytes, bytes]:
        if self._queued_messages:
            return self._queued_messages.popleft()
        if self._pending_read is not None:
            pending, self._pending_read = self._pending_read, None
            return await pending
        return await self._read_from_socket()

    async def _read_command(self) -> tuple[bytes, bytes]:
        """The next message, waited for at most idle_in_transaction_session_timeout while the
        session is inside a transaction block (it would hold its snapshot and state forever)."""
        session = self.session
        timeout = None
        if session is not None and session.transaction_status != "I" and not self._queued_messages:
            timeout = session.idle_in_transaction_timeout
        if timeout is None:
            return await self._read_message()
        try:
            return await asyncio.wait_for(self._read_message(), timeout)
        except TimeoutError:
            raise _FatalError(IdleInTransactionSessionTimeout(
                "terminating connection due to idle-in-transaction timeout")) from None

    # --- startup ------------------------------------------------------------------------

    async def _read_startup_bytes(self, n: int, deadline: float) -> bytes:
        """Startup packets are read by `deadline`: a client that never finishes one is dropped
        without a message, as PostgreSQL drops it ("incomplete startup packet")."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self._read_exactly(n)
        except TimeoutError:
            log.info("connection %s: no complete startup packet within %g s", self.peer,
                     self.server.authentication_timeout)
            raise _ConnectionClosed() from None

    async def _startup(self) -> bool:
        """Negotiate up to ReadyForQuery. False when the connection should just close."""
        ssl_done = gss_done = False  # each encryption request is answered once, as in PostgreSQL
        deadline = asyncio.get_running_loop().time() + self.server.authentication_timeout
        while True:
            (length,) = struct.unpack("!i", await self._read_startup_bytes(4, deadline))
            if length < 8 or length > pq.MAX_STARTUP_PACKET:
                raise _FatalError(ProtocolViolation("invalid length of startup packet"))
            body = await self._read_startup_bytes(length - 4, deadline)
            (code,) = struct.unpack("!I", body[:4])
            if code == pq.SSL_REQUEST_CODE:
                if ssl_done:
                    raise _FatalError(ProtocolViolation("unexpected SSLRequest: encryption was already negotiated"))
                ssl_done = True
                if self.server.ssl_context is None:
                    self.writer.write(b"N")  # no TLS: continue in plain text
                    await self._flush()
                    continue
                await self._upgrade_to_tls(self.server.ssl_context)
                gss_done = True  # no GSS encryption inside TLS
                continue
            if code == pq.GSSENC_REQUEST_CODE:
                if gss_done:
                    raise _FatalError(ProtocolViolation("unexpected GSSENCRequest: encryption was already negotiated"))
                gss_done = True
                self.writer.write(b"N")  # no GSS encryption: libpq goes on with SSLRequest or plain text
                await self._flush()
                continue
            if code == pq.CANCEL_REQUEST_CODE:
                if len(body) >= 12:
                    pid, secret = struct.unpack("!II", body[4:12])
                    self.server._cancel(pid, secret)
                return False
            break
        major, minor = code >> 16, code & 0xFFFF
        if major != 3:
            raise _FatalError(FeatureNotSupported(
                f"unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0"))
        try:
            params = pq.parse_startup_parameters(body[4:])
        except StreamDBError as exc:
            raise _FatalError(ProtocolViolation(f"invalid startup packet layout: {exc.message}")) from None
        protocol_options = [name for name in params if name.startswith("_pq_.")]
        if minor > 0 or protocol_options:
            self._send(pq.negotiate_protocol_version(0, protocol_options))
            for name in protocol_options:
                del params[name]

        user = params.pop("user", "")
        if not user:
            raise _FatalError(InvalidAuthorization("no PostgreSQL user name specified in startup packet"))
        database = params.pop("database", "") or user
        # Settings from '-c name=value' in 'options' first; explicit parameters override them.
        options = pq.parse_options_switches(params.pop("options", ""))
        options.update(params)

        if self.server.tls_required and not self.tls_in_use:
            raise _FatalError(InvalidAuthorization(
                "TLS is required: connect with sslmode=require (or verify-full)"))
        if self.server.session_count >= self.server.max_connections:
            raise _FatalError(TooManyConnections("sorry, too many clients already"))
        await self._authenticate(user)
        # Checked again: other clients may have completed startup while this one authenticated.
        if self.server.session_count >= self.server.max_connections:
            raise _FatalError(TooManyConnections("sorry, too many clients already"))
        try:
            self.session = self.server.engine.new_session(user, database, options)
        except StreamDBError as exc:
            raise _FatalError(exc) from None
        except Exception as exc:
            log.exception("new_session failed")
            raise _FatalError(InternalError(f"internal error: {exc}")) from None
        self.cancel_key = self.server._register(self)
        if self.server.observer is not None:
            self.server.observer.connection_opened()
        log.debug("connection %s: user=%s database=%s", self.peer, user, database)

        self._send(pq.authentication_ok())
        for name, value in self.session.startup_parameters().items():
            self._send(pq.parameter_status(name, value))
        self._send(pq.backend_key_data(*self.cancel_key))
        self._send_ready()
        await self._flush()
        return True

    # --- TLS and authentication ---------------------------------------------------------

    async def _upgrade_to_tls(self, context: ssl.SSLContext) -> None:
        """Answer an SSLRequest with 'S' and run the TLS handshake on this connection."""
        # Bytes the client sent after SSLRequest, before the handshake, would be taken as if they had
        # come over TLS (CVE-2021-23214 in PostgreSQL): refuse them.
        if len(getattr(self.reader, "_buffer", b"")):
            raise _FatalError(ProtocolViolation("received unencrypted data after SSL request"))
        self.writer.write(b"S")
        await self._flush()
        try:
            await self.writer.start_tls(context, ssl_handshake_timeout=self.server.authentication_timeout)
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as exc:
            log.info("connection %s: TLS handshake failed: %s", self.peer, exc)
            raise _ConnectionClosed() from exc
        self.tls_in_use = True

    async def _authenticate(self, user: str) -> None:
        """The password exchange of the configured auth method; FATAL 28P01 when it fails.

        Unknown roles and roles without a password run the same exchange and fail with the same
        message, so a client cannot tell which roles exist."""
        method = self.server.auth_method
        if method == "trust":
            return  # new_session still refuses unknown roles and NOLOGIN roles
        try:
            login = self.server.engine.login_info(user)
        except Exception as exc:
            log.exception("login_info failed")
            raise _FatalError(InternalError(f"internal error: {exc}")) from None
        try:
            async with asyncio.timeout(self.server.authentication_timeout):
                if method == "md5" and login is not None and login.md5_hash:
                    accepted = await self._md5_exchange(login.md5_hash)
                else:
                    accepted = await self._scram_exchange(user, login.scram_verifier if login else None)
        except TimeoutError:
            raise _FatalError(QueryCanceled("canceling authentication due to timeout")) from None
        if not accepted:
            log.info("connection %s: password authentication failed for user %r", self.peer, user)
            raise _FatalError(InvalidPassword(f'password authentication failed for user "{user}"'))

    async def _read_password_message(self) -> bytes:
        """The body of the client's next 'p' message (PasswordMessage, SASL responses)."""
        header = await self._read_exactly(5)
        (length,) = struct.unpack("!i", header[1:])
        if header[:1] != b"p":
            raise _FatalError(ProtocolViolation(
                f"expected password response, got message type {header[0]}"))
        if length < 4 or length - 4 > _MAX_AUTH_MESSAGE_BYTES:
            raise _FatalError(ProtocolViolation("invalid message length"))
        return await self._read_exactly(length - 4) if length > 4 else b""

    async def _md5_exchange(self, md5_hash: str) -> bool:
        salt = secrets.token_bytes(4)
        self._send(pq.authentication_md5_password(salt))
        await self._flush()
        try:
            response = pq.MessageReader(await self._read_password_message()).cstring()
        except StreamDBError as exc:
            raise _FatalError(ProtocolViolation(f"invalid password packet: {exc.message}")) from None
        return scram.md5_response_matches(md5_hash, salt, response)

    async def _scram_exchange(self, user: str, verifier: str | None) -> bool:
        exchange = scram.ScramServer(user, verifier)
        self._send(pq.authentication_sasl([scram.MECHANISM]))
        await self._flush()
        try:
            reader = pq.MessageReader(await self._read_password_message())
            mechanism = reader.cstring()
            if mechanism != scram.MECHANISM:
                raise ProtocolViolation("client selected an invalid SASL authentication mechanism")
            size = reader.int32()
            if size < 0 or size != reader.remaining():
                raise ProtocolViolation("malformed SASLInitialResponse: invalid data length")
            self._send(pq.authentication_sasl_continue(exchange.server_first(reader.rest())))
            await self._flush()
            server_final = exchange.server_final(await self._read_password_message())
        except scram.ScramAuthenticationFailed:
            return False
        except StreamDBError as exc:
            raise _FatalError(exc) from None
        self._send(pq.authentication_sasl_final(server_final))
        return True

    # --- message dispatch ---------------------------------------------------------------

    async def _message_loop(self) -> None:
        handlers: dict[bytes, Callable[[bytes], Any]] = {
            b"Q": self._on_query,
            b"P": self._on_parse,
            b"B": self._on_bind,
            b"D": self._on_describe,
            b"E": self._on_execute,
            b"C": self._on_close,
            b"S": self._on_sync,
            b"H": self._on_flush,
            b"F": self._on_function_call,
        }
        while True:
            kind, body = await self._read_command()
            if kind == b"X":
                return
            if kind in (b"d", b"c", b"f"):
                continue  # late COPY messages after a failed COPY: ignored, per protocol
            handler = handlers.get(kind)
            if handler is None:
                raise _FatalError(ProtocolViolation(f"invalid frontend message type {kind[0]}"))
            if self._skip_until_sync and kind != b"S":
                continue
            try:
                pending = handler(body)  # Bind, Describe and Close answer without awaiting
                if pending is not None:
                    await pending
            except (_ConnectionClosed, _FatalError):
                raise
            except StreamDBError as exc:
                self._send_error(exc)
                if kind[0] in _EXTENDED_MESSAGES:
                    self._skip_until_sync = True
                    # Like Postgres, send the error now: a client that sent Flush (not Sync)
                    # after Parse/Describe is waiting for it, and its Flush will be skipped.
                    await self._flush()
            except Exception as exc:
                log.exception("internal error handling message %r", kind)
                self._send_error(InternalError(f"internal error: {exc}"))
                if kind[0] in _EXTENDED_MESSAGES:
                    self._skip_until_sync = True
                    await self._flush()
            if self._output_full():
                await self._flush()

    # --- simple query -------------------------------------------------------------------

    async def _on_query(self, body: bytes) -> None:
        self._portals.pop("", None)
        try:
            try:
                reader = pq.MessageReader(body)
                sql = reader.cstring()
                reader.end()  # a NUL inside the query string: 08P01, never run the prefix
                statements = await _off_loop_if_long(sql, self._require_session().parse, sql)
            except StreamDBError as exc:
                self._send_error(exc)
                return
            except Exception as exc:
                log.exception("parse failed")
                self._send_error(InternalError(f"internal error: {exc}"))
                return
            if not statements:
                self._send(pq.empty_query_response())
                return
            for statement in statements:
                if not await self._run_simple(statement):
                    break
        finally:
            self._send_ready()
            await self._flush()

    async def _run_simple(self, statement: Statement) -> bool:
        """Run one statement of a simple query; False after an error."""
        try:
            result = await self._execute(statement, None)
            if result.copy_in is not None:
                result = await self._copy_in(result)
            if result.copy_out is not None:
                await self._send_copy_out(result)
            elif result.stream is not None and result.copy_stream:
                await self._stream_copy_out(result)
            elif result.stream is not None:
                columns = result.columns or ()
                self._send(pq.row_description(_describe_fields(columns, [pq.FORMAT_TEXT] * len(columns))))
                await self._stream(result, _row_encoder(columns, [pq.FORMAT_TEXT] * len(columns)))
            else:
                if result.columns is not None:
                    description, encode = self._output(result.columns, [pq.FORMAT_TEXT] * len(result.columns))
                    self._send(description)
                    await self._send_rows(result.rows or [], encode)
            self._finish(result)
            return True
        except StreamDBError as exc:
            self._send_error(exc, position_offset=statement.offset)
            return False
        except (_ConnectionClosed, _FatalError):
            raise
        except Exception as exc:
            log.exception("internal error executing %r", redact_sql(statement.sql))  # no passwords in logs
            self._send_error(InternalError(f"internal error: {exc}"))
            return False

    async def _execute(self, statement: Statement, params: list[Any] | None) -> ExecutionResult:
        self._cancel_event.clear()
        return await self._require_session().execute(statement, params)

    def _finish(self, result: ExecutionResult) -> None:
        for notice in result.notices:
            self._send_notice(notice)
        self._send(pq.command_complete(result.command_tag))
        for name, value in result.parameter_status.items():
            self._send(pq.parameter_status(name, value))

    async def _send_rows(self, rows: Sequence[tuple[Any, ...]], encode: Callable[[tuple[Any, ...]], bytes]) -> None:
        for row in rows:
            self._send(encode(row))
            if self._output_full():
                await self._flush()

    # --- COPY ---------------------------------------------------------------------------

    async def _copy_in(self, result: ExecutionResult) -> ExecutionResult:
        """COPY FROM STDIN: collect CopyData until CopyDone and hand it to the engine."""
        request = result.copy_in
        assert request is not None
        session = self._require_session()
        for notice in result.notices:
            self._send_notice(notice)
        overall = pq.FORMAT_BINARY if request.format == "binary" else pq.FORMAT_TEXT
        self._send(pq.copy_in_response(overall, [overall] * request.columns))
        chunks: list[bytes] = []
        try:
            await self._flush()
            while True:
                kind, body = await self._read_message()
                if kind == b"d":
                    chunks.append(body)
                elif kind == b"c":
                    break
                elif kind == b"f":
                    reason = pq.MessageReader(body).cstring() if body else ""
                    self._fail_copy(request, reason)
                    raise QueryCanceled(f"COPY from stdin failed: {reason}")
                elif kind in (b"H", b"S"):
                    continue  # Flush and Sync are ignored during copy-in
                elif kind == b"X":
                    self._fail_copy(request, "client terminated the connection")
                    raise _ConnectionClosed()
                else:
                    self._fail_copy(request, "protocol violation")
                    raise ProtocolViolation(f"unexpected message type 0x{kind[0]:02X} during COPY from stdin")
        except (_ConnectionClosed, _FatalError):
            self._fail_copy(request, "connection lost during COPY")
            raise
        return await session.finish_copy_in(request, b"".join(chunks))

    def _fail_copy(self, request: CopyInRequest, reason: str) -> None:
        if self.session is None:
            return
        try:
            self.session.fail_copy_in(request, reason)
        except Exception:
            log.exception("fail_copy_in failed")

    async def _send_copy_out(self, result: ExecutionResult) -> None:
        overall = pq.FORMAT_BINARY if result.copy_out_format == "binary" else pq.FORMAT_TEXT
        ncols = len(result.columns) if result.columns is not None else 0
        self._send(pq.copy_out_response(overall, [overall] * ncols))
        for line in result.copy_out or ():
            self._send(pq.copy_data(line))
            if self._output_full():
                await self._flush()
        self._send(pq.copy_done())

    # --- push queries -------------------------------------------------------------------

    async def _stream_copy_out(self, result: ExecutionResult) -> None:
        """COPY ... TO STDOUT of a push query: CopyData per line as changes arrive."""
        overall = pq.FORMAT_BINARY if result.copy_out_format == "binary" else pq.FORMAT_TEXT
        ncols = len(result.columns) if result.columns is not None else 0
        self._send(pq.copy_out_response(overall, [overall] * ncols))
        await self._stream(result, lambda row: pq.copy_data(row[0]))
        self._send(pq.copy_done())

    async def _stream(self, result: ExecutionResult, encode: Callable[[tuple[Any, ...]], bytes]) -> None:
        """Send row batches as the engine produces them, until the iterator ends, a cancel
        request arrives (57014) or the client disconnects."""
        iterator = result.stream
        assert iterator is not None
        await self._flush()
        # Keep a read outstanding so a disconnect ends the stream even when no rows come.
        if self._pending_read is None:
            self._pending_read = asyncio.ensure_future(self._read_from_socket())
        cancelled = asyncio.ensure_future(self._cancel_event.wait())
        next_batch: asyncio.Future[list[tuple[Any, ...]] | None] | None = None
        try:
            while True:
                if next_batch is None:
                    next_batch = asyncio.ensure_future(_anext(iterator))
                watcher = self._pending_read
                waits: set[asyncio.Future[Any]] = {next_batch, cancelled}
                if watcher is not None:
                    waits.add(watcher)
                done, _pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if cancelled in done:
                    raise QueryCanceled("canceling statement due to user request")
                if watcher is not None and watcher in done:
                    self._pending_read = None
                    failure = watcher.exception()
                    if isinstance(failure, _FatalError):
                        raise failure
                    if failure is not None:
                        raise _ConnectionClosed() from failure
                    kind, body = watcher.result()
                    if kind == b"X":
                        raise _ConnectionClosed()
                    # Pipelined input (e.g. the Sync after Execute): handled after the stream.
                    self._queued_messages.append((kind, body))
                    if len(self._queued_messages) < _MAX_QUEUED_MESSAGES:
                        self._pending_read = asyncio.ensure_future(self._read_from_socket())
                if next_batch in done:
                    finished = next_batch
                    next_batch = None
                    batch = finished.result()
                    if batch is None:
                        return
                    await self._send_rows(batch, encode)
                    await self._flush()
        finally:
            cancelled.cancel()
            if next_batch is not None and not next_batch.done():
                next_batch.cancel()
                with contextlib.suppress(BaseException):
                    await next_batch
            elif next_batch is not None and not next_batch.cancelled():
                next_batch.exception()  # a failure racing a cancel: retrieved, the statement ends anyway
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:
                    log.debug("closing a result stream failed", exc_info=True)

    # --- extended query protocol --------------------------------------------------------

    async def _on_parse(self, body: bytes) -> None:
        reader = pq.MessageReader(body)
        name = reader.cstring()
        sql = reader.cstring()
        type_oids = [reader.uint32() for _ in range(reader.int16())]
        reader.end()
        if name and name in self._statements:
            raise StreamDBError(f'prepared statement "{name}" already exists', sqlstate="42P05")
        declared: list[SqlType | None] = []
        for oid in type_oids:
            if oid in (0, T.UNKNOWN.oid):
                declared.append(None)
            elif oid in T.BY_OID:
                declared.append(T.BY_OID[oid])
            elif (array := values.array_type_by_oid(oid)) is not None:
                declared.append(array)
            else:
                raise FeatureNotSupported(f"parameter type with OID {oid} is not supported")
        self._statements[name] = await _off_loop_if_long(sql, self._require_session().prepare, sql, declared)
        self._declared_types[name] = declared
        self._send(pq.parse_complete())

    def _on_bind(self, body: bytes) -> None:
        reader = pq.MessageReader(body)
        portal_name = reader.cstring()
        statement_name = reader.cstring()
        param_formats = [reader.int16() for _ in range(reader.int16())]
        raw_params: list[bytes | None] = []
        for _ in range(reader.int16()):
            length = reader.int32()
            raw_params.append(None if length == -1 else reader.raw(length))
        result_formats = [reader.int16() for _ in range(reader.int16())]
        reader.end()

        prepared = self._statement(statement_name)
        if portal_name and portal_name in self._portals:
            raise StreamDBError(f'cursor "{portal_name}" already exists', sqlstate="42P03")
        if len(raw_params) != len(prepared.param_types):
            label = f'"{statement_name}"' if statement_name else '""'
            raise ProtocolViolation(
                f"bind message supplies {len(raw_params)} parameters, "
                f"but prepared statement {label} requires {len(prepared.param_types)}")
        if len(param_formats) not in (0, 1, len(raw_params)):
            raise ProtocolViolation(
                f"bind message has {len(param_formats)} parameter formats but {len(raw_params)} parameters")
        formats = _expand_formats(param_formats, len(raw_params))
        declared = self._declared_types.get(statement_name, [])
        param_types = [_declared_or(declared, i, inferred) for i, inferred in enumerate(prepared.param_types)]
        params = [
            _decode_param(raw, sql_type, fmt, index)
            for index, (raw, sql_type, fmt) in enumerate(zip(raw_params, param_types, formats, strict=True))
        ]
        if prepared.columns is not None:
            output_formats = _resolve_result_formats(result_formats, len(prepared.columns))
            for column, fmt in zip(prepared.columns, output_formats, strict=True):
                if fmt == pq.FORMAT_BINARY and not codecs.supports_binary(column.type):
                    raise FeatureNotSupported(f"no binary output function available for type {column.type}")
        self._portals[portal_name] = _Portal(prepared, params, result_formats)
        self._send(pq.bind_complete())

    def _on_describe(self, body: bytes) -> None:
        reader = pq.MessageReader(body)
        target = reader.byte()
        name = reader.cstring()
        reader.end()
        if target == ord("S"):
            prepared = self._statement(name)
            self._send(pq.parameter_description([t.oid for t in prepared.param_types]))
            if prepared.columns is None:
                self._send(pq.no_data())
            else:
                self._send(self._output(prepared.columns, [pq.FORMAT_TEXT] * len(prepared.columns))[0])
        elif target == ord("P"):
            portal = self._portal(name)
            columns = portal.prepared.columns
            if columns is None:
                self._send(pq.no_data())
            else:
                formats = _resolve_result_formats(portal.result_format_codes, len(columns))
                self._send(self._output(columns, formats)[0])
        else:
            raise ProtocolViolation(f"invalid DESCRIBE message subtype {target}")

    async def _on_execute(self, body: bytes) -> None:
        reader = pq.MessageReader(body)
        portal_name = reader.cstring()
        max_rows = reader.int32()
        reader.end()
        portal = self._portal(portal_name)
        statement = portal.prepared.statement
        if statement is None:
            self._send(pq.empty_query_response())
            return
        if portal.done:
            assert portal.result is not None
            tag = portal.result.command_tag
            self._send(pq.command_complete("SELECT 0" if tag.startswith("SELECT") else tag))
            return
        if portal.result is None:
            try:
                result = await self._execute(statement, portal.params)
                if result.copy_in is not None:
                    result = await self._copy_in(result)
            except StreamDBError as exc:
                if exc.position is not None:
                    exc.position += statement.offset
                raise
            described = portal.prepared.columns
            if described is not None and result.columns is not None and (
                    [c.type.oid for c in described] != [c.type.oid for c in result.columns]):
                # The relation changed since Parse (a view replaced, say): rows in the new shape
                # would not decode with the described one. PostgreSQL's answer, the same SQLSTATE.
                raise FeatureNotSupported("cached plan must not change result type",
                                          hint="Prepare the statement again.")
            portal.result = result
            portal.rows = list(result.rows or [])
            if result.copy_out is not None:
                await self._send_copy_out(result)
                self._complete_portal(portal)
                return
            if result.stream is not None and result.copy_stream:
                await self._stream_copy_out(result)
                self._complete_portal(portal)
                return
            if result.stream is not None:
                await self._stream(result, self._portal_encoder(portal))
                self._complete_portal(portal)
                return
        remaining = len(portal.rows) - portal.position
        count = remaining if max_rows <= 0 else min(max_rows, remaining)
        if count:
            encode = self._portal_encoder(portal)
            await self._send_rows(portal.rows[portal.position : portal.position + count], encode)
            portal.position += count
        if portal.position < len(portal.rows):
            self._send(pq.portal_suspended())
            return
        portal.rows = []  # release memory; the tag is all we still need
        self._complete_portal(portal)

    def _complete_portal(self, portal: _Portal) -> None:
        assert portal.result is not None
        portal.done = True
        self._finish(portal.result)

    def _portal_encoder(self, portal: _Portal) -> Callable[[tuple[Any, ...]], bytes]:
        # Encode with the described columns: that is what the client will decode with.
        assert portal.result is not None
        columns = portal.prepared.columns
        if columns is None or (portal.result.columns is not None and len(portal.result.columns) != len(columns)):
            columns = portal.result.columns or ()
        formats = _resolve_result_formats(portal.result_format_codes, len(columns))
        return self._output(columns, formats)[1]

    def _output(self, columns: Sequence[Column], formats: Sequence[int]) -> tuple[bytes, _RowEncoder]:
        """The RowDescription and the row encoder of these columns in these formats. A prepared
        statement's Describe and Execute (and a repeated query's plan) bring the same columns
        each time, so they are kept per connection, by the identity of the columns' tuple."""
        if not isinstance(columns, tuple):  # only a tuple is sure to keep its columns
            return pq.row_description(_describe_fields(columns, formats)), _row_encoder(columns, formats)
        key = (id(columns), tuple(formats))
        kept = self._outputs.get(key)
        if kept is not None and kept[0] is columns:
            return kept[1], kept[2]
        description = pq.row_description(_describe_fields(columns, formats))
        encode = _row_encoder(columns, formats)
        if len(self._outputs) >= _OUTPUTS_KEPT:
            self._outputs.clear()
        self._outputs[key] = (columns, description, encode)  # the tuple held: its id stays its own
        return description, encode

    def _on_close(self, body: bytes) -> None:
        reader = pq.MessageReader(body)
        target = reader.byte()
        name = reader.cstring()
        reader.end()
        if target == ord("S"):
            self._statements.pop(name, None)
            self._declared_types.pop(name, None)
        elif target == ord("P"):
            self._portals.pop(name, None)
        else:
            raise ProtocolViolation(f"invalid CLOSE message subtype {target}")
        self._send(pq.close_complete())

    async def _on_sync(self, body: bytes) -> None:
        self._skip_until_sync = False
        if body:  # an error here must still end with ReadyForQuery: the client waits for it
            self._send_error(ProtocolViolation("invalid message format"))
        if self._require_session().transaction_status == "I":
            self._portals.clear()  # portals live until the end of the (implicit) transaction
        self._send_ready()
        await self._flush()

    async def _on_flush(self, body: bytes) -> None:
        if body:
            raise ProtocolViolation("invalid message format")
        await self._flush()

    async def _on_function_call(self, body: bytes) -> None:
        self._send_error(FeatureNotSupported("fastpath function calls are not supported"))
        self._send_ready()
        await self._flush()

    # --- lookups ------------------------------------------------------------------------

    def _require_session(self) -> Session:
        if self.session is None:
            raise ProtocolViolation("no session")
        return self.session

    def _statement(self, name: str) -> PreparedStatement:
        prepared = self._statements.get(name)
        if prepared is None:
            if name:
                raise InvalidSqlStatementName(f'prepared statement "{name}" does not exist')
            raise InvalidSqlStatementName("unnamed prepared statement does not exist")
        return prepared

    def _portal(self, name: str) -> _Portal:
        portal = self._portals.get(name)
        if portal is None:
            raise InvalidCursorName(f'portal "{name}" does not exist')
        return portal


# --- helpers -----------------------------------------------------------------------------

_STREAM_END: Any = None


_P = ParamSpec("_P")
_R = TypeVar("_R")


async def _off_loop_if_long(sql: str, work: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """`work` (parsing or preparing `sql`) on a worker thread when the text is long."""
    if len(sql) < OFF_LOOP_CHARS:
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)


async def _anext(iterator: AsyncIterator[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]] | None:
    """The next batch, or None when the iterator is exhausted."""
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _STREAM_END


def _error_fields(
    error: StreamDBError, severity: str | None = None, position_offset: int = 0
) -> list[tuple[str, str | None]]:
    level = severity or error.severity
    position = None if error.position is None else str(error.position + position_offset)
    return [
        ("S", level), ("V", level), ("C", error.sqlstate), ("M", error.message),
        ("D", error.detail), ("H", error.hint), ("P", position),
    ]


def _describe_fields(
    columns: Sequence[Column], formats: Sequence[int]
) -> list[tuple[str, int, int, int, int, int, int]]:
    return [
        (c.name, c.table_oid, c.column_number, c.type.oid, c.type.typlen, c.type_modifier, fmt)
        for c, fmt in zip(columns, formats, strict=True)
    ]


def _expand_formats(codes: Sequence[int], count: int) -> list[int]:
    for code in codes:
        if code not in (pq.FORMAT_TEXT, pq.FORMAT_BINARY):
            raise ProtocolViolation(f"unsupported format code: {code}")
    if not codes:
        return [pq.FORMAT_TEXT] * count
    if len(codes) == 1:
        return [codes[0]] * count
    return list(codes)


def _resolve_result_formats(codes: Sequence[int], column_count: int) -> list[int]:
    if len(codes) not in (0, 1, column_count):
        raise ProtocolViolation(f"bind message has {len(codes)} result formats but query has {column_count} columns")
    return _expand_formats(codes, column_count)


def _declared_or(declared: Sequence[SqlType | None], index: int, inferred: SqlType) -> SqlType:
    """The client's declared type for parameter `index` if it gave one, else the inferred one."""
    chosen = declared[index] if index < len(declared) else None
    return chosen if chosen is not None else inferred


def _decode_param(raw: bytes | None, sql_type: SqlType, fmt: int, index: int) -> Any:
    if raw is None:
        return None
    if fmt == pq.FORMAT_BINARY:
        try:
            return codecs.decode_binary(raw, sql_type)
        except codecs.InvalidBinaryRepresentation:
            raise codecs.InvalidBinaryRepresentation(
                f"incorrect binary data format in bind parameter {index + 1}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamDBError('invalid byte sequence for encoding "UTF8"', sqlstate="22021") from None
    return values.parse_text(text, sql_type)


def _row_encoder(columns: Sequence[Column], formats: Sequence[int]) -> _RowEncoder:
    """A function turning one row into a DataRow message, with one cell encoder per column."""
    encoders = [
        _binary_cell_encoder(column.type) if fmt == pq.FORMAT_BINARY else _text_cell_encoder(column.type)
        for column, fmt in zip(columns, formats, strict=True)
    ]

    def encode(row: tuple[Any, ...]) -> bytes:
        return pq.data_row([None if value is None else enc(value) for enc, value in zip(encoders, row, strict=False)])

    return encode


def _text_cell_encoder(sql_type: SqlType) -> Callable[[Any], bytes]:
    def encode(value: Any) -> bytes:
        return values.format_text(value, sql_type).encode("utf-8")

    return encode


def _binary_cell_encoder(sql_type: SqlType) -> Callable[[Any], bytes]:
    def encode(value: Any) -> bytes:
        return codecs.encode_binary(value, sql_type)

    return encode
