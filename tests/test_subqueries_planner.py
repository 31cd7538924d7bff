"""Subqueries planned as joins (planner/subqueries.py): which shapes are incremental, what
they become, and why the others are recomputed. Their answers are checked end to end against
recomputation in tests/test_e2e_views.py (semi_*, anti_*, not_in_* views)."""

from __future__ import annotations

import pytest

from streamdb.planner import dataflow as D
from tests.test_dataflow_rewrites import strategy


def joins(df: D.Dataflow) -> list[D.Join]:
    return [n for n in df.stateful() if isinstance(n, D.Join)]


@pytest.mark.parametrize("sql", [
    "SELECT b.auction, b.price FROM bid b WHERE b.auction IN (SELECT id FROM auction WHERE category = 10)",
    "SELECT b.auction FROM bid b WHERE b.auction = ANY (SELECT id FROM auction)",
    "SELECT auction FROM bid WHERE (auction, price) IN (SELECT id, seller FROM auction)",
    "SELECT * FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE a.id = b.auction AND a.category = 10)",
    # the equality written the other way round, and the subquery's own join
    "SELECT b.price FROM bid b WHERE EXISTS (SELECT a.item_name FROM auction a JOIN person p ON p.id = a.seller "
    "WHERE b.auction = a.id AND p.state = 'OR')",
    # IN over an aggregate: its result rows, made distinct
    "SELECT id FROM auction WHERE seller IN (SELECT max(price) FROM bid GROUP BY auction)",
])
def test_in_and_exists_are_an_inner_join_with_distinct_rows(sql: str) -> None:
    df = strategy(sql).dataflow
    assert df is not None, strategy(sql).reason
    join = joins(df)[-1]
    assert join.kind == "inner" and len(join.left_keys) == (2 if "(auction, price)" in sql else 1)
    below = join.right
    assert isinstance(below, D.Reduce) and not below.aggs  # DISTINCT: one match per row at most
    assert not any(isinstance(n, D.Recompute) for n in df.nodes())


def test_an_uncorrelated_exists_joins_on_a_constant() -> None:
    df = strategy("SELECT auction FROM bid WHERE EXISTS (SELECT 1 FROM auction WHERE category = 3)").dataflow
    assert df is not None
    (join,) = joins(df)
    assert join.kind == "inner" and [k.sql() for k in join.left_keys] == ["1"]


def test_not_exists_is_a_left_join_kept_where_nothing_matched() -> None:
    df = strategy("SELECT * FROM bid WHERE NOT EXISTS (SELECT 1 FROM auction WHERE auction.id = bid.auction)").dataflow
    assert df is not None
    (join,) = joins(df)
    assert join.kind == "left"
    above = [n for n in df.nodes() if isinstance(n, D.Filter) and n.input is join]
    assert len(above) == 1 and above[0].predicate.sql().endswith(" IS NULL")


@pytest.mark.parametrize(("sql", "key"), [
    ("SELECT auction FROM bid WHERE auction NOT IN (SELECT seller FROM auction)", "1"),
    # correlated: the subquery's rows are those of the outer row's key
    ("SELECT auction FROM bid b WHERE auction NOT IN (SELECT id FROM auction a WHERE a.seller = b.price)", "c1"),
])
def test_not_in_keeps_sqls_three_valued_answer(sql: str, key: str) -> None:
    df = strategy(sql).dataflow
    assert df is not None
    # whether the subquery has rows, whether it has a NULL (by a constant or the correlated key),
    # and the match (by that key and x)
    assert [j.kind for j in joins(df)] == ["left", "left", "left"]
    assert [k.sql() for j in joins(df)[:2] for k in j.left_keys] == [key, key]
    assert len(joins(df)[2].left_keys) == 2
    top = next(n for n in df.nodes() if isinstance(n, D.Filter) and n.input is joins(df)[-1])
    # kept where x IN (q) is false: not where it is unknown (NULL)
    assert top.predicate.sql().startswith("NOT CASE WHEN NOT ")


def test_plain_conditions_filter_before_the_semi_join() -> None:
    df = strategy("SELECT b.auction FROM bid b WHERE b.price > 5 AND b.auction IN (SELECT id FROM auction)").dataflow
    assert df is not None
    (join,) = joins(df)
    left = join.left
    while isinstance(left, D.Map):
        left = left.input
    assert isinstance(left, D.Filter) and "> 5" in left.predicate.sql()


