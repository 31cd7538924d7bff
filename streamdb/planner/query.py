"""Ad hoc queries: resolve relations, expand stars, infer parameter types, describe the result.

The query keeps Postgres semantics; it is transpiled by sqlglot for the embedded
engine (DuckDB, small reads) and for Spark SQL (large reads). Describing the
result runs the embedded engine over empty inputs in memory: exact types, no
Spark, no disk.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache, lru_cache, partial
from typing import Any, cast

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from streamdb import types as T
from streamdb.catalog import RelationDef
from streamdb.errors import (
    FeatureNotSupported,
    StreamDBError,
    UndefinedColumn,
    UndefinedFunction,
    UndefinedTable,
    coded,
)
from streamdb.planner import asof, pg_functions, privileges
from streamdb.planner.coerce import NotALiteral, TypedValue
from streamdb.planner.context import PlanContext
from streamdb.planner.functions import SQL_NAME, resolve_calls
from streamdb.planner.lookup import counted_relation, point_lookup
from streamdb.planner.names import QUOTED_KEYWORDS, normalize, position_of, table_name
from streamdb.planner.numeric_scale import unconstrained_numeric_casts
from streamdb.planner.plans import QueryPlan, RelationInput
from streamdb.planner.regexps import rewrite_regexp_functions
from streamdb.planner.typing import (
    certain_type,
    describe_query,
    duckdb_template,
    exact_numeric_avg,
    keep_declared_types,
    refuse_casts_postgresql_lacks,
    refuse_comparisons_postgresql_lacks,
    refuse_non_boolean_conditions,
    spark_exact_avgs,
)
from streamdb.planner.windows import expand_window_functions
from streamdb.runtime import system_catalog
from streamdb.runtime.api import Column
from streamdb.sql import ast as S
from streamdb.sql.dialect import DATE_PART

ROWTIME = "rowtime"
OP = "op"
ROWKEY = "__rowkey"
# Set on the table references inside an inlined plain view: whose SELECT privilege they need
# (the view owner's, as in Postgres: reading a view needs SELECT on the view only).
VIEW_OWNER = "view_owner"
# A plain view's extra setting: created with a column list (`CREATE VIEW v (a, b) AS ...`).
RENAMED_COLUMNS = "renamed_columns"


def relation_columns(rel: RelationDef, mode: str) -> tuple[tuple[str, T.SqlType], ...]:
    """Columns a relation shows to queries, pseudo-columns included."""
    cols = tuple((c.name, c.type) for c in rel.columns)
    if mode == "changes":
        return ((OP, T.TEXT), (ROWTIME, T.TIMESTAMPTZ), *cols)
    if rel.kind == "stream":
        return (*cols, (ROWTIME, T.TIMESTAMPTZ))
    # Tables carry their row key, hidden from `*`, so UPDATE and DELETE can name rows.
    return (*cols, (ROWKEY, T.BYTEA))


def visible_star_columns(rel: RelationDef, mode: str) -> list[str]:
    """What `*` expands to: pseudo-columns only for SELECT STREAM."""
    names = [c.name for c in rel.columns]
    return [OP, ROWTIME, *names] if mode == "changes" else names


class _Resolver:
    def __init__(self, ctx: PlanContext, mode: str) -> None:
        self.ctx = ctx
        self.mode = mode
        self.inputs: dict[str, RelationInput] = {}
        # registered name -> (relation or None, star columns)
        self.star_columns: dict[str, list[str]] = {}

    def resolve(self, table: exp.Table) -> tuple[str, list[str]]:
        schema, name = table_name(table)
        if table.args.get("catalog"):
            raise UndefinedTable(f'relation "{table.sql()}" does not exist', position=position_of(table))
        rel = None
        if schema in (None, "public"):
            rel = self.ctx.catalog.get(name)
        if rel is not None:
            _require_select(self.ctx, rel, table)
            reg = f"r{rel.id}_changes" if self.mode == "changes" else f"r{rel.id}"
            if reg not in self.inputs:
                self.inputs[reg] = RelationInput(reg, rel.id, None, self.mode,  # type: ignore[arg-type]
                                                 relation_columns(rel, self.mode))
            return reg, visible_star_columns(rel, self.mode)
        key = system_catalog.resolve_system_table(schema, name)
        if key is not None:
            reg = system_catalog.registered_name(key)
            cols = system_catalog.SYSTEM_TABLES[key]
            if reg not in self.inputs:
                self.inputs[reg] = RelationInput(reg, None, key, "state", tuple(cols))
            return reg, [c for c, _ in cols]
        shown = f"{schema}.{name}" if schema else name
        raise UndefinedTable(f'relation "{shown}" does not exist', position=position_of(table))


def _add_unseen_schemaless_columns(ast: exp.Expression, ctx: PlanContext, resolver: _Resolver) -> None:
    """A schemaless stream has every column: one no event has had yet reads as NULL (text)."""
    schemaless = {reg: inp for reg, inp in resolver.inputs.items()
                  if inp.relation_id is not None and (rel := ctx.catalog.by_id(inp.relation_id)) is not None
                  and rel.schemaless}
    if not schemaless:
        return
    known = {c for inp in resolver.inputs.values() for c, _ in inp.columns}
    aliases = {normalize(t.args["alias"].this): t.name for t in ast.find_all(exp.Table)
               if t.args.get("alias") is not None and t.name in schemaless}
    derived = {normalize(a.args["alias"]) for a in ast.find_all(exp.Alias)
               if isinstance(a.args.get("alias"), exp.Identifier)}
    for col in ast.find_all(exp.Column):
        if not isinstance(col.this, exp.Identifier):
            continue
        name = normalize(col.this)
        table = normalize(col.args.get("table")) if col.args.get("table") else None
        if name in known or (table is None and name in derived):
            continue
        reg = aliases.get(table) if table else (next(iter(schemaless)) if len(schemaless) == 1 else None)
        if reg is None:
            continue
        inp = resolver.inputs[reg]
        resolver.inputs[reg] = RelationInput(inp.registered_name, inp.relation_id, None, inp.mode,
                                             (*inp.columns, (name, T.TEXT)))
        known.add(name)


def _cte_names(ast: exp.Expression) -> set[str]:
    return {normalize(cte.args["alias"].this) for cte in ast.find_all(exp.CTE) if cte.args.get("alias")}


def _require_select(ctx: PlanContext, rel: RelationDef, table: exp.Table) -> None:
    owner = table.meta.get(VIEW_OWNER)
    if owner is None:
        privileges.require(ctx, rel, "SELECT", table)
    elif not ctx.catalog.has_privilege(owner, rel, "SELECT"):
        raise privileges.denied(rel, table)


@lru_cache(maxsize=256)
def _parsed_view_body(create_sql: str) -> exp.Expression:
    """A plain view's query from its CREATE statement (the text as written, as for materialized
    views), without source positions: they would point into the view's text, not the statement."""
    from streamdb.sql.parser import parse_one

    body = parse_one(create_sql).args["expression"]
    for node in body.walk():
        if node._meta:
            node._meta.clear()
    return body


def _inline_views(ast: exp.Expression, ctx: PlanContext, mode: str, expanding: tuple[int, ...] = ()) -> list[int]:
    """Replace each reference to a plain view by the view's query, as a subquery under the
    reference's alias (views over views recursively), before anything else resolves tables, so
    that planning downstream (embedded engine, Spark, lookups) only sees stored relations.
    Returns the ids of the views inlined."""
    ctes = _cte_names(ast)
    inlined: list[int] = []
    for table in list(ast.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier) or table.args.get("catalog"):
            continue
        schema, name = table_name(table)
        if schema not in (None, "public") or (schema is None and name in ctes and VIEW_OWNER not in table.meta):
            continue
        rel = ctx.catalog.get(name)
        if rel is None or rel.kind != "view":
            continue
        _require_select(ctx, rel, table)
        if mode == "changes":
            raise FeatureNotSupported(f'view "{name}" has no changes of its own to read',
                                      position=position_of(table),
                                      hint="SELECT STREAM reads a stream's or table's changes; use EMIT CHANGES "
                                           "for the changes of a view's result.")
        if rel.id in expanding:
            raise StreamDBError(f'infinite recursion detected in rules for relation "{name}"', sqlstate="42P17")
        body = _parsed_view_body(rel.create_sql).copy()
        expand_window_functions(body, ctx)
        inner_ctes = _cte_names(body)
        for inner in body.find_all(exp.Table):
            if isinstance(inner.this, exp.Identifier) and not (inner.args.get("db") is None and
                                                               normalize(inner.this) in inner_ctes):
                inner.meta[VIEW_OWNER] = rel.owner
        inlined += [rel.id, *_inline_views(body, ctx, mode, (*expanding, rel.id))]
        alias_node = table.args.get("alias")
        alias = normalize(alias_node.this) if alias_node is not None and alias_node.this else name
        names = [normalize(c) for c in (alias_node.args.get("columns") or [])] if alias_node is not None else []
        if _merge_view(table, body, alias, [*names, *(c.name for c in rel.columns[len(names):])]):
            continue
        if names or dict(rel.extra).get(RENAMED_COLUMNS):
            # Spark wants every column named in a column alias list.
            names += [c.name for c in rel.columns[len(names):]]
        sub = exp.Subquery(this=body, alias=exp.TableAlias(
            this=exp.to_identifier(alias, quoted=True),
            columns=[exp.to_identifier(n, quoted=True) for n in names] or None))
        for key in ("joins", "laterals", "pivots"):
            if table.args.get(key):
                sub.set(key, table.args[key])
        table.replace(sub)
    return inlined


# View merging (docs/views.md, "Plain views"): what a view's query may hold to be merged into
# the query that reads it. Anything else (aggregates, DISTINCT, LIMIT, joins, ...) keeps it a subquery.
_MERGEABLE_VIEW_ARGS = {"expressions", "from_", "where"}
# Evaluated once per row in the view; duplicated by merging (a column read twice), they would not be.
_NOT_DUPLICABLE = (exp.AggFunc, exp.Window, exp.Subquery, exp.Select, exp.Rand, exp.Randn, exp.Uuid,
                   exp.Unnest, exp.Explode, exp.Posexplode, exp.GenerateSeries, exp.ExplodingGenerateSeries, exp.UDTF)
_NOT_DUPLICABLE_CALLS = {"random", "gen_random_uuid", "uuid_generate_v4", "nextval", "clock_timestamp",
                         "generate_series", "unnest", "explode", "setseed"}


def is_star(node: exp.Expression) -> bool:
    """`*` or `t.*` in a select list."""
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


def _mergeable_body(body: exp.Expression, names: list[str]) -> exp.Table | None:
    """The one stored relation a view's query filters and projects, when it only does that."""
    if not isinstance(body, exp.Select) or any(v for k, v in body.args.items() if k not in _MERGEABLE_VIEW_ARGS):
        return None
    frm = body.args.get("from_")
    source = frm.this if frm is not None else None
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier) \
            or any(source.args.get(k) for k in ("joins", "laterals", "pivots", "catalog")) \
            or (source.args.get("alias") is not None and source.args["alias"].args.get("columns")):
        return None
    if len(body.expressions) != len(names) or any(is_star(p) for p in body.expressions):
        return None
    for node in body.walk():
        if node is not body and isinstance(node, _NOT_DUPLICABLE):
            return None
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _NOT_DUPLICABLE_CALLS:
            return None
    own = normalize(source.args["alias"].this) if source.args.get("alias") is not None else source.name
    for col in body.find_all(exp.Column):
        if col.args.get("db") or (col.args.get("table") and normalize(col.args["table"]) != own):
            return None
    return source


def _merge_view(table: exp.Table, body: exp.Expression, alias: str, names: list[str]) -> bool:
    """Merge a view that only filters and projects one relation into the SELECT that reads it
    (when that SELECT reads nothing else): `SELECT x FROM v WHERE c` over `v = SELECT e AS x FROM r
    WHERE d` becomes `SELECT e AS x FROM r AS v WHERE d AND c`. The merged query is the one
    written against the relation, so materialized views and push queries over such views get
    the same incremental strategies. Returns False, changing nothing, where unsafe."""
    source = _mergeable_body(body, names)
    frm = table.parent
    outer = frm.parent if isinstance(frm, exp.From) else None
    if source is None or not isinstance(outer, exp.Select) or outer.args.get("from_") is not frm \
            or any(outer.args.get(k) for k in ("joins", "laterals")) \
            or any(table.args.get(k) for k in ("joins", "laterals", "pivots")) \
            or any(n is not outer for n in outer.find_all(exp.Select, exp.Subquery)):
        return False
    own = source.args["alias"].this if source.args.get("alias") is not None else source.this
    qualifier = exp.to_identifier(alias, quoted=True)
    by_name = {n: (p.unalias() if isinstance(p, exp.Alias) else p) for n, p in zip(names, body.expressions,
                                                                                   strict=True)}
    outputs = {normalize(p.args["alias"]) for p in outer.expressions
               if isinstance(p, exp.Alias) and isinstance(p.args.get("alias"), exp.Identifier)}
    replacements: list[tuple[exp.Column, exp.Expr]] = []
    for col in outer.find_all(exp.Column):
        if is_star(col):
            if col.parent is not outer or col.args.get("table") is None or normalize(col.args["table"]) != alias:
                return False
            continue
        if not isinstance(col.this, exp.Identifier) or col.args.get("db"):
            return False
        name = normalize(col.this)
        if col.args.get("table") is not None:
            if normalize(col.args["table"]) != alias:
                continue  # an enclosing query's column (a correlated subquery)
            if name not in by_name:
                return False
        elif name in outputs and ((isinstance(col.parent, exp.Ordered) and col.parent.parent is outer.args.get("order"))
                                  or name not in by_name):
            continue  # an output column's name (ORDER BY prefers those, as in Postgres)
        elif name not in by_name:
            return False
        replacements.append((col, by_name[name]))
    if any(isinstance(p, exp.Star) and (p.args.get("except") or p.args.get("replace")) for p in outer.expressions):
        return False

    # Checked: now the view's expressions read the relation under the reference's alias.
    for col in body.find_all(exp.Column):
        if col.args.get("table") is None or normalize(col.args["table"]) == normalize(own):
            col.set("table", qualifier.copy())

    def named(name: str) -> exp.Expr:
        return exp.alias_(by_name[name].copy(), exp.to_identifier(name, quoted=True))

    projections: list[exp.Expr] = []
    for p in outer.expressions:
        if is_star(p):
            projections += [named(n) for n in names]
        elif isinstance(p, exp.Column) and any(c is p for c, _ in replacements):
            projections.append(named(normalize(p.this)))
        else:
            projections.append(p)
    for col, expr in replacements:
        if col.parent is not outer:
            atomic = isinstance(expr, (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Boolean, exp.Null))
            col.replace(expr.copy() if atomic else exp.Paren(this=expr.copy()))
    outer.set("expressions", projections)
    source.set("alias", exp.TableAlias(this=qualifier.copy()))
    table.replace(source)
    view_where = body.args.get("where")
    if view_where is not None:
        outer_where = outer.args.get("where")
        condition = view_where.this if outer_where is None else exp.and_(view_where.this, outer_where.this)
        outer.set("where", exp.Where(this=condition))
    return True


