"""planner/numeric_scale.py without a server: which result columns get a fixed scale. The
end-to-end check against PostgreSQL's text is tests/test_e2e_numeric.py."""

from __future__ import annotations

import pytest

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, ColumnDef, RelationDef
from streamdb.planner.context import PlanContext, SessionInfo
from streamdb.planner.numeric_scale import with_fixed_scales
from streamdb.planner.query import plan_query
from streamdb.sql.parser import parse_one

T1 = RelationDef(id=3, name="t", kind="stream",
                 columns=(ColumnDef("price", T.BIGINT), ColumnDef("x", T.numeric(10, 2)), ColumnDef("n", T.NUMERIC)))
CTX = PlanContext(catalog=CatalogSnapshot(1, {"t": T1}), session=SessionInfo("streamdb", "streamdb"))


@pytest.mark.parametrize(("expr", "scale"), [
    ("0.908 * price", 3), ("x * 2", 2), ("x * 1.5", 3), ("x + 1.005", 3), ("-x", 2), ("round(n, 1)", 1),
    ("round(x)", 0), ("x::numeric(12, 4) + 1", 4), ("coalesce(x, 0.00)", 2), ("sum(x)", 2), ("max(0.10 * price)", 2),
    # avg of integers and numerics: 16 decimals, as ad hoc (typing.exact_numeric_avg)
    ("avg(x)", 16), ("avg(price)", 16), ("avg(n)", 16), ("avg(x) * 2", 16), ("avg(price::double precision)", None),
    # not fixed: kept unconstrained
    ("n * 2", None), ("avg(DISTINCT x)", None), ("x / 3", None), ("CASE WHEN price > 1 THEN x ELSE 1.5 END", None),
    ("coalesce(x, 0)", None), ("sum(DISTINCT x)", None),
])
def test_fixed_scales(expr: str, scale: int | None) -> None:
    group = " GROUP BY price, x, n" if not any(f in expr for f in ("sum(", "max(", "avg(")) else ""
    q = plan_query(parse_one(f"SELECT {expr} AS c FROM t{group}"), CTX)
    (t,) = with_fixed_scales([c.type for c in q.columns], q.resolved_sql, q.inputs)
    if q.columns[0].type is not T.NUMERIC:  # (x / 3 is not numeric here)
        assert scale is None
        return
    assert t.precision_scale == (None if scale is None else (38, scale))


@pytest.mark.parametrize(("expr", "scale"), [
    ("array_agg(x)", 2), ("array_agg(x ORDER BY price)", 2), ("array_agg(DISTINCT x)", 2),
    ("array_agg(x) FILTER (WHERE price > 0)", 2), ("array_agg(0.000000000000000000001)", 21),
    ("array_agg(x * 1.5)", 3),
    ("array_agg(n)", None), ("array_agg(x / 3)", None),  # not fixed: numeric[] stored at scale 10
])
def test_array_agg_of_numerics_keeps_the_elements_scale(expr: str, scale: int | None) -> None:
    """array_agg of a numeric with a fixed scale: its elements are stored at that scale (before,
    at 10 decimals, so more decimals failed the view with XX000 'Rescaling Decimal value')."""
    q = plan_query(parse_one(f"SELECT {expr} AS c FROM t"), CTX)
    (t,) = with_fixed_scales([c.type for c in q.columns], q.resolved_sql, q.inputs)
    assert isinstance(t, T.ArraySqlType) and t.element is not None
    assert t.element.precision_scale == (None if scale is None else (38, scale))
    # The catalog writes the type as it spells it: the element keeps its scale across a restart.
    again = T.type_from_name(t.spelled())
    assert again is not None and again.arrow() == t.arrow()
