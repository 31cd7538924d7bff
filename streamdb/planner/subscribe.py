"""Push queries: `<query> EMIT CHANGES`."""

from __future__ import annotations

from sqlglot import exp

from streamdb import types as T
from streamdb.errors import FeatureNotSupported
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.incremental import linear_delta_sql
from streamdb.planner.plans import SubscribePlan
from streamdb.runtime.api import Column

CHANGE_COLUMNS = (Column("op", T.TEXT), Column("rowtime", T.TIMESTAMPTZ))


def plan(query: exp.Expression, ctx: PlanContext, *, snapshot: bool = False) -> SubscribePlan:
    q = query_planner.plan_query(query, ctx)
    if any(i.relation_id is None for i in q.inputs):
        raise FeatureNotSupported("push queries over system tables are not supported")
    if not q.inputs:
        raise FeatureNotSupported("a push query must read at least one stream, table or view",
                                  hint="A query over constants never changes.")
    return SubscribePlan(q, linear_delta_sql(q.resolved_sql, q.inputs), (*CHANGE_COLUMNS, *q.columns), snapshot)
