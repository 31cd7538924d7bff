"""Text formatting and parsing of SQL values, compatible with PostgreSQL's output.

Pure functions over the Python value representation of streamdb/types.py; no protocol
knowledge. Used by the wire layer (text result format, text parameters), and by the
engine for casts to/from text and COPY.

Output follows Postgres defaults: DateStyle 'ISO, MDY', IntervalStyle 'postgres',
extra_float_digits 1 (shortest exact floats), bytea_output 'hex', TimeZone 'UTC'.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import re
import struct
import uuid
from collections.abc import Sequence
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

from streamdb import types as T
from streamdb.errors import (
    CharacterNotInRepertoire,
    InvalidDatetimeFormat,
    InvalidParameterValue,
    InvalidTextRepresentation,
    NumericValueOutOfRange,
)
from streamdb.types import SqlType

__all__ = [
    "DatetimeFieldOverflow",
    "format_text",
    "parse_text",
    "format_float",
    "format_interval",
    "parse_interval",
    "normalize_jsonb",
    "array_type",
    "element_type",
    "array_type_by_oid",
    "format_array",
    "parse_array",
    "apply_numeric_typmod",
]


class DatetimeFieldOverflow(InvalidDatetimeFormat):
    """22008: a well-formed date/time with a field out of range (month 13, 25:00)."""

    sqlstate = "22008"


_INT_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_NAMEDATALEN = 64
_UTC = dt.UTC
_USECS_PER_DAY = 86_400_000_000
# Interval arithmetic for units without a fixed length, as Postgres compares intervals.
_DAYS_PER_MONTH = 30


# --------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------


_ELEMENT_BY_ARRAY_OID: dict[int, SqlType] = {t.array_oid: t for t in T.ALL_TYPES}


def array_type(element: SqlType) -> SqlType:
    """The SQL type of a one-dimensional array of `element` (e.g. text[], oid 1009)."""
    return T.array_of(element)


def element_type(t: SqlType) -> SqlType | None:
    """The element type when `t` is an array type, else None."""
    return _ELEMENT_BY_ARRAY_OID.get(t.oid)


def array_type_by_oid(oid: int) -> SqlType | None:
    """The array type whose pg_type OID is `oid` (1007 -> integer[]), if its element is known."""
    element = _ELEMENT_BY_ARRAY_OID.get(oid)
    return None if element is None else array_type(element)


def format_text(value: Any, t: SqlType) -> str:
    """The Postgres text output of a non-NULL value of type `t`."""
    if value is None:
        raise ValueError("format_text() does not format NULL")
    if isinstance(value, (list, tuple)):
        return format_array(value, element_type(t))
    formatter = _FORMATTERS.get(t.oid)
    if formatter is None:
        return _format_default(value)
    return formatter(value)


def format_array(items: Sequence[Any], element: SqlType | None = None) -> str:
    """Postgres array text: '{1,2,NULL}', '{"a b","x\\"y"}', nested lists as '{{1,2},{3,4}}'."""
    parts = []
    for item in items:
        if item is None:
            parts.append("NULL")
        elif isinstance(item, (list, tuple)):
            parts.append(format_array(item, element))
        else:
            text = format_text(item, element) if element is not None else _format_default(item)
            parts.append(_quote_array_element(text))
    return "{" + ",".join(parts) + "}"


_ARRAY_SPECIAL = frozenset('{},"\\ \t\n\r\v\f')


def _quote_array_element(text: str) -> str:
    if text and text.upper() != "NULL" and not any(c in _ARRAY_SPECIAL for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _format_default(value: Any) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _format_bytea(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, Decimal):
        return _format_numeric(value)
    if isinstance(value, dt.datetime):
        return _format_timestamptz(value) if value.tzinfo else _format_timestamp(value)
    if isinstance(value, dt.date):
        return _format_date(value)
    if isinstance(value, dt.time):
        return _format_time(value)
    if isinstance(value, dt.timedelta):
        return format_interval(value)
    if isinstance(value, (list, tuple)):
        return format_array(value)
    if isinstance(value, dict):
        return _format_json(value)
    return str(value)


def _format_bool(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "t" if value else "f"


def _format_int(value: Any) -> str:
    if isinstance(value, str):
        return value
    return str(int(value))


def _format_float8(value: Any) -> str:
    return format_float(float(value))


def _format_float4(value: Any) -> str:
    return format_float(float(value), single=True)


def format_float(value: float, *, single: bool = False) -> str:
    """Shortest exact decimal, laid out as Postgres does (fixed for exponents -4..14,
    -4..5 for real; otherwise 1.5e+20)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    if single:
        try:
            mantissa_exp = _shortest_float4(value)
        except OverflowError:  # beyond float32 range
            return "Infinity" if value > 0 else "-Infinity"
    else:
        mantissa_exp = repr(value)
    digits, exponent = _decimal_digits(mantissa_exp)
    sign = "-" if value < 0 else ""
    fixed_limit = 6 if single else 15
    if -4 <= exponent < fixed_limit:
        if exponent >= 0:
            int_part = digits[: exponent + 1].ljust(exponent + 1, "0")
            frac = digits[exponent + 1 :]
        else:
            int_part = "0"
            frac = "0" * (-exponent - 1) + digits
        return f"{sign}{int_part}.{frac}" if frac else f"{sign}{int_part}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    exp_sign = "-" if exponent < 0 else "+"
    return f"{sign}{mantissa}e{exp_sign}{abs(exponent):02d}"


