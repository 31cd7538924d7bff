"""Assignment of values to typed columns, with Postgres's rules and error codes."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from typing import Any

from sqlglot import exp

from streamdb import types as T
from streamdb import values
from streamdb.errors import (
    DatatypeMismatch,
    FeatureNotSupported,
    NumericValueOutOfRange,
    StringDataRightTruncation,
)

_INT_RANGE = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
# The same by oid (integer types take no modifier), for coerce's shortcut.
_INT_BOUNDS = {T.SMALLINT.oid: _INT_RANGE["smallint"], T.INTEGER.oid: _INT_RANGE["integer"],
               T.BIGINT.oid: _INT_RANGE["bigint"]}


class NotALiteral(Exception):
    """The expression needs evaluation by the query engine."""


def literal_value(node: exp.Expr) -> Any:
    """Python value of a literal expression; raises NotALiteral otherwise.

    Strings stay strings (Postgres's 'unknown' literals) so assignment parses them
    in the target type; numbers keep their exact text as int or Decimal.
    """
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            return decimal.Decimal(text)
    if isinstance(node, exp.Neg):
        v = literal_value(node.this)
        if isinstance(v, decimal.Decimal):
            return v.copy_negate()  # exact: unary minus would round to the context's 28 digits
        if isinstance(v, int) and not isinstance(v, bool):
            return -v
        raise NotALiteral
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Cast) and isinstance(node.this, (exp.Literal, exp.Null)):
        # Also how bound parameters arrive: CAST('text' AS type), CAST(42 AS int), CAST(NULL AS type).
        target = T.type_from_name(node.to.sql(dialect="postgres"))
        if target is None:
            raise NotALiteral
        if isinstance(node.this, exp.Null):
            return None
        if node.this.is_string:
            return TypedValue(values.parse_text(node.this.this, target), target)
        if T.is_integer(target) and node.this.is_int:
            return TypedValue(int(node.this.this), target)
        raise NotALiteral
    raise NotALiteral


class TypedValue:
    """A value whose SQL type is known (a cast literal or a bound parameter)."""

    __slots__ = ("value", "type")

    def __init__(self, value: Any, type_: T.SqlType) -> None:
        self.value = value
        self.type = type_


def _type_name_of(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "double precision"
    if isinstance(v, decimal.Decimal):
        return "numeric"
    if isinstance(v, dt.datetime):
        return "timestamp with time zone" if v.tzinfo else "timestamp without time zone"
    if isinstance(v, dt.date):
        return "date"
    if isinstance(v, dt.timedelta):
        return "interval"
    if isinstance(v, bytes):
        return "bytea"
    return "text"


def coerce(value: Any, target: T.SqlType, column: str) -> Any:
    """Convert a value for assignment to a column of type `target`."""
    if type(value) is int:  # the common case (INSERT ... VALUES, drivers' parameters): as it is
        bounds = _INT_BOUNDS.get(target.oid)
        if bounds is not None and bounds[0] <= value <= bounds[1]:
            return value
    elif type(value) is str and target.oid == T.TEXT.oid and "\x00" not in value:
        return value
    converted = _convert(value, target, column)
    if isinstance(converted, decimal.Decimal):
        converted = values.apply_numeric_typmod(converted, target)
        if not converted.is_finite():
            # Stored numerics are Arrow decimals, which have no NaN or infinity: refuse rather
            # than store NULL in its place.
            raise FeatureNotSupported(
                f"numeric value {values.format_text(converted, T.NUMERIC)} cannot be stored in column \"{column}\"",
                hint="StreamDB stores numeric as a 38-digit decimal, without NaN and infinity; "
                "double precision holds them.")
    limit = target.max_length
    if limit is not None and isinstance(converted, str) and len(converted) > limit:
        # Postgres assignment: trailing spaces past the limit are cut, anything else is refused.
        if converted[limit:].strip(" "):
            raise StringDataRightTruncation(f"value too long for type character varying({limit})")
        converted = converted[:limit]
    return converted


def _convert(value: Any, target: T.SqlType, column: str) -> Any:
    if isinstance(value, TypedValue):
        value = value.value
    if value is None:
        return None
    name = target.name
    if isinstance(value, str):
        return values.parse_text(value, target)
    if isinstance(value, (list, tuple)) and isinstance(target, T.ArraySqlType) and target.element is not None:
        element = target.element  # an array's elements, each as its element type takes it
        return [_convert(x, element, column) for x in value]
    if isinstance(value, bool):
        if target is T.BOOLEAN:
            return value
        if T.is_textual(target):
            return "true" if value else "false"
        raise _mismatch(column, target, value)
    if isinstance(value, (int, float, decimal.Decimal)):
        if T.is_integer(target):
            if isinstance(value, (float, decimal.Decimal)):
                if value != value or value in (float("inf"), float("-inf")):
                    raise NumericValueOutOfRange(f"{name} out of range")
                value = int(decimal.Decimal(value).to_integral_value(rounding=decimal.ROUND_HALF_UP))
            lo, hi = _INT_RANGE[name]
            if not lo <= value <= hi:
                raise NumericValueOutOfRange(f"{name} out of range")
            return int(value)
        if target in (T.REAL, T.DOUBLE):
            return float(value)
        if target == T.NUMERIC:
            return decimal.Decimal(value) if not isinstance(value, float) else decimal.Decimal(repr(value))
        if T.is_textual(target):
            return str(value)
        if target in (T.JSON, T.JSONB):
            return json.dumps(value if not isinstance(value, decimal.Decimal) else float(value))
        if target in (T.TIMESTAMPTZ, T.TIMESTAMP) and isinstance(value, int):
            # Epoch milliseconds, as ksqlDB accepts for ROWTIME and event-time columns.
            try:
                ts = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
            except (ValueError, OverflowError, OSError):
                raise values.DatetimeFieldOverflow("timestamp out of range") from None
            return ts if target is T.TIMESTAMPTZ else ts.replace(tzinfo=None)
        raise _mismatch(column, target, value)
    if isinstance(value, dt.datetime):
        if target is T.TIMESTAMPTZ:
            return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        if target is T.TIMESTAMP:
            return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        if target is T.DATE:
            return value.date()
    elif isinstance(value, dt.date) and target in (T.DATE, T.TIMESTAMP, T.TIMESTAMPTZ):
        if target is T.DATE:
            return value
        ts = dt.datetime(value.year, value.month, value.day)
        return ts.replace(tzinfo=dt.UTC) if target is T.TIMESTAMPTZ else ts
    elif isinstance(value, dt.time) and target is T.TIME:
        return value
    elif isinstance(value, dt.timedelta) and target is T.INTERVAL:
        return value
    elif isinstance(value, bytes) and target is T.BYTEA:
        return value
    elif isinstance(value, uuid.UUID) and target is T.UUID:
        return str(value)
    elif isinstance(value, (dict, list)) and target in (T.JSON, T.JSONB, T.TEXT):
        return json.dumps(value)
    if T.is_textual(target):
        return values.format_text(value, T.from_python(value) if hasattr(T, "from_python") else T.TEXT)
    raise _mismatch(column, target, value)


def _mismatch(column: str, target: T.SqlType, value: Any) -> DatatypeMismatch:
    return DatatypeMismatch(
        f'column "{column}" is of type {target.name} but expression is of type {_type_name_of(value)}',
        hint="You will need to rewrite or cast the expression.",
    )
