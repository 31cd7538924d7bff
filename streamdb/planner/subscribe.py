"""Push queries: `<query> EMIT CHANGES`, SUBSCRIBE, and cursors over them."""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from streamdb import types as T
from streamdb import values
from streamdb.catalog import TRANSIENT
from streamdb.errors import FeatureNotSupported, InvalidParameterValue, StreamDBError
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.incremental import linear_delta_sql
from streamdb.planner.names import normalize
from streamdb.planner.options import property_values
from streamdb.planner.plans import CreateViewPlan, FetchPlan, SubscribePlan
from streamdb.runtime.api import Column
from streamdb.sql import ast as S
from streamdb.sql.dialect import FALSE_WORDS, TRUE_WORDS

CHANGE_COLUMNS = (Column("op", T.TEXT), Column("rowtime", T.TIMESTAMPTZ))
TRANSIENT_NAME = "subscribe"  # a push query's view; the runtime gives each its own name


def plan_subscribe(stmt: S.Subscribe, ctx: PlanContext) -> SubscribePlan:
    """SUBSCRIBE [TO] name | (query) [WITH (snapshot = true|false)]: the current result first
    (unless snapshot = false), then every change."""
    snapshot = snapshot_option(stmt, "SUBSCRIBE")
    target = stmt.this
    query = exp.select("*").from_(target.copy()) if isinstance(target, exp.Table) else target
    return plan(query, ctx, snapshot=snapshot)


def plan_emit_changes(stmt: S.EmitChanges, ctx: PlanContext) -> SubscribePlan:
    """<query> EMIT CHANGES [WITH (snapshot = true|false)]: as SUBSCRIBE, the current result
    first unless snapshot = false (issue 14: every form of push query behaves the same)."""
    return plan(stmt.this, ctx, snapshot=snapshot_option(stmt, "EMIT CHANGES"))


def snapshot_option(stmt: S.Subscribe | S.EmitChanges, what: str) -> bool:
    """The WITH options of a push query: only `snapshot`, true unless given."""
    opts = property_values(stmt.args.get("properties"))
    unknown = set(opts) - {"snapshot"}
    if unknown:
        raise InvalidParameterValue(f'unrecognized {what} option "{sorted(unknown)[0]}"',
                                    hint="valid options are: snapshot")
    snapshot = opts.get("snapshot", True)
    if isinstance(snapshot, bool):
        return snapshot
    text = str(snapshot).lower()
    if text not in TRUE_WORDS | FALSE_WORDS:
        raise InvalidParameterValue(f'{what} option "snapshot" requires a Boolean value',
                                    hint="use snapshot = true or snapshot = false")
    return text in TRUE_WORDS


def plan_fetch(stmt: S.FetchCursor) -> FetchPlan:
    count_node = stmt.args.get("count")
    count: int | None = 1
    if count_node is not None:
        count = None if count_node.name.upper() == "ALL" else int(count_node.name)
    opts = property_values(stmt.args.get("properties"))
    unknown = set(opts) - {"timeout"}
    if unknown:
        raise InvalidParameterValue(f'unrecognized FETCH option "{sorted(unknown)[0]}"',
                                    hint="valid options are: timeout")
    timeout = None
    if "timeout" in opts:
        raw = opts["timeout"]
        delta = values.parse_text(str(raw), T.INTERVAL) if isinstance(raw, str) else raw
        timeout = delta.total_seconds() if hasattr(delta, "total_seconds") else float(delta)
    return FetchPlan(normalize(stmt.this), count, timeout)


def plan(query: exp.Expression, ctx: PlanContext, *, snapshot: bool = False) -> SubscribePlan:
    q = query_planner.plan_query(query, ctx)
    if any(i.relation_id is None for i in q.inputs):
        raise FeatureNotSupported("push queries over system tables are not supported")
    if not q.inputs:
        raise FeatureNotSupported("a push query must read at least one stream, table or view",
                                  hint="A query over constants never changes.")
    delta_sql = linear_delta_sql(q.resolved_sql, q.inputs)
    view = None if delta_sql is not None else transient_view(query, ctx, len(q.columns))
    columns = q.columns if view is None else tuple(
        replace(c, type=v.type) for c, v in zip(q.columns, view.relation.columns, strict=True))
    return SubscribePlan(q, delta_sql, (*CHANGE_COLUMNS, *columns), snapshot, view)


def transient_view(query: exp.Expression, ctx: PlanContext, width: int) -> CreateViewPlan | None:
    """How a push query that is not linear (an aggregate, a join, a top-N) is kept: as a
    materialized view of its own, maintained by the pipelines like any view while the query runs,
    its changes read from the view's log (as ksqlDB's transient queries and Materialize's
    SUBSCRIBE dataflows). Its columns are named by position: a query may repeat a name, a view
    may not. None when no view can hold the query (parameters, ...): it is then recomputed."""
    from streamdb.planner import create_view
    from streamdb.sql.parser import parse_one

    body = query.sql(dialect="streamdb")
    names = ", ".join(f"c{i}" for i in range(1, width + 1))
    sql = f"CREATE MATERIALIZED VIEW {TRANSIENT_NAME} ({names}) AS {body}"
    try:
        view = create_view.plan(parse_one(sql), ctx, sql)
    except StreamDBError:
        return None
    relation = replace(view.relation, extra=(*view.relation.extra, (TRANSIENT, True)))
    return replace(view, relation=relation)
