"""Incremental GROUP BY: aggregates maintained from partial aggregates of each epoch's changes.

For `SELECT <group keys and aggregates> FROM <one relation, filtered> [WHERE ...] GROUP BY ...`
the aggregates split into partials that add up (DBSP's linear aggregates over weighted rows):

- count(*) = sum of weights, count(x) = sum of weights where x is not null,
- sum(x) = sum of x * weight (with count(x), since sum of nothing is NULL), avg = sum / count,
- min(x), max(x) and count(DISTINCT x) only when every input is append-only (a retraction
  could remove the minimum, which partials cannot answer; such views are recomputed instead).
  count(DISTINCT x) keeps each group's values seen so far, one stored key per value.

Spark computes each epoch's partials per group from the inputs' changes only
(`IncrementalAggregate.delta_sql`); the runtime adds them to the partials it stores per group
and derives the group's output row. Anything else (HAVING, DISTINCT, expressions over
aggregates, float sums whose rounding would depend on the order of additions, joins) is
maintained by recomputation. See docs/views.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import StreamDBError
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.incremental import WEIGHT, linear_delta_sql
from streamdb.runtime.api import Column

AggregateKind = Literal["count_star", "count", "count_distinct", "sum", "avg", "min", "max"]

_EXACT_SUM_TYPES = (T.SMALLINT, T.INTEGER, T.BIGINT, T.NUMERIC)
_INTEGER_TYPES = (T.SMALLINT, T.INTEGER, T.BIGINT)
_ORDERED_TYPES = (T.SMALLINT, T.INTEGER, T.BIGINT, T.NUMERIC, T.TEXT, T.VARCHAR, T.DATE, T.TIMESTAMP,
                  T.TIMESTAMPTZ, T.BOOLEAN, T.UUID)
_NOT_INCREMENTAL = ("having", "distinct", "limit", "offset", "joins", "laterals", "with", "qualify", "windows",
                    "connect", "pivots")


@dataclass(frozen=True)
class AggregateSpec:
    kind: AggregateKind
    # Positions of this aggregate's partials in a partial row (after the group keys and the
    # weight sum): count/sum/avg -> (non-null count[, sum]); min/max -> (value,); count(*) -> ().
    partials: tuple[int, ...]


@dataclass(frozen=True)
class IncrementalAggregate:
    """How a GROUP BY view is maintained from partial aggregates."""

    # Spark SQL over the inputs' changes: group keys, the sum of weights, then the partials.
    delta_sql: str
    # The rows being aggregated (Spark SQL over the changes): __g<i> group keys, __a<j> the
    # argument of aggregate j, __weight. Views over one input fuse these into one job (fused.py).
    rows_sql: str
    argument_columns: tuple[Column, ...]  # rows_sql's columns, typed (without the weight)
    group_count: int
    partial_columns: tuple[Column, ...]  # every column of delta_sql's result, typed
    aggregates: tuple[AggregateSpec, ...]
    # Each output column: ("group", i) or ("aggregate", j).
    outputs: tuple[tuple[Literal["group", "aggregate"], int], ...]
    global_aggregate: bool  # no GROUP BY: one row even over no input

    def explain(self) -> str:
        return ("incremental aggregate: Spark computes partial aggregates (sum of weights, counts, sums"
                + (", min/max of append-only input" if any(a.kind in ("min", "max") for a in self.aggregates)
                   else "") + ") of each epoch's changes; they are added to stored per-group partials")


def append_only(rel: RelationDef) -> bool:
    """Whether a relation only ever grows (a stream, or a stream derived by CREATE STREAM AS)."""
    return rel.kind == "stream" or (rel.kind == "materialized_view" and dict(rel.extra).get("derived") == "stream")


def _strip_qualifiers(node: exp.Expression) -> str:
    def strip(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and n.args.get("table"):
            return exp.column(n.this.copy())
        return n
    return node.copy().transform(strip).sql(dialect="postgres").lower()


def _aggregate_of(node: exp.Expression) -> tuple[AggregateKind, exp.Expression | None] | None:
    """(kind, argument) for a supported aggregate call, else None."""
    if isinstance(node, exp.Count):
        arg = node.this
        if arg is None or isinstance(arg, exp.Star):
            return "count_star", None
        if isinstance(arg, exp.Distinct):
            return ("count_distinct", arg.expressions[0]) if len(arg.expressions) == 1 else None
        return "count", arg
    kinds: dict[type[exp.Expression], AggregateKind] = {exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min",
                                                         exp.Max: "max"}
    kind = kinds.get(type(node))
    if kind is None or node.args.get("expressions") or isinstance(node.this, exp.Distinct):
        return None
    return kind, node.this


def incremental_aggregate(query: exp.Expression, ctx: PlanContext,
                          output_types: tuple[T.SqlType, ...]) -> IncrementalAggregate | None:
    """The incremental form of an aggregate view's query (as the user wrote it), or None."""
    if not isinstance(query, exp.Select) or any(query.args.get(a) for a in _NOT_INCREMENTAL):
        return None
    group = query.args.get("group")
    if group is None and not any(isinstance(e.unalias(), exp.AggFunc) for e in query.expressions):
        return None
    if group is not None and any(group.args.get(a) for a in ("grouping_sets", "cube", "rollup", "totals")):
        return None
    items = [e.unalias() for e in query.expressions]
    if any(isinstance(e, exp.Star) for e in items):
        return None
    group_exprs: list[exp.Expression] = []
    for g in (group.expressions if group is not None else []):
        if isinstance(g, exp.Literal) and g.is_int:
            index = int(g.this) - 1
            if not 0 <= index < len(items):
                return None
            g = items[index]
        elif isinstance(g, exp.Column) and not g.args.get("table"):
            # GROUP BY an output name (Postgres allows it when no input column has that name:
            # if one has, planning the partials below fails and the view is recomputed).
            for e in query.expressions:
                if isinstance(e, exp.Alias) and e.alias == g.name and not isinstance(e.this, exp.Column):
                    g = e.this
        group_exprs.append(g)
    group_keys = [_strip_qualifiers(g) for g in group_exprs]
    outputs: list[tuple[Literal["group", "aggregate"], int]] = []
    calls: list[tuple[AggregateKind, exp.Expression | None]] = []
    for item in items:
        key = _strip_qualifiers(item)
        if key in group_keys:
            outputs.append(("group", group_keys.index(key)))
            continue
        found = _aggregate_of(item)
        if found is None or (found[1] is not None and found[1].find(exp.AggFunc, exp.Window)):
            return None
        outputs.append(("aggregate", len(calls)))
        calls.append(found)
    if any(n.find(exp.AggFunc, exp.Window, exp.Subquery) for n in group_exprs):
        return None

    # The rows being aggregated, as a linear query: group keys and aggregate arguments.
    projections = [exp.alias_(g.copy(), f"__g{i}") for i, g in enumerate(group_exprs)]
    projections += [exp.alias_(arg.copy(), f"__a{j}") for j, (_, arg) in enumerate(calls) if arg is not None]
    if not projections:
        projections = [exp.alias_(exp.true(), "__t")]
    rows = exp.Select(expressions=projections)
    for part in ("from", "from_", "where"):
        if query.args.get(part) is not None:
            rows.set(part, query.args[part].copy())
    try:
        plan = query_planner.plan_query(rows, ctx)
    except StreamDBError:
        return None
    delta = linear_delta_sql(plan.resolved_sql, plan.inputs)
    if delta is None:
        return None
    if any(k in ("min", "max", "count_distinct") for k, _ in calls):
        catalog: CatalogSnapshot = ctx.catalog
        for inp in plan.inputs:
            rel = catalog.by_id(inp.relation_id) if inp.relation_id is not None else None
            if rel is None or not append_only(rel):
                return None
    types = {c.name: c.type for c in plan.columns}

    def q(name: str) -> str:
        return f"`{name}`"

    select = [q(f"__g{i}") for i in range(len(group_exprs))]
    select.append(f"CAST(sum({q(WEIGHT)}) AS BIGINT) AS `__n`")
    columns = [Column(f"__g{i}", types[f"__g{i}"]) for i in range(len(group_exprs))] + [Column("__n", T.BIGINT)]
    specs: list[AggregateSpec] = []
    for j, (kind, _) in enumerate(calls):
        a = q(f"__a{j}")
        arg_type = types.get(f"__a{j}")
        out_type = output_types[outputs.index(("aggregate", j))]
        start = len(columns)
        if kind == "count_star":
            specs.append(AggregateSpec(kind, ()))
            continue
        if kind in ("min", "max"):
            if arg_type not in _ORDERED_TYPES:
                return None
            select.append(f"{kind}({a}) AS `__p{start}`")
            columns.append(Column(f"__p{start}", arg_type))
            specs.append(AggregateSpec(kind, (start,)))
            continue
        if kind == "count_distinct":
            if arg_type not in _ORDERED_TYPES:
                return None
            # The epoch's distinct values; the runtime counts those not seen before.
            select.append(f"collect_set({a}) AS `__p{start}`")
            columns.append(Column(f"__p{start}", T.array_of(arg_type)))
            specs.append(AggregateSpec(kind, (start,)))
            continue
        select.append(f"CAST(sum(CASE WHEN {a} IS NULL THEN 0 ELSE {q(WEIGHT)} END) AS BIGINT) AS `__p{start}`")
        columns.append(Column(f"__p{start}", T.BIGINT))
        if kind == "count":
            specs.append(AggregateSpec(kind, (start,)))
            continue
        if arg_type not in (_INTEGER_TYPES if kind == "avg" else _EXACT_SUM_TYPES):
            return None  # float sums depend on the order of additions: recomputed instead
        if kind == "avg" and out_type not in (T.DOUBLE, T.NUMERIC):
            return None
        if arg_type in _INTEGER_TYPES:
            select.append(f"sum(CAST({a} AS BIGINT) * {q(WEIGHT)}) AS `__p{start + 1}`")
            columns.append(Column(f"__p{start + 1}", T.BIGINT))
        else:
            select.append(f"sum({a} * {q(WEIGHT)}) AS `__p{start + 1}`")
            columns.append(Column(f"__p{start + 1}", T.NUMERIC))
        specs.append(AggregateSpec(kind, (start, start + 1)))
    sql = f"SELECT {', '.join(select)} FROM ({delta}) AS `__d`"
    if group_exprs:
        sql += " GROUP BY " + ", ".join(q(f"__g{i}") for i in range(len(group_exprs)))
    return IncrementalAggregate(sql, delta, plan.columns, len(group_exprs), tuple(columns), tuple(specs), tuple(outputs),
                                global_aggregate=not group_exprs)
