"""Change batches: how rows travel through the log.

Every relation is a collection of changes (row, weight). A batch is one Arrow
IPC stream: the relation's columns, then `rowtime` (event time), `__weight`
(+1 insert, -1 retraction) and, for tables, `__rowkey` (the row's key in the
table's state). Schemaless streams carry the event as JSON text in `__json`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import pickle
import zoneinfo
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import NumericValueOutOfRange

ROWTIME = "rowtime"
WEIGHT = "__weight"
ROWKEY = "__rowkey"
JSON_VALUE = "__json"

_NUMERIC_STORED_SCALE = 10
_NUMERIC_SCALE = decimal.Decimal(1).scaleb(-_NUMERIC_STORED_SCALE)
_NUMERIC_INTEGER_DIGITS = 28
# Enough digits for a stored numeric's 38: the default context's 28 would round them.
NUMERIC_CONTEXT = decimal.Context(prec=38 + 2)


# Building Arrow types and schemas costs microseconds each; a one-row write (a prepared INSERT,
# an UPDATE by key) encodes one batch, so they are built once: per relation definition (a new
# definition, after ALTER say, is a new object), and the rowtime type once for all.
_ROWTIME_TYPE = pa.timestamp("us", tz="UTC")
_SCHEMAS: dict[int, tuple[RelationDef, pa.Schema]] = {}
_SCHEMAS_KEPT = 1024
_IPC_OPTIONS = pa.ipc.IpcWriteOptions()  # explicit: pyarrow reads an environment variable otherwise


def batch_schema(rel: RelationDef) -> pa.Schema:
    cached = _SCHEMAS.get(id(rel))
    if cached is not None and cached[0] is rel:
        return cached[1]
    schema = _batch_schema(rel)
    if len(_SCHEMAS) >= _SCHEMAS_KEPT:
        _SCHEMAS.clear()
    _SCHEMAS[id(rel)] = (rel, schema)  # keeps rel alive, so its id is not reused meanwhile
    return schema


def _batch_schema(rel: RelationDef) -> pa.Schema:
    fields = []
    if rel.schemaless:
        fields.append(pa.field(JSON_VALUE, pa.string()))
    else:
        fields.extend(pa.field(c.name, c.type.arrow()) for c in rel.columns)
    fields.append(pa.field(ROWTIME, _ROWTIME_TYPE))
    fields.append(pa.field(WEIGHT, pa.int64()))
    if rel.kind != "stream":
        fields.append(pa.field(ROWKEY, pa.binary()))
    return pa.schema(fields)


def _converted(t: T.SqlType) -> bool:
    """Whether to_arrow_value changes values of this type (it returns all others as they are)."""
    if isinstance(t, T.ArraySqlType):
        return t.element is not None and _converted(t.element)
    return t is T.INTERVAL or t == T.NUMERIC or t is T.UUID


def to_arrow_value(v: Any, t: T.SqlType) -> Any:
    """Python value -> something pyarrow accepts for the column's Arrow type. Only the types
    `_converted` names are changed: keep the two in step."""
    if v is None:
        return None
    if isinstance(t, T.ArraySqlType) and t.element is not None and isinstance(v, list | tuple):
        # An array's elements as its element type's (array_agg of numerics at the stored scale).
        return [to_arrow_value(x, t.element) for x in v]
    if t is T.INTERVAL and isinstance(v, dt.timedelta):
        micros = v.days * 86_400_000_000 + v.seconds * 1_000_000 + v.microseconds
        days, rem = divmod(micros, 86_400_000_000)
        return pa.scalar((0, days, rem * 1000), type=pa.month_day_nano_interval()).as_py()
    if t == T.NUMERIC and isinstance(v, decimal.Decimal):
        if not v.is_finite():
            return None
        if t.precision_scale is not None:  # numeric(p, s): stored at scale s, already checked
            return v.quantize(decimal.Decimal(1).scaleb(-t.precision_scale[1]), context=NUMERIC_CONTEXT)
        # Stored as decimal128(38, 10): at most 28 digits before the point. Larger values are the
        # client's error (22003), not an InvalidOperation escaping as an internal error.
        if v.adjusted() >= _NUMERIC_INTEGER_DIGITS:
            raise NumericValueOutOfRange(
                "numeric field overflow",
                detail=f"A stored numeric value must be less than 10^{_NUMERIC_INTEGER_DIGITS} in absolute value.")
        return v.quantize(_NUMERIC_SCALE, context=NUMERIC_CONTEXT)
    if t is T.UUID:
        return str(v)
    return v


def _without_trailing_zeros(v: decimal.Decimal) -> decimal.Decimal:
    normal = v.normalize(context=NUMERIC_CONTEXT)
    # normalize() writes 20 as 2E+1: bring positive exponents back to a plain integer.
    return normal.quantize(decimal.Decimal(1), context=NUMERIC_CONTEXT) if int(normal.as_tuple().exponent) > 0 else normal


def from_arrow_value(v: Any, t: T.SqlType) -> Any:
    """Arrow's Python value -> the server's representation of the type."""
    if v is None:
        return None
    if t is T.INTERVAL and not isinstance(v, dt.timedelta):
        months, days, nanos = v.months, v.days, v.nanoseconds
        return dt.timedelta(days=months * 30 + days, microseconds=nanos // 1000)
    if t == T.NUMERIC and isinstance(v, decimal.Decimal):
        # Unconstrained numeric is stored at scale 10, which loses each value's own scale:
        # show it without trailing zeros (12.25, 20, 0.1). Other scales are the value's own
        # (numeric(p, s) columns, sums of them) and print as they are, as Postgres does.
        if t.typmod < 0 and v.as_tuple().exponent == -_NUMERIC_STORED_SCALE:
            return _without_trailing_zeros(v)
        return v
    return v


def encode_batch(rel: RelationDef, rows: list[tuple[Any, ...]], rowtimes: list[dt.datetime],
                 weights: list[int], rowkeys: list[bytes] | None = None) -> bytes:
    """Rows are in the relation's column order (schemaless: one JSON text each)."""
    schema = batch_schema(rel)
    arrays: list[pa.Array] = []
    if rel.schemaless:
        arrays.append(pa.array([r[0] for r in rows], pa.string()))
    else:
        for i, c in enumerate(rel.columns):
            t = c.type
            if _converted(t):
                values = [to_arrow_value(r[i], t) for r in rows]
            else:
                values = [r[i] for r in rows]  # to_arrow_value gives every value back as it is
            arrays.append(pa.array(values, schema.field(i).type))
    arrays.append(pa.array(rowtimes, _ROWTIME_TYPE))
    arrays.append(pa.array(weights, pa.int64()))
    if rel.kind != "stream":
        arrays.append(pa.array(rowkeys or [b""] * len(rows), pa.binary()))
    return encode_table(pa.Table.from_arrays(arrays, schema=schema))