@pytest.mark.parametrize(("sql", "reason"), [
    ("SELECT auction FROM bid b WHERE price > 5 OR auction IN (SELECT id FROM auction a WHERE a.seller > b.price)",
     "a correlated subquery condition other than an equality"),
    ("SELECT auction FROM bid b WHERE price > 5 OR (auction, price) IN (SELECT id, seller FROM auction)",
     "IN with several columns inside an expression"),
    ("SELECT auction FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE a.seller <> b.price)",
     "a correlated subquery condition other than an equality or a comparison"),
    ("SELECT auction FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE a.seller > b.price AND a.id < b.auction)",
     "a correlated subquery with several comparisons"),
    ("SELECT auction FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE a.id = b.auction + a.seller)",
     "a correlated subquery condition over both sides of a comparison"),
    ("SELECT auction FROM bid b WHERE auction NOT IN (SELECT id FROM auction a WHERE a.seller < b.price)",
     "a correlated subquery condition other than an equality"),
    ("SELECT a.id, (SELECT max(price) FROM bid b WHERE b.auction = a.id AND b.price < a.seller) AS m FROM auction a",
     "a correlated subquery condition other than an equality"),
    ("SELECT auction FROM bid WHERE (auction, price) NOT IN (SELECT id, seller FROM auction)",
     "NOT IN with several columns"),
    ("SELECT auction FROM bid WHERE price / 2.0 IN (SELECT id FROM auction)",
     "a subquery compared with a column of another type"),
    ("SELECT auction FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE a.id = b.auction LIMIT 1)",
     "EXISTS over a subquery with GROUP BY, DISTINCT, ORDER BY or LIMIT"),
    # over the groups, a correlation reads only GROUP BY columns
    ("SELECT b.auction, count(*) AS n FROM bid b GROUP BY b.auction "
     "HAVING count(*) > (SELECT count(*) FROM auction a WHERE a.seller = max(b.price))",
     "from outside the query"),
    ("SELECT b.auction + 1 AS a1, count(*) AS n, (SELECT max(a.seller) FROM auction a WHERE a.id = b.auction + 1) "
     "AS m FROM bid b GROUP BY b.auction + 1",
     "from outside the query"),
    ("SELECT auction FROM bid WHERE price > (SELECT seller FROM auction WHERE id = 1)",
     "a scalar subquery that is not an aggregate (it could return several rows)"),
    ("SELECT a.id, (SELECT count(*) + 1 FROM bid b WHERE b.auction = a.id) AS n FROM auction a",
     "a correlated scalar subquery other than one aggregate call"),
    ("SELECT a.id FROM auction a WHERE a.seller > (SELECT max(price) FROM bid b WHERE b.auction = a.id GROUP BY url)",
     "a scalar subquery with GROUP BY, DISTINCT, ORDER BY or LIMIT"),
])
def test_other_subqueries_are_recomputed_and_say_why(sql: str, reason: str) -> None:
    out = strategy(sql)
    assert out.dataflow is None
    assert reason in (out.reason or "")


def test_an_uncorrelated_scalar_subquery_is_a_left_join_on_a_constant() -> None:
    df = strategy("SELECT auction, price FROM bid WHERE price > (SELECT avg(price) FROM bid)").dataflow
    assert df is not None
    (join,) = joins(df)
    assert join.kind == "left" and [k.sql() for k in join.left_keys] == ["1"]
    reduce = next(n for n in df.stateful() if isinstance(n, D.Reduce))
    assert reduce.global_ and [a.fn for a in reduce.aggs] == ["avg"]  # one row, even over no bids


def test_correlated_scalar_subqueries_join_their_grouped_aggregate_and_count_reads_0() -> None:
    df = strategy("SELECT a.id, (SELECT max(price) FROM bid b WHERE b.auction = a.id) AS top, "
                  "(SELECT count(*) FROM bid b WHERE b.auction = a.id) AS n FROM auction a").dataflow
    assert df is not None
    assert [j.kind for j in joins(df)] == ["left", "left"]
    assert [(len(r.group), [a.fn for a in r.aggs]) for r in df.stateful() if isinstance(r, D.Reduce)] == \
        [(1, ["max"]), (1, ["count_star"])]
    top = df.root
    assert isinstance(top, D.Map) and top.exprs[-1].sql().startswith("COALESCE(")


