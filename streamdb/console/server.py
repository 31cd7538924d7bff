"""The web console and /metrics: one aiohttp server on `console_port` (docs/console.md).

SQL runs through an ordinary engine Session, as over the wire, so errors carry SQLSTATEs and
privileges apply. With trust authentication the console acts as the bootstrap role; otherwise
every request needs HTTP basic auth, checked against the role's stored SCRAM verifier (or md5
hash), and SQL runs as that role.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import decimal
import hashlib
import json
import logging
import math
import uuid
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from streamdb.auth import md5_password_matches, scram_password_matches
from streamdb.catalog import BOOTSTRAP_ROLE
from streamdb.config import is_loopback_host
from streamdb.console.stats import SHOWN_KINDS, StatsSampler
from streamdb.errors import ConfigurationError, StreamDBError
from streamdb.runtime.api import ExecutionResult, Session

if TYPE_CHECKING:
    import ssl

    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.console")

SAMPLE_SECONDS = 1.0
SHUTDOWN_SECONDS = 3.0  # requests still running at shutdown get this long, then are cancelled
# Sampling reads every view's row count: done only while a console page (or a client) polls /api/stats.
WATCHED_SECONDS = 120.0
MAX_RESULT_ROWS = 1000  # rows of one result sent to the browser; the rest is cut (and said so)
_MAX_SAFE_INT = 2**53  # larger integers lose precision in JavaScript: sent as text
_STATIC = "static"
_CONTENT_TYPES = {".html": "text/html", ".js": "application/javascript", ".css": "text/css"}


def cell(value: Any) -> Any:
    """A result value as JSON the browser can show without losing anything."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) < _MAX_SAFE_INT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID | dt.timedelta):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return [cell(v) for v in value]
    if isinstance(value, dict):
        return {str(k): cell(v) for k, v in value.items()}
    return str(value)


def _error_json(error: StreamDBError, offset: int = 0) -> dict[str, Any]:
    return {"error": error.message, "sqlstate": error.sqlstate, "detail": error.detail, "hint": error.hint,
            "position": None if error.position is None else error.position + offset}


def _columns(result: ExecutionResult) -> list[dict[str, str]]:
    return [{"name": c.name, "type": c.type.name} for c in result.columns or ()]


