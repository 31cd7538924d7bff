"""Text formatting and parsing of SQL values (streamdb.values), checked against Postgres output."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb import types as T
from streamdb.errors import (
    CharacterNotInRepertoire,
    InvalidDatetimeFormat,
    InvalidParameterValue,
    InvalidTextRepresentation,
    NumericValueOutOfRange,
    StreamDBError,
)
from streamdb.types import SqlType
from streamdb.values import (
    DatetimeFieldOverflow,
    array_type,
    element_type,
    format_float,
    format_interval,
    format_text,
    normalize_jsonb,
    parse_interval,
    parse_text,
)

UTC = dt.UTC


@pytest.mark.parametrize(
    ("value", "sql_type", "text"),
    [
        (True, T.BOOLEAN, "t"),
        (False, T.BOOLEAN, "f"),
        (-32768, T.SMALLINT, "-32768"),
        (2**63 - 1, T.BIGINT, "9223372036854775807"),
        (4294967295, T.OID, "4294967295"),
        (0.1, T.DOUBLE, "0.1"),
        (1e15, T.DOUBLE, "1e+15"),
        (1e14, T.DOUBLE, "100000000000000"),
        (123.0, T.DOUBLE, "123"),
        (1.2345678901234568e17, T.DOUBLE, "1.2345678901234568e+17"),
        (1e-5, T.DOUBLE, "1e-05"),
        (0.0001, T.DOUBLE, "0.0001"),
        (-0.0, T.DOUBLE, "-0"),
        (math.inf, T.DOUBLE, "Infinity"),
        (-math.inf, T.DOUBLE, "-Infinity"),
        (math.nan, T.DOUBLE, "NaN"),
        (1 / 3, T.REAL, "0.33333334"),
        (1e6, T.REAL, "1e+06"),
        (123456.0, T.REAL, "123456"),
        (Decimal("1E+5"), T.NUMERIC, "100000"),
        (Decimal("1.50"), T.NUMERIC, "1.50"),
        (Decimal("-0.00"), T.NUMERIC, "0.00"),
        (Decimal("1E-20"), T.NUMERIC, "0.00000000000000000001"),
        (Decimal("NaN"), T.NUMERIC, "NaN"),
        (Decimal("-Infinity"), T.NUMERIC, "-Infinity"),
        (7, T.NUMERIC, "7"),
        ("héllo", T.TEXT, "héllo"),
        (b"\x0a\x0b", T.BYTEA, "\\x0a0b"),
        (b"", T.BYTEA, "\\x"),
        (dt.date(2024, 1, 2), T.DATE, "2024-01-02"),
        (dt.date(44, 3, 15), T.DATE, "0044-03-15"),
        (dt.time(3, 4, 5), T.TIME, "03:04:05"),
        (dt.time(3, 4, 5, 120000), T.TIME, "03:04:05.12"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 123000), T.TIMESTAMP, "2024-01-02 03:04:05.123"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC), T.TIMESTAMPTZ, "2024-01-02 03:04:05.123+00"),
        (dt.datetime(2024, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))), T.TIMESTAMPTZ,
         "2024-01-02 03:04:05+00"),
        (dt.timedelta(days=1, hours=2, minutes=3, seconds=4), T.INTERVAL, "1 day 02:03:04"),
        (dt.timedelta(days=3), T.INTERVAL, "3 days"),
        (dt.timedelta(0), T.INTERVAL, "00:00:00"),
        (dt.timedelta(hours=-22), T.INTERVAL, "-22:00:00"),
        (dt.timedelta(days=-1), T.INTERVAL, "-1 days"),
        (-dt.timedelta(days=1, hours=2), T.INTERVAL, "-1 days -02:00:00"),
        (dt.timedelta(microseconds=500), T.INTERVAL, "00:00:00.0005"),
        (uuid.UUID("12345678-1234-5678-1234-567812345678"), T.UUID, "12345678-1234-5678-1234-567812345678"),
        ('{"a":1}', T.JSON, '{"a":1}'),
        ({"a": [1, 2]}, T.JSONB, '{"a": [1, 2]}'),
    ],
)
def test_format_text(value: Any, sql_type: SqlType, text: str) -> None:
    assert format_text(value, sql_type) == text


@pytest.mark.parametrize(
    ("text", "sql_type", "value"),
    [
        ("t", T.BOOLEAN, True), (" TRUE ", T.BOOLEAN, True), ("yes", T.BOOLEAN, True), ("on", T.BOOLEAN, True),
        ("1", T.BOOLEAN, True), ("f", T.BOOLEAN, False), ("of", T.BOOLEAN, False), ("no", T.BOOLEAN, False),
        (" 42 ", T.INTEGER, 42), ("-32768", T.SMALLINT, -32768), ("+7", T.BIGINT, 7),
        ("-1", T.OID, 4294967295),
        ("1.5", T.DOUBLE, 1.5), ("-Infinity", T.DOUBLE, -math.inf), ("1e300", T.DOUBLE, 1e300),
        (".5", T.REAL, 0.5),
        ("1.50", T.NUMERIC, Decimal("1.50")), ("-1e3", T.NUMERIC, Decimal("-1E+3")),
        ("abc", T.TEXT, "abc"), ("x" * 70, T.NAME, "x" * 63),
        ("\\x0A0b", T.BYTEA, b"\n\x0b"), ("\\x", T.BYTEA, b""), ("a\\\\b\\001", T.BYTEA, b"a\\b\x01"),
        ("2024-01-02", T.DATE, dt.date(2024, 1, 2)),
        ("2024-01-02 10:00", T.DATE, dt.date(2024, 1, 2)),
        ("03:04:05.5", T.TIME, dt.time(3, 4, 5, 500000)), ("03:04", T.TIME, dt.time(3, 4)),
        ("2024-01-02 03:04:05.123", T.TIMESTAMP, dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
        ("2024-01-02T03:04:05+02", T.TIMESTAMP, dt.datetime(2024, 1, 2, 3, 4, 5)),
        ("2024-01-02 03:04:05+02", T.TIMESTAMPTZ, dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("2024-01-02 03:04:05.5-05:30", T.TIMESTAMPTZ, dt.datetime(2024, 1, 2, 8, 34, 5, 500000, tzinfo=UTC)),
        ("2024-01-02 03:04:05Z", T.TIMESTAMPTZ, dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02", T.TIMESTAMPTZ, dt.datetime(2024, 1, 2, tzinfo=UTC)),
        ("2024-01-02 23:59:59.9999996", T.TIMESTAMP, dt.datetime(2024, 1, 3)),
        ("epoch", T.TIMESTAMP, dt.datetime(1970, 1, 1)),
        ("1 day 02:03:04", T.INTERVAL, dt.timedelta(days=1, seconds=7384)),
        ("-1 days +02:00:00", T.INTERVAL, dt.timedelta(hours=-22)),
        ("@ 3 hours ago", T.INTERVAL, dt.timedelta(hours=-3)),
        ("P1DT2H30M", T.INTERVAL, dt.timedelta(days=1, hours=2, minutes=30)),
        ("90", T.INTERVAL, dt.timedelta(seconds=90)),
        ("1.5 hours", T.INTERVAL, dt.timedelta(minutes=90)),
        ("2 weeks 1 mon", T.INTERVAL, dt.timedelta(days=44)),
        ("250 ms", T.INTERVAL, dt.timedelta(milliseconds=250)),
        ("{12345678-1234-5678-1234-567812345678}", T.UUID, uuid.UUID("12345678-1234-5678-1234-567812345678")),
        ("12345678123456781234567812345678", T.UUID, uuid.UUID("12345678-1234-5678-1234-567812345678")),
        ('{"a" : 1}', T.JSON, '{"a" : 1}'),
        ('{"bb": 1.10, "a": [1e2, {}], "bb": 2}', T.JSONB, '{"a": [100, {}], "bb": 2}'),
    ],
)
def test_parse_text(text: str, sql_type: SqlType, value: Any) -> None:
    assert parse_text(text, sql_type) == value


@pytest.mark.parametrize(
    ("text", "sql_type", "error", "message"),
    [
        ("abc", T.INTEGER, InvalidTextRepresentation, 'invalid input syntax for type integer: "abc"'),
        ("1.5", T.BIGINT, InvalidTextRepresentation, 'invalid input syntax for type bigint: "1.5"'),
        ("", T.SMALLINT, InvalidTextRepresentation, 'invalid input syntax for type smallint: ""'),
        ("99999999999", T.INTEGER, NumericValueOutOfRange, 'value "99999999999" is out of range for type integer'),
        ("40000", T.SMALLINT, NumericValueOutOfRange, 'value "40000" is out of range for type smallint'),
        ("maybe", T.BOOLEAN, InvalidTextRepresentation, 'invalid input syntax for type boolean: "maybe"'),
        ("o", T.BOOLEAN, InvalidTextRepresentation, 'invalid input syntax for type boolean: "o"'),
        ("1e400", T.DOUBLE, NumericValueOutOfRange, '"1e400" is out of range for type double precision'),
        ("1e39", T.REAL, NumericValueOutOfRange, '"1e39" is out of range for type real'),
        ("1_0", T.DOUBLE, InvalidTextRepresentation, 'invalid input syntax for type double precision: "1_0"'),
        ("12a", T.NUMERIC, InvalidTextRepresentation, 'invalid input syntax for type numeric: "12a"'),
        ("-nan", T.NUMERIC, InvalidTextRepresentation, 'invalid input syntax for type numeric: "-nan"'),
        ("2024-13-01", T.DATE, DatetimeFieldOverflow, 'date/time field value out of range: "2024-13-01"'),
        ("yesterday-ish", T.DATE, InvalidDatetimeFormat, 'invalid input syntax for type date: "yesterday-ish"'),
        ("2024-01-02 25:00", T.TIMESTAMP, DatetimeFieldOverflow, None),
        ("noon", T.TIME, InvalidDatetimeFormat, None),
        ("24:00:01", T.TIME, DatetimeFieldOverflow, None),
        ("2024-01-02 03:04 Mars/Olympus", T.TIMESTAMPTZ, InvalidDatetimeFormat, None),
        ("3 fortnights", T.INTERVAL, InvalidDatetimeFormat, 'invalid input syntax for type interval: "3 fortnights"'),
        ("", T.INTERVAL, InvalidDatetimeFormat, None),
        ("xyz", T.UUID, InvalidTextRepresentation, 'invalid input syntax for type uuid: "xyz"'),
        ("{nope", T.JSON, InvalidTextRepresentation, "invalid input syntax for type json"),
        ("NaN", T.JSONB, InvalidTextRepresentation, "invalid input syntax for type jsonb"),
        ("\\xzz", T.BYTEA, InvalidParameterValue, 'invalid hexadecimal digit: "z"'),
        ("\\x0", T.BYTEA, InvalidParameterValue, "invalid hexadecimal data: odd number of digits"),
        ("a\\b", T.BYTEA, InvalidTextRepresentation, None),
        ("a\x00b", T.TEXT, CharacterNotInRepertoire, 'invalid byte sequence for encoding "UTF8": 0x00'),
    ],
)
def test_parse_errors(text: str, sql_type: SqlType, error: type[StreamDBError], message: str | None) -> None:
    with pytest.raises(error) as info:
        parse_text(text, sql_type)
    assert info.value.sqlstate == error.sqlstate
    if message is not None:
        assert info.value.message == message


def test_arrays() -> None:
    int_array = array_type(T.INTEGER)
    assert int_array.oid == 1007 and element_type(int_array) is T.INTEGER
    assert format_text([1, None, 3], int_array) == "{1,NULL,3}"
    assert format_text([[1, 2], [3, 4]], int_array) == "{{1,2},{3,4}}"
    text_array = array_type(T.TEXT)
    texts = ["a b", 'x"y', "", "null", "ok", "back\\slash", "{}"]
    assert format_text(texts, text_array) == '{"a b","x\\"y","","null",ok,"back\\\\slash","{}"}'
    assert parse_text(format_text(texts, text_array), text_array) == texts
    assert parse_text(" { 1 , NULL } ", int_array) == [1, None]
    assert parse_text("{{1,2},{3,4}}", int_array) == [[1, 2], [3, 4]]
    assert parse_text("{}", int_array) == []
    for bad in ("{1,}", "1,2", "{1,2", "{1}x", "{,1}"):
        with pytest.raises(InvalidTextRepresentation, match="malformed array literal"):
            parse_text(bad, int_array)
    with pytest.raises(InvalidTextRepresentation, match="type integer"):
        parse_text("{a}", int_array)
    assert format_text([True, False], array_type(T.BOOLEAN)) == "{t,f}"


def test_error_sqlstates() -> None:
    assert InvalidTextRepresentation.sqlstate == "22P02"
    assert NumericValueOutOfRange.sqlstate == "22003"
    assert InvalidDatetimeFormat.sqlstate == "22007"
    assert DatetimeFieldOverflow.sqlstate == "22008"
    assert issubclass(DatetimeFieldOverflow, InvalidDatetimeFormat)


def test_format_null_is_refused() -> None:
    with pytest.raises(ValueError):
        format_text(None, T.TEXT)


def test_jsonb_normalization_orders_keys_like_postgres() -> None:
    assert normalize_jsonb('{"ccc": 1, "b": 2, "aa": 3, "a": 4}') == '{"a": 4, "b": 2, "aa": 3, "ccc": 1}'
    assert normalize_jsonb('[]') == "[]" and normalize_jsonb("{}") == "{}"
    assert normalize_jsonb('"x\\ny"') == '"x\\ny"'
    assert normalize_jsonb("[true, false, null, -0.0]") == "[true, false, null, 0.0]"


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False))
def test_float8_round_trip(value: float) -> None:
    assert parse_text(format_float(value), T.DOUBLE) == value


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float4_round_trip(value: float) -> None:
    assert parse_text(format_text(value, T.REAL), T.REAL) == value


@settings(max_examples=300, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_numeric_round_trip(value: Decimal) -> None:
    text = format_text(value, T.NUMERIC)
    assert "e" not in text.lower()
    assert parse_text(text, T.NUMERIC) == value


@settings(max_examples=300, deadline=None)
@given(st.timedeltas(min_value=dt.timedelta(days=-10**6), max_value=dt.timedelta(days=10**6)))
def test_interval_round_trip(value: dt.timedelta) -> None:
    assert parse_interval(format_interval(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)))
def test_timestamp_round_trip(value: dt.datetime) -> None:
    assert parse_text(format_text(value, T.TIMESTAMP), T.TIMESTAMP) == value
    aware = value.replace(tzinfo=UTC)
    assert parse_text(format_text(aware, T.TIMESTAMPTZ), T.TIMESTAMPTZ) == aware


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_bytea_round_trip(value: bytes) -> None:
    assert parse_text(format_text(value, T.BYTEA), T.BYTEA) == value



def _both_timestamp_paths(text: str, t: SqlType) -> tuple[Any, Any]:
    """(the ISO shortcut's answer, the general path's), an error as (type, message)."""
    from streamdb import values

    answers: list[Any] = []
    for read in (values._parse_datetime, values._parse_datetime_general):
        try:
            answers.append(read(text, t))
        except Exception as e:
            answers.append((type(e), str(e)))
    return answers[0], answers[1]


@settings(max_examples=400, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)),
       st.sampled_from(["", "Z", "+00", "-00", "+05:30", "-0800", "+15", "+16", "+14:60", "+02:3"]),
       st.sampled_from([" ", "T"]), st.integers(0, 6))
def test_the_iso_timestamp_shortcut_reads_as_the_general_path(when, zone, sep, digits):
    fraction = f".{when.microsecond:06d}"[: digits + 1] if digits else ""
    text = f"{when.year:04d}-{when.month:02d}-{when.day:02d}{sep}{when:%H:%M:%S}{fraction}{zone}"
    for t in (T.TIMESTAMPTZ, T.TIMESTAMP):
        shortcut, general = _both_timestamp_paths(text, t)
        assert shortcut == general, text


@pytest.mark.parametrize("text", ["2026-02-30 00:00:00", "2026-13-01 00:00:00", "2026-01-01 24:00:00",
                                  "2026-01-01 23:59:60", "2026-01-01 00:00:00+16"])
def test_the_iso_timestamp_shortcut_leaves_out_of_range_values_to_the_general_path(text):
    for t in (T.TIMESTAMPTZ, T.TIMESTAMP):
        shortcut, general = _both_timestamp_paths(text, t)
        assert shortcut == general, text
