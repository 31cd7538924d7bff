"""GROUPING SETS, ROLLUP and CUBE planned as one Reduce per grouping set in a union: the sets
PostgreSQL forms from GROUP BY's items, the NULL keys and grouping() constants of each branch,
and the shapes that stay a recomputation. Their answers after changes are checked against
PostgreSQL end to end in tests/test_e2e_views.py (`test_grouping_sets_and_set_returning_views_match_postgresql`)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from streamdb.planner import dataflow as D
from streamdb.sql.parser import parse_one
from tests.test_dataflow_rewrites import strategy


def sets(group_by: str) -> list[list[str]]:
    select = parse_one(f"SELECT 1 FROM t GROUP BY {group_by}")
    assert isinstance(select, exp.Select)
    return [[m.sql() for m in members] for members in D.grouping_sets(list(select.args["group"].expressions))]


@pytest.mark.parametrize(("group_by", "expected"), [
    ("a, b", [["a", "b"]]),
    ("ROLLUP (a, b)", [["a", "b"], ["a"], []]),
    ("ROLLUP ((a, b), c)", [["a", "b", "c"], ["a", "b"], []]),
    ("CUBE (a, b)", [["a", "b"], ["a"], ["b"], []]),
    ("GROUPING SETS ((a, b), (a), a, ())", [["a", "b"], ["a"], ["a"], []]),  # a set twice stays twice
    ("a, ROLLUP (b)", [["a", "b"], ["a"]]),
    ("a, ROLLUP (a, b)", [["a", "b"], ["a"], ["a"]]),  # a key once within a set
    ("GROUPING SETS (a, ROLLUP (b, c))", [["a"], ["b", "c"], ["b"], []]),
    ("CUBE (a), GROUPING SETS (b, c)", [["a", "b"], ["a", "c"], ["b"], ["c"]]),
])
def test_group_by_items_expand_into_postgresql_grouping_sets(group_by: str, expected: list[list[str]]) -> None:
    assert sets(group_by) == expected


def test_too_many_grouping_sets_are_refused_before_they_are_formed() -> None:
    with pytest.raises(D.Unsupported, match="CUBE of more than 6"):
        sets("CUBE (a, b, c, d, e, f, g)")
    with pytest.raises(D.Unsupported, match="more than 64 grouping sets"):
        sets("CUBE (a, b, c), CUBE (d, e, f), ROLLUP (g)")


def test_rollup_is_one_reduce_per_set_with_the_other_keys_null_and_grouping_constant() -> None:
    s = strategy("SELECT auction, url, grouping(auction, url) AS g, count(*) AS n, max(price) AS hi "
                 "FROM bid GROUP BY ROLLUP (auction, url)")
    assert s.dataflow is not None, s.reason
    root = s.dataflow.root
    assert isinstance(root, D.UnionAll) and len(root.branches) == 3
    reduces = [b.input for b in root.branches]
    assert all(isinstance(b, D.Map) for b in root.branches) and all(isinstance(r, D.Reduce) for r in reduces)
    assert [len(r.group) for r in reduces] == [2, 1, 0]
    assert [r.global_ for r in reduces] == [False, False, True]  # the empty set: a row over no input too
    # each branch: key columns or typed NULLs, then grouping()'s bits (auction the high bit)
    shown = [[e.sql() for e in b.exprs[:3]] for b in root.branches]
    assert shown[1][1:] == ["CAST(NULL AS TEXT)", "1"]
    assert shown[2] == ["CAST(NULL AS BIGINT)", "CAST(NULL AS TEXT)", "3"]
    assert shown[0][2] == "0"
    assert all(len(b.columns) == 5 for b in root.branches) and len({b.columns for b in root.branches}) == 1


def test_having_filters_each_sets_groups_and_expressions_read_the_null_keys() -> None:
    s = strategy("SELECT auction + 1 AS a1, url, sum(price) AS s FROM bid "
                 "GROUP BY auction, CUBE (url) HAVING sum(price) > 10 OR grouping(url) = 1")
    assert s.dataflow is not None, s.reason
    root = s.dataflow.root
    assert isinstance(root, D.UnionAll) and len(root.branches) == 2
    filters = [b.input for b in root.branches]
    assert all(isinstance(f, D.Filter) and isinstance(f.input, D.Reduce) for f in filters)
    assert [f.predicate.sql().endswith(f"OR {bit} = 1") for f, bit in zip(filters, (0, 1), strict=True)] == [True, True]
    assert root.branches[1].exprs[1].sql() == "CAST(NULL AS TEXT)"


def test_a_join_under_rollup_is_one_operator_and_distinct_reduces_the_union() -> None:
    s = strategy("SELECT p.state, count(*) AS n FROM bid b JOIN person p ON b.auction = p.id GROUP BY ROLLUP (p.state)")
    assert s.dataflow is not None, s.reason
    assert len([n for n in s.dataflow.stateful() if isinstance(n, D.Join)]) == 1
    assert "the same operator as above" in "\n".join(s.explain())
    s = strategy("SELECT DISTINCT count(*) AS n FROM bid GROUP BY GROUPING SETS ((auction), (url), ())")
    assert s.dataflow is not None, s.reason
    assert isinstance(s.dataflow.root, D.Reduce) and isinstance(s.dataflow.root.input, D.UnionAll)


@pytest.mark.parametrize(("sql", "why"), [
    ("SELECT auction, count(*) AS n, row_number() OVER (ORDER BY auction) AS r FROM bid GROUP BY ROLLUP (auction)",
     "GROUPING SETS with window functions"),
    ("SELECT auction, string_agg(url, ',') AS u FROM bid GROUP BY ROLLUP (auction)",
     "GROUPING SETS with aggregates without an incremental form"),
    ("SELECT auction, count(*) AS n FROM bid GROUP BY ROLLUP (auction) ORDER BY n DESC LIMIT 3",
     "GROUPING SETS, CUBE and ROLLUP below the top of the view"),
    ("SELECT a, b, c, d, e, f, g, count(*) AS n FROM (SELECT auction AS a, price AS b, url AS c, auction + 1 AS d, "
     "price + 1 AS e, auction + 2 AS f, price + 2 AS g FROM bid) q GROUP BY CUBE (a, b, c, d, e, f, g)",
     "a CUBE of more than 6 elements"),
])
def test_shapes_without_a_union_of_aggregates_stay_recomputed_and_say_why(sql: str, why: str) -> None:
    s = strategy(sql)
    if s.dataflow is not None:  # recomputed on the pipeline per partition
        assert any(isinstance(n, D.Recompute) and n.why == why for n in s.dataflow.nodes()), s.explain()
    else:
        assert why in (s.reason or ""), s.reason


def test_a_set_returning_select_stays_a_batch_over_its_changes() -> None:
    """A Recompute per row on the pipeline was tried and measured slower than the epoch driver's
    run of the linear query over its inputs' changes (docs/benchmarks.md, "unnest")."""
    for sql in ("SELECT auction, unnest(ARRAY[price, auction]) AS e FROM bid WHERE price > 3",
                "SELECT count(*) AS n FROM (SELECT auction, unnest(ARRAY[price, auction]) AS e FROM bid) q",
                "SELECT DISTINCT unnest(ARRAY[price, auction]) AS e FROM bid"):
        s = strategy(sql)
        assert s.dataflow is None and s.reason == "a set-returning function in the select list", sql
