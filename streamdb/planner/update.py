"""UPDATE and DELETE on tables: a query finds the matched rows' keys and new values."""

from __future__ import annotations

from dataclasses import dataclass, replace
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
from streamdb.planner.row_expr import row_assignments


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
    assignments = _assignments(stmt, rel)
    where = stmt.args.get("where")
    key = _primary_key_values(where.this if where is not None else None, rel, table)
    constants: tuple[tuple[str, Any], ...] | None
    try:  # assigned as INSERT assigns literals
        constants = tuple((name, literal_value(value)) for name, value in assignments.items())
    except NotALiteral:
        constants = None
    if key is not None and constants is not None:
        require(ctx, rel, "SELECT", table)  # WHERE reads the key, as the query would
        return UpdatePlan(rel.name, rel.id, None, is_delete=False, key=key, assignments=constants)
    q = query_planner.plan_query(_row_select(rel, table, assignments, where), ctx)
    if key is not None and len(q.inputs) == 1 and q.inputs[0].relation_id == rel.id and q.lookup is None:
        # SET with expressions of the row itself (n = n + 1): computed from the one row read by
        # key (row_values), or the query runs over that row alone, not over the table.
        return UpdatePlan(rel.name, rel.id, q, is_delete=False, key=key,
                          row_values=row_assignments(assignments, rel, q.param_types))
    return UpdatePlan(rel.name, rel.id, q, is_delete=False)


def _assignments(stmt: exp.Update, rel: RelationDef) -> dict[str, exp.Expression]:
    assignments: dict[str, exp.Expression] = {}
    for eq in stmt.expressions:
        col = eq.this
        name = normalize(col.this if isinstance(col, exp.Column) else col)
        if rel.column(name) is None:
            raise UndefinedColumn(f'column "{name}" of relation "{rel.name}" does not exist',
                                  position=position_of(col))
        assignments[name] = eq.expression
    return assignments


def _row_select(rel: RelationDef, table: exp.Table, assignments: dict[str, exp.Expression],
                where: exp.Expression | None) -> exp.Select:
    """The query an UPDATE runs: each matched row's key and its new values."""
    projections: list[exp.Expr] = [exp.column(ROWKEY)]
    for c in rel.columns:
        projections.append(exp.alias_(assignments.get(c.name, exp.column(c.name, quoted=True)), c.name,
                                      quoted=True))
    select = exp.select(*projections).from_(table.copy())
    if where is not None:
        select = select.where(where.this.copy())
    return select


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
    terms = _key_terms(where, rel, table)
    if terms is None:
        return None
    found: dict[str, Any] = {}
    for name, other in terms.items():
        try:
            value = literal_value(other)
        except NotALiteral:
            return None
        ok, found[name] = _key_value(rel, name, value)
        if not ok:
            return None
    return tuple(found[k] for k in rel.primary_key)


def _key_terms(where: exp.Expression | None, rel: RelationDef, table: exp.Table) -> dict[str, exp.Expr] | None:
    """`where` as `key column = expression` for each primary key column (the expressions by
    column), or None if it is anything else."""
    if where is None or not rel.primary_key:
        return None
    qualifiers = {rel.name}
    alias = table.args.get("alias")
    if alias is not None and alias.this is not None:
        qualifiers.add(normalize(alias.this))
    found: dict[str, exp.Expr] = {}
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
        if rel.column(name) is None or name not in rel.primary_key or name in found:
            return None
        found[name] = other
    return found if set(found) == set(rel.primary_key) else None


def _key_value(rel: RelationDef, name: str, value: Any) -> tuple[bool, Any]:
    """(True, the key column's value) when the constant `value` matches the column as the query
    would match it; (False, None) when only the query can say."""
    col = rel.column(name)
    assert col is not None
    given = value.type if isinstance(value, TypedValue) else None
    raw = value.value if isinstance(value, TypedValue) else value
    if T.is_integer(col.type) and isinstance(raw, int) and not isinstance(raw, bool) and \
            (given is None or T.is_integer(given)):
        try:
            return True, coerce(raw, col.type, name)
        except StreamDBError:
            return False, None  # out of the column's range: matches nothing, as the query says
    if T.is_textual(col.type) and isinstance(raw, str) and (given is None or T.is_textual(given)):
        return True, raw  # longer than a varchar(n) key: matches nothing, not an error
    return False, None


