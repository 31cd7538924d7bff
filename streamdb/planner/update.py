"""UPDATE and DELETE on tables: a query finds the matched rows' keys and new values."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import FeatureNotSupported, StreamDBError, UndefinedColumn
from streamdb.planner import query as query_planner
from streamdb.planner.coerce import NotALiteral, TypedValue, coerce, literal_value
from streamdb.planner.context import PlanContext
from streamdb.planner.insert import refuse_write_to_view
from streamdb.planner.lookup import conjuncts
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
    key = _primary_key_values(where.this if where is not None else None, rel, table)
    constants: tuple[tuple[str, Any], ...] | None
    try:  # assigned as INSERT assigns literals
        constants = tuple((name, literal_value(value)) for name, value in assignments.items())
    except NotALiteral:
        constants = None
    if key is not None and constants is not None:
        require(ctx, rel, "SELECT", table)  # WHERE reads the key, as the query would
        return UpdatePlan(rel.name, rel.id, None, is_delete=False, key=key, assignments=constants)
    q = query_planner.plan_query(select, ctx)
    if key is not None and len(q.inputs) == 1 and q.inputs[0].relation_id == rel.id and q.lookup is None:
        # SET with expressions of the row itself (n = n + 1): the query runs over the one row read
        # by key, not over the table.
        return UpdatePlan(rel.name, rel.id, q, is_delete=False, key=key)
    return UpdatePlan(rel.name, rel.id, q, is_delete=False)


def plan_delete(stmt: exp.Delete, ctx: PlanContext) -> UpdatePlan:
    rel, table = _target(stmt, ctx, "delete from")
    if stmt.args.get("using"):
        raise FeatureNotSupported("DELETE ... USING is not yet supported")
    select = exp.select(exp.column(ROWKEY)).from_(table.copy())
    where = stmt.args.get("where")
    if where is not None:
        select = select.where(where.this.copy())
    key = _primary_key_values(where.this if where is not None else None, rel, table)
    if key is not None:
        require(ctx, rel, "SELECT", table)  # WHERE reads the key, as the query would
        return UpdatePlan(rel.name, rel.id, None, is_delete=True, key=key)
    q = query_planner.plan_query(select, ctx)
    return UpdatePlan(rel.name, rel.id, q, is_delete=True)


def _primary_key_values(where: exp.Expression | None, rel: RelationDef, table: exp.Table) -> tuple[Any, ...] | None:
    """The primary key's values when `where` is exactly `key column = constant` for each of its
    columns, with constants that match as the query would match them (an integer for an integer
    column, in its range; text for a text column); None otherwise."""
    if where is None or not rel.primary_key:
        return None
    qualifiers = {rel.name}
    alias = table.args.get("alias")
    if alias is not None and alias.this is not None:
        qualifiers.add(normalize(alias.this))
    found: dict[str, Any] = {}
    for term in conjuncts(where):
        if not isinstance(term, exp.EQ):
            return None
        sides = [(c, o) for c, o in ((term.left, term.right), (term.right, term.left))
                 if isinstance(c, exp.Column) and isinstance(c.this, exp.Identifier)
                 and (not c.table or normalize(c.args["table"]) in qualifiers)]
        if not sides:
            return None
        column, other = sides[0]
        name = normalize(column.this)
        col = rel.column(name)
        if col is None or name not in rel.primary_key or name in found:
            return None
        try:
            value = literal_value(other)
        except NotALiteral:
            return None
        given = value.type if isinstance(value, TypedValue) else None
        raw = value.value if isinstance(value, TypedValue) else value
        if T.is_integer(col.type) and isinstance(raw, int) and not isinstance(raw, bool) and \
                (given is None or T.is_integer(given)):
            try:
                found[name] = coerce(raw, col.type, name)
            except StreamDBError:
                return None  # out of the column's range: matches nothing, as the query says
        elif T.is_textual(col.type) and isinstance(raw, str) and (given is None or T.is_textual(given)):
            found[name] = raw  # longer than a varchar(n) key: matches nothing, not an error
        else:
            return None
    if set(found) != set(rel.primary_key):
        return None
    return tuple(found[k] for k in rel.primary_key)