def _shortest_float4(value: float) -> str:
    """Fewest significant digits that read back as the same float32."""
    target = struct.unpack("!f", struct.pack("!f", value))[0]
    for precision in range(1, 10):
        text = f"{target:.{precision - 1}e}"
        try:
            if struct.unpack("!f", struct.pack("!f", float(text)))[0] == target:
                return text
        except OverflowError:  # rounding up near FLT_MAX overshoots: try more digits
            continue
    return repr(target)


def _decimal_digits(text: str) -> tuple[str, int]:
    """('12345', 2) for '-123.45': significant digits and the exponent of the first one."""
    d = Decimal(text)
    sign_digits = d.as_tuple()
    digits = "".join(map(str, sign_digits.digits)).rstrip("0") or "0"
    exponent = len(sign_digits.digits) + int(sign_digits.exponent) - 1
    # Leading zeros can only appear for zero itself, which callers handle.
    return digits, exponent


def _format_numeric(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        value = Decimal(repr(value))
    d = value if isinstance(value, Decimal) else Decimal(value)
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "Infinity" if d > 0 else "-Infinity"
    if d.is_zero():
        d = d.copy_abs()  # Postgres has no negative zero numeric
    return format(d, "f")


def _format_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def _format_bytea(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "\\x" + bytes(value).hex()


def _format_date(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        value = value.date()
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def _format_fraction(microsecond: int) -> str:
    return f".{microsecond:06d}".rstrip("0") if microsecond else ""


def _format_time(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.timedelta):  # some engines hand back time-of-day as a duration
        total = value // dt.timedelta(microseconds=1)
        seconds, micro = divmod(total, 1_000_000)
        minutes, sec = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return f"{hours:02d}:{minute:02d}:{sec:02d}{_format_fraction(micro)}"
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_format_fraction(value.microsecond)}"


def _format_timestamp(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if value.tzinfo is not None:
        value = value.astimezone(_UTC).replace(tzinfo=None)
    return f"{_format_date(value)} {_format_time(value.time())}"


def _format_timestamptz(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    # Session TimeZone is UTC: naive values are taken as UTC already.
    utc = value.astimezone(_UTC) if value.tzinfo is not None else value
    return f"{_format_date(utc)} {_format_time(utc.time())}+00"


def format_interval(value: dt.timedelta) -> str:
    """IntervalStyle 'postgres': '3 days 04:05:06.5', '-1 days -02:00:00', '00:00:00'.

    A timedelta has no months, so its days and time are split with one common sign."""
    total = value // dt.timedelta(microseconds=1)
    sign = "-" if total < 0 else ""
    days, rest = divmod(abs(total), _USECS_PER_DAY)
    parts = []
    if days:
        # Postgres writes '-1 days': only exactly +1 is singular.
        unit = "day" if days == 1 and not sign else "days"
        parts.append(f"{sign}{days} {unit}")
    if rest or not days:
        seconds, micro = divmod(rest, 1_000_000)
        minutes, sec = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        parts.append(f"{sign if rest else ''}{hours:02d}:{minute:02d}:{sec:02d}{_format_fraction(micro)}")
    return " ".join(parts)


def _format_interval(value: Any) -> str:
    if isinstance(value, str):
        return value
    return format_interval(value)


def _format_uuid(value: Any) -> str:
    if isinstance(value, bytes) and len(value) == 16:
        return str(uuid.UUID(bytes=value))
    return str(value)


def _format_json(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False, default=str)


def _format_jsonb(value: Any) -> str:
    """jsonb's output form. Stored values already have it; values the query engines compute
    (`->`, casts) come minified and in source key order, so text is normalized here."""
    if isinstance(value, str):
        # Short values repeat (keys, tags): cached. Long ones would make the cache hold megabytes.
        return _cached_jsonb_output(value) if len(value) <= 256 else _jsonb_output(value)
    return _format_json(value)


def _jsonb_output(text: str) -> str:
    try:
        return normalize_jsonb(text)
    except InvalidTextRepresentation:
        return text  # not JSON after all: sent as it is rather than failing the whole result


_cached_jsonb_output = functools.lru_cache(maxsize=4096)(_jsonb_output)


_FORMATTERS: dict[int, Any] = {
    T.BOOLEAN.oid: _format_bool,
    T.SMALLINT.oid: _format_int,
    T.INTEGER.oid: _format_int,
    T.BIGINT.oid: _format_int,
    T.OID.oid: _format_int,
    T.REAL.oid: _format_float4,
    T.DOUBLE.oid: _format_float8,
    T.NUMERIC.oid: _format_numeric,
    T.TEXT.oid: _format_text,
    T.VARCHAR.oid: _format_text,
    T.NAME.oid: _format_text,
    T.CHAR.oid: _format_text,
    T.UNKNOWN.oid: _format_default,
    T.BYTEA.oid: _format_bytea,
    T.DATE.oid: _format_date,
    T.TIME.oid: _format_time,
    T.TIMESTAMP.oid: _format_timestamp,
    T.TIMESTAMPTZ.oid: _format_timestamptz,
    T.INTERVAL.oid: _format_interval,
    T.UUID.oid: _format_uuid,
    T.JSON.oid: _format_json,
    T.JSONB.oid: _format_jsonb,
}


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------


def parse_text(value: str, t: SqlType) -> Any:
    """The Python value of Postgres text input `value` for type `t`.

    Raises InvalidTextRepresentation (22P02), InvalidDatetimeFormat (22007),
    DatetimeFieldOverflow (22008) or NumericValueOutOfRange (22003)."""
    parser = _PARSERS.get(t.oid)
    if parser is None:
        element = element_type(t)
        return value if element is None else parse_array(value, element)
    return parser(value, t)


def parse_array(value: str, element: SqlType) -> list[Any]:
    """Postgres array text ('{1,2,NULL}', '{{a,"b c"},{d,e}}') as nested lists of `element` values."""
    text = value.strip()
    if text.startswith("[") and "=" in text:  # explicit bounds '[1:2]={1,2}': bounds are dropped
        text = text[text.index("=") + 1 :].strip()
    if not text.startswith("{"):
        raise InvalidTextRepresentation(
            f'malformed array literal: "{value}"', detail='Array value must start with "{" or dimension information.')
    result, end = _parse_array_level(text, 0, element, value)
    if text[end:].strip():
        raise InvalidTextRepresentation(f'malformed array literal: "{value}"', detail="Junk after closing right brace.")
    if _shape(result) is None:  # '{1,{2}}', '{{1},{2,3}}': no one element type, no one shape
        raise InvalidTextRepresentation(
            f'malformed array literal: "{value}"',
            detail="Multidimensional arrays must have sub-arrays with matching dimensions.")
    return result


def _shape(items: list[Any]) -> tuple[int, ...] | None:
    """The dimensions of nested lists, or None when they are not rectangular."""
    nested = {isinstance(i, list) for i in items}
    if nested != {True}:
        return (len(items),) if nested != {False, True} else None
    shapes = {_shape(i) for i in items}
    if len(shapes) != 1 or None in shapes:
        return None
    inner = shapes.pop()
    assert inner is not None
    return (len(items), *inner)


def _parse_array_level(text: str, pos: int, element: SqlType, original: str) -> tuple[list[Any], int]:
    """Parse from the '{' at `pos`; return the items and the position after the matching '}'."""
    items: list[Any] = []
    pos += 1
    expect_item = True
    while pos < len(text):
        ch = text[pos]
        if ch.isspace():
            pos += 1
        elif ch == "}":
            if items and expect_item:
                break  # '{1,}' is malformed
            return items, pos + 1
        elif ch == "," and not expect_item:
            expect_item = True
            pos += 1
        elif not expect_item:
            break
        elif ch == "{":
            nested, pos = _parse_array_level(text, pos, element, original)
            items.append(nested)
            expect_item = False
        elif ch == '"':
            chars = []
            pos += 1
            while pos < len(text) and text[pos] != '"':
                if text[pos] == "\\":
                    pos += 1
                if pos < len(text):
                    chars.append(text[pos])
                pos += 1
            if pos >= len(text):
                break
            pos += 1
            items.append(parse_text("".join(chars), element))
            expect_item = False
        else:
            start = pos
            chars = []
            while pos < len(text) and text[pos] not in ',{}"':
                if text[pos] == "\\" and pos + 1 < len(text):
                    pos += 1
                chars.append(text[pos])
                pos += 1
            word = "".join(chars).strip()
            if not word:
                break
            raw = text[start:pos].strip()
            items.append(None if raw.upper() == "NULL" else parse_text(word, element))
            expect_item = False
    raise InvalidTextRepresentation(f'malformed array literal: "{original}"')


def _syntax_error(t: SqlType | str, value: str) -> InvalidTextRepresentation:
    return InvalidTextRepresentation(f'invalid input syntax for type {t}: "{value}"')


def _datetime_syntax_error(t: SqlType | str, value: str) -> InvalidDatetimeFormat:
    return InvalidDatetimeFormat(f'invalid input syntax for type {t}: "{value}"')


def invalid_input(t: SqlType, value: str) -> InvalidTextRepresentation | InvalidDatetimeFormat:
    """Postgres's error for text that is no value of `t`: 22007 for dates, times and intervals,
    22P02 for the rest."""
    return _datetime_syntax_error(t, value) if t.category in ("D", "T") else _syntax_error(t, value)


_BOOL_WORDS = (("true", True, 1), ("yes", True, 1), ("on", True, 2),
               ("false", False, 1), ("no", False, 1), ("off", False, 2))


def _parse_bool(value: str, t: SqlType) -> bool:
    word = value.strip().lower()
    if word == "1":
        return True
    if word == "0":
        return False
    # Like Postgres, any unambiguous prefix works ('t', 'tr', 'of' but not 'o').
    for full, result, min_len in _BOOL_WORDS:
        if len(word) >= min_len and full.startswith(word):
            return result
    raise _syntax_error(t, value)


_INT_RE = re.compile(r"\s*[+-]?\d+\s*")


def _parse_int(value: str, t: SqlType) -> int:
    if value.isascii() and value.isdigit():
        number = int(value)  # the common case, without the regex
    elif not _INT_RE.fullmatch(value):
        raise _syntax_error(t, value)
    else:
        number = int(value)
    low, high = _INT_RANGES[t.name]
    if not low <= number <= high:
        raise NumericValueOutOfRange(f'value "{value}" is out of range for type {t}')
    return number


def _parse_oid(value: str, t: SqlType) -> int:
    if not _INT_RE.fullmatch(value):
        raise _syntax_error(t, value)
    number = int(value)
    if not -(2**31) <= number <= 2**32 - 1:
        raise NumericValueOutOfRange(f'value "{value}" is out of range for type oid')
    return number % 2**32  # Postgres accepts -1 as 4294967295


_FLOAT_RE = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)\s*", re.IGNORECASE
)


def _parse_float(value: str, t: SqlType) -> float:
    if not _FLOAT_RE.fullmatch(value):
        raise _syntax_error(t, value)
    text = value.strip()
    number = float(text)
    special = text.lstrip("+-").lower() in ("inf", "infinity", "nan")
    if not special:
        if math.isinf(number):
            raise NumericValueOutOfRange(f'"{text}" is out of range for type {t}')
        if number == 0 and any(c in "123456789" for c in text.lower().split("e")[0]):
            raise NumericValueOutOfRange(f'"{text}" is out of range for type {t}')
    if t is T.REAL or t.oid == T.REAL.oid:
        try:
            rounded = struct.unpack("!f", struct.pack("!f", number))[0]
        except OverflowError:  # rounds beyond FLT_MAX
            raise NumericValueOutOfRange(f'"{text}" is out of range for type real') from None
        if rounded == 0 and number != 0:
            raise NumericValueOutOfRange(f'"{text}" is out of range for type real')
        return float(rounded)
    return number


_NUMERIC_RE = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*", re.IGNORECASE
)


def _parse_numeric(value: str, t: SqlType) -> Decimal:
    if not _NUMERIC_RE.fullmatch(value):
        raise _syntax_error(t, value)
    text = value.strip()
    lowered = text.lower()
    if lowered.lstrip("+-") == "nan":
        if lowered != "nan":
            raise _syntax_error(t, value)
        return Decimal("NaN")
    if lowered.lstrip("+-") in ("inf", "infinity"):
        return Decimal("-Infinity") if lowered.startswith("-") else Decimal("Infinity")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise _syntax_error(t, value) from None
    # Postgres numeric holds up to 131072 digits before the point, 16383 after.
    exponent = int(number.as_tuple().exponent)
    if len(number.as_tuple().digits) + exponent > 131072 or exponent < -16383:
        raise NumericValueOutOfRange("value overflows numeric format")
    if number.is_zero():
        number = number.copy_abs()
    return apply_numeric_typmod(number, t)


# Enough digits for any numeric Postgres stores, so quantize() never fails on precision.
_NUMERIC_CONTEXT = Context(prec=131072 + 16383, Emax=MAX_EMAX, Emin=MIN_EMIN)


def apply_numeric_typmod(number: Decimal, t: SqlType) -> Decimal:
    """`number` as a numeric(p, s) holds it: rounded half away from zero to s decimals, and
    refused (22003) with more than p - s digits before the point, as Postgres's apply_typmod."""
    precision_scale = t.precision_scale
    if precision_scale is None or number.is_nan():
        return number
    precision, scale = precision_scale
    if number.is_infinite():
        raise NumericValueOutOfRange(
            "numeric field overflow",
            detail=f"A field with precision {precision}, scale {scale} cannot hold an infinite value.")
    rounded = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=_NUMERIC_CONTEXT)
    integer_digits = precision - scale
    if not rounded.is_zero() and rounded.adjusted() >= integer_digits:
        limit = f"10^{integer_digits}" if integer_digits else "1"
        raise NumericValueOutOfRange(
            "numeric field overflow",
            detail=f"A field with precision {precision}, scale {scale} must round to an absolute value "
                   f"less than {limit}.")
    return rounded.copy_abs() if rounded.is_zero() else rounded


