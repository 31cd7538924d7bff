"""COPY ... FROM STDIN (text and CSV) and COPY ... TO STDOUT."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa

from streamdb import types as T
from streamdb import values
from streamdb.catalog import RelationDef
from streamdb.errors import DataException, UndefinedTable
from streamdb.planner.plans import CopyFromPlan, CopyToPlan
from streamdb.runtime import query, writer
from streamdb.runtime.api import CopyInRequest, ExecutionResult
from streamdb.runtime.statements.context import ExecContext
from streamdb.runtime.watermarks import delay_of
from streamdb.storage.base import Append

# A COPY payload above this many bytes is parsed off the event loop.
OFF_LOOP_BYTES = 64 * 1024

_TEXT_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "\\": "\\"}


async def execute_from(plan: CopyFromPlan, ctx: ExecContext) -> ExecutionResult:
    return ExecutionResult("COPY", copy_in=CopyInRequest(len(plan.target_columns), plan.format, plan))


def _unescape_text(field: str) -> str:
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        ch = field[i]
        if ch == "\\" and i + 1 < len(field):
            nxt = field[i + 1]
            out.append(_TEXT_ESCAPES.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_copy_data(plan: CopyFromPlan, data: bytes) -> list[tuple[Any, ...]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataException(f"invalid byte sequence for encoding \"UTF8\": {e.reason}", sqlstate="22021") from None
    rows: list[tuple[Any, ...]] = []
    n = len(plan.target_columns)
    if plan.format == "csv":
        reader = csv.reader(io.StringIO(text), delimiter=plan.delimiter, quotechar=plan.quote,
                            escapechar=None if plan.escape == plan.quote else plan.escape,
                            doublequote=plan.escape == plan.quote, strict=True)
        try:
            records = list(reader)
        except csv.Error as e:  # Postgres: 22P04 bad_copy_file_format
            message = "unterminated CSV quoted field" if "unexpected end of data" in str(e) else f"invalid CSV data: {e}"
            raise DataException(f"{message} for COPY, line {reader.line_num}", sqlstate="22P04") from None
        if plan.header and records:
            records = records[1:]
        for lineno, fields in enumerate(records, start=2 if plan.header else 1):
            if not fields or fields == ["\\."]:
                continue
            if len(fields) != n:
                raise DataException(f"{'missing data' if len(fields) < n else 'extra data after last expected column'}"
                                    f" for COPY, line {lineno}", sqlstate="22P04")
            rows.append(tuple(None if (f == plan.null) else f for f in fields))
        return rows
    lines = text.split("\n")
    if plan.header and lines:
        lines = lines[1:]
    for lineno, line in enumerate(lines, start=2 if plan.header else 1):
        if line.endswith("\r"):
            line = line[:-1]
        if line == "" or line == "\\.":
            continue
        fields = line.split(plan.delimiter)
        if len(fields) != n:
            raise DataException(f"{'missing data' if len(fields) < n else 'extra data after last expected column'}"
                                f" for COPY, line {lineno}", sqlstate="22P04")
        rows.append(tuple(None if f == plan.null else _unescape_text(f) for f in fields))
    return rows


async def finish_copy_in(request: CopyInRequest, data: bytes, ctx: ExecContext) -> ExecutionResult:
    plan: CopyFromPlan = request.token
    rel = ctx.engine.catalog.snapshot().by_id(plan.relation_id)
    if rel is None:
        raise UndefinedTable(f'relation "{plan.relation_name}" does not exist')
    # A large payload is parsed and encoded on a worker thread (pyarrow parses 10,000 rows in
    # ~3 ms), in one hop: COPYs from one client come one after the other.
    fast = _fast_copy(plan, rel, data) if len(data) < OFF_LOOP_BYTES else await asyncio.to_thread(
        _fast_copy, plan, rel, data)
    if fast is not None:
        n, appends = fast
        await writer.commit_appends(ctx.engine, rel, appends)
        return ExecutionResult(f"COPY {n}")
    if len(data) < OFF_LOOP_BYTES:
        rows = parse_copy_data(plan, data)
    else:
        rows = await asyncio.to_thread(parse_copy_data, plan, data)
    stored = await writer.insert_rows(ctx.engine, rel, plan.target_columns, rows, "rowtime" in plan.target_columns)
    return ExecutionResult(f"COPY {stored.rows}", notices=writer.late_notices(rel, stored))


def _fast_copy(plan: CopyFromPlan, rel: RelationDef, data: bytes) -> tuple[int, list[Append]] | None:
    """The rows of a COPY payload the fast path takes, as the stream's log batches; None if it
    does not take them."""
    table = fast_copy_table(plan, rel, data)
    if table is None:
        return None
    return table.num_rows, writer.arrow_appends(rel, table)


_FAST_TYPES = (T.SMALLINT, T.INTEGER, T.BIGINT, T.TEXT, T.VARCHAR, T.BOOLEAN, T.TIMESTAMPTZ)


def fast_copy_table(plan: CopyFromPlan, rel: RelationDef, data: bytes) -> pa.Table | None:
    """COPY ... FROM STDIN (text or CSV) into a plain typed stream, parsed by pyarrow's CSV
    reader straight into Arrow columns (the log's own format), when nothing in the data or the
    stream needs more than that: integer, text, boolean and timestamptz columns, every column
    given in order, in text format no escapes but \\N for NULL, no record key, event-time column,
    watermark or NOT NULL, and no NUL byte. Anything else (or any parse error, for its Postgres-style message)
    takes the row-by-row path."""
    if (plan.format not in ("text", "csv") or rel.kind != "stream" or rel.schemaless
            or rel.key_columns or delay_of(rel) is not None or rel.timestamp_column is not None
            or list(plan.target_columns) != [c.name for c in rel.columns]
            or any(c.type not in _FAST_TYPES or c.type.max_length is not None or not c.nullable
                   for c in rel.columns)
            or len(plan.delimiter) != 1 or b"\r" in data
            or b"\x00" in data):  # Postgres refuses NUL in text (22021): the row-by-row path says so
        return None
    csv_format = plan.format == "csv"
    if not csv_format and (plan.header or plan.null != "\\N" or b"\\" in data.replace(b"\\N", b"")):
        return None
    if csv_format and (len(plan.quote) != 1 or len(plan.escape) != 1
                       or data.count(plan.quote.encode()) % 2):  # pyarrow takes an unterminated quote
        return None
    body = data[:-3] if data.endswith(b"\\.\n") else data
    if not body.strip():
        return None
    import pyarrow.csv as pacsv

    names = [c.name for c in rel.columns]
    if csv_format:
        # Postgres CSV: NULL is an unquoted empty field (or the NULL string), "" an empty string.
        parse = pacsv.ParseOptions(delimiter=plan.delimiter, quote_char=plan.quote,
                                   double_quote=plan.escape == plan.quote,
                                   escape_char=False if plan.escape == plan.quote else plan.escape,
                                   newlines_in_values=True)
    else:
        parse = pacsv.ParseOptions(delimiter=plan.delimiter, quote_char=False, escape_char=False,
                                   newlines_in_values=False)
    try:
        table = pacsv.read_csv(
            io.BytesIO(body),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False, skip_rows=1 if plan.header else 0),
            parse_options=parse,
            convert_options=pacsv.ConvertOptions(column_types={c.name: c.type.arrow() for c in rel.columns},
                                                 null_values=[plan.null], strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False,
                                                 true_values=["true", "t"], false_values=["false", "f"]))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # the row-by-row path reports it as Postgres would
    return table


def _escape_text(s: str, delimiter: str) -> str:
    return (s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
            .replace(delimiter, "\\" + delimiter))


def _format_lines(plan: CopyToPlan, cols: tuple, rows: list[tuple[Any, ...]]) -> list[bytes]:
    """One COPY line per row (a CSV field may itself hold newlines, so rows are written one by one)."""
    out = []
    for r in rows:
        if plan.format == "csv":
            buf = io.StringIO()
            csv.writer(buf, delimiter=plan.delimiter, lineterminator="\n").writerow(
                [plan.null if v is None else values.format_text(v, c.type) for v, c in zip(r, cols, strict=True)])
            out.append(buf.getvalue().encode())
        else:
            fields = [plan.null if v is None else _escape_text(values.format_text(v, c.type), plan.delimiter)
                      for v, c in zip(r, cols, strict=True)]
            out.append((plan.delimiter.join(fields) + "\n").encode())
    return out


async def _execute_to_stream(plan: CopyToPlan, ctx: ExecContext) -> ExecutionResult:
    assert plan.subscribe is not None
    views = ctx.engine.views
    sub = await views.subscribe(plan.subscribe, ctx.session.user)
    cols = plan.subscribe.columns

    async def lines() -> AsyncIterator[list[tuple[Any, ...]]]:
        try:
            async for batch in sub.batches():
                yield [(line,) for line in _format_lines(plan, cols, batch)]
        finally:
            views.unsubscribe(sub)

    return ExecutionResult("COPY 0", columns=cols, stream=lines(), copy_stream=True, copy_out_format=plan.format)


async def execute_to(plan: CopyToPlan, ctx: ExecContext) -> ExecutionResult:
    if plan.subscribe is not None:
        return await _execute_to_stream(plan, ctx)
    rows = await query.run(ctx.engine, plan.query, ctx.info)
    cols = plan.query.columns
    lines = _format_lines(plan, cols, rows)
    if plan.header:
        header = plan.delimiter.join(c.name for c in cols)
        lines.insert(0, (header + "\n").encode())
    return ExecutionResult(f"COPY {len(rows)}", columns=cols, copy_out=lines, copy_out_format=plan.format)