def _resolve_tables(ast: exp.Expression, resolver: _Resolver) -> dict[str, list[str]]:
    """Replace every table reference by its registered name; return alias -> star columns."""
    ctes = _cte_names(ast)
    star_by_alias: dict[str, list[str]] = {}
    for table in list(ast.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue  # table functions such as generate_series(...)
        schema, name = table_name(table)
        if schema is None and name in ctes and VIEW_OWNER not in table.meta:
            continue
        reg, star_cols = resolver.resolve(table)
        alias_node = table.args.get("alias")
        alias = normalize(alias_node.this) if alias_node and alias_node.this else name
        new = exp.Table(this=exp.to_identifier(reg))
        if alias_node is not None and alias_node.args.get("columns"):
            new.set("alias", alias_node)
        else:
            new.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
        for key in ("joins", "laterals", "pivots"):
            if table.args.get(key):
                new.set(key, table.args[key])
        table.replace(new)
        star_by_alias[alias] = star_cols
    return star_by_alias


def _rewrite_with_ties(select: exp.Select) -> None:
    """`ORDER BY k FETCH FIRST n ROWS WITH TIES` as `RANK() OVER (ORDER BY k) <= n` in a subquery:
    the rows ranked at most n are the first n and every row tied with the last of them. Neither
    engine takes WITH TIES (it was read as a plain LIMIT), and a view needs the same form."""
    limit = select.args.get("limit")
    options = limit.args.get("limit_options") if isinstance(limit, exp.Fetch) else None
    if options is None or not options.args.get("with_ties"):
        return
    assert isinstance(limit, exp.Fetch)
    order = select.args.get("order")
    if order is None:
        raise StreamDBError("WITH TIES cannot be specified without ORDER BY clause", sqlstate="42601")
    if select.args.get("offset") is not None or select.args.get("distinct") is not None:
        raise FeatureNotSupported("FETCH ... WITH TIES together with OFFSET or DISTINCT")
    count = limit.args.get("count")
    if count is None:
        count = exp.Literal.number(1)
    outputs = list(select.expressions)
    by_alias = {normalize(e.args["alias"]): e.this for e in outputs if isinstance(e, exp.Alias)}

    def key(e: exp.Expression) -> exp.Expression:
        if isinstance(e, exp.Literal) and not e.is_string and e.this.isdigit() and 0 < int(e.this) <= len(outputs):
            chosen = outputs[int(e.this) - 1]  # ORDER BY 2
            return (chosen.this if isinstance(chosen, exp.Alias) else chosen).copy()
        if isinstance(e, exp.Column) and not e.table and normalize(e.this) in by_alias:
            return by_alias[normalize(e.this)].copy()  # ORDER BY an output column's name
        return e.copy()

    keys = [exp.Ordered(this=key(o.this), desc=o.args.get("desc"), nulls_first=o.args.get("nulls_first"))
            for o in order.expressions]
    rank = exp.Window(this=exp.Anonymous(this="RANK"), order=exp.Order(expressions=keys))
    inner = select.copy()
    inner.set("order", None)
    inner.set("limit", None)
    inner.set("expressions", [exp.alias_((e.this if isinstance(e, exp.Alias) else e).copy(), f"__t{i}", quoted=True)
                              for i, e in enumerate(outputs)])
    inner.append("expressions", exp.alias_(rank, "__ties_rank", quoted=True))
    for arg in list(select.args):
        if arg != "with":
            select.set(arg, None)
    select.set("expressions", [exp.alias_(exp.column(f"__t{i}", table="__ties", quoted=True),
                                          postgres_column_name(e), quoted=True) for i, e in enumerate(outputs)])
    select.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier("__ties", quoted=True)))))
    select.set("where", exp.Where(this=exp.LTE(this=exp.column("__ties_rank", table="__ties", quoted=True),
                                               expression=count.copy())))
    select.set("order", exp.Order(expressions=[exp.Ordered(this=exp.column("__ties_rank", table="__ties", quoted=True))]))


def _rewrite_asof(query: exp.Expression, star_by_alias: dict[str, list[str]], resolver: _Resolver,
                  ctx: PlanContext) -> None:
    keys: dict[str, tuple[str, ...]] = {}
    for table in query.find_all(exp.Table):
        alias = table.args.get("alias")
        inp = resolver.inputs.get(table.name)
        rel = ctx.catalog.by_id(inp.relation_id) if inp is not None and inp.relation_id is not None else None
        if alias is not None and rel is not None:
            keys[normalize(alias.this)] = rel.primary_key
    asof.rewrite_asof_joins(query, star_by_alias, lambda alias: keys.get(alias, ()))


def _source_aliases(select: exp.Select) -> list[tuple[str, exp.Expression]]:
    sources: list[exp.Expression] = []
    frm = select.args.get("from_") or select.args.get("from")
    if frm is not None:
        sources.append(frm.this)
    for j in select.args.get("joins") or []:
        sources.append(j.this)
    out = []
    for s in sources:
        alias = s.alias_or_name
        out.append((normalize(alias) if alias else "", s))
    return out


def _known_columns(src: exp.Expression, star_by_alias: dict[str, list[str]]) -> list[str] | None:
    """The columns `*` gives for a FROM item, when it is a relation whose columns are known here."""
    alias = normalize(src.alias_or_name) if src.alias_or_name else ""
    expanded = _expand_one(alias, src, star_by_alias) if alias else []
    if not expanded or any(isinstance(c, exp.Column) and isinstance(c.this, exp.Star) for c in expanded):
        return None
    return [c.name for c in expanded]


def _rewrite_natural_joins(ast: exp.Expression, star_by_alias: dict[str, list[str]]) -> None:
    """`a NATURAL JOIN b` is `a JOIN b USING (the columns both name)`, as Postgres defines it (a
    cross join when they name none). Only over relations whose columns are known here; a NATURAL
    JOIN with a subquery is refused rather than guessed."""
    for select in list(ast.find_all(exp.Select)):
        joins = select.args.get("joins") or []
        if not any((j.args.get("method") or "").upper() == "NATURAL" for j in joins):
            continue
        frm = select.args.get("from_") or select.args.get("from")
        items = [frm.this, *(j.this for j in joins)] if frm is not None else []
        known = [_known_columns(item, star_by_alias) for item in items]
        if not items or any(columns is None for columns in known):
            raise FeatureNotSupported("NATURAL JOIN with a subquery or function is not supported",
                                      hint="Name the join columns with USING (...).")
        left: list[str] = list(known[0] or [])
        for j, columns in zip(joins, known[1:], strict=True):
            right = columns or []
            if (j.args.get("method") or "").upper() == "NATURAL":
                common = [c for c in dict.fromkeys(left) if c in right]
                j.set("method", None)
                if common:
                    j.set("using", [exp.to_identifier(c, quoted=True) for c in common])
                else:
                    j.set("kind", "CROSS")
            left.extend(right)


def _using_merged(select: exp.Select, star_by_alias: dict[str, list[str]]) -> list[exp.Expression] | None:
    """`*` over joins with USING as Postgres gives it: each USING column once, first (the left
    side's value, the right's for RIGHT JOIN, coalesced for FULL JOIN), then the left side's other
    columns, then the right side's. None when no join has USING or a side's columns are unknown."""
    joins = select.args.get("joins") or []
    if not any(j.args.get("using") for j in joins):
        return None
    frm = select.args.get("from_") or select.args.get("from")
    if frm is None:
        return None
    def expanded(item: exp.Expression) -> list[tuple[str, exp.Expression]] | None:
        names = _known_columns(item, star_by_alias)
        if names is None:
            return None
        alias = normalize(item.alias_or_name)
        return [(n, exp.column(n, table=alias, quoted=True)) for n in names]
    cols = expanded(frm.this)
    if cols is None:
        return None
    for j in joins:
        right = expanded(j.this)
        if right is None:
            return None
        using = [normalize(u) for u in j.args.get("using") or []]
        if not using:
            cols = cols + right
            continue
        merged: list[tuple[str, exp.Expression]] = []
        for u in using:
            lefts = [e for n, e in cols if n == u]
            rights = [e for n, e in right if n == u]
            if len(lefts) != 1 or len(rights) != 1:
                return None  # not a column of both sides, or ambiguous: the engine reports it
            side = (j.side or "").upper()
            value = rights[0] if side == "RIGHT" else lefts[0]
            if side == "FULL":
                value = exp.Coalesce(this=lefts[0].copy(), expressions=[rights[0].copy()])
            merged.append((u, value))
        cols = merged + [c for c in cols if c[0] not in using] + [c for c in right if c[0] not in using]
    out: list[exp.Expression] = []
    for n, e in cols:
        out.append(e.copy() if isinstance(e, exp.Column) and e.name == n else exp.Alias(
            this=e.copy(), alias=exp.to_identifier(n, quoted=True)))
    return out


def _expand_stars(ast: exp.Expression, star_by_alias: dict[str, list[str]]) -> None:
    """Expand `*` over base relations here, so pseudo-columns (ROWTIME) stay out of `*`."""
    for select in list(ast.find_all(exp.Select)):
        projections = select.expressions
        if not any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star))
                   for p in projections):
            continue
        sources = _source_aliases(select)
        merged = _using_merged(select, star_by_alias)
        new_proj: list[exp.Expression] = []
        for p in projections:
            if isinstance(p, exp.Star) and not p.args.get("except") and not p.args.get("replace") \
                    and merged is not None:
                new_proj.extend(c.copy() for c in merged)
            elif isinstance(p, exp.Star) and not p.args.get("except") and not p.args.get("replace"):
                for alias, src in sources:
                    new_proj.extend(_expand_one(alias, src, star_by_alias))
            elif isinstance(p, exp.Column) and isinstance(p.this, exp.Star):
                alias = normalize(p.args.get("table"))
                match = next((s for a, s in sources if a == alias), None)
                new_proj.extend(_expand_one(alias, match, star_by_alias) if match is not None else [p])
            else:
                new_proj.append(p)
        select.set("expressions", new_proj)


def _rewrite_approx_percentiles(query: exp.Expression) -> None:
    """RisingWave's approx_percentile(p [, relative_error]) WITHIN GROUP (ORDER BY v) as the exact
    percentile_cont(p): within any error bound, the same on every engine and in a view."""
    for node in list(query.find_all(exp.WithinGroup)):
        fn = node.this
        if not (isinstance(fn, exp.Anonymous) and str(fn.this).lower() == "approx_percentile"):
            continue
        if len(fn.expressions) not in (1, 2):
            raise UndefinedFunction("approx_percentile takes a fraction and an optional relative error")
        exact = exp.PercentileCont(this=fn.expressions[0].copy())
        fn.replace(exact)
        node.meta[SQL_NAME] = "approx_percentile"


def _rewrite_corresponding(query: exp.Expression) -> None:
    """`a UNION [ALL] CORRESPONDING [BY (c, ...)] b` (and INTERSECT, EXCEPT), as the SQL standard
    and RisingWave define it: the columns both sides name (in the left side's order, or BY's),
    each side projected to them by name; then an ordinary set operation."""
    for op in reversed(list(query.find_all(exp.SetOperation))):  # inner ones first
        if not op.args.get("by_name"):
            continue
        what = f"{type(op).__name__.upper()} CORRESPONDING"
        sides = [op.this, op.expression]
        names = [_output_names(side, what) for side in sides]
        by = op.args.get("on")
        if by:
            columns = [normalize(c.this) for c in by]
            for c in columns:
                if columns.count(c) > 1:
                    raise StreamDBError(f'column "{c}" is named twice in {what} BY', sqlstate="42701")
                if any(c not in n for n in names):
                    raise UndefinedColumn(f'column "{c}" of {what} BY is not a column of both sides')
        else:
            columns = [c for c in names[0] if c in names[1]]
            if not columns:
                raise StreamDBError(f"{what}: the two sides have no column name in common", sqlstate="42601")
        for side in sides:
            inner = side.unnest() if isinstance(side, exp.Subquery) else side
            side.replace(exp.select(*(exp.column(c, quoted=True) for c in columns)).from_(
                exp.Subquery(this=inner.copy(), alias=exp.TableAlias(this=exp.to_identifier("corresponding")))))
        for arg in ("by_name", "kind", "side", "on"):
            op.set(arg, None)


def _output_names(query: exp.Expression, what: str) -> list[str]:
    """The output column names of one side of a set operation (`*` already expanded)."""
    while isinstance(query, (exp.Subquery, exp.SetOperation)):
        query = query.this
    if not isinstance(query, exp.Select) or any(
            isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star))
            for p in query.expressions):
        raise FeatureNotSupported(f"{what} over a side whose columns are not named here",
                                  hint="Name the columns of each side in its SELECT list.")
    names = [postgres_column_name(p) for p in query.expressions]
    for n in names:
        if names.count(n) > 1:
            raise StreamDBError(f'column name "{n}" appears twice on one side of {what}', sqlstate="42702")
    return names


def _expand_one(alias: str, src: exp.Expression, star_by_alias: dict[str, list[str]]) -> list[exp.Expression]:
    if isinstance(src, exp.Table) and alias in star_by_alias and isinstance(src.this, exp.Identifier) \
            and src.name.startswith(("r", "sys_")):
        if not star_by_alias[alias]:
            raise UndefinedColumn(f'"{alias}" has no columns yet, so * selects nothing',
                                  hint="A schemaless stream's columns are the keys of the events inserted so far: "
                                       "insert an event first, or name the columns you want.")
        return [exp.column(c, table=alias, quoted=True) for c in star_by_alias[alias]]
    return [exp.Column(this=exp.Star(), table=exp.to_identifier(alias, quoted=True))] if alias else [exp.Star()]


# ---- parameters -----------------------------------------------------------------------


def parameter_nodes(ast: exp.Expression) -> list[exp.Parameter]:
    return [p for p in ast.find_all(exp.Parameter) if isinstance(p.this, exp.Literal)]


def parameter_count(ast: exp.Expression) -> int:
    nums = [int(p.this.this) for p in parameter_nodes(ast)]
    return max(nums, default=0)


