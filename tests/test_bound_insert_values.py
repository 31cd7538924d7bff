"""A prepared INSERT's parameters go straight into its rows (planner/query.py bound_literal_value):
the same values, types and errors as binding them into the tree as literals and reading those."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdb import types as T
from streamdb.planner.coerce import NotALiteral, TypedValue, literal_value
from streamdb.planner.query import bound_literal_value, literal_for

TYPES = [T.BOOLEAN, T.BIGINT, T.SMALLINT, T.INTEGER, T.TEXT, T.OID, T.JSON, T.REAL, T.DOUBLE, T.VARCHAR, T.DATE,
         T.TIME, T.TIMESTAMP, T.TIMESTAMPTZ, T.INTERVAL, T.NUMERIC, T.UUID, T.JSONB, T.NAME, T.CHAR, T.UNKNOWN,
         T.BYTEA]

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.datetimes(timezones=st.just(dt.UTC)), st.datetimes(), st.dates(),
    st.sampled_from(["42", "-7", "1.5", "abc", "", "true", "2026-11-26 02:00:00+00", "2026-11-26",
                     "{\"a\": 1}", "1 day", str(uuid.UUID(int=5)), "12:30:00"]),
    st.text(max_size=8), st.uuids(), st.timedeltas(min_value=dt.timedelta(days=-999), max_value=dt.timedelta(days=999)),
)


def _outcome(read: Any) -> Any:
    try:
        v = read()
    except NotALiteral:
        return "not a literal"
    except Exception as e:  # the same error either way
        return (type(e).__name__, str(e))
    if isinstance(v, TypedValue):
        return ("typed", v.value, v.type)
    return ("plain", v)


@settings(max_examples=600, deadline=None)
@given(VALUES, st.sampled_from(TYPES))
def test_bound_values_read_as_bound_literals(value: Any, t: T.SqlType) -> None:
    direct = _outcome(lambda: bound_literal_value(value, t))
    via_tree = _outcome(lambda: literal_value(literal_for(value, t)))
    if isinstance(value, int) and not isinstance(value, bool) and value < 0 and T.is_integer(t):
        # literal_for writes -5 as -(5), which literal_value does not read (the tree path then
        # evaluates it in the embedded engine): the direct path gives the value itself.
        assert via_tree == "not a literal" and direct == ("typed", value, t)
        return
    assert direct == via_tree, (value, t)


@pytest.mark.parametrize(("value", "t", "expected"), [
    (5, T.INTEGER, ("typed", 5, T.INTEGER)),
    ("2026-11-26 02:00:00+00", T.TIMESTAMPTZ, ("typed", dt.datetime(2026, 11, 26, 2, tzinfo=dt.UTC), T.TIMESTAMPTZ)),
    (Decimal("1.50"), T.NUMERIC, ("typed", Decimal("1.50"), T.NUMERIC)),
    (None, T.TEXT, ("plain", None)),
    (True, T.BOOLEAN, ("plain", True)),
])
def test_known_values(value: Any, t: T.SqlType, expected: Any) -> None:
    assert _outcome(lambda: bound_literal_value(value, t)) == expected


@settings(max_examples=300, deadline=None)
@given(value=VALUES, target=st.sampled_from(TYPES))
def test_coerce_shortcut_gives_what_the_full_conversion_gives(value: Any, target: T.SqlType) -> None:
    """coerce() takes an int into an integer column and a str into text as they are, without the
    general conversion: the same value, or the same error, as `_convert` and its checks give."""
    from streamdb.errors import StreamDBError
    from streamdb.planner import coerce as C

    def full(v: Any) -> Any:
        converted = C._convert(v, target, "c")
        if isinstance(converted, Decimal):
            return C.values.apply_numeric_typmod(converted, target)
        return converted

    for v in (value, 2**15, -(2**15) - 1, 2**31, -(2**63), 2**63, "a\x00b"):
        try:
            expected: Any = ("ok", full(v))
        except StreamDBError as e:
            expected = ("error", e.sqlstate)
        try:
            got: Any = ("ok", C.coerce(v, target, "c"))
        except StreamDBError as e:
            got = ("error", e.sqlstate)
        if expected[0] == "ok" and isinstance(expected[1], float) and expected[1] != expected[1]:
            continue  # NaN equals nothing
        assert got == expected and type(got[1]) is type(expected[1]), (v, target, got, expected)
