"""Temporal filters (`WHERE ts > now() - INTERVAL ...`) planned as a Temporal node: which
conditions become its bounds, where it sits, and which uses of the clock stay a recomputation.
Their answers as time passes are checked end to end in tests/test_e2e_temporal.py."""

from __future__ import annotations

import pytest

from streamdb.planner import dataflow as D
from tests.test_dataflow_rewrites import strategy

HOUR = 3_600_000_000


def temporal(sql: str) -> D.Temporal:
    s = strategy(sql)
    assert s.dataflow is not None, s.reason
    (node,) = [n for n in s.dataflow.nodes() if isinstance(n, D.Temporal)]
    return node


@pytest.mark.parametrize(("condition", "offset", "starts"), [
    # now() < date_time + 1 h: shown until then
    ("date_time > now() - INTERVAL '1 hour'", HOUR, False),
    ("date_time >= now() - INTERVAL '1 hour'", HOUR + 1, False),
    ("now() - INTERVAL '1 hour' < date_time", HOUR, False),
    ("date_time + INTERVAL '1 hour' > CURRENT_TIMESTAMP", 0, False),
    # now() >= date_time: shown from then on (rows of the future wait)
    ("date_time <= now()", 0, True),
    ("date_time < now()", 1, True),
    ("CURRENT_TIMESTAMP >= date_time", 0, True),
    ("date_time <= now() + INTERVAL '2 minutes'", -120_000_000, True),
    ("date_time > now() - INTERVAL '1 day'", 24 * HOUR, False),
])
def test_comparisons_with_now_become_bounds(condition: str, offset: int, starts: bool) -> None:
    node = temporal(f"SELECT auction, price FROM bid WHERE {condition}")
    (bound,) = node.bounds
    assert (bound.offset_micros, bound.starts) == (offset, starts)
    # the interval written on the column's side stays in its expression
    assert bound.expr.sql().count("INTERVAL") == (1 if "+ INTERVAL '1 hour' >" in condition else 0)


def test_a_window_of_time_has_both_bounds_in_one_node_after_the_other_conditions() -> None:
    node = temporal("SELECT count(*) FROM bid WHERE date_time > now() - INTERVAL '5 minutes' "
                    "AND date_time <= now() AND price > 10")
    assert sorted(b.starts for b in node.bounds) == [False, True]
    below = node.input
    while isinstance(below, D.Map):  # the columns the filter's state keeps (prune_columns)
        below = below.input
    assert isinstance(below, D.Filter) and "10" in below.predicate.sql()
    df = strategy("SELECT count(*) FROM bid WHERE date_time > now() - INTERVAL '5 minutes'").dataflow
    assert df is not None and df.depth() == 2  # the filter's layer, then the aggregate's
    assert any(isinstance(n, D.Reduce) for n in df.nodes())


def test_explain_says_what_the_filter_keeps() -> None:
    s = strategy("SELECT auction FROM bid WHERE date_time > now() - INTERVAL '10 seconds'")
    text = "\n".join(s.explain())
    assert "strategy: incremental" in text
    assert "Temporal filter now() < " in text and "+ 10 s" in text


@pytest.mark.parametrize("sql", [
    "SELECT auction, now() FROM bid",  # the clock in the select list
    "SELECT auction FROM bid WHERE date_time > now() - INTERVAL '1 hour' OR price > 5",  # under OR
    "SELECT auction FROM bid WHERE date_time::date = CURRENT_DATE",  # a date, not an instant
    "SELECT auction FROM bid WHERE price > extract(epoch FROM now())",  # not a timestamp
    "SELECT auction FROM bid WHERE date_time > now() - INTERVAL '1 month'",  # not a fixed length
    "SELECT auction, count(*) FROM bid GROUP BY auction HAVING max(date_time) > now() - INTERVAL '1 hour'",
])
def test_other_uses_of_the_clock_stay_a_recomputation(sql: str) -> None:
    s = strategy(sql)
    assert s.dataflow is None
    assert s.reason is not None and "reads the clock" in s.reason


def test_the_clock_in_a_subquery_filter_is_a_temporal_filter_there() -> None:
    node = temporal("SELECT a.id FROM auction a WHERE a.id IN "
                    "(SELECT auction FROM bid WHERE date_time > now() - INTERVAL '1 minute')")
    assert not node.bounds[0].starts


def test_a_bound_on_one_side_of_a_join_moves_onto_that_side() -> None:
    """The join's state then holds that side's rows of the window only."""
    s = strategy("SELECT b.price, a.item_name FROM bid b JOIN auction a ON a.id = b.auction "
                 "WHERE b.date_time > now() - INTERVAL '10 minutes' AND a.category = 3")
    assert s.dataflow is not None, s.reason
    (join,) = [n for n in s.dataflow.nodes() if isinstance(n, D.Join)]
    (node,) = [n for n in s.dataflow.nodes() if isinstance(n, D.Temporal)]
    below = join.left
    while isinstance(below, (D.Map, D.Filter)):
        below = below.input
    assert below is node and s.dataflow.depth() == 2
    # on a left join's nullable side it stays above: a row padded with NULLs does not pass it,
    # and below the join that row would be padded instead of dropped
    s = strategy("SELECT a.item_name, b.price FROM auction a LEFT JOIN bid b ON a.id = b.auction "
                 "WHERE b.date_time > now() - INTERVAL '10 minutes'")
    assert s.dataflow is not None
    (node,) = [n for n in s.dataflow.nodes() if isinstance(n, D.Temporal)]
    below = node.input
    while isinstance(below, (D.Map, D.Filter)):
        below = below.input
    assert isinstance(below, D.Join) and below.kind == "left"