def infer_parameter_types(ast: exp.Expression, declared: list[T.SqlType | None],
                          column_type) -> list[T.SqlType]:
    """Postgres-like inference: a cast or a compared column decides; otherwise text."""
    n = max(parameter_count(ast), len(declared))
    out: list[T.SqlType | None] = list(declared) + [None] * (n - len(declared))
    for p in parameter_nodes(ast):
        i = int(p.this.this) - 1
        if out[i] is not None:
            continue
        parent = p.parent
        guess: T.SqlType | None = None
        if isinstance(parent, exp.Cast):
            guess = T.type_from_name(parent.to.sql(dialect="postgres"))
        elif isinstance(parent, (exp.Limit, exp.Offset, exp.Fetch)):
            guess = T.BIGINT
        elif isinstance(parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                                 exp.Add, exp.Sub, exp.Mul, exp.Div)):
            other = parent.expression if parent.this is p else parent.this
            guess = column_type(other) if isinstance(other, exp.Column) else _literal_type(other)
        elif isinstance(parent, (exp.Like, exp.ILike)):
            guess = T.TEXT
        elif isinstance(parent, exp.In):
            guess = column_type(parent.this) if isinstance(parent.this, exp.Column) else None
        elif isinstance(parent, exp.Between):
            guess = column_type(parent.this) if isinstance(parent.this, exp.Column) else None
        out[i] = guess
    # A parameter is plain varchar even next to a varchar(n) column: the length is the column's.
    return [T.VARCHAR if t == T.VARCHAR else t if t is not None else T.TEXT for t in out]


def _literal_type(node: exp.Expression) -> T.SqlType | None:
    if isinstance(node, exp.Literal):
        if node.is_string:
            return T.TEXT
        return T.BIGINT if node.this.lstrip("-").isdigit() else T.NUMERIC
    return None


def typed_null(t: T.SqlType) -> exp.Expression:
    return exp.Cast(this=exp.Null(), to=exp.DataType.build(_cast_name(t), dialect="postgres"))


def _cast_name(t: T.SqlType) -> str:
    return {"timestamp with time zone": "timestamptz", "timestamp without time zone": "timestamp",
            "time without time zone": "time", "character varying": "varchar",
            "double precision": "double precision", "unknown": "text", "name": "text",
            '"char"': "text", "oid": "bigint"}.get(t.name, t.name)


def literal_for(value: object, t: T.SqlType) -> exp.Expression:
    """A SQL literal carrying a bound parameter value (typed by a cast)."""
    from streamdb import values

    if value is None:
        return typed_null(t)
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int) and T.is_integer(t):
        lit: exp.Expression = exp.Literal.number(value)
        return exp.Cast(this=lit, to=exp.DataType.build(_cast_name(t), dialect="postgres"))
    text = values.format_text(value, t) if not isinstance(value, str) else value
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build(_cast_name(t), dialect="postgres"))


@cache
def _cast_target(t: T.SqlType) -> T.SqlType | None:
    """The type literal_value reads a literal_for(value, t) cast as (None: not a literal)."""
    return T.type_from_name(exp.DataType.build(_cast_name(t), dialect="postgres").sql(dialect="postgres"))


def bound_literal_value(value: object, t: T.SqlType) -> Any:
    """literal_value(literal_for(value, t)), without building and reading back the tree: a prepared
    INSERT's parameters go straight into its rows. Raises NotALiteral where that would."""
    target = _cast_target(t)
    if target is None:
        raise NotALiteral
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and T.is_integer(t):
        return TypedValue(value, target)
    from streamdb import values

    text = value if isinstance(value, str) else values.format_text(value, t)
    return TypedValue(values.parse_text(text, target), target)


_PLACEHOLDER = re.compile(r"\$(\d+)")


def takes_parameters(plan: QueryPlan, count: int) -> bool:
    """Whether the embedded engine's SQL of `plan` takes exactly the placeholders $1..$count (the
    rewrites for catalog functions may fold some away), so the values can be passed as parameters."""
    return {int(n) for n in _PLACEHOLDER.findall(plan.duckdb_sql)} == set(range(1, count + 1))


def bind_parameters(ast: exp.Expression, params: list[object], types: tuple[T.SqlType, ...]) -> exp.Expression:
    ast = ast.copy()
    for p in parameter_nodes(ast):
        i = int(p.this.this) - 1
        t = types[i] if i < len(types) else T.TEXT
        p.replace(literal_for(params[i] if i < len(params) else None, t))
    return ast


# ---- result names ---------------------------------------------------------------------


def postgres_column_name(node: exp.Expression) -> str:
    """The name Postgres gives an output column."""
    if isinstance(node, exp.Alias):
        return normalize(node.args["alias"])
    named = (getattr(node, "_meta", None) or {}).get(SQL_NAME)  # a function's call (planner/functions.py)
    if named:
        return str(named)
    if isinstance(node, exp.Column):
        return normalize(node.this) if isinstance(node.this, exp.Identifier) else "?column?"
    if isinstance(node, exp.Cast):
        return _cast_column_name(node)[0]
    if isinstance(node, (exp.Paren, exp.Bracket, exp.WithinGroup)):  # (f(x)), f(x)[i]: named after f, as in Postgres
        return postgres_column_name(node.this)
    if isinstance(node, (exp.Window, exp.Filter)):  # agg(...) OVER (...), agg(...) FILTER (WHERE ...)
        return postgres_column_name(node.this)
    if isinstance(node, (exp.JSONExtract, exp.JSONExtractScalar, exp.JSONBExtract, exp.JSONBExtractScalar,
                         exp.RegexpLike, exp.RegexpILike)):
        return "?column?"  # an operator (->, ->>, #>, ~, ~*), not a function (those are named at parse)
    if isinstance(node, exp.Count):
        return "count"
    if isinstance(node, (exp.ExplodingGenerateSeries, exp.GenerateSeries)):
        return "generate_series"
    if isinstance(node, exp.TimeToStr):
        return "to_char"
    if isinstance(node, (exp.LogicalAnd, exp.LogicalOr)):  # sqlglot's names for them
        return "bool_and" if isinstance(node, exp.LogicalAnd) else "bool_or"
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        key = node.sql_name().lower() if hasattr(node, "sql_name") else node.key
        return {"current_timestamp": "now", "array_agg": "array_agg", "group_concat": "string_agg",
                "listagg": "string_agg", "string_agg": "string_agg", "if": "case",
                "case": "case", "coalesce": "coalesce"}.get(key, key)
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, exp.Interval):
        return "interval"  # interval '90 minutes' is a typed literal: a cast to its type
    return "?column?"


def _cast_column_name(node: exp.Cast) -> tuple[str, int]:
    """A cast's column name and its strength, as PostgreSQL's FigureColname: a column's or a
    function's name (strength 2) goes through casts (`(x::text)::float8` is `x`); otherwise the
    outermost cast's type names it (strength 1: `0.1::float4::text` is `text`)."""
    inner = node.this.unnest()
    if isinstance(inner, exp.Cast):
        name, strength = _cast_column_name(inner)
    else:
        name = postgres_column_name(node.this)
        strength = 0 if name == "?column?" else 2
    if strength == 2:
        return name, 2
    typed = {"int": "int4", "integer": "int4", "bigint": "int8", "smallint": "int2",
             "text": "text", "boolean": "bool", "double": "float8", "float": "float8",
             "double precision": "float8", "char": "bpchar", "bpchar": "bpchar",
             "real": "float4", "varchar": "varchar", "timestamp": "timestamp",
             "timestamptz": "timestamptz", "date": "date", "numeric": "numeric",
             "decimal": "numeric", "json": "json", "jsonb": "jsonb", "interval": "interval",
             "time": "time", "timetz": "timetz", "uuid": "uuid", "bytea": "bytea",
             }.get(node.to.sql(dialect="postgres").lower().split("(")[0], "?column?")
    return typed, 1 if typed != "?column?" else 0


# ---- the plan -------------------------------------------------------------------------


def _refuse_nested_select_stream(ast: exp.Expression) -> None:
    """SELECT STREAM reads every input as its change log for the whole query; the caller has
    already unwrapped a top-level one, so any left is in a subquery or CTE, where it would mean
    mixing changes and state in one query."""
    nested = ast.find(S.SelectStream)
    if nested is not None:
        raise FeatureNotSupported(
            "SELECT STREAM is not supported in a subquery", position=position_of(nested),
            hint="Use SELECT STREAM as the whole statement, or read the subquery's relations as tables.")


_UNDEFINED_COLUMN = re.compile(r'^column (?:"(?P<quoted>[^"]+)"|(?P<qualifier>[^ ."]+)\.(?P<name>[^ "]+)) does not exist$')


def _undefined_column_position(ast: exp.Expression, message: str) -> int | None:
    """Where the engine's undefined column first appears in the statement, as Postgres reports
    it (a qualified reference from its qualifier); None when it is not in the user's text."""
    m = _UNDEFINED_COLUMN.match(message)
    if m is None:
        return None
    name = m.group("quoted") or m.group("name")
    qualifier = m.group("qualifier")
    for col in ast.find_all(exp.Column):
        if col.name.lower() != name.lower() or (qualifier and col.table.lower() != qualifier.lower()):
            continue
        table = col.args.get("table")
        return position_of(table if isinstance(table, exp.Identifier) else col)
    return None


def plan_query(ast: exp.Expression, ctx: PlanContext, *, changes: bool = False,
               declared_params: list[T.SqlType | None] | None = None) -> QueryPlan:
    mode = "changes" if changes else "state"
    _refuse_nested_select_stream(ast)
    query = ast.copy()
    expand_window_functions(query, ctx)
    views = tuple(dict.fromkeys(_inline_views(query, ctx, mode)))
    functions = resolve_calls(query, ctx)
    resolver = _Resolver(ctx, mode)
    _integer_series_tables(query)
    _scalar_function_tables(query)
    star_by_alias = _resolve_tables(query, resolver)
    _rewrite_natural_joins(query, star_by_alias)
    _expand_stars(query, star_by_alias)
    _rewrite_corresponding(query)
    if any(asof.is_asof(j) for j in query.find_all(exp.Join)):
        _rewrite_asof(query, star_by_alias, resolver, ctx)
    for select in list(query.find_all(exp.Select)):
        _rewrite_with_ties(select)
    rewrite_regexp_functions(query)
    _json_path_operators(query)
    _rewrite_approx_percentiles(query)
    _add_unseen_schemaless_columns(query, ctx, resolver)
    inputs = tuple(resolver.inputs.values())
    refuse_non_boolean_conditions(query, inputs)
    refuse_casts_postgresql_lacks(query, inputs)
    refuse_comparisons_postgresql_lacks(query, inputs)
    _array_text_literals(query)
    _mark_from_types(query, inputs)
    _formats_as_concatenations(query)
    _quote_functions(query)
    _length_limited_casts(query)
    _postgresql_numbering(query)
    _math_domain_errors(query)
    _fractional_seconds(query)
    _substrings_from_one(query)
    for every in [a for a in query.find_all(exp.Anonymous) if a.name.lower() == "every" and len(a.expressions) == 1]:
        both = exp.LogicalAnd(this=every.expressions[0].copy())  # every() is bool_and() (neither engine has it)
        both.meta[SQL_NAME] = "every"
        every.replace(both)
    for hexed in list(query.find_all(exp.Hex)):  # to_hex() is lowercase in PostgreSQL, HEX() upper in both engines
        if not isinstance(hexed.parent, exp.Lower):
            lowered = exp.Lower(this=hexed.copy())
            lowered.meta[SQL_NAME] = "to_hex"
            hexed.replace(lowered)

    def column_type(col: exp.Column) -> T.SqlType | None:
        name = normalize(col.this) if isinstance(col.this, exp.Identifier) else ""
        for inp in inputs:
            for cname, ctype in inp.columns:
                if cname == name:
                    return ctype
        return None

    param_types = tuple(infer_parameter_types(query, list(declared_params or []), column_type))
    # The engine's own avg() is a double; its array_agg and string_agg differ from Postgres' too.
    duck_query = similar_to_as_regex(_duckdb_float_text(_duckdb_integer_text(_duckdb_float_rounds(_duckdb_interval_sums(unconstrained_numeric_casts(
        _duckdb_string_aggs(_sorted_distinct_array_aggs(exact_numeric_avg(query, inputs)))))))))
    # The stored SQL keeps $n placeholders (the runtime binds values before running it); it is
    # described with typed NULLs in their place. Without parameters the two are the same text,
    # generated once (duck_query is this function's own copy, see exact_numeric_avg).
    duck_sql: str | None = None
    if parameter_nodes(duck_query):
        described = duck_query.copy()
        for p in parameter_nodes(described):
            described_type = param_types[int(p.this.this) - 1]
            p.replace(typed_null(described_type))
        described_sql = pg_functions.rewrite_for_duckdb(described, ctx).sql(dialect=pg_functions.EmbeddedDuckDB)
    else:
        described_sql = duck_sql = pg_functions.rewrite_for_duckdb(duck_query, ctx).sql(dialect=pg_functions.EmbeddedDuckDB)
    try:
        described_cols = describe_query(described_sql, inputs, ctx)
    except UndefinedColumn as e:
        raise e.with_position(_undefined_column_position(ast, e.message)) from None
    names = [c.name for c in described_cols]
    top = query if isinstance(query, exp.Select) else None
    if top is not None and len(top.expressions) == len(names):
        names = [postgres_column_name(e) if not isinstance(e, exp.Column) or isinstance(e.this, exp.Identifier)
                 else n for e, n in zip(top.expressions, names, strict=True)]
    described_cols = keep_declared_types(query, inputs, described_cols)
    columns = tuple(Column(n, c.type, type_modifier=c.type_modifier)
                    for n, c in zip(names, described_cols, strict=True))
    if duck_sql is None:
        duck_sql = pg_functions.rewrite_for_duckdb(duck_query, ctx).sql(dialect=pg_functions.EmbeddedDuckDB)
    # `query` is this function's own tree and nothing changes it after this point.
    return QueryPlan(duckdb_sql=duck_sql, spark_source=partial(spark_sql_for, query, inputs), inputs=inputs,
                     columns=columns,
                     param_types=param_types, resolved_source=partial(query.sql, dialect="streamdb"),
                     lookup=point_lookup(query, inputs, param_types, ctx), count_of=counted_relation(query, inputs, ctx),
                     views=views, functions=functions)


# sdb_raise('SQLSTATE:message') raises PostgreSQL's error from SQL: error() in the embedded
# engine (a macro), raise_error() on Spark (spark_semantics); both engines' error translation and
# a view's row errors read the SQLSTATE back from the message.
RAISE_FUNCTION = "sdb_raise"


def raise_call(sqlstate: str, message: str) -> exp.Expression:
    return exp.Anonymous(this=RAISE_FUNCTION, expressions=[exp.Literal.string(coded(sqlstate, message))])


