"""The rewrites of a view's dataflow (planner/dataflow.py), without a server: filters below joins
(`push_filters`), comparisons across a join's sides tested by the join (`fuse_residuals`), rows
narrowed to the columns read above (`prune_columns`), and a stateful operator written twice
planned once (`share_common_subplans`). The end-to-end checks (views
against a batch run of their query, with updates, deletes and kill -9) are in
tests/test_e2e_views.py, whose views have these shapes."""

from __future__ import annotations

import pytest
from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.planner import dataflow as D
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.query import plan_query
from streamdb.sql.parser import parse_one

BID = RelationDef(id=3, name="bid", kind="stream",
                  columns=(ColumnDef("auction", T.BIGINT), ColumnDef("price", T.BIGINT),
                           ColumnDef("date_time", T.TIMESTAMPTZ), ColumnDef("url", T.TEXT)))
AUCTION = RelationDef(id=2, name="auction", kind="stream",
                      columns=(ColumnDef("id", T.BIGINT), ColumnDef("seller", T.BIGINT), ColumnDef("category", T.BIGINT),
                               ColumnDef("item_name", T.TEXT), ColumnDef("description", T.TEXT)))
PERSON = RelationDef(id=1, name="person", kind="table", primary_key=("id",),
                     columns=(ColumnDef("id", T.BIGINT), ColumnDef("name", T.TEXT), ColumnDef("state", T.TEXT),
                              ColumnDef("extra", T.TEXT)))
CATALOG = CatalogSnapshot(1, {r.name: r for r in (BID, AUCTION, PERSON)})
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
    out = D.view_strategy(q.resolved_sql, q.inputs, CATALOG, tuple(c.name for c in q.columns))
    if out.dataflow is not None:
        consistent(out.dataflow)
    return out


def consistent(df: D.Dataflow) -> None:
    """The columns the nodes say they have are the ones their inputs give them."""
    for n in df.nodes():
        if isinstance(n, (D.Filter, D.TopN)):
            assert n.columns == n.input.columns
        elif isinstance(n, D.Join):
            assert n.columns == n.left.columns + n.right.columns
        elif isinstance(n, D.Session):
            assert n.columns[:-2] == n.input.columns
        elif isinstance(n, D.Map):
            assert len(n.columns) == len(n.exprs)
            assert all(c.name in n.input.columns for e in n.exprs for c in e.find_all(exp.Column))
        elif isinstance(n, D.UnionAll):
            assert all(len(b.columns) == len(n.columns) for b in n.branches)


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


def below_join(df: D.Dataflow) -> tuple[D.Node, D.Node]:
    join = next(n for n in df.stateful() if isinstance(n, D.Join))
    return join.left, join.right


def test_filters_of_one_side_go_below_an_inner_join_and_rows_keep_what_is_read() -> None:
    # Nexmark q3's shape
    df = strategy("SELECT p.name, a.id FROM auction a JOIN person p ON a.seller = p.id "
                  "WHERE a.category = 10 AND (p.state = 'OR' OR p.state = 'CA') AND a.id + p.id > 3").dataflow
    assert df is not None
    left, right = below_join(df)
    assert isinstance(left, D.Map) and len(left.columns) == 2  # id, seller (category is read below)
    assert isinstance(left.input, D.Filter) and left.input.predicate.sql() == "c2 = 10"
    assert isinstance(right, D.Map) and len(right.columns) == 2  # id, name
    assert isinstance(right.input, D.Filter)
    pred = right.input.predicate.sql()
    assert pred.startswith("(") and pred.endswith(" = 'CA')") and " = 'OR' OR " in pred  # its parentheses kept
    above = [n for n in df.nodes() if isinstance(n, D.Filter) and isinstance(n.input, D.Join)]
    assert [" + " in n.predicate.sql() for n in above] == [True]  # over both sides: stays above


@pytest.mark.parametrize(("kind", "left_filtered", "right_filtered"), [
    ("LEFT", True, False), ("RIGHT", False, True), ("FULL", False, False)])
def test_outer_joins_take_filters_on_their_preserved_side_only(kind: str, left_filtered: bool,
                                                              right_filtered: bool) -> None:
    df = strategy(f"SELECT a.id, p.name FROM auction a {kind} JOIN person p ON a.seller = p.id "
                  "WHERE a.category = 10 AND p.state = 'OR'").dataflow
    assert df is not None
    left, right = below_join(df)
    assert (isinstance(left, D.Map) and isinstance(left.input, D.Filter)) == left_filtered
    assert (isinstance(right, D.Map) and isinstance(right.input, D.Filter)) == right_filtered
    above = [n for n in df.nodes() if isinstance(n, D.Filter) and isinstance(n.input, D.Join)]
    assert len(above) == 1 if not (left_filtered and right_filtered) else not above


def test_rows_stored_by_a_join_keep_the_columns_read_above_it() -> None:
    # Nexmark q4's shape: the residual condition and the aggregates above read 3 + 3 columns
    df = strategy("SELECT a.category, max(b.price) FROM auction a, bid b "
                  "WHERE a.id = b.auction AND b.date_time > '2024-01-01' AND a.seller < b.price "
                  "GROUP BY a.id, a.category").dataflow
    assert df is not None
    left, right = below_join(df)
    assert [len(left.columns), len(right.columns)] == [3, 2]  # id, seller, category | auction, price
    assert isinstance(right, D.Map) and isinstance(right.input, D.Filter)


def test_a_filter_over_a_narrowed_join_has_its_columns() -> None:
    df = strategy("SELECT a.category, count(*) AS n FROM auction a JOIN person p ON a.seller = p.id "
                  "WHERE p.id > 1 AND (p.name = 'x' OR a.category IS NULL) GROUP BY a.category").dataflow
    assert df is not None
    above = next(n for n in df.nodes() if isinstance(n, D.Filter) and isinstance(n.input, D.Join))
    assert len(above.columns) == 4  # seller, category | id, name