def _parse_text(value: str, t: SqlType) -> str:
    if "\x00" in value:
        raise CharacterNotInRepertoire('invalid byte sequence for encoding "UTF8": 0x00')
    if t.oid == T.NAME.oid:
        encoded = value.encode("utf-8")
        if len(encoded) >= _NAMEDATALEN:
            return encoded[: _NAMEDATALEN - 1].decode("utf-8", errors="ignore")
    return value


_HEX_DIGITS = set("0123456789abcdefABCDEF")


def _parse_bytea(value: str, t: SqlType) -> bytes:
    if value.startswith("\\x"):
        hex_text = value[2:]
        out = bytearray()
        i = 0
        while i < len(hex_text):
            c = hex_text[i]
            if c in " \t\n\r":
                i += 1
                continue
            if c not in _HEX_DIGITS:
                raise InvalidParameterValue(f'invalid hexadecimal digit: "{c}"')
            if i + 1 >= len(hex_text):
                raise InvalidParameterValue("invalid hexadecimal data: odd number of digits")
            d = hex_text[i + 1]
            if d not in _HEX_DIGITS:
                raise InvalidParameterValue(f'invalid hexadecimal digit: "{d}"')
            out.append(int(c + d, 16))
            i += 2
        return bytes(out)
    # Escape format: '\\' is a backslash, '\ooo' an octal byte, anything else literal.
    out = bytearray()
    i = 0
    while i < len(value):
        c = value[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        if value[i + 1 : i + 2] == "\\":
            out.append(0x5C)
            i += 2
            continue
        octal = value[i + 1 : i + 4]
        if len(octal) == 3 and octal[0] in "0123" and all(ch in "01234567" for ch in octal):
            out.append(int(octal, 8))
            i += 4
            continue
        raise _syntax_error("bytea", value)
    return bytes(out)


_DATE_PART = r"(?P<year>\d{4,})-(?P<month>\d{1,2})-(?P<day>\d{1,2})"
_TIME_PART = r"(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:\.(?P<fraction>\d*))?)?"
_ZONE_PART = r"(?P<zone>z|utc|gmt|[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?|[a-z][a-z0-9_+\-]*(?:/[a-z0-9_+\-]+)*)"
_TIMESTAMP_RE = re.compile(
    rf"\s*{_DATE_PART}(?:(?:\s+|t){_TIME_PART})?\s*(?:{_ZONE_PART})?\s*(?P<era>bc|ad)?\s*",
    re.IGNORECASE,
)
_TIME_RE = re.compile(rf"\s*{_TIME_PART}\s*(?:{_ZONE_PART})?\s*", re.IGNORECASE)


def _fraction_micros(fraction: str | None) -> int:
    """Microseconds of a fractional-second string, rounded half up like Postgres."""
    if not fraction:
        return 0
    padded = (fraction + "000000")[:7]
    micros = int(padded[:6])
    if padded[6] >= "5":
        micros += 1
    return micros  # may be 1_000_000: callers add it as a timedelta


def _zone_offset(zone: str, when: dt.datetime, original: str, t: SqlType) -> dt.timedelta:
    lowered = zone.lower()
    if lowered in ("z", "utc", "gmt"):
        return dt.timedelta(0)
    if lowered[0] in "+-":
        digits = lowered[1:].replace(":", "")
        if len(digits) <= 2:
            hours, minutes, seconds = int(digits), 0, 0
        else:
            hours = int(digits[:-2]) if len(digits) in (3, 4) else int(digits[:-4])
            minutes = int(digits[-2:]) if len(digits) in (3, 4) else int(digits[-4:-2])
            seconds = 0 if len(digits) in (3, 4) else int(digits[-2:])
        if hours > 15 or minutes > 59 or seconds > 59:
            raise DatetimeFieldOverflow(f'time zone displacement out of range: "{original}"')
        offset = dt.timedelta(hours=hours, minutes=minutes, seconds=seconds)
        return -offset if lowered[0] == "-" else offset
    try:
        from zoneinfo import ZoneInfo

        tz = ZoneInfo(zone)
    except Exception:  # unknown zone names, missing tzdata
        raise _datetime_syntax_error(t, original) from None
    return when.replace(tzinfo=tz).utcoffset() or dt.timedelta(0)


_SPECIAL_TIMESTAMPS = frozenset(("epoch", "now", "today", "tomorrow", "yesterday"))


def _special_timestamp(word: str) -> dt.datetime | None:
    if word not in _SPECIAL_TIMESTAMPS:  # most texts: no clock read, no table built
        return None
    now = dt.datetime.now(_UTC).replace(tzinfo=None)
    today = dt.datetime.combine(now.date(), dt.time())
    return {
        "epoch": dt.datetime(1970, 1, 1),
        "now": now,
        "today": today,
        "tomorrow": today + dt.timedelta(days=1),
        "yesterday": today - dt.timedelta(days=1),
    }.get(word)


# The form writers and drivers send ('2026-11-26 02:00:00.123+00'), read without the general
# pattern's alternatives; anything else, or anything out of range, takes the general path.
_ISO_TIMESTAMP_RE = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:(Z)|([+-])(\d\d)(?::?(\d\d))?)?")