def _substrings_from_one(query: exp.Expression) -> None:
    """substr(s, start [, n]) as PostgreSQL counts: positions before 1 take part of the length
    and give nothing (substr('hello', -1, 3) is 'h'), where both engines count a start below 1
    from the end ('o'); a negative length is 22011. Mutates `query`."""
    for node in list(query.find_all(exp.Substring)):
        start, length = node.args.get("start"), node.args.get("length")
        positive = isinstance(start, exp.Literal) and start.is_number and start.name.isdigit() and int(start.name) >= 1
        counted = isinstance(length, exp.Literal) and length.is_number and length.name.isdigit()
        if start is None or (positive and (length is None or counted)):
            continue
        def at_least_one(e: exp.Expression) -> exp.Expression:  # NULL stays NULL (greatest() would skip it)
            return exp.Case(ifs=[exp.If(this=exp.LT(this=e.copy(), expression=exp.Literal.number(1)),
                                        true=exp.Literal.number(1))], default=e.copy())

        first = at_least_one(start)
        fixed: exp.Expression = exp.Substring(this=node.this.copy(), start=first)
        if length is not None:
            end = at_least_one(exp.Paren(this=exp.Add(this=start.copy(), expression=length.copy())))
            fixed.set("length", exp.Sub(this=end, expression=first.copy()))
            if not counted:
                fixed = exp.Case(ifs=[exp.If(this=exp.LT(this=length.copy(), expression=exp.Literal.number(0)),
                                             true=raise_call("22011", "negative substring length not allowed"))],
                                 default=fixed)
        if SQL_NAME in node.meta:
            fixed.meta[SQL_NAME] = node.meta[SQL_NAME]
        node.replace(fixed)


# sdb_seconds(x): the seconds of x with their fraction (a DuckDB macro; Spark's EXTRACT(SECOND)).
SECONDS_FUNCTION = "sdb_seconds"


def _fractional_seconds(query: exp.Expression) -> None:
    """extract(second FROM x) keeps the fraction, as a numeric with 6 decimals in PostgreSQL 14+
    (date_part('second', x) as a double); the embedded engine's EXTRACT(SECOND) gave whole
    seconds. Mutates `query`."""
    for node in list(query.find_all(exp.Extract)):
        if node.this is None or node.this.name.upper() not in ("SECOND", "SECONDS"):
            continue
        date_part = bool(node.meta.get(DATE_PART))
        seconds = exp.Cast(this=exp.Anonymous(this=SECONDS_FUNCTION, expressions=[node.expression.copy()]),
                           to=exp.DataType.build("DOUBLE" if date_part else "DECIMAL(8, 6)"))
        seconds.meta[SQL_NAME] = "date_part" if date_part else "extract"
        node.replace(seconds)


def _math_domain_errors(query: exp.Expression) -> None:
    """sqrt, ln, log and power of arguments outside their domain are errors in PostgreSQL (2201E,
    2201F; a logarithm to base 1 divides by zero), as are acos and asin outside [-1, 1] and an
    exp() out of a double's range (22003), where the engines give NaN, infinity, zero or NULL:
    each call checks its arguments (exp: its result) first. Mutates `query`."""
    zero, negative = "cannot take logarithm of zero", "cannot take logarithm of a negative number"

    def below(x: exp.Expression, bound: int = 0) -> exp.Expression:
        return exp.LT(this=x.copy(), expression=exp.Literal.number(bound))

    def equal(x: exp.Expression, value: int) -> exp.Expression:
        return exp.EQ(this=x.copy(), expression=exp.Literal.number(value))

    def positive_literal(x: exp.Expression) -> bool:
        return isinstance(x, exp.Literal) and x.is_number and float(x.name) > 0

    def double(text: str) -> exp.Expression:
        return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("DOUBLE"))

    for node in list(query.find_all(exp.Sqrt, exp.Ln, exp.Log, exp.Pow, exp.Exp, exp.Acos, exp.Asin)):
        checks: list[tuple[exp.Expr, str, str]] = []
        if isinstance(node, exp.Sqrt) and not positive_literal(node.this):
            checks.append((below(node.this), "2201F", "cannot take square root of a negative number"))
        elif isinstance(node, (exp.Ln, exp.Log)):
            operands = [node.this, *([node.expression] if node.expression is not None else [])]
            for x in operands:
                if not positive_literal(x):
                    checks += [(equal(x, 0), "2201E", zero), (below(x), "2201E", negative)]
            if node.expression is not None and not positive_literal(node.this):
                checks.append((equal(node.this, 1), "22012", "division by zero"))
        elif isinstance(node, exp.Pow):
            x, y = node.this, node.expression
            y_number = isinstance(y, exp.Literal) and y.is_number
            if not (y_number and float(y.name) >= 0) and not positive_literal(x):
                checks.append((exp.and_(equal(x, 0), below(y)), "2201F", "zero raised to a negative power is undefined"))
            if not (y_number and float(y.name).is_integer()) and not positive_literal(x):
                checks.append((exp.and_(below(x), exp.NEQ(this=y.copy(), expression=exp.Floor(this=y.copy()))), "2201F",
                               "a negative number raised to a non-integer power yields a complex result"))
        elif isinstance(node, (exp.Acos, exp.Asin)) and not isinstance(node.this, exp.Literal):
            checks.append((exp.or_(below(node.this, -1), exp.GT(this=node.this.copy(), expression=exp.Literal.number(1))),
                           "22003", "input is out of range"))
        elif isinstance(node, exp.Exp) and not isinstance(node.this, exp.Literal):
            # As PostgreSQL's float8 exp(): an infinite result of a finite argument overflows, a
            # result below the smallest normal double (0 included) of one above -Infinity underflows.
            result = node.copy()
            checks += [(exp.and_(exp.EQ(this=result.copy(), expression=double("Infinity")),
                                 exp.LT(this=node.this.copy(), expression=double("Infinity"))),
                        "22003", "value out of range: overflow"),
                       (exp.and_(exp.LT(this=result.copy(), expression=double("2.2250738585072014e-308")),
                                 exp.GT(this=node.this.copy(), expression=double("-Infinity"))),
                        "22003", "value out of range: underflow")]
        if checks:
            guarded = exp.Case(ifs=[exp.If(this=cond, true=raise_call(state, message)) for cond, state, message in checks],
                               default=node.copy())
            guarded.meta[SQL_NAME] = postgres_column_name(cast(exp.Expression, node))  # sqrt, not the CASE's name
            node.replace(guarded)


def _integer_series_tables(query: exp.Expression) -> None:
    """`FROM generate_series(a, b [, step]) [AS t[(x)]]` over integer literals as a subquery naming
    its column as PostgreSQL does (x, else t, else generate_series) with PostgreSQL's type: an
    integer where every argument is one (both engines' series are bigint). Mutates `query`."""
    for table in list(query.find_all(exp.Table)):
        series = table.this
        alias = table.args.get("alias")
        columns = alias.args.get("columns") if alias is not None else None
        if not isinstance(series, (exp.ExplodingGenerateSeries, exp.GenerateSeries)) or table.args.get("ordinality") \
                or (columns and len(columns) > 1):
            continue
        args = [a for a in (series.args.get("start"), series.args.get("end"), series.args.get("step")) if a is not None]
        if not all(isinstance(a.unnest(), exp.Literal) or isinstance(a, exp.Neg) and isinstance(a.this, exp.Literal)
                   for a in args):
            continue  # over another table's columns (lateral): left as it is
        table_name = alias.this.copy() if alias is not None and alias.this else exp.to_identifier("generate_series")
        column = columns[0].copy() if columns else table_name.copy()
        value: exp.Expression = exp.column(column.copy())
        if all(_small_integer(a) for a in args):
            value = exp.Cast(this=value, to=exp.DataType.build("INT"))
        inner = exp.Table(this=series.copy(), alias=exp.TableAlias(this=table_name.copy(), columns=[column.copy()]))
        select = exp.select(exp.alias_(value, column.copy())).from_(inner)
        table.replace(exp.Subquery(this=select, alias=exp.TableAlias(this=table_name)))


# Function calls sqlglot parses that return a set or read a table (the others it knows are scalar);
# the set-returning functions it does not know (jsonb_each, regexp_matches, ...) are exp.Anonymous.
# By name as well, so that a table function a later sqlglot adds is left alone too (read_csv as a
# scalar call lost its "reading files is not allowed" error).
_SET_RETURNING = (exp.Explode, exp.Posexplode, exp.Inline, exp.Unnest, exp.GenerateSeries,
                  exp.ExplodingGenerateSeries, exp.UDTF, exp.Anonymous, exp.ReadCSV, exp.ReadParquet)
_SET_RETURNING_NAMES = ("Read", "Explode", "Posexplode", "Generate", "Generator", "Flatten", "Stack", "Unnest")


def _returns_a_set(func: exp.Func) -> bool:
    name = type(func).__name__.lstrip("_")
    return isinstance(func, _SET_RETURNING) or name.startswith(_SET_RETURNING_NAMES) or "Table" in name


def _scalar_function_tables(query: exp.Expression) -> None:
    """`FROM f(args) [AS t[(c)]]` where f is a scalar function (abs, upper, now, ...): PostgreSQL
    reads it as a table of one row whose column is named c, else t, else f. Rewritten to that
    row as a subquery, when the arguments read no other table's columns. Mutates `query`."""
    for table in list(query.find_all(exp.Table)):
        func = table.this
        if not isinstance(func, exp.Func) or _returns_a_set(func) or table.args.get("ordinality") \
                or any(True for _ in func.find_all(exp.Column)):
            continue
        alias = table.args.get("alias")
        columns = alias.args.get("columns") if alias is not None else None
        if columns and len(columns) > 1:
            continue  # too many column names: refused as before
        table_name = alias.this.copy() if alias is not None and alias.this else \
            exp.to_identifier(postgres_column_name(cast(exp.Expression, func)))
        column = columns[0].copy() if columns else table_name.copy()
        select = exp.select(exp.alias_(func.copy(), column))
        table.replace(exp.Subquery(this=select, alias=exp.TableAlias(this=table_name)))


_SMALL_INTS = (exp.DataType.Type.INT, exp.DataType.Type.SMALLINT, exp.DataType.Type.TINYINT)


def _small_integer(node: exp.Expr) -> bool:
    """Whether PostgreSQL types `node` as an integer narrower than bigint. sqlglot types an integer
    division (and arithmetic, a CASE or a COALESCE over one) as bigint, where PostgreSQL keeps the
    operands' width."""
    e = node.unnest() if isinstance(node, exp.Expression) else node
    if isinstance(e, exp.Sub) and _is_date(e.this) and _is_date(e.expression):
        return True  # a number of days, an integer (cast so by _mark_from_types)
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)) and (not isinstance(e, exp.Div) or e.args.get("typed")):
        return _small_integer(e.this) and _small_integer(e.expression)
    if isinstance(e, (exp.Neg, exp.Nullif)):
        return _small_integer(e.this)
    if isinstance(e, exp.Case):
        branches = [i.args["true"] for i in e.args.get("ifs") or []] + [d for d in [e.args.get("default")] if d]
        return all(_small_integer(b) for b in branches)
    if isinstance(e, exp.Coalesce):
        return all(_small_integer(x) for x in [e.this, *e.expressions])
    if isinstance(e, exp.Literal) and e.is_number:  # sqlglot types 3000000000 as an int too
        return e.name.isdigit() and int(e.name) <= 2**31 - 1
    return e.type is not None and e.type.this in _SMALL_INTS


def _typed_copy(query: exp.Expression, inputs: tuple[RelationInput, ...], *,
                modifiers: bool = False, expand_stars: bool = False) -> exp.Expression:
    """A copy with columns qualified and every node's type annotated (sqlglot's optimizer);
    `modifiers`: numeric(p, s) columns typed with their precision and scale; `expand_stars`: a
    `*` replaced by the columns it stands for."""

    def type_text(t: T.SqlType) -> str:
        ps = t.precision_scale if modifiers else None
        return f"decimal({ps[0]}, {ps[1]})" if ps is not None else t.name

    schema: dict[str, object] = {i.registered_name: {name: type_text(t) for name, t in i.columns} for i in inputs}
    typed = qualify(query.copy(), schema=schema, dialect="postgres", validate_qualify_columns=False,
                    quote_identifiers=False, expand_stars=expand_stars)
    return annotate_types(typed, schema=schema, dialect="postgres")


# PostgreSQL adds intervals field by field: months, days and the time apart.
_INTERVAL_SUM_PARTS = (("TO_MONTHS", "INT", "DATEPART('year', __x) * 12 + DATEPART('month', __x)"),
                       ("TO_DAYS", "INT", "DATEPART('day', __x)"),
                       ("TO_MICROSECONDS", "BIGINT", "DATEPART('hour', __x) * 3600000000 + "
                                                     "DATEPART('minute', __x) * 60000000 + DATEPART('microseconds', __x)"))


_FLOATS = (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT)
_INTEGER_TARGETS = (exp.DataType.Type.SMALLINT, exp.DataType.Type.INT, exp.DataType.Type.BIGINT)


def _rounds_a_float(node: exp.Expr) -> bool:
    """round(x) or x::integer of a double or real: PostgreSQL rounds those half to even (rint),
    where both engines round half away from zero (Spark's cast truncates)."""
    if isinstance(node, exp.Round) and node.args.get("decimals") is None:
        arg = node.this
    elif isinstance(node, exp.Cast) and node.to.is_type(*_INTEGER_TARGETS):
        arg = node.this
    else:
        return False
    if node.meta.get("float_round", False):
        return True
    t = certain_type(arg)  # not avg(): a double to sqlglot, numeric (rounded half up) to PostgreSQL
    return t is not None and t.is_type(*_FLOATS)


def _is_numeric_percentile(node: exp.Expr) -> bool:
    """percentile_cont(p) WITHIN GROUP (ORDER BY x) of a number: PostgreSQL computes it in double
    precision (the embedded engine in x's own type)."""
    if not isinstance(node, exp.WithinGroup) or not isinstance(node.this, exp.PercentileCont):
        return False
    order = node.expression
    if not isinstance(order, exp.Order) or len(order.expressions) != 1:
        return False
    t = certain_type(order.expressions[0].this)
    return t is not None and (t.is_type(*exp.DataType.INTEGER_TYPES) or t.is_type(*exp.DataType.REAL_TYPES))