def encode_table(table: pa.Table) -> bytes:
    """A change batch already in the log's schema (batch_schema), as stored."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_batch(payload: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(payload)) as reader:
        return reader.read_all()


# ---- table state rows -----------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


# The two objects a UTC datetime's tzinfo is in practice (pyarrow gives the zoneinfo one).
_UTC_ZONES = (dt.UTC, zoneinfo.ZoneInfo("UTC"))
_UTC_EPOCHS = tuple(dt.datetime(1970, 1, 1, tzinfo=zone) for zone in _UTC_ZONES)


def encode_view_row(row: tuple[Any, ...], count: int) -> bytes:
    """A materialized view's state: each distinct row with its multiplicity. A UTC datetime (every
    timestamptz, e.g. a window's bounds) is stored as microseconds since the epoch, with a mask
    per time zone object saying which values were: pickling an aware datetime goes through copyreg
    for its time zone each time (~3.8 us for a row with two, ~1.0 as integers; decoding 1.7 -> 0.9)."""
    masks = [0, 0]
    values: list[Any] | None = None
    for i, v in enumerate(row):
        if type(v) is dt.datetime and v.tzinfo is not None:
            for z, zone in enumerate(_UTC_ZONES):
                if v.tzinfo is zone:
                    if values is None:
                        values = list(row)
                    values[i] = (v - _EPOCH) // _MICROSECOND
                    masks[z] |= 1 << i
                    break
    if values is None:
        return pickle.dumps((row, count), protocol=5)
    return pickle.dumps((tuple(values), count, masks[0], masks[1]), protocol=5)


def decode_view_row(data: bytes) -> tuple[tuple[Any, ...], int]:
    stored = pickle.loads(data)
    if len(stored) == 2:  # no UTC datetimes (or a row stored before they were integers)
        return tuple(stored[0]), stored[1]
    row, count, *masks = stored
    values = list(row)
    for epoch, mask in zip(_UTC_EPOCHS, masks, strict=True):
        i = 0
        while mask:
            if mask & 1:
                values[i] = epoch + values[i] * _MICROSECOND  # keeps the epoch's tzinfo object
            mask >>= 1
            i += 1
    return tuple(values), count


def encode_state_row(row: tuple[Any, ...], rowtime: dt.datetime) -> bytes:
    # Internal format, written and read only by this server; pickle keeps exact Python types.
    # The rowtime as microseconds since the epoch: pickling an aware datetime goes through
    # copyreg for its time zone every time, ten times the cost of the int (~9 us against ~1 us,
    # on every row a table write stores; reading it back is ~4 us against ~1).
    return pickle.dumps((row, (rowtime - _EPOCH) // _MICROSECOND), protocol=5)


def decode_state_row(data: bytes) -> tuple[tuple[Any, ...], dt.datetime]:
    row, rowtime = pickle.loads(data)
    if type(rowtime) is int:
        rowtime = _EPOCH + rowtime * _MICROSECOND
    return tuple(row), rowtime  # rows stored before the change keep their datetime


def key_of(values: tuple[Any, ...]) -> bytes:
    """Deterministic bytes for a primary key (values are already coerced to column types)."""
    return b"k" + repr(values).encode()


def json_default(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def dumps_event(event: dict[str, Any]) -> str:
    return json.dumps(event, default=json_default, separators=(",", ":"))


def consolidated(delta: pa.Table, columns: list[str]) -> pa.Table:
    """`delta` (rows with WEIGHT) reduced to `columns` (what a query reads of it) and WEIGHT, equal
    rows' weights summed and rows whose weights cancel left out. So a query over the changes never
    evaluates a row that is not there any more: a row an UPDATE wrote and a later one retracted
    (in one delta, with other rowtimes) still failed its view (generate_series with a zero step)
    after the cause was gone. Unchanged when nothing is retracted or a column cannot be grouped."""
    if delta.num_rows < 2 or WEIGHT not in delta.column_names:
        return delta
    if not pc.any(pc.less(delta.column(WEIGHT), 0)).as_py():
        return delta
    keys = [n for n in columns if n in delta.column_names and n != WEIGHT]
    if any(pa.types.is_nested(delta.schema.field(n).type) for n in keys):
        return delta  # lists and structs cannot be grouped
    if not keys:
        return delta
    schema = pa.schema([delta.schema.field(n) for n in [*keys, WEIGHT]])
    summed = delta.select([*keys, WEIGHT]).group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum")])
    summed = summed.rename_columns([WEIGHT if n == f"{WEIGHT}_sum" else n for n in summed.column_names])
    kept = summed.filter(pc.not_equal(summed.column(WEIGHT), 0))
    return kept.select([*keys, WEIGHT]).cast(schema)