# ---- prepared UPDATE and DELETE by key --------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    """A value of a prepared statement: its parameter (0-based), or a literal's value."""

    param: int | None
    literal: Any = None

    def bind(self, params: list[Any], types: tuple[T.SqlType, ...]) -> Any:
        if self.param is None:
            return self.literal
        t = types[self.param] if self.param < len(types) else T.TEXT
        value = params[self.param] if self.param < len(params) else None
        # The value as bind_parameters would write it into the statement, read back.
        return query_planner.bound_literal_value(value, t)


@dataclass(frozen=True)
class ByKeyTemplate:
    """A prepared UPDATE or DELETE whose WHERE names one row by its primary key, planned once:
    each execution binds its parameters into the key (and the SET values, or the parameters of
    the row's query) instead of binding them into the statement and planning it again. `bind`
    gives the plan that planning the bound statement gives, or None where only that can say
    (a value that is not a key's: the caller plans the statement)."""

    plan: UpdatePlan  # key and assignments (or the query's parameters) filled in by bind
    relation: RelationDef
    key: tuple[tuple[str, _Value], ...]
    assignments: tuple[tuple[str, _Value], ...] | None  # SET col = constant or parameter
    types: tuple[T.SqlType, ...]

    def bind(self, params: list[Any]) -> UpdatePlan | None:
        key: list[Any] = []
        try:
            for name, v in self.key:
                ok, value = _key_value(self.relation, name, v.bind(params, self.types))
                if not ok:
                    return None
                key.append(value)
            assigned = None if self.assignments is None else \
                tuple((name, v.bind(params, self.types)) for name, v in self.assignments)
        except NotALiteral:
            return None
        q = self.plan.query
        if q is not None:
            values = tuple(coerce(p.value if isinstance(p, TypedValue) else p, t, f"${i + 1}")
                           for i, (p, t) in enumerate(zip(params, self.types, strict=False)))
            q = replace(q, params=values)
        return replace(self.plan, key=tuple(key), assignments=assigned, query=q)


def by_key_template(stmt: exp.Expression, ctx: PlanContext, types: tuple[T.SqlType, ...]) -> ByKeyTemplate | None:
    """The template of a prepared UPDATE or DELETE by primary key (see ByKeyTemplate), or None
    for any other statement. Privileges are checked here, as planning checks them."""
    if not isinstance(stmt, (exp.Update, exp.Delete)) or stmt.args.get("returning"):
        return None
    is_delete = isinstance(stmt, exp.Delete)
    if stmt.args.get("using") if is_delete else (stmt.args.get("from_") or stmt.args.get("from")):
        return None
    rel, table = _target(stmt, ctx, "delete from" if is_delete else "update")
    where = stmt.args.get("where")
    terms = _key_terms(where.this if where is not None else None, rel, table)
    if terms is None:
        return None
    key = []
    for name in rel.primary_key:
        v = _value_of(terms[name])
        if v is None:
            return None
        key.append((name, v))
    require(ctx, rel, "SELECT", table)  # WHERE reads the key, as the query would
    if is_delete:
        return ByKeyTemplate(UpdatePlan(rel.name, rel.id, None, is_delete=True), rel, tuple(key), None, types)
    assert isinstance(stmt, exp.Update)
    assignments = _assignments(stmt, rel)
    values = {name: _value_of(e) for name, e in assignments.items()}
    if all(v is not None for v in values.values()):
        sets = tuple((name, v) for name, v in values.items() if v is not None)
        return ByKeyTemplate(UpdatePlan(rel.name, rel.id, None, is_delete=False), rel, tuple(key), sets, types)
    # SET with expressions over the row: its query, planned once with placeholders.
    q = query_planner.plan_query(_row_select(rel, table, assignments, where), ctx, declared_params=list(types))
    if not query_planner.takes_parameters(q, len(types)) or \
            len(q.inputs) != 1 or q.inputs[0].relation_id != rel.id or q.lookup is not None:
        return None
    return ByKeyTemplate(UpdatePlan(rel.name, rel.id, q, is_delete=False,
                                    row_values=row_assignments(assignments, rel, q.param_types)),
                         rel, tuple(key), None, types)


def _value_of(node: exp.Expr) -> _Value | None:
    """A parameter (`$n`) or a literal; None for any other expression."""
    if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal):
        return _Value(int(node.this.this) - 1)
    try:
        return _Value(None, literal_value(node))
    except NotALiteral:
        return None