def _mark_from_types(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> None:
    """Where the engines must be told what PostgreSQL's types decide, found on one typed copy:
    sum() of smallint or integer is bigint (the embedded engine would give a 128-bit integer,
    numeric to clients) and date - date an integer (a bigint in both engines), so they are cast;
    sum(interval) (meta `interval_sum`, for _duckdb_interval_sums), round(x) and integer casts of
    doubles (meta `float_round`) and percentile_cont of numbers (meta `double_percentile`) are
    marked for each engine's copy."""
    kinds = (exp.Sum, exp.Round, exp.Cast, exp.WithinGroup, exp.Sub, exp.Sign, exp.Anonymous, *_TEXT_JOINS)
    nodes = [n for n in query.find_all(*kinds) if not isinstance(n, exp.Anonymous) or _is_gcd_or_lcm(n)]
    if not nodes:
        return
    for i, n in enumerate(nodes):
        n.meta["typed_id"] = i
    try:
        typed = _typed_copy(query, inputs)
    except Exception:  # noqa: BLE001 - an unqualifiable shape keeps the engines' own types
        return
    casts: list[tuple[exp.Expr, str]] = []
    casts_to_boolean: list[exp.Expr] = []
    float_operands: list[tuple[exp.Expression, int]] = []
    for n in typed.find_all(*kinds):
        found = n.meta.get("typed_id")
        if not isinstance(found, int):
            continue
        node = nodes[found]
        if isinstance(n, _TEXT_JOINS):
            # text || float, concat(float, ...), format('%s', float): the float's text as PostgreSQL writes it
            for typed_operand, operand in zip(_text_operands(n), _text_operands(node), strict=False):
                if (digits := _float_text_digits(typed_operand)) is not None:
                    float_operands.append((operand, digits))
        elif isinstance(n, exp.Cast) and n.to.is_type(*_TEXT_TARGETS) and n.this is not None \
                and (digits := _float_text_digits(n.this)) is not None:
            node.meta["float_text"] = digits
        elif isinstance(n, exp.Sign):
            # PostgreSQL's sign() takes a double or a numeric, and gives the same (both engines: a
            # tinyint); an integer argument is taken as a double. Only where the argument's type is
            # certain: sqlglot types a VALUES column of 1.5 as a double.
            t = certain_type(n.this) if n.this is not None else None
            if t is not None and (t.this in exp.DataType.INTEGER_TYPES or (
                    t.this in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT) and not isinstance(n.this, exp.Column))):
                casts.append((node, "DOUBLE"))
            elif t is not None and t.this is exp.DataType.Type.DECIMAL:
                casts.append((node, "NUMERIC"))
        elif isinstance(n, exp.Anonymous):
            if all(_small_integer(a) for a in n.expressions):  # gcd, lcm of integers: an integer
                casts.append((node, "INT"))
        elif isinstance(n, exp.Sub):
            if _is_date(n.this) and _is_date(n.expression):
                casts.append((node, "INT"))
        elif isinstance(n, exp.Sum):
            t = n.this.type if n.this is not None else None
            if n.this is not None and _small_integer(n.this):
                casts.append((node.parent if isinstance(node.parent, exp.Window) else node, "BIGINT"))
            elif t is not None and t.this is exp.DataType.Type.INTERVAL:
                node.meta["interval_sum"] = True
        elif _rounds_a_float(n):
            node.meta["float_round"] = True
        elif _is_numeric_percentile(n):
            node.meta["double_percentile"] = True
        elif isinstance(n, exp.Cast) and n.to.this in _INTEGER_TARGETS and _is_text(n.this):
            node.meta["integer_text"] = True
        elif isinstance(n, exp.Cast) and n.to.this is exp.DataType.Type.BOOLEAN and _is_text(n.this):
            casts_to_boolean.append(node)
    for node in casts_to_boolean:
        if isinstance(node, exp.Cast):
            read = _boolean_from_text(node.this)
            read.meta[SQL_NAME] = postgres_column_name(node)  # bool, or the cast column's name
            node.replace(read)
    for node, type_name in casts:
        _cast_in_place(node, type_name)
    for operand, digits in float_operands:
        _float_as_text(operand, digits)


_FORMAT_SPECIFIER = re.compile(r"%(.)", re.DOTALL)


def _length_limited_casts(query: exp.Expression) -> None:
    """An explicit cast to varchar(n) or char(n) keeps the first n characters in PostgreSQL
    (`'abcdef'::varchar(3)` is `abc`); both engines kept the whole text. The value is cut to n
    characters (of its text: a float's as PostgreSQL writes it, its mark moved to that cast) and
    the cast keeps its column name. Mutates `query`."""
    for node in list(query.find_all(exp.Cast)):
        to, value = node.to, node.this
        params = to.expressions if to is not None else []
        if value is None or to.this not in (exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR) or len(params) != 1:
            continue
        length = params[0].this if isinstance(params[0], exp.DataTypeParam) else params[0]
        if not (isinstance(length, exp.Literal) and length.is_int):
            continue
        name = postgres_column_name(node)
        as_text = exp.Cast(this=value.copy(), to=exp.DataType.build("TEXT"))
        if "float_text" in node.meta:
            as_text.meta["float_text"] = node.meta.pop("float_text")
        node.set("this", exp.Substring(this=as_text, start=exp.Literal.number(1), length=length.copy()))
        node.meta[SQL_NAME] = name


def _formats_as_concatenations(query: exp.Expression) -> None:
    """format() with a literal format string of %s, %L and %% as the concatenation of its parts:
    the embedded engine's FORMAT reads {} (sqlglot turns a lone %s into one, not two), so
    `format('x=%s y=%s', x, y)` gave 'x=%s y=%s'; Spark's format_string prints NULL as `null`
    and has no %L. PostgreSQL: %s is the argument's text, '' for NULL; %L quotes it as a literal
    (NULL unquoted); %I as an identifier, as quote_ident() (NULL is NULL, where PostgreSQL
    refuses it). Other specifiers (positions, widths) keep the engines' own format."""
    for node in list(query.find_all(exp.Format)):
        pattern = node.this
        if not isinstance(pattern, exp.Literal) or not pattern.is_string:
            continue
        text, args = pattern.this, list(node.expressions)
        specifiers = [m.group(1) for m in _FORMAT_SPECIFIER.finditer(text)]
        if any(k not in "sIL%" for k in specifiers) or sum(k != "%" for k in specifiers) > len(args):
            continue
        parts: list[exp.Expression] = []
        used, pos = 0, 0
        for m in _FORMAT_SPECIFIER.finditer(text):
            if m.start() > pos:
                parts.append(exp.Literal.string(text[pos:m.start()]))
            pos = m.end()
            if m.group(1) == "%":
                parts.append(exp.Literal.string("%"))
                continue
            arg = args[used]
            used += 1
            as_text = exp.Cast(this=arg.copy(), to=exp.DataType.build("TEXT"))
            if m.group(1) == "s":
                parts.append(exp.Coalesce(this=as_text, expressions=[exp.Literal.string("")]))
            elif m.group(1) == "I":
                parts.append(_quoted_identifier(as_text))
            else:
                parts.append(exp.Case(ifs=[exp.If(this=exp.Is(this=arg.copy(), expression=exp.Null()),
                                                  true=exp.Literal.string("NULL"))], default=_quoted_literal(as_text)))
        if pos < len(text):
            parts.append(exp.Literal.string(text[pos:]))
        joined = exp.Concat(expressions=parts or [exp.Literal.string("")])
        joined.meta[SQL_NAME] = "format"
        node.replace(joined)


def _quoted_literal(text: exp.Expression) -> exp.Expression:
    """'...' around the text, quotes doubled (PostgreSQL's quote_literal, without its E'' form
    for backslashes)."""
    return exp.Concat(expressions=[
        exp.Literal.string("'"),
        exp.Anonymous(this="replace", expressions=[text, exp.Literal.string("'"), exp.Literal.string("''")]),
        exp.Literal.string("'")])


def _quoted_identifier(text: exp.Expression) -> exp.Expression:
    """The text as is when it is a lower-case name and not a keyword PostgreSQL quotes, else in
    double quotes (doubled inside), as quote_ident()."""
    quoted = exp.Concat(expressions=[
        exp.Literal.string('"'),
        exp.Anonymous(this="replace", expressions=[text.copy(), exp.Literal.string('"'), exp.Literal.string('""')]),
        exp.Literal.string('"')])
    keyword = exp.In(this=text.copy(), expressions=[exp.Literal.string(k) for k in sorted(QUOTED_KEYWORDS)])
    return exp.Case(ifs=[
        exp.If(this=exp.Is(this=text.copy(), expression=exp.Null()), true=exp.Null()),
        exp.If(this=keyword, true=quoted.copy()),
        exp.If(this=exp.RegexpLike(this=text.copy(), expression=exp.Literal.string("^[a-z_][a-z0-9_]*$")),
               true=text.copy())], default=quoted)


def _quote_functions(query: exp.Expression) -> None:
    """quote_literal(x), quote_nullable(x) and quote_ident(x), which neither engine has (the
    embedded engine's macro for quote_ident left keywords and `$` unquoted): x's text quoted as
    a literal, NULL for quote_literal's NULL and the text NULL for quote_nullable's; quoted as an
    identifier where PostgreSQL would. Mutates `query`."""
    for call in list(query.find_all(exp.Anonymous)):
        name = call.name.lower()
        if name not in ("quote_literal", "quote_nullable", "quote_ident") or len(call.expressions) != 1:
            continue
        arg = call.expressions[0]
        as_text = exp.Cast(this=arg.copy(), to=exp.DataType.build("TEXT"))
        quoted: exp.Expression
        if name == "quote_ident":
            quoted = _quoted_identifier(as_text)
        else:
            if_null = exp.Null() if name == "quote_literal" else exp.Literal.string("NULL")
            quoted = exp.Case(ifs=[exp.If(this=exp.Is(this=arg.copy(), expression=exp.Null()), true=if_null)],
                              default=_quoted_literal(as_text))
        quoted.meta[SQL_NAME] = name
        call.replace(quoted)


_TEXT_TARGETS = (exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR)
# What takes its operands as text (format's format string aside: its `this`, never an operand here).
_TEXT_JOINS = (exp.DPipe, exp.Concat, exp.ConcatWs, exp.Format)


def _text_operands(node: exp.Expr) -> list[exp.Expression]:
    """The operands of one of _TEXT_JOINS that it takes as text."""
    if isinstance(node, exp.DPipe):
        return [node.this, node.expression]
    return list(node.expressions)


def _float_as_text(operand: exp.Expr, digits: int) -> None:
    """A float operand becomes its cast to text, marked for the engines' float text."""
    _cast_in_place(operand, "TEXT")
    if isinstance(operand.parent, exp.Cast):
        operand.parent.meta["float_text"] = digits


def _float_text_digits(node: exp.Expr) -> int | None:
    """For a double (15) or a real (6) whose text PostgreSQL writes: the decimal exponent from
    which it writes it in %e form. None for anything else (or a type not certain here)."""
    t = certain_type(node)
    if t is None:
        return 15 if _number_kind(node) == "double" else None
    if not t.is_type(*_FLOATS):
        return None
    return 6 if t.is_type(exp.DataType.Type.FLOAT) else 15


# PostgreSQL's functions that give a double precision whatever numbers they take, and those
# that give one for integers and doubles (a numeric argument picks their numeric form, as does
# a second argument of round and trunc).
_ALWAYS_DOUBLE = (exp.Cbrt, exp.Pi, exp.Radians, exp.Degrees, exp.Sin, exp.Cos, exp.Tan, exp.Cot, exp.Asin,
                  exp.Acos, exp.Atan, exp.Atan2, exp.Sinh, exp.Cosh, exp.Tanh, exp.Rand)
_DOUBLE_OF_NUMBERS = (exp.Sqrt, exp.Exp, exp.Ln, exp.Log, exp.Pow, exp.Floor, exp.Ceil, exp.Round, exp.Trunc)


def _number_kind(node: exp.Expr) -> str | None:
    """"double" or "integer" where PostgreSQL's type of `node` is one of those and follows from
    its shape where sqlglot's type is not certain (certain_type): sqrt(4) and floor(x) of a double
    are doubles, abs() keeps its argument's type, and a call guarded by _math_domain_errors (a
    CASE whose other branches raise) is its call's. None otherwise."""
    node = node.unnest()
    t = certain_type(node)
    if t is not None:
        if t.is_type(*_FLOATS):
            return "double"
        return "integer" if t.this in exp.DataType.INTEGER_TYPES else None
    if isinstance(node, _ALWAYS_DOUBLE):
        return "double"
    if isinstance(node, _DOUBLE_OF_NUMBERS) and not node.args.get("decimals"):
        args = [node.this, *([node.expression] if node.args.get("expression") is not None else [])]
        return "double" if all(_number_kind(a) is not None for a in args if a is not None) else None
    if isinstance(node, exp.Abs) and node.this is not None:
        return _number_kind(node.this)
    default = node.args.get("default") if isinstance(node, exp.Case) else None
    if default is not None and all(isinstance(i.args.get("true"), exp.Anonymous)
                                   and i.args["true"].name.lower() == RAISE_FUNCTION.lower() for i in node.args["ifs"]):
        return _number_kind(default)
    return None


def _float_texts(query: exp.Expression, text: Callable[[exp.Expression, int], exp.Expression]) -> exp.Expression:
    """Casts of floats to text take `text` of the float: both engines write 7.0 as `7.0` and -0
    as `-0.0`, the embedded engine NaN as `nan`, Spark 1e20 as `1.0E20`; PostgreSQL writes `7`,
    `-0`, `NaN`, `1e+20`. The casts are marked (meta `float_text`) by _mark_from_types, or found
    here by their types (a view's typed expressions), with the floats a concatenation takes as
    text. The cast stays (to text, it keeps the column's name)."""
    for joined in list(query.find_all(*_TEXT_JOINS)):
        for operand in _text_operands(joined):
            if (digits := _float_text_digits(operand)) is not None:
                _float_as_text(operand, digits)
    for node in list(query.find_all(exp.Cast)):
        digits = node.meta.pop("float_text", None)
        if digits is None and node.to.is_type(*_TEXT_TARGETS) and node.this is not None:
            digits = _float_text_digits(node.this)
        if isinstance(digits, int) and node.this is not None:
            node.set("this", text(node.this.copy(), digits))
    return query


def _duckdb_float_text(query: exp.Expression) -> exp.Expression:
    return _float_texts(query, lambda x, digits: exp.Anonymous(
        this="sdb_float_text", expressions=[x, exp.Literal.number(digits)]))


# PostgreSQL's text of a double or real (float8out, float4out: the shortest digits that read back
# as the same value, in %e form when the decimal exponent is below -4 or at least 15 for a double,
# 6 for a real) from Spark's (Java's Double.toString: its digits, in its own layout). The same as
# the embedded engine's sdb_float_text (runtime/duckdb_functions.py). Lambdas over a one-element
# array bind the parts (array_max takes the element out: sqlglot writes element_at as a 0-based GET).
_SPARK_FLOAT_TEXT = sqlglot.parse_one(
    "CASE WHEN __x IS NULL THEN NULL ELSE array_max(transform(transform(transform(array(CAST(__x AS STRING)), "
    "s -> named_struct('s', s, 'sign', regexp_extract(s, '^(-?)', 1), 'i', regexp_extract(s, '^-?([0-9]+)', 1), "
    "'f', regexp_extract(s, '^-?[0-9]+[.]([0-9]+)', 1), "
    "'x', CAST(coalesce(nullif(regexp_extract(s, '[eE]([+-]?[0-9]+)$', 1), ''), '0') AS INT))), "
    "p -> named_struct('s', p.s, 'sign', p.sign, 'digits', trim(BOTH '0' FROM concat(p.i, p.f)), "
    "'e', length(p.i) - 1 - (length(concat(p.i, p.f)) - length(trim(LEADING '0' FROM concat(p.i, p.f)))) + p.x)), "
    "v -> CASE WHEN lower(v.s) = 'nan' THEN 'NaN' WHEN lower(v.s) IN ('inf', 'infinity') THEN 'Infinity' "
    "WHEN lower(v.s) IN ('-inf', '-infinity') THEN '-Infinity' WHEN v.digits = '' THEN concat(v.sign, '0') "
    "WHEN v.e < -4 OR v.e >= __digits THEN concat(v.sign, substr(v.digits, 1, 1), "
    "CASE WHEN length(v.digits) > 1 THEN concat('.', substr(v.digits, 2)) ELSE '' END, 'e', "
    "CASE WHEN v.e < 0 THEN '-' ELSE '+' END, CASE WHEN abs(v.e) < 10 THEN '0' ELSE '' END, CAST(abs(v.e) AS STRING)) "
    "WHEN v.e < 0 THEN concat(v.sign, '0.', repeat('0', -v.e - 1), v.digits) "
    "WHEN length(v.digits) <= v.e + 1 THEN concat(v.sign, v.digits, repeat('0', v.e + 1 - length(v.digits))) "
    "ELSE concat(v.sign, substr(v.digits, 1, v.e + 1), '.', substr(v.digits, v.e + 2)) END)) END",
    read="spark")