def _parse_datetime(value: str, t: SqlType) -> tuple[dt.datetime, dt.timedelta | None]:
    """(local wall-clock datetime, zone offset if one was written)."""
    m = _ISO_TIMESTAMP_RE.fullmatch(value)
    if m is not None:
        year, month, day, hour, minute, second, fraction, utc, sign, zone_hours, zone_minutes = m.groups()
        offset: dt.timedelta | None = None
        if utc is not None:
            offset = dt.timedelta(0)
        elif sign is not None and int(zone_hours) <= 15 and int(zone_minutes or 0) <= 59:
            offset = dt.timedelta(hours=int(zone_hours), minutes=int(zone_minutes or 0))
            offset = -offset if sign == "-" else offset
        if utc is not None or sign is None or offset is not None:
            try:
                return dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                                   int((fraction + "00000")[:6]) if fraction else 0), offset
            except ValueError:
                pass  # out of range: the general path says how
    return _parse_datetime_general(value, t)


def _parse_datetime_general(value: str, t: SqlType) -> tuple[dt.datetime, dt.timedelta | None]:
    word = value.strip().lower()
    special = _special_timestamp(word)
    if special is not None:
        return special, None
    if word in ("infinity", "-infinity", "+infinity"):
        raise DatetimeFieldOverflow(f'{t} out of range: "{value}"')
    match = _TIMESTAMP_RE.fullmatch(value)
    if match is None:
        raise _datetime_syntax_error(t, value)
    year = int(match["year"])
    if match["era"] and match["era"].lower() == "bc":
        raise DatetimeFieldOverflow(f'{t} out of range: "{value}"')
    try:
        base = dt.datetime(
            year, int(match["month"]), int(match["day"]),
            int(match["hour"] or 0), int(match["minute"] or 0), int(match["second"] or 0),
        )
        local = base + dt.timedelta(microseconds=_fraction_micros(match["fraction"]))
    except (ValueError, OverflowError):
        raise DatetimeFieldOverflow(f'date/time field value out of range: "{value}"') from None
    zone = match["zone"]
    if zone is None:
        return local, None
    if zone.lower() == "ad":
        return local, None
    if zone.lower() == "bc":
        raise DatetimeFieldOverflow(f'{t} out of range: "{value}"')
    return local, _zone_offset(zone, local, value, t)


