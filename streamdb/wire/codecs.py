"""Binary wire format (send/recv) of each supported type, as Postgres' *send/*recv functions.

encode_binary(value, type) -> bytes and decode_binary(bytes, type) -> value, over the Python
value representation of streamdb/types.py. Timestamps count microseconds from 2000-01-01.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from streamdb import types as T
from streamdb import values
from streamdb.errors import FeatureNotSupported, NumericValueOutOfRange, StreamDBError
from streamdb.types import SqlType

__all__ = ["encode_binary", "decode_binary", "supports_binary", "InvalidBinaryRepresentation"]


class InvalidBinaryRepresentation(StreamDBError):
    """22P03: binary data that does not decode as the declared type."""

    sqlstate = "22P03"


_PG_EPOCH_DATE = dt.date(2000, 1, 1)
_PG_EPOCH = dt.datetime(2000, 1, 1)
_PG_EPOCH_UTC = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_ONE_MICRO = dt.timedelta(microseconds=1)
_USECS_PER_DAY = 86_400_000_000
_DAYS_PER_MONTH = 30

_NUMERIC_POS = 0x0000
_NUMERIC_NEG = 0x4000
_NUMERIC_NAN = 0xC000
_NUMERIC_PINF = 0xD000
_NUMERIC_NINF = 0xF000


def supports_binary(t: SqlType) -> bool:
    element = values.element_type(t)
    return t.oid in _ENCODERS or (element is not None and element.oid in _ENCODERS)


def encode_binary(value: Any, t: SqlType) -> bytes:
    """Binary send format of a non-NULL value. Raises FeatureNotSupported (0A000)."""
    element = values.element_type(t)
    if element is not None:
        return _encode_array(value, element)
    encoder = _ENCODERS.get(t.oid)
    if encoder is None:
        raise FeatureNotSupported(f"binary output is not supported for type {t}")
    try:
        return encoder(value)
    except StreamDBError:
        raise
    except (struct.error, OverflowError) as exc:
        raise NumericValueOutOfRange(f"value {value!r} is out of range for type {t}") from exc


def decode_binary(data: bytes, t: SqlType) -> Any:
    """Python value of binary recv format `data`. Raises InvalidBinaryRepresentation (22P03)."""
    element = values.element_type(t)
    decoder = _DECODERS.get(t.oid)
    if decoder is None and element is None:
        raise FeatureNotSupported(f"binary input is not supported for type {t}")
    try:
        if element is not None:
            return _decode_array(bytes(data), element)
        assert decoder is not None
        return decoder(bytes(data))
    except StreamDBError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise InvalidBinaryRepresentation(f"incorrect binary data format for type {t}") from exc


# --- scalars ---------------------------------------------------------------------------


def _fixed(fmt: str, convert: Callable[[Any], Any]) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    packer = struct.Struct(fmt)

    def encode(value: Any) -> bytes:
        return packer.pack(convert(value))

    def decode(data: bytes) -> Any:
        if len(data) != packer.size:
            raise ValueError(f"expected {packer.size} bytes, got {len(data)}")
        return packer.unpack(data)[0]

    return encode, decode


def _to_int(value: Any) -> int:
    if isinstance(value, str):
        return int(value)
    return int(value)


def _to_float(value: Any) -> float:
    return float(value)


_bool_enc, _bool_dec = _fixed("!?", bool)
_int2_enc, _int2_dec = _fixed("!h", _to_int)
_int4_enc, _int4_dec = _fixed("!i", _to_int)
_int8_enc, _int8_dec = _fixed("!q", _to_int)
_oid_enc, _oid_dec = _fixed("!I", _to_int)
_float4_enc, _float4_dec = _fixed("!f", _to_float)
_float8_enc, _float8_dec = _fixed("!d", _to_float)


def _text_enc(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return (value if isinstance(value, str) else values.format_text(value, T.TEXT)).encode("utf-8")


def _text_dec(data: bytes) -> str:
    text = data.decode("utf-8")
    if "\x00" in text:
        raise ValueError("NUL in text")
    return text


def _bytea_enc(value: Any) -> bytes:
    if isinstance(value, str):
        return values.parse_text(value, T.BYTEA)
    return bytes(value)


def _bytea_dec(data: bytes) -> bytes:
    return data


def _json_enc(value: Any) -> bytes:
    return values.format_text(value, T.JSON).encode("utf-8")


def _json_dec(data: bytes) -> str:
    return values.parse_text(data.decode("utf-8"), T.JSON)


def _jsonb_enc(value: Any) -> bytes:
    # Version 1 of jsonb's binary form: the version byte, then the text.
    return b"\x01" + values.format_text(value, T.JSONB).encode("utf-8")


def _jsonb_dec(data: bytes) -> str:
    if not data or data[0] != 1:
        raise ValueError("unsupported jsonb version number")
    return values.parse_text(data[1:].decode("utf-8"), T.JSONB)


def _char_enc(value: Any) -> bytes:
    return str(value).encode("utf-8")[:1]


def _uuid_enc(value: Any) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return bytes(value)
    return uuid.UUID(str(value)).bytes


def _uuid_dec(data: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=data)


# --- date/time -------------------------------------------------------------------------


def _date_enc(value: Any) -> bytes:
    if isinstance(value, str):
        value = values.parse_text(value, T.DATE)
    if isinstance(value, dt.datetime):
        value = value.date()
    return struct.pack("!i", (value - _PG_EPOCH_DATE).days)


def _date_dec(data: bytes) -> dt.date:
    (days,) = struct.unpack("!i", data)
    return _PG_EPOCH_DATE + dt.timedelta(days=days)


def _time_enc(value: Any) -> bytes:
    if isinstance(value, str):
        value = values.parse_text(value, T.TIME)
    if isinstance(value, dt.timedelta):
        return struct.pack("!q", value // _ONE_MICRO)
    micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return struct.pack("!q", micros)


def _time_dec(data: bytes) -> dt.time:
    (micros,) = struct.unpack("!q", data)
    if not 0 <= micros < _USECS_PER_DAY:
        raise ValueError("time out of range")
    seconds, micro = divmod(micros, 1_000_000)
    return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, micro)


def _timestamp_enc(value: Any) -> bytes:
    if isinstance(value, str):
        value = values.parse_text(value, T.TIMESTAMP)
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return struct.pack("!q", (value - _PG_EPOCH) // _ONE_MICRO)


def _timestamp_dec(data: bytes) -> dt.datetime:
    (micros,) = struct.unpack("!q", data)
    return _PG_EPOCH + dt.timedelta(microseconds=micros)


def _timestamptz_enc(value: Any) -> bytes:
    if isinstance(value, str):
        value = values.parse_text(value, T.TIMESTAMPTZ)
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)  # naive timestamptz values are UTC
    return struct.pack("!q", (value - _PG_EPOCH_UTC) // _ONE_MICRO)


def _timestamptz_dec(data: bytes) -> dt.datetime:
    (micros,) = struct.unpack("!q", data)
    return _PG_EPOCH_UTC + dt.timedelta(microseconds=micros)


def _interval_enc(value: Any) -> bytes:
    if isinstance(value, str):
        value = values.parse_text(value, T.INTERVAL)
    total = value // _ONE_MICRO
    # Days and time share one sign, matching the text output.
    days, micros = divmod(abs(total), _USECS_PER_DAY)
    if total < 0:
        days, micros = -days, -micros
    return struct.pack("!qii", micros, days, 0)


def _interval_dec(data: bytes) -> dt.timedelta:
    micros, days, months = struct.unpack("!qii", data)
    return dt.timedelta(days=months * _DAYS_PER_MONTH + days, microseconds=micros)


# --- numeric ---------------------------------------------------------------------------


def _numeric_enc(value: Any) -> bytes:
    if isinstance(value, float):
        if math.isnan(value):
            value = Decimal("NaN")
        elif math.isinf(value):
            value = Decimal("Infinity") if value > 0 else Decimal("-Infinity")
        else:
            value = Decimal(repr(value))
    elif isinstance(value, str):
        value = values.parse_text(value, T.NUMERIC)
    elif not isinstance(value, Decimal):
        value = Decimal(value)
    if value.is_nan():
        return struct.pack("!hhHH", 0, 0, _NUMERIC_NAN, 0)
    if value.is_infinite():
        return struct.pack("!hhHH", 0, 0, _NUMERIC_PINF if value > 0 else _NUMERIC_NINF, 0)
    sign = _NUMERIC_NEG if value.is_signed() and not value.is_zero() else _NUMERIC_POS
    exponent = int(value.as_tuple().exponent)
    dscale = max(0, -exponent)
    int_text, _, frac_text = format(value.copy_abs(), "f").partition(".")
    int_text = int_text.lstrip("0")
    int_text = int_text.rjust((len(int_text) + 3) // 4 * 4, "0")
    frac_text = frac_text.ljust((len(frac_text) + 3) // 4 * 4, "0")
    groups = [int(int_text[i : i + 4]) for i in range(0, len(int_text), 4)]
    weight = len(groups) - 1
    groups += [int(frac_text[i : i + 4]) for i in range(0, len(frac_text), 4)]
    while groups and groups[0] == 0:  # leading zero groups shift the weight
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(f"!hhHH{len(groups)}H", len(groups), weight, sign, dscale, *groups)


def _numeric_dec(data: bytes) -> Decimal:
    ndigits, weight, sign, dscale = struct.unpack("!hhHH", data[:8])
    if sign == _NUMERIC_NAN:
        return Decimal("NaN")
    if sign == _NUMERIC_PINF:
        return Decimal("Infinity")
    if sign == _NUMERIC_NINF:
        return Decimal("-Infinity")
    if sign not in (_NUMERIC_POS, _NUMERIC_NEG) or ndigits < 0:
        raise ValueError("invalid numeric sign")
    groups = struct.unpack(f"!{ndigits}H", data[8 : 8 + 2 * ndigits])
    if len(data) != 8 + 2 * ndigits or any(g > 9999 for g in groups):
        raise ValueError("invalid numeric digits")
    digits = [int(c) for c in "".join(f"{g:04d}" for g in groups)] or [0]
    exponent = (weight + 1 - ndigits) * 4 if ndigits else 0
    # Re-express with exactly dscale fractional digits, without any rounding context.
    if exponent > -dscale:
        digits += [0] * (exponent + dscale)
    elif exponent < -dscale:
        drop = -dscale - exponent
        digits = digits[:-drop] or [0]
    return Decimal((1 if sign == _NUMERIC_NEG else 0, tuple(digits), -dscale))


# --- arrays ----------------------------------------------------------------------------


def _encode_array(value: Any, element: SqlType) -> bytes:
    """array_send: ndim, has-null flag, element OID, (size, lower bound 1) per dimension, items."""
    dims: list[int] = []
    probe = value
    while isinstance(probe, (list, tuple)):
        dims.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    if not dims or 0 in dims:
        return struct.pack("!iiI", 0, 0, element.oid)
    flat: list[Any] = list(value)
    for _ in dims[1:]:
        flat = [item for sub in flat for item in sub]
    if len(flat) != math.prod(dims):
        raise FeatureNotSupported("multidimensional arrays must have sub-arrays with matching dimensions")
    parts = [struct.pack("!iiI", len(dims), int(any(v is None for v in flat)), element.oid)]
    parts += [struct.pack("!ii", size, 1) for size in dims]
    for item in flat:
        if item is None:
            parts.append(struct.pack("!i", -1))
        else:
            data = encode_binary(item, element)
            parts.append(struct.pack("!i", len(data)) + data)
    return b"".join(parts)


def _decode_array(data: bytes, element: SqlType) -> list[Any]:
    ndim, _has_null, element_oid = struct.unpack("!iiI", data[:12])
    if ndim == 0:
        return []
    if element_oid != element.oid or not 0 < ndim <= 6:
        raise ValueError("wrong element type or dimensions")
    dims = [struct.unpack("!ii", data[12 + 8 * i : 20 + 8 * i])[0] for i in range(ndim)]
    pos = 12 + 8 * ndim
    flat: list[Any] = []
    for _ in range(math.prod(dims)):
        (length,) = struct.unpack("!i", data[pos : pos + 4])
        pos += 4
        if length == -1:
            flat.append(None)
            continue
        if length < 0 or pos + length > len(data):
            raise ValueError("bad element length")
        flat.append(decode_binary(data[pos : pos + length], element))
        pos += length
    if pos != len(data):
        raise ValueError("trailing bytes in array")
    for size in reversed(dims[1:]):  # regroup innermost dimension first
        flat = [flat[i : i + size] for i in range(0, len(flat), size)]
    return flat


_ENCODERS: dict[int, Callable[[Any], bytes]] = {
    T.BOOLEAN.oid: _bool_enc,
    T.SMALLINT.oid: _int2_enc,
    T.INTEGER.oid: _int4_enc,
    T.BIGINT.oid: _int8_enc,
    T.OID.oid: _oid_enc,
    T.REAL.oid: _float4_enc,
    T.DOUBLE.oid: _float8_enc,
    T.NUMERIC.oid: _numeric_enc,
    T.TEXT.oid: _text_enc,
    T.VARCHAR.oid: _text_enc,
    T.NAME.oid: _text_enc,
    T.UNKNOWN.oid: _text_enc,
    T.CHAR.oid: _char_enc,
    T.BYTEA.oid: _bytea_enc,
    T.DATE.oid: _date_enc,
    T.TIME.oid: _time_enc,
    T.TIMESTAMP.oid: _timestamp_enc,
    T.TIMESTAMPTZ.oid: _timestamptz_enc,
    T.INTERVAL.oid: _interval_enc,
    T.UUID.oid: _uuid_enc,
    T.JSON.oid: _json_enc,
    T.JSONB.oid: _jsonb_enc,
}

_DECODERS: dict[int, Callable[[bytes], Any]] = {
    T.BOOLEAN.oid: _bool_dec,
    T.SMALLINT.oid: _int2_dec,
    T.INTEGER.oid: _int4_dec,
    T.BIGINT.oid: _int8_dec,
    T.OID.oid: _oid_dec,
    T.REAL.oid: _float4_dec,
    T.DOUBLE.oid: _float8_dec,
    T.NUMERIC.oid: _numeric_dec,
    T.TEXT.oid: _text_dec,
    T.VARCHAR.oid: _text_dec,
    T.NAME.oid: _text_dec,
    T.UNKNOWN.oid: _text_dec,
    T.CHAR.oid: _text_dec,
    T.BYTEA.oid: _bytea_dec,
    T.DATE.oid: _date_dec,
    T.TIME.oid: _time_dec,
    T.TIMESTAMP.oid: _timestamp_dec,
    T.TIMESTAMPTZ.oid: _timestamptz_dec,
    T.INTERVAL.oid: _interval_dec,
    T.UUID.oid: _uuid_dec,
    T.JSON.oid: _json_dec,
    T.JSONB.oid: _jsonb_dec,
}
