"""DROP STREAM | TABLE | VIEW | MATERIALIZED VIEW."""

from __future__ import annotations

from sqlglot import exp

from streamdb.errors import FeatureNotSupported
from streamdb.planner.context import PlanContext
from streamdb.planner.names import table_name
from streamdb.planner.plans import DropPlan

_KINDS = {"STREAM": "stream", "TABLE": "table", "VIEW": "view", "MATERIALIZED VIEW": "materialized_view"}


def plan(stmt: exp.Drop, ctx: PlanContext) -> DropPlan:
    raw = str(stmt.args.get("kind") or "").upper()
    if stmt.args.get("materialized"):
        raw = "MATERIALIZED VIEW"
    kind = _KINDS.get(raw)
    if kind is None:
        raise FeatureNotSupported(f"DROP {raw} is not supported")
    targets = list(stmt.args.get("tables") or []) or ([stmt.this] if stmt.this is not None else [])
    names = []
    for t in targets:
        if isinstance(t, exp.Table):
            _, name = table_name(t)
            names.append(name)
    return DropPlan(kind=kind, names=tuple(names), if_exists=bool(stmt.args.get("exists")),
                    cascade=bool(stmt.args.get("cascade")))
