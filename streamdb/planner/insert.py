"""INSERT ... VALUES | SELECT."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import (
    FeatureNotSupported,
    ObjectNotInPrerequisiteState,
    StreamDBError,
    UndefinedColumn,
    WrongObjectType,
)
from streamdb.planner import query as query_planner
from streamdb.planner.coerce import NotALiteral, coerce, literal_value
from streamdb.planner.context import PlanContext
from streamdb.planner.names import lookup_relation, normalize, position_of
from streamdb.planner.plans import InsertPlan
from streamdb.planner.privileges import require


def refuse_write_to_view(rel: RelationDef, verb: str) -> None:
    """Postgres' errors for writing into a view (`verb`: insert into, update, delete from): a plain
    view is never automatically updatable here (55000), a materialized one cannot change (42809)."""
    if rel.kind == "view":
        raise ObjectNotInPrerequisiteState(
            f'cannot {verb} view "{rel.name}"',
            detail="Views are not automatically updatable in StreamDB.",
            hint=f"{verb.split()[0].capitalize()} through the relations the view reads from.")
    if rel.kind == "materialized_view":
        raise WrongObjectType(f'cannot change materialized view "{rel.name}"')
    if dict(rel.extra).get("external") == "postgres":
        upstream = dict(rel.options).get("postgres_table")
        raise WrongObjectType(f'cannot {verb} table "{rel.name}": its rows follow PostgreSQL table "{upstream}"',
                              hint="Change the upstream table; its changes arrive here.")


def plan(stmt: exp.Insert, ctx: PlanContext, bound: tuple[list[Any], tuple[T.SqlType, ...]] | None = None
         ) -> InsertPlan:
    """`bound`: the values and types of the statement's $n, for an INSERT whose VALUES are bare
    parameters and constants (a prepared INSERT executed): its rows are built from them directly.
    Raises NotALiteral when the statement needs its parameters bound into the tree instead."""
    target = stmt.this
    column_nodes: list[exp.Expression] = []
    if isinstance(target, exp.Schema):
        column_nodes = list(target.expressions)
        target = target.this
    rel = lookup_relation(ctx, target)
    require(ctx, rel, "INSERT", target)
    refuse_write_to_view(rel, "insert into")
    if rel.kind not in ("stream", "table"):
        raise StreamDBError(f'cannot insert into {rel.kind.replace("_", " ")} "{rel.name}"', sqlstate="42809")
    if stmt.args.get("returning"):
        raise FeatureNotSupported("INSERT ... RETURNING is not yet supported")
    conflict = stmt.args.get("conflict")
    if conflict is not None:
        raise FeatureNotSupported(
            "INSERT ... ON CONFLICT is not supported: inserting a row whose primary key exists replaces it",
            position=position_of(conflict))
    names: list[str] = []
    for c in column_nodes:
        ident = c.this if isinstance(c, exp.Column) else c
        name = normalize(ident if isinstance(ident, exp.Identifier) else str(ident.name))
        if name in names:
            raise StreamDBError(f'column "{name}" specified more than once', sqlstate="42701",
                                position=position_of(c))
        names.append(name)
    rowtime_given = "rowtime" in names and rel.kind == "stream"
    if not names:
        names = rel.column_names()
        if rel.schemaless:
            raise FeatureNotSupported(
                f'INSERT into schemaless stream "{rel.name}" needs a column list',
                hint=f"For example: INSERT INTO {rel.name} (a, b) VALUES (1, 2);")
    elif not rel.schemaless:
        known = set(rel.column_names()) | ({"rowtime"} if rel.kind == "stream" else set())
        for n, node in zip(names, column_nodes, strict=True):
            if n not in known:
                raise UndefinedColumn(f'column "{n}" of relation "{rel.name}" does not exist',
                                      position=position_of(node))
    source = stmt.expression
    if isinstance(source, exp.Values):
        rows = []
        literal = True
        for tup in source.expressions:
            exprs = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
            if len(exprs) > len(names):
                raise StreamDBError("INSERT has more expressions than target columns", sqlstate="42601",
                                    position=position_of(exprs[len(names)]))
            if len(exprs) < len(names) and column_nodes:
                raise StreamDBError("INSERT has more target columns than expressions", sqlstate="42601")
            try:
                rows.append(tuple(literal_value(e) if bound is None else _bound_value(e, *bound) for e in exprs))
            except NotALiteral:
                literal = False
                break
        if literal:
            return InsertPlan(rel.name, rel.id, tuple(names), rows=tuple(_check_rows(rows, names, rel)),
                              rowtime_given=rowtime_given)
    if bound is not None:
        raise NotALiteral
    if source is None:
        raise FeatureNotSupported("INSERT without VALUES or a query is not supported")
    select = source if not isinstance(source, exp.Values) else exp.select("*").from_(
        exp.Subquery(this=source, alias=exp.TableAlias(this=exp.to_identifier("v"))))
    q = query_planner.plan_query(select, ctx)
    if len(q.columns) != len(names):
        raise StreamDBError(
            "INSERT has more expressions than target columns" if len(q.columns) > len(names)
            else "INSERT has more target columns than expressions", sqlstate="42601")
    return InsertPlan(rel.name, rel.id, tuple(names), query=q, rowtime_given=rowtime_given)


def _bound_value(e: exp.Expression, params: list[Any], types: tuple[T.SqlType, ...]) -> Any:
    if isinstance(e, exp.Parameter) and isinstance(e.this, exp.Literal):
        i = int(e.this.this) - 1
        return query_planner.bound_literal_value(params[i] if i < len(params) else None,
                                                 types[i] if i < len(types) else T.TEXT)
    return literal_value(e)


def _check_rows(rows, names, rel):
    """Coerce literal rows to the column types now, so type errors surface at planning."""
    if rel.schemaless:
        return rows
    types = {c.name: c.type for c in rel.columns}
    out = []
    for r in rows:
        out.append(tuple(
            coerce(v, types.get(n, T.TIMESTAMPTZ), n) for v, n in zip(r, names, strict=False)
        ))
    return out