def test_a_view_of_a_whole_join_keeps_every_column_but_rowtime() -> None:
    df = strategy("SELECT * FROM auction a JOIN person p ON a.seller = p.id").dataflow
    assert df is not None
    left, right = below_join(df)
    assert isinstance(left, D.Map) and isinstance(left.input, D.Scan)
    assert [len(left.columns), len(left.input.columns)] == [5, 6]  # the scan's last one is rowtime
    df = strategy("SELECT a.*, p.*, a.rowtime FROM auction a JOIN person p ON a.seller = p.id").dataflow
    assert df is not None
    assert isinstance(below_join(df)[0], D.Scan)


def joins(df: D.Dataflow) -> list[D.Join]:
    return [n for n in df.stateful() if isinstance(n, D.Join)]


def filters_over_joins(df: D.Dataflow) -> list[D.Filter]:
    return [n for n in df.nodes() if isinstance(n, D.Filter) and isinstance(n.input, D.Join)]


def test_comparisons_across_an_inner_join_are_tested_by_the_join() -> None:
    df = strategy(Q5).dataflow
    assert df is not None
    [join] = joins(df)
    assert join.residual is not None and " >= " in join.residual.sql()
    assert not filters_over_joins(df)
    assert "pairs kept where" in "\n".join(df.explain())
    # every class the operator compares, BETWEEN and a timestamp minus a fixed interval; ON and WHERE alike
    df = strategy("SELECT b.auction FROM bid b JOIN bid c ON b.auction = c.auction AND b.url > c.url "
                  "WHERE b.date_time BETWEEN c.date_time - INTERVAL '10' SECOND AND c.date_time "
                  "AND b.price <> c.price AND b.price < 2.5").dataflow
    assert df is not None
    [join] = joins(df)
    assert join.residual is not None and len(D._conjuncts(join.residual)) == 3
    assert not filters_over_joins(df)
    assert [D.residual_class(c) for c in D._conjuncts(join.residual)] == ["text", "timestamptz", "integer"]


@pytest.mark.parametrize("condition", [
    "b.price > c.price + 1",  # arithmetic other than a timestamp and a fixed interval
    "b.date_time > c.date_time - INTERVAL '1' DAY",  # a day is not a fixed length under time zones
    "upper(b.url) = c.url",  # a function
    "b.price IS DISTINCT FROM c.price",
])
def test_comparisons_the_join_cannot_test_stay_a_filter(condition: str) -> None:
    df = strategy(f"SELECT b.auction FROM bid b JOIN bid c ON b.auction = c.auction WHERE {condition}").dataflow
    assert df is not None
    [join] = joins(df)
    assert join.residual is None
    assert len(filters_over_joins(df)) == 1


def test_outer_joins_keep_comparisons_across_their_sides_above_them() -> None:
    df = strategy("SELECT a.id FROM auction a LEFT JOIN person p ON a.seller = p.id WHERE a.category < p.id").dataflow
    assert df is not None
    [join] = joins(df)
    assert join.residual is None and len(filters_over_joins(df)) == 1


def test_a_join_keeps_the_columns_its_comparisons_read() -> None:
    df = strategy("SELECT a.category FROM auction a JOIN bid b ON a.id = b.auction AND b.price > a.seller").dataflow
    assert df is not None
    left, right = below_join(df)
    assert [len(left.columns), len(right.columns)] == [3, 2]  # id, seller, category | auction, price


def test_a_filter_over_a_subquerys_window_functions_is_recomputed_per_partition() -> None:
    """`WHERE price > prev` over `lag(price) OVER (PARTITION BY auction ...)`: the whole query is
    recomputed per auction (the subquery's own WHERE below it), not over the whole input."""
    s = strategy("SELECT auction, price FROM (SELECT auction, price, lag(price) OVER (PARTITION BY auction "
                 "ORDER BY date_time) AS prev FROM bid WHERE price > 1) q WHERE price > prev")
    assert s.dataflow is not None, s.reason
    root = s.dataflow.root
    assert isinstance(root, D.Recompute) and [p.sql() for p in root.partition] == ["c0"]
    assert isinstance(root.input, D.Filter) and "> 1" in root.input.predicate.sql()
    inner = root.query.find(exp.Subquery)
    assert inner is not None and root.query.args["where"].this.sql() == "c6 > c7"  # after the windows
    assert set(root.derived) == {a.alias for a in inner.this.expressions}
    for sql in ("SELECT auction FROM (SELECT auction, lag(price) OVER (ORDER BY date_time) AS prev FROM bid) q",
                "SELECT count(*) FROM (SELECT auction, lag(price) OVER (PARTITION BY auction ORDER BY date_time) "
                "AS prev FROM bid) q WHERE prev > 3",
                "SELECT a FROM (SELECT auction AS a, rank() OVER (PARTITION BY auction ORDER BY price) AS r, "
                "lag(price) OVER (PARTITION BY url ORDER BY price) AS p FROM bid) q WHERE r = p"):
        assert strategy(sql).dataflow is None, sql  # one partition for every window, no aggregate over them


def test_session_windows_stay_the_session_operator() -> None:
    """SESSION(...) is a subquery of window functions to the ad hoc engines; in a view it stays
    the Session operator, not a recomputation per partition."""
    s = strategy("SELECT * FROM SESSION(bid, date_time, INTERVAL '10' SECOND, auction)")
    assert s.dataflow is not None, s.reason
    assert any(isinstance(n, D.Session) for n in s.dataflow.nodes())
    assert not any(isinstance(n, D.Recompute) for n in s.dataflow.nodes())
