"""DROP STREAM | TABLE | VIEW | MATERIALIZED VIEW."""

from __future__ import annotations

from sqlglot import exp

from streamdb.errors import FeatureNotSupported
from streamdb.planner.context import PlanContext
from streamdb.planner.names import table_name
from streamdb.planner.plans import DropObjectPlan, DropPlan

_KINDS = {"STREAM": "stream", "TABLE": "table", "VIEW": "view", "MATERIALIZED VIEW": "materialized_view"}


def _names(stmt: exp.Drop) -> tuple[str, ...]:
    targets = list(stmt.args.get("tables") or []) or ([stmt.this] if stmt.this is not None else [])
    return tuple(table_name(t)[1] for t in targets if isinstance(t, exp.Table))


def plan_object(stmt: exp.Drop, kind: str) -> DropObjectPlan:
    """DROP [SOURCE | SINK] CONNECTOR, DROP SINK."""
    direction = stmt.args.get("direction")
    return DropObjectPlan(kind=kind, names=_names(stmt), if_exists=bool(stmt.args.get("exists")),
                          cascade=bool(stmt.args.get("cascade")), direction=str(direction).lower() if direction else None)


def plan(stmt: exp.Drop, ctx: PlanContext) -> DropPlan | DropObjectPlan:
    raw = str(stmt.args.get("kind") or "").upper()
    if stmt.args.get("materialized"):
        raw = "MATERIALIZED VIEW"
    if raw == "SINK":
        return plan_object(stmt, "sink")
    if raw == "CONNECTOR":
        return plan_object(stmt, "connector")
    if raw == "INDEX":
        return plan_object(stmt, "index")
    if raw in ("FUNCTION", "AGGREGATE"):
        from streamdb.planner import functions

        return functions.plan_drop(stmt)
    if raw == "SOURCE":
        raw = "STREAM"  # RisingWave's CREATE SOURCE makes an external stream
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