def _spark_float_text(query: exp.Expression) -> exp.Expression:
    def text(x: exp.Expression, digits: int) -> exp.Expression:
        return _SPARK_FLOAT_TEXT.copy().transform(
            lambda n: x.copy() if isinstance(n, exp.Column) and n.name == "__x"
            else exp.Literal.number(digits) if isinstance(n, exp.Column) and n.name == "__digits" else n)
    return _float_texts(query, text)


def _cast_in_place(node: exp.Expr, type_name: str) -> None:
    """`node` becomes CAST(node AS type_name), the node itself wrapped rather than copied, so a node
    marked inside another keeps its place in the query."""
    wrapper = exp.Cast(this=exp.Null(), to=exp.DataType.build(type_name))
    wrapper.meta[SQL_NAME] = postgres_column_name(cast(exp.Expression, node))  # the engines' cast, not the user's: no int4
    node.replace(wrapper)
    wrapper.set("this", node)


def _array_text_literals(query: exp.Expression) -> None:
    """`'{1,2,3}'::int[]`: PostgreSQL's array text, which neither engine reads, becomes an array of
    its elements' text cast to the array type, read by PostgreSQL's rules here (22P02 for a
    malformed literal, as PostgreSQL says it). One dimension; nested arrays are left as they are.
    Mutates `query`."""
    from streamdb import values

    for node in list(query.find_all(exp.Cast)):
        if not (isinstance(node.this, exp.Literal) and node.this.is_string and node.to.this is exp.DataType.Type.ARRAY):
            continue
        array_type = T.type_from_name(node.to.sql(dialect="postgres").lower())
        element = getattr(array_type, "element", None)
        if element is None:
            continue
        items = values.parse_array(node.this.name, element)
        if any(isinstance(item, list) for item in items):
            continue
        # PostgreSQL names the column after the element type (int4), as a cast to it.
        node.meta.setdefault(SQL_NAME, postgres_column_name(exp.Cast(this=exp.Null(), to=node.to.expressions[0])))
        node.set("this", exp.Array(expressions=[
            exp.Null() if item is None else exp.Literal.string(values.format_text(item, element)) for item in items]))


_INTEGER_ELEMENT = re.compile(r"-?[0-9]+")


def _json_path_operators(query: exp.Expression) -> None:
    """`x #> '{a,1}'` and `x #>> '{a,1}'` (PostgreSQL's path operators, which neither engine has)
    as the steps `x -> 'a' -> ...` they stand for, the last one `->>` for `#>>`. An integer
    element is an object's key or an array's position, whichever the value is: both steps,
    COALESCE'd (the other one is NULL; `-1` counts from the end). A path that is not a literal,
    is empty or has a NULL element is left as it is (refused). Mutates `query`."""
    from streamdb import values

    for node in list(query.find_all(exp.JSONBExtract, exp.JSONBExtractScalar)):
        path, value = node.expression, node.this
        if not (isinstance(path, exp.Literal) and path.is_string) or value is None:
            continue
        elements = values.parse_array(path.this, T.TEXT)
        if not elements or not all(isinstance(e, str) for e in elements):
            continue
        current: exp.Expression = value
        for i, element in enumerate(elements):
            step = exp.JSONExtractScalar if isinstance(node, exp.JSONBExtractScalar) and i == len(elements) - 1 \
                else exp.JSONExtract
            by_key = step(this=current, expression=exp.JSONPath(expressions=[
                exp.JSONPathRoot(), exp.JSONPathKey(this=element)]), only_json_types=True)
            if _INTEGER_ELEMENT.fullmatch(element):
                n = int(element)
                position = exp.JSONPath(expressions=[exp.JSONPathRoot(), exp.JSONPathSubscript(this=n)]) \
                    if n >= 0 else exp.Neg(this=exp.Literal.number(-n))
                by_position = step(this=current.copy(), expression=position, only_json_types=True)
                current = exp.Coalesce(this=by_key, expressions=[by_position])
            else:
                current = by_key
        current.meta[SQL_NAME] = "?column?"  # an operator's column, not coalesce's
        node.replace(current)


def _is_gcd_or_lcm(node: exp.Anonymous) -> bool:
    return node.name.lower() in ("gcd", "lcm") and len(node.expressions) == 2


def _postgresql_numbering(query: exp.Expression) -> None:
    """ntile() is an integer in PostgreSQL (a bigint in both engines), and width_bucket() (which
    neither engine has) PostgreSQL's equal-width histogram bucket: 0 below the range, count + 1
    at or above its end, 2201G for a count below 1 or an empty range. Mutates `query`."""
    for window in [w for w in query.find_all(exp.Window) if isinstance(w.this, exp.Ntile)]:
        if not isinstance(window.parent, exp.Cast):
            _cast_in_place(window, "INT")
    for node in list(query.find_all(exp.WidthBucket)):
        parts = {"__op": node.this, "__lo": node.args.get("min_value"), "__hi": node.args.get("max_value"),
                 "__n": node.args.get("num_buckets")}
        if any(v is None for v in parts.values()):
            continue
        bucket = _WIDTH_BUCKET.copy().transform(
            lambda n, parts=parts: parts[n.name].copy() if isinstance(n, exp.Column) and n.name in parts else n)
        for call in bucket.find_all(exp.Anonymous):
            if call.name == "__raise":
                sqlstate, message = call.expressions[0].name, call.expressions[1].name
                call.replace(raise_call(sqlstate, message))
        bucket.meta[SQL_NAME] = "width_bucket"
        node.replace(bucket)


_WIDTH_BUCKET = sqlglot.parse_one(
    "CAST(CASE WHEN __op IS NULL OR __lo IS NULL OR __hi IS NULL OR __n IS NULL THEN NULL "
    "WHEN __n <= 0 THEN __raise('2201G', 'count must be greater than zero') "
    "WHEN __lo = __hi THEN __raise('2201G', 'lower bound cannot equal upper bound') "
    "WHEN __lo < __hi THEN CASE WHEN __op < __lo THEN 0 WHEN __op >= __hi THEN __n + 1 "
    "ELSE CAST(FLOOR(CAST(__op - __lo AS DOUBLE) * __n / CAST(__hi - __lo AS DOUBLE)) AS INT) + 1 END "
    "ELSE CASE WHEN __op > __lo THEN 0 WHEN __op <= __hi THEN __n + 1 "
    "ELSE CAST(FLOOR(CAST(__lo - __op AS DOUBLE) * __n / CAST(__lo - __hi AS DOUBLE)) AS INT) + 1 END END AS INT)",
    read="postgres")


# PostgreSQL's boolean input: these words and every prefix of them that is not ambiguous, in any
# case, spaces around (both engines refused 'on' and 'off'; Spark also 'tr', 'of').
_TRUE_WORDS = ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1")
_FALSE_WORDS = ("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0")


def _boolean_from_text(text: exp.Expression) -> exp.Expression:
    """`text::boolean` as PostgreSQL reads it, the same on both engines; 22P02 otherwise."""
    word = exp.Lower(this=exp.Trim(this=text.copy()))

    def among(words: tuple[str, ...]) -> exp.Expression:
        return exp.In(this=word.copy(), expressions=[exp.Literal.string(w) for w in words])

    message = exp.Concat(expressions=[exp.Literal.string('22P02:invalid input syntax for type boolean: "'),
                                      text.copy(), exp.Literal.string('"')])
    return exp.Case(ifs=[exp.If(this=exp.Is(this=text.copy(), expression=exp.Null()), true=exp.Null()),
                         exp.If(this=among(_TRUE_WORDS), true=exp.true()),
                         exp.If(this=among(_FALSE_WORDS), true=exp.false())],
                    default=exp.Anonymous(this=RAISE_FUNCTION, expressions=[message]))


def _is_text(node: exp.Expression) -> bool:
    e = node.unnest()
    if isinstance(e, exp.Literal):
        return e.is_string
    return e.type is not None and e.type.is_type(*exp.DataType.TEXT_TYPES)


# PostgreSQL's name of each integer type (sqlglot's tinyint, which PostgreSQL lacks, is a smallint
# to it): for its errors, and for its integer input (surrounding spaces, a sign, digits), where
# the embedded engine also took '1.5' (as 2) and '1e3'.
INTEGER_NAMES = {exp.DataType.Type.TINYINT: "smallint", exp.DataType.Type.SMALLINT: "smallint",
                 exp.DataType.Type.INT: "integer", exp.DataType.Type.BIGINT: "bigint"}


def _duckdb_integer_text(query: exp.Expression) -> exp.Expression:
    """Text cast to an integer type must be an integer, as PostgreSQL reads it (22P02 otherwise):
    the embedded engine rounded '1.5' to 2. Spark refuses it already (CAST_INVALID_INPUT)."""
    for node in list(query.find_all(exp.Cast)):
        if node.meta.get("integer_text") and node.to.this in INTEGER_NAMES:
            checked = exp.Anonymous(this="sdb_integer_text",
                                    expressions=[node.this.copy(), exp.Literal.string(INTEGER_NAMES[node.to.this])])
            node.set("this", checked)
    return query


def _duckdb_float_rounds(query: exp.Expression) -> exp.Expression:
    """round(double) half to even in the embedded engine (its casts to integers already are), and
    percentile_cont of numbers in double precision."""
    for within in query.find_all(exp.WithinGroup):
        if within.meta.get("double_percentile"):
            key = within.expression.expressions[0]
            key.set("this", exp.Cast(this=key.this.copy(), to=exp.DataType.build("DOUBLE")))
    for node in list(query.find_all(exp.Round)):
        if node.meta.get("float_round"):
            even = exp.Anonymous(this="round_even", expressions=[node.this.copy(), exp.Literal.number(0)])
            if node is query:
                return even
            node.replace(even)
    return query


def spark_float_rounds(query: exp.Expression) -> exp.Expression:
    """round(double) and casts of doubles to integers half to even on Spark (rint), as PostgreSQL."""
    for node in list(query.find_all(exp.Round, exp.Cast)):
        if not _rounds_a_float(node):
            continue
        rint = exp.Anonymous(this="rint", expressions=[node.this.copy()])
        if not isinstance(node, exp.Round):
            node.set("this", rint)
        elif node is query:  # a projection rendered on its own
            query = rint
        else:
            node.replace(rint)
    return query


def _duckdb_interval_sums(query: exp.Expression) -> exp.Expression:
    """sum(interval), which the embedded engine lacks: the sums of the months, the days and the
    time, as PostgreSQL adds them. Mutates `query`, the embedded engine's own copy; Spark sums
    intervals itself."""
    for s in list(query.find_all(exp.Sum)):
        if not s.meta.get("interval_sum") or s.this is None:
            continue
        target = s.parent if isinstance(s.parent, exp.Window) else s
        parts: list[exp.Expression] = []
        for make, width, field in _INTERVAL_SUM_PARTS:
            total: exp.Expression = exp.Sum(this=duckdb_template(field, s.this))
            if isinstance(target, exp.Window):  # sum(x) OVER (...): each field summed over the window
                window = target.copy()
                window.set("this", total)
                total = window
            parts.append(exp.Anonymous(this=make, expressions=[exp.Cast(this=total, to=exp.DataType.build(width))]))
        target.replace(exp.Paren(this=exp.Add(this=exp.Add(this=parts[0], expression=parts[1]), expression=parts[2])))
    return query


def spark_sql_for(query: exp.Expression, inputs: tuple[RelationInput, ...]) -> str:
    """Spark SQL with Postgres semantics where types decide them: sqlglot keeps integer division
    integral (Spark's `/` is always fractional) once columns are qualified and typed."""
    try:
        return spark_semantics(spark_exact_avgs(_typed_copy(query, inputs))).sql(dialect="spark")
    except Exception:  # noqa: BLE001 - some shapes defeat qualification; the plain form still runs
        return spark_semantics(query.copy()).sql(dialect="spark")


def spark_semantics(query: exp.Expression) -> exp.Expression:
    """`query` (a copy it may change) rewritten where Spark's functions differ from Postgres'."""
    for rewrite in _SPARK_REWRITES:
        query = rewrite(query)
    return query


def _spark_distinct_on_order(query: exp.Expression) -> exp.Expression:
    """A top-level SELECT DISTINCT ON (...) ... ORDER BY keeps its order on Spark. sqlglot writes
    DISTINCT ON as a ROW_NUMBER() window that takes the ORDER BY and drops it from the result, so
    the rows came back unordered. One row per DISTINCT ON key: ordering by the leading ORDER BY
    items (those keys) orders them all, so the rows are ordered by those, by their output names
    (LIMIT and OFFSET apply after, as they do in PostgreSQL)."""
    if not isinstance(query, exp.Select):
        return query
    distinct = query.args.get("distinct")
    order = query.args.get("order")
    if distinct is None or not isinstance(distinct.args.get("on"), exp.Tuple) or order is None:
        return query
    keys = len(distinct.args["on"].expressions)
    names = {e.unalias(): e.alias_or_name for e in query.expressions}
    outputs = {e.alias_or_name for e in query.expressions}
    outer_order = []
    for item in order.expressions[:keys]:
        key = item.this
        name = names.get(key) or (key.name if isinstance(key, exp.Column) and not key.table
                                  and key.name in outputs else None)
        if not name:  # a key not in the output: no order to give by name
            return query
        outer_order.append(exp.Ordered(this=exp.column(name, quoted=True), desc=item.args.get("desc"),
                                       nulls_first=item.args.get("nulls_first")))
    limit, offset = query.args.get("limit"), query.args.get("offset")
    inner = query.copy()
    inner.set("limit", None)
    inner.set("offset", None)
    outer = exp.select("*").from_(inner.subquery("_distinct_on")).order_by(*outer_order)
    outer.set("limit", limit)
    outer.set("offset", offset)
    return outer


