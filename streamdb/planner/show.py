"""SHOW STREAMS | TABLES | ALL, SHOW CREATE, DESCRIBE, SHOW <setting>."""

from __future__ import annotations

from streamdb.errors import FeatureNotSupported
from streamdb.planner.context import PlanContext
from streamdb.planner.names import lookup_relation, normalize, table_name
from streamdb.planner.plans import DescribeRelationPlan, ShowCreatePlan, ShowObjectsPlan, ShowVariablePlan
from streamdb.sql.ast import DescribeRelation, ShowCreate, ShowObjects, ShowVariable

SUPPORTED = ("STREAMS", "TABLES", "ALL", "VIEWS", "MATERIALIZED VIEWS", "QUERIES", "CONNECTORS", "FUNCTIONS", "SOURCES",
             "SINKS")


def plan_show_objects(stmt: ShowObjects, ctx: PlanContext) -> ShowObjectsPlan:
    kind = str(stmt.this).upper()
    if kind not in SUPPORTED:
        raise FeatureNotSupported(f"SHOW {kind} is not yet supported")
    return ShowObjectsPlan(kind)


def plan_show_create(stmt: ShowCreate, ctx: PlanContext) -> ShowCreatePlan:
    kind = str(stmt.args.get("kind")).upper()
    if kind.endswith("CONNECTOR") or kind == "SINK":
        from streamdb.errors import UndefinedObject

        obj_kind = "sink" if kind == "SINK" else "connector"
        _, name = table_name(stmt.this)
        obj = ctx.catalog.object(obj_kind, name)
        if obj is None:
            raise UndefinedObject(f'{obj_kind} "{name}" does not exist')
        # The statement as given, secrets masked (planner/connectors.py masked_sql).
        return ShowCreatePlan(obj.name, kind, create_sql=obj.create_sql)
    rel = lookup_relation(ctx, stmt.this)
    return ShowCreatePlan(rel.name, kind)


def plan_describe(stmt: DescribeRelation, ctx: PlanContext) -> DescribeRelationPlan:
    rel = lookup_relation(ctx, stmt.this)
    return DescribeRelationPlan(rel.name, bool(stmt.args.get("extended")))


def plan_show_variable(stmt: ShowVariable, ctx: PlanContext) -> ShowVariablePlan:
    return ShowVariablePlan(normalize(str(stmt.this)))


__all__ = ["plan_show_objects", "plan_show_create", "plan_describe", "plan_show_variable", "table_name"]
