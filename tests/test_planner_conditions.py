"""WHERE, HAVING and JOIN ... ON take booleans only, as in PostgreSQL (42804), checked when the
query is planned: DuckDB (ad hoc reads) would take a number as a truth value and Spark (views)
refuse the plan once the view's pipeline starts."""

from __future__ import annotations

import pytest

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.errors import DatatypeMismatch, StreamDBError
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.query import plan_query
from streamdb.sql.parser import parse_one

T1 = RelationDef(id=1, name="t", kind="table", primary_key=("id",), owner="streamdb",
                 columns=(ColumnDef("id", T.INTEGER), ColumnDef("s", T.SMALLINT), ColumnDef("b", T.BOOLEAN),
                          ColumnDef("x", T.TEXT), ColumnDef("ts", T.TIMESTAMPTZ)))
U1 = RelationDef(id=2, name="u", kind="stream", owner="streamdb",
                 columns=(ColumnDef("id", T.INTEGER), ColumnDef("n", T.BIGINT)))
CATALOG = CatalogSnapshot(1, {r.name: r for r in (T1, U1)})


def ctx() -> PlanContext:
    return PlanContext(catalog=CATALOG, session=SessionInfo(user="streamdb", database="streamdb"))


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT id FROM t WHERE s", "argument of WHERE must be type boolean, not type smallint"),
    ("SELECT id FROM t WHERE b AND id", "argument of AND must be type boolean, not type integer"),
    ("SELECT id FROM t WHERE NOT (x)", "argument of NOT must be type boolean, not type text"),
    ("SELECT id FROM t WHERE b OR ts", "argument of OR must be type boolean, not type timestamp with time zone"),
    ("SELECT s, count(*) FROM t GROUP BY s HAVING count(*)", "argument of HAVING must be type boolean, not type bigint"),
    ("SELECT t.id FROM t JOIN u ON u.n", "argument of JOIN/ON must be type boolean, not type bigint"),
    ("SELECT id FROM (SELECT id, s FROM t WHERE s + 1) AS q", "argument of WHERE must be type boolean, not type"),
    ("SELECT CASE WHEN id THEN 1 END FROM t", "argument of CASE/WHEN must be type boolean, not type integer"),
])
def test_non_boolean_conditions_are_42804(sql: str, message: str) -> None:
    with pytest.raises(DatatypeMismatch) as e:
        plan_query(parse_one(sql), ctx())
    assert e.value.sqlstate == "42804"
    assert e.value.message.startswith(message)


@pytest.mark.parametrize("sql", [
    "SELECT id FROM t WHERE b",
    "SELECT id FROM t WHERE b AND NOT (s > 1 OR x IS NULL)",
    "SELECT id FROM t WHERE coalesce(b, false)",
    "SELECT id FROM t WHERE CASE WHEN s > 0 THEN b ELSE false END",
    "SELECT id FROM t WHERE s::int::boolean",
    "SELECT id FROM t WHERE NULL",
    "SELECT id FROM t WHERE id IN (SELECT id FROM u WHERE n > 0)",
    "SELECT s FROM t GROUP BY s HAVING count(*) > 1",
    "SELECT t.id FROM t JOIN u ON t.id = u.id AND u.n > 0",
])
def test_boolean_conditions_plan(sql: str) -> None:
    plan_query(parse_one(sql), ctx())


@pytest.mark.parametrize(("sql", "sqlstate", "message"), [
    # PostgreSQL casts only integer (int4) to and from boolean.
    ("SELECT id FROM t WHERE s::boolean", "42846", "cannot cast type smallint to boolean"),
    ("SELECT id::date FROM t", "42846", "cannot cast type integer to date"),
    ("SELECT ts::bigint FROM t", "42846", "cannot cast type timestamp with time zone to bigint"),
    ("SELECT id FROM t WHERE b = s", "42883", "operator does not exist: boolean = smallint"),
    ("SELECT id FROM t WHERE x = id", "42883", "operator does not exist: text = integer"),
])
def test_casts_and_comparisons_postgresql_lacks(sql: str, sqlstate: str, message: str) -> None:
    with pytest.raises(StreamDBError) as e:
        plan_query(parse_one(sql), ctx())
    assert e.value.sqlstate == sqlstate
    assert e.value.message == message


@pytest.mark.parametrize("sql", [
    "SELECT id FROM t WHERE x = '5' AND id = 5.5 AND ts > '2024-01-01' AND ts > now() - interval '1 hour'",
    "SELECT id::text, s::int::boolean, b::int, '1'::int, x::int FROM t",
    "SELECT t.id FROM t JOIN u ON t.id = u.n",
    # sqlglot types date - date as a date (PostgreSQL: an integer), so the cast is not judged.
    "SELECT (ts::date - ts::date)::int FROM t",
])
def test_casts_and_comparisons_postgresql_has_plan(sql: str) -> None:
    plan_query(parse_one(sql), ctx())