def _parse_timestamp(value: str, t: SqlType) -> dt.datetime:
    local, _zone = _parse_datetime(value, t)  # timestamp without time zone ignores a zone
    return local


def _parse_timestamptz(value: str, t: SqlType) -> dt.datetime:
    local, offset = _parse_datetime(value, t)
    try:
        return (local - (offset or dt.timedelta(0))).replace(tzinfo=_UTC)
    except OverflowError:
        raise DatetimeFieldOverflow(f'timestamp out of range: "{value}"') from None


def _parse_date(value: str, t: SqlType) -> dt.date:
    local, _zone = _parse_datetime(value, t)
    return local.date()


def _parse_time(value: str, t: SqlType) -> dt.time:
    match = _TIME_RE.fullmatch(value)
    if match is None:
        if _TIMESTAMP_RE.fullmatch(value):
            return _parse_datetime(value, t)[0].time()
        raise _datetime_syntax_error(t, value)
    hour, minute, second = int(match["hour"]), int(match["minute"]), int(match["second"] or 0)
    micros = _fraction_micros(match["fraction"])
    if hour > 23 or minute > 59 or second > 59:
        raise DatetimeFieldOverflow(f'date/time field value out of range: "{value}"')
    total = ((hour * 60 + minute) * 60 + second) * 1_000_000 + micros
    if total >= _USECS_PER_DAY:
        raise DatetimeFieldOverflow(f'date/time field value out of range: "{value}"')
    seconds, micro = divmod(total, 1_000_000)
    return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, micro)


