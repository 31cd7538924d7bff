"""Literal templates (sql/literals.py) and point-lookup planning (planner/lookup.py), without a
server. (Planning describes queries on DuckDB in this process: tests/conftest.py runs the
in-process Spark tests before any such module.)"""

from __future__ import annotations

import pytest

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.plans import PointLookup
from streamdb.planner.query import plan_query
from streamdb.sql.literals import templatize
from streamdb.sql.parser import parse_one

VIEW = RelationDef(id=3, name="kv", kind="materialized_view",
                   columns=(ColumnDef("id", T.BIGINT), ColumnDef("name", T.TEXT), ColumnDef("score", T.DOUBLE)))
TABLE = RelationDef(id=4, name="users", kind="table", primary_key=("id",),
                    columns=(ColumnDef("id", T.INTEGER), ColumnDef("name", T.VARCHAR)))
STREAM = RelationDef(id=5, name="ev", kind="stream", columns=(ColumnDef("id", T.BIGINT),))
CTX = PlanContext(catalog=CatalogSnapshot(1, {r.name: r for r in (VIEW, TABLE, STREAM)}),
                  session=SessionInfo(user="streamdb", database="streamdb"))


def lookup(sql: str, params: list[T.SqlType | None] | None = None) -> PointLookup | None:
    return plan_query(parse_one(sql), CTX, declared_params=params).lookup


@pytest.mark.parametrize(("sql", "template", "values"), [
    ("SELECT v FROM kv WHERE id = 42", "SELECT v FROM kv WHERE id = $1", (42,)),
    ("SELECT v FROM kv WHERE name = 'it''s' AND id = 7", "SELECT v FROM kv WHERE name = $1 AND id = $2",
     ("it's", 7)),
    ('SELECT "a1" FROM t2 WHERE "x 3" = 3', 'SELECT "a1" FROM t2 WHERE "x 3" = $1', (3,)),
    ("SELECT v FROM kv WHERE id = 1;", "SELECT v FROM kv WHERE id = $1;", (1,)),
])
def test_templates(sql, template, values):
    t = templatize(sql)
    assert t is not None and t.sql == template and t.values == values


@pytest.mark.parametrize("sql", [
    "SELECT v FROM kv",  # nothing to lift
    "SELECT v FROM kv WHERE id = $1",  # parameters already
    "SELECT v FROM kv WHERE id = 1 -- 2",  # comments
    "SELECT v FROM kv WHERE name = E'a\\'b'",  # escape strings
    "SELECT 1; SELECT 2",  # several statements
    "SELECT v FROM kv WHERE id = 12345678901234567890",  # may not fit a bigint
    "SELECT v FROM kv WHERE name = 'open",  # unterminated: the parser reports it
])
def test_no_template(sql):
    assert templatize(sql) is None


def test_decimals_and_names_with_digits_stay_in_the_template():
    t = templatize("SELECT x1 FROM r2 WHERE a = 1.5 AND b = 2")
    assert t is not None and t.sql == "SELECT x1 FROM r2 WHERE a = 1.5 AND b = $1" and t.values == (2,)


def test_lookup_shapes():
    found = lookup("SELECT name, score FROM kv WHERE id = 5")
    assert found == PointLookup(3, ("name", "score"), ("id",), (0,), (5,))
    found = lookup("SELECT k.score AS s FROM kv AS k WHERE (k.name = $2) AND $1 = k.id", [T.BIGINT, T.TEXT])
    assert found is not None and dict(zip(found.key_columns, found.key_params, strict=True)) == {"name": 2, "id": 1}
    assert lookup("SELECT * FROM users WHERE id = -3") == PointLookup(4, ("id", "name"), ("id",), (0,), (-3,))
    assert lookup("SELECT name FROM users WHERE name = 'x'") is not None
    # The existence check: integer constants out.
    assert lookup("SELECT 1 FROM kv WHERE id = 5") == PointLookup(3, (1,), ("id",), (0,), (5,))
    assert lookup("SELECT 1 AS found, name FROM kv WHERE id = $1", [T.BIGINT]) == PointLookup(
        3, (1, "name"), ("id",), (1,), (None,))


@pytest.mark.parametrize("sql", [
    "SELECT name FROM kv",  # no key
    "SELECT name FROM kv WHERE id > 5",  # a range
    "SELECT name FROM kv WHERE id = 5 OR id = 6",
    "SELECT name FROM kv WHERE id = 5 AND id = 6",  # one key twice
    "SELECT upper(name) FROM kv WHERE id = 5",  # an expression out
    "SELECT name FROM kv WHERE id = 5 ORDER BY name",
    "SELECT name FROM kv WHERE id = 5 LIMIT 1",
    "SELECT DISTINCT name FROM kv WHERE id = 5",
    "SELECT count(*) FROM kv WHERE id = 5",
    "SELECT name FROM kv WHERE score = 1",  # floats: equality is not Python's
    "SELECT name FROM kv WHERE id = '5'",  # a string against an integer: Postgres casts it
    "SELECT name FROM kv WHERE id = 5.0",
    "SELECT name FROM kv WHERE name = 5",
    "SELECT id FROM ev WHERE id = 5",  # a stream: read whole, nothing cached to index
    "SELECT a.name FROM kv AS a JOIN users AS b ON a.id = b.id WHERE a.id = 1",
    "SELECT name FROM kv WHERE id = id",
    "SELECT 1.5 FROM kv WHERE id = 5",  # constants other than integers of Postgres's integer
    "SELECT 'x' FROM kv WHERE id = 5",
    "SELECT 2147483648 FROM kv WHERE id = 5",  # a bigint
    "SELECT -1 FROM kv WHERE id = 5",
    "SELECT NULL FROM kv WHERE id = 5",
])
def test_not_lookups(sql):
    assert lookup(sql) is None


def test_parameters_of_another_kind_are_not_lookups():
    assert lookup("SELECT name FROM kv WHERE id = $1", [T.TEXT]) is None
    assert lookup("SELECT name FROM kv WHERE id = $1", [T.INTEGER]) is not None


def counted(sql: str) -> int | None:
    return plan_query(parse_one(sql), CTX).count_of


def test_whole_counts():
    assert counted("SELECT count(*) FROM kv") == VIEW.id
    assert counted("SELECT count(*) AS n FROM kv AS k") == VIEW.id
    assert counted("SELECT count(*) FROM ev") == STREAM.id
    assert counted("SELECT count(*) FROM users") == TABLE.id


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM kv WHERE id = 1",
    "SELECT count(1) FROM kv",
    "SELECT count(id) FROM kv",  # NULLs are not counted
    "SELECT count(DISTINCT id) FROM kv",
    "SELECT count(*) FILTER (WHERE id > 1) FROM kv",
    "SELECT count(*) OVER () FROM kv",
    "SELECT count(*), max(id) FROM kv",
    "SELECT count(*) + 1 FROM kv",
    "SELECT count(*) FROM kv GROUP BY id",
    "SELECT count(*) FROM kv HAVING count(*) > 1",
    "SELECT count(*) FROM kv LIMIT 0",
    "SELECT count(*) FROM kv AS a JOIN users AS b ON a.id = b.id",
    "SELECT count(*) FROM (SELECT * FROM kv) AS s",
])
def test_not_whole_counts(sql):
    assert counted(sql) is None
