"""The contract between the wire layer and the engine.

The wire layer (streamdb/wire) owns sockets and message formats. It drives a
Session through this interface and never looks inside plans or storage. The
engine never sees bytes of the protocol: values cross this boundary as plain
Python objects (see streamdb/types.py for the representation of each type).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from streamdb.errors import Notice
from streamdb.types import SqlType

# Parsing and planning cost milliseconds per few hundred characters (sqlglot is pure Python): a
# statement text this long or longer is parsed and planned on a worker thread, so one client's
# large statement does not hold up every other session's messages on the event loop.
OFF_LOOP_CHARS = 512


@dataclass(frozen=True, slots=True)
class LoginInfo:
    """What the wire layer needs to authenticate a role (never the password itself)."""

    user: str
    can_login: bool
    superuser: bool
    scram_verifier: str | None  # None: no password set
    md5_hash: str | None  # 'md5...' or None


@dataclass(frozen=True, slots=True)
class Column:
    """One result column, as a RowDescription field describes it."""

    name: str
    type: SqlType
    table_oid: int = 0
    column_number: int = 0
    type_modifier: int = -1


@dataclass(frozen=True, slots=True)
class Statement:
    """One parsed statement of a query string. `sql` is its own text; `ast` is opaque to the wire."""

    sql: str
    ast: Any
    offset: int = 0  # where `sql` starts in the original query string (for error positions)
    # Values for the $n of `ast` when it is the template of literal SQL (sql/literals.py).
    params: tuple[Any, ...] | None = None
    # NOTICEs from parsing it (identifiers truncated to 63 bytes), sent when it runs.
    notices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedStatement:
    """The answer to Parse (+ Describe): what parameters it takes and what rows it returns."""

    statement: Statement | None  # None for the empty query
    param_types: tuple[SqlType, ...]
    columns: tuple[Column, ...] | None  # None => the statement returns no rows (NoData)


@dataclass(frozen=True, slots=True)
class CopyInRequest:
    """The server wants COPY data from the client (COPY ... FROM STDIN)."""

    columns: int  # number of columns, for CopyInResponse
    format: str  # 'text' | 'csv' | 'binary'
    token: Any  # opaque; passed back to Session.finish_copy_in


@dataclass
class ExecutionResult:
    """The outcome of one statement."""

    command_tag: str  # e.g. 'SELECT 3', 'INSERT 0 5', 'CREATE STREAM', 'SET'
    columns: tuple[Column, ...] | None = None  # RowDescription (None => no rows)
    rows: list[tuple[Any, ...]] | None = None
    notices: list[Notice] = field(default_factory=list)
    # ParameterStatus messages to send after this statement (e.g. SET application_name).
    parameter_status: dict[str, str] = field(default_factory=dict)
    # Set when the statement is COPY FROM STDIN: the wire sends CopyInResponse, collects
    # CopyData until CopyDone and calls Session.finish_copy_in(request, data).
    copy_in: CopyInRequest | None = None
    # Set for COPY ... TO STDOUT: the encoded lines to send as CopyData (already formatted).
    copy_out: list[bytes] | None = None
    copy_out_format: str = "text"
    # Push queries: batches of rows as they arrive, until cancelled.
    stream: AsyncIterator[list[tuple[Any, ...]]] | None = None
    # With `stream`: the rows are COPY lines (one bytes value each), sent as CopyData after a
    # CopyOutResponse (COPY (... EMIT CHANGES) TO STDOUT).
    copy_stream: bool = False


class Session(Protocol):
    """One client connection's view of the engine."""

    @property
    def transaction_status(self) -> str:
        """'I' idle, 'T' in a transaction block, 'E' in a failed transaction block."""
        ...

    @property
    def idle_in_transaction_timeout(self) -> float | None:
        """Seconds the session may wait for a command inside a transaction block before the
        connection is terminated (FATAL 25P03); None: no limit."""
        ...

    def startup_parameters(self) -> dict[str, str]:
        """ParameterStatus values to send after authentication."""
        ...

    def parse(self, sql: str) -> list[Statement]:
        """Split and parse a query string. Raises StreamDBError (42601 with position)."""
        ...

    def prepare(self, sql: str, param_types: list[SqlType | None]) -> PreparedStatement:
        """Parse and describe one statement for the extended protocol. Pure: no Spark, no disk.
        `param_types` holds the client's declared types (None = let the server infer)."""
        ...

    async def execute(self, statement: Statement, params: list[Any] | None = None) -> ExecutionResult:
        """Run one statement with decoded parameter values. Raises StreamDBError."""
        ...

    async def finish_copy_in(self, request: CopyInRequest, data: bytes) -> ExecutionResult:
        ...

    def fail_copy_in(self, request: CopyInRequest, message: str) -> None:
        """CopyFail from the client: nothing of the COPY is kept."""
        ...

    def cancel(self) -> None:
        """CancelRequest for this session: stop the running statement (57014)."""
        ...

    def close(self) -> None:
        ...


class Engine(Protocol):
    def new_session(self, user: str, database: str, options: dict[str, str]) -> Session:
        """Raises StreamDBError (e.g. 3D000 unknown database, 28000 unknown role or one that
        cannot log in) to refuse the connection."""
        ...

    def login_info(self, user: str) -> LoginInfo | None:
        """The role's login data for authentication; None when there is no such role."""
        ...
