"""CREATE [OR REPLACE] VIEW name [(column, ...)] AS query: a plain view, a named query.

Nothing is computed or stored for it: the catalog keeps its statement, and every query that
reads it plans the view's query in its place (planner/query.py `_inline_views`). See
docs/views.md, "Plain views".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sqlglot import exp

from streamdb.catalog import ColumnDef, RelationDef
from streamdb.errors import DuplicateColumn, FeatureNotSupported, StreamDBError, WrongObjectType
from streamdb.planner import query as query_planner
from streamdb.planner.context import PlanContext
from streamdb.planner.create_view import QUERY_SQL
from streamdb.planner.names import normalize, position_of, table_name
from streamdb.planner.plans import Plan, QueryPlan
from streamdb.sql import ast as S

# Postgres's SQLSTATE for an OR REPLACE that would change the view's existing columns.
INVALID_TABLE_DEFINITION = "42P16"


@dataclass(frozen=True)
class CreatePlainViewPlan(Plan):
    """The view's catalog entry (columns from its described query, dependencies) and that query."""

    relation: RelationDef
    query: QueryPlan
    if_not_exists: bool = False
    or_replace: bool = False

    def explain(self) -> str:
        cols = ", ".join(f"{c.name} {c.type.name}" for c in self.relation.columns)
        return (f"Create view {self.relation.name} ({cols})\n"
                "  no maintenance: queries that read the view run its query in its place")


def plan(stmt: exp.Create, ctx: PlanContext, sql: str) -> CreatePlainViewPlan:
    target = stmt.this
    renamed: list[str] | None = None
    if isinstance(target, exp.Schema):  # CREATE VIEW v (a, b) AS ...: the columns' names
        renamed = [normalize(e.this if isinstance(e, exp.Column) else e) for e in target.expressions]
        target = target.this
    schema, name = table_name(target)
    if schema not in (None, "public"):
        raise FeatureNotSupported(f'schema "{schema}" is not supported; relations live in "public"',
                                  position=position_of(target))
    or_replace, if_not_exists = bool(stmt.args.get("replace")), bool(stmt.args.get("exists"))
    if or_replace and if_not_exists:
        raise StreamDBError("cannot combine OR REPLACE and IF NOT EXISTS", sqlstate="42601")
    body = stmt.args.get("expression")
    if body is None:
        raise StreamDBError("CREATE VIEW needs AS followed by a query", sqlstate="42601")
    if isinstance(body, S.EmitOnWindowClose):
        raise FeatureNotSupported("EMIT ON WINDOW CLOSE is for materialized views",
                                  hint="A plain view holds no result to emit: use CREATE MATERIALIZED VIEW.")
    if isinstance(body, (S.EmitChanges, S.SelectStream)):
        raise FeatureNotSupported("a view's query is a plain query: no SELECT STREAM or EMIT CHANGES",
                                  hint="Push queries can read the view: SELECT * FROM v EMIT CHANGES.")
    q = query_planner.plan_query(body, ctx)
    if q.param_types:
        raise FeatureNotSupported("a view's query cannot have parameters")
    existing = ctx.catalog.get(name)
    if or_replace and existing is not None and existing.kind == "view" and existing.id in q.views:
        raise StreamDBError(f'infinite recursion detected in rules for relation "{name}"', sqlstate="42P17")
    names = [c.name for c in q.columns]
    if renamed is not None:
        if len(renamed) > len(names):
            raise StreamDBError("CREATE VIEW specifies more column names than columns", sqlstate="42601")
        names[:len(renamed)] = renamed
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise DuplicateColumn(f'column "{n}" specified more than once',
                                  hint="Give the view's columns distinct names with AS or a column list.")
        seen.add(n)
    columns = tuple(ColumnDef(n, c.type) for n, c in zip(names, q.columns, strict=True))
    reads = {i.relation_id for i in q.inputs if i.relation_id is not None} | set(q.views)
    extra: tuple[tuple[str, object], ...] = ((QUERY_SQL, body.sql(dialect="streamdb")),)
    if renamed is not None:
        extra += ((query_planner.RENAMED_COLUMNS, True),)
    rel = RelationDef(id=0, name=name, kind="view", columns=columns, create_sql=sql.strip().rstrip(";").strip(),
                      created_at=time.time(), depends_on=tuple(sorted(reads)), extra=extra)
    return CreatePlainViewPlan(rel, q, if_not_exists=if_not_exists, or_replace=or_replace)


def replacement(existing: RelationDef, new: RelationDef) -> RelationDef:
    """What CREATE OR REPLACE VIEW stores in place of `existing`: the same relation (id, owner,
    grants, so views over it still resolve), with the new query. As in Postgres, the new query
    keeps the existing columns, by name and type, in front, and may add columns after them."""
    if existing.kind != "view":
        raise WrongObjectType(f'"{existing.name}" is not a view',
                              hint=f"It is a {existing.shown_kind.replace('_', ' ')}.")
    if len(new.columns) < len(existing.columns):
        raise StreamDBError("cannot drop columns from view", sqlstate=INVALID_TABLE_DEFINITION)
    for old, col in zip(existing.columns, new.columns, strict=False):
        if old.name != col.name:
            raise StreamDBError(f'cannot change name of view column "{old.name}" to "{col.name}"',
                                sqlstate=INVALID_TABLE_DEFINITION)
        if old.type != col.type:
            raise StreamDBError(f'cannot change data type of view column "{old.name}" from {old.type.name} '
                                f"to {col.type.name}", sqlstate=INVALID_TABLE_DEFINITION)
    return replace(new, id=existing.id, owner=existing.owner, grants=existing.grants,
                   created_at=existing.created_at)
