"""SESSION(rel, ts, gap [, key ...]) in the planner, without a server: the rewritten query's
columns, its errors, and its semantics run on an in-memory embedded engine (DuckDB).

(DuckDB runs in this process: tests/conftest.py runs the in-process Spark tests before any such module.)
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.errors import FeatureNotSupported, InvalidParameterValue, UndefinedColumn, UndefinedTable
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.plans import QueryPlan
from streamdb.planner.query import plan_query
from streamdb.runtime.duckdb_functions import install_duckdb_functions
from streamdb.sql.parser import parse_one

EV = RelationDef(id=0, name="ev", kind="stream",
                 columns=(ColumnDef("k", T.INTEGER), ColumnDef("v", T.INTEGER), ColumnDef("ts", T.TIMESTAMP)))
VISITS = RelationDef(id=1, name="visits", kind="table", primary_key=("id",),
                     columns=(ColumnDef("id", T.INTEGER), ColumnDef("ts", T.TIMESTAMPTZ)))
CTX = PlanContext(catalog=CatalogSnapshot(1, {r.name: r for r in (EV, VISITS)}),
                  session=SessionInfo(user="streamdb", database="streamdb"))
T0 = dt.datetime(2024, 1, 1)


def plan(sql: str) -> QueryPlan:
    return plan_query(parse_one(sql), CTX)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_star_shows_the_relation_columns_and_the_window_columns() -> None:
    p = plan("SELECT * FROM SESSION(ev, ts, INTERVAL '10' SECOND, k)")
    assert [(c.name, c.type) for c in p.columns] == [
        ("k", T.INTEGER), ("v", T.INTEGER), ("ts", T.TIMESTAMP),
        ("window_start", T.TIMESTAMP), ("window_end", T.TIMESTAMP)]
    # ROWTIME as the time column: bounds are timestamptz; still no helper or pseudo-columns.
    p = plan("SELECT * FROM SESSION(ev, rowtime, INTERVAL '1' MINUTE)")
    assert [c.name for c in p.columns] == ["k", "v", "ts", "window_start", "window_end"]
    assert p.columns[-1].type is T.TIMESTAMPTZ
    # A table's row key stays hidden.
    assert [c.name for c in plan("SELECT * FROM SESSION(visits, ts, INTERVAL '1' SECOND)").columns] == [
        "id", "ts", "window_start", "window_end"]
    # The window_end type follows the time column.
    assert plan("SELECT window_end FROM SESSION(visits, ts, INTERVAL '1' SECOND)").columns[0].type is T.TIMESTAMPTZ
    for sql in (p.duckdb_sql, p.spark_sql):
        assert "LAG(" in sql and "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW" in sql


@pytest.mark.parametrize(("sql", "error", "position"), [
    ("SELECT * FROM SESSION(ev, ts)", FeatureNotSupported, 15),
    ("SELECT * FROM SESSION(ev, ts, 10)", FeatureNotSupported, 31),
    ("SELECT * FROM SESSION(ev, ts, INTERVAL '0' SECOND)", InvalidParameterValue, None),
    ("SELECT * FROM SESSION(ev, nope, INTERVAL '1' SECOND)", UndefinedColumn, 27),
    ("SELECT * FROM SESSION(ev, v, INTERVAL '1' SECOND)", FeatureNotSupported, 27),
    ("SELECT * FROM SESSION(ev, ts, INTERVAL '1' SECOND, k, nokey)", UndefinedColumn, 55),
    ("SELECT * FROM SESSION(ev, ts, INTERVAL '1' SECOND, k + 1)", FeatureNotSupported, None),
    ("SELECT * FROM SESSION(nowhere, ts, INTERVAL '1' SECOND)", UndefinedTable, 23),
    ("WITH c AS (SELECT * FROM ev) SELECT * FROM SESSION(c, ts, INTERVAL '1' SECOND)", FeatureNotSupported, 52),
    # `*` where a name belongs was an internal error (AttributeError), found by the SQL fuzzer
    ("SELECT * FROM HOP(*, ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND)", FeatureNotSupported, 19),
    ("SELECT * FROM TUMBLE(ev, *, INTERVAL '1' SECOND)", FeatureNotSupported, 26),
    ("SELECT * FROM SESSION(*, ts, INTERVAL '1' SECOND)", FeatureNotSupported, 23),
])
def test_errors(sql: str, error: type[Exception], position: int | None) -> None:
    with pytest.raises(error) as info:
        plan(sql)
    if position is not None:
        assert getattr(info.value, "position", None) == position


def _run(sql: str, rows: list[tuple[int | None, int, dt.datetime | None]]) -> list[tuple]:
    con = duckdb.connect(":memory:")
    install_duckdb_functions(con)
    con.sql("SET TimeZone = 'UTC'")
    con.sql("CREATE TABLE r0 (k INTEGER, v INTEGER, ts TIMESTAMP, rowtime TIMESTAMPTZ)")
    for r in rows:
        con.execute("INSERT INTO r0 VALUES (?, ?, ?, now())", list(r))
    return sorted(con.sql(plan(sql).duckdb_sql).fetchall(), key=repr)


def test_sessions_on_the_embedded_engine() -> None:
    rows = [(1, 1, at(0)), (1, 2, at(10)), (1, 3, at(20.5)), (1, 4, at(30.5)),  # 10.5 s hole at 10 -> 20.5
            (2, 5, at(10)), (2, 6, at(10)),  # equal times: one session
            (None, 7, at(0)), (None, 8, at(5)),
            (1, 9, None), (1, 10, None)]  # no time: each its own session, with no bounds
    got = _run("SELECT v, window_start, window_end FROM SESSION(ev, ts, INTERVAL '10' SECOND, k)", rows)
    assert got == sorted([(1, at(0), at(20)), (2, at(0), at(20)), (3, at(20.5), at(40.5)), (4, at(20.5), at(40.5)),
                          (5, at(10), at(20)), (6, at(10), at(20)), (7, at(0), at(15)), (8, at(0), at(15)),
                          (9, None, None), (10, None, None)], key=repr)
    # A fractional gap: 10.5 s is not more than 10.5 s, so key 1's times chain into one session.
    got = _run("SELECT k, window_start, window_end, count(*) FROM SESSION(ev, ts, INTERVAL '10.5 seconds', k) "
               "WHERE ts IS NOT NULL GROUP BY 1, 2, 3", rows)
    assert got == sorted([(1, at(0), at(41), 4), (2, at(10), at(20.5), 2), (None, at(0), at(15.5), 2)], key=repr)


def test_session_views_get_a_session_operator() -> None:
    """A view over SESSION(...) is kept per key by a Session node (not recomputed as its window
    functions), keyed or not, with `*`, and under an aggregate; other window functions are not."""
    from streamdb.planner.dataflow import Session, view_strategy

    def strategy(sql: str):
        p = plan(sql)
        return view_strategy(p.resolved_sql, p.inputs, CTX.catalog, tuple(c.name for c in p.columns))

    for sql in ("SELECT * FROM SESSION(ev, ts, INTERVAL '10' SECOND, k)",
                "SELECT window_start, count(*) FROM SESSION(visits, ts, INTERVAL '1.5' SECOND) GROUP BY window_start",
                "SELECT s.v, s.window_end FROM SESSION(ev, ts, INTERVAL '1' MINUTE, k, v) AS s WHERE s.v > 1"):
        found = strategy(sql)
        assert found.label == "incremental", (sql, found.reason)
        assert found.dataflow is not None
        sessions = [n for n in found.dataflow.nodes() if isinstance(n, Session)]
        assert len(sessions) == 1
    keyed = next(n for n in strategy("SELECT * FROM SESSION(ev, ts, INTERVAL '10' SECOND, k, v)").dataflow.nodes()
                 if isinstance(n, Session))
    assert keyed.gap_micros == 10_000_000 and len(keyed.partition) == 2
    assert next(n for n in strategy("SELECT * FROM SESSION(visits, ts, INTERVAL '1.5' SECOND)").dataflow.nodes()
                if isinstance(n, Session)).gap_micros == 1_500_000
    # The same window functions written by hand are not a SESSION: recomputed, with the reason.
    manual = strategy("SELECT k, lag(ts) OVER (PARTITION BY k ORDER BY ts) AS prev FROM ev")
    assert manual.label == "recompute" or not any(isinstance(n, Session) for n in manual.dataflow.nodes())
    # `x.*` over a subquery is its columns.
    assert strategy("SELECT * FROM (SELECT k, v FROM ev WHERE v > 1) AS x").label == "incremental"
