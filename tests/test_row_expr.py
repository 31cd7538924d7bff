"""planner/row_expr.py without a server: which SET expressions an UPDATE by key computes from
the row, with which result types, and their values. The end-to-end check against PostgreSQL is
tests/test_e2e_sql.py::test_update_by_key_with_arithmetic_over_the_row_answers_as_postgresql."""

from __future__ import annotations

from decimal import Decimal

import pytest

from streamdb import types as T
from streamdb.catalog import ColumnDef, RelationDef
from streamdb.errors import NumericValueOutOfRange
from streamdb.planner.row_expr import evaluate, params_needed, row_assignments
from streamdb.sql.parser import parse_one

REL = RelationDef(id=3, name="t", kind="table", primary_key=("id",),
                  columns=(ColumnDef("id", T.INTEGER), ColumnDef("s", T.SMALLINT), ColumnDef("b", T.BIGINT),
                           ColumnDef("n", T.numeric(12, 3)), ColumnDef("txt", T.TEXT), ColumnDef("f", T.DOUBLE)))
ROW = (1, 32000, 2**62, Decimal("1.500"), "x", 1.5)


def plan(set_clause: str, param_types: tuple[T.SqlType, ...] = ()):
    stmt = parse_one(f"UPDATE t SET {set_clause} WHERE id = 1")
    assignments = {eq.this.name: eq.expression for eq in stmt.expressions}
    return row_assignments(assignments, REL, param_types)


@pytest.mark.parametrize(("clause", "value", "type_name"), [
    ("s = s + 1", 32001, "integer"), ("id = s + 100000", 132000, "integer"), ("b = b - 1", 2**62 - 1, "bigint"),
    ("n = n * 2.5", Decimal("3.7500"), "numeric"), ("n = -(n + 1)", Decimal("-2.500"), "numeric"),
    ("b = b * -1", -(2**62), "bigint"), ("id = 3000000000 - s", 3000000000 - 32000, "bigint"),
])
def test_values_and_result_types(clause: str, value: object, type_name: str) -> None:
    values = plan(clause)
    assert values is not None
    ((_, e),) = values
    assert e.type.name == type_name
    assert evaluate(e, ROW, ()) == value


@pytest.mark.parametrize("clause", ["s = s + s", "b = b * 4", "id = id - 2147483647 - 3"])
def test_overflow_of_the_result_type_is_postgresqls_error(clause: str) -> None:
    values = plan(clause)
    assert values is not None
    ((_, e),) = values
    with pytest.raises(NumericValueOutOfRange, match=f"{e.type.name} out of range"):
        evaluate(e, ROW, ())


def test_nulls_and_parameters() -> None:
    values = plan("s = s + $1, n = n * $2", (T.SMALLINT, T.NUMERIC))
    assert values is not None and params_needed(values) == 2
    assert [evaluate(e, ROW, (1, Decimal("2"))) for _, e in values] == [32001, Decimal("3.000")]
    assert [evaluate(e, (1, None, None, None, None, None), (1, Decimal("2"))) for _, e in values] == [None, None]


@pytest.mark.parametrize("clause", ["n = n / 2", "txt = txt || 'y'", "f = f + 1", "s = abs(s)", "s = s + $1",
                                    "s = 1, txt = 'x' || txt"])
def test_anything_else_keeps_the_query(clause: str) -> None:
    assert plan(clause) is None  # $1 without a known exact type, text, doubles, division, functions


@pytest.mark.parametrize("clause", ["s = s + CAST('1.5' AS INT)", "s = s + CAST(1.5 AS INT)"])
def test_a_fraction_cast_to_an_integer_keeps_the_query(clause: str) -> None:
    """'1.5'::int is an error and 1.5::int rounds in PostgreSQL: the query path says each."""
    assert plan(clause) is None