def test_a_correlated_in_is_an_exists_with_the_compared_columns_as_keys() -> None:
    df = strategy("SELECT auction FROM bid b WHERE auction IN (SELECT id FROM auction a WHERE a.seller = b.price)").dataflow
    assert df is not None
    (join,) = joins(df)
    assert join.kind == "inner" and len(join.left_keys) == 2  # seller = price, id = auction
    assert isinstance(join.right, D.Reduce) and not join.right.aggs


@pytest.mark.parametrize(("sql", "fn", "kind"), [
    ("SELECT auction FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE a.id = b.auction AND a.seller > b.price)",
     "max", "inner"),
    ("SELECT auction FROM bid b WHERE EXISTS (SELECT 1 FROM auction a WHERE b.price >= a.seller AND a.id = b.auction)",
     "min", "inner"),
    ("SELECT auction FROM bid b WHERE NOT EXISTS (SELECT 1 FROM auction a WHERE a.seller <= b.price)", "min", "left"),
])
def test_exists_with_one_comparison_joins_the_keys_max_or_min(sql: str, fn: str, kind: str) -> None:
    """Some row passes `inner > outer` iff the key's max does: one row per key, so each outer row
    meets at most one and keeps its multiplicity."""
    df = strategy(sql).dataflow
    assert df is not None
    (join,) = joins(df)
    assert join.kind == kind
    (reduce,) = [n for n in df.stateful() if isinstance(n, D.Reduce)]
    assert [a.fn for a in reduce.aggs] == [fn]
    text = "\n".join(df.explain())
    assert ("NOT COALESCE(" in text) == (kind == "left")


@pytest.mark.parametrize("sql", [
    "SELECT auction FROM bid b WHERE price > 5 OR auction IN (SELECT id FROM auction)",
    "SELECT auction FROM bid b WHERE price > 5 OR NOT EXISTS (SELECT 1 FROM auction a WHERE a.id = b.auction)",
    "SELECT a.id, EXISTS (SELECT 1 FROM bid b WHERE b.auction = a.id) AS has_bids, "
    "a.seller IN (SELECT auction FROM bid) AS sold FROM auction a",
])
def test_tests_inside_expressions_are_values_of_left_joins(sql: str) -> None:
    """Under OR, or in the select list, a test is a value: EXISTS a left join's marker, IN its
    three-valued CASE over the match, whether the subquery has rows and whether it has a NULL."""
    df = strategy(sql).dataflow
    assert df is not None, strategy(sql).reason
    assert {j.kind for j in joins(df)} == {"left"}


@pytest.mark.parametrize(("sql", "keys"), [
    # uncorrelated: every group on one constant key
    ("SELECT auction, sum(price) AS s FROM bid GROUP BY auction HAVING sum(price) > (SELECT avg(price) FROM bid)", 1),
    ("SELECT auction, count(*) * 100 / (SELECT count(*) FROM bid) AS pct FROM bid GROUP BY auction", 1),
    ("SELECT count(*) AS n FROM bid HAVING count(*) > (SELECT count(*) FROM auction)", 1),
    # correlated by a GROUP BY column: the subquery's aggregate per key, joined by it
    ("SELECT b.auction, count(*) AS n, (SELECT max(a.seller) FROM auction a WHERE a.id = b.auction) AS s "
     "FROM bid b GROUP BY b.auction", 1),
    ("SELECT auction, sum(price) AS s, EXISTS (SELECT 1 FROM auction a WHERE a.id = bid.auction) AS e "
     "FROM bid GROUP BY auction", 1),
])
def test_subqueries_over_groups_join_the_groups(sql: str, keys: int) -> None:
    """A subquery read as a value in a grouped query's select list or HAVING is joined to the
    Reduce's rows (one per group), not to the input's rows."""
    df = strategy(sql).dataflow
    assert df is not None, strategy(sql).reason
    (join,) = joins(df)
    assert join.kind == "left" and len(join.left_keys) == keys
    assert isinstance(join.left, D.Reduce) and not isinstance(join.right, D.Scan)
    assert not any(isinstance(n, D.Recompute) for n in df.nodes())
