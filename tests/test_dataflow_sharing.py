"""Common subplans in a view's dataflow (planner/dataflow.py `share_common_subplans`), without a
server: a stateful operator written twice in a query is planned once, and operators that differ
in anything but column names stay apart. The end-to-end check (the view's rows against a batch
run of its query) is in tests/test_e2e_views.py."""

from __future__ import annotations

import pytest

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.planner import dataflow as D
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.query import plan_query
from streamdb.sql.parser import parse_one

BID = RelationDef(id=3, name="bid", kind="stream",
                  columns=(ColumnDef("auction", T.BIGINT), ColumnDef("price", T.BIGINT),
                           ColumnDef("date_time", T.TIMESTAMPTZ)))
CATALOG = CatalogSnapshot(1, {"bid": BID})
CTX = PlanContext(catalog=CATALOG, session=SessionInfo(user="streamdb", database="streamdb"))

# Nexmark q5's shape: the count per auction and window, read twice.
Q5 = """
SELECT a.auction, a.num FROM
  (SELECT auction, count(*) AS num, window_start AS starttime
   FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY auction, window_start) AS a
JOIN
  (SELECT max(c.num) AS maxn, c.starttime_c FROM
     (SELECT count(*) AS num, window_start AS starttime_c
      FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY auction, window_start) AS c
   GROUP BY c.starttime_c) AS m
ON a.starttime = m.starttime_c AND a.num >= m.maxn
"""


def strategy(sql: str) -> D.ViewStrategy:
    q = plan_query(parse_one(sql), CTX)
    return D.view_strategy(q.resolved_sql, q.inputs, CATALOG, tuple(c.name for c in q.columns))


def reduces(df: D.Dataflow) -> list[D.Reduce]:
    return [n for n in df.stateful() if isinstance(n, D.Reduce)]


def test_the_same_aggregate_read_twice_is_one_operator() -> None:
    df = strategy(Q5).dataflow
    assert df is not None
    # count per (auction, window) once, max per window once; before: three Reduces
    assert [(len(r.group), [a.fn for a in r.aggs]) for r in reduces(df)] == [(2, ["count_star"]), (1, ["max"])]
    assert len(df.stateful()) == 3  # and the join
    assert df.depth() == 3
    text = "\n".join(df.explain())
    assert text.count("count_star(*)") == 2
    assert "(the same operator as above: computed once)" in text


@pytest.mark.parametrize("right", [
    "SELECT auction, count(*) AS n FROM bid WHERE price > 10 GROUP BY auction",  # another filter below
    "SELECT auction, sum(price) AS n FROM bid GROUP BY auction",  # another aggregate
    "SELECT price AS auction, count(*) AS n FROM bid GROUP BY price",  # another key
])
def test_operators_that_differ_stay_apart(right: str) -> None:
    df = strategy(f"SELECT x.auction, x.n, y.n FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction) x "
                  f"JOIN ({right}) y ON x.auction = y.auction").dataflow
    assert df is not None
    assert len(reduces(df)) == 2


def test_a_self_join_of_one_aggregate_shares_it() -> None:
    df = strategy("SELECT x.auction, y.a2 FROM "
                  "(SELECT auction, count(*) AS n FROM bid GROUP BY auction) x JOIN "
                  "(SELECT auction AS a2, count(*) AS n2 FROM bid GROUP BY auction) y "
                  "ON x.n = y.n2").dataflow
    assert df is not None
    assert len(reduces(df)) == 1
    join = next(n for n in df.stateful() if isinstance(n, D.Join))
    below = []
    for n in (join.left, join.right):
        while isinstance(n, D.Map):
            n = n.input
        below.append(n)
    assert below[0] is below[1]
