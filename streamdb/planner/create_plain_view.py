"""CREATE [OR REPLACE] VIEW name [(column, ...)] AS query: a plain view, a named query.

Nothing is computed or stored for it: the catalog keeps its statement (with each `*` expanded,
as PostgreSQL does), and every query that reads it plans the view's query in its place
(planner/query.py `_inline_views`). See docs/views.md, "Plain views".
"""

from __future__ import annotations

import re
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
    frozen = _frozen_stars(body, ctx)
    if frozen is not None:
        try:
            frozen_q = query_planner.plan_query(frozen, ctx)
        except StreamDBError:
            frozen_q = None
        # The expansion must not change the view: otherwise keep the query as written.
        if frozen_q is not None and frozen_q.columns == q.columns:
            stmt = stmt.copy()
            stmt.set("expression", frozen)
            body, q, sql = frozen, frozen_q, stmt.sql(dialect="streamdb")
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
    reads = {i.relation_id for i in q.inputs if i.relation_id is not None} | set(q.views) | set(q.functions)
    extra: tuple[tuple[str, object], ...] = ((QUERY_SQL, body.sql(dialect="streamdb")),)
    if renamed is not None:
        extra += ((query_planner.RENAMED_COLUMNS, True),)
    rel = RelationDef(id=0, name=name, kind="view", columns=columns, create_sql=sql.strip().rstrip(";").strip(),
                      created_at=time.time(), depends_on=tuple(sorted(reads)), extra=extra)
    return CreatePlainViewPlan(rel, q, if_not_exists=if_not_exists, or_replace=or_replace)


def _identifier(name: str) -> exp.Identifier:
    # Quoted only where Postgres would need it, so the stored query reads as written.
    return exp.to_identifier(name, quoted=re.fullmatch(r"[a-z_][a-z0-9_]*", name) is None)


def _source_columns(source: exp.Expression, ctx: PlanContext) -> list[str] | None:
    """The names `*` shows for one FROM item, or None when not known here."""
    alias = source.args.get("alias")
    renamed = [normalize(c) for c in alias.args.get("columns") or []] if alias is not None else []
    names: list[str] | None = None
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        schema, name = table_name(source)
        rel = ctx.catalog.get(name) if schema in (None, "public") else None
        names = [c.name for c in rel.columns] if rel is not None else None
    elif isinstance(source, exp.Table) and isinstance(source.this, exp.Anonymous) \
            and str(source.this.this).upper() in ("TUMBLE", "HOP", "SESSION") and source.this.expressions:
        first = source.this.expressions[0]
        rel = ctx.catalog.get(normalize(first.this if isinstance(first, exp.Column) else first))
        names = [*(c.name for c in rel.columns), "window_start", "window_end"] if rel is not None else None
    elif isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select) \
            and not any(query_planner.is_star(p) for p in source.this.expressions):
        names = [query_planner.postgres_column_name(p) for p in source.this.expressions]
    if names is None or len(renamed) > len(names):
        return None
    return [*renamed, *names[len(renamed):]]


def _frozen_stars(body: exp.Expression, ctx: PlanContext) -> exp.Expression | None:
    """The view's query with each `*` of its outer SELECTs replaced by the columns it stands for
    now, as PostgreSQL stores a view: columns added later (a schemaless stream widening, OR
    REPLACE of a view under it) do not change it. None when there is no such `*`, or one whose
    columns are not known here (kept as written)."""
    body = body.copy()
    selects: list[exp.Expression] = [body]
    expanded = False
    while selects:
        node = selects.pop()
        if isinstance(node, exp.SetOperation):
            selects += [node.this, node.expression]
            continue
        if not isinstance(node, exp.Select) or not any(query_planner.is_star(p) for p in node.expressions):
            continue
        joins = node.args.get("joins") or []
        frm = node.args.get("from_")
        if frm is None or any(j.args.get("using") or j.args.get("method") for j in joins):
            return None  # USING and NATURAL merge columns: left as written
        sources = [frm.this, *(j.this for j in joins)]
        by_alias: dict[str, list[str] | None] = {normalize(s.alias_or_name): _source_columns(s, ctx) for s in sources}
        projections: list[exp.Expression] = []
        for p in node.expressions:
            if isinstance(p, exp.Column) and isinstance(p.this, exp.Star):
                qualifier = normalize(p.args.get("table"))
                columns = by_alias.get(qualifier)
                if columns is None or p.args.get("db"):
                    return None
                projections += [exp.Column(this=_identifier(c), table=_identifier(qualifier)) for c in columns]
            elif isinstance(p, exp.Star):
                if any(p.args.get(k) for k in ("except", "replace", "rename")):
                    return None
                for alias, columns in by_alias.items():
                    if columns is None:
                        return None
                    projections += [exp.Column(this=_identifier(c), table=_identifier(alias) if len(sources) > 1
                                               else None) for c in columns]
            else:
                projections.append(p)
        node.set("expressions", projections)
        expanded = True
    return body if expanded else None


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
