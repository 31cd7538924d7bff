"""UPDATE and DELETE on tables: a query finds the matched rows' keys and new values."""

from __future__ import annotations

from sqlglot import exp

from streamdb.errors import FeatureNotSupported, StreamDBError, UndefinedColumn
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.insert import refuse_write_to_view
from streamdb.planner.names import lookup_relation, normalize, position_of
from streamdb.planner.plans import UpdatePlan
from streamdb.planner.privileges import require
from streamdb.planner.query import ROWKEY


def _target(stmt: exp.Expression, ctx: PlanContext, verb: str):
    table = stmt.this
    rel = lookup_relation(ctx, table)
    require(ctx, rel, verb.upper(), table)
    if rel.kind == "stream":
        raise StreamDBError(f'cannot {verb} stream "{rel.name}": streams are append-only', sqlstate="42809",
                            hint="Use a table (CREATE TABLE ... PRIMARY KEY) for rows that change.")
    refuse_write_to_view(rel, verb)
    if rel.kind != "table":
        raise StreamDBError(f'cannot {verb} {rel.kind.replace("_", " ")} "{rel.name}"', sqlstate="42809")
    if dict(rel.extra).get("append_only"):
        raise StreamDBError(f'cannot {verb} append-only table "{rel.name}"', sqlstate="42809",
                            hint="An APPEND ONLY table accepts inserts only.")
    if stmt.args.get("returning"):
        raise FeatureNotSupported(f"{verb.upper()} ... RETURNING is not yet supported")
    return rel, table


def plan_update(stmt: exp.Update, ctx: PlanContext) -> UpdatePlan:
    rel, table = _target(stmt, ctx, "update")
    if stmt.args.get("from_") or stmt.args.get("from"):
        raise FeatureNotSupported("UPDATE ... FROM is not yet supported")
    assignments: dict[str, exp.Expression] = {}
    for eq in stmt.expressions:
        col = eq.this
        name = normalize(col.this if isinstance(col, exp.Column) else col)
        if rel.column(name) is None:
            raise UndefinedColumn(f'column "{name}" of relation "{rel.name}" does not exist',
                                  position=position_of(col))
        assignments[name] = eq.expression
    projections: list[exp.Expr] = [exp.column(ROWKEY)]
    for c in rel.columns:
        projections.append(exp.alias_(assignments.get(c.name, exp.column(c.name, quoted=True)), c.name,
                                      quoted=True))
    select = exp.select(*projections).from_(table.copy())
    where = stmt.args.get("where")
    if where is not None:
        select = select.where(where.this.copy())
    q = query_planner.plan_query(select, ctx)
    return UpdatePlan(rel.name, rel.id, q, is_delete=False)


def plan_delete(stmt: exp.Delete, ctx: PlanContext) -> UpdatePlan:
    rel, table = _target(stmt, ctx, "delete from")
    if stmt.args.get("using"):
        raise FeatureNotSupported("DELETE ... USING is not yet supported")
    select = exp.select(exp.column(ROWKEY)).from_(table.copy())
    where = stmt.args.get("where")
    if where is not None:
        select = select.where(where.this.copy())
    q = query_planner.plan_query(select, ctx)
    return UpdatePlan(rel.name, rel.id, q, is_delete=True)