def _spark_groupings(query: exp.Expression) -> exp.Expression:
    """Postgres's grouping(a, b, ...) is a bit mask, `a` the highest bit: Spark's grouping_id(a,
    b, ...), whose grouping() takes one column (sqlglot kept the call: a syntax error in Spark).
    Postgres types it integer."""
    for node in list(query.find_all(exp.Grouping)):
        if len(node.expressions) > 1:
            node.replace(exp.Cast(this=exp.Anonymous(this="grouping_id", expressions=[e.copy() for e in node.expressions]),
                                  to=exp.DataType.build("INT")))
    return query


def _spark_percentiles(query: exp.Expression) -> exp.Expression:
    """percentile_cont / percentile_disc(p) WITHIN GROUP (ORDER BY v) as Postgres computes them.
    sqlglot writes both as Spark's PERCENTILE_APPROX, an approximation: 2 where Postgres gives 3
    for the median of 1, 2, 4, 5. Spark's percentile(v, p) interpolates exactly as percentile_cont
    does; percentile_disc is the first value whose position in the ordering reaches p * count."""
    for node in list(query.find_all(exp.WithinGroup)):
        fn, order = node.this, node.expression
        if not isinstance(fn, (exp.PercentileCont, exp.PercentileDisc)) or not isinstance(order, exp.Order):
            continue
        if len(order.expressions) != 1 or isinstance(node.parent, (exp.Window, exp.Filter)):
            continue
        key, fraction = order.expressions[0], fn.this
        value, descending = key.this, bool(key.args.get("desc"))
        if isinstance(fn, exp.PercentileCont):
            at = exp.Sub(this=exp.Literal.number(1), expression=fraction.copy()) if descending else fraction.copy()
            node.replace(exp.Anonymous(this="percentile", expressions=[value.copy(), at]))
            continue
        ordered: exp.Expression = exp.Anonymous(this="array_sort", expressions=[
            exp.Anonymous(this="collect_list", expressions=[value.copy()])])
        if descending:
            ordered = exp.Anonymous(this="reverse", expressions=[ordered])
        position = exp.Anonymous(this="greatest", expressions=[
            exp.Cast(this=exp.Anonymous(this="ceil", expressions=[
                exp.Mul(this=fraction.copy(), expression=exp.Count(this=value.copy()))]),
                to=exp.DataType.build("INT")),
            exp.Literal.number(1)])
        node.replace(exp.Anonymous(this="try_element_at", expressions=[ordered, position]))
    return query


_BOOLEAN_SHAPES = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.Exists, exp.Column)


def _spark_null_conditions(query: exp.Expression) -> exp.Expression:
    """`WHERE NULL`, `WHERE coalesce(NULL, NULL)` (and HAVING): PostgreSQL reads the NULL as a
    boolean; Spark refuses a condition of type void. A condition of another shape is typed
    boolean (anything else was refused while planning), which Spark drops where it already is."""
    for clause in list(query.find_all(exp.Where, exp.Having)):
        if not isinstance(clause.this.unnest(), _BOOLEAN_SHAPES):
            clause.set("this", exp.Cast(this=clause.this, to=exp.DataType.build("BOOLEAN")))
    return query


def _truth_only(node: exp.Expression) -> bool:
    """Whether only `node`'s truth matters: it is a condition of WHERE, HAVING, ON or a CASE's WHEN
    through AND and OR (NULL and false both fail there), or a NOT directly over it is such a
    condition through AND alone (Spark's null-aware anti join answers a NOT IN conjunct)."""
    n = node
    negated = False
    while True:
        p = n.parent
        if isinstance(p, exp.Paren) or isinstance(p, exp.And) or (isinstance(p, exp.Or) and not negated):
            n = p
            continue
        if isinstance(p, exp.Not) and n.unnest() is node and not negated:
            negated = True
            n = p
            continue
        if isinstance(p, (exp.Where, exp.Having)) or (isinstance(p, exp.Join) and p.args.get("on") is n):
            return True
        return isinstance(p, exp.If) and p.this is n and not negated


def _spark_in_values(query: exp.Expression) -> exp.Expression:
    """`x IN (SELECT y ...)` read as a value (in the select list, under NOT or OR): Spark plans it as
    an existence join, false where PostgreSQL's answer is NULL (x NULL and the subquery not empty,
    or no match and a NULL among its values). Spelled out with those cases: `CASE WHEN x IN (q)
    THEN true WHEN x IS NULL THEN (NULL if q has rows) WHEN q has a NULL THEN NULL ELSE false END`.
    Where only its truth counts (`_truth_only`) it stays as it is."""
    for node in list(query.find_all(exp.In)):
        sub = node.args.get("query")
        if sub is None or isinstance(node.this, exp.Tuple) or _truth_only(node):
            continue
        inner = sub.this if isinstance(sub, exp.Subquery) else sub
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1 or inner.args.get("limit") \
                or inner.args.get("offset") or inner.args.get("with"):
            continue
        value = inner.expressions[0].unalias()
        nulls = inner.copy()
        nulls.set("expressions", [exp.Literal.number(1)])
        nulls.set("order", None)
        nulls.set("distinct", None)
        null_value = exp.Is(this=exp.Paren(this=value.copy()), expression=exp.Null())
        if inner.args.get("group") or value.find(exp.AggFunc):
            having = inner.args.get("having")
            nulls.set("having", exp.Having(this=null_value if having is None else exp.and_(having.this.copy(), null_value)))
        else:
            nulls.where(null_value, copy=False)
        rows = inner.copy()
        rows.set("order", None)
        case = exp.Case(ifs=[
            exp.If(this=node.copy(), true=exp.true()),
            exp.If(this=exp.Is(this=node.this.copy(), expression=exp.Null()),
                   true=exp.Case(ifs=[exp.If(this=exp.Exists(this=rows), true=exp.Null())], default=exp.false())),
            exp.If(this=exp.Exists(this=nulls), true=exp.Null()),
        ], default=exp.false())
        node.replace(exp.Paren(this=case))
    return query


def _spark_timestamptz_text(query: exp.Expression) -> exp.Expression:
    """timestamptz::text ends with the zone's offset in PostgreSQL (`+00`: the session's time
    zone is UTC); Spark's cast to string leaves it out."""
    for node in list(query.find_all(exp.Cast)):
        source = node.this.type
        if not node.to.is_type(*exp.DataType.TEXT_TYPES) or source is None or \
                not source.is_type(exp.DataType.Type.TIMESTAMPTZ):
            continue
        text = exp.Concat(expressions=[node.copy(), exp.Literal.string("+00")])
        if node is query:
            return text
        node.replace(text)
    return query


def _spark_series_tables(query: exp.Expression) -> exp.Expression:
    """`FROM generate_series(a, b [, step]) AS t(x)` as a subquery exploding Spark's sequence
    (sqlglot wrote a call Spark cannot resolve), LATERAL where its arguments read an earlier FROM
    item's columns. PostgreSQL gives no rows where the step points away from the end (Spark's
    sequence would count down, or fail)."""
    for table in list(query.find_all(exp.Table)):
        series = table.this
        if not isinstance(series, (exp.ExplodingGenerateSeries, exp.GenerateSeries)):
            continue
        alias = table.args.get("alias")
        name = alias.name if alias is not None and alias.name else "generate_series"
        columns = alias.args.get("columns") if alias is not None else None
        column = columns[0].name if columns else name
        start, end, step = series.args.get("start"), series.args.get("end"), series.args.get("step")
        if start is None or end is None:
            continue
        numeric = all(isinstance(v, exp.Literal) and v.is_number for v in (start, end))
        args = [start.copy(), end.copy()] + ([step.copy()] if step is not None else [])
        values: exp.Expression = exp.Anonymous(this="sequence", expressions=args)
        if numeric or step is None:
            ahead = step.copy() if step is not None else exp.Literal.number(1)
            empty = exp.or_(exp.and_(exp.GT(this=ahead.copy(), expression=exp.Literal.number(0)),
                                     exp.GT(this=start.copy(), expression=end.copy())),
                            exp.and_(exp.LT(this=ahead.copy(), expression=exp.Literal.number(0)),
                                     exp.LT(this=start.copy(), expression=end.copy())))
            values = exp.If(this=empty, true=exp.Array(expressions=[]), false=values)
        select = exp.select(exp.alias_(exp.Explode(this=values), column, quoted=True))
        alias = exp.TableAlias(this=exp.to_identifier(name, quoted=True))
        if any(a.find(exp.Column) for a in args):  # over an earlier FROM item's columns: LATERAL, as Spark spells it
            table.replace(exp.Lateral(this=exp.Subquery(this=select), alias=alias))
        else:
            table.replace(exp.Subquery(this=select, alias=alias))
    return query


def similar_to_as_regex(query: exp.Expression) -> exp.Expression:
    """`x SIMILAR TO 'pattern'` (a literal) as a match of the regular expression PostgreSQL makes
    of it (similar_to_escape): the whole string matches, % and _ are .* and ., the other
    regular-expression operators are kept and `.` `^` `$` are literal. For both engines: Spark
    has no SIMILAR TO, and DuckDB's takes the pattern as a regular expression."""
    for node in list(query.find_all(exp.SimilarTo)):
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string) or node.args.get("escape"):
            continue
        regex = exp.RegexpLike(this=node.this.copy(), expression=exp.Literal.string(similar_to_regex(pattern.this)))
        if node is query:  # a condition rendered on its own
            return regex
        node.replace(regex)
    return query


def similar_to_regex(pattern: str) -> str:
    """PostgreSQL's translation of a SIMILAR TO pattern (escape character backslash)."""
    out = ["^(?:"]
    escaped = False
    in_class = False
    for ch in pattern:
        if escaped:
            out.append("\\" + ch if not ch.isalnum() else ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            out.append(ch)
            in_class = ch != "]"
        elif ch == "[":
            out.append(ch)
            in_class = True
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        elif ch in ".^$":
            out.append("\\" + ch)
        else:
            out.append(ch)
    out.append(")$")
    return "".join(out)


def _is_date(e: exp.Expression | None) -> bool:
    if isinstance(e, exp.Cast):
        return e.to.is_type(exp.DataType.Type.DATE)
    return e is not None and e.type is not None and e.type.is_type(exp.DataType.Type.DATE)


def _spark_date_differences(query: exp.Expression) -> exp.Expression:
    """date - date is a number of days in PostgreSQL; Spark makes it an interval."""
    for node in list(query.find_all(exp.Sub)):
        if _is_date(node.this) and _is_date(node.expression):
            days = exp.Anonymous(this="datediff", expressions=[node.this.copy(), node.expression.copy()])
            if node is query:
                return days
            node.replace(days)
    return query


def _spark_epochs(query: exp.Expression) -> exp.Expression:
    """Seconds since the epoch, fractions included as in Postgres: Spark has no EXTRACT(EPOCH)
    and its unix_timestamp() drops the fraction; unix_micros() keeps it. And back: Postgres'
    to_timestamp(seconds) keeps the fraction, which sqlglot's CAST(FROM_UNIXTIME(x) AS
    TIMESTAMP) drops, after formatting the time as text and parsing it again (6% of a
    window's routing in Nexmark q5); timestamp_seconds(x) keeps it, without text."""
    def seconds(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.UnixToTime) and not any(node.args.get(a) for a in exp.UnixToTime.arg_types if a != "this"):
            return exp.Anonymous(this="timestamp_seconds", expressions=[node.this])
        return node

    def fix(node: exp.Expression) -> exp.Expression:
        arg = None
        if isinstance(node, exp.TimeToUnix):
            arg = node.this
        elif isinstance(node, exp.Extract) and node.this.name.upper() == "EPOCH":
            arg = node.expression
        if arg is None:
            return node
        micros = exp.Cast(this=exp.Anonymous(this="unix_micros", expressions=[arg]),
                          to=exp.DataType.build("DOUBLE"))
        return exp.Paren(this=exp.Div(this=micros, expression=exp.Literal.number(1000000)))
    return query.transform(fix).transform(seconds)


def _spark_array_aggs(query: exp.Expression) -> exp.Expression:
    """array_agg as Postgres has it. Spark's collect_list drops NULLs and takes no ORDER BY
    (sqlglot writes `array_agg(x ORDER BY y)` as a plain collect_list), so each value is
    collected inside a struct (never NULL), with its ORDER BY keys, sorted by a comparator that
    follows each key's direction and NULLS FIRST/LAST, then unwrapped. array_agg(DISTINCT x)
    gives the distinct values ascending, NULL last, as Postgres' sort-based DISTINCT does."""
    for node in list(query.find_all(exp.ArrayAgg)):
        if node.args.get("nulls_excluded"):
            continue  # one of ours, or already Spark's
        arg, order, distinct = node.this, [], False
        if isinstance(arg, exp.Order):
            order, arg = list(arg.expressions), arg.this
        if isinstance(arg, exp.Distinct):
            if order or len(arg.expressions) != 1:
                continue  # array_agg(DISTINCT x ORDER BY x): left to Spark as it is
            distinct, arg = True, arg.expressions[0]
        fields = [exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=o.this.copy()) for i, o in enumerate(order)]
        fields.append(exp.PropertyEQ(this=exp.to_identifier("v"), expression=arg.copy()))
        collected: exp.Expr = exp.ArrayAgg(this=exp.Struct(expressions=fields), nulls_excluded=True)
        target: exp.Expression = node
        if isinstance(node.parent, exp.Filter) and node.arg_key == "this":  # FILTER applies to the collecting
            target = node.parent
            collected = exp.Filter(this=collected, expression=target.expression.copy())
        if isinstance(target.parent, exp.Window) and target.arg_key == "this":  # array_agg(x) OVER (...)
            window = target.parent.copy()
            window.set("this", collected)
            target, collected = target.parent, window
        if order:
            collected = _sorted_by(collected, order)
        unwrap = sqlglot.parse_one("transform(__x, __e -> __e.v)", read="spark").expression
        out: exp.Expression = exp.Transform(this=collected, expression=unwrap)
        if distinct:
            out = exp.ArraySort(this=exp.ArrayDistinct(this=out))  # ascending, NULL last
        target.replace(_null_if_empty(out, "size"))
    return query


_STRING_AGG_FOLD = ("CASE WHEN SIZE(__arr) = 0 THEN NULL ELSE AGGREGATE(SLICE(__arr, 2, SIZE(__arr)), "
                    "ELEMENT_AT(__arr, 1).v, (__acc, __e) -> CONCAT(__acc, COALESCE(__e.d, ''), __e.v)) END")


