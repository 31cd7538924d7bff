"""The incremental form of a query, where one exists.

A query built only of linear operators (filter, projection, UNION ALL over single
relations) commutes with change: Q(R + dR) = Q(R) + Q(dR). Its delta is the same
query over the inputs' changes, carrying each change's weight through. Other
queries (aggregates, joins, DISTINCT, windows, LIMIT, time-dependent filters) are
maintained by recomputing them on Spark and applying the difference.
"""

from __future__ import annotations

import functools

from sqlglot import exp

from streamdb import types as T
from streamdb.planner.plans import RelationInput
from streamdb.sql.parser import parse_one

WEIGHT = "__weight"

_NONLINEAR_ARGS = ("group", "having", "distinct", "limit", "offset", "joins", "laterals", "with", "qualify",
                   "windows", "connect", "pivots")
_TIME_DEPENDENT = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand)


@functools.lru_cache(maxsize=4096)  # asked for every view at every epoch
def is_time_dependent(resolved_sql: str) -> bool:
    """Whether the query's result changes as time passes (temporal filters such as
    `WHERE ts > now() - INTERVAL '1' HOUR`), so it must be re-evaluated without new input."""
    ast = parse_one(resolved_sql)
    for node in ast.walk():
        if isinstance(node, (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime)):
            return True
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("now", "clock_timestamp"):
            return True
    return False


def _linear_select(select: exp.Select) -> bool:
    if any(select.args.get(a) for a in _NONLINEAR_ARGS):
        return False
    frm = select.args.get("from_") or select.args.get("from")
    if frm is None:
        return False
    source = frm.this
    inner: exp.Select | None = None
    if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select) and source.alias:
        # A linear subquery (such as TUMBLE's, which adds window bounds to each row) stays linear.
        inner = source.this
        if not _linear_select(inner):
            return False
    elif not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        return False
    for node in select.walk():
        if node is select or (inner is not None and (node is source or node.find_ancestor(exp.Subquery) is source)):
            continue
        if isinstance(node, (exp.AggFunc, exp.Window, exp.Subquery, exp.Select, exp.Exists, *_TIME_DEPENDENT)):
            return False
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in ("now", "random", "clock_timestamp"):
            return False
    return True


def _branches(node: exp.Expression) -> list[exp.Select] | None:
    if isinstance(node, exp.Select):
        return [node] if _linear_select(node) else None
    if isinstance(node, exp.Union) and not node.args.get("distinct"):
        if node.args.get("order") or node.args.get("limit") or node.args.get("offset"):
            return None
        left, right = _branches(node.this), _branches(node.expression)
        return left + right if left is not None and right is not None else None
    return None


def delta_name(registered_name: str) -> str:
    return f"{registered_name}_delta"


def _carry_weight(select: exp.Select) -> bool:
    """Read the changes instead of the relation, and carry each change's weight through."""
    frm = select.args.get("from_") or select.args.get("from")
    assert frm is not None  # checked by _linear_select
    source = frm.this
    alias = source.alias_or_name
    if isinstance(source, exp.Subquery):
        if not _carry_weight(source.this):
            return False
    else:
        # The changes are registered beside the full relation, so one Spark session can serve
        # both incremental and recomputed views in the same epoch.
        source.set("this", exp.to_identifier(delta_name(source.name)))
        if not source.args.get("alias"):
            source.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    stars = [i for i, e in enumerate(select.expressions)
             if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))]
    if not stars:
        select.select(exp.alias_(exp.column(WEIGHT, table=exp.to_identifier(alias, quoted=True)), WEIGHT),
                      copy=False)
        return True
    # A star over the changes already carries the weight; it must come last.
    return stars == [len(select.expressions) - 1]


def linear_delta_sql(resolved_sql: str, inputs: tuple[RelationInput, ...] = ()) -> str | None:
    """Spark SQL computing the query's change (columns + __weight) from its inputs' changes, or None."""
    ast = parse_one(resolved_sql)
    if isinstance(ast, exp.Select):
        ast.set("order", None)
    branches = _branches(ast)
    if branches is None:
        return None
    for select in branches:
        if not _carry_weight(select):
            return None
    from streamdb.planner.query import spark_sql_for

    delta_inputs = tuple(RelationInput(delta_name(i.registered_name), i.relation_id, i.system_key, i.mode,
                                       (*i.columns, (WEIGHT, T.BIGINT))) for i in inputs)
    return spark_sql_for(ast, delta_inputs)
