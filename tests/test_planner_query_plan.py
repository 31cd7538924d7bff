"""What an ad hoc query's plan holds, and what planning it costs: the Spark SQL and the resolved
SQL are written on first use, a text is described by the embedded engine once.
(Planning describes queries on DuckDB in this process: tests/conftest.py runs the in-process
Spark tests before any such module.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.errors import UndefinedColumn
from streamdb.planner import typing as planner_typing
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.query import plan_query, spark_sql_for
from streamdb.sql.parser import parse_one

KT = RelationDef(id=1, name="kt", kind="table", primary_key=("id",),
                 columns=(ColumnDef("id", T.BIGINT), ColumnDef("k", T.INTEGER), ColumnDef("v", T.BIGINT)))
CTX = PlanContext(catalog=CatalogSnapshot(1, {"kt": KT}), session=SessionInfo(user="streamdb", database="streamdb"))


def test_spark_and_resolved_sql_are_written_on_first_use_and_as_before() -> None:
    ast = parse_one("SELECT k, sum(v) / 2 AS h FROM kt WHERE id > 3 GROUP BY k")
    plan = plan_query(ast, CTX)
    assert "spark_sql" not in vars(plan) and "resolved_sql" not in vars(plan)
    # Integer division stays integral on Spark (the typed copy), as planning gave it before.
    assert plan.spark_sql == spark_sql_for(parse_one(plan.resolved_sql), plan.inputs)
    assert plan.spark_sql == ("SELECT `kt`.k AS k, CAST(SUM(`kt`.v) / 2 AS BIGINT) AS h FROM r1 AS `kt` "
                              "WHERE `kt`.id > 3 GROUP BY `kt`.k")
    assert plan.resolved_sql == 'SELECT k, SUM(v) / 2 AS h FROM r1 AS "kt" WHERE id > 3 GROUP BY k'
    assert vars(plan)["spark_sql"] is plan.spark_sql  # written once, then kept
    # A plan copied with new parameter values (a prepared query run again) writes the same text.
    assert replace(plan, params=()).spark_sql == plan.spark_sql
    assert [c.name for c in plan.columns] == ["k", "h"]


def test_parameters_stay_in_the_stored_sql_and_are_described_typed() -> None:
    plan = plan_query(parse_one("SELECT v + $1 AS w FROM kt WHERE id = $2"), CTX)
    assert "$1" in plan.duckdb_sql and "$2" in plan.duckdb_sql
    assert [(c.name, c.type) for c in plan.columns] == [("w", T.BIGINT)]
    assert plan.param_types == (T.BIGINT, T.BIGINT)


def test_a_text_is_described_once_and_its_errors_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    real = planner_typing.embedded.run

    def counting(sql: str, *args: object, **kwargs: object) -> object:
        runs.append(sql)
        return real(sql, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_typing.embedded, "run", counting)
    text = "SELECT k * 7 AS described_once FROM kt ORDER BY k"
    first = plan_query(parse_one(text), CTX)
    second = plan_query(parse_one(text), CTX)
    assert first.columns == second.columns and [c.name for c in first.columns] == ["described_once"]
    assert len([r for r in runs if "described_once" in r]) == 1
    # Another table with the same name but other column types is described afresh.
    wider = replace(KT, columns=(ColumnDef("id", T.BIGINT), ColumnDef("k", T.DOUBLE), ColumnDef("v", T.BIGINT)))
    ctx = replace(CTX, catalog=CatalogSnapshot(2, {"kt": wider}))
    assert [c.type for c in plan_query(parse_one(text), ctx).columns] == [T.DOUBLE]
    assert len([r for r in runs if "described_once" in r]) == 2
    # An error is not kept: the same bad text fails the same way each time.
    for _ in range(2):
        with pytest.raises(UndefinedColumn, match="nope"):
            plan_query(parse_one("SELECT nope FROM kt"), CTX)


@pytest.mark.parametrize("sql", [
    "SELECT k, sum(v) / 2 AS h FROM kt WHERE id > 3 GROUP BY k HAVING count(*) > 1 ORDER BY 1",
    "SELECT a.k, b.v FROM kt AS a JOIN kt AS b USING (id) WHERE a.v BETWEEN 1 AND 9",
    "SELECT DISTINCT ON (k) k, v, row_number() OVER (PARTITION BY k ORDER BY v) FROM kt ORDER BY k, v DESC",
    "SELECT 1, 'x' || version(), current_user, now(), coalesce(NULL, 2.50) * 2",
    "WITH w AS (SELECT k FROM kt) SELECT count(*) FROM w WHERE k IN (SELECT k FROM kt WHERE v > 0)",
    "SELECT v FROM kt WHERE id = 5",
])
def test_planning_leaves_the_statement_as_it_was(sql: str) -> None:
    """A session keeps a query's statement and plans it again when the catalog or its settings
    change (runtime/session.py): planning must not change the tree it is given."""
    ast = parse_one(sql)
    before = ast.sql(dialect="postgres")
    first = plan_query(ast, CTX)
    assert ast.sql(dialect="postgres") == before
    again = plan_query(ast, CTX)
    assert again.duckdb_sql == first.duckdb_sql and again.columns == first.columns
