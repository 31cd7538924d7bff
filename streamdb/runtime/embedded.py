"""The embedded query engine (DuckDB over Arrow) used for small ad hoc reads and for describing.

Each thread gets its own in-memory connection, set up for Postgres semantics
(integer division, NULL ordering, UTC). Inputs are registered as Arrow tables for
one query and unregistered afterwards.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa
from sqlglot import exp

from streamdb import errors, udf
from streamdb import types as T
from streamdb.planner import pg_functions

_local = threading.local()
# Connections are opened only once this is set: the engine clears it while Spark's JVM is
# being launched, because starting DuckDB's threads during that launch breaks it.
launch_gate = threading.Event()
launch_gate.set()
GATE_TIMEOUT_SECONDS = 60


def _setup(con: duckdb.DuckDBPyConnection) -> None:
    con.sql("SET integer_division = true")
    con.sql("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    try:
        con.sql("SET TimeZone = 'UTC'")
    except duckdb.Error:
        pass  # without ICU, timestamptz math is UTC anyway
    from streamdb.runtime.duckdb_functions import install_duckdb_functions

    install_duckdb_functions(con)


def connection() -> duckdb.DuckDBPyConnection:
    con = getattr(_local, "con", None)
    if con is None:
        launch_gate.wait(GATE_TIMEOUT_SECONDS)
        # No file system or network from SQL: `SELECT * FROM read_csv('/etc/passwd')` or
        # read_text() would read the server's files for any client (registered Arrow inputs and
        # the built-in extensions still work).
        con = duckdb.connect(":memory:", config={"enable_external_access": False})
        _setup(con)
        interrupted = threading.Event()
        _install_pg_sleep(con, interrupted)
        _local.con = con
        _local.interrupted = interrupted
    return con


def _install_pg_sleep(con: duckdb.DuckDBPyConnection, interrupted: threading.Event) -> None:
    """pg_sleep(seconds) as Postgres has it; it wakes early when its query is interrupted
    (DuckDB's interrupt does not reach into a Python function)."""

    def sleep(seconds: float) -> str:
        if seconds > 0:
            interrupted.wait(seconds)
        return ""  # Postgres returns void, which clients show as an empty value

    con.create_function("sdb_pg_sleep", sleep, ["double"], "varchar", side_effects=True)


class Interruptible:
    """A handle on the embedded query a worker thread runs, so that the event loop can stop it
    (statement timeout, cancel request) instead of letting it run on in the background."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._event: threading.Event | None = None
        self.interrupted = False

    def attach(self, con: duckdb.DuckDBPyConnection) -> None:
        event: threading.Event = _local.interrupted
        with self._lock:
            if self.interrupted:
                raise errors.QueryCanceled("canceling statement due to user request")
            event.clear()
            self._con, self._event = con, event

    def detach(self) -> None:
        with self._lock:
            self._con = self._event = None

    def interrupt(self) -> None:
        with self._lock:
            self.interrupted = True
            if self._con is not None:
                self._con.interrupt()
            if self._event is not None:
                self._event.set()


def _duckdb_type(t: T.SqlType) -> str:
    return exp.DataType.build(t.spelled(), dialect="postgres").sql(dialect="duckdb")


def _sync_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Register the Python UDFs defined since this connection last looked (udf.py)."""
    if getattr(_local, "udf_generation", None) == udf.generation():
        return
    known: set[str] = getattr(_local, "udfs", set())
    for f in udf.defined():
        if f.registered_name in known:
            continue
        # "special": called with NULLs (Postgres's CALLED ON NULL INPUT); STRICT is the callable's.
        call = udf.positional(udf.callable_for(f), udf.call_arity(f))
        params = [_duckdb_type(t) for t in f.arg_types]
        if f.aggregate:  # the group's rows: a list of structs
            params = ["STRUCT(" + ", ".join(f"{udf.rows_field(i)} {t}" for i, t in enumerate(params)) + ")[]"]
        con.create_function(f.registered_name, call, params, _duckdb_type(f.returns),  # type: ignore[call-overload]
                            null_handling="special", exception_handling="default", side_effects=False)
        known.add(f.registered_name)
    _local.udfs = known
    _local.udf_generation = udf.generation()


@contextmanager
def registered(tables: dict[str, pa.Table]) -> Iterator[duckdb.DuckDBPyConnection]:
    con = connection()
    _sync_functions(con)
    for name, table in tables.items():
        con.register(name, table)
    try:
        yield con
    finally:
        for name in tables:
            try:
                con.unregister(name)
            except duckdb.Error:
                pass


def run(sql: str, tables: dict[str, pa.Table], params: list[object] | None = None,
        handle: Interruptible | None = None) -> pa.Table:
    with registered(tables) as con:
        if handle is not None:
            handle.attach(con)
        try:
            return (con.sql(sql, params=params) if params else con.sql(sql)).to_arrow_table()
        except duckdb.Error as e:
            raise translate_error(e) from None
        finally:
            if handle is not None:
                handle.detach()


_COLUMN_NOT_FOUND = re.compile(r'Referenced column "([^"]+)" (?:was )?not found')  # "was": no FROM
# "Values list": how the engine names an in-memory (Arrow) input such as a stream or table.
_TABLE_COLUMN = re.compile(r'(?:Table|Values list) "([^"]+)" does not have a column named "([^"]+)"')
_INTEGER_OVERFLOW = re.compile(r"Overflow in (?:addition|subtraction|multiplication|negation) of (INT16|INT32|INT64)\b")
_PG_INTEGER_NAMES = {"INT16": "smallint", "INT32": "integer", "INT64": "bigint"}
_DATE_OUT_OF_RANGE = re.compile(r"Date out of range: (-?\d+)-(\d+)-(\d+)$")
# RE2's errors for a pattern it cannot compile (Postgres: 2201B invalid_regular_expression).
_REGEX_ERRORS = ("missing )", "missing ]", "unexpected )", "no argument for repetition operator",
                 "missing argument to repetition operator", "invalid repetition size", "bad repetition operator",
                 "invalid nested repetition operator", "invalid escape sequence", "invalid character class",
                 "trailing \\", "invalid perl operator", "invalid named capture group", "pattern too large")
_FUNC = re.compile(r'Scalar Function with name (\w+) does not exist|Function with name (\w+) does not exist')


def translate_error(e: Exception) -> errors.StreamDBError:
    """DuckDB's error classes and messages -> Postgres SQLSTATEs and Postgres-like wording."""
    msg = str(e)
    if "Max expression depth limit" in msg:  # DuckDB's guard for its own stack (Postgres: 54001)
        return errors.StatementTooComplex()
    if pg_functions.ZERO_STEP in msg:  # raised by the rewritten generate_series
        return errors.InvalidParameterValue(pg_functions.ZERO_STEP)
    if isinstance(e, duckdb.PermissionException):  # a file or URL read from SQL (see connection())
        return errors.InsufficientPrivilege("reading files or URLs from a query is not allowed",
                                            hint="Load data with COPY FROM STDIN, INSERT or a source connector.")
    first = msg.split("\n", 1)[0]
    text = first.split(": ", 1)[1] if ": " in first else first
    if isinstance(e, duckdb.BinderException):
        m = _COLUMN_NOT_FOUND.search(msg)
        if m:
            return errors.UndefinedColumn(f'column "{m.group(1)}" does not exist')
        m = _TABLE_COLUMN.search(msg)
        if m:
            return errors.UndefinedColumn(f'column {m.group(1)}.{m.group(2)} does not exist')
        if "No function matches" in msg or "Could not choose a best candidate" in msg:
            return errors.UndefinedFunction(_clean(text), hint="No function matches the given name and "
                                            "argument types. You might need to add explicit type casts.")
        if "must appear in the GROUP BY clause" in msg or "aggregate" in msg.lower() and "group" in msg.lower():
            return errors.GroupingError(_clean(text))
        if "Cannot compare" in msg or "Cannot mix" in msg or "cannot be" in msg.lower():
            return errors.DatatypeMismatch(_clean(text))
        if "Ambiguous reference" in msg:
            return errors.AmbiguousColumn(_clean(text))
        return errors.DatatypeMismatch(_clean(text)) if "type" in msg.lower() else errors.StreamDBError(
            _clean(text), sqlstate="42000")
    if isinstance(e, duckdb.CatalogException):
        m = _FUNC.search(msg)
        if m:
            name = m.group(1) or m.group(2)
            return errors.UndefinedFunction(f"function {name} does not exist")
        if "does not exist" in msg:
            return errors.UndefinedTable(_clean(text))
        return errors.UndefinedObject(_clean(text))
    if isinstance(e, duckdb.ConversionException):
        if (m := _DATE_OUT_OF_RANGE.match(text)) is not None:  # make_date(2020, 13, 1)
            year, month, day = (int(g) for g in m.groups())
            return errors.DatetimeFieldOverflow(f"date field value out of range: {year}-{month:02d}-{day:02d}")
        return errors.InvalidTextRepresentation(_clean(text))
    if isinstance(e, duckdb.OutOfRangeException):
        if "division by zero" in msg.lower():
            return errors.DivisionByZero("division by zero")
        if (m := _INTEGER_OVERFLOW.search(msg)) is not None:  # Postgres names the result type
            return errors.NumericValueOutOfRange(f"{_PG_INTEGER_NAMES[m.group(1)]} out of range")
        return errors.NumericValueOutOfRange(_clean(text))
    if (failed := udf.failure(msg)) is not None:
        return failed
    if isinstance(e, duckdb.InvalidInputException):
        if (raised := errors.from_coded(text)) is not None:  # planner/query.raise_call
            return raised
        if "division by zero" in msg.lower():
            return errors.DivisionByZero("division by zero")
        if text.startswith(_REGEX_ERRORS):  # the regular expression library's words for a bad pattern
            return errors.InvalidRegularExpression(f"invalid regular expression: {_clean(text)}")
        return errors.InvalidParameterValue(_clean(text))
    if isinstance(e, duckdb.ParserException):
        return errors.SyntaxErrorSQL(_clean(text))
    if isinstance(e, duckdb.InterruptException):
        return errors.QueryCanceled("canceling statement due to user request")
    if isinstance(e, duckdb.NotImplementedException):
        return errors.FeatureNotSupported(_clean(text))
    return errors.InternalError(f"internal error: {_clean(text)}")


def _clean(text: str) -> str:
    return text.strip().rstrip("!")