# Microseconds per unit; months and years use Postgres' 30-day month.
_UNIT_MICROS: dict[str, int] = {}
for _names, _micros in (
    (("microsecond", "microseconds", "us", "usec", "usecs", "microsecon"), 1),
    (("millisecond", "milliseconds", "ms", "msec", "msecs", "millisecon"), 1_000),
    (("second", "seconds", "s", "sec", "secs"), 1_000_000),
    (("minute", "minutes", "m", "min", "mins"), 60_000_000),
    (("hour", "hours", "h", "hr", "hrs"), 3_600_000_000),
    (("day", "days", "d"), _USECS_PER_DAY),
    (("week", "weeks", "w"), 7 * _USECS_PER_DAY),
    (("month", "months", "mon", "mons"), _DAYS_PER_MONTH * _USECS_PER_DAY),
    (("year", "years", "y", "yr", "yrs"), 12 * _DAYS_PER_MONTH * _USECS_PER_DAY),
    (("decade", "decades", "dec", "decs"), 120 * _DAYS_PER_MONTH * _USECS_PER_DAY),
    (("century", "centuries", "c", "cent"), 1200 * _DAYS_PER_MONTH * _USECS_PER_DAY),
    (("millennium", "millennia", "mil", "mils", "millenniums"), 12000 * _DAYS_PER_MONTH * _USECS_PER_DAY),
):
    for _name in _names:
        _UNIT_MICROS[_name] = _micros

