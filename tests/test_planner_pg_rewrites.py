"""Rewrites that give Spark and the embedded engine PostgreSQL's answers (planner/query.py); the
end-to-end check is tests/test_e2e_differential.py."""

from __future__ import annotations

import re

import pytest
import sqlglot

from streamdb.planner.pg_functions import EmbeddedDuckDB
from streamdb.planner.query import similar_to_regex, spark_semantics


@pytest.mark.parametrize(("pattern", "matches", "misses"), [
    ("K(e|a)n", ["Ken", "Kan"], ["Kin", "Kenny", "xKen"]),
    ("lea%", ["leap", "lea"], ["ale"]),
    ("_.c", ["a.c"], ["abc", "a.cd"]),  # `.` is literal in SIMILAR TO
    ("%$5", ["costs $5"], ["5"]),
    ("[ab]_", ["ax", "by"], ["cx"]),
    ("50\\%", ["50%"], ["500"]),
])
def test_similar_to_patterns_become_postgresql_regular_expressions(pattern, matches, misses):
    regex = re.compile(similar_to_regex(pattern))
    assert all(regex.match(s) for s in matches)
    assert not any(regex.match(s) for s in misses)


def spark(sql: str) -> str:
    return spark_semantics(sqlglot.parse_one(sql, read="postgres")).sql(dialect="spark")


def test_distinct_on_keeps_its_order_on_spark():
    out = spark("SELECT DISTINCT ON (dept) dept, id FROM t ORDER BY dept DESC, id LIMIT 2")
    assert out.endswith("AS _distinct_on ORDER BY `dept` DESC NULLS FIRST LIMIT 2")
    # A key not in the output: no outer order to give (the window still picks the rows).
    assert "_distinct_on" not in spark("SELECT DISTINCT ON (dept) id FROM t ORDER BY dept, id")


def test_series_tables_and_similar_to_on_spark():
    out = spark("SELECT x FROM generate_series(5, 1) AS t(x)")
    assert "EXPLODE(IF(" in out and "SEQUENCE(5, 1)" in out and "AS `t`" in out
    assert "RLIKE '^(?:K(e|a)n)$'" in spark("SELECT 1 FROM t WHERE n SIMILAR TO 'K(e|a)n'")
    # Over an earlier FROM item's column: Spark resolves it only in a LATERAL subquery.
    assert ", LATERAL (SELECT EXPLODE(" in spark("SELECT x FROM t, generate_series(1, t.n) AS s(x)")


def test_embedded_sql_keeps_nulls_last_after_desc():
    # The embedded connection sorts NULLs first after DESC, as PostgreSQL does.
    tree = sqlglot.parse_one("SELECT id FROM t ORDER BY s DESC NULLS LAST, id", read="postgres")
    assert tree.sql(dialect=EmbeddedDuckDB) == "SELECT id FROM t ORDER BY s DESC NULLS LAST, id"
    tree = sqlglot.parse_one("SELECT id FROM t ORDER BY s DESC", read="postgres")
    assert tree.sql(dialect=EmbeddedDuckDB) == "SELECT id FROM t ORDER BY s DESC"


def test_only_doubles_round_half_to_even():
    """round(avg(int)) is round of a numeric in PostgreSQL (half away from zero), though sqlglot
    types avg() as a double: only operands of a certain type are rounded as doubles."""
    from streamdb import types as T
    from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
    from streamdb.planner.context import PlanContext, SessionInfo
    from streamdb.planner.query import plan_query
    from streamdb.sql.parser import parse_one

    rel = RelationDef(id=1, name="t", kind="table", primary_key=("id",), owner="streamdb",
                      columns=(ColumnDef("id", T.INTEGER), ColumnDef("f", T.DOUBLE)))
    ctx = PlanContext(catalog=CatalogSnapshot(1, {"t": rel}), session=SessionInfo(user="streamdb", database="streamdb"))
    plan = plan_query(parse_one("SELECT round(f) AS a, round(avg(id)) AS b, f::int AS c FROM t GROUP BY f"), ctx)
    assert plan.duckdb_sql.count("ROUND_EVEN(") == 1 and "ROUND(" in plan.duckdb_sql
    spark_sql = plan.spark_sql
    assert spark_sql.count("RINT(") == 2, spark_sql  # round(f) and f::int, not round(avg(id))


@pytest.mark.parametrize(("sql", "columns"), [
    ("SELECT * FROM abs(-1)", ["abs"]),                     # the function's name
    ("SELECT * FROM upper('x') AS u", ["u"]),               # else the table alias
    ("SELECT * FROM round(2.5) AS r(half)", ["half"]),      # else the column alias
    ("SELECT a.a, b.b FROM abs(-1) AS a, abs(2) AS b", ["a", "b"]),
])
def test_a_scalar_function_in_from_is_a_table_of_one_row_named_as_postgresql_names_it(sql, columns):
    from streamdb.catalog import CatalogSnapshot
    from streamdb.planner.context import PlanContext, SessionInfo
    from streamdb.planner.query import plan_query
    from streamdb.sql.parser import parse_one

    ctx = PlanContext(catalog=CatalogSnapshot(1, {}), session=SessionInfo(user="streamdb", database="streamdb"))
    plan = plan_query(parse_one(sql), ctx)
    assert [c.name for c in plan.columns] == columns


@pytest.mark.parametrize(("sql", "spelled_out"), [
    ("SELECT id, age IN (SELECT qty FROM orders) AS x FROM people", True),  # a value
    ("SELECT id FROM people WHERE a > 1 OR NOT (age IN (SELECT qty FROM orders))", True),  # NOT under OR
    ("SELECT id, coalesce(age IN (SELECT qty FROM orders), true) FROM people", True),
    ("SELECT id FROM people WHERE age IN (SELECT qty FROM orders)", False),  # only its truth counts
    ("SELECT id FROM people WHERE a > 1 OR age IN (SELECT qty FROM orders)", False),
    ("SELECT id FROM people WHERE a > 1 AND age NOT IN (SELECT qty FROM orders)", False),  # null-aware anti join
    ("SELECT CASE WHEN age IN (SELECT qty FROM orders) THEN 1 END FROM people", False),
    ("SELECT id FROM people p JOIN t ON t.k IN (SELECT qty FROM orders)", False),
    ("SELECT id, age IN (1, 2) FROM people", False),  # a list, not a subquery
])
def test_in_a_subquery_read_as_a_value_is_spelled_out_with_its_nulls_on_spark(sql: str, spelled_out: bool) -> None:
    """Spark's existence join makes `x IN (q)` false where PostgreSQL's is NULL (x NULL, or a NULL
    in q and no match): where that difference shows, the NULL cases are written out."""
    out = spark(sql)
    assert ("IS NULL THEN CASE WHEN EXISTS" in out) is spelled_out, out
    if spelled_out:
        assert "EXISTS(SELECT 1 FROM orders WHERE (qty) IS NULL) THEN NULL ELSE FALSE" in out


def test_in_over_an_aggregate_tests_its_nulls_in_having() -> None:
    out = spark("SELECT id, age IN (SELECT max(qty) FROM orders o WHERE o.pid = p.id) AS x FROM people p")
    assert "EXISTS(SELECT 1 FROM orders AS o WHERE o.pid = p.id HAVING (MAX(qty)) IS NULL)" in out
