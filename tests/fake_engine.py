"""A canned Engine/Session implementing streamdb.runtime.api, for wire-protocol tests.

Statements are recognised by their normalised text (lower case, single spaces):
  select 1                      -> one int4 row
  select error                  -> 42703 with position 8 (at execute)
  bad ...                       -> 42601 at parse, position of 'bad' in the query string
  select $1::int4, $2::text     -> echoes its two parameters (any text containing $1 and $2)
  select types                  -> one row with a value of every supported type
  select * from series          -> 10 int8 rows
  select null                   -> one NULL text row
  begin / commit / rollback     -> transaction status T / I
  copy items from stdin         -> COPY in (2 text columns); finish counts the lines
  copy items to stdout          -> COPY out of 3 lines
  notice                        -> a NoticeResponse, tag 'DO'
  set application_name to 'x'   -> ParameterStatus application_name=x
  stream                        -> a push query: one batch every 20 ms until closed
  sleep                         -> waits until cancel() then raises 57014
  crash                         -> a non-StreamDB exception (internal error)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

from streamdb import types as T
from streamdb.errors import (
    InvalidCatalogName,
    Notice,
    QueryCanceled,
    StreamDBError,
    SyntaxErrorSQL,
    UndefinedColumn,
)
from streamdb.runtime.api import (
    Column,
    CopyInRequest,
    ExecutionResult,
    LoginInfo,
    PreparedStatement,
    Statement,
)
from streamdb.types import SqlType

TYPES_COLUMNS: tuple[Column, ...] = (
    Column("b", T.BOOLEAN), Column("i2", T.SMALLINT), Column("i4", T.INTEGER),
    Column("i8", T.BIGINT), Column("f4", T.REAL), Column("f8", T.DOUBLE),
    Column("n", T.NUMERIC), Column("t", T.TEXT), Column("v", T.VARCHAR), Column("nm", T.NAME),
    Column("by", T.BYTEA), Column("d", T.DATE), Column("tm", T.TIME), Column("ts", T.TIMESTAMP),
    Column("tz", T.TIMESTAMPTZ), Column("iv", T.INTERVAL), Column("u", T.UUID),
    Column("j", T.JSON), Column("jb", T.JSONB), Column("o", T.OID),
)
TYPES_ROW: tuple[Any, ...] = (
    True, -7, 123456, 2**40, 1.5, 0.1, Decimal("-12345.6789"), "héllo", "var", "nm",
    b"\x00\x01\xff", dt.date(2024, 1, 2), dt.time(3, 4, 5, 123000),
    dt.datetime(2024, 1, 2, 3, 4, 5, 123000), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    dt.timedelta(days=1, hours=2, minutes=3, seconds=4), uuid.UUID("12345678-1234-5678-1234-567812345678"),
    '{"a": 1}', '{"b": [1, 2]}', 42,
)

STARTUP_PARAMETERS = {
    "server_version": "16.0 (StreamDB)",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "TimeZone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "IntervalStyle": "postgres",
    "is_superuser": "on",
}


def normalize(sql: str) -> str:
    return " ".join(sql.strip().rstrip(";").split()).lower()


class FakeEngine:
    def __init__(self) -> None:
        self.sessions: list[FakeSession] = []
        self.copied: list[bytes] = []
        self.failed_copies: list[str] = []
        self.streams_closed = 0
        self.streams_started = 0
        # Roles for password authentication (tests/test_wire_security.py); absent: no such role.
        self.logins: dict[str, LoginInfo] = {}

    def login_info(self, user: str) -> LoginInfo | None:
        return self.logins.get(user)

    def new_session(self, user: str, database: str, options: dict[str, str]) -> FakeSession:
        if database == "nope":
            raise InvalidCatalogName(f'database "{database}" does not exist')
        session = FakeSession(self, user, database, options)
        self.sessions.append(session)
        return session


class FakeSession:
    def __init__(self, engine: FakeEngine, user: str, database: str, options: dict[str, str]) -> None:
        self.engine = engine
        self.user = user
        self.database = database
        self.options = options
        self.status = "I"
        self.cancels = 0
        self.closed = False
        self._cancelled = asyncio.Event()
        self.executed: list[tuple[str, list[Any] | None]] = []

    @property
    def transaction_status(self) -> str:
        return self.status

    @property
    def idle_in_transaction_timeout(self) -> float | None:
        return None  # the limit itself is tested end to end (tests/test_e2e_limits.py)

    def startup_parameters(self) -> dict[str, str]:
        params = dict(STARTUP_PARAMETERS)
        params["application_name"] = self.options.get("application_name", "")
        params["session_authorization"] = self.user
        return params

    def parse(self, sql: str) -> list[Statement]:
        statements = []
        offset = 0
        for piece in sql.split(";"):
            stripped = piece.strip()
            if stripped:
                start = offset + piece.index(stripped)
                if normalize(stripped).startswith("bad"):
                    raise SyntaxErrorSQL('syntax error at or near "bad"', position=start + 1)
                statements.append(Statement(stripped, normalize(stripped), start))
            offset += len(piece) + 1
        return statements

    def prepare(self, sql: str, param_types: list[SqlType | None]) -> PreparedStatement:
        statements = self.parse(sql)
        if not statements:
            return PreparedStatement(None, (), None)
        statement = statements[0]
        key = statement.ast
        if "$1" in key and "$2" in key:
            return PreparedStatement(statement, (T.INTEGER, T.TEXT), (Column("int4", T.INTEGER), Column("text", T.TEXT)))
        if "$1" in key:
            declared = param_types[0] if param_types and param_types[0] is not None else T.TEXT
            return PreparedStatement(statement, (declared,), (Column("value", declared),))
        return PreparedStatement(statement, (), self._columns(key))

    def _columns(self, key: str) -> tuple[Column, ...] | None:
        if key == "select 1":
            return (Column("?column?", T.INTEGER),)
        if key == "select types":
            return TYPES_COLUMNS
        if key in ("select * from series", "stream"):
            return (Column("n", T.BIGINT),)
        if key == "select null":
            return (Column("x", T.TEXT),)
        if key == "select error":
            return (Column("error", T.TEXT),)
        return None

    async def execute(self, statement: Statement, params: list[Any] | None = None) -> ExecutionResult:
        key = statement.ast
        self.executed.append((key, params))
        if key == "select 1":
            return ExecutionResult("SELECT 1", self._columns(key), [(1,)])
        if key == "select error":
            raise UndefinedColumn('column "error" does not exist', position=8)
        if key == "crash":
            raise RuntimeError("boom")
        if "$1" in key and "$2" in key:
            assert params is not None
            return ExecutionResult("SELECT 1", (Column("int4", T.INTEGER), Column("text", T.TEXT)),
                                   [tuple(params)])
        if "$1" in key:
            assert params is not None
            return ExecutionResult("SELECT 1", None, [tuple(params)])
        if key == "select types":
            return ExecutionResult("SELECT 1", TYPES_COLUMNS, [TYPES_ROW])
        if key == "select * from series":
            return ExecutionResult("SELECT 10", self._columns(key), [(n,) for n in range(10)])
        if key == "select null":
            return ExecutionResult("SELECT 1", self._columns(key), [(None,)])
        if key == "begin":
            self.status = "T"
            return ExecutionResult("BEGIN")
        if key in ("commit", "rollback"):
            self.status = "I"
            return ExecutionResult(key.upper())
        if key == "copy items from stdin":
            return ExecutionResult("COPY", copy_in=CopyInRequest(columns=2, format="text", token="items"))
        if key == "copy items to stdout":
            # columns only size the CopyOutResponse; no RowDescription is sent for COPY.
            return ExecutionResult("COPY 3", columns=(Column("id", T.TEXT), Column("name", T.TEXT)),
                                   copy_out=[b"1\ta\n", b"2\tb\n", b"3\tc\n"])
        if key == "notice":
            return ExecutionResult("DO", notices=[Notice("hello there", hint="be nice")])
        match = re.fullmatch(r"set application_name to '?([^']*)'?", key)
        if match:
            return ExecutionResult("SET", parameter_status={"application_name": match.group(1)})
        if key == "stream":
            return ExecutionResult("SELECT 0", self._columns(key), stream=self._stream())
        if key == "sleep":
            self._cancelled.clear()
            await self._cancelled.wait()
            raise QueryCanceled("canceling statement due to user request")
        raise StreamDBError(f"fake engine cannot run: {statement.sql}", sqlstate="0A000")

    async def _stream(self) -> AsyncIterator[list[tuple[Any, ...]]]:
        self.engine.streams_started += 1
        n = 0
        try:
            while True:
                yield [(n,), (n + 1,)]
                n += 2
                await asyncio.sleep(0.02)
        finally:
            self.engine.streams_closed += 1

    async def finish_copy_in(self, request: CopyInRequest, data: bytes) -> ExecutionResult:
        self.engine.copied.append(data)
        lines = data.count(b"\n")
        return ExecutionResult(f"COPY {lines}")

    def fail_copy_in(self, request: CopyInRequest, message: str) -> None:
        self.engine.failed_copies.append(message)

    def cancel(self) -> None:
        self.cancels += 1
        self._cancelled.set()

    def close(self) -> None:
        self.closed = True