_INTERVAL_TOKEN_RE = re.compile(
    r"\s*(?:"
    r"(?P<tsign>[+-])?(?P<h>\d+):(?P<m>\d+)(?::(?P<s>\d+(?:\.\d*)?))?"  # [-]HH:MM[:SS.frac]
    r"|(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<unit>[a-z]+)?"  # 3 days / 1.5h / 10
    r")",
)
_ISO_INTERVAL_RE = re.compile(
    r"(?P<sign>[+-])?p(?:(?P<y>[\d.]+)y)?(?:(?P<mo>[\d.]+)m)?(?:(?P<w>[\d.]+)w)?(?:(?P<d>[\d.]+)d)?"
    r"(?:t(?:(?P<h>[\d.]+)h)?(?:(?P<mi>[\d.]+)m)?(?:(?P<s>[\d.]+)s)?)?"
)


def parse_interval(value: str) -> dt.timedelta:
    """Postgres interval input: '1 day 02:03:04', '@ 3 hours ago', 'P1DT2H', '90' (seconds)."""
    text = value.strip().lower()
    if not text:
        raise _datetime_syntax_error("interval", value)
    try:
        if text.startswith(("p", "-p", "+p")):
            total = _parse_iso_interval(text, value)
        else:
            total = _parse_verbose_interval(text, value)
        return dt.timedelta(microseconds=int(total.to_integral_value()))
    except OverflowError:
        raise NumericValueOutOfRange("interval out of range") from None


def _parse_iso_interval(text: str, original: str) -> Decimal:
    match = _ISO_INTERVAL_RE.fullmatch(text)
    if match is None or text.endswith(("p", "t")):
        raise _datetime_syntax_error("interval", original)
    units = {"y": "year", "mo": "month", "w": "week", "d": "day", "h": "hour", "mi": "minute", "s": "second"}
    total = Decimal(0)
    for group, unit in units.items():
        if match[group]:
            try:
                total += Decimal(match[group]) * _UNIT_MICROS[unit]
            except InvalidOperation:
                raise _datetime_syntax_error("interval", original) from None
    return -total if match["sign"] == "-" else total