def _spark_string_aggs(query: exp.Expression) -> exp.Expression:
    """string_agg where Spark's listagg cannot take it: a delimiter that is not a constant (Postgres
    puts each row's delimiter before its value), and DISTINCT (listagg(DISTINCT ...) WITHIN GROUP
    fails in Spark's planner next to another DISTINCT aggregate). The values (NULLs skipped) are
    collected with their delimiters and ORDER BY keys, sorted, then folded; DISTINCT ones are
    sorted and joined (Postgres requires their ORDER BY to be the value itself)."""
    for node in list(query.find_all(exp.GroupConcat)):
        arg, order, distinct = node.this, [], False
        if isinstance(arg, exp.Order):
            order, arg = list(arg.expressions), arg.this
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                continue
            distinct, arg = True, arg.expressions[0]
        sep = node.args.get("separator")
        constant = sep is None or isinstance(sep, exp.Literal)
        if constant and not distinct:
            continue  # listagg(x, ',') WITHIN GROUP (ORDER BY ...) is right as it is
        target: exp.Expression = node
        where = None
        if isinstance(node.parent, exp.Filter) and node.arg_key == "this":
            target, where = node.parent, node.parent.expression
        if isinstance(target.parent, exp.Window):
            continue  # string_agg(...) OVER (...): left as it is
        if distinct:
            if not constant or any(o.this != arg for o in order):
                continue
            collected: exp.Expression = exp.ArrayAgg(this=arg.copy(), nulls_excluded=True)
            if where is not None:
                collected = exp.Filter(this=collected, expression=where.copy())
            values: exp.Expression = exp.ArraySort(this=exp.ArrayDistinct(this=collected))
            if order and order[0].args.get("desc"):
                values = exp.Anonymous(this="REVERSE", expressions=[values])
            joined = exp.Anonymous(this="ARRAY_JOIN", expressions=[values.copy(),
                                                                   (sep or exp.Literal.string(",")).copy()])
            empty = exp.EQ(this=exp.Anonymous(this="size", expressions=[values]), expression=exp.Literal.number(0))
            target.replace(exp.Case(ifs=[exp.If(this=empty, true=exp.Null())], default=joined))
            continue
        assert sep is not None
        fields = [exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=o.this.copy()) for i, o in enumerate(order)]
        fields += [exp.PropertyEQ(this=exp.to_identifier("d"), expression=exp.cast(sep.copy(), "STRING")),
                   exp.PropertyEQ(this=exp.to_identifier("v"), expression=exp.cast(arg.copy(), "STRING"))]
        collected = exp.ArrayAgg(this=exp.Struct(expressions=fields), nulls_excluded=True)
        if where is not None:
            collected = exp.Filter(this=collected, expression=where.copy())
        kept: exp.Expr = sqlglot.parse_one("filter(__x, __e -> __e.v IS NOT NULL)", read="spark")
        kept.set("this", collected)
        array: exp.Expr = kept
        if order:
            array = _sorted_by(array, order)
        target.replace(_fold(_STRING_AGG_FOLD, "spark", array))
    return query


def _fold(template: str, dialect: str, array: exp.Expr) -> exp.Expr:
    """`template` (SQL of `dialect`) with each `__arr` in it replaced by a copy of `array`."""
    folded = sqlglot.parse_one(template, read=dialect)
    for placeholder in list(folded.find_all(exp.Column)):
        if placeholder.name == "__arr" and not placeholder.table:
            placeholder.replace(array.copy())
    return folded


def _sorted_by(array: exp.Expr, order: list[exp.Ordered]) -> exp.Expr:
    """Spark's array_sort of structs whose fields k0, k1, ... are the ORDER BY keys of `order`."""
    compare = sqlglot.parse_one(f"array_sort(__x, {_comparator(order)})", read="spark").expression
    return exp.ArraySort(this=array, expression=compare)


def _null_if_empty(array: exp.Expression, size: str) -> exp.Expression:
    """array_agg over no rows (all filtered out, or none) is NULL in Postgres, not an empty array.
    Nothing else makes it empty: NULL values are kept."""
    empty = exp.EQ(this=exp.Anonymous(this=size, expressions=[array.copy()]), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=empty, true=exp.Null())], default=array)


_DUCKDB_STRING_AGG_FOLD = ("CASE WHEN LEN(__arr) = 0 THEN NULL ELSE __arr[1].v || ARRAY_TO_STRING("
                           "LIST_TRANSFORM(__arr[2:], __e -> COALESCE(__e.d, '') || __e.v), '') END")


def _duckdb_string_aggs(query: exp.Expression) -> exp.Expression:
    """string_agg with a delimiter that is not a constant, which the embedded engine refuses:
    Postgres puts each row's delimiter before its value (the first value has none). The values
    (NULLs skipped) are listed with their delimiters in the aggregate's order, then joined."""
    for node in list(query.find_all(exp.GroupConcat)):
        sep = node.args.get("separator")
        if sep is None or isinstance(sep, exp.Literal) or isinstance(node.parent, exp.Window):
            continue
        arg, order = node.this, None
        if isinstance(arg, exp.Order):
            order, arg = arg, arg.this
        if isinstance(arg, exp.Distinct):
            continue
        target: exp.Expression = node
        present: exp.Expr = exp.Not(this=exp.Is(this=arg.copy(), expression=exp.Null()))
        if isinstance(node.parent, exp.Filter) and node.arg_key == "this":
            target = node.parent
            present = exp.and_(exp.Paren(this=node.parent.expression.this.copy()), present)
        pair: exp.Expression = exp.Struct(expressions=[
            exp.PropertyEQ(this=exp.to_identifier("d"), expression=exp.cast(sep.copy(), "VARCHAR")),
            exp.PropertyEQ(this=exp.to_identifier("v"), expression=exp.cast(arg.copy(), "VARCHAR"))])
        if order is not None:
            pair = exp.Order(this=pair, expressions=[o.copy() for o in order.expressions])
        listed = exp.Filter(this=exp.ArrayAgg(this=pair), expression=exp.Where(this=present))
        target.replace(_fold(_DUCKDB_STRING_AGG_FOLD, "duckdb", exp.Paren(this=listed)))
    return query


def _sorted_distinct_array_aggs(query: exp.Expression) -> exp.Expression:
    """array_agg(DISTINCT x) ascending with NULL last, as Postgres (and spark_semantics) give it
    (the embedded engine gives its hash order), and NULL over no rows. Changes `query` (a copy)."""
    for node in list(query.find_all(exp.ArrayAgg)):
        target: exp.Expression = node.parent if isinstance(node.parent, exp.Filter) else node
        if isinstance(target.parent, exp.Window):
            target = target.parent
        out: exp.Expression = target.copy()
        if isinstance(node.this, exp.Distinct):
            out = exp.Anonymous(this="list_sort", expressions=[out, exp.Literal.string("ASC"),
                                                               exp.Literal.string("NULLS LAST")])
        target.replace(_null_if_empty(out, "len"))
    return query


def _comparator(order: list[exp.Ordered]) -> str:
    """A Spark array_sort comparator over structs (__l, __r) whose fields k0, k1, ... are the keys."""
    text = "0"
    for i in reversed(range(len(order))):
        o = order[i]
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        if nulls_first is None:
            nulls_first = desc  # Postgres: NULLs sort as larger than every value
        lt, gt = ("1", "-1") if desc else ("-1", "1")
        nf, nl = ("-1", "1") if nulls_first else ("1", "-1")
        x, y = f"__l.k{i}", f"__r.k{i}"
        text = (f"CASE WHEN NOT ({x} <=> {y}) THEN (CASE WHEN {x} IS NULL THEN {nf} WHEN {y} IS NULL THEN {nl} "
                f"WHEN {x} < {y} THEN {lt} ELSE {gt} END) ELSE {text} END")
    return f"(__l, __r) -> {text}"


# In order: each sees what the ones before it made (the numeric casts last, over everything).
def _spark_array_subscripts(query: exp.Expression) -> exp.Expression:
    """`a[i]` as Spark's `get(a, i - 1)`: PostgreSQL's subscripts start at 1 and give NULL out of
    bounds, Spark's start at 0 and raise (INVALID_ARRAY_INDEX). sqlglot shifts a literal
    subscript only, so `a[i]` read the next element. Slices (`a[1:2]`) are left as they are."""
    def subscript(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Bracket) or len(node.expressions) != 1 \
                or isinstance(node.expressions[0], exp.Slice) \
                or (node.this.type is not None and node.this.type.is_type(exp.DataType.Type.JSON,
                                                                          exp.DataType.Type.JSONB)):
            return node
        index = node.expressions[0]
        # sqlglot's parser already shifted a literal subscript to count from 0 (a[5] holds 4).
        literal = isinstance(index, exp.Literal) or (isinstance(index, exp.Neg) and isinstance(index.this, exp.Literal))
        shifted = index if literal else exp.Sub(this=exp.paren(index.copy(), copy=False),
                                                expression=exp.Literal.number(1))
        return exp.Anonymous(this="get", expressions=[node.this, shifted])

    return query.transform(subscript, copy=False)


def _spark_raises_and_logs(query: exp.Expression) -> exp.Expression:
    """sdb_raise is Spark's raise_error, sdb_seconds its EXTRACT(SECOND) (with the fraction);
    PostgreSQL's log(x) is base 10 (Spark's is natural), and log(10, x) on Spark is log10(x),
    which is exact for powers of 10."""
    def fix(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() == RAISE_FUNCTION:
            return exp.Anonymous(this="raise_error", expressions=node.expressions)
        if isinstance(node, exp.Anonymous) and node.name.lower() == SECONDS_FUNCTION:  # decimal(8, 6)
            return exp.Extract(this=exp.var("SECOND"), expression=node.expressions[0])
        if isinstance(node, exp.Log) and (node.expression is None or (
                isinstance(node.this, exp.Literal) and node.this.is_number and float(node.this.name) == 10)):
            return exp.Anonymous(this="log10", expressions=[node.this if node.expression is None else node.expression])
        return node

    return query.transform(fix)


# Euclid's algorithm in Spark SQL (which has no gcd): 93 steps are enough for any two bigints
# (consecutive Fibonacci numbers are the worst case).
_SPARK_GCD = sqlglot.parse_one(
    "aggregate(sequence(1, 93), named_struct('a', abs(CAST(__x AS BIGINT)), 'b', abs(CAST(__y AS BIGINT))), "
    "(acc, i) -> IF(acc.b = 0, acc, named_struct('a', acc.b, 'b', acc.a % acc.b)), acc -> acc.a)", read="spark")


def _spark_gcd_lcm(query: exp.Expression) -> exp.Expression:
    """gcd() and lcm() of integers, which Spark lacks."""
    def gcd(x: exp.Expression, y: exp.Expression) -> exp.Expression:
        return _SPARK_GCD.copy().transform(
            lambda n: (x if n.name == "__x" else y).copy() if isinstance(n, exp.Column) and n.name in ("__x", "__y") else n)

    def fix(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.Anonymous) and _is_gcd_or_lcm(node)):
            return node
        x, y = node.expressions
        if node.name.lower() == "gcd":
            return gcd(x, y)
        big_x, big_y = (exp.Cast(this=v.copy(), to=exp.DataType.build("BIGINT")) for v in (x, y))
        product = exp.Mul(this=exp.IntDiv(this=big_x, expression=gcd(x, y)), expression=big_y)
        return exp.Case(ifs=[exp.If(this=exp.or_(exp.EQ(this=x.copy(), expression=exp.Literal.number(0)),
                                                  exp.EQ(this=y.copy(), expression=exp.Literal.number(0))),
                                    true=exp.Literal.number(0))],
                        default=exp.Abs(this=product))

    return query.transform(fix)


def _spark_json_values(query: exp.Expression) -> exp.Expression:
    """`doc -> 'k'` and `doc ->> 'k'` (and `-> 1`) on Spark through its variant type. sqlglot wrote
    GET_JSON_OBJECT, which gives a string's contents without its quotes (`x` for {"k":"x"}: not
    JSON, so `->` could not be read back as json or jsonb: a view of it failed, an ad hoc query
    raised an internal error) and a JSON null as the text `null` (`->>` is SQL NULL for it).
    to_json(variant_get(from_json(doc, 'variant'), path, 'variant')) is `->`'s JSON text, and
    variant_get(..., 'string') `->>`'s (from_json, not parse_json: sqlglot drops parse_json when
    it reads the Spark SQL back, planner/fused.py). A chain `doc -> 'a' -> 1 ->> 'b'` is one
    path, read once; a position from the end (`-> -1`) is try_element_at's. A key with both
    quote characters stays as sqlglot writes it."""
    for node in reversed(list(query.find_all(exp.JSONExtract, exp.JSONExtractScalar))):  # innermost first
        scalar = isinstance(node, exp.JSONExtractScalar)
        if node.this is None:
            continue
        back = node.expression
        if isinstance(back, exp.Neg) and isinstance(back.this, exp.Literal) and back.this.is_int:
            # doc -> -1: from the end, which a variant path cannot say; try_element_at counts so
            # (and is NULL past the start, or for an object: not an array)
            element = exp.Anonymous(this="try_element_at", expressions=[
                exp.Anonymous(this="from_json", expressions=[node.this.copy(), exp.Literal.string("array<variant>")]),
                back.copy()])
            value: exp.Expression = exp.Anonymous(this="variant_get", expressions=[
                element, exp.Literal.string("$"), exp.Literal.string("string")]) if scalar \
                else exp.Anonymous(this="to_json", expressions=[element])
        else:
            path = _variant_path(back)
            if path is None:
                continue
            doc, inner = node.this, node.this.meta.get("variant_path")
            if inner is not None:  # doc -> 'a' -> 1: one path, $['a'][1]
                doc, path = inner[0], inner[1] + path[1:]
            value = exp.Anonymous(this="variant_get", expressions=[
                exp.Anonymous(this="from_json", expressions=[doc.copy(), exp.Literal.string("variant")]),
                exp.Literal.string(path), exp.Literal.string("string" if scalar else "variant")])
            if not scalar:
                value = exp.Anonymous(this="to_json", expressions=[value])
                value.meta["variant_path"] = (doc, path)
        if node is query:  # a view's expression on its own (runtime/spark/pipeline.render)
            query = value
        else:
            node.replace(value)
    return query


def _variant_path(path: exp.Expression | None) -> str | None:
    if not isinstance(path, exp.JSONPath) or not path.expressions \
            or not isinstance(path.expressions[0], exp.JSONPathRoot):
        return None
    out = "$"
    for part in path.expressions[1:]:
        if isinstance(part, exp.JSONPathKey) and isinstance(part.this, str):
            key = part.this
            if "'" not in key:
                out += f"['{key}']"
            elif '"' not in key:
                out += f'["{key}"]'
            else:
                return None
        elif isinstance(part, exp.JSONPathSubscript) and isinstance(part.this, int) and part.this >= 0:
            out += f"[{part.this}]"
        else:
            return None
    return out


_SPARK_REWRITES: tuple[Callable[[exp.Expression], exp.Expression], ...] = (
    _spark_json_values, _spark_float_text, _spark_gcd_lcm, _spark_raises_and_logs, _spark_array_subscripts, _spark_timestamptz_text, _spark_null_conditions, _spark_date_differences, similar_to_as_regex,
    _spark_series_tables, _spark_distinct_on_order, spark_float_rounds, _spark_epochs, _spark_array_aggs,
    _spark_string_aggs, _spark_percentiles, _spark_groupings, unconstrained_numeric_casts, _spark_in_values,
)