class ConsoleServer:
    """HTTP (+ WebSocket) on host:port: the console UI and /api when `console`, /metrics when `metrics`."""

    def __init__(self, engine: Engine, host: str, port: int, *, console: bool = True, metrics: bool = True,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.engine = engine
        self.host = host
        self.port = port
        self.console = console
        self.metrics = metrics
        self.ssl_context = ssl_context
        self.require_password = engine.settings.auth_method != "trust"
        self.sampler = StatsSampler(engine)
        self._runner: web.AppRunner | None = None
        self._sampling: asyncio.Task[None] | None = None
        self._verified: dict[tuple[str, bytes], str] = {}  # (user, sha256(password)) -> verifier
        self._watched_until = 0.0  # loop time until which the stats are sampled
        self._watched = asyncio.Event()
        self._sockets: set[web.WebSocketResponse] = set()  # open push queries, closed at shutdown

    # --- life cycle ------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._same_origin_middleware, self._auth_middleware]
                              if self.console else [])
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
        if self.console:
            app.router.add_get("/", self._index)
            app.router.add_get("/static/{name}", self._static)
            app.router.add_get("/api/objects", self._objects)
            app.router.add_get("/api/stats", self._stats)
            app.router.add_post("/api/sql", self._sql)
            app.router.add_get("/api/push", self._push)
            app.router.add_get("/api/dead-letters", self._dead_letters)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context,
                           shutdown_timeout=SHUTDOWN_SECONDS)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            self._runner = None
            raise ConfigurationError(
                f"cannot listen on {self.host}:{self.port} for the web console and /metrics: {e.strerror}. "
                "Choose another port with --console-port N (0 = any free port), or turn the listener "
                "off with --no-console --no-metrics.") from e
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]
        if self.console:
            self._sampling = asyncio.create_task(self._sample_forever(), name="console-stats")
        url = f"{'https' if self.ssl_context is not None else 'http'}://{self.host}:{self.port}"
        log.info("%s%s", f"web console on {url}/" if self.console else "web console off",
                 f", metrics on {url}/metrics" if self.metrics else ", metrics off")

    async def close(self) -> None:
        if self._sampling is not None:
            self._sampling.cancel()
            with contextlib.suppress(BaseException):
                await self._sampling
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=1001, message=b"server shutting down"), SHUTDOWN_SECONDS)
        if self._runner is not None:
            await self._runner.cleanup()

    async def _sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if loop.time() > self._watched_until:
                self._watched.clear()
                await self._watched.wait()  # nobody is looking: no work for an idle console
            try:
                await asyncio.to_thread(self.sampler.sample)
            except Exception:  # noqa: BLE001 - e.g. a relation dropped mid-sample: next second will do
                log.debug("console stats sample failed", exc_info=True)
            await asyncio.sleep(SAMPLE_SECONDS)

    # --- authentication --------------------------------------------------------------------

    def _check_password(self, user: str, password: str) -> bool:
        info = self.engine.login_info(user)
        if info is None or not info.can_login:
            return False
        key = (user, hashlib.sha256(password.encode()).digest())
        if info.scram_verifier is not None:
            if self._verified.get(key) == info.scram_verifier:
                return True  # PBKDF2 once per password, not on every poll
            if scram_password_matches(password, info.scram_verifier):
                self._verified[key] = info.scram_verifier
                return True
            return False
        return info.md5_hash is not None and md5_password_matches(password, user, info.md5_hash)

    @web.middleware
    async def _same_origin_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Other web sites must not drive the console through the user's browser: a page elsewhere
        could POST a form (no CORS preflight) or open a WebSocket (CORS does not apply), and a
        rebound DNS name could make the browser treat 127.0.0.1 as that site."""
        if request.path == "/metrics":
            return await handler(request)
        host = request.host
        if not self.require_password and not is_loopback_host(urlsplit(f"//{host}").hostname or ""):
            return web.Response(status=403, text=f"the console answers on a loopback address, not {host}")
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != host:
            return web.Response(status=403, text="cross-origin requests are refused")
        if request.method == "POST" and request.content_type != "application/json":
            return web.Response(status=415, text="send JSON (Content-Type: application/json)")
        return await handler(request)

    def _user(self, request: web.Request) -> str:
        return str(request.get("user", BOOTSTRAP_ROLE))

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self.require_password or request.path == "/metrics":
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user, password = "", ""
            valid: bool = bool(user) and await asyncio.to_thread(self._check_password, user, password)
            if valid:
                request["user"] = user
                return await handler(request)
        return web.Response(status=401, text="password authentication required",
                            headers={"WWW-Authenticate": 'Basic realm="StreamDB console", charset="UTF-8"'})

    # --- routes ----------------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            from streamdb.metrics import exposition
        except ImportError:
            raise web.HTTPNotFound(text="metrics are not available in this build") from None
        body, content_type = exposition(self.engine)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _index(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _static(self, request: web.Request) -> web.Response:
        return self._file(request.match_info["name"])

    def _file(self, name: str) -> web.Response:
        suffix = name[name.rfind("."):] if "." in name else ""
        if "/" in name or suffix not in _CONTENT_TYPES:
            raise web.HTTPNotFound()
        resource = resources.files("streamdb.console").joinpath(_STATIC, name)
        if not resource.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=resource.read_bytes(), content_type=_CONTENT_TYPES[suffix], charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    async def _objects(self, request: web.Request) -> web.Response:
        catalog = self.engine.catalog.snapshot()
        out = []
        for rel in sorted(catalog.relations.values(), key=lambda r: r.name):
            if rel.kind not in SHOWN_KINDS:
                continue
            extra = dict(rel.extra)
            out.append({"name": rel.name, "kind": rel.shown_kind, "external": extra.get("external"),
                        "dead_letters": extra.get("dead_letters"), "query": extra.get("query_sql"),
                        "columns": [{"name": c.name, "type": c.type.name} for c in rel.columns]})
        return web.json_response({"user": self._user(request), "objects": out})

    async def _stats(self, request: web.Request) -> web.Response:
        self._watched_until = asyncio.get_running_loop().time() + WATCHED_SECONDS
        if not self._watched.is_set():
            self._watched.set()
            await asyncio.to_thread(self.sampler.sample)  # the first poll gets current figures at once
        return web.json_response(self.sampler.snapshot())

    def _session(self, request: web.Request) -> Session:
        return self.engine.new_session(self._user(request), self.engine.settings.database,
                                       {"application_name": "streamdb console"})

    async def _run(self, session: Session, sql: str) -> list[dict[str, Any]]:
        """Every statement of `sql` in order; raises StreamDBError (its position made absolute)."""
        results = []
        for statement in session.parse(sql):
            try:
                result = await session.execute(statement)
            except StreamDBError as e:
                e.position = None if e.position is None else e.position + statement.offset
                raise
            if result.copy_in is not None:
                session.fail_copy_in(result.copy_in, "the console does not send COPY data")
                raise StreamDBError("COPY FROM STDIN is not available in the console: use INSERT",
                                    sqlstate="0A000")
            if result.stream is not None:
                aclose = getattr(result.stream, "aclose", None)
                if aclose is not None:
                    await aclose()
                raise StreamDBError("a push query (EMIT CHANGES) runs in the live results pane",
                                    sqlstate="0A000", hint="The editor sends it over /api/push.")
            rows = result.rows
            columns = _columns(result)
            if result.copy_out is not None:
                rows = [(line.decode(errors="replace").rstrip("\n"),) for line in result.copy_out]
                columns = [{"name": "copy", "type": "text"}]
            item: dict[str, Any] = {"command": result.command_tag,
                                    "notices": [n.message for n in result.notices]}
            if result.columns is not None or result.copy_out is not None:
                rows = rows or []
                item["columns"] = columns
                item["rows"] = [[cell(v) for v in row] for row in rows[:MAX_RESULT_ROWS]]
                item["truncated"] = len(rows) > MAX_RESULT_ROWS
            results.append(item)
        return results

    async def _sql(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            sql = body["sql"]
            if not isinstance(sql, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'expected a JSON body {"sql": "..."}', "sqlstate": "08P01"},
                                     status=400)
        try:
            session = self._session(request)
        except StreamDBError as e:
            return web.json_response(_error_json(e), status=403)
        try:
            return web.json_response({"results": await self._run(session, sql)})
        except StreamDBError as e:
            return web.json_response(_error_json(e))
        except Exception as e:  # noqa: BLE001 - an engine bug: shown as XX000, like the wire does
            log.exception("console statement failed")
            return web.json_response({"error": f"internal error: {e}", "sqlstate": "XX000"})
        finally:
            session.close()

    async def _push(self, request: web.Request) -> web.WebSocketResponse:
        """One push query per socket: {"sql"} in; {"columns"}, then {"rows"} per batch out; closing the
        socket cancels the query."""
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        first = await ws.receive()
        if first.type != WSMsgType.TEXT:
            await ws.close()
            return ws
        try:
            sql = json.loads(first.data)["sql"]
            session = self._session(request)
        except (ValueError, KeyError, TypeError):
            await ws.send_json({"error": 'expected {"sql": "..."}', "sqlstate": "08P01"})
            await ws.close()
            return ws
        except StreamDBError as e:
            await ws.send_json(_error_json(e))
            await ws.close()
            return ws
        pump = asyncio.create_task(self._pump(ws, session, sql))
        closed = asyncio.create_task(self._wait_closed(ws))
        self._sockets.add(ws)
        try:
            await asyncio.wait({pump, closed}, return_when=asyncio.FIRST_COMPLETED)
            if pump.done() and not pump.cancelled() and pump.exception() is not None:
                log.error("console push query failed", exc_info=pump.exception())
                await ws.send_json({"error": f"internal error: {pump.exception()}", "sqlstate": "XX000"})
        finally:
            for task in (pump, closed):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            self._sockets.discard(ws)
            session.close()  # cancels the push query (unsubscribes)
            await ws.close()
        return ws

    async def _wait_closed(self, ws: web.WebSocketResponse) -> None:
        async for _msg in ws:
            pass  # the browser sends nothing more; the loop ends when the socket closes

    async def _pump(self, ws: web.WebSocketResponse, session: Session, sql: str) -> None:
        try:
            statements = session.parse(sql) if sql.strip() else []
        except StreamDBError as e:
            await ws.send_json(_error_json(e))
            return
        if len(statements) != 1:
            await ws.send_json({"error": "send exactly one statement", "sqlstate": "42601"})
            return
        statement = statements[0]
        try:
            result = await session.execute(statement)
        except StreamDBError as e:
            await ws.send_json(_error_json(e, statement.offset))
            return
        if result.stream is None:  # not a push query: its result, once
            rows = result.rows or []
            await ws.send_json({"columns": _columns(result), "command": result.command_tag})
            await ws.send_json({"rows": [[cell(v) for v in row] for row in rows[:MAX_RESULT_ROWS]], "end": True})
            return
        await ws.send_json({"columns": _columns(result), "command": result.command_tag})
        iterator = result.stream
        try:
            async for batch in iterator:
                await ws.send_json({"rows": [[cell(v) for v in row] for row in batch]})
        except StreamDBError as e:
            await ws.send_json(_error_json(e))
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _dead_letters(self, request: web.Request) -> web.Response:
        name = request.query.get("source", "")
        rel = self.engine.catalog.snapshot().get(name)
        dead = dict(rel.extra).get("dead_letters") if rel is not None else None
        if rel is None or not dead:
            return web.json_response({"error": f'"{name}" is not an external stream with a dead-letter stream',
                                      "sqlstate": "42P01"}, status=404)
        try:
            session = self._session(request)
        except StreamDBError as e:
            return web.json_response(_error_json(e), status=403)
        quoted = '"' + str(dead).replace('"', '""') + '"'
        try:
            results = await self._run(session, f"SELECT * FROM {quoted} ORDER BY rowtime DESC LIMIT 200")
            return web.json_response({"source": rel.name, "dead_letters": dead, **results[0]})
        except StreamDBError as e:
            return web.json_response(_error_json(e))
        finally:
            session.close()