def _parse_verbose_interval(text: str, original: str) -> Decimal:
    ago = False
    if text.startswith("@"):
        text = text[1:]
    if text.endswith("ago"):
        ago = True
        text = text[:-3]
    total = Decimal(0)
    position = 0
    text = text.rstrip()
    if not text:
        raise _datetime_syntax_error("interval", original)
    while position < len(text):
        match = _INTERVAL_TOKEN_RE.match(text, position)
        if match is None or match.end() == position:
            raise _datetime_syntax_error("interval", original)
        position = match.end()
        if match["h"] is not None:
            seconds = Decimal(match["s"] or 0)
            part = (int(match["h"]) * 3600 + int(match["m"]) * 60) * 1_000_000 + seconds * 1_000_000
            total += -part if match["tsign"] == "-" else part
            continue
        unit = match["unit"]
        if unit is None:
            micros_per = 1_000_000  # a bare number means seconds
        elif unit in _UNIT_MICROS:
            micros_per = _UNIT_MICROS[unit]
        else:
            raise _datetime_syntax_error("interval", original)
        total += Decimal(match["num"]) * micros_per
    return -total if ago else total


def _parse_interval(value: str, t: SqlType) -> dt.timedelta:
    return parse_interval(value)


def _parse_uuid(value: str, t: SqlType) -> uuid.UUID:
    text = value.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    compact = text.replace("-", "")
    if len(compact) != 32 or not all(c in _HEX_DIGITS for c in compact):
        raise _syntax_error(t, value)
    return uuid.UUID(hex=compact)


class _JsonNumber(str):
    """Keeps the source text of a JSON number so jsonb can reformat it like numeric."""


class _JsonObject(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs in source order (duplicates kept)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f'Token "{name}" is invalid.')


def _load_json(value: str, t: SqlType) -> Any:
    try:
        return json.loads(
            value, parse_float=_JsonNumber, parse_int=_JsonNumber, parse_constant=_reject_constant,
            object_pairs_hook=_JsonObject,
        )
    except (ValueError, RecursionError) as exc:
        raise InvalidTextRepresentation(f"invalid input syntax for type {t}", detail=str(exc)) from None


def _parse_json(value: str, t: SqlType) -> str:
    if "\x00" in value:
        raise CharacterNotInRepertoire('invalid byte sequence for encoding "UTF8": 0x00')
    _load_json(value, t)
    return value


def normalize_jsonb(value: str) -> str:
    """The text Postgres prints for `value::jsonb`: keys deduplicated (last wins) and sorted
    shortest first, ', ' and ': ' separators, numbers as numeric."""
    return _dump_jsonb(_load_json(value, T.JSONB))


def _dump_jsonb(node: Any) -> str:
    if isinstance(node, _JsonNumber):
        return _format_numeric(Decimal(node))
    if isinstance(node, str):
        return json.dumps(node, ensure_ascii=False)
    if node is True:
        return "true"
    if node is False:
        return "false"
    if node is None:
        return "null"
    if isinstance(node, _JsonObject):
        members = dict(node)
        keys = sorted(members, key=lambda k: (len(k.encode("utf-8")), k.encode("utf-8")))
        inner = ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_dump_jsonb(members[k])}" for k in keys)
        return "{" + inner + "}"
    return "[" + ", ".join(_dump_jsonb(item) for item in node) + "]"


def _parse_jsonb(value: str, t: SqlType) -> str:
    if "\x00" in value:
        raise CharacterNotInRepertoire('invalid byte sequence for encoding "UTF8": 0x00')
    return normalize_jsonb(value)


def _parse_char(value: str, t: SqlType) -> str:
    return value[:1]


_PARSERS: dict[int, Any] = {
    T.BOOLEAN.oid: _parse_bool,
    T.SMALLINT.oid: _parse_int,
    T.INTEGER.oid: _parse_int,
    T.BIGINT.oid: _parse_int,
    T.OID.oid: _parse_oid,
    T.REAL.oid: _parse_float,
    T.DOUBLE.oid: _parse_float,
    T.NUMERIC.oid: _parse_numeric,
    T.TEXT.oid: _parse_text,
    T.VARCHAR.oid: _parse_text,
    T.NAME.oid: _parse_text,
    T.CHAR.oid: _parse_char,
    T.UNKNOWN.oid: _parse_text,
    T.BYTEA.oid: _parse_bytea,
    T.DATE.oid: _parse_date,
    T.TIME.oid: _parse_time,
    T.TIMESTAMP.oid: _parse_timestamp,
    T.TIMESTAMPTZ.oid: _parse_timestamptz,
    T.INTERVAL.oid: _parse_interval,
    T.UUID.oid: _parse_uuid,
    T.JSON.oid: _parse_json,
    T.JSONB.oid: _parse_jsonb,
}
